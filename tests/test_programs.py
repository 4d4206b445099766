"""The one program cache (shardkit._programs): LRU bound, stats, threads, configuration."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import shardkit
from _meshes import make_mesh
from shardkit import _programs
from shardkit._config import DEFAULT_PROGRAM_CACHE_SIZE, program_cache_size
from shardkit._programs import ProgramCacheInfo, _ProgramCache, shard_jit
from shardkit.testing import assert_close


def _sized(n: int) -> _ProgramCache:
    cache = _ProgramCache()
    cache.resize(n)
    return cache


def test_least_recently_used_is_evicted_and_counted() -> None:
    cache, built = _sized(2), []

    def build(key: str) -> object:
        built.append(key)
        return object()

    a = cache.get("a", lambda: build("a"))
    cache.get("b", lambda: build("b"))
    assert cache.get("a", lambda: build("a")) is a  # a is now the most recent
    cache.get("c", lambda: build("c"))  # evicts b
    assert cache.get("a", lambda: build("a")) is a
    cache.get("b", lambda: build("b"))  # built again
    assert built == ["a", "b", "c", "b"]
    assert cache.info() == ProgramCacheInfo(size=2, maxsize=2, hits=2, misses=4, evictions=2)


def test_shrinking_evicts_at_once_and_returns_the_old_bound() -> None:
    cache = _sized(4)
    for k in range(4):
        cache.get(k, object)
    assert cache.resize(1) == 4
    assert cache.info().size == 1
    assert cache.info().evictions == 3
    cache.clear()
    assert cache.info() == ProgramCacheInfo(0, 1, 0, 0, 0)


def test_threads_share_the_cache_without_corruption() -> None:
    cache, lookups, threads = _sized(5), 400, 8
    errors: list[str] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for i in range(lookups):
            key = (i * 7 + t) % 11
            value = cache.get(key, lambda key=key: ("program", key))
            if value != ("program", key):
                errors.append(f"key {key} gave {value}")
            if cache.info().size > 5:
                errors.append("bound exceeded")

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(timeout=60)
    assert errors == []
    info = cache.info()
    assert info.hits + info.misses == threads * lookups
    assert info.size == 5
    assert info.evictions == info.misses - 5


def test_cached_keys_on_the_builder_and_its_arguments() -> None:
    calls = []

    @_programs.cached
    def build(n: int, *, tag: str = "a") -> tuple[int, str]:
        calls.append((n, tag))
        return n, tag

    before = shardkit.program_cache_info()
    assert build(1) == build(1) == (1, "a")
    assert build(1, tag="b") == (1, "b")
    assert calls == [(1, "a"), (1, "b")]
    after = shardkit.program_cache_info()
    assert after.misses - before.misses == 2
    assert after.hits - before.hits == 1


def test_set_program_cache_size_round_trip_and_errors() -> None:
    before = shardkit.set_program_cache_size(7)
    try:
        assert shardkit.program_cache_info().maxsize == 7
        assert shardkit.program_cache_info().size <= 7
        with pytest.raises(TypeError, match=r"set_program_cache_size\(n='8'\)"):
            shardkit.set_program_cache_size("8")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="must be an int"):
            shardkit.set_program_cache_size(True)
        with pytest.raises(ValueError, match=r"n=0.*at least 1"):
            shardkit.set_program_cache_size(0)
    finally:
        assert shardkit.set_program_cache_size(before) == 7


def test_the_bound_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHARDKIT_PROGRAM_CACHE_SIZE", raising=False)
    assert program_cache_size() == DEFAULT_PROGRAM_CACHE_SIZE
    monkeypatch.setenv("SHARDKIT_PROGRAM_CACHE_SIZE", " 12 ")
    assert program_cache_size() == 12
    assert _ProgramCache().info().maxsize == 12  # read when first needed
    for bad, exc in (("many", "not an integer"), ("0", "at least 1"), ("-3", "at least 1")):
        monkeypatch.setenv("SHARDKIT_PROGRAM_CACHE_SIZE", bad)
        with pytest.raises(ValueError, match=rf"SHARDKIT_PROGRAM_CACHE_SIZE='{bad}'.*{exc}"):
            program_cache_size()


@pytest.mark.parametrize("axis_types", ["auto", "explicit"])
def test_shard_jit_runs_donates_and_reshards_tangents(axis_types: str) -> None:
    m = make_mesh("8", axis_types=axis_types)
    x = jax.device_put(np.arange(16.0), jax.NamedSharding(m, PartitionSpec("x")))
    spec = PartitionSpec("x")
    double = shard_jit(lambda b: 2 * b, m, spec, spec)
    assert_close(double(x), 2 * np.arange(16.0), what="shard_jit")
    assert_close(jax.jit(double)(x), 2 * np.arange(16.0), what="shard_jit under jit")
    donating = shard_jit(lambda b: 2 * b, m, spec, spec, donate=True)
    y = jax.device_put(np.arange(16.0), jax.NamedSharding(m, spec))
    assert_close(donating(y), 2 * np.arange(16.0), what="donating")
    assert y.is_deleted()
    if axis_types == "explicit":
        run = shard_jit(lambda b: 3 * b, m, spec, spec, reshard_tangents=True)
        # A replicated tangent: resharded to the operand's split before the program.
        _, t = jax.jit(lambda v: jax.jvp(run, (v,), (np.arange(16.0) + 1,)))(x)
        assert_close(t, 3 * (np.arange(16.0) + 1), what="jvp with a replicated tangent")


def test_shard_jit_reshard_tangents_takes_one_spec() -> None:
    m = make_mesh("8")
    with pytest.raises(TypeError, match="one operand and one spec"):
        shard_jit(
            lambda a, b: a,
            m,
            (PartitionSpec("x"), PartitionSpec()),
            PartitionSpec("x"),
            reshard_tangents=True,
        )


def test_layout_jit_keeps_one_program_per_layout_in_the_cache() -> None:
    m = make_mesh("2x4", axis_types="auto")
    calls: list[tuple[int, ...]] = []

    def double(x: jax.Array, *, k: int) -> jax.Array:
        calls.append(x.shape)  # once per trace
        return k * x

    sharding = jax.NamedSharding(m, PartitionSpec("x", None))
    a = jax.device_put(np.arange(8.0).reshape(4, 2), sharding)
    b = jax.device_put(np.arange(16.0).reshape(8, 2), sharding)
    before = shardkit.program_cache_info()
    for _ in range(3):  # fresh arrays of two layouts: two programs, traced once each
        assert_close(_programs.layout_jit(double, a + 0, k=2), 2 * np.asarray(a), what="a")
        assert_close(_programs.layout_jit(double, b + 0, k=2), 2 * np.asarray(b), what="b")
    after = shardkit.program_cache_info()
    assert calls == [(4, 2), (8, 2)]
    assert (after.misses - before.misses, after.hits - before.hits) == (2, 4)
    # Host data is keyed by shape and dtype; traced, the function is inlined.
    assert_close(_programs.layout_jit(double, [1.0, 2.0], k=3), np.array([3.0, 6.0]), what="host")
    assert_close(jax.jit(lambda v: _programs.layout_jit(double, v, k=2))(a), 2 * np.asarray(a))
    assert shardkit.program_cache_info().misses - after.misses == 1
