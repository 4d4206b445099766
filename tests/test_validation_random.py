"""Bounds ``shardkit.random`` checks although ``jax.random`` accepts them (issue 33).

``jax.random.uniform`` and ``randint`` return ``minval`` everywhere for an empty or
reversed interval, and ``jax.random.bernoulli`` returns all True for ``p > 1``: no
error, just values that look plausible. shardkit raises instead wherever the values
are known, eagerly and for constants inside ``jax.jit`` (issue 18 had kept JAX's
behaviour; issue 33 reversed that decision). Bounds traced under ``jit`` cannot be
read, so they pass unchecked and give what ``jax.random`` gives, as documented.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit import random as sk_random


@pytest.fixture(scope="module")
def sharding() -> NamedSharding:
    return NamedSharding(make_mesh("8", "auto"), P("x"))


KEY = jax.random.key(0)


@pytest.mark.parametrize(
    ("minval", "maxval", "match"),
    [
        pytest.param(1.0, 0.0, r"minval=1\.0 must be below maxval=0\.0", id="reversed"),
        pytest.param(0.5, 0.5, r"minval=0\.5 must be below maxval=0\.5", id="empty"),
        pytest.param(
            0.0, float("nan"), r"minval=0\.0 must be below maxval=nan.*NaN never is", id="nan"
        ),
        pytest.param(
            np.array([0.0, 2.0]),
            np.array([1.0, 1.0]),
            r"minval=array.*float\d+, elementwise",
            id="array",
        ),
    ],
)
def test_uniform_needs_minval_below_maxval(
    sharding: NamedSharding, minval: object, maxval: object, match: str
) -> None:
    with pytest.raises(ValueError, match=rf"^uniform: {match}.*swap them"):
        sk_random.uniform(KEY, (8,), out_sharding=sharding, minval=minval, maxval=maxval)  # type: ignore[arg-type]
    # Constants are known at trace time, so jit raises the same.
    with pytest.raises(ValueError, match=rf"^uniform: {match}"):
        jax.jit(
            lambda k: sk_random.uniform(
                k,
                (8,),
                out_sharding=sharding,
                minval=minval,  # type: ignore[arg-type]
                maxval=maxval,  # type: ignore[arg-type]
            )
        )(KEY)


def test_uniform_bounds_are_compared_in_the_drawn_dtype(sharding: NamedSharding) -> None:
    # Distinct in float64, one value in float16: the interval would be empty.
    with pytest.raises(ValueError, match=r"compared as float16"):
        sk_random.uniform(
            KEY, (8,), out_sharding=sharding, dtype=jnp.float16, minval=1.0, maxval=1.0001
        )


@pytest.mark.parametrize("p", [2.0, -0.5, float("nan"), np.array([0.5, 1.5])])
def test_bernoulli_needs_a_probability(sharding: NamedSharding, p: object) -> None:
    with pytest.raises(ValueError, match=r"^bernoulli: p=.* must be a probability in \[0, 1\]"):
        sk_random.bernoulli(KEY, (8,), out_sharding=sharding, p=p)  # type: ignore[arg-type]


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_bernoulli_accepts_the_edges(sharding: NamedSharding, p: float) -> None:
    np.testing.assert_array_equal(
        np.asarray(sk_random.bernoulli(KEY, (8,), out_sharding=sharding, p=p)), p
    )


def test_randint_needs_minval_below_maxval(sharding: NamedSharding) -> None:
    with pytest.raises(ValueError, match=r"^randint: minval=10 must be below maxval=0"):
        sk_random.randint(KEY, (8,), out_sharding=sharding, minval=10, maxval=0)
    with pytest.raises(ValueError, match=r"^randint: minval=3 must be below maxval=3"):
        sk_random.randint(KEY, (8,), out_sharding=sharding, minval=3, maxval=3)


def test_traced_bounds_are_not_checked_and_follow_jax(sharding: NamedSharding) -> None:
    draw = jax.jit(
        lambda k, lo, hi, p: (
            sk_random.uniform(k, (8,), out_sharding=sharding, minval=lo, maxval=hi),
            sk_random.bernoulli(k, (8,), out_sharding=sharding, p=p),
        )
    )
    u, coins = draw(KEY, 1.0, 0.0, 2.0)
    np.testing.assert_array_equal(
        np.asarray(u), np.asarray(jax.random.uniform(KEY, (8,), minval=1.0, maxval=0.0))
    )
    np.testing.assert_array_equal(np.asarray(u), 1.0)
    np.testing.assert_array_equal(np.asarray(coins), True)


@pytest.mark.parametrize(
    ("draw", "match"),
    [
        pytest.param(
            lambda s: sk_random.uniform(KEY, (8,), out_sharding=s, minval="a"),  # type: ignore[arg-type]
            r"^uniform: minval='a' \(str\) must be a real number .* e\.g\. minval=0\.0",
            id="uniform-str",
        ),
        pytest.param(
            lambda s: sk_random.uniform(KEY, (8,), out_sharding=s, maxval=None),  # type: ignore[arg-type]
            r"^uniform: maxval=None \(NoneType\) must be a real number",
            id="uniform-none",
        ),
        pytest.param(
            lambda s: sk_random.bernoulli(KEY, (8,), out_sharding=s, p=0.5j),
            r"^bernoulli: p=0\.5j \(complex\) must be a real number .* e\.g\. p=0\.25",
            id="bernoulli-complex",
        ),
        pytest.param(
            lambda s: sk_random.randint(KEY, (8,), out_sharding=s, minval=0, maxval="10"),  # type: ignore[arg-type]
            r"^randint: maxval='10' \(str\) must be a real number .* e\.g\. maxval=10",
            id="randint-str",
        ),
    ],
)
def test_bounds_and_p_must_be_real_numbers(sharding: NamedSharding, draw, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError, match=match):
        draw(sharding)


def test_bounds_of_any_real_dtype_are_checked(sharding: NamedSharding) -> None:
    lo, hi = jnp.asarray(1.0, jnp.bfloat16), jnp.asarray(2.0, jnp.bfloat16)
    u = sk_random.uniform(
        KEY, (8,), out_sharding=sharding, dtype=jnp.bfloat16, minval=lo, maxval=hi
    )
    assert bool((np.asarray(u, np.float32) >= 1).all())
    with pytest.raises(ValueError, match=r"must be below maxval=Array\(1"):
        sk_random.uniform(
            KEY, (8,), out_sharding=sharding, dtype=jnp.bfloat16, minval=hi, maxval=lo
        )
    assert (
        sk_random.bernoulli(KEY, (8,), out_sharding=sharding, p=np.float16(0.5)).dtype == jnp.bool_
    )


def test_positional_sharding_is_deprecated_and_draws_the_same() -> None:
    s = NamedSharding(make_mesh("2x4", "auto"), P("x", "y"))
    new = sk_random.normal(KEY, (4, 8), out_sharding=s)
    with pytest.warns(
        DeprecationWarning, match=r"write normal\(key, shape, out_sharding=sharding\)"
    ):
        old = sk_random.normal(KEY, (4, 8), s)
    assert old.sharding == new.sharding
    np.testing.assert_array_equal(np.asarray(old), np.asarray(new))
    with pytest.raises(TypeError, match="got both"):
        sk_random.uniform(KEY, (4, 8), s, out_sharding=s)
    with pytest.raises(TypeError, match="out_sharding= is missing"):
        sk_random.bernoulli(KEY, (4, 8))
