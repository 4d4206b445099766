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

**Cost.** About ``10 (M + N) N^2 / p`` flops per device per QDWH iteration (6 to 10
iterations); eigh runs one polar decomposition of the whole matrix per level (about
``log2(p / t)`` levels for balanced splits, see :func:`~shardkit.linalg._dc.base_size`),
which is several times LAPACK's flops: the price of never gathering the matrix.
Memory: at most a few shares per device (a share is ``N^2 / p`` elements).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from shardkit.layout.internal import is_traced, mesh_summary, placement, spec_summary, to_pspec
from shardkit.linalg._blockcyclic import AnyMesh, axis_index, place, psum
from shardkit.linalg._dc import DC, base_size, eigh_local
from shardkit.linalg._dtype import as_inexact
from shardkit.linalg._inputs import ArrayInput, nan_unless, require_finite
from shardkit.linalg._qdwh import _qr_q, polar_local, stack_layout
from shardkit.linalg._rows import adjoint, ring_gram, ring_matmul, row_index

__all__ = ["eigh", "eigvalsh", "polar", "svd", "svdvals"]


class SpectralError(np.linalg.LinAlgError):
    """The divide and conquer could not split the spectrum finely enough (a status)."""


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
    found = placement(a, mesh=mesh, spec=spec)
    if found.mesh is None:
        raise ValueError(
            f"{where}: cannot tell where a (shape={shape}) lives: it is host data and no "
            "mesh= was given. Shard it with shardkit.shard(a, mesh, 'x,y'), or pass "
            "mesh=... (and spec=...)."
        )
    m = found.mesh
    for axis in (e for entry in (found.spec or ()) for e in entry):
        if axis not in m.axis_names:
            raise ValueError(
                f"{where}: spec={spec_summary(to_pspec(found.spec))} names axis {axis!r}, "
                f"not an axis of {mesh_summary(m)}"
            )
    held = None
    if found.spec is not None and any(found.spec):
        held = to_pspec(found.spec)
    return a, m, held


def _back(x: jax.Array, m: AnyMesh, held: PartitionSpec | None, shape: tuple[int, int]) -> Any:
    """``x[:shape]`` on the caller's layout (see the module docstring)."""
    if tuple(x.shape) != shape:
        x = place(x, m, PartitionSpec())[: shape[0], : shape[1]]
        return x
    if held is not None:
        return place(x, m, held)
    return x


def _rows(m: AnyMesh) -> tuple[tuple[str, ...], int, PartitionSpec]:
    ax = tuple(m.axis_names)
    return ax, int(math.prod(m.shape[a] for a in ax)), PartitionSpec(ax, None)


def _hermitian(x: jax.Array, lower: bool, n: int, fill: jax.Array, ax: Any, p: int) -> jax.Array:
    """Rows of the Hermitian matrix read from ``x``'s ``lower`` triangle (padding: ``fill``)."""
    rows, big = x.shape
    g = row_index(rows, ax)[:, None]
    c = jnp.arange(big, dtype=jnp.int32)[None, :]
    strict = jnp.where(g > c if lower else g < c, x, 0)
    diag = jnp.where(g == c, jnp.real(x).astype(x.dtype), 0)
    pad = jnp.where((g == c) & (g >= n), fill.astype(x.dtype), 0)
    return strict + adjoint(strict, ax, p) + jnp.where(g < n, diag, 0) + pad


@functools.lru_cache(maxsize=32)
def _eigh_program(
    n: int, dtype: Any, m: AnyMesh, lower: bool, vectors: bool
) -> Any:
    ax, p, rows_spec = _rows(m)
    big = _round_up(n, p)
    prob = DC(
        big,
        p,
        ax,
        base_size(p),
        vectors,
        _square_layout(m, ax, big, dtype),
        stack_layout(m, ax, big, big, dtype),
    )

    def body(x: jax.Array, fill: jax.Array) -> tuple[jax.Array, ...]:
        h = _hermitian(x, lower, n, fill, ax, p)
        return eigh_local(h, prob)

    run = jax.shard_map(
        body,
        mesh=m,
        in_specs=(rows_spec, PartitionSpec()),
        out_specs=(PartitionSpec(), rows_spec if vectors else PartitionSpec(), PartitionSpec()),
        check_vma=False,
    )

    def program(a: jax.Array) -> tuple[jax.Array, ...]:
        fill = 4 * jnp.linalg.norm(a) + 1
        if big != n:
            a = jnp.pad(a, ((0, big - n), (0, big - n)))
        with jax.default_matmul_precision("highest"):
            return run(place(a, m, rows_spec), fill)

    return jax.jit(program)


def _square_layout(m: AnyMesh, ax: tuple[str, ...], n: int, dtype: Any) -> Any:
    from shardkit.linalg._qr import DEFAULT_PANEL, _layout

    struct = jax.ShapeDtypeStruct(
        (n, n), dtype, sharding=NamedSharding(m, PartitionSpec(ax, None))
    )
    return _layout("eigh", struct, None, None, DEFAULT_PANEL)


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
        to return (scipy's convention).
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
      >>> a = shardkit.shard(np.diag(np.arange(16.0, dtype=np.float32)), m, "x,y")
      >>> w, v = eigh(a)
      >>> np.allclose(w, np.arange(16.0), atol=1e-4), v.sharding.spec
      (True, PartitionSpec('x', 'y'))
    """
    where = "eigvalsh" if eigvals_only else "eigh"
    a, m, held = _operand(where, a, mesh, spec, square=True)
    n = int(a.shape[0])
    lo, hi = _subset(where, subset_by_index, n)
    ok = require_finite(where, check_finite, a=a)
    if n == 0:
        w = jnp.zeros((0,), jnp.finfo(a.dtype).dtype)
        return w if eigvals_only else (w, jnp.zeros((0, 0), a.dtype))
    x = a if isinstance(a, jax.Array) or is_traced(a) else jnp.asarray(a)
    w, v, good = _eigh_program(n, np.dtype(a.dtype), m, bool(lower), not eigvals_only)(x)
    w = w[lo : hi + 1] if (lo, hi) != (0, n - 1) or w.shape[0] != n else w
    if eigvals_only:
        return _finish(where, w, good, is_traced(a), ok)
    v = _back(v, m, held, (n, n))
    if (lo, hi) != (0, n - 1):
        v = v[:, lo : hi + 1]
    return _finish(where, (w, v), good, is_traced(a), ok)


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
      >>> a = shardkit.shard(np.diag(np.arange(16.0, dtype=np.float32)), m, "x")
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
