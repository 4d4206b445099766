"""The one mesh helper the tests share.

``make_mesh("2x4")`` is shardkit's mesh over the 8 simulated devices with the tests'
usual names: ``x`` for a 1-D mesh, ``x,y`` for a 2-D one (``x,y,z...`` beyond);
``names=`` overrides them, either as a string or, for tests that take meshes of several
ranks (the training tests' ``x`` and ``data,model``), as a string per rank.
``devices=`` picks the devices (ids or ``jax.Device`` objects), as ``shardkit.mesh``
takes them. It skips the test where fewer devices than the mesh needs exist, so a test
module can run on a machine set up with fewer simulated devices.

Tests build their meshes here only (``tests/test_boundaries.py`` checks it); the
tests of mesh construction itself are the exceptions listed there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, overload

import jax
import pytest

import shardkit

__all__ = ["default_names", "make_mesh"]


def default_names(shape: str) -> str:
    """``x`` for a 1-D shape such as ``"8"``, ``x,y`` for ``"2x4"``, ``x,y,z`` for 3-D."""
    return ",".join("xyzw"[: len(shape.split("x"))])


@overload
def make_mesh(
    shape: str,
    axis_types: str | Sequence[str] = ...,
    names: str | Mapping[int, str] | None = ...,
    *,
    devices: Sequence[Any] | None = ...,
) -> jax.sharding.Mesh: ...


@overload
def make_mesh(
    shape: None,
    axis_types: str | Sequence[str] = ...,
    names: str | Mapping[int, str] | None = ...,
    *,
    devices: Sequence[Any] | None = ...,
) -> None: ...


def make_mesh(
    shape: str | None,
    axis_types: str | Sequence[str] = "explicit",
    names: str | Mapping[int, str] | None = None,
    *,
    devices: Sequence[Any] | None = None,
) -> jax.sharding.Mesh | None:
    """shardkit's mesh of ``shape`` (``"8"``, ``"2x4"``...), named by ``default_names``.

    ``names`` is a comma-separated string, or a mapping from the mesh's rank to one.
    ``shape=None`` gives ``None``: no mesh, one device (the training tests' ``single``).
    """
    if shape is None:
        return None
    dims = [int(d) for d in shape.split("x")]
    need = math.prod(dims) if devices is None else len(devices)
    if len(jax.devices()) < need:
        pytest.skip(f"needs {need} devices, has {len(jax.devices())}")
    if isinstance(names, Mapping):
        names = names[len(dims)]
    return shardkit.mesh(
        shape,
        names or default_names(shape),
        axis_types=axis_types,  # type: ignore[arg-type]
        devices=devices,
    )
