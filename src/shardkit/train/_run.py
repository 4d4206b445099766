"""``run_training``: what ``shardkit train`` does, with a rich progress bar and a loss plot."""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import jax
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shardkit._preflight import check_output_file, require
from shardkit._progress import busy
from shardkit.inspect import CommReport, comms
from shardkit.layout import format_bytes, parse_mesh_shape
from shardkit.layout import mesh as make_mesh
from shardkit.layout.internal import is_int
from shardkit.train._models import MLP
from shardkit.train._step import make_train_step
from shardkit.train._strategies import STRATEGIES, Strategy, strategy_layout

__all__ = ["TrainRun", "run_training"]

Optimizer = Literal["sgd", "adam", "muon"]
"""The optimizers ``shardkit train`` offers (optax's ``sgd`` and ``adam``, :func:`~shardkit.train.muon`)."""

OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)


@dataclass(frozen=True)
class TrainRun:
    """What one ``shardkit train`` run measured.

    Attributes:
      strategy: the strategy.
      mesh: the mesh shape, e.g. ``"4x2"``.
      sizes: the MLP's layer sizes.
      batch_size: examples per step.
      losses: the loss of every step.
      steps_per_s: steps per second after the first (compiled) step.
      compile_s: seconds to build the state and compile the step.
      bytes_per_step: bytes one device sends per step (``shardkit.comms``).
      peak_bytes: peak per-device memory of the step, or None when unknown.
      report: the step's full communication report.
      plot: the loss-curve PNG, or None.
    """

    strategy: str
    mesh: str
    sizes: tuple[int, ...]
    batch_size: int
    losses: tuple[float, ...]
    steps_per_s: float
    compile_s: float
    bytes_per_step: int
    peak_bytes: int | None
    report: CommReport
    plot: Path | None


def _mesh(strategy: str, shape: str) -> Any:
    dims = parse_mesh_shape(shape)
    if len(dims) == 2:
        names = "data,model"
    elif len(dims) == 1:
        names = "model" if strategy == "tp" else "data"
    else:
        names = ",".join(f"a{i}" for i in range(len(dims)))
    return make_mesh(dims, names, axis_types="auto")


def _optimizer(name: str, learning_rate: float) -> Any:
    import optax

    if name not in OPTIMIZERS:
        raise ValueError(f"shardkit train: optimizer={name!r}; choose one of {list(OPTIMIZERS)}")
    if name == "muon":
        from shardkit.train._muon import muon

        return muon(learning_rate)
    return optax.sgd(learning_rate) if name == "sgd" else optax.adam(learning_rate)


def plot_losses(losses: np.ndarray, path: str | Path, /, *, title: str) -> Path:
    """Write a loss-curve PNG (needs matplotlib, the ``bench`` extra).

    Uses matplotlib's object-oriented API, so no global backend is changed.
    """
    figure = require("matplotlib.figure", extra="bench", what="shardkit train --plot")
    fig = figure.Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    ax.plot(np.arange(1, len(losses) + 1), losses, marker="o", markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    out = Path(path)
    fig.savefig(out, format="png", dpi=100)
    return out


def _check_options(
    strategy: str,
    steps: int,
    sizes: tuple[int, ...],
    batch_size: int,
    learning_rate: float,
    max_skipped: int,
) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"shardkit train: strategy={strategy!r}; choose one of {list(STRATEGIES)}")
    if not is_int(steps) or steps < 1:
        raise ValueError(f"shardkit train: steps={steps!r} must be at least 1 (--steps)")
    if not is_int(batch_size) or batch_size < 1:
        raise ValueError(
            f"shardkit train: batch_size={batch_size!r} must be a positive integer "
            "(--batch-size), e.g. 256"
        )
    if len(sizes) < 2 or not all(is_int(s) and s >= 1 for s in sizes):
        raise ValueError(
            f"shardkit train: sizes={sizes!r} must be at least two positive layer widths "
            "(--sizes), e.g. 784,1024,10"
        )
    if not is_int(max_skipped) or max_skipped < 1:
        raise ValueError(
            f"shardkit train: max_skipped={max_skipped!r} must be a positive integer "
            "(--max-skipped), e.g. 5"
        )
    real = isinstance(learning_rate, numbers.Real) and not isinstance(learning_rate, bool)
    if not (real and math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(
            f"shardkit train: learning_rate={learning_rate!r} must be a finite positive "
            "number (--learning-rate), e.g. 1e-3"
        )


def run_training(
    console: Console,
    /,
    *,
    strategy: Strategy = "dp_tp",
    mesh: str = "4x2",
    steps: int = 30,
    sizes: tuple[int, ...] = (784, 1024, 1024, 10),
    batch_size: int = 256,
    optimizer: Optimizer = "sgd",
    learning_rate: float = 1e-3,
    seed: int = 0,
    plot: str | Path | None = None,
    keep_going: bool = False,
    max_skipped: int = 5,
) -> TrainRun:
    """Train seed 004's MLP with a strategy on a mesh, showing progress; ``shardkit train``.

    Builds the sharded state, compiles the step and reports its collectives and
    bytes per device (``shardkit.comms``), then runs ``steps`` steps on one synthetic
    batch (as the seed does) under a progress bar showing the loss, steps/s and the
    elapsed time, and writes a loss-curve PNG when ``plot`` is given. Every option,
    the plot's folder and matplotlib are checked before anything is compiled.

    A step whose loss or gradients are not finite (NaN or inf) is skipped: the
    parameters and optimizer state stay as they were (``make_train_step``'s
    ``on_nonfinite="skip"``) and the progress line says so. ``max_skipped`` skipped
    steps in a row stop the run (the model is not recovering), unless ``keep_going``.

    Args:
      console: where to print.
      strategy: ``single``, ``dp``, ``fsdp``, ``tp`` or ``dp_tp``.
      mesh: mesh shape, e.g. ``"4x2"`` (axes ``data,model``) or ``"8"``.
      steps: training steps (at least 1).
      sizes: the MLP's layer sizes.
      batch_size: examples per step; the data axes must divide it.
      optimizer: ``sgd``, ``adam`` or ``muon`` (:func:`~shardkit.train.muon`, its
        Newton-Schulz iteration on the shards).
      learning_rate: the optimizer's learning rate.
      seed: seeds the parameters and the batch.
      plot: PNG path for the loss curve, or None; its folder must exist.
      keep_going: run every step, however many are skipped.
      max_skipped: how many skipped steps in a row stop the run (``--max-skipped``).

    Returns:
      A :class:`TrainRun`.

    Raises:
      ValueError: a bad strategy, mesh, size, step count, batch size, learning rate,
        optimizer, ``max_skipped`` or plot path.
      ImportError: with ``plot``, matplotlib (the ``bench`` extra) is missing.
      FloatingPointError: ``max_skipped`` steps in a row were skipped (naming them),
        unless ``keep_going``.

    Example:
      >>> import io
      >>> from rich.console import Console
      >>> con = Console(file=io.StringIO())
      >>> run = shardkit.train.run_training(con, strategy="dp", mesh="8", steps=3,
      ...                                   sizes=(16, 32, 8), batch_size=32)
      >>> len(run.losses), run.bytes_per_step > 0
      (3, True)
    """
    sizes = tuple(sizes)
    _check_options(strategy, steps, sizes, batch_size, learning_rate, max_skipped)
    steps, batch_size, max_skipped = int(steps), int(batch_size), int(max_skipped)
    if plot is not None:
        check_output_file(plot, what="shardkit train --plot")
        require("matplotlib", extra="bench", what="shardkit train --plot")
    t0 = time.perf_counter()
    m = _mesh(strategy, mesh)
    model = MLP(sizes)
    layout = strategy_layout(model, strategy=strategy, mesh=m)
    layout.check_batch((batch_size, sizes[0]), where=f"shardkit train --batch-size {batch_size}")
    opt = _optimizer(optimizer, learning_rate)
    key = jax.random.key(seed)
    with busy(console, f"building the {strategy} state and compiling the step"):
        step, state = make_train_step(model, opt, strategy=strategy, mesh=m, key=key)
        batch = model.batch(jax.random.fold_in(key, 1), batch_size, layout.batch)
        # One compile serves the report and the steps (jit's call cache would compile again).
        compiled = cast(Any, step).lower(state, batch).compile()  # a jax.jit function
        report = comms(compiled, state, batch)
    compile_s = time.perf_counter() - t0
    n_params = sum(math.prod(s) for layer in model.param_shapes() for s in layer.values())
    console.print(
        f"[bold]{strategy}[/] on mesh {mesh}: MLP {'-'.join(map(str, sizes))} "
        f"({n_params:,} parameters), batch {batch_size}, {optimizer} lr={learning_rate:g}"
    )
    console.print(report.summary())

    losses: list[float] = []
    first_bad: int | None = None
    skipped = in_a_row = 0
    start = None
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[rate]} steps/s"),
        TimeElapsedColumn(),
    )
    # A terminal gets a live bar; a log gets about ten plain lines, the last step's included.
    live = console.is_terminal
    every = max(1, steps // 10)
    t_loop = time.perf_counter()
    with Progress(*columns, console=console, transient=False, disable=not live) as progress:
        task = progress.add_task("training", total=steps, loss="-", rate="-")
        for i in range(steps):
            state, loss = compiled(state, batch)
            losses.append(float(loss))  # waits for the step
            now = int(state.skipped)
            was_skipped, skipped = now > skipped, now
            in_a_row = in_a_row + 1 if was_skipped else 0
            if i == 0:
                start = time.perf_counter()
            rate = (i / (time.perf_counter() - start)) if i and start else float("nan")
            shown = f"{losses[-1]:.4g}" + (" (skipped)" if was_skipped else "")
            progress.update(task, advance=1, loss=shown, rate=f"{rate:.1f}")
            newly_bad = first_bad is None and (was_skipped or not math.isfinite(losses[-1]))
            stop = in_a_row >= max_skipped and not keep_going
            if not live and ((i + 1) % every == 0 or i + 1 == steps or newly_bad or stop):
                console.print(
                    f"training {i + 1}/{steps} loss {shown} "
                    f"({time.perf_counter() - t_loop:.1f} s elapsed)",
                    highlight=False,
                )
            if newly_bad:
                first_bad = i + 1
            if stop:
                break
    if in_a_row >= max_skipped and not keep_going:
        last = len(losses)
        raise FloatingPointError(
            f"shardkit train: stopped at step {last} of {steps}: steps {last - in_a_row + 1} "
            f"to {last} were skipped, {in_a_row} in a row (--max-skipped {max_skipped}), "
            f"because their loss or gradients are not finite (the loss is {losses[-1]}); "
            f"lower the learning rate (now {learning_rate:g}), or pass --keep-going "
            "(keep_going=True) to run every step"
        )
    elapsed = time.perf_counter() - start if start is not None else 0.0
    steps_per_s = (steps - 1) / elapsed if steps > 1 and elapsed > 0 else float("nan")
    peak = report.memory.peak_bytes if report.memory else None
    console.print(
        f"loss {losses[0]:.4g} -> {losses[-1]:.4g}; {steps_per_s:.1f} steps/s; "
        f"{format_bytes(report.bytes_sent)} sent per device per step"
        + (f"; peak {format_bytes(peak)}/device" if peak is not None else "")
    )
    if first_bad is not None:
        what = "gradients" if math.isfinite(losses[first_bad - 1]) else "loss"
        console.print(
            f"[yellow]warning: the {what} stopped being finite at step {first_bad}; "
            f"{skipped} of {len(losses)} steps skipped (not applied)[/]"
        )
    png = None
    if plot is not None:
        png = plot_losses(np.array(losses), plot, title=f"{strategy} on {mesh}")
        console.print(f"loss curve: {png}")
    return TrainRun(
        strategy=strategy,
        mesh=mesh,
        sizes=tuple(sizes),
        batch_size=batch_size,
        losses=tuple(losses),
        steps_per_s=steps_per_s,
        compile_s=compile_s,
        bytes_per_step=report.bytes_sent,
        peak_bytes=peak,
        report=report,
        plot=png,
    )
