"""Type names the public signatures share, so that each says what it accepts.

``ArrayLike`` and ``DTypeLike`` are JAX's own (``jax.typing``). ``PyTree`` is an
alias of ``Any`` with a reason: JAX has no type for "any pytree of arrays" (its
documentation says so, and ``jax.typing`` offers none), and a model, an optimizer
state or a tree of specs may be any registered node. The guard test on the public API
(tests/test_api.py) counts the bare ``Any`` left in exported signatures.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from jax.typing import ArrayLike, DTypeLike

__all__ = ["ArrayLike", "DTypeLike", "PyTree"]

PyTree: TypeAlias = Any
