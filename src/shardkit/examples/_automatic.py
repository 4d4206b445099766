"""Seeds 000, 001 and 004: computation follows data, constraints, explicit sharding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit.examples._scenario import Checks, scenario
from shardkit.layout import describe, mesh, shard, sharding
from shardkit.testing import to_numpy


def _arr() -> np.ndarray:
    return np.arange(32.0, dtype=np.float32).reshape(4, 8)


@scenario("000/follow", "computation follows data: elementwise and reduction", seed="000")
def follows_data(c: Checks) -> None:
    a = _arr()
    m = mesh("2x4", "x,y", axis_types="auto")
    x = shard(a, mesh=m, spec="x,y")
    c.show(x, "input")
    y = jax.jit(lambda v: 2 * jnp.sin(v) + 1)(x)
    c.check("elementwise keeps the sharding", y.sharding == x.sharding, describe(y))
    c.close("2 sin(x) + 1", y, 2 * np.sin(a) + 1)
    s = jax.jit(lambda v: v.sum(axis=0))(x)
    c.show(s, "x.sum(axis=0): partially replicated")
    c.check(
        "sum over rows is split over y, replicated over x",
        isinstance(s.sharding, NamedSharding) and tuple(s.sharding.spec) in {("y",)},
        describe(s),
    )
    c.close("column sums", s, a.sum(axis=0))


@scenario("000/constraint", "with_sharding_constraint fixes an output sharding", seed="000")
def constraint(c: Checks) -> None:
    a = _arr()
    x = shard(a, mesh=mesh("2x4", "x,y", axis_types="auto"), spec="x,y")
    flat = sharding(mesh("8", "x", axis_types="auto"), "x")

    @jax.jit
    def f(v: jax.Array) -> jax.Array:
        return jax.lax.with_sharding_constraint(v.sum(axis=0), flat)

    s = f(x)
    c.show(s, "constrained to P('x') over 8 devices")
    c.check("fully sharded over 8 devices", s.sharding.is_equivalent_to(flat, 1), describe(s))
    c.close("column sums", s, a.sum(axis=0))


@scenario("001/explicit", "explicit sharding in types: jax.typeof shows int32[4@X,2]", seed="001")
def explicit(c: Checks) -> None:
    m = mesh("2x4", "X,Y", axis_types="explicit")
    a = shard(np.arange(8, dtype=np.int32).reshape(4, 2), mesh=m, spec="X,None")
    c.check("typeof", str(jax.typeof(a)) == "int32[4@X,2]", str(jax.typeof(a)))
    a0 = shard(np.arange(4, dtype=np.int32).reshape(4, 1), mesh=m, spec="X,None")
    a1 = shard(np.arange(8, dtype=np.int32).reshape(1, 8), mesh=m, spec="None,Y")
    seen: list[str] = []

    @jax.jit
    def add(u: jax.Array, v: jax.Array) -> jax.Array:
        out = u + v
        seen.append(str(jax.typeof(out)))
        seen.append(describe(jax.typeof(out)))
        return out

    out = add(a0, a1)
    c.note(f"inside jit: {seen[1]}")
    c.check("broadcast result type", seen[0] == "int32[4@X,8@Y]", seen[0])
    c.show(out, "a0 + a1")
    c.close("a0 + a1", out, np.arange(4).reshape(4, 1) + np.arange(8).reshape(1, 8))


@scenario("004/disagree", "disagreeing shardings raise; uncommitted arrays move", seed="004")
def disagree(c: Checks) -> None:
    x = np.arange(16.0, dtype=np.float32)
    devices = jax.devices()
    first = shard(x, mesh=mesh("4", "x", axis_types="auto", devices=devices[:4]), spec="x")
    last = shard(x, mesh=mesh("4", "x", axis_types="auto", devices=devices[4:8]), spec="x")
    c.raises("different device sets", ValueError, lambda: first + last, "devices")
    order = [0, 1, 2, 3, 6, 7, 4, 5]
    plain = shard(x, mesh=mesh("8", "x", axis_types="auto"), spec="x")
    permuted = shard(x, mesh=mesh("8", "x", axis_types="auto", devices=order), spec="x")
    c.raises("different device orders", ValueError, lambda: plain + permuted, "")
    moved = first + jnp.ones_like(first)
    c.check("uncommitted operand follows the committed one", moved.sharding == first.sharding)
    c.close("x + 1", moved, x + 1)


@scenario("004/copy", "copies and products keep following the data (4x2 mesh)", seed="004")
def products(c: Checks) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    m = mesh("4x2", "a,b", axis_types="auto")
    y = shard(a, mesh=m, spec="a,None")
    z = shard(a, mesh=m, spec="None,b")
    w = jnp.dot(y, z)
    c.show(w, "dot(P('a',None), P(None,'b'))")
    blocked = isinstance(w.sharding, NamedSharding) and tuple(w.sharding.spec)[:2] == ("a", "b")
    c.check("product is block-sharded", blocked, describe(w))
    c.close("a @ a", w, a.astype(np.float64) @ a.astype(np.float64), dtype=np.float32)
    c.check("copy keeps the sharding", jnp.copy(w).sharding == w.sharding)
    c.close("sin", jnp.sin(shard(a, mesh=m, spec="a,b")), np.sin(a))
    c.check("P() means replicated", to_numpy(shard(a, mesh=m, spec=P())).shape == a.shape)


SCENARIOS = (
    follows_data,
    constraint,
    explicit,
    disagree,
    products,
)
"""This module's scenarios, in tour order."""
