"""The ``solve-parts`` ablation of the ``linalg`` suite: where the distributed LU's time goes.

On this machine the simulated devices share two cores, so a distributed ``solve`` pays
for the algorithm (panel steps, pivots, tiled updates), for the collectives (thread
rendezvous between simulated devices) and for XLA's CPU matmuls (small tiles on one
thread each) at once. Each candidate here isolates one part, on the same ``n``:

``shardkit``
  :func:`shardkit.linalg.solve` on the case's mesh (as in the ``solve`` case).
``shardkit 1 device``
  The same algorithm on a one-device mesh: no collective, no rendezvous; the
  algorithm's own overhead over LAPACK.
``collectives only``
  The collectives of the mesh's LU alone (on the grid ``solve`` moves a
  one-dimensional split to, after the same move), in the same order and shapes, each one
  waiting for the one before (row exchanges, U rows, panel broadcast, tournament
  all-gather and all-reduce per panel; the stages' shrinking widths): their cost.
``XLA tiles``
  The LU's trailing-update flops (about ``2 n^3 / 3``) as the same tiled matmuls
  (:func:`shardkit.linalg._tiles.active_update`), on one device: XLA's CPU dot
  throughput at the tile shape.
``BLAS gemm``
  The same flops as one SciPy BLAS ``gemm`` (``n x n/3 @ n/3 x n``) on the host: what
  one big call achieves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
from jax import lax
from jax.sharding import PartitionSpec as P

from shardkit.layout.internal import operand
from shardkit.linalg import solve
from shardkit.linalg.internal import (
    DEFAULT_BLOCK,
    DEFAULT_STAGES,
    active_update,
    grid_for,
    make_plan,
    to_grid,
)

__all__ = ["NOT_SOLUTIONS", "ablation_candidates"]

NOT_SOLUTIONS = frozenset({"collectives only", "XLA tiles", "BLAS gemm"})
"""Candidates whose output is no solution (no residual is computed for them)."""


def _one_device_solve(a: jax.Array, b: jax.Array) -> jax.Array:
    m1 = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
    return solve(a, b, mesh=m1, spec=P("x", None))


def _collectives_only(m: Any, spec: P, n: int) -> Callable[..., jax.Array]:
    """The LU's per-panel collectives on ``m`` (tournament pivoting), chained by data."""
    names = tuple(m.axis_names)
    rows_ax, cols_ax = (names[0],), names[1:]
    nr = m.shape[names[0]]
    nc = int(np.prod([m.shape[c] for c in cols_ax])) if cols_ax else 1
    plan = make_plan(n, rows_ax, cols_ax, nr, nc, DEFAULT_BLOCK, "cyclic")
    nb, rows_n, k = plan.nb, plan.m, plan.k

    def local(a: jax.Array) -> jax.Array:
        s = a[0, 0] * 0
        for s0, s1, lr, lc in plan.stage_bounds(DEFAULT_STAGES):
            rows, width = rows_n - lr * nb, k - lc * nb

            def step(_: jax.Array, s: jax.Array, rows: int = rows, width: int = width) -> Any:
                s = lax.psum(jnp.full((2 * nb, k + nb), s), rows_ax)[0, 0]  # row exchanges
                s = lax.psum(jnp.full((nb, width), s), rows_ax)[0, 0]  # U's rows
                if cols_ax:  # the panel along the mesh row
                    s = lax.psum(jnp.full((rows, nb), s), cols_ax)[0, 0]
                s = lax.all_gather(jnp.full((nb, nb + 1), s), rows_ax, tiled=True)[0, 0]
                return lax.psum(jnp.full((nb, nb + 1), s), rows_ax)[0, 0]  # the pivots

            s = lax.fori_loop(s0, s1, step, s)
        return jnp.zeros((a.shape[0],), a.dtype) + s

    out_rows = P(spec[0])
    return jax.shard_map(local, mesh=m, in_specs=spec, out_specs=out_rows, check_vma=False)


def _collectives_of_solve(m: Any, spec: P, n: int) -> Callable[..., jax.Array]:
    """:func:`_collectives_only` where ``solve`` factors: on its grid when it takes one,
    after the same move there."""
    progs: dict[Any, Any] = {}

    def run(a: jax.Array, b: jax.Array, a1: jax.Array, b1: jax.Array) -> jax.Array:
        g = grid_for(operand("solve", "a", a, mesh=m, spec=spec))
        if g is not None:
            a, where = to_grid(a, g), (g.mesh, g.spec)
        else:
            where = (m, spec)
        if where not in progs:
            progs[where] = _collectives_only(*where, n)
        return progs[where](a)

    return run


def _xla_tiles(a: jax.Array, nb: int = DEFAULT_BLOCK) -> jax.Array:
    """The LU's trailing updates (active corner, tiles) of an ``n x n`` block, one device."""
    n = a.shape[0]
    g = jnp.arange(n)

    def step(e: jax.Array, x: jax.Array) -> jax.Array:
        nxt = (e + 1) * nb
        act = g >= nxt
        left = jnp.where(act[:, None], x[:, :nb], 0) * 1e-3
        right = jnp.where(act[None, :], x[:nb, :], 0)
        lo = jnp.sum(~act)
        return active_update(x, left, right, (0, 0), lo, lo, nb=nb)

    return lax.fori_loop(0, n // nb - 1, step, a)[:, 0]


def _blas_gemm(a: jax.Array) -> jax.Array:
    """``2 n^3 / 3`` flops as one BLAS gemm on the host (through a callback)."""
    n = a.shape[0]

    def call(x: Any) -> np.ndarray:
        x = np.asarray(x)
        (gemm,) = sl.get_blas_funcs(("gemm",), (x,))
        return np.asarray(gemm(1.0, x[:, : n // 3], x[: n // 3, :])[:, 0], x.dtype)

    return jax.pure_callback(call, jax.ShapeDtypeStruct((n,), a.dtype), a)


def ablation_candidates(m: Any, spec: P, n: int) -> dict[str, Callable[..., Any]]:
    """The ablation's own candidates (``(a, b, a1, b1) -> out``) for the mesh ``m``."""
    return {
        "shardkit": lambda a, b, a1, b1: solve(a, b, mesh=m, spec=spec),
        "shardkit 1 device": lambda a, b, a1, b1: _one_device_solve(a1, b1),
        "collectives only": _collectives_of_solve(m, spec, n),
        "XLA tiles": lambda a, b, a1, b1: _xla_tiles(a1),
        "BLAS gemm": lambda a, b, a1, b1: _blas_gemm(a1),
    }
