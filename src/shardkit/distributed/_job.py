"""Supervising a running job: who failed first, and ending the rest cleanly.

A job of JAX processes fails in ways that a plain "wait for the children" launcher
turns into a hang or a native abort: a process that dies leaves its peers blocked in
a collective until JAX's heartbeat timeout aborts them with a stack dump, and one
that exits early (even with status 0) leaves its peers waiting at JAX's shutdown
barrier until that times out and aborts everyone. :class:`Job` watches both the
exit statuses and the messages of :mod:`shardkit.distributed._control`, decides
which process's failure ended the job, and ends the others itself: non-coordinator
ranks first, rank 0 (which hosts JAX's coordination service, whose loss aborts every
other rank at once) last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from typing import Literal

from shardkit.distributed import _control
from shardkit.distributed._output import Output

POLL_SECONDS = 0.05
TIMEOUT_EXIT_CODE = 124
# The job's status when a rank left early (status 0 or unknown) and peers were stuck.
EARLY_EXIT_CODE = 1
_SIGABRT_CODE = 128 + signal.SIGABRT
# How long a failure that may be a consequence waits for its cause to be noticed.
_SETTLE_SECONDS = 1.0


def exit_code(returncode: int) -> int:
    """Shell convention: a child killed by signal N reports 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def describe(code: int) -> str:
    """``status 137 (killed by SIGKILL)`` for a signal, ``status 3`` otherwise."""
    if code > 128:
        with contextlib.suppress(ValueError):
            return f"status {code} (killed by {signal.Signals(code - 128).name})"
    return f"status {code}"


def _blame(rank: Rank) -> int:
    """How surely a rank's failure is a cause rather than a consequence (0: surest).

    A kill by a signal other than SIGABRT came from outside (the user, the OOM
    killer, a crash). A status or an uncaught exception may be a rank reacting to a
    peer that vanished under a collective; SIGABRT is what JAX does to every rank
    whose coordination service (rank 0) died.
    """
    if rank.code is None or rank.code <= 128:
        return 1
    return 2 if rank.code == _SIGABRT_CODE else 0


def _seen(rank: Rank) -> float:
    """When the launcher learned of the rank's failure."""
    return rank.exiting_since if rank.alive else rank.ended_at


def ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


@dataclasses.dataclass
class Rank:
    """One process of the job and what the launcher knows about it."""

    rank: int
    proc: subprocess.Popen[bytes]
    control: socket.socket
    joined: bool = False
    window: float = 0.0
    # The status it announced at its exit: an int, _control.UNKNOWN_STATUS, or None.
    exiting: str | None = None
    exiting_since: float = 0.0
    answered: bool = False
    code: int | None = None
    ended_at: float = 0.0
    pending: bytearray = dataclasses.field(default_factory=bytearray)

    @property
    def alive(self) -> bool:
        return self.code is None

    @property
    def raised(self) -> bool:
        """Whether it announced a failing status at its exit (an uncaught exception)."""
        return self.exiting not in (None, _control.UNKNOWN_STATUS, "0")

    def answer(self, verdict: str) -> None:
        if not self.answered:
            self.answered = True
            with contextlib.suppress(OSError):
                self.control.sendall(f"{verdict}\n".encode("ascii"))


@dataclasses.dataclass(frozen=True)
class JobOutcome:
    """Why supervision ended: the cause and the job's exit status (maybe not yet known)."""

    kind: Literal["success", "failed", "raised", "early", "timeout"]
    rank: Rank | None = None


class Job:
    """The ranks of a running job, their output and their control messages."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.ranks: list[Rank] = []

    def add(self, rank: int, proc: subprocess.Popen[bytes], control: socket.socket) -> None:
        assert proc.stdout is not None
        assert proc.stderr is not None
        self.output.add(rank, proc.stdout, proc.stderr)
        control.setblocking(False)
        entry = Rank(rank, proc, control)
        self.output.selector.register(control, selectors.EVENT_READ, entry)
        self.ranks.append(entry)

    def pump(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for output or messages and handles them."""
        if not self.output.selector.get_map():
            time.sleep(timeout)
        else:
            for key, _ in self.output.selector.select(timeout):
                if not self.output.read(key.data):
                    self._receive(key.data)
            self.output.flush()
        self._reap()

    def _receive(self, rank: Rank) -> None:
        try:
            chunk = rank.control.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.output.selector.unregister(rank.control)
            return
        rank.pending += chunk
        *lines, rest = rank.pending.split(b"\n")
        rank.pending = bytearray(rest)
        for line in lines:
            word, _, value = line.decode("ascii", errors="replace").partition(" ")
            if word == _control.JOINED:
                rank.joined = True
                with contextlib.suppress(ValueError):
                    rank.window = float(value)
            elif word == _control.EXITING and rank.exiting is None:
                rank.exiting = value
                rank.exiting_since = time.monotonic()

    def _reap(self) -> None:
        now = time.monotonic()
        for rank in self.ranks:
            if rank.code is None and (returncode := rank.proc.poll()) is not None:
                rank.code = exit_code(returncode)
                rank.ended_at = now

    def supervise(self, deadline: float | None) -> JobOutcome:
        """Follows the job until it succeeds, a rank fails, or time runs out."""
        while True:
            self.pump(POLL_SECONDS)
            now = time.monotonic()
            failed = [r for r in self.ranks if r.code not in (None, 0)]
            joined = [r for r in self.ranks if r.joined]
            if not failed:
                if all(r.code == 0 for r in self.ranks):
                    return JobOutcome("success")
                if joined and all(r.exiting is not None for r in joined):
                    # Everyone is at its exit: JAX's shutdown barrier completes at once.
                    for r in joined:
                        r.answer(_control.SHUTDOWN)
            raised = [r for r in self.ranks if r.alive and not r.answered and r.raised]
            suspects = failed + raised
            if suspects:
                # A failure seen first may still be the consequence of another: a rank
                # in a collective raises ("Socket closed") or aborts the moment a peer
                # dies, and a busy launcher can poll between the two deaths. Give the
                # real cause a moment to show, then prefer it.
                cause = min(suspects, key=lambda r: (_blame(r), _seen(r)))
                settled = now - min(map(_seen, suspects)) > _SETTLE_SECONDS
                if _blame(cause) == 0 or settled:
                    return JobOutcome("raised" if cause.alive else "failed", cause)
                continue
            early = [
                (r.exiting_since if r.alive else r.ended_at, r)
                for r in joined
                if (r.exiting == _control.UNKNOWN_STATUS and not r.answered)
                or (not r.alive and r.exiting is None)
            ]
            if early:
                since, first = min(early, key=lambda pair: pair[0])
                if now - since > first.window:
                    return JobOutcome("early", first)
            if deadline is not None and now > deadline:
                return JobOutcome("timeout")

    def end(self, grace_seconds: float) -> list[int]:
        """Ends every rank still running; returns the ranks it had to stop.

        A rank waiting at its exit is told to leave (it exits with its own status);
        others get SIGTERM to their process group, then SIGKILL after
        ``grace_seconds``. Ranks other than 0 go first: rank 0 hosts JAX's
        coordination service, and losing it aborts every rank still connected.
        Process groups are signalled even for ranks that exited, so nothing they
        started outlives the job.
        """
        stopped: list[int] = []
        for group in (self.ranks[1:], self.ranks[:1]):
            for rank in group:
                if rank.alive and rank.exiting is not None and not rank.answered:
                    rank.answer(_control.LEAVE)
                elif rank.alive:
                    stopped.append(rank.rank)
                    _signal_group(rank.proc, signal.SIGTERM)
            deadline = time.monotonic() + grace_seconds
            try:
                while any(r.alive for r in group) and time.monotonic() < deadline:
                    self.pump(POLL_SECONDS)
            finally:
                for rank in group:
                    _signal_group(rank.proc, signal.SIGKILL)
                for rank in group:
                    rank.proc.wait()
                self._reap()
        return stopped

    def drain(self, seconds: float) -> None:
        """Copies output still in the pipes, for at most ``seconds``."""
        deadline = time.monotonic() + seconds
        while self.output.open and time.monotonic() < deadline:
            self.pump(POLL_SECONDS)

    def close(self) -> None:
        self.output.close()
        for rank in self.ranks:
            rank.control.close()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signals the child's whole process group (the child leads it)."""
    # The group may be gone already (PermissionError: macOS reports a zombie leader so).
    # A finished child's pid stays reserved while its group has members, so the group
    # signalled is its own; an empty group's id could in theory be reused meanwhile,
    # but Linux hands out pids in sequence up to pid_max, far beyond a job's churn.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def summary(outcome: JobOutcome, stopped: list[int], job: Job, timeout: float | None) -> str | None:
    """The launcher's one line about how the job ended (None: nothing to say)."""
    tail = f"; stopped {ranks_text(sorted(stopped))}" if stopped else ""
    if outcome.kind == "timeout":
        return f"timed out after {timeout:g} s{tail}"
    cause = outcome.rank
    if cause is None:
        return None
    assert cause.code is not None
    if outcome.kind == "early":
        waiting = [r.rank for r in job.ranks if r is not cause and r.rank in stopped]
        return (
            f"rank {cause.rank} reached its end while {ranks_text(waiting) or 'its peers'} "
            f"still ran {cause.window:g} s later (blocked in a collective that needs "
            f"rank {cause.rank}?){tail}; every rank must reach the end of the script, "
            "within initialize(shutdown_timeout_seconds=...) of each other"
        )
    others = [
        r.rank
        for r in job.ranks
        if r is not cause and r.rank not in stopped and r.code not in (None, 0)
    ]
    also = f"; {ranks_text(others)} ended too" if others else ""
    return f"rank {cause.rank} exited with {describe(cause.code)}{tail}{also}"
