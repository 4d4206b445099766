"""The tiled trailing update of LU and Cholesky: only the active corner, tile-sized matmuls."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.linalg import cholesky, lu_factor
from shardkit.linalg._tiles import TILE, active_update
from shardkit.testing import assert_close


@pytest.mark.parametrize(
    ("rows", "cols", "nb", "row_lo", "col_lo", "stair"),
    [
        (12, 20, 2, 0, 0, False),
        (12, 20, 2, 5, 7, False),
        (300, 40, 4, 37, 3, False),  # rows > TILE rows: an edge tile overlaps its neighbour
        (40, 600, 8, 9, 101, False),  # cols > TILE cols
        (300, 600, 4, 30, 50, True),
        (16, 16, 4, 16, 0, False),  # nothing active
    ],
)
@pytest.mark.parametrize("right_rows", [False, True])
def test_active_update_touches_only_the_active_corner(
    rows, cols, nb, row_lo, col_lo, stair, right_rows
) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    at = (3, 2)
    a = rng.standard_normal((rows + at[0], cols + at[1]))
    left, right = rng.standard_normal((rows, nb)), rng.standard_normal((nb, cols))
    # The callers' contract: the factors are zero outside the active rows and columns.
    left[:row_lo], right[:, :col_lo] = 0, 0
    # The staircase: column j's rows start at row j (a lower triangle).
    first = (lambda j: j) if stair else None
    # right_rows: the right factor is passed transposed, (cols, nb).
    given = right.T.copy() if right_rows else right

    def update(a, x, y, r, c):  # type: ignore[no-untyped-def]
        return active_update(a, x, y, at, r, c, nb=nb, first_row=first, right_rows=right_rows)

    got = jax.jit(update)(a, left, given, row_lo, col_lo)
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    active = (i >= row_lo) & (j >= col_lo)
    want = a.copy()
    want[at[0] :, at[1] :] -= np.where(active, left @ right, 0)
    got = np.asarray(got)
    outside = ~np.pad(active, ((at[0], 0), (at[1], 0)))
    np.testing.assert_array_equal(got[outside], a[outside])
    # With the staircase, tiles skip only rows above their first column: the lower
    # triangle is exact, some of the upper one may be updated as well.
    keep = np.pad(i >= j, ((at[0], 0), (at[1], 0)), constant_values=True) if stair else True
    assert_close(np.where(keep, got, 0), np.where(keep, want, 0))


def _dot_shapes(text: str) -> set[tuple[int, int]]:
    found = re.findall(r"stablehlo\.dot_general.*?-> tensor<(\d+)x(\d+)x", text)
    return {(int(r), int(c)) for r, c in found}


@pytest.mark.parametrize("op", ["lu", "cholesky"])
def test_update_matmuls_are_tiles_not_the_whole_share(op: str) -> None:
    # n = 1024 on 2x4: a 512 x 256 share. The old update was one matmul per 8-column
    # strip of all (up to 512) active rows: full-height, memory-bound, and over the
    # static rows of a whole stage. The tiled one never exceeds TILE.
    mesh = make_mesh("2x4")
    s = jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P("x", "y")))
    fn = (lambda a: lu_factor(a, nb=8)) if op == "lu" else (lambda a: cholesky(a, nb=8))
    shapes = _dot_shapes(jax.jit(fn).lower(s).as_text())
    assert shapes, "no matmul found"
    assert max(r for r, _ in shapes) <= TILE[0], shapes
    assert max(c for _, c in shapes) <= TILE[1], shapes
