"""JAX jobs of 2 processes x 4 CPU devices under shardkit.distributed.launch."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from _procs import wait_gone
from _worker import compute, data

from _meshes import make_mesh
from shardkit.distributed import launch

WORKER = str(Path(__file__).with_name("_worker.py"))
# Bound on how long launch may take to report a dead peer (the requirement).
DEAD_PEER_BOUND_SECONDS = 30.0


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    """The worker's computation on this process's 8 simulated devices."""
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    return {k: np.asarray(v) for k, v in compute(make_mesh("8")).items()}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_processes_compute_what_one_process_does(
    tmp_path: Path, reference: dict[str, np.ndarray]
) -> None:
    out_file = tmp_path / "results.json"
    out, err = io.StringIO(), io.StringIO()
    rc = launch(
        [sys.executable, WORKER, "compute", str(out_file)],
        num_processes=2,
        devices_per_process=4,
        timeout_seconds=100,
        stdout=out,
        stderr=err,
    )
    assert rc == 0, f"stdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}"
    lines = out.getvalue().splitlines()
    assert "[0] done process 0 of 2" in lines
    assert "[1] done process 1 of 2" in lines
    # Both ranks joined (no warning) and gloo's connection chatter is hidden.
    assert "shardkit launch:" not in err.getvalue()
    assert not any("[Gloo]" in line for line in lines + err.getvalue().splitlines())

    payload = json.loads(out_file.read_text())
    assert payload["info"] == {
        "process_id": 0,
        "num_processes": 2,
        "local_device_count": 4,
        "global_device_count": 8,
        "mode": "launcher",
    }
    results = {k: np.asarray(v, dtype=np.float32) for k, v in payload["results"].items()}
    assert sorted(results) == sorted(reference)
    for name, expected in reference.items():
        np.testing.assert_allclose(results[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)

    a = data()
    blocks = a.reshape(8, -1, a.shape[1])
    numpy_results = {
        "gathered": a,
        "summed_blocks": blocks.sum(axis=0),
        "column_sums": a.sum(axis=0, keepdims=True),
        "total": np.sum(a * a),
        "elementwise": np.sin(a) * 2.0 + 1.0,
    }
    for name, expected in numpy_results.items():
        np.testing.assert_allclose(results[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


def _launch(args: list[str], **kwargs) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = launch(
        [sys.executable, WORKER, *args],
        num_processes=2,
        devices_per_process=4,
        stdout=out,
        stderr=err,
        **kwargs,
    )
    return rc, out.getvalue(), err.getvalue()


def _assert_no_native_abort(text: str) -> None:
    for mark in ("Check failure stack trace", "client.h", "SIGABRT", "status 134"):
        assert mark not in text, text


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("mode", "victim", "expected", "summary"),
    [
        pytest.param("exit", 1, 3, "rank 1 exited with status 3; stopped rank 0", id="exit-3"),
        pytest.param(
            "kill",
            1,
            137,
            "rank 1 exited with status 137 (killed by SIGKILL); stopped rank 0",
            id="sigkill",
        ),
        pytest.param(
            "raise", 1, 1, "rank 1 exited with status 1; stopped rank 0", id="raise-after-init"
        ),
        # Rank 0 hosts JAX's coordination service: rank 1 may abort on its own the moment
        # rank 0 dies, before the launcher can stop it; its dump must still stay hidden.
        pytest.param(
            "kill",
            0,
            137,
            "rank 0 exited with status 137 (killed by SIGKILL); ",
            id="sigkill-coordinator",
        ),
        pytest.param(
            "early",
            1,
            1,
            "rank 1 reached its end while rank 0 still ran 1 s later",
            id="early-exit-0",
        ),
    ],
)
def test_a_failing_rank_ends_the_job_quickly_with_its_status(
    tmp_path: Path, mode: str, victim: int, expected: int, summary: str
) -> None:
    start = time.monotonic()
    rc, out, err = _launch(
        ["die", mode, str(victim), str(tmp_path)],
        timeout_seconds=DEAD_PEER_BOUND_SECONDS + 10,
        grace_seconds=2.0,
    )
    returned = time.time()
    elapsed = time.monotonic() - start
    assert rc == expected, f"stdout:\n{out}\nstderr:\n{err}"
    assert elapsed < DEAD_PEER_BOUND_SECONDS
    failed_at = json.loads((tmp_path / "failed.json").read_text())["time"]
    # The bound: the job reports a failure within 5 s of it (1 s of that is
    # the early-exit case's shutdown_timeout_seconds).
    assert returned - failed_at < 5.0, f"took {returned - failed_at:.1f} s"
    lines = err.splitlines()
    summaries = [line for line in lines if line.startswith("shardkit launch:")]
    assert len(summaries) == 1, err
    assert summaries[0].startswith(f"shardkit launch: {summary}"), err
    if summary.endswith("stopped rank 0"):
        assert summaries[0] == f"shardkit launch: {summary}"
    assert summaries == lines[-1:], "the summary is the last line"
    _assert_no_native_abort(out + err)
    assert not any("[Gloo]" in line for line in lines + out.splitlines())
    if mode == "raise":
        assert "[1] RuntimeError: rank failed on purpose" in lines
    peer = 1 - victim
    assert f"[{peer}] peer waiting in a collective for a rank that will never come" in (
        out.splitlines()
    )
    pids = json.loads((tmp_path / "peer.json").read_text())
    assert wait_gone([pids["peer"], pids["grandchild"]]) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_timeout_says_so_and_stops_every_rank(tmp_path: Path) -> None:
    start = time.monotonic()
    rc, out, err = _launch(["hold", str(tmp_path)], timeout_seconds=10.0, grace_seconds=1.0)
    assert rc == 124, f"stdout:\n{out}\nstderr:\n{err}"
    assert time.monotonic() - start < 10.0 + 5.0
    assert err.splitlines()[-1] == "shardkit launch: timed out after 10 s; stopped ranks 0, 1"
    _assert_no_native_abort(out + err)
    pids = [p for f in tmp_path.glob("rank*.json") for p in json.loads(f.read_text()).values()]
    assert len(pids) == 4, "both ranks joined before the timeout"
    assert wait_gone(pids) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_the_ranks_end_when_the_launcher_is_killed(tmp_path: Path) -> None:
    launcher = (
        "import sys\n"
        "from shardkit.distributed import launch\n"
        f"sys.exit(launch([sys.executable, {WORKER!r}, 'hold', {str(tmp_path)!r}], "
        "num_processes=2, devices_per_process=4, timeout_seconds=50))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 40
        while len(list(tmp_path.glob("rank*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        files = sorted(tmp_path.glob("rank*.json"))
        assert len(files) == 2, "both ranks joined"
        proc.kill()
        proc.wait()
        killed = time.monotonic()
    finally:
        proc.kill()
        proc.wait()
    pids = [p for f in files for p in json.loads(f.read_text()).values()]
    assert wait_gone(pids, timeout=5.0) == []
    assert time.monotonic() - killed < 5.0
