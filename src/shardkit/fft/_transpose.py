"""Executing a plan on one device's block: local FFTs and ``all_to_all`` moves.

Runs inside ``jax.shard_map`` (or a ``custom_partitioning`` lowering), where the
mesh axis names are bound. Every step is a JAX primitive with JVP and transpose
rules, so the per-shard function is differentiable as is.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from shardkit.fft._plan import Step

__all__ = ["move", "run_steps"]


def move(block: jax.Array, mesh_axes: tuple[str, ...], src: int, dst: int) -> jax.Array:
    """Move the split over ``mesh_axes`` from array axis ``src`` to ``dst``.

    One tiled ``all_to_all``: the block is cut into ``|mesh_axes|`` pieces along
    ``dst``, piece ``i`` goes to the ``i``-th device of the group, and the received
    pieces are joined along ``src``. Each device sends and receives
    ``(g - 1) / g`` of its block (``g`` devices in the group); no device ever holds
    more than one block.
    """
    name = mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes
    return jax.lax.all_to_all(block, name, split_axis=dst, concat_axis=src, tiled=True)


def run_steps(block: jax.Array, steps: Sequence[Step], norm: str | None) -> jax.Array:
    """Apply ``steps`` (see :class:`~shardkit.fft._plan.Step`) to ``block`` in order."""
    for step in steps:
        if step.op == "all_to_all":
            block = move(block, step.mesh_axes, step.src, step.dst)
        elif step.op == "fft":
            block = jnp.fft.fftn(block, s=step.sizes, axes=step.axes, norm=norm)
        elif step.op == "ifft":
            block = jnp.fft.ifftn(block, s=step.sizes, axes=step.axes, norm=norm)
        elif step.op == "rfft":
            block = jnp.fft.rfft(block, n=step.sizes[0], axis=step.axes[0], norm=norm)
        else:
            block = jnp.fft.irfft(block, n=step.sizes[0], axis=step.axes[0], norm=norm)
    return block
