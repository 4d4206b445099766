from __future__ import annotations

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
