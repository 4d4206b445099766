"""Where ``run_training`` prints: a ``progress=`` option, or the command's own console.

No public function takes a rich ``Console``: a library caller asks for the progress
with ``progress=True`` (standard output) or a text file, and gets the numbers back in
the :class:`~shardkit.train.TrainRun`; ``shardkit train`` lends its console for the
call through :func:`progress_console` (``shardkit.train.internal``).
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

from shardkit._deprecation import moved
from shardkit._progress import progress_console, progress_output

__all__ = ["output_console", "progress_console"]


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
    return progress_output("run_training", progress)


def _as_console(console: Console | None) -> Console:
    if not isinstance(console, Console):
        raise TypeError(
            f"run_training: console={console!r} must be a rich Console; better, pass "
            "progress=True or progress=<a text file>"
        )
    return console
