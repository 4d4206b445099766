"""Meshes from short strings: ``mesh("2x4", "x,y")``."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from typing import Any, Literal, SupportsIndex, TypeAlias, cast

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from shardkit.layout._validate import is_int

__all__ = ["AxisTypeLike", "mesh", "parse_mesh_shape"]

MeshShapeLike: TypeAlias = str | SupportsIndex | Sequence[SupportsIndex] | np.ndarray
"""``"2x4"``, ``8`` or ``(2, 4)``; NumPy integers and integer arrays too."""
AxisTypeLike: TypeAlias = Literal["auto", "explicit", "manual"] | AxisType
_AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit, "manual": AxisType.Manual}
_DEFAULT_NAMES = ("x", "y", "z", "w")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_mesh_shape(shape: MeshShapeLike, /) -> tuple[int, ...]:
    """``"2x4"`` -> ``(2, 4)``; ints and int sequences (NumPy's too) pass through, validated.

    Raises:
      ValueError: the text is not sizes joined by ``x`` or a size is below 1.
      TypeError: ``shape`` is neither a string, an int nor a sequence of ints.
    """
    if isinstance(shape, str):
        parts = shape.lower().replace("*", "x").replace(",", "x").split("x")
        if not all(p.strip().isdigit() for p in parts):
            raise ValueError(
                f"mesh: shape={shape!r} is not a mesh shape; write sizes joined by 'x', "
                "e.g. '8', '2x4' or '2x2x2'"
            )
        dims = tuple(int(p) for p in parts)
    elif is_int(shape):
        dims = (operator.index(cast(Any, shape)),)
    elif isinstance(shape, Sequence | np.ndarray) and all(is_int(d) for d in shape):
        dims = tuple(operator.index(d) for d in shape)  # NumPy integers too
    else:
        raise TypeError(
            f"mesh: shape={shape!r} ({type(shape).__name__}) must be a string like '2x4', "
            "an int or a tuple of ints, e.g. shardkit.mesh((2, 4), 'x,y')"
        )
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"mesh: shape={shape!r}: every mesh axis needs a size of at least 1")
    return dims


def _parse_names(names: str | Sequence[str] | None, rank: int) -> tuple[str, ...]:
    if names is None:
        if rank > len(_DEFAULT_NAMES):
            raise ValueError(
                f"mesh: a rank-{rank} mesh needs axis names; pass names=('a', 'b', ...)"
            )
        return _DEFAULT_NAMES[:rank]
    if isinstance(names, str):
        parsed = tuple(n.strip() for n in re.split(r"[,\s]+", names.strip()) if n.strip())
    else:
        parsed = tuple(names)
    bad = [n for n in parsed if not isinstance(n, str) or not _NAME.match(n)]
    if bad:
        raise ValueError(f"mesh: names={names!r}: axis names must be identifiers, got {bad}")
    if len(parsed) != rank:
        raise ValueError(
            f"mesh: names={names!r} gives {len(parsed)} axis name(s) for a mesh of rank "
            f"{rank}; give one name per mesh axis"
        )
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"mesh: names={names!r}: axis names must be distinct")
    return parsed


def _parse_axis_types(
    axis_types: AxisTypeLike | Sequence[AxisTypeLike], rank: int
) -> tuple[AxisType, ...]:
    items = (
        [axis_types] if isinstance(axis_types, str | AxisType) else list(axis_types)  # type: ignore[arg-type]
    )
    parsed: list[AxisType] = []
    for item in items:
        if isinstance(item, AxisType):
            parsed.append(item)
        elif isinstance(item, str) and item.lower() in _AXIS_TYPES:
            parsed.append(_AXIS_TYPES[item.lower()])
        else:
            raise ValueError(
                f"mesh: axis_types={axis_types!r}: {item!r} is not an axis type; legal "
                f"values are {sorted(_AXIS_TYPES)} or jax.sharding.AxisType members"
            )
    if len(parsed) == 1:
        return tuple(parsed) * rank
    if len(parsed) != rank:
        raise ValueError(
            f"mesh: axis_types={axis_types!r} gives {len(parsed)} types for a mesh of "
            f"rank {rank}; give one, or one per axis"
        )
    return tuple(parsed)


def _resolve_devices(devices: Sequence[Any], size: int) -> list[Any]:
    by_id = {d.id: d for d in jax.devices()}
    resolved: list[Any] = []
    for d in devices:
        if is_int(d):
            d = operator.index(d)
            if d not in by_id:
                raise ValueError(
                    f"mesh: devices=... names device id {d}, which does not exist; "
                    f"the ids are {sorted(by_id)}"
                )
            resolved.append(by_id[d])
        elif isinstance(getattr(d, "id", None), int):
            resolved.append(d)
        else:
            raise TypeError(
                f"mesh: devices=... holds {d!r} ({type(d).__name__}), which is neither a "
                "jax.Device nor a device id; pass jax.devices() entries or ints such as "
                f"{sorted(by_id)[:4]}"
            )
    if len(resolved) != size:
        raise ValueError(
            f"mesh: {len(resolved)} device(s) given for a mesh of {size} devices; "
            "give exactly one device per mesh position"
        )
    if len({d.id for d in resolved}) != len(resolved):
        raise ValueError("mesh: devices=... lists a device more than once")
    return resolved


def mesh(
    shape: MeshShapeLike,
    names: str | Sequence[str] | None = None,
    /,
    *,
    axis_types: AxisTypeLike | Sequence[AxisTypeLike] = "explicit",
    devices: Sequence[object] | np.ndarray | None = None,
) -> Mesh:
    """Build a device mesh from a short description.

    Without ``devices`` the mesh spans the first ``prod(shape)`` devices in the order
    :func:`jax.make_mesh` chooses (so a smaller mesh is a sub-mesh of the machine).
    With ``devices`` (``jax.Device`` objects or device ids) it uses exactly those, in
    row-major order, as the seeds' "half mesh" and "partial mesh" do. Like
    ``jax.make_mesh`` the axes default to ``Explicit``.

    Args:
      shape: ``"2x4"``, ``8`` or ``(2, 4)`` (NumPy integers accepted).
      names: ``"x,y"`` or ``("x", "y")``; defaults to ``x``, ``y``, ``z``, ``w``.
      axis_types: ``"auto"``, ``"explicit"``, ``"manual"`` or ``AxisType``, one for all
        axes or one per axis.
      devices: the devices to lay out, one per mesh position (a list, or an array
        such as another mesh's ``.devices``, read in row-major order).

    Returns:
      A ``jax.sharding.Mesh``.

    Raises:
      ValueError: malformed shape, names or axis types; more devices asked for than
        exist; unknown or repeated devices.

    Example:
      >>> m = mesh("2x4", "x,y", axis_types="auto")
      >>> dict(m.shape)
      {'x': 2, 'y': 4}
      >>> [d.id for d in mesh("2x2", "x,y", devices=[0, 2, 4, 6]).devices.flat]
      [0, 2, 4, 6]
    """
    dims = parse_mesh_shape(shape)
    axis_names = _parse_names(names, len(dims))
    types = _parse_axis_types(axis_types, len(dims))
    size = math.prod(dims)
    if devices is None:
        available = jax.devices()
        if size > len(available):
            raise ValueError(
                f"mesh: shape={shape!r} needs {size} devices but only {len(available)} "
                "exist. Use a smaller mesh, or simulate more CPU devices with "
                f"shardkit.use_cpu_devices({size}) before JAX starts "
                f"(CLI: --devices {size})."
            )
        return jax.make_mesh(dims, axis_names, axis_types=types, devices=available[:size])
    if isinstance(devices, np.ndarray):
        devices = list(devices.flat)  # e.g. another mesh's .devices, row-major
    elif isinstance(devices, str) or not isinstance(devices, Sequence):
        raise TypeError(
            f"mesh: devices={devices!r} ({type(devices).__name__}) must be a list of "
            "jax.Device objects or device ids, e.g. devices=[0, 2, 4, 6]"
        )
    grid = np.empty(len(devices), dtype=object)
    grid[:] = _resolve_devices(devices, size)
    return Mesh(grid.reshape(dims), axis_names, axis_types=types)
