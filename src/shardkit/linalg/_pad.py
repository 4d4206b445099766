"""Padding for matrix orders the mesh, or the block size, does not divide.

The square factorizations and solves work on ``a_pad = Π diag(a, d I) Π^T``, a
*symmetric* permutation ``Π`` of ``a`` bordered by a diagonal block: solutions,
determinants (up to the factor ``d`` per padded row, which :func:`~shardkit.linalg.det`
leaves out), triangularity, Hermitian symmetry and positive definiteness all carry
over, and the padded rows and columns never mix with ``a``'s in the elimination
(their entries in ``a``'s columns are exact zeros). Right-hand sides get zero rows,
so the solution's padded rows are zero and are dropped.

``Π`` puts the padding where it costs no communication. The ``n`` indices are cut
into ``L = lcm(R, C)`` *cells* of ``ceil(n / L)`` (``R``, ``C``: the device rows and
columns); each cell is padded at its end to ``size / L``. When the mesh divides
``n``, every device's block of ``a`` is a whole number of cells, so each device pads
its own block in place (no communication) and slices its own rows of the result.
When it does not, ``a`` cannot be placed as it is: host (or replicated) input is
padded before it is placed, and results whose order the mesh does not divide come
back replicated (one all-reduce of the result).

Padding is used only when the mesh does not divide ``n``, or when ``n / L`` has no
divisor above ``min(nb, n / L) / 2`` and at most ``nb`` (the block size would have to
shrink, down to 1 for a prime ``n / L``). The Krylov solvers (no blocks) pad to the
next multiple of ``L``; the blocked factorizations to ``L * blocks * nb'`` with
``nb' <= nb`` the block that pads least, so ``size - n < L * blocks`` (``n = 999`` on
2x4 with ``nb = 128``: 1000, blocks of 125; ``n = 13`` on 8 devices: 16). Cost: one
more share of ``size^2 / P`` elements per device (the padded copy of ``a``), of
which ``(size^2 - n^2) * itemsize`` bytes in all are padding: ``shardkit.comms``
lists each padded copy with those extra bytes (``CommReport.padding``), read from
the marks :func:`~shardkit.layout.internal.padding_scope` leaves in the program.

Tall matrices (QR, least squares) are bordered at the end instead, ``[[a, 0], [0, d I],
[0, 0]]`` (:func:`pad_tall`; only host or replicated input needs it), and batches of
systems get identity systems (:func:`pad_rows` on the batch axis).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.core as jax_core
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from shardkit._programs import cached, cached_program, layout_jit, shard_jit
from shardkit.layout.internal import Operand, padding_scope
from shardkit.linalg._blockcyclic import (
    AnyMesh,
    Plan,
    axis_index,
    check_nb,
    check_order,
    make_plan,
    matrix_layout,
    place,
    psum,
)

__all__ = [
    "Padding",
    "choose",
    "cut",
    "is_numpy",
    "pad_matrix",
    "pad_rows",
    "pad_tall",
    "scale",
    "square_plan",
    "tall_sizes",
    "unpad_matrix",
    "unpad_rows",
    "user_status",
]


@dataclasses.dataclass(frozen=True)
class Padding:
    """Where the ``n`` user indices sit among the ``size`` padded ones (hashable).

    Attributes:
      n: the user's order.
      size: the padded order (``n`` when nothing is padded).
      cells: ``L``, the number of cells.
    """

    n: int
    size: int
    cells: int

    @property
    def real(self) -> int:
        """User indices per cell (the last cells may hold fewer)."""
        return -(-self.n // self.cells)

    @property
    def cell(self) -> int:
        """Padded indices per cell."""
        return self.size // self.cells

    @property
    def aligned(self) -> bool:
        """Whether every cell holds exactly :attr:`real` user indices (the mesh divides ``n``)."""
        return self.real * self.cells == self.n

    def positions(self) -> np.ndarray:
        """The padded position of each user index, increasing."""
        i = np.arange(self.n)
        return (i // self.real) * self.cell + i % self.real

    def index(self) -> np.ndarray:
        """The user index at each padded position, ``-1`` for a padded one."""
        out = np.full(self.size, -1, np.int64)
        out[self.positions()] = np.arange(self.n)
        return out


def _largest_divisor(g: int, at_most: int) -> int:
    return max(d for d in range(1, min(at_most, g) + 1) if g % d == 0)


def choose(n: int, nr: int, nc: int, nb: int | None) -> tuple[Padding, int]:
    """The padding of order ``n`` on ``nr x nc`` devices, and the block size to use.

    ``nb=None``: no block structure (only the mesh must divide). Otherwise the result
    has ``size / L`` a multiple of the returned block size, which is at most ``nb``.
    """
    cells = math.lcm(nr, nc)
    if n % cells == 0:
        g = n // cells
        if nb is None or 2 * _largest_divisor(g, nb) > min(nb, g):
            return Padding(n, n, cells), nb or 0
    if nb is None:
        return Padding(n, cells * -(-n // cells), cells), 0
    # Fewest blocks of at most nb, or up to twice as many (smaller blocks) when that
    # pads less: size = L * blocks * ceil(n / (L * blocks)).
    first = -(-n // (cells * nb))
    blocks = min(range(first, 2 * first + 1), key=lambda b: (b * -(-n // (cells * b)), b))
    nbp = -(-n // (cells * blocks))
    return Padding(n, cells * blocks * nbp, cells), nbp


def square_plan(op: Operand, nb: int, order: str) -> tuple[AnyMesh, PartitionSpec, Plan, Padding]:
    """The layout of the square matrix ``op``, its padding and the plan of the padded matrix.

    Raises:
      ValueError: a bad ``nb`` or ``order``, or an unknown layout.
    """
    check_order(op.where, order)
    check_nb(op.where, nb)
    m, p, rows, cols = matrix_layout(op, pad=True)
    nr = math.prod(m.shape[x] for x in rows)
    nc = math.prod(m.shape[x] for x in cols)
    padding, nbp = choose(op.shape[0], nr, nc, nb)
    return m, p, make_plan(padding.size, rows, cols, nr, nc, nbp, order), padding


def is_numpy(x: Any) -> bool:
    """Whether ``x`` is NumPy data (neither a ``jax.Array`` nor a tracer), which the
    padding builds with NumPy. Not where it lives: a one-device ``jax.Array`` is on no
    mesh (:class:`~shardkit.layout.internal.Operand`'s ``"host"``) but not NumPy."""
    return not isinstance(x, jax.Array | jax_core.Tracer)


def on_replicas(fn: Any, key: tuple[Any, ...], mesh: AnyMesh, *xs: Any) -> Any:
    """``fn(*xs)`` computed by every device on its replica (``xs`` placed replicated first).

    Padding device arrays whose size the mesh does not divide: each device builds the
    same padded copy locally (no communication once ``xs`` are replicated), and arrays
    already on an Explicit mesh do not meet unsharded temporaries.

    ``key`` must determine ``fn`` (what its closure captures): the jitted program is
    kept under ``(key, mesh)``, so a second call with the same padding compiles nothing
    (an eager ``shard_map`` of a fresh closure compiled each of its operations anew).
    """
    rep = PartitionSpec()
    xs = tuple(place(x, mesh, rep) for x in xs)
    specs = (rep,) * len(xs)
    prog = cached_program(
        ("on_replicas", key, mesh, len(xs)),
        lambda: shard_jit(fn, mesh, specs, rep, check_vma=False),
    )
    return prog(*xs)


def scale(a: Any) -> Any:
    """``max |a|`` (1 for a zero matrix): the padded diagonal that leaves LU's tolerance alone."""
    if is_numpy(a):
        s = float(np.max(np.abs(a), initial=0.0))
        return s if s > 0 else 1.0
    s = jnp.max(jnp.abs(a))
    return jnp.where(s > 0, s, 1).astype(s.dtype)


@cached
def _pad_program(padding: Padding, plan: Plan, mesh: AnyMesh, spec: PartitionSpec) -> Any:
    c, cp = padding.real, padding.cell
    rr, cc = padding.cells // plan.nr, padding.cells // plan.nc

    def body(blk: jax.Array, d: jax.Array) -> jax.Array:
        x = blk.reshape(rr, c, cc, c)
        x = jnp.pad(x, ((0, 0), (0, cp - c), (0, 0), (0, cp - c))).reshape(rr * cp, cc * cp)
        gr = axis_index(plan.row_axes) * rr * cp + jnp.arange(rr * cp)
        gc = axis_index(plan.col_axes) * cc * cp + jnp.arange(cc * cp)
        eye = (gr[:, None] == gc[None, :]) & (gr % cp >= c)[:, None]
        return jnp.where(eye, d.astype(x.dtype), x)

    return shard_jit(body, mesh, (spec, PartitionSpec()), spec, check_vma=False)


def pad_matrix(
    a: Any, padding: Padding, plan: Plan, mesh: AnyMesh, spec: PartitionSpec, diag: Any = 1.0
) -> jax.Array:
    """``a_pad`` (``size x size``, placed as ``spec``) with ``diag`` on the padded diagonal.

    Cost: none when nothing is padded. A placed ``a`` the mesh divides is padded by
    each device in its own block (no communication; the padded share is a new array
    of ``size^2 / P`` elements). Otherwise ``a`` is padded whole before placing.
    """
    if padding.size == padding.n:
        return place(a, mesh, spec)
    padded = (padding.size, padding.size)
    if padding.aligned and not is_numpy(a):
        d = place(jnp.asarray(diag, a.dtype), mesh, PartitionSpec())
        with padding_scope("matrix", tuple(a.shape), padded, a.dtype):
            return _pad_program(padding, plan, mesh, spec)(place(a, mesh, spec), d)
    pos = padding.positions()
    free = np.flatnonzero(padding.index() < 0)
    if is_numpy(a) and is_numpy(diag):
        out = np.zeros((padding.size, padding.size), np.asarray(a).dtype)
        out[np.ix_(pos, pos)] = a
        out[free, free] = diag
        return place(out, mesh, spec)  # sent from the host: nothing compiled

    def build(x: jax.Array, d: jax.Array) -> jax.Array:
        z = jnp.zeros((padding.size, padding.size), x.dtype)
        return z.at[pos[:, None], pos[None, :]].set(x).at[free, free].set(d.astype(x.dtype))

    with padding_scope("matrix", tuple(a.shape), padded, a.dtype):
        return place(on_replicas(build, ("matrix", padding), mesh, a, diag), mesh, spec)


def pad_rows(b: Any, padding: Padding, mesh: AnyMesh) -> Any:
    """``b`` (``n`` or ``n x k``) with zero rows at the padded positions (replicated).

    Cost: a local copy of ``size x k`` elements (an all-gather first if ``b`` is split).
    """
    if padding.size == padding.n:
        return b
    pos = padding.positions()
    if is_numpy(b):
        b = np.asarray(b)
        out = np.zeros((padding.size, *b.shape[1:]), b.dtype)
        out[pos] = b
        return out

    def build(x: jax.Array) -> jax.Array:
        return jnp.zeros((padding.size, *x.shape[1:]), x.dtype).at[pos].set(x)

    with padding_scope("rhs", tuple(b.shape), (padding.size, *b.shape[1:]), b.dtype):
        return on_replicas(build, ("rows", padding), mesh, b)


@cached
def _unpad_rows_program(
    padding: Padding, mesh: AnyMesh, rows: tuple[str, ...], nr: int, k: int
) -> Any:
    c, cp, per = padding.real, padding.cell, padding.size // nr
    spec = PartitionSpec(rows or None, None)
    if padding.aligned:

        def body(x: jax.Array) -> jax.Array:
            return x.reshape(padding.cells // nr, cp, k)[:, :c].reshape(-1, k)

        out = spec
    else:
        index = padding.index()

        def body(x: jax.Array) -> jax.Array:
            idx = jnp.asarray(index)[axis_index(rows) * per + jnp.arange(per)]
            dest = jnp.where(idx >= 0, idx, padding.n)
            buf = jnp.zeros((padding.n, k), x.dtype).at[dest].set(x, mode="drop")
            return psum(buf, rows)

        out = PartitionSpec()
    return shard_jit(body, mesh, spec, out, check_vma=False)


def unpad_rows(x: jax.Array, padding: Padding, mesh: AnyMesh, rows: tuple[str, ...]) -> jax.Array:
    """The user's rows of ``x`` (``size x k``, rows split over ``rows``).

    Cost: a local slice when the mesh divides ``n`` (rows stay split); otherwise one
    ``n x k`` all-reduce over ``rows`` and the result is replicated.
    """
    if padding.size == padding.n:
        return x
    nr = math.prod(mesh.shape[a] for a in rows)
    return _unpad_rows_program(padding, mesh, rows, nr, int(x.shape[1]))(x)


@cached
def _unpad_matrix_program(padding: Padding, plan: Plan, mesh: AnyMesh, spec: PartitionSpec) -> Any:
    c, cp = padding.real, padding.cell
    rr, cc = padding.cells // plan.nr, padding.cells // plan.nc
    if padding.aligned:

        def body(x: jax.Array) -> jax.Array:
            return x.reshape(rr, cp, cc, cp)[:, :c, :, :c].reshape(rr * c, cc * c)

        out = spec
    else:
        index = padding.index()

        def body(x: jax.Array) -> jax.Array:
            t = jnp.asarray(index)
            ir = t[axis_index(plan.row_axes) * rr * cp + jnp.arange(rr * cp)]
            ic = t[axis_index(plan.col_axes) * cc * cp + jnp.arange(cc * cp)]
            n = padding.n
            dr, dc = jnp.where(ir >= 0, ir, n), jnp.where(ic >= 0, ic, n)
            buf = jnp.zeros((n, n), x.dtype).at[dr[:, None], dc[None, :]].set(x, mode="drop")
            return psum(buf, plan.row_axes + plan.col_axes)

        out = PartitionSpec()
    return shard_jit(body, mesh, spec, out, check_vma=False)


def unpad_matrix(
    x: jax.Array, padding: Padding, plan: Plan, mesh: AnyMesh, spec: PartitionSpec
) -> jax.Array:
    """The user's ``n x n`` part of ``x`` (``size x size``, placed as ``spec``).

    Cost: a local slice when the mesh divides ``n`` (sharded as ``spec``); otherwise
    one ``n x n`` all-reduce over the mesh and the result is replicated.
    """
    if padding.size == padding.n:
        return x
    return _unpad_matrix_program(padding, plan, mesh, spec)(x)


def user_status(status: jax.Array, padding: Padding) -> jax.Array:
    """A status (``j + 1`` for padded column ``j``) renumbered in the user's columns.

    A padded column never fails on its own; should one be named, it is reported as
    the last user column rather than hidden.
    """
    if padding.size == padding.n:
        return status
    idx = padding.index()
    return renumber(status, tuple(int(i) for i in np.where(idx >= 0, idx, padding.n - 1)))


def natural_status(status: jax.Array, plan: Plan) -> jax.Array:
    """A factorization's status (``j + 1`` for elimination column ``j``) in ``a``'s columns.

    The block-cyclic order eliminates the columns in ``plan.tables.sigma``'s order; users
    count them in natural order.
    """
    return renumber(status, tuple(int(i) for i in plan.tables.sigma))


def renumber(status: jax.Array, table: tuple[int, ...]) -> jax.Array:
    """``table[status - 1] + 1`` where ``status > 0``, else 0: one compiled program per
    table and layout of ``status``, in the program cache (a process meeting many sizes
    and meshes must not keep them all)."""
    return layout_jit(_renumbered, status, table=table)


def _renumbered(status: jax.Array, *, table: tuple[int, ...]) -> jax.Array:
    t = jnp.asarray(np.asarray(table, np.int32))
    return jnp.where(status > 0, t[jnp.maximum(status - 1, 0)] + 1, 0).astype(jnp.int32)


# ---- tall matrices (QR, least squares) ----------------------------------------------


def tall_sizes(big: int, n: int, nr: int, nc: int) -> tuple[int, int]:
    """``(M_pad, n_pad)`` for an ``M x n`` matrix on ``nr x nc`` devices.

    Columns are padded to a multiple of ``nc``; each padded column gets a row of its own
    (``M_pad >= M + n_pad - n``), rounded up to a multiple of ``nr``.
    """
    if big % nr == 0 and n % nc == 0:
        return big, n
    n_pad = nc * -(-n // nc)
    return nr * -(-(big + n_pad - n) // nr), n_pad


def pad_tall(a: Any, big_pad: int, n_pad: int, diag: Any, mesh: AnyMesh) -> Any:
    """``[[a, 0], [0, diag I], [0, 0]]`` (``M_pad x n_pad``): QR of it is ``diag(q, ±I)``-shaped.

    Host or replicated ``a`` only (an ``a`` the mesh does not divide cannot be placed
    split): the padding is a local copy, ``(M_pad n_pad - M n)`` more elements.
    """
    big, n = a.shape
    e = n_pad - n
    if is_numpy(a) and is_numpy(diag):
        out = np.zeros((big_pad, n_pad), np.asarray(a).dtype)
        out[:big, :n] = a
        out[big + np.arange(e), n + np.arange(e)] = diag
        return out

    def build(x: jax.Array, d: jax.Array) -> jax.Array:
        z = jnp.zeros((big_pad, n_pad), x.dtype).at[:big, :n].set(x)
        return z.at[big + np.arange(e), n + np.arange(e)].set(d.astype(x.dtype))

    with padding_scope("matrix", (big, n), (big_pad, n_pad), a.dtype):
        return on_replicas(build, ("tall", big, n, big_pad, n_pad), mesh, a, diag)


@cached
def _cut_program(mesh: AnyMesh, spec: PartitionSpec, local: tuple[int, int], shape: Any) -> Any:
    entries = (*tuple(spec), None, None)[:2]
    axes = [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries]

    def body(x: jax.Array) -> jax.Array:
        r0 = axis_index(axes[0]) * local[0]
        c0 = axis_index(axes[1]) * local[1]
        ri = r0 + jnp.arange(local[0])
        ci = c0 + jnp.arange(local[1])
        dr = jnp.where(ri < shape[0], ri, shape[0])
        dc = jnp.where(ci < shape[1], ci, shape[1])
        buf = jnp.zeros(shape, x.dtype).at[dr[:, None], dc[None, :]].set(x, mode="drop")
        return psum(buf, axes[0] + axes[1])

    return shard_jit(body, mesh, spec, PartitionSpec(), check_vma=False)


def cut(x: jax.Array, mesh: AnyMesh, spec: PartitionSpec, shape: tuple[int, int]) -> jax.Array:
    """``x[:shape[0], :shape[1]]``, replicated, for ``x`` placed as ``spec``.

    Cost: a local slice when ``x`` is replicated; otherwise one all-reduce of
    ``shape`` over the axes that split ``x``.
    """
    if tuple(x.shape) == tuple(shape):
        return x
    if all(e is None for e in tuple(spec)):
        return x[: shape[0], : shape[1]]
    local = []
    for d, e in enumerate((*tuple(spec), None, None)[:2]):
        names = () if e is None else (e,) if isinstance(e, str) else tuple(e)
        local.append(int(x.shape[d]) // math.prod(mesh.shape[a] for a in names))
    return _cut_program(mesh, spec, (local[0], local[1]), tuple(shape))(x)
