"""Seed 002, bonus exercise 4, solved: a distributed 3-D FFT that never all-gathers.

The seed shards a 16^3 volume on a 4x2 mesh, sees ``jnp.fft.fftn`` gather it, and
reaches for jaxdecomp (which transposes the output and cannot split the last axis).
``shardkit.fft.fftn`` keeps the array's axis order, moves the sharding with
``all_to_all`` only, and offers the input's own layout with ``out_layout="natural"``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from shardkit import fft as skfft
from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import comms
from shardkit.layout import describe, mesh, shard


def _spec(a: jax.Array) -> object:
    return getattr(a.sharding, "spec", None)


def _volume() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 16, 16)).astype(np.float32)


@scenario("002/4.3", "shardkit.fft.fftn: a pencil FFT with all-to-all only", seed="002")
def distributed_fft(c: Checks) -> None:
    v = _volume()
    ref = np.fft.fftn(v.astype(np.float64))
    m = mesh("4x2", "x,y", axis_types="explicit")
    x = shard(v, mesh=m, spec="x,y,None")
    c.show(x, "input")
    y = skfft.fftn(x)
    c.close("fftn matches numpy", y, ref, dtype=np.complex64)
    c.show(y, "output (default layout)")
    c.note(
        "Default layout: each split axis hands its mesh axis to the next one, so "
        f"P('x','y',None) becomes {describe(y).split(' ')[0]}: axis order unchanged, "
        "one all-to-all per split axis."
    )
    report = comms(skfft.fftn, x)
    c.items.append(report)
    c.check("only all-to-all", report.kinds == {"all-to-all"}, str(report.kinds))
    c.check("two all-to-alls for a pencil", report.count("all-to-all") == 2, str(report))
    gathered = comms(jnp.fft.fftn, shard(v, mesh=mesh("4x2", "x,y", axis_types="auto"), spec="x,y"))
    c.check("jnp.fft.fftn all-gathers", "all-gather" in gathered.kinds, str(gathered.kinds))
    ours = report.memory.peak_bytes if report.memory else None
    theirs = gathered.memory.peak_bytes if gathered.memory else None
    c.check(
        "less memory per device than jnp.fft.fftn",
        ours is not None and theirs is not None and ours < theirs,
        f"{ours} vs {theirs}",
    )
    nat = skfft.fftn(x, out_layout="natural")
    c.check("natural layout keeps P('x','y',None)", _spec(nat) == _spec(x))
    back = skfft.ifftn(y)
    c.check("ifftn(fftn(x)) restores the layout", _spec(back) == _spec(x))
    c.close("ifftn(fftn(x)) == x", back, v, dtype=np.complex64)


@scenario("002/4.4", "slab FFT on 1x8 with the last axis split; R2C; inside jit", seed="002")
def slab_fft(c: Checks) -> None:
    v = _volume()
    ref = np.fft.fftn(v.astype(np.float64))
    m = mesh("1x8", "x,y", axis_types="auto")
    x = shard(v, mesh=m, spec="None,None,y")
    y = skfft.fftn(x)
    c.close("last-axis slab matches numpy", y, ref, dtype=np.complex64)
    c.show(y, "output: the split moved from the last axis to the first")
    r = skfft.rfftn(shard(v, mesh=m, spec="None,y,None"))
    c.close("rfftn (R2C) matches numpy", r, np.fft.rfftn(v.astype(np.float64)), dtype=np.complex64)
    c.note(f"rfftn output: {describe(r)} (the halved axis, 9 long, stays whole)")
    jitted = comms(jax.jit(skfft.fftn), x)
    c.check("jit on Auto axes: all-to-all, no gather", jitted.kinds == {"all-to-all"})
    c.close("jit result", jax.jit(skfft.fftn)(x), ref, dtype=np.complex64)


SCENARIOS = (
    distributed_fft,
    slab_fft,
)
"""This module's scenarios, in tour order."""
