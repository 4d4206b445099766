"""The ``jit`` rule: ``custom_partitioning`` so that XLA partitions instead of gathering.

Inside ``jit`` on ``Auto`` mesh axes the input's sharding is unknown while tracing;
it is decided later by the partitioner (Shardy in JAX 0.10). ``custom_partitioning``
lets the partitioner call back with the operand's sharding, and the callback returns
the per-shard program of a :class:`~shardkit.fft._plan.FFTPlan` (local FFTs and
``all_to_all`` moves).

The Shardy rule ties every output dimension whose length does not change to the
same input dimension, so the partitioner expects the output split like the input:
the rule therefore builds the *natural* layout plan (a slab costs two
``all_to_all`` inside ``jit`` on Auto axes; Explicit axes get the default layout,
see :mod:`shardkit.fft._api`). Lengths the mesh does not divide are padded inside
the plan's moves, so only the operand's own sharding has to divide. When the
natural layout is impossible (an R2C axis that was split) it uses the default
plan and the partitioner reshards the output.

``custom_partitioning`` has no differentiation rules, so the op is wrapped in a
``custom_jvp``: the transform is linear, so the tangent is the same op applied to
the tangent, through ``jax.custom_derivatives.linear_call`` whose transpose is a
second ``custom_partitioning`` op running ``jax.linear_transpose`` of the per-shard
program (so reverse mode also partitions instead of gathering).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import linear_call
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding

from shardkit.fft._plan import FFTPlan, Kind, Layout, make_plan

__all__ = ["partitioned"]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _mesh_sizes(mesh: Any) -> dict[str, int]:
    return dict(mesh.shape)


def _rule(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    ins = [_LETTERS[i] for i in range(len(in_shape))]
    outs = [
        ins[i] if in_shape[i] == out_shape[i] else _LETTERS[len(in_shape) + i]
        for i in range(len(out_shape))
    ]
    return f"{' '.join(ins)} -> {' '.join(outs)}"


@functools.cache
def partitioned(
    name: str,
    kind: Kind,
    inverse: bool,
    axes: tuple[int, ...],
    sizes: tuple[int, ...],
    norm: str | None,
    in_shape: tuple[int, ...],
    in_dtype: str,
    unscaled: Callable[[jax.Array], jax.Array],
    scale: float,
) -> Callable[[jax.Array], jax.Array]:
    """A differentiable function of ``x`` that ``jit`` partitions with an FFT plan.

    ``unscaled`` is the ``jnp.fft`` transform with ``norm="backward"``; ``scale``
    turns it into ``norm``'s result.
    """

    def reference(x: jax.Array) -> jax.Array:
        y = unscaled(x)
        return y if scale == 1.0 else y * scale

    def plan_for(spec: Any, mesh: Any) -> FFTPlan:
        def make(layout: Layout) -> FFTPlan:
            return make_plan(
                name,
                in_shape,
                spec,
                _mesh_sizes(mesh),
                axes=axes,
                sizes=sizes,
                kind=kind,
                inverse=inverse,
                norm=norm,
                out_layout=layout,
            )

        try:
            return make("natural")
        except ValueError:  # e.g. a split R2C axis: the partitioner reshards the output
            return make("default")

    out_aval = jax.eval_shape(reference, jax.ShapeDtypeStruct(in_shape, in_dtype))
    rule = _rule(in_shape, tuple(out_aval.shape))

    forward = custom_partitioning(reference)

    def fwd_partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        plan = plan_for(arg_shapes[0].sharding.spec, mesh)
        return (
            mesh,
            plan.local,
            NamedSharding(mesh, plan.out_spec),
            (NamedSharding(mesh, plan.in_spec),),
        )

    def fwd_infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> NamedSharding:
        return NamedSharding(mesh, plan_for(arg_shapes[0].sharding.spec, mesh).out_spec)

    forward.def_partition(
        partition=fwd_partition,
        infer_sharding_from_operands=fwd_infer,
        sharding_rule=rule,
    )

    in_struct = jax.ShapeDtypeStruct(in_shape, in_dtype)

    def transpose_reference(ct: jax.Array) -> jax.Array:
        (out,) = jax.linear_transpose(reference, in_struct)(ct)
        return out

    backward = custom_partitioning(transpose_reference)

    def bwd_partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        plan = plan_for(result_shape.sharding.spec, mesh)
        local_in = _local_shape(plan.in_shape, plan.in_spec, mesh)

        def lower(ct: jax.Array) -> jax.Array:
            struct = jax.ShapeDtypeStruct(local_in, in_dtype)
            (out,) = jax.linear_transpose(plan.local, struct)(ct)
            return out

        return (
            mesh,
            lower,
            NamedSharding(mesh, plan.in_spec),
            (NamedSharding(mesh, plan.out_spec),),
        )

    def bwd_infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> NamedSharding:
        return NamedSharding(mesh, result_shape.sharding.spec)

    backward.def_partition(
        partition=bwd_partition,
        infer_sharding_from_operands=bwd_infer,
        sharding_rule=_rule(tuple(out_aval.shape), in_shape),
    )

    def tangent_map(_: tuple[()], t: jax.Array) -> jax.Array:
        return forward(t)

    def cotangent_map(_: tuple[()], ct: jax.Array) -> jax.Array:
        return backward(ct.astype(out_aval.dtype)).astype(in_dtype)

    @jax.custom_jvp
    def op(x: jax.Array) -> jax.Array:
        return forward(x)

    @op.defjvp
    def op_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> Any:
        (x,), (t,) = primals, tangents
        t = jnp.asarray(t, in_dtype)
        return forward(x), linear_call(tangent_map, cotangent_map, (), t)

    return op


def _local_shape(shape: tuple[int, ...], spec: Any, mesh: Any) -> tuple[int, ...]:
    from shardkit.fft._plan import normalize_spec

    sizes = _mesh_sizes(mesh)
    out = []
    for n, entry in zip(shape, normalize_spec(spec, len(shape)), strict=True):
        parts = 1
        for a in entry:
            parts *= sizes[a]
        out.append(n // parts)
    return tuple(out)
