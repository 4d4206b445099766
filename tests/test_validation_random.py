"""Values JAX itself accepts: ``minval > maxval`` in ``shardkit.random`` (issue 18).

Decision: shardkit keeps JAX's behaviour. ``shardkit.random`` promises values
identical to ``jax.random`` for every mesh and spec, and JAX accepts an empty or
reversed interval: ``uniform`` (and ``randint`` likewise) then returns ``minval``
everywhere. A check that raised would break that identity for code written against
``jax.random`` (where bounds are often arrays or traced values that cannot be
compared eagerly). This test pins the behaviour so that a change to it is deliberate.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit


def test_reversed_uniform_bounds_give_minval_as_jax_does() -> None:
    sharding = NamedSharding(shardkit.mesh("8", "x", axis_types="auto"), P("x"))
    key = jax.random.key(0)
    u = shardkit.random.uniform(key, (8,), sharding, minval=1.0, maxval=0.0)
    expected = jax.random.uniform(key, (8,), minval=1.0, maxval=0.0)
    np.testing.assert_array_equal(np.asarray(u), np.asarray(expected))
    np.testing.assert_array_equal(np.asarray(u), 1.0)
