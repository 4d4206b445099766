"""Keeps gloo's connection chatter out of this process's stdout in cluster mode.

Under :func:`shardkit.distributed.launch` the launcher drops gloo's lines ("[Gloo]
Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is :
1", one per device and communicator) from its children's pipes. A job started by a
cluster's launcher (``srun``) has no such parent, and gloo writes them straight to
file descriptor 1 from C++, where no Python setting reaches. So
:class:`StdoutFilter` puts a pipe in front of descriptor 1: a thread copies every
byte to the real stdout as it comes, whole lines at once, and drops the lines made
of gloo's chatter, with the rules the launcher uses
(:func:`shardkit.distributed._output.drop_chatter`). A partial line (a prompt, a
progress bar) goes out after a short pause, unless it may be the start of gloo's
message. At interpreter exit the real stdout is put back and the rest is drained.

What a filter cannot save: bytes still in the pipe when the process is killed or
calls ``os._exit`` (at most the last moments' output, since the thread copies at
once; stderr, where abort reports go, is not filtered).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import sys
import threading
import time

from shardkit.distributed._output import drop_chatter

__all__ = ["StdoutFilter"]

_READ_CHUNK = 65536
# A partial line goes out after this long without more bytes...
_PARTIAL_SECONDS = 0.05
# ...unless it may be gloo's message, which its threads write in pieces: then after this.
_GLOO_PARTIAL_SECONDS = 1.0
_GLOO = b"[Gloo]"
_JOIN_SECONDS = 2.0


def _may_be_chatter(partial: bytes) -> bool:
    head = partial.lstrip()
    return _GLOO in partial or (bool(head) and _GLOO.startswith(head[: len(_GLOO)]))


class StdoutFilter:
    """Runs descriptor ``fd`` (stdout) through a pipe that drops gloo's chatter."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self._saved: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self._saved is not None

    def start(self) -> None:
        """Puts the pipe in front of ``fd`` and starts copying; stopped at exit."""
        if self.active:
            return
        _flush()
        saved = os.dup(self._fd)
        read_end, write_end = os.pipe()
        os.set_inheritable(saved, False)
        os.dup2(write_end, self._fd)
        os.close(write_end)
        self._saved = saved
        self._thread = threading.Thread(
            target=self._copy, args=(read_end, saved), name="shardkit-stdout-filter", daemon=True
        )
        self._thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """Puts the real stdout back and waits (briefly) for the pipe to drain."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        _flush()
        # Closes this process's writing end; the thread ends at the pipe's end of file
        # (later, if a subprocess still holds the pipe).
        os.dup2(saved, self._fd)
        if self._thread is not None:
            self._thread.join(_JOIN_SECONDS)
        if self._thread is None or not self._thread.is_alive():
            os.close(saved)
        atexit.unregister(self.stop)

    def _copy(self, read_end: int, out: int) -> None:
        pending = b""
        since = 0.0  # when the pending partial line began
        in_chatter = False
        # A selector, not select.select: the pipe's number may be above FD_SETSIZE.
        with contextlib.ExitStack() as stack:
            stack.callback(os.close, read_end)
            sel = stack.enter_context(selectors.DefaultSelector())
            sel.register(read_end, selectors.EVENT_READ)
            while True:
                timeout = None
                if pending:
                    wait = _GLOO_PARTIAL_SECONDS if _may_be_chatter(pending) else _PARTIAL_SECONDS
                    timeout = max(0.0, since + wait - time.monotonic())
                if not sel.select(timeout):
                    _write(out, pending)
                    pending = b""
                    continue
                chunk = os.read(read_end, _READ_CHUNK)
                if not chunk:
                    _write(out, pending)
                    return
                continued = bool(pending)
                *lines, rest = (pending + chunk).split(b"\n")
                kept = []
                for line in lines:
                    text = line.decode("utf-8", errors="surrogateescape")
                    left, in_chatter = drop_chatter(text.rstrip("\r"), after_chatter=in_chatter)
                    if left is None:
                        continue
                    if left != text.rstrip("\r"):
                        line = left.encode("utf-8", errors="surrogateescape")
                    kept.append(line + b"\n")
                _write(out, b"".join(kept))
                if lines or not continued:  # a new partial line begins
                    since = time.monotonic()
                pending = rest
                # Output that keeps coming without a newline (a progress bar drawn
                # with \r) goes out on time too, not only after a pause.
                wait = _GLOO_PARTIAL_SECONDS if _may_be_chatter(pending) else _PARTIAL_SECONDS
                if len(pending) > _READ_CHUNK or (pending and time.monotonic() - since > wait):
                    _write(out, pending)
                    pending = b""


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError:
            return  # the reader is gone (a closed pipe): nothing to keep
        view = view[written:]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.flush()
