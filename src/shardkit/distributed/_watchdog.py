"""A helper process that ends a job's process groups if the launcher dies.

The launcher starts it first, in a session of its own (so a signal to the
launcher's process group spares it), and writes each child's process group id to its
stdin. Nothing else holds that pipe's write end, so when the launcher dies, even by
SIGKILL, the helper reads end of file and sends SIGKILL to every group: the children
and everything they started. A launcher that finishes normally writes ``done`` first,
and the helper exits without signalling anyone.
"""

from __future__ import annotations

import subprocess
import sys

_DONE = "done"
# Runs with -I -S (no site, no user paths): nothing to import but os and signal.
_HELPER = f"""
import os, signal, sys
groups = []
for line in sys.stdin:
    line = line.strip()
    if line == {_DONE!r}:
        sys.exit(0)
    if line.isdigit():
        groups.append(int(line))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class Watchdog:
    """Ends the registered process groups when this process dies."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    def watch(self, group: int) -> None:
        """Adds a process group to end if this process dies."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{group}\n")
        self._proc.stdin.flush()

    def close(self) -> None:
        """Tells the helper the job ended normally and waits for it to exit."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(f"{_DONE}\n")
            self._proc.stdin.close()
        except OSError:
            pass  # the helper died already: nothing left to tell it
        self._proc.wait()
