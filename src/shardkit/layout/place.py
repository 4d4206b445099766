"""Placing arrays on a mesh: ``shard(x, mesh, "x,y")``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardkit.layout._checks import check_placement
from shardkit.layout.spec import SpecLike, spec

__all__ = ["shard"]


def _as_array(x: Any) -> Any:
    """``x`` as one numeric array, or a TypeError naming what it is and the fix."""
    if isinstance(x, Mapping) or (
        isinstance(x, tuple | list) and any(isinstance(e, Mapping) for e in x)
    ):
        raise TypeError(
            f"shard: x is a pytree ({type(x).__name__}), but shard places one array; place "
            "each leaf with jax.tree.map(lambda a: shardkit.shard(a, mesh, spec), x), or "
            "use jax.device_put(x, sharding) for a whole tree with one sharding"
        )
    if not isinstance(x, jax.Array):
        given = x
        try:
            # device_put would treat a list as a pytree of scalars
            x = x if isinstance(x, np.ndarray) else np.asarray(x)
        except ValueError as e:  # ragged nested lists
            raise TypeError(
                f"shard: x={_short(x)} is not an array: {e}. Pass a rectangular array-like "
                "of numbers"
            ) from None
        # JAX's own extended types (bfloat16, float8, int4...) are NumPy kind "V".
        if x.dtype.kind not in "biufc" and not jnp.issubdtype(x.dtype, jnp.number):
            raise TypeError(
                f"shard: x={_short(given)} has dtype {x.dtype}, which is not numeric; shard "
                "places arrays of numbers (bool, int, float, complex). Convert it first, "
                "e.g. np.asarray(x, dtype=np.float32)"
            )
    return x


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def shard(
    x: jax.typing.ArrayLike | Sequence[Any], mesh: Mesh | NamedSharding, spec_: SpecLike = None, /
) -> jax.Array:
    """Place ``x`` on ``mesh`` split as ``spec_`` says, checking the layout first.

    Each device receives only its own block (``jax.device_put``); no device holds the
    whole array unless the spec replicates it. As with ``jax.device_put``, 64-bit
    inputs become 32-bit unless ``jax_enable_x64`` is on.

    Args:
      x: an array-like (NumPy array, ``jax.Array``, nested lists, scalar).
      mesh: the mesh, or a ``NamedSharding`` (then ``spec_`` must be omitted).
      spec_: anything :func:`shardkit.spec` accepts; omitted means replicated.

    Returns:
      A ``jax.Array`` with ``NamedSharding(mesh, spec)``.

    Raises:
      TypeError: ``mesh`` is neither a ``Mesh`` nor a ``NamedSharding``; ``x`` is not
        numeric (strings, objects) or is a pytree (shard one array at a time).
      ValueError: the spec has more entries than ``x`` has dimensions, names an axis
        the mesh lacks or an axis twice, or splits a dimension into parts that do not
        divide it. The message names the shape, the spec, the mesh and the remedy.

    Example:
      >>> from shardkit.layout import mesh
      >>> a = shard(np.arange(32.0).reshape(4, 8), mesh("2x4", "x,y"), "x,y")
      >>> a.addressable_shards[0].data.shape
      (2, 2)
    """
    if isinstance(mesh, NamedSharding):
        if spec_ is not None:
            raise ValueError(
                "shard: pass either a NamedSharding, or a Mesh and a spec; got a "
                f"NamedSharding and spec={spec_!r}"
            )
        target_mesh, target_spec = mesh.mesh, mesh.spec
    elif isinstance(mesh, Mesh):
        target_mesh, target_spec = mesh, spec(spec_)
    else:
        raise TypeError(
            f"shard: mesh={mesh!r} ({type(mesh).__name__}) must be a jax.sharding.Mesh "
            "(e.g. shardkit.mesh('2x4', 'x,y')) or a NamedSharding"
        )
    x = _as_array(x)
    check_placement("shard", np.shape(x), target_spec, target_mesh)
    return jax.device_put(x, NamedSharding(target_mesh, target_spec))
