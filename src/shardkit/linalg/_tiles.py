"""The trailing update of the factorizations, restricted to the active corner by tiles.

A right-looking factorization subtracts ``left @ right`` from the rows and columns not
yet eliminated. In the block-cyclic layout those are a *suffix* of each device's local
rows and columns (:mod:`shardkit.linalg._blockcyclic` keeps the blocks in elimination
order), but its length changes every step and differs between devices, so it cannot be
a static shape. :func:`active_update` walks the suffix with fixed-size tiles instead,
from the last row and column backwards, in two ``fori_loop`` with traced trip counts:
the flops follow the remaining matrix step by step (ScaLAPACK's ``pdgetrf``), within one
tile of it, rather than the static bounds of a whole stage. Cholesky passes
``first_row`` to skip the tiles above the diagonal (half the flops).

The tiles are also what keeps the matmul cache-sized: one ``(n/R) x (n/C)`` matmul reads
and writes the whole share per step; measured on XLA's CPU backend (one thread) a
``512 x 128 @ 128 x 4096`` update ran at 28 GFLOP/s and ``128 x 128 @ 128 x 128`` or
``256 x 128 @ 128 x 512`` tiles at 65. The tile is one ``128``-square (``nb``-rounded):
larger ones waste flops at the active corner's edge (``256 x 512`` tiles at n=4096,
nb=128 on 8 devices cost 1.33x LU's flops, ``128 x 128`` ones 1.11x).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from shardkit.linalg._blockcyclic import dslice, dupdate

__all__ = ["TILE", "active_update", "tile_shape"]

TILE = (128, 128)
"""Target ``(rows, columns)`` of one update tile (rounded to multiples of ``nb``)."""


def tile_shape(rows: int, cols: int, nb: int) -> tuple[int, int]:
    """The tile of an update of ``rows x cols``: :data:`TILE` rounded to ``nb``, capped."""
    hr = min(rows, nb * max(1, TILE[0] // nb))
    wc = min(cols, nb * max(1, TILE[1] // nb))
    return hr, wc


def _cdiv(x: jax.Array, d: int) -> jax.Array:
    return (x + (d - 1)) // d


def _tiles(
    count: jax.Array, size: int, tile: int, body: Callable[..., jax.Array], a: jax.Array
) -> jax.Array:
    # One tile covers everything: call the body once (masked to a no-op when nothing is
    # active) rather than a while loop, which costs compile time on small problems.
    if size <= tile:
        return body(jnp.int32(0), a)
    return lax.fori_loop(jnp.int32(0), count, body, a)


def active_update(
    a: jax.Array,
    left: jax.Array,
    right: jax.Array,
    at: tuple[int, int],
    row_lo: jax.Array,
    col_lo: jax.Array,
    *,
    nb: int,
    first_row: Callable[[jax.Array], jax.Array] | None = None,
    right_rows: bool = False,
) -> jax.Array:
    """``a[r0 + i, c0 + j] -= (left @ right)[i, j]``, computed for the active corner only.

    ``left`` is ``(rows, kk)``, ``right`` is ``(kk, cols)`` and ``at = (r0, c0)`` (static)
    places them in ``a``. The caller zeroes ``left``'s rows before ``row_lo`` and
    ``right``'s columns before ``col_lo`` (both factorizations' panels are masked so),
    which makes the update there a no-op; the tiles decide which products are computed
    at all: those meeting the active corner. Where the tiles do not divide the shape,
    the first tile overlaps its neighbour and the shared rows (columns) are masked out
    of it, so nothing is updated twice; a shape one tile covers is one matmul, no loop.

    Args:
      a: the local block, updated in place (a ``fori_loop`` carry).
      left, right: the update's factors, zero outside the active rows and columns.
      at: where ``left``'s row 0 and ``right``'s column 0 sit in ``a``.
      row_lo, col_lo: first active row of ``left`` and column of ``right`` (traced).
      nb: block size (the tiles are multiples of it).
      first_row: optional, the first row worth updating in a tile whose first active
        column is ``j`` (Cholesky: the diagonal; the rows above it may or may not be
        updated).
      right_rows: ``right`` is given transposed, ``(cols, kk)`` (the update is then
        ``left @ right.T``): each tile reads a row block of it, and no transposed copy
        of the whole factor is made (Cholesky's ``L21 L21^H``).

    Returns:
      ``a`` updated.
    """
    r0, c0 = at
    rows, kk = left.shape
    cols = right.shape[0] if right_rows else right.shape[1]
    hr, wc = tile_shape(rows, cols, nb)
    ri = jnp.arange(hr, dtype=jnp.int32)
    ci = jnp.arange(wc, dtype=jnp.int32)
    row_lo, col_lo = jnp.asarray(row_lo, jnp.int32), jnp.asarray(col_lo, jnp.int32)

    def col_tile(j: jax.Array, a: jax.Array) -> jax.Array:
        c_end = cols - j * wc
        cs = jnp.maximum(c_end - wc, 0)
        if right_rows:
            rw = dslice(right, (cs, 0), (wc, kk))
            if cols % wc:
                rw = jnp.where((cs + ci < c_end)[:, None], rw, 0)
        else:
            rw = dslice(right, (0, cs), (kk, wc))
            if cols % wc:
                rw = jnp.where((cs + ci < c_end)[None, :], rw, 0)
        if first_row is None:
            lo = row_lo
        else:
            lo = jnp.maximum(row_lo, first_row(jnp.maximum(cs, col_lo)).astype(jnp.int32))

        def row_tile(i: jax.Array, a: jax.Array) -> jax.Array:
            r_end = rows - i * hr
            rs = jnp.maximum(r_end - hr, 0)
            lw = dslice(left, (rs, 0), (hr, kk))
            if rows % hr:
                lw = jnp.where((rs + ri < r_end)[:, None], lw, 0)
            start = (r0 + rs, c0 + cs)
            prod = lax.dot_general(lw, rw, (((1,), (1,)), ((), ()))) if right_rows else lw @ rw
            return dupdate(a, dslice(a, start, (hr, wc)) - prod, start)

        return _tiles(_cdiv(rows - lo, hr), rows, hr, row_tile, a)

    return _tiles(_cdiv(cols - col_lo, wc), cols, wc, col_tile, a)
