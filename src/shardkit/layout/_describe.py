"""One-line descriptions of how an array is laid out over devices."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, Sharding, SingleDeviceSharding

from shardkit._typing import PyTree
from shardkit.layout._checks import entry_axes
from shardkit.layout._errors import mesh_summary

__all__ = ["describe", "format_bytes"]


def format_bytes(n: float, /) -> str:
    """``128 B``, ``2.0 KiB``, ``4.0 MiB``: binary units, one decimal above bytes."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _dim_label(size: int | None, entry: object) -> str:
    axes = entry_axes(entry)
    text = "" if size is None else str(size)
    if not axes:
        return text
    where = axes[0] if len(axes) == 1 else "(" + ",".join(axes) + ")"
    return f"{text}@{where}"


def _global_type(dtype: str, shape: Sequence[int] | None, sharding: Sharding | None) -> str:
    rank = len(shape) if shape is not None else None
    specs: list[object] = []
    if isinstance(sharding, NamedSharding):
        specs = list(sharding.spec)
        rank = rank if rank is not None else len(specs)
    assert rank is not None
    specs += [None] * (rank - len(specs))
    dims = [_dim_label(None if shape is None else shape[i], specs[i]) for i in range(rank)]
    return f"{dtype}[{','.join(dims)}]"


def _where(sharding: Sharding) -> str:
    if isinstance(sharding, NamedSharding):
        return mesh_summary(sharding.mesh)
    if isinstance(sharding, SingleDeviceSharding):
        (device,) = sharding.device_set
        return f"{device.platform}:{device.id}"
    return f"{type(sharding).__name__} over {len(sharding.device_set)} devices"


def _shards(
    sharding: Sharding, shape: Sequence[int]
) -> dict[tuple[tuple[int, int], ...], list[int]]:
    """Each distinct shard, as its (start, stop) per dimension -> ids of its devices."""
    holders: dict[tuple[tuple[int, int], ...], list[int]] = defaultdict(list)
    for device, index in sharding.devices_indices_map(tuple(shape)).items():
        bounds = tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))
        holders[bounds].append(device.id)
    return holders


def _shard_shape(bounds: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    return tuple(stop - start for start, stop in bounds)


def _unused_axes(sharding: Sharding) -> list[str]:
    if not isinstance(sharding, NamedSharding):
        return []
    used = {a for entry in sharding.spec for a in entry_axes(entry)}
    return [a for a, n in sharding.mesh.shape.items() if a not in used and n > 1]


def _layout_text(dtype: str, itemsize: int | None, shape: Sequence[int], sharding: Sharding) -> str:
    holders = _shards(sharding, shape)
    shapes = sorted({_shard_shape(b) for b in holders})
    if len(shapes) == 1:
        shard_type = f"{dtype}[{','.join(map(str, shapes[0]))}]"
    else:
        lo = [min(s[i] for s in shapes) for i in range(len(shape))]
        hi = [max(s[i] for s in shapes) for i in range(len(shape))]
        dims = [f"{a}" if a == b else f"{a}..{b}" for a, b in zip(lo, hi, strict=True)]
        shard_type = f"{dtype}[{','.join(dims)}] (uneven)"
    size = ""
    if itemsize is not None:
        largest = max(math.prod(s) for s in shapes) * itemsize
        size = f" ({format_bytes(largest)}{' each' if len(holders) > 1 else ''})"
    copies = sorted({len(ids) for ids in holders.values()})
    n = len(holders)
    text = f"{n} shard{'s' * (n != 1)} of {shard_type}{size}"
    if copies == [1]:
        return text + ", 1 copy"
    count = copies[0] if len(copies) == 1 else f"{copies[0]}-{copies[-1]}"
    over = _unused_axes(sharding)
    over_text = f" over {','.join(over)}" if over else ""
    each = " of each" if n > 1 else ""
    return f"{text}, {count} copies{each}{over_text} ({len(sharding.device_set)} devices)"


def _sharding_only(sharding: Sharding) -> str:
    where = _where(sharding)
    if isinstance(sharding, NamedSharding):
        parts = [math.prod(sharding.mesh.shape[a] for a in entry_axes(e)) for e in sharding.spec]
        blocks = math.prod(parts)
        copies = len(sharding.device_set) // max(blocks, 1)
        grid = "x".join(map(str, parts)) if parts else "1"
        return (
            f"{_global_type('', None, sharding)} on {where}: {blocks} shard"
            f"{'s' * (blocks != 1)} ({grid} blocks), {copies} cop{'ies' if copies != 1 else 'y'}"
        )
    return f"{type(sharding).__name__} on {where}: {len(sharding.device_set)} device(s)"


def describe(x: PyTree, /, *, shape: Sequence[int] | None = None) -> str:
    """Describe in one line how ``x`` is laid out over devices.

    Works on ``jax.Array``, ``jax.ShapeDtypeStruct`` (with a sharding), abstract
    values from ``jax.typeof`` inside ``jit`` (Explicit axes carry their sharding),
    NumPy arrays and ``Sharding`` objects (pass ``shape=`` for shard sizes). A pytree
    of those (the parameters of a model, a training state) gives one line per leaf,
    ``path: description``, with the leaf's ``jax.tree_util`` key path.

    Args:
      x: what to describe, or a pytree of such things.
      shape: the global shape, when ``x`` is a bare ``Sharding``.

    Returns:
      One line, as in the example below (one per leaf for a pytree). Replicated
      layouts say how many copies of each shard exist, over which mesh axes, and on
      how many devices.

    Raises:
      TypeError: ``x`` (or a leaf of it) has no shape/dtype and is not a ``Sharding``.

    Example:
      >>> from shardkit.layout import mesh, shard
      >>> m = mesh("2x4", "x,y", axis_types="auto")
      >>> describe(shard(np.zeros((16, 16), np.float32), mesh=m, spec="x,y"))
      'float32[16@x,16@y] on mesh(x=2,y=4): 8 shards of float32[8,4] (128 B each), 1 copy'
      >>> print(describe({"w": shard(np.zeros((8, 4), np.float32), mesh=m, spec="x"), "n": np.zeros(3)}))
      ['n']: float64[3] in host memory (NumPy)
      ['w']: float32[8@x,4] on mesh(x=2,y=4): 2 shards of float32[4,4] (64 B each), 4 copies of each over y (8 devices)
    """
    if shape is None and not _has_layout(x):
        leaves = jax.tree_util.tree_flatten_with_path(x, is_leaf=_has_layout)[0]
        if leaves and not (len(leaves) == 1 and leaves[0][1] is x):
            return "\n".join(
                f"{jax.tree_util.keystr(path)}: {_describe_leaf(jax.tree_util.keystr(path), leaf)}"
                for path, leaf in leaves
            )
    return _describe_one(x, shape)


def _has_layout(x: Any) -> bool:
    return isinstance(x, Sharding) or (hasattr(x, "shape") and hasattr(x, "dtype"))


def _describe_leaf(path: str, leaf: Any) -> str:
    if not _has_layout(leaf):
        raise TypeError(
            f"describe: x{path} is a {type(leaf).__name__}, which has no shape and dtype; "
            "every leaf of a pytree must be a jax.Array, a jax.ShapeDtypeStruct, an "
            "abstract value, a NumPy array or a Sharding"
        )
    return _describe_one(leaf, None)


def _describe_one(x: Any, shape: Sequence[int] | None) -> str:
    if isinstance(x, Sharding):
        if shape is None:
            return _sharding_only(x)
        return f"{_global_type('', shape, x)} on {_where(x)}: {_layout_text('', None, shape, x)}"
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise TypeError(
            f"describe: x={type(x).__name__} has no shape and dtype; pass a jax.Array, "
            "a jax.ShapeDtypeStruct, an abstract value or a Sharding (with shape=...)"
        )
    dtype = (
        str(np.dtype(x.dtype)) if not jnp.issubdtype(x.dtype, jax.dtypes.extended) else str(x.dtype)
    )
    itemsize = getattr(x.dtype, "itemsize", None)
    global_shape = tuple(x.shape)
    sharding = getattr(x, "sharding", None)
    if isinstance(sharding, NamedSharding) and not isinstance(sharding.mesh, jax.sharding.Mesh):
        # Abstract values inside jit: the mesh has no devices, only axis sizes.
        spec = sharding.spec
        parts = [math.prod(sharding.mesh.shape[a] for a in entry_axes(e)) for e in spec]
        parts += [1] * (len(global_shape) - len(parts))
        local = [s // p for s, p in zip(global_shape, parts, strict=True)]
        return (
            f"{_global_type(dtype, global_shape, sharding)} on {mesh_summary(sharding.mesh)} "  # type: ignore[arg-type]
            f"(traced): shards of {dtype}[{','.join(map(str, local))}]"
        )
    if not isinstance(sharding, Sharding):
        where = "host memory (NumPy)" if isinstance(x, np.ndarray) else "no sharding yet"
        return f"{dtype}[{','.join(map(str, global_shape))}] in {where}"
    head = f"{_global_type(dtype, global_shape, sharding)} on {_where(sharding)}"
    return f"{head}: {_layout_text(dtype, itemsize, global_shape, sharding)}"
