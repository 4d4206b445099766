"""A cheap estimate of ``1 / kappa`` of a distributed upper triangular factor, no gather.

The diagonal of a triangular ``r`` can look benign while ``r`` is nearly singular
(Kahan's matrix: ``r = diag(s^i) (I - c U)`` with ``U`` the strict upper triangle of
ones has ``min|r_jj| / max|r_jj| = s^(n-1)`` but a smallest singular value smaller by
many orders of magnitude). LAPACK estimates a triangular condition number with
``xTRCON``; here a few steps of inverse power iteration on ``(r^H r)^-1`` do it, each
two triangular solves on the sharded ``r`` (:func:`shardkit.linalg._triangular.substitute`:
``O(n^2 / P)`` flops and ``n / nb`` small all-reduces each, nothing of matrix size
moves). Power iteration converges towards ``||r^-1||_2`` from below, so the estimate
``sigma_min <= est`` is an upper bound, as is the ratio to the largest column norm
(a lower bound on ``sigma_max``); on random and Kahan matrices two steps land within a
factor of 10 of ``sigma_min / sigma_max``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.linalg import solve_triangular as _local_trsm

from shardkit.linalg._blockcyclic import Plan, after, local_tables
from shardkit.linalg._triangular import substitute

__all__ = ["POWER_STEPS", "inverse_condition"]

POWER_STEPS = 2
"""Inverse power steps of :func:`inverse_condition` (two triangular solves each)."""


def inverse_condition(r: jax.Array, plan: Plan | None, used: int) -> jax.Array:
    """An upper bound on ``sigma_min / sigma_max`` of ``r[:used, :used]``, inside ``shard_map``.

    Args:
      r: this device's block of the upper triangular ``r`` (the whole ``r`` when
        ``plan`` is None), in natural order.
      plan: the natural-order plan of ``r``'s layout, or None for a replicated ``r``.
      used: the leading order to estimate; rows and columns past it are a padded border
        that ``r`` keeps apart (block diagonal), left out by starting there at zero.

    Returns:
      The replicated estimate (real); 0 or NaN when ``r`` is singular or not finite.
    """
    n = plan.n if plan is not None else r.shape[0]
    start = np.zeros((n, 1))
    start[:used, 0] = np.random.default_rng(0).standard_normal(used)
    x = jnp.asarray(start / np.linalg.norm(start), r.dtype)
    if plan is None:

        def solve(rhs: jax.Array, adjoint: bool) -> jax.Array:
            return _local_trsm(r, rhs, lower=False, trans=2 if adjoint else 0)

        colsq = jnp.sum(jnp.abs(r) ** 2, axis=0)
        top = jnp.max(colsq)
    else:
        tab = local_tables(plan)

        def solve(rhs: jax.Array, adjoint: bool) -> jax.Array:
            if adjoint:  # r^H y = x  <=>  r^T conj(y) = conj(x)
                y = substitute(r, jnp.conj(rhs), plan, tab, lower=False, unit=False, trans=True)
                return jnp.conj(y)
            return substitute(r, rhs, plan, tab, lower=False, unit=False, trans=False)

        colsq = jnp.sum(jnp.abs(r) ** 2, axis=0)
        colsq = lax.psum(colsq, plan.row_axes) if plan.row_axes else colsq
        top = jnp.max(colsq)
        top = lax.pmax(top, plan.col_axes) if plan.col_axes else top
    grow = jnp.ones((), top.dtype)
    x = after(x, top)  # the solves' collectives after top's (one chain; see after())
    for _ in range(POWER_STEPS):
        z = solve(solve(x, True), False)
        grow = jnp.linalg.norm(z)
        x = z / grow
    # ||(r^H r)^-1 x|| <= sigma_min^-2 for a unit x; the largest column norm <= sigma_max.
    return 1 / jnp.sqrt(grow * top)
