"""The ``shardkit`` command: a thin layer over the library's functions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from shardkit._config import accelerator_present, use_cpu_devices

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="shardkit: sharded JAX arrays made visible, measurable and fast.",
    pretty_exceptions_enable=False,
)
# Piped output (logs, CI) gets room for the wide benchmark and report tables.
_console = Console() if sys.stdout.isatty() else Console(width=160)


@app.callback()
def _setup(
    devices: Annotated[
        int,
        typer.Option(help="CPU devices to simulate when no accelerator is present."),
    ] = 8,
) -> None:
    if not accelerator_present():
        use_cpu_devices(devices)


@app.command()
def tour(
    only: Annotated[
        str | None, typer.Option(help="Regular expression selecting scenarios by key or title.")
    ] = None,
    pictures: Annotated[bool, typer.Option(help="Print sharding pictures and notes.")] = True,
) -> None:
    """Run every seed scenario on the devices, each checked against NumPy."""
    from shardkit.examples.tour import run_tour

    try:
        outcomes = run_tour(_console, only=only, pictures=pictures)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--only") from None
    if not all(o.ok for o in outcomes):
        raise typer.Exit(1)


@app.command()
def show(
    shape: Annotated[str, typer.Option(help="Global array shape, e.g. 16,16 or 8x8x8.")],
    mesh: Annotated[str, typer.Option(help="Mesh shape, e.g. 2x4.")] = "8",
    names: Annotated[str | None, typer.Option(help="Mesh axis names, e.g. x,y.")] = None,
    spec: Annotated[str, typer.Option(help="Partition spec, e.g. 'x,None' or '(x,y)'.")] = "",
    dtype: Annotated[str, typer.Option(help="Element type.")] = "float32",
    axes: Annotated[str | None, typer.Option(help="Two array axes to draw, e.g. 0,2.")] = None,
    svg: Annotated[Path | None, typer.Option(help="Also write the picture as SVG here.")] = None,
    html: Annotated[Path | None, typer.Option(help="Also write the picture as HTML here.")] = None,
) -> None:
    """Draw how an array of SHAPE would be split over MESH by SPEC."""
    import jax
    import numpy as np

    from shardkit.layout import describe, parse_mesh_shape, sharding
    from shardkit.layout import mesh as make_mesh
    from shardkit.show import show as draw

    try:
        dims = parse_mesh_shape(shape)
        target = sharding(make_mesh(mesh, names), spec)
        struct = jax.ShapeDtypeStruct(dims, np.dtype(dtype), sharding=target)
        picked = None
        if axes is not None:
            first, second = (int(a) for a in axes.split(","))
            picked = (first, second)
        view = draw(struct, axes=picked)
        _console.print(describe(struct))
    except (ValueError, TypeError) as e:
        raise typer.BadParameter(str(e)) from None
    _console.print(view)
    if svg is not None:
        svg.write_text(view.to_svg())
    if html is not None:
        html.write_text(view._repr_html_())


@app.command()
def inspect(
    target: Annotated[
        str | None, typer.Argument(help="MODULE:FUNC or FILE.py:FUNC to compile and report.")
    ] = None,
    mesh: Annotated[str, typer.Option(help="Mesh shape, e.g. 2x4.")] = "8",
    names: Annotated[str | None, typer.Option(help="Mesh axis names, e.g. x,y.")] = None,
    arg: Annotated[
        list[str] | None,
        typer.Option(help="One per positional argument, e.g. 'float32[1024,1024]@x,y'."),
    ] = None,
    example: Annotated[
        str | None, typer.Option(help="A seed program instead: fft, solve, matmul or mlp.")
    ] = None,
    interconnect: Annotated[
        str, typer.Option(help="Cost-model preset: shared-memory, pcie, nvlink, ici, ethernet.")
    ] = "shared-memory",
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Report every collective, the memory and the predicted time of a compiled function."""
    from shardkit.inspect.examples import example as seed_example
    from shardkit.inspect.examples import inspect_target

    if (target is None) == (example is None):
        raise typer.BadParameter("give either TARGET (MODULE:FUNC) or --example NAME, not both")
    try:
        if example is not None:
            report = seed_example(example, interconnect=interconnect)
        else:
            assert target is not None
            report = inspect_target(
                target, mesh=mesh, names=names, args=arg or (), interconnect=interconnect
            )
    except (ValueError, TypeError) as e:
        raise typer.BadParameter(str(e)) from None
    if as_json:
        typer.echo(report.to_json())
    else:
        _console.print(report)


@app.command()
def bench(
    suites: Annotated[
        list[str], typer.Argument(help="Suites to run (collectives, matmul, fft, ...) or 'all'.")
    ],
    sizes: Annotated[
        str | None, typer.Option(help="Comma-separated sizes, e.g. 1KiB,1MiB or 2048,4096.")
    ] = None,
    meshes: Annotated[str | None, typer.Option(help="Comma-separated meshes, e.g. 8,2x4.")] = None,
    repeat: Annotated[
        int | None, typer.Option(help="Timed rounds per case (default adaptive).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Directory for results.json and the reports.")] = Path(
        "bench-results"
    ),
    quick: Annotated[bool, typer.Option(help="Small sizes, few rounds: a smoke run.")] = False,
) -> None:
    """Time suites side by side against their baselines and write JSON, Markdown and HTML."""
    from shardkit.bench import run_bench

    try:
        run_bench(
            suites[0] if suites == ["all"] else suites,
            sizes=None if sizes is None else sizes.split(","),
            meshes=meshes,
            repeat=repeat,
            out=out,
            quick=quick,
            console=_console,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    _console.print(f"reports written to {out}/ (results.json, report.md, report.html)")


@app.command()
def train(
    strategy: Annotated[str, typer.Option(help="single, dp, fsdp, tp or dp_tp.")] = "dp_tp",
    mesh: Annotated[str, typer.Option(help="Mesh shape, e.g. 4x2 (data x model).")] = "4x2",
    steps: Annotated[int, typer.Option(help="Training steps.")] = 30,
    sizes: Annotated[str, typer.Option(help="MLP layer sizes.")] = "784,1024,1024,10",
    batch_size: Annotated[int, typer.Option(help="Global batch size.")] = 256,
    optimizer: Annotated[str, typer.Option(help="sgd or adam.")] = "sgd",
    learning_rate: Annotated[float, typer.Option(help="Step size.")] = 1e-3,
    plot: Annotated[Path | None, typer.Option(help="Write the loss curve PNG here.")] = None,
) -> None:
    """Train the seeds' MLP with a parallel strategy; loss, steps/s and bytes per step."""
    from shardkit.train import run_training

    try:
        layer_sizes = tuple(int(s) for s in sizes.split(","))
        run_training(
            _console,
            strategy=strategy,
            mesh=mesh,
            steps=steps,
            sizes=layer_sizes,
            batch_size=batch_size,
            optimizer=optimizer,
            learning_rate=learning_rate,
            plot=plot,
        )
    except (ValueError, TypeError, NotImplementedError) as e:
        raise typer.BadParameter(str(e)) from None


@app.command()
def devices() -> None:
    """List the devices JAX sees (simulated CPU devices unless an accelerator exists)."""
    import jax

    simulated = " (simulated)" if not accelerator_present() else ""
    _console.print(
        f"{jax.device_count()} {jax.devices()[0].platform} device(s){simulated}, "
        f"process {jax.process_index()} of {jax.process_count()}"
    )
    for d in jax.devices():
        _console.print(f"  {d.id:>3}  {d.device_kind}  process {d.process_index}")


@app.command(context_settings={"allow_interspersed_args": False})
def launch(
    command: Annotated[list[str], typer.Argument(help="The command to run in every process.")],
    num_processes: Annotated[int, typer.Option("-n", "--num-processes", help="Processes.")] = 2,
    devices_per_process: Annotated[int, typer.Option(help="CPU devices per process.")] = 4,
    timeout: Annotated[
        float | None,
        typer.Option(help="End every process after this many seconds (exit status 124)."),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="Show every line the processes write: gloo's chatter, and the abort "
            "reports of ranks that only aborted because a peer died.",
        ),
    ] = False,
) -> None:
    """Run COMMAND in N local processes joined by JAX's distributed runtime.

    `python` as COMMAND's first word is the interpreter shardkit runs in.
    """
    from shardkit.distributed import launch as run_launch

    try:
        code = run_launch(
            command,
            num_processes=num_processes,
            devices_per_process=devices_per_process,
            timeout_seconds=timeout,
            verbose=verbose,
        )
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except (ValueError, TypeError) as e:
        raise typer.BadParameter(str(e)) from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        # A shell's statuses: 127 for a missing program, 126 for one it cannot run.
        typer.echo(f"shardkit launch: {str(e).removeprefix('launch(): ')}", err=True)
        raise typer.Exit(127 if isinstance(e, FileNotFoundError) else 126) from None
    raise typer.Exit(code)


def main() -> None:
    """Console-script entry point."""
    app()
