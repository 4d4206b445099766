"""The soak benchmark (shardkit bench soak): a small run keeps the cache at its bound."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec
from typer.testing import CliRunner

import shardkit
from _matrix import FULL
from _meshes import make_mesh
from shardkit import shard
from shardkit.bench import soak
from shardkit.cli import app
from shardkit.linalg import matmul, qr, solve
from shardkit.testing import assert_close


def test_small_soak_keeps_the_cache_at_its_bound(tmp_path: Path) -> None:
    before = shardkit.set_program_cache_size(8)
    try:
        # fftn and matmul over 6 meshes: 12 programs for a bound of 8, so programs are
        # evicted and built again as the random order returns to them.
        result = soak(100, configs_count=6, ops=("fftn", "matmul"), sample_every=20)
    finally:
        shardkit.set_program_cache_size(before)
    assert result.calls == 100
    assert result.wrong == 0
    assert result.cache.maxsize == 8
    assert result.largest_cache <= 8
    assert result.cache.size == 8
    assert result.cache.evictions > 0
    assert result.cache.hits + result.cache.misses >= 100
    assert result.bounded
    assert [s.call for s in result.samples] == [0, 20, 40, 60, 80, 100]
    assert all(s.rss_bytes > 0 and s.cache.size <= 8 for s in result.samples)
    saved = json.loads(result.write(tmp_path).read_text())
    assert saved["calls"] == 100
    assert saved["cache"]["maxsize"] == 8
    assert len(saved["samples"]) == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["soak", "fft"], "soak runs alone"),
        (["soak", "--meshes", "8"], "--meshes"),
        (["fft", "--calls", "3"], "only the soak"),
        (["soak", "--calls", "0"], "calls=0"),
    ],
)
def test_soak_cli_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def _compiles(run: Callable[[], object]) -> int:
    seen = []

    def listen(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            seen.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        run()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return len(seen)


@pytest.mark.parametrize("axis_types", ["auto", *(["explicit"] if FULL else [])])
def test_eager_calls_compile_only_programs_the_cache_holds(axis_types: str) -> None:
    # The soak's growth came from eager jax.numpy glue (indexing, casts, jnp.asarray of
    # host data, device_put between layouts): a program per shape and mesh, kept by JAX
    # beyond the program cache's bound. On a layout not seen before, every compile
    # must be a program-cache miss, so that the bound covers every program.
    def calls(m: jax.sharding.Mesh, n: int) -> list[tuple[object, np.ndarray]]:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        b, c = rng.standard_normal(n), rng.standard_normal((3, 2))
        tall = shard(rng.standard_normal((m.size * 3, 3)), mesh=m, spec=PartitionSpec("x"))
        return [
            (solve(a, b, nb=2, mesh=m, spec="x"), np.linalg.solve(a, b)),
            (qr(tall)[1], np.linalg.qr(np.asarray(tall))[1]),
            (matmul(tall, c), np.asarray(tall) @ c),
        ]

    calls(make_mesh("2", axis_types), 5)  # the layout-free programs (scalar casts)
    m, before = make_mesh("4", axis_types), shardkit.program_cache_info()
    results: list[tuple[object, np.ndarray]] = []
    compiled = _compiles(lambda: results.extend(calls(m, 7)))
    assert compiled == shardkit.program_cache_info().misses - before.misses > 0
    for got, want in results:  # R's rows up to sign
        assert_close(np.abs(np.asarray(got)), np.abs(want))
