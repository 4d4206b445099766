"""Global transposes between pencil layouts, for hand-written spectral solvers.

A pencil layout leaves one axis of a 3-D array whole on every device: the X
pencil ``P(None, 'x', 'y')`` holds axis 0 whole, the Y pencil ``P('x', None, 'y')``
axis 1, the Z pencil ``P('x', 'y', None)`` axis 2. Moving from one to the next
costs one tiled ``all_to_all`` over the mesh axes that change place; the values
(the global array) never change, only which device holds what. Each device sends
``(g - 1) / g`` of its block (``g`` devices in the group).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from shardkit._programs import cached, shard_jit
from shardkit.fft._operand import located
from shardkit.fft._transpose import move
from shardkit.layout.internal import (
    SpecLike,
    check_placement,
    mesh_summary,
    normalize,
    operand,
    spec_summary,
    to_pspec,
)

__all__ = ["transpose_split", "x_to_y", "y_to_x", "y_to_z", "z_to_y"]


@cached
def _program(mesh: Any, spec: PartitionSpec, src: int, dst: int, rank: int) -> Any:
    entries = list(normalize(spec, rank))
    group = tuple(entries[src])
    entries[dst] = (*entries[dst], *group)
    entries[src] = ()
    out = to_pspec(tuple(entries))

    def local(block: jax.Array) -> jax.Array:
        return move(block, group, src, dst)

    return shard_jit(local, mesh, spec, out)


def transpose_split(
    x: jax.typing.ArrayLike, /, *, src: int, dst: int, spec: SpecLike = None
) -> jax.Array:
    """Move the split of axis ``src`` onto axis ``dst`` (one ``all_to_all``).

    ``src`` becomes whole on every device; ``dst`` gains ``src``'s mesh axes as its
    minor-most split. The values are unchanged.

    Args:
      x: the sharded array (eager, or traced on Explicit axes).
      src: the axis that gives up its split.
      dst: the axis that takes it.
      spec: ``x``'s spec, needed inside ``jit`` on Auto axes.

    Returns:
      ``x`` in the new layout.

    Raises:
      ValueError: ``src``/``dst`` out of range or equal, ``src`` not split, or
        ``dst``'s length not divisible by the devices it would be split over.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> x = shardkit.shard(np.ones((8, 8, 8)), mesh=m, spec="x,y,None")
      >>> shardkit.fft.transpose_split(x, src=1, dst=2).sharding.spec
      P('x', None, 'y')
    """
    arr = x if isinstance(x, jax.Array) else jnp.asarray(x)
    where = "transpose_split"
    rank = arr.ndim
    if not (-rank <= src < rank and -rank <= dst < rank) or src % rank == dst % rank:
        raise ValueError(
            f"{where}: src={src}, dst={dst} must be two different axes of x (rank {rank})"
        )
    src, dst = src % rank, dst % rank
    mesh, pspec = located(operand(where, "x", arr, spec=spec))
    check_placement(where, arr.shape, pspec, mesh)
    entries = normalize(pspec, rank)
    sizes = dict(mesh.shape)
    g = math.prod(sizes[a] for a in entries[src])
    if g == 1:
        raise ValueError(
            f"{where}: axis {src} is not split (array shape={tuple(arr.shape)}, "
            f"spec={spec_summary(pspec)}, {mesh_summary(mesh)}); nothing to move"
        )
    parts = g * math.prod(sizes[a] for a in entries[dst])
    if arr.shape[dst] % parts:
        raise ValueError(
            f"{where}: axis {dst} (length {arr.shape[dst]}) cannot take axis {src}'s split: "
            f"it would be split over {parts} devices, which do not divide it (array "
            f"shape={tuple(arr.shape)}, spec={spec_summary(pspec)}, {mesh_summary(mesh)}). "
            "Pad that axis to a multiple, or move the split elsewhere."
        )
    return _program(mesh, pspec, src, dst, rank)(arr)


def x_to_y(x: jax.typing.ArrayLike, /, *, spec: SpecLike = None) -> jax.Array:
    """X pencil -> Y pencil: axis 1's split moves to axis 0 (one ``all_to_all``).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> x = shardkit.shard(np.ones((8, 8, 8)), mesh=m, spec="None,x,y")
      >>> shardkit.fft.x_to_y(x).sharding.spec
      P('x', None, 'y')
    """
    return transpose_split(x, src=1, dst=0, spec=spec)


def y_to_z(x: jax.typing.ArrayLike, /, *, spec: SpecLike = None) -> jax.Array:
    """Y pencil -> Z pencil: axis 2's split moves to axis 1 (one ``all_to_all``).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> x = shardkit.shard(np.ones((8, 8, 8)), mesh=m, spec="x,None,y")
      >>> shardkit.fft.y_to_z(x).sharding.spec
      P('x', 'y', None)
    """
    return transpose_split(x, src=2, dst=1, spec=spec)


def z_to_y(x: jax.typing.ArrayLike, /, *, spec: SpecLike = None) -> jax.Array:
    """Z pencil -> Y pencil: axis 1's split moves back to axis 2 (inverse of :func:`y_to_z`).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> x = shardkit.shard(np.ones((8, 8, 8)), mesh=m, spec="x,y,None")
      >>> shardkit.fft.z_to_y(x).sharding.spec
      P('x', None, 'y')
    """
    return transpose_split(x, src=1, dst=2, spec=spec)


def y_to_x(x: jax.typing.ArrayLike, /, *, spec: SpecLike = None) -> jax.Array:
    """Y pencil -> X pencil: axis 0's split moves back to axis 1 (inverse of :func:`x_to_y`).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> x = shardkit.shard(np.ones((8, 8, 8)), mesh=m, spec="x,None,y")
      >>> shardkit.fft.y_to_x(x).sharding.spec
      P(None, 'x', 'y')
    """
    return transpose_split(x, src=0, dst=1, spec=spec)
