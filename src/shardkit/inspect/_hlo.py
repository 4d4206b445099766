"""A small reader for the text XLA prints for compiled HLO modules.

It understands what introspection needs and no more: computations, instructions with
their (possibly tuple) shapes, operands and raw attributes, constants, and the
attribute syntaxes for device groups. Anything it cannot read is left as raw text for
the caller to report, never dropped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

# Bits per element of each HLO primitive type; token and opaque types carry no data.
_BITS = {
    "pred": 8,
    "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "f4e2m1fn": 4, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8,
    "f8e4m3fnuz": 8, "f8e5m2": 8, "f8e5m2fnuz": 8, "f8e8m0fnu": 8,
    "bf16": 16, "f16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "token": 0, "opaque": 0,
}  # fmt: skip
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
_INSTR = re.compile(r"\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*")
_OPCODE = re.compile(r"([a-z][a-z0-9\-_]*)\(")
_NAME = re.compile(r"%?([\w.\-]+)")
_COMMENT = re.compile(r"/\*.*?\*/")
_CALL_KEYS = (
    "calls",
    "to_apply",
    "body",
    "condition",
    "branch_computations",
    "true_computation",
    "false_computation",
    "called_computations",
    "select",
    "scatter",
)


class HloSyntaxError(ValueError):
    """Text that is not in any HLO syntax this reader knows."""


@dataclass(frozen=True)
class ArrayShape:
    """One array in an HLO shape: element type and dimensions (per device)."""

    dtype: str
    dims: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Size in bytes (sub-byte types rounded up to whole bytes)."""
        return math.ceil(math.prod(self.dims) * _BITS[self.dtype] / 8)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


Shape = ArrayShape | tuple["Shape", ...]


def flatten(shape: Shape) -> tuple[ArrayShape, ...]:
    """The arrays of a possibly nested tuple shape, in order."""
    if isinstance(shape, ArrayShape):
        return (shape,)
    return tuple(a for s in shape for a in flatten(s))


@dataclass
class Instruction:
    """One HLO instruction; ``attrs`` keeps each attribute's raw text."""

    name: str
    shape: Shape
    opcode: str
    operands: list[str]
    operand_text: str
    attrs: dict[str, str]
    computation: str
    root: bool
    line: str


@dataclass
class Computation:
    """A named computation and its instructions in program order."""

    name: str
    entry: bool
    instructions: list[Instruction] = field(default_factory=list)
    by_name: dict[str, Instruction] = field(default_factory=dict)

    @property
    def root(self) -> Instruction | None:
        """The ROOT instruction (or the last one when none is marked)."""
        roots = [i for i in self.instructions if i.root]
        return roots[0] if roots else (self.instructions[-1] if self.instructions else None)


@dataclass
class Module:
    """A parsed HLO module; ``unparsed`` holds ``(line, reason)`` for lines not understood."""

    name: str
    num_partitions: int
    num_replicas: int
    computations: dict[str, Computation]
    entry: str | None
    unparsed: list[tuple[str, str]]

    def called(self, instr: Instruction) -> list[tuple[str, str]]:
        """``(attribute, computation)`` for every computation ``instr`` calls."""
        out = []
        for key in _CALL_KEYS:
            value = instr.attrs.get(key)
            if value is None:
                continue
            for m in _NAME.finditer(value.strip("{}")):
                if m.group(1) in self.computations:
                    out.append((key, m.group(1)))
        return out


def _match(text: str, start: int) -> int:
    """Index just past the bracket that closes the one at ``start``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack: list[str] = []
    i = start
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    raise HloSyntaxError(f"unbalanced brackets in {text[start : start + 80]!r}")


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at separators outside brackets and double-quoted strings."""
    parts, depth, current, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            current.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(c)
        i += 1
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def parse_shape(text: str) -> Shape:
    """``f32[8,4]{1,0}`` or a nested tuple ``(f32[2], (s32[], u32[]))``."""
    text = text.strip()
    if text.startswith("("):
        return tuple(parse_shape(p) for p in split_top(text[1:-1]))
    m = _ARRAY.fullmatch(text)
    if m is None or m.group(1) not in _BITS:
        raise HloSyntaxError(f"not an HLO shape: {text!r}")
    dims = tuple(int(d.strip().lstrip("<=")) for d in m.group(2).split(",") if d.strip())
    return ArrayShape(m.group(1), dims)


def _parse_instruction(line: str, computation: str) -> Instruction | None:
    m = _INSTR.match(line)
    if m is None:
        return None
    pos = m.end()
    end = _match(line, pos) if line[pos] == "(" else line.index(" ", pos)
    shape = parse_shape(line[pos:end])
    op = _OPCODE.match(line, end + 1)
    if op is None:
        raise HloSyntaxError(f"no opcode after the shape in {line.strip()[:120]!r}")
    close = _match(line, op.end() - 1)
    operand_text = line[op.end() : close - 1]
    # Operands print as `%a, %b` or, in newer XLA, as `f32[2]{0} %a, f32[2]{0} %b`.
    operands = [p.split()[-1].lstrip("%") for p in split_top(operand_text) if p]
    rest = line[close:].strip()
    if rest and not rest.startswith(","):
        raise HloSyntaxError(f"unexpected text after the operands in {line.strip()[:120]!r}")
    attrs: dict[str, str] = {}
    key = ""
    for part in split_top(rest.lstrip(", ")):
        if part.startswith("device_ids=") and key:
            # A mesh-axes device list prints `mesh[...], device_ids=(...) {axes}`.
            attrs[key] += ", " + part
            continue
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not re.fullmatch(r"[\w.\-]+", key):
            raise HloSyntaxError(f"not an attribute: {part[:80]!r} in {line.strip()[:120]!r}")
        attrs[key] = value.strip()
    return Instruction(
        name=m.group(2).lstrip("%"),
        shape=shape,
        opcode=op.group(1),
        operands=operands,
        operand_text=operand_text,
        attrs=attrs,
        computation=computation,
        root=bool(m.group(1)),
        line=line.strip(),
    )


def parse_module(text: str) -> Module:
    """Parse the text of ``Compiled.as_text()`` (or hand-written HLO in that syntax)."""
    header = re.search(r"^HloModule\s+([^\s,]+)(.*)$", text, re.MULTILINE)
    name = header.group(1) if header else "?"
    rest = header.group(2) if header else ""
    parts = re.search(r"num_partitions=(\d+)", rest)
    replicas = re.search(r"replica_count=(\d+)", rest)
    computations: dict[str, Computation] = {}
    entry: str | None = None
    unparsed: list[tuple[str, str]] = []
    current: Computation | None = None
    for raw in text.splitlines():
        # XLA annotates long tuples and operand lists with /*index=5*/ comments.
        line = _COMMENT.sub("", raw)
        stripped = line.strip()
        if current is None:
            if stripped.endswith("{") and not stripped.startswith("HloModule"):
                words = stripped.split()
                is_entry = words[0] == "ENTRY"
                cname = words[1 if is_entry else 0].lstrip("%").split("(")[0]
                current = Computation(cname, is_entry)
                computations[cname] = current
                entry = cname if is_entry else entry
            continue
        if stripped == "}":
            current = None
            continue
        if not stripped:
            continue
        try:
            instr = _parse_instruction(line, current.name)
        except (HloSyntaxError, ValueError) as e:
            unparsed.append((stripped, str(e)))
            continue
        if instr is None:
            unparsed.append((stripped, "not an instruction"))
            continue
        current.instructions.append(instr)
        current.by_name[instr.name] = instr
    return Module(
        name=name,
        num_partitions=int(parts.group(1)) if parts else 1,
        num_replicas=int(replicas.group(1)) if replicas else 1,
        computations=computations,
        entry=entry,
        unparsed=unparsed,
    )


# ---- device groups ---------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"-?\d+", text)]


def _iota(text: str) -> np.ndarray:
    """``[2,4]<=[4,2]T(1,0)``: arange over the reshape dims, transposed, reshaped."""
    m = re.fullmatch(r"\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?", text.strip())
    if m is None:
        raise HloSyntaxError(f"not an iota device list: {text!r}")
    out_dims, reshape = _ints(m.group(1)), _ints(m.group(2))
    ids = np.arange(math.prod(reshape)).reshape(reshape)
    if m.group(3) is not None:
        ids = ids.transpose(_ints(m.group(3)))
    return ids.reshape(out_dims)


def _mesh_axes_groups(text: str) -> list[list[int]]:
    """``mesh['a'=2,'b'=4] {'b'}``, optionally ``device_ids=(...)`` and sub-axes ``'b':(1)2``."""
    m = re.fullmatch(
        r"mesh\[([^\]]*)\](?:\s*,\s*device_ids=\((.*)\))?\s*\{(.*)\}", text.strip(), re.DOTALL
    )
    if m is None:
        raise HloSyntaxError(f"not a mesh-axes device list: {text!r}")
    names, sizes = [], []
    for item in split_top(m.group(1)):
        key, _, size = item.partition("=")
        names.append(key.strip().strip("'\""))
        sizes.append(int(size))
    ids = m.group(2)
    short_iota = (
        None if ids is None else re.fullmatch(r"\[([\d,\s]*)\]T\(([\d,\s]*)\)", ids.strip())
    )
    if ids is None:
        devices = np.arange(math.prod(sizes))
    elif "<=" in ids:
        devices = _iota(ids).reshape(-1)
    elif short_iota is not None:
        # ``device_ids=([2,4]T(1,0))``: iota over [2,4], transposed, flattened.
        dims = _ints(short_iota.group(1))
        devices = np.arange(math.prod(dims)).reshape(dims).transpose(_ints(short_iota.group(2)))
        devices = devices.reshape(-1)
    else:
        devices = np.array(_ints(ids))
    if devices.size != math.prod(sizes):
        raise HloSyntaxError(f"device_ids do not match the mesh size in {text!r}")
    devices = devices.reshape(sizes)
    # Each referenced (sub-)axis becomes its own dimension after reshaping every mesh
    # axis into [pre, size, rest] pieces; grouped dimensions then move to the end.
    refs: list[tuple[int, int, int]] = []  # (mesh axis, pre_size, size)
    for item in split_top(m.group(3)):
        sub = re.fullmatch(r"['\"]?([^'\":]+)['\"]?(?::\((\d+)\)(\d+))?", item.strip())
        if sub is None or sub.group(1) not in names:
            raise HloSyntaxError(f"unknown mesh axis {item!r} in {text!r}")
        axis = names.index(sub.group(1))
        pre, size = (int(sub.group(2)), int(sub.group(3))) if sub.group(2) else (1, sizes[axis])
        refs.append((axis, pre, size))
    dims: list[int] = []
    ref_dim: dict[int, int] = {}
    for axis, full in enumerate(sizes):
        cuts = sorted((pre, size, k) for k, (a, pre, size) in enumerate(refs) if a == axis)
        covered = 1
        for pre, size, k in cuts:
            if pre != covered:
                dims.append(pre // covered)
            ref_dim[k] = len(dims)
            dims.append(size)
            covered = pre * size
        if covered != full or not cuts:
            dims.append(full // covered)
    grouped = [ref_dim[k] for k in range(len(refs))]
    order = [d for d in range(len(dims)) if d not in grouped] + grouped
    group_size = math.prod(dims[d] for d in grouped)
    return devices.reshape(dims).transpose(order).reshape(-1, group_size).tolist()


def parse_groups(text: str, num_devices: int) -> list[list[int]]:
    """Device groups from any ``replica_groups`` syntax; ``{}`` means one group of all.

    Raises:
      HloSyntaxError: the text is in no known syntax.
    """
    text = text.strip()
    if text in ("{}", ""):
        return [list(range(num_devices))]
    if text.startswith("{"):
        inner = text[1:-1].strip()
        if not re.fullmatch(r"(\{[\d,\s]*\}\s*,?\s*)*", inner):
            raise HloSyntaxError(f"not a list of device groups: {text!r}")
        return [_ints(g) for g in re.findall(r"\{([^{}]*)\}", inner)]
    if text.startswith("["):
        return _iota(text).tolist()
    if text.startswith("mesh["):
        return _mesh_axes_groups(text)
    if text.startswith("maximal_mesh["):
        return [_ints(text)[:1]]
    raise HloSyntaxError(f"unknown device-group syntax: {text!r}")


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """``source_target_pairs={{0,1},{1,2}}`` -> ``[(0, 1), (1, 2)]``."""
    text = text.strip()
    groups = re.findall(r"\{\s*(-?\d+)\s*,\s*(-?\d+)\s*\}", text)
    if not text.startswith("{") or (not groups and text not in ("{}",)):
        raise HloSyntaxError(f"unknown source-target-pair syntax: {text!r}")
    return [(int(a), int(b)) for a, b in groups]


def scalar_constant(instr: Instruction) -> float | None:
    """The value of a scalar ``constant(5)``, or None."""
    if instr.opcode != "constant" or flatten(instr.shape)[0].dims:
        return None
    try:
        return float(instr.operand_text.strip())
    except ValueError:
        return None
