"""gloo's connection chatter is kept off stdout in cluster mode, as the launcher does."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import pytest

import shardkit.distributed as dist
from _matrix import FULL
from shardkit.distributed import _runtime
from shardkit.distributed._quiet import StdoutFilter

GLOO = b"[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"
CLUSTER = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")


def _filtered(*chunks: bytes, pause: float = 0.0) -> bytes:
    """What reaches a pipe's reader when ``chunks`` are written through a filter."""
    read_end, write_end = os.pipe()
    fd = os.dup(write_end)
    os.close(write_end)
    quiet = StdoutFilter(fd)
    quiet.start()
    try:
        for chunk in chunks:
            os.write(fd, chunk)
            time.sleep(pause)
    finally:
        quiet.stop()
        os.close(fd)
    out = b""
    while chunk := os.read(read_end, 65536):
        out += chunk
    os.close(read_end)
    return out


def test_the_filter_drops_gloo_lines_and_keeps_every_other_byte() -> None:
    interleaved = (
        b"[Gloo] Rank 1[Gloo] Rank 3 is connected to 7 peer ranks. "
        b"Expected number of connected peer ranks is : 7\n7\n"
    )
    # Two messages run together on one line; the second one's newline follows alone.
    run_together = GLOO + GLOO + b"\n\n"
    out = _filtered(
        b"step 1\n" + GLOO + b"\n",
        interleaved,
        run_together,
        b"\n",  # the user's own empty line
        b"bytes \xff\xfe\r\n",
        b"loss=0.5 " + GLOO + b"\n",
        b"the end, no newline",
    )
    assert out == b"step 1\n\nbytes \xff\xfe\r\nloss=0.5 \nthe end, no newline"


def test_a_partial_line_goes_out_without_waiting_for_its_end() -> None:
    read_end, write_end = os.pipe()
    fd = os.dup(write_end)
    os.close(write_end)
    quiet = StdoutFilter(fd)
    quiet.start()
    try:
        os.write(fd, b"Password: ")
        os.set_blocking(read_end, False)
        deadline = time.monotonic() + 5
        got = b""
        while got != b"Password: " and time.monotonic() < deadline:
            time.sleep(0.02)
            with contextlib.suppress(BlockingIOError):
                got += os.read(read_end, 100)
        assert got == b"Password: "
    finally:
        quiet.stop()
        os.close(fd)
        os.close(read_end)


class _Recorder:
    def __init__(self) -> None:
        self.started = 0

    def start(self) -> None:
        self.started += 1


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    """A SLURM-like environment, JAX's initialize stubbed, the filter recorded."""
    for name in (
        dist.COORDINATOR_ENV,
        dist.NUM_PROCESSES_ENV,
        dist.PROCESS_ID_ENV,
        dist.LOCAL_DEVICES_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    for name in CLUSTER:
        monkeypatch.setenv(name, "0")
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: None)
    recorder = _Recorder()
    monkeypatch.setattr(_runtime, "_stdout_filter", recorder)
    return recorder


def test_cluster_mode_filters_stdout_unless_verbose(cluster: _Recorder) -> None:
    assert dist.initialize(verbose=True).mode == "cluster"
    assert cluster.started == 0
    assert dist.initialize().mode == "cluster"
    assert cluster.started == 1


def test_verbose_takes_a_bool() -> None:
    with pytest.raises(TypeError, match=r"verbose takes a bool, got verbose='yes'"):
        dist.initialize(verbose="yes")  # type: ignore[arg-type]


_JOB = """
import sys
import shardkit
shardkit.use_cpu_devices(2)
import jax, jax.numpy as jnp
import shardkit.distributed as dist
info = dist.initialize(verbose=sys.argv[1] == "verbose")
mesh = jax.make_mesh((jax.device_count(),), ("x",))
x = jax.device_put(jnp.arange(8.0), jax.NamedSharding(mesh, jax.P("x")))
print(info.mode, info.num_processes, float(jax.jit(jnp.sum)(x)))
sys.stdout.write("the end")
"""


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_job_id() -> int:
    """A SLURM job id whose coordinator port is free here.

    JAX's SLURM support derives the coordinator's port from the job id:
    61440 + job id % 4096.
    """
    return next(j for j in range(os.getpid() % 4000, 4096) if _free(61440 + j))


def _slurm_env(job_id: int, rank: int) -> dict[str, str]:
    """This process's environment as SLURM sets it for ``rank`` of a 2-task job here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDKIT_", "SLURM_"))}
    return env | {
        "JAX_PLATFORMS": "cpu",
        "SLURM_JOB_ID": str(job_id),
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_NTASKS": "2",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
    }


def _slurm_job(verbose: bool) -> list[str]:
    """Two processes started as SLURM would (all on this host); their stdouts."""
    job_id = _free_job_id()
    procs = []
    for rank in (0, 1):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _JOB, "verbose" if verbose else "quiet"],
                env=_slurm_env(job_id, rank),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        )
    try:
        outputs = [proc.communicate(timeout=90) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    return [out.decode() for out, _ in outputs]


@pytest.mark.timeout(60)
def test_a_slurm_rank_without_coordinator_raises_within_its_timeout() -> None:
    # Rank 1 of a SLURM job whose rank 0 never starts: JAX's client would abort the
    # process after 300 s; initialize raises RuntimeError after its own timeout.
    job_id = _free_job_id()
    env = _slurm_env(job_id, 1)
    code = (
        "import shardkit.distributed as dist\n"
        "try:\n"
        "    dist.initialize(initialization_timeout_seconds=2)\n"
        "except RuntimeError as e:\n"
        "    print('RuntimeError:', e)\n"
    )
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=50
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("RuntimeError: initialize(): rank 1 of 2 found no coordinator")
    assert f":{61440 + job_id} within 2 s" in out.stdout
    assert time.monotonic() - started < 40


@pytest.mark.timeout(120)
def test_a_slurm_job_prints_no_gloo_lines() -> None:
    for out in _slurm_job(verbose=False):
        assert out == "cluster 2 28.0\nthe end"


@pytest.mark.skipif(not FULL, reason="a second 2-process job; SHARDKIT_FULL_TESTS=1 runs it")
@pytest.mark.timeout(120)
def test_a_verbose_slurm_job_shows_them() -> None:
    for out in _slurm_job(verbose=True):
        assert "[Gloo] Rank" in out
        assert out.endswith("cluster 2 28.0\nthe end")


def test_a_line_that_never_ends_still_goes_out() -> None:
    # A progress bar redrawn with \r every 10 ms never pauses and never ends its line.
    frames = [f"\r{i:3d}%".encode() for i in range(0, 101, 5)]
    read_end, write_end = os.pipe()
    fd = os.dup(write_end)
    os.close(write_end)
    quiet = StdoutFilter(fd)
    quiet.start()
    os.set_blocking(read_end, False)
    got = b""
    try:
        for frame in frames:
            os.write(fd, frame)
            time.sleep(0.01)
            with contextlib.suppress(BlockingIOError):
                got += os.read(read_end, 65536)
        # Most frames came through while the bar was still being drawn.
        assert got.count(b"%") >= 5, got
    finally:
        quiet.stop()
        os.close(fd)
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(read_end, 65536):
            got += chunk
    os.close(read_end)
    assert got == b"".join(frames)
