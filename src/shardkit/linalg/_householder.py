"""Blocked Householder QR of a row-split matrix with TSQR panels (ScaLAPACK's ``pdgeqrf``).

The kernel behind :func:`shardkit.linalg.qr` on tall ``P(rows, None)`` layouts and
behind :func:`shardkit.linalg.lstsq` there. Flat TSQR of an ``M x n`` matrix on ``P``
devices repeats the QR of the ``P n x n`` stack of triangles on every device and forms
two ``q`` factors: at ``16384 x 1024`` on 8 devices it did 4.7x the CPU work of one
LAPACK ``geqrf`` + ``orgqr``. Here the matrix is factored in panels of ``nb`` columns,
as LAPACK does, and only each panel is a TSQR (a stack of ``P nb x nb``, small):

1. the panel's rows at and below the diagonal: local Householder QR on each device,
   an all-gather of the ``nb x nb`` triangles over the row axes, the QR of their stack,
   hence the panel's orthonormal ``Q`` (``(M / R) x nb`` per device) and ``R``;
2. Householder vectors from ``Q`` without another factorization (Ballard, Demmel,
   Grigori, Jacquelin, Nguyen, Solomonik, "Reconstructing Householder vectors from
   tall-skinny QR", 2015): a sign ``S`` per column from an ``nb x nb`` LU of ``Q``'s
   top block, then ``H = I - W T W^H`` with ``W = Q - [S; 0]`` and
   ``T = (I - Q_top^H S)^-1`` is unitary and ``H [S; 0] = Q``, so ``H^H`` takes the
   panel to ``[S R; 0]`` (one all-reduce of the top block and ``R``, ``nb x 2 nb``);
3. the trailing columns are updated with two level-3 products, ``Z = W^H A`` (one
   all-reduce of ``nb x n`` over the row axes) and ``A -= W (T^H Z)``, both restricted
   to the active corner by tiles (:func:`shardkit.linalg._tiles.active_update`).

``q`` is then formed as LAPACK's ``orgqr`` does, ``H_1 ... H_p [I; 0]`` from the last
panel back, with the same products and one all-reduce of ``nb x n`` per panel. Flops:
LAPACK's ``4 M n^2 - 4/3 n^3`` for ``q`` and ``r`` (``2 M n^2 - 2/3 n^3`` for ``r``
alone), plus the panel QRs (about ``7 (M / R) nb^2`` per panel and device). Stable and
rank-revealing as Householder QR: rank-deficient panels included (the local and stack
QRs put their trivial directions in the active rows, rolled to the top).

Mesh axes the layout does not use (``P(x, None)`` on a 2x4 mesh) split the rows
further inside the kernel instead of repeating the work on every replica; ``q``'s row
block is all-gathered over them at the end.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from shardkit.linalg._blockcyclic import after, axis_index, dslice, dupdate, on_owner, psum
from shardkit.linalg._tiles import active_update

__all__ = ["householder_local", "project", "signs"]

PROJECT_TILE = (512, 256)
"""``(rows, columns)`` of one tile of :func:`project` (rounded down to the shape)."""


def _cdiv(x: jax.Array, d: int) -> jax.Array:
    return (x + (d - 1)) // d


def project(
    w: jax.Array, a: jax.Array, row_lo: jax.Array | int, col_lo: jax.Array | int
) -> jax.Array:
    """``w^H a`` over ``a``'s rows from ``row_lo`` and columns from ``col_lo``; zero elsewhere.

    ``w`` is ``(m, nb)`` and zero before ``row_lo``; ``a`` is ``(m, k)``. Tiles from the
    last row and column backwards, with traced trip counts, so that the flops follow the
    active corner (as :func:`~shardkit.linalg._tiles.active_update`). Returns
    ``(nb, k)``, exactly zero in the columns before ``col_lo``.
    """
    m, k = a.shape
    nb = w.shape[1]
    hr, wc = min(m, PROJECT_TILE[0]), min(k, PROJECT_TILE[1])
    ri = jnp.arange(hr, dtype=jnp.int32)
    row_lo, col_lo = jnp.asarray(row_lo, jnp.int32), jnp.asarray(col_lo, jnp.int32)
    wh = jnp.conj(w)

    def col_tile(j: jax.Array, z: jax.Array) -> jax.Array:
        cs = jnp.maximum(k - (j + 1) * wc, 0)

        def row_tile(i: jax.Array, acc: jax.Array) -> jax.Array:
            r_end = m - i * hr
            rs = jnp.maximum(r_end - hr, 0)
            lw = dslice(wh, (rs, 0), (hr, nb))
            if m % hr:  # the first tile overlaps its neighbour: count shared rows once
                lw = jnp.where((rs + ri < r_end)[:, None], lw, 0)
            blk = dslice(a, (rs, cs), (hr, wc))
            return acc + lax.dot_general(lw, blk, (((0,), (0,)), ((), ())))

        acc = jnp.zeros((nb, wc), jnp.result_type(w, a))
        if m <= hr:
            acc = row_tile(jnp.int32(0), acc)
        else:
            acc = lax.fori_loop(jnp.int32(0), _cdiv(m - row_lo, hr), row_tile, acc)
        return dupdate(z, acc, (0, cs))

    z = jnp.zeros((nb, k), jnp.result_type(w, a))
    z = lax.fori_loop(jnp.int32(0), _cdiv(k - col_lo, wc), col_tile, z)
    return jnp.where((jnp.arange(k) >= col_lo)[None, :], z, 0)


def signs(top: jax.Array) -> jax.Array:
    """The signs ``S`` of Householder reconstruction: an LU of ``top - S`` without pivoting.

    Step ``i`` picks ``S_i = -sign(u_ii)`` (the phase, for complex), which makes the pivot
    ``u_ii - S_i`` at least one in magnitude (Ballard et al.'s modified LU). ``top`` is
    the ``nb x nb`` top block of an orthonormal ``Q``. Returns ``S`` (``(nb,)``).
    """
    nb = top.shape[0]
    idx = jnp.arange(nb)

    def step(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        u, s = carry
        piv = u[i, i]
        mag = jnp.abs(piv)
        si = -jnp.where(mag > 0, piv / jnp.where(mag > 0, mag, 1), 1).astype(u.dtype)
        piv = piv - si
        col = jnp.where(idx > i, u[:, i] / piv, 0)
        row = jnp.where(idx > i, u[i, :], 0)
        return u - col[:, None] * row[None, :], s.at[i].set(si)

    _, s = lax.fori_loop(0, nb, step, (top, jnp.zeros((nb,), top.dtype)))
    return s


@dataclasses.dataclass(frozen=True, eq=False)
class _TallPanels:
    """What every panel step of the tall QR reads; built once, outside its loops.

    Attributes:
      axes: the mesh axes splitting the rows here (``rows + spare``).
      parts_total: the devices over ``axes``.
      nb: the panel width.
      m: this device's rows.
      dt: the working dtype.
      ri: this device's index over ``axes``.
      grow: the global row of each local row.
      lanes: ``arange(nb)`` (int32).
    """

    axes: tuple[str, ...]
    parts_total: int
    nb: int
    m: int
    dt: Any
    ri: jax.Array
    grow: jax.Array
    lanes: jax.Array

    def reflector(self, q: jax.Array, s: jax.Array, j: jax.Array) -> jax.Array:
        """``W = Q - [S; 0]``, ``S`` on the rows ``j ..`` of the panel's diagonal block."""
        return q - (self.grow[:, None] == j + self.lanes[None, :]).astype(self.dt) * s[None, :]

    def apply(self, w: jax.Array, t: jax.Array, y: jax.Array, lo: jax.Array, clo: Any) -> jax.Array:
        """``y - w (t (w^H y))`` on the active corner: rows from ``lo``, columns ``clo``."""
        z = psum(project(w, y, lo, clo), self.axes)
        v = jnp.linalg.solve(t, z)
        return active_update(y, w, v, (0, 0), lo, clo, nb=self.nb)


class _Reflectors(NamedTuple):
    """The carry of the loop over panels.

    Attributes:
      x: the local block (with the right-hand sides), updated up to this panel.
      ts: each panel's ``T^-1``; ss: each panel's signs ``S``; rd: each panel's ``S R``.
    """

    x: jax.Array
    ts: jax.Array
    ss: jax.Array
    rd: jax.Array


def _local_qr(
    ctx: _TallPanels, j: jax.Array, lo: jax.Array, pan: jax.Array
) -> tuple[jax.Array, jax.Array]:
    # Active rows first: the QR's trivial directions (a rank-deficient panel)
    # then stay in active rows, never in the rows above the diagonal.
    top = jnp.roll(jnp.where((ctx.grow >= j)[:, None], pan, 0), -lo, axis=0)
    q1, r1 = jnp.linalg.qr(top)
    return q1, r1


def _no_qr(ctx: _TallPanels, pan: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jnp.zeros((ctx.m, ctx.nb), ctx.dt), jnp.zeros((ctx.nb, ctx.nb), ctx.dt)


def _combine(lo: jax.Array, q1: jax.Array, mine: jax.Array) -> jax.Array:
    return jnp.roll(q1 @ mine, lo, axis=0)


def _no_combine(ctx: _TallPanels, q1: jax.Array, mine: jax.Array) -> jax.Array:
    return jnp.zeros((ctx.m, ctx.nb), ctx.dt)


def _panel_q(ctx: _TallPanels, p: jax.Array, x: jax.Array) -> tuple[jax.Array, ...]:
    """The panel's ``W`` (local rows), ``T``, ``S R`` and first local active row."""
    nb, m, ri, axes, dt = ctx.nb, ctx.m, ctx.ri, ctx.axes, ctx.dt
    j = p * nb
    r0 = j // m
    lo = jnp.clip(j - ri * m, 0, m)
    pan = dslice(x, (0, j), (m, nb))
    live = (ri + 1) * m > j
    local_qr = functools.partial(_local_qr, ctx, j, lo)
    q1, r1 = on_owner(live, axes, local_qr, functools.partial(_no_qr, ctx), pan)
    if axes:
        stack = lax.all_gather(r1, axes, tiled=True)  # (P nb, nb)
        # The diagonal's device first, the finished devices' zero triangles last.
        stack = jnp.roll(stack, -r0 * nb, axis=0)
        q2, rts = jnp.linalg.qr(stack)
        mine = dslice(q2, (((ri - r0) % ctx.parts_total) * nb, 0), (nb, nb))
    else:
        mine, rts = jnp.eye(nb, dtype=dt), r1
    combine, none = functools.partial(_combine, lo), functools.partial(_no_combine, ctx)
    q = on_owner(live, axes, combine, none, q1, mine)
    q = jnp.where((ctx.grow >= j)[:, None], q, 0)
    top = jnp.where(ri == r0, dslice(q, (lo, 0), (nb, nb)), 0)
    both = psum(jnp.concatenate([top, jnp.where(ri == r0, rts, 0)], axis=1), axes)
    top, rts = both[:, :nb], both[:, nb:]
    s = signs(top)
    t = jnp.eye(nb, dtype=dt) - jnp.conj(top).T * s[None, :]  # T^-1
    return q, s, t, s[:, None] * rts, lo


def _factor_panel(ctx: _TallPanels, form_q: bool, p: jax.Array, carry: _Reflectors) -> _Reflectors:
    """Panel ``p``: its reflectors, then ``H^H`` on the trailing columns."""
    x, ts, ss, rd = carry
    q, s, t, sr, lo = _panel_q(ctx, p, x)
    j = p * ctx.nb
    # H^H on the trailing columns (a's and the right-hand sides').
    x = ctx.apply(ctx.reflector(q, s, j), jnp.conj(t).T, x, lo, j + ctx.nb)
    if form_q:  # keep the panel's Q where the panel was, for forming q
        old = dslice(x, (0, j), (ctx.m, ctx.nb))
        x = dupdate(x, jnp.where((ctx.grow >= j)[:, None], q, old), (0, j))
    return _Reflectors(x, ts.at[p].set(t), dupdate(ss, s, (j,)), dupdate(rd, sr, (j, 0)))


def _backward_panel(
    ctx: _TallPanels, done: _Reflectors, panels: int, i: jax.Array, q: jax.Array
) -> jax.Array:
    """Forming ``q``: panel ``panels - 1 - i``'s reflectors applied to ``q``."""
    nb, m, grow = ctx.nb, ctx.m, ctx.grow
    p = panels - 1 - i
    j = p * nb
    qp = jnp.where((grow >= j)[:, None], dslice(done.x, (0, j), (m, nb)), 0)
    s = dslice(done.ss, (j,), (nb,))
    lo = jnp.clip(j - ctx.ri * m, 0, m)
    q = ctx.apply(ctx.reflector(qp, s, j), done.ts[p], q, lo, j + nb)
    # H_p [I; 0] on the panel's own columns is the panel's Q S^H, as the TSQR
    # gave it: set, not computed (no rounding from W and T there).
    return dupdate(q, qp * jnp.conj(s)[None, :], (0, j))


def _r_and_qtb(
    ctx: _TallPanels, done: _Reflectors, gcol: jax.Array, n: int, extra: bool, rest: bool
) -> dict[str, jax.Array]:
    """``r`` (and ``qtb``, ``rest``), replicated: one all-reduce (two with ``rest``)."""
    nb, grow, ri, axes, x = ctx.nb, ctx.grow, ctx.ri, ctx.axes, done.x
    out: dict[str, jax.Array] = {}
    npd = gcol.shape[0]
    # r: above each diagonal block what the updates left in a, the blocks S R, zeros.
    head = jnp.where(ri == 0, x[:npd], 0)  # r's rows: all on the first device
    rr = grow[:npd]
    upper = jnp.where(rr[:, None] < (gcol // nb * nb)[None, :], head[:, :npd], 0)
    diag = done.rd[rr][:, gcol % nb]
    r = upper + jnp.where((rr[:, None] // nb) == (gcol // nb)[None, :], diag, 0)
    if extra:
        both = psum(jnp.concatenate([r, head[:, npd:]], axis=1), axes)
        out["r"], out["qtb"] = both[:n, :n], both[:n, npd:]
        if rest:
            res = jnp.sum(jnp.abs(jnp.where((grow >= npd)[:, None], x[:, npd:], 0)) ** 2, 0)
            # Rows n to npd of q^H b belong to the zero columns: part of the residual.
            res = psum(after(res, both), axes)
            out["rest"] = res + jnp.sum(jnp.abs(both[n:, npd:]) ** 2, 0)
    else:
        out["r"] = psum(r, axes)[:n, :n]
    return out


def householder_local(
    a: jax.Array,
    *,
    rows: tuple[str, ...],
    spare: tuple[str, ...],
    sizes: tuple[int, int],
    n: int,
    nb: int,
    form_q: bool,
    extra: jax.Array | None = None,
    rest: bool = False,
) -> dict[str, jax.Array]:
    """Householder QR of a row-split ``(M, n)`` matrix, inside ``shard_map``.

    Args:
      a: this device's row block ``(M / R, n)`` (natural order, replicated over ``spare``).
      rows: the mesh axes splitting the rows.
      spare: mesh axes ``a`` is replicated over; they split the rows further here.
      sizes: ``(R S, S)``: the devices over ``rows + spare`` and over ``spare``.
      n: the number of columns (padded with zero columns to a multiple of ``nb`` here;
        at most ``M / (R S)`` after that).
      nb: the panel width; it divides ``M / (R S)``, at least ``n``.
      form_q: form ``q`` (else only ``r``).
      extra: ``(M / R, nrhs)`` right-hand sides, transformed with ``a`` (``q^H b`` in
        its first ``n`` rows).
      rest: also return the squared norms of ``q^H b``'s rows past ``n`` (with
        ``extra``: the residuals of a full-rank least-squares problem).

    Returns:
      ``{"r": (n, n) replicated, "q": (M / R, n) like a, "qtb": (n, nrhs) replicated,
      "rest": (nrhs,) the squared norms of q^H b's rows past n, replicated}``
      (``q`` only with ``form_q``, ``qtb`` only with ``extra``, ``rest`` with ``rest``).
    """
    axes = rows + spare
    parts_total, nsp = sizes
    ms = a.shape[0] // nsp
    if spare:
        si = axis_index(spare)
        a = dslice(a, (si * ms, 0), (ms, a.shape[1]))
        if extra is not None:
            extra = dslice(extra, (si * ms, 0), (ms, extra.shape[1]))
    # Zero columns up to a whole panel: the first n columns' factors do not see them.
    npd = -(-n // nb) * nb
    x = jnp.pad(a, ((0, 0), (0, npd - n))) if npd > n else a
    x = x if extra is None else jnp.concatenate([x, extra.astype(x.dtype)], axis=1)
    dt = x.dtype
    m = x.shape[0]
    ri = axis_index(axes)
    grow = ri * m + jnp.arange(m, dtype=jnp.int32)
    lanes = jnp.arange(nb, dtype=jnp.int32)
    if m < npd:
        raise NotImplementedError(f"householder_local: {m} local rows < n={npd}")
    ctx = _TallPanels(axes, parts_total, nb, m, dt, ri, grow, lanes)
    panels = npd // nb
    init = _Reflectors(
        x, jnp.zeros((panels, nb, nb), dt), jnp.zeros((npd,), dt), jnp.zeros((npd, nb), dt)
    )
    step = functools.partial(_factor_panel, ctx, form_q)
    done = lax.fori_loop(jnp.int32(0), jnp.int32(panels), step, init)
    gcol = jnp.arange(npd, dtype=jnp.int32)  # r's columns
    out = _r_and_qtb(ctx, done, gcol, n, extra is not None, rest)
    if form_q:
        q = (grow[:, None] == gcol[None, :]).astype(dt)
        q = after(q, out["r"])
        backward = functools.partial(_backward_panel, ctx, done, panels)
        q = lax.fori_loop(jnp.int32(0), jnp.int32(panels), backward, q)[:, :n]
        out["q"] = lax.all_gather(q, spare, axis=0, tiled=True) if spare else q
    return out
