"""How long work shows progress: a spinner on a terminal, one plain line elsewhere.

Logs, CI and tests read the plain form, so nothing animated reaches a file or a pipe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console

__all__ = ["busy"]


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
