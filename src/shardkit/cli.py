"""The ``shardkit`` command: a thin layer over the library's functions.

Every error ends in one place, :class:`_Group`: a user error prints one or two lines
naming the argument and the fix, with exit status 2 for a bad command line and 1
for a failure (a missing extra, a non-finite loss, a file that cannot be written).
No Python traceback appears unless ``shardkit --debug`` is given.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from shardkit._config import accelerator_present, use_cpu_devices
from shardkit._progress import busy, progress_console
from shardkit.train import Optimizer, Schedule, Strategy

_UNEXPECTED_LIMIT = 400


class _Failure(typer.TyperException):
    """A failure that is not a usage error: exit status 1, the cause's message."""

    exit_code = 1

    def __init__(self, cause: BaseException) -> None:
        self.expected = isinstance(cause, ImportError | OSError | FloatingPointError)
        text = " ".join(str(cause).split()) or type(cause).__name__
        if not self.expected:
            text = f"{type(cause).__name__}: {text}"
            if len(text) > _UNEXPECTED_LIMIT:
                text = text[: _UNEXPECTED_LIMIT - 3] + "..."
        super().__init__(text)


def _report(e: typer.TyperException) -> None:
    """Print ``e`` as one or two lines on stderr (typer's boxes would take five)."""
    ctx = getattr(e, "ctx", None)
    typer.echo(f"Error: {e.format_message()}", err=True)
    if isinstance(e, _Failure):
        if not e.expected:
            typer.echo("Rerun as 'shardkit --debug ...' to see the traceback.", err=True)
    elif ctx is not None:
        typer.echo(f"Try '{ctx.command_path} --help' for help.", err=True)


class _Group(TyperGroup):
    """The ``shardkit`` command group, with the CLI's one error path."""

    def invoke(self, ctx: Any) -> Any:  # click's Context, which typer vendors privately
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except typer.TyperException as e:
            if ctx.params.get("debug") and e.__cause__ is not None:
                traceback.print_exception(e.__cause__)
            raise
        except Exception as e:
            if ctx.params.get("debug") or isinstance(e, BrokenPipeError):
                raise  # typer ends a closed pipe (`shardkit tour | head`) quietly
            raise _Failure(e) from e

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except typer.TyperException as e:
            if type(e).__name__ != "NoArgsIsHelpError":  # its help is already printed
                _report(e)
            sys.exit(getattr(e, "exit_code", 1))
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


class _BadValue(typer.BadParameter):
    """A usage error (exit status 2) whose message already names the argument."""

    def format_message(self) -> str:
        return super().format_message() if self.param_hint else self.message


@contextlib.contextmanager
def _usage(param: str | None = None) -> Iterator[None]:
    """Turn a ``ValueError``/``TypeError`` raised inside into a usage error.

    Give ``param`` (``"--spec"``) when the library's message does not name the option.
    """
    try:
        yield
    except (ValueError, TypeError) as e:
        hint = None if param is None else f"'{param}'"
        raise _BadValue(" ".join(str(e).split()), param_hint=hint) from e


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    help="shardkit: sharded JAX arrays made visible, measurable and fast.",
    pretty_exceptions_enable=False,
)
# Piped output (logs, CI) gets room for the wide benchmark and report tables.
_console = Console() if sys.stdout.isatty() else Console(width=160)


def _print_version(value: bool) -> None:
    if value:
        from shardkit import __version__

        typer.echo(f"shardkit {__version__}")
        raise typer.Exit()


@app.callback()
def _setup(
    devices: Annotated[
        int,
        typer.Option(help="CPU devices to simulate when no accelerator is present (>= 1)."),
    ] = 8,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the Python traceback of an error.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    if not accelerator_present():
        with _usage("--devices"):
            use_cpu_devices(devices)


@app.command()
def tour(
    only: Annotated[
        str | None, typer.Option(help="Regular expression selecting scenarios by key or title.")
    ] = None,
    pictures: Annotated[bool, typer.Option(help="Print sharding pictures and notes.")] = True,
    list_: Annotated[
        bool, typer.Option("--list", help="List the scenarios' keys and titles; run nothing.")
    ] = False,
) -> None:
    """Run every seed scenario on the devices, each checked against NumPy."""
    from shardkit.examples import list_tour, run_tour

    if list_:
        with _usage("--only"):
            list_tour(_console, only=only)
        return
    with _usage("--only"):  # run_tour checks it before anything runs
        outcomes = run_tour(_console, only=only, pictures=pictures)
    if not all(o.ok for o in outcomes):
        raise typer.Exit(1)


def _array_shape(text: str) -> tuple[int, ...]:
    """``--shape``'s array dimensions, joined by ``,`` or ``x``; each at least 1."""
    try:
        dims = tuple(int(part) for part in text.lower().replace("x", ",").split(","))
    except ValueError:
        raise _BadValue(
            f"{text!r} is not an array shape; write the array's sizes joined by ',' or 'x', "
            "e.g. 16,16 or 8x8x8",
            param_hint="'--shape'",
        ) from None
    bad = [(i, d) for i, d in enumerate(dims) if d < 1]
    if bad:
        axis, size = bad[0]
        raise _BadValue(
            f"{text!r}: array dimension {axis} has size {size}, but every dimension of the "
            "array needs a size of at least 1 (an empty array has no shards to draw); "
            "e.g. --shape 16,16",
            param_hint="'--shape'",
        )
    return dims


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
    import jax.numpy as jnp

    from shardkit._preflight import check_output_file
    from shardkit.layout import describe, sharding
    from shardkit.layout import mesh as make_mesh
    from shardkit.layout.internal import check_placement
    from shardkit.show import show as draw

    for option, path in (("--svg", svg), ("--html", html)):
        if path is not None:
            with _usage(option):
                check_output_file(path, what=f"shardkit show {option}")
    dims = _array_shape(shape)
    with _usage("--mesh/--names"):
        target_mesh = make_mesh(mesh, names)
    with _usage("--spec"):
        target = sharding(target_mesh, spec)
        check_placement("shardkit show", dims, target.spec, target_mesh)
    try:
        element = jnp.dtype(dtype)
    except TypeError:
        raise _BadValue(
            f"{dtype!r} is not a dtype name; write e.g. float32, bfloat16, int32 or complex64",
            param_hint="'--dtype'",
        ) from None
    struct = jax.ShapeDtypeStruct(dims, element, sharding=target)
    picked = None
    if axes is not None:
        try:
            first, second = (int(a) for a in axes.split(","))
        except ValueError:
            raise _BadValue(
                f"{axes!r} is not two array axes; write e.g. 0,2", param_hint="'--axes'"
            ) from None
        picked = (first, second)
    with _usage("--axes"):
        view = draw(struct, axes=picked)
    _console.print(describe(struct))
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
        str | None,
        typer.Option(
            help="Cost-model preset: shared-memory, pcie, nvlink, ici, ethernet "
            "(default: the one `shardkit bench calibrate` saved for these devices, "
            "else shared-memory)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Report every collective, the memory and the predicted time of a compiled function."""
    from shardkit._inspect_cli import example as seed_example
    from shardkit._inspect_cli import inspect_target

    if (target is None) == (example is None):
        raise _BadValue(
            "give exactly one of TARGET (MODULE:FUNC, e.g. mymod:step or path/to/file.py:step) "
            "or --example NAME (fft, solve, matmul or mlp)"
        )
    # A spinner on a terminal only: piped output (--json) stays exactly the report.
    spinner = busy(_console if _console.is_terminal else None, "compiling")
    if example is not None:
        with _usage(), spinner:
            report = seed_example(example, interconnect=interconnect)
    else:
        assert target is not None
        with _usage(), spinner:
            report = inspect_target(
                target, mesh=mesh, names=names, args=arg or (), interconnect=interconnect
            )
    if as_json:
        typer.echo(report.to_json())
    else:
        _console.print(report)


@app.command()
def bench(
    suites: Annotated[
        list[str],
        typer.Argument(
            help="Suites to run (collectives, matmul, fft, ...) or 'all'; or 'calibrate' "
            "alone: measure the collectives and a matmul, fit the cost model and save it "
            "as these devices' preset (used by inspect, comms and matmul's auto); or "
            "'soak' alone: call fftn, solve, qr and matmul over 50 meshes and shapes and "
            "measure resident memory and the program cache "
            "($SHARDKIT_PROGRAM_CACHE_SIZE sets its bound)."
        ),
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
    calls: Annotated[
        int | None,
        typer.Option(help="soak only: calls to make (default 2000; 100 with --quick)."),
    ] = None,
) -> None:
    """Time suites side by side against their baselines and write JSON, Markdown and HTML."""
    from shardkit.bench import run_bench

    if "calibrate" in suites:
        _calibrate(suites, sizes=sizes, meshes=meshes, repeat=repeat, quick=quick)
        return
    if "soak" in suites:
        _soak(suites, sizes=sizes, meshes=meshes, repeat=repeat, calls=calls, quick=quick, out=out)
        return
    if calls is not None:
        raise _BadValue("only the soak makes a number of calls", param_hint="'--calls'")

    with _usage(), progress_console(_console):
        run_bench(
            suites[0] if suites == ["all"] else suites,
            sizes=None if sizes is None else sizes.split(","),
            meshes=meshes,
            repeat=repeat,
            out=out,
            quick=quick,
            progress=True,
        )
    _console.print(f"reports written to {out}/ (results.json, report.md, report.html)")


def _calibrate(
    suites: list[str], *, sizes: str | None, meshes: str | None, repeat: int | None, quick: bool
) -> None:
    from shardkit.bench import calibrate, parse_size

    if suites != ["calibrate"]:
        raise _BadValue(
            f"calibrate runs alone (it saves a preset the other suites then use); got "
            f"SUITES={' '.join(suites)}: run 'shardkit bench calibrate' first, then the others"
        )
    if meshes is not None:
        raise _BadValue(
            "calibrate measures every group size the devices allow; --meshes does not apply",
            param_hint="'--meshes'",
        )
    with _usage("--sizes"):
        size_list = None if sizes is None else [parse_size(v) for v in sizes.split(",")]
    with _usage(), progress_console(_console):
        result = calibrate(quick=quick, sizes=size_list, repeat=repeat, progress=True)
    _console.print(result)
    _console.print(
        f"saved preset {result.interconnect.label} to {result.path}; shardkit inspect, "
        "comms and matmul(algorithm='auto') use it on these devices unless given another"
    )


def _soak(
    suites: list[str],
    *,
    sizes: str | None,
    meshes: str | None,
    repeat: int | None,
    calls: int | None,
    quick: bool,
    out: Path,
) -> None:
    from shardkit.bench import soak

    if suites != ["soak"]:
        raise _BadValue(
            f"soak runs alone (it measures this process's memory); got SUITES={' '.join(suites)}"
        )
    for option, value in (("--sizes", sizes), ("--meshes", meshes), ("--repeat", repeat)):
        if value is not None:
            raise _BadValue(
                "the soak's meshes and sizes are fixed (50 configurations); use --calls",
                param_hint=f"'{option}'",
            )

    def progress(s: Any) -> None:
        if s.call % 50 == 0:
            c = s.cache
            _console.print(
                f"{s.call} calls: RSS {s.rss_bytes / 2**20:.0f} MiB, cache {c.size}/{c.maxsize} "
                f"({c.hits} hits, {c.misses} misses, {c.evictions} evictions)"
            )

    with _usage("--calls"):
        result = soak(calls if calls is not None else 100 if quick else 2000, progress=progress)
    _console.print(result)
    path = result.write(out)
    if not result.passed:
        _console.print(f"the soak missed its targets (details in {path})")
        raise typer.Exit(1)
    _console.print(f"bounded: cache within its bound, RSS within target ({path})")


@app.command()
def train(
    strategy: Annotated[Strategy, typer.Option(help="The parallel strategy.")] = "dp_tp",
    mesh: Annotated[str, typer.Option(help="Mesh shape, e.g. 4x2 (data x model).")] = "4x2",
    steps: Annotated[int, typer.Option(help="Training steps.")] = 30,
    sizes: Annotated[str, typer.Option(help="MLP layer sizes.")] = "784,1024,1024,10",
    batch_size: Annotated[int, typer.Option(help="Global batch size.")] = 256,
    optimizer: Annotated[
        Optimizer, typer.Option(help="sgd, adam (optax) or muon (shardkit.train.muon).")
    ] = "sgd",
    learning_rate: Annotated[float, typer.Option(help="Step size.")] = 1e-3,
    plot: Annotated[
        Path | None, typer.Option(help="Write the loss curve PNG here (its folder must exist).")
    ] = None,
    keep_going: Annotated[
        bool,
        typer.Option("--keep-going", help="Run every step, however many are skipped."),
    ] = False,
    max_skipped: Annotated[
        int,
        typer.Option(help="Stop after this many skipped (NaN/inf) steps in a row."),
    ] = 5,
    microbatches: Annotated[
        int | None,
        typer.Option(help="pp/dp_pp: microbatches per data shard (default: the stages)."),
    ] = None,
    schedule: Annotated[
        Schedule | None, typer.Option(help="pp/dp_pp: the pipeline schedule (default 1f1b).")
    ] = None,
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(
            help="Save checkpoints here; a rerun with the same folder resumes from the "
            "newest complete one."
        ),
    ] = None,
    checkpoint_every: Annotated[
        int, typer.Option(help="Save a checkpoint every this many steps (and after the last).")
    ] = 10,
    metrics: Annotated[
        Path | None,
        typer.Option(help='Write one JSON line per step here: {"step": i, "loss": x}.'),
    ] = None,
) -> None:
    """Train the seeds' MLP with a parallel strategy; loss, steps/s and bytes per step.

    A step whose loss or gradients are NaN or inf is skipped (not applied); after
    --max-skipped such steps in a row the run stops with exit status 1, unless
    --keep-going. With --checkpoint-dir, SIGTERM or SIGINT finishes the current step,
    saves it and exits with status 143 or 130; run the same command again to resume
    (also under `shardkit launch`, where every rank stops after the same step).
    """
    from shardkit.distributed import initialize
    from shardkit.train import run_training

    try:
        layer_sizes = tuple(int(s) for s in sizes.split(","))
    except ValueError:
        raise _BadValue(
            f"{sizes!r} is not a list of layer widths; write e.g. 784,1024,10", param_hint="--sizes"
        ) from None
    with _usage():  # the launcher's variables, if any: one job of all ranks
        initialize()
    with _usage(), progress_console(_console):  # run_training's messages name the option
        run = run_training(
            progress=True,
            strategy=strategy,
            mesh=mesh,
            steps=steps,
            sizes=layer_sizes,
            batch_size=batch_size,
            optimizer=optimizer,
            learning_rate=learning_rate,
            plot=plot,
            keep_going=keep_going,
            max_skipped=max_skipped,
            microbatches=microbatches,
            schedule=schedule,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=checkpoint_every,
            metrics=metrics,
        )
    if run.stopped_by is not None:
        raise typer.Exit(128 + run.stopped_by.value)


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
