"""Spectral decompositions of sharded matrices that never gather: polar, eigh and svd.

* :func:`polar`: QDWH (:mod:`shardkit.linalg._qdwh`), QR-based dynamically weighted
  Halley iterations on the matrix split by rows over the whole mesh.
* :func:`eigh` / :func:`eigvalsh`: QDWH-based spectral divide and conquer
  (:mod:`shardkit.linalg._dc`): every level splits all current subproblems at once
  with one polar decomposition of the block diagonal matrix; small subproblems are
  finished by LAPACK on the device owning their first row.
* :func:`svd` / :func:`svdvals`: polar ``A = U_p H``, then ``H = V diag(s) V^H``
  by :func:`eigh`, then ``U = U_p V`` (one ring product).

**Layout.** The matrix is moved to rows over every mesh axis (``P(axes, None)``; from
``P('x', 'y')`` one all-to-all of a share) and the results come back on the caller's
layout (a sharded input's own spec; host or replicated input: rows over the mesh).
Every collective moves at most one device's block of ``N^2 / p`` elements: ring
collective-permutes, all-to-alls, and the QR's panel-sized all-reduces and
all-gathers; eigenvalues and singular values come back replicated (``N`` numbers).

**Sizes the mesh does not divide** (host or replicated input): the matrix is
bordered by a diagonal block whose eigenvalues lie above the spectrum (eigh) or by an
identity (polar, svd), which changes nothing of the result, and the results come back
replicated.

**Cost.** Per QDWH iteration about ``10 (M + N) N^2 / p`` flops per device while it is
QR-based (the first one in single precision, two in double), about ``5 M N^2 / p``
after (Cholesky-based); 4 to 5 iterations in all. eigh runs one polar decomposition
of the whole matrix per level of divide and conquer; the base case's windows are wide
enough that a first split's halves usually need no second level (see
:func:`~shardkit.linalg._dc.base_size`). Measured at ``n = 1024`` float32 on 8
simulated CPU devices: polar about 2.3x, eigh about 12x ``scipy.linalg``'s CPU
seconds: the price of never gathering the matrix.
Memory: at most a few shares per device (a share is ``N^2 / p`` elements).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from shardkit._programs import cached
from shardkit.layout.internal import check_spec_axes, entry_axes, is_traced, operand, to_pspec
from shardkit.linalg._blockcyclic import AnyMesh, after, place, psum
from shardkit.linalg._dc import DC, base_size, eigh_local
from shardkit.linalg._dtype import as_inexact
from shardkit.linalg._inputs import ArrayInput, nan_unless, require_finite
from shardkit.linalg._pad import cut
from shardkit.linalg._qdwh import frobenius, polar_local
from shardkit.linalg._rowqr import panel_width, row_qr
from shardkit.linalg._rows import adjoint, ring_gram, ring_matmul, ring_outer, row_index

__all__ = ["SpectralError", "eigh", "eigvalsh", "polar", "svd", "svdvals"]


class SpectralError(np.linalg.LinAlgError):
    """The divide and conquer could not split the spectrum into small enough pieces.

    Raised eagerly (under ``jax.jit`` the results are NaN instead) when the level limit
    is reached with a subproblem still larger than the base case takes.
    """


def _round_up(n: int, p: int) -> int:
    return -(-n // p) * p


def _operand(
    where: str, a: Any, mesh: AnyMesh | None, spec: Any, *, square: bool
) -> tuple[Any, AnyMesh, PartitionSpec | None]:
    """``a`` as an inexact array, its mesh, and its spec (None: host or replicated)."""
    a = as_inexact(where, "a", a)
    shape = tuple(a.shape)
    if len(shape) != 2:
        raise ValueError(f"{where}: a.shape={shape} is not a matrix; pass a 2-D array")
    if square and shape[0] != shape[1]:
        raise ValueError(
            f"{where}: a.shape={shape} is not square; {where} decomposes square (Hermitian) "
            "matrices. For a rectangular matrix use shardkit.linalg.svd."
        )
    found = operand(where, "a", a, mesh=mesh, spec=spec)
    if found.mesh is None:
        raise ValueError(
            f"{where}: cannot tell where a (shape={shape}) lives: it is host data and no "
            "mesh= was given. Shard it with shardkit.shard(a, mesh=mesh, spec='x,y'), or pass "
            "mesh=... (and spec=...)."
        )
    m = found.mesh
    check_spec_axes(where, shape, to_pspec(found.spec or ()), m)
    held = None
    if found.spec is not None and any(found.spec):
        held = to_pspec(found.spec)
    return a, m, held


def _back(x: jax.Array, m: AnyMesh, held: PartitionSpec | None, shape: tuple[int, int]) -> Any:
    """``x[:shape]`` on the caller's layout (see the module docstring)."""
    if x.shape[0] != shape[0]:  # padded rows: the result comes back replicated
        return cut(x, m, _rows(m)[2], shape)
    x = x[:, : shape[1]]  # columns are not split
    if held is not None and all(
        shape[d] % math.prod(m.shape[a] for a in entry_axes((*held, None, None)[d])) == 0
        for d in (0, 1)
    ):
        return place(x, m, held)
    return x


def _then(x: jax.Array, dep: jax.Array) -> jax.Array:
    """``x``, made to wait for ``dep`` outside ``shard_map`` (a sum: a scalar all-reduce)."""
    never = jnp.abs(jnp.sum(dep)) > jnp.inf
    return jnp.where(never, jnp.zeros_like(x), x)


def _rows(m: AnyMesh) -> tuple[tuple[str, ...], int, PartitionSpec]:
    ax = tuple(m.axis_names)
    return ax, int(math.prod(m.shape[a] for a in ax)), PartitionSpec(ax, None)


def _hermitian(x: jax.Array, lower: bool, ax: Any, p: int) -> jax.Array:
    """Rows of the Hermitian matrix read from ``x``'s ``lower`` triangle."""
    rows, big = x.shape
    g = row_index(rows, ax)[:, None]
    c = jnp.arange(big, dtype=jnp.int32)[None, :]
    strict = jnp.where(g > c if lower else g < c, x, 0)
    diag = jnp.where(g == c, jnp.real(x).astype(x.dtype), 0)
    return strict + adjoint(strict, ax, p) + diag


def _checked(x: jax.Array, ax: tuple[str, ...], check: bool) -> tuple[jax.Array, jax.Array]:
    """``x`` NaN-filled unless every element of the whole matrix is finite, and that flag.

    Inside the program, after the move to rows: the flag's all-reduce then comes
    between the move's all-to-all and the algorithm's collectives (a check outside it
    could run beside the move, and unordered collectives can hang on CPU devices).
    """
    if not check:
        return x, jnp.bool_(True)
    bad = psum(jnp.sum(~jnp.isfinite(x)).astype(jnp.int32), ax)
    ok = bad == 0
    return jnp.where(ok, x, jnp.full_like(x, jnp.nan)), ok


@cached
def _eigh_program(
    n: int,
    dtype: Any,
    m: AnyMesh,
    lower: bool,
    vectors: bool,
    check: bool,
    want: tuple[int, int] | None,
) -> Any:
    ax, p, rows_spec = _rows(m)
    big = _round_up(n, p)
    prob = DC(big, n, p, ax, base_size(p), vectors, want)

    def body(x: jax.Array) -> tuple[jax.Array, ...]:
        x, ok = _checked(x, ax, check)
        w, v, good = eigh_local(_hermitian(x, lower, ax, p), prob)
        return w, v, good & ok

    run = jax.shard_map(
        body,
        mesh=m,
        in_specs=rows_spec,
        out_specs=(PartitionSpec(), rows_spec if vectors else PartitionSpec(), PartitionSpec()),
        check_vma=False,
    )

    def program(a: jax.Array) -> tuple[jax.Array, ...]:
        if big != n:
            a = jnp.pad(a, ((0, big - n), (0, big - n)))
        with jax.default_matmul_precision("highest"):
            return run(place(a, m, rows_spec))

    return jax.jit(program)


def _finish(where: str, result: Any, good: jax.Array, traced: bool, ok: Any) -> Any:
    if not traced and not bool(good):
        raise SpectralError(
            f"{where}: the divide and conquer did not split the spectrum into pieces small "
            "enough for its base case within its level limit; please report this matrix."
        )
    result = nan_unless(result, ok)
    return nan_unless(result, good) if traced else result


def eigh(
    a: ArrayInput,
    /,
    *,
    lower: bool = True,
    eigvals_only: bool = False,
    subset_by_index: tuple[int, int] | None = None,
    check_finite: bool = True,
    mesh: AnyMesh | None = None,
    spec: Any = None,
) -> Any:
    """Eigenvalues and eigenvectors of a sharded Hermitian matrix, never gathered.

    SciPy's semantics: eigenvalues ascending, eigenvectors as the columns of ``v``
    (``a @ v == v * w``), only the ``lower`` (or upper) triangle of ``a`` read, the
    imaginary part of its diagonal ignored. Computed by QDWH-based spectral divide and
    conquer (see :mod:`shardkit.linalg._spectral` for the layout, communication and
    cost): every collective moves at most one device's block of the matrix.

    Args:
      a: square ``(n, n)`` matrix: a sharded ``jax.Array`` (any spec), a replicated
        one, or host data with ``mesh=``.
      lower: read the lower triangle (scipy's default) or the upper one.
      eigvals_only: return only the eigenvalues.
      subset_by_index: ``(lo, hi)``, inclusive indices of the ascending eigenvalues
        to return (scipy's convention). Only the subproblems holding them are split
        further (fewer levels for a narrow subset at either end of the spectrum).
      check_finite: eagerly raise on inf or NaN; under ``jax.jit`` such input gives
        NaN results instead.
      mesh, spec: where ``a`` lives when it does not say so itself (host data).

    Returns:
      ``w`` (replicated, ascending), or ``(w, v)`` with ``v`` on ``a``'s layout
      (rows over the mesh for host or replicated input; replicated when the mesh does
      not divide ``n``).

    Raises:
      ValueError: ``a`` is not square, holds infs or NaNs, its layout cannot be told,
        or ``subset_by_index`` is out of range.
      TypeError: ``a`` is not numeric.

    Example:
      >>> import shardkit
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.diag(np.arange(16.0, dtype=np.float32)), mesh=m, spec="x,y")
      >>> w, v = eigh(a)
      >>> np.allclose(w, np.arange(16.0), atol=1e-4), v.sharding.spec
      (True, P('x', 'y'))
    """
    where = "eigvalsh" if eigvals_only else "eigh"
    arr, m, held = _operand(where, a, mesh, spec, square=True)
    n = int(arr.shape[0])
    lo, hi = _subset(where, subset_by_index, n)
    traced = is_traced(arr)
    ok = None if traced else require_finite(where, check_finite, a=arr)
    if n == 0:
        w = jnp.zeros((0,), jnp.finfo(arr.dtype).dtype)
        return w if eigvals_only else (w, jnp.zeros((0, 0), arr.dtype))
    x = arr if isinstance(arr, jax.Array) or traced else jnp.asarray(arr)
    check = bool(check_finite) and traced
    want = None if (lo, hi) == (0, n - 1) else (lo, hi)
    program = _eigh_program(n, np.dtype(arr.dtype), m, bool(lower), not eigvals_only, check, want)
    w, v, good = program(x)
    w = w[lo : hi + 1] if (lo, hi) != (0, n - 1) or w.shape[0] != n else w
    if eigvals_only:
        return _finish(where, w, good, traced, ok)
    if (lo, hi) != (0, n - 1):
        v = v[:, lo : hi + 1]
    v = _back(v, m, held, (n, hi + 1 - lo))
    return _finish(where, (w, v), good, traced, ok)


def _subset(where: str, subset: Any, n: int) -> tuple[int, int]:
    if subset is None:
        return 0, n - 1
    try:
        lo, hi = (int(i) for i in subset)
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}: subset_by_index={subset!r} is not a pair of ints (lo, hi)"
        ) from None
    if not 0 <= lo <= hi < n:
        raise ValueError(
            f"{where}: subset_by_index={subset!r} is out of range for n={n}; pass "
            f"0 <= lo <= hi <= {n - 1}"
        )
    return lo, hi


def eigvalsh(
    a: ArrayInput,
    /,
    *,
    lower: bool = True,
    subset_by_index: tuple[int, int] | None = None,
    check_finite: bool = True,
    mesh: AnyMesh | None = None,
    spec: Any = None,
) -> jax.Array:
    """Eigenvalues of a sharded Hermitian matrix, ascending: :func:`eigh` with ``eigvals_only=True``.

    Example:
      >>> import shardkit
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(np.diag(np.arange(16.0, dtype=np.float32)), mesh=m, spec="x")
      >>> np.allclose(eigvalsh(a), np.arange(16.0), atol=1e-4)
      True
    """
    return eigh(
        a,
        lower=lower,
        eigvals_only=True,
        subset_by_index=subset_by_index,
        check_finite=check_finite,
        mesh=mesh,
        spec=spec,
    )


def _tall_sizes(rows: int, cols: int, p: int) -> tuple[int, int]:
    """Padded ``(M, N)``: ``N`` to a multiple of ``p``, one new row per new column."""
    big_n = _round_up(cols, p)
    return _round_up(rows + big_n - cols, p), big_n


def _border(x: jax.Array, shape: tuple[int, int], d: jax.Array, ax: tuple[str, ...]) -> jax.Array:
    """Rows of ``[[a, 0], [0, d I], [0, 0]]`` from those of ``a`` padded with zeros."""
    rows, big_n = x.shape
    if big_n == shape[1]:
        return x
    g = row_index(rows, ax)[:, None] - shape[0]
    c = jnp.arange(big_n, dtype=jnp.int32)[None, :] - shape[1]
    return jnp.where((g == c) & (c >= 0), d.astype(x.dtype), x)


def _padded(a: jax.Array, big_m: int, big_n: int) -> jax.Array:
    rows, cols = a.shape
    if (rows, cols) == (big_m, big_n):
        return a
    return jnp.pad(a, ((0, big_m - rows), (0, big_n - cols)))


def _sym(h: jax.Array, ax: tuple[str, ...], p: int) -> jax.Array:
    return (h + adjoint(after(h, h), ax, p)) / 2


@cached
def _polar_program(rows: int, cols: int, dtype: Any, m: AnyMesh, big: bool, check: bool) -> Any:
    """``(u, p)`` of a tall or square ``rows x cols`` matrix; ``p`` is ``u^H a`` (``cols``
    square) or, with ``big``, ``a u^H`` (``rows`` square)."""
    ax, p, rows_spec = _rows(m)
    big_m, big_n = _tall_sizes(rows, cols, p)
    prob = DC(big_n, big_n, p, ax, base_size(p), True)

    def via_svd(u: jax.Array, x: jax.Array) -> jax.Array:
        """``W V^H`` from ``x = W diag(s) V^H``, ``W`` completed (rank-deficient ``x``)."""
        h = _sym(ring_gram(u, after(x, u), ax, p), ax, p)
        _, v, _ = eigh_local(h, prob)
        left = _complete(ring_matmul(after(u, v), v, ax, p), big_n, ax)
        return ring_matmul(left, adjoint(after(v, left), ax, p), ax, p)

    def body(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        x, ok = _checked(x, ax, check)
        # The border's singular value lies above a's: its vectors never mix with a's.
        x = _border(x, (rows, cols), 2 * frobenius(x, ax) + 1, ax)
        u, _ = polar_local(x, ax, p)
        # QDWH maps a null space to zero: a numerically rank-deficient x leaves u short
        # of orthonormal columns (||u||_F^2 < n); u then comes from the SVD instead.
        # (A false alarm only costs time: the SVD route is right for any x.)
        eps = float(jnp.finfo(x.dtype).eps)
        short = frobenius(u, ax) ** 2 < big_n * (1 - 100 * eps)
        u = jax.lax.cond(short, via_svd, lambda u, x: u, u, x)
        h = ring_outer(after(x, u), u, ax, p) if big else ring_gram(u, after(x, u), ax, p)
        h = _sym(h, ax, p)
        return after(u, h), h, ok

    run = jax.shard_map(
        body,
        mesh=m,
        in_specs=rows_spec,
        out_specs=(rows_spec, rows_spec, PartitionSpec()),
        check_vma=False,
    )

    def program(a: jax.Array) -> tuple[jax.Array, ...]:
        x = place(_padded(a, big_m, big_n), m, rows_spec)
        with jax.default_matmul_precision("highest"):
            return run(x)

    return jax.jit(program)


def polar(
    a: ArrayInput,
    /,
    side: Literal["right", "left"] = "right",
    *,
    check_finite: bool = True,
    mesh: AnyMesh | None = None,
    spec: Any = None,
) -> tuple[jax.Array, jax.Array]:
    """Polar decomposition ``a = u p`` (``side="right"``) or ``a = p u`` of a sharded matrix.

    SciPy's signature and result: ``u`` has orthonormal columns (the nearest such
    matrix to ``a``), ``p`` is Hermitian positive semi-definite (``n x n`` for
    ``"right"``, ``m x m`` for ``"left"``). Computed by QDWH (see
    :mod:`shardkit.linalg._qdwh`): 4 to 5 Halley iterations (QR-based, then
    Cholesky-based) on the matrix split by rows over the mesh, then one product for
    ``p``; never gathered. A wide ``a`` goes through its adjoint.

    For a numerically rank-deficient ``a`` QDWH maps the null space to zero; ``u``
    then comes from the singular value decomposition (with the basis completed, as
    :func:`svd` does), at about the cost of one :func:`eigh` more.

    Args:
      a: ``(m, n)`` matrix (any shape: ``u`` is ``m x n``, with orthonormal columns
        when ``m >= n`` and orthonormal rows when ``m < n``).
      side: ``"right"`` (scipy's default) or ``"left"``.
      check_finite: eagerly raise on inf or NaN (NaN results under ``jax.jit``).
      mesh, spec: where ``a`` lives when it does not say so itself (host data).

    Returns:
      ``(u, p)``, ``u`` on ``a``'s layout.

    Raises:
      ValueError: bad ``side``, infs or NaNs, unknown layout.

    Example:
      >>> import shardkit
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.diag(np.arange(1.0, 17.0, dtype=np.float32)), mesh=m, spec="x,y")
      >>> u, p = polar(a)
      >>> np.allclose(u, np.eye(16), atol=1e-4), np.allclose(p, a, atol=1e-3)
      (True, True)
    """
    if side not in ("right", "left"):
        raise ValueError(f"polar: side={side!r} is not one of ['right', 'left']")
    arr, m, held = _operand("polar", a, mesh, spec, square=False)
    rows, cols = (int(s) for s in arr.shape)
    traced = is_traced(arr)
    ok = None if traced else require_finite("polar", check_finite, a=arr)
    x = arr if isinstance(arr, jax.Array) or traced else jnp.asarray(arr)
    if min(rows, cols) == 0:
        k = cols if side == "right" else rows
        return jnp.zeros((rows, cols), arr.dtype), jnp.zeros((k, k), arr.dtype)
    # A wide matrix through its adjoint a^H = u' p': u = u'^H, and the Hermitian factor
    # asked for is u' a (n x n) or a u'^H... both a product of the tall problem's own.
    wide = rows < cols
    if wide:
        x = jnp.conj(x.T)
        rows, cols = cols, rows
    big = (side == "left") != wide
    check = bool(check_finite) and traced
    u, h, good = _polar_program(rows, cols, np.dtype(arr.dtype), m, big, check)(x)
    # The two moves back run one after the other (see _checked on unordered collectives).
    u = _back(u, m, None if wide else held, (rows, cols))
    k = rows if big else cols
    h = _back(_then(h, u), m, held if rows == cols and not wide else None, (k, k))
    if wide:
        u = jnp.conj(u.T)
    return nan_unless((u, h), good if traced else ok)


@cached
def _svd_program(
    rows: int, cols: int, dtype: Any, m: AnyMesh, vectors: bool, check: bool, full: bool = False
) -> Any:
    ax, p, rows_spec = _rows(m)
    big_m, big_n = _tall_sizes(rows, cols, p)
    prob = DC(big_n, big_n, p, ax, base_size(p), vectors)
    # Ascending eigenvalues of H: the real ones first, the border's (above them) last.
    order = np.concatenate([np.arange(cols)[::-1], np.arange(cols, big_n)])

    def body(x: jax.Array) -> tuple[jax.Array, ...]:
        x, ok = _checked(x, ax, check)
        x = _border(x, (rows, cols), 2 * frobenius(x, ax) + 1, ax)
        u, _ = polar_local(x, ax, p)
        h = _sym(ring_gram(u, after(x, u), ax, p), ax, p)
        lam, v, good = eigh_local(h, prob)
        good = good & ok
        s = jnp.maximum(lam[order], 0)
        if not vectors:
            return s, good
        v = after(v[:, order], s)
        left = ring_matmul(after(u, v), v, ax, p)
        if full:  # u square: its columns past cols complete the basis
            left = _complete(_square(left, rows, cols, big_m, ax), big_m, ax)
        else:
            left = _complete(left, cols, ax)
        vh = adjoint(after(v, left), ax, p)
        return s, after(left, vh), vh, good

    rep = PartitionSpec()
    run = jax.shard_map(
        body,
        mesh=m,
        in_specs=rows_spec,
        out_specs=(rep, rows_spec, rows_spec, rep) if vectors else (rep, rep),
        check_vma=False,
    )

    def program(a: jax.Array) -> tuple[jax.Array, ...]:
        x = place(_padded(a, big_m, big_n), m, rows_spec)
        with jax.default_matmul_precision("highest"):
            return run(x)

    return jax.jit(program)


def _square(u: jax.Array, rows: int, cols: int, big_m: int, ax: tuple[str, ...]) -> jax.Array:
    """Rows of the ``M x M`` matrix ``[u[:, :cols], 0, I]``: zero columns up to ``rows``
    (for :func:`_complete` to fill), then the padding rows' unit vectors."""
    loc = u.shape[0]
    lanes = jnp.arange(big_m, dtype=jnp.int32)
    unit = (row_index(loc, ax)[:, None] == lanes[None, :]) & (lanes[None, :] >= rows)
    body = jnp.pad(u[:, :cols], ((0, 0), (0, big_m - cols)))
    return jnp.where(unit, jnp.ones((), u.dtype), body)


def _complete(u: jax.Array, cols: int, ax: tuple[str, ...]) -> jax.Array:
    """``u`` with its columns of norm below 0.9 (zero singular values) made orthonormal.

    QDWH maps a null space to zero, so ``U_p V`` lacks those columns: they are
    replaced by random ones and the whole ``u`` goes through one QR (its good columns
    come back unchanged, up to the phase fixed here). Skipped (a replicated cond) when
    every column is whole.
    """
    norms = psum(jnp.sum(jnp.abs(u) ** 2, axis=0), ax)
    lanes = jnp.arange(u.shape[1])
    # Columns QDWH left short (squared norm below 0.81) belong to singular values it
    # could not lift, at most about eps ||a||: any orthonormal completion will do.
    bad = (norms < 0.81) & (lanes < cols)

    def fix(u: jax.Array) -> jax.Array:
        key = jax.random.fold_in(jax.random.PRNGKey(1), jax.lax.axis_index(ax))
        noise = jax.random.normal(key, u.shape).astype(u.dtype)
        x = jnp.where(bad[None, :], noise, u)
        # Whole columns first: Gram-Schmidt keeps them, the new ones fill the rest.
        order = jnp.argsort(bad, stable=True)
        q = row_qr(x[:, order], (x.shape[0],), ax, panel_width(x.shape[0], x.shape[1]))
        q = q[:, jnp.argsort(order)]
        dots = psum(jnp.sum(jnp.conj(q) * u, axis=0), ax)
        phase = jnp.where(jnp.abs(dots) > 0.5, dots / jnp.maximum(jnp.abs(dots), 1e-30), 1)
        return q * phase.astype(q.dtype)[None, :]

    return jax.lax.cond(jnp.any(bad), fix, lambda u: u, u)


def svd(
    a: ArrayInput,
    /,
    full_matrices: bool = True,
    compute_uv: bool = True,
    *,
    check_finite: bool = True,
    mesh: AnyMesh | None = None,
    spec: Any = None,
) -> Any:
    """Singular value decomposition ``a = u @ diag(s) @ vh`` of a sharded matrix, never gathered.

    SciPy's result: singular values descending, ``u`` ``(m, m)`` and ``vh`` ``(n, n)``
    (``(m, k)`` and ``(k, n)``, ``k = min(m, n)``, with ``full_matrices=False``). Computed as the polar decomposition
    ``a = u_p h`` (QDWH), the eigendecomposition ``h = v diag(s) v^H``
    (:func:`eigh`'s divide and conquer) and one ring product ``u = u_p v``; a wide
    matrix through its adjoint. Columns of ``u`` for zero singular values are
    completed to an orthonormal basis.

    Args:
      a: ``(m, n)`` matrix.
      full_matrices: scipy's default True: a square ``u`` (``m x m``) and ``vh``
        (``n x n``), the columns past ``min(m, n)`` an orthonormal completion (one QR
        of the square factor's rows, ``m^2 / p`` elements per device). False: the
        economic factors; for a square ``a`` both agree.
      compute_uv: False returns ``s`` alone (as :func:`svdvals`).
      check_finite: eagerly raise on inf or NaN (NaN results under ``jax.jit``).
      mesh, spec: where ``a`` lives when it does not say so itself (host data).

    Returns:
      ``(u, s, vh)`` (``s`` replicated), or ``s``.

    Raises:
      ValueError: infs or NaNs, unknown layout, not a matrix.

    Example:
      >>> import shardkit
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.diag(np.arange(16.0, dtype=np.float32)), mesh=m, spec="x,y")
      >>> u, s, vh = svd(a)
      >>> np.allclose(s, np.arange(16.0)[::-1], atol=1e-4)
      True
    """
    where = "svd" if compute_uv else "svdvals"
    arr, m, held = _operand(where, a, mesh, spec, square=False)
    rows, cols = (int(s) for s in arr.shape)
    full = bool(compute_uv and full_matrices and rows != cols)
    traced = is_traced(arr)
    ok = None if traced else require_finite(where, check_finite, a=arr)
    x = arr if isinstance(arr, jax.Array) or traced else jnp.asarray(arr)
    if min(rows, cols) == 0:
        s = jnp.zeros((0,), jnp.finfo(arr.dtype).dtype)
        if not compute_uv:
            return s
        if full:
            return jnp.eye(rows, dtype=arr.dtype), s, jnp.eye(cols, dtype=arr.dtype)
        return jnp.zeros((rows, 0), arr.dtype), s, jnp.zeros((0, cols), arr.dtype)
    wide = rows < cols
    if wide:
        x = jnp.conj(x.T)
        rows, cols = cols, rows
    check = bool(check_finite) and traced
    out = _svd_program(rows, cols, np.dtype(arr.dtype), m, compute_uv, check, full)(x)
    if not compute_uv:
        s, good = out
        return _finish(where, s[:cols], good, traced, ok)
    s, u, vh, good = out
    s = s[:cols]
    u = _back(u, m, held if not wide else None, (rows, rows if full else cols))
    vh = _back(_then(vh, u), m, None, (cols, cols))
    if wide:
        u, vh = jnp.conj(vh.T), jnp.conj(u.T)
    return _finish(where, (u, s, vh), good, traced, ok)


def svdvals(
    a: ArrayInput,
    /,
    *,
    check_finite: bool = True,
    mesh: AnyMesh | None = None,
    spec: Any = None,
) -> jax.Array:
    """Singular values of a sharded matrix, descending: :func:`svd` with ``compute_uv=False``.

    Example:
      >>> import shardkit
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(np.diag(np.arange(16.0, dtype=np.float32)), mesh=m, spec="x")
      >>> np.allclose(svdvals(a), np.arange(16.0)[::-1], atol=1e-4)
      True
    """
    return svd(a, compute_uv=False, check_finite=check_finite, mesh=mesh, spec=spec)
