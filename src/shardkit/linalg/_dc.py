"""Spectral divide and conquer for Hermitian matrices split by rows (inside ``shard_map``).

Nakatsukasa and Higham (SIAM J. Sci. Comput. 35(3), 2013): for a shift ``sigma``
inside the spectrum of ``H``, ``P = (U + I) / 2`` with ``U`` the polar factor of
``H - sigma I`` is the orthogonal projector onto the eigenvectors of eigenvalues above
``sigma``; an orthonormal basis ``[V1 V2]`` of its null space and range splits ``H``
into ``V1^H H V1`` and ``V2^H H V2``, decomposed in turn.

**Static shapes.** The sizes of the halves depend on the data, so instead of
recursing on smaller matrices every level works on the whole ``N x N`` matrix, kept
block diagonal: a vector of segment starts (replicated, length ``N``) says which
diagonal blocks are the current subproblems. One polar decomposition of the block
diagonal ``H - diag(sigma_s)`` (each segment its own shift) splits every segment at
once, since the polar factor of a block diagonal matrix is block diagonal. Segments
are ordered by their eigenvalues (the part below a shift comes first), so the final
eigenvalues come out ascending. A level costs the same as the first: the price of
shapes that never depend on the data (JAX's single-device ``eigh`` instead pads the
subproblems to a few bucket sizes and switches between them).

**Choosing the shift.** Per segment, the midpoint of two neighbouring distinct
diagonal entries nearest the segment's median (the diagonal lies in the segment's
eigenvalue range, so both sides are non-empty). ``trace(P) - ||P||_F^2`` (zero for an
exact projector) tells whether an eigenvalue sat on the shift; such segments retry
with a shifted shift.

**The basis.** Columns ``(I - P) G`` for the low part and ``P G`` for the high part
(``G`` Gaussian, block diagonal), made orthonormal by QR, then once more from the
basis itself (one step of subspace iteration, so the split is accurate to working
precision even when ``G``'s columns are badly conditioned). The second pass moves an
orthonormal basis by about the first pass's error, so one Newton-Schulz step
(:func:`_polished`, two ring products) makes it orthonormal again instead of a QR.

**Finished segments.** A segment whose off-diagonal part is below ``eps ||A||_F`` is
diagonal to working precision: its diagonal is sorted by a permutation instead of
split by a shift. Segments that fit the base case's window of the device where they
start (:func:`base_size`) are finished locally by the base case.

**Base case.** Device ``d`` takes the segments *starting* in its rows: it receives the
next ``t`` devices' rows of its ``(t + 1) b``-wide diagonal window (``t``
collective-permutes of ``b x (t + 1) b``), decomposes the part of the window its
segments span with LAPACK, at the smallest of 16 bucket orders that holds it
(:func:`buckets`; other segments masked out, with eigenvalues above every real one;
a device where no segment starts decomposes nothing), and the eigenvector blocks
travel once around the ring to be multiplied into ``V``'s rows. After one split into
halves, two devices decompose about ``N / 2`` each: a quarter of LAPACK's work on the
whole matrix, where all ``p`` windows of ``(t + 1) N / p`` had cost about twice it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from shardkit.linalg._blockcyclic import after, axis_index, dslice, dupdate, psum
from shardkit.linalg._qdwh import frobenius, polar_local
from shardkit.linalg._rowqr import panel_width, row_qr
from shardkit.linalg._rows import (
    adjoint,
    identity_rows,
    ring_gram,
    ring_matmul,
    ring_pass,
    ring_permutation,
    row_index,
)

__all__ = ["DC", "base_size", "eigh_local"]

RETRIES = 3
"""Shifts tried per level before a segment is split as it stands."""
MIN_BUCKET = 16
"""The smallest step between the base case's orders (:func:`buckets`)."""


class DC(NamedTuple):
    """Static description of one divide-and-conquer problem."""

    n: int  # padded order N
    real: int  # the matrix's own order; indices from here on are padding
    p: int
    ax: tuple[str, ...]
    t: int  # the base case's window spans t + 1 row blocks
    vectors: bool
    want: tuple[int, int] | None = None  # eigenvalue indices asked for (inclusive)


def _needed(sg: Segments, prob: DC) -> jax.Array:
    """Per index: whether its segment holds an asked-for eigenvalue (all, by default)."""
    if prob.want is None:
        return jnp.ones(sg.start.shape, bool)
    lo, hi = prob.want
    return (sg.start <= hi) & (sg.start + sg.size > lo)


def base_size(p: int) -> int:
    """``t``: the base case's window of ``(t + 1) N / p`` rows, at most ``~3`` shares.

    The window (``(t + 1)^2 / p`` shares) is the base case's memory; ``(t + 1)^2 <=
    3 p + 1`` lets the two halves of a first split fit their windows on the meshes of
    2 to 16 devices, so one level of divide and conquer (one polar decomposition) does.
    """
    if p == 1:
        return 0
    return max(1, min(p - 1, math.isqrt(3 * p + 1) - 1))


def _fits(sg: Segments, rows: int, prob: DC) -> jax.Array:
    """Per index: whether its segment lies in the window of the device where it starts."""
    if prob.p == 1:
        return jnp.ones(sg.start.shape, bool)
    return sg.start + sg.size <= (sg.start // rows + prob.t + 1) * rows


class Segments(NamedTuple):
    """Per index (replicated, length ``N``): segment id, start and size."""

    seg: jax.Array
    start: jax.Array
    size: jax.Array


def segments(starts: jax.Array) -> Segments:
    """The segments of a boolean vector of segment starts (``starts[0]`` is True)."""
    n = starts.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    seg = jnp.cumsum(starts.astype(jnp.int32)) - 1
    st = lax.cummax(jnp.where(starts, idx, 0))
    nxt = jnp.concatenate([jnp.where(starts[1:], idx[1:], n), jnp.array([n], jnp.int32)])
    end = lax.cummin(nxt, reverse=True)
    return Segments(seg, st, end - st)


def _gathered(v: jax.Array, ax: tuple[str, ...]) -> jax.Array:
    return lax.all_gather(v, ax, tiled=True) if ax else v


def _diag_and_rows(h: jax.Array, ax: tuple[str, ...]) -> tuple[jax.Array, jax.Array]:
    """The real diagonal and each row's squared norm off it (replicated), in one all-gather."""
    rows, n = h.shape
    g = row_index(rows, ax)
    off = jnp.where(g[:, None] == jnp.arange(n, dtype=jnp.int32)[None, :], 0, jnp.abs(h) ** 2)
    mine = jnp.stack([jnp.real(h[jnp.arange(rows), g]), jnp.sum(off, axis=1)], 1)
    both = _gathered(mine, ax)
    return both[:, 0], both[:, 1]


def _shifts(d: jax.Array, sg: Segments, margin: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per index: the shift of its segment, and the diagonal's sorting permutation."""
    n = d.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    order = jnp.lexsort((d, sg.seg)).astype(jnp.int32)
    ds = d[order]
    prev = jnp.concatenate([ds[:1], ds[:-1]])
    valid = (idx > sg.start) & (ds - prev > margin)
    far = 2 * n + 1
    score = jnp.where(valid, jnp.abs(2 * idx - (2 * sg.start + sg.size)), far)
    best = jax.ops.segment_min(score * (n + 1) + idx, sg.seg, num_segments=n)
    j = best % (n + 1)
    found = best < far * (n + 1)
    jj = jnp.clip(j, 1, n - 1)
    mid = (ds[jj - 1] + ds[jj]) / 2
    mean = jax.ops.segment_sum(d, sg.seg, num_segments=n) / jnp.maximum(
        jax.ops.segment_sum(jnp.ones_like(d), sg.seg, num_segments=n), 1
    )
    shift = jnp.where(found, mid, mean)
    return shift[sg.seg], order


def _split(
    h: jax.Array, sg: Segments, active: jax.Array, shift: jax.Array, prob: DC
) -> tuple[jax.Array, jax.Array]:
    """The block diagonal projector's rows and, per segment, how far it is from one."""
    rows, n = h.shape
    ax, p = prob.ax, prob.p
    g = row_index(rows, ax)
    cols = jnp.arange(n, dtype=jnp.int32)
    same = sg.seg[g][:, None] == sg.seg[None, :]
    on_diag = g[:, None] == cols[None, :]
    act = active[g][:, None]
    y = jnp.where(same & act, h - jnp.where(on_diag, shift[g][:, None], 0).astype(h.dtype), 0)
    y = jnp.where(~act & on_diag, jnp.ones_like(y), y)
    u, _ = polar_local(y, ax, p)
    proj = jnp.where(same, (u + on_diag.astype(u.dtype)) / 2, 0)
    tr, fro = _diag_and_rows(proj, ax)
    fro = fro + tr**2
    off = jax.ops.segment_sum(tr - fro, sg.seg, num_segments=n)
    ones = jax.ops.segment_sum(tr, sg.seg, num_segments=n)
    return proj, jnp.stack([off, ones])


def _basis(
    proj: jax.Array,
    same: jax.Array,
    low: jax.Array,
    active: jax.Array,
    order: jax.Array,
    key: jax.Array,
    prob: DC,
) -> jax.Array:
    """Rows of the orthonormal basis: low columns span ``null(P)``, high ``range(P)``."""
    rows, n = proj.shape
    ax, p = prob.ax, prob.p
    g = row_index(rows, ax)
    perm = (g[:, None] == order[None, :]).astype(proj.dtype)
    gauss = jax.random.normal(jax.random.fold_in(key, axis_index(ax)), (rows, n))
    x = jnp.where(same, gauss.astype(proj.dtype), 0)
    for again in (False, True):
        px = ring_matmul(proj, x, ax, p)
        x = jnp.where(active[None, :], jnp.where(low[None, :], x - px, px), perm)
        x = _polished(x, prob) if again else row_qr(x, (rows,), ax, panel_width(rows, n))
    return x


def _polished(x: jax.Array, prob: DC) -> jax.Array:
    """Orthonormal columns from ``x``'s, which are orthonormal but for a small error ``E``.

    The second pass of the basis projects an orthonormal basis once more: its columns
    move by about the first pass's error. With ``G = X^H X = I + E``, one Newton-Schulz
    step ``X (3 I - G) / 2`` leaves ``I - X^H X`` at ``O(||E||^2)``: two ring products
    instead of a QR. When ``||E||_F`` is too large for that (``||E||_F^2 > sqrt(N) eps``)
    the QR runs instead.
    """
    rows, n = x.shape
    ax, p = prob.ax, prob.p
    eps = float(jnp.finfo(x.dtype).eps)
    g = ring_gram(x, x, ax, p)
    err = frobenius(g - identity_rows(rows, n, x.dtype, ax), ax)

    def step(x: jax.Array) -> jax.Array:
        return 1.5 * x - 0.5 * ring_matmul(x, after(g, err), ax, p)

    def qr(x: jax.Array) -> jax.Array:
        return row_qr(after(x, err), (rows,), ax, panel_width(rows, n))

    return lax.cond(err * err <= math.sqrt(n) * eps, step, qr, x)


class Level(NamedTuple):
    h: jax.Array
    v: jax.Array
    starts: jax.Array
    level: jax.Array


def _level(state: Level, norm: jax.Array, prob: DC) -> Level:
    h, v, starts, lev = state
    rows, n = h.shape
    ax = prob.ax
    rdt = jnp.finfo(h.dtype).dtype
    eps = jnp.finfo(rdt).eps
    idx = jnp.arange(n, dtype=jnp.int32)
    sg = segments(starts)
    d, off = _diag_and_rows(h, ax)
    off_seg = jax.ops.segment_sum(off, sg.seg, num_segments=n)[sg.seg]
    # Segments holding none of the asked-for eigenvalues are left as they are.
    big = ~_fits(sg, rows, prob) & _needed(sg, prob)
    done = off_seg <= (eps * norm) ** 2
    active = big & ~done
    shift, order = _shifts(d, sg, 8 * eps * norm)
    spread = jnp.sqrt(off_seg / jnp.maximum(sg.size, 1))

    def retry(c: tuple[jax.Array, ...]) -> jax.Array:
        # k = -1: the first attempt, at the chosen shifts.
        return (c[0] < 0) | ((c[0] < RETRIES) & jnp.any(active & (c[2][0][sg.seg] > 0.25)))

    def attempt(c: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        k, _, stats, s = c
        # A segment whose projector was not one moves its shift; the others keep
        # theirs (and get the same projector again).
        bad = active & (stats[0][sg.seg] > 0.25)
        s = jnp.where(bad, s + (0.1 + 0.07 * k) * spread, s)
        proj, stats = _split(h, sg, active, s, prob)
        return k + 1, proj, stats, s

    # One polar decomposition in the program (the loop's), not a first one before it.
    start = (jnp.int32(-1), jnp.zeros_like(h), jnp.zeros((2, n), rdt), shift)
    _, proj, stats, _ = lax.while_loop(retry, attempt, start)
    high = jnp.clip(jnp.round(stats[1]).astype(jnp.int32)[sg.seg], 0, sg.size)
    nlow = sg.size - high
    low = (idx - sg.start) < nlow
    key = jax.random.fold_in(jax.random.PRNGKey(0), lev)
    g = row_index(rows, ax)
    same = sg.seg[g][:, None] == sg.seg[None, :]
    basis = _basis(proj, same, low, active, order, key, prob)
    # One chain of collectives: two in flight at once can hang (or mix) on CPU devices.
    hb = ring_matmul(h, basis, ax, prob.p)
    h = ring_matmul(adjoint(after(basis, hb), ax, prob.p), hb, ax, prob.p)
    if prob.vectors:
        # V starts as the identity: the first level's product is the basis itself.
        v = lax.cond(
            lev == 0,
            lambda v, b: b,
            lambda v, b: ring_matmul(v, b, ax, prob.p),
            after(v, h),
            after(basis, h),
        )
    split = active & (nlow > 0) & (nlow < sg.size) & (idx == sg.start + nlow)
    halve = big & done & (idx == sg.start + sg.size // 2)
    starts = starts | split | halve
    new = segments(starts)
    h = jnp.where(new.seg[g][:, None] == new.seg[None, :], h, 0)
    return Level(h, v, starts, lev + 1)


def _windows(h: jax.Array, pad: int, prob: DC) -> jax.Array:
    """This device's ``w x w`` diagonal window, ``w = (t + 1) b``, from its and the next rows."""
    rows, _n = h.shape
    ax, p, t = prob.ax, prob.p, prob.t
    w = (t + 1) * rows
    me = axis_index(ax)
    wide = jnp.pad(h, ((0, 0), (0, pad)))
    parts = [dslice(wide, (0, me * rows), (rows, w))]
    for k in range(1, t + 1):
        perm = [(j, (j - k) % p) for j in range(p)]
        # Device j sends its rows' columns of the window of device j - k.
        send = after(dslice(wide, (0, ((me - k) % p) * rows), (rows, w)), parts[-1])
        parts.append(lax.ppermute(send, ax, perm))
    return jnp.concatenate(parts)


def _base(
    h: jax.Array, v: jax.Array, starts: jax.Array, norm: jax.Array, prob: DC
) -> tuple[jax.Array, jax.Array]:
    rows, n = h.shape
    ax, p, t = prob.ax, prob.p, prob.t
    w = (t + 1) * rows
    pad = w - rows
    me = axis_index(ax)
    sg = segments(jnp.concatenate([starts, jnp.ones((pad,), bool)]))
    gw = me * rows + jnp.arange(w, dtype=jnp.int32)
    real = (sg.start[gw] >= me * rows) & (sg.start[gw] < (me + 1) * rows) & (gw < n)
    # A segment left unsplit (none of its eigenvalues asked for) may outgrow the window:
    # its indices get zeros, never another segment's place.
    fits = _fits(sg, rows, prob)
    real = real & fits[gw]
    win = _windows(h, pad, prob)
    same = (sg.seg[gw][:, None] == sg.seg[gw][None, :]) & real[:, None] & real[None, :]
    big = (4 * norm + 1).astype(win.dtype)
    win = jnp.where(same, win, 0) + jnp.diag(jnp.where(real, 0, big).astype(win.dtype))
    count = jnp.sum(real.astype(jnp.int32))
    first = me * rows + jnp.argmax(real).astype(jnp.int32)
    first = jnp.where(count > 0, first, me * rows)
    lanes = jnp.arange(w, dtype=jnp.int32)
    lam, vec = _decomposed(win, first - me * rows, count, prob.vectors)
    vals = _placed(lam, count, first, n, ax)
    if not prob.vectors:
        return vals, v
    vec = after(jnp.where(real[:, None] & (lanes < count)[None, :], vec, 0), vals)
    # Column c of the window's eigenvectors is global eigenvector first + c.
    vec = jnp.roll(vec, first - me * rows, axis=1)
    vwide = jnp.pad(v, ((0, 0), (0, pad)))
    # The devices whose windows hold segments (the others' blocks are zero: skipped).
    idx = jnp.arange(n, dtype=jnp.int32)
    has = jnp.any(((sg.start[:n] == idx) & fits[:n]).reshape(p, rows), axis=1)
    # A window's eigenvectors travel in column pieces of at most a quarter of the matrix.
    pieces = -(-4 * w * w // (n * n))
    perm = ring_permutation(p)

    def multiply(k: jax.Array, z: jax.Array, blk: jax.Array) -> jax.Array:
        src = (me + k) % p

        def add(z: jax.Array) -> jax.Array:
            part = dslice(vwide, (0, src * rows), (rows, w)) @ blk
            return dupdate(z, dslice(z, (0, src * rows), (rows, w)) + part, (0, src * rows))

        return lax.cond(has[src], add, lambda z: z, z)

    def travel(blk: jax.Array) -> jax.Array:
        sent: list[jax.Array] = []
        for piece in jnp.array_split(blk, pieces, axis=1):
            sent.append(lax.ppermute(after(piece, *sent[-1:]), ax, perm))
        return jnp.concatenate(sent, axis=1)

    z = ring_pass(jnp.zeros((rows, n + w), v.dtype), vec, multiply, ax, p, send=travel)
    return vals, z[:, :n]


def buckets(w: int) -> tuple[int, ...]:
    """The orders the base case decomposes a window's segments at: steps of ``w / 16``.

    A window of ``w`` rows holds the segments starting in one device's rows, ``count``
    indices from offset ``off``; LAPACK decomposes the smallest bucket that holds them
    (its cost grows as the cube of the order, so a half-full window costs an eighth).
    Steps are at least :data:`MIN_BUCKET` (each bucket is one more branch to compile,
    and small windows cost little at any order).
    """
    step = max(-(-w // 16), MIN_BUCKET)
    return (*range(step, w, step), w)


def _decomposed(
    win: jax.Array, off: jax.Array, count: jax.Array, vectors: bool
) -> tuple[jax.Array, jax.Array]:
    """Eigenvalues (ascending, the ``count`` real ones first) and vectors of ``win``.

    Only the window's indices ``off .. off + count`` are real (the rest are masked out:
    zero off their diagonal, above the spectrum on it). The smallest :func:`buckets`
    order holding them is decomposed; a window with none decomposes nothing.
    """
    w = win.shape[0]
    sizes = buckets(w)
    # Without vectors a (1, 1) stand-in: no branch holds a w x w buffer for nothing.
    vshape = (w, w) if vectors else (1, 1)

    def empty() -> tuple[jax.Array, jax.Array]:
        return jnp.zeros((w,), jnp.finfo(win.dtype).dtype), jnp.zeros(vshape, win.dtype)

    def solve(size: int) -> tuple[jax.Array, jax.Array]:
        at = jnp.minimum(off, w - size)
        sub = dslice(win, (at, at), (size, size))
        fill = jnp.zeros((w - size,), jnp.finfo(win.dtype).dtype)
        if not vectors:
            return jnp.concatenate([jnp.linalg.eigvalsh(sub), fill]), jnp.zeros(vshape, win.dtype)
        lam, vec = jnp.linalg.eigh(sub)
        full = dupdate(jnp.zeros((w, w), win.dtype), vec, (at, jnp.int32(0)))
        return jnp.concatenate([lam, fill]), full

    branches = [empty] + [lambda s=s: solve(s) for s in sizes]
    pick = jnp.where(count > 0, 1 + jnp.searchsorted(jnp.asarray(sizes), count), 0)
    return lax.switch(pick, branches)


def _placed(lam: jax.Array, count: jax.Array, first: jax.Array, n: int, ax: Any) -> jax.Array:
    """The window's ``count`` eigenvalues at ``first`` of the replicated length-``n`` vector."""
    w = lam.shape[0]
    lam = jnp.where(jnp.arange(w) < count, lam, 0)
    return psum(dupdate(jnp.zeros((n + w,), lam.dtype), lam, (first,)), ax)[:n]


def eigh_local(h: jax.Array, prob: DC) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Eigenvalues (replicated, ascending), this device's rows of ``V``, and success.

    Success is False only when the level cap was reached with a segment still too
    large for the base case (never seen; reported, not returned silently).
    """
    rows, n = h.shape
    ax, p = prob.ax, prob.p
    norm = frobenius(h, ax)
    if prob.real < n:  # the padding's eigenvalues lie above the spectrum
        g = row_index(rows, ax)
        pad = (g[:, None] == jnp.arange(n)[None, :]) & (g[:, None] >= prob.real)
        h = jnp.where(pad, (4 * norm + 1).astype(h.dtype), h)
    v = identity_rows(rows, n, h.dtype, ax) if prob.vectors else jnp.zeros((1, 1), h.dtype)
    starts = jnp.arange(n) == 0
    if p == 1:
        lam, vec = jnp.linalg.eigh(h) if prob.vectors else (jnp.linalg.eigvalsh(h), v)
        return lam, vec, jnp.bool_(True)
    limit = prob.t * rows
    cap = 2 * n // max(limit, 1) + 8

    def more(s: Level) -> jax.Array:
        sg = segments(s.starts)
        return (s.level < cap) & jnp.any(~_fits(sg, rows, prob) & _needed(sg, prob))

    state = lax.while_loop(more, lambda s: _level(s, norm, prob), Level(h, v, starts, jnp.int32(0)))
    lam, vec = _base(state.h, state.v, state.starts, norm, prob)
    return lam, vec, ~more(state)
