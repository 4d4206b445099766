"""Wide and rectangular problems (``M < n``, or ``m != n`` for LU), beside the square kernels.

* :func:`wide_lstsq`: the minimum-norm solution of an underdetermined ``a x = b``
  without gathering ``a``: a Householder TSQR of ``a^H`` over ``a``'s column blocks
  gives the ``M x M`` factor ``r`` of ``a^H = q r`` (``q`` is never formed). With
  ``r = U S V^H``, ``x = q (r^H)^+ b = a^H V S^-2 V^H b`` (singular values at most
  ``rcond * s_max`` dropped, as ``numpy.linalg.lstsq``): one product with ``a^H``,
  done where ``a`` lives. Communication: an all-gather of each column block over
  the row axes (``M x (n / C)``), one of the ``C`` triangular factors
  (``C min(n / C, M) x M``), and ``(M / R) x nrhs`` and ``nrhs`` all-reduces for the
  residual. ``M`` is the narrow dimension, so every gathered piece is small beside
  ``a``. Rounding: ``x`` carries an error of about ``eps kappa(a)``, as a backward
  stable method.
* :func:`wide_qr`: ``a = q [r1, r2]`` for a wide ``a`` (SciPy's ``mode="economic"``:
  ``q`` is ``M x M``, ``r`` is ``M x n``). Each device all-gathers its row block over
  the column axes (``(M / R) x n``) and then the leading ``M x M`` block over the row
  axes; Householder QR of that block (replicated, so rank deficiency is no error, as
  in SciPy) gives ``q``; ``r = q^H a`` is formed per column block after one
  all-gather of each column block over the row axes (``M x (n / C)``). ``q`` comes
  back replicated, ``r`` with its columns split like ``a``'s. Sizes the mesh does not
  divide take :func:`replicated` instead.
* :func:`replicated`: a matrix laid out whole on every device of its mesh, the
  documented price of the rectangular factorizations (``qr`` of a wide ``a``,
  rectangular ``lu``) that have no distributed kernel: one all-gather of ``a``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from shardkit._programs import cached
from shardkit.layout.internal import Operand
from shardkit.linalg._blockcyclic import (
    AnyMesh,
    Spmd,
    axis_index,
    dslice,
    matrix_layout,
    place,
    psum,
)

__all__ = ["replicated", "wide_lstsq", "wide_qr"]


def replicated(a: Any, op: Operand) -> Any:
    """``a`` replicated on its mesh (one all-gather), or as is when it has no placement."""
    if op.mesh is None or op.spec is None:
        return a  # no layout known (host data, or traced on Auto axes): XLA places it
    return place(a, op.mesh, PartitionSpec())


@cached
def _wide_program(
    mesh: AnyMesh, spec: PartitionSpec, rows: tuple[str, ...], cols: tuple[str, ...], rcond: float
) -> Any:
    def body(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
        full = lax.all_gather(a, rows, axis=0, tiled=True) if rows else a  # (M, n / C)
        t = jnp.conj(full).T
        r = jnp.linalg.qr(t, mode="r")
        if cols:
            r = jnp.linalg.qr(lax.all_gather(r, cols, tiled=True), mode="r")
        _, s, vh = jnp.linalg.svd(r, full_matrices=False)
        keep = s > rcond * s[0]
        inv2 = jnp.where(keep, 1 / jnp.where(keep, s, 1) ** 2, 0).astype(a.dtype)
        w = jnp.conj(vh).T @ (inv2[:, None] * (vh @ b))
        x = t @ w  # this column group's rows of x
        ax = psum(a @ x, cols)
        mine = dslice(b, (axis_index(rows) * a.shape[0], 0), (a.shape[0], b.shape[1]))
        res = psum(jnp.sum(jnp.abs(ax - mine) ** 2, axis=0), rows)
        return x, res, s, jnp.sum(keep).astype(jnp.int32)

    rep = PartitionSpec()
    return Spmd(body, mesh, (spec, rep), (PartitionSpec(cols or None, None), rep, rep, rep))


def wide_lstsq(a: Any, op: Operand, b2: jax.Array, rcond: float) -> tuple[jax.Array, ...]:
    """``(x, residuals, rank, s)`` for a wide ``a`` (``M < n``), ``x`` replicated.

    Sizes the mesh does not divide get zero rows and columns (they add zero singular
    values, cut from ``s``, and zero rows of ``x``, cut too).
    """
    m, p, rows, cols = matrix_layout(op, pad=True)
    nr = math.prod(m.shape[x] for x in rows)
    nc = math.prod(m.shape[x] for x in cols)
    big, n = int(a.shape[0]), int(a.shape[1])
    bp, npad = -(-big // nr) * nr, -(-n // nc) * nc
    if (bp, npad) != (big, n):
        a = jnp.pad(place(a, m, PartitionSpec()), ((0, bp - big), (0, npad - n)))
        b2 = jnp.pad(b2, ((0, bp - big), (0, 0)))
    x, res, s, rank = _wide_program(m, p, rows, cols, rcond)(
        place(a, m, p), place(b2, m, PartitionSpec())
    )
    x = place(x, m, PartitionSpec())
    return x[:n], res, rank, s[:big]


@cached
def _wide_qr_program(
    mesh: AnyMesh, spec: PartitionSpec, rows: tuple[str, ...], cols: tuple[str, ...], big: int
) -> Any:
    def body(a: jax.Array) -> tuple[jax.Array, jax.Array]:
        mine = lax.all_gather(a, cols, axis=1, tiled=True) if cols else a  # (M / R, n)
        left = mine[:, :big]
        left = lax.all_gather(left, rows, axis=0, tiled=True) if rows else left
        q, _ = jnp.linalg.qr(left)
        block = lax.all_gather(a, rows, axis=0, tiled=True) if rows else a  # (M, n / C)
        r = jnp.conj(q).T @ block
        # Below the diagonal q^H a is rounding only: zeros there, as Householder's r.
        col = axis_index(cols) * r.shape[1] + jnp.arange(r.shape[1])[None, :]
        return q, jnp.where(jnp.arange(big)[:, None] <= col, r, 0)

    rep = PartitionSpec()
    return Spmd(body, mesh, spec, (rep, PartitionSpec(None, cols or None)))


def wide_qr(a: Any, op: Operand) -> tuple[jax.Array, jax.Array]:
    """``(q, r)`` of a wide ``a`` (``M < n``), as ``scipy.linalg.qr(a, mode="economic")``."""
    if op.mesh is None or op.spec is None:  # no layout known: XLA places it
        q, r = jnp.linalg.qr(a)
        return q, r
    m, p, rows, cols = matrix_layout(op, pad=True)
    nr = math.prod(m.shape[x] for x in rows)
    nc = math.prod(m.shape[x] for x in cols)
    big, n = int(a.shape[0]), int(a.shape[1])
    if big % nr or n % nc:
        q, r = jnp.linalg.qr(place(a, m, PartitionSpec()))
        return q, r
    q, r = _wide_qr_program(m, p, rows, cols, big)(place(a, m, p))
    return q, r
