"""Pricing matmul variants with the ``shardkit.inspect`` cost model, and ``explain`` tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from shardkit.inspect import Interconnect
from shardkit.layout import format_bytes
from shardkit.linalg._matmul._algos import ALGORITHMS, MatmulProblem
from shardkit.linalg._matmul._model import (
    Comm,
    Redistribution,
    Spec,
    Variant,
    redistribution,
    spec_text,
)

_ORDER = tuple(ALGORITHMS)


@dataclass(frozen=True)
class Candidate:
    """One priced way to compute a product: an algorithm variant plus any redistribution.

    Attributes:
      algorithm: the algorithm's name (``local``, ``allgather``, ...).
      detail: which flavour of it (what is gathered, rotated or scattered).
      out_spec: the output's matrix-dims spec, as ``P(...)`` text.
      collectives: predicted collectives (algorithm, then redistribution).
      bytes_sent: bytes one device sends per call.
      peak_bytes: predicted per-device peak memory (operand and output blocks included).
      flops: per-device floating-point operations.
      comm_time_s: predicted communication seconds.
      compute_time_s: predicted compute seconds: ``flops / peak_flops``, plus
        ``panel_step_s`` per panel step of a product computed panel by panel (ring),
        plus the calibrated cost of writing its largest local product.
      time_s: predicted total, communication plus compute (no overlap modelled).
    """

    algorithm: str
    detail: str
    out_spec: str
    collectives: tuple[Comm, ...]
    bytes_sent: int
    peak_bytes: int
    flops: float
    comm_time_s: float
    compute_time_s: float
    time_s: float
    variant: Variant
    redistribution: Redistribution | None
    out: Spec

    @property
    def rank_key(self) -> tuple[float, int, int, int, int]:
        """The sort key, cheapest first (time, bytes, fewer collective launches, memory, order)."""
        runs = sum(c.count for c in self.collectives)
        return (self.time_s, self.bytes_sent, runs, self.peak_bytes, _ORDER.index(self.algorithm))


def price(
    pb: MatmulProblem,
    variant: Variant,
    link: Interconnect,
    *,
    target: Spec | None = None,
    batch_spec: Spec = (),
    batch_shape: Sequence[int] = (),
) -> Candidate:
    """Predict bytes, memory and time of ``variant``, redistributed to ``target`` if given."""
    sizes: Mapping[str, int] = pb.size
    out_full = (*batch_spec, *variant.out)
    redist = None
    comms = list(variant.comms)
    extra_mem = 0
    if target is not None and tuple(target) != out_full:
        shape = (*batch_shape, pb.m, pb.n)
        redist = redistribution(out_full, target, shape, pb.itemsize, sizes)
        comms += redist.comms
        extra_mem = redist.temp_bytes
    final = variant.out if target is None else tuple(target[len(batch_spec) :])
    in_bytes = pb.a_bytes(pb.a[0], pb.a[1]) + pb.b_bytes(pb.b[0], pb.b[1])
    peak = in_bytes + pb.c_bytes(*variant.out) + variant.temp_bytes + extra_mem
    # Every variant does the same flops; what tells them apart in compute is how: a
    # ring computes its product in small panel steps interleaved with its permutes,
    # which on devices that do not overlap them (CPU) costs a calibrated time per step,
    # and one large product writes more fresh memory than several small ones.
    compute = (
        variant.flops / link.peak_flops
        + variant.panel_steps * link.step_time(variant.panel_step_bytes)
        + link.write_time(variant.product_bytes)
    )
    algo_comm = sum(c.time(link) for c in variant.comms)
    redist_comm = sum(c.time(link) for c in comms[len(variant.comms) :])
    # Like Interconnect, the model ignores overlap of communication with compute:
    # on simulated CPU devices there is none, and a ring's real gain is memory.
    total = algo_comm + compute + redist_comm
    return Candidate(
        algorithm=variant.algorithm,
        detail=variant.detail,
        out_spec=spec_text(final),
        collectives=tuple(comms),
        bytes_sent=sum(c.total_sent_bytes for c in comms),
        peak_bytes=peak,
        flops=variant.flops,
        comm_time_s=algo_comm + redist_comm,
        compute_time_s=compute,
        time_s=total,
        variant=variant,
        redistribution=redist,
        out=final,
    )


def enumerate_variants(
    pb: MatmulProblem, algorithms: Sequence[str]
) -> tuple[list[Variant], dict[str, str]]:
    """Every variant of ``algorithms`` for ``pb``, and why each other algorithm does not apply."""
    found: list[Variant] = []
    reasons: dict[str, str] = {}
    for algo in algorithms:
        result = ALGORITHMS[algo](pb)
        if isinstance(result, str):
            reasons[algo] = result
        else:
            found += result
    return found, reasons


def _seconds(t: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


def _comms_text(comms: Sequence[Comm]) -> str:
    if not comms:
        return "none"
    return ", ".join(f"{c.count}x {c.kind} over {','.join(c.axes)}" for c in comms)


@dataclass(frozen=True)
class Explanation:
    """What ``matmul(..., explain=True)`` found: the priced candidates, cheapest first.

    Attributes:
      title: the problem (shapes, specs, mesh).
      candidates: applicable candidates, cheapest first; ``candidates[0]`` is ``auto``'s.
      rejected: algorithm -> why it does not apply to these specs.
      interconnect: the cost model's name.
    """

    title: str
    candidates: tuple[Candidate, ...]
    rejected: tuple[tuple[str, str], ...]
    interconnect: str

    @property
    def chosen(self) -> Candidate:
        """The cheapest candidate (what ``algorithm="auto"`` runs)."""
        return self.candidates[0]

    def __rich__(self) -> Group:
        table = Table(title=f"{self.title} ({self.interconnect})", title_justify="left")
        for col in (
            "",
            "algorithm",
            "flavour",
            "output",
            "collectives",
            "sent/dev",
            "peak/dev",
            "time",
        ):
            table.add_column(
                col, justify="right" if col in ("sent/dev", "peak/dev", "time") else "left"
            )
        for i, c in enumerate(self.candidates):
            table.add_row(
                "*" if i == 0 else "",
                c.algorithm,
                c.detail,
                c.out_spec,
                _comms_text(c.collectives),
                format_bytes(c.bytes_sent),
                format_bytes(c.peak_bytes),
                _seconds(c.time_s),
            )
        lines = [Text(f"not applicable: {a}: {why}", style="dim") for a, why in self.rejected]
        return Group(table, *lines)

    def __str__(self) -> str:
        console = Console(width=160, no_color=True, highlight=False)
        with console.capture() as capture:
            console.print(self)
        return capture.get().rstrip()

    def _repr_html_(self) -> str:
        from shardkit._display import rich_html

        return rich_html(self, width=160)
