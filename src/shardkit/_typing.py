"""Type names the public signatures share, so that each says what it accepts.

``ArrayLike`` and ``DTypeLike`` are JAX's own (``jax.typing``). Two aliases of
``Any`` carry their reason here, once:

- ``PyTree``: JAX has no type for "any pytree of arrays" (``jax.typing`` offers
  none), and a model, an optimizer state or a tree of specs may be any registered node.
- ``JSONObject``: a JSON object (a bench record, a results file, a comms report's
  dict, checkpoint metadata) whose values' types differ by key, as ``json.load``'s do.

The guard test on the public API (tests/test_api.py) counts the bare ``Any`` left in
exported signatures. ``AnyMesh`` (a concrete or an abstract mesh) is defined here too,
once for every package.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from jax.sharding import AbstractMesh, Mesh
from jax.typing import ArrayLike, DTypeLike

__all__ = ["AnyMesh", "ArrayLike", "DTypeLike", "JSONObject", "PyTree"]

AnyMesh: TypeAlias = Mesh | AbstractMesh
"""A concrete device mesh, or the abstract one ``jax.jit`` traces with."""

PyTree: TypeAlias = Any
JSONObject: TypeAlias = dict[str, Any]
