"""``fftshift``/``ifftshift`` of sharded arrays: a roll by half, ``ppermute`` only.

Rolling a split axis by ``s = q b + r`` (blocks of length ``b``) gives each device
the tail ``r`` cells of the block ``q + 1`` places before it and the head
``b - r`` cells of the block ``q`` places before it: two ``collective_permute``s
(one when ``r == 0``) of parts of the block; unsplit axes roll locally.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from shardkit._programs import cached, shard_jit
from shardkit.fft._operand import path
from shardkit.layout.internal import check_placement, normalize, operand

__all__ = ["shift"]


def _roll(block: jax.Array, axis: int, s: int, group: tuple[str, ...], parts: int) -> jax.Array:
    if parts == 1:
        return jnp.roll(block, s, axis=axis)
    b = block.shape[axis]
    q, r = divmod(s, b)
    name = group[0] if len(group) == 1 else group

    def sent(piece: jax.Array, hop: int) -> jax.Array:
        hop %= parts
        if hop == 0:
            return piece
        return jax.lax.ppermute(piece, name, perm=[(i, (i + hop) % parts) for i in range(parts)])

    head = sent(jax.lax.slice_in_dim(block, 0, b - r, axis=axis), q)
    if r == 0:
        return head
    tail = sent(jax.lax.slice_in_dim(block, b - r, b, axis=axis), q + 1)
    return jnp.concatenate([tail, head], axis=axis)


@cached
def _program(mesh: Any, spec: PartitionSpec, shifts: tuple[int, ...]) -> Any:
    sizes = dict(mesh.shape)
    entries = normalize(spec, len(shifts))

    def local(block: jax.Array) -> jax.Array:
        for axis, (s, group) in enumerate(zip(shifts, entries, strict=True)):
            if s:
                parts = math.prod(sizes[a] for a in group)
                block = _roll(block, axis, s, tuple(group), parts)
        return block

    return shard_jit(local, mesh, spec, spec)


def shift(
    where: str, x: jax.typing.ArrayLike, axes: int | Sequence[int] | None, inverse: bool
) -> jax.Array:
    """Roll ``axes`` of ``x`` by ``n // 2`` (``-(n // 2)`` for the inverse)."""
    arr = x if isinstance(x, jax.Array) else jnp.asarray(x)
    reference = jnp.fft.ifftshift if inverse else jnp.fft.fftshift
    op = operand(where, "x", arr)
    route, mesh, pspec = path(op)
    if route in ("local", "auto"):
        return reference(arr, axes)  # on one device, or the partitioner's to place
    rank = arr.ndim
    chosen = range(rank) if axes is None else [axes] if isinstance(axes, int) else axes
    shifts = [0] * rank
    for a in chosen:
        if not -rank <= a < rank:
            raise ValueError(f"{where}: axes={axes} names axis {a}, out of range for rank {rank}")
        n = arr.shape[a]
        shifts[a % rank] = (-(n // 2) if inverse else n // 2) % n if n else 0
    assert pspec is not None  # the eager and explicit paths know the split
    check_placement(where, arr.shape, pspec, mesh)
    return _program(mesh, pspec, tuple(shifts))(arr)
