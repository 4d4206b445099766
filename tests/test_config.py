from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest

import shardkit
from shardkit._config import accelerator_present, pin_cpu_threads


def test_use_cpu_devices_same_count_is_noop() -> None:
    shardkit.use_cpu_devices(8)
    assert len(jax.devices("cpu")) == 8


def test_use_cpu_devices_other_count_after_start_raises() -> None:
    jax.devices()
    with pytest.raises(RuntimeError, match=r"use_cpu_devices\(n=4\).*already started with 8"):
        shardkit.use_cpu_devices(4)


@pytest.mark.parametrize(
    ("n", "exc"), [(0, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_use_cpu_devices_bad_n(n: object, exc: type[Exception]) -> None:
    with pytest.raises(exc, match="n="):
        shardkit.use_cpu_devices(n)  # type: ignore[arg-type]


def test_use_cpu_devices_in_fresh_process_sets_count_and_pins() -> None:
    code = (
        "import os, shardkit, jax; shardkit.use_cpu_devices(3); "
        "print(len(jax.devices()), os.environ['XLA_FLAGS'], os.environ['OPENBLAS_NUM_THREADS'])"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "OPENBLAS_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout.split()
    assert out[0] == "3"
    assert "--xla_cpu_multi_thread_eigen=false" in out
    assert out[-1] == "1"


def test_use_cpu_devices_pins_a_blas_loaded_before_it() -> None:
    # SciPy imported first: its BLAS (which jaxlib's CPU LAPACK kernels call) read its
    # thread count at load time, before the variables were set; it is limited at run
    # time instead (a sharded solve ran 6x slower here with it multi-threaded).
    code = (
        "import scipy.linalg, threadpoolctl, shardkit; "
        "before = [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas']; "
        "shardkit.use_cpu_devices(2); "
        "after = [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas']; "
        "import json; print(json.dumps([before, after]))"
    )
    blas = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS")
    env = {k: v for k, v in os.environ.items() if k not in blas}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout
    before, after = json.loads(out)
    assert after, out  # SciPy's BLAS was found
    assert set(after) == {1}, out
    assert len(before) == len(after)


def test_pin_cpu_threads_keeps_user_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true --foo=1")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    pin_cpu_threads()
    flags = os.environ["XLA_FLAGS"].split()
    assert "--xla_cpu_multi_thread_eigen=true" in flags
    assert "--foo=1" in flags
    assert "intra_op_parallelism_threads=1" in flags
    assert os.environ["OMP_NUM_THREADS"] == "4"


@pytest.mark.parametrize(("value", "want"), [("cpu", False), ("cuda", True), ("cpu,tpu", True)])
def test_accelerator_present_follows_jax_platforms(
    monkeypatch: pytest.MonkeyPatch, value: str, want: bool
) -> None:
    monkeypatch.setenv("JAX_PLATFORMS", value)
    assert accelerator_present() is want
