"""``solve_triangular``: blocked substitution on the block-cyclic layout.

The right-hand sides are replicated (``n x nrhs`` per device; vector-sized for a few
of them). Each of the ``n / nb`` steps multiplies one block row (or column) of the
local matrix by the already-solved part of the solution and sums the pieces with one
all-reduce of ``nb x (nb + nrhs)`` elements over the whole mesh (the diagonal block
rides along). Nothing of matrix size ever moves. Complex matrices are solved the same
way (``trans=2``: the conjugate transpose, through ``conj``); orders the mesh or the
block size does not divide are padded with an identity block (see
:mod:`shardkit.linalg._pad`; the padded matrix stays triangular).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from shardkit._programs import cached
from shardkit.layout.internal import check_same_devices
from shardkit.linalg._blockcyclic import (
    DEFAULT_BLOCK,
    AnyMesh,
    LocalTables,
    Plan,
    SpecLike,
    Spmd,
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
    as_rhs,
    empty_solution,
    gate,
    nan_unless,
    referenced,
    require_finite,
)
from shardkit.linalg._pad import pad_matrix, pad_rows, square_plan, unpad_rows
from shardkit.linalg._partitioned import on_layout

__all__ = ["solve_triangular"]


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
    ``(n, nrhs)`` arrays indexed by elimination index.
    """
    nb, blocks = plan.nb, plan.blocks
    m, k = a.shape
    r, c = tab.r, tab.c
    axes = plan.row_axes + plan.col_axes
    forward = lower != trans

    def step(i: jax.Array, x: jax.Array) -> jax.Array:
        e = i if forward else blocks - 1 - i
        re, rs = tab.own_r[e], tab.slot_r[e]
        ce, cs = tab.own_c[e], tab.slot_c[e]
        # Only the solved part of the triangle is read: the other triangle (and the
        # unsolved columns) may hold anything, NaN included, so they are selected away
        # before the product rather than multiplied by x's zeros. Only the devices
        # holding block e's row (column) compute (a cond): the others' products were
        # dropped, and masking a whole n/C-wide block row per step on every device
        # cost 0.1 CPU-s of a 0.15 CPU-s solve at n=4096 on 8 devices.
        if not trans:
            mine = r == re
            g = tab.g_c
            done = (g < e * nb) if forward else (g >= (e + 1) * nb)

            def product() -> tuple[jax.Array, jax.Array]:
                blk = dslice(a, (rs * nb, 0), (nb, k))
                return jnp.where(done[None, :], blk, 0) @ x[g], dslice(blk, (0, cs * nb), (nb, nb))

        else:
            mine = c == ce
            g = tab.g_r
            done = (g < e * nb) if forward else (g >= (e + 1) * nb)

            def product() -> tuple[jax.Array, jax.Array]:
                # (x^T blk)^T, not blk^T x: a transposed operand made XLA lay the whole
                # carried block out column-major (1.57 CPU-s instead of 0.06 for one
                # n=4096 solve on 8 devices); here the big operand stays row-major.
                blk = dslice(a, (0, cs * nb), (m, nb))
                part = (x[g].T @ jnp.where(done[:, None], blk, 0)).T
                return part, dslice(blk, (rs * nb, 0), (nb, nb)).T

        nothing = (
            jnp.zeros((nb, x.shape[1]), jnp.result_type(a, x)),
            jnp.zeros((nb, nb), a.dtype),
        )
        part, diag = lax.cond(mine, product, lambda: nothing)
        # op(T) is lower exactly when the substitution runs forward.
        diag = jnp.tril(diag, -1 if unit else 0) if forward else jnp.triu(diag, 1 if unit else 0)
        diag = jnp.where((r == re) & (c == ce), diag, 0)
        both = psum(jnp.concatenate([part, diag], axis=1), axes)
        part, diag = both[:, : x.shape[1]], both[:, x.shape[1] :]
        if unit:  # the diagonal is never read: ones in its place
            diag = diag + jnp.eye(nb, dtype=diag.dtype)
        b = dslice(rhs, (e * nb, 0), (nb, x.shape[1])) - part
        xe = trsm(diag, b, lower=forward, unit_diagonal=unit)
        return dupdate(x, xe, (e * nb, 0))

    return lax.fori_loop(jnp.int32(0), jnp.int32(blocks), step, jnp.zeros_like(rhs))


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
    trans: int | str = 0,
    lower: bool = False,
    unit_diagonal: bool = False,
    nb: int = DEFAULT_BLOCK,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    check_finite: bool = True,
) -> jax.Array:
    """Solve ``op(a) x = b`` for triangular sharded ``a``, like ``jax.scipy.linalg.solve_triangular``.

    ``a`` stays where it is (``NamedSharding`` ``P(rows, cols)``); ``b`` is replicated
    (a vector-sized all-gather when it is sharded). Communication: ``n / nb``
    all-reduces of ``nb x (nb + nrhs)`` elements. Memory per device: its share of
    ``a`` plus ``O(n * nrhs + nb^2)``. A zero on the diagonal gives inf, as in SciPy.
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
      >>> x = shardkit.linalg.solve_triangular(shardkit.shard(t, m, "x,y"), np.ones(16), lower=True)
      >>> bool(np.allclose(t @ np.asarray(x), 1))
      True
    """
    where = "solve_triangular"
    tmap = {0: False, 1: True, 2: True, "N": False, "T": True, "C": True}
    if isinstance(trans, bool) or trans not in tmap:
        raise ValueError(f"{where}: trans={trans!r} is not one of {list(tmap)}")
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
    # Auto axes inside jit: the partitioner gives the layout.
    layout = None if op.unknown else square_plan(op, nb, "natural")
    b2, vec = as_rhs(where, b, int(a.shape[0]), dt, tuple(a.shape))
    # op(a) = a^H: a^T conj(x) = conj(b).
    conj = trans in (2, "C") and jnp.iscomplexobj(b2)
    flags = (bool(lower), bool(unit_diagonal), tmap[trans])
    b2 = jnp.conj(b2) if conj else b2
    if layout is None:

        def make(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            out = PartitionSpec(plan.row_axes or None, None)
            return triangular_program(plan, m, p, *flags).body, (p, PartitionSpec()), (out,)

        a = a if a.dtype == dt else a.astype(dt)
        (x,) = on_layout(op, (a, b2), make, "i j, k l -> i l", nb=nb, order="natural")
        x = jnp.conj(x) if conj else x
        return nan_unless(x[:, 0] if vec else x, ok)
    m, p, plan, padding = layout
    b2 = pad_rows(b2, padding, m)
    ap = pad_matrix(a, padding, plan, m, p)
    ap = ap if ap.dtype == dt else ap.astype(dt)
    x = triangular_program(plan, m, p, *flags)(ap, place(b2, m, PartitionSpec()))
    x = unpad_rows(x, padding, m, plan.row_axes)
    x = jnp.conj(x) if conj else x
    return nan_unless(x[:, 0] if vec else x, ok)
