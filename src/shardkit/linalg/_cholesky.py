"""Distributed Cholesky (right-looking, blocked) on the block-cyclic layout, and ``cho_solve``.

Per panel of ``nb`` columns, the mesh column owning it factors it: the diagonal block
is summed down that column (all-reduce of ``nb x nb``) and factored, and its devices
solve their rows of the panel against it; ``L21`` is then broadcast along the mesh row
(all-reduce over the column axes, ``(n / R) x nb``), and the first failing pivot of all
is found once at the end (a ``pmin`` over the column axes). L21's rows are stacked
once per step by an all-gather over the row axes (each device row sends only the rows
of the current stage, at most ``n / R x nb``: half the CPU time of the ``n x nb``
all-reduce it replaced on 8 simulated devices), so that each device can form its
share of ``L21 L21^H`` locally: by tiles over the active lower triangle only
(:func:`shardkit.linalg._tiles.active_update`, about ``n^3 / 3P`` flops rather than a
whole square's ``2 n^3 / 3P``).
Complex Hermitian matrices factor as ``a = L L^H`` (real: ``L L^T``); an order the mesh
or the block size does not divide is padded with an identity block (see
:mod:`shardkit.linalg._pad`; Hermitian positive definiteness carries over).
Nothing of matrix size moves. A non-positive (or NaN) pivot sets the status: eagerly
:class:`~shardkit.linalg.NotPositiveDefiniteError`, under ``jit`` a NaN-filled result
or, from ``cholesky.with_status(...)`` and ``cho_factor.with_status(...)``, the status.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from shardkit._programs import cached
from shardkit.layout.internal import Operand, operand
from shardkit.linalg._blockcyclic import (
    DEFAULT_BLOCK,
    DEFAULT_STAGES,
    AnyMesh,
    LocalTables,
    Order,
    Plan,
    SpecLike,
    Spmd,
    after,
    dslice,
    dupdate,
    local_tables,
    make_plan,
    matrix_operand,
    on_owner,
    place,
    psum,
    to_local_order,
    trsm,
)
from shardkit.linalg._dtype import as_inexact, common
from shardkit.linalg._inputs import (
    ArrayInput,
    as_rhs,
    empty_solution,
    from_rhs,
    gate,
    nan_unless,
    referenced,
    require_finite,
)
from shardkit.linalg._pad import (
    Padding,
    natural_status,
    pad_matrix,
    pad_rows,
    square_plan,
    unpad_matrix,
    unpad_rows,
    user_status,
)
from shardkit.linalg._partitioned import on_layout
from shardkit.linalg._status import (
    Checked,
    Failure,
    Problem,
    checked,
    is_traced,
    reports_status,
    succeeded,
)
from shardkit.linalg._tiles import active_update
from shardkit.linalg._triangular import substitute

__all__ = ["CholeskyFactors", "cho_factor", "cho_solve", "cholesky"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CholeskyFactors:
    """``a[σ][:, σ] = L L^H``, distributed; the lower triangle of ``c`` holds ``L``.

    When the mesh or the block size does not divide ``a``'s order ``n``, these are the
    factors of the padded ``Π diag(a, I) Π^T`` (order ``padding.size``); :func:`cho_solve`
    still takes and returns ``n`` rows, and ``status`` names ``a``'s own columns.

    Attributes:
      c: ``(size, size)`` sharded like ``a``, in the block-cyclic slot order of ``plan``.
      status: 0, or ``j + 1`` for the first non-positive pivot (natural column ``j``).
      plan: static layout; mesh, spec: where ``c`` lives. Under ``jit`` on Auto mesh
        axes the partitioner decides that: mesh and spec are None, and the factor is in
        natural order (``σ`` the identity), so that it holds whatever the layout.
      padding: where ``a``'s indices sit in the factored order.
    """

    c: jax.Array
    status: jax.Array
    plan: Plan = dataclasses.field(metadata={"static": True})
    mesh: AnyMesh | None = dataclasses.field(metadata={"static": True})
    spec: PartitionSpec | None = dataclasses.field(metadata={"static": True})
    padding: Padding = dataclasses.field(metadata={"static": True})


def _chol_columns(d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Unblocked Cholesky of one ``nb x nb`` block by columns: (L, first bad column or -1).

    Written out (LAPACK's ``potrf`` NaN-fills the whole block on failure) so that the
    status names the exact failing column; ``nb^3 / 3`` flops in ``nb`` small steps.
    """
    nb = d.shape[0]
    idx = jnp.arange(nb)

    def col(j: jax.Array, st: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        low, bad = st
        row = jnp.conj(low[j])
        # A Hermitian pivot is real: its imaginary part (rounding) is ignored, as LAPACK does.
        s = jnp.real(d[j, j] - low[j] @ row)
        ok = s > 0
        ljj = jnp.sqrt(jnp.where(ok, s, jnp.ones_like(s))).astype(d.dtype)
        c = (d[:, j] - low @ row) / ljj
        low = low.at[:, j].set(jnp.where(idx > j, c, 0)).at[j, j].set(ljj)
        bad = jnp.where((bad < 0) & ~ok, j, bad)
        return low, bad

    return lax.fori_loop(jnp.int32(0), jnp.int32(nb), col, (jnp.zeros_like(d), jnp.int32(-1)))


def _chol_block(d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Cholesky of one ``nb x nb`` block (lower triangle read): (L, first bad column or -1).

    LAPACK's ``potrf`` first (4x faster than the column loop at ``nb=128`` on XLA's CPU
    backend: 63 against 259 us); only a block it could not factor is redone by
    :func:`_chol_columns`, to name the failing column. The ``cond`` holds no collective.
    """
    # The operand is built as a transpose: LAPACK wants it column-major, and on ``d``
    # itself XLA would propagate that layout back through the psums to the carried
    # local block (a share-sized copy per step, 2 ms). y.T is the whole Hermitian d,
    # whose column-major buffer is y's row-major one: the transpose is a bitcast.
    y = jnp.conj(d + jnp.conj(jnp.tril(d, -1)).T)
    low = lax.linalg.cholesky(y.T, symmetrize_input=False)
    return lax.cond(jnp.isfinite(low).all(), lambda: (low, jnp.int32(-1)), lambda: _chol_columns(d))


@dataclasses.dataclass(frozen=True, eq=False)
class _CholeskyStage:
    """What every panel step of one stage reads; built once per stage, outside its loop.

    Attributes:
      plan: the static layout.
      tab: this device's tables.
      eye: the ``nb x nb`` identity (the block a non-owner or a failed pivot factors).
      r0, c0: the first local row and column still active in this stage.
      rows: active local rows.
      g_r, g_c: the elimination index of each active local row and column.
      at_c: where each of this device's active columns sits among the stage rows that
        the all-gather stacks device row by device row (clipped where it is not active).
    """

    plan: Plan
    tab: LocalTables
    eye: jax.Array
    r0: int
    c0: int
    rows: int
    g_r: jax.Array
    g_c: jax.Array
    at_c: jax.Array

    def first_row(self, j: jax.Array) -> jax.Array:
        """The first active local row on or below active column ``j``'s diagonal."""
        return jnp.sum(self.g_r < self.g_c[j])


class _CholeskyCarry(NamedTuple):
    """The carry of the loop over panels: the whole local block and the status.

    A stage's active rows are a static offset into ``a``: a carried slice ``a[r0:]``
    would be a second, share-sized buffer.
    """

    a: jax.Array
    status: jax.Array


def _chol_stages(
    plan: Plan, stages: int, tab: LocalTables, eye: jax.Array, m: int
) -> Iterator[tuple[int, int, _CholeskyStage]]:
    """Each stage's ``(first step, end step, _CholeskyStage)``, built as its loop is reached."""
    nb = plan.nb
    for s0, s1, lr, lc in plan.stage_bounds(stages):
        r0, c0 = lr * nb, lc * nb
        g_r, g_c = tab.g_r[r0:], tab.g_c[c0:]
        rows = m - r0
        blk = g_c // nb
        at_c = jnp.maximum(tab.own_r[blk] * rows + tab.slot_r[blk] * nb + g_c % nb - r0, 0)
        yield s0, s1, _CholeskyStage(plan, tab, eye, r0, c0, rows, g_r, g_c, at_c)


class _PanelAt(NamedTuple):
    """Where panel ``e`` sits: its device column's slot, device row and local row."""

    e: jax.Array
    cs: jax.Array  # the panel's block-column slot on its mesh column
    re: jax.Array  # the mesh row holding its diagonal block
    le: jax.Array  # that block's first row among the active local rows


def _diagonal_block(
    ctx: _CholeskyStage, at: _PanelAt, owner: jax.Array, a: jax.Array, status: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Panel ``e``'s ``L11`` (summed down its mesh column, one ``nb x nb`` all-reduce) and status.

    The mesh column owning the panel factors it alone; the other columns factor an
    identity and receive L21 afterwards. A failed block factors as the identity.
    """
    nb = ctx.plan.nb
    mine = ctx.tab.r == at.re
    d = psum(
        jnp.where(mine, dslice(a, (ctx.r0 + at.le, at.cs * nb), (nb, nb)), 0), ctx.plan.row_axes
    )
    d = jnp.where(owner, jnp.tril(d), ctx.eye)  # NaN above the diagonal is ignored
    l11, first = _chol_block(d)
    failed = (first >= 0) | ~jnp.isfinite(d).all()
    first = jnp.maximum(first, 0)
    status = jnp.where((status == 0) & failed, at.e * nb + first + 1, status)
    return jnp.where(failed, ctx.eye, l11), status


def _solve_panel(
    ctx: _CholeskyStage, at: _PanelAt, l11: jax.Array, below: jax.Array, a: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """On the owner column: ``L21 = pan L11^-H``, written into ``a``; returns ``(a, L21)``."""
    nb, r0, le = ctx.plan.nb, ctx.r0, at.le
    pan = dslice(a, (r0, at.cs * nb), (ctx.rows, nb))
    l21 = trsm(jnp.conj(l11).T, pan, lower=False, left=False)  # pan @ L11^-H
    new = jnp.where(below, l21, pan)
    new = dupdate(new, jnp.where(ctx.tab.r == at.re, l11, dslice(new, (le, 0), (nb, nb))), (le, 0))
    return dupdate(a, new, (r0, at.cs * nb)), jnp.where(below, l21, 0)


def _idle_panel(ctx: _CholeskyStage, a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Off the owner column: ``a`` unchanged and a zero ``L21``."""
    return a, jnp.zeros((ctx.rows, ctx.plan.nb), a.dtype)


def _trailing_update(ctx: _CholeskyStage, e: jax.Array, a: jax.Array, l21: jax.Array) -> jax.Array:
    """``a -= L21 L21^H`` over the active lower triangle, from L21's rows stacked once.

    The panel's rows for this device's columns are gathered along the mesh column
    (each device row sends only its stage rows), then picked out by position.
    """
    nb, g_r, g_c, rows_ax = ctx.plan.nb, ctx.g_r, ctx.g_c, ctx.plan.row_axes
    nxt = (e + 1) * nb
    rows_all = lax.all_gather(l21, rows_ax, tiled=True) if rows_ax else l21
    right = jnp.where((g_c >= nxt)[:, None], rows_all[ctx.at_c], 0)
    # Only the lower triangle of the active corner, in place in the carried
    # block: tiles whose rows all sit above their first column are skipped
    # (the upper triangle is never read).
    return active_update(
        a,
        l21,
        jnp.conj(right),
        (ctx.r0, ctx.c0),
        jnp.sum(g_r < nxt),
        jnp.sum(g_c < nxt),
        nb=nb,
        first_row=ctx.first_row,
        right_rows=True,
    )


def _chol_step(ctx: _CholeskyStage, e: jax.Array, carry: _CholeskyCarry) -> _CholeskyCarry:
    """Step ``e``: panel ``e`` factored by its mesh column, broadcast, the trailing update."""
    tab, nb = ctx.tab, ctx.plan.nb
    ce, cs = tab.own_c[e], tab.slot_c[e]
    re, rs = tab.own_r[e], tab.slot_r[e]
    owner = tab.c == ce
    at = _PanelAt(e, cs, re, jnp.clip(rs * nb - ctx.r0, 0, ctx.rows - nb))
    l11, status = _diagonal_block(ctx, at, owner, carry.a, carry.status)
    below = (ctx.g_r >= (e + 1) * nb)[:, None]
    # Only the owner column solves and writes its panel.
    solve = functools.partial(_solve_panel, ctx, at, l11, below)
    a, l21 = on_owner(owner, ctx.plan.col_axes, solve, functools.partial(_idle_panel, ctx), carry.a)
    # L21 along the mesh row, from its owner.
    l21 = psum(l21, ctx.plan.col_axes)
    return _CholeskyCarry(_trailing_update(ctx, e, a, l21), status)


def _chol_local(a: jax.Array, plan: Plan, stages: int) -> tuple[jax.Array, jax.Array]:
    """The Cholesky kernel, inside ``shard_map``: (factor in slot order, status)."""
    tab = local_tables(plan)
    a = to_local_order(a, plan, tab)
    eye = jnp.eye(plan.nb, dtype=a.dtype)
    state = _CholeskyCarry(a, jnp.int32(0))
    for s0, s1, ctx in _chol_stages(plan, stages, tab, eye, a.shape[0]):
        step = functools.partial(_chol_step, ctx)
        state = lax.fori_loop(jnp.int32(s0), jnp.int32(s1), step, state)
    a, status = state
    cols_ax = plan.col_axes
    if cols_ax:  # each mesh column saw its own panels' pivots: the first failure of all
        never = jnp.int32(jnp.iinfo(jnp.int32).max)
        status = lax.pmin(jnp.where(status == 0, never, status), cols_ax)
        status = jnp.where(status == never, 0, status)
        # Whatever collective reads the factor next (under jit, in the same program)
        # must come after this one: unordered collectives can hang XLA's CPU runtime.
        a = after(a, status)
    return a, status


@cached
def _chol_program(plan: Plan, mesh: AnyMesh, spec: PartitionSpec, stages: int) -> Any:
    return Spmd(
        lambda a: _chol_local(a, plan, stages),
        mesh,
        spec,
        (spec, PartitionSpec()),
    )


@cached
def _tril_program(plan: Plan, mesh: AnyMesh, spec: PartitionSpec) -> Any:
    def body(x: jax.Array) -> jax.Array:
        tab = local_tables(plan)
        return jnp.where(tab.g_r[:, None] >= tab.g_c[None, :], x, 0)

    return Spmd(body, mesh, spec, spec)


def _factor(
    a: Any, op: Operand, nb: int, order: str, stages: int, overwrite: bool = False
) -> CholeskyFactors:
    """The Cholesky factor of the checked, inexact, placed-or-host matrix ``a`` (``op``)."""
    m, p, plan, padding = square_plan(op, nb, order)
    x = pad_matrix(a, padding, plan, m, p)
    prog = _chol_program(plan, m, p, int(stages))
    # Donated, the factor takes x's buffer: one share of a per device less.
    out, status = (prog.donating if overwrite and not is_traced(x) else prog)(x)
    status = user_status(natural_status(status, plan), padding)
    return CholeskyFactors(out, status, plan, m, p, padding)


def _on_layout(a: Any, op: Operand, nb: int, stages: int, tril: bool) -> tuple[jax.Array, ...]:
    """Auto mesh axes under ``jit``: ``(c, natural status)`` from one per-shard program.

    Natural order, so that the factor does not depend on the layout the partitioner
    picks; ``tril`` zeroes the upper triangle (:func:`cholesky`).
    """

    def make(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
        chol = _chol_program(plan, m, p, int(stages)).body
        zero = _tril_program(plan, m, p).body

        def local(a: jax.Array) -> tuple[jax.Array, jax.Array]:
            c, status = chol(a)
            return (zero(c) if tril else c), natural_status(status, plan)

        return local, (p,), (p, PartitionSpec())

    return on_layout(op, (a,), make, "i j -> i j, ", nb=nb, order="natural")


def _cho_factor(
    want_status: bool,
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    order: Order = "cyclic",
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    stages: int = DEFAULT_STAGES,
    check_finite: bool = True,
    overwrite_a: bool = False,
) -> Checked[CholeskyFactors]:
    """Cholesky-factor a sharded Hermitian positive definite matrix, keeping it distributed.

    Reads only the lower triangle. Communication per panel: all-reduces of
    ``nb x nb`` (over the row axes) and ``(n/R) x nb`` (column axes), and an
    all-gather of at most ``n x nb`` (row axes); one scalar all-reduce at the end. Memory per device: its share plus one working copy plus ``O(n * nb)``.
    Sizes the mesh or ``nb`` does not divide are padded (see :class:`CholeskyFactors`):
    one more array of ``size^2 / P`` elements per device, ``size`` at most about
    ``n + lcm(R, C) n / (lcm(R, C) nb)`` (``n = 999`` on 2x4, ``nb=128``: 1000).

    Args:
      a: ``(n, n)`` real symmetric or complex Hermitian positive definite, sharded
        ``P(rows, cols)`` or host data with ``mesh=``/``spec=`` (any ``n``).
      nb: block size.
      order: ``"cyclic"`` (balanced) or ``"natural"``; under ``jit`` on Auto axes always
        natural (see :class:`CholeskyFactors`).
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.
      stages: static sub-loops over which the panel steps' working set shrinks.
      overwrite_a: donate ``a``'s buffer to the factorization (as SciPy's
        ``overwrite_a``; eagerly only): the factors are written over it and ``a`` is
        deleted afterwards, which saves one share of ``a`` per device. When ``a`` is
        converted or padded first, the converted copy is donated instead and ``a``
        stays. Under ``jit`` donate through ``jax.jit(..., donate_argnums=...)``.
      check_finite: eagerly, raise ``ValueError`` when the lower triangle of ``a`` holds
        an inf or NaN (SciPy's default); under ``jit`` NaN-fill the result instead.
        ``False`` skips the check.

    Returns:
      :class:`CholeskyFactors`; ``cho_factor.with_status(...)``: ``(factors, status)``.

    Raises:
      NotPositiveDefiniteError: eagerly, for a matrix that is not positive definite.
      TypeError: ``a`` is half precision (use float32) or not numeric.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.eye(16) * 4, mesh=m, spec="x,y")
      >>> x = shardkit.linalg.cho_solve(shardkit.linalg.cho_factor(a), np.ones(16))
      >>> bool(np.allclose(np.asarray(x), 0.25))
      True
    """
    a = as_inexact("cho_factor", "a", a)
    op = matrix_operand("cho_factor", a, mesh, spec)
    ok = None
    if check_finite:
        ok = require_finite("cho_factor", True, a=referenced(a, lower=True))
        a = gate(ok, a)
    if tuple(a.shape) == (0, 0):  # no layout holds it; cho_solve answers empty solutions
        plan = Plan(0, 1, (), (), 1, 1, ())
        f = CholeskyFactors(
            jnp.zeros((0, 0), a.dtype), jnp.zeros((), jnp.int32), plan, None, None, Padding(0, 0, 1)
        )
        return succeeded(f)
    if op.unknown:
        c, status = _on_layout(a, op, nb, stages, tril=False)
        n = int(a.shape[0])
        plan = make_plan(n, (), (), 1, 1, nb, "natural")
        f = CholeskyFactors(c, status, plan, None, None, Padding(n, n, 1))
    else:
        f = _factor(a, op, nb, order, stages, overwrite_a)
    if ok is not None:
        f = dataclasses.replace(f, c=nan_unless(f.c, ok))
    problem = Problem("cho_factor", Failure.NOT_POSITIVE_DEFINITE, (f.padding.n,) * 2, f.c.dtype)
    return checked(problem, f, f.status, traced=is_traced(a))


cho_factor = reports_status(_cho_factor)


def _cholesky(
    want_status: bool,
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    stages: int = DEFAULT_STAGES,
    check_finite: bool = True,
    overwrite_a: bool = False,
) -> Checked[jax.Array]:
    """Lower Cholesky factor ``L`` (``a = L L^H``) of sharded ``a``, like ``jnp.linalg.cholesky``.

    Natural elimination order, so ``L`` is exactly LAPACK's, sharded like ``a`` (the
    upper triangle zeroed). Communication and padding as :func:`cho_factor`; when the
    mesh does not divide ``n``, ``L`` is cut from the padded factor with one ``n x n``
    all-reduce and comes back replicated. Unlike ``jnp.linalg.cholesky`` (NaN), a
    non-positive-definite matrix raises eagerly.

    Args:
      a: ``(n, n)`` real symmetric or complex Hermitian positive definite, sharded
        ``P(rows, cols)`` (or host data with ``mesh=``/``spec=``).
      nb: block size.
      stages: see :func:`cho_factor`. (No ``order=``: ``L`` is LAPACK's, in natural
        order.)
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.
      overwrite_a: donate ``a``'s buffer to the factorization (as SciPy's
        ``overwrite_a``; eagerly only): the factors are written over it and ``a`` is
        deleted afterwards, which saves one share of ``a`` per device. When ``a`` is
        converted or padded first, the converted copy is donated instead and ``a``
        stays. Under ``jit`` donate through ``jax.jit(..., donate_argnums=...)``.
      check_finite: eagerly, raise ``ValueError`` when the lower triangle of ``a`` holds
        an inf or NaN (SciPy's default); under ``jit`` NaN-fill the result instead.
        ``False`` skips the check.

    Returns:
      ``L``, sharded like ``a``; NaN-filled under ``jit`` when not positive definite.
      ``cholesky.with_status(...)``: ``(L, status)``.

    Raises:
      NotPositiveDefiniteError: eagerly, for a matrix that is not positive definite.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a_np = np.eye(16) + np.ones((16, 16))
      >>> l = shardkit.linalg.cholesky(shardkit.shard(a_np, mesh=m, spec="x,None"), nb=4)
      >>> bool(np.allclose(np.asarray(l), np.linalg.cholesky(a_np)))
      True
    """
    a = as_inexact("cholesky", "a", a)
    op = matrix_operand("cholesky", a, mesh, spec)
    ok = None
    if check_finite:
        ok = require_finite("cholesky", True, a=referenced(a, lower=True))
        a = gate(ok, a)
    if tuple(a.shape) == (0, 0):
        empty = jnp.zeros((0, 0), a.dtype)
        return succeeded(empty)
    if op.unknown:
        out, status = _on_layout(a, op, nb, stages, tril=True)
    else:
        f = _factor(a, op, nb, "natural", stages, overwrite_a)
        m, p = f.mesh, f.spec
        assert m is not None
        assert p is not None
        zero = _tril_program(f.plan, m, p)
        # f.c is this call's own intermediate: zeroing its upper triangle in its buffer
        # keeps the step at one share (and overwrite_a's saving through to the end).
        tril = (zero if is_traced(f.c) else zero.donating)(f.c)
        out, status = unpad_matrix(tril, f.padding, f.plan, m, p), f.status
    out = nan_unless(out, ok)
    problem = Problem("cholesky", Failure.NOT_POSITIVE_DEFINITE, tuple(out.shape), out.dtype)
    return checked(problem, out, status, traced=is_traced(a))


cholesky = reports_status(_cholesky)


@cached
def _cho_solve_program(plan: Plan, mesh: AnyMesh, spec: PartitionSpec) -> Any:
    sigma = plan.tables.sigma

    def body(c: jax.Array, b: jax.Array) -> jax.Array:
        tab = local_tables(plan)
        sig = jnp.asarray(sigma, jnp.int32)
        y = substitute(c, b[sig], plan, tab, lower=True, unit=False, trans=False)
        # L^H z = y  <=>  L^T conj(z) = conj(y).
        z = jnp.conj(substitute(c, jnp.conj(y), plan, tab, lower=True, unit=False, trans=True))
        x = jnp.zeros_like(z).at[sig].set(z)
        return dslice(x, (tab.r * plan.m, 0), (plan.m, b.shape[1]))

    rep = PartitionSpec()
    out = PartitionSpec(plan.row_axes or None, None)
    return Spmd(body, mesh, (spec, rep), out)


def cho_solve(
    factors: CholeskyFactors, b: ArrayInput, /, *, check_finite: bool = True
) -> jax.Array:
    """Solve ``a x = b`` from :func:`cho_factor`'s factors (``b`` replicated).

    Communication: ``2 n / nb`` all-reduces of ``nb x (nb + nrhs)`` elements; padded
    factors cut ``x`` back locally, or with one ``n x nrhs`` all-reduce (``x`` then
    replicated) when the mesh does not divide ``n``.

    Args:
      factors: from :func:`cho_factor`.
      b: ``(n,)`` or ``(n, nrhs)``; a complex ``b`` with real factors gives a complex ``x``.
      check_finite: eagerly, raise ``ValueError`` when ``b`` holds an inf or NaN
        (SciPy's default; the factors were checked by :func:`cho_factor`).

    Returns:
      ``x``, rows sharded like ``a``'s rows (replicated when the mesh does not divide
      ``n``); zeros of ``b``'s shape when ``nrhs = 0``.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a_np = np.eye(16) + np.ones((16, 16))
      >>> f = shardkit.linalg.cho_factor(shardkit.shard(a_np, mesh=m, spec="x,y"), nb=4)
      >>> bool(np.allclose(a_np @ np.asarray(shardkit.linalg.cho_solve(f, np.ones(16))), 1))
      True
    """
    plan, padding = factors.plan, factors.padding
    dt = common("cho_solve", factors.c.dtype, b)
    ok = require_finite("cho_solve", check_finite, b=b)
    b = gate(ok, b)
    empty = empty_solution("cho_solve", jnp.zeros((padding.n, padding.n)), b, dt)
    if empty is not None:
        return empty
    b2, vec = as_rhs("cho_solve", b, padding.n, dt)
    c = factors.c if factors.c.dtype == dt else factors.c.astype(dt)
    if factors.mesh is None or factors.spec is None:  # natural order: any layout reads it
        rep = PartitionSpec()

        def make(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            out = PartitionSpec(plan.row_axes or None, None)
            return _cho_solve_program(plan, m, p).body, (p, rep), (out,)

        (x,) = on_layout(
            operand("cho_solve", "factors.c", c),
            (c, b2),
            make,
            "i j, k l -> i l",
            nb=plan.nb,
            order="natural",
        )
        return nan_unless(from_rhs(x, vec), ok)
    b2 = place(pad_rows(b2, padding, factors.mesh), factors.mesh, PartitionSpec())
    x = _cho_solve_program(plan, factors.mesh, factors.spec)(c, b2)
    x = unpad_rows(x, padding, factors.mesh, plan.row_axes)
    return nan_unless(from_rhs(x, vec), ok)
