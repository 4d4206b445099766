"""The Auto-axes route's choice, made from the mesh alone, so that no split gathers.

Inside ``jit`` on ``Auto`` mesh axes the input's split is unknown while tracing, and
the Shardy rule of the op (:mod:`shardkit.fft._partition`) is fixed then: it maps
each input dimension's mesh axes to one output dimension, whatever the split. The
mesh *is* known, and with it every split the input can have (:func:`every_split`),
so the choice is checked against all of them here, before anything is bound:

1. the rule that keeps every split's mesh axes (no split's output replicated along
   an axis; every split planned with ``all_to_all`` alone, a split Explicit axes
   refuse moved to one over the same mesh axes, :meth:`Op.moved_plan`), of the
   one promising the default layout (:func:`~shardkit.fft._partition.auto_layout`)
   and, for ``out_layout="default"``, the natural one, the one that gives more
   splits over the whole mesh (then more splits) the Explicit-axes layout;
2. where no rule keeps every split (a length change to one the mesh does not
   divide, a halved R2C axis: Explicit axes move such a split to a dimension chosen
   by the split itself, which no fixed map does), the Explicit plan of one split
   over every mesh axis of size > 1, run in a ``shard_map`` whose ``in_specs`` the
   partitioner reaches from the actual split: by ``all_to_all`` from a split that
   groups the mesh axes on dimensions alike, by slicing from a replicated one
   (:meth:`Route.reaches`). Of those splits, the one most others reach, then the
   one whose output layout Explicit axes give the most splits;
3. where neither exists (no split over every mesh axis has a plan), the rule of 1;
   a split that no plan takes is then gathered (the known limit in the layout
   contract of :mod:`shardkit.fft`).

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
from shardkit.fft._problem import FftProblem
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

    def reaches(self, split: NormSpec) -> bool:
        """Whether the partitioner moves ``split`` to :attr:`plan`'s input without a gather.

        XLA moves one mesh axis at a time (an all-to-all per dimension pair): it
        reaches a split whose mesh axes are grouped on dimensions as the input's
        are, or slices a replicated input; it gathers to split a group of mesh
        axes over dimensions, or to stack axes from several. Always true without
        a plan.
        """
        if self.plan is None or not any(split):
            return True
        target = normalize(self.plan.in_spec, len(split))
        return _groups(split) == _groups(target)

    def out_spec(self, split: Any) -> NormSpec:
        """The output spec (stored order) for an input split as ``split``."""
        if self.plan is None:
            return self.op.carried(split)
        return normalize(self.plan.out_spec, len(self.plan.in_shape))


def route(problem: FftProblem, in_dtype: str, mesh: Any) -> Route:
    """The route of ``problem`` (``out_layout`` the user's) on ``mesh`` (``None``: unknown).

    Only a mesh whose axes of size > 1 are all ``Auto`` is checked against every
    split: on ``Explicit`` axes the op sees a replicated operand (a split one takes
    the ``shard_map`` route of :mod:`shardkit.fft._api`), which every rule keeps.
    """
    layout, cycle = auto_layout(problem, mesh)
    if mesh is None or mesh.empty:
        return Route(Op(dataclasses.replace(problem, out_layout=layout), in_dtype, cycle))
    sizes = tuple(int(k) for k in mesh.axis_sizes)
    base = Op(dataclasses.replace(problem, out_layout=layout), in_dtype, cycle, sizes=sizes)
    big = [t for t, k in zip(mesh.axis_types, sizes, strict=True) if k > 1]
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


# Plain values (no mesh, no compiled program): bounded, outside the program cache.
@functools.lru_cache(maxsize=512)
def _choose(problem: FftProblem, ops: tuple[Op, ...], mesh: tuple[tuple[str, int], ...]) -> Route:
    """:func:`route`'s steps 1 to 3 for the candidate rules ``ops`` (the first the fallback)."""
    sizes = dict(mesh)
    splits = every_split(problem.in_shape, sizes)
    want = {s: _explicit_out(problem, s, sizes) for s in splits}
    whole = {a for a, k in sizes.items() if k > 1}
    full = [s for s in splits if {a for e in s for a in e} == whole]

    def parity(out: Any) -> tuple[int, int]:
        # Splits over the whole mesh (the usual input) first, then all of them.
        same = [s for s in splits if (out(s) if callable(out) else out) == want[s]]
        return sum(s in full for s in same), len(same)

    best: tuple[tuple[int, ...], Route] | None = None
    for rank, op in enumerate(ops):
        if all(_keeps(op, s, sizes) for s in splits):
            score = (1, *parity(op.carried), -rank)
            if best is None or score > best[0]:
                best = (score, Route(op))
    if best is not None:
        return best[1]
    for i, s in enumerate(full):
        if want[s] is None:
            continue
        p = planned(problem.placed(s, sizes))
        # First the split the most others reach without a gather (Route.reaches).
        reached = sum(_groups(u) == _groups(s) for u in full)
        score = (0, reached, *parity(want[s]), -p.all_to_alls, -i)
        if best is None or score > best[0]:
            best = (score, Route(ops[0], p))
    return best[1] if best is not None else Route(ops[0], limited=True)


def _groups(split: NormSpec) -> list[tuple[str, ...]]:
    """The groups of mesh axes that share a dimension of ``split``, in a fixed order."""
    return sorted(e for e in split if e)


def _explicit_out(problem: FftProblem, split: NormSpec, sizes: dict[str, int]) -> NormSpec | None:
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
