"""Optimizers and the non-finite policy on JAX's multi-process runtime: 2 processes x 4 devices.

Runs with ``SHARDKIT_FULL_TESTS=1`` (about a minute on two cores): each optimizer of
``_two_process.CASES`` trains under dp, fsdp and tp on the 8 devices of both
processes, with the losses of one device in this process, and a batch holding a NaN
is skipped and counted on every process.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import jax
import numpy as np
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
    assert len(results) == len(worker.CASES)
    model = train.MLP(worker.SIZES)
    for name in worker.OPTIMIZERS:
        step, state = train.make_train_step(
            model, worker.OPTIMIZERS[name](), strategy="single", mesh=None, key=jax.random.key(0)
        )
        # The workers draw the batch in place from key 1: the same values as here.
        batch = numpy_batch(model, 32, seed=1)
        ref = []
        for _ in range(worker.STEPS):
            state, loss = step(state, batch)
            ref.append(float(loss))
        for strategy in worker.MESHES:
            got = results[f"{name} {strategy}"]
            what = f"{name} {strategy} on 2 processes"
            assert_close(np.array(got["losses"]), np.array(ref), dtype=np.float32, what=what)
            assert np.isnan(got["nan_loss"]), what
            assert (got["step"], got["skipped"]) == (worker.STEPS + 1, 1), what
