"""Builders for sharding error messages.

Every message names the function and argument, echoes the bad value as
``name=value``, gives the array shape, the spec and the mesh, and ends with a remedy,
the way ``shard_map``'s errors do.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax.sharding import AbstractMesh, Mesh, PartitionSpec


def mesh_summary(mesh: Mesh | AbstractMesh) -> str:
    """``mesh(x=2,y=4)``; ``mesh(x=2,y=4; Explicit)`` when no axis is Auto.

    Mixed axis types are written per axis: ``mesh(x=2:Explicit,y=4:Auto)``.
    """
    types = [t.name for t in mesh.axis_types]
    if len(set(types)) > 1:
        axes = ",".join(f"{n}={s}:{t}" for (n, s), t in zip(mesh.shape.items(), types, strict=True))
        return f"mesh({axes})"
    axes = ",".join(f"{name}={size}" for name, size in mesh.shape.items())
    suffix = f"; {types[0]}" if types and types[0] != "Auto" else ""
    return f"mesh({axes}{suffix})"


def spec_summary(spec: PartitionSpec) -> str:
    """``P('x', None)`` as written by users."""
    return f"P{tuple(spec)!r}" if len(spec) != 1 else f"P({spec[0]!r})"


def _context(
    where: str, shape: Sequence[int] | None, spec: PartitionSpec, mesh: Mesh | AbstractMesh
) -> str:
    array = "" if shape is None else f"array shape={tuple(shape)}, "
    return f"{where}: {array}spec={spec_summary(spec)}, {mesh_summary(mesh)}"


def rank_error(
    where: str, shape: Sequence[int], spec: PartitionSpec, mesh: Mesh | AbstractMesh
) -> ValueError:
    return ValueError(
        f"{_context(where, shape, spec, mesh)}: the spec has {len(spec)} entries but the "
        f"array has rank {len(shape)}. A spec gives at most one entry per array "
        "dimension; drop trailing entries or reshape the array."
    )


def unknown_axis_error(
    where: str,
    shape: Sequence[int] | None,
    spec: PartitionSpec,
    mesh: Mesh | AbstractMesh,
    axis: object,
) -> ValueError:
    return ValueError(
        f"{_context(where, shape, spec, mesh)}: spec names mesh axis {axis!r}, which "
        f"the mesh does not have; its axes are {list(mesh.axis_names)}. Use one of "
        "those names or build the mesh with this axis."
    )


def duplicate_axis_error(
    where: str,
    shape: Sequence[int] | None,
    spec: PartitionSpec,
    mesh: Mesh | AbstractMesh,
    axis: object,
) -> ValueError:
    return ValueError(
        f"{_context(where, shape, spec, mesh)}: mesh axis {axis!r} is used more than "
        "once in the spec. Each mesh axis may split at most one array dimension; "
        "replace one use with None or another axis."
    )


def indivisible_error(
    where: str,
    shape: Sequence[int],
    spec: PartitionSpec,
    mesh: Mesh | AbstractMesh,
    dim: int,
    axes: tuple[str, ...],
    parts: int,
) -> ValueError:
    size = shape[dim]
    padded = -(-size // parts) * parts
    named = axes[0] if len(axes) == 1 else "(" + ",".join(axes) + ")"
    divisors = [d for d in range(1, parts + 1) if size % d == 0 and parts % d == 0]
    return ValueError(
        f"{_context(where, shape, spec, mesh)}: dimension {dim} (size {size}) is split "
        f"over mesh axis {named} into {parts} parts, and {size} is not divisible by "
        f"{parts}. Pad dimension {dim} to {padded}, shard it over fewer devices "
        f"(a mesh axis of size {max(divisors)} divides it), or leave it unsplit "
        "with None in the spec."
    )
