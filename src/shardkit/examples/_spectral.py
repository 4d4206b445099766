"""Seed 002 continued: the eigendecomposition of a sharded symmetric matrix, never gathered.

``002/4.6`` decomposes a 128 x 128 symmetric matrix sharded over a 2x4 mesh with
:func:`shardkit.linalg.eigh` (QDWH-based spectral divide and conquer), checks the
eigenvalues against NumPy's and the eigenvectors by their residual and orthogonality,
and inspects the compiled program through :func:`shardkit.inspect.comms`: no
collective brings a device the whole matrix, where ``jnp.linalg.eigh`` on the same
input all-gathers all of it onto every device. (At this toy size the largest
collective, the all-gather of the QR panels' ``R`` factors, ``p b^2`` elements for
panels of width ``b = 32``, is half the matrix; ``b`` stays at most 64 as ``n`` grows.)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import comms
from shardkit.layout import format_bytes, mesh, shard
from shardkit.linalg import eigh


@scenario("002/4.6", "eigh of a sharded symmetric matrix, never gathered", seed="002")
def sharded_eigh(c: Checks) -> None:
    n = 128
    m = mesh("2x4", "x,y", axis_types="auto")
    g = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (n, n)), np.float32)
    a_np = (g + g.T) / 2
    a = shard(a_np, mesh=m, spec="x,y")
    w, v = eigh(a)
    c.show(v, "eigenvectors V of eigh(A), on A's layout")
    want = np.linalg.eigvalsh(a_np.astype(np.float64))
    scale = float(np.abs(want).max())
    c.close("eigenvalues equal NumPy's", w, want, dtype=np.float32, scale=scale)
    w64, v64, a64 = (np.asarray(x, np.float64) for x in (w, v, a_np))
    eps = float(np.finfo(np.float32).eps)
    resid = float(np.linalg.norm(a64 @ v64 - v64 * w64) / np.linalg.norm(a64)) / (n**0.5 * eps)
    orth = float(np.linalg.norm(v64.T @ v64 - np.eye(n))) / (n**0.5 * eps)
    c.check("||AV - V diag(w)|| / ||A|| within 50 sqrt(n) eps", resid <= 50, f"{resid:.1f}")
    c.check("||V^T V - I|| within 50 sqrt(n) eps", orth <= 50, f"{orth:.1f}")
    c.note(f"residual {resid:.2f} sqrt(n) eps, orthogonality {orth:.2f} sqrt(n) eps")

    sa = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, P("x", "y")))
    ours = comms(lambda x: eigh(x), sa)
    theirs = comms(jnp.linalg.eigh, sa)
    share = n * n * 4 // m.size

    def biggest(report: Any) -> int:
        return max(max(int(np.prod(s)) for s in col.result_shapes) for col in report.collectives)

    c.check(
        "no collective brings a device the whole matrix",
        biggest(ours) < n * n,
        f"largest collective result {biggest(ours)} elements, A has {n * n}",
    )
    c.check(
        "jnp.linalg.eigh all-gathers the whole matrix",
        "all-gather" in theirs.kinds and biggest(theirs) >= n * n,
        str(theirs),
    )
    c.note(
        f"largest collective result: shardkit {biggest(ours)} elements, "
        f"jnp.linalg.eigh {biggest(theirs)} (A has {n * n})"
    )
    assert ours.memory is not None
    assert theirs.memory is not None
    c.note(
        f"peak memory per device: shardkit {format_bytes(ours.memory.peak_bytes)}, "
        f"jnp.linalg.eigh {format_bytes(theirs.memory.peak_bytes)} "
        f"(the device's share of A is {format_bytes(share)})"
    )
    c.items.append(ours)


SCENARIOS = (sharded_eigh,)
"""This module's scenarios, in tour order."""
