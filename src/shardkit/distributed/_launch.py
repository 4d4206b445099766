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
``SHARDKIT_CONTROL_FD``
  A socket to the launcher, through which ``initialize`` reports that the process
  joined the job and, at exit, agrees with the launcher how to leave it (see
  ``shardkit.distributed._control``).

and ``PYTHONUNBUFFERED=1`` so that Python children's output arrives line by line.
POSIX only (Linux and macOS): children run in their own sessions so that signals
reach their descendants too, and a small watchdog process ends them all if the
launcher itself dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TextIO

from shardkit.distributed import _control, _job
from shardkit.distributed._output import Output
from shardkit.distributed._watchdog import Watchdog

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

_HOST = "127.0.0.1"
# How long output from a finished job's leftover pipes is still drained.
_DRAIN_SECONDS = 2.0
# Command words that mean "this Python": the launcher's own interpreter, so that a
# job runs in the launcher's environment whether or not a venv is activated.
_PYTHON_NAMES = ("python", "python3")


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


def _program(args: list[str], path: str | None) -> list[str]:
    """Resolves the program as a shell would, failing early with the shell's reasons.

    ``python``/``python3`` mean the launcher's interpreter. Raises FileNotFoundError
    (a shell's status 127), or IsADirectoryError / PermissionError (status 126), with
    one-line messages, before any process starts.
    """
    program = args[0]
    if program in _PYTHON_NAMES and sys.executable:
        return [sys.executable, *args[1:]]
    if os.sep not in program:
        found = shutil.which(program, path=path)
        if found is None:
            raise FileNotFoundError(
                f"launch(): command not found: {program!r} is not on PATH; "
                "give its path, or run a script with `python script.py`",
            )
        return args
    if os.path.isdir(program):
        raise IsADirectoryError(
            f"launch(): {program} is a directory, not a program; "
            "name the program to run, e.g. `python script.py`",
        )
    if not os.path.exists(program):
        raise FileNotFoundError(f"launch(): no such file: {program}")
    if not os.access(program, os.X_OK):
        raise PermissionError(
            f"launch(): {program} is not executable; run it through its interpreter "
            f"(e.g. `python {program}`) or make it executable (chmod +x)",
        )
    return args


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return sock.getsockname()[1]


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
    verbose: bool = False,
) -> int:
    """Runs ``command`` as ``num_processes`` local processes of one JAX job.

    Each process gets the ``SHARDKIT_*`` variables described in this module's
    docstring (call :func:`shardkit.distributed.initialize` in the script to use
    them). Every line a process writes to stdout or stderr is copied to ``stdout`` or
    ``stderr`` prefixed with its rank, e.g. ``[1] loss=0.25``.

    When a process fails (non-zero exit, killed by a signal, or an uncaught
    exception after ``initialize``), the others are sent SIGTERM, then SIGKILL after
    ``grace_seconds``, before JAX's own failure detection would abort them with
    native stack dumps; one line on ``stderr`` says what happened, e.g.
    ``shardkit launch: rank 1 exited with status 1; stopped rank 0``. A process that
    reaches its end while a peer that joined the job with it still runs for longer
    than ``initialize``'s ``shutdown_timeout_seconds`` (typically: the peer waits in
    a collective for it) fails the job with status 1 the same way. Signals go to
    each child's process group, so the children's own subprocesses end too. A
    KeyboardInterrupt (Ctrl-C) or a SIGTERM to the launcher ends the children the
    same way before it propagates; a SIGKILL to the launcher ends them through the
    watchdog.

    ``python`` or ``python3`` as the program means this interpreter
    (``sys.executable``). Unless ``verbose``, gloo's connection chatter is dropped
    and a rank's native abort report is shown only when that rank's failure ended
    the job. A successful job whose processes never called
    :func:`shardkit.distributed.initialize` gets a warning: each of them ran alone.

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
      stderr: where the children's prefixed stderr and the launcher's own messages
        go (default ``sys.stderr``).
      verbose: show every line the processes write, runtime noise included.

    Returns:
      0 if every process exited with 0; otherwise the exit status of the first
      process seen failing (``128 + N`` for a process killed by signal ``N``), 1 if a
      process ended early while its peers still ran, or 124 if
      ``timeout_seconds`` ran out.

    Raises:
      TypeError: ``command`` is a string or holds non-strings, or a count is not an
        int.
      ValueError: ``command`` is empty, or ``num_processes``,
        ``devices_per_process``, ``port``, ``grace_seconds`` or ``timeout_seconds``
        is out of range.
      FileNotFoundError: the program does not exist (a shell's status 127).
      IsADirectoryError: the program is a directory (a shell's status 126).
      PermissionError: the program is not executable (a shell's status 126).
      OSError: the program could not be started for another reason.
      KeyboardInterrupt: re-raised after the children were ended.

    Example:
      >>> import sys
      >>> from shardkit.distributed import launch
      >>> launch([sys.executable, "-c", "print('hi')"], num_processes=1)
      [0] hi
      0
    """
    args = _check_command(command)
    _check_launch(num_processes, devices_per_process, port, grace_seconds, timeout_seconds, verbose)

    coordinator = f"{_HOST}:{port if port is not None else _free_port()}"
    base_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    base_env |= {
        COORDINATOR_ENV: coordinator,
        NUM_PROCESSES_ENV: str(num_processes),
        LOCAL_DEVICES_ENV: str(devices_per_process),
    }
    args = _program(args, base_env.get("PATH"))
    job = _job.Job(
        Output(num_processes, stdout or sys.stdout, stderr or sys.stderr, verbose=verbose)
    )
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    watchdog = Watchdog()
    with _sigterm_ends_children():
        try:
            for rank in range(num_processes):
                ours, theirs = socket.socketpair()
                with theirs:
                    proc = subprocess.Popen(
                        args,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env={
                            **base_env,
                            PROCESS_ID_ENV: str(rank),
                            _control.CONTROL_FD_ENV: str(theirs.fileno()),
                        },
                        pass_fds=(theirs.fileno(),),
                        start_new_session=True,
                    )
                watchdog.watch(proc.pid)
                job.add(rank, proc, ours)
            outcome = job.supervise(deadline)
            # Success or failure, nothing the job started outlives it.
            stopped = job.end(0.0 if outcome.kind == "success" else grace_seconds)
            job.drain(_DRAIN_SECONDS)
            return _report(
                job, outcome, stopped, timeout_seconds, num_processes, devices_per_process
            )
        except BaseException:
            job.end(grace_seconds)
            job.drain(_DRAIN_SECONDS)
            raise
        finally:
            job.close()
            watchdog.close()


def _check_launch(
    num_processes: int,
    devices_per_process: int,
    port: int | None,
    grace_seconds: float,
    timeout_seconds: float | None,
    verbose: bool,
) -> None:
    """:func:`launch`'s options other than ``command``, each named with its remedy."""
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
    if not isinstance(verbose, bool):
        raise TypeError(f"launch(): verbose takes a bool, got verbose={verbose!r}")
    if not grace_seconds >= 0:
        raise _launch_error(f"grace_seconds={grace_seconds} must be >= 0")
    if timeout_seconds is not None and not timeout_seconds > 0:
        raise _launch_error(f"timeout_seconds={timeout_seconds} must be > 0, or None for no limit")


def _report(
    job: _job.Job,
    outcome: _job.JobOutcome,
    stopped: list[int],
    timeout_seconds: float | None,
    num_processes: int,
    devices_per_process: int,
) -> int:
    """Writes the held-back abort reports and the summary line; returns the status."""
    output = job.output
    cause = outcome.rank
    for rank in job.ranks:
        if outcome.kind in ("success", "timeout") or rank is cause:
            output.release(rank.rank)
        else:
            output.discard(rank.rank)
    line = _job.summary(outcome, stopped, job, timeout_seconds)
    if line is not None:
        output.message(line)
    if outcome.kind == "timeout":
        return _job.TIMEOUT_EXIT_CODE
    if outcome.kind == "early":
        return _job.EARLY_EXIT_CODE
    if outcome.kind == "success":
        alone = [r.rank for r in job.ranks if not r.joined]
        if alone:
            output.message(
                f"warning: {_job.ranks_text(alone)} never called "
                "shardkit.distributed.initialize(), so "
                f"{'it' if len(alone) == 1 else 'each'} ran alone on JAX's default devices "
                f"instead of in one job of {num_processes} x {devices_per_process} devices; "
                "call it first thing in the script"
            )
        return 0
    assert cause is not None
    assert cause.code is not None
    return cause.code
