"""The ``Auto``-axes route: one linear primitive lowered to ``custom_partitioning``.

Inside ``jit`` on ``Auto`` mesh axes the input's sharding is unknown while tracing;
it is decided later by the partitioner. ``custom_partitioning`` lets the partitioner
call back with the operand's sharding, and the callback returns the per-shard
program of a :class:`~shardkit.fft._plan.FFTPlan` (local FFTs and ``all_to_all``
moves).

``custom_partitioning`` itself has no differentiation, transposition or batching
rules, so it is hidden behind a JAX primitive, ``shardkit_fft``, whose parameter is
an :class:`Op` (the transform, its axes and lengths, the input shape and dtype, and
whether it is the transpose). The transform is linear, which fixes every rule:

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

The Shardy rule ties every output dimension whose length does not change to the
same input dimension, so the partitioner expects the output split like the input:
the rule builds the *natural* layout plan. When the natural layout is impossible
(a split R2C axis) it uses the default plan and the partitioner reshards the output.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import NamedSharding, PartitionSpec

from shardkit.fft._compat import require_devices_during_lowering
from shardkit.fft._plan import FFTPlan, Kind, Layout, make_plan, normalize_spec

__all__ = ["Op", "apply"]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_JNP: dict[str, Callable[..., jax.Array]] = {
    "fftn": jnp.fft.fftn,
    "ifftn": jnp.fft.ifftn,
    "rfftn": jnp.fft.rfftn,
    "irfftn": jnp.fft.irfftn,
}


@dataclasses.dataclass(frozen=True)
class Op:
    """A transform as the primitive's parameter (hashable, so programs are cached).

    Attributes:
      name: ``"fftn"``, ``"ifftn"``, ``"rfftn"`` or ``"irfftn"``.
      kind: ``"c2c"``, ``"r2c"`` or ``"c2r"``.
      inverse: whether it is an inverse transform.
      axes: transformed axes (non-negative).
      sizes: numpy's ``s``.
      norm: numpy's ``norm``.
      in_shape: the forward transform's input shape.
      in_dtype: the forward transform's input dtype.
      transposed: the op is the transpose: it maps the forward output's cotangent
        (shape :attr:`out_shape`) to the input's (shape :attr:`in_shape`).
    """

    name: str
    kind: Kind
    inverse: bool
    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    norm: str | None
    in_shape: tuple[int, ...]
    in_dtype: str
    transposed: bool = False

    @property
    def scale(self) -> float:
        """Factor turning numpy's ``"backward"`` result into ``norm``'s."""
        n = math.prod(self.sizes)
        if self.norm in (None, "backward"):
            return 1.0
        if self.norm == "ortho":
            return math.sqrt(n) if self.inverse else 1 / math.sqrt(n)
        return float(n) if self.inverse else 1 / n

    def reference(self, x: jax.Array) -> jax.Array:
        """The single-device forward transform (``jnp.fft``)."""
        # Tracing jnp's "ortho"/"forward" scaling leaves constants in the jaxpr, which
        # custom_partitioning rejects: scale by a Python float instead.
        y = _JNP[self.name](x, s=self.sizes, axes=self.axes, norm="backward")
        return y if self.scale == 1.0 else y * self.scale

    @property
    def out(self) -> jax.ShapeDtypeStruct:
        """Shape and dtype of the forward transform's output."""
        return _out_struct(dataclasses.replace(self, transposed=False))

    def batched(self, size: int) -> Op:
        """The same op with a new leading (untransformed) axis of length ``size``."""
        return dataclasses.replace(
            self, in_shape=(size, *self.in_shape), axes=tuple(a + 1 for a in self.axes)
        )

    def plan(self, spec: Any, mesh: Any) -> FFTPlan:
        """The forward plan for an input split as ``spec`` (natural layout if possible)."""

        def make(layout: Layout) -> FFTPlan:
            return make_plan(
                self.name,
                self.in_shape,
                spec,
                dict(mesh.shape),
                axes=self.axes,
                sizes=self.sizes,
                kind=self.kind,
                inverse=self.inverse,
                norm=self.norm,
                out_layout=layout,
            )

        try:
            return make("natural")
        except ValueError:  # e.g. a split R2C axis: the partitioner reshards the output
            return make("default")


@functools.cache
def _out_struct(op: Op) -> jax.ShapeDtypeStruct:
    return jax.eval_shape(op.reference, jax.ShapeDtypeStruct(op.in_shape, op.in_dtype))


def _rule(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    ins = [_LETTERS[i] for i in range(len(in_shape))]
    outs = [
        ins[i] if in_shape[i] == out_shape[i] else _LETTERS[len(in_shape) + i]
        for i in range(len(out_shape))
    ]
    return f"{' '.join(ins)} -> {' '.join(outs)}"


def _spec(sharding: Any) -> PartitionSpec:
    """A sharding's spec; a replicated ``GSPMDSharding`` (an uncommitted input) has none."""
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        return spec
    if sharding.is_fully_replicated:
        return PartitionSpec()
    raise NotImplementedError(f"shardkit.fft: a layout with no mesh axes: {sharding}")


def _local_shape(shape: tuple[int, ...], spec: Any, mesh: Any) -> tuple[int, ...]:
    sizes = dict(mesh.shape)
    return tuple(
        n // math.prod(sizes[a] for a in entry)
        for n, entry in zip(shape, normalize_spec(spec, len(shape)), strict=True)
    )


@functools.cache
def _forward(op: Op) -> Callable[[jax.Array], jax.Array]:
    fn = custom_partitioning(op.reference)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        plan = op.plan(_spec(arg_shapes[0].sharding), mesh)
        return (
            mesh,
            plan.local,
            NamedSharding(mesh, plan.out_spec),
            (NamedSharding(mesh, plan.in_spec),),
        )

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> NamedSharding:
        return NamedSharding(mesh, op.plan(_spec(arg_shapes[0].sharding), mesh).out_spec)

    fn.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=_rule(op.in_shape, tuple(op.out.shape)),
    )
    return fn


@functools.cache
def _backward(op: Op) -> Callable[[jax.Array], jax.Array]:
    in_struct = jax.ShapeDtypeStruct(op.in_shape, op.in_dtype)

    def reference(ct: jax.Array) -> jax.Array:
        (out,) = jax.linear_transpose(op.reference, in_struct)(ct)
        return out

    fn = custom_partitioning(reference)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        plan = op.plan(_spec(result_shape.sharding), mesh)
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
        return NamedSharding(mesh, _spec(result_shape.sharding))

    fn.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule=_rule(tuple(op.out.shape), op.in_shape),
    )
    return fn


def _lowered(x: jax.Array, *, op: Op) -> jax.Array:
    if op.transposed:
        return _backward(dataclasses.replace(op, transposed=False))(x)
    return _forward(op)(x)


@functools.cache
def _jitted(op: Op) -> Callable[[jax.Array], jax.Array]:
    return jax.jit(functools.partial(_lowered, op=op))


def _impl(x: jax.Array, *, op: Op) -> jax.Array:
    # Compiled alone, the op sees the concrete array's sharding in the partitioner.
    return _jitted(op)(x)


def _abstract_eval(x: Any, *, op: Op) -> Any:
    if op.transposed:
        shape, dtype = op.in_shape, np.dtype(op.in_dtype)
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


def apply(op: Op, x: jax.Array) -> jax.Array:
    """Run ``op`` (forward) on ``x``: partitioned under ``jit``, differentiable, batchable."""
    return fft_p.bind(jnp.asarray(x, op.in_dtype), op=op)
