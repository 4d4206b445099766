"""The ``trsm-parts`` ablations of the ``qr`` suite: where a triangular solve's time goes.

A sharded ``solve_triangular`` pays for its local work (the products of each step's
block row with the solved part, the diagonal blocks' solves, the loop) and for its
collectives (one small all-reduce per block step: thread rendezvous between the
simulated devices), one after the other, since every step waits for the one before.
Each candidate here isolates one part, on the same ``n`` and right-hand sides:

``shardkit``
  :func:`shardkit.linalg.solve_triangular` on the case's mesh (as in ``trsm-k``).
``shardkit 1 device``
  The same algorithm on a one-device mesh: no collective, no rendezvous; the local
  work alone, against LAPACK's ``trsm`` (``scipy``).
``collectives only``
  The sweep's collectives alone, in the same order and shapes, each waiting for the
  one before: the diagonal blocks' all-reduce, then per block step the ``nb x nrhs``
  all-reduce (and, from ``SPLIT_RHS`` right-hand sides on, the all-gather of the
  solved block). Their sum with ``shardkit 1 device`` is the floor of this design.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from shardkit.linalg import solve_triangular
from shardkit.linalg.internal import DEFAULT_BLOCK, SPLIT_RHS, make_plan

__all__ = ["TRSM_NOT_SOLUTIONS", "trsm_ablation_candidates"]

TRSM_NOT_SOLUTIONS = frozenset({"collectives only"})
"""Candidates whose output is no solution (no residual is computed for them)."""


def _collectives_only(m: Any, spec: P, n: int, nrhs: int) -> Callable[..., jax.Array]:
    """The sweep's collectives on ``m`` for ``nrhs`` right-hand sides, chained by data."""
    rows_ax = (spec[0],) if spec[0] is not None else ()
    cols_ax = (spec[1],) if len(spec) > 1 and spec[1] is not None else ()
    axes = rows_ax + cols_ax
    nr = m.shape[rows_ax[0]] if rows_ax else 1
    nc = m.shape[cols_ax[0]] if cols_ax else 1
    plan = make_plan(n, rows_ax, cols_ax, nr, nc, DEFAULT_BLOCK, "natural")
    nb, devices = plan.nb, nr * nc
    split = nrhs >= SPLIT_RHS
    share = -(-nrhs // devices) if split else nrhs

    def local(a: jax.Array, b: jax.Array) -> jax.Array:
        s = lax.psum(jnp.full((plan.blocks, nb, nb), a[0, 0]), axes)[0, 0, 0]

        def step(_: jax.Array, s: jax.Array) -> jax.Array:
            s = lax.psum(jnp.full((nb, share * devices if split else nrhs), s), axes)[0, 0]
            if split:
                s = lax.all_gather(jnp.full((nb, share), s), axes, axis=1, tiled=True)[0, 0]
            return s

        s = lax.fori_loop(0, plan.blocks, step, s)
        return b + s

    return jax.shard_map(local, mesh=m, in_specs=(spec, P()), out_specs=P(), check_vma=False)


def _one_device(a: jax.Array, b: jax.Array) -> jax.Array:
    m1 = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
    return solve_triangular(a, b, lower=False, mesh=m1, spec=P("x", None), check_finite=False)


def trsm_ablation_candidates(m: Any, spec: P, n: int, nrhs: int) -> dict[str, Callable[..., Any]]:
    """The ablation's own candidates (``(a, b, a1, b1) -> out``) for the mesh ``m``."""
    coll = _collectives_only(m, spec, n, nrhs)
    return {
        "shardkit": lambda a, b, a1, b1: solve_triangular(
            a, b, lower=False, mesh=m, spec=spec, check_finite=False
        ),
        "shardkit 1 device": lambda a, b, a1, b1: _one_device(a1, b1),
        "collectives only": lambda a, b, a1, b1: coll(a, b),
    }
