"""Halo exchange for stencils and particle-mesh codes, with ``ppermute`` only.

Each device's block is extended by ``halo`` cells on both sides of every split
axis, taken from the neighbouring devices' blocks (periodic: the ends wrap round;
non-periodic: zeros beyond the domain). Axes are exchanged one after the other,
each on the block the previous exchange extended, so corner and edge cells of a
2-D decomposition arrive in two hops, as in jaxDecomp. Each split axis costs two
``collective_permute``s of ``halo`` cells times the block's cross-section; no
device ever holds more than its extended block.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from shardkit._programs import after, cached, shard_jit
from shardkit.fft._operand import located
from shardkit.layout.internal import (
    SpecLike,
    check_placement,
    mesh_summary,
    normalize,
    operand,
    spec_summary,
)

__all__ = ["halo_exchange"]


def _widths(where: str, halo: int | Sequence[int], rank: int) -> tuple[int, ...]:
    if isinstance(halo, int):
        return (operator.index(halo),) * rank
    widths = tuple(operator.index(h) for h in halo)
    if len(widths) != rank:
        raise ValueError(f"{where}: halo={widths} needs one width per axis of x (rank {rank})")
    return widths


def _flags(where: str, periodic: bool | Sequence[bool], rank: int) -> tuple[bool, ...]:
    if isinstance(periodic, bool):
        return (periodic,) * rank
    flags = tuple(bool(p) for p in periodic)
    if len(flags) != rank:
        raise ValueError(f"{where}: periodic={flags} needs one flag per axis of x (rank {rank})")
    return flags


def _exchange(
    block: jax.Array, axis: int, width: int, group: tuple[str, ...], parts: int, periodic: bool
) -> jax.Array:
    """Extend ``block`` by ``width`` cells on both sides of ``axis`` from its neighbours."""
    n = block.shape[axis]
    left = jax.lax.slice_in_dim(block, 0, width, axis=axis)  # goes to the previous device
    right = jax.lax.slice_in_dim(block, n - width, n, axis=axis)  # to the next one
    if parts == 1:
        if periodic:
            return jnp.concatenate([right, block, left], axis=axis)
        zeros = jnp.zeros_like(left)
        return jnp.concatenate([zeros, block, zeros], axis=axis)
    name = group[0] if len(group) == 1 else group
    forward = [(i, i + 1) for i in range(parts - 1)] + ([(parts - 1, 0)] if periodic else [])
    backward = [(i + 1, i) for i in range(parts - 1)] + ([(0, parts - 1)] if periodic else [])
    # A device no pair sends to receives zeros: the non-periodic domain's ends. The
    # second permute waits for the first (one chain of collectives: see after()).
    from_prev = jax.lax.ppermute(right, name, perm=forward)
    from_next = jax.lax.ppermute(after(left, from_prev), name, perm=backward)
    return jnp.concatenate([from_prev, block, from_next], axis=axis)


@cached
def _program(
    mesh: Any, spec: PartitionSpec, widths: tuple[int, ...], periodic: tuple[bool, ...]
) -> Any:
    sizes = dict(mesh.shape)
    entries = normalize(spec, len(widths))

    def local(block: jax.Array) -> jax.Array:
        for axis, (w, group) in enumerate(zip(widths, entries, strict=True)):
            if w:
                parts = math.prod(sizes[a] for a in group)
                block = _exchange(block, axis, w, tuple(group), parts, periodic[axis])
        return block

    return shard_jit(local, mesh, spec, spec)


def halo_exchange(
    x: jax.typing.ArrayLike,
    /,
    halo: int | Sequence[int],
    *,
    periodic: bool | Sequence[bool] = True,
    spec: SpecLike = None,
) -> jax.Array:
    """Extend every device's block by ``halo`` cells from its neighbours' blocks.

    The result keeps ``x``'s spec; each block of length ``b`` along an axis with
    width ``h`` becomes ``h + b + h`` long (the global length grows by ``2 h`` per
    block): the first ``h`` cells are the previous block's last ``h``, the last
    ``h`` the next block's first. Periodic axes wrap round (on an unsplit axis too);
    non-periodic ones get zeros beyond the domain. Split axes are exchanged with
    ``ppermute`` only (two per axis with a halo), one axis after the other, so
    corners of a 2-D decomposition are filled too.

    Args:
      x: the sharded array (eager, or traced on Explicit axes).
      halo: width per axis (one int for every axis); 0 leaves an axis alone. At
        most the block length.
      periodic: whether each axis wraps round (one bool for every axis).
      spec: ``x``'s spec, needed inside ``jit`` on Auto axes: there the split is
        chosen by the partitioner after tracing, but the output's shape (``2 h``
        more cells per block) must be known while tracing.

    Returns:
      The array of extended blocks, split as ``x``.

    Raises:
      ValueError: a width longer than the block, a negative width, a spec the
        mesh does not divide, or a split that cannot be known (pass ``spec=``).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> y = shardkit.fft.halo_exchange(shardkit.shard(np.arange(16.0), mesh=m, spec="x"), 1)
      >>> y.shape, np.asarray(y)[:4].tolist()
      ((32,), [15.0, 0.0, 1.0, 2.0])
    """
    arr = x if isinstance(x, jax.Array) else jnp.asarray(x)
    where = "halo_exchange"
    widths = _widths(where, halo, arr.ndim)
    flags = _flags(where, periodic, arr.ndim)
    mesh, pspec = located(operand(where, "x", arr, spec=spec))
    check_placement(where, arr.shape, pspec, mesh)
    sizes = dict(mesh.shape)
    for axis, (w, group) in enumerate(zip(widths, normalize(pspec, arr.ndim), strict=True)):
        block = arr.shape[axis] // math.prod(sizes[a] for a in group)
        if w < 0 or w > block:
            raise ValueError(
                f"{where}: halo={widths} asks {w} cells on axis {axis}, whose blocks hold "
                f"{block} (array shape={tuple(arr.shape)}, spec={spec_summary(pspec)}, "
                f"{mesh_summary(mesh)}); use 0 <= halo <= block length, or fewer devices"
            )
    return _program(mesh, pspec, widths, flags)(arr)
