"""Bytes each device sends and receives for one run of a collective.

The convention is that of the bandwidth-optimal ring algorithms (as NCCL's
``busbw`` figures count them): over a group of ``p`` devices,

* all-gather of a result of ``R`` bytes per device: each device sends and receives
  ``(p-1)/p * R`` (every shard but its own);
* reduce-scatter of an operand of ``N`` bytes: ``(p-1)/p * N`` each way;
* all-reduce of ``N`` bytes: ``2 (p-1)/p * N`` each way (a reduce-scatter then an
  all-gather);
* all-to-all of ``N`` operand bytes: ``(p-1)/p * N`` each way (the chunk meant for
  itself stays put);
* collective-permute of ``N`` bytes: ``N`` sent by a device that is a source and
  received by one that is a target (0 for a device paired with itself); the figure
  given is the largest over devices;
* collective-broadcast of ``N`` bytes: ``N`` received by every device but the root,
  and ``N`` sent by each device that forwards it (pipelined ring).

A group of one device moves nothing. Figures are rounded down to whole bytes.
"""

from __future__ import annotations

from collections.abc import Sequence


def traffic(
    kind: str,
    group_size: int,
    operand_bytes: int,
    result_bytes: int,
    pairs: Sequence[tuple[int, int]] = (),
) -> tuple[int, int]:
    """``(sent, received)`` bytes per device for one run of a collective.

    Example:
      >>> traffic("all-gather", 4, 128, 512)
      (384, 384)
      >>> traffic("all-reduce", 2, 128, 128)
      (128, 128)
    """
    p = group_size
    if kind == "collective-permute":
        moved = [(s, t) for s, t in pairs if s != t]
        return (operand_bytes, operand_bytes) if moved else (0, 0)
    if p <= 1:
        return 0, 0
    if kind == "all-gather":
        n = result_bytes * (p - 1) // p
    elif kind in ("reduce-scatter", "all-to-all"):
        n = operand_bytes * (p - 1) // p
    elif kind == "all-reduce":
        n = 2 * operand_bytes * (p - 1) // p
    elif kind == "collective-broadcast":
        n = operand_bytes
    else:
        raise ValueError(f"traffic: kind={kind!r} is not a collective this model knows")
    return n, n


def message_bytes(kind: str, operand_bytes: int, result_bytes: int) -> int:
    """The size ``n`` the cost formulas take: the full buffer the collective works on."""
    return result_bytes if kind == "all-gather" else operand_bytes
