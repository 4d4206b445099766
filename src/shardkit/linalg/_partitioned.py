"""Auto mesh axes under ``jit``: run the eager algorithm once the partitioner knows the layout.

Inside ``jax.jit`` an operand on ``Auto`` mesh axes has no spec while tracing (its type
carries the abstract mesh, never the split): XLA's partitioner (Shardy) decides it
later. :func:`partitioned` wraps an operation in ``custom_partitioning``: the
partitioner calls back with the mesh and the operands' shardings, and the callback
returns the per-shard program, the same body the eager path wraps in
``jax.shard_map``, so the compiled program holds the same collectives as eagerly.

The callback may ask for other operand layouts than the ones it got (the partitioner
then moves the operands): the linear algebra uses that only for free changes, a
replicated operand sliced to the layout eager calls would use. A layout the algorithm
cannot take raises the operation's own error (naming the layout and the fix) when the
program is compiled; nothing is ever gathered to make it fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from shardkit.layout.internal import Operand
from shardkit.linalg._blockcyclic import plan_for

__all__ = ["Program", "on_layout", "partitioned"]

Program = Callable[
    [Mesh, tuple[PartitionSpec, ...], tuple[PartitionSpec, ...]],
    tuple[Callable[..., Any], tuple[PartitionSpec, ...], tuple[PartitionSpec, ...]],
]
"""``program(mesh, operand specs, wished result specs) -> (per-shard fn, in specs, out specs)``."""

Program_ = tuple[Callable[..., Any], tuple[PartitionSpec, ...], tuple[PartitionSpec, ...]]


def _specs(shapes: Any) -> tuple[PartitionSpec, ...]:
    return tuple(s.sharding.spec for s in jax.tree_util.tree_leaves(shapes))


def _as_tuple(fn: Callable[..., Any]) -> Callable[..., tuple[Any, ...]]:
    def wrapped(*xs: Any) -> tuple[Any, ...]:
        out = fn(*xs)
        return tuple(out) if isinstance(out, tuple | list) else (out,)

    return wrapped


def partitioned(
    reference: Callable[..., Any],
    program: Program,
    operands: Sequence[Any],
    rule: str,
) -> tuple[Any, ...]:
    """Apply the operation ``program`` describes to ``operands``; returns its outputs (a tuple).

    Args:
      reference: the operation on whole arrays; gives the output shapes, and is what runs
        when the program ends up on one device. It must return a tuple.
      program: builds the per-shard program for a mesh and the operands' specs; the
        third argument is the partitioner's preferred result specs.
      operands: the arrays.
      rule: the Shardy sharding rule (einsum-like, ``"i j, j k -> i k"``); it tells
        the partitioner how the results' dimensions follow the operands'.
    """
    op = custom_partitioning(jax.jit(reference))

    def partition(mesh: Mesh, arg_shapes: Any, result_shape: Any) -> Any:
        fn, in_specs, out_specs = program(mesh, _specs(arg_shapes), _specs(result_shape))
        outs = tuple(NamedSharding(mesh, s) for s in out_specs)
        return mesh, _as_tuple(fn), outs, tuple(NamedSharding(mesh, s) for s in in_specs)

    def infer(mesh: Mesh, arg_shapes: Any, result_shape: Any) -> Any:
        wish = tuple(PartitionSpec() for _ in jax.tree_util.tree_leaves(result_shape))
        _, _, out_specs = program(mesh, _specs(arg_shapes), wish)
        return tuple(NamedSharding(mesh, s) for s in out_specs)

    op.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule)
    return tuple(op(*operands))


def on_layout(
    op: Operand,
    operands: Sequence[Any],
    make: Callable[[Any, Any, PartitionSpec], Program_],
    rule: str,
    *,
    nb: int,
    order: str,
    layout: Callable[[Operand], tuple[Any, PartitionSpec, Any]] | None = None,
) -> tuple[Any, ...]:
    """Run a block-cyclic operation on the matrix ``op`` (``operands[0]``) once its layout is known.

    At partition time the layout eager calls would derive from ``a``'s sharding
    (:func:`~shardkit.linalg._blockcyclic.plan_for`, replicated -> the default split)
    gives the plan, and ``make(plan, mesh, spec)`` the per-shard program (its out specs a
    tuple); on one device the same program runs with a mesh axis of size one. ``layout`` replaces
    ``plan_for`` (QR has its own). The partitioner's layout is recorded on ``op``
    (:meth:`Operand.moved`), never resolved from an array again.
    """

    def resolve_layout(mesh: Any, spec: PartitionSpec) -> tuple[Any, PartitionSpec, Any]:
        known = op.moved(mesh, spec)
        return layout(known) if layout is not None else plan_for(known, nb, order)

    def program(mesh: Mesh, specs: tuple[PartitionSpec, ...], wish: Any) -> Any:
        m, p, plan = resolve_layout(mesh, specs[0])
        return make(plan, m, p)

    def reference(*xs: Any) -> tuple[Any, ...]:
        mesh = Mesh(np.array(jax.devices()[:1]), ("_",))
        m, p, plan = resolve_layout(mesh, PartitionSpec())
        fn, _, _ = make(plan, m, p)
        # vmap over a unit axis binds the mesh axis name without placing anything.
        out = jax.vmap(_as_tuple(fn), axis_name="_")(*(x[None] for x in xs))
        return tuple(o[0] for o in out)

    return partitioned(reference, program, operands, rule)
