"""Optimizers and the non-finite policy on JAX's multi-process runtime: 2 processes x 4 devices.

Runs with ``SHARDKIT_FULL_TESTS=1`` (about a minute on two cores): each optimizer of
``_two_process.CASES`` trains under dp, fsdp and tp on the 8 devices of both
processes, with the losses of one device in this process, and a batch holding a NaN
is skipped and counted on every process; so do the pipelines ``pp`` (8 stages across
both processes) and ``dp_pp`` (a row of 4 stages per process).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import pytest
from _train_util import numpy_batch

from _matrix import FULL
from shardkit import train
from shardkit.distributed import launch
from shardkit.testing import assert_close

WORKER = Path(__file__).with_name("_two_process.py")


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
@pytest.mark.skipif(not FULL, reason="two processes take a minute: SHARDKIT_FULL_TESTS=1")
def test_optimizers_train_on_two_processes_like_one_device(tmp_path: Path) -> None:
    import _two_process as worker

    out_file = tmp_path / "train.json"
    out, err = io.StringIO(), io.StringIO()
    rc = launch(
        [sys.executable, str(WORKER), str(out_file)],
        num_processes=2,
        devices_per_process=4,
        timeout_seconds=550,
        stdout=out,
        stderr=err,
    )
    assert rc == 0, f"stdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}"
    results = json.loads(out_file.read_text())
    assert len(results) == len(worker.CASES) + len(worker.PIPELINES)
    ref = _one_device(train.MLP(worker.PP_SIZES), optax.adam(1e-2))
    for case in worker.PIPELINES:
        _assert_like(results[case], ref, f"{case} on 2 processes")
    for name in worker.OPTIMIZERS:
        ref = _one_device(train.MLP(worker.SIZES), worker.OPTIMIZERS[name]())
        for strategy in worker.MESHES:
            _assert_like(results[f"{name} {strategy}"], ref, f"{name} {strategy} on 2 processes")


def _one_device(model: train.MLP, optimizer: Any) -> list[float]:
    """The losses of one device over the workers' steps."""
    import _two_process as worker

    step, state = train.make_train_step(
        model, optimizer, strategy="single", mesh=None, key=jax.random.key(0)
    )
    # The workers draw the batch in place from key 1: the same values as here.
    batch = numpy_batch(model, 32, seed=1)
    ref = []
    for _ in range(worker.STEPS):
        state, loss = step(state, batch)
        ref.append(float(loss))
    return ref


def _assert_like(got: dict[str, Any], ref: list[float], what: str) -> None:
    """The losses of one device; the NaN batch skipped and counted."""
    import _two_process as worker

    assert_close(np.array(got["losses"]), np.array(ref), dtype=np.float32, what=what)
    assert np.isnan(got["nan_loss"]), what
    assert (got["step"], got["skipped"]) == (worker.STEPS + 1, 1), what
