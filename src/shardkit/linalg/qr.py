"""Tall-skinny QR (TSQR) of a row-sharded matrix, and least squares through it.

Each device factors its own ``(m / R) x n`` rows (``q_i r_i``); one all-gather of the
``R`` small ``n x n`` factors (``R n^2`` elements, independent of ``m``) and a QR of
their stack give ``r`` on every device and the ``n x n`` block that turns ``q_i`` into
the device's rows of ``q``. Stable like Householder QR (no Gram matrix is formed).

Not implemented: QR of square or wide matrices (blocked Householder / CholeskyQR2 on
the block-cyclic layout); :func:`qr` raises ``NotImplementedError`` for them.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular as _local_trsm
from jax.sharding import PartitionSpec

from shardkit.linalg._blockcyclic import AnyMesh, axis_index, dslice, place, psum, resolve

__all__ = ["lstsq", "qr"]


def _tsqr_local(a: jax.Array, rows: tuple[str, ...]) -> tuple[jax.Array, jax.Array]:
    n = a.shape[1]
    q1, r1 = jnp.linalg.qr(a)
    if not rows:
        return q1, r1
    stack = jax.lax.all_gather(r1, rows, tiled=True)  # (R n, n)
    q2, r = jnp.linalg.qr(stack)
    mine = dslice(q2, (axis_index(rows) * n, 0), (n, n))
    return q1 @ mine, r


def _layout(
    where: str, a: Any, mesh: AnyMesh | None, spec: Any
) -> tuple[AnyMesh, PartitionSpec, tuple[str, ...]]:
    m, p, rows, cols = resolve(where, a, mesh, spec, square=False)
    big, n = a.shape
    parts = math.prod(m.shape[x] for x in rows)
    if cols or big // parts < n:
        raise NotImplementedError(
            f"{where}: only tall-skinny QR (TSQR) is implemented: a.shape={tuple(a.shape)} "
            f"with spec={p} gives {parts} row blocks of {big // parts} x {n // max(1, math.prod(m.shape[x] for x in cols))}; "
            "TSQR needs the columns unsplit and each row block at least as tall as n. "
            "Square QR (blocked Householder / CholeskyQR2) is not implemented; use "
            "shardkit.linalg.solve for square systems."
        )
    return m, p, rows


@functools.lru_cache(maxsize=64)
def _qr_program(mesh: AnyMesh, spec: PartitionSpec, rows: tuple[str, ...]) -> Any:
    return jax.jit(
        jax.shard_map(
            lambda a: _tsqr_local(a, rows),
            mesh=mesh,
            in_specs=spec,
            out_specs=(spec, PartitionSpec()),
            check_vma=False,
        )
    )


def qr(a: Any, /, *, mesh: AnyMesh | None = None, spec: Any = None) -> tuple[jax.Array, jax.Array]:
    """Reduced QR of a tall-skinny row-sharded matrix (TSQR), like ``jnp.linalg.qr``.

    Communication: one all-gather of ``R`` blocks of ``n x n`` over the row axes.
    Memory per device: its rows plus ``O(R n^2)``.

    Args:
      a: ``(M, n)`` sharded ``P(rows, None)`` with ``M / R >= n``.
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.

    Returns:
      ``(q, r)``: ``q`` ``(M, n)`` sharded like ``a``, ``r`` ``(n, n)`` replicated.

    Raises:
      NotImplementedError: ``a`` is not tall-skinny, or its columns are split.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a_np = np.random.default_rng(0).standard_normal((64, 4))
      >>> q, r = shardkit.linalg.qr(shardkit.shard(a_np, m, "x,None"))
      >>> bool(np.allclose(np.asarray(q) @ np.asarray(r), a_np)), bool(np.allclose(np.asarray(q).T @ np.asarray(q), np.eye(4)))
      (True, True)
    """
    a = a if isinstance(a, jax.Array) else jnp.asarray(a)
    m, p, rows = _layout("qr", a, mesh, spec)
    return _qr_program(m, p, rows)(place(a, m, p))


@functools.lru_cache(maxsize=64)
def _lstsq_program(mesh: AnyMesh, spec: PartitionSpec, rows: tuple[str, ...]) -> Any:
    def body(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
        q, r = _tsqr_local(a, rows)
        qtb = psum(q.T @ b, rows)
        x = _local_trsm(r, qtb, lower=False)
        res = psum(jnp.sum((a @ x - b) ** 2, axis=0), rows)
        s = jnp.linalg.svd(r, compute_uv=False)
        return x, res, s

    rep = PartitionSpec()
    return jax.jit(
        jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(spec, PartitionSpec(spec[0], None)),
            out_specs=(rep, rep, rep),
            check_vma=False,
        )
    )


def lstsq(
    a: Any, b: Any, /, *, mesh: AnyMesh | None = None, spec: Any = None
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Least squares ``min ||a x - b||`` for tall-skinny row-sharded ``a``, like ``jnp.linalg.lstsq``.

    Through TSQR: ``x = r^-1 q^T b`` (one extra ``n x nrhs`` all-reduce). Full column
    rank is assumed (as QR-based least squares does); ``rank`` counts the singular
    values of ``r`` above ``max(M, n) * eps * s_max``.

    Args:
      a: ``(M, n)`` sharded ``P(rows, None)``, ``M / R >= n``.
      b: ``(M,)`` or ``(M, nrhs)``.
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.

    Returns:
      ``(x, residuals, rank, s)`` as ``jnp.linalg.lstsq`` (``residuals``: squared norms).

    Raises:
      NotImplementedError: ``a`` is not tall-skinny, or its columns are split.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a_np = np.random.default_rng(0).standard_normal((64, 3))
      >>> x, res, rank, s = shardkit.linalg.lstsq(shardkit.shard(a_np, m, "x,None"), a_np @ np.ones(3))
      >>> bool(np.allclose(np.asarray(x), 1)), int(rank)
      (True, 3)
    """
    a = a if isinstance(a, jax.Array) else jnp.asarray(a)
    m, p, rows = _layout("lstsq", a, mesh, spec)
    b = jnp.asarray(b, a.dtype)
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(f"lstsq: b.shape={tuple(b.shape)} does not fit a.shape={tuple(a.shape)}")
    b2 = b[:, None] if b.ndim == 1 else b
    b2 = place(b2, m, PartitionSpec(p[0], None))
    x, res, s = _lstsq_program(m, p, rows)(place(a, m, p), b2)
    tol = max(a.shape) * jnp.finfo(a.dtype).eps * s[0]
    rank = jnp.sum(s > tol).astype(jnp.int32)
    if b.ndim == 1:
        return x[:, 0], res, rank, s
    return x, res, rank, s
