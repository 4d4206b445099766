"""Validation of a (shape, spec, mesh) triple, shared by every placement entry point."""

from __future__ import annotations

import math
from collections.abc import Sequence

from jax.sharding import AbstractMesh, Mesh, PartitionSpec

from shardkit.layout import _errors


def entry_axes(entry: object) -> tuple[str, ...]:
    """The mesh axes one spec entry splits over: ``None`` -> (), ``'x'`` -> ('x',)."""
    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    if isinstance(entry, tuple):
        return tuple(entry)
    return (entry,)  # type: ignore[return-value]


def check_spec_axes(
    where: str, shape: Sequence[int] | None, spec: PartitionSpec, mesh: Mesh | AbstractMesh
) -> None:
    """Every axis the spec names exists in the mesh and is used at most once."""
    seen: set[str] = set()
    for entry in spec:
        for axis in entry_axes(entry):
            if axis not in mesh.shape:
                raise _errors.unknown_axis_error(where, shape, spec, mesh, axis)
            if axis in seen:
                raise _errors.duplicate_axis_error(where, shape, spec, mesh, axis)
            seen.add(axis)


def check_placement(
    where: str, shape: Sequence[int], spec: PartitionSpec, mesh: Mesh | AbstractMesh
) -> None:
    """Rank, axis names, repeated axes and divisibility of ``shape`` under ``spec``."""
    if len(spec) > len(shape):
        raise _errors.rank_error(where, shape, spec, mesh)
    check_spec_axes(where, shape, spec, mesh)
    for dim, entry in enumerate(spec):
        axes = entry_axes(entry)
        parts = math.prod(mesh.shape[a] for a in axes)
        if parts > 1 and shape[dim] % parts:
            raise _errors.indivisible_error(where, shape, spec, mesh, dim, axes, parts)
