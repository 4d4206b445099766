"""The ``Auto``-axes route: one linear primitive lowered to ``custom_partitioning``.

Inside ``jit`` on ``Auto`` mesh axes the input's sharding is unknown while tracing;
it is decided later by the partitioner. ``custom_partitioning`` lets the partitioner
call back with the operand's sharding, and the callback returns the per-shard
program of a :class:`~shardkit.fft._plan.FFTPlan` (local FFTs and ``all_to_all``
moves).

``custom_partitioning`` itself has no differentiation, transposition or batching
rules, so it is hidden behind a JAX primitive, ``shardkit_fft``, whose parameter is
an :class:`Op` (the transform's :class:`~shardkit.fft._problem.FftProblem`, the input
dtype, and whether it is the transpose). The transform is linear, which fixes every rule:

* JVP: the tangent goes through the same primitive (``ad.deflinear2``), so
  ``jacfwd`` and derivatives of any order stay on shardkit's plans;
* transpose: the primitive with ``transposed`` flipped, lowered to a second
  ``custom_partitioning`` op that runs ``jax.linear_transpose`` of the per-shard
  program (reverse mode partitions instead of gathering; the transpose of the
  transpose is the forward op again);
* batching: the mapped axis moves to the front and becomes one more untransformed
  axis of the op (``vmap``, ``jacrev`` and ``jacfwd`` plan the same moves);
* eager evaluation (``grad`` of a concrete array on Auto axes): the primitive is
  jitted alone, so the partitioner sees the concrete sharding and runs the plan,
  never ``jnp.fft``'s partitioned FFT.

The Shardy rule is fixed while tracing, before the split is known (the layout
contract in :mod:`shardkit.fft` states what that means for the user). Where the
mesh is known then (``jax.set_mesh``, or the operand's type) and its device count
divides every length in the cycle, the rule promises the *default* layout, each
transformed axis's factor moved to the next transformed axis; otherwise it ties
each output dimension to its input dimension (the natural layout). A dimension
whose length changes shares a factor only where every split the mesh can make of
it divides their common divisor (:func:`_shares`): a shared factor that a split
does not fit makes Shardy cut a mesh axis into sub-axes, which no
``NamedSharding`` describes. :meth:`Op.carried` is
the output spec the rule gives a split. The partition plans from the operand's
split to exactly the output sharding the partitioner chose, with ``all_to_all``
only, wherever that keeps the operand's mesh axes and divides; so the partitioner
reshards nothing after the op, and gathers only the mesh axes the rule dropped.

The rule maps each input dimension's factor to one output dimension, chosen before
the split is known; :mod:`shardkit.fft._route` picks, from the mesh, the rule that
keeps every split the input can have, or routes around the op where none does.

Errors: everything known while tracing (shape, dtype, ``s=``, axes, the mesh) is
checked before the primitive is bound, so it reaches the user as shardkit's own
error. The partitioner itself never raises (XLA would wrap the error as an
``INTERNAL`` runtime error): the callbacks decode XLA's shardings themselves
(:func:`_spec`), a split that no plan takes is moved to one over the same mesh
axes that has a plan (:meth:`Op.moved_plan`), else gets the replicated plan (a
gather and the whole transform on every device), and so does any other failure
while planning (:func:`_safe`). Eager calls, whose split is known, check it first and
raise shardkit's error instead.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import NamedSharding, PartitionSpec

from shardkit._programs import cached
from shardkit.fft._compat import require_devices_during_lowering
from shardkit.fft._fourstep import planned
from shardkit.fft._plan import FFTPlan
from shardkit.fft._problem import FftProblem, PlanLayout, unpermute
from shardkit.layout.internal import every_split, mesh_summary, normalize, spec_summary, to_pspec

__all__ = ["Op", "apply", "auto_layout", "check_traced", "default_cycle"]


@dataclasses.dataclass(frozen=True)
class Op:
    """A transform as the primitive's parameter (hashable, so programs are cached).

    Attributes:
      problem: the forward transform, unplaced (the partitioner supplies the
        split), its ``out_layout`` the layout the Shardy rule promises (see
        :func:`auto_layout`).
      in_dtype: the forward transform's input dtype.
      cycle: for the default layout, the axes whose splits move round.
      transposed: the op is the transpose: it maps the forward output's cotangent
        (shape :attr:`out`) to the input's (shape ``problem.in_shape``).
      sizes: the sizes of the mesh axes known while tracing (``()``: unknown); the
        Shardy rule shares a factor between an input and an output length only
        where every split of the input length these allow divides it (see
        :func:`_shares`).
    """

    problem: FftProblem
    in_dtype: str
    cycle: tuple[int, ...] = ()
    transposed: bool = False
    sizes: tuple[int, ...] = ()

    @property
    def scale(self) -> float:
        """Factor turning numpy's ``"backward"`` result into ``norm``'s."""
        t = self.problem
        n = math.prod(t.sizes)
        if t.norm in (None, "backward"):
            return 1.0
        if t.norm == "ortho":
            return math.sqrt(n) if t.inverse else 1 / math.sqrt(n)
        return float(n) if t.inverse else 1 / n

    def reference(self, x: jax.Array) -> jax.Array:
        """The single-device forward transform (``jnp.fft``)."""
        # Tracing jnp's "ortho"/"forward" scaling leaves constants in the jaxpr, which
        # custom_partitioning rejects: scale by a Python float instead.
        y = self.problem.stored_reference(x, norm="backward")
        return y if self.scale == 1.0 else y * self.scale

    @property
    def out(self) -> jax.ShapeDtypeStruct:
        """Shape and dtype of the forward transform's output."""
        return _out_struct(dataclasses.replace(self, transposed=False))

    def batched(self, size: int) -> Op:
        """The same op with a new leading (untransformed) axis of length ``size``."""
        t = self.problem

        def shifted(order: tuple[int, ...]) -> tuple[int, ...]:
            return (0, *(a + 1 for a in order)) if order else ()

        return dataclasses.replace(
            self,
            problem=dataclasses.replace(
                t,
                shape=(size, *t.shape),
                axes=tuple(a + 1 for a in t.axes),
                in_order=shifted(t.in_order),
                out_order=shifted(t.out_order),
            ),
            cycle=tuple(a + 1 for a in self.cycle),
        )

    def plan(
        self, spec: Any, sizes: Mapping[str, int], *, strict: bool = False, target: Any = None
    ) -> FFTPlan:
        """The forward plan for an input split as ``spec``, in the promised layout if possible.

        ``sizes`` are the mesh's axis sizes by name.

        The other layout is taken where the promised one is impossible for this split
        (e.g. a split R2C axis; the partitioner then reshards the output). Where no
        layout fits the split (e.g. a split 1-D signal the four-step algorithm
        cannot take), ``strict`` raises shardkit's error; otherwise the plan for a
        replicated input is returned, which always exists: the partitioner gathers
        the input and the transform runs whole on every device. The partitioner
        never raises (XLA would wrap the error in its own); eager calls check with
        ``strict`` first (see ``_impl``).

        ``target`` is the output spec the partitioner chose (stored order): the plan
        ends there where all-to-alls can reach it (same mesh axes, a layout that
        divides), so that the partitioner has nothing to reshard.
        """
        t = self.problem
        goal = None
        if target is not None:
            goal = unpermute(normalize(target, len(self.out.shape)), t.out_order)

        def make(layout: PlanLayout, where: Any) -> FFTPlan:
            problem = dataclasses.replace(t, out_layout=layout)
            return planned(problem.placed(where, sizes), out_target=goal)

        promised = self.problem.out_layout
        other: PlanLayout = "default" if promised == "natural" else "natural"
        try:
            try:
                return make(promised, spec)
            except ValueError:
                return make(other, spec)
        except (ValueError, NotImplementedError):
            if strict:
                raise
            moved = None if target is None else self.moved_plan(spec, sizes, target)
            return moved if moved is not None else make("natural", PartitionSpec())

    def moved_plan(self, spec: Any, sizes: Mapping[str, int], target: Any) -> FFTPlan | None:
        """A plan from another split over the same mesh axes that ends at ``target``, if any.

        For a split no plan takes (Explicit axes refuse it): the partitioner moves
        the input to the plan's split first, which keeps every mesh axis, where the
        replicated plan would gather. ``None`` where no split over those axes ends
        at ``target`` (the output spec the partitioner chose).
        """
        entries = normalize(spec, len(self.problem.in_shape))
        axes = sorted(a for e in entries for a in e)
        goal = normalize(target, len(self.out.shape))
        for other in every_split(self.problem.in_shape, sizes):
            if other == entries or sorted(a for e in other for a in e) != axes:
                continue
            try:
                p = self.plan(to_pspec(other), sizes, strict=True, target=to_pspec(goal))
            except (ValueError, NotImplementedError):
                continue
            if normalize(p.out_spec, len(goal)) == goal:
                return p
        return None

    def carried(self, spec: Any) -> tuple[tuple[str, ...], ...]:
        """The output spec the Shardy rule gives an input split as ``spec`` (stored order).

        Each input dimension's mesh axes land on its destination (see
        :meth:`destinations`) where the rule shares a factor between them (see
        :func:`_shares`), and are dropped otherwise: then the partitioner
        replicates the output along them (an all-gather). Where this equals the
        plan's output spec for ``spec``, the op on Auto axes matches Explicit axes
        exactly (layout and collectives); ``tests/fft/test_fft_auto_property.py``
        checks that.
        """
        in_shape, out_shape = self.problem.in_shape, tuple(self.out.shape)
        entries = normalize(spec, len(in_shape))
        out: list[tuple[str, ...]] = [()] * len(out_shape)
        for d, e in enumerate(self.destinations()):
            if _shares(in_shape[d], out_shape[e], self.sizes) and entries[d]:
                out[e] = entries[d]
        return tuple(out)

    def destinations(self) -> tuple[int, ...]:
        """Where each input axis's split lands in the promised layout (the Shardy rule's map).

        Positions of the stored arrays: input axis ``i`` (in ``in_order``) to output
        axis ``dest[i]`` (in ``out_order``).
        """
        t = self.problem
        dest = list(range(len(t.shape)))
        if t.out_layout != "natural":
            cycle = self.cycle
            step = -1 if t.inverse else 1
            for k, a in enumerate(cycle):
                dest[a] = cycle[(k + step) % len(cycle)]
        stored_out = t.out_order or tuple(range(len(dest)))
        return tuple(stored_out.index(dest[a]) for a in (t.in_order or range(len(dest))))


def _cycle(problem: FftProblem, half: int, devices: int) -> list[int]:
    """The transformed axes that pass splits round (the plan's cycle; see ``_plan``)."""
    if problem.kind == "c2c" or half % devices == 0:
        return sorted(problem.axes)
    return sorted(problem.axes[:-1])


def auto_layout(problem: FftProblem, mesh: Any) -> tuple[PlanLayout, tuple[int, ...]]:
    """The layout an Auto-axes op promises the partitioner before the split is known.

    The Shardy rule is fixed while tracing, when only the mesh is known (``mesh``:
    the one set by ``jax.set_mesh``, else the one in the operand's type): it
    promises the default layout (each transformed axis's split moves to the next
    one, as on Explicit axes) only where that holds for any split the input may
    get: the device count divides every length in the cycle (no move pads, no
    receiver is skipped) and the cycle has more axes than the mesh has axes of
    size > 1 (some axis is always free to receive). Otherwise the rule ties each
    output dimension to its input dimension (natural layout).

    Returns:
      The layout and, for the default one, the cycle of axes.
    """
    if problem.out_layout == "natural" or mesh is None or mesh.empty:
        return "natural", ()
    big = sum(n > 1 for n in mesh.axis_sizes)
    cycle = default_cycle(problem, mesh)
    devices = math.prod(mesh.axis_sizes)
    if len(cycle) <= big or any(_lengths(problem)[a] % devices for a in cycle):
        return "natural", ()
    return "default", cycle


def default_cycle(problem: FftProblem, mesh: Any) -> tuple[int, ...]:
    """The axes whose splits the default layout moves round on ``mesh`` (``()``: none)."""
    devices = math.prod(mesh.axis_sizes)
    if devices == 1:
        return ()
    return tuple(_cycle(problem, _lengths(problem)[problem.axes[-1]], devices))


def _lengths(problem: FftProblem) -> dict[int, int]:
    """The transformed axes' lengths in the cycle (an R2C axis halved, a C2R one as stored)."""
    axes, sizes = problem.axes, problem.sizes
    lengths = dict(zip(axes, sizes, strict=True))
    if problem.kind == "r2c":
        lengths[axes[-1]] = sizes[-1] // 2 + 1
    elif problem.kind == "c2r":
        lengths[axes[-1]] = problem.shape[axes[-1]]
    return lengths


def _shares(n: int, m: int, sizes: tuple[int, ...]) -> bool:
    """Whether the rule ties an input length ``n`` to an output length ``m`` (see :func:`_rule`).

    Equal lengths always; different ones through their common divisor ``g`` only
    where every split of ``n`` that mesh axes of ``sizes`` can make (the product of
    any of them that divides ``n``) divides ``g`` too, so that Shardy never cuts a
    mesh axis into sub-axes to fit it.
    """
    g = math.gcd(n, m)
    if n == m:
        return True
    if g == 1 or not sizes:
        return False
    groups = {
        math.prod(c) for k in range(1, len(sizes) + 1) for c in itertools.combinations(sizes, k)
    }
    return all(g % G == 0 for G in groups if n % G == 0)


@functools.lru_cache(maxsize=256)  # a plain shape and dtype: not the program cache's
def _out_struct(op: Op) -> jax.ShapeDtypeStruct:
    return jax.eval_shape(op.reference, jax.ShapeDtypeStruct(op.problem.in_shape, op.in_dtype))


def _rule(op: Op, *, transposed: bool) -> tuple[str, dict[str, int]]:
    """The Shardy rule: input axis ``d``'s factor reappears on output axis ``dest[d]``.

    Where the lengths differ (``s=``, a real axis) the shared factor is their common
    divisor ``g``, as the major part of both axes, so a split that divides it
    carries over instead of being dropped (which would make the partitioner
    gather). Only where every split the mesh can make of the input length divides
    ``g``, though (:func:`_shares`): any split of the input axis then fits in the
    shared factor whole. Otherwise Shardy cuts a mesh axis into sub-axes (8 devices
    over a factor of 4 and one of 2), and the output would carry a part of a mesh
    axis, which no ``NamedSharding`` can describe (JAX's callback raised
    ``IndivisibleError``, an ``INTERNAL`` error for the user).
    """
    in_shape, out_shape = op.problem.in_shape, tuple(op.out.shape)
    dest = op.destinations()
    ins: list[str] = [""] * len(in_shape)
    outs: list[str] = [""] * len(out_shape)
    factors: dict[str, int] = {}
    for d, e in enumerate(dest):
        n, m = in_shape[d], out_shape[e]
        g = math.gcd(n, m)
        if n == m:
            ins[d] = outs[e] = f"f{d}"
            continue
        share = _shares(n, m, op.sizes)
        parts_in = [f"f{d}"] if share else []
        parts_out = list(parts_in)
        if share:
            factors[f"f{d}"] = g
        k = g if share else 1
        for parts, size, tag in ((parts_in, n // k, "i"), (parts_out, m // k, "o")):
            if size > 1 or not parts:
                parts.append(f"{tag}{d}")
                factors[f"{tag}{d}"] = size
        ins[d] = parts_in[0] if len(parts_in) == 1 else f"({' '.join(parts_in)})"
        outs[e] = parts_out[0] if len(parts_out) == 1 else f"({' '.join(parts_out)})"
    lhs, rhs = " ".join(ins), " ".join(outs)
    # Only factors inside a compound dimension take a size (whole ones are inferred).
    whole = {w for w in ins + outs if not w.startswith("(")}
    used = {k: v for k, v in factors.items() if k not in whole}
    return (f"{rhs} -> {lhs}" if transposed else f"{lhs} -> {rhs}"), used


def _spec(sharding: Any, mesh: Any, shape: tuple[int, ...]) -> PartitionSpec:
    """The spec over ``mesh`` equivalent to ``sharding`` (replicated where none is).

    The partitioner hands over XLA's shardings undecoded (``decode_shardings=False``):
    JAX's own decoding raises on a split that is not a whole number of mesh axes
    (a Shardy sub-axis), and an exception there reaches the user as an
    ``INTERNAL`` error. Here the candidates are the assignments of mesh axes to
    dimensions that cut each dimension as ``sharding`` does, tried in turn with
    ``is_equivalent_to``. A sharding no spec describes gets the replicated plan,
    whose input the partitioner gathers: correct, where raising would not be.
    """
    if isinstance(sharding, NamedSharding) and dict(sharding.mesh.shape) == dict(mesh.shape):
        return sharding.spec
    try:
        block = sharding.shard_shape(shape)
    except Exception:  # any sharding XLA can hand over: never raise here
        return PartitionSpec()
    parts = [n // b if b and n % b == 0 else 0 for n, b in zip(shape, block, strict=True)]
    if 0 in parts:
        return PartitionSpec()
    for spec in _candidates(parts, [(a, k) for a, k in mesh.shape.items() if k > 1]):
        if NamedSharding(mesh, spec).is_equivalent_to(sharding, len(shape)):
            return spec
    return PartitionSpec()


def _candidates(parts: list[int], axes: list[tuple[str, int]]) -> list[PartitionSpec]:
    """Specs splitting dimension ``d`` into ``parts[d]`` with the mesh ``axes`` (each once)."""
    out: list[PartitionSpec] = []

    def place(d: int, free: list[tuple[str, int]], entries: list[Any]) -> None:
        if d == len(parts):
            out.append(PartitionSpec(*entries))
            return
        for group in _groups(parts[d], free):
            rest = [a for a in free if a[0] not in group]
            entry = None if not group else group[0] if len(group) == 1 else group
            place(d + 1, rest, [*entries, entry])

    place(0, axes, [])
    return out


def _groups(n: int, free: list[tuple[str, int]]) -> list[tuple[str, ...]]:
    """Ordered tuples of distinct mesh axes from ``free`` whose sizes multiply to ``n``."""
    if n == 1:
        return [()]
    return [
        (name, *rest)
        for name, k in free
        if n % k == 0
        for rest in _groups(n // k, [a for a in free if a[0] != name])
    ]


def _local_shape(shape: tuple[int, ...], spec: Any, mesh: Any) -> tuple[int, ...]:
    sizes = dict(mesh.shape)
    return tuple(
        n // math.prod(sizes[a] for a in entry)
        for n, entry in zip(shape, normalize(spec, len(shape)), strict=True)
    )


def _safe(op: Op, spec: PartitionSpec, mesh: Any, target: PartitionSpec) -> FFTPlan:
    """:meth:`Op.plan` for the partitioner, which must never raise.

    An exception in a partition callback reaches the user as XLA's ``INTERNAL``
    error, whatever it was; :meth:`Op.plan` already falls back to the replicated
    plan for splits no plan takes, and this catches anything else the same way
    (the partitioner then gathers: slower, never wrong).
    """
    try:
        return op.plan(spec, dict(mesh.shape), target=target)
    except Exception:  # see the docstring: never raise into XLA
        return op.plan(PartitionSpec(), dict(mesh.shape))


def _warn_gather(op: Op, spec: Any, mesh: Any, lost: set[str]) -> None:
    """Warn that the partitioner gathers mesh axes ``lost`` of an input split as ``spec``.

    The partitioner cannot raise (see :func:`_safe`), and a gather must never be
    silent: the warning carries the error eager calls and Explicit axes raise for
    this split, or says that the sharding rule dropped the axes.
    """
    t = op.problem
    try:
        op.plan(spec, dict(mesh.shape), strict=True)
        why = "the sharding rule, fixed while tracing, keeps no place for them in the output"
    except Exception as e:  # any planning error: quoted, never raised into XLA
        why = f"no plan takes this split (eager calls and Explicit axes raise: {e})"
    warnings.warn(
        f"{t.name}: on Auto mesh axes under jit, x (shape={t.in_shape}) split "
        f"{spec_summary(spec)} over {mesh_summary(mesh)}: the partitioner gathers "
        f"mesh axes {sorted(lost)}, because {why}. The values are right but not "
        "distributed; see the layout contract in shardkit.fft (shardkit.fft.plan "
        "tells beforehand; Explicit mesh axes raise instead).",
        UserWarning,
        stacklevel=2,
    )


def _lost(have: Any, keep: Any, rank: int, out_rank: int) -> set[str]:
    """Mesh axes of spec ``have`` (rank ``rank``) that spec ``keep`` (``out_rank``) lacks."""
    kept = {a for e in normalize(keep, out_rank) for a in e}
    return {a for e in normalize(have, rank) for a in e} - kept


@cached
def _forward(op: Op) -> Callable[[jax.Array], jax.Array]:
    fn = custom_partitioning(op.reference)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        shape, out = tuple(op.problem.in_shape), tuple(op.out.shape)
        target = _spec(result_shape.sharding, mesh, out)
        spec = _spec(arg_shapes[0].sharding, mesh, shape)
        plan = _safe(op, spec, mesh, target)
        lost = _lost(spec, plan.in_spec, len(shape), len(shape))
        lost |= _lost(plan.out_spec, target, len(out), len(out))
        if lost:
            _warn_gather(op, spec, mesh, lost)
        return (
            mesh,
            plan.local,
            NamedSharding(mesh, plan.out_spec),
            (NamedSharding(mesh, plan.in_spec),),
        )

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> NamedSharding:
        spec = _spec(arg_shapes[0].sharding, mesh, tuple(op.problem.in_shape))
        return NamedSharding(mesh, op.plan(spec, dict(mesh.shape)).out_spec)

    rule, factors = _rule(op, transposed=False)
    fn.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=rule,
        decode_shardings=False,
        **factors,  # type: ignore[arg-type]  # factor sizes, not the named flags
    )
    return fn


@cached
def _backward(op: Op) -> Callable[[jax.Array], jax.Array]:
    in_struct = jax.ShapeDtypeStruct(op.problem.in_shape, op.in_dtype)

    def reference(ct: jax.Array) -> jax.Array:
        (out,) = jax.linear_transpose(op.reference, in_struct)(ct)
        return out

    fn = custom_partitioning(reference)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        spec = _spec(result_shape.sharding, mesh, tuple(op.problem.in_shape))
        target = _spec(arg_shapes[0].sharding, mesh, tuple(op.out.shape))
        plan = _safe(op, spec, mesh, target)
        local_in = _local_shape(plan.in_shape, plan.in_spec, mesh)

        def lower(ct: jax.Array) -> jax.Array:
            struct = jax.ShapeDtypeStruct(local_in, op.in_dtype)
            (out,) = jax.linear_transpose(plan.local, struct)(ct)
            return out

        return (
            mesh,
            lower,
            NamedSharding(mesh, plan.in_spec),
            (NamedSharding(mesh, plan.out_spec),),
        )

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> NamedSharding:
        return NamedSharding(mesh, _spec(result_shape.sharding, mesh, tuple(op.problem.in_shape)))

    rule, factors = _rule(op, transposed=True)
    fn.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=rule,
        decode_shardings=False,
        **factors,  # type: ignore[arg-type]  # factor sizes, not the named flags
    )
    return fn


def _lowered(x: jax.Array, *, op: Op) -> jax.Array:
    if op.transposed:
        return _backward(dataclasses.replace(op, transposed=False))(x)
    return _forward(op)(x)


@cached
def _jitted(op: Op) -> Callable[[jax.Array], jax.Array]:
    return jax.jit(functools.partial(_lowered, op=op))


def _impl(x: jax.Array, *, op: Op) -> jax.Array:
    # Compiled alone, the op sees the concrete array's sharding in the partitioner.
    # Plan for it here first, so that a split no plan takes raises shardkit's own
    # error instead of the partitioner quietly gathering (see Op.plan).
    sharding = getattr(x, "sharding", None)
    if not op.transposed and isinstance(sharding, NamedSharding):
        op.plan(sharding.spec, dict(sharding.mesh.shape), strict=True)
    return _jitted(op)(x)


def _abstract_eval(x: Any, *, op: Op) -> Any:
    if op.transposed:
        shape, dtype = op.problem.in_shape, np.dtype(op.in_dtype)
    else:
        shape, dtype = tuple(op.out.shape), np.dtype(op.out.dtype)
    return x.update(shape=shape, dtype=dtype, weak_type=False)


def _transpose(ct: jax.Array, x: Any, *, op: Op) -> list[jax.Array]:
    flipped = dataclasses.replace(op, transposed=not op.transposed)
    want = op.out.dtype if op.transposed else op.in_dtype
    have = op.in_dtype if op.transposed else op.out.dtype
    return [fft_p.bind(jnp.asarray(ct, have), op=flipped).astype(want)]


def _batch(args: Any, dims: Any, *, op: Op) -> tuple[jax.Array, int]:
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 0)
    size = x.shape[0]
    return fft_p.bind(x, op=op.batched(size)), 0


fft_p = Primitive("shardkit_fft")
fft_p.def_impl(_impl)
fft_p.def_abstract_eval(_abstract_eval)
ad.deflinear2(fft_p, _transpose)
batching.primitive_batchers[fft_p] = _batch
mlir.register_lowering(fft_p, mlir.lower_fun(_lowered, multiple_results=False))
require_devices_during_lowering(fft_p)


def check_traced(op: Op, x: Any) -> None:
    """Validate, while tracing, what the partitioner would otherwise trip over.

    Everything known before lowering is checked here, so the user's ``jit`` gets
    shardkit's error rather than XLA's wrapped ``JaxRuntimeError``: the operand's
    shape and dtype against the op's, and the mesh in the operand's type against
    the one set by ``jax.set_mesh``. What depends on the split the partitioner
    picks never raises (see :meth:`Op.plan`).

    Raises:
      ValueError: the shape differs from the op's, or the operand lives on a mesh
        other than the one in context.
      TypeError: the dtype differs from the op's.
    """
    name = op.problem.name
    shape = op.out.shape if op.transposed else op.problem.in_shape
    dtype = op.out.dtype if op.transposed else np.dtype(op.in_dtype)
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: x has shape {tuple(x.shape)}; the transform expects {shape}")
    if np.dtype(x.dtype) != np.dtype(dtype):
        raise TypeError(f"{name}: x has dtype {x.dtype}; the transform expects {dtype}")
    context = jax.sharding.get_abstract_mesh()
    own = getattr(getattr(jax.typeof(x), "sharding", None), "mesh", None)
    if context is None or context.empty or own is None or own.empty:
        return
    if tuple(context.axis_names) != tuple(own.axis_names) or tuple(context.axis_sizes) != tuple(
        own.axis_sizes
    ):
        raise ValueError(
            f"{name}: x (shape={tuple(x.shape)}) lives on mesh {mesh_summary(own)} but "
            f"the mesh in context (jax.set_mesh) is {mesh_summary(context)}; shard x on "
            "the context mesh or call the transform under x's mesh"
        )


def apply(op: Op, x: jax.Array) -> jax.Array:
    """Run ``op`` (forward) on ``x``: partitioned under ``jit``, differentiable, batchable."""
    arr = jnp.asarray(x, op.in_dtype)
    check_traced(op, arr)
    return fft_p.bind(arr, op=op)
