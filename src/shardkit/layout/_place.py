"""Placing arrays on a mesh: ``shard(x, mesh=mesh, spec="x,y")``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from shardkit._deprecation import moved
from shardkit._typing import PyTree
from shardkit.layout._checks import check_placement
from shardkit.layout._spec import spec as parse_spec

__all__ = ["shard"]


def _is_tree(x: Any) -> bool:
    """A pytree of arrays rather than one array-like.

    Nested lists and tuples of numbers are one array (as ``np.asarray`` reads them);
    a dict, a list or tuple holding a dict or an array, a NamedTuple and any other
    registered pytree node (a dataclass, an Equinox module, an NNX state) is a tree.
    """
    if isinstance(x, Mapping):
        return True
    if isinstance(x, tuple | list):
        return hasattr(x, "_fields") or any(
            isinstance(e, Mapping | jax.Array | np.ndarray) or _is_tree(e) for e in x
        )
    if isinstance(x, jax.Array | np.ndarray | np.generic | str | bytes | int | float | complex):
        return False
    return not jax.tree_util.treedef_is_leaf(jax.tree.structure(x))


def _is_numbers(x: Any) -> bool:
    return isinstance(x, list | tuple) and not hasattr(x, "_fields") and not _is_tree(x)


def _as_array(x: Any, name: str = "x") -> Any:
    """``x`` as one numeric array, or a TypeError naming what it is and the fix."""
    if not isinstance(x, jax.Array):
        given = x
        try:
            # device_put would treat a list as a pytree of scalars
            x = x if isinstance(x, np.ndarray) else np.asarray(x)
        except ValueError as e:  # ragged nested lists
            raise TypeError(
                f"shard: {name}={_short(x)} is not an array: {e}. Pass a rectangular array-like "
                "of numbers"
            ) from None
        # JAX's own extended types (bfloat16, float8, int4...) are NumPy kind "V".
        if x.dtype.kind not in "biufc" and not jnp.issubdtype(x.dtype, jnp.number):
            raise TypeError(
                f"shard: {name}={_short(given)} has dtype {x.dtype}, which is not numeric; shard "
                "places arrays of numbers (bool, int, float, complex). Convert it first, "
                "e.g. np.asarray(x, dtype=np.float32)"
            )
    return x


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def shard(
    x: PyTree,
    sharding: NamedSharding | Mesh | None = None,
    legacy_spec: PyTree = None,
    /,
    *,
    mesh: Mesh | None = None,
    spec: PyTree = None,
) -> PyTree:
    """Place ``x`` on ``mesh`` split as ``spec`` says, checking the layout first.

    Each device receives only its own block (``jax.device_put``); no device holds the
    whole array unless the spec replicates it. As with ``jax.device_put``, 64-bit
    inputs become 32-bit unless ``jax_enable_x64`` is on.

    A pytree (a dict, a list or tuple of arrays, a NamedTuple, an Equinox module...)
    is placed leaf by leaf, like ``jax.device_put``: ``spec`` is one spec for every
    leaf, or a pytree of specs of the same structure, or a prefix of it whose specs
    (strings, ``PartitionSpec``, ``None`` meaning replicated) cover whole subtrees.
    Every leaf is checked before any is placed; errors name the leaf's path.

    The positional ``shard(x, mesh=mesh, spec=spec)`` of earlier releases still works, with a
    ``DeprecationWarning``.

    Args:
      x: an array-like (NumPy array, ``jax.Array``, nested lists, scalar), or a
        pytree of them.
      sharding: a ``NamedSharding`` to place ``x`` with, as in
        ``jax.device_put(x, sharding)``; then ``mesh`` and ``spec`` are omitted.
      legacy_spec: deprecated; the third positional argument of
        ``shard(x, mesh=mesh, spec=spec)``. Pass ``spec=``.
      mesh: the mesh, keyword-only.
      spec: anything :func:`shardkit.spec` accepts; omitted means replicated. For a
        pytree ``x``, also a pytree of such specs shaped like ``x``.

    Returns:
      A ``jax.Array`` with ``NamedSharding(mesh, spec)``, or a pytree of them shaped
      like ``x``.

    Raises:
      TypeError: neither a ``NamedSharding`` nor ``mesh=`` is given, or both; ``mesh``
        is not a ``Mesh``; ``x`` (or a leaf) is not numeric (strings, objects).
      ValueError: the spec has more entries than ``x`` has dimensions, names an axis
        the mesh lacks or an axis twice, or splits a dimension into parts that do not
        divide it. The message names the shape, the spec, the mesh and the remedy.

    Example:
      >>> from shardkit.layout import mesh
      >>> a = shard(np.arange(32.0).reshape(4, 8), mesh=mesh("2x4", "x,y"), spec="x,y")
      >>> a.addressable_shards[0].data.shape
      (2, 2)
      >>> tree = shard({"w": np.ones((8, 4)), "b": np.ones(4)}, mesh=mesh("8", "x"),
      ...              spec={"w": "x", "b": None})
      >>> tree["w"].sharding.spec, tree["b"].sharding.spec
      (P('x',), P())
    """
    target = _target(sharding, legacy_spec, mesh, spec)
    if _is_tree(x):
        return _shard_tree(x, *target)
    return _shard_one("x", x, *target)


def _target(
    sharding: object, legacy_spec: PyTree, mesh: object, spec_: PyTree
) -> tuple[Mesh | NamedSharding, PyTree]:
    """The mesh (or sharding) and spec of the call, from its new or its old spelling."""
    if moved(
        "shard",
        old="shard(x, mesh, spec)",
        new="shard(x, mesh=mesh, spec=spec)",
        old_given=isinstance(sharding, Mesh),
        new_given=mesh is not None or spec_ is not None,
        stacklevel=5,
    ):
        return sharding, legacy_spec  # type: ignore[return-value]
    if legacy_spec is not None:
        raise TypeError(
            f"shard: a positional spec ({legacy_spec!r}) goes with a positional mesh "
            "only, which is deprecated; pass shard(x, mesh=mesh, spec=spec)"
        )
    if sharding is not None:
        if not isinstance(sharding, NamedSharding):
            raise TypeError(
                f"shard: sharding={sharding!r} ({type(sharding).__name__}) must be a "
                "NamedSharding; for a mesh write shard(x, mesh=mesh, spec=spec)"
            )
        if mesh is not None or spec_ is not None:
            raise ValueError(
                "shard: pass either a NamedSharding, or mesh= and spec=; got a "
                f"NamedSharding and mesh={mesh!r}, spec={spec_!r}"
            )
        return sharding, None
    if mesh is None:
        raise TypeError(
            "shard: where x goes is missing; pass mesh= (and spec=), e.g. "
            "shard(x, mesh=shardkit.mesh('2x4', 'x,y'), spec='x,y'), or a NamedSharding"
        )
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"shard: mesh={mesh!r} ({type(mesh).__name__}) must be a jax.sharding.Mesh, "
            "e.g. shardkit.mesh('2x4', 'x,y'); a NamedSharding goes in positionally, "
            "shard(x, sharding)"
        )
    return mesh, spec_


def _shard_tree(x: Any, mesh: Mesh | NamedSharding, spec_: Any) -> Any:
    # A list of numbers inside the tree is one array, as it is on its own.
    paths, treedef = jax.tree_util.tree_flatten_with_path(x, is_leaf=_is_numbers)
    specs = _leaf_specs(x, treedef, spec_)
    placed = [
        _checked(f"x{jax.tree_util.keystr(p)}", leaf, mesh, s)
        for (p, leaf), s in zip(paths, specs, strict=True)
    ]
    return treedef.unflatten([jax.device_put(a, s) for a, s in placed])


class _Group:
    """Specs of a subtree's leaves (not a pytree node, so tree.map keeps it whole)."""

    def __init__(self, specs: list[Any]) -> None:
        self.specs = specs


def _leaf_specs(x: Any, treedef: Any, spec_: Any) -> list[Any]:
    """One spec per leaf: from a tree of specs shaped like ``x``, a prefix of it, or one spec."""
    try:
        return treedef.flatten_up_to(spec_)
    except (TypeError, ValueError):
        pass
    try:  # a prefix: a spec (a string, a PartitionSpec or None) for a whole subtree
        groups = jax.tree.map(
            lambda s, sub: _Group([s] * len(jax.tree.leaves(sub, is_leaf=_is_numbers))),
            spec_,
            x,
            is_leaf=lambda s: s is None or isinstance(s, str | PartitionSpec),
        )
        return [
            s
            for g in jax.tree.leaves(groups, is_leaf=lambda g: isinstance(g, _Group))
            for s in g.specs
        ]
    except (TypeError, ValueError):
        return [spec_] * treedef.num_leaves  # one spec for every leaf


def _shard_one(name: str, x: Any, mesh: Mesh | NamedSharding, spec_: Any) -> jax.Array:
    a, sharding = _checked(name, x, mesh, spec_)
    return jax.device_put(a, sharding)


def _checked(
    name: str, x: Any, mesh: Mesh | NamedSharding, spec_: Any
) -> tuple[Any, NamedSharding]:
    """``x`` as an array and its checked sharding (nothing placed yet)."""
    if isinstance(mesh, NamedSharding):
        if spec_ is not None:
            raise ValueError(
                "shard: pass either a NamedSharding, or a Mesh and a spec; got a "
                f"NamedSharding and spec={spec_!r}"
            )
        target_mesh, target_spec = mesh.mesh, mesh.spec
    elif isinstance(mesh, Mesh):
        target_mesh, target_spec = mesh, parse_spec(spec_)
    else:
        raise TypeError(
            f"shard: mesh={mesh!r} ({type(mesh).__name__}) must be a jax.sharding.Mesh "
            "(e.g. shardkit.mesh('2x4', 'x,y')) or a NamedSharding"
        )
    x = _as_array(x, name)
    where = "shard" if name == "x" else f"shard: {name}"
    check_placement(where, np.shape(x), target_spec, target_mesh)
    return x, NamedSharding(target_mesh, target_spec)
