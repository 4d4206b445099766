"""The launcher's output handling: whole prefixed lines, runtime noise out of the way."""

from __future__ import annotations

import io
import os

import pytest

from shardkit.distributed._output import Output

GLOO = "[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7"
ABORT = [
    "E1123 10:27:55.699198   26312 coordination_service_agent.cc:289] Polled an error",
    "F1123 10:27:55.698316   26305 client.h:80] Terminating process because the JAX "
    "distributed service detected fatal errors.",
    "*** Check failure stack trace: ***",
    "    @     0x7f1f75640634  absl::log_internal::LogMessage::SendToLog()",
]


def _feed(
    verbose: bool, chunks: dict[tuple[int, str], list[bytes]]
) -> tuple[Output, io.StringIO, io.StringIO]:
    """Runs ``chunks`` (per rank and stream) through an Output over real pipes."""
    out, err = io.StringIO(), io.StringIO()
    output = Output(2, out, err, verbose=verbose)
    writers = {}
    for rank in (0, 1):
        ends = {name: os.pipe() for name in ("out", "err")}
        output.add(rank, os.fdopen(ends["out"][0], "rb", 0), os.fdopen(ends["err"][0], "rb", 0))
        writers[rank] = {name: w for name, (_, w) in ends.items()}
    for (rank, name), parts in chunks.items():
        for part in parts:
            os.write(writers[rank][name], part)
            _pump(output)
    for names in writers.values():
        for w in names.values():
            os.close(w)
    while output.open:
        _pump(output)
    output.close()
    return output, out, err


def _pump(output: Output) -> None:
    for key, _ in output.selector.select(0.1):
        assert output.read(key.data)
    output.flush()


def test_lines_are_whole_and_prefixed_even_when_they_arrive_in_pieces() -> None:
    _, out, _ = _feed(
        False,
        {(0, "out"): [b"hel", b"lo\nwor"], (1, "out"): [b"one\n", b"two"], (0, "err"): []},
    )
    assert sorted(out.getvalue().splitlines()) == ["[0] hello", "[0] wor", "[1] one", "[1] two"]


def test_gloo_chatter_is_dropped_unless_verbose() -> None:
    chunks = {(0, "out"): [f"{GLOO}\nresult 1\n".encode()], (1, "err"): [f"{GLOO}\n".encode()]}
    _, out, err = _feed(False, chunks)
    assert out.getvalue() == "[0] result 1\n"
    assert err.getvalue() == ""
    _, out, err = _feed(True, chunks)
    assert out.getvalue() == f"[0] {GLOO}\n[0] result 1\n"
    assert err.getvalue() == f"[1] {GLOO}\n"


def test_gloo_chatter_after_a_partial_line_keeps_the_line() -> None:
    chunks = {(0, "out"): [b"step 1 ", f"{GLOO}\ndone\n".encode()]}
    _, out, _ = _feed(False, chunks)
    assert out.getvalue() == "[0] step 1 \n[0] done\n"


# Seen on this machine: gloo's device threads write the words of their lines
# separately, so two threads' lines interleave mid-word (verbatim from a run).
INTERLEAVED = [
    "[Gloo] Rank 5 is connected to 7 peer ranks. [Gloo] Rank 6Expected number of connected "
    "peer ranks is :  is connected to 77",
    " peer ranks. Expected number of connected peer ranks is : 7",
    "[Gloo] Rank 1[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of connected peer "
    "ranks is : 7",
    " is connected to 7 peer ranks. Expected number of connected peer ranks is : [Gloo] Rank 2 "
    "is connected to 77 peer ranks. ",
    "Expected number of connected peer ranks is : 7",
    "7",
]


def test_interleaved_gloo_chatter_is_dropped_and_numbers_of_the_user_kept() -> None:
    text = "\n".join(["7", *INTERLEAVED, "Rank 3 of 8 is ready", "", "12"]) + "\n"
    _, out, _ = _feed(False, {(0, "out"): [text.encode()]})
    assert out.getvalue().splitlines() == ["[0] 7", "[0] Rank 3 of 8 is ready", "[0] ", "[0] 12"]


def test_the_newline_left_by_two_messages_run_together_is_dropped() -> None:
    # Seen in a 2-process SLURM-style job: two whole messages on one line, then the
    # second one's newline alone. A second empty line is the program's own.
    text = f"{GLOO}{GLOO}\n\n\nresult\n"
    _, out, _ = _feed(False, {(0, "out"): [text.encode()]})
    assert out.getvalue() == "[0] \n[0] result\n"


@pytest.mark.parametrize("keep", [True, False], ids=["released", "discarded"])
def test_an_abort_report_is_held_back_until_the_launcher_decides(keep: bool) -> None:
    text = "\n".join(["a plain error line", *ABORT, "after the report"]) + "\n"
    output, _, err = _feed(False, {(1, "err"): [text.encode()]})
    assert output.held_back(1)
    assert not output.held_back(0)
    assert err.getvalue() == "[1] a plain error line\n"
    if keep:
        output.release(1)
        expected = [f"[1] {line}" for line in [*ABORT, "after the report"]]
        assert err.getvalue().splitlines()[1:] == expected
    else:
        output.discard(1)
        output.release(1)  # nothing left to release
        assert err.getvalue() == "[1] a plain error line\n"
    assert not output.held_back(1)


def test_verbose_holds_nothing_back() -> None:
    text = "\n".join(ABORT) + "\n"
    output, _, err = _feed(True, {(0, "err"): [text.encode()]})
    assert not output.held_back(0)
    assert err.getvalue().splitlines() == [f"[0] {line}" for line in ABORT]


def test_the_launchers_own_lines_are_marked() -> None:
    err = io.StringIO()
    output = Output(1, io.StringIO(), err, verbose=False)
    output.message("rank 1 exited with status 1; stopped rank 0")
    assert err.getvalue() == "shardkit launch: rank 1 exited with status 1; stopped rank 0\n"
    assert not output.read(object()), "not a stream of Output's: left to the caller"
    output.close()


# Rank 1 in a collective when rank 0 (the coordinator) was killed, as seen in CI: the
# traceback's header came before the runtime's first ERROR line, its frames after.
PEER_LOST_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "worker.py", line 75, in _psum_across_processes',
    "    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P('x')))",
    "jax.errors.JaxRuntimeError: UNKNOWN: Gloo context initialization failed: "
    "UNAVAILABLE: Socket closed",
]


@pytest.mark.parametrize("interrupted", [True, False], ids=["abort-inside", "peer-lost"])
def test_a_traceback_of_a_lost_peer_is_held_back_with_the_abort_report(interrupted: bool) -> None:
    lines = list(PEER_LOST_TRACEBACK)
    if interrupted:
        lines.insert(1, ABORT[0])
    text = "\n".join(["before", *lines, "after"]) + "\n"
    output, _, err = _feed(False, {(1, "err"): [text.encode()]})
    assert err.getvalue() == "[1] before\n"
    assert output.held_back(1)
    output.release(1)
    assert err.getvalue().splitlines()[1:] == [f"[1] {line}" for line in [*lines, "after"]]


def test_other_tracebacks_are_written_whole_at_once() -> None:
    lines = [*PEER_LOST_TRACEBACK[:3], "ValueError: a user's own mistake", "next"]
    text = "\n".join(lines) + "\n"
    output, _, err = _feed(False, {(0, "err"): [text[:40].encode(), text[40:].encode()]})
    assert not output.held_back(0)
    assert err.getvalue().splitlines() == [f"[0] {line}" for line in lines]
    # A traceback cut short (the process died mid-way) is still written at the end.
    output, _, err = _feed(False, {(0, "err"): [b"Traceback (most recent call last):\n  File"]})
    assert not output.held_back(0)
    assert err.getvalue().splitlines() == ["[0] Traceback (most recent call last):", "[0]   File"]
