"""JAX jobs of 2 processes x 4 CPU devices under shardkit.distributed.launch."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from _procs import wait_gone
from _worker import compute, data

from shardkit.distributed import launch

WORKER = str(Path(__file__).with_name("_worker.py"))
# Bound on how long launch may take to report a dead peer (the requirement).
DEAD_PEER_BOUND_SECONDS = 30.0


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    """The worker's computation on this process's 8 simulated devices."""
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    return {k: np.asarray(v) for k, v in compute(jax.make_mesh((8,), ("x",))).items()}


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


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("mode", "expected"),
    [pytest.param("exit", 3, id="exit-3"), pytest.param("kill", 137, id="sigkill")],
)
def test_a_dead_peer_ends_the_job_quickly_and_leaves_no_orphans(
    tmp_path: Path, mode: str, expected: int
) -> None:
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    rc = launch(
        [sys.executable, WORKER, "die", mode, str(tmp_path)],
        num_processes=2,
        devices_per_process=4,
        timeout_seconds=DEAD_PEER_BOUND_SECONDS + 10,
        stdout=out,
        stderr=err,
    )
    elapsed = time.monotonic() - start
    assert rc == expected, f"stdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}"
    assert elapsed < DEAD_PEER_BOUND_SECONDS
    assert "[0] rank 0 waiting for a peer that will never come" in out.getvalue().splitlines()
    pids = json.loads((tmp_path / "rank0.json").read_text())
    assert wait_gone([pids["rank0"], pids["grandchild"]]) == []
