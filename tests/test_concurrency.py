"""Four threads calling solve, fftn, matmul and comms at once (issue 33, DESIGN: calls
from several threads are safe).

Each thread alternates between two problem sizes (one of them padded inside
shardkit), so the program caches are filled and read by all threads at the same
time, and checks every result against NumPy: a
cache that handed one thread another's program, a lost compile or a deadlock fails.
About 10 s by default; ``SHARDKIT_FULL_TESTS=1`` runs 30 s.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

import numpy as np
import pytest

import shardkit
from _matrix import FULL
from _meshes import make_mesh
from shardkit.layout import shard
from shardkit.linalg import matmul, solve
from shardkit.testing import assert_close

SECONDS = 30.0 if FULL else 4.0
# Compiles under load (2 shared cores in CI) may take a while; past this, a deadlock.
JOIN_SECONDS = SECONDS + 240.0


@pytest.mark.timeout(int(JOIN_SECONDS) + 60)
def test_four_threads_get_correct_results_without_deadlock() -> None:
    m = make_mesh("2x4")
    rng = np.random.default_rng(0)
    # One size of each pair is padded inside shardkit (45 rows; an axis of 12 over 8).
    systems = []
    for n in (32, 45):
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        b = rng.standard_normal(n)
        systems.append((a, b, np.linalg.solve(a, b)))
    signals = []
    for shape, spec in (((16, 8, 8), "x,y"), ((16, 12, 10), "x")):
        v = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        signals.append((shard(v, mesh=m, spec=spec), np.fft.fftn(v)))
    products = []
    for rows, inner, cols in ((32, 64, 16), (16, 32, 24)):
        x, y = rng.standard_normal((rows, inner)), rng.standard_normal((inner, cols))
        products.append((shard(x, mesh=m, spec="x,y"), shard(y, mesh=m, spec="y,None"), x @ y))
    # What comms reports for each product, computed before the threads start.
    reports = [shardkit.comms(matmul, a, b) for a, b, _ in products]

    def solving(i: int) -> None:
        a, b, expected = systems[i % 2]
        x = solve(a, b, nb=8, mesh=m, spec="x,y")
        assert_close(x, expected, what=f"solve n={b.shape[0]}")

    def transforming(i: int) -> None:
        x, expected = signals[i % 2]
        assert_close(shardkit.fft.fftn(x), expected, what=f"fftn {x.shape}")

    def multiplying(i: int) -> None:
        a, b, expected = products[i % 2]
        assert_close(matmul(a, b), expected, what=f"matmul {a.shape} @ {b.shape}")

    def inspecting(i: int) -> None:
        a, b, _ = products[i % 2]
        report, first = shardkit.comms(matmul, a, b), reports[i % 2]
        assert report.to_dict()["collectives"] == first.to_dict()["collectives"], i

    work: dict[str, Callable[[int], None]] = {
        "solve": solving,
        "fftn": transforming,
        "matmul": multiplying,
        "comms": inspecting,
    }
    done = dict.fromkeys(work, 0)
    errors: list[str] = []
    start = threading.Barrier(len(work))
    deadline = time.monotonic() + SECONDS

    def run(name: str) -> None:
        try:
            start.wait()
            # At least both sizes, then until the deadline.
            while done[name] < 2 or time.monotonic() < deadline:
                work[name](done[name])
                done[name] += 1
        except BaseException:
            errors.append(f"{name} (call {done[name]}):\n{traceback.format_exc()}")

    threads = [threading.Thread(target=run, args=(n,), name=n, daemon=True) for n in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline + JOIN_SECONDS - SECONDS - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running after {JOIN_SECONDS:.0f} s: {stuck}; {done}"
    assert not errors, "\n".join(errors)
    assert all(count >= 2 for count in done.values()), done
