"""Seed 002 exercise 3 (and seed 003's Cannon): sharded matrix products and chains.

Exercise 3.1 multiplies without communication, 3.2 with it, 3 (all) compares every
algorithm of :func:`shardkit.linalg.matmul`, and 3.3 asks for the shardings of
``A @ B @ C @ D`` with the fewest collectives, answered by
:func:`shardkit.plan.matmul_chain`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import CommReport, comms
from shardkit.layout import mesh, shard
from shardkit.linalg import Algorithm, matmul
from shardkit.plan import matmul_chain


def _mats(n: int = 4, size: int = 16) -> list[np.ndarray]:
    return [
        np.asarray(jax.random.normal(jax.random.PRNGKey(i), (size, size)), np.float32)
        for i in range(n)
    ]


def _named(x: jax.Array) -> NamedSharding:
    assert isinstance(x.sharding, NamedSharding)
    return x.sharding


def _report(a: jax.Array, b: jax.Array, algo: Algorithm = "auto") -> CommReport:
    # Auto axes carry no sharding under jit, so the layout is passed along.
    specs = (_named(a).spec, _named(b).spec)
    m = _named(a).mesh
    assert isinstance(m, Mesh)
    return comms(lambda p, q: matmul(p, q, algorithm=algo, mesh=m, in_specs=specs), a, b)


def _ref(*mats: np.ndarray) -> np.ndarray:
    out = mats[0].astype(np.float64)
    for x in mats[1:]:
        out = out @ x.astype(np.float64)
    return out


@scenario(
    "002/3.1", "exercise 3.1: row x column, row x replicated, replicated x column", seed="002"
)
def without_communication(c: Checks) -> None:
    a_np, b_np = _mats(2)
    m = mesh("4x2", "x,y", axis_types="auto")
    for sa, sb in (("x", "None,y"), ("x", ""), ("", "None,y")):
        a, b = shard(a_np, mesh=m, spec=sa), shard(b_np, mesh=m, spec=sb)
        out = matmul(a, b, algorithm="local")
        xla = jax.jit(jnp.dot)(a, b)
        name = f"A P({sa or ''}) @ B P({sb})"
        c.close(f"{name} equals A @ B", out, _ref(a_np, b_np), dtype=np.float32)
        c.check(
            f"{name}: same sharding as XLA's A @ B",
            out.sharding.is_equivalent_to(xla.sharding, 2),
            f"{out.sharding} vs {xla.sharding}",
        )
        report = _report(a, b, "local")
        c.check(f"{name}: no collective at all", report.count() == 0, str(report))
        c.show(out, name)


@scenario("002/3.2", "exercise 3.2: block x row needs a reduction over y", seed="002")
def with_communication(c: Checks) -> None:
    a_np, b_np = _mats(2)
    m = mesh("4x2", "x,y", axis_types="auto")
    a, b = shard(a_np, mesh=m, spec="x,y"), shard(b_np, mesh=m, spec="y,None")
    xla = jax.jit(jnp.dot)(a, b)
    pairs: tuple[tuple[Algorithm, str], ...] = (
        ("allreduce", "all-reduce"),
        ("reduce_scatter", "reduce-scatter"),
    )
    for algo, kind in pairs:
        out = matmul(a, b, algorithm=algo)
        c.close(f"{algo}: block x row equals A @ B", out, _ref(a_np, b_np), dtype=np.float32)
        report = _report(a, b, algo)
        c.check(
            f"{algo}: one {kind} over y",
            report.count(kind) == 1 and report.count() == 1,
            str(report),
        )
        c.show(out, algo)
    psum = matmul(a, b, algorithm="allreduce")
    c.check(
        "allreduce gives XLA's sharding for A_block @ B_row",
        psum.sharding.is_equivalent_to(xla.sharding, 2),
        f"{psum.sharding} vs {xla.sharding}",
    )
    ex = matmul(a, b, explain=True)
    c.items.append(ex)
    c.check(
        "auto sends no more than the all-reduce",
        ex.chosen.bytes_sent <= _report(a, b, "allreduce").bytes_sent,
    )


@scenario("002/3", "exercise 3: every matmul algorithm, its collectives and memory", seed="002")
def every_algorithm(c: Checks) -> None:
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((64, 64)).astype(np.float32)
    b_np = rng.standard_normal((64, 64)).astype(np.float32)
    want = _ref(a_np, b_np)
    cases: tuple[tuple[str, str, str, str, tuple[Algorithm, ...]], ...] = (
        ("8", "x", "x", "x", ("allgather", "ring")),
        ("8", "None,x", "x", "x", ("allreduce", "reduce_scatter", "ring")),
        ("2x4", "x,y", "x,y", "x,y", ("allgather", "summa")),
    )
    for shape, sa, sb, names, algos in cases:
        m = mesh(shape, names, axis_types="auto")
        a, b = shard(a_np, mesh=m, spec=sa), shard(b_np, mesh=m, spec=sb)
        for algo in algos:
            cand = matmul(a, b, algorithm=algo, explain=True).chosen
            report = _report(a, b, algo)
            c.close(
                f"{shape} {algo}: equals A @ B",
                matmul(a, b, algorithm=algo),
                want,
                dtype=np.float32,
            )
            c.check(
                f"{shape} {algo}: sends {cand.bytes_sent} B/device as predicted",
                report.bytes_sent == cand.bytes_sent,
                str(report),
            )
    m = mesh("8", "x", axis_types="auto")
    a, b = shard(a_np, mesh=m, spec="x"), shard(b_np, mesh=m, spec="x")
    ring = _report(a, b, "ring")
    gather = _report(a, b, "allgather")
    c.items.append(ring)
    assert ring.memory is not None
    assert gather.memory is not None
    c.check(
        "ring: 7 permutes instead of an all-gather, less peak memory",
        ring.kinds == {"collective-permute"}
        and ring.count() == 7
        and ring.memory.peak_bytes < gather.memory.peak_bytes,
        f"{ring.summary()} vs {gather.summary()}",
    )
    c.items.append(matmul(a, b, explain=True))


@scenario("003/cannon", "Cannon's algorithm on a 2x2 grid", seed="003")
def cannon(c: Checks) -> None:
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal((32, 32)).astype(np.float32)
    b_np = rng.standard_normal((32, 32)).astype(np.float32)
    m = mesh("2x2", "x,y", axis_types="auto")
    a, b = shard(a_np, mesh=m, spec="x,y"), shard(b_np, mesh=m, spec="x,y")
    out = matmul(a, b, algorithm="cannon")
    c.close("Cannon equals A @ B", out, _ref(a_np, b_np), dtype=np.float32)
    report = _report(a, b, "cannon")
    c.items.append(report)
    c.check(
        "skew (2 permutes) + 1 shift of A and of B: 4 collective-permutes, nothing else",
        report.kinds == {"collective-permute"} and report.count() == 4,
        str(report),
    )
    c.raises(
        "Cannon refuses a non-square grid",
        ValueError,
        lambda: matmul(
            shard(a_np, mesh=mesh("2x4", "x,y"), spec="x,y"),
            shard(b_np, mesh=mesh("2x4", "x,y"), spec="x,y"),
            algorithm="cannon",
        ),
        match="square grid",
    )


@scenario("002/3.3", "exercise 3.3: A @ B @ C @ D with the fewest collectives", seed="002")
def chain(c: Checks) -> None:
    mats = _mats(4)
    want = _ref(*mats)
    m = mesh("2x4", "x,y", axis_types="auto")
    free = matmul_chain([x.shape for x in mats], mesh=m)
    c.items.append(free)
    c.check("without a memory limit: no communication at all", free.bytes_sent == 0, str(free))
    c.note(
        "Replicating is free but every device then holds all four matrices; with a "
        "per-device budget of a quarter of that (1 KiB), the planner must shard."
    )
    tight = matmul_chain([x.shape for x in mats], mesh=m, memory_limit=1024)
    c.items.append(tight)
    c.close("the 1 KiB plan computes A @ B @ C @ D", tight.apply(*mats), want, dtype=np.float32)
    report = comms(tight.apply, *tight.place(*mats))
    c.items.append(report)
    got = {
        k: (report.count(k), sum(x.total_sent_bytes for x in report.collectives if x.kind == k))
        for k in report.kinds
    }
    c.check(
        "compiled collectives equal the plan's prediction",
        got == tight.predicted,
        f"{got} vs {tight.predicted}",
    )
    c.check(
        "the plan fits the 1 KiB budget (model)", tight.peak_bytes <= 1024, str(tight.peak_bytes)
    )
    # Column-sharding every input, the layout one might pick by hand, needs two rotating
    # blocks per ring step and does not fit the same budget at all.
    c.raises(
        "column-sharding every input does not fit the 1 KiB budget",
        ValueError,
        lambda: matmul_chain(
            [x.shape for x in mats], mesh=m, memory_limit=1024, in_specs=["None,(x,y)"] * 4
        ),
        "fits memory_limit=1024",
    )


SCENARIOS = (
    without_communication,
    with_communication,
    every_algorithm,
    cannon,
    chain,
)
"""This module's scenarios, in tour order."""
