"""The block-cyclic layout of the factorizations, kept in "permuted global order".

ScaLAPACK deals ``nb x nb`` blocks round-robin over the devices so that, as a
factorization shrinks to its trailing corner, every device keeps working. shardkit
gets the same balance *without moving data*: each device keeps exactly the elements
of its ordinary block of a ``NamedSharding(mesh, P(rows, cols))`` and we choose the
**elimination order** of the blocks instead. Block ``s`` of ``a`` (rows ``s*nb ..``)
is eliminated at step ``e = order^-1[s]``, and ``order`` interleaves the blocks so that
consecutive steps visit every mesh row and every mesh column in turn (on a square
mesh this is exactly ScaLAPACK's block-cyclic dealing). The factorization is then
that of ``a[σ][:, σ]`` with ``σ`` the element-wise ``order``, a *symmetric*
permutation: determinants, solves and Cholesky's positive definiteness are unchanged.

Cost of going between the layouts (both directions): no communication at all and one
local copy of each device's block (its blocks are put in elimination order, so that
the active part of a shrinking factorization is a suffix of the local rows and
columns). ``order="natural"`` keeps ``σ`` the identity: factors come out exactly as
LAPACK's, at the price of balance (devices owning early blocks idle later; up to 3x
the flops of the busiest device).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, TypeAlias, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from shardkit._programs import after, cached, layout_jit, shard_jit
from shardkit._typing import AnyMesh
from shardkit.layout.internal import (
    Operand,
    SpecLike,
    indivisible_error,
    is_traced,
    mesh_summary,
    operand,
    spec_summary,
    to_pspec,
)
from shardkit.linalg._inputs import ArrayInput

__all__ = [
    "DEFAULT_BLOCK",
    "DEFAULT_STAGES",
    "ORDER_NAMES",
    "BlockCyclic",
    "Order",
    "Plan",
    "Spmd",
    "after",
    "check_nb",
    "from_block_cyclic",
    "matrix_layout",
    "matrix_operand",
    "to_block_cyclic",
]

Order: TypeAlias = Literal["cyclic", "natural"]
ORDER_NAMES: tuple[str, ...] = get_args(Order)
"""The legal values of ``order=``."""

DEFAULT_BLOCK = 128
"""Default block size ``nb`` (rounded down to a divisor of the local block sizes)."""
DEFAULT_STAGES = 8
"""Default ``stages=`` of LU and Cholesky: static sub-loops over which the panel steps shrink."""


class PlanTables(NamedTuple):
    """A plan's index tables (NumPy): who owns each elimination block and where it sits.

    Attributes:
      own_r, slot_r: device row and local block slot of step ``e``'s rows.
      perm_r: ``perm_r[r]``, the natural local blocks of device row ``r`` in slot order.
      elim_r: ``elim_r[r, slot]``, the step of that slot.
      own_c, slot_c, perm_c, elim_c: likewise for columns.
      sigma: the element-wise natural index of each elimination index.
    """

    own_r: np.ndarray
    slot_r: np.ndarray
    perm_r: np.ndarray
    elim_r: np.ndarray
    own_c: np.ndarray
    slot_c: np.ndarray
    perm_c: np.ndarray
    elim_c: np.ndarray
    sigma: np.ndarray


@dataclasses.dataclass(frozen=True)
class Plan:
    """Static description of one square ``n x n`` problem on a mesh (hashable).

    Attributes:
      n: matrix order.
      nb: block (panel) size; divides the local row and column counts.
      row_axes: mesh axes splitting the rows (may be empty).
      col_axes: mesh axes splitting the columns (may be empty).
      nr: number of device rows (product of ``row_axes`` sizes).
      nc: number of device columns.
      order: elimination order of the ``n / nb`` blocks (natural block indices).
    """

    n: int
    nb: int
    row_axes: tuple[str, ...]
    col_axes: tuple[str, ...]
    nr: int
    nc: int
    order: tuple[int, ...]

    @property
    def blocks(self) -> int:
        """Number of blocks ``n / nb`` along each side."""
        return self.n // self.nb

    @property
    def m(self) -> int:
        """Local rows per device."""
        return self.n // self.nr

    @property
    def k(self) -> int:
        """Local columns per device."""
        return self.n // self.nc

    @functools.cached_property
    def tables(self) -> PlanTables:
        """Index tables (NumPy): who owns each elimination block and where it sits locally."""
        b, nb = self.blocks, self.nb
        order = np.asarray(self.order)
        step = np.empty(b, np.int64)
        step[order] = np.arange(b)
        sides = []
        for parts in (self.nr, self.nc):
            per = b // parts
            natural = np.arange(b).reshape(parts, per)
            perm = np.argsort(step[natural], axis=1, kind="stable")  # local slot -> local block
            elim = np.take_along_axis(step[natural], perm, axis=1)
            own = np.empty(b, np.int64)
            slot = np.empty(b, np.int64)
            for dev in range(parts):
                own[elim[dev]] = dev
                slot[elim[dev]] = np.arange(per)
            sides.append((own, slot, perm, elim))
        (own_r, slot_r, perm_r, elim_r), (own_c, slot_c, perm_c, elim_c) = sides
        sigma = (order[:, None] * nb + np.arange(nb)[None, :]).reshape(-1)
        return PlanTables(own_r, slot_r, perm_r, elim_r, own_c, slot_c, perm_c, elim_c, sigma)

    def stage_bounds(self, stages: int) -> list[tuple[int, int, int, int]]:
        """``(first step, end step, row slot bound, col slot bound)`` of each stage.

        Within a stage every active local row (column) block has a slot at least the
        bound on every device, so the stage works on a static suffix of the local array.
        """
        b = self.blocks
        stages = max(1, min(stages, b // 4))  # short problems: fewer copies of the loop
        cuts = sorted({round(i * b / stages) for i in range(stages + 1)})
        t = self.tables
        out = []
        for s0, s1 in itertools.pairwise(cuts):
            lr = int((t.elim_r < s0).sum(axis=1).min())
            lc = int((t.elim_c < s0).sum(axis=1).min())
            out.append((s0, s1, lr, lc))
        return out


def _balanced_order(blocks: int, nr: int, nc: int) -> tuple[int, ...]:
    # Natural block s sits on device row s // (B/nr) and column s // (B/nc). Sorting by
    # (s mod L, s div L) with L = B / max(nr, nc) makes each run of max(nr, nc) steps
    # visit every device row and column once (when one count divides the other).
    per = blocks // max(nr, nc)
    s = np.arange(blocks)
    return tuple(int(v) for v in np.lexsort((s // per, s % per)))


# A plain value (block tables), no mesh or program: kept apart from the program cache.
@functools.lru_cache(maxsize=256)
def make_plan(
    n: int,
    row_axes: tuple[str, ...],
    col_axes: tuple[str, ...],
    nr: int,
    nc: int,
    nb: int,
    order: str,
) -> Plan:
    """The plan for an ``n x n`` matrix; ``nb`` is rounded down to divide the local blocks."""
    g = math.gcd(n // nr, n // nc)
    nb_eff = max(d for d in range(1, min(nb, g) + 1) if g % d == 0)
    blocks = n // nb_eff
    o = tuple(range(blocks)) if order == "natural" else _balanced_order(blocks, nr, nc)
    return Plan(n, nb_eff, row_axes, col_axes, nr, nc, o)


def _axes_size(m: AnyMesh, axes: tuple[str, ...]) -> int:
    return math.prod(m.shape[a] for a in axes)


def check_order(where: str, order: str) -> None:
    """Raise ``ValueError`` unless ``order`` is one of :data:`ORDER_NAMES`."""
    if order not in ORDER_NAMES:
        raise ValueError(f"{where}: order={order!r} is not one of {list(ORDER_NAMES)}")


def check_matrix(where: str, a: Any, *, square: bool = True) -> tuple[int, ...]:
    """``a``'s shape, once it is known to be a (square) float or complex matrix.

    Raises:
      TypeError: ``a`` is not a float or complex array.
      ValueError: ``a`` is not 2-D (square).
    """
    shape = tuple(a.shape)
    if len(shape) != 2 or (square and shape[0] != shape[1]):
        want = "a square matrix (n, n)" if square else "a matrix (m, n)"
        raise ValueError(f"{where}: a.shape={shape} is not {want}")
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        raise TypeError(
            f"{where}: a.dtype={np.dtype(a.dtype).name} is not supported; "
            "use float32, float64, complex64 or complex128"
        )
    return shape


def matrix_operand(
    where: str, a: Any, mesh: AnyMesh | None, spec: Any, *, square: bool = True
) -> Operand:
    """The one resolution of a public function's matrix argument ``a``, after
    :func:`check_matrix` (a square, or ``square=False`` any, float or complex matrix).

    Raises:
      TypeError: ``a`` is not a float or complex array.
      ValueError: ``a`` is not 2-D (square).
    """
    check_matrix(where, a, square=square)
    return operand(where, "a", a, mesh=mesh, spec=spec)


def matrix_layout(
    op: Operand, *, pad: bool = False
) -> tuple[AnyMesh, PartitionSpec, tuple[str, ...], tuple[str, ...]]:
    """The mesh, spec and row/column axes of the matrix operand ``op``.

    Read from the record its public function resolved once (:func:`operand`): eagerly
    from ``a.sharding``, under ``jit`` from the abstract sharding of an Explicit mesh,
    or the caller's ``mesh=``/``spec=``. A replicated spec is replaced by rows over the
    first mesh axis and columns over the second (a free local slice of the replicated
    data). ``pad=True``: the caller pads (:mod:`shardkit.linalg._pad`), so dimensions
    the mesh does not divide are accepted.

    Raises:
      ValueError: the layout is unknown, or (unless ``pad``) a dimension does not divide.
    """
    shape, m, norm, where = op.shape, op.mesh, op.spec, op.where
    if m is None or norm is None:
        raise ValueError(
            f"{where}: cannot tell the layout of {op.name} (shape={shape}): it is not a "
            "sharded jax.Array on a mesh (or is traced on an Auto mesh). Shard it with "
            f"shardkit.shard({op.name}, mesh=mesh, spec='x,y'), or pass mesh=... (and spec=...)."
        )
    p = to_pspec(norm)
    rows, cols = norm
    if not rows and not cols:
        names = m.axis_names
        rows, cols = (names[0],), tuple(names[1:2])
        p = PartitionSpec(rows[0], cols[0] if cols else None)
    for d, axes in ((0, rows), (1, cols)):
        for ax in axes:
            if ax not in m.axis_names:
                raise ValueError(
                    f"{where}: spec={spec_summary(p)} names axis {ax!r}, not an axis of "
                    f"{mesh_summary(m)}"
                )
        parts = _axes_size(m, axes)
        if shape[d] % parts and not pad:
            raise indivisible_error(where, shape, p, m, d, axes, parts)
    return m, PartitionSpec(rows or None, cols or None), tuple(rows), tuple(cols)


def exact_matmuls(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its matrix products traced at full precision whatever JAX's default.

    LAPACK's accuracy needs float32 products in float32: on GPUs JAX's default
    multiplies float32 in TF32 (10 mantissa bits), which measured on one H100 took
    ``solve``'s backward error at n=4096 from 2.2e-07 to 3.8e-04 and Cholesky's from
    1.5e-07 to 3.3e-05, for no speed. Every factorization's per-shard program is traced
    through this (:class:`Spmd`); on CPUs the products are float32 either way.
    """

    @functools.wraps(fn)
    def run(*args: Any) -> Any:
        with jax.default_matmul_precision("highest"):
            return fn(*args)

    return run


@dataclasses.dataclass(frozen=True, eq=False)
class Spmd:
    """A per-shard program and its layout; calling it runs ``jit(shard_map(body, ...))``.

    ``body`` alone is what a ``custom_partitioning`` rule composes when the layout is
    known only at partition time (:mod:`shardkit.linalg._auto`).
    """

    body: Callable[..., Any]
    mesh: AnyMesh | None
    in_specs: Any
    out_specs: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", exact_matmuls(self.body))

    def _build(self, donate: bool) -> Any:
        return shard_jit(
            self.body, self.mesh, self.in_specs, self.out_specs, donate=donate, check_vma=False
        )

    @functools.cached_property
    def program(self) -> Any:
        """The jitted ``shard_map`` (built on first use)."""
        return self._build(False)

    @functools.cached_property
    def donating(self) -> Any:
        """:attr:`program` with its first argument donated: an output of the same shape,
        dtype and layout (the factors of ``a``) is written into its buffer."""
        return self._build(True)

    def __call__(self, *args: Any) -> Any:
        return self.program(*args)


def check_nb(where: str, nb: Any) -> None:
    """Raise ``ValueError`` unless ``nb`` is a positive int (a block size)."""
    if isinstance(nb, bool) or not isinstance(nb, int) or nb < 1:
        raise ValueError(f"{where}: nb={nb!r} must be a positive int (block size)")


def plan_for(op: Operand, nb: int, order: str) -> tuple[AnyMesh, PartitionSpec, Plan]:
    """:func:`matrix_layout` then :func:`make_plan` (validating ``nb`` and ``order``)."""
    check_order(op.where, order)
    check_nb(op.where, nb)
    m, p, rows, cols = matrix_layout(op)
    n = op.shape[0]
    plan = make_plan(n, rows, cols, _axes_size(m, rows), _axes_size(m, cols), nb, order)
    return m, p, plan


# ---- inside shard_map ---------------------------------------------------------------


def axis_index(axes: tuple[str, ...]) -> jax.Array:
    """This device's linear index over ``axes`` (0 when there are none)."""
    return jax.lax.axis_index(axes).astype(jnp.int32) if axes else jnp.int32(0)


def psum(x: Any, axes: tuple[str, ...]) -> Any:
    """``psum`` over ``axes``, the identity over none."""
    return jax.lax.psum(x, axes) if axes else x


def on_owner(
    owner: jax.Array,
    axes: tuple[str, ...],
    work: Callable[..., Any],
    idle: Callable[..., Any],
    *ops: Any,
) -> Any:
    """``work(*ops)`` on the devices where ``owner`` holds, ``idle(*ops)`` on the others.

    A panel's owners do its work and write it; the rest of the mesh would otherwise
    redo it, or copy and rewrite their own unchanged slice, only to contribute zeros
    to the broadcast after it (on 2x4 at n=4096 such passes cost a quarter of
    Cholesky's CPU time). The ``lax.cond`` must hold no collective, since devices take
    different branches; given the carried block as an operand, XLA updates it in place
    in either branch. With no ``axes`` to split over, every device owns: ``work`` runs,
    no cond.
    """
    return jax.lax.cond(owner, work, idle, *ops) if axes else work(*ops)


class LocalTables(NamedTuple):
    """One device's tables inside ``shard_map`` (int32): :class:`PlanTables` plus its place.

    Attributes:
      r, c: the device's mesh row and column.
      perm_r, perm_c: its natural local blocks in slot order.
      g_r, g_c: the elimination index of each local row (column).
      own_r, slot_r, own_c, slot_c: as in :class:`PlanTables`.
    """

    r: jax.Array
    c: jax.Array
    perm_r: jax.Array
    perm_c: jax.Array
    g_r: jax.Array
    g_c: jax.Array
    own_r: jax.Array
    slot_r: jax.Array
    own_c: jax.Array
    slot_c: jax.Array


def local_tables(plan: Plan) -> LocalTables:
    """This device's row/column tables (inside ``shard_map``): slot orders and step indices."""
    t = plan.tables
    r, c = axis_index(plan.row_axes), axis_index(plan.col_axes)
    nb = plan.nb
    elim_r = jnp.asarray(t.elim_r, jnp.int32)[r]  # step of each local slot
    perm_r = jnp.asarray(t.perm_r, jnp.int32)[r]
    g_r = (elim_r[:, None] * nb + jnp.arange(nb, dtype=jnp.int32)[None, :]).reshape(-1)
    elim_c = jnp.asarray(t.elim_c, jnp.int32)[c]
    perm_c = jnp.asarray(t.perm_c, jnp.int32)[c]
    g_c = (elim_c[:, None] * nb + jnp.arange(nb, dtype=jnp.int32)[None, :]).reshape(-1)
    own_r, slot_r, own_c, slot_c = (
        jnp.asarray(x, jnp.int32) for x in (t.own_r, t.slot_r, t.own_c, t.slot_c)
    )
    return LocalTables(r, c, perm_r, perm_c, g_r, g_c, own_r, slot_r, own_c, slot_c)


def to_local_order(x: jax.Array, plan: Plan, tab: LocalTables) -> jax.Array:
    """Reorder a device's ``(m, k)`` block so its blocks are in elimination order.

    In place (block swaps, see :func:`_swaps`): a donated block is reordered in its own
    buffer, with no share-sized copy.
    """
    return _reorder(x, plan, tab, inverse=False)


def from_local_order(x: jax.Array, plan: Plan, tab: LocalTables) -> jax.Array:
    """Inverse of :func:`to_local_order` (in place too)."""
    return _reorder(x, plan, tab, inverse=True)


def _swaps(perm: np.ndarray) -> np.ndarray:
    """``j[d, i]``: swapping block ``i`` with block ``j[d, i]`` for ``i = 0, 1, ...`` in turn
    puts device ``d``'s blocks in the order ``perm[d]`` (``x[perm[d]]``)."""
    out = np.empty_like(perm)
    for d, p in enumerate(perm):
        cur, where = np.arange(len(p)), np.arange(len(p))
        for i, blk in enumerate(p):
            j = where[blk]
            out[d, i] = j
            cur[i], cur[j] = cur[j], cur[i]
            where[cur[i]], where[cur[j]] = i, j
    return out


def _reorder(x: jax.Array, plan: Plan, tab: LocalTables, *, inverse: bool) -> jax.Array:
    # A loop of nb-block swaps per axis updates the loop carry in place, so that a donated
    # block needs no second share: a gather (x[rows][:, cols]) writes a new buffer. Each
    # swap reads both blocks into one small buffer (2 nb rows or columns) behind an
    # optimization barrier, then writes them back with two dynamic-update-slices: without
    # the barrier XLA fuses the second read into the second write and copies all of the
    # carry to keep it; with a gather/scatter pair instead, the scatter's per-element loop
    # cost 0.38 CPU-s at n=4096 on 8 devices (32 column swaps each), against 0.03 so.
    # An axis whose order is the identity on every device is left alone.
    nb, t = plan.nb, plan.tables
    for axis, perm, dev in ((0, t.perm_r, tab.r), (1, t.perm_c, tab.c)):
        if (perm == np.arange(perm.shape[1])).all():
            continue
        table = jnp.asarray(_swaps(np.argsort(perm, axis=1) if inverse else perm), jnp.int32)
        to = table[dev]

        def swap(i: jax.Array, y: jax.Array, to: jax.Array = to, axis: int = axis) -> jax.Array:
            size = list(y.shape)
            size[axis] = nb

            def at(blk: jax.Array) -> tuple[Any, ...]:
                return (blk * nb, 0) if axis == 0 else (0, blk * nb)

            pair = jnp.concatenate(
                [dslice(y, at(i), tuple(size)), dslice(y, at(to[i]), tuple(size))], axis=axis
            )
            pair = jax.lax.optimization_barrier(pair)
            mine, theirs = jnp.split(pair, 2, axis=axis)
            return dupdate(dupdate(y, theirs, at(i)), mine, at(to[i]))

        x = jax.lax.fori_loop(jnp.int32(0), jnp.int32(perm.shape[1]), swap, x)
    return x


# ---- public helpers -----------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BlockCyclic:
    """A square matrix in shardkit's block-cyclic layout (see the module docstring).

    Attributes:
      data: global ``(n, n)`` array with the same sharding as the source; each device's
        block holds the same elements, its ``nb``-blocks reordered to elimination order.
      plan: the static layout (block size, axes, elimination order).
      mesh: the mesh.
      spec: the ``PartitionSpec`` of ``data`` (rows, columns).
    """

    data: jax.Array
    plan: Plan = dataclasses.field(metadata={"static": True})
    mesh: AnyMesh = dataclasses.field(metadata={"static": True})
    spec: PartitionSpec = dataclasses.field(metadata={"static": True})


@cached
def _relayout_program(m: AnyMesh, p: PartitionSpec, plan: Plan, forward: bool) -> Any:
    # Compiled once per layout: an eager shard_map would dispatch every gather and
    # argsort of the reordering op by op on each device (seconds for a 16 x 16 matrix).
    def body(blk: jax.Array) -> jax.Array:
        tab = local_tables(plan)
        return to_local_order(blk, plan, tab) if forward else from_local_order(blk, plan, tab)

    return shard_jit(body, m, p, p, check_vma=False)


def _relayout(x: jax.Array, m: AnyMesh, p: PartitionSpec, plan: Plan, forward: bool) -> jax.Array:
    return _relayout_program(m, p, plan, forward)(x)


def to_block_cyclic(
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    order: Order = "cyclic",
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
) -> BlockCyclic:
    """Put a sharded square matrix in the block-cyclic layout of the factorizations.

    Cost: no communication; one local copy of each device's block (its ``nb``-blocks
    reordered). ``nb`` is rounded down to a divisor of the local row and column counts.

    Args:
      a: ``(n, n)`` float matrix sharded ``P(rows, cols)`` (either may be ``None``).
      nb: block size.
      order: ``"cyclic"`` (balanced elimination order) or ``"natural"``.
      mesh: the mesh, when ``a`` does not carry it (traced on an Auto mesh).
      spec: ``a``'s spec, likewise.

    Returns:
      A :class:`BlockCyclic`.

    Raises:
      ValueError: bad ``order``/``nb``, unknown layout, or a dimension that does not divide.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.arange(256.0).reshape(16, 16), mesh=m, spec="x,y")
      >>> bc = shardkit.linalg.to_block_cyclic(a, nb=2)
      >>> bc.plan.nb, bc.plan.order
      (2, (0, 2, 4, 6, 1, 3, 5, 7))
      >>> bool((np.asarray(shardkit.linalg.from_block_cyclic(bc)) == np.asarray(a)).all())
      True
    """
    where = "to_block_cyclic"
    a = a if isinstance(a, jax.Array) else jnp.asarray(a)
    m, p, plan = plan_for(matrix_operand(where, a, mesh, spec), nb, order)
    return BlockCyclic(_relayout(a, m, p, plan, True), plan, m, p)


def from_block_cyclic(bc: BlockCyclic, /) -> jax.Array:
    """The ordinary ``NamedSharding`` matrix of ``bc`` (no communication, one local copy).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(np.eye(16), mesh=m, spec="x,None")
      >>> bool((shardkit.linalg.from_block_cyclic(shardkit.linalg.to_block_cyclic(a)) == a).all())
      True
    """
    return _relayout(bc.data, bc.mesh, bc.spec, bc.plan, False)


def dslice(x: jax.Array, starts: tuple[Any, ...], sizes: tuple[int, ...]) -> jax.Array:
    """``lax.dynamic_slice`` with int32 starts (x64 mode mixes Python ints in as int64)."""
    return jax.lax.dynamic_slice(x, tuple(jnp.asarray(s, jnp.int32) for s in starts), sizes)


def trsm(
    t: jax.Array, b: jax.Array, *, lower: bool, unit_diagonal: bool = False, left: bool = True
) -> jax.Array:
    """Triangular solve ``t x = b`` (``left``) or ``x t = b``, without column-major copies.

    LAPACK's trsm takes column-major operands. When they are slices of a larger array
    (a device's whole block, carried through a loop), XLA's layout assignment can make
    that array column-major instead, and every row-block slice of it then reads with a
    stride (measured: 4 ms per 128 x 4096 slice, 1.4 s of a 4096 solve's 2.2). Solving
    the transposed system on ``t.T`` and ``b.T`` (free views of row-major arrays) asks
    for the layouts the arrays already have.

    Example:
      >>> t = jnp.array([[2.0, 0.0], [1.0, 1.0]])
      >>> trsm(t, jnp.array([[2.0], [3.0]]), lower=True).tolist()
      [[1.0], [2.0]]
    """
    # t x = b  <=>  x^T t^T = b^T;  x t = b  <=>  t^T x^T = b^T.
    return jax.lax.linalg.triangular_solve(
        t.T, b.T, left_side=not left, lower=not lower, unit_diagonal=unit_diagonal
    ).T


def dupdate(x: jax.Array, update: jax.Array, starts: tuple[Any, ...]) -> jax.Array:
    """``lax.dynamic_update_slice`` with int32 starts."""
    return jax.lax.dynamic_update_slice(x, update, tuple(jnp.asarray(s, jnp.int32) for s in starts))


def place(x: Any, mesh: AnyMesh, spec: PartitionSpec) -> jax.Array:
    """``x`` laid out as ``spec`` on ``mesh`` before a ``shard_map`` that expects it.

    Explicit meshes need the exact layout (``jax.sharding.reshard``); on Auto meshes a
    sharding constraint does it (eagerly in one cached program per layout, see
    :func:`shardkit._programs.layout_jit`); host data is sent there. Free when ``x``
    already has that layout; a replicated-to-split change is a local slice.
    """
    target = NamedSharding(mesh, spec)
    # Eagerly an array already laid out so is returned as is: resharding would copy it
    # (one more share per device, and a donated argument would not be a's).
    held = getattr(x, "sharding", None) if not is_traced(x) else None
    if (
        isinstance(held, NamedSharding)
        and held.mesh == target.mesh
        and held.is_equivalent_to(target, x.ndim)
    ):
        return x
    if not is_traced(x) and (held is None or held.device_set != target.device_set):
        # Host data (sent, nothing compiled: not jnp.asarray, which compiles a copy per
        # shape), or an array on other devices.
        return jax.device_put(x if held is not None else np.asarray(x), target)
    # One program per layout in the program cache: JAX's own eager reshard or
    # device_put compiles one per layout too, and keeps it beyond shardkit's bound.
    return layout_jit(_placed, x, target=target)


def _placed(x: Any, *, target: NamedSharding) -> jax.Array:
    if all(t == AxisType.Explicit for t in target.mesh.axis_types):
        return jax.sharding.reshard(x, target)
    return jax.lax.with_sharding_constraint(x, target)
