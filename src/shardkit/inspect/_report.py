"""What a compiled program communicates: collectives, memory, predicted time.

``CommReport`` is built by :func:`shardkit.inspect.comms`. It renders as a rich table,
round-trips through JSON, compares with another report, and asserts properties in
tests. Byte figures are per device; see ``shardkit.inspect._traffic`` for the
convention (ring algorithms: an all-gather of an ``R``-byte result over ``p`` devices
sends ``(p-1)/p * R`` per device, an all-reduce of ``N`` bytes ``2 (p-1)/p * N``).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from shardkit._display import rich_html
from shardkit._typing import JSONObject
from shardkit.inspect._interconnect import Interconnect
from shardkit.inspect._program import KINDS
from shardkit.layout import format_bytes
from shardkit.layout.internal import PaddingMark

__all__ = ["Collective", "CommReport", "MemoryStats", "UnknownOp"]

_FORMAT = "shardkit.comms/1"


def _check_kinds(where: str, kinds: Iterable[str]) -> tuple[str, ...]:
    kinds = tuple(kinds)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"{where}: kind={bad[0]!r} is not a collective; legal values are {KINDS}")
    return kinds


def _shapes(dtype: str, shapes: tuple[tuple[int, ...], ...]) -> str:
    text = ", ".join(f"{dtype}[{','.join(map(str, s))}]" for s in shapes)
    return f"({text})" if len(shapes) > 1 else text


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _ratio_text(m: MemoryStats, num_devices: int) -> str:
    """`` (2.00x the ideal shard)``, only where the ideal is meaningful.

    The ideal is the inputs split evenly over the devices: a lower bound for a program
    that works on its inputs. A program whose outputs on one device outweigh all of
    its inputs together (a generator: random draws from a key, ``zeros(shape)``) has
    no such bound, and a ratio to it would be a number without meaning.
    """
    ratio = m.ratio_to_ideal
    if ratio is None or m.ideal_bytes is None:
        return ""
    if m.output_bytes > m.ideal_bytes * max(num_devices, 1):
        return " (no ideal shard: the outputs outweigh the inputs)"
    return f" ({ratio:.2f}x the ideal shard)"


def _seconds(t: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


@dataclass(frozen=True)
class Collective:
    """One collective in a compiled program.

    Attributes:
      kind: ``all-gather``, ``all-reduce``, ``reduce-scatter``, ``all-to-all``,
        ``collective-permute`` or ``collective-broadcast``.
      dtype: HLO element type, e.g. ``f32``.
      operand_shapes: per-device operand shapes (several for tuple forms).
      result_shapes: per-device result shapes.
      group_size: devices per group (devices taking part, for a permute).
      groups: logical device ids of each group; empty for a permute.
      pairs: ``(source, target)`` logical ids of a permute; empty otherwise.
      axes: mesh axis names the groups span, ``None`` when no mesh is known.
      axes_exact: False when a group covers only part of those axes (a sub-axis).
      sent_bytes: bytes one device sends per run (the largest over devices).
      received_bytes: bytes one device receives per run.
      count: runs per call of the program (loop trip counts multiplied in).
      unbounded: inside a loop whose trip count is unknown; ``count`` is per iteration.
      is_async: issued as an asynchronous start/done pair.
      name: the HLO instruction name.
      time_s: predicted seconds per run under the report's interconnect.
    """

    kind: str
    dtype: str
    operand_shapes: tuple[tuple[int, ...], ...]
    result_shapes: tuple[tuple[int, ...], ...]
    group_size: int
    groups: tuple[tuple[int, ...], ...]
    pairs: tuple[tuple[int, int], ...]
    axes: tuple[str, ...] | None
    axes_exact: bool
    sent_bytes: int
    received_bytes: int
    count: int
    unbounded: bool
    is_async: bool
    name: str
    time_s: float

    @property
    def total_sent_bytes(self) -> int:
        """``sent_bytes * count``: bytes one device sends over a whole call."""
        return self.sent_bytes * self.count

    @property
    def axes_label(self) -> str:
        """``x``, ``x,y``; ``y (part)`` for a partial span; ``-`` without a mesh."""
        if self.axes is None:
            return "-"
        text = ",".join(self.axes) if self.axes else "(none)"
        return text if self.axes_exact or not self.axes else f"{text} (part)"

    @property
    def signature(self) -> str:
        """``all-gather f32[8,4] -> f32[8,16] over y``: what :meth:`CommReport.diff` matches."""
        return (
            f"{self.kind} {_shapes(self.dtype, self.operand_shapes)} -> "
            f"{_shapes(self.dtype, self.result_shapes)} over {self.axes_label}"
        )


@dataclass(frozen=True)
class UnknownOp:
    """An instruction that looks like communication in a syntax not understood."""

    opcode: str
    computation: str
    text: str
    reason: str


@dataclass(frozen=True)
class UnorderedPair:
    """Two collectives (or loops/branches holding them) no data dependency orders.

    Attributes:
      computation: the HLO computation holding both.
      first: ``opcode name (op_name)`` of the one printed first.
      second: the same for the other.
    """

    computation: str
    first: str
    second: str


@dataclass(frozen=True)
class MemoryStats:
    """Per-device memory of a compiled program, from ``Compiled.memory_analysis()``.

    ``peak_bytes`` is ``max(reported peak, arguments + outputs + temporaries - aliased)``:
    XLA's own peak where it is larger, else the sum of the buffers that can be live at
    once, which bounds it from above. ``ideal_bytes`` is the inputs' global size over
    the number of devices: what a perfectly sharded program must hold.
    """

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    generated_code_bytes: int
    reported_peak_bytes: int | None
    ideal_bytes: int | None

    @property
    def peak_bytes(self) -> int:
        """The peak per-device footprint (see the class docstring)."""
        total = self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes
        return max(self.reported_peak_bytes or 0, total)

    @property
    def ratio_to_ideal(self) -> float | None:
        """``peak_bytes / ideal_bytes``; 1.0 would hold only the input shards."""
        return self.peak_bytes / self.ideal_bytes if self.ideal_bytes else None


@dataclass(frozen=True)
class CommReport:
    """Every collective, the memory and a predicted time of one compiled program.

    Build it with :func:`shardkit.inspect.comms`.

    Attributes:
      name: the function's name.
      mesh_axes: ``(("x", 2), ("y", 4))`` for the mesh the arguments live on, or None.
      num_devices: devices the program runs on.
      collectives: one entry per collective instruction.
      unknown: communication-looking instructions not understood, never skipped.
      memory: per-device memory, or None when the backend gives none.
      flops: per-device floating-point operations from ``cost_analysis()``, or None.
      interconnect: the model behind the predicted times.
      padding: the copies shardkit pads to sizes the mesh divides, with their extra
        bytes (of the whole array, or of one device's block for padding done per
        device, as the FFT's all-to-all blocks).
      unordered: pairs of collectives that may run concurrently (no chain of operands
        orders them). On simulated CPU devices such a pair can hang the program
        (XLA's CPU runtime blocks one thread per device in each rendezvous); see
        :meth:`assert_ordered`.
    """

    name: str
    mesh_axes: tuple[tuple[str, int], ...] | None
    num_devices: int
    collectives: tuple[Collective, ...]
    unknown: tuple[UnknownOp, ...]
    memory: MemoryStats | None
    flops: float | None
    interconnect: Interconnect
    padding: tuple[PaddingMark, ...] = ()
    unordered: tuple[UnorderedPair, ...] = ()

    # ---- figures -----------------------------------------------------------------

    def count(self, kind: str | None = None, /) -> int:
        """Runs per call of collectives of ``kind`` (all kinds when None)."""
        if kind is not None:
            _check_kinds("CommReport.count", [kind])
        return sum(c.count for c in self.collectives if kind is None or c.kind == kind)

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds of collective present."""
        return frozenset(c.kind for c in self.collectives)

    @property
    def bytes_sent(self) -> int:
        """Bytes one device sends over a call, all collectives and loop trips included."""
        return sum(c.total_sent_bytes for c in self.collectives)

    @property
    def unbounded(self) -> bool:
        """True when some collective sits in a loop of unknown trip count."""
        return any(c.unbounded for c in self.collectives)

    @property
    def comm_time_s(self) -> float:
        """Predicted communication seconds per call, collectives run one after another."""
        return sum(c.time_s * c.count for c in self.collectives)

    @property
    def compute_time_s(self) -> float | None:
        """``flops / interconnect.peak_flops``, or None without a flop count."""
        return None if self.flops is None else self.flops / self.interconnect.peak_flops

    @property
    def bound(self) -> str:
        """``"communication"``, ``"compute"`` or ``"unknown"``: which predicted time is larger."""
        compute = self.compute_time_s
        if compute is None:
            return "unknown"
        return "communication" if self.comm_time_s > compute else "compute"

    # ---- assertions --------------------------------------------------------------

    def _fail(self, message: str) -> None:
        raise AssertionError(f"{self.name}: {message}\n{self}")

    def _no_unknown(self, what: str) -> None:
        if self.unknown:
            ops = ", ".join(sorted({u.opcode for u in self.unknown}))
            self._fail(f"cannot prove {what}: {len(self.unknown)} unrecognized op(s) ({ops})")

    def assert_only(self, kinds: str | Iterable[str], /) -> None:
        """Fail unless every collective is of one of ``kinds`` (none at all passes).

        Raises:
          AssertionError: another kind is present, or an op could not be read.
          ValueError: ``kinds`` names something that is not a collective.

        Example:
          >>> report = shardkit.inspect.comms(lambda a: a * 2, np.ones(8))
          >>> report.assert_only({"all-to-all"})
        """
        allowed = _check_kinds("assert_only", [kinds] if isinstance(kinds, str) else kinds)
        extra = sorted(self.kinds - set(allowed))
        if extra:
            self._fail(f"expected only {sorted(allowed)} but found {extra}")
        self._no_unknown(f"only {sorted(allowed)}")

    def assert_none(self, *kinds: str) -> None:
        """Fail if a collective of any of ``kinds`` is present (of any kind when none given).

        Raises:
          AssertionError: such a collective is present, or an op could not be read.
          ValueError: a kind is not a collective.
        """
        banned = set(_check_kinds("assert_none", kinds) or KINDS)
        found = sorted(self.kinds & banned)
        if found:
            runs = ", ".join(f"{self.count(k)} {k}" for k in found)
            self._fail(f"expected no {sorted(banned)} but found {runs}")
        self._no_unknown(f"the absence of {sorted(banned)}")

    def assert_ordered(self) -> None:
        """Fail if two collectives of one computation may run concurrently.

        Every pair of collectives (or ``while``/``conditional`` instructions holding
        them) must be ordered by a chain of operands. XLA's CPU runtime starts
        independent instructions concurrently on one thread per device: devices can
        then enter two collectives in different orders and block each other's
        rendezvous until the process aborts. Accelerators issue collectives in one
        stream order, but an unordered pair still leaves the order to the compiler.

        Raises:
          AssertionError: such a pair exists (each listed), or an op could not be read.
        """
        if self.unordered:
            pairs = "; ".join(f"{u.first} || {u.second}" for u in self.unordered[:6])
            more = f" (and {len(self.unordered) - 6} more)" if len(self.unordered) > 6 else ""
            self._fail(f"{len(self.unordered)} unordered collective pair(s): {pairs}{more}")
        self._no_unknown("that the collectives run in one order")

    def assert_bytes_at_most(self, n: int, /) -> None:
        """Fail if one device sends more than ``n`` bytes per call.

        Raises:
          AssertionError: more bytes, a loop of unknown trip count, or unreadable ops.
        """
        if self.unbounded:
            self._fail(f"cannot bound bytes by {n}: a collective runs in an unbounded loop")
        self._no_unknown(f"bytes <= {n}")
        if self.bytes_sent > n:
            self._fail(f"sends {self.bytes_sent} B per device per call, more than {n} B")

    def assert_peak_memory_at_most(self, n: int, /) -> None:
        """Fail if the peak per-device memory exceeds ``n`` bytes (or is unknown)."""
        if self.memory is None:
            self._fail(f"cannot bound peak memory by {n}: no memory analysis")
            return
        if self.memory.peak_bytes > n:
            self._fail(f"peak memory {self.memory.peak_bytes} B per device exceeds {n} B")

    # ---- comparison and serialization --------------------------------------------

    def diff(self, other: CommReport, /) -> CommDiff:
        """What changed from this report (before) to ``other`` (after).

        Collectives are matched by :attr:`Collective.signature`.
        """
        before: Counter[str] = Counter()
        after: Counter[str] = Counter()
        bytes_before: Counter[str] = Counter()
        bytes_after: Counter[str] = Counter()
        for report, counts, sizes in ((self, before, bytes_before), (other, after, bytes_after)):
            for c in report.collectives:
                counts[c.signature] += c.count
                sizes[c.signature] += c.total_sent_bytes
        rows = tuple(
            (key, before[key], after[key], bytes_before[key], bytes_after[key])
            for key in sorted(set(before) | set(after))
            if (before[key], bytes_before[key]) != (after[key], bytes_after[key])
        )
        peaks = (
            self.memory.peak_bytes if self.memory else None,
            other.memory.peak_bytes if other.memory else None,
        )
        return CommDiff(
            rows, (self.bytes_sent, other.bytes_sent), peaks, (self.comm_time_s, other.comm_time_s)
        )

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict (tuples become lists); :meth:`from_dict` inverts it."""
        return {"format": _FORMAT, **dataclasses.asdict(self)}

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: JSONObject, /) -> CommReport:
        """Rebuild a report from :meth:`to_dict` output."""
        if data.get("format") != _FORMAT:
            raise ValueError(
                f"CommReport.from_dict: format={data.get('format')!r}, want {_FORMAT!r}"
            )

        def tup(x: Any) -> Any:
            return tuple(tup(v) for v in x) if isinstance(x, list) else x

        fields = {f.name: tup(data[f.name]) for f in dataclasses.fields(cls) if f.name in data}
        fields["collectives"] = tuple(
            Collective(**{k: tup(v) for k, v in c.items()}) for c in data["collectives"]
        )
        fields["unknown"] = tuple(UnknownOp(**u) for u in data["unknown"])
        fields["memory"] = MemoryStats(**data["memory"]) if data["memory"] else None
        fields["interconnect"] = Interconnect(**data["interconnect"])
        fields["padding"] = tuple(
            PaddingMark(**{k: tup(v) for k, v in p.items()}) for p in data.get("padding", ())
        )
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str, /) -> CommReport:
        """Rebuild a report from :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))

    # ---- rendering ---------------------------------------------------------------

    def summary(self) -> str:
        """One line: collectives, bytes, memory and which time dominates."""
        kinds = ", ".join(f"{self.count(k)} {k}" for k in KINDS if k in self.kinds) or "none"
        mem = f", peak {format_bytes(self.memory.peak_bytes)}/device" if self.memory else ""
        unknown = f", {len(self.unknown)} UNRECOGNIZED" if self.unknown else ""
        for per_device, unit in ((False, "in all"), (True, "per device")):
            pad = sum(p.extra_bytes for p in self.padding if p.per_device == per_device)
            if pad:
                mem += f", padding +{format_bytes(pad)} {unit}"
        loop = " (per iteration of an unbounded loop)" if self.unbounded else ""
        compute = self.compute_time_s
        timing = f"comm {_seconds(self.comm_time_s)}"
        if compute is not None:
            timing += f" vs compute {_seconds(compute)}: {self.bound}-bound"
        return (
            f"{self.name}: collectives {kinds}{unknown}; sends "
            f"{format_bytes(self.bytes_sent)}/device{loop}{mem}; {timing} "
            f"on {self.interconnect.label}"
        )

    def __rich__(self) -> Group:
        mesh = (
            "mesh(" + ",".join(f"{n}={s}" for n, s in self.mesh_axes) + ")"
            if self.mesh_axes
            else f"{self.num_devices} devices"
        )
        table = Table(title=f"{self.name} on {mesh}", title_justify="left")
        for col in (
            "collective",
            "operand -> result",
            "axes",
            "p",
            "runs",
            "sent/dev",
            "recv/dev",
            "time",
        ):
            table.add_column(col, justify="right" if col in ("p", "runs", "time") else "left")
        for c in self.collectives:
            runs = f"{c.count}/iter (unbounded)" if c.unbounded else str(c.count)
            table.add_row(
                c.kind + (" (async)" if c.is_async else ""),
                f"{_shapes(c.dtype, c.operand_shapes)} -> {_shapes(c.dtype, c.result_shapes)}",
                c.axes_label,
                str(c.group_size),
                runs,
                format_bytes(c.sent_bytes),
                format_bytes(c.received_bytes),
                _seconds(c.time_s),
            )
        for u in self.unknown:
            table.add_row(
                Text(f"UNRECOGNIZED {u.opcode}", style="bold red"),
                u.reason,
                "?",
                "",
                "",
                "",
                "",
                "",
            )
        parts: list[Any] = [table]
        if self.memory is not None:
            m = self.memory
            ratio = _ratio_text(m, self.num_devices)
            parts.append(
                Text(
                    f"memory/device: args {format_bytes(m.argument_bytes)}, outputs "
                    f"{format_bytes(m.output_bytes)}, temps {format_bytes(m.temp_bytes)}, "
                    f"peak {format_bytes(m.peak_bytes)}{ratio}"
                )
            )
        for p in self.padding:
            parts.append(
                Text(
                    f"padding: {p.what} {_dims(p.shape)} -> {_dims(p.padded_shape)} "
                    f"(+{format_bytes(p.extra_bytes)} {'per device' if p.per_device else 'in all'})"
                    ", for a size the mesh does not divide"
                )
            )
        if self.unordered:
            parts.append(
                Text(
                    f"warning: {len(self.unordered)} pair(s) of collectives no data dependency "
                    f"orders (e.g. {self.unordered[0].first} || {self.unordered[0].second}); "
                    "they may run concurrently and can hang on CPU devices"
                )
            )
        parts.append(Text(self.summary()))
        return Group(*parts)

    def __str__(self) -> str:
        console = Console(width=120, no_color=True, highlight=False, record=True, file=None)
        with console.capture() as capture:
            console.print(self)
        return capture.get().rstrip()

    def _repr_html_(self) -> str:
        return rich_html(self, width=120)


@dataclass(frozen=True)
class CommDiff:
    """The difference between two reports (before -> after).

    Attributes:
      rows: ``(signature, runs before, runs after, bytes before, bytes after)`` for
        each collective signature whose runs or bytes changed.
      bytes_sent: total bytes per device, before and after.
      peak_bytes: peak memory per device, before and after (None if unknown).
      comm_time_s: predicted communication seconds, before and after.
    """

    rows: tuple[tuple[str, int, int, int, int], ...]
    bytes_sent: tuple[int, int]
    peak_bytes: tuple[int | None, int | None]
    comm_time_s: tuple[float, float]

    @property
    def changed(self) -> bool:
        """True when collectives, bytes or peak memory differ."""
        return bool(self.rows) or self.peak_bytes[0] != self.peak_bytes[1]

    def __str__(self) -> str:
        lines = [
            f"{'+' if a > b else '-' if a < b else '~'} {key}: runs {b} -> {a}, "
            f"{format_bytes(bb)} -> {format_bytes(ba)}"
            for key, b, a, bb, ba in self.rows
        ]
        (b0, b1), (p0, p1), (t0, t1) = self.bytes_sent, self.peak_bytes, self.comm_time_s
        peak = f"{format_bytes(p0) if p0 is not None else '?'} -> {format_bytes(p1) if p1 is not None else '?'}"
        lines.append(
            f"bytes/device {format_bytes(b0)} -> {format_bytes(b1)}; peak {peak}; "
            f"comm {_seconds(t0)} -> {_seconds(t1)}"
        )
        return "\n".join(lines)
