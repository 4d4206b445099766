"""shardkit.linalg.solve_triangular against SciPy over meshes, triangles and transposes."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
import scipy.linalg as sl

from _matrix import FULL
from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.linalg import solve_triangular
from shardkit.linalg._inputs import Trans
from shardkit.linalg.internal import SPLIT_RHS
from shardkit.testing import assert_close


@pytest.mark.parametrize(
    ("shape", "names", "sp", "types", "n"),
    [("8", "x", "x,None", "explicit", 64), ("2x4", "x,y", "x,y", "auto", 100)],
)
def test_solve_triangular_matches_scipy(
    shape: str, names: str, sp: str, types: Any, n: int
) -> None:
    m = make_mesh(shape, types, names=names)
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
                    shard(a_np, mesh=m, spec=sp),
                    b,
                    lower=lower,
                    trans=trans,
                    unit_diagonal=unit,
                    nb=16,
                )
                ref = sl.solve_triangular(t, b, lower=lower, trans=trans, unit_diagonal=unit)
                assert_close(x, ref, scale=float(np.abs(ref).max()) * 10)


def test_bad_trans_is_rejected() -> None:
    m = make_mesh("8")
    with pytest.raises(ValueError, match="trans="):
        solve_triangular(shard(np.eye(16), mesh=m, spec="x,None"), np.ones(16), trans=3)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(("shape", "names", "sp", "types"), [("2x4", "x,y", "x,y", "auto")])
def test_many_right_hand_sides_split_the_diagonal_solves(
    shape: str, names: str, sp: str, types: Any
) -> None:
    # From SPLIT_RHS columns on every device solves a share of each diagonal block's
    # columns (padded to a multiple of the mesh: 259 -> 264) and one all-gather per
    # step joins them; junk (NaN) in the other triangle is never read.
    m = make_mesh(shape, types, names=names)
    rng = np.random.default_rng(1)
    n, nrhs = 48, SPLIT_RHS + 3
    a_np = rng.standard_normal((n, n)) + n * np.eye(n)
    b = rng.standard_normal((n, nrhs))
    every = [(lo, t) for lo in (True, False) for t in (0, 1)]
    cells = [every[0], every[3]] if not FULL else every
    for lower, trans in cells:
        t = np.tril(a_np) if lower else np.triu(a_np)
        junk = np.where(t != 0, t, np.nan)
        code: Trans = 1 if trans else 0

        def fn(a: jax.Array, b: np.ndarray, lo: bool = lower, tr: Trans = code) -> jax.Array:
            return solve_triangular(a, b, lower=lo, trans=tr, nb=8)

        x = jax.jit(fn)(shard(junk, mesh=m, spec=sp), b)
        ref = sl.solve_triangular(t, b, lower=lower, trans=trans)
        assert_close(x, ref, scale=float(np.abs(ref).max()) * 10)
    report = comms(
        lambda a, b: solve_triangular(a, b, nb=8, check_finite=False),
        shard(a_np, mesh=m, spec=sp),
        b,
    )
    kinds = {c.kind for c in report.collectives}
    assert kinds == {"all-reduce", "all-gather"}, kinds
    for c in report.collectives:  # the diagonal blocks (n x nb), else one step's block
        biggest = max(int(np.prod(s)) for s in c.result_shapes)
        assert biggest <= max(n * 8, 8 * 264), f"{c.kind} {c.result_shapes}"
