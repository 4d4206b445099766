"""``shardkit bench calibrate``: measure the collectives and a matmul, fit, save a preset.

For every group size ``p`` the devices allow (the divisors of the device count above
1), the collectives of the ``collectives`` suite (the all-gather and reduce-scatter
along a leading and along an inner dimension) run over a mesh axis of size
``p`` (a mesh of ``p`` by ``N/p`` with the smaller axis first, so every device takes
part and the groups are those of the suites' meshes) on ``float32``
buffers whose full size ``n`` (what :meth:`Interconnect.time` takes: the operand, or
the all-gather's gathered result) sweeps 1 KiB to 64 MiB, timed the way the suites
time them (:func:`shardkit.bench._timing.measure_case`), in three passes (two with
``--quick``), alternately in forward and reverse order, each point the median of the
passes' medians: on a shared machine a burst of load inflates one pass's point, rarely
two, and the median of three then ignores it. Per collective kind and group
size the preset keeps the median time at each ``n`` (made non-decreasing), which the
model interpolates on log-log axes, and the least-squares ``t = alpha + n / beta`` on
relative residuals, shown for reference: on CPU devices the cost per byte grows
several-fold past the caches, which one line cannot follow. A per-device
``s x s x s`` matmul run on all devices at once gives the FLOP rate one device gets
while the others compute too, and ``(s x 512) @ (512 x s)`` products with outputs of
4 to 64 MiB what writing a large output costs beyond those flops
(``product_write``: on CPU devices, fresh memory each call).

Last, ``matmul(algorithm="ring")`` and ``algorithm="allgather"`` run on the same
operands (``a`` and ``b`` split by rows over all devices, ``n = 256 x`` the device
count), interleaved. What the ring loses to the all-gather beyond what the fitted
collectives and FLOP rate predict, divided by its panel steps, is ``panel_step_s``:
the price of computing the local product in small panel steps between permutes, which
these devices do not overlap. The matmul cost model adds it per panel step, scaled by
the output bytes the step writes over ``panel_step_bytes`` (those of a step here).

The result is an :class:`~shardkit.inspect.Interconnect` with those fits, saved as the
preset of these devices (:mod:`shardkit.inspect._presets`), which ``inspect``,
``comms`` and ``matmul(algorithm="auto")`` then use by default. The times include
launching a one-collective program, so they are upper bounds for a collective inside
a larger program.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from rich.console import Console
from rich.table import Table

from shardkit._display import rich_text
from shardkit._progress import resolve_progress
from shardkit.bench._suite_collectives import (
    _HLO_KINDS,
    INNER,
    _bodies,
    _make_input,
    _size_label,
)
from shardkit.bench._timing import FULL_TIMING, QUICK_TIMING, Case, Timing, measure_case
from shardkit.inspect import CollectiveFit, Interconnect
from shardkit.inspect.internal import preset_path, save_preset

__all__ = [
    "DEFAULT_SIZES",
    "QUICK_SIZES",
    "Calibration",
    "Point",
    "calibrate",
    "fit_collective",
    "fit_interconnect",
]

DEFAULT_SIZES = (1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
"""The full buffers (``n``) of a full calibration: 1 KiB to 64 MiB (float32 matmuls of
2048 and 4096 on 8 devices move blocks of 2 to 64 MiB; past 16 MiB the cost per byte
grows again on CPU devices, so the largest must be measured, not extrapolated)."""

QUICK_SIZES = (4 << 10, 256 << 10, 4 << 20)
"""The full buffers of ``--quick``: three sizes, one more than the line's two parameters."""

FLOP_SIZE = 768
"""``s`` of the per-device ``s x s x s`` float32 matmul that measures the FLOP rate."""

QUICK_FLOP_SIZE = 384

WRITE_SIZES = (1024, 2048, 4096)
"""``s`` of the ``(s x 512) @ (512 x s)`` products whose outputs (4, 16 and 64 MiB)
measure ``product_write``."""

QUICK_WRITE_SIZES = (256, 512)

WRITE_K = 512

RING_ROWS = 512
"""Rows of ``a`` per device in the ring-vs-all-gather matmul (``n = RING_ROWS x``
devices: 4096 on 8 devices, the matmul suite's larger size). A panel step's cost grows
faster than its bytes on CPU devices (measured per step on 8 devices: 0.5-0.9 ms at
n=2048, 3.6-3.9 ms at n=4096, 4x the bytes), and the model scales it in proportion to
them, so measured at the larger size it prices a smaller ring's steps high, not low."""

QUICK_RING_ROWS = 32

_ITEMSIZE = 4


@dataclass(frozen=True)
class Point:
    """One measured collective: ``seconds`` (median) for ``nbytes`` over ``group_size``.

    ``leading``: along the buffer's leading dimension, or (False) an inner one.
    """

    kind: str
    group_size: int
    nbytes: int
    seconds: float
    leading: bool = True


def _isotonic(values: Sequence[float], /) -> list[float]:
    """The non-decreasing sequence nearest ``values`` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2), (m1, w1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return [m for m, w in blocks for _ in range(int(w))]


def fit_collective(points: Sequence[Point], /, *, table: bool = True) -> CollectiveFit:
    """Fit ``t = alpha + n / beta`` to points of one kind and group size, and tabulate them.

    Least squares on relative residuals ``(alpha + n g - t) / t`` with ``g = 1/beta``,
    so a 1 KiB point weighs as much as a 16 MiB one. A negative ``alpha`` is refitted
    as 0 (pure bandwidth); a non-positive slope as latency only (a huge ``beta``).
    With ``table``, the fit also holds the median time per size, made non-decreasing
    (isotonic regression), which :meth:`CollectiveFit.time` then follows.

    Raises:
      ValueError: fewer than two distinct sizes, or points of mixed kind/group.

    Example:
      >>> pts = [Point("all-reduce", 4, n, 1e-5 + n / 2e9) for n in (1e3, 1e6)]
      >>> f = fit_collective(pts)
      >>> round(f.latency_s * 1e6, 3), round(f.bandwidth / 1e9, 3), f.sizes
      (10.0, 2.0, (1000.0, 1000000.0))
    """
    keys = {(p.kind, p.group_size, p.leading) for p in points}
    if len(keys) != 1 or len({p.nbytes for p in points}) < 2:
        raise ValueError(
            f"fit_collective: need points of one (kind, group_size, leading) at two or more "
            f"sizes; got {sorted(keys)} at sizes {sorted({p.nbytes for p in points})}"
        )
    ((kind, group, leading),) = keys
    t = np.array([p.seconds for p in points], float)
    n = np.array([p.nbytes for p in points], float)
    design = np.stack([1 / t, n / t], axis=1)  # rows: (alpha, g) -> predicted / t
    (alpha, slope), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha, slope = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    if slope <= 0:
        alpha, slope = float(np.sum(1 / t) / np.sum((1 / t) ** 2)), 0.0
    bandwidth = 1 / slope if slope > 0 else 1e18
    sizes = sorted({p.nbytes for p in points}) if table else []
    medians = [statistics.median(p.seconds for p in points if p.nbytes == s) for s in sizes]
    return CollectiveFit(
        kind,
        int(group),
        float(alpha),
        float(bandwidth),
        tuple(sizes),
        tuple(_isotonic(medians)),
        leading=leading,
    )


def fit_interconnect(
    points: Iterable[Point],
    /,
    *,
    peak_flops: float,
    name: str,
    created: str,
    description: str = "",
    table: bool = True,
) -> Interconnect:
    """An ``Interconnect`` holding one :class:`CollectiveFit` per (kind, group size, leading).

    Its ``latency_s`` and ``bandwidth`` (used only for kinds that were not measured)
    are the medians of the fits'.
    """
    by_key: dict[tuple[str, int, bool], list[Point]] = {}
    for p in points:
        by_key.setdefault((p.kind, p.group_size, p.leading), []).append(p)
    if not by_key:
        raise ValueError("fit_interconnect: no points to fit")
    # Leading before inner within a kind and group (sorted puts False first).
    fits = tuple(
        fit_collective(by_key[k], table=table)
        for k in sorted(by_key, key=lambda k: (k[0], k[1], not k[2]))
    )
    return Interconnect(
        name,
        latency_s=statistics.median(f.latency_s for f in fits),
        bandwidth=statistics.median(f.bandwidth for f in fits),
        peak_flops=peak_flops,
        description=description,
        fits=fits,
        calibrated=created,
    )


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` measured and fitted.

    Attributes:
      interconnect: the fitted model.
      points: the measured collectives.
      flops_per_s: measured per-device matmul FLOP rate (all devices busy).
      path: the preset file written, or None when not saved.
      wall_s: seconds the measurements took.
      ring: the ring-vs-all-gather matmul: ``n``, measured ``ring_s`` and
        ``allgather_s``, their ``predicted_*`` times without the panel steps,
        ``panel_steps``, the resulting ``panel_step_s`` and the ``panel_step_bytes`` it
        was measured at (empty if not measured).
      load: the 1, 5 and 15 minute load averages when the measurements ended
        (``os.getloadavg``; empty where there is none).
      writes: the ``(s x 512) @ (512 x s)`` products: ``(output bytes, measured
        seconds, seconds beyond the smallest one's rate)`` each (``product_write``).
    """

    interconnect: Interconnect
    points: tuple[Point, ...]
    flops_per_s: float
    path: Path | None
    wall_s: float
    ring: Mapping[str, float] = dataclasses.field(default_factory=dict)
    load: tuple[float, ...] = ()
    writes: tuple[tuple[float, float, float], ...] = ()

    def fit_errors(self, *, line: bool = False) -> dict[tuple[str, int, bool], float]:
        """(kind, group, leading) -> median ``abs(predicted - measured) / measured`` of its points.

        ``line``: of the least-squares ``alpha + n / beta`` alone, not the table.
        """
        fits = {(f.kind, f.group_size, f.leading): f for f in self.interconnect.fits}
        out: dict[tuple[str, int, bool], list[float]] = {}
        for p in self.points:
            key = (p.kind, p.group_size, p.leading)
            f = fits[key]
            pred = f.latency_s + p.nbytes / f.bandwidth if line else f.time(p.nbytes)
            out.setdefault(key, []).append(abs(pred - p.seconds) / p.seconds)
        return {k: statistics.median(v) for k, v in out.items()}

    def __rich__(self) -> Table:
        link = self.interconnect
        table = Table(
            title=f"calibrated preset {link.name} ({len(self.points)} points, "
            f"{self.wall_s:.1f} s; matmul {self.flops_per_s / 1e9:.2f} GFLOP/s per device)",
            title_justify="left",
        )
        sizes = sorted({p.nbytes for p in self.points})
        cols = ["collective", "p", "alpha", "beta", "line error", "table error"]
        cols += [_size_label(n) for n in sizes]
        for col in cols:
            table.add_column(col, justify="left" if col == "collective" else "right")
        line, tab = self.fit_errors(line=True), self.fit_errors()
        for f in link.fits:
            key = (f.kind, f.group_size, f.leading)
            table.add_row(
                f.kind if f.leading else f"{f.kind} (inner dim)",
                str(f.group_size),
                f"{f.latency_s * 1e6:.0f} us",
                f"{f.bandwidth / 1e9:.3g} GB/s" if f.bandwidth < 1e17 else "unbounded",
                f"{line[key]:.0%}",
                f"{tab[key]:.0%}",
                *(_ms(f.time(n)) for n in sizes),
            )
        table.caption = (
            "alpha, beta: least-squares t = alpha + n/beta (n: the full buffer); line error: "
            "its median relative error; the model uses the table of median times (ms, "
            "by n), interpolated on log-log axes."
        )
        if self.ring:
            r = self.ring
            table.caption += (
                f" Matmul n={int(r['n'])} by rows: ring {_ms(r['ring_s'])} ms, all-gather "
                f"{_ms(r['allgather_s'])} ms measured (predicted without panel steps "
                f"{_ms(r['predicted_ring_s'])} and {_ms(r['predicted_allgather_s'])}): "
                f"{r['panel_step_s'] * 1e3:.3g} ms per panel step "
                f"({int(r['panel_steps'])} steps of {r.get('panel_step_bytes', 0) / 2**20:.3g} "
                "MiB; the model scales it by a step's bytes)."
            )
        if self.writes:
            table.caption += (
                " Products (s x 512) @ (512 x s) writing "
                + ", ".join(
                    f"{n / 2**20:.3g} MiB: {_ms(t)} ms ({_ms(excess)} beyond the smallest's rate)"
                    for n, t, excess in self.writes
                )
                + "."
            )
        if self.load:
            table.caption += " Load average " + ", ".join(f"{v:.2f}" for v in self.load) + "."
        return table

    def __str__(self) -> str:
        return rich_text(self, width=120)


def _group_sizes(count: int) -> list[int]:
    return [p for p in range(2, count + 1) if count % p == 0]


def _ms(t: float) -> str:
    return f"{t * 1e3:.3g}"


def _collective_case(p: int, count: int, nbytes: int) -> Case:
    """The collectives on ``nbytes`` (the full buffer) over groups of ``p``.

    Every collective but the all-gathers gets ``nbytes`` per device; the all-gathers get
    ``nbytes / p``, so that their gathered result is ``nbytes`` too.
    """
    from shardkit.layout import mesh

    # The 2-D mesh with its smaller axis first (2x4 for 8 devices, as the suites'
    # meshes), the group along the axis of size p: groups of p = 2 are then strided
    # (devices i and i + N/2), as in the suites' 2x4 mesh, not adjacent.
    if p == count:
        m, axis = mesh((count,), ("x",), axis_types="explicit"), "x"
    else:
        shape = (p, count // p) if p * p <= count else (count // p, p)
        m = mesh(shape, ("x", "y"), axis_types="explicit")
        axis = "x" if shape[0] == p else "y"
    bodies = _bodies(axis, p)

    def pick(name: str) -> Callable[[jax.Array, jax.Array], jax.Array]:
        body = bodies[name]
        gather = _HLO_KINDS[name] == "all-gather"
        return (lambda x, small: body(small)) if gather else (lambda x, s: body(x))

    spec = P(m.axis_names, None)
    wrap = partial(jax.shard_map, mesh=m, in_specs=(spec, spec), out_specs=spec)
    elems = nbytes // _ITEMSIZE
    return Case(
        name=f"p{p}/{_size_label(nbytes)}",
        params={"group_size": p, "nbytes": nbytes},
        candidates={c: wrap(pick(c)) for c in bodies},
        make_args=lambda: (_make_input(m, elems), _make_input(m, elems // p)),
    )


def _by_rows(count: int) -> tuple[jax.sharding.Mesh, P]:
    """A 1-D mesh of all ``count`` devices and the spec splitting an array's rows over it."""
    from shardkit.layout import mesh

    return mesh((count,), ("x",), axis_types="explicit"), P("x", None)


def _ones(m: jax.sharding.Mesh, spec: P, shape: tuple[int, ...]) -> jax.Array:
    """float32 ones of ``shape`` created in place, laid out by ``spec`` (no host copy)."""
    make = partial(jnp.ones, shape, jnp.float32)
    return jax.jit(make, out_shardings=NamedSharding(m, spec))()


def _flop_case(count: int, s: int) -> Case:
    m, spec = _by_rows(count)

    def make() -> tuple[jax.Array, jax.Array]:
        x = _ones(m, spec, (count * s, s))
        return x, x

    body = jax.shard_map(jnp.matmul, mesh=m, in_specs=(spec, spec), out_specs=spec)
    return Case(name=f"matmul/{s}", params={"s": s}, candidates={"matmul": body}, make_args=make)


def _write_case(count: int, sizes: Sequence[int]) -> Case:
    """Per-device ``(s x WRITE_K) @ (WRITE_K x s)`` products for each ``s``, interleaved.

    The smallest is the baseline, so each larger one's round-by-round ratio to it says
    what its output costs beyond the flops, whatever the machine's speed that minute.
    """
    m, spec = _by_rows(count)
    top = max(sizes)

    def make() -> tuple[jax.Array, jax.Array]:
        return _ones(m, spec, (count * top, WRITE_K)), _ones(m, spec, (count * WRITE_K, top))

    def product(s: int) -> Callable[..., jax.Array]:
        body = lambda a, b: a[:s] @ b[:, :s]  # noqa: E731
        return jax.shard_map(body, mesh=m, in_specs=(spec, spec), out_specs=spec)

    first, *rest = sorted(sizes)
    return Case(
        name="product-write",
        params={"sizes": ",".join(map(str, sorted(sizes)))},
        candidates={f"product/{s}": product(s) for s in rest},
        baseline=product(first),
        baseline_name=f"product/{first}",
        make_args=make,
    )


def product_write(
    base: tuple[int, float], ratios: Mapping[int, float]
) -> tuple[tuple[tuple[float, float], ...], tuple[tuple[float, float, float], ...]]:
    """``product_write`` points from ``(s x 512) @ (512 x s)`` products timed together.

    Args:
      base: ``(s, median seconds)`` of the smallest product, the reference.
      ratios: ``s ->`` median round-by-round time ratio to the reference, for the others.

    Returns:
      The points ``(output bytes, seconds beyond the reference's rate)``, made
      non-decreasing (the reference's 0), and ``(output bytes, seconds, excess)`` rows.

    Example:
      >>> points, _ = product_write((1024, 0.05), {2048: 4.0, 4096: 19.2})
      >>> [(int(n) >> 20, round(t, 3)) for n, t in points]
      [(4, 0.0), (16, 0.0), (64, 0.16)]
    """
    s0, t0 = base
    rows = [(float(_ITEMSIZE * s0 * s0), t0, 0.0)]
    for s in sorted(ratios):
        flops = (s / s0) ** 2  # the products' flops ratio (k is the same)
        rows.append((float(_ITEMSIZE * s * s), t0 * ratios[s], max(t0 * (ratios[s] - flops), 0.0)))
    points, most = [], 0.0
    for n, _, excess in rows:
        most = max(most, excess)
        points.append((n, most))
    return tuple(points), tuple(rows)


def _ring_case(count: int, rows: int) -> Case:
    """``matmul`` by ring and by all-gather on ``a``, ``b`` split by rows over all devices."""
    from shardkit.linalg import matmul

    m, spec = _by_rows(count)
    n = rows * count

    def make() -> tuple[jax.Array, jax.Array]:
        x = _ones(m, spec, (n, n))
        return x, x

    def algo(name: str) -> Callable[[jax.Array, jax.Array], jax.Array]:
        return lambda a, b: matmul(a, b, algorithm=name)  # type: ignore[arg-type]

    return Case(
        name=f"matmul/ring-vs-allgather/{n}",
        params={"n": n},
        candidates={name: algo(name) for name in ("ring", "allgather")},
        make_args=make,
    )


def panel_step(
    link: Interconnect, count: int, n: int, ring_s: float, allgather_s: float
) -> dict[str, float]:
    """The ring matmul's cost per panel step, from its measured lead or lag on all-gather.

    Both algorithms on ``n x n`` float32 operands split by rows over ``count`` devices
    are priced under ``link`` (its collectives and FLOP rate, no panel-step cost); the
    measured difference ``ring_s - allgather_s`` beyond the predicted one, spread over
    the ring's panel steps, is the cost of one step (0 when the ring does better than
    predicted).

    Example:
      >>> from shardkit.inspect import interconnect
      >>> r = panel_step(interconnect("shared-memory"), 8, 256, ring_s=0.0704, allgather_s=0.0064)
      >>> int(r["panel_steps"]), round(r["panel_step_s"] * 1e3, 3)
      (64, 1.0)
    """
    from shardkit.linalg import matmul

    m, rows = _by_rows(count)
    s = jax.ShapeDtypeStruct((n, n), jnp.float32)
    free = dataclasses.replace(link, panel_step_s=0.0, panel_step_bytes=0.0)
    picks = {
        name: matmul(
            s, s, algorithm=name, mesh=m, in_specs=(rows, rows), interconnect=free, explain=True
        ).chosen  # type: ignore[arg-type]
        for name in ("ring", "allgather")
    }
    steps = picks["ring"].variant.panel_steps
    excess = (ring_s - allgather_s) - (picks["ring"].time_s - picks["allgather"].time_s)
    return {
        "n": float(n),
        "ring_s": ring_s,
        "allgather_s": allgather_s,
        "predicted_ring_s": picks["ring"].time_s,
        "predicted_allgather_s": picks["allgather"].time_s,
        "panel_steps": float(steps),
        "panel_step_s": max(excess, 0.0) / steps if steps else 0.0,
        "panel_step_bytes": float(picks["ring"].variant.panel_step_bytes),
    }


def _groups_and_sizes(
    count: int, group_sizes: Sequence[int] | None, sizes: Sequence[int] | None, quick: bool
) -> tuple[list[int], tuple[int, ...]]:
    """The group sizes and buffer sizes to measure, checked (see :func:`calibrate`)."""
    groups = _group_sizes(count)
    if group_sizes is not None:
        bad = [p for p in group_sizes if p not in groups]
        if bad or not group_sizes:
            raise ValueError(
                f"calibrate: group_sizes={list(group_sizes)}; legal values are divisors of "
                f"the device count {count} above 1: {groups}"
            )
        groups = sorted(set(group_sizes))
    if not groups:
        raise ValueError(
            f"calibrate: {count} device(s); collectives need at least 2 "
            "(simulate more with `shardkit --devices 8 bench calibrate`)"
        )
    size_list = tuple(sizes) if sizes else (QUICK_SIZES if quick else DEFAULT_SIZES)
    if len(set(size_list)) < 2:
        raise ValueError(f"calibrate: sizes={list(size_list)}; give at least two distinct sizes")
    for nbytes in size_list:
        if nbytes % (_ITEMSIZE * max(groups) ** 2):
            raise ValueError(
                f"calibrate: size={nbytes} B is not a multiple of {_ITEMSIZE * max(groups) ** 2}"
                f" B (float32 elements, divisible by the largest group {max(groups)} twice: "
                "the all-gather's input is the size over the group)"
            )
    return groups, size_list


class _Measured(NamedTuple):
    """What the calibration's cases measured, by kind."""

    medians: dict[tuple[str, int, int, bool], list[float]]
    flops: float
    ring_times: dict[str, float]
    write_base: tuple[int, float]
    write_ratios: dict[int, float]


def _measure(cases: Sequence[Any], timing: Timing, console: Console | None) -> _Measured:
    """Run the calibration's cases and sort their times by what they measure."""
    medians: dict[tuple[str, int, int, bool], list[float]] = {}
    flops = 0.0
    ring_times: dict[str, float] = {}
    write_base: tuple[int, float] = (0, 0.0)
    write_ratios: dict[int, float] = {}
    for i, case in enumerate(cases, 1):
        if console is not None:
            console.print(f"[{i}/{len(cases)}] calibrate {case.name}", highlight=False)
        for rec in measure_case(case, suite="calibrate", timing=timing):
            name = rec.candidate
            if name == "matmul":
                s = case.params["s"]
                flops = 2 * s**3 / rec.median_s
                continue
            if name.startswith("product/"):
                s = int(name.split("/")[1])
                if rec.is_baseline:
                    write_base = (s, rec.median_s)
                elif rec.ratio_median is not None:
                    write_ratios[s] = rec.ratio_median
                continue
            if name in ("ring", "allgather"):
                ring_times[name] = rec.median_s
                continue
            params = case.params
            key = (_HLO_KINDS[name], params["group_size"], params["nbytes"], name not in INNER)
            medians.setdefault(key, []).append(rec.median_s)
    return _Measured(medians, flops, ring_times, write_base, write_ratios)


def calibrate(
    *,
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    group_sizes: Sequence[int] | None = None,
    repeat: int | None = None,
    save: bool = True,
    path: str | Path | None = None,
    progress: bool | TextIO = False,
    console: Console | None = None,
) -> Calibration:
    """Measure the collectives and a matmul on the current devices, fit, save the preset.

    Args:
      quick: three sizes and few rounds (about 20-30 s on 8 simulated CPU devices).
      sizes: the full buffers ``n`` to sweep, in bytes (at least two), instead of the
        defaults: each collective's operand, and the all-gather's gathered result.
      group_sizes: the group sizes to measure; default every divisor of the device
        count above 1 (other sizes borrow the nearest measured one).
      repeat: exact timed rounds per size; ``None``: adaptive, as the suites.
      save: write the preset (to ``path``, else the config directory's file for these
        devices, ``shardkit.inspect.internal.preset_path``).
      path: where to save instead of the config directory.
      progress: ``True`` prints progress and the summary on standard output, a text
        file receives them, ``False`` (the default) prints nothing.
      console: deprecated (a rich ``Console``); use ``progress=``.

    Returns:
      The :class:`Calibration`.

    Raises:
      ValueError: fewer than two devices, fewer than two sizes, a size that is not a
        multiple of ``4 p**2`` bytes for the largest group ``p`` (float32 elements that
        split evenly, twice over for the all-gather's input), or a group size that
        does not divide the device count.
    """
    console = resolve_progress("calibrate", console, progress)
    count = len(jax.devices())
    groups, size_list = _groups_and_sizes(count, group_sizes, sizes, quick)
    base = QUICK_TIMING if quick else FULL_TIMING
    # Five rounds at least: with two parameters per fit, a stray round weighs heavily.
    timing = Timing(
        warmup=base.warmup,
        repeat=repeat,
        min_repeat=5,
        max_repeat=max(base.max_repeat, 5),
        budget_s=base.budget_s / 2,
    )
    start = datetime.datetime.now(datetime.UTC)
    sweep = [_collective_case(p, count, n) for p in groups for n in size_list]
    # Passes alternately forward and reverse, each point the median of the passes'
    # medians: on a shared machine a burst of load spoils one size of one pass, rarely
    # two. The matmuls run between the first two passes.
    ring_rows = QUICK_RING_ROWS if quick else RING_ROWS
    passes = [sweep if i % 2 == 0 else sweep[::-1] for i in range(2 if quick else 3)]
    cases = [
        *passes[0],
        _flop_case(count, QUICK_FLOP_SIZE if quick else FLOP_SIZE),
        _write_case(count, QUICK_WRITE_SIZES if quick else WRITE_SIZES),
        _ring_case(count, ring_rows),
        *(case for sweep_pass in passes[1:] for case in sweep_pass),
    ]
    got = _measure(cases, timing, console)
    medians, flops, ring_times = got.medians, got.flops, got.ring_times
    write_base, write_ratios = got.write_base, got.write_ratios
    points = [
        Point(k, p, n, statistics.median(t), lead) for (k, p, n, lead), t in sorted(medians.items())
    ]
    wall = (datetime.datetime.now(datetime.UTC) - start).total_seconds()
    load = tuple(round(v, 2) for v in os.getloadavg()) if hasattr(os, "getloadavg") else ()
    devs = jax.devices()
    created = start.isoformat(timespec="seconds").replace("+00:00", "Z")
    link = fit_interconnect(
        points,
        peak_flops=flops,
        name=f"calibrated-{preset_path(devs).stem}",
        created=created,
        description=(
            f"Measured by `shardkit bench calibrate` on {count} {devs[0].device_kind} "
            f"device(s) at {created} (load average {list(load) or 'unknown'} at the "
            "end): median times (of the passes' medians) per collective kind and group size "
            f"at {len(size_list)} sizes from {min(size_list)} to {max(size_list)} B (the "
            "full buffer; all-gathers and reduce-scatters along a leading and an inner "
            "dimension), interpolated on log-log axes, and their least-squares "
            "t = alpha + n/beta; peak_flops is a float32 matmul with every device busy; "
            "product_write is what a product's output costs beyond its flops; "
            "panel_step_s is what a ring matmul's panel step costs beyond its flops."
        ),
    )
    writes, write_rows = product_write(write_base, write_ratios)
    link = dataclasses.replace(link, product_write=writes)
    ring = panel_step(link, count, ring_rows * count, ring_times["ring"], ring_times["allgather"])
    link = dataclasses.replace(
        link, panel_step_s=ring["panel_step_s"], panel_step_bytes=ring["panel_step_bytes"]
    )
    written = None
    if save:
        written = save_preset(
            link,
            path=path,
            measurements=[dataclasses.asdict(p) for p in points],
        )
    return Calibration(link, tuple(points), flops, written, wall, ring, load, write_rows)
