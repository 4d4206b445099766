"""Blocked Householder QR of a sharded matrix with TSQR panels (ScaLAPACK's ``pdgeqrf``).

The kernel behind :func:`shardkit.linalg.qr` and :func:`shardkit.linalg.lstsq` on every
layout whose blocks fit a panel: tall ``P(rows, None)``, square, split columns
``P(rows, cols)``, row blocks shorter than ``n``; in the matrix's natural layout. Flat
TSQR of an ``M x n`` matrix on ``P`` devices repeats the QR of the ``P n x n`` stack of
triangles on every device and forms two ``q`` factors: at ``16384 x 1024`` on 8
devices it did 4.7x the CPU work of one LAPACK ``geqrf`` + ``orgqr``; block
Gram-Schmidt (BCGS2) on a square matrix does 1.5x LAPACK's flops and repeats the panel
TSQRs on every column group (1.7x to 2.2x SciPy's CPU time at ``n = 4096``). Here the
matrix is factored in panels of ``nb`` columns, as LAPACK does, and only each panel is
a TSQR (a stack of ``R nb x nb``, small), on the column group that holds it:

1. the panel's rows at and below the diagonal: local Householder QR on each device
   of the owner column group, an all-gather of the ``nb x nb`` triangles over the row
   axes; the diagonal's device alone QRs their stack (:func:`_head`);
2. Householder vectors from ``Q`` without another factorization (Ballard, Demmel,
   Grigori, Jacquelin, Nguyen, Solomonik, "Reconstructing Householder vectors from
   tall-skinny QR", 2015): a sign ``S`` per column from an ``nb x nb`` LU of ``Q``'s
   top block, then ``H = I - W T W^H`` with ``W = Q - [S; 0]`` and
   ``T = (I - Q_top^H S)^-1`` is unitary and ``H [S; 0] = Q``, so ``H^H`` takes the
   panel to ``[S R; 0]``; the diagonal's device computes them and one all-reduce of
   ``((R + 2) nb + 1) x nb`` hands out the stack's ``q`` (each device's block of it),
   ``T^-1``, ``S R`` and ``S``; the panel's ``Q`` goes along the mesh row (an
   all-reduce of ``(M / R) x nb`` over the column axes, when they are split);
3. the trailing columns are updated with two level-3 products, ``Z = W^H A`` (one
   all-reduce of ``nb x (n / C)`` over the row axes) and ``A -= W (T^H Z)``, both
   restricted to the active corner by tiles (:func:`shardkit.linalg._tiles.active_update`).

``q`` is then formed as LAPACK's ``orgqr`` does, ``H_1 ... H_p [I; 0]`` from the last
panel back, with the same products and one all-reduce of ``nb x (n / C)`` per panel
(and the panel's ``Q`` along the mesh row again). Flops: LAPACK's ``4 M n^2 - 4/3 n^3``
for ``q`` and ``r`` (``2 M n^2 - 2/3 n^3`` for ``r`` alone), plus the panel QRs
(about ``7 (M / R) nb^2`` per panel on the owner column group). Stable and
rank-revealing as Householder QR: rank-deficient panels included (the local and stack
QRs put their trivial directions in the active rows, rolled to the top).

Mesh axes the layout does not use (``P(x, None)`` on a 2x4 mesh) split the rows
further inside the kernel instead of repeating the work on every replica; ``q``'s row
block is all-gathered over them at the end.

The loops are flat functions of a :class:`QrStage` (the sizes and axes) and NamedTuple
states (:class:`Reducing`, :class:`FormingQ`), as the LU kernel's.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

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


class QrStage(NamedTuple):
    """What every step of one factorization reads: its static sizes and mesh axes."""

    rows: tuple[str, ...]  # the axes splitting the rows (the layout's, then the spare ones)
    cols: tuple[str, ...]  # the axes splitting the columns (none on the tall layout)
    parts: int  # devices over ``rows``
    m: int  # rows per device
    k: int  # a's columns per device (``npd`` when ``cols`` is empty)
    nb: int  # the panel width (divides ``m`` and ``k``)
    npd: int  # the matrix's columns, padded to a whole panel


class Reflector(NamedTuple):
    """One panel's reflector, as :func:`_panel` builds it (replicated over ``cols``)."""

    q: jax.Array  # (m, nb) the panel's orthonormal Q, zero above its diagonal
    s: jax.Array  # (nb,) the signs S of the reconstruction
    t: jax.Array  # (nb, nb) T^-1 = I - Q_top^H S
    sr: jax.Array  # (nb, nb) S R: r's diagonal block
    lo: jax.Array  # the first local row at or below the diagonal


class Reducing(NamedTuple):
    """The factorization loop's state."""

    x: jax.Array  # (m, k + nrhs) the local block (and right-hand sides), reduced so far
    ts: jax.Array  # (panels, nb, nb) every panel's T^-1
    ss: jax.Array  # (npd,) the signs
    rd: jax.Array  # (npd, nb) the diagonal blocks S R


class FormingQ(NamedTuple):
    """The loop state of forming ``q`` (``x``, ``ts`` and ``ss`` are read only)."""

    q: jax.Array  # (m, k) q's local block, formed from the last panel back
    x: jax.Array
    ts: jax.Array
    ss: jax.Array


def _grow(st: QrStage) -> jax.Array:
    """The global row of each local row."""
    return axis_index(st.rows) * st.m + jnp.arange(st.m, dtype=jnp.int32)


def _gcol(st: QrStage) -> jax.Array:
    """The global column of each local column of ``a``."""
    return axis_index(st.cols) * st.k + jnp.arange(st.k, dtype=jnp.int32)


def _owner(st: QrStage, j: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Whether this device's column group holds global column ``j``, and its local offset."""
    owner = j // st.k
    return axis_index(st.cols) == owner, j - owner * st.k


def _local_col(st: QrStage, j: jax.Array) -> jax.Array:
    """The first local column at or right of global column ``j``."""
    return jnp.clip(j - axis_index(st.cols) * st.k, 0, st.k)


def _local_qr(st: QrStage, pan: jax.Array, j: jax.Array, lo: jax.Array) -> tuple[jax.Array, ...]:
    # Active rows first: the QR's trivial directions (a rank-deficient panel) then stay
    # in active rows, never in the rows above the diagonal.
    top = jnp.roll(jnp.where((_grow(st) >= j)[:, None], pan, 0), -lo, axis=0)
    q1, r1 = jnp.linalg.qr(top)
    return q1, r1


def _idle_qr(st: QrStage, pan: jax.Array, j: jax.Array, lo: jax.Array) -> tuple[jax.Array, ...]:
    return jnp.zeros((st.m, st.nb), pan.dtype), jnp.zeros((st.nb, st.nb), pan.dtype)


def _combine(q1: jax.Array, mix: jax.Array, lo: jax.Array) -> jax.Array:
    return jnp.roll(q1 @ mix, lo, axis=0)


def _no_rows(q1: jax.Array, mix: jax.Array, lo: jax.Array) -> jax.Array:
    return jnp.zeros_like(q1)


def _head(st: QrStage, stack: jax.Array, q1: jax.Array) -> jax.Array:
    """The diagonal's device: the stack's QR, the signs and ``T^-1``, packed for one psum.

    Its own rows of the panel's Q start with the diagonal block (the rows were rolled
    so), whose top block ``Q_top = q1[:nb] q2[:nb]`` gives the signs ``S`` and ``T^-1``.
    Returns ``[q2; T^-1; S R; S]``, ``(P nb + 2 nb + 1, nb)``.
    """
    nb = st.nb
    q2, rts = jnp.linalg.qr(stack)
    top = q1[:nb] @ q2[:nb]
    s = signs(top)
    t = jnp.eye(nb, dtype=top.dtype) - jnp.conj(top).T * s[None, :]  # T^-1
    return jnp.concatenate([q2, t, s[:, None] * rts, s[None, :]], axis=0)


def _no_head(st: QrStage, stack: jax.Array, q1: jax.Array) -> jax.Array:
    return jnp.zeros((stack.shape[0] + 2 * st.nb + 1, st.nb), stack.dtype)


def _panel(st: QrStage, x: jax.Array, p: jax.Array) -> Reflector:
    """Panel ``p``'s TSQR and reflector: its owner column group factors it, then sends it along.

    Each device with active rows QRs its part of the panel; one all-gather stacks the
    ``R`` triangles; the diagonal's device alone QRs the stack and reconstructs the
    reflector (:func:`_head`), and one all-reduce hands out the stack's ``q`` (each
    device's block of it), ``T^-1``, ``S R`` and ``S``.
    """
    nb, m = st.nb, st.m
    j = p * nb
    ri = axis_index(st.rows)
    r0 = j // m
    lo = jnp.clip(j - ri * m, 0, m)
    mine, off = _owner(st, j)
    live = mine & ((ri + 1) * m > j)
    every = st.rows + st.cols
    pan = dslice(x, (0, off), (m, nb))
    q1, r1 = on_owner(live, every, partial(_local_qr, st), partial(_idle_qr, st), pan, j, lo)
    # The diagonal's device first, the finished devices' zero triangles last.
    stack = jnp.roll(lax.all_gather(r1, st.rows, tiled=True), -r0 * nb, axis=0) if st.rows else r1
    here = (ri == r0) & mine
    packed = psum(
        on_owner(here, every, partial(_head, st), partial(_no_head, st), stack, q1), every
    )
    big = stack.shape[0]
    mix = dslice(packed, (((ri - r0) % st.parts) * nb, 0), (nb, nb))
    t, sr, s = packed[big : big + nb], packed[big + nb : big + 2 * nb], packed[-1]
    q = on_owner(live, every, _combine, _no_rows, q1, mix, lo)
    q = psum(q, st.cols)  # the panel's Q along the mesh row: (M / R) x nb
    q = jnp.where((_grow(st) >= j)[:, None], q, 0)
    return Reflector(q, s, t, sr, lo)


def _reflector(st: QrStage, q: jax.Array, s: jax.Array, j: jax.Array) -> jax.Array:
    """``W = Q - [S; 0]``, ``S`` on the rows ``j ..`` of the panel's diagonal block."""
    lanes = jnp.arange(st.nb, dtype=jnp.int32)
    return q - (_grow(st)[:, None] == j + lanes[None, :]).astype(q.dtype) * s[None, :]


def _apply(
    st: QrStage, w: jax.Array, t: jax.Array, y: jax.Array, lo: jax.Array, clo: jax.Array
) -> jax.Array:
    """``y - w (t (w^H y))`` on the active corner: local rows from ``lo``, columns ``clo``."""
    z = psum(project(w, y, lo, clo), st.rows)
    v = jnp.linalg.solve(t, z)
    return active_update(y, w, v, (0, 0), lo, clo, nb=st.nb)


def _set_panel(st: QrStage, y: jax.Array, j: jax.Array, value: jax.Array) -> jax.Array:
    """``value`` over the panel's columns of ``y`` on their owner column group only."""
    mine, off = _owner(st, j)
    if not st.cols:
        return dupdate(y, value, (0, off))
    # The other groups aim past the end (dropped): a select against the old columns
    # would make XLA copy the whole local block into LAPACK's column-major layout.
    dest = jnp.where(mine, off + jnp.arange(st.nb, dtype=jnp.int32), y.shape[1])
    return y.at[:, dest].set(value, mode="drop")


def _factor_step(st: QrStage, form_q: bool, p: jax.Array, f: Reducing) -> Reducing:
    """Panel ``p``: its reflector, ``H^H`` on the trailing columns (and right-hand sides)."""
    pan = _panel(st, f.x, p)
    j = p * st.nb
    w = _reflector(st, pan.q, pan.s, j)
    x = _apply(st, w, jnp.conj(pan.t).T, f.x, pan.lo, _local_col(st, j + st.nb))
    if form_q:  # keep the panel's Q where the panel was, for forming q
        _, off = _owner(st, j)
        old = dslice(x, (0, off), (st.m, st.nb))
        x = _set_panel(st, x, j, jnp.where((_grow(st) >= j)[:, None], pan.q, old))
    ts = f.ts.at[p].set(pan.t)
    return Reducing(x, ts, dupdate(f.ss, pan.s, (j,)), dupdate(f.rd, pan.sr, (j, 0)))


def _r_block(st: QrStage, x: jax.Array, rd: jax.Array) -> jax.Array:
    """``r`` on this device's rows and columns: what the updates left above each diagonal
    block, the blocks ``S R``, zeros below."""
    grow, gcol = _grow(st), _gcol(st)
    upper = jnp.where(grow[:, None] < (gcol // st.nb * st.nb)[None, :], x[:, : st.k], 0)
    diag = rd[jnp.clip(grow, 0, st.npd - 1)][:, gcol % st.nb]
    same = (grow[:, None] // st.nb) == (gcol // st.nb)[None, :]
    return upper + jnp.where(same, diag, 0)


def _q_step(st: QrStage, i: jax.Array, f: FormingQ) -> FormingQ:
    """``H_p`` on ``q`` for panel ``p = panels - 1 - i`` (LAPACK's ``orgqr`` order)."""
    p = st.npd // st.nb - 1 - i
    j = p * st.nb
    mine, off = _owner(st, j)
    pan = dslice(f.x, (0, off), (st.m, st.nb))
    if st.cols:  # the panel's Q along the mesh row, after the previous panel's update
        pan = psum(jnp.where(mine, after(pan, f.q), 0), st.cols)
    qp = jnp.where((_grow(st) >= j)[:, None], pan, 0)
    s = dslice(f.ss, (j,), (st.nb,))
    lo = jnp.clip(j - axis_index(st.rows) * st.m, 0, st.m)
    q = _apply(st, _reflector(st, qp, s, j), f.ts[p], f.q, lo, _local_col(st, j + st.nb))
    # H_p [I; 0] on the panel's own columns is the panel's Q S^H, as the TSQR gave it:
    # set, not computed (no rounding from W and T there).
    return f._replace(q=_set_panel(st, q, j, qp * jnp.conj(s)[None, :]))


def _form_q(st: QrStage, f: Reducing, dep: jax.Array) -> jax.Array:
    """``q = H_1 ... H_p [I; 0]``: this device's ``(m, k)`` block (after ``dep``)."""
    q = (_grow(st)[:, None] == _gcol(st)[None, :]).astype(f.x.dtype)
    init = FormingQ(after(q, dep), f.x, f.ts, f.ss)
    panels = jnp.int32(st.npd // st.nb)
    return lax.fori_loop(jnp.int32(0), panels, partial(_q_step, st), init).q


def _gathered_r(st: QrStage, f: Reducing, n: int, rest: bool) -> dict[str, jax.Array]:
    """``r`` (``n`` rows, this device's columns) and ``q^H b`` on every device of the row axes."""
    rb = _r_block(st, f.x, f.rd)
    grow = _grow(st)
    rhs = f.x[:, st.k :]
    full = jnp.concatenate([rb, rhs], axis=1)
    buf = jnp.zeros((st.npd, full.shape[1]), full.dtype).at[grow].set(full, mode="drop")
    both = psum(buf, st.rows)
    width = st.k if st.cols else n
    out = {"r": both[:n, :width]}
    if rhs.shape[1]:
        out["qtb"] = both[:n, st.k :]
    if rest:
        res = jnp.sum(jnp.abs(jnp.where((grow >= st.npd)[:, None], rhs, 0)) ** 2, 0)
        # Rows n to npd of q^H b belong to the zero columns: part of the residual.
        res = psum(after(res, both), st.rows)
        out["rest"] = res + jnp.sum(jnp.abs(both[n:, st.k :]) ** 2, 0)
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
    cols: tuple[str, ...] = (),
    own_r: bool = False,
) -> dict[str, jax.Array]:
    """Householder QR of a sharded ``(M, n)`` matrix in its natural layout, inside ``shard_map``.

    Args:
      a: this device's block ``(M / R, n / C)`` (natural order, replicated over ``spare``).
      rows: the mesh axes splitting the rows.
      spare: mesh axes ``a`` is replicated over; they split the rows further here.
      sizes: ``(R S, S)``: the devices over ``rows + spare`` and over ``spare``.
      n: the number of columns (without ``cols``, padded with zero columns to a
        multiple of ``nb`` here).
      nb: the panel width; it divides ``M / (R S)`` and ``n / C``.
      form_q: form ``q`` (else only ``r``).
      extra: ``(M / R, nrhs)`` right-hand sides, transformed with ``a`` (``q^H b`` in
        its first ``n`` rows).
      rest: also return the squared norms of ``q^H b``'s rows past ``n`` (with
        ``extra``: the residuals of a full-rank least-squares problem).
      cols: the mesh axes splitting the columns (``n / C`` per device, no padding).
      own_r: return this device's own rows of ``r`` (its rows of ``a`` that are rows of
        ``r``: a square matrix's row blocks) instead of all ``n``; no collective.

    Returns:
      ``{"r": (n, n / C), replicated over the row axes (own_r: (M / R, n / C)),
      "q": (M / R, n / C) like a, "qtb": (n, nrhs) replicated, "rest": (nrhs,) the
      squared norms of q^H b's rows past n, replicated, "diag": (n,) r's diagonal,
      replicated}`` (``q`` only with ``form_q``, ``qtb`` only with ``extra``, ``rest``
      with ``rest``).
    """
    parts, nsp = sizes
    ms = a.shape[0] // nsp
    if spare:
        si = axis_index(spare)
        a = dslice(a, (si * ms, 0), (ms, a.shape[1]))
        if extra is not None:
            extra = dslice(extra, (si * ms, 0), (ms, extra.shape[1]))
    # Zero columns up to a whole panel: the first n columns' factors do not see them.
    npd = n if cols else -(-n // nb) * nb
    x = jnp.pad(a, ((0, 0), (0, npd - n))) if npd > a.shape[1] and not cols else a
    k = x.shape[1]
    x = x if extra is None else jnp.concatenate([x, extra.astype(x.dtype)], axis=1)
    if ms % nb or k % nb:
        raise NotImplementedError(f"householder_local: nb={nb} divides neither {ms} nor {k}")
    st = QrStage(rows + spare, cols, parts, ms, k, nb, npd)
    dt, panels = x.dtype, npd // nb
    init = Reducing(
        x, jnp.zeros((panels, nb, nb), dt), jnp.zeros((npd,), dt), jnp.zeros((npd, nb), dt)
    )
    step = partial(_factor_step, st, form_q)
    f = lax.fori_loop(jnp.int32(0), jnp.int32(panels), step, init)
    idx = jnp.arange(npd)
    out = {"diag": f.rd[idx, idx % nb][:n]}
    if own_r and extra is None and not rest:
        out["r"] = _r_block(st, f.x, f.rd)
    else:
        out |= _gathered_r(st, f, n, rest)
    if form_q:
        q = _form_q(st, f, out["r"])
        q = q if cols else q[:, :n]
        out["q"] = lax.all_gather(q, spare, axis=0, tiled=True) if spare else q
    return out
