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
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["Program", "partitioned"]

Program = Callable[
    [Mesh, tuple[PartitionSpec, ...], tuple[PartitionSpec, ...]],
    tuple[Callable[..., Any], tuple[PartitionSpec, ...], tuple[PartitionSpec, ...]],
]
"""``program(mesh, operand specs, wished result specs) -> (per-shard fn, in specs, out specs)``."""


def _specs(shapes: Any) -> tuple[PartitionSpec, ...]:
    return tuple(s.sharding.spec for s in jax.tree_util.tree_leaves(shapes))


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
        return mesh, fn, outs, tuple(NamedSharding(mesh, s) for s in in_specs)

    def infer(mesh: Mesh, arg_shapes: Any, result_shape: Any) -> Any:
        wish = tuple(PartitionSpec() for _ in jax.tree_util.tree_leaves(result_shape))
        _, _, out_specs = program(mesh, _specs(arg_shapes), wish)
        return tuple(NamedSharding(mesh, s) for s in out_specs)

    op.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule)
    return tuple(op(*operands))
