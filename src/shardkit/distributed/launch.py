"""Run a command as several local processes of one JAX job.

:func:`launch` is the local stand-in for ``srun`` or ``mpirun``: it starts
``num_processes`` copies of a command on this machine, tells each one who it is
through environment variables, prefixes their output with their rank, and makes sure
that one dead process takes the whole job down instead of leaving the others
blocked in a collective.

Each child sees these environment variables (read by
:func:`shardkit.distributed.initialize`):

``SHARDKIT_COORDINATOR``
  ``host:port`` of the JAX coordination service that process 0 starts.
``SHARDKIT_NUM_PROCESSES``
  Number of processes in the job.
``SHARDKIT_PROCESS_ID``
  This process's rank, ``0 <= rank < SHARDKIT_NUM_PROCESSES``.
``SHARDKIT_LOCAL_DEVICES``
  Number of simulated CPU devices this process should create.

and ``PYTHONUNBUFFERED=1`` so that Python children's output arrives line by line.
POSIX only: children run in their own sessions so that signals reach their
descendants too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, TextIO

__all__ = [
    "COORDINATOR_ENV",
    "LOCAL_DEVICES_ENV",
    "NUM_PROCESSES_ENV",
    "PROCESS_ID_ENV",
    "launch",
]

COORDINATOR_ENV = "SHARDKIT_COORDINATOR"
"""Environment variable holding the coordinator's ``host:port``."""
NUM_PROCESSES_ENV = "SHARDKIT_NUM_PROCESSES"
"""Environment variable holding the number of processes in the job."""
PROCESS_ID_ENV = "SHARDKIT_PROCESS_ID"
"""Environment variable holding this process's rank."""
LOCAL_DEVICES_ENV = "SHARDKIT_LOCAL_DEVICES"
"""Environment variable holding the number of simulated CPU devices per process."""

# Exit status returned when ``timeout_seconds`` runs out, as coreutils' timeout(1).
TIMEOUT_EXIT_CODE = 124
_HOST = "127.0.0.1"
_POLL_SECONDS = 0.05
_READ_CHUNK = 65536
# A partial line longer than this is written out anyway (progress bars, binary junk).
_MAX_PENDING_LINE = 65536
# How long output from a finished job's leftover pipes is still drained.
_DRAIN_SECONDS = 2.0


def _launch_error(message: str) -> ValueError:
    return ValueError(f"launch(): {message}")


def _check_int(name: str, value: object, minimum: int, remedy: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"launch(): {name} takes an int, got {name}={value!r} ({type(value).__name__})"
        )
    if value < minimum:
        raise _launch_error(f"{name}={value} must be at least {minimum}; {remedy}")
    return value


def _check_command(command: object) -> list[str]:
    if isinstance(command, str | bytes):
        raise TypeError(
            f"launch(): command must be a sequence of arguments, got the string {command!r}; "
            "split it first, e.g. shlex.split(command) or [sys.executable, 'script.py']"
        )
    if not isinstance(command, Sequence):
        raise TypeError(
            f"launch(): command must be a sequence of strings, got {type(command).__name__}"
        )
    args = list(command)
    if not args:
        raise _launch_error(
            "command=[] is empty; pass the program and its arguments, "
            "e.g. [sys.executable, 'script.py']"
        )
    bad = [a for a in args if not isinstance(a, str | os.PathLike)]
    if bad:
        raise TypeError(f"launch(): every element of command must be a str, got {bad[0]!r}")
    return [os.fspath(a) for a in args]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return sock.getsockname()[1]


def _exit_code(returncode: int) -> int:
    """Shell convention: a child killed by signal N reports 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclasses.dataclass
class _Stream:
    rank: int
    pipe: IO[bytes]
    out: TextIO
    pending: bytearray = dataclasses.field(default_factory=bytearray)


class _Prefixer:
    """Reads every child's pipes and writes whole lines, each prefixed with its rank."""

    def __init__(self, num_processes: int, stdout: TextIO, stderr: TextIO) -> None:
        self._selector = selectors.DefaultSelector()
        self._width = len(str(num_processes - 1))
        self._stdout = stdout
        self._stderr = stderr

    def add(self, rank: int, proc: subprocess.Popen[bytes]) -> None:
        for pipe, out in ((proc.stdout, self._stdout), (proc.stderr, self._stderr)):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            self._selector.register(pipe, selectors.EVENT_READ, _Stream(rank, pipe, out))

    @property
    def open(self) -> bool:
        return bool(self._selector.get_map())

    def pump(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for output and writes what arrived."""
        if not self.open:
            time.sleep(timeout)
            return
        touched: set[int] = set()
        for key, _ in self._selector.select(timeout):
            stream: _Stream = key.data
            try:
                chunk = os.read(stream.pipe.fileno(), _READ_CHUNK)
            except BlockingIOError:
                continue
            if chunk:
                stream.pending += chunk
                self._write_lines(stream, final=False)
            else:
                self._write_lines(stream, final=True)
                self._close(stream)
            touched.add(id(stream.out))
        for out in (self._stdout, self._stderr):
            if id(out) in touched:
                out.flush()

    def close(self) -> None:
        """Writes any partial lines left and closes every pipe."""
        for key in list(self._selector.get_map().values()):
            stream: _Stream = key.data
            self._write_lines(stream, final=True)
            stream.out.flush()
            self._close(stream)
        self._selector.close()

    def _close(self, stream: _Stream) -> None:
        self._selector.unregister(stream.pipe)
        stream.pipe.close()

    def _write_lines(self, stream: _Stream, *, final: bool) -> None:
        *lines, rest = stream.pending.split(b"\n")
        if final or len(rest) > _MAX_PENDING_LINE:
            if rest:
                lines.append(rest)
            rest = b""
        stream.pending = bytearray(rest)
        prefix = f"[{stream.rank:>{self._width}}] "
        for line in lines:
            text = line.decode("utf-8", errors="replace").rstrip("\r")
            stream.out.write(f"{prefix}{text}\n")


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signals the child's whole process group (the child leads it)."""
    # The group may be gone already (PermissionError: macOS reports a zombie leader so).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class _Job:
    def __init__(self, prefixer: _Prefixer) -> None:
        self.prefixer = prefixer
        self.procs: list[subprocess.Popen[bytes]] = []

    def poll_all(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def stop(self, grace_seconds: float) -> None:
        """SIGTERM to every child's group, SIGKILL to all after ``grace_seconds``.

        Signals the groups of children that have exited too, so their descendants go.
        A second Ctrl-C while waiting skips the rest of the grace period.
        """
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        try:
            while any(r is None for r in self.poll_all()) and time.monotonic() < deadline:
                self.prefixer.pump(_POLL_SECONDS)
        finally:
            for proc in self.procs:
                _signal_group(proc, signal.SIGKILL)
            for proc in self.procs:
                proc.wait()

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.prefixer.open and time.monotonic() < deadline:
            self.prefixer.pump(_POLL_SECONDS)


class _Terminated(BaseException):
    """Raised in the launcher when it receives SIGTERM, so children get cleaned up."""


@contextlib.contextmanager
def _sigterm_ends_children() -> Iterator[None]:
    """Makes a SIGTERM to the launcher end its children first, then the launcher.

    Only where SIGTERM has its default action (the process dies) and in the main
    thread: a program with its own SIGTERM handler keeps its policy, and the
    children are still ended if that handler raises.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def handler(signum: int, frame: object) -> None:
        del signum, frame
        raise _Terminated

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except _Terminated:
        # The children are gone (launch's cleanup ran); now die of SIGTERM as before.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def launch(
    command: Sequence[str],
    /,
    *,
    num_processes: int,
    devices_per_process: int = 1,
    port: int | None = None,
    grace_seconds: float = 5.0,
    timeout_seconds: float | None = None,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Runs ``command`` as ``num_processes`` local processes of one JAX job.

    Each process gets the ``SHARDKIT_*`` variables described in this module's
    docstring (call :func:`shardkit.distributed.initialize` in the script to use
    them). Every line a process writes to stdout or stderr is copied to ``stdout`` or
    ``stderr`` prefixed with its rank, e.g. ``[1] loss=0.25``.

    When a process fails (non-zero exit or killed by a signal), the others are sent
    SIGTERM, then SIGKILL after ``grace_seconds``, so a job never hangs on a dead
    peer. Signals go to each child's process group, so the children's own
    subprocesses end too. A KeyboardInterrupt (Ctrl-C) or a SIGTERM to the launcher
    ends the children the same way before it propagates.

    Args:
      command: program and arguments, e.g. ``[sys.executable, "train.py"]``.
      num_processes: number of processes to start (at least 1).
      devices_per_process: simulated CPU devices per process (at least 1), passed
        on as ``SHARDKIT_LOCAL_DEVICES``.
      port: coordinator port on 127.0.0.1; ``None`` picks a free one.
      grace_seconds: how long processes get to exit after SIGTERM before SIGKILL.
      timeout_seconds: end the whole job after this many seconds and return 124;
        ``None`` waits for ever.
      env: extra environment variables for the children, on top of this process's.
      stdout: where the children's prefixed stdout goes (default ``sys.stdout``).
      stderr: where the children's prefixed stderr goes (default ``sys.stderr``).

    Returns:
      0 if every process exited with 0; otherwise the exit status of the first
      process seen failing (``128 + N`` for a process killed by signal ``N``), or 124
      if ``timeout_seconds`` ran out.

    Raises:
      TypeError: ``command`` is a string or holds non-strings, or a count is not an
        int.
      ValueError: ``command`` is empty, or ``num_processes``,
        ``devices_per_process``, ``port``, ``grace_seconds`` or ``timeout_seconds``
        is out of range.
      OSError: the program could not be started (e.g. FileNotFoundError).
      KeyboardInterrupt: re-raised after the children were ended.

    Example:
      >>> import sys
      >>> from shardkit.distributed import launch
      >>> launch([sys.executable, "-c", "print('hi')"], num_processes=1)
      [0] hi
      0
    """
    args = _check_command(command)
    _check_int(
        "num_processes", num_processes, 1, "start at least one process (e.g. num_processes=2)"
    )
    _check_int(
        "devices_per_process",
        devices_per_process,
        1,
        "every process needs at least one CPU device (e.g. devices_per_process=4)",
    )
    if port is not None:
        _check_int("port", port, 1, "pass a port in 1..65535 or port=None to pick a free one")
        if port > 65535:
            raise _launch_error(f"port={port} must be at most 65535; or pass port=None")
    for name, value in (("grace_seconds", grace_seconds), ("timeout_seconds", timeout_seconds)):
        if isinstance(value, bool) or not isinstance(value, int | float | None):
            raise TypeError(
                f"launch(): {name} takes a number of seconds, got {name}={value!r} "
                f"({type(value).__name__})"
            )
    if not grace_seconds >= 0:
        raise _launch_error(f"grace_seconds={grace_seconds} must be >= 0")
    if timeout_seconds is not None and not timeout_seconds > 0:
        raise _launch_error(f"timeout_seconds={timeout_seconds} must be > 0, or None for no limit")

    coordinator = f"{_HOST}:{port if port is not None else _free_port()}"
    base_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    base_env |= {
        COORDINATOR_ENV: coordinator,
        NUM_PROCESSES_ENV: str(num_processes),
        LOCAL_DEVICES_ENV: str(devices_per_process),
    }
    job = _Job(_Prefixer(num_processes, stdout or sys.stdout, stderr or sys.stderr))
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    with _sigterm_ends_children():
        try:
            for rank in range(num_processes):
                proc = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={**base_env, PROCESS_ID_ENV: str(rank)},
                    start_new_session=True,
                )
                job.procs.append(proc)
                job.prefixer.add(rank, proc)
            code = _supervise(job, deadline)
            # Success or failure, nothing the job started outlives it. (A finished child's
            # pid stays reserved while its group has members, so the group signalled
            # is its own; an empty group's id could in theory be reused meanwhile, but
            # Linux hands out pids in sequence up to pid_max, far beyond a job's churn.)
            job.stop(0.0 if code == 0 else grace_seconds)
            job.drain(_DRAIN_SECONDS)
            return code
        except BaseException:
            job.stop(grace_seconds)
            job.drain(_DRAIN_SECONDS)
            raise
        finally:
            job.prefixer.close()


def _supervise(job: _Job, deadline: float | None) -> int:
    """Waits until every child exited with 0 (returns 0) or one failed (its code)."""
    while True:
        job.prefixer.pump(_POLL_SECONDS)
        codes = job.poll_all()
        failed = [c for c in codes if c is not None and c != 0]
        if failed:
            return _exit_code(failed[0])
        if all(c == 0 for c in codes):
            return 0
        if deadline is not None and time.monotonic() > deadline:
            return TIMEOUT_EXIT_CODE
