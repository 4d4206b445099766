"""``solve_triangular``: blocked substitution on the block-cyclic layout.

The right-hand sides are replicated (``n x nrhs`` per device; vector-sized for a few
of them). One all-reduce first gives every device the ``n / nb`` diagonal blocks
(``n x nb`` elements). Then each of the ``n / nb`` steps multiplies one block row (or
column) of the local matrix by the already-solved part of the solution, reading only
that part (a run of the device's slots, in a few static slices), and sums the pieces
with one all-reduce of ``nb x nrhs`` elements over the whole mesh. Every device then
solves the diagonal block, or from :data:`SPLIT_RHS` right-hand sides on a ``1 / P``
share of its columns, joined by one all-gather (LAPACK's diagonal solves are a quarter
of the flops at ``n = 4096``, 1024 right-hand sides: done on all 8 devices they cost
as much as the rest). Nothing of matrix size ever moves. Complex matrices are solved
the same way (``trans=2``: the conjugate transpose, through ``conj``); orders the mesh
or the block size does not divide are padded with an identity block (see
:mod:`shardkit.linalg._pad`; the padded matrix stays triangular).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from shardkit._programs import cached
from shardkit.layout.internal import Operand, check_same_devices
from shardkit.linalg._blockcyclic import (
    DEFAULT_BLOCK,
    AnyMesh,
    LocalTables,
    Plan,
    SpecLike,
    Spmd,
    after,
    axis_index,
    check_nb,
    dslice,
    dupdate,
    local_tables,
    matrix_operand,
    place,
    psum,
    trsm,
)
from shardkit.linalg._dtype import as_inexact, common
from shardkit.linalg._inputs import (
    ArrayInput,
    Trans,
    as_rhs,
    empty_solution,
    from_rhs,
    gate,
    nan_unless,
    referenced,
    require_finite,
    trans_code,
)
from shardkit.linalg._pad import pad_matrix, pad_rows, square_plan, unpad_rows
from shardkit.linalg._partitioned import on_layout

__all__ = ["solve_triangular", "triangular_solve"]


SPLIT_RHS = 256
"""From this many right-hand sides on, each step's diagonal solve is split over the mesh:
every device solves ``nrhs / P`` of the columns (padded to a multiple of ``P``) and one
all-gather per step joins them. Below it every device solves all of them rather than
wait on one more collective per step."""


class _Sweep(NamedTuple):
    """The sweep's loop state (replicated).

    Attributes:
      x: ``(n, nrhs)`` solution by elimination index (zero where not yet solved).
      xl: the solved entries this device multiplies, in its local slot order: by its
        column slots (``k`` rows) for ``op(T) = T``, by its row slots (``m``) for ``T^T``.
        Empty in natural order, where those slots are a contiguous run of ``x``.
    """

    x: jax.Array
    xl: jax.Array


class _Side(NamedTuple):
    """Which side of the local block one sweep reads (static per sweep, traced values).

    Attributes:
      mine: per step, whether this device holds part of the step's block row (column).
      line: per step, that block row's (column's) slot in the device's block.
      own, slot: per step, whether this device's ``xl`` holds the step's rows and where.
      elim: the elimination step of each of this device's local slots along ``xl``.
      base: where the device's first slot sits in the array the product reads: ``x``
        itself in natural order (its slots are a contiguous run of ``x``), else ``xl``.
    """

    mine: jax.Array
    line: jax.Array
    own: jax.Array
    slot: jax.Array
    elim: jax.Array
    base: jax.Array


def _side(tab: LocalTables, plan: Plan, trans: bool, natural: bool) -> _Side:
    nb = plan.nb
    if not trans:  # block row e of T times x: local column slots
        base = tab.c * plan.k if natural else jnp.int32(0)
        mine, own = tab.r == tab.own_r, tab.c == tab.own_c
        return _Side(mine, tab.slot_r, own, tab.slot_c, tab.g_c[::nb] // nb, base)
    base = tab.r * plan.m if natural else jnp.int32(0)
    mine, own = tab.c == tab.own_c, tab.r == tab.own_r
    return _Side(mine, tab.slot_c, own, tab.slot_r, tab.g_r[::nb] // nb, base)


def _diagonal_blocks(
    a: jax.Array,
    rhs: jax.Array,
    plan: Plan,
    tab: LocalTables,
    *,
    forward: bool,
    unit: bool,
    trans: bool,
) -> jax.Array:
    """Every diagonal block of ``op(T)``, ``(n / nb, nb, nb)``, replicated by one all-reduce.

    Its owner reads each block (only the referenced triangle, none of the diagonal when
    ``unit``: ones in its place); the all-reduce waits for ``rhs`` (the collectives of the
    sweep that computed it come first, one chain).
    """
    nb = plan.nb
    t = plan.tables
    tiles = a.reshape(a.shape[0] // nb, nb, a.shape[1] // nb, nb)
    rows, cols = jnp.asarray(t.slot_r, jnp.int32), jnp.asarray(t.slot_c, jnp.int32)
    d = tiles[rows, :, cols, :]
    d = jnp.swapaxes(d, 1, 2) if trans else d
    # op(T) is lower exactly when the substitution runs forward.
    keep = jnp.tri(nb, k=-1 if unit else 0, dtype=bool)
    keep = keep if forward else keep.T
    held = (tab.r == tab.own_r) & (tab.c == tab.own_c)
    d = jnp.where(keep[None] & held[:, None, None], d, 0)
    d = psum(after(d, rhs), plan.row_axes + plan.col_axes)
    return d + jnp.eye(nb, dtype=d.dtype) if unit else d


def _done_product(
    a: jax.Array, xl: jax.Array, e: jax.Array, side: _Side, nb: int, *, forward: bool, trans: bool
) -> jax.Array:
    """This device's share of block row (column) ``e`` of ``op(T)`` times the solved ``x``.

    ``xl`` holds the solved entries of this device's slots from row ``side.base`` on
    (``x`` itself in natural order, else the sweep's ``xl``). The solved slots are a run of this device's slot order (a prefix forward, a suffix
    backward): it is read as its binary decomposition, one static slice per set bit, so
    neither the unsolved part nor the other triangle (which may hold anything, NaN
    included) is read, and no flop is spent on them.
    """
    kb = side.elim.shape[0]
    at = (side.line[e] * nb,)
    solved = (side.elim < e) if forward else (side.elim > e)
    count = jnp.where(side.mine[e], jnp.sum(solved.astype(jnp.int32)), 0)
    start = jnp.int32(0) if forward else kb - count
    dt = jnp.result_type(a, xl)
    total = jnp.zeros((nb, xl.shape[1]), dt)
    for bit in reversed(range(kb.bit_length())):
        size = (1 << bit) * nb

        def chunk(s: jax.Array, size: int = size) -> jax.Array:
            xs = dslice(xl, (side.base + s * nb, 0), (size, xl.shape[1]))
            if not trans:
                return dslice(a, (at[0], s * nb), (nb, size)) @ xs
            # (x^T blk)^T, not blk^T x: the big operand stays row-major (a transposed
            # one made XLA lay the whole carried block out column-major).
            return (xs.T @ dslice(a, (s * nb, at[0]), (size, nb))).T

        take = (count >> bit) & 1 == 1
        total = total + lax.cond(take, chunk, lambda s: jnp.zeros((nb, xl.shape[1]), dt), start)
        start = start + jnp.where(take, 1 << bit, 0)
    return total


def substitute(
    a: jax.Array,
    rhs: jax.Array,
    plan: Plan,
    tab: LocalTables,
    *,
    lower: bool,
    unit: bool,
    trans: bool,
) -> jax.Array:
    """Solve ``op(T) x = rhs`` inside ``shard_map`` (``T`` the ``lower``/upper part of ``a``).

    ``a`` is the device's block in slot order; ``rhs`` and the result are replicated
    ``(n, nrhs)`` arrays indexed by elimination index. One all-reduce gathers the
    diagonal blocks first; then each of the ``n / nb`` steps sums the step's block row
    (column) times the solved part with one ``nb x nrhs`` all-reduce and solves the
    diagonal block (from :data:`SPLIT_RHS` right-hand sides on: a ``1 / P`` share of
    the columns on each device, joined by one all-gather).
    """
    nb, nrhs = plan.nb, rhs.shape[1]
    axes = plan.row_axes + plan.col_axes
    forward = lower != trans
    natural = plan.order == tuple(range(plan.blocks))
    side = _side(tab, plan, trans, natural)
    diag = _diagonal_blocks(a, rhs, plan, tab, forward=forward, unit=unit, trans=trans)
    devices = plan.nr * plan.nc
    split = bool(axes) and nrhs >= SPLIT_RHS
    share = -(-nrhs // devices) if split else nrhs
    width = share * devices if split else nrhs
    b = jnp.pad(rhs, ((0, 0), (0, width - nrhs))) if width > nrhs else rhs
    # Natural order reads x itself: no second copy to carry and update.
    length = 0 if natural else a.shape[1] if not trans else a.shape[0]
    dt = jnp.result_type(a, b)
    zero = after(jnp.zeros((), dt), diag)  # the sweep's collectives after the diagonal's
    state = _Sweep(jnp.zeros(b.shape, dt) + zero, jnp.zeros((length, width), dt) + zero)
    me = axis_index(axes)

    def step(i: jax.Array, s: _Sweep) -> _Sweep:
        e = i if forward else plan.blocks - 1 - i
        src = s.x if natural else s.xl
        part = _done_product(a, src, e, side, nb, forward=forward, trans=trans)
        r = dslice(b, (e * nb, 0), (nb, width)) - psum(part, axes)
        if split:
            mine = dslice(r, (0, me * share), (nb, share))
            xe = trsm(diag[e], mine, lower=forward, unit_diagonal=unit)
            xe = lax.all_gather(xe, axes, axis=1, tiled=True)
        else:
            xe = trsm(diag[e], r, lower=forward, unit_diagonal=unit)
        x = dupdate(s.x, xe, (e * nb, 0))
        if natural:
            return _Sweep(x, s.xl)
        at = side.slot[e] * nb
        held = jnp.where(side.own[e], xe, dslice(s.xl, (at, 0), (nb, width)))
        return _Sweep(x, dupdate(s.xl, held, (at, 0)))

    x = lax.fori_loop(jnp.int32(0), jnp.int32(plan.blocks), step, state).x
    return x[:, :nrhs] if width > nrhs else x


@cached
def triangular_program(
    plan: Plan, mesh: AnyMesh, spec: PartitionSpec, lower: bool, unit: bool, trans: bool
) -> Any:
    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        tab = local_tables(plan)
        # Natural order: local slots are the natural blocks, elimination index = row index.
        x = substitute(a, b, plan, tab, lower=lower, unit=unit, trans=trans)
        r = tab.r
        return dslice(x, (r * plan.m, 0), (plan.m, b.shape[1]))

    out = PartitionSpec(plan.row_axes or None, None)
    return Spmd(body, mesh, (spec, PartitionSpec()), out)


def solve_triangular(
    a: ArrayInput,
    b: ArrayInput,
    /,
    *,
    trans: Trans = 0,
    lower: bool = False,
    unit_diagonal: bool = False,
    nb: int = DEFAULT_BLOCK,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    check_finite: bool = True,
) -> jax.Array:
    """Solve ``op(a) x = b`` for triangular sharded ``a``, like ``jax.scipy.linalg.solve_triangular``.

    ``a`` stays where it is (``NamedSharding`` ``P(rows, cols)``); ``b`` is replicated
    (a vector-sized all-gather when it is sharded). Communication: one all-reduce of
    ``n x nb`` elements (the diagonal blocks), then ``n / nb`` all-reduces of
    ``nb x nrhs`` (and, from 256 right-hand sides on, as many all-gathers of
    ``nb x nrhs``). Memory per device: its share of ``a`` plus ``O(n * (nrhs + nb))``.
    A zero on the diagonal gives inf, as in ``jax.scipy.linalg.solve_triangular``
    (SciPy raises).
    An order the mesh or ``nb`` does not divide is padded: one more array of
    ``size^2 / P`` elements per device, ``size`` the next multiple of
    ``lcm(R, C)`` times the block size (``n = 999`` on 2x4, ``nb=128``: 1000); ``x`` is
    cut back locally, or with one ``n x nrhs`` all-reduce (then replicated) when the
    mesh does not divide ``n``. Only the referenced triangle is read (never the diagonal
    with ``unit_diagonal``): whatever the rest holds, NaN included, does not matter.

    Args:
      a: ``(n, n)`` float or complex triangular matrix (the other triangle is ignored),
        sharded ``P(rows, cols)`` or host data with ``mesh=``/``spec=`` (any ``n``).
      b: ``(n,)`` or ``(n, nrhs)`` right-hand side(s).
      trans: ``0``/``"N"``, ``1``/``"T"`` or ``2``/``"C"`` (conjugate transpose; real:
        same as ``1``).
      lower: use the lower triangle of ``a``.
      unit_diagonal: assume ones on the diagonal.
      nb: block size (rounded down to divide the local blocks).
      mesh: the mesh, when ``a`` does not carry it (host data). Not needed under
        ``jit`` on Auto axes: the layout comes from the partitioner.
      spec: ``a``'s spec, likewise.
      check_finite: eagerly, raise ``ValueError`` when the referenced triangle of ``a``
        or ``b`` holds an inf or NaN (SciPy's default); under ``jit`` NaN-fill ``x``
        instead. ``False`` skips the check.

    Returns:
      ``x`` with ``b``'s shape, rows sharded like ``a``'s rows (replicated when the mesh
      does not divide ``n``); empty (zeros of ``b``'s shape) for 0x0 ``a`` or ``nrhs = 0``.

    Raises:
      ValueError: shapes disagree, a bad ``trans``, an unknown layout, or (eagerly)
        an inf or NaN in the input (``check_finite``).
      TypeError: ``a`` or ``b`` is half precision (use float32) or not numeric.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> t = np.tril(np.ones((16, 16))) + 15 * np.eye(16)
      >>> x = shardkit.linalg.solve_triangular(shardkit.shard(t, mesh=m, spec="x,y"), np.ones(16), lower=True)
      >>> bool(np.allclose(t @ np.asarray(x), 1))
      True
    """
    where = "solve_triangular"
    code = trans_code(where, trans)
    check_nb(where, nb)
    a = as_inexact(where, "a", a)
    dt = common(where, a.dtype, b)
    check_same_devices(where, {"a": a, "b": b}, mesh=mesh)
    op = matrix_operand(where, a, mesh, spec)
    empty = empty_solution(where, a, b, dt)
    if empty is not None:
        return empty
    ok = None
    if check_finite:
        tri = referenced(a, lower=bool(lower), unit=bool(unit_diagonal))
        ok = require_finite(where, True, a=tri, b=b)
        a, b = gate(ok, a), gate(ok, b)
    b2, vec = as_rhs(where, b, int(a.shape[0]), dt, tuple(a.shape))
    a = a if a.dtype == dt else a.astype(dt)
    x = triangular_solve(a, op, b2, lower=bool(lower), unit=bool(unit_diagonal), trans=code, nb=nb)
    return nan_unless(from_rhs(x, vec), ok)


def triangular_solve(
    a: Any, op: Operand, b2: jax.Array, *, lower: bool, unit: bool, trans: int, nb: int
) -> jax.Array:
    """``x`` of ``op(a) x = b2``, unchecked: ``a`` (the record ``op``) and ``b2``
    (``(n, nrhs)``) of the result's dtype. The core of :func:`solve_triangular`, which
    other algorithms call (lstsq's ``r x = q^H b``)."""
    # op(a) = a^H: a^T conj(x) = conj(b).
    conj = trans == 2 and jnp.iscomplexobj(b2)
    flags = (lower, unit, trans != 0)
    b2 = jnp.conj(b2) if conj else b2
    if op.unknown:  # Auto axes inside jit: the partitioner gives the layout.

        def make(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            out = PartitionSpec(plan.row_axes or None, None)
            return triangular_program(plan, m, p, *flags).body, (p, PartitionSpec()), (out,)

        (x,) = on_layout(op, (a, b2), make, "i j, k l -> i l", nb=nb, order="natural")
        return jnp.conj(x) if conj else x
    m, p, plan, padding = square_plan(op, nb, "natural")
    b2 = pad_rows(b2, padding, m)
    ap = pad_matrix(a, padding, plan, m, p)
    x = triangular_program(plan, m, p, *flags)(ap, place(b2, m, PartitionSpec()))
    x = unpad_rows(x, padding, m, plan.row_axes)
    return jnp.conj(x) if conj else x
