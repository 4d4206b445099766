"""The watchdog that ends a job's process groups when the launcher dies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from _procs import alive, wait_gone

from shardkit.distributed._watchdog import Watchdog

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(SLEEP, start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.timeout(30)
def test_a_launcher_that_finishes_normally_leaves_the_groups_alone(
    sleeper: subprocess.Popen[bytes],
) -> None:
    watchdog = Watchdog()
    watchdog.watch(sleeper.pid)
    watchdog.close()
    assert watchdog._proc.returncode == 0
    assert alive(sleeper.pid)


@pytest.mark.timeout(30)
def test_the_groups_are_killed_when_the_pipe_closes_without_done(
    sleeper: subprocess.Popen[bytes],
) -> None:
    watchdog = Watchdog()
    watchdog.watch(sleeper.pid)
    # What the kernel does when the launcher dies: the write end closes, nothing said.
    assert watchdog._proc.stdin is not None
    watchdog._proc.stdin.close()
    assert watchdog._proc.wait(timeout=10) == 0
    sleeper.wait(timeout=10)
    assert wait_gone([sleeper.pid]) == []
