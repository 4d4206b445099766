"""Seed 002's distributed linear solver: LU with cross-device pivoting, and batched solves.

The seed ends by asking how ``jnp.linalg.solve`` can run on a *distributed* matrix
(its own answer is a sequential, unpivoted-per-device LU). ``002/4.5`` answers with
:func:`shardkit.linalg.solve`: a block-cyclic right-looking LU whose pivots are
chosen over the whole column (tournament pivoting: one all-gather of candidate rows
per panel; ``pivoting="partial"`` gives LAPACK's pivots exactly), checked against
SciPy and inspected through
:func:`shardkit.inspect.comms` (no collective gathers the matrix, unlike
``jnp.linalg.solve`` on the same sharded input). ``002/2b`` redoes exercise 2 with
:func:`shardkit.linalg.batched_solve`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import comms
from shardkit.layout import format_bytes, mesh, shard
from shardkit.linalg import SingularMatrixError, batched_solve, lu, solve


def _backward_error(a: np.ndarray, x: np.ndarray, b: np.ndarray) -> float:
    a, x, b = (np.asarray(v, np.float64) for v in (a, x, b))
    return float(
        np.linalg.norm(a @ x - b) / (np.linalg.norm(a, 2) * np.linalg.norm(x) + np.linalg.norm(b))
    )


@scenario("002/4.5", "distributed linear solver: LU with pivoting across devices", seed="002")
def distributed_solve(c: Checks) -> None:
    n = 64
    m = mesh("2x4", "x,y", axis_types="auto")
    a_np = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (n, n)), np.float32)
    b_np = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (n,)), np.float32)
    a = shard(a_np, mesh=m, spec="x,y")
    x = solve(a, b_np, nb=8)
    c.show(x, "x = solve(A, b), rows sharded like A")
    ours = _backward_error(a_np, np.asarray(x), b_np)
    ref = _backward_error(a_np, sl.solve(a_np, b_np), b_np)
    c.check(
        "backward error within 2x of SciPy's",
        ours <= 2 * max(ref, 1e-8),
        f"{ours:.2e} vs {ref:.2e}",
    )
    c.note(f"backward error ||Ax-b||/(||A|| ||x|| + ||b||): shardkit {ours:.2e}, SciPy {ref:.2e}")

    # [[0, B], [C, 0]]: pivoting only inside diagonal blocks (dask) divides by zero here.
    z = np.zeros((n, n), np.float32)
    z[: n // 2, n // 2 :] = a_np[: n // 2, n // 2 :]
    z[n // 2 :, : n // 2] = a_np[n // 2 :, : n // 2]
    xz = solve(shard(z, mesh=m, spec="x,y"), b_np, nb=8)
    c.check(
        "[[0, B], [C, 0]] solved (pivots taken across devices)",
        _backward_error(z, np.asarray(xz), b_np) < 1e-5,
        f"{_backward_error(z, np.asarray(xz), b_np):.2e}",
    )
    p, l_, u = lu(shard(z.astype(np.float64), mesh=m, spec="x,y"), nb=8)
    c.close("P L U equals A", np.asarray(p) @ np.asarray(l_) @ np.asarray(u), z.astype(np.float64))
    c.raises(
        "a singular matrix raises, naming the column",
        SingularMatrixError,
        lambda: solve(shard(np.zeros((n, n), np.float32), mesh=m, spec="x,y"), b_np, nb=8),
        match="column 0",
    )

    sa = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, P("x", "y")))
    sb = jax.ShapeDtypeStruct((n,), jnp.float32, sharding=NamedSharding(m, P()))
    ours_r = comms(lambda a, b: solve(a, b, nb=8, mesh=m, spec=P("x", "y")), sa, sb)
    jnp_r = comms(jnp.linalg.solve, sa, sb)
    biggest = max(max(int(np.prod(s)) for s in col.result_shapes) for col in ours_r.collectives)
    c.check(
        "no collective moves the matrix (largest is panel-sized)",
        biggest * 4 <= n * 8 * 4,
        f"largest collective result {biggest} elements",
    )
    c.check("jnp.linalg.solve gathers the matrix", "all-gather" in jnp_r.kinds, str(jnp_r))
    assert ours_r.memory is not None
    assert jnp_r.memory is not None
    c.note(
        f"peak memory per device: shardkit {format_bytes(ours_r.memory.peak_bytes)}, "
        f"jnp.linalg.solve {format_bytes(jnp_r.memory.peak_bytes)} "
        f"(the device's share of A is {format_bytes(n * n * 4 // 8)})"
    )
    c.check(
        "less peak memory than jnp.linalg.solve",
        ours_r.memory.peak_bytes < jnp_r.memory.peak_bytes,
    )
    c.items.append(ours_r)


@scenario("002/2b", "exercise 2 with shardkit.linalg.batched_solve", seed="002")
def batched(c: Checks) -> None:
    keys = range(8)
    a_np = np.stack([np.asarray(jax.random.normal(jax.random.PRNGKey(i), (16, 16))) for i in keys])
    b_np = np.stack([np.asarray(jax.random.normal(jax.random.PRNGKey(i + 8), (16,))) for i in keys])
    m = mesh("8", "x")
    a, b = shard(a_np, mesh=m, spec="x"), shard(b_np, mesh=m, spec="x")
    x = batched_solve(a, b)
    c.show(x, "one system per device")
    want = np.linalg.solve(a_np.astype(np.float64), b_np.astype(np.float64)[..., None])[..., 0]
    c.close(
        "x = A^-1 b for each system", x, want, dtype=np.float32, scale=float(np.abs(want).max())
    )
    report = comms(batched_solve, a, b)
    c.check("no communication at all", report.count() == 0, str(report))


SCENARIOS = (
    distributed_solve,
    batched,
)
"""This module's scenarios, in tour order."""
