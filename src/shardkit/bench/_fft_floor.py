"""The fft suite's floor: a plan's local FFTs alone and its ``all_to_all`` moves alone.

A distributed FFT cannot cost less than the batched 1-D FFTs it computes plus the
exchanges it needs. Each floor program is a ``shard_map`` over the same per-device
blocks as the transform it bounds, doing only one kind of work, each in its most
favourable form:

``floor-fft``
  every local transform of the plan, on a block of the same size, with the
  transformed axes last (contiguous, as XLA's FFT wants them): no transpose, no copy
  between stages (the reshapes between them are free in row-major order).
``floor-a2a`` (``floor-a2a-natural`` for ``out_layout="natural"``)
  every ``all_to_all`` of the plan, on a block of the same size and the same device
  group, each piece contiguous (split and joined along the leading axis): no
  packing or unpacking around the exchange.

The stages of one program form a single chain of data dependencies, so their
collectives are ordered (see :func:`shardkit.inspect.comms`'s ``assert_ordered``).
A transform's ``vs floor`` is its time over ``floor-fft`` plus its floor of moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from shardkit.fft import FFTPlan, Step

__all__ = ["floor_fft", "floor_moves"]


def _ffts(block: jax.Array, steps: Sequence[Step]) -> jax.Array:
    """Each local transform of ``steps`` in turn, along contiguous trailing axes."""
    size = block.size
    for step in steps:
        if step.op != "fft":
            raise NotImplementedError(f"floor_fft: step {step} (only complex fftn plans)")
        k = len(step.sizes)
        block = block.reshape((size // math.prod(step.sizes), *step.sizes))
        block = jnp.fft.fftn(block, axes=tuple(range(1, k + 1)))
    return block


def _exchanges(block: jax.Array, steps: Sequence[Step]) -> jax.Array:
    """Each ``all_to_all`` of ``steps`` in turn, on contiguous pieces of the whole block."""
    size = block.size
    for step in steps:
        if math.prod(step.block) != size:
            raise NotImplementedError(f"floor_moves: step {step} pads its block")
        name = step.mesh_axes[0] if len(step.mesh_axes) == 1 else step.mesh_axes
        block = block.reshape((step.group, size // step.group))
        block = jax.lax.all_to_all(block, name, split_axis=0, concat_axis=0, tiled=True)
    return block


def _program(
    plan: FFTPlan, mesh: Mesh, body: Callable[[jax.Array], jax.Array]
) -> Callable[[jax.Array], jax.Array]:
    spec = PartitionSpec(*plan.in_spec)

    def local(block: jax.Array) -> jax.Array:
        return body(block.reshape(-1)).reshape(block.shape)

    return jax.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec)


def floor_fft(plan: FFTPlan, mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """A ``shard_map`` (input and output split as ``plan.in_spec``) running only its FFTs.

    Raises:
      NotImplementedError: the plan has a real (R2C or C2R) transform.
    """
    ffts = [s for s in plan.steps if s.op != "all_to_all"]
    return _program(plan, mesh, lambda b: _ffts(b, ffts))


def floor_moves(plan: FFTPlan, mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """A ``shard_map`` (input and output split as ``plan.in_spec``) running only its moves.

    Raises:
      NotImplementedError: a move of the plan pads its block.
    """
    moves = [s for s in plan.steps if s.op == "all_to_all"]
    return _program(plan, mesh, lambda b: _exchanges(b, moves))
