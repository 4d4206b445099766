"""How long work shows progress: a spinner on a terminal, one plain line elsewhere.

Logs, CI and tests read the plain form, so nothing animated reaches a file or a pipe.

No public function takes a rich ``Console``: long-running functions
(``train.run_training``, ``bench.run_bench``, ``bench.calibrate``) take a
``progress=`` option, ``True`` (standard output), ``False`` (silent) or a text file,
resolved by :func:`progress_output`; the command line lends its own console for a call
through :func:`progress_console`.
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

__all__ = ["busy", "progress_console", "progress_output", "resolve_progress"]

Progress = bool | TextIO
"""A ``progress=`` option: ``True`` (standard output), ``False`` (silent) or a text file."""

_LENT: ContextVar[Console | None] = ContextVar("shardkit_progress_console", default=None)


@contextlib.contextmanager
def progress_console(console: Console) -> Iterator[None]:
    """Within the block, ``progress=True`` prints on ``console`` (the command line's)."""
    token = _LENT.set(console)
    try:
        yield
    finally:
        _LENT.reset(token)


def progress_output(where: str, progress: object) -> Console:
    """The console a ``progress=`` option prints on (a silent one for ``False``).

    Raises:
      TypeError: ``progress`` is not ``True``, ``False`` or a text file.
    """
    if progress is False:
        return Console(file=io.StringIO())
    if progress is True:
        lent = _LENT.get()
        if lent is not None:
            return lent
        return Console() if sys.stdout.isatty() else Console(width=160)
    if isinstance(progress, Console) or not callable(getattr(progress, "write", None)):
        raise TypeError(
            f"{where}: progress={progress!r} ({type(progress).__name__}) must be True "
            "(print on standard output), False (print nothing) or a text file such as "
            "io.StringIO() or open(path, 'w')"
        )
    return Console(file=progress, width=160)  # pyright: ignore[reportArgumentType]


@contextlib.contextmanager
def busy(console: Console | None, text: str, /) -> Iterator[None]:
    """Show ``text`` while the block runs: a spinner on a terminal, else a dim line first.

    Args:
      console: where to show it; ``None`` shows nothing.
      text: what is happening, e.g. ``"compiling the training step"``.

    Example:
      >>> import io
      >>> con = Console(file=io.StringIO())
      >>> with busy(con, "compiling"):
      ...     pass
      >>> con.file.getvalue()
      'compiling ...\\n'
    """
    if console is None:
        yield
    elif console.is_terminal:
        with console.status(text):
            yield
    else:
        console.print(f"{text} ...", style="dim", highlight=False)
        yield


def resolve_progress(
    where: str, legacy: Console | None, progress: object, *, stacklevel: int = 5
) -> Console | None:
    """``progress=`` (or the deprecated ``console=``) as the console to print on;
    ``None`` prints nothing. ``stacklevel`` points the warning at the public function's
    caller when the public function calls this directly."""
    if moved(
        where,
        old=f"{where}(..., console=...)",
        new=f"{where}(..., progress=True) or progress=<a text file>",
        old_given=legacy is not None,
        new_given=progress is not False,
        stacklevel=stacklevel,
    ):
        return legacy
    return None if progress is False else progress_output(where, progress)
