"""Seeds 000, 001, 003 and 002 exercise 2: shard_map, collectives, the sigmoid layer.

``shard_map`` runs a per-device function; collectives (``psum``, ``all_gather``,
``all_to_all``, ``ppermute``, ``psum_scatter``) move data between devices.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import comms
from shardkit.layout import mesh, shard


@scenario("000/shard_map", "shard_map: per-shard sums, then psum across devices", seed="000")
def psum_sum(c: Checks) -> None:
    m = mesh("8", "X")
    x = shard(np.arange(32), mesh=m, spec="X")
    local = jax.shard_map(
        lambda v: jnp.sum(v, keepdims=True), mesh=m, in_specs=P("X"), out_specs=P("X")
    )(x)
    c.close("per-shard sums", local, x.reshape(8, 4).sum(axis=1))
    total = jax.shard_map(
        lambda v: jax.lax.psum(v.sum(), "X"), mesh=m, in_specs=P("X"), out_specs=P()
    )(x)
    c.close("psum of shard sums", total, np.asarray(496))
    c.check("P() output is replicated on all 8 devices", total.sharding.is_fully_replicated)
    shapes: list[tuple[int, ...]] = []
    jax.shard_map(
        lambda v: (shapes.append(v.shape), v * 2)[1], mesh=m, in_specs=P("X"), out_specs=P("X")
    )(x)
    c.check("each device sees 4 elements", shapes == [(4,)], str(shapes))


@scenario(
    "003/collectives", "all-reduce, all-gather, all-to-all, ring shift, reduce-scatter", seed="003"
)
def collectives(c: Checks) -> None:
    m = mesh("8", "d")
    n = 8
    data = np.arange(n * n, dtype=np.float32).reshape(n, n)
    x = shard(data, mesh=m, spec="d,None")
    spec = P("d", None)

    def run(fn, out_specs=spec):  # type: ignore[no-untyped-def]
        return jax.jit(jax.shard_map(fn, mesh=m, in_specs=spec, out_specs=out_specs))(x)

    summed = run(lambda b: jax.lax.psum(b, "d"), P())
    c.close("psum (all-reduce)", summed, data.sum(axis=0, keepdims=True))
    # Each device returns its gathered copy; stacked, they are 8 copies of the array.
    gathered = run(lambda b: jax.lax.all_gather(b, "d", tiled=True))
    c.close("all_gather: every device holds the whole array", gathered, np.tile(data, (n, 1)))
    swapped = run(lambda b: jax.lax.all_to_all(b, "d", split_axis=1, concat_axis=1, tiled=True))
    c.close(
        "all_to_all (block transpose)",
        swapped,
        data.reshape(n, n, 1).transpose(1, 0, 2).reshape(n, n),
    )
    perm = [(i, (i + 1) % n) for i in range(n)]
    shifted = run(lambda b: jax.lax.ppermute(b, "d", perm))
    c.close("ppermute ring shift", shifted, np.roll(data, 1, axis=0))
    scattered = run(lambda b: jax.lax.psum_scatter(b, "d", scatter_dimension=1, tiled=True))
    c.close("psum_scatter", scattered, data.sum(axis=0).reshape(n, 1))
    report = comms(
        jax.shard_map(lambda b: jax.lax.psum(b, "d"), mesh=m, in_specs=spec, out_specs=P()), x
    )
    c.items.append(report)
    c.check("psum compiles to one all-reduce over d", report.count("all-reduce") == 1, str(report))
    c.check("...and nothing else", report.kinds == {"all-reduce"}, str(report.kinds))


def _layer_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal(32).astype(np.float32),
        rng.standard_normal((32, 4)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    )


def _layer(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(x @ w + b)


@scenario("000/layer", "the sigmoid layer three ways: jit, constraints, shard_map", seed="000")
def three_ways(c: Checks) -> None:
    x, w, b = _layer_inputs()
    want = 1 / (1 + np.exp(-(x.astype(np.float64) @ w + b)))
    m = mesh("8", "x", axis_types="auto")
    layer = jax.jit(_layer)
    auto = layer(shard(x, mesh=m, spec="x"), shard(w, mesh=m, spec="x"), b)
    c.close("1. jit on sharded inputs", auto, want, dtype=np.float32)
    row = shard(np.zeros(8, np.float32), mesh=m, spec="x").sharding

    @jax.jit
    def constrained(x_: jax.Array, w_: jax.Array, b_: jax.Array) -> jax.Array:
        x_ = jax.lax.with_sharding_constraint(x_, row)
        w_ = jax.lax.with_sharding_constraint(w_, row)
        return _layer(x_, w_, b_)

    c.close("2. with_sharding_constraint", constrained(x, w, b), want, dtype=np.float32)

    @jax.jit
    @partial(jax.shard_map, mesh=m, in_specs=(P("x"), P("x", None), P()), out_specs=P())
    def manual(x_: jax.Array, w_: jax.Array, b_: jax.Array) -> jax.Array:
        return jax.nn.sigmoid(jax.lax.psum(x_ @ w_, "x") + b_)

    c.close("3. shard_map + psum", manual(x, w, b), want, dtype=np.float32)
    ex = mesh("8", "X", axis_types="explicit")
    explicit = layer(shard(x, mesh=ex, spec="X"), shard(w, mesh=ex, spec=""), b)
    c.close("explicit axes: x sharded, W replicated", explicit, want, dtype=np.float32)
    c.check(
        "the contraction over sharded x all-reduces",
        "all-reduce"
        in comms(_layer, shard(x, mesh=m, spec="x"), shard(w, mesh=m, spec="x"), b).kinds,
    )


@scenario("002/2", "exercise 2: eight linear solves, one per device", seed="002")
def batched_solves(c: Checks) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((8, 16, 16)).astype(np.float32) + 4 * np.eye(16, dtype=np.float32)
    b = rng.standard_normal((8, 16)).astype(np.float32)
    m = mesh("8", "x")
    a_s, b_s = shard(a, mesh=m, spec="x"), shard(b, mesh=m, spec="x")

    @jax.jit
    @partial(jax.shard_map, mesh=m, in_specs=(P("x"), P("x")), out_specs=P("x"))
    def solve_each(a_blk: jax.Array, b_blk: jax.Array) -> jax.Array:
        return jnp.linalg.solve(a_blk, b_blk[..., None])[..., 0]

    x = solve_each(a_s, b_s)
    c.show(x, "solutions, one system per device")
    want = np.linalg.solve(a.astype(np.float64), b.astype(np.float64)[..., None])[..., 0]
    c.close("x = A^-1 b for each system", x, want, dtype=np.float32)
    residual = np.einsum("bij,bj->bi", a, np.asarray(x)) - b
    c.check(
        "residuals below 1e-4",
        float(np.abs(residual).max()) < 1e-4,
        f"{np.abs(residual).max():.2e}",
    )
    report = comms(solve_each, a_s, b_s)
    c.check("no communication at all", report.count() == 0, str(report))


SCENARIOS = (
    psum_sum,
    collectives,
    three_ways,
    batched_solves,
)
"""This module's scenarios, in tour order."""
