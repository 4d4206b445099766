"""The device-independent picture of a sharded array: which devices hold which block.

A :class:`Layout` is built from a ``{device: index}`` map (what
``Sharding.devices_indices_map(shape)`` returns), so the renderers never touch JAX and
tests can feed in fake device objects (anything with ``id`` and ``platform``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

__all__ = [
    "DeviceLike",
    "Layout",
    "compress_ids",
    "device_label",
    "label_groups",
    "layout_from_index_map",
]


class DeviceLike(Protocol):
    """What the renderers read from a device: ``jax.Device`` or a test double."""

    @property
    def id(self) -> int: ...

    @property
    def platform(self) -> str: ...


Interval = tuple[int, int]
_Device = TypeVar("_Device", bound=DeviceLike)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where every element of an array lives.

    Attributes:
      shape: the global array shape.
      shards: one ``(devices, index)`` pair per distinct shard, ``index`` holding a
        half-open ``(start, stop)`` interval per axis and ``devices`` sorted by id.
      header: a one-line description, e.g. ``float32[16,16] mesh(x=2,y=4) P('x', 'y')``.
    """

    shape: tuple[int, ...]
    shards: tuple[tuple[tuple[DeviceLike, ...], tuple[Interval, ...]], ...]
    header: str = ""

    @property
    def rank(self) -> int:
        return len(self.shape)

    def blocks(self, axis: int) -> tuple[Interval, ...]:
        """The finest intervals of ``axis`` that no shard boundary cuts."""
        bounds = sorted(
            {0, self.shape[axis]} | {b for _, index in self.shards for b in index[axis]}
        )
        if len(bounds) < 2:  # a zero-length axis
            return ((0, 0),)
        return tuple(itertools.pairwise(bounds))

    def devices_at(self, point: Sequence[int]) -> tuple[DeviceLike, ...]:
        """Devices holding the block that starts at ``point`` (one start per axis)."""
        found: list[DeviceLike] = []
        for devices, index in self.shards:
            if all(_contains(iv, p) for iv, p in zip(index, point, strict=True)):
                found.extend(devices)
        return tuple(sorted(set(found), key=lambda d: d.id))


def _contains(interval: Interval, point: int) -> bool:
    start, stop = interval
    return start <= point < stop or start == stop == point


def _to_interval(index: object, size: int, *, device: object) -> Interval:
    if isinstance(index, int):
        index = slice(index, index + 1)
    if not isinstance(index, slice):
        raise TypeError(
            f"devices_indices_map: device {device} has index {index!r}; expected a tuple "
            "of slices (or ints), one per array axis"
        )
    start, stop, step = index.indices(size)
    if step != 1:
        raise NotImplementedError(
            f"devices_indices_map: device {device} holds a strided slice {index!r}; "
            "show() draws contiguous blocks only"
        )
    return (start, max(start, stop))


def layout_from_index_map(
    index_map: Mapping[_Device, Sequence[slice | int]],
    shape: Sequence[int],
    /,
    *,
    header: str = "",
) -> Layout:
    """Builds a :class:`Layout` from a ``{device: tuple of slices}`` map.

    Args:
      index_map: each device's index into the global array, as returned by
        ``sharding.devices_indices_map(shape)``; devices holding the same index are
        replicas of one shard.
      shape: the global array shape.
      header: the description line shown above the picture.

    Returns:
      The layout, shards ordered by their first device id.

    Raises:
      ValueError: an index does not have one entry per axis, or the map is empty.
    """
    shape = tuple(int(n) for n in shape)
    if not index_map:
        raise ValueError("layout_from_index_map: index_map is empty; expected one entry per device")
    by_index: dict[tuple[Interval, ...], list[DeviceLike]] = {}
    for device, index in index_map.items():
        index = tuple(index)
        if len(index) != len(shape):
            raise ValueError(
                f"layout_from_index_map: device {device} has a {len(index)}-axis index "
                f"{index!r} for an array of shape {shape} (rank {len(shape)})"
            )
        key = tuple(_to_interval(ix, n, device=device) for ix, n in zip(index, shape, strict=True))
        by_index.setdefault(key, []).append(device)
    shards = sorted(
        ((tuple(sorted(devs, key=lambda d: d.id)), key) for key, devs in by_index.items()),
        key=lambda shard: shard[0][0].id,
    )
    return Layout(shape=shape, shards=tuple(shards), header=header)


def compress_ids(ids: Sequence[int]) -> str:
    """Writes device ids compactly: runs as ``0-7``, strides as ``0,8..56``.

    Consecutive runs of three or more ids become ``first-last``; arithmetic
    progressions of four or more ids with a step above one become
    ``first,second..last``; anything else is listed with commas.

    Example:
      >>> compress_ids([0, 1, 2, 3, 8, 16, 24, 32, 5])
      '0-3,5,8,16..32'
    """
    return ",".join(_id_groups(ids))


def _id_groups(ids: Sequence[int]) -> list[str]:
    ids = sorted(set(ids))
    groups: list[str] = []
    i = 0
    while i < len(ids):
        if i + 1 == len(ids):
            groups.append(str(ids[i]))
            break
        step = ids[i + 1] - ids[i]
        j = i + 1
        while j + 1 < len(ids) and ids[j + 1] - ids[j] == step:
            j += 1
        length = j - i + 1
        if step == 1 and length >= 3:
            groups.append(f"{ids[i]}-{ids[j]}")
            i = j + 1
        elif step > 1 and length >= 4:
            groups.append(f"{ids[i]},{ids[i + 1]}..{ids[j]}")
            i = j + 1
        else:
            groups.append(str(ids[i]))
            i += 1
    return groups


def device_label(devices: Sequence[DeviceLike], *, short: bool = False) -> str:
    """``CPU 0-3`` (or ``0-3`` when ``short``) for the devices holding one block."""
    ids = compress_ids([d.id for d in devices])
    if short or not devices:
        return ids
    return f"{devices[0].platform.upper()} {ids}"


def label_groups(devices: Sequence[DeviceLike]) -> list[str]:
    """The comma-separated groups of :func:`compress_ids`, for wrapping labels."""
    return _id_groups([d.id for d in devices])
