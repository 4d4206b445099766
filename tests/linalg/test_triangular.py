"""shardkit.linalg.solve_triangular against SciPy over meshes, triangles and transposes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.linalg as sl

from _matrix import FULL
from _meshes import make_mesh
from shardkit.layout import shard
from shardkit.linalg import solve_triangular
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
                    shard(a_np, m, sp), b, lower=lower, trans=trans, unit_diagonal=unit, nb=16
                )
                ref = sl.solve_triangular(t, b, lower=lower, trans=trans, unit_diagonal=unit)
                assert_close(x, ref, scale=float(np.abs(ref).max()) * 10)


def test_bad_trans_is_rejected() -> None:
    m = make_mesh("8")
    with pytest.raises(ValueError, match="trans="):
        solve_triangular(shard(np.eye(16), m, "x,None"), np.ones(16), trans=3)
