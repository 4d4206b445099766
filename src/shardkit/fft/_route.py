"""The Auto-axes route's choice, made from the mesh alone: never a gather.

Inside ``jit`` on ``Auto`` mesh axes the input's split is unknown while tracing, and
the Shardy rule of the op (:mod:`shardkit.fft._partition`) is fixed then: it maps
each input dimension's mesh axes to one output dimension, whatever the split. The
mesh *is* known, and with it every split the input can have (:func:`every_split`),
so the choice is checked against all of them here, before the op is bound:

1. the rule that keeps every split's mesh axes (no split's output replicated along
   an axis, every split planned with ``all_to_all`` alone) and gives the most splits
   the Explicit-axes output layout: the one that promises the default layout
   (:func:`~shardkit.fft._partition.auto_layout`) or, for ``out_layout="default"``,
   the natural one;
2. where no rule keeps every split (a length change to one the mesh does not
   divide, a halved R2C axis, a split 1-D signal: Explicit axes move such a split
   to another dimension, or refuse it, and a fixed map can do neither), one input
   layout for all splits: the operand is constrained to it
   (``with_sharding_constraint``), which the partitioner reaches with all-to-alls,
   from a split over the same mesh axes, or by slicing, from one over fewer. It is
   the split, over every mesh axis of size > 1, whose output matches Explicit
   axes' for the most splits;
3. where neither exists (no split over every mesh axis has a plan), the rule of 1
   without a constraint; a split input then has no plan and is gathered (the known
   limit in the layout contract of :mod:`shardkit.fft`).

:meth:`Route.out_spec` is the output spec the route gives a split;
``tests/fft/test_fft_auto_property.py`` checks it and the collectives.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from jax.sharding import AxisType

from shardkit.fft._fourstep import planned
from shardkit.fft._partition import Op, auto_layout, default_cycle
from shardkit.fft._plan import FFTPlan
from shardkit.fft._problem import Problem
from shardkit.layout.internal import NormSpec, every_split, normalize, to_pspec

__all__ = ["Route", "route"]


@dataclasses.dataclass(frozen=True)
class Route:
    """The Auto-axes op of a transform, or the plan every split is moved to.

    Attributes:
      op: the primitive's parameter (its Shardy rule and promised layout).
      plan: ``None`` where every split goes into :attr:`op` as it is; else the
        Explicit-axes plan of the one input split all are moved to, run in a
        ``shard_map`` (whose ``in_specs`` the partitioner reaches by all-to-alls
        or slicing).
      limited: neither exists (step 3): some split is gathered.
    """

    op: Op
    plan: FFTPlan | None = None
    limited: bool = False

    def out_spec(self, split: Any) -> NormSpec:
        """The output spec (stored order) for an input split as ``split``."""
        if self.plan is None:
            return self.op.carried(split)
        return normalize(self.plan.out_spec, len(self.plan.in_shape))


def route(problem: Problem, in_dtype: str, mesh: Any) -> Route:
    """The route of ``problem`` (``out_layout`` the user's) on ``mesh`` (``None``: unknown).

    Only a mesh whose axes of size > 1 are all ``Auto`` gets a constraint: on
    ``Explicit`` axes the op sees a replicated operand (a split one takes the
    ``shard_map`` route), which every rule keeps.
    """
    layout, cycle = auto_layout(problem, mesh)
    sizes = () if mesh is None or mesh.empty else tuple(int(k) for k in mesh.axis_sizes)
    base = Op(dataclasses.replace(problem, out_layout=layout), in_dtype, cycle, sizes=sizes)
    big = [] if not sizes else [t for t, k in zip(mesh.axis_types, sizes, strict=True) if k > 1]
    if not big or any(t != AxisType.Auto for t in big):
        return Route(base)
    ops = [base]
    if problem.out_layout == "default":
        other = default_cycle(problem, mesh) if layout == "natural" else ()
        ops.append(
            dataclasses.replace(
                base,
                problem=dataclasses.replace(
                    base.problem, out_layout="default" if other else "natural"
                ),
                cycle=other,
            )
        )
    return _choose(problem, tuple(ops), tuple(mesh.shape.items()))


@functools.cache
def _choose(problem: Problem, ops: tuple[Op, ...], mesh: tuple[tuple[str, int], ...]) -> Route:
    """:func:`route`'s steps 1 to 3 for the candidate rules ``ops`` (the first the fallback)."""
    sizes = dict(mesh)
    splits = every_split(problem.in_shape, sizes)
    want = {s: _explicit_out(problem, s, sizes) for s in splits}
    whole = {a for a, k in sizes.items() if k > 1}
    best: tuple[tuple[int, ...], Route] | None = None
    for rank, op in enumerate(ops):
        if all(_keeps(op, s, sizes) for s in splits):
            score = (1, sum(op.carried(s) == want[s] for s in splits), -rank, 0)
            if best is None or score > best[0]:
                best = (score, Route(op))
    if best is not None:
        return best[1]
    for i, s in enumerate(splits):
        if {a for e in s for a in e} != whole or want[s] is None:
            continue
        p = planned(problem.placed(s, sizes))
        # A split stacking mesh axes on one dimension is one XLA reaches from
        # others by gathering (it moves one mesh axis at a time): last.
        stacked = sum(len(e) > 1 for e in s)
        score = (0, sum(want[s] == w for w in want.values()), -stacked, -p.all_to_alls, -i)
        if best is None or score > best[0]:
            best = (score, Route(ops[0], p))
    return best[1] if best is not None else Route(ops[0], limited=True)


def _explicit_out(problem: Problem, split: NormSpec, sizes: dict[str, int]) -> NormSpec | None:
    """The output spec Explicit axes give ``split`` (``None`` where they refuse it)."""
    try:
        p = planned(problem.placed(split, sizes))
    except (ValueError, NotImplementedError):
        return None
    return normalize(p.out_spec, len(split))


def _keeps(op: Op, split: NormSpec, sizes: dict[str, int]) -> bool:
    """Whether ``op`` takes ``split`` without a gather: its rule keeps every mesh axis, a plan ends there."""
    if not any(split):
        return True
    out = op.carried(split)
    if sorted(a for e in out for a in e) != sorted(a for e in split for a in e):
        return False
    try:
        p = op.plan(to_pspec(split), sizes, strict=True, target=to_pspec(out))
    except (ValueError, NotImplementedError):
        return op.moved_plan(split, sizes, to_pspec(out)) is not None
    return normalize(p.out_spec, len(out)) == out
