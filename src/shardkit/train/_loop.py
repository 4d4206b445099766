"""The progress of ``run_training``'s steps: the bar or log lines, skipped steps, memory."""

from __future__ import annotations

import math
import signal
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shardkit.train._durable import resident_bytes

__all__ = ["StepProgress"]


class StepProgress:
    """Shows steps ``start + 1 .. steps`` and keeps what the summary needs.

    A terminal gets a live bar; a log gets about ten plain lines, the last step's
    included. :meth:`record` takes each step's loss and skipped-step count and says
    whether the step was skipped; :attr:`stop` turns true after ``max_skipped``
    skipped steps in a row, unless ``keep_going``.
    """

    def __init__(
        self,
        console: Console,
        /,
        *,
        start: int,
        steps: int,
        max_skipped: int,
        keep_going: bool,
        skipped: int,
    ) -> None:
        self.console = console
        self.start, self.steps = start, steps
        self.max_skipped, self.keep_going = max_skipped, keep_going
        self.losses: list[float] = []
        self.skipped = skipped
        self.in_a_row = 0
        self.first_bad: int | None = None
        self.stop = False
        self.stopped_by: signal.Signals | None = None
        self.timed_from: float | None = None
        self.memory: tuple[int, int] | None = None
        self._rss_first: int | None = None
        self.saves = 0
        self.saving_s = 0.0
        self._live = console.is_terminal
        self._every = max(1, (steps - start) // 10)
        self._t0 = time.perf_counter()
        columns = (
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[rate]} steps/s"),
            TimeElapsedColumn(),
        )
        self._progress = Progress(
            *columns, console=console, transient=False, disable=not self._live
        )
        self._task = self._progress.add_task(
            "training", total=steps, completed=start, loss="-", rate="-"
        )

    def __enter__(self) -> StepProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)

    def record(self, i: int, loss: float, skipped: int, /) -> bool:
        """Takes step ``i + 1``'s loss and the state's skipped count; whether it was skipped."""
        self.losses.append(loss)
        was_skipped, self.skipped = skipped > self.skipped, skipped
        self.in_a_row = self.in_a_row + 1 if was_skipped else 0
        done = len(self.losses)
        memory = resident_bytes()
        if done == 1:
            self.timed_from = time.perf_counter()
            self._rss_first = memory
        elif memory is not None and self._rss_first is not None:
            self.memory = (self._rss_first, memory)
        rate = self.steps_per_s
        shown = f"{loss:.4g}" + (" (skipped)" if was_skipped else "")
        self._progress.update(self._task, advance=1, loss=shown, rate=f"{rate:.1f}")
        newly_bad = self.first_bad is None and (was_skipped or not math.isfinite(loss))
        self.stop = self.in_a_row >= self.max_skipped and not self.keep_going
        last = i + 1 == self.steps
        if not self._live and (done % self._every == 0 or last or newly_bad or self.stop):
            self.console.print(
                f"training {i + 1}/{self.steps} loss {shown} "
                f"({time.perf_counter() - self._t0:.1f} s elapsed)",
                highlight=False,
            )
        if newly_bad:
            self.first_bad = i + 1
        return was_skipped

    def saved(self, seconds: float, /) -> None:
        """Counts a checkpoint that took ``seconds`` (left out of the steps' rate)."""
        self.saves += 1
        self.saving_s += seconds

    @property
    def steps_per_s(self) -> float:
        """Steps per second after this run's first (compiled) step, saves left out."""
        done = len(self.losses)
        if done < 2 or self.timed_from is None:
            return float("nan")
        elapsed = time.perf_counter() - self.timed_from - self.saving_s
        return (done - 1) / elapsed if elapsed > 0 else float("nan")
