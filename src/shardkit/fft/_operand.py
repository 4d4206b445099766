"""Where an FFT's operand is transformed, read from its one :class:`Operand` record.

Every public fft function resolves its input once (:func:`shardkit.layout.internal.operand`)
and asks this module what to do with the answer: :func:`path` for the transforms and
the shifts, :func:`located` for the operations that need the split itself (halos and
pencil transposes).
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import jax
from jax.sharding import Mesh, PartitionSpec

from shardkit.layout.internal import Operand, to_pspec

__all__ = ["Path", "located", "path"]

Path: TypeAlias = Literal["eager", "explicit", "auto", "local"]
"""``eager``: a placed array, run the per-shard program; ``explicit``: a traced array
on Explicit axes whose split is known, the same program; ``auto``: the partitioner
decides the layout (a ``custom_partitioning`` rule); ``local``: on one device or on
the host, ``jnp.fft`` itself."""


def path(op: Operand) -> tuple[Path, Any, PartitionSpec | None]:
    """``(path, mesh, spec)`` of an operand (mesh and spec ``None`` unless they run a program)."""
    if op.how == "auto-traced" or (op.how == "explicit-traced" and not any(op.spec or ())):
        return "auto", None, None  # the partitioner decides: the custom_partitioning rule
    if op.how == "explicit-traced":
        return "explicit", op.mesh, op.pspec
    if op.how == "host" or not isinstance(op.mesh, Mesh) or op.mesh.size == 1:
        return "local", None, None
    return "eager", op.mesh, op.pspec


def located(op: Operand) -> tuple[Any, PartitionSpec]:
    """``(mesh, spec)`` of an operand whose split must be known (``spec=`` given on Auto
    axes under ``jit``, where the mesh is the one set by ``jax.set_mesh``).

    Raises:
      ValueError: the split is not known, or a spec was given without any mesh.
    """
    if op.given and op.spec is not None:
        mesh = op.mesh
        if mesh is None:
            mesh = jax.sharding.get_abstract_mesh()
            if mesh is None or mesh.empty:
                raise ValueError(
                    f"{op.where}: spec={op.pspec} was given but {op.name} carries no mesh and "
                    "none is set; call inside `with jax.set_mesh(mesh):`"
                )
        return mesh, to_pspec(op.spec)
    if op.how == "auto-traced" or op.spec is None or op.mesh is None:
        raise ValueError(
            f"{op.where}: the split of {op.name} (shape={op.shape}) is not known here (Auto "
            "mesh axes inside jit, or an unsharded array), and the result's shape depends on "
            "it (each block grows by the halo); pass spec=... naming it"
        )
    return op.mesh, to_pspec(op.spec)
