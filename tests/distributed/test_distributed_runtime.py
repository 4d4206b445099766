"""shardkit.distributed's runtime calls in this single test process."""

from __future__ import annotations

import os
import socket

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit.distributed as dist
from _meshes import make_mesh
from shardkit.distributed import (
    COORDINATOR_ENV,
    LOCAL_DEVICES_ENV,
    NUM_PROCESSES_ENV,
    PROCESS_ID_ENV,
    ProcessInfo,
    _runtime,
    gather,
    initialize,
    is_initialized,
    process_info,
)

LAUNCHER = (COORDINATOR_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV, LOCAL_DEVICES_ENV)
CLUSTER = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")


class _NoFilter:
    def start(self) -> None:
        """Leaves pytest's stdout alone (test_distributed_quiet.py tests the filter)."""


@pytest.fixture
def plain_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment with no launcher or cluster variables."""
    for name in [*LAUNCHER, *CLUSTER, "OMPI_MCA_orte_hnp_uri"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_runtime, "_stdout_filter", _NoFilter())
    return monkeypatch


def test_every_export_is_documented() -> None:
    for name in dist.__all__:
        obj = getattr(dist, name)
        if isinstance(obj, str):
            assert obj.startswith("SHARDKIT_"), name
        else:
            assert obj.__doc__, name


def test_a_plain_process_is_left_alone(plain_env: pytest.MonkeyPatch) -> None:
    del plain_env
    info = initialize()
    assert info == ProcessInfo(
        process_id=0,
        num_processes=1,
        local_device_count=len(jax.local_devices()),
        global_device_count=len(jax.devices()),
        mode="single",
    )
    assert not is_initialized()
    assert process_info() == info


def test_a_detected_cluster_goes_to_jax_auto_detection(plain_env: pytest.MonkeyPatch) -> None:
    calls = []
    for name in CLUSTER:
        plain_env.setenv(name, "0")
    plain_env.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    info = initialize()
    assert calls == [{"cluster_detection_method": None}]
    assert info.mode == "cluster"


def test_an_explicit_detection_method_is_passed_on(plain_env: pytest.MonkeyPatch) -> None:
    calls = []
    plain_env.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    assert initialize(cluster_detection_method="mpi4py").mode == "cluster"
    assert calls == [{"cluster_detection_method": "mpi4py"}]


def _launcher_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    defaults = {
        COORDINATOR_ENV: "127.0.0.1:1234",
        NUM_PROCESSES_ENV: "2",
        PROCESS_ID_ENV: "0",
        LOCAL_DEVICES_ENV: "4",
    }
    for name, value in (defaults | values).items():
        if value:
            monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        pytest.param({LOCAL_DEVICES_ENV: ""}, f"{LOCAL_DEVICES_ENV} missing", id="partial"),
        pytest.param({NUM_PROCESSES_ENV: "two"}, f"{NUM_PROCESSES_ENV}='two'", id="not-int"),
        pytest.param({NUM_PROCESSES_ENV: "0"}, f"{NUM_PROCESSES_ENV}=0", id="zero-processes"),
        pytest.param({PROCESS_ID_ENV: "2"}, f"{PROCESS_ID_ENV}=2 must be below", id="id-too-big"),
        pytest.param({LOCAL_DEVICES_ENV: "0"}, f"{LOCAL_DEVICES_ENV}=0", id="zero-devices"),
        pytest.param({COORDINATOR_ENV: "localhost"}, "host:port", id="no-port"),
    ],
)
def test_malformed_launcher_variables_are_rejected(
    plain_env: pytest.MonkeyPatch, values: dict[str, str], match: str
) -> None:
    _launcher_env(plain_env, **values)
    plain_env.setattr(jax.distributed, "initialize", pytest.fail)
    with pytest.raises(ValueError, match=match):
        initialize()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"heartbeat_timeout_seconds": 0}, ValueError, "heartbeat_timeout_seconds=0"),
        pytest.param({"shutdown_timeout_seconds": 1.5}, TypeError, "shutdown_timeout_seconds=1.5"),
        pytest.param(
            {"initialization_timeout_seconds": -1}, ValueError, "initialization_timeout_seconds=-1"
        ),
    ],
)
def test_bad_timeouts_are_rejected(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        initialize(**kwargs)


def test_gather_returns_the_global_array_as_numpy() -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    mesh = make_mesh("4x2")
    a = np.arange(12 * 6, dtype=np.int32).reshape(12, 6)
    x = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    result = gather(x)
    assert isinstance(result, np.ndarray)
    np.testing.assert_array_equal(result, a)
    np.testing.assert_array_equal(gather(jnp.ones(3)), np.ones(3))
    np.testing.assert_array_equal(gather([1, 2]), np.array([1, 2]))


def test_the_control_socket_is_adopted_only_when_it_is_one() -> None:
    from shardkit.distributed import _control

    ours, theirs = socket.socketpair()
    read_end, write_end = os.pipe()
    try:
        environ = {_control.CONTROL_FD_ENV: str(theirs.fileno())}
        adopted = _control.take_control_socket(environ)
        assert adopted is not None
        assert environ == {}, "a later subprocess must not adopt the number"
        assert not os.get_inheritable(adopted.fileno())
        adopted.sendall(b"joined 3\n")
        assert ours.recv(64) == b"joined 3\n"
        adopted.detach()
        for value in (str(read_end), "not-a-number", "99999"):
            environ = {_control.CONTROL_FD_ENV: value}
            assert _control.take_control_socket(environ) is None, value
            assert environ == {}
        assert _control.take_control_socket({}) is None
    finally:
        ours.close()
        theirs.close()
        os.close(read_end)
        os.close(write_end)
