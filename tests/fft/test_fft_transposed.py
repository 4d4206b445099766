"""``out_layout="transposed"`` / ``in_layout="transposed"`` and ``plan(chunks=)``.

The transposed layout is numpy's result with the transformed axes rolled
(``fftn(x).transpose(1, 2, 0)`` in 3-D, jaxDecomp's order); the inverse takes it back.
Values are compared with numpy, collectives read through ``shardkit.comms``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import shardkit
import shardkit.fft as skfft
from _matrix import FULL
from _meshes import make_mesh
from shardkit.fft._problem import transposed_order
from shardkit.inspect import comms
from shardkit.testing import assert_close

SHAPE = (16, 8, 24)
ROLL = (1, 2, 0)
SPECS = {"8": "x,None,None", "2x4": "x,y,None"}
MOVES = {"8": 1, "2x4": 2}


def _data(shape: tuple[int, ...] = SHAPE, *, real: bool = False) -> np.ndarray:
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape)
    return a if real else (a + 1j * rng.standard_normal(shape)).astype(np.complex64)


def test_the_order_rolls_the_transformed_axes() -> None:
    assert transposed_order(3, (0, 1, 2)) == ROLL
    assert transposed_order(3, (2, 0, 1)) == ROLL  # the set of axes decides, not their order
    assert transposed_order(4, (1, 3)) == (0, 3, 2, 1)
    assert transposed_order(3, (1,)) == ()  # one axis: nothing to roll


@pytest.mark.parametrize("mesh_shape", ["8", "2x4"])
def test_plan_specs_and_no_final_transpose(mesh_shape: str) -> None:
    m = make_mesh(mesh_shape, "auto")
    spec = SPECS[mesh_shape]
    default = skfft.plan("fftn", SHAPE, spec=spec, mesh=m)
    p = skfft.plan("fftn", SHAPE, spec=spec, mesh=m, out_layout="transposed")
    assert (p.out_shape, p.out_order, p.all_to_alls) == ((8, 24, 16), ROLL, default.all_to_alls)
    # The default layout's splits, stored in the rolled order (jaxDecomp's P('x', 'y')
    # for the pencil).
    want = [tuple(default.out_spec)[a] if a < len(default.out_spec) else None for a in ROLL]
    assert tuple(p.out_spec) + (None,) * (3 - len(p.out_spec)) == tuple(want)

    def transposes(q: Any) -> int:
        f = jax.shard_map(q.local, mesh=m, in_specs=q.in_spec, out_specs=q.out_spec)
        struct = jax.ShapeDtypeStruct(SHAPE, jnp.complex64)
        return str(jax.make_jaxpr(f)(struct)).count("transpose[")

    # One local transpose fewer: the output order is the one the last FFT leaves.
    assert transposes(p) == transposes(default) - 1
    inv = skfft.plan("ifftn", p.out_shape, spec=p.out_spec, mesh=m, in_layout="transposed")
    assert (inv.in_order, inv.out_shape, inv.out_spec) == (ROLL, SHAPE, default.in_spec)


ROUTES = [("8", "explicit"), ("2x4", "auto"), ("2x4", "eager")]
if FULL:
    ROUTES += [("8", "auto"), ("8", "eager"), ("2x4", "explicit")]


@pytest.mark.parametrize(("mesh_shape", "route"), ROUTES)
def test_round_trip_matches_numpy(mesh_shape: str, route: str) -> None:
    a = _data()
    m = make_mesh(mesh_shape, "auto" if route == "auto" else "explicit")
    x = shardkit.shard(a, mesh=m, spec=SPECS[mesh_shape])

    def fwd(v: jax.Array) -> jax.Array:
        return skfft.fftn(v, out_layout="transposed")

    def inv(v: jax.Array) -> jax.Array:
        return skfft.ifftn(v, in_layout="transposed")

    if route != "eager":
        fwd, inv = jax.jit(fwd), jax.jit(inv)
    y = fwd(x)
    assert y.shape == (8, 24, 16)
    assert_close(y, np.fft.fftn(a).transpose(ROLL))
    z = inv(y)
    assert_close(z, a)
    assert z.sharding.spec == x.sharding.spec  # type: ignore[attr-defined]
    for f, v in ((fwd, x), (inv, y)):
        report = comms(f, v)
        report.assert_only({"all-to-all"})
        assert report.count("all-to-all") == MOVES[mesh_shape]


def test_real_transforms_round_trip() -> None:
    a = _data(real=True)
    m = make_mesh("2x4", "explicit")
    x = shardkit.shard(a, mesh=m, spec="x,y,None")
    y = skfft.rfftn(x, out_layout="transposed")
    assert_close(y, np.fft.rfftn(a).transpose(ROLL))
    z = skfft.irfftn(y, s=SHAPE, in_layout="transposed")
    assert_close(z, a)
    assert z.sharding.spec == x.sharding.spec  # type: ignore[attr-defined]
    # fft2 rolls its two axes; the untransformed axis 0 stays.
    y2 = skfft.fft2(shardkit.shard(_data(), mesh=m, spec="x,y,None"), out_layout="transposed")
    assert_close(y2, np.fft.fft2(_data()).transpose(0, 2, 1))


@pytest.mark.skipif(not FULL, reason="SHARDKIT_FULL_TESTS: vmap and grad of the Auto route")
def test_auto_route_batches_and_differentiates() -> None:
    a = _data()
    m = make_mesh("2x4", "auto")
    x = shardkit.shard(np.stack([a, 2 * a]), mesh=m, spec="None,x,y")
    y = jax.jit(jax.vmap(lambda v: skfft.fftn(v, out_layout="transposed")))(x)
    assert_close(y, np.stack([np.fft.fftn(v).transpose(ROLL) for v in (a, 2 * a)]))

    def loss(v: jax.Array) -> jax.Array:
        return jnp.sum(jnp.abs(skfft.fftn(v, out_layout="transposed")) ** 2)

    xa = shardkit.shard(a, mesh=m, spec="x,y")
    comms(jax.grad(loss), xa).assert_only({"all-to-all"})
    # JAX returns the conjugate gradient for complex inputs.
    assert_close(jax.jit(jax.grad(loss))(xa), 2 * np.prod(SHAPE) * np.conj(a))


@pytest.mark.parametrize("mesh_shape", ["8", "2x4"])
def test_chunks_pipeline_each_move(mesh_shape: str) -> None:
    a = _data()
    m = make_mesh(mesh_shape, "explicit")
    spec = SPECS[mesh_shape]
    x = shardkit.shard(a, mesh=m, spec=spec)
    whole = skfft.plan("fftn", SHAPE, spec=spec, mesh=m, out_layout="transposed")
    p = skfft.plan("fftn", SHAPE, spec=spec, mesh=m, out_layout="transposed", chunks=2)
    assert p.chunks == 2
    f = jax.jit(jax.shard_map(p.local, mesh=m, in_specs=p.in_spec, out_specs=p.out_spec))
    assert_close(f(x), np.fft.fftn(a).transpose(ROLL))
    report = comms(f, x)
    report.assert_only({"all-to-all"})
    # Each move runs as two all-to-alls of half the block: the bytes are unchanged.
    assert report.count("all-to-all") == 2 * MOVES[mesh_shape]
    assert report.bytes_sent == whole.sent_bytes(np.complex64)


def test_planner_cuts_only_large_blocks() -> None:
    m = make_mesh("8", "explicit")
    assert skfft.plan("fftn", (256, 256, 128), spec="x", mesh=m).chunks == 4  # 2**20 per device
    assert skfft.plan("fftn", (256, 128, 128), spec="x", mesh=m).chunks == 1
    assert skfft.plan("fftn", (256, 128, 128), spec="x", mesh=m, chunks=2).chunks == 2
    # 2**21 per device: pieces of 2**17, but messages of 2**15 to each of 8 devices.
    assert skfft.plan("fftn", (256,) * 3, spec="x", mesh=m).chunks == 8
    pencil = make_mesh("2x4", "explicit")
    assert skfft.plan("fftn", (256,) * 3, spec="x,y", mesh=pencil).chunks == 16


def test_bad_layouts_and_chunks_are_refused() -> None:
    m = make_mesh("8", "explicit")
    x = shardkit.shard(_data(), mesh=m, spec="x")
    with pytest.raises(ValueError, match=r"in_layout='rolled'; legal values are \['natural'"):
        skfft.ifftn(x, in_layout="rolled")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'transposed'"):
        skfft.fftn(x, out_layout="swapped")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunks=0; legal values are None or ints >= 1"):
        skfft.plan("fftn", SHAPE, spec=P("x"), mesh=m, chunks=0)
