"""Argument checks at the public boundary, shared by every package.

Each check names the function and the argument, echoes what it got as
``name=value``, says what it needs and how to fix it, so that a mistake never
surfaces as a message from inside JAX. NumPy integers and 0-d integer arrays are
accepted wherever Python ints are (``operator.index``), as NumPy itself does.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping
from typing import Any

import jax
import jax.core as jax_core
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, Sharding

from shardkit.layout._errors import mesh_summary

__all__ = [
    "as_count",
    "as_real",
    "check_key",
    "check_mesh_arg",
    "check_same_devices",
    "is_int",
]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python, NumPy or 0-d integer array), not a bool."""
    if isinstance(value, bool | np.bool_):
        return False
    if isinstance(value, numbers.Integral):
        return True
    if isinstance(value, np.ndarray | jax.Array) and not isinstance(value, jax_core.Tracer):
        return value.ndim == 0 and isinstance(value.dtype, np.dtype) and value.dtype.kind in "iu"
    return False


def as_count(where: str, name: str, value: Any, /, *, minimum: int = 0, fix: str = "") -> int:
    """``value`` as a Python int of at least ``minimum``; TypeError/ValueError otherwise.

    Example:
      >>> as_count("cg", "maxiter", np.int64(5), minimum=1)
      5
    """
    hint = f"; {fix}" if fix else ""
    if not is_int(value):
        raise TypeError(
            f"{where}: {name}={_short(value)} ({type(value).__name__}) must be an integer "
            f"of at least {minimum}{hint}"
        )
    n = operator.index(value)
    if n < minimum:
        raise ValueError(f"{where}: {name}={n} must be at least {minimum}{hint}")
    return n


def as_real(where: str, name: str, value: Any, /, *, minimum: float = 0.0, fix: str = "") -> float:
    """``value`` as a finite Python float of at least ``minimum`` (a tracer passes as is).

    Example:
      >>> as_real("cg", "tol", np.float32(0.5))
      0.5
    """
    hint = f"; {fix}" if fix else ""
    if isinstance(value, jax_core.Tracer):
        return value  # type: ignore[return-value]  # traced under jit: checked by nobody
    if isinstance(value, jax.Array):
        value = np.asarray(value)
    if isinstance(value, np.ndarray) and value.dtype.kind not in "iuf":
        raise TypeError(f"{where}: {name} must be a real number, got an array of {value.dtype}")
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real | np.ndarray):
        raise TypeError(
            f"{where}: {name}={_short(value)} ({type(value).__name__}) must be a real number{hint}"
        )
    if isinstance(value, np.ndarray) and value.ndim != 0:
        raise TypeError(f"{where}: {name} must be a scalar, got an array of shape {value.shape}")
    x = float(value)
    if not math.isfinite(x) or x < minimum:
        raise ValueError(f"{where}: {name}={x!r} must be a finite number >= {minimum:g}{hint}")
    return x


def check_key(where: str, name: str, key: Any, /) -> jax.Array:
    """A PRNG key: ``jax.random.key(seed)`` or a legacy ``jax.random.PRNGKey(seed)``.

    Raises:
      TypeError: anything else (an int seed, a float array...), naming the fix.
    """
    fix = f"pass {name}=jax.random.key(seed), e.g. jax.random.key(0)"
    if is_int(key):
        raise TypeError(f"{where}: {name}={_short(key)} is an integer seed, not a PRNG key; {fix}")
    if isinstance(key, jax.Array | np.ndarray):
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            if key.shape != ():
                raise ValueError(
                    f"{where}: {name} is an array of {key.shape} keys; pass one key "
                    f"({name}=keys[0]) or {fix.removeprefix('pass ')}"
                )
            return key  # type: ignore[return-value]
        if key.dtype == np.uint32 and key.shape == (2,):
            return key  # type: ignore[return-value]  # jax.random.PRNGKey(seed)
    raise TypeError(
        f"{where}: {name}={_short(key)} ({type(key).__name__}) is not a PRNG key; {fix}"
    )


def check_mesh_arg(where: str, mesh: Any, /, *, name: str = "mesh") -> Mesh:
    """``mesh`` is a ``jax.sharding.Mesh``; a TypeError naming the fix otherwise.

    Example:
      >>> check_mesh_arg("plan", "2x4")
      Traceback (most recent call last):
      ...
      TypeError: plan: mesh='2x4' (str) must be a jax.sharding.Mesh; build one with shardkit.mesh('2x4')
    """
    if isinstance(mesh, Mesh):
        return mesh
    example = mesh if isinstance(mesh, str) and mesh.strip() else "2x4"
    raise TypeError(
        f"{where}: {name}={_short(mesh)} ({type(mesh).__name__}) must be a "
        f"jax.sharding.Mesh; build one with shardkit.mesh({example!r})"
    )


def _devices_of(value: Any) -> tuple[frozenset[int], Any] | None:
    """The device ids a committed concrete array lives on, and its sharding."""
    if not isinstance(value, jax.Array) or isinstance(value, jax_core.Tracer):
        return None
    if not getattr(value, "committed", True):
        return None  # uncommitted arrays follow the others (jit moves them)
    sharding = value.sharding
    return frozenset(d.id for d in sharding.device_set), sharding


def _where(ids: frozenset[int], place: Any) -> str:
    """``mesh(x=4) on devices [0, 1, 2, 3]`` (built only for a message)."""
    mesh = place.mesh if isinstance(place, NamedSharding) else place
    on = f"devices {sorted(ids)}"
    return f"{mesh_summary(mesh)} on {on}" if isinstance(mesh, Mesh) else on


def check_same_devices(
    where: str,
    operands: Mapping[str, Any],
    /,
    *,
    mesh: Mesh | AbstractMesh | Sharding | None = None,
    fix: str | None = None,
) -> None:
    """Every committed operand lives on the same devices (those of ``mesh`` when given).

    ``mesh`` may also be a ``Sharding`` (a single-device target, say); an
    ``AbstractMesh`` has no devices and is not compared. Operands are
    pytrees; every array leaf is checked. Over the same devices, operands on
    different meshes are refused only when a mesh has Explicit axes (their type
    carries the mesh); on Auto axes the partitioner reconciles them.

    A ``jax.Array`` counts when it is committed (placed with ``shard``/``device_put``
    or computed from placed arrays); host data and tracers are not checked, since
    ``jit`` places the former and the latter have no devices yet.

    Raises:
      ValueError: naming each operand, its mesh and devices, and the fix.

    Example:
      >>> from shardkit.layout import mesh, shard
      >>> a = shard(np.ones(8), mesh=mesh("4", "x", devices=[0, 1, 2, 3]), spec="x")
      >>> b = shard(np.ones(8), mesh=mesh("4", "x", devices=[4, 5, 6, 7]), spec="x")
      >>> check_same_devices("f", {"a": a, "b": b})
      Traceback (most recent call last):
      ...
      ValueError: f: the operands live on different devices: ...
    """
    found: list[tuple[str, frozenset[int], Any]] = []
    if isinstance(mesh, Mesh):
        found.append(("mesh", frozenset(d.id for d in mesh.devices.flat), mesh))
    elif isinstance(mesh, Sharding):
        found.append(("the target", frozenset(d.id for d in mesh.device_set), mesh))
    for name, value in operands.items():
        for leaf in jax.tree.leaves(value):
            got = _devices_of(leaf)
            if got is not None:
                found.append((name, *got))
    if len({ids for _, ids, _ in found}) <= 1:
        _check_explicit_meshes(where, found, fix)
        return
    lines = "; ".join(f"{name} is on {_where(ids, place)}" for name, ids, place in found)
    target = "the mesh" if mesh is not None else f"{found[0][0]}'s mesh"
    remedy = fix or (
        f"Put every operand on {target} first, e.g. shardkit.shard(x, mesh=mesh, spec=spec) or "
        "jax.device_put(x, NamedSharding(mesh, spec))"
    )
    raise ValueError(f"{where}: the operands live on different devices: {lines}. {remedy}")


def _check_explicit_meshes(
    where: str, found: list[tuple[str, frozenset[int], Any]], fix: str | None
) -> None:
    """Operands on Explicit axes carry their mesh in their type: it must be one mesh."""
    meshes = [(name, place.mesh) for name, _, place in found if isinstance(place, NamedSharding)]
    kinds = {(m.shape_tuple, m.axis_types) for _, m in meshes}
    explicit = any(t == AxisType.Explicit for _, m in meshes for t in m.axis_types)
    if len(kinds) <= 1 or not explicit:
        return  # on Auto axes the partitioner reconciles meshes over the same devices
    lines = "; ".join(f"{name} is on {mesh_summary(m)}" for name, m in meshes)
    remedy = fix or (
        "Put every operand on one mesh first, e.g. shardkit.shard(x, mesh=mesh, spec=spec) or "
        "jax.device_put(x, NamedSharding(mesh, spec))"
    )
    raise ValueError(
        f"{where}: the operands are on different meshes over the same devices: {lines}. "
        f"Arrays on Explicit axes carry their mesh in their type, so all must share one. "
        f"{remedy}"
    )
