"""The LU kernel, run inside ``shard_map`` on one device's block (see :mod:`shardkit.linalg._lu`).

Right-looking blocked LU over the panels of the block-cyclic layout. The loop over
panels is a ``lax.fori_loop`` per stage; everything a panel reads that does not change
within a stage (sizes, this device's tables, the singularity tolerance) is one
:class:`Stage`, built once per stage. A panel's pivots come from one of two sibling
functions with the same signature (:data:`PANEL_PIVOTING`): :func:`_tournament_panel`
(CALU, one all-gather per panel) and :func:`_partial_panel` (LAPACK's partial pivoting,
one small all-gather per column). Loop carries are NamedTuples (:class:`Pivots`,
:class:`Factoring` and the partial pivoting's block and column carries), so that every
loop moves the same leaves in the same order.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Literal, NamedTuple, TypeAlias, get_args

import jax
import jax.numpy as jnp
from jax import lax

from shardkit.linalg._blockcyclic import (
    LocalTables,
    Plan,
    axis_index,
    dslice,
    dupdate,
    local_tables,
    on_owner,
    psum,
    to_local_order,
    trsm,
)
from shardkit.linalg._tiles import active_update

__all__ = [
    "BULK_SCOPE",
    "INNER_BLOCK",
    "PIVOTING_NAMES",
    "Pivoting",
    "factor_local",
]

Pivoting: TypeAlias = Literal["partial", "tournament"]
PIVOTING_NAMES: tuple[str, ...] = get_args(Pivoting)
"""The legal values of ``pivoting=``."""

BULK_SCOPE = "lu_trailing_update"
"""The ``jax.named_scope`` of each step's bulk trailing update (profiles, structure tests)."""

INNER_BLOCK = 16
"""Columns factored one at a time inside a panel before a blocked update of the rest."""


class Pivots(NamedTuple):
    """The elimination's bookkeeping, carried through every loop of the kernel.

    Attributes:
      perm: position ``i`` of the factorization holds elimination row ``perm[i]``.
      status: 0, or ``j + 1`` for the first numerically zero pivot (elimination column).
      swaps: row exchanges so far (their parity is the sign of the determinant).
    """

    perm: jax.Array
    status: jax.Array
    swaps: jax.Array


class Panel(NamedTuple):
    """A factored panel whose row exchanges have not yet reached the rest of ``a``.

    Attributes:
      pan: the panel's active rows, factored (tournament: still in their old order).
      piv: the pivots, this panel's included.
      touched, came_from: the row moves (position ``touched[i]`` receives the row at
        ``came_from[i]``), applied to ``a`` by :func:`_finish_panel`.
      top: tournament only: ``L11 \\ U11``, the panel's top ``nb`` rows once the rows
        have moved (partial pivoting moves the panel's rows as it goes: ``None``).
    """

    pan: jax.Array
    piv: Pivots
    touched: jax.Array
    came_from: jax.Array
    top: jax.Array | None


class Eliminating(NamedTuple):
    """The carry of the loop over panels without lookahead: the block and the pivots."""

    a: jax.Array
    piv: Pivots


class Factoring(NamedTuple):
    """The carry of the loop over panels with lookahead: step ``e`` starts with panel ``e`` pivoted.

    Attributes:
      a: the local block, updated up to step ``e - 1``; panel ``e``'s row exchanges
        are still to come.
      ahead: panel ``e + 1``'s columns (this device's slot, active rows), as in ``a``:
        taken at the end of a step, so that the next step's lookahead reads them while
        ``a`` is updated in place, without a copy of ``a``.
      panel: panel ``e``, factored and broadcast along the mesh row (the pivots so far
        in ``panel.piv``).
    """

    a: jax.Array
    ahead: jax.Array
    panel: Panel


class _BlockCarry(NamedTuple):
    """Partial pivoting's carry over the panel's ``ib``-column blocks."""

    pan: jax.Array
    src: jax.Array  # position -> where its row was before the panel
    piv: Pivots
    pivs: jax.Array  # the panel's pivot row of each column


class _ColumnCarry(NamedTuple):
    """Partial pivoting's carry over the columns of one ``ib``-column block."""

    blk: jax.Array
    src: jax.Array
    srci: jax.Array  # as src, from the start of the block
    piv: Pivots
    pivs: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class Stage:
    """What every panel of one stage reads; built once per stage, outside its loop.

    Attributes:
      plan: the static layout.
      tab: this device's tables.
      tol: the singularity tolerance ``n * eps * max|a|``.
      r0, c0: the first local row and column still active in this stage.
      m, k: the local block's shape.
      ib: columns factored one at a time by partial pivoting (divides ``nb``).
      cols_nb, cols_ib: ``arange(nb)`` and ``arange(ib)`` (int32).
      g_r, g_c: the elimination index of each active local row and column.
    """

    plan: Plan
    tab: LocalTables
    tol: jax.Array
    r0: int
    c0: int
    m: int
    k: int
    ib: int
    cols_nb: jax.Array
    cols_ib: jax.Array
    g_r: jax.Array
    g_c: jax.Array

    @property
    def rows(self) -> int:
        """Active local rows."""
        return self.m - self.r0

    def where_row(self, g: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The device row owning elimination row ``g`` and its local row there."""
        nb = self.plan.nb
        blk = g // nb
        loc = self.tab.slot_r[blk] * nb + g % nb
        return self.tab.own_r[blk], jnp.clip(loc, 0, self.m - 1)


PanelPivoting: TypeAlias = Callable[[Stage, jax.Array, jax.Array, Pivots], Panel]
"""``(stage, panel index e, panel columns, pivots) -> Panel``; reads nothing of ``a``.

The panel columns are this device's slot of them (meaningful on the mesh column owning
the panel); each rule shares what the rest of the mesh row needs (partial pivoting: the
columns first; tournament pivoting: the factored panel and its pivots at the end).
"""


def _magnitude(x: jax.Array) -> jax.Array:
    """What partial pivoting maximizes: ``|x|``; for complex LAPACK's ``|re| + |im|``.

    (``izamax``'s measure, so that :func:`shardkit.linalg.lu` keeps LAPACK's pivots for
    complex input.)
    """
    if jnp.iscomplexobj(x):
        return jnp.abs(jnp.real(x)) + jnp.abs(jnp.imag(x))
    return jnp.abs(x)


def _swap(x: jax.Array, i: jax.Array, j: jax.Array) -> jax.Array:
    xi, xj = x[i], x[j]
    return x.at[i].set(xj).at[j].set(xi)


def _exchange_rows(
    ctx: Stage,
    xs: tuple[tuple[jax.Array, int], ...],
    touched: jax.Array,
    came_from: jax.Array,
    view: tuple[jax.Array, int, jax.Array] | None = None,
) -> tuple[jax.Array, ...]:
    """Give positions ``touched`` the rows that were at ``came_from``: one all-reduce.

    Each ``(x, r0)`` holds local rows ``r0:`` (of whatever columns it has). The
    sources' owners contribute their rows of every ``x`` and one
    ``len(touched) x (total columns)`` all-reduce over the row axes delivers them all.
    ``view = (y, r0, c)``: ``y`` (rows ``r0:``) is a copy of ``xs[0]``'s columns
    ``c:``, kept apart; its rows move with them at no extra communication (returned last).
    """
    r = ctx.tab.r
    own_s, loc_s = ctx.where_row(came_from)
    own_t, loc_t = ctx.where_row(touched)
    parts = [x[jnp.clip(loc_s - r0, 0, x.shape[0] - 1)] for x, r0 in xs]
    sizes = [pt.shape[1] for pt in parts]
    both = jnp.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    moved = psum(jnp.where((own_s == r)[:, None], both, 0), ctx.plan.row_axes)
    out, start = [], 0
    for (x, r0), size in zip(xs, sizes, strict=True):
        dest = jnp.where(own_t == r, loc_t - r0, x.shape[0])
        out.append(x.at[dest].set(moved[:, start : start + size], mode="drop"))
        start += size
    if view is not None:
        y, r0, c = view
        dest = jnp.where(own_t == r, loc_t - r0, y.shape[0])
        out.append(y.at[dest].set(dslice(moved, (0, c), (moved.shape[0], y.shape[1])), mode="drop"))
    return tuple(out)


def _panel_permutation(chosen: jax.Array, j0: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The row moves that bring pivot rows ``chosen`` to positions ``j0 .. j0 + nb - 1``.

    Position ``j0 + i`` receives row ``chosen[i]``; the rows displaced from those
    positions fill the positions the pivots left (in order). A ``-1`` (the nominee of an
    all-zero column) takes a free position of the block. Returns ``(touched,
    came_from, parity)``: ``2 nb`` positions (padded with a repeat of the first move),
    where each one's new row was, and the permutation's parity (the sign of the
    determinant). Vectorized: ``O(nb^2)`` comparisons instead of ``nb`` sequential swaps.
    """
    nb = chosen.shape[0]
    idx = jnp.arange(nb, dtype=jnp.int32)
    t = j0 + idx
    valid = chosen >= 0
    taken = jnp.any(valid[None, :] & (chosen[None, :] == t[:, None]), axis=1)
    free_rank = jnp.where(~taken, jnp.cumsum(~taken) - 1, -1)
    need = jnp.cumsum(~valid) - 1
    fill = t[jnp.argmax(free_rank[None, :] == need[:, None], axis=1)]
    c = jnp.where(valid, chosen, fill).astype(jnp.int32)
    displaced = ~jnp.any(c[None, :] == t[:, None], axis=1)
    vacated = c >= j0 + nb
    d_rank = jnp.where(displaced, jnp.cumsum(displaced) - 1, nb)
    v_rank = jnp.where(vacated, jnp.sum(vacated[None, :] & (c[None, :] < c[:, None]), axis=1), nb)
    q = jnp.sum(vacated)
    d_list = jnp.zeros(nb, jnp.int32).at[d_rank].set(t, mode="drop")
    v_list = jnp.zeros(nb, jnp.int32).at[v_rank].set(c, mode="drop")
    pad = idx >= q
    touched = jnp.concatenate([t, jnp.where(pad, t[0], v_list)])
    came_from = jnp.concatenate([c, jnp.where(pad, c[0], d_list)])
    # Parity: inversions of the sources listed in increasing destination order.
    ok = jnp.concatenate([jnp.ones(nb, bool), ~pad])
    later = jnp.arange(2 * nb)[None, :] > jnp.arange(2 * nb)[:, None]
    inv = later & ok[:, None] & ok[None, :] & (came_from[:, None] > came_from[None, :])
    return touched, came_from, (jnp.sum(inv) % 2).astype(jnp.int32)


# ---- tournament pivoting (CALU) ---------------------------------------------------------


def _tournament_panel(ctx: Stage, e: jax.Array, cols: jax.Array, piv: Pivots) -> Panel:
    """Factor one panel with tournament pivoting (CALU): one all-gather picks all ``nb`` pivots.

    Only the mesh column owning the panel works on it. Each of its devices runs
    LAPACK's partial-pivoting LU on its active rows of the panel and nominates the
    ``nb`` rows it pivoted on; one all-gather over the row axes stacks the ``R x nb``
    nominees, the first row of devices factors the stack (partial pivoting again) and
    one small all-reduce shares the result: its first ``nb`` pivots are the panel's
    pivot rows and its ``nb x nb`` top is ``L11 \\ U11``. Every other active row gets
    ``L21 = A21 U11^-1`` in place, before the rows move. One all-reduce over the column
    axes then gives the factored panel and the pivots to the rest of the mesh row. The
    other columns' devices skip everything panel-sized before it, contributing zeros
    (on 2x4 at n=4096 their redundant local LU and triangular solve cost 0.15 of 1.33
    CPU-s, and their selects and copies of the panel, with those of
    :func:`_finish_panel` and :func:`_u_rows`, 0.2 of 1.2). :func:`_finish_panel` later
    exchanges the rows of ``a`` and of the factored panel in one all-reduce. With one
    row of devices this is exactly partial pivoting; otherwise the pivots can differ
    from LAPACK's (Grigori, Demmel and Xiang, "CALU", SIMAX 2011: as stable as partial
    pivoting in practice). ``a``'s panel columns are rewritten by the caller.
    """
    nb, g_r, rows_ax, col_axes = cols.shape[1], ctx.g_r, ctx.plan.row_axes, ctx.plan.col_axes
    own = ctx.tab.c == ctx.tab.own_c[e]
    j0 = e * nb
    act = g_r >= j0

    def nominate(cols: jax.Array) -> jax.Array:
        x = jnp.where(act[:, None], cols, 0)
        take = lax.linalg.lu(x)[2][:nb]
        # Row indices ride along as floats: exact below 2^24 (float32) rows.
        cidx = jnp.where(act[take], g_r[take], -1).astype(x.dtype)
        return jnp.concatenate([x[take], cidx[:, None]], axis=1)

    def no_nominees(cols: jax.Array) -> jax.Array:
        return jnp.zeros((nb, nb + 1), cols.dtype)

    cand = on_owner(own, col_axes, nominate, no_nominees, cols)

    def tourney(cand: jax.Array) -> jax.Array:
        lu_s, _, rows = lax.linalg.lu(cand[:, :nb])
        return jnp.concatenate([lu_s[:nb], cand[rows[:nb], nb:]], axis=1)

    if rows_ax:
        # The stack is the same on every device of the column: its first row of
        # devices factors it and one small all-reduce shares the result.
        cand = lax.all_gather(cand, rows_ax, tiled=True)
        res = lax.cond(own & (axis_index(rows_ax) == 0), tourney, no_nominees, cand)
        res = psum(res, rows_ax)
    else:
        res = lax.cond(own, tourney, no_nominees, cand)
    d = jnp.diagonal(res[:, :nb])
    u11 = jnp.triu(res[:, :nb]) + jnp.diag(jnp.where(d == 0, 1, 0).astype(res.dtype))

    def solved(cols: jax.Array) -> jax.Array:
        return jnp.where(act[:, None], trsm(u11, cols, lower=False, left=False), cols)

    if col_axes:
        # Only the owner solves and packs (a cond holding no collective); one
        # all-reduce over the column axes shares the panel and the pivots.
        def packed(cols: jax.Array) -> jax.Array:
            return jnp.concatenate([jnp.pad(solved(cols), ((0, 0), (0, 1))), res], axis=0)

        def nothing(cols: jax.Array) -> jax.Array:
            return jnp.zeros((cols.shape[0] + nb, nb + 1), cols.dtype)

        both = psum(on_owner(own, col_axes, packed, nothing, cols), col_axes)
        pan, res = both[: cols.shape[0], :nb], both[cols.shape[0] :]
    else:
        pan = solved(cols)
    top, chosen = res[:, :nb], jnp.real(res[:, nb]).astype(jnp.int32)
    bad = jnp.abs(jnp.diagonal(top)) <= ctx.tol
    first_bad = (j0 + jnp.argmax(bad) + 1).astype(jnp.int32)
    status = jnp.where((piv.status == 0) & jnp.any(bad), first_bad, piv.status)
    touched, came_from, parity = _panel_permutation(chosen, j0)
    perm = piv.perm.at[touched].set(piv.perm[came_from])
    return Panel(pan, Pivots(perm, status, piv.swaps + parity), touched, came_from, top)


# ---- partial pivoting (LAPACK's) --------------------------------------------------------


def _partial_panel(ctx: Stage, e: jax.Array, cols: jax.Array, piv: Pivots) -> Panel:
    """Factor one panel with LAPACK's partial pivoting, ``ib`` columns at a time.

    Each column's pivot is found over the whole column by one small all-gather
    (:func:`_pivot_candidates`); after each ``ib`` columns the rest of the panel is
    updated by blocks (:func:`_partial_block`). The panel's row exchanges reach
    whole rows of ``a`` later, at once (:func:`_finish_panel`): the (at most ``2 nb``)
    touched positions receive their new rows in one ``2 nb x n / C`` all-reduce.
    """
    nb, n = ctx.plan.nb, ctx.plan.n
    pan = _broadcast_columns(ctx, e, cols)
    src0 = jnp.arange(n, dtype=jnp.int32)
    pivs0 = jnp.zeros(nb, jnp.int32)
    out = lax.fori_loop(
        jnp.int32(0),
        jnp.int32(nb // ctx.ib),
        functools.partial(_partial_block, ctx, e),
        _BlockCarry(pan, src0, piv, pivs0),
    )
    touched = jnp.concatenate([e * nb + ctx.cols_nb.astype(jnp.int32), out.pivs])
    return Panel(out.pan, out.piv, touched, out.src[touched], None)


def _partial_block(ctx: Stage, e: jax.Array, kb: jax.Array, st: _BlockCarry) -> _BlockCarry:
    """Panel columns ``kb * ib ..`` one at a time, then the rest of the panel by blocks.

    Touching only ``ib`` columns per column step, as LAPACK's recursive ``getrf``.
    """
    ib, nb = ctx.ib, ctx.plan.nb
    c0i = kb * ib
    j0 = e * nb + c0i
    blk = dslice(st.pan, (0, c0i), (ctx.rows, ib))
    srci = jnp.arange(ctx.plan.n, dtype=jnp.int32)
    col = lax.fori_loop(
        jnp.int32(0),
        jnp.int32(ib),
        functools.partial(_partial_column, ctx, e, c0i),
        _ColumnCarry(blk, st.src, srci, st.piv, st.pivs),
    )
    if ib == nb:
        return _BlockCarry(col.blk, col.src, col.piv, col.pivs)
    pan = dupdate(st.pan, col.blk, (0, c0i))
    pan = _block_row_exchange(ctx, pan, c0i, j0, col.srci, col.pivs)
    pan = _block_update(ctx, pan, col.blk, c0i, j0)
    return _BlockCarry(pan, col.src, col.piv, col.pivs)


def _block_row_exchange(
    ctx: Stage, pan: jax.Array, c0i: jax.Array, j0: jax.Array, srci: jax.Array, pivs: jax.Array
) -> jax.Array:
    """The block's row exchanges, applied to the panel's other columns (one all-reduce)."""
    ib, rows, r0, r = ctx.ib, ctx.rows, ctx.r0, ctx.tab.r
    in_blk = (ctx.cols_nb >= c0i) & (ctx.cols_nb < c0i + ib)
    touched = jnp.concatenate([j0 + ctx.cols_ib, dslice(pivs, (c0i,), (ib,))])
    own_s, loc_s = ctx.where_row(srci[touched])
    own_t, loc_t = ctx.where_row(touched)
    loc_s, loc_t = jnp.clip(loc_s - r0, 0, rows - 1), loc_t - r0
    moved = psum(jnp.where((own_s == r)[:, None], pan[loc_s], 0), ctx.plan.row_axes)
    keep = pan[jnp.clip(loc_t, 0, rows - 1)]
    return pan.at[jnp.where(own_t == r, loc_t, rows)].set(
        jnp.where(in_blk, keep, moved), mode="drop"
    )


def _block_update(
    ctx: Stage, pan: jax.Array, blk: jax.Array, c0i: jax.Array, j0: jax.Array
) -> jax.Array:
    """U of the block's ``ib`` rows, right of the block; then the rest of the panel's update."""
    ib, nb = ctx.ib, ctx.plan.nb
    oi, li_ = ctx.where_row(j0)
    li_ = jnp.clip(li_ - ctx.r0, 0, ctx.rows - ib)
    mine = ctx.tab.r == oi
    l11 = jnp.where(mine, dslice(blk, (li_, 0), (ib, ib)), jnp.eye(ib, dtype=pan.dtype))
    urow = dslice(pan, (li_, 0), (ib, nb))
    right = ctx.cols_nb >= c0i + ib
    u = jnp.where(right, trsm(l11, urow, lower=True, unit_diagonal=True), urow)
    pan = dupdate(pan, jnp.where(mine, u, urow), (li_, 0))
    u = psum(jnp.where(mine & right, u, 0), ctx.plan.row_axes)
    l21 = jnp.where((ctx.g_r >= j0 + ib)[:, None], blk, 0)
    return pan - l21 @ u


def _pivot_candidates(
    ctx: Stage, blk: jax.Array, j: jax.Array, jj: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Column ``j``'s pivot over the whole column: ``(p, row p, row j, owner of j, local j)``.

    One all-gather per column carries each device row's candidate (``|value|``, row
    index, the row) and row ``j`` from its owner. Row indices are exact in float32
    below ``2^24``.
    """
    g_r, rows_ax, ib = ctx.g_r, ctx.plan.row_axes, ctx.ib
    v = jnp.where(g_r >= j, _magnitude(blk[:, jj]), -1)
    li = jnp.argmax(v)
    oj, lj = ctx.where_row(j)
    pj = jnp.clip(lj - ctx.r0, 0, ctx.rows - 1)
    if not rows_ax:
        return g_r[li], blk[li], blk[pj], oj, pj
    mine_j = jnp.where(ctx.tab.r == oj, blk[pj], 0)
    head = jnp.stack([v[li], g_r[li].astype(v.dtype)])
    cand = lax.all_gather(jnp.concatenate([head, blk[li], mine_j]), rows_ax)
    w = jnp.argmax(jnp.real(cand[:, 0]))
    p = jnp.real(cand[w, 1]).astype(jnp.int32)
    return p, cand[w, 2 : 2 + ib], jnp.sum(cand[:, 2 + ib :], axis=0), oj, pj


def _partial_column(
    ctx: Stage, e: jax.Array, c0i: jax.Array, jj: jax.Array, st: _ColumnCarry
) -> _ColumnCarry:
    """Pivot, swap and eliminate column ``jj`` of the current ``ib``-column block."""
    blk, r = st.blk, ctx.tab.r
    j = e * ctx.plan.nb + c0i + jj
    p, row_p, row_j, oj, pj = _pivot_candidates(ctx, blk, j, jj)
    op, lp = ctx.where_row(p)
    pp = jnp.clip(lp - ctx.r0, 0, ctx.rows - 1)
    blk = blk.at[pj].set(jnp.where(r == oj, row_p, blk[pj]))
    blk = blk.at[pp].set(jnp.where(r == op, row_j, blk[pp]))
    piv_v = row_p[jj]
    status = st.piv.status
    status = jnp.where((status == 0) & (jnp.abs(piv_v) <= ctx.tol), j + 1, status)
    safe = jnp.where(piv_v == 0, jnp.ones_like(piv_v), piv_v)
    below = ctx.g_r > j
    col = jnp.where(below, blk[:, jj] / safe, blk[:, jj])
    blk = blk.at[:, jj].set(col)
    l_col = jnp.where(below, col, 0)
    blk = blk - jnp.outer(l_col, jnp.where(ctx.cols_ib > jj, row_p, 0))
    perm = _swap(st.piv.perm, j, p)
    src, srci = _swap(st.src, j, p), _swap(st.srci, j, p)
    swaps = st.piv.swaps + (p != j).astype(jnp.int32)
    return _ColumnCarry(blk, src, srci, Pivots(perm, status, swaps), st.pivs.at[c0i + jj].set(p))


PANEL_PIVOTING: dict[Pivoting, PanelPivoting] = {
    "partial": _partial_panel,
    "tournament": _tournament_panel,
}
"""How each ``pivoting=`` factors a panel."""


# ---- the loop over panels ----------------------------------------------------------------


def _broadcast_columns(ctx: Stage, e: jax.Array, cols: jax.Array) -> jax.Array:
    """Panel ``e``'s columns (``cols``: this device's slot of them) along the mesh row."""
    return psum(jnp.where(ctx.tab.c == ctx.tab.own_c[e], cols, 0), ctx.plan.col_axes)


def _ahead(ctx: Stage, e: jax.Array, a: jax.Array) -> jax.Array:
    """This device's slot of panel ``e``'s columns, active rows (``e`` clipped to the last)."""
    cs = ctx.tab.slot_c[jnp.minimum(e, ctx.plan.blocks - 1)]
    return dslice(a, (ctx.r0, cs * ctx.plan.nb), (ctx.rows, ctx.plan.nb))


def _finish_panel(
    ctx: Stage, e: jax.Array, a: jax.Array, p: Panel, ahead: jax.Array | None
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """Panel ``e``'s row exchanges reach ``a`` (one all-reduce), then its columns are written.

    ``ahead`` (the next panel's columns, kept apart) has its rows exchanged too. Returns
    ``a``, the factored panel in its final row order, and ``ahead``.
    """
    nb, r0, rows = ctx.plan.nb, ctx.r0, ctx.rows
    xs = ((a, 0), (p.pan, r0)) if p.top is not None else ((a, 0),)
    view = None if ahead is None else (ahead, r0, ctx.tab.slot_c[e + 1] * nb)
    out = list(_exchange_rows(ctx, xs, p.touched, p.came_from, view))
    a, pan = out.pop(0), p.pan
    if p.top is not None:
        j0 = e * nb
        in_top = (ctx.g_r >= j0) & (ctx.g_r < j0 + nb)
        pan = jnp.where(in_top[:, None], p.top[jnp.clip(ctx.g_r - j0, 0, nb - 1)], out.pop(0))
    ahead = out.pop(0) if ahead is not None else None
    cs = ctx.tab.slot_c[e]

    def write(a: jax.Array) -> jax.Array:
        # Active rows only: the lookahead's copy of the rows above (U) may be stale.
        cur = dslice(a, (r0, cs * nb), (rows, nb))
        return dupdate(a, jnp.where((ctx.g_r >= e * nb)[:, None], pan, cur), (r0, cs * nb))

    # The owner column alone writes.
    a = on_owner(ctx.tab.c == ctx.tab.own_c[e], ctx.plan.col_axes, write, lambda a: a, a)
    return a, pan, ahead


def _u_rows(
    ctx: Stage, e: jax.Array, a: jax.Array, pan: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Step ``e``'s ``nb`` rows of U, solved on their owner and broadcast down the mesh column.

    Returns ``a`` with them written, ``L21`` (the panel, zero outside the rows still to
    eliminate) and ``U12`` (zero outside the trailing columns), the update's factors.
    """
    tab, nb, r0, rows, c0 = ctx.tab, ctx.plan.nb, ctx.r0, ctx.rows, ctx.c0
    re, rs = tab.own_r[e], tab.slot_r[e]
    le = jnp.clip(rs * nb - r0, 0, rows - nb)
    trail = ctx.g_c >= (e + 1) * nb
    # Sliced outside the cond: read inside it from the block the branch then writes,
    # XLA copied the whole block per step (solve at n=4096 on 2x4: 1.0 -> 1.55 CPU-s).
    urow = dslice(a, (le + r0, c0), (nb, ctx.k - c0))

    def solved(a: jax.Array) -> tuple[jax.Array, jax.Array]:
        l11 = dslice(pan, (le, 0), (nb, nb))
        u12 = jnp.where(trail, trsm(l11, urow, lower=True, unit_diagonal=True), urow)
        return dupdate(a, u12, (le + r0, c0)), jnp.where(trail, u12, 0)

    def idle(a: jax.Array) -> tuple[jax.Array, jax.Array]:
        return a, jnp.zeros((nb, ctx.k - c0), a.dtype)

    # Only the owner row solves and writes.
    a, u12 = on_owner(tab.r == re, ctx.plan.row_axes, solved, idle, a)
    u12 = psum(u12, ctx.plan.row_axes)
    l21 = jnp.where((ctx.g_r >= (e + 1) * nb)[:, None], pan, 0)
    return a, l21, u12


def _panel_step(ctx: Stage, pivot: PanelPivoting, e: jax.Array, state: Eliminating) -> Eliminating:
    """Step ``e``: panel ``e`` broadcast along the mesh row and pivoted, U's rows, the update.

    The trailing matrix is updated locally, by tiles over its active rows and columns
    only (:func:`~shardkit.linalg._tiles.active_update`).
    """
    nb = ctx.plan.nb
    p = pivot(ctx, e, _ahead(ctx, e, state.a), state.piv)
    a, pan, _ = _finish_panel(ctx, e, state.a, p, None)
    a, l21, u12 = _u_rows(ctx, e, a, pan)
    nxt = (e + 1) * nb
    row_lo, col_lo = jnp.sum(ctx.g_r < nxt), jnp.sum(ctx.g_c < nxt)
    with jax.named_scope(BULK_SCOPE):
        a = active_update(a, l21, u12, (ctx.r0, ctx.c0), row_lo, col_lo, nb=nb)
    return Eliminating(a, p.piv)


def _lookahead_step(ctx: Stage, pivot: PanelPivoting, e: jax.Array, state: Factoring) -> Factoring:
    """Step ``e``, with lookahead: panel ``e + 1`` first, then the rest of update ``e``.

    Panel ``e``'s row exchanges reach ``a`` and U's rows are broadcast (:func:`_u_rows`).
    Then panel ``e + 1``'s columns alone are updated, broadcast along the mesh row and
    pivoted, and only then the rest of the trailing matrix: the next panel's
    collectives do not depend on that update, so on real devices they can overlap it
    (ScaLAPACK's and HPL's lookahead). Its row exchanges, which need the updated rows,
    open the next step.

    Every collective still depends on the one before it: on XLA's CPU runtime two
    collectives no data dependency orders may run concurrently on one device's threads
    and deadlock in their rendezvous.
    """
    tab, nb, r0, c0 = ctx.tab, ctx.plan.nb, ctx.r0, ctx.c0
    a, pan, ahead = _finish_panel(ctx, e, state.a, state.panel, state.ahead)
    assert ahead is not None
    a, l21, u12 = _u_rows(ctx, e, a, pan)
    nxt, after = (e + 1) * nb, (e + 2) * nb
    # Lookahead: panel e + 1's columns alone (their rows of U are stale in `ahead`;
    # _finish_panel writes active rows only).
    cs = tab.slot_c[e + 1]
    cols = ahead - l21 @ dslice(u12, (0, cs * nb - c0), (nb, nb))
    panel = pivot(ctx, e + 1, cols, state.panel.piv)
    # The rest of update e, panel e + 1's columns left out (they are rewritten).
    rest = jnp.where((ctx.g_c >= after)[None, :], u12, 0)
    row_lo, col_lo = jnp.sum(ctx.g_r < nxt), jnp.sum(ctx.g_c < after)
    with jax.named_scope(BULK_SCOPE):
        a = active_update(a, l21, rest, (r0, c0), row_lo, col_lo, nb=nb)
    return Factoring(a, _ahead(ctx, e + 2, a), panel)


def _stages(
    plan: Plan, stages: int, tab: LocalTables, tol: jax.Array, m: int, k: int
) -> list[tuple[int, int, Stage]]:
    """Each stage's ``(first step, end step, Stage)``."""
    nb = plan.nb
    cols_nb = jnp.arange(nb, dtype=jnp.int32)
    ib = max(d for d in range(1, min(nb, INNER_BLOCK) + 1) if nb % d == 0)
    cols_ib = jnp.arange(ib, dtype=jnp.int32)
    out = []
    for s0, s1, lr, lc in plan.stage_bounds(stages):
        r0, c0 = lr * nb, lc * nb
        g_r, g_c = tab.g_r[r0:], tab.g_c[c0:]
        out.append((s0, s1, Stage(plan, tab, tol, r0, c0, m, k, ib, cols_nb, cols_ib, g_r, g_c)))
    return out


def _eliminate(
    stages: list[tuple[int, int, Stage]], pivot: PanelPivoting, a: jax.Array, piv: Pivots
) -> tuple[jax.Array, Pivots]:
    """The loop over panels, one step per panel (:func:`_panel_step`)."""
    state = Eliminating(a, piv)
    for s0, s1, ctx in stages:
        step = functools.partial(_panel_step, ctx, pivot)
        state = lax.fori_loop(jnp.int32(s0), jnp.int32(s1), step, state)
    return state.a, state.piv


def _eliminate_ahead(
    stages: list[tuple[int, int, Stage]], pivot: PanelPivoting, a: jax.Array, piv: Pivots
) -> tuple[jax.Array, Pivots]:
    """The loop over panels with lookahead (:func:`_lookahead_step`).

    Panel 0 is pivoted first; step ``e`` then pivots panel ``e + 1``, so the loop runs
    ``n / nb - 1`` steps and the last panel's row exchanges follow it.
    """
    blocks = stages[0][2].plan.blocks
    state: Factoring | None = None
    for s0, s1, ctx in stages:
        if state is None:  # panel 0
            e0 = jnp.int32(0)
            p0 = pivot(ctx, e0, _ahead(ctx, e0, a), piv)
            state = Factoring(a, _ahead(ctx, e0 + 1, a), p0)
        # The panels' rows above this stage's are all eliminated (never moved): drop them.
        cut = state.ahead.shape[0] - ctx.rows
        state = Factoring(
            state.a, state.ahead[cut:], state.panel._replace(pan=state.panel.pan[cut:])
        )
        last = min(s1, blocks - 1)
        if s0 < last:
            step = functools.partial(_lookahead_step, ctx, pivot)
            state = lax.fori_loop(jnp.int32(s0), jnp.int32(last), step, state)
    assert state is not None
    a, _, _ = _finish_panel(stages[-1][2], jnp.int32(blocks - 1), state.a, state.panel, None)
    return a, state.panel.piv


def factor_local(
    a: jax.Array, plan: Plan, stages: int, pivoting: Pivoting, *, lookahead: bool = False
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The LU kernel, inside ``shard_map``: (packed factors in slot order, perm, swaps, status).

    ``lookahead``: pivot panel ``e + 1`` before the bulk of update ``e``
    (:func:`_lookahead_step`).
    """
    tab = local_tables(plan)
    a = to_local_order(a, plan, tab)
    n = plan.n
    m, k = a.shape
    axes = plan.row_axes + plan.col_axes
    # Real: max and -min, no |a| temporary.
    amax = jnp.max(jnp.abs(a)) if jnp.iscomplexobj(a) else jnp.maximum(jnp.max(a), -jnp.min(a))
    if axes:
        amax = lax.pmax(amax, axes)
    tol = n * jnp.finfo(a.dtype).eps * amax
    piv = Pivots(jnp.arange(n, dtype=jnp.int32), jnp.int32(0), jnp.int32(0))
    eliminate = _eliminate_ahead if lookahead else _eliminate
    a, piv = eliminate(_stages(plan, stages, tab, tol, m, k), PANEL_PIVOTING[pivoting], a, piv)
    return a, piv.perm, piv.swaps, piv.status
