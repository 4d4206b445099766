"""shardkit.random: in-place draws, no collectives, values independent of the mesh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit
from _meshes import make_mesh
from shardkit import random as sk_random
from shardkit.inspect import comms

SHAPE = (24, 40)

# (mesh shape, axis names, spec) over meshes 8, 2x4, 4x2 and 1x8.
LAYOUTS = [
    ("8", "x", P("x")),
    ("8", "x", P(None, "x")),
    ("8", "x", P()),
    ("2x4", "x,y", P("x", "y")),
    ("2x4", "x,y", P("y", "x")),
    ("2x4", "x,y", P(("x", "y"))),
    ("2x4", "x,y", P(None, ("y", "x"))),
    ("4x2", "x,y", P("x", "y")),
    ("4x2", "x,y", P("x")),
    ("4x2", "x,y", P(None, "y")),
    ("1x8", "x,y", P("x", "y")),
    ("1x8", "x,y", P(("x", "y"), None)),
]

Draw = Callable[[jax.Array, tuple[int, ...], Any], jax.Array]

DRAWS: dict[str, tuple[Draw, Draw]] = {
    "normal": (
        lambda k, s, sh: sk_random.normal(k, s, out_sharding=sh, dtype=jnp.float32),
        lambda k, s, _: jax.random.normal(k, s, jnp.float32),
    ),
    "uniform": (
        lambda k, s, sh: sk_random.uniform(
            k, s, out_sharding=sh, dtype=jnp.float32, minval=-2, maxval=3
        ),
        lambda k, s, _: jax.random.uniform(k, s, jnp.float32, -2, 3),
    ),
    "bernoulli": (
        lambda k, s, sh: sk_random.bernoulli(k, s, out_sharding=sh, p=0.3),
        lambda k, s, _: jax.random.bernoulli(k, 0.3, s),
    ),
    "randint": (
        lambda k, s, sh: sk_random.randint(k, s, out_sharding=sh, minval=-5, maxval=1000),
        lambda k, s, _: jax.random.randint(k, s, -5, 1000, jnp.int32),
    ),
}


def _sharding(
    mesh_shape: str, names: str, spec: P, axis_types: Literal["auto", "explicit"] = "auto"
) -> NamedSharding:
    return shardkit.sharding(make_mesh(mesh_shape, axis_types, names=names), spec)


# normal over every layout; the other draws over every other one (each compiles).
BITWISE = [("normal", *layout) for layout in LAYOUTS] + [
    (kind, *layout) for kind in list(DRAWS)[1:] for layout in LAYOUTS[::2]
]


@pytest.mark.parametrize(("kind", "mesh_shape", "names", "spec"), BITWISE)
def test_values_equal_the_unsharded_draw_bitwise(
    kind: str, mesh_shape: str, names: str, spec: P
) -> None:
    ours, ref = DRAWS[kind]
    key = jax.random.key(7)
    s = _sharding(mesh_shape, names, spec)
    out = ours(key, SHAPE, s)
    assert out.sharding.is_equivalent_to(s, len(SHAPE))
    with jax.threefry_partitionable(True):
        expected = np.asarray(ref(key, SHAPE, None))
    np.testing.assert_array_equal(np.asarray(out), expected)
    for shard in out.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), expected[shard.index])


@pytest.mark.parametrize("kind", list(DRAWS))
@pytest.mark.parametrize(("mesh_shape", "names", "spec"), LAYOUTS[::3])
def test_no_collective_in_the_compiled_draw(
    kind: str, mesh_shape: str, names: str, spec: P
) -> None:
    ours, _ = DRAWS[kind]
    s = _sharding(mesh_shape, names, spec)
    # comms reads argument dtypes, so pass the raw key data and wrap it inside.
    data = jax.random.key_data(jax.random.key(3))
    report = comms(lambda d: ours(jax.random.wrap_key_data(d), SHAPE, s), data)
    report.assert_none()
    assert report.count() == 0


def test_global_flag_off_changes_nothing() -> None:
    key = jax.random.key(11)
    s = _sharding("2x4", "x,y", P("x", "y"))
    on = np.asarray(sk_random.normal(key, SHAPE, out_sharding=s, dtype=jnp.float32))
    with jax.threefry_partitionable(False):
        off = np.asarray(sk_random.normal(key, SHAPE, out_sharding=s, dtype=jnp.float32))
        data = jax.random.key_data(key)
        fn = lambda d: sk_random.normal(jax.random.wrap_key_data(d), SHAPE, out_sharding=s)  # noqa: E731
        comms(fn, data).assert_none()
        # JAX's own stable draw under the same sharding communicates (the seed's sharp bit).
        plain = jax.jit(lambda d: jax.random.normal(d, SHAPE), out_shardings=s)
        assert comms(plain, jax.random.PRNGKey(11)).count() > 0
    np.testing.assert_array_equal(on, off)
    assert jax.config.values["jax_threefry_partitionable"] is True


def test_legacy_keys_and_explicit_meshes() -> None:
    key = jax.random.PRNGKey(5)
    auto = sk_random.normal(key, SHAPE, out_sharding=_sharding("4x2", "x,y", P("x", "y")))
    explicit = sk_random.normal(
        key, SHAPE, out_sharding=_sharding("4x2", "x,y", P("x", "y"), "explicit")
    )
    np.testing.assert_array_equal(np.asarray(auto), np.asarray(explicit))
    assert auto.dtype == jnp.float64  # JAX's default float with x64 on (conftest)


def test_inside_jit_the_sharding_is_a_constraint() -> None:
    s = _sharding("2x4", "x,y", P("y", "x"))
    key = jax.random.key(0)

    @jax.jit
    def f(k: jax.Array) -> jax.Array:
        return sk_random.uniform(k, (8, 8), out_sharding=s, dtype=jnp.float32) * 2

    out = f(key)
    expected = 2 * np.asarray(jax.random.uniform(key, (8, 8), jnp.float32))
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_bad_arguments_raise_with_the_layout() -> None:
    key = jax.random.key(0)
    s = _sharding("2x4", "x,y", P("x", "y"))
    with pytest.raises(
        ValueError, match=r"normal\(out_sharding=...\): array shape=\(24, 6\).*not divisible by 4"
    ):
        sk_random.normal(key, (24, 6), out_sharding=s)
    with pytest.raises(ValueError, match="has rank 1"):
        sk_random.normal(key, (24,), out_sharding=s)
    with pytest.raises(TypeError, match=r"must be a jax\.sharding\.Sharding"):
        sk_random.normal(key, SHAPE, out_sharding=P("x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="PRNG key"):
        sk_random.normal(jnp.zeros(2, jnp.float32), SHAPE, out_sharding=s)
    with pytest.raises(TypeError, match="non-negative integers"):
        sk_random.normal(key, (2.5, 4), out_sharding=s)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype=int32 must be a floating dtype"):
        sk_random.normal(key, SHAPE, out_sharding=s, dtype=jnp.int32)
    with pytest.raises(ValueError, match="dtype=float32 must be an integer dtype"):
        sk_random.randint(key, SHAPE, out_sharding=s, minval=0, maxval=3, dtype=jnp.float32)
