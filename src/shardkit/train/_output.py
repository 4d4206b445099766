"""Where ``run_training`` prints: a ``progress=`` option, or the command's own console.

No public function takes a rich ``Console``: a library caller asks for the progress
with ``progress=True`` (standard output) or a text file, and gets the numbers back in
the :class:`~shardkit.train.TrainRun`; ``shardkit train`` lends its console for the
call through :func:`progress_console` (``shardkit.train.internal``).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TextIO

from rich.console import Console

from shardkit._deprecation import moved

__all__ = ["output_console", "progress_console"]

_SCOPED: ContextVar[Console | None] = ContextVar("shardkit_train_console", default=None)


@contextlib.contextmanager
def progress_console(console: Console) -> Iterator[None]:
    """Within the block, ``run_training(progress=True)`` prints on ``console``."""
    token = _SCOPED.set(console)
    try:
        yield
    finally:
        _SCOPED.reset(token)


def output_console(legacy: Console | None, progress: bool | TextIO) -> Console:
    """The console ``run_training`` prints on (a silent one for ``progress=False``)."""
    if moved(
        "run_training",
        old="run_training(console, ...)",
        new="run_training(..., progress=True) or progress=<a text file>",
        old_given=legacy is not None,
        new_given=progress is not False,
        stacklevel=5,
    ):
        return _as_console(legacy)
    if progress is False:
        return Console(file=io.StringIO())
    if progress is True:
        scoped = _SCOPED.get()
        if scoped is not None:
            return scoped
        return Console() if sys.stdout.isatty() else Console(width=160)
    if isinstance(progress, Console) or not callable(getattr(progress, "write", None)):
        raise TypeError(
            f"run_training: progress={progress!r} ({type(progress).__name__}) must be True "
            "(print on standard output), False (print nothing) or a text file such as "
            "io.StringIO() or open(path, 'w')"
        )
    return Console(file=progress, width=160)


def _as_console(console: Console | None) -> Console:
    if not isinstance(console, Console):
        raise TypeError(
            f"run_training: console={console!r} must be a rich Console; better, pass "
            "progress=True or progress=<a text file>"
        )
    return console
