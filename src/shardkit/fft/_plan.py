"""Plans: which local transforms and which ``all_to_all`` moves compute an N-D FFT.

A plan is pure Python over shapes and specs; it never touches data. The rule:

* every transformed axis that is not split (or split over mesh axes of size 1) is
  transformed first, locally, in one call;
* a split transformed axis ``d`` hands its mesh axes to the next transformed axis
  in cyclic order (the previous one for inverse transforms), with one
  ``all_to_all``, then ``d`` is transformed locally. Axes are processed so that the
  receiving axis is always already transformed and unsplit, so a slab costs one
  ``all_to_all`` and a pencil two. Because the inverse shifts the other way,
  ``ifftn(fftn(x))`` lands on ``x``'s layout.
* when every transformed axis is split (a 2-D array on a 2-D mesh, ``fft`` along a
  split axis), the plan borrows an unsplit untransformed axis, or else stacks one
  group onto the next transformed axis, and then moves everything back: the output
  is in the natural layout.
* ``out_layout="natural"`` appends the reverse of every move.

R2C (``rfftn``) transforms the last of ``axes`` first; its halved size ``n//2+1``
joins the cycle only when every mesh group on the transformed axes divides it (or
when no other axis can take a split). C2R (``irfftn``) mirrors this and transforms
that axis last.

Sizes the mesh does not divide: only the input's own split has to divide. A move
whose receiving axis ``dst`` is not divisible by the moving group (``g`` devices)
first pads this device's block of ``dst`` with zeros at its end, up to a multiple of
``g``; the axis then carries a *padded level*. When the axis becomes local again
the reverse concatenation puts the padding back at the block's end, where it is
trimmed. Each axis keeps a stack of levels ``(mesh axis, length before, length
after padding)``, one per mesh axis splitting it, outermost first: moving a group
pops or pushes the minor-most levels, so padding applied while an axis was already
split (an interleaved pad) is undone exactly. Each level pads only where its own
mesh axis does not divide the piece it cuts (as late as possible), so an axis is
padded exactly when its mesh axes do not divide its length, also after inner
levels left with a move (``4`` over ``(x=2, y=4)`` keeps ``x`` even when ``y``
moves off). To pad less, a split passes over the next axis to a later unsplit one
that divides it (never past a split axis, so the inverse walks back to the same
place). JAX refuses uneven ``NamedSharding``s, so an output axis still padded at
the end is never returned: the plan then appends the reverse moves (as
``"natural"``) and returns the input's layout, or, when that one does not divide
either (a split R2C axis, now halved), stops at the first layout on the way back
that divides; where none on the way back divides (a length changed by ``s`` under
a stacked split), a breadth-first search from where the transforms ended finds the
nearest layout that does (fewest moves). Only when no layout of the input's mesh
axes divides the output does planning raise (``tests/fft/test_fft_plan_search.py``
checks this against a brute-force search).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import PartitionSpec

from shardkit.fft._problem import FftProblem, permute
from shardkit.fft._steps import LocalOp, Pad, Step
from shardkit.fft._transpose import run_steps
from shardkit.layout.internal import to_pspec as _to_spec

__all__ = ["AUTO_CHUNKS", "CHUNK_MIN_ELEMENTS", "FFTPlan", "make_plan"]

AUTO_CHUNKS = 16
"""Most pieces per move when the planner chooses (``chunks=None``) and the block is large."""

CHUNK_MIN_ELEMENTS = 2**20
"""A device's input block must hold this many elements for the planner to cut moves.

Measured with ``shardkit bench fft`` and its ablations on 8 simulated CPU devices:
at 256^3 complex64 (2^21 elements per device) cutting the moves cut the time by
8-30% and the peak memory by 6-18% on both a slab and a pencil, with no overlap of
communication (the CPU runtime runs the ``all_to_all`` synchronously): the smaller
pieces are cheaper to allocate and fit the caches better. At 128^3 (2^18 per
device) the gain was within the noise, so smaller blocks run whole.
"""

PIECE_ELEMENTS = 2**17
"""The planner cuts a block into pieces of at least this many elements (1 MiB of complex64)."""

MESSAGE_ELEMENTS = 2**15
"""The planner keeps each piece's message to one device of a move's group this long or longer.

At 256^3 complex64 on 8 CPU devices: 16 pieces beat 4 by 1.3x on a 2x4 pencil
(groups of 4 and 2: 2^15 and 2^16 elements per message), but on an 8 x 1 slab (a
group of 8: 2^14 per message) 16 pieces were 1.15x slower than 4 and 8.
"""

# One mesh axis splitting an array axis: (mesh axis, length before, padded length).
_Level = tuple[str, int, int]


@dataclass(frozen=True)
class FFTPlan:
    """A distributed FFT: input and output layouts and the steps between them.

    ``plan.local`` is the per-shard function: call it inside ``jax.shard_map`` with
    ``in_specs=plan.in_spec`` and ``out_specs=plan.out_spec`` (see
    :func:`shardkit.fft.plan`).

    Shapes and specs are those of the arrays as stored (``in_order`` and
    ``out_order`` say how they permute the logical axes); the steps name logical axes.

    Attributes:
      name: the transform (``"fftn"``, ``"rfftn"``, ...).
      in_shape: global input shape.
      in_spec: input spec, one entry per dimension.
      out_shape: global output shape.
      out_spec: output spec, one entry per dimension.
      steps: local transforms and ``all_to_all`` moves, in order (logical axes).
      decomposition: ``"local"`` (no transformed axis split), ``"slab"`` (one) or
        ``"pencil"`` (two or more).
      layout: ``"default"`` or ``"natural"`` (where the output's splits actually
        are, in logical terms).
      norm: numpy's ``norm``.
      in_order: the input's axis order: ``x`` is the logical input transposed by
        it (``()``: the logical order; ``in_layout="transposed"`` gives e.g.
        ``(1, 2, 0)``).
      out_order: the output's axis order, likewise (``out_layout="transposed"``).
      chunks: each ``all_to_all`` followed by a local FFT runs in this many pieces
        (cut along an axis neither touches), so that on a runtime that overlaps
        them the exchange of one piece hides behind the FFT of the previous one;
        moves with no such axis, or padded ones, run whole, and the last one
        before a transpose to the output order in at most 4 pieces.
    """

    name: str
    in_shape: tuple[int, ...]
    in_spec: PartitionSpec
    out_shape: tuple[int, ...]
    out_spec: PartitionSpec
    steps: tuple[Step, ...]
    decomposition: str
    layout: str
    norm: str | None = None
    in_order: tuple[int, ...] = ()
    out_order: tuple[int, ...] = ()
    chunks: int = 1

    @property
    def all_to_alls(self) -> int:
        """How many ``all_to_all`` collectives the plan runs."""
        return sum(s.op == "all_to_all" for s in self.steps)

    @property
    def padded(self) -> bool:
        """Whether some move pads its block (a length the mesh does not divide)."""
        return any(s.pad or s.trim for s in self.steps)

    def sent_bytes(self, dtype: jax.typing.DTypeLike, /) -> int:
        """Bytes one device sends over the plan, for an input of ``dtype``.

        Each ``all_to_all`` over ``g`` devices sends ``(g - 1) / g`` of its block
        (:attr:`Step.block`, padding included): this is what
        :func:`shardkit.inspect.comms` reports as ``bytes_sent``.
        """
        return sum(
            (s.group - 1) * math.prod(s.block) * size // s.group for s, size in self._moves(dtype)
        )

    def padding_bytes(self, dtype: jax.typing.DTypeLike, /) -> int:
        """What padding adds to :meth:`sent_bytes`: zero when the mesh divides every move.

        A move's block holds ``prod(block)`` elements where an even split would hold
        ``prod(shape) / prod(parts)``; the difference, times ``(g - 1) / g`` and the
        item size, summed over the moves (rounded down).
        """
        extra = Fraction(0)
        for s, size in self._moves(dtype):
            even = Fraction(math.prod(s.shape), math.prod(s.parts))
            extra += Fraction(s.group - 1, s.group) * size * (math.prod(s.block) - even)
        return math.floor(extra)

    def _moves(self, dtype: jax.typing.DTypeLike) -> list[tuple[Step, int]]:
        """Each ``all_to_all`` with the item size of the data it moves."""
        current = np.dtype(dtype)
        out = []
        for s in self.steps:
            if s.op == "all_to_all":
                out.append((s, current.itemsize))
            elif s.op == "irfft":
                current = np.dtype(np.finfo(current).dtype)
            else:
                current = np.result_type(current, np.complex64)
        return out

    def local(self, block: jax.Array, /) -> jax.Array:
        """Run the plan on this device's block (inside ``shard_map``)."""
        return run_steps(block, self.steps, self.norm, self.in_order, self.out_order, self.chunks)

    def __str__(self) -> str:
        steps = "; ".join(map(str, self.steps)) or "identity"
        return (
            f"{self.name} {self.decomposition}: {self.in_shape} {self.in_spec} -> "
            f"{self.out_shape} {self.out_spec} [{steps}]"
        )

    def __rich__(self) -> object:
        """A table of the steps under a title with the layouts (the facts of ``str``)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        head = Text(
            f"{self.name} {self.decomposition}: {self.in_shape} {self.in_spec} -> "
            f"{self.out_shape} {self.out_spec}"
        )
        table = Table()
        table.add_column("step", justify="right")
        table.add_column("operation")
        for i, step in enumerate(self.steps):
            table.add_row(str(i), str(step))
        if not self.steps:
            table.add_row("-", "identity")
        moves = self.all_to_alls
        norm = f", norm={self.norm}" if self.norm else ""
        return Group(
            head,
            table,
            Text(f"{moves} all_to_all{'s' if moves != 1 else ''}, {self.layout} layout{norm}"),
        )

    def _repr_html_(self) -> str:
        from shardkit._display import rich_html

        return rich_html(self, width=120)


class _Builder:
    """Mutable state while planning: current shape, levels and emitted steps.

    ``shape`` holds the true global lengths; ``levels[d]`` the mesh axes splitting
    axis ``d``, outermost first, each with the length it cut and its padded length.
    """

    def __init__(self, problem: FftProblem, ctx: str) -> None:
        self.where, self.ctx = problem.name, ctx
        self.shape = list(problem.shape)
        self.sizes: Mapping[str, int] = problem.mesh_sizes
        self.levels = [self.fresh(n, e) for n, e in zip(problem.shape, problem.spec, strict=True)]
        self.start = [list(lv) for lv in self.levels]
        self.steps: list[Step] = []
        self.moves: list[tuple[Step, list[_Level]]] = []

    @property
    def spec(self) -> list[tuple[str, ...]]:
        return [tuple(a for a, _, _ in lv) for lv in self.levels]

    def group_size(self, group: Sequence[str]) -> int:
        return math.prod(self.sizes[a] for a in group)

    def fresh(self, n: int, group: Sequence[str]) -> list[_Level]:
        """Levels splitting a block of length ``n`` over ``group``, padded as late as possible.

        Each level cuts the current piece over its mesh axis, padding it only when
        that axis does not divide it. The block is as long as one pad at the top
        would make it (``ceil(ceil(n / a) / b) = ceil(n / (a b))``), but the outer
        levels stay unpadded wherever they divide ``n``, so that when a later move
        takes the inner mesh axes away the axis is left evenly split (``4`` over
        ``(x=2, y=4)`` pads each ``x`` half ``2 -> 4``, not ``4 -> 8`` at the top,
        which would leave all of ``x=1``'s half padding once ``y`` moves off).
        """
        out, cut = [], n
        for a in group:
            k = self.sizes[a]
            padded = -(-cut // k) * k
            out.append((a, cut, padded))
            cut = padded // k
        return out

    def stored(self, d: int) -> int:
        """This device's block length along ``d`` (padding included)."""
        if not self.levels[d]:
            return self.shape[d]
        a, _, after = self.levels[d][-1]
        return after // self.sizes[a]

    def parts(self, d: int) -> int:
        return self.group_size(self.spec[d])

    def split(self, d: int) -> bool:
        return self.parts(d) > 1

    def can_receive(self, d: int, group: tuple[str, ...]) -> bool:
        """``d`` can take ``group``'s split without padding."""
        return self.stored(d) % self.group_size(group) == 0

    def padded(self) -> list[int]:
        """The axes whose split holds padding."""
        return [d for d, lv in enumerate(self.levels) if any(b != a for _, b, a in lv)]

    def _pads(self, levels: Sequence[_Level]) -> tuple[Pad, ...]:
        if all(b == a for _, b, a in levels):
            return ()
        return tuple((self.sizes[m], b, a) for m, b, a in levels)

    def move(
        self,
        src: int,
        dst: int,
        group: tuple[str, ...] | None = None,
        restore: list[_Level] | None = None,
    ) -> None:
        """One ``all_to_all`` of ``group`` (default: all of ``src``'s split) to ``dst``.

        ``restore`` are the levels an earlier move took from ``dst``: they are put
        back as they were when ``dst`` has the same length again (the way back to
        the natural layout), so that the padding lands where it was.
        """
        group = self.spec[src] if group is None else group
        if self.spec[src][len(self.spec[src]) - len(group) :] != group:
            raise AssertionError(f"{group} is not the minor part of {self.spec[src]}")
        popped = self.levels[src][len(self.levels[src]) - len(group) :]
        c = self.stored(dst)
        pushed = restore if restore and restore[0][1] == c else self.fresh(c, group)
        block = [self.stored(d) for d in range(len(self.shape))]
        block[dst] = pushed[-1][2] * self.group_size(group) // self.sizes[pushed[-1][0]]
        step = Step(
            "all_to_all",
            mesh_axes=group,
            src=src,
            dst=dst,
            group=self.group_size(group),
            block=tuple(block),
            shape=tuple(self.shape),
            parts=tuple(self.parts(d) for d in range(len(self.shape))),
            pad=self._pads(pushed),
            trim=self._pads(popped),
        )
        self.levels[src] = self.levels[src][: len(self.levels[src]) - len(group)]
        self.levels[dst] = self.levels[dst] + list(pushed)
        self.steps.append(step)
        self.moves.append((step, list(popped)))

    def transform(self, op: LocalOp, axes: Sequence[int], n: Sequence[int]) -> None:
        if not axes:
            return
        for a, size in zip(axes, n, strict=True):
            if self.split(a):
                raise AssertionError(f"axis {a} is split during a local {op}")
            self.shape[a] = size // 2 + 1 if op == "rfft" else size
            # Only mesh axes of size 1 remain: they keep splitting the new length.
            self.levels[a] = [(m, self.shape[a], self.shape[a]) for m, _, _ in self.levels[a]]
        self.steps.append(Step(op, axes=tuple(axes), sizes=tuple(n)))

    def unwind(self, *, until_divisible: bool = False) -> None:
        """Append the reverse of every move so far: back to the input's layout.

        With ``until_divisible``, stop at the first layout with no padded split.
        """
        start = [tuple(a for a, _, _ in lv) for lv in self.start]
        for step, popped in reversed(list(self.moves)):
            home = self.levels == self.start or (self.spec == start and not self.padded())
            if home or (until_divisible and not self.padded()):
                return
            self.move(step.dst, step.src, step.mesh_axes, restore=popped)


_SEARCH_LIMIT = 20000
"""Layouts :func:`_nearest_even` visits at most (a 6-D array over 3 mesh axes has ~1300)."""


_Path = list[tuple[int, int, tuple[str, ...]]]


def _moved(b: _Builder, path: _Path) -> _Builder:
    """``b`` after the moves of ``path`` (``b`` itself is changed)."""
    for src, dst, group in path:
        b.move(src, dst, group)
    return b


def _nearest_even(b: _Builder, want: tuple[tuple[str, ...], ...] | None) -> _Path | None:
    """The fewest moves from ``b``'s layout to one that divides every length (breadth first).

    A move takes the minor part of one axis's mesh axes to the minor end of
    another's, as :meth:`_Builder.move` does; moves are reversible, so every layout
    of the same mesh axes is reachable. With ``want`` only that layout is a goal.
    ``None`` where no goal divides (or ``want`` uses other mesh axes). Padding during the moves is allowed
    (each is an ``all_to_all`` of a padded block); the bookkeeping keeps the
    padding as late in each split as possible (:meth:`_Builder.fresh`), so a layout
    that divides holds none.
    """
    start = tuple(b.spec)
    if want is not None and sorted(a for g in want for a in g) != sorted(
        a for g in start for a in g
    ):
        return None

    def even(groups: tuple[tuple[str, ...], ...]) -> bool:
        divides = all(n % b.group_size(g) == 0 for n, g in zip(b.shape, groups, strict=True))
        return divides and (want is None or groups == want)

    paths: dict[tuple[tuple[str, ...], ...], list[tuple[int, int, tuple[str, ...]]]] = {start: []}
    queue = [start]
    for groups in queue:
        if even(groups):
            return paths[groups]
        if len(paths) > _SEARCH_LIMIT:
            return None
        for src, g in enumerate(groups):
            for j in range(len(g)):
                part = g[j:]
                for dst in range(len(groups)):
                    if dst == src or (b.shape[dst] == 1 and b.group_size(part) > 1):
                        continue
                    nxt = list(groups)
                    nxt[src], nxt[dst] = g[:j], groups[dst] + part
                    key = tuple(nxt)
                    if key not in paths:
                        paths[key] = [*paths[groups], (src, dst, part)]
                        queue.append(key)
    return None


def _padded_output_error(b: _Builder, asked: str) -> ValueError:
    d = b.padded()[0]
    where = f"axis {d} (now of length {b.shape[d]})"
    split = f"over mesh axes ({','.join(b.spec[d])}) ({b.parts(d)} devices)"
    if asked == "natural":
        head = f"the natural output layout splits {where} {split}"
        fix = "Use out_layout='default', or choose s so that the mesh divides that length."
    else:
        head = f"no output layout divides: the last one tried splits {where} {split}"
        fix = (
            "Choose s (for a real transform, a length n whose n//2+1 the mesh divides) "
            "so that the mesh divides an output axis, or split a different input axis."
        )
    return ValueError(
        f"{b.where}: {b.ctx}: {head}, which they do not divide, and JAX arrays cannot "
        f"be split unevenly. {fix}"
    )


@dataclass(frozen=True, eq=False)
class _Walk:
    """What every step of one plan reads; built once per plan, before any move.

    Attributes:
      problem: the transform.
      b: the builder, the one mutable part: each move and transform appends to it.
      want: the transformed length of each transformed axis.
      step_op: the local complex transform (``"fft"`` or ``"ifft"``).
      real_axis: the R2C/C2R axis (the last transformed one), or None.
      complex_axes: the other transformed axes, in the order given.
      direction: ``1`` (a split passes to the next axis) or ``-1`` (the previous one).
      decomposition: ``"local"``, ``"slab"`` or ``"pencil"`` (of the input).
    """

    problem: FftProblem
    b: _Builder
    want: dict[int, int]
    step_op: LocalOp
    real_axis: int | None
    complex_axes: tuple[int, ...]
    direction: int
    decomposition: str

    def unsplit_spare(self, cycle: Sequence[int]) -> list[int]:
        """Untransformed axes outside ``cycle`` that are unsplit and longer than 1."""
        b, axes = self.b, self.problem.axes
        return [
            u
            for u in range(len(b.shape))
            if u not in axes and u not in cycle and not b.split(u) and b.shape[u] > 1
        ]


class _Cycle(NamedTuple):
    """The walk's loop state.

    Attributes:
      axes: the axes a split passes around (sorted; borrowed axes join it).
      pending: split transformed axes still to hand their split on and transform.
      natural: whether the plan ends by moving back to the input's layout.
    """

    axes: tuple[int, ...]
    pending: tuple[int, ...]
    natural: bool


def _start(problem: FftProblem, ctx: str) -> tuple[_Walk, _Cycle]:
    """The plan's :class:`_Walk` and the loop state before any move."""
    axes, kind = problem.axes, problem.kind
    b = _Builder(problem, ctx or f"array shape={problem.shape}")
    want = dict(zip(axes, problem.sizes, strict=True))
    real_axis = axes[-1] if kind != "c2c" else None
    complex_axes = tuple(a for a in axes if a != real_axis)
    groups = math.prod(b.parts(a) for a in axes)
    cycle = sorted(complex_axes)
    if real_axis is not None:
        half = want[real_axis] // 2 + 1
        if half % groups == 0 or (kind == "c2r" and b.split(real_axis)):
            cycle = sorted([*cycle, real_axis])
    split = len([a for a in axes if b.split(a)])
    walk = _Walk(
        problem,
        b,
        want,
        "ifft" if problem.inverse else "fft",
        real_axis,
        complex_axes,
        -1 if (problem.inverse or kind == "c2r") else 1,
        {0: "local", 1: "slab"}.get(split, "pencil"),
    )
    pending = tuple(a for a in complex_axes if b.split(a))
    return walk, _Cycle(tuple(cycle), pending, problem.out_layout == "natural")


def _r2c_first(w: _Walk, st: _Cycle, real: int) -> _Cycle:
    """R2C: a split on the real axis moves on (to a spare axis if need be); then ``rfft``."""
    b, pending = w.b, list(st.pending)
    if b.split(real):
        ring = sorted([*st.axes, real]) if real not in st.axes else list(st.axes)
        nxt = ring[(ring.index(real) + 1) % len(ring)]
        if nxt == real or b.split(nxt):
            # Borrow an untransformed axis, as fftn does; the split stays there.
            spare = [u for u in w.unsplit_spare(()) if b.can_receive(u, b.spec[real])]
            if not spare:
                raise _r2c_split_error(w, real, nxt)
            nxt = spare[0]
        b.move(real, nxt)
        if nxt not in pending and nxt in w.complex_axes:
            pending.append(nxt)
    b.transform("rfft", [real], [w.want[real]])
    return st._replace(pending=tuple(pending))


def _r2c_split_error(w: _Walk, real: int, nxt: int) -> NotImplementedError:
    half, devices = w.want[real] // 2 + 1, w.b.parts(real)
    why = (
        f"the next transformed axis ({nxt}) is split too"
        if nxt != real
        else "it is the only transformed axis"
        if half % devices == 0
        else f"it is the only transformed axis (its {half} = n//2+1 outputs "
        f"cannot be split over {devices} devices either: JAX has no "
        "uneven sharding, so there is no four-step R2C transform)"
    )
    return NotImplementedError(
        f"{w.problem.name}: {w.b.ctx}: the R2C axis {real} is split and {why}; "
        "no untransformed axis is unsplit and divisible by its devices, so "
        "no axis can take its split before the real transform. Leave the "
        "last transformed axis unsplit, or use fftn on a complex input."
    )


def _next_of(w: _Walk, cycle: Sequence[int], d: int) -> int:
    return cycle[(cycle.index(d) + w.direction) % len(cycle)]


def _receiver(w: _Walk, cycle: Sequence[int], d: int) -> int:
    """The next axis, or one further on that takes ``d``'s split without padding.

    Only unsplit axes up to the next split one are candidates: that keeps the
    inverse transform's walk back (the other way round) landing on ``d``.
    """
    k, n = cycle.index(d), len(cycle)
    for u in (cycle[(k + w.direction * i) % n] for i in range(1, n)):
        if w.b.split(u):
            break
        if w.b.can_receive(u, w.b.spec[d]):
            return u
    return _next_of(w, cycle, d)


def _done(w: _Walk, st: _Cycle, d: int) -> _Cycle:
    """Axis ``d`` has handed its split on: transform it (when complex) and drop it."""
    pending = list(st.pending)
    pending.remove(d)
    if d in w.complex_axes:
        w.b.transform(w.step_op, [d], [w.want[d]])
    return st._replace(pending=tuple(pending))


def _walk_step(w: _Walk, st: _Cycle) -> _Cycle:
    """One step of the walk: a pending axis hands its split on, or the cycle grows."""
    b, cycle = w.b, st.axes
    order = sorted(st.pending, reverse=w.direction > 0)
    ready = [d for d in order if d in cycle and not b.split(_receiver(w, cycle, d))]
    ready = [d for d in ready if _receiver(w, cycle, d) != d]
    if ready:
        d = ready[0]
        b.move(d, _receiver(w, cycle, d))
        return _done(w, st, d)
    st = st._replace(natural=True)
    d = order[0]
    borrow = w.unsplit_spare(cycle)
    fits = [u for u in borrow if b.can_receive(u, b.spec[d])] or borrow
    if fits:
        return st._replace(axes=tuple(sorted([*cycle, fits[0]])))
    target = _next_of(w, cycle, d) if d in cycle else d
    if target == d and w.real_axis is not None and w.real_axis not in cycle:
        # The halved axis is the only one left: it takes the split, padded.
        return st._replace(axes=tuple(sorted([*cycle, w.real_axis])))
    if target == d:
        raise _stuck_error(w, d)
    b.move(d, target)
    return _done(w, st, d)


def _stuck_error(w: _Walk, d: int) -> NotImplementedError:
    """No axis can take split axis ``d``'s split."""
    name, b, real = w.problem.name, w.b, w.real_axis
    if real is not None and w.problem.kind == "c2r":
        m = b.shape[real]
        return NotImplementedError(
            f"{name}: {b.ctx}: the C2R axis {d} (length {m}) is split and no other "
            "axis can take its split, so it needs the four-step C2R transform, which "
            f"needs the real length n = 2 * {m} = {2 * m} (numpy then zero-pads the "
            f"Nyquist term; n={w.want[real]} was asked) and the square of the device "
            f"count ({b.parts(d) ** 2}) to divide {m}. Pass n={2 * m} (s=), choose "
            "such a length, add or split another axis, or use ifftn."
        )
    if real is not None:
        return NotImplementedError(
            f"{name}: {b.ctx}: axis {d} is split and the only axis that could take its "
            f"split is the halved R2C axis {real} (length {w.want[real] // 2 + 1}), "
            "which the mesh does not divide. Choose a real length n whose n//2+1 the "
            "mesh divides (s=...), add or split another axis, or use fftn."
        )
    devices = b.parts(d)
    return NotImplementedError(
        f"{name}: {b.ctx}: axis {d} is split over {devices} devices and no other "
        "axis can take its split, so it needs the four-step FFT, which needs the "
        f"square of the device count ({devices**2}) to divide the transformed "
        f"length ({w.want.get(d, b.shape[d])}) and no other split axis. Choose such "
        "a length (s=/n=), split fewer devices, or replicate the array."
    )


def _c2r_last(w: _Walk, st: _Cycle, real: int) -> None:
    """C2R: a split that landed on the real axis moves on once more; then ``irfft``."""
    b = w.b
    if b.split(real):
        dest = _next_of(w, st.axes, real)
        if b.split(dest):
            raise NotImplementedError(
                f"{w.problem.name}: {b.ctx}: the C2R axis {real} ends up split and axis "
                f"{dest} cannot take its split. Leave axis {real} unsplit or use "
                "out_layout='natural'."
            )
        b.move(real, dest)
    b.transform("irfft", [real], [w.want[real]])


def _walk(w: _Walk, st: _Cycle) -> _Cycle:
    """Every transform and move, from the input's layout to where the transforms end."""
    kind, real = w.problem.kind, w.real_axis
    if kind == "r2c" and real is not None:
        st = _r2c_first(w, st, real)
    if kind == "c2r" and real is not None and w.b.split(real):
        st = st._replace(pending=(*st.pending, real))
    free = [a for a in w.complex_axes if not w.b.split(a)]
    w.b.transform(w.step_op, free, [w.want[a] for a in free])
    while st.pending:
        st = _walk_step(w, st)
    if kind == "c2r" and real is not None:
        _c2r_last(w, st, real)
    return st


def _unwound(b: _Builder, natural: bool, out_layout: str) -> _Builder:
    """``b`` moved back towards the input's layout when the plan asks or pads its output."""
    if natural:
        back = copy.deepcopy(b)
        back.unwind()
        if back.padded() and out_layout != "natural":
            # The way back ends padded (a split R2C axis, now halved): keep the
            # first layout on it that divides, as the default layout promises.
            b.unwind(until_divisible=True)
            return b
        return back
    if b.padded():
        back = copy.deepcopy(b)
        back.unwind()
        if back.padded():  # e.g. a split R2C axis now halved: stop where it divides
            b.unwind(until_divisible=True)
            return b
        return back
    return b


def _settled(
    end: _Builder, b: _Builder, out_layout: str, out_target: Sequence[tuple[str, ...]] | None
) -> _Builder:
    """The output layout: ``b`` unless it is padded or ``out_target`` is reachable from ``end``."""
    natural_groups = tuple(tuple(a for a, _, _ in lv) for lv in end.start)
    if b.padded():
        # Neither the way back nor the layout reached divides (a length changed by
        # ``s`` under a stacked or whole-mesh split): move from where the
        # transforms ended to the nearest layout that does, if any.
        path = _nearest_even(end, natural_groups if out_layout == "natural" else None)
        if path is None:
            raise _padded_output_error(b, out_layout)
        b = _moved(copy.deepcopy(end), path)
    if out_target is not None and tuple(b.spec) != tuple(out_target):
        path = _nearest_even(end, tuple(tuple(e) for e in out_target))
        b = b if path is None else _moved(copy.deepcopy(end), path)
    return b


def make_plan(
    problem: FftProblem, /, *, ctx: str = "", out_target: Sequence[tuple[str, ...]] | None = None
) -> FFTPlan:
    """Plan ``problem``: its input split as ``problem.spec``, transformed along its ``axes``.

    ``ctx`` describes the input in error messages (default: its shape). ``out_target``
    (normalized, logical axis order) asks for that output layout instead: the plan
    moves there from where the transforms end, with the fewest ``all_to_all``,
    where it divides the output and uses the input's mesh axes; otherwise it is
    ignored. The Auto-axes partitioner passes the layout the partitioner chose.

    Intermediate moves pad what the mesh does not divide (see the module
    docstring); the output is never padded: when the default layout would be, the
    plan returns to the natural one.

    ``ifftn(fftn(x))`` keeps ``x``'s layout whenever the forward plan needs no
    padding (the inverse then retraces its moves); a padded forward plan returns
    ``x``'s layout itself, and its inverse from there may choose another one.

    The walk is flat functions around one :class:`_Walk` and the loop state
    :class:`_Cycle`: :func:`_walk` runs the transforms and moves, :func:`_unwound`
    and :func:`_settled` pick the output layout.

    Raises:
      ValueError: the output layout would split an axis the mesh does not divide
        (a length changed by ``s`` on a split axis; the message names the axis and
        the remedy).
      NotImplementedError: a 1-D array split along its only axis (no axis to receive
        the split); an R2C axis that is split when no transformed axis is free.
    """
    w, st = _start(problem, ctx)
    st = _walk(w, st)
    end = copy.deepcopy(w.b)
    b = _settled(end, _unwound(w.b, st.natural, problem.out_layout), problem.out_layout, out_target)
    out_entries, entries = tuple(b.spec), problem.spec
    ins, outs = problem.in_order, problem.out_order
    return FFTPlan(
        name=problem.name,
        in_shape=permute(problem.shape, ins),
        in_spec=_to_spec(permute(entries, ins)),
        out_shape=permute(b.shape, outs),
        out_spec=_to_spec(permute(out_entries, outs)),
        steps=tuple(b.steps),
        decomposition=w.decomposition,
        layout="natural" if out_entries == entries else "default",
        norm=problem.norm,
        in_order=ins,
        out_order=outs,
        chunks=_chunks(problem, b.steps),
    )


def _chunks(problem: FftProblem, steps: Sequence[Step]) -> int:
    """The problem's ``chunks``, or the planner's choice by the size of a device's block.

    Blocks below :data:`CHUNK_MIN_ELEMENTS` run whole; larger ones in the most pieces
    (a power of two, at most :data:`AUTO_CHUNKS`) that keep each piece at least
    :data:`PIECE_ELEMENTS` long and its message to each device of the largest group
    at least :data:`MESSAGE_ELEMENTS`.
    """
    if problem.chunks is not None:
        return problem.chunks
    sizes = problem.mesh_sizes
    parts = math.prod(sizes[a] for entry in problem.spec for a in entry)
    block = math.prod(problem.shape) // parts
    if block < CHUNK_MIN_ELEMENTS:
        return 1
    group = max((s.group for s in steps if s.op == "all_to_all"), default=1)
    most = block // max(PIECE_ELEMENTS, group * MESSAGE_ELEMENTS)
    return max(1, min(AUTO_CHUNKS, 1 << (most.bit_length() - 1))) if most else 1
