"""``run_training``: what ``shardkit train`` does, with a rich progress bar and a loss plot."""

from __future__ import annotations

import contextlib
import io
import math
import numbers
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, TextIO, cast, get_args

import jax
import numpy as np
from rich.console import Console

from shardkit._preflight import check_output_dir, check_output_file, require
from shardkit._progress import busy
from shardkit.inspect import CommReport, comms
from shardkit.layout import format_bytes, parse_mesh_shape
from shardkit.layout import mesh as make_mesh
from shardkit.layout.internal import as_count, is_int
from shardkit.train._durable import MetricsLog, StopSignals
from shardkit.train._loop import StepProgress
from shardkit.train._manager import CheckpointManager
from shardkit.train._models import MLP
from shardkit.train._output import output_console
from shardkit.train._pipeline import check_microbatches
from shardkit.train._resume import check_resumable, resume
from shardkit.train._schedule import SCHEDULES, Schedule
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
      pipeline: ``pp``/``dp_pp``: the stages, schedule, bubble fraction and per-stage
        memory as the report printed them; None for the other strategies.
      bubble: ``pp``/``dp_pp``: the schedule's idle fraction ``(S-1)/(M+S-1)``, else None.
      start_step: the step this run resumed from (0 for a fresh run); ``losses``
        are those of steps ``start_step + 1`` on.
      stopped_by: the signal (SIGTERM or SIGINT) that stopped the run after its
        current step, or None; ``shardkit train`` then exits with ``128 +`` its number.
      checkpoint_dir: the checkpoint folder, or None.
      resident_bytes: this process's resident memory after this run's first step
        and after its last (Linux), or None.
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
    pipeline: str | None = None
    bubble: float | None = None
    start_step: int = 0
    stopped_by: signal.Signals | None = None
    checkpoint_dir: Path | None = None
    resident_bytes: tuple[int, int] | None = None


def _mesh(strategy: str, shape: str) -> Any:
    dims = parse_mesh_shape(shape)
    pipeline = strategy in ("pp", "dp_pp")
    if len(dims) == 2:
        names = "data,stage" if pipeline else "data,model"
    elif len(dims) == 1:
        names = {"tp": "model", "pp": "stage"}.get(strategy, "data")
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
    microbatches: int | None,
    schedule: str | None,
) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"shardkit train: strategy={strategy!r}; choose one of {list(STRATEGIES)}")
    if strategy not in ("pp", "dp_pp") and (microbatches is not None or schedule is not None):
        given = "microbatches" if microbatches is not None else "schedule"
        raise ValueError(
            f"shardkit train: {given} (--{given}) applies to the pipeline strategies pp "
            f"and dp_pp only, not strategy={strategy!r}; leave it out or pass --strategy pp"
        )
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(
            f"shardkit train: schedule={schedule!r} (--schedule); choose one of {list(SCHEDULES)}"
        )
    if microbatches is not None and (not is_int(microbatches) or microbatches < 1):
        raise ValueError(
            f"shardkit train: microbatches={microbatches!r} must be a positive integer "
            "(--microbatches), e.g. 8"
        )
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
    legacy_console: Console | None = None,
    /,
    *,
    progress: bool | TextIO = False,
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
    microbatches: int | None = None,
    schedule: Schedule | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 10,
    metrics: str | Path | None = None,
) -> TrainRun:
    """Train seed 004's MLP with a strategy on a mesh, showing progress; ``shardkit train``.

    Builds the sharded state, compiles the step and reports its collectives and
    bytes per device (``shardkit.comms``), then runs ``steps`` steps under a progress
    bar showing the loss, steps/s and the elapsed time, and writes a loss-curve PNG
    when ``plot`` is given. Every option, the output folders and matplotlib are
    checked before anything is compiled. Step ``i`` (counting from 1) trains on a
    synthetic batch drawn in place from ``seed`` and ``i`` alone, so the data of a
    step never depends on what ran before it.

    With ``checkpoint_dir`` the run is resumable (:class:`CheckpointManager`): the
    state (parameters, optimizer state, step and skipped-step counts) is saved every
    ``checkpoint_every`` steps and after the last, with the options, the seed and the
    next batch's position; a run given a folder that holds checkpoints resumes from
    the newest complete one and says so. As the batches and random numbers come from
    the seed and the step, a resumed run's losses equal an uninterrupted run's bit for
    bit (on the same strategy and mesh; on another layout they agree within float
    rounding). SIGTERM or SIGINT during the steps finishes the current step, saves
    it (with ``checkpoint_dir``) and returns with :attr:`TrainRun.stopped_by` set; a
    process killed outright, during a save included, leaves the previous checkpoint
    intact. On several processes (``shardkit launch``) every rank stops after the
    same step, and only process 0 prints and writes ``metrics``.

    A step whose loss or gradients are not finite (NaN or inf) is skipped: the
    parameters and optimizer state stay as they were (``make_train_step``'s
    ``on_nonfinite="skip"``) and the progress line says so. ``max_skipped`` skipped
    steps in a row stop the run (the model is not recovering), unless ``keep_going``.

    Args:
      legacy_console: deprecated; the rich ``Console`` earlier releases took first.
        Pass ``progress=``.
      progress: where the progress and the report go: ``False`` (the default)
        prints nothing, ``True`` prints on standard output, a text file (e.g.
        ``io.StringIO()``) receives plain text, 160 columns wide.
      strategy: ``single``, ``dp``, ``fsdp``, ``tp``, ``dp_tp``, ``pp`` or ``dp_pp``.
      mesh: mesh shape, e.g. ``"4x2"`` (axes ``data,model``, or ``data,stage`` for
        ``dp_pp``) or ``"8"`` (``stage`` for ``pp``).
      steps: the step to train up to (at least 1); a resumed run trains the rest.
      sizes: the MLP's layer sizes.
      batch_size: examples per step; the data axes must divide it.
      optimizer: ``sgd``, ``adam`` or ``muon`` (:func:`~shardkit.train.muon`, its
        Newton-Schulz iteration on the shards).
      learning_rate: the optimizer's learning rate.
      seed: seeds the parameters and the batches.
      plot: PNG path for the loss curve (of this run's steps), or None; its folder
        must exist.
      keep_going: run every step, however many are skipped.
      max_skipped: how many skipped steps in a row stop the run (``--max-skipped``).
      microbatches: ``pp``/``dp_pp``: microbatches per data shard (default: the stages).
      schedule: ``pp``/``dp_pp``: ``gpipe`` or ``1f1b`` (the default). The report then
        states the stages, the bubble fraction and each stage's memory.
      checkpoint_dir: the run's checkpoint folder (created if missing), or None.
      checkpoint_every: save every this many steps (``--checkpoint-every``).
      metrics: a file to write ``{"step": i, "loss": x}`` JSON lines to, one per
        step (``null`` for a non-finite loss, with ``"skipped": true`` for a skipped
        step); a resumed run keeps the lines of the steps its checkpoint holds and
        appends, so each step appears once.

    Returns:
      A :class:`TrainRun`.

    Raises:
      ValueError: a bad strategy, mesh, size, step count, batch size, learning rate,
        optimizer, ``max_skipped``, ``checkpoint_every`` or output path; or
        ``checkpoint_dir`` holds a run with other options (model sizes, batch size,
        optimizer, learning rate or seed).
      ImportError: with ``plot``, matplotlib (the ``bench`` extra) is missing; with
        ``checkpoint_dir``, orbax-checkpoint (the ``train`` extra).
      FloatingPointError: ``max_skipped`` steps in a row were skipped (naming them),
        unless ``keep_going``.

    Example:
      >>> import io
      >>> log = io.StringIO()
      >>> run = shardkit.train.run_training(strategy="dp", mesh="8", steps=3,
      ...                                   sizes=(16, 32, 8), batch_size=32, progress=log)
      >>> len(run.losses), run.bytes_per_step > 0, "compiling" in log.getvalue()
      (3, True, True)
    """
    console = output_console(legacy_console, progress)
    sizes = tuple(sizes)
    _check_options(
        strategy, steps, sizes, batch_size, learning_rate, max_skipped, microbatches, schedule
    )
    steps, batch_size, max_skipped = int(steps), int(batch_size), int(max_skipped)
    every = _check_outputs(checkpoint_every, plot, metrics, checkpoint_dir)
    if jax.process_index() != 0:
        console = Console(file=io.StringIO())  # one rank speaks for the job
    record = {
        "sizes": list(sizes),
        "batch_size": batch_size,
        "optimizer": optimizer,
        "learning_rate": float(learning_rate),
        "seed": int(seed),
    }
    layout_record = {"strategy": strategy, "mesh": mesh}
    with contextlib.ExitStack() as cleanup:
        ckpt = None
        if checkpoint_dir is not None:
            ckpt = cleanup.enter_context(CheckpointManager(checkpoint_dir, every=every))
            check_resumable(ckpt, record)  # before anything is compiled
        built = _build(
            console,
            strategy,
            mesh,
            sizes,
            batch_size,
            optimizer,
            learning_rate,
            seed,
            microbatches,
            schedule,
        )
        report, pipe = built.report, built.pipe
        described = _announce(
            console, built, strategy, mesh, sizes, batch_size, optimizer, learning_rate
        )

        meta: dict[str, Any] = {"run": record, "layout": layout_record}
        loop = _train(console, built, cleanup, ckpt, metrics, meta, steps, max_skipped, keep_going)
    return _finish(
        console,
        loop,
        report,
        plot=plot,
        compile_s=built.compile_s,
        checkpoint=None if ckpt is None else ckpt.directory,
        strategy=strategy,
        mesh=mesh,
        sizes=sizes,
        batch_size=batch_size,
        learning_rate=learning_rate,
        pipeline=described,
        bubble=pipe.schedule.bubble if pipe is not None else None,
    )


def _check_outputs(
    checkpoint_every: int,
    plot: str | Path | None,
    metrics: str | Path | None,
    checkpoint_dir: str | Path | None,
) -> int:
    """The output options checked before anything is compiled; returns ``checkpoint_every``."""
    every = as_count(
        "shardkit train",
        "checkpoint_every",
        checkpoint_every,
        minimum=1,
        fix="e.g. --checkpoint-every 100",
    )
    if plot is not None:
        check_output_file(plot, what="shardkit train --plot")
        require("matplotlib", extra="bench", what="shardkit train --plot")
    if metrics is not None:
        check_output_file(metrics, what="shardkit train --metrics")
    if checkpoint_dir is not None:
        check_output_dir(checkpoint_dir, what="shardkit train --checkpoint-dir")
        require("orbax.checkpoint", extra="train", what="shardkit train --checkpoint-dir")
    return every


class _Built(NamedTuple):
    """A run's model, compiled step and first state and batch, and the step's report."""

    model: MLP
    batch_of: Callable[[int], Any]
    compiled: Any
    state: Any
    batch: Any
    report: CommReport
    pipe: Any
    compile_s: float


def _build(
    console: Console,
    strategy: Strategy,
    mesh: str,
    sizes: tuple[int, ...],
    batch_size: int,
    optimizer: Optimizer,
    learning_rate: float,
    seed: int,
    microbatches: int | None,
    schedule: Schedule | None,
) -> _Built:
    """The mesh, model, layout and optimizer; the step compiled once and its collectives."""
    t0 = time.perf_counter()
    m = _mesh(strategy, mesh)
    model = MLP(sizes)
    layout = strategy_layout(model, strategy=strategy, mesh=m)
    layout.check_batch((batch_size, sizes[0]), where=f"shardkit train --batch-size {batch_size}")
    if layout.pipeline is not None:
        check_microbatches(
            f"shardkit train --batch-size {batch_size}",
            layout.pipeline,
            layout.pipeline.stages if microbatches is None else microbatches,
            batch_size,
        )
    opt = _optimizer(optimizer, learning_rate)
    key = jax.random.key(seed)
    data_key = jax.random.fold_in(key, 1)

    def batch_of(i: int) -> Any:  # the batch of step i + 1: a function of the seed and i
        return model.batch(jax.random.fold_in(data_key, i), batch_size, layout.batch)

    with busy(console, f"building the {strategy} state and compiling the step"):
        step, state = make_train_step(
            model,
            opt,
            strategy=strategy,
            mesh=m,
            key=key,
            microbatches=microbatches,
            schedule=schedule,
        )
        pipe = cast(Any, step).pipeline
        batch = batch_of(0)
        # One compile serves the report and the steps (jit's call cache would compile again).
        compiled = cast(Any, step).lower(state, batch).compile()  # a jax.jit function
        report = comms(compiled, state, batch)
    compile_s = time.perf_counter() - t0
    return _Built(model, batch_of, compiled, state, batch, report, pipe, compile_s)


def _announce(
    console: Console,
    built: _Built,
    strategy: str,
    mesh: str,
    sizes: tuple[int, ...],
    batch_size: int,
    optimizer: str,
    learning_rate: float,
) -> str | None:
    """Print the run's first lines (model, step report, pipeline); returns the pipeline's."""
    n_params = sum(math.prod(s) for layer in built.model.param_shapes() for s in layer.values())
    console.print(
        f"[bold]{strategy}[/] on mesh {mesh}: MLP {'-'.join(map(str, sizes))} "
        f"({n_params:,} parameters), batch {batch_size}, {optimizer} lr={learning_rate:g}"
    )
    console.print(built.report.summary())
    described = built.pipe.describe(batch_size) if built.pipe is not None else None
    if described is not None:
        console.print(described, highlight=False)
    return described


def _train(
    console: Console,
    built: _Built,
    cleanup: contextlib.ExitStack,
    ckpt: CheckpointManager | None,
    metrics: str | Path | None,
    meta: dict[str, Any],
    steps: int,
    max_skipped: int,
    keep_going: bool,
) -> StepProgress:
    """Resume from ``ckpt``, then step under the progress bar and the stop signals."""
    state, batch = built.state, built.batch
    if ckpt is not None:
        state = resume(console, ckpt, state, meta["layout"], steps)
    start = int(state.step)
    log = None
    if metrics is not None and jax.process_index() == 0:
        log = cleanup.enter_context(contextlib.closing(MetricsLog(metrics, keep_through=start)))
    seed = meta["run"]["seed"]
    with (
        StepProgress(
            console,
            start=start,
            steps=steps,
            max_skipped=max_skipped,
            keep_going=keep_going,
            skipped=int(state.skipped),
        ) as loop,
        StopSignals() as signals,
    ):
        for i in range(start, steps):
            if i > 0:
                batch = built.batch_of(i)
            state, loss = built.compiled(state, batch)
            loss_value = float(loss)  # waits for the step
            was_skipped = loop.record(i, loss_value, int(state.skipped))
            if log is not None:
                log.write(i + 1, loss_value, skipped=was_skipped)
            meta["data"] = {"seed": int(seed), "next_batch": i + 1}
            loop.stopped_by = signals.agreed()
            if ckpt is not None:
                forced = i + 1 == steps or loop.stopped_by is not None
                t_save = time.perf_counter()
                if ckpt.save(state, metadata=meta, force=forced):
                    loop.saved(time.perf_counter() - t_save)
            if loop.stopped_by is not None or loop.stop:
                break
    return loop


def _print_summary(
    console: Console,
    loop: StepProgress,
    report: CommReport,
    peak: int | None,
    checkpoint: Path | None,
) -> None:
    """The run's closing lines: losses and speed, saves, memory, skipped steps, a stop."""
    losses = loop.losses
    steps_per_s = loop.steps_per_s
    if losses:
        console.print(
            f"loss {losses[0]:.4g} -> {losses[-1]:.4g}; {steps_per_s:.1f} steps/s; "
            f"{format_bytes(report.bytes_sent)} sent per device per step"
            + (f"; peak {format_bytes(peak)}/device" if peak is not None else "")
        )
    if checkpoint is not None:
        console.print(
            f"{loop.saves} checkpoint(s) saved to {checkpoint} ({loop.saving_s:.1f} s)",
            highlight=False,
        )
    if loop.memory is not None:
        first, last_rss = loop.memory
        console.print(
            f"resident memory {format_bytes(first)} after the first step, "
            f"{format_bytes(last_rss)} after the last ({len(losses)} steps)",
            highlight=False,
        )
    if loop.first_bad is not None:
        what = "gradients" if math.isfinite(losses[loop.first_bad - loop.start - 1]) else "loss"
        console.print(
            f"[yellow]warning: the {what} stopped being finite at step {loop.first_bad}; "
            f"{loop.skipped} of {loop.start + len(losses)} steps skipped (not applied)[/]"
        )
    done = loop.start + len(losses)
    if loop.stopped_by is not None:
        saved = (
            f"saved step {done} to {checkpoint}; run the same command again to resume"
            if checkpoint is not None
            else "nothing saved (no --checkpoint-dir)"
        )
        console.print(
            f"[yellow]stopped by {loop.stopped_by.name} after step {done} of {loop.steps}; "
            f"{saved}[/]",
            highlight=False,
            soft_wrap=True,
        )


def _finish(
    console: Console,
    loop: StepProgress,
    report: CommReport,
    /,
    *,
    plot: str | Path | None,
    compile_s: float,
    checkpoint: Path | None,
    strategy: str,
    mesh: str,
    sizes: tuple[int, ...],
    batch_size: int,
    learning_rate: float,
    pipeline: str | None = None,
    bubble: float | None = None,
) -> TrainRun:
    """The summary lines, the stop message, the plot and the :class:`TrainRun`."""
    losses = loop.losses
    if loop.stop:
        last = loop.start + len(losses)
        raise FloatingPointError(
            f"shardkit train: stopped at step {last} of {loop.steps}: steps "
            f"{last - loop.in_a_row + 1} to {last} were skipped, {loop.in_a_row} in a row "
            f"(--max-skipped {loop.max_skipped}), because their loss or gradients are not "
            f"finite (the loss is {losses[-1]}); lower the learning rate (now "
            f"{learning_rate:g}), or pass --keep-going (keep_going=True) to run every step"
        )
    peak = report.memory.peak_bytes if report.memory else None
    steps_per_s = loop.steps_per_s
    _print_summary(console, loop, report, peak, checkpoint)
    png = None
    if plot is not None and losses:
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
        pipeline=pipeline,
        bubble=bubble,
        start_step=loop.start,
        stopped_by=loop.stopped_by,
        checkpoint_dir=checkpoint,
        resident_bytes=loop.memory,
    )
