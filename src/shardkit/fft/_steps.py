"""The steps of a plan: what the planner emits and the executor runs.

Its own module so that the planner (:mod:`shardkit.fft._plan`), the four-step plan
(:mod:`shardkit.fft._fourstep`) and the executor (:mod:`shardkit.fft._transpose`)
all import it and none of them imports another's consumer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["LocalOp", "Pad", "Step"]

# A local transform along some axes of the block.
LocalOp = Literal["fft", "ifft", "rfft", "irfft"]

# A padded split: (devices g, block length before, length after padding = g * piece).
Pad = tuple[int, int, int]


@dataclass(frozen=True)
class Step:
    """One step of a plan.

    Attributes:
      op: ``"fft"``, ``"ifft"``, ``"rfft"``, ``"irfft"`` (local, along ``axes`` to
        lengths ``sizes``) or ``"all_to_all"`` (moving ``mesh_axes`` from array axis
        ``src`` to array axis ``dst``).
      axes: array axes of a local transform.
      sizes: output lengths along ``axes`` (numpy's ``s``).
      mesh_axes: mesh axes an ``all_to_all`` moves.
      src: the axis that loses ``mesh_axes``.
      dst: the axis that gains them (as its minor-most split).
      group: devices in the ``all_to_all``'s group.
      block: the per-device block it exchanges (logical axis order, padding
        included); each device sends ``(group - 1) / group`` of it.
      shape: the global (unpadded) shape at the move.
      parts: how many pieces each axis is split into at the move.
      pad: the padded levels pushed on ``dst`` before the move, outermost first, as
        ``(g, before, after)``: each piece of length ``before`` is zero-padded to
        ``after`` and cut into ``g``; empty when nothing is padded.
      trim: the levels popped from ``src`` after the move (same form): the joined
        pieces are trimmed back to ``before``, innermost first; empty when none pads.
    """

    op: LocalOp | Literal["all_to_all"]
    axes: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    mesh_axes: tuple[str, ...] = ()
    src: int = -1
    dst: int = -1
    group: int = 1
    block: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    parts: tuple[int, ...] = ()
    pad: tuple[Pad, ...] = ()
    trim: tuple[Pad, ...] = ()

    def __str__(self) -> str:
        if self.op == "all_to_all":
            text = f"all_to_all({','.join(self.mesh_axes)}: axis {self.src} -> {self.dst}"
            pads = [f"{b}->{a}" for _, b, a in self.pad if b != a]
            trims = [f"{a}->{b}" for _, b, a in self.trim if b != a]
            text += f", pad {','.join(pads)}" if pads else ""
            text += f", trim {','.join(trims)}" if trims else ""
            return text + ")"
        return f"{self.op}(axes={self.axes}, n={self.sizes})"
