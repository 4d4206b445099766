"""``comms(f, *args)``: compile a function and report what it communicates."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding

from shardkit._typing import PyTree
from shardkit.inspect._axes import group_axes, pair_axes
from shardkit.inspect._hlo import Instruction, parse_module
from shardkit.inspect._interconnect import Interconnect
from shardkit.inspect._order import unordered_collectives
from shardkit.inspect._presets import interconnect as _interconnect
from shardkit.inspect._program import Found, find_collectives
from shardkit.inspect._report import (
    Collective,
    CommReport,
    MemoryStats,
    UnknownOp,
    UnorderedPair,
)
from shardkit.inspect._traffic import message_bytes, traffic
from shardkit.layout.internal import check_same_devices, find_padding

__all__ = ["comms"]


def _compile(f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> jax.stages.Compiled:
    if isinstance(f, jax.stages.Compiled):
        return f
    if isinstance(f, jax.stages.Lowered):
        return f.compile()
    if not callable(f):
        raise TypeError(
            f"comms: f={f!r} ({type(f).__name__}) must be a function, a jax.stages.Lowered "
            "or a jax.stages.Compiled"
        )
    lower = getattr(f, "lower", None)
    lowered = lower(*args, **kwargs) if callable(lower) else jax.jit(f).lower(*args, **kwargs)
    if not isinstance(lowered, jax.stages.Lowered):
        raise TypeError(f"comms: f.lower(...) gave a {type(lowered).__name__}, not a Lowered")
    return lowered.compile()


def _leaf_mesh(leaf: Any) -> Mesh | None:
    sharding = getattr(leaf, "sharding", leaf)
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, Mesh):
        return sharding.mesh
    return None


def _find_mesh(compiled: jax.stages.Compiled, tree: Any) -> Mesh | None:
    candidates = [*jax.tree.leaves(tree), *jax.tree.leaves(compiled.input_shardings)]
    candidates += jax.tree.leaves(compiled.output_shardings)
    for leaf in candidates:
        mesh = _leaf_mesh(leaf)
        if mesh is not None:
            return mesh
    return None


def _global_bytes(tree: Any) -> int:
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            continue
        # Extended dtypes (PRNG keys) are not NumPy dtypes but carry their itemsize.
        total += math.prod(shape) * dtype.itemsize
    return total


def _memory(compiled: jax.stages.Compiled, ideal: int | None) -> MemoryStats | None:
    try:
        stats = compiled.memory_analysis()
    except Exception:  # some backends do not implement it; memory is then unknown
        return None
    if stats is None:
        return None

    def get(name: str) -> int:
        return int(getattr(stats, name, 0) or 0)

    peak = getattr(stats, "peak_memory_in_bytes", None)
    return MemoryStats(
        argument_bytes=get("argument_size_in_bytes"),
        output_bytes=get("output_size_in_bytes"),
        temp_bytes=get("temp_size_in_bytes"),
        alias_bytes=get("alias_size_in_bytes"),
        generated_code_bytes=get("generated_code_size_in_bytes"),
        reported_peak_bytes=int(peak) if peak else None,
        ideal_bytes=ideal,
    )


def _flops(compiled: jax.stages.Compiled) -> float | None:
    try:
        cost = compiled.cost_analysis()
    except Exception:  # as for memory: a backend may not implement it
        return None
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    if not isinstance(cost, dict):
        return None
    # XLA omits the key for programs without arithmetic.
    return float(max(cost.get("flops", 0.0), 0.0))


def _collective(
    found: Found, mesh: Mesh | None, num_devices: int, link: Interconnect
) -> Collective:
    operand_bytes = sum(a.nbytes for a in found.operands)
    result_bytes = sum(a.nbytes for a in found.results)
    groups = tuple(tuple(g) for g in found.groups or ())
    pairs = tuple(found.pairs or ())
    if found.kind == "collective-permute":
        group_size = len({d for p in pairs for d in p})
    else:
        group_size = max((len(g) for g in groups), default=1)
    sent, received = traffic(found.kind, group_size, operand_bytes, result_bytes, pairs)
    axes: tuple[str, ...] | None = None
    exact = True
    if mesh is not None and mesh.size == num_devices:
        names, sizes = tuple(map(str, mesh.axis_names)), tuple(mesh.devices.shape)
        if found.kind == "collective-permute":
            axes = pair_axes(pairs, names, sizes)
        else:
            axes, exact = group_axes(groups, names, sizes)
    dtypes = sorted({a.dtype for a in (*found.operands, *found.results)})
    n = message_bytes(found.kind, operand_bytes, result_bytes)
    moves = sent > 0 or received > 0
    return Collective(
        kind=found.kind,
        dtype=",".join(dtypes),
        operand_shapes=tuple(a.dims for a in found.operands),
        result_shapes=tuple(a.dims for a in found.results),
        group_size=group_size,
        groups=groups,
        pairs=pairs,
        axes=axes,
        axes_exact=exact,
        sent_bytes=sent,
        received_bytes=received,
        count=found.count,
        unbounded=found.unbounded,
        is_async=found.is_async,
        name=found.instr.name,
        time_s=link.time(found.kind, group_size, n, leading=_leading(found)) if moves else 0.0,
    )


def _leading(found: Found) -> bool:
    """Whether an all-gather or reduce-scatter works along its operand's leading dimension.

    HLO writes the dimension as ``dimensions={d}``; any other collective counts as
    leading (the cost model tells the two apart only for these two kinds).
    """
    dims = found.instr.attrs.get("dimensions", "{0}").strip("{} ")
    return dims in ("", "0")


def report_from_text(
    text: str,
    *,
    name: str = "hlo",
    mesh: Mesh | None = None,
    interconnect: str | Interconnect | None = None,
    memory: MemoryStats | None = None,
    flops: float | None = None,
) -> CommReport:
    """A :class:`CommReport` for HLO text alone (e.g. saved from a GPU or TPU run).

    Example:
      >>> text = jax.jit(lambda a: a + 1).lower(np.ones(4)).compile().as_text()
      >>> report_from_text(text).count()
      0
    """
    link = _interconnect(interconnect)
    module = parse_module(text)
    num_devices = module.num_partitions * module.num_replicas
    found, unrecognized = find_collectives(module)
    return CommReport(
        name=name,
        mesh_axes=None if mesh is None else tuple((str(n), int(s)) for n, s in mesh.shape.items()),
        num_devices=num_devices,
        collectives=tuple(_collective(f, mesh, num_devices, link) for f in found),
        unknown=tuple(UnknownOp(u.opcode, u.computation, u.text, u.reason) for u in unrecognized),
        memory=memory,
        flops=flops,
        interconnect=link,
        padding=find_padding(text),
        unordered=tuple(
            UnorderedPair(x.computation, _describe(x), _describe(y))
            for x, y in unordered_collectives(module)
        ),
    )


def _describe(instr: Instruction) -> str:
    """``all-reduce psum.7 (jit(f)/shard_map/psum)``: opcode, name and JAX's op name."""
    op_name = re.search(r'op_name="([^"]*)"', instr.attrs.get("metadata", ""))
    where = f" ({op_name.group(1)})" if op_name else ""
    return f"{instr.opcode} {instr.name}{where}"


def comms(
    f: Callable[..., PyTree] | jax.stages.Compiled | jax.stages.Lowered,
    /,
    *args: PyTree,
    interconnect: str | Interconnect | None = None,
    peak_flops: float | None = None,
    mesh: Mesh | None = None,
    **kwargs: PyTree,
) -> CommReport:
    """Compile ``f`` for ``args`` and report every collective it runs, its memory and time.

    ``f`` is lowered with ``jax.jit(f).lower(*args, **kwargs).compile()`` (a jitted
    function's own ``lower`` is used; a ``Lowered`` is compiled; a ``Compiled`` is
    read as is). Arguments may be arrays or ``jax.ShapeDtypeStruct`` with a sharding,
    so nothing needs allocating. Device groups are named by the axes of the mesh the
    arguments live on (or ``mesh``). Compiling costs what ``jax.jit`` costs; nothing
    runs on the devices.

    Args:
      f: the function, or a ``jax.stages.Lowered`` / ``jax.stages.Compiled``.
      *args: positional arguments to lower ``f`` with.
      interconnect: a preset name (see ``INTERCONNECTS``), an ``Interconnect``, or None
        for the calibrated preset of these devices if saved, else ``shared-memory``.
      peak_flops: overrides the interconnect's per-device peak for compute time.
      mesh: the mesh to name device groups by, when the arguments carry none.
      **kwargs: keyword arguments to lower ``f`` with.

    Returns:
      A :class:`CommReport`.

    Raises:
      TypeError: ``f`` is not callable, ``Lowered`` or ``Compiled``.
      ValueError: an unknown interconnect name; arguments on different devices.

    Example:
      >>> m = shardkit.mesh("8", "x", axis_types="auto")
      >>> x = shardkit.shard(np.ones((16, 4), np.float32), mesh=m, spec="x,None")
      >>> report = comms(lambda a: a.sum(axis=0), x)
      >>> [(c.kind, c.axes, c.sent_bytes) for c in report.collectives]
      [('all-reduce', ('x',), 28)]
      >>> report.assert_none("all-gather")
    """
    link = _interconnect(interconnect)
    if peak_flops is not None:
        link = dataclasses.replace(link, peak_flops=peak_flops)
    check_same_devices("comms", {**{f"args[{i}]": a for i, a in enumerate(args)}, **kwargs})
    compiled = _compile(f, args, kwargs)
    if mesh is None:
        mesh = _find_mesh(compiled, (args, kwargs))
    text = compiled.as_text()
    if text is None:
        raise ValueError("comms: the compiled program has no HLO text to inspect")
    num_devices = parse_module(text).num_partitions
    ideal = _global_bytes((args, kwargs)) or _global_bytes(compiled.in_avals)
    name = getattr(f, "__name__", None) or type(f).__name__
    return report_from_text(
        text,
        name=name,
        mesh=mesh,
        interconnect=link,
        memory=_memory(compiled, -(-ideal // max(num_devices, 1)) if ideal else None),
        flops=_flops(compiled),
    )
