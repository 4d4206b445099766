"""The one mesh helper the tests share.

``make_mesh("2x4")`` is shardkit's mesh over the 8 simulated devices with the tests'
usual names: ``x`` for a 1-D mesh and ``x,y`` for a 2-D one (``names=`` overrides
them). It skips the test where fewer devices than the mesh needs exist, so a test
module can run on a machine set up with fewer simulated devices.
"""

from __future__ import annotations

import math

import jax
import pytest

import shardkit

__all__ = ["default_names", "make_mesh"]


def default_names(shape: str) -> str:
    """``x`` for a 1-D shape such as ``"8"``, ``x,y`` for ``"2x4"``."""
    return "x" if "x" not in shape else "x,y"


def make_mesh(
    shape: str, axis_types: str = "explicit", names: str | None = None
) -> jax.sharding.Mesh:
    """shardkit's mesh of ``shape`` (``"8"``, ``"2x4"``...), named by ``default_names``."""
    need = math.prod(int(d) for d in shape.split("x"))
    if len(jax.devices()) < need:
        pytest.skip(f"needs {need} devices, has {len(jax.devices())}")
    return shardkit.mesh(shape, names or default_names(shape), axis_types=axis_types)  # type: ignore[arg-type]
