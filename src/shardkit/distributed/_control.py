"""The line protocol between the launcher and the processes it started.

Each process gets one end of a Unix socket pair (its descriptor number in
``SHARDKIT_CONTROL_FD``). :func:`shardkit.distributed.initialize` uses it to say that
the process joined JAX's distributed runtime, and, at interpreter exit, that it is
leaving and with which status. It then waits for the launcher's verdict:

``shutdown``
  Every process of the job is at its exit: leave the runtime together through JAX's
  shutdown barrier, which now cannot time out.
``leave``
  A peer failed or never arrived: exit at once (``os._exit``) with this process's
  own status, skipping the barrier (it would wait for a peer that is never coming,
  then abort the process with a native stack dump) and, like an abort, the exit
  handlers registered before ``initialize``.

Child to launcher: ``joined WINDOW`` (WINDOW: how many seconds the ranks may reach
their exits apart, :func:`~shardkit.distributed.initialize`'s
``shutdown_timeout_seconds``) and ``exiting STATUS`` (STATUS an int, or ``?`` when
Python ends normally or through ``SystemExit``, whose status atexit cannot see).
"""

from __future__ import annotations

import atexit
import os
import socket
import stat
import sys
import types
from collections.abc import Callable, MutableMapping

CONTROL_FD_ENV = "SHARDKIT_CONTROL_FD"
JOINED = "joined"
EXITING = "exiting"
SHUTDOWN = "shutdown"
LEAVE = "leave"
UNKNOWN_STATUS = "?"
# The status a process leaves with when told to go while its own status is unknown.
# The launcher reports such a process by what it did (ended early), not by this.
EARLY_EXIT_STATUS = 1


def take_control_socket(environ: MutableMapping[str, str]) -> socket.socket | None:
    """Adopts the launcher's control socket named in ``environ``, if there is a valid one.

    Removes the variable, so that a subprocess started later does not mistake another
    descriptor with the same number for the launcher's.
    """
    raw = environ.pop(CONTROL_FD_ENV, None)
    if raw is None or not raw.isdigit():
        return None
    fd = int(raw)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return None
        os.set_inheritable(fd, False)
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    sock.setblocking(True)
    return sock


class ExitHook:
    """The process's side of the protocol, from ``joined`` to its exit."""

    def __init__(self, sock: socket.socket, shutdown: Callable[[], None]) -> None:
        self._sock = sock
        self._shutdown = shutdown
        self._status: int | None = None
        self._previous_excepthook = sys.excepthook

    def install(self, window_seconds: int) -> None:
        """Reports the join, then watches for an uncaught exception and for the exit.

        atexit runs handlers last-registered first, so this one runs before the JAX
        runtime's own exit handlers, registered when JAX was imported.
        """
        try:
            self._send(f"{JOINED} {window_seconds}")
        except OSError:
            return  # the launcher is gone; its watchdog ends this process
        sys.excepthook = self._excepthook
        atexit.register(self._at_exit)

    def _excepthook(
        self,
        exc_type: type[BaseException],
        exc: BaseException,
        tb: types.TracebackType | None,
    ) -> None:
        # An uncaught exception makes Python exit with status 1 once the traceback is
        # printed; SystemExit never reaches sys.excepthook.
        self._status = 1
        self._previous_excepthook(exc_type, exc, tb)

    def _at_exit(self) -> None:
        status = UNKNOWN_STATUS if self._status is None else str(self._status)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        try:
            self._send(f"{EXITING} {status}")
            verdict = self._sock.makefile("r", encoding="ascii").readline().strip()
        except OSError:
            verdict = LEAVE
        if verdict == SHUTDOWN:
            self._shutdown()
            return
        # LEAVE, or the launcher is gone (end of file): skip the shutdown barrier.
        os._exit(EARLY_EXIT_STATUS if self._status is None else self._status)

    def _send(self, line: str) -> None:
        self._sock.sendall(f"{line}\n".encode("ascii"))
