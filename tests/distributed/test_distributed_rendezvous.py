"""The ranks' check-in before JAX's client starts: all meet, or every rank raises in time.

Without it, JAX's client aborts a rank (SIGABRT and a native stack dump) that finds
no coordinator, or whose peers never come, once its initialization timeout passes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from shardkit.distributed import (
    COORDINATOR_ENV,
    LOCAL_DEVICES_ENV,
    NUM_PROCESSES_ENV,
    PROCESS_ID_ENV,
)
from shardkit.distributed._rendezvous import FAIL, HELLO, check_in


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _check_in_all(
    address: str,
    ranks: list[int],
    num_processes: int,
    timeout: float | dict[int, float],
    delays: dict[int, float],
) -> dict[int, tuple[str, float]]:
    """Runs ``check_in`` for ``ranks`` in threads: rank -> ("ok" or the error, seconds).

    ``timeout`` may differ per rank.
    """
    timeouts = timeout if isinstance(timeout, dict) else dict.fromkeys(ranks, timeout)
    results: dict[int, tuple[str, float]] = {}

    def run(rank: int) -> None:
        time.sleep(delays.get(rank, 0.0))
        start = time.monotonic()
        try:
            check_in(address, rank, num_processes, timeout_seconds=timeouts[rank])
            results[rank] = ("ok", time.monotonic() - start)
        except RuntimeError as e:
            results[rank] = (str(e), time.monotonic() - start)

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(timeouts.values()) + 10)
    assert sorted(results) == sorted(ranks), results
    return results


@pytest.mark.timeout(30)
def test_every_rank_meets_and_the_port_is_free_for_jax() -> None:
    address = f"127.0.0.1:{_free_port()}"
    # Rank 0 comes last: the others retry until it listens.
    results = _check_in_all(address, [0, 1, 2, 3], 4, timeout=10, delays={0: 0.3})
    assert {r: text for r, (text, _) in results.items()} == dict.fromkeys(range(4), "ok")
    assert max(seconds for _, seconds in results.values()) < 5
    host, port = address.split(":")
    with socket.create_server((host, int(port))):  # JAX's service binds it next
        pass


@pytest.mark.timeout(30)
def test_a_rank_without_coordinator_raises_within_its_timeout() -> None:
    address = f"127.0.0.1:{_free_port()}"
    (text, seconds) = _check_in_all(address, [1], 2, timeout=0.5, delays={})[1]
    assert text.startswith(f"initialize(): rank 1 of 2 found no coordinator at {address}")
    assert "within 0.5 s (Connection refused)" in text
    assert "initialization_timeout_seconds=0.5" in text
    assert 0.5 <= seconds < 3


@pytest.mark.timeout(30)
def test_a_missing_rank_fails_every_rank_that_came() -> None:
    address = f"127.0.0.1:{_free_port()}"
    # Rank 1 would wait longer: it hears rank 0's verdict, not its own deadline.
    results = _check_in_all(address, [0, 1], 3, timeout={0: 1.5, 1: 10}, delays={})
    text0, seconds0 = results[0]
    text1, seconds1 = results[1]
    assert text0.startswith(f"initialize(): rank 0 of 3 waited 1.5 s at {address}")
    assert "rank 2 never connected" in text0
    assert "shardkit launch -n N" in text0
    assert text1.startswith(f"initialize(): rank 1 of 3 cannot join the job at {address}")
    assert "rank 2 never connected to rank 0" in text1
    assert seconds0 < 4
    assert seconds1 < 4


@pytest.mark.timeout(30)
def test_strangers_wrong_sizes_and_duplicates_are_turned_away() -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    answers: dict[str, str] = {}
    job: list[dict[int, tuple[str, float]]] = []
    host = threading.Thread(
        target=lambda: job.append(_check_in_all(address, [0, 1], 2, timeout=10, delays={1: 0.8})),
        daemon=True,
    )
    host.start()

    def ask(name: str, line: bytes) -> None:
        deadline = time.monotonic() + 5
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with conn:
            conn.sendall(line)
            answers[name] = conn.makefile("r").readline().strip()

    ask("stranger", b"GET / HTTP/1.1\r\n\r\n")
    ask("size", f"{HELLO} 1 3\n".encode())
    ask("rank", f"{HELLO} 7 2\n".encode())
    host.join(15)
    # The real rank 1 still joined after them.
    assert [{r: text for r, (text, _) in results.items()} for results in job] == [
        {0: "ok", 1: "ok"}
    ]
    assert answers == {
        "stranger": "",
        "size": f"{FAIL} rank 0 runs a job of 2 processes, not 3",
        "rank": f"{FAIL} rank 7 is not a rank of a job of 2 processes",
    }


@pytest.mark.timeout(30)
def test_rank_0_cannot_listen_on_a_taken_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=rf"rank 0 of 2 cannot listen on .*:{port}"):
            check_in(f"127.0.0.1:{port}", 0, 2, timeout_seconds=1)


_SCRIPT = """
import time
import shardkit.distributed as dist
start = time.monotonic()
try:
    dist.initialize(initialization_timeout_seconds=1, heartbeat_timeout_seconds=2,
                    shutdown_timeout_seconds=1)
except RuntimeError as e:
    print(f"{time.monotonic() - start:.1f} {e}")
"""


@pytest.mark.timeout(90)
def test_initialize_raises_instead_of_aborting_on_every_rank() -> None:
    """Rank 1 with no coordinator, and rank 0 whose peer never comes: both raise."""
    procs = {}
    for rank in (0, 1):
        env = {
            **os.environ,
            COORDINATOR_ENV: f"127.0.0.1:{_free_port()}",
            NUM_PROCESSES_ENV: "2",
            PROCESS_ID_ENV: str(rank),
            LOCAL_DEVICES_ENV: "1",
        }
        procs[rank] = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    try:
        outputs = {rank: proc.communicate(timeout=60) for rank, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    for rank, (out, err) in outputs.items():
        assert procs[rank].returncode == 0, (rank, procs[rank].returncode, err[-2000:])
        assert "Check failure" not in err
        assert "Terminating process" not in err
        seconds, _, message = out.strip().partition(" ")
        assert 1 <= float(seconds) < 4, out
        assert message.startswith(f"initialize(): rank {rank} of 2 "), out
    assert "rank 1 never connected" in outputs[0][0]
    assert "found no coordinator" in outputs[1][0]
