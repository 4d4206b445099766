"""The launcher's view of its children's output: whole lines, prefixed by rank.

Children write through pipes; :class:`Output` reads them without blocking and writes
each complete line as one ``write`` call, so lines of different ranks never mix
mid-line. Two kinds of runtime noise are kept out of the way unless ``verbose``:

* gloo's connection chatter ("[Gloo] Rank 3 is connected to 7 peer ranks ..."),
  one line per device at start-up, is dropped. Its device threads write the words
  of a line separately, so lines of two threads can interleave mid-word ("[Gloo]
  Rank 1[Gloo] Rank 3 is connected to ..."): a line made only of that message's
  words and numbers is dropped, as is a bare number or one empty line right after
  such a line (two messages run together leave a newline alone);
* a native abort report (XLA's coordination service logging a fatal error, then
  "*** Check failure stack trace: ***" and the frames) is held back from the first
  such line of a rank's stderr on. The launcher releases it when that rank's own
  failure ended the job, and drops it when the rank only aborted because a peer it
  was waiting for had already died;
* a Python traceback on stderr is written out whole once its exception line has
  come, except one that reports a lost peer (gloo's or the coordination service's
  "Socket closed") or that a native abort line interrupts: it is held back with
  the abort report, since a rank in a collective raises so when a peer dies.
"""

from __future__ import annotations

import dataclasses
import os
import re
import selectors
from typing import IO, TextIO

_READ_CHUNK = 65536
# A partial line longer than this is written out anyway (progress bars, binary junk).
_MAX_PENDING_LINE = 65536

# Anywhere in a line: gloo's C++ logging can land after a partial line of the rank's
# own output (no newline yet), which then keeps its text.
_CHATTER = re.compile(
    r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\."
    r"(?: Expected number of connected peer ranks is : \d+)?"
)
# The words of that message; a line of nothing else is chatter interleaved mid-line.
_CHATTER_WORDS = re.compile(
    r"\[Gloo\]|Rank|is connected to|peer ranks\.|"
    r"Expected number of connected peer ranks is :|\d+|\s+"
)
_GLOO_PHRASE = re.compile(r"\[Gloo\]|is connected to|peer ranks")
# The first line of a native abort: a glog FATAL line, the check-failure banner, or
# an ERROR line of JAX's distributed runtime (the coordination service and its
# client log the lost peer there just before the FATAL line).
_ABORT_START = re.compile(
    r"^(F\d{4} |\*\*\* Check failure stack trace|"
    r"E\d{4} \S+\s+\d+ (coordination_service\w*|client)\.(cc|h):)"
)

_TRACEBACK_START = "Traceback (most recent call last):"
# An exception that a rank raises because a peer vanished under it.
_PEER_LOST = re.compile(
    r"Socket closed|Gloo context initialization failed|coordination service|"
    r"heartbeat|connection reset by peer",
    re.IGNORECASE,
)


@dataclasses.dataclass
class _Stream:
    rank: int
    pipe: IO[bytes]
    out: TextIO
    is_stderr: bool
    pending: bytearray = dataclasses.field(default_factory=bytearray)
    # The last line was gloo chatter: a bare number next is the tail of one.
    in_chatter: bool = False
    # The lines of a Python traceback whose exception line has not come yet.
    traceback: list[str] | None = None


class Output:
    """Copies every child's stdout and stderr line by line, prefixed with its rank.

    Control sockets can share the selector (see :meth:`selector`), so one ``select``
    serves both output and messages.
    """

    def __init__(self, num_processes: int, stdout: TextIO, stderr: TextIO, *, verbose: bool):
        self.selector = selectors.DefaultSelector()
        self._width = len(str(num_processes - 1))
        self._stdout = stdout
        self._stderr = stderr
        self._verbose = verbose
        self._held: dict[int, list[str]] = {}
        self._touched: set[int] = set()

    def add(self, rank: int, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        for pipe, out in ((stdout, self._stdout), (stderr, self._stderr)):
            os.set_blocking(pipe.fileno(), False)
            stream = _Stream(rank, pipe, out, is_stderr=out is self._stderr)
            self.selector.register(pipe, selectors.EVENT_READ, stream)

    @property
    def open(self) -> bool:
        return any(isinstance(k.data, _Stream) for k in self.selector.get_map().values())

    def read(self, stream: object) -> bool:
        """Reads what ``stream`` (a selector key's data) has; False if it is not ours."""
        if not isinstance(stream, _Stream):
            return False
        try:
            chunk = os.read(stream.pipe.fileno(), _READ_CHUNK)
        except BlockingIOError:
            return True
        if chunk:
            stream.pending += chunk
            self._write_lines(stream, final=False)
        else:
            self._write_lines(stream, final=True)
            self._close(stream)
        self._touched.add(id(stream.out))
        return True

    def flush(self) -> None:
        for out in (self._stdout, self._stderr):
            if id(out) in self._touched:
                out.flush()
        self._touched.clear()

    def held_back(self, rank: int) -> bool:
        """Whether an abort report of ``rank`` is being held back."""
        return rank in self._held

    def release(self, rank: int) -> None:
        """Writes ``rank``'s held-back abort report (its own failure ended the job)."""
        for line in self._held.pop(rank, []):
            self._stderr.write(line)
        self._stderr.flush()

    def discard(self, rank: int) -> None:
        """Drops ``rank``'s held-back abort report (collateral of a peer's failure)."""
        self._held.pop(rank, None)

    def message(self, text: str) -> None:
        """Writes one line of the launcher's own (not prefixed by a rank)."""
        self._stderr.write(f"shardkit launch: {text}\n")
        self._stderr.flush()

    def close(self) -> None:
        """Writes any partial lines left and closes every pipe."""
        for key in list(self.selector.get_map().values()):
            if isinstance(key.data, _Stream):
                self._write_lines(key.data, final=True)
                key.data.out.flush()
                self._close(key.data)
        self.selector.close()

    def _close(self, stream: _Stream) -> None:
        self.selector.unregister(stream.pipe)
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
            if not self._verbose:
                kept, stream.in_chatter = drop_chatter(text, after_chatter=stream.in_chatter)
                if kept is None:
                    continue
                text = kept
                if stream.is_stderr and self._hold(stream, f"{prefix}{text}\n", text):
                    continue
            stream.out.write(f"{prefix}{text}\n")
        if final and stream.traceback is not None:
            stream.out.writelines(stream.traceback)
            stream.traceback = None

    def _hold(self, stream: _Stream, line: str, text: str) -> bool:
        """Holds ``line`` back (abort report, or a traceback not yet whole); True if so."""
        rank = stream.rank
        if rank in self._held:
            self._held[rank].append(line)
            return True
        block = stream.traceback
        if _ABORT_START.match(text):
            self._held[rank] = [*(block or []), line]
            stream.traceback = None
            return True
        if block is None:
            if not text.startswith(_TRACEBACK_START):
                return False
            stream.traceback = [line]
            return True
        block.append(line)
        if text[:1].isspace() or not text or text.startswith(_TRACEBACK_START):
            return True
        # The exception line: the traceback is whole.
        stream.traceback = None
        if _PEER_LOST.search(text):
            self._held[rank] = block
        else:
            stream.out.writelines(block)
        return True


def drop_chatter(text: str, *, after_chatter: bool) -> tuple[str | None, bool]:
    """``text`` (one line) without gloo's chatter, and whether the next line follows it.

    The line is None where it is nothing but chatter. ``after_chatter``: the line
    before was chatter, so a bare number or an empty line is its tail (one empty
    line: a second one is the program's own).
    """
    if _is_chatter(text, after_chatter=after_chatter):
        return None, bool(text.strip())
    return (_CHATTER.sub("", text) if _CHATTER.search(text) else text), False


def _is_chatter(text: str, *, after_chatter: bool) -> bool:
    """Whether the whole line is gloo's connection chatter (possibly interleaved)."""
    if not text.strip():
        # Two messages run together on one line leave the second's newline alone.
        return after_chatter
    if _GLOO_PHRASE.search(text) is None and not (after_chatter and text.strip().isdigit()):
        return False
    return not _CHATTER_WORDS.sub("", text)
