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
joins the cycle only when every mesh group on the transformed axes divides it. C2R
(``irfftn``) mirrors this and transforms that axis last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from jax.sharding import PartitionSpec

from shardkit.layout._checks import entry_axes

__all__ = ["FFTPlan", "Kind", "Layout", "Step", "make_plan", "normalize_spec"]

Kind = Literal["c2c", "r2c", "c2r"]
Layout = Literal["default", "natural"]
Entries = tuple[tuple[str, ...], ...]


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
    """

    op: Literal["fft", "ifft", "rfft", "irfft", "all_to_all"]
    axes: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    mesh_axes: tuple[str, ...] = ()
    src: int = -1
    dst: int = -1

    def __str__(self) -> str:
        if self.op == "all_to_all":
            return f"all_to_all({','.join(self.mesh_axes)}: axis {self.src} -> {self.dst})"
        return f"{self.op}(axes={self.axes}, n={self.sizes})"


@dataclass(frozen=True)
class FFTPlan:
    """A distributed FFT: input and output layouts and the steps between them.

    ``plan.local`` is the per-shard function: call it inside ``jax.shard_map`` with
    ``in_specs=plan.in_spec`` and ``out_specs=plan.out_spec`` (see
    :func:`shardkit.fft.plan`).

    Attributes:
      name: the transform (``"fftn"``, ``"rfftn"``, ...).
      in_shape: global input shape.
      in_spec: input spec, one entry per dimension.
      out_shape: global output shape.
      out_spec: output spec, one entry per dimension.
      steps: local transforms and ``all_to_all`` moves, in order.
      decomposition: ``"local"`` (no transformed axis split), ``"slab"`` (one) or
        ``"pencil"`` (two or more).
      layout: ``"default"`` or ``"natural"`` (the output layout actually produced).
      norm: numpy's ``norm``.
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

    @property
    def all_to_alls(self) -> int:
        """How many ``all_to_all`` collectives the plan runs."""
        return sum(s.op == "all_to_all" for s in self.steps)

    def local(self, block: object, /) -> object:
        """Run the plan on this device's block (inside ``shard_map``)."""
        from shardkit.fft._transpose import run_steps

        return run_steps(block, self.steps, self.norm)  # type: ignore[arg-type]

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


def normalize_spec(spec: PartitionSpec | Sequence[object], rank: int) -> Entries:
    """One tuple of mesh axes per dimension, padded with ``()`` to ``rank``."""
    entries = tuple(entry_axes(e) for e in spec)
    return entries + ((),) * (rank - len(entries))


def _to_spec(entries: Entries) -> PartitionSpec:
    return PartitionSpec(*(None if not e else e[0] if len(e) == 1 else e for e in entries))


class _Builder:
    """Mutable state while planning: current shape, spec and emitted steps."""

    def __init__(
        self, where: str, shape: Sequence[int], entries: Entries, sizes: Mapping[str, int], ctx: str
    ) -> None:
        self.where, self.ctx = where, ctx
        self.shape = list(shape)
        self.spec = [tuple(e) for e in entries]
        self.sizes = sizes
        self.steps: list[Step] = []
        self.moves: list[Step] = []

    def parts(self, d: int) -> int:
        return math.prod(self.sizes[a] for a in self.spec[d])

    def split(self, d: int) -> bool:
        return self.parts(d) > 1

    def can_receive(self, d: int, group: tuple[str, ...]) -> bool:
        g = math.prod(self.sizes[a] for a in group)
        return (self.shape[d] // self.parts(d)) % g == 0

    def move(self, src: int, dst: int, group: tuple[str, ...] | None = None) -> None:
        group = self.spec[src] if group is None else group
        if self.spec[src][len(self.spec[src]) - len(group) :] != group:
            raise AssertionError(f"{group} is not the minor part of {self.spec[src]}")
        if not self.can_receive(dst, group):
            raise _move_error(self, src, dst, group)
        step = Step("all_to_all", mesh_axes=group, src=src, dst=dst)
        self.spec[src] = self.spec[src][: len(self.spec[src]) - len(group)]
        self.spec[dst] = self.spec[dst] + group
        self.steps.append(step)
        self.moves.append(step)

    def transform(self, op: str, axes: Sequence[int], n: Sequence[int]) -> None:
        if not axes:
            return
        for a, size in zip(axes, n, strict=True):
            if self.split(a):
                raise AssertionError(f"axis {a} is split during a local {op}")
            self.shape[a] = size // 2 + 1 if op == "rfft" else size
        self.steps.append(Step(op, axes=tuple(axes), sizes=tuple(n)))  # type: ignore[arg-type]

    def unwind(self) -> None:
        """Append the reverse of every move so far: back to the input's layout."""
        for step in reversed(list(self.moves)):
            if not self.can_receive(step.src, step.mesh_axes):
                g = math.prod(self.sizes[a] for a in step.mesh_axes)
                raise ValueError(
                    f"{self.where}: {self.ctx}: the natural layout needs mesh axes "
                    f"{step.mesh_axes} ({g} devices) back on axis {step.src}, whose new size "
                    f"{self.shape[step.src]} is not divisible by {g}. Use "
                    "out_layout='default', or choose s so that the mesh divides it."
                )
            self.move(step.dst, step.src, step.mesh_axes)


def _move_error(b: _Builder, src: int, dst: int, group: tuple[str, ...]) -> ValueError:
    g = math.prod(b.sizes[a] for a in group)
    named = group[0] if len(group) == 1 else "(" + ",".join(group) + ")"
    return ValueError(
        f"{b.where}: {b.ctx}: to transform axis {src} its mesh axis {named} ({g} devices) "
        f"must move to axis {dst}, whose size {b.shape[dst]} (block "
        f"{b.shape[dst] // b.parts(dst)}) is not divisible by {g}. Pad axis {dst} to a "
        f"multiple of {g * b.parts(dst)} (e.g. with s=...), split axis {src} over fewer "
        "devices, or split a different axis."
    )


def make_plan(
    name: str,
    shape: Sequence[int],
    spec: PartitionSpec | Sequence[object],
    mesh_sizes: Mapping[str, int],
    *,
    axes: Sequence[int],
    sizes: Sequence[int],
    kind: Kind = "c2c",
    inverse: bool = False,
    out_layout: Layout = "default",
    norm: str | None = None,
    ctx: str = "",
) -> FFTPlan:
    """Plan a transform of ``shape`` split as ``spec`` over ``axes`` to lengths ``sizes``.

    ``sizes`` are numpy's ``s`` (for ``c2r`` the real output length of the last axis).

    Raises:
      ValueError: a move needs an axis whose size the moving mesh axes do not divide
        (the message names both axes and the remedy).
      NotImplementedError: a 1-D array split along its only axis (no axis to receive
        the split); an R2C axis that is split when no transformed axis is free.
    """
    rank = len(shape)
    entries = normalize_spec(spec, rank)
    b = _Builder(name, shape, entries, mesh_sizes, ctx or f"array shape={tuple(shape)}")
    want = dict(zip(axes, sizes, strict=True))
    step_op = "ifft" if inverse else "fft"
    real_axis = axes[-1] if kind != "c2c" else None
    complex_axes = [a for a in axes if a != real_axis]
    direction = -1 if (inverse or kind == "c2r") else 1
    groups = math.prod(b.parts(a) for a in axes)
    cycle = sorted(complex_axes)
    if real_axis is not None:
        half = want[real_axis] // 2 + 1
        if half % groups == 0 or (kind == "c2r" and b.split(real_axis)):
            cycle = sorted([*cycle, real_axis])
    pending = [a for a in complex_axes if b.split(a)]
    decomposition = {0: "local", 1: "slab"}.get(len([a for a in axes if b.split(a)]), "pencil")
    back_to_natural = out_layout == "natural"

    if kind == "r2c" and real_axis is not None:
        if b.split(real_axis):
            ring = sorted([*cycle, real_axis]) if real_axis not in cycle else cycle
            nxt = ring[(ring.index(real_axis) + 1) % len(ring)]
            if nxt == real_axis or b.split(nxt):
                raise NotImplementedError(
                    f"{name}: {b.ctx}: the R2C axis {real_axis} is split and the next "
                    f"transformed axis ({nxt}) is split too, so there is no free axis to "
                    "move its split to before the real transform. Leave the last "
                    "transformed axis unsplit, or use fftn on a complex input."
                )
            b.move(real_axis, nxt)
            if nxt not in pending and nxt in complex_axes:
                pending.append(nxt)
        b.transform("rfft", [real_axis], [want[real_axis]])
    if kind == "c2r" and real_axis is not None and b.split(real_axis):
        pending.append(real_axis)

    free = [a for a in complex_axes if not b.split(a)]
    b.transform(step_op, free, [want[a] for a in free])
    cycle_list = list(cycle)

    def nxt_of(d: int) -> int:
        return cycle_list[(cycle_list.index(d) + direction) % len(cycle_list)]

    def done(d: int) -> None:
        pending.remove(d)
        if d in complex_axes:
            b.transform(step_op, [d], [want[d]])

    while pending:
        order = sorted(pending, reverse=direction > 0)
        ready = [d for d in order if d in cycle_list and not b.split(nxt_of(d))]
        ready = [d for d in ready if nxt_of(d) != d]
        if ready:
            d = ready[0]
            b.move(d, nxt_of(d))
            done(d)
            continue
        back_to_natural = True
        borrow = [
            u
            for u in range(rank)
            if u not in axes and u not in cycle_list and not b.split(u) and b.shape[u] > 1
        ]
        d = order[0]
        fits = [u for u in borrow if b.can_receive(u, b.spec[d])]
        if fits:
            cycle_list = sorted([*cycle_list, fits[0]])
            continue
        target = nxt_of(d) if d in cycle_list else d
        if target == d and real_axis is not None:
            raise NotImplementedError(
                f"{name}: {b.ctx}: axis {d} is split and the only axis that could take its "
                f"split is the halved R2C axis {real_axis} (length {want[real_axis] // 2 + 1}), "
                "which the mesh does not divide. Choose a real length n whose n//2+1 the "
                "mesh divides (s=...), add or split another axis, or use fftn."
            )
        if target == d:
            raise NotImplementedError(
                f"{name}: {b.ctx}: axis {d} is split and the array has no other axis to "
                "take its split (a 1-D transform of a split 1-D array needs a four-step "
                "FFT, which shardkit does not implement). Reshape to 2-D, or replicate "
                "the array before transforming it."
            )
        b.move(d, target)
        done(d)

    if kind == "c2r" and real_axis is not None:
        if b.split(real_axis):  # a split landed on the C2R axis: pass it on once more
            dest = nxt_of(real_axis)
            if b.split(dest):
                raise NotImplementedError(
                    f"{name}: {b.ctx}: the C2R axis {real_axis} ends up split and axis "
                    f"{dest} cannot take its split. Leave axis {real_axis} unsplit or use "
                    "out_layout='natural'."
                )
            b.move(real_axis, dest)
        b.transform("irfft", [real_axis], [want[real_axis]])
    if back_to_natural:
        b.unwind()
    out_entries = tuple(b.spec)
    return FFTPlan(
        name=name,
        in_shape=tuple(shape),
        in_spec=_to_spec(entries),
        out_shape=tuple(b.shape),
        out_spec=_to_spec(out_entries),
        steps=tuple(b.steps),
        decomposition=decomposition,
        layout="natural" if out_entries == entries else "default",
        norm=norm,
    )
