"""shardkit.linalg.solve_triangular against SciPy over meshes, triangles and transposes."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _matrix import FULL
from shardkit.inspect import comms
from shardkit.layout import mesh, shard
from shardkit.linalg import solve_triangular
from shardkit.testing import assert_close


@pytest.mark.parametrize(
    ("shape", "names", "sp", "types", "n"),
    [("8", "x", "x,None", "explicit", 64), ("2x4", "x,y", "x,y", "auto", 100)],
)
def test_solve_triangular_matches_scipy(
    shape: str, names: str, sp: str, types: Any, n: int
) -> None:
    m = mesh(shape, names, axis_types=types)
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((n, n)) + n * np.eye(n)
    b = rng.standard_normal((n, 2))
    # Every (lower, trans, unit) combination runs on one of the two meshes; on both
    # with SHARDKIT_FULL_TESTS=1.
    parity = int(shape == "8")
    for lower in (True, False):
        for trans in (0, 1):
            for unit in (False, True):
                if not FULL and (lower + trans + unit + parity) % 2:
                    continue
                t = np.tril(a_np) if lower else np.triu(a_np)
                x = solve_triangular(
                    shard(a_np, m, sp), b, lower=lower, trans=trans, unit_diagonal=unit, nb=16
                )
                ref = sl.solve_triangular(t, b, lower=lower, trans=trans, unit_diagonal=unit)
                assert_close(x, ref, scale=float(np.abs(ref).max()) * 10)


def test_bad_trans_is_rejected() -> None:
    m = mesh("8", "x")
    with pytest.raises(ValueError, match="trans="):
        solve_triangular(shard(np.eye(16), m, "x,None"), np.ones(16), trans=3)


@pytest.mark.parametrize("sp", ["x,None", "None,x"])
def test_solved_part_is_read_in_tiles_past_the_tile_width(sp: str) -> None:
    # 1088 local columns (rows) on 8 devices: several 512-wide tiles, the last one
    # overlapping its neighbour; the ignored triangle is NaN, so a tile reading past
    # the solved part (or counting a column twice) shows.
    m = mesh("8", "x")
    n = 1088
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal((n, n)) / np.sqrt(n) + 2 * np.eye(n)
    b = rng.standard_normal((n, 3))
    for lower in (True, False):
        t = np.tril(a_np) if lower else np.triu(a_np)
        keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
        poisoned = np.where(keep, a_np, np.nan)
        for trans in (0, 1):
            x = solve_triangular(
                shard(poisoned, m, sp), b, lower=lower, trans=trans, nb=8, check_finite=False
            )
            ref = sl.solve_triangular(t, b, lower=lower, trans=trans)
            assert_close(x, ref, scale=float(np.abs(ref).max()) * 10)


def test_one_all_reduce_of_the_diagonal_then_one_small_one_per_step() -> None:
    m = mesh("2x4", "x,y", axis_types="auto")
    n, nb, nrhs = 256, 32, 2
    a = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, P("x", "y")))
    b = jax.ShapeDtypeStruct((n, nrhs), jnp.float32, sharding=NamedSharding(m, P()))
    fn = lambda a, b: solve_triangular(a, b, nb=nb, mesh=m, spec="x,y", check_finite=False)  # noqa: E731
    report = comms(fn, a, b)
    report.assert_only({"all-reduce"})
    sizes = sorted(
        (max(int(np.prod(s)) for s in c.result_shapes), c.count) for c in report.collectives
    )
    assert sizes == [(nb * nrhs, n // nb), (n * nb, 1)]
