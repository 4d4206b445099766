"""Seed 002, bonus exercise 4: what sharded FFTs and solves really communicate.

The seed greps compiled HLO for ``all-gather``; ``shardkit.comms`` lists every
collective with its bytes, mesh axes and memory, so the gather is measured, not guessed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import comms
from shardkit.layout import mesh, shard


@scenario("002/4.1", "jnp.fft.fftn on a sharded volume all-gathers it", seed="002")
def fft_gathers(c: Checks) -> None:
    v = np.random.default_rng(4).standard_normal((16, 16, 16)).astype(np.float32)
    x = shard(v, mesh=mesh("4x2", "x,y", axis_types="auto"), spec="x,y")
    report = comms(jnp.fft.fftn, x)
    c.items.append(report)
    c.close(
        "fftn matches numpy", jnp.fft.fftn(x), np.fft.fftn(v.astype(np.float64)), dtype=np.complex64
    )
    c.check(
        "XLA gathers the volume (all-gather present)",
        "all-gather" in report.kinds,
        str(report.kinds),
    )
    ratio = report.memory.ratio_to_ideal if report.memory else None
    c.check(
        "peak memory per device is many times its shard",
        ratio is not None and ratio >= 4,
        f"ratio_to_ideal={ratio}",
    )


@scenario("002/4.2", "jnp.linalg.solve on a row-sharded matrix all-gathers it", seed="002")
def solve_gathers(c: Checks) -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 16)).astype(np.float32) + 8 * np.eye(16, dtype=np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    a_s = shard(a, mesh=mesh("8x1", "x,y", axis_types="auto"), spec="x,None")
    report = comms(jnp.linalg.solve, a_s, b)
    c.items.append(report)
    x = jnp.linalg.solve(a_s, b)
    c.close("solve matches numpy", x, np.linalg.solve(a.astype(np.float64), b), dtype=np.float32)
    c.check(
        "XLA gathers the matrix (all-gather present)",
        "all-gather" in report.kinds,
        str(report.kinds),
    )
    c.check("the solution comes back replicated", x.sharding.is_fully_replicated)
    lu = comms(jax.lax.linalg.lu, a_s)
    c.check("so does lax.linalg.lu", "all-gather" in lu.kinds, str(lu.kinds))


SCENARIOS = (
    fft_gathers,
    solve_gathers,
)
"""This module's scenarios, in tour order."""
