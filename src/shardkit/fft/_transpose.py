"""Executing a plan on one device's block: local FFTs and ``all_to_all`` moves.

Runs inside ``jax.shard_map`` (or a ``custom_partitioning`` lowering), where the
mesh axis names are bound. Every step is a JAX primitive with JVP and transpose
rules, so the per-shard function is differentiable as is.

XLA's FFT transforms the trailing axes of its operand, so an FFT along any other
axis costs a transpose in and a transpose out (that is what ``jnp.fft.fft`` does
for ``axis=0``). The executor instead keeps the block in a *physical* axis order
that may differ from the logical one: before each local FFT it moves the
transformed axes last (if they are not already), runs the FFT there, and leaves
them there; an ``all_to_all`` splits and joins whichever physical axes hold the
logical ones; one transpose after the last FFT restores the logical order (before
any remaining moves, which then exchange contiguous pieces). XLA fuses each
of those transposes with the packing or unpacking of the neighbouring
``all_to_all``, so an axis costs one pass over the block instead of two (as in
jaxDecomp, which keeps every 1-D FFT on the contiguous axis the same way). A move
that an FFT of its source axis follows is staged further (:func:`_staged`): the
receiving axis first and the transformed axis last, so that the exchange sends
contiguous pieces and the FFT reads the received block as it lands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from shardkit.fft._steps import Pad, Step
from shardkit.layout.internal import padding_scope

__all__ = ["move", "pad_levels", "run_steps", "trim_levels"]

LAST_CHUNKS = 4
"""At most this many pieces for the last exchange when a transpose to the output order follows.

That transpose reads every piece of the last FFT's output, in a loop that joins them:
at 256^3 complex64 on a 2x4 mesh (default layout) 16 pieces there ran 1.2x slower
than 4 and 2 pieces; the transposed layout has no such transpose and keeps them all.
"""


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


def pad_levels(block: jax.Array, axis: int, levels: Sequence[Pad]) -> jax.Array:
    """Zero-pad ``axis`` level by level (outermost first) before an ``all_to_all``.

    Level ``(g, before, after)`` pads each current piece from ``before`` to
    ``after`` and cuts it into ``g`` pieces; the ``all_to_all`` then sends the
    pieces of the innermost level to the group's devices.
    """
    lead, tail = block.shape[:axis], block.shape[axis + 1 :]
    cuts: tuple[int, ...] = ()
    for g, before, after in levels:
        if after != before:
            widths = [(0, 0)] * block.ndim
            widths[len(lead) + len(cuts)] = (0, after - before)
            block = jnp.pad(block, widths)
        cuts += (g,)
        block = block.reshape((*lead, *cuts, after // g, *tail))
    return block.reshape((*lead, -1, *tail))


def _padded(shape: tuple[int, ...], axis: int, levels: Sequence[Pad]) -> tuple[int, ...]:
    """``shape`` after :func:`pad_levels` (each level pads every piece it finds)."""
    n = shape[axis]
    for _, before, after in levels:
        n = n // before * after
    return (*shape[:axis], n, *shape[axis + 1 :])


def trim_levels(block: jax.Array, axis: int, levels: Sequence[Pad]) -> jax.Array:
    """Undo :func:`pad_levels` after an ``all_to_all`` joined the pieces on ``axis``."""
    lead, tail = block.shape[:axis], block.shape[axis + 1 :]
    cuts = tuple(g for g, _, _ in levels)
    block = block.reshape((*lead, *cuts, -1, *tail))
    for j in reversed(range(len(levels))):
        _, before, after = levels[j]
        block = block.reshape((*lead, *cuts[:j], after, *tail))
        if before != after:
            block = jax.lax.slice_in_dim(block, 0, before, axis=len(lead) + j)
    return block


def _local_fft(block: jax.Array, step: Step, k: int, norm: str | None) -> jax.Array:
    """``step``'s transform of the ``k`` trailing (physical) axes of ``block``.

    The leading axes are merged into one first. XLA's CPU FFT takes only a
    row-major operand, and its layout assignment can hand it another (a trimmed
    block after a transpose, under ``vmap`` or on Auto axes: a ``RET_CHECK`` in
    ``fft_thunk.cc``); a reshape that merges axes cannot be a relabelling of such a
    layout with the merged axes out of order, so XLA writes the operand out
    row-major (a copy it fuses with the trim).
    """
    lead = block.shape[: block.ndim - k]
    block = block.reshape((math.prod(lead), *block.shape[block.ndim - k :]))
    out = _local_fft_2(block, step, k, norm)
    return out.reshape((*lead, *out.shape[1:]))


def _local_fft_2(block: jax.Array, step: Step, k: int, norm: str | None) -> jax.Array:
    trailing = tuple(range(block.ndim - k, block.ndim))
    if step.op == "fft":
        return jnp.fft.fftn(block, s=step.sizes, axes=trailing, norm=norm)
    if step.op == "ifft":
        return jnp.fft.ifftn(block, s=step.sizes, axes=trailing, norm=norm)
    if step.op == "rfft":
        return jnp.fft.rfft(block, n=step.sizes[0], axis=-1, norm=norm)
    return jnp.fft.irfft(block, n=step.sizes[0], axis=-1, norm=norm)


def _fft_step(
    block: jax.Array,
    order: tuple[int, ...],
    step: Step,
    rest: tuple[int, ...],
    norm: str | None,
) -> tuple[jax.Array, tuple[int, ...]]:
    """``step``'s local FFT: its axes moved last (the others in ``rest``'s sequence)."""
    k = len(step.axes)
    if order[len(order) - k :] != step.axes:
        new = tuple(a for a in rest if a not in step.axes) + step.axes
        block = jnp.transpose(block, [order.index(a) for a in new])
        order = new
    return _local_fft(block, step, k, norm), order


def _staged(
    move_step: Step, fft_step: Step | None, rest: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The physical order to hold before ``move_step`` when ``fft_step`` follows it.

    ``(dst, others..., fft axes...)``: the ``all_to_all`` then cuts ``dst``, the
    leading axis, into contiguous pieces and joins the received ones along the last
    axis, which is ``src``, so the FFT after it runs on the block as received. The
    transpose into this order fuses with the packing of the pieces: one pass over
    the block, against three (pack, join, transpose for the FFT) with the exchange
    on the axes where they are. ``others`` follow ``rest``'s sequence (``out_order``
    before the last FFT, so that the transposed layout needs no last transpose).
    ``None`` when ``fft_step`` does not transform ``src`` alone with ``src`` last.
    """
    if fft_step is None or fft_step.op == "all_to_all" or move_step.pad or move_step.trim:
        return None
    if fft_step.axes[-1] != move_step.src or move_step.dst in fft_step.axes:
        return None
    busy = (move_step.dst, *fft_step.axes)
    return (move_step.dst, *(a for a in rest if a not in busy), *fft_step.axes)


def _chunk_axis(
    block: jax.Array, order: tuple[int, ...], move_step: Step, fft_step: Step, chunks: int
) -> int | None:
    """The logical axis to cut a move and its following FFT into ``chunks`` along.

    One the move does not touch and the FFT does not transform, whose block length
    ``chunks`` divides (the longest); ``None`` when there is none or nothing to cut.
    """
    if chunks <= 1 or fft_step.op == "all_to_all" or move_step.pad or move_step.trim:
        return None
    busy = {move_step.src, move_step.dst, *fft_step.axes}
    free = [a for a in order if a not in busy and block.shape[order.index(a)] % chunks == 0]
    return max(free, key=lambda a: block.shape[order.index(a)], default=None)


def run_steps(
    block: jax.Array,
    steps: Sequence[Step],
    norm: str | None,
    in_order: Sequence[int] = (),
    out_order: Sequence[int] = (),
    chunks: int = 1,
) -> jax.Array:
    """Apply ``steps`` (see :class:`~shardkit.fft._steps.Step`) to ``block`` in order.

    ``order[i]`` is the logical axis stored at physical position ``i``: ``in_order``
    at the start (``()``: the logical order), and the result is returned in
    ``out_order``. Before the last local FFT the untouched axes are laid out in
    ``out_order``'s sequence, so an output order that ends with the last transformed
    axes (the ``"transposed"`` layout) needs no final transpose.

    With ``chunks > 1`` an ``all_to_all`` followed by a local FFT is cut into
    ``chunks`` pieces along an axis neither touches: piece ``i + 1`` is exchanged
    while piece ``i`` is transformed (where the runtime overlaps them), and the
    pieces are joined after the FFT.
    """
    order = tuple(in_order) or tuple(range(block.ndim))
    target = tuple(out_order) or tuple(range(block.ndim))
    last_fft = max((i for i, s in enumerate(steps) if s.op != "all_to_all"), default=-1)
    i = 0
    while i < len(steps):
        step = steps[i]
        if i == last_fft + 1 and order != target:
            # Only moves remain (the natural layout's way back): reaching the output
            # order first lets XLA fuse the transpose into the packing of the next
            # ``all_to_all``, whose pieces are then contiguous.
            block = jnp.transpose(block, [order.index(a) for a in target])
            order = target
        if step.op != "all_to_all":
            block, order = _fft_step(block, order, step, target if i == last_fft else order, norm)
            i += 1
            continue
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        rest = target if i + 1 == last_fft else order
        staged = _staged(step, nxt, rest)
        pieces = chunks
        if staged is not None:
            if order != staged:
                block = jnp.transpose(block, [order.index(a) for a in staged])
                order = staged
            if i + 1 == last_fft and staged != target:
                pieces = min(chunks, LAST_CHUNKS)
        cut = None if nxt is None else _chunk_axis(block, order, step, nxt, pieces)
        if nxt is not None and nxt.op != "all_to_all" and (cut is not None or staged is not None):
            parts = [block] if cut is None else jnp.split(block, pieces, axis=order.index(cut))
            done, new = [], order
            for piece in parts:
                piece = move(piece, step.mesh_axes, order.index(step.src), order.index(step.dst))
                piece, new = _fft_step(piece, order, nxt, rest, norm)
                done.append(piece)
            order = new
            block = done[0] if cut is None else jnp.concatenate(done, axis=order.index(cut))
            i += 2
            continue
        src, dst = order.index(step.src), order.index(step.dst)
        if step.pad:
            before = tuple(block.shape)
            with padding_scope(
                "fft_block",
                before,
                _padded(before, dst, step.pad),
                block.dtype,
                per_device=True,
            ):
                block = pad_levels(block, dst, step.pad)
        block = move(block, step.mesh_axes, src, dst)
        if step.trim:
            block = trim_levels(block, src, step.trim)
        i += 1
    if order != target:
        block = jnp.transpose(block, [order.index(a) for a in target])
    return block
