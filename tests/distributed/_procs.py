"""Process helpers shared by the launcher tests."""

from __future__ import annotations

import os
import time


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """Waits up to ``timeout`` seconds for ``pids`` to end; returns those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
