"""What makes ``run_training`` durable: stop signals, the metrics log and resident memory.

* :class:`StopSignals` turns SIGTERM (what a scheduler sends before it kills a job)
  and SIGINT (Ctrl-C) into a flag the training loop reads between steps, so the
  current step finishes and a checkpoint is written before the process exits. On
  several processes the ranks agree on the flag after every step (one tiny
  all-gather, after the step's loss is read, so it never runs beside a step's own
  collectives), and every rank stops after the same step.
* :class:`MetricsLog` writes one JSON line per step, ``{"step": i, "loss": x}``. A
  resumed run first keeps only the lines of the steps its checkpoint holds (the last
  line of a step wins; a line cut by a kill is dropped), so steps replayed after a
  kill appear once.
* :func:`resident_bytes` reads this process's resident memory.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import jax
import numpy as np

__all__ = ["MetricsLog", "StopSignals", "resident_bytes"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """A context in which SIGTERM and SIGINT set :attr:`received` instead of ending us.

    Only the first signal is caught: the handlers go back to their previous actions
    then, so a second Ctrl-C or SIGTERM ends the process as it would have (a save
    under way is then left unfinished, which orbax's atomic rename makes harmless).
    Outside the main thread, where Python cannot install handlers, nothing is caught.
    """

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.received is None:
            self.received = signal.Signals(signum)
        self._restore()

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def agreed(self) -> signal.Signals | None:
        """The signal any process received, the same on every process (collective).

        On one process this reads the flag; on several, the ranks all-gather their
        flags (call it after every step, on every rank, at the same point) and the
        lowest signal number any rank got is everyone's answer.
        """
        mine = 0 if self.received is None else int(self.received)
        if jax.process_count() == 1:
            return self.received
        from jax.experimental import multihost_utils

        flags = np.asarray(multihost_utils.process_allgather(np.int32(mine)))
        got = [int(f) for f in flags.ravel() if f]
        return signal.Signals(min(got)) if got else None


class MetricsLog:
    """``{"step": i, "loss": x}`` lines, one per step, appended and flushed as they come.

    Args:
      path: the file; its folder must exist.
      keep_through: the last step a resumed run's checkpoint holds: lines of steps up
        to it are kept (once each, the last written winning), later ones dropped.
        0 starts the file over.
    """

    def __init__(self, path: str | os.PathLike[str], /, *, keep_through: int) -> None:
        self.path = Path(path)
        kept: dict[int, str] = {}
        if keep_through > 0 and self.path.is_file():
            for line in self.path.read_text().splitlines():
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    step = int(json.loads(line)["step"])
                    if 1 <= step <= keep_through:
                        kept[step] = line
        # Written aside and renamed, so a kill now leaves the old file or the new one.
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(kept[s] + "\n" for s in sorted(kept)))
        tmp.replace(self.path)
        self._file: TextIO = self.path.open("a")

    def write(self, step: int, loss: float, /, *, skipped: bool = False) -> None:
        """Appends step ``step``'s line; a non-finite loss is written as ``null``."""
        record: dict[str, Any] = {"step": step, "loss": loss if math.isfinite(loss) else None}
        if skipped:
            record["skipped"] = True
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Closes the file."""
        self._file.close()


def resident_bytes() -> int | None:
    """This process's resident memory in bytes (Linux ``/proc``), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")
