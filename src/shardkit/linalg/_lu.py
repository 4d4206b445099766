"""Distributed LU with pivoting across the whole column, and what it solves.

Right-looking blocked LU (ScaLAPACK's PDGETRF) inside one ``jax.shard_map`` over the
matrix's mesh, on the block-cyclic layout of :mod:`shardkit.linalg._blockcyclic`. For
each panel of ``nb`` columns:

1. the panel's column block is broadcast along the mesh row (all-reduce over the
   column axes, ``(n / R) x nb``);
2. the panel's pivots are chosen over the *whole* column (never only inside blocks),
   in one of two ways (``pivoting=``):

   ``"tournament"`` (the default of :func:`solve`, :func:`lu_factor`, :func:`det`,
   :func:`inv`)
     communication-avoiding LU (CALU, Grigori, Demmel and Xiang, SIMAX 2011): each
     device nominates ``nb`` rows by LAPACK's LU of its part of the panel, one
     all-gather of the ``R x nb`` nominees and one LU of their stack pick all ``nb``
     pivots at once; ``L21 = A21 U11^-1`` follows locally. On a mesh with one row of
     devices it is exactly partial pivoting; otherwise the pivots may differ from
     LAPACK's, with the same backward error in practice (the tests hold it within
     2x of LAPACK's on random, ill-conditioned and ``[[0, B], [C, 0]]`` matrices);
   ``"partial"`` (the default of :func:`lu`)
     LAPACK's partial pivoting: for each column every device finds its largest active
     ``|a|`` and one all-gather over the row axes of ``(|value|, row, the candidate
     row, row j)`` (``2 + 2 ib`` numbers, ``ib = 16``) picks the global pivot. Columns
     are factored ``ib`` at a time and the rest of the panel updated by blocks. Same
     pivots as LAPACK, but ``n`` small collectives instead of ``n / nb``;

   either way the panel's row exchanges reach the rest of the rows in one
   ``2 nb x n / C`` all-reduce;
3. the ``nb`` rows of U (``nb x n / C``) are solved on their owner and broadcast down
   the mesh column (all-reduce over the row axes);
4. the trailing matrix is updated locally with one matmul.

Every collective is panel- or vector-sized; none moves the matrix. The loops are
``lax.fori_loop``: the program size does not grow with ``n``. The trailing update walks
only the active rows and columns, by cache-sized tiles
(:func:`shardkit.linalg._tiles.active_update`), so its flops follow the remaining
matrix step by step (within one ``nb`` block and one tile of LU's ``2n^3/3P``); the
``stages`` static sub-loops shrink what the panel steps read.
The per-shard kernel is :mod:`shardkit.linalg._lu_kernel`; this module holds the
public functions around it.

A pivot with ``|u_jj| <= n * eps * max|a|`` marks the matrix (numerically) singular:
eagerly :class:`~shardkit.linalg.SingularMatrixError` (a ``numpy.linalg.LinAlgError``)
naming the column; under ``jax.jit`` ``f.with_status(...)`` (every public function
here that can fail has it, e.g. ``solve.with_status(a, b)``) returns ``(result, status)``
and otherwise the result is NaN-filled. An exactly zero pivot is skipped as LAPACK does,
so the factorization itself never produces inf.

Complex matrices are factored the same way (pivots by magnitude). An order ``n`` the
mesh (or the block size) does not divide is padded (see :mod:`shardkit.linalg._pad`)
to ``a_pad``, ``a`` bordered by ``max|a| I``, a symmetric permutation away; results
are the unpadded ones. The padded copy costs ``(size^2 - n^2) * itemsize`` bytes more
than ``a`` (``n = 999`` on 2x4: 1000, +16 KB in float64), listed by
``shardkit.comms(...).padding``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from shardkit._programs import cached
from shardkit.layout.internal import Operand, check_same_devices, operand
from shardkit.linalg._blockcyclic import (
    DEFAULT_BLOCK,
    DEFAULT_STAGES,
    AnyMesh,
    Order,
    Plan,
    SpecLike,
    Spmd,
    check_order,
    dslice,
    local_tables,
    make_plan,
    matrix_operand,
    place,
    psum,
)
from shardkit.linalg._dtype import as_inexact, common, real_dtype
from shardkit.linalg._grid import home, regrid, rhs_to_grid
from shardkit.linalg._inputs import (
    ArrayInput,
    Trans,
    as_rhs,
    empty_solution,
    from_rhs,
    gate,
    nan_unless,
    require_finite,
    trans_code,
)
from shardkit.linalg._lu_kernel import PIVOTING_NAMES, Pivoting, factor_local
from shardkit.linalg._pad import (
    Padding,
    natural_status,
    pad_matrix,
    pad_rows,
    scale,
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
from shardkit.linalg._triangular import substitute
from shardkit.linalg._wide import replicated

__all__ = ["LUFactors", "det", "inv", "lu", "lu_factor", "lu_solve", "slogdet", "solve"]

_T = TypeVar("_T")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LUFactors:
    """The distributed factorization ``a[rows] = L U`` (with ``σ``-permuted columns).

    When the mesh or the block size does not divide ``a``'s order ``n``, the factors are
    those of the padded ``a_pad = Π diag(a, max|a| I) Π^T`` (``padding.size`` square,
    ``Π`` a symmetric permutation, see :mod:`shardkit.linalg._pad`): ``lu``, ``perm`` and
    ``plan`` are of order ``padding.size``, while :func:`lu_solve` takes and returns
    ``n`` rows and ``status`` names ``a``'s own columns.

    Attributes:
      lu: ``(n, n)``, sharded like ``a``; each device holds its block of the packed
        ``L\\U`` of ``a[σ][:, σ]``, in the block-cyclic slot order of ``plan``.
      perm: ``(n,)`` replicated int32: position ``i`` of the factorization holds
        elimination row ``perm[i]`` (natural row ``σ[perm[i]]``).
      swaps: row exchanges (tournament pivoting counts each panel's permutation
        by its parity); its parity is the sign of the determinant.
      status: 0, or ``j + 1`` for the first numerically zero pivot (natural column ``j``).
      plan: static layout; mesh, spec: where ``lu`` lives. Under ``jit`` on Auto mesh
        axes the partitioner decides that: mesh and spec are None, and the factors are
        in natural order (``σ`` the identity), so that they hold whatever the layout.
      padding: where ``a``'s indices sit in the factored order (nothing padded when
        ``padding.size == padding.n``).
    """

    lu: jax.Array
    perm: jax.Array
    swaps: jax.Array
    status: jax.Array
    plan: Plan = dataclasses.field(metadata={"static": True})
    mesh: AnyMesh | None = dataclasses.field(metadata={"static": True})
    spec: PartitionSpec | None = dataclasses.field(metadata={"static": True})
    padding: Padding = dataclasses.field(metadata={"static": True})


@cached
def _factor_program(
    plan: Plan,
    mesh: AnyMesh,
    spec: PartitionSpec,
    stages: int,
    pivoting: Pivoting,
    lookahead: bool = False,
) -> Any:
    rep = PartitionSpec()
    return Spmd(
        lambda a: factor_local(a, plan, stages, pivoting, lookahead=lookahead),
        mesh,
        spec,
        (spec, rep, rep, rep),
    )


def _check_options(where: str, pivoting: Any, lookahead: Any) -> None:
    """The LU options every public function checks once, before anything runs."""
    if pivoting not in PIVOTING_NAMES:
        raise ValueError(
            f"{where}: pivoting={pivoting!r} is not one of {list(PIVOTING_NAMES)}; "
            "'partial' is LAPACK's (one small all-gather per column), 'tournament' "
            "picks a panel's pivots with one all-gather (faster, CALU)"
        )
    if not isinstance(lookahead, bool):
        raise TypeError(f"{where}: lookahead={lookahead!r} must be True or False")


def _factor(
    a: Any,
    op: Operand,
    nb: int,
    order: str,
    stages: int,
    pivoting: str,
    overwrite: bool = False,
    *,
    lookahead: bool = False,
) -> LUFactors:
    """The LU factors of the checked, inexact, placed-or-host matrix ``a`` (``op``)."""
    m, p, plan, padding = square_plan(op, nb, order)
    # The border max|a| I keeps the singularity tolerance n eps max|a| that of a.
    diag = scale(a) if padding.size != padding.n else 1.0
    x = pad_matrix(a, padding, plan, m, p, diag)
    prog = _factor_program(plan, m, p, int(stages), pivoting, lookahead)  # type: ignore[arg-type]
    # Donated, the factors take x's buffer: one share of a per device less.
    run = prog.donating if overwrite and not is_traced(x) else prog
    lu_, perm, swaps, status = run(x)
    status = user_status(natural_status(status, plan), padding)
    return LUFactors(lu_, perm, swaps, status, plan, m, p, padding)


Tail = Any  # (plan, mesh, spec) -> (fn(lu, perm, swaps, *rest), rest specs, out specs)


def _on_layout(
    a: Any,
    op: Operand,
    rest: tuple[Any, ...],
    tail: Tail,
    rule: str,
    *,
    nb: int,
    order: str,
    stages: int,
    pivoting: str,
    lookahead: bool = False,
) -> tuple[Any, ...]:
    """Auto mesh axes under ``jit``: factor, then ``tail``, in one per-shard program.

    Returns ``tail``'s outputs and the natural status; see :mod:`shardkit.linalg._partitioned`.
    """

    def make(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
        fac = _factor_program(plan, m, p, int(stages), pivoting, lookahead).body  # type: ignore[arg-type]
        fn, rest_specs, out_specs = tail(plan, m, p)

        def local(a: jax.Array, *more: jax.Array) -> tuple[jax.Array, ...]:
            lu_, perm, swaps, status = fac(a)
            return (*fn(lu_, perm, swaps, *more), natural_status(status, plan))

        return local, (p, *rest_specs), (*out_specs, PartitionSpec())

    return on_layout(op, (a, *rest), make, rule, nb=nb, order=order)


def _problem(where: str, f: LUFactors) -> Problem:
    """What a nonzero status of ``f`` reports: ``a`` (unpadded) is singular."""
    return Problem(where, Failure.SINGULAR, (f.padding.n, f.padding.n), f.lu.dtype)


def _traced_status(where: str, out: _T, status: jax.Array, a: Any, dtype: Any) -> Checked[_T]:
    """The :class:`Checked` of the Auto-axes jit paths: always traced, a singular status."""
    problem = Problem(where, Failure.SINGULAR, tuple(a.shape), dtype)
    return checked(problem, out, status, traced=True)


def _lu_factor(
    want_status: bool,
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    order: Order = "cyclic",
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    stages: int = DEFAULT_STAGES,
    pivoting: Pivoting = "tournament",
    lookahead: bool = False,
    check_finite: bool = True,
    overwrite_a: bool = False,
) -> Checked[LUFactors]:
    """Factor a sharded square matrix with pivoting over whole columns, keeping it distributed.

    Communication per panel: one ``(n/R) x nb`` all-reduce over the column axes
    (tournament pivoting: the factored panel and its pivots, ``(n/R + nb) x (nb + 1)``,
    so that only the owning mesh column factors it); over
    the row axes one ``nb x (n/C)`` all-reduce (U rows), one ``2 nb x (n/C + nb)``
    all-reduce (row exchanges), and for the pivots either (tournament) one all-gather
    of ``R x nb x (nb + 1)`` numbers and one ``nb x (nb + 1)`` all-reduce, or (partial)
    per ``ib`` columns two ``ib x nb``-sized all-reduces and per column one all-gather
    of ``2 + 2 ib`` numbers. Memory per device: its share of ``a`` plus one working
    copy plus ``O((n/R + n/C) * nb)``. Sizes the mesh or ``nb`` does not divide are padded (see :class:`LUFactors`):
    the padded share is one more array of ``size^2 / P`` elements per device
    (``size - n < L * n / (L nb) + L`` with ``L = lcm(R, C)``, e.g. ``n = 999`` on
    2x4 with ``nb=128``: ``size = 1000``, 0.2% more bytes).

    Args:
      a: ``(n, n)`` float or complex matrix sharded ``P(rows, cols)``, or host data
        with ``mesh=``/``spec=`` (any ``n``; integers are promoted to float).
      nb: block size (rounded down to divide the local blocks).
      order: ``"cyclic"`` (balanced elimination order) or ``"natural"`` (LAPACK's
        factors exactly, less balanced). Under ``jit`` on Auto axes always natural
        (see :class:`LUFactors`).
      mesh: the mesh, when ``a`` does not carry it (host data). Not needed under
        ``jit`` on Auto axes: the layout comes from the partitioner.
      spec: ``a``'s spec, likewise.
      stages: static sub-loops over which the panel steps' working set shrinks.
      pivoting: ``"tournament"`` (CALU: one all-gather per panel) or ``"partial"``
        (LAPACK's pivots: one small all-gather per column); see the module docstring.
      lookahead: factor and broadcast panel ``k + 1`` before the rest of update ``k``
        (ScaLAPACK's and HPL's lookahead), so that on devices with their own links the
        panel's collectives can overlap the update. Same factors and communication;
        off by default: on simulated CPU devices sharing cores there is nothing to
        overlap, and it cost 20-35% more CPU time and a longer compile here.
      overwrite_a: donate ``a``'s buffer to the factorization (as SciPy's
        ``overwrite_a``; eagerly only): the factors are written over it and ``a`` is
        deleted afterwards, which saves one share of ``a`` per device. When ``a`` is
        converted or padded first, the converted copy is donated instead and ``a``
        stays. Under ``jit`` donate through ``jax.jit(..., donate_argnums=...)``.
      check_finite: eagerly, raise ``ValueError`` when the input holds an inf or NaN
        (SciPy's default); under ``jit`` NaN-fill the result instead (see
        :mod:`shardkit.linalg._inputs`). ``False`` skips the check.

    Returns:
      :class:`LUFactors`; ``lu_factor.with_status(...)``: ``(factors, status)``.

    Raises:
      SingularMatrixError: eagerly, when a pivot is numerically zero.
      ValueError: eagerly, ``a`` holds an inf or NaN (``check_finite``).
      TypeError: ``a`` is half precision (use float32) or not numeric.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.array([[0.0, 2], [3, 0]]).repeat(8, 0).repeat(8, 1) + np.eye(16), mesh=m, spec="x,y")
      >>> f = shardkit.linalg.lu_factor(a, nb=4)
      >>> x = shardkit.linalg.lu_solve(f, np.ones(16))
      >>> bool(np.allclose(np.asarray(a) @ np.asarray(x), 1))
      True
    """
    a = as_inexact("lu_factor", "a", a)
    _check_options("lu_factor", pivoting, lookahead)
    op = matrix_operand("lu_factor", a, mesh, spec)
    ok = require_finite("lu_factor", check_finite, a=a)
    a = gate(ok, a)
    if tuple(a.shape) == (0, 0):  # no layout holds it; lu_solve answers empty solutions
        empty = jnp.zeros((), jnp.int32)
        f = LUFactors(
            jnp.zeros((0, 0), a.dtype),
            jnp.zeros((0,), jnp.int32),
            empty,
            empty,
            Plan(0, 1, (), (), 1, 1, ()),
            None,
            None,
            Padding(0, 0, 1),
        )
        return succeeded(f)
    if op.unknown:
        rep = PartitionSpec()
        lu_, perm, swaps, status = _on_layout(
            a,
            op,
            (),
            lambda plan, m, p: (lambda *f: f, (), (p, rep, rep)),
            "i j -> i j, k, , ",
            nb=nb,
            order="natural",
            stages=stages,
            pivoting=pivoting,
            lookahead=lookahead,
        )
        n = int(a.shape[0])
        plan = make_plan(n, (), (), 1, 1, nb, "natural")
        f = LUFactors(lu_, perm, swaps, status, plan, None, None, Padding(n, n, 1))
    else:
        f = _factor(a, op, nb, order, stages, pivoting, overwrite_a, lookahead=lookahead)
    f = dataclasses.replace(f, lu=nan_unless(f.lu, ok))
    return checked(_problem("lu_factor", f), f, f.status, traced=is_traced(a))


lu_factor = reports_status(_lu_factor)


@cached
def _solve_program(plan: Plan, mesh: AnyMesh, spec: PartitionSpec, trans: bool) -> Any:
    sigma = plan.tables.sigma

    def body(lu_: jax.Array, perm: jax.Array, b: jax.Array) -> jax.Array:
        tab = local_tables(plan)
        sig = jnp.asarray(sigma, jnp.int32)
        if not trans:
            y = substitute(lu_, b[sig[perm]], plan, tab, lower=True, unit=True, trans=False)
            z = substitute(lu_, y, plan, tab, lower=False, unit=False, trans=False)
            x = jnp.zeros_like(z).at[sig].set(z)
        else:
            y = substitute(lu_, b[sig], plan, tab, lower=False, unit=False, trans=True)
            z = substitute(lu_, y, plan, tab, lower=True, unit=True, trans=True)
            x = jnp.zeros_like(z).at[sig[perm]].set(z)
        return dslice(x, (tab.r * plan.m, 0), (plan.m, b.shape[1]))

    rep = PartitionSpec()
    out = PartitionSpec(plan.row_axes or None, None)
    return Spmd(body, mesh, (spec, rep, rep), out)


def lu_solve(
    factors: LUFactors, b: ArrayInput, /, *, trans: Trans = 0, check_finite: bool = True
) -> jax.Array:
    """Solve ``a x = b`` (``trans=1``: ``a^T x = b``, ``2``: ``a^H x = b``) from :func:`lu_factor`.

    ``b`` is replicated (``n x nrhs`` per device). Communication: ``2 n / nb``
    all-reduces of ``nb x (nb + nrhs)`` elements. No status check: factors that
    failed give inf/NaN here, so check ``lu_factor``'s status first (``solve`` does).
    Padded factors (see :class:`LUFactors`) take ``b`` with zero rows added and drop
    them from ``x``: a local slice, or, when the mesh does not divide ``n``, one
    ``n x nrhs`` all-reduce that leaves ``x`` replicated.

    Args:
      factors: from :func:`lu_factor`.
      b: ``(n,)`` or ``(n, nrhs)``; a complex ``b`` with real factors gives a complex ``x``.
      trans: ``0``/``"N"`` (``a x = b``), ``1``/``"T"`` (``a^T x = b``) or ``2``/``"C"``
        (``a^H x = b``; the same as ``1`` for real ``a``), as in
        :func:`solve_triangular`.
      check_finite: eagerly, raise ``ValueError`` when ``b`` holds an inf or NaN
        (SciPy's default; the factors were checked by :func:`lu_factor`).

    Returns:
      ``x``, rows sharded like ``a``'s rows (replicated when the mesh does not divide ``n``).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(np.diag(np.arange(1.0, 17)), mesh=m, spec="x,None")
      >>> x = shardkit.linalg.lu_solve(shardkit.linalg.lu_factor(a), np.ones(16))
      >>> bool(np.allclose(np.asarray(x), 1 / np.arange(1.0, 17)))
      True
    """
    code = trans_code("lu_solve", trans)
    n = factors.padding.n
    dt = common("lu_solve", factors.lu.dtype, b)
    ok = require_finite("lu_solve", check_finite, b=b)
    b = gate(ok, b)
    empty = empty_solution("lu_solve", jnp.zeros((n, n)), b, dt)
    if empty is not None:
        return empty
    b2, vec = as_rhs("lu_solve", b, n, dt)
    x = _lu_solve(factors, b2, code)
    return nan_unless(from_rhs(x, vec), ok)


def _lu_solve(factors: LUFactors, b2: jax.Array, trans: int) -> jax.Array:
    """``x`` of ``a x = b2`` (``trans``: see :func:`lu_solve`), unchecked: ``b2`` is
    ``(n, nrhs)`` of the result's dtype. The core of every LU solve."""
    plan, padding, dt = factors.plan, factors.padding, b2.dtype
    lu_ = factors.lu if factors.lu.dtype == dt else factors.lu.astype(dt)
    conj = trans == 2 and jnp.iscomplexobj(b2)
    # a^H x = b  <=>  a^T conj(x) = conj(b).
    b2 = jnp.conj(b2) if conj else b2
    if factors.mesh is None or factors.spec is None:  # natural order: any layout reads them
        rep = PartitionSpec()

        def make(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            out = PartitionSpec(plan.row_axes or None, None)
            return _solve_program(plan, m, p, bool(trans)).body, (p, rep, rep), (out,)

        (x,) = on_layout(
            operand("lu_solve", "factors.lu", lu_),
            (lu_, factors.perm, b2),
            make,
            "i j, k, l m -> i m",
            nb=plan.nb,
            order="natural",
        )
    else:
        b2 = place(pad_rows(b2, padding, factors.mesh), factors.mesh, PartitionSpec())
        x = _solve_program(plan, factors.mesh, factors.spec, bool(trans))(lu_, factors.perm, b2)
        x = unpad_rows(x, padding, factors.mesh, plan.row_axes)
    return jnp.conj(x) if conj else x


def _solve(
    want_status: bool,
    a: ArrayInput,
    b: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    order: Order = "cyclic",
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    stages: int = DEFAULT_STAGES,
    pivoting: Pivoting = "tournament",
    lookahead: bool = False,
    check_finite: bool = True,
    overwrite_a: bool = False,
) -> Checked[jax.Array]:
    """Solve ``a x = b`` for sharded ``a``, like ``jnp.linalg.solve``, without gathering ``a``.

    :func:`lu_factor` (balanced block-cyclic order) then :func:`lu_solve`; see them for
    the communication. Per-device memory: ``a``'s share plus one working copy plus
    ``O(n * (nb + nrhs))``. Sizes the mesh or ``nb`` does not divide are padded (see :class:`LUFactors`) and ``x`` comes back unpadded:
    the padded share is one more array of ``size^2 / P`` elements per device
    (``size - n < L * n / (L nb) + L`` with ``L = lcm(R, C)``, e.g. ``n = 999`` on
    2x4 with ``nb=128``: ``size = 1000``, 0.2% more bytes).

    A matrix split over one mesh dimension only (``P('x', None)``, ``P(None, 'x')``,
    ``P(('x', 'y'), None)``) of order ``n >= 256`` is factored on a near-square grid of
    the same devices (``R x C`` with ``R <= C``: 2x4 for 8 devices, 4x4 for 16), as
    ScaLAPACK advises: one all-to-all of ``a``'s share moves it there, and the panel
    collectives span ``n / C`` columns instead of ``n``. ``x`` comes back laid out as
    it would without the grid. At ``n = 4096`` float32 on 8 simulated CPU devices this
    took ``solve`` from 1.8-2.2 to 1.5-1.6 CPU seconds, at a lower peak memory. It
    happens when the grid divides ``n`` and the layout is known: eagerly, and under
    ``jit`` on Explicit axes, or on Auto axes with ``mesh=``/``spec=`` (a layout the
    partitioner picks is factored as it is); :func:`det`, :func:`slogdet` and
    :func:`inv` do the same. :func:`lu_factor` keeps the layout it is given: shard
    ``a`` over a 2-D mesh to factor it on one.

    Args:
      a: ``(n, n)`` float or complex matrix sharded ``P(rows, cols)``, or host data with
        ``mesh=``/``spec=`` (any ``n``).
      b: ``(n,)`` or ``(n, nrhs)``.
      nb: block size.
      order: ``"cyclic"`` (balanced elimination order, the default) or ``"natural"``
        (LAPACK's order); see :func:`lu_factor`.
      mesh: the mesh, when ``a`` does not carry it (host data). Not needed under
        ``jit`` on Auto axes: the layout comes from the partitioner.
      spec: ``a``'s spec, likewise.
      stages: see :func:`lu_factor`.
      pivoting: ``"tournament"`` or ``"partial"``; see :func:`lu_factor`.
      lookahead: see :func:`lu_factor`.
      overwrite_a: donate ``a``'s buffer to the factorization (as SciPy's
        ``overwrite_a``; eagerly only): the factors are written over it and ``a`` is
        deleted afterwards, which saves one share of ``a`` per device. When ``a`` is
        converted or padded first, the converted copy is donated instead and ``a``
        stays. Under ``jit`` donate through ``jax.jit(..., donate_argnums=...)``.
      check_finite: eagerly, raise ``ValueError`` when the input holds an inf or NaN
        (SciPy's default); under ``jit`` NaN-fill the result instead (see
        :mod:`shardkit.linalg._inputs`). ``False`` skips the check.

    Returns:
      ``x`` with ``b``'s shape (rows sharded like ``a``'s rows; replicated when the mesh
      does not divide ``n``); NaN-filled under ``jit`` for a singular ``a``.
      ``solve.with_status(...)``: ``(x, status)``, status ``j + 1`` naming the first
      numerically zero pivot column ``j`` (never raises, never NaN-fills for it).

    Raises:
      SingularMatrixError: eagerly, when ``a`` is numerically singular.
      ValueError: eagerly, ``a`` or ``b`` holds an inf or NaN (``check_finite``), or
        ``b`` does not fit ``a``.
      TypeError: ``a`` or ``b`` is half precision (use float32) or not numeric.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> rng = np.random.default_rng(0)
      >>> a_np = rng.standard_normal((32, 32))
      >>> x = shardkit.linalg.solve(shardkit.shard(a_np, mesh=m, spec="x,y"), np.ones(32), nb=8)
      >>> bool(np.allclose(a_np @ np.asarray(x), 1))
      True
      >>> c = rng.standard_normal((99, 99)) + 1j * rng.standard_normal((99, 99))
      >>> x = shardkit.linalg.solve(c, np.ones(99), mesh=m, spec="x,y")  # padded to 100
      >>> x.dtype, bool(np.allclose(c @ np.asarray(x), 1))
      (dtype('complex128'), True)
      >>> shardkit.linalg.solve(shardkit.shard(np.zeros((32, 32)), mesh=m, spec="x,y"), np.ones(32), nb=8)
      Traceback (most recent call last):
      ...
      shardkit.linalg.SingularMatrixError: solve: the matrix (shape=(32, 32), dtype=float64) is singular to working precision: no pivot in column 0 is larger than n * eps * max|a|. Check the input for dependent rows or columns; under jax.jit call shardkit.linalg.solve.with_status(...) to receive this status instead.
    """
    a = as_inexact("solve", "a", a)
    dt = common("solve", a.dtype, b)  # a bad b fails before the factorization
    _check_options("solve", pivoting, lookahead)
    check_order("solve", order)
    check_same_devices("solve", {"a": a, "b": b}, mesh=mesh)
    a, op, g = regrid(a, matrix_operand("solve", a, mesh, spec))
    b = rhs_to_grid(b, g)
    ok = require_finite("solve", check_finite, a=a, b=b)
    a, b = gate(ok, a), gate(ok, b)
    empty = empty_solution("solve", a, b, dt)
    if empty is not None:  # 0x0, or no right-hand sides: nothing to factor
        return succeeded(empty)
    b2, vec = as_rhs("solve", b, int(a.shape[0]), dt)
    if op.unknown:
        a = a if a.dtype == dt else a.astype(dt)

        def tail(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            sol = _solve_program(plan, m, p, False).body
            out = PartitionSpec(plan.row_axes or None, None)
            return (lambda lu_, perm, _, b: (sol(lu_, perm, b),)), (PartitionSpec(),), (out,)

        x, status = _on_layout(
            a,
            op,
            (b2,),
            tail,
            "i j, k l -> i l, ",
            nb=nb,
            order=order,
            stages=stages,
            pivoting=pivoting,
            lookahead=lookahead,
        )
        x = nan_unless(from_rhs(x, vec), ok)
        return _traced_status("solve", x, status, a, x.dtype)
    f = _factor(a, op, nb, order, stages, pivoting, overwrite_a, lookahead=lookahead)
    x = _lu_solve(f, b2, 0)
    x = nan_unless(from_rhs(x, vec), ok)
    return checked(_problem("solve", f), home(x, g), home(f.status, g), traced=is_traced(a, b))


solve = reports_status(_solve)


@cached
def _diag_program(plan: Plan, mesh: AnyMesh, spec: PartitionSpec) -> Any:
    def body(lu_: jax.Array) -> jax.Array:
        tab = local_tables(plan)
        nb = plan.nb
        g = tab.g_r
        blk = g // nb
        owned = tab.own_c[blk] == tab.c
        lc = jnp.clip(tab.slot_c[blk] * nb + g % nb, 0, plan.k - 1)
        d = jnp.where(owned, lu_[jnp.arange(plan.m), lc], 0)
        return psum(jnp.zeros(plan.n, lu_.dtype).at[g].set(d), plan.row_axes + plan.col_axes)

    return Spmd(body, mesh, spec, PartitionSpec())


def _u_diagonal(f: LUFactors) -> jax.Array:
    """``diag(U)`` in elimination order, with 1 at the padded positions (their ``max|a|``)."""
    # Factored eagerly or on Explicit axes (the Auto route is _on_layout's): both known.
    assert f.mesh is not None
    assert f.spec is not None
    d = _diag_program(f.plan, f.mesh, f.spec)(f.lu)
    if f.padding.size == f.padding.n:
        return d
    padded = f.padding.index()[f.plan.tables.sigma] < 0
    return jnp.where(jnp.asarray(padded), jnp.ones((), d.dtype), d)


def _det_parts(
    where: str,
    a: Any,
    nb: int,
    order: str,
    stages: int,
    mesh: AnyMesh | None,
    spec: Any,
    pivoting: str,
    check: bool,
) -> tuple[jax.Array, jax.Array]:
    """``(sign, log|det a|)`` from the distributed LU; ``(1, 0)`` for a 0x0 ``a``."""
    a = as_inexact(where, "a", a)
    _check_options(where, pivoting, False)
    check_order(where, order)
    a, op, g = regrid(a, matrix_operand(where, a, mesh, spec))
    ok = require_finite(where, check, a=a)
    a = gate(ok, a)
    if tuple(a.shape) == (0, 0):
        return jnp.ones((), a.dtype), jnp.zeros((), real_dtype(a.dtype))
    if op.unknown:
        rep = PartitionSpec()

        def tail(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            diag = _diag_program(plan, m, p).body
            return (lambda lu_, _, swaps: _sign_log(diag(lu_), swaps)), (), (rep, rep)

        sign, logabs, _ = _on_layout(
            a,
            op,
            (),
            tail,
            "i j -> , , ",
            nb=nb,
            order=order,
            stages=stages,
            pivoting=pivoting,
        )
    else:
        f = _factor(a, op, nb, order, stages, pivoting)
        sign, logabs = _sign_log(_u_diagonal(f), f.swaps)
    return home(nan_unless((sign, logabs), ok), g)


def _sign_log(d: jax.Array, swaps: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sign, log|prod d|)`` with the exchanges' sign; no partial product is formed.

    A zero pivot gives ``(0, -inf)``, as ``numpy.linalg.slogdet``. The complex sign is the
    product of unit numbers ``d / |d|``, renormalized so that rounding cannot drift it.
    """
    mag = jnp.abs(d)
    zero = (mag == 0).any()
    logabs = jnp.where(zero, -jnp.inf, jnp.sum(jnp.log(jnp.where(mag == 0, 1, mag))))
    flip = jnp.where(swaps % 2 == 1, -1, 1).astype(d.dtype)
    if jnp.iscomplexobj(d):
        unit = jnp.prod(jnp.where(mag == 0, 1, d / jnp.where(mag == 0, 1, mag).astype(d.dtype)))
        unit = unit / jnp.abs(unit).astype(d.dtype)
    else:
        unit = jnp.prod(jnp.sign(d))
    sign = jnp.where(zero, jnp.zeros((), d.dtype), flip * unit)
    return sign, logabs.astype(mag.dtype)


def det(
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    order: Order = "cyclic",
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    pivoting: Pivoting = "tournament",
    stages: int = DEFAULT_STAGES,
    check_finite: bool = True,
) -> jax.Array:
    """Determinant of sharded ``a``, like ``jnp.linalg.det``, from the distributed LU.

    The symmetric block reordering leaves the determinant unchanged; its sign is that
    of the row exchanges. One extra all-reduce of ``n`` elements gathers ``diag(U)``.
    Computed as NumPy does, ``sign * exp(log|det|)`` from :func:`slogdet`: no partial
    product can overflow or underflow (``diag([1e200, 1e200, 1e-200, 1e-200])`` gives 1),
    only a determinant outside the dtype's range does. A singular matrix gives its
    (tiny or zero) determinant, not an error. A padded ``a`` (see :func:`lu_factor` for
    the cost) leaves its border's pivots out. A 0x0 ``a`` has determinant 1. A matrix
    split over one mesh dimension is factored on a grid of its devices, as in
    :func:`solve`.

    Args:
      a: ``(n, n)`` float or complex matrix sharded ``P(rows, cols)`` (or host data).
      nb: block size.
      order: ``"cyclic"`` (balanced elimination order, the default) or ``"natural"``
        (LAPACK's order); see :func:`lu_factor`.
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.
      pivoting: ``"tournament"`` or ``"partial"``; see :func:`lu_factor`.
      stages: see :func:`lu_factor`.
      check_finite: eagerly, raise ``ValueError`` when ``a`` holds an inf or NaN
        (SciPy's default); under ``jit`` the result is NaN instead.

    Returns:
      A replicated scalar of ``a``'s dtype.

    Raises:
      ValueError: eagerly, ``a`` holds an inf or NaN (``check_finite``).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.diag(np.arange(1.0, 9)), mesh=m, spec="x,y")
      >>> round(float(shardkit.linalg.det(a, nb=1)), 6)
      40320.0
    """
    sign, logabs = _det_parts("det", a, nb, order, stages, mesh, spec, pivoting, check_finite)
    return sign * jnp.exp(logabs).astype(sign.dtype)


def slogdet(
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    order: Order = "cyclic",
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    pivoting: Pivoting = "tournament",
    stages: int = DEFAULT_STAGES,
    check_finite: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """``(sign, logabsdet)`` of sharded ``a``, like ``jnp.linalg.slogdet``, from the distributed LU.

    Cost as :func:`det`. ``sign`` has ``a``'s dtype (a unit complex number for complex
    ``a``, else ``-1`` or ``1``); ``logabsdet`` is real and sums ``log|u_jj|``, so it stays
    finite where ``det`` over- or underflows. A singular ``a`` (an exactly zero pivot)
    gives ``(0, -inf)``; a 0x0 ``a`` gives ``(1, 0)``.

    Args:
      a: ``(n, n)`` float or complex matrix sharded ``P(rows, cols)`` (or host data).
      nb: block size.
      order: ``"cyclic"`` (balanced elimination order, the default) or ``"natural"``
        (LAPACK's order); see :func:`lu_factor`.
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.
      pivoting: ``"tournament"`` or ``"partial"``; see :func:`lu_factor`.
      stages: see :func:`lu_factor`.
      check_finite: eagerly, raise ``ValueError`` when ``a`` holds an inf or NaN
        (SciPy's default); under ``jit`` both results are NaN instead.

    Returns:
      ``(sign, logabsdet)``, replicated scalars.

    Raises:
      ValueError: eagerly, ``a`` holds an inf or NaN (``check_finite``).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(np.diag([1e300, 1e300, -1.0, 1, 1, 1, 1, 1]), mesh=m, spec="x,None")
      >>> sign, logabs = shardkit.linalg.slogdet(a)
      >>> float(sign), round(float(logabs), 4)
      (-1.0, 1381.5511)
    """
    return _det_parts("slogdet", a, nb, order, stages, mesh, spec, pivoting, check_finite)


def _inv(
    want_status: bool,
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    order: Order = "cyclic",
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    pivoting: Pivoting = "tournament",
    stages: int = DEFAULT_STAGES,
    check_finite: bool = True,
) -> Checked[jax.Array]:
    """Inverse of sharded ``a``, like ``jnp.linalg.inv``: ``solve(a, I)``.

    Cost: the factorization as :func:`solve`, then ``n`` right-hand sides, which are
    replicated: unlike ``solve``, ``inv`` holds an ``n x n`` array per device (the
    right-hand sides) while substituting. Prefer ``solve`` where possible. Padding, and
    the grid for a matrix split over one mesh dimension, as :func:`solve`.

    Args:
      a: ``(n, n)`` float or complex matrix sharded ``P(rows, cols)`` (or host data).
      nb: block size.
      order: ``"cyclic"`` (balanced elimination order, the default) or ``"natural"``
        (LAPACK's order); see :func:`lu_factor`.
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.
      pivoting: ``"tournament"`` or ``"partial"``; see :func:`lu_factor`.
      stages: see :func:`lu_factor`.
      check_finite: eagerly, raise ``ValueError`` when ``a`` holds an inf or NaN
        (SciPy's default); under ``jit`` NaN-fill the result instead.

    Returns:
      The inverse, rows sharded like ``a``'s rows; ``inv.with_status(...)``:
      ``(inverse, status)``.

    Raises:
      SingularMatrixError: eagerly, when ``a`` is numerically singular.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(2 * np.eye(16), mesh=m, spec="x,None")
      >>> bool(np.allclose(np.asarray(shardkit.linalg.inv(a)), np.eye(16) / 2))
      True
    """
    a = as_inexact("inv", "a", a)
    _check_options("inv", pivoting, False)
    check_order("inv", order)
    a, op, g = regrid(a, matrix_operand("inv", a, mesh, spec))
    ok = require_finite("inv", check_finite, a=a)
    a = gate(ok, a)
    if tuple(a.shape) == (0, 0):
        empty = jnp.zeros((0, 0), a.dtype)
        return succeeded(empty)
    if op.unknown:

        def tail(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            sol = _solve_program(plan, m, p, False).body
            out = PartitionSpec(plan.row_axes or None, None)

            def fn(lu_: jax.Array, perm: jax.Array, _: jax.Array) -> tuple[jax.Array]:
                return (sol(lu_, perm, jnp.eye(plan.n, dtype=lu_.dtype)),)

            return fn, (), (out,)

        x, status = _on_layout(
            a,
            op,
            (),
            tail,
            "i j -> i k, ",
            nb=nb,
            order=order,
            stages=stages,
            pivoting=pivoting,
        )
        x = nan_unless(x, ok)
        return _traced_status("inv", x, status, a, x.dtype)
    f = _factor(a, op, nb, order, stages, pivoting)
    x = _lu_solve(f, jnp.eye(f.padding.n, dtype=f.lu.dtype), 0)
    x = nan_unless(x, ok)
    return checked(_problem("inv", f), home(x, g), home(f.status, g), traced=is_traced(a))


inv = reports_status(_inv)


@cached
def _plu_program(plan: Plan, mesh: AnyMesh, spec: PartitionSpec) -> Any:
    def body(lu_: jax.Array, perm: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        tab = local_tables(plan)
        gi, gj = tab.g_r[:, None], tab.g_c[None, :]
        one = jnp.ones((), lu_.dtype)
        low = jnp.where(gi > gj, lu_, jnp.where(gi == gj, one, 0))
        up = jnp.where(gi <= gj, lu_, 0)
        # Natural order: a = P L U with P[perm[i], i] = 1.
        p = (perm[gj] == gi).astype(lu_.dtype)
        return p, low, up

    return Spmd(
        body,
        mesh,
        (spec, PartitionSpec()),
        (spec, spec, spec),
    )


def _lu(
    want_status: bool,
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_BLOCK,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    pivoting: Pivoting = "partial",
    stages: int = DEFAULT_STAGES,
    check_finite: bool = True,
) -> Checked[tuple[jax.Array, jax.Array, jax.Array]]:
    """``(p, l, u)`` with ``a = p @ l @ u``, like ``jax.scipy.linalg.lu``, all sharded like ``a``.

    Uses ``order="natural"`` so that the factors are exactly LAPACK's (partial pivoting
    across the whole column, the same pivots up to ties). That order is less balanced
    than the block-cyclic one ``solve`` uses (see :mod:`shardkit.linalg._blockcyclic`);
    for solving, use :func:`lu_factor`/:func:`solve`. No matrix-sized communication,
    except when the mesh does not divide ``n``: the padded factors are then cut back
    with three ``n x n`` all-reduces and come back replicated (a divisible ``n`` whose
    ``nb`` is padded is cut locally). Complex pivots maximize ``|re| + |im|`` as LAPACK.

    Args:
      a: ``(n, n)`` float or complex matrix sharded ``P(rows, cols)`` (or host data).
        Rectangular ``(m, n)``: SciPy's ``p`` (``m x m``), ``l`` (``m x k``) and ``u``
        (``k x n``), ``k = min(m, n)``, with no distributed kernel: ``a`` is
        all-gathered to every device of its mesh (one copy of ``a`` per device) and
        factored there by LAPACK's partial pivoting, ``O(m n k)`` flops on each device;
        the factors come back replicated and a rank-deficient ``a`` is no error
        (as in SciPy).
      nb: block size.
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.
      pivoting: ``"partial"`` (LAPACK's factors) or ``"tournament"``; see
        :func:`lu_factor`.
      stages: see :func:`lu_factor`.
      check_finite: eagerly, raise ``ValueError`` when ``a`` holds an inf or NaN
        (SciPy's default); under ``jit`` NaN-fill the factors instead.

    Returns:
      ``(p, l, u)``; ``lu.with_status(...)``: ``((p, l, u), status)``.

    Raises:
      SingularMatrixError: eagerly, when ``a`` is numerically singular.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a_np = np.random.default_rng(1).standard_normal((16, 16))
      >>> p, l, u = shardkit.linalg.lu(shardkit.shard(a_np, mesh=m, spec="x,y"), nb=4)
      >>> bool(np.allclose(np.asarray(p) @ np.asarray(l) @ np.asarray(u), a_np))
      True
    """
    a = as_inexact("lu", "a", a)
    _check_options("lu", pivoting, False)
    ok = require_finite("lu", check_finite, a=a)
    a = gate(ok, a)
    if tuple(a.shape) == (0, 0):
        z = jnp.zeros((0, 0), a.dtype)
        return succeeded((z, z, z))
    op = matrix_operand("lu", a, mesh, spec, square=False)
    if a.shape[0] != a.shape[1]:  # no distributed kernel: gathered
        out = tuple(jax.scipy.linalg.lu(replicated(a, op)))
        out = nan_unless(out, ok)
        return succeeded(out)
    if op.unknown:

        def tail(plan: Plan, m: AnyMesh, p: PartitionSpec) -> Any:
            plu = _plu_program(plan, m, p).body
            return (lambda lu_, perm, _: plu(lu_, perm)), (), (p, p, p)

        *plu, status = _on_layout(
            a,
            op,
            (),
            tail,
            "i j -> i j, i j, i j, ",
            nb=nb,
            order="natural",
            stages=stages,
            pivoting=pivoting,
        )
        plu = nan_unless(tuple(plu), ok)
        return _traced_status("lu", plu, status, a, plu[0].dtype)
    f = _factor(a, op, nb, "natural", stages, pivoting)
    m, p = f.mesh, f.spec
    assert m is not None
    assert p is not None
    out = _plu_program(f.plan, m, p)(f.lu, f.perm)
    out = tuple(unpad_matrix(x, f.padding, f.plan, m, p) for x in out)
    out = nan_unless(out, ok)
    return checked(_problem("lu", f), out, f.status, traced=is_traced(a))


lu = reports_status(_lu)
