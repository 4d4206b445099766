"""Type aliases that several packages spell in their signatures, each defined here once."""

from __future__ import annotations

from typing import TypeAlias

from jax.sharding import AbstractMesh, Mesh

__all__ = ["AnyMesh"]

AnyMesh: TypeAlias = Mesh | AbstractMesh
"""A concrete device mesh, or the abstract one ``jax.jit`` traces with."""
