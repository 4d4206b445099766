"""Find every collective in a parsed HLO module, with how often it runs.

The walk starts at the entry computation and follows every called computation
(``calls=``, ``to_apply=``, ``body=``, ``condition=``, branches). A collective inside a
``while`` body counts once per iteration: the trip count comes from XLA's
``known_trip_count`` annotation, else from the loop condition (``i < N`` with a known
start and step), else the collective is flagged as unbounded. Collectives in the
branches of a ``conditional`` are all counted, an upper bound. Collective-looking
instructions this reader does not understand are returned as unrecognized.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardkit.inspect._hlo import (
    ArrayShape,
    Computation,
    HloSyntaxError,
    Instruction,
    Module,
    flatten,
    parse_groups,
    parse_pairs,
    scalar_constant,
)

KINDS = (
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
)
_ASYNC_SKIP = (
    *tuple(f"{k}-{s}" for k in KINDS for s in ("done", "update")),
    "async-update",
    "async-done",
)
# Opcodes and custom-call targets that move data between devices but that this
# reader does not model; seen, they are reported rather than skipped.
_SUSPECT = re.compile(r"all-|collective|reduce-scatter|send|recv|ragged|broadcast-start", re.I)
_SUSPECT_TARGET = re.compile(
    r"all.?reduce|all.?gather|all.?to.?all|nccl|mpi|collective|permute", re.I
)


@dataclass(frozen=True)
class Found:
    """One collective instruction and how many times it runs per call."""

    kind: str
    instr: Instruction
    operands: tuple[ArrayShape, ...]
    results: tuple[ArrayShape, ...]
    groups: list[list[int]] | None
    pairs: list[tuple[int, int]] | None
    count: int
    unbounded: bool
    is_async: bool


@dataclass(frozen=True)
class Unrecognized:
    """An instruction that looks like communication but could not be read."""

    opcode: str
    computation: str
    text: str
    reason: str


def find_collectives(module: Module) -> tuple[list[Found], list[Unrecognized]]:
    """All collectives reachable from the entry computation, and what could not be read."""
    found: list[Found] = []
    unknown: list[Unrecognized] = []
    for line, reason in module.unparsed:
        op = re.search(r"=\s*\S+\s+([a-z][\w\-]*)\(", line)
        unknown.append(
            Unrecognized(op.group(1) if op else "?", "?", line[:300], f"unreadable line: {reason}")
        )
    if module.entry is None:
        unknown.append(Unrecognized("?", "?", module.name, "the module has no ENTRY computation"))
        return found, unknown
    _visit(module, module.computations[module.entry], 1, False, False, found, unknown)
    return found, unknown


def _visit(
    module: Module,
    comp: Computation,
    count: int,
    unbounded: bool,
    in_async: bool,
    found: list[Found],
    unknown: list[Unrecognized],
) -> None:
    num_devices = module.num_partitions * module.num_replicas
    for instr in comp.instructions:
        op = instr.opcode
        kind = op.removesuffix("-start")
        if kind in KINDS:
            try:
                found.append(
                    _collective(comp, instr, kind, num_devices, count, unbounded, in_async)
                )
            except HloSyntaxError as e:
                unknown.append(Unrecognized(op, comp.name, instr.line[:300], str(e)))
        elif op in _ASYNC_SKIP:
            pass
        elif _SUSPECT.search(op) or (
            op == "custom-call"
            and _SUSPECT_TARGET.search(instr.attrs.get("custom_call_target", ""))
        ):
            unknown.append(
                Unrecognized(op, comp.name, instr.line[:300], f"unmodelled communication op {op}")
            )
        if op == "async-start" and "calls" not in instr.attrs:
            unknown.append(
                Unrecognized(op, comp.name, instr.line[:300], "async-start without calls=")
            )
        for key, callee in module.called(instr):
            sub_count, sub_unbounded = count, unbounded
            if op == "while":
                trips = trip_count(module, comp, instr)
                if trips is None:
                    sub_unbounded = True
                else:
                    sub_count = count * (trips + (key == "condition"))
            sub_async = in_async or op == "async-start" or op.endswith("-start")
            callee_comp = module.computations[callee]
            _visit(module, callee_comp, sub_count, sub_unbounded, sub_async, found, unknown)


def _collective(
    comp: Computation,
    instr: Instruction,
    kind: str,
    num_devices: int,
    count: int,
    unbounded: bool,
    in_async: bool,
) -> Found:
    operands = tuple(
        a
        for name in instr.operands
        if name in comp.by_name
        for a in flatten(comp.by_name[name].shape)
    )
    started = instr.opcode.endswith("-start")
    results = flatten(instr.shape) if not started else _async_result(comp, instr, kind)
    groups = pairs = None
    if kind == "collective-permute":
        pairs = parse_pairs(instr.attrs.get("source_target_pairs", "{}"))
    else:
        groups = parse_groups(instr.attrs.get("replica_groups", "{}"), num_devices)
    return Found(
        kind=kind,
        instr=instr,
        operands=operands,
        results=results,
        groups=groups,
        pairs=pairs,
        count=count,
        unbounded=unbounded,
        is_async=in_async or started,
    )


def _async_result(comp: Computation, start: Instruction, kind: str) -> tuple[ArrayShape, ...]:
    """The result of a ``<kind>-start``: the shape of its ``-done``, else from its tuple."""
    for other in comp.instructions:
        if other.opcode == f"{kind}-done" and other.operands[:1] == [start.name]:
            return flatten(other.shape)
    shape = start.shape
    if isinstance(shape, tuple) and len(shape) >= 2 and kind != "all-reduce":
        return flatten(shape[1])
    return flatten(shape)


# ---- loop trip counts ------------------------------------------------------------

_Expr = tuple  # ("const", v) | ("gte", k) | ("inc", k, step)


def _backend(instr: Instruction, key: str) -> dict[str, int] | None:
    cfg = instr.attrs.get("backend_config", "")
    m = re.search(rf'"{key}"\s*:\s*\{{([^}}]*)\}}', cfg)
    if m is None:
        return None
    return {k: int(v) for k, v in re.findall(r'"(\w+)"\s*:\s*"?(-?\d+)"?', m.group(1))}


def _expr(
    module: Module, comp: Computation, name: str, env: list[_Expr | None] | None
) -> _Expr | None:
    instr = comp.by_name.get(name)
    if instr is None:
        return None
    op = instr.opcode
    if op == "constant":
        value = scalar_constant(instr)
        return None if value is None else ("const", value)
    if op in ("copy", "bitcast", "convert", "reshape") and instr.operands:
        return _expr(module, comp, instr.operands[0], env)
    if op == "parameter":
        index = int(instr.operand_text or 0)
        return env[index] if env is not None and index < len(env) else None
    if op == "get-tuple-element":
        inner = comp.by_name.get(instr.operands[0])
        if inner is not None and inner.opcode == "parameter" and env is None:
            return ("gte", int(instr.attrs.get("index", "-1")))
        return None
    if op == "fusion":
        callee = module.computations.get(instr.attrs.get("calls", "").lstrip("%"))
        if callee is None or callee.root is None:
            return None
        inner_env = [_expr(module, comp, o, env) for o in instr.operands]
        return _expr(module, callee, callee.root.name, inner_env)
    if op == "add" and len(instr.operands) == 2:
        a, b = (_expr(module, comp, o, env) for o in instr.operands)
        for x, y in ((a, b), (b, a)):
            if x is not None and y is not None and x[0] == "gte" and y[0] == "const":
                return ("inc", x[1], y[1])
    return None


def _compare(module: Module, comp: Computation, instr: Instruction, env: list[_Expr | None] | None):
    if instr.opcode == "compare" and len(instr.operands) == 2:
        lhs, rhs = (_expr(module, comp, o, env) for o in instr.operands)
        return instr.attrs.get("direction", ""), lhs, rhs
    if instr.opcode == "fusion":
        callee = module.computations.get(instr.attrs.get("calls", "").lstrip("%"))
        if callee is not None and callee.root is not None:
            inner_env = [_expr(module, comp, o, env) for o in instr.operands]
            return _compare(module, callee, callee.root, inner_env)
    return None


def trip_count(module: Module, comp: Computation, loop: Instruction) -> int | None:
    """Iterations of a ``while``: XLA's annotation, or solved from ``i < N``; None if unknown."""
    known = _backend(loop, "known_trip_count")
    if known and "n" in known:
        return known["n"]
    cond = module.computations.get(loop.attrs.get("condition", "").lstrip("%"))
    if cond is None or cond.root is None:
        return None
    compared = _compare(module, cond, cond.root, None)
    if compared is None:
        return None
    direction, lhs, rhs = compared
    flip = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "NE": "NE"}
    if lhs is not None and rhs is not None and lhs[0] == "const" and rhs[0] == "gte":
        lhs, rhs, direction = rhs, lhs, flip.get(direction, "")
    if lhs is None or rhs is None or lhs[0] != "gte" or rhs[0] != "const":
        return None
    index, bound = lhs[1], rhs[1]
    init_step = _backend(loop, "known_init_step")
    if init_step and "init" in init_step and "step" in init_step:
        init, step = float(init_step["init"]), float(init_step["step"])
    else:
        found = _init_and_step(module, comp, loop, index)
        if found is None:
            return None
        init, step = found
    return _solve(direction, init, step, bound)


def _init_and_step(
    module: Module, comp: Computation, loop: Instruction, index: int
) -> tuple[float, float] | None:
    start = comp.by_name.get(loop.operands[0]) if loop.operands else None
    body = module.computations.get(loop.attrs.get("body", "").lstrip("%"))
    if start is None or start.opcode != "tuple" or body is None or body.root is None:
        return None
    init = _expr(module, comp, start.operands[index], None) if index < len(start.operands) else None
    root = body.root
    if root.opcode != "tuple" or index >= len(root.operands):
        return None
    step = _expr(module, body, root.operands[index], None)
    if init is None or init[0] != "const" or step is None or step[0] != "inc" or step[1] != index:
        return None
    return init[1], step[2]


def _solve(direction: str, init: float, step: float, bound: float) -> int | None:
    if step == 0:
        return None
    if direction in ("LT", "LE") and step > 0:
        span = bound - init + (1 if direction == "LE" else 0)
    elif direction in ("GT", "GE") and step < 0:
        span = init - bound + (1 if direction == "GE" else 0)
        step = -step
    elif direction == "NE" and (bound - init) / step >= 0 and (bound - init) % step == 0:
        return int((bound - init) / step)
    else:
        return None
    return max(0, math.ceil(span / step))
