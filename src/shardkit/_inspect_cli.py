"""Seed programs to inspect by name, and the function behind ``shardkit inspect``.

Command-line support for :mod:`shardkit.cli` (private; it uses ``shardkit.inspect``
through its export list).

``EXAMPLES`` holds the programs the seeds ask about, each with the collectives it is
known to produce: a sharded ``jnp.fft.fftn`` and ``jnp.linalg.solve`` all-gather, a
row-by-column matmul communicates nothing, and a data-parallel MLP step all-reduces
its gradients. Arguments are ``jax.ShapeDtypeStruct`` objects with a sharding, so
inspecting allocates nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from shardkit.inspect import CommReport, Interconnect, comms
from shardkit.layout import mesh as make_mesh
from shardkit.layout import sharding
from shardkit.layout.internal import AxisTypeLike, check_placement

__all__ = ["EXAMPLES", "Example", "example", "inspect_target", "parse_arg"]

_ARG = re.compile(r"\s*([A-Za-z][A-Za-z0-9_]*)\[([\d,\s]*)\]\s*(?:@(.*))?\s*\Z")
_SHORT_DTYPES = {
    "pred": "bool", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "c64": "complex64", "c128": "complex128",
}  # fmt: skip


def parse_arg(text: str, mesh: Mesh, /) -> jax.ShapeDtypeStruct:
    """``"float32[1024,1024]@x,y"`` -> a sharded ``ShapeDtypeStruct`` on ``mesh``.

    The part after ``@`` is a spec as :func:`shardkit.spec` reads it; without it the
    argument is replicated. HLO short names (``f32``, ``bf16``, ``c64``) work too.

    Raises:
      ValueError: the text is not ``dtype[dims]@spec``, the dtype is unknown, or the
        spec does not fit the mesh or the shape (shardkit's divisibility message).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> s = parse_arg("f32[16,8]@x,y", m)
      >>> s.shape, s.dtype.name, tuple(s.sharding.spec)
      ((16, 8), 'float32', ('x', 'y'))
    """
    m = _ARG.fullmatch(text)
    if m is None:
        raise ValueError(
            f"inspect: --arg {text!r} is not an argument spec; write dtype[dims]@spec, "
            "e.g. 'float32[1024,1024]@x,y', 'f32[8]' (replicated) or 'int32[]'"
        )
    name = _SHORT_DTYPES.get(m.group(1), m.group(1))
    try:
        dtype = jnp.dtype(name)
    except TypeError:
        raise ValueError(
            f"inspect: --arg {text!r}: dtype={m.group(1)!r} is not a NumPy/JAX dtype name "
            "(e.g. float32, bfloat16, int32, complex64, or f32, bf16)"
        ) from None
    dims = tuple(int(d) for d in m.group(2).split(",") if d.strip())
    try:
        target = sharding(mesh, m.group(3) or None)
    except ValueError as e:
        raise ValueError(f"inspect: --arg {text!r}: {e}") from None
    check_placement(f"inspect --arg {text!r}", dims, target.spec, mesh)
    return jax.ShapeDtypeStruct(dims, dtype, sharding=target)


@contextlib.contextmanager
def _cwd_importable() -> Iterator[None]:
    """Put the current directory first on ``sys.path`` while importing, as ``python -m``."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)


def _import(target: str, module_name: str) -> Any:
    try:
        with _cwd_importable():
            return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not (module_name + ".").startswith(e.name + "."):
            raise  # the user's module itself imports something missing
        raise ValueError(
            f"inspect: target={target!r}: no module named {e.name!r} in the current "
            f"directory ({os.getcwd()}) or on sys.path; run from the folder that holds "
            f"it, give its file ('path/to/{module_name.split('.')[-1]}.py:FUNC'), or "
            "install its package"
        ) from None


def _load(target: str) -> Callable[..., Any]:
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"inspect: target={target!r} must be MODULE:FUNC, e.g. 'mypkg.model:step' "
            "or 'path/to/file.py:step'"
        )
    if module_name.endswith(".py"):
        path = Path(module_name)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None or not path.exists():
            raise ValueError(f"inspect: target={target!r}: no Python file at {str(path)!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(path.stem, module)
        spec.loader.exec_module(module)
    else:
        module = _import(target, module_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(n for n in dir(obj) if not n.startswith("_"))
            listed = ", ".join(found[:12]) + (", ..." if len(found) > 12 else "")
            raise ValueError(
                f"inspect: target={target!r}: {module_name} has no {attr!r}; "
                f"it has: {listed or 'no public names'}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"inspect: target={target!r} names a {type(obj).__name__}, not a function")
    return obj


def inspect_target(
    target: str,
    /,
    *,
    mesh: str = "8",
    names: str | None = None,
    args: Sequence[str] = (),
    interconnect: str | Interconnect | None = None,
    axis_types: AxisTypeLike = "auto",
) -> CommReport:
    """Report a function in the user's code, as ``shardkit inspect MODULE:FUNC`` does.

    The current directory is importable, as under ``python -m``, so ``mymod:f``
    finds ``./mymod.py``.

    Args:
      target: ``module.path:func`` or ``file.py:func`` (dotted attributes allowed).
      mesh: mesh shape, e.g. ``"2x4"``.
      names: mesh axis names, e.g. ``"x,y"``; default ``x``, ``y``, ``z``, ``w``.
      args: one spec per positional argument, e.g. ``"float32[1024,1024]@x,y"``.
      interconnect: a preset name, an ``Interconnect``, or None (the calibrated preset
        of these devices if saved, else ``shared-memory``).
      axis_types: the mesh's axis types; Auto lets XLA choose intermediate layouts.

    Returns:
      The :class:`CommReport`.

    Raises:
      ValueError: a malformed target, mesh or argument spec, a module that cannot be
        found, or an argument the mesh does not divide.

    Example:
      >>> r = inspect_target("jax.numpy:matmul", mesh="2x4",
      ...                    args=["f32[64,32]@x,None", "f32[32,64]@None,y"])
      >>> r.count()
      0
    """
    fn = _load(target)
    m = make_mesh(mesh, names, axis_types=axis_types)
    structs = [parse_arg(a, m) for a in args]
    return comms(fn, *structs, interconnect=interconnect)


# ---- seed programs -----------------------------------------------------------------


def _mlp_step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
    """One SGD step of a two-layer MLP on a batch; gradients are batch means."""

    def loss(p: dict[str, jax.Array]) -> jax.Array:
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)


@dataclass(frozen=True)
class Example:
    """A seed program: what it is, how to build it, and the collectives it produces.

    Attributes:
      name: key in ``EXAMPLES``.
      description: one line.
      mesh: mesh shape and axis names, e.g. ``("2x4", "x,y")``.
      build: mesh -> ``(function, args)`` with ``ShapeDtypeStruct`` arguments.
      expected: the only kinds of collective the program contains.
      axis_types: the mesh's default axis types (``jnp.linalg.solve`` refuses sharded
        input on an Explicit mesh, so that seed runs on an Auto one).
    """

    name: str
    description: str
    mesh: tuple[str, str]
    build: Callable[[Mesh], tuple[Callable[..., Any], tuple[Any, ...]]]
    expected: frozenset[str]
    axis_types: AxisTypeLike = "explicit"


def _sds(shape: tuple[int, ...], dtype: Any, m: Mesh, spec: str) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=sharding(m, spec))


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example(
            "fft",
            "jnp.fft.fftn of a complex64[64,64,64] array split over x,y all-gathers it",
            ("2x4", "x,y"),
            lambda m: (jnp.fft.fftn, (_sds((64, 64, 64), "complex64", m, "x,y"),)),
            frozenset({"all-gather"}),
        ),
        Example(
            "solve",
            "jnp.linalg.solve of a float32[256,256] matrix split over x,y all-gathers it",
            ("2x4", "x,y"),
            lambda m: (
                jnp.linalg.solve,
                (_sds((256, 256), "float32", m, "x,y"), _sds((256,), "float32", m, "x")),
            ),
            frozenset({"all-gather", "all-reduce"}),
            "auto",
        ),
        Example(
            "matmul",
            "rows over x times columns over y: every block is local, nothing moves",
            ("2x4", "x,y"),
            lambda m: (
                jnp.matmul,
                (
                    _sds((1024, 512), "float32", m, "x,None"),
                    _sds((512, 1024), "float32", m, "None,y"),
                ),
            ),
            frozenset(),
        ),
        Example(
            "mlp",
            "data-parallel MLP step: batch split over 8 devices, gradients all-reduced",
            ("8", "data"),
            lambda m: (
                _mlp_step,
                (
                    {
                        "w1": _sds((64, 256), "float32", m, ""),
                        "b1": _sds((256,), "float32", m, ""),
                        "w2": _sds((256, 16), "float32", m, ""),
                        "b2": _sds((16,), "float32", m, ""),
                    },
                    _sds((512, 64), "float32", m, "data,None"),
                    _sds((512, 16), "float32", m, "data,None"),
                ),
            ),
            frozenset({"all-reduce"}),
        ),
    )
}
"""The seed programs by name (``shardkit inspect --example NAME``)."""


def example(
    name: str,
    /,
    *,
    interconnect: str | Interconnect | None = None,
    axis_types: AxisTypeLike | None = None,
) -> CommReport:
    """Compile the seed program ``name`` and report its communication.

    Args:
      name: a key of ``EXAMPLES``: ``fft``, ``solve``, ``matmul`` or ``mlp``.
      interconnect: a preset name, an ``Interconnect``, or None (the calibrated preset
        of these devices if saved, else ``shared-memory``).
      axis_types: the mesh's axis types; default the example's own.

    Returns:
      The :class:`CommReport`.

    Raises:
      ValueError: an unknown name (the message lists them).

    Example:
      >>> example("matmul").count()
      0
    """
    if name not in EXAMPLES:
        raise ValueError(
            f"inspect: --example {name!r} is not a seed program; legal values are {sorted(EXAMPLES)}"
        )
    ex = EXAMPLES[name]
    m = make_mesh(ex.mesh[0], ex.mesh[1], axis_types=axis_types or ex.axis_types)
    fn, args = ex.build(m)
    return comms(fn, *args, interconnect=interconnect)
