"""Pipeline schedules: which stage runs which microbatch's forward or backward at each tick.

A schedule is static: built in Python once per (stages, microbatches, kind) and
read inside the compiled step as small int32 tables indexed by ``[tick, stage]``.
Every stage does at most one operation per tick; a forward of microbatch ``m`` on
stage ``s`` waits for stage ``s-1``'s (its input arrives by a collective-permute at
the end of that tick), a backward waits for stage ``s+1``'s backward (its output
cotangent) and for its own forward.

``gpipe``
  Every stage runs all its forwards, then all its backwards. Each stage keeps the
  inputs of all ``M`` microbatches until their backward.
``1f1b``
  Stage ``s`` runs ``S-s-1`` warm-up forwards, then alternates one forward and one
  backward, then drains the remaining backwards: at most ``S-s`` microbatches are
  in flight on stage ``s``, so the activation memory is bounded by ``S`` rather
  than ``M`` microbatches.

Both idle for ``S-1`` of the ``M+S-1`` forward slots of a stage and as many backward
ones: the bubble fraction is ``(S-1)/(M+S-1)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

__all__ = ["IDLE", "SCHEDULES", "Schedule", "Timetable", "build_schedule"]

Schedule = Literal["gpipe", "1f1b"]
"""The pipeline schedules of ``pp`` and ``dp_pp``: ``gpipe`` and ``1f1b``."""

SCHEDULES: tuple[str, ...] = get_args(Schedule)

IDLE, FORWARD, LAST_FORWARD, BACKWARD = 0, 1, 2, 3
"""Operation kinds: the last stage's forward also evaluates the loss and its cotangent."""


@dataclass(frozen=True, eq=False)
class Timetable:
    """A static pipeline schedule of ``ticks`` steps on ``stages`` stages.

    Attributes:
      name: ``"gpipe"`` or ``"1f1b"``.
      stages: the number of stages ``S``.
      microbatches: the number of microbatches ``M``.
      kind: ``(ticks, S)`` operation kind (IDLE, FORWARD, LAST_FORWARD, BACKWARD).
      microbatch: ``(ticks, S)`` the microbatch each operation works on (0 when idle).
      slot: ``(ticks, S)`` the buffer slot of that microbatch's stashed input.
      recv_forward: ``(ticks, S)`` the slot an activation arriving from stage ``s-1``
        at the end of the tick is written to, or -1.
      recv_backward: ``(ticks, S)`` the slot a cotangent arriving from stage ``s+1``
        is written to, or -1.
      slots: buffer slots per stage: the most microbatches one stage holds at once.
    """

    name: str
    stages: int
    microbatches: int
    kind: np.ndarray
    microbatch: np.ndarray
    slot: np.ndarray
    recv_forward: np.ndarray
    recv_backward: np.ndarray
    slots: int

    @property
    def ticks(self) -> int:
        """The schedule's length in operation slots."""
        return int(self.kind.shape[0])

    @property
    def bubble(self) -> float:
        """The fraction of a stage's time spent idle, ``(S-1)/(M+S-1)``."""
        s, m = self.stages, self.microbatches
        return (s - 1) / (m + s - 1)

    def segments(self) -> list[tuple[int, int, tuple[bool, bool]]]:
        """Runs ``(start, stop, (forward, backward))`` of ticks and the ways they send.

        ``forward``: a permute to the next stage runs at each tick of the run (some
        stage sends an activation at one of them at least); ``backward``: one to the
        previous stage. A run starts where a tick sends a way its predecessor does not;
        ticks sending fewer ways join the run before them (one compiled loop each run;
        the permutes they add carry zeros). One stage sends nothing.

        Example:
          >>> from shardkit.train._schedule import build_schedule
          >>> build_schedule("gpipe", 2, 2).segments()
          [(0, 3, (True, False)), (3, 6, (False, True))]
          >>> build_schedule("1f1b", 4, 8).segments()
          [(0, 4, (True, False)), (4, 6, (False, True)), (6, 22, (True, True))]
        """
        out: list[tuple[int, int, tuple[bool, bool]]] = []
        for t in range(self.ticks):
            sends = (
                bool((self.recv_forward[t] >= 0).any()),
                bool((self.recv_backward[t] >= 0).any()),
            )
            if out and all(have or not need for have, need in zip(out[-1][2], sends, strict=True)):
                out[-1] = (out[-1][0], t + 1, out[-1][2])
            else:
                out.append((t, t + 1, sends))
        return out

    @property
    def permutes(self) -> int:
        """How many collective-permutes one step runs: one per tick and direction sent."""
        return sum((stop - start) * sum(sends) for start, stop, sends in self.segments())

    def timeline(self) -> list[list[str]]:
        """Per stage, per tick: ``"F3"``, ``"B3"`` or ``""`` (idle), for pictures."""
        out = []
        for s in range(self.stages):
            row = []
            for t in range(self.ticks):
                k, m = int(self.kind[t, s]), int(self.microbatch[t, s])
                row.append("" if k == IDLE else ("B" if k == BACKWARD else "F") + str(m))
            out.append(row)
        return out


def _orders(name: str, stages: int, microbatches: int) -> list[list[tuple[str, int]]]:
    """Each stage's operations in the order it runs them."""
    out = []
    for s in range(stages):
        fwd = [("F", m) for m in range(microbatches)]
        bwd = [("B", m) for m in range(microbatches)]
        if name == "gpipe":
            out.append(fwd + bwd)
            continue
        warm = min(stages - s - 1, microbatches)
        order = fwd[:warm]
        for m in range(warm, microbatches):
            order += [fwd[m], bwd[m - warm]]
        out.append(order + bwd[microbatches - warm :])
    return out


def _slots(lives: list[list[tuple[int, int]]], microbatches: int) -> int:
    """The fewest slots ``r`` such that microbatches ``m % r`` never overlap on a stage.

    A stage holds microbatch ``m`` from the tick its input arrives (written at the end
    of that tick) to the tick of its backward (read during that tick).
    """
    for r in range(1, microbatches + 1):
        if all(
            not (a2 < b1 and a1 < b2)
            for live in lives
            for m1, (a1, b1) in enumerate(live)
            for m2, (a2, b2) in enumerate(live)
            if m1 != m2 and m1 % r == m2 % r
        ):
            return r
    return microbatches  # pragma: no cover - r == microbatches never overlaps


@functools.lru_cache(maxsize=32)
def build_schedule(name: str, stages: int, microbatches: int) -> Timetable:
    """The static schedule ``name`` for ``stages`` stages and ``microbatches`` microbatches.

    Example:
      >>> from shardkit.train._schedule import build_schedule
      >>> s = build_schedule("1f1b", 2, 4)
      >>> s.timeline()[0], s.slots, s.bubble
      (['F0', 'F1', '', 'B0', 'F2', 'B1', 'F3', 'B2', '', 'B3'], 2, 0.2)
    """
    orders = _orders(name, stages, microbatches)
    done: dict[tuple[str, int, int], int] = {}  # (op, stage, microbatch) -> tick
    nxt = [0] * stages
    rows: list[list[tuple[str, int] | None]] = []
    total = sum(len(o) for o in orders)
    while len(done) < total:
        t = len(rows)
        row: list[tuple[str, int] | None] = []
        for s in range(stages):
            op = orders[s][nxt[s]] if nxt[s] < len(orders[s]) else None
            ready = op is not None and (
                (op[0] == "F" and (s == 0 or done.get(("F", s - 1, op[1]), t) < t))
                or (
                    op[0] == "B"
                    and done.get(("F", s, op[1]), t) < t
                    and (s == stages - 1 or done.get(("B", s + 1, op[1]), t) < t)
                )
            )
            row.append(op if ready else None)
        for s, op in enumerate(row):
            if op is not None:
                done[(op[0], s, op[1])] = t
                nxt[s] += 1
        rows.append(row)
    ticks = len(rows)
    lives = [
        [(done[("F", max(s - 1, 0), m)], done[("B", s, m)]) for m in range(microbatches)]
        for s in range(stages)
    ]
    r = _slots(lives, microbatches)
    kind = np.zeros((ticks, stages), np.int32)
    micro = np.zeros((ticks, stages), np.int32)
    recv_f = np.full((ticks, stages), -1, np.int32)
    recv_b = np.full((ticks, stages), -1, np.int32)
    for t, row in enumerate(rows):
        for s, op in enumerate(row):
            if op is None:
                continue
            what, m = op
            micro[t, s] = m
            if what == "F":
                kind[t, s] = LAST_FORWARD if s == stages - 1 else FORWARD
                if s + 1 < stages:
                    recv_f[t, s + 1] = m % r
            else:
                kind[t, s] = BACKWARD
                if s > 0:
                    recv_b[t, s - 1] = m % r
    return Timetable(name, stages, microbatches, kind, micro, micro % r, recv_f, recv_b, r)
