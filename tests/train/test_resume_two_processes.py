"""``shardkit launch -n 2 -- shardkit train --checkpoint-dir``: stopped, killed, resumed.

Runs with ``SHARDKIT_FULL_TESTS=1`` (three 2-process jobs, about a minute on two
cores): SIGTERM to the launcher stops both ranks after the same step, saved (status
143); a SIGKILL to rank 1 ends the job with its status (137); the rerun resumes from
the newest complete checkpoint, replays the lost steps with the same losses bit for
bit and ends with one metrics line per step, equal to one process's within float32
rounding.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _train_util import RUN_ARGS, RUN_OPTIONS

from _matrix import FULL
from shardkit import train
from shardkit.testing import assert_close

pytest.importorskip("orbax.checkpoint")

STEPS = 30


def _lines(path: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, path.read_text().splitlines())}


def _launch(args: list[str]) -> subprocess.Popen[str]:
    job = [sys.executable, "-m", "shardkit", "launch", "-n", "2", "--timeout", "240", "--"]
    return subprocess.Popen(
        [*job, "python", "-m", "shardkit", "train", *RUN_ARGS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 200
    while not (path.is_file() and len(path.read_text().splitlines()) >= n):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never reached {n} lines"
        time.sleep(0.02)


def _rank(launcher: int, rank: int) -> int:
    """The pid of the launcher's child that runs ``rank``."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    for pid in children:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"SHARDKIT_PROCESS_ID={rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no child of {launcher} runs rank {rank}")


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
@pytest.mark.skipif(not FULL, reason="three 2-process jobs take a minute: SHARDKIT_FULL_TESTS=1")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds ranks through /proc")
def test_two_processes_stop_die_and_resume(tmp_path: Path) -> None:
    ckpt, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    args = ["--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--metrics", str(metrics)]
    args += ["--checkpoint-every", "4"]

    job = _launch(args)
    _wait_for_lines(metrics, 3, job)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert job.returncode == -signal.SIGTERM, err  # the launcher dies of it, after its ranks
    stopped = len(_lines(metrics))
    assert f"[0] stopped by SIGTERM after step {stopped} of {STEPS}; saved step" in out, out
    assert str(stopped) in [p.name for p in ckpt.iterdir()]

    job = _launch(args)
    _wait_for_lines(metrics, stopped + 6, job)
    os.kill(_rank(job.pid, 1), signal.SIGKILL)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 137, err
    assert "rank 1 exited with status 137 (killed by SIGKILL)" in err
    assert f"[0] resuming from the checkpoint of step {stopped}" in out
    before = _lines(metrics)

    job = _launch(args)
    out, err = job.communicate(timeout=240)
    assert job.returncode == 0, err
    assert "[0] resuming from the checkpoint of step" in out
    after = _lines(metrics)
    assert list(after) == list(range(1, STEPS + 1))
    assert all(after[s] == loss for s, loss in before.items())  # replayed bit for bit

    one = train.run_training(**RUN_OPTIONS, steps=STEPS)
    assert_close(
        np.array(list(after.values())),
        np.array(one.losses),
        dtype=np.float32,
        what="2-process losses against one process",
    )
