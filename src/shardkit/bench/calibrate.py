"""``shardkit bench calibrate``: measure the collectives and a matmul, fit, save a preset.

For every group size ``p`` the devices allow (the divisors of the device count above
1), every device holds a ``float32`` buffer and the five collectives of the
``collectives`` suite run over a mesh axis of size ``p`` (mesh ``(N/p, p)``, so every
device takes part, as in the suites), timed at a short sweep of sizes the way the
suites time them (:func:`shardkit.bench.runner.measure_case`). Per collective kind and
group size, ``t = alpha + n / beta`` is fitted by least squares on *relative* residuals
(every size counts alike; ``n`` is the full buffer, as :meth:`Interconnect.time` takes
it). A per-device ``s x s x s`` matmul run on all devices at once gives the FLOP rate
one device gets while the others compute too.

The result is an :class:`~shardkit.inspect.Interconnect` with those fits, saved as the
preset of these devices (:mod:`shardkit.inspect._presets`), which ``inspect``,
``comms`` and ``matmul(algorithm="auto")`` then use by default. A fit's ``alpha``
includes launching a one-collective program, so it is an upper bound for a collective
inside a larger program.
"""

from __future__ import annotations

import dataclasses
import datetime
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from rich.console import Console
from rich.table import Table

from shardkit._display import rich_text
from shardkit.bench.collectives import _HLO_KINDS, _bodies, _make_input, _shard_mapped, nccl_bytes
from shardkit.bench.runner import FULL_TIMING, QUICK_TIMING, Case, Timing, measure_case
from shardkit.inspect._presets import preset_path, save_preset
from shardkit.inspect.interconnect import CollectiveFit, Interconnect

__all__ = [
    "DEFAULT_SIZES",
    "QUICK_SIZES",
    "Calibration",
    "Point",
    "calibrate",
    "fit_collective",
    "fit_interconnect",
]

DEFAULT_SIZES = (1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
"""Bytes per device of a full calibration: 1 KiB to 16 MiB (a 4096 x 4096 float32
matmul on 8 devices moves blocks of 8 to 32 MiB)."""

QUICK_SIZES = (4 << 10, 128 << 10, 1 << 20)
"""Bytes per device of ``--quick``: three sizes, one more than the two parameters."""

FLOP_SIZE = 768
"""``s`` of the per-device ``s x s x s`` float32 matmul that measures the FLOP rate."""

QUICK_FLOP_SIZE = 384

_ITEMSIZE = 4


@dataclass(frozen=True)
class Point:
    """One measured collective: ``seconds`` (median) for ``nbytes`` over ``group_size``."""

    kind: str
    group_size: int
    nbytes: int
    seconds: float


def fit_collective(points: Sequence[Point], /) -> CollectiveFit:
    """Fit ``t = alpha + n / beta`` to points of one kind and group size.

    Least squares on relative residuals ``(alpha + n g - t) / t`` with ``g = 1/beta``,
    so a 1 KiB point weighs as much as a 4 MiB one. A negative ``alpha`` is refitted
    as 0 (pure bandwidth); a non-positive slope as latency only (a huge ``beta``).

    Raises:
      ValueError: fewer than two distinct sizes, or points of mixed kind/group.

    Example:
      >>> pts = [Point("all-reduce", 4, n, 1e-5 + n / 2e9) for n in (1e3, 1e6)]
      >>> f = fit_collective(pts)
      >>> round(f.latency_s * 1e6, 3), round(f.bandwidth / 1e9, 3)
      (10.0, 2.0)
    """
    keys = {(p.kind, p.group_size) for p in points}
    if len(keys) != 1 or len({p.nbytes for p in points}) < 2:
        raise ValueError(
            f"fit_collective: need points of one (kind, group_size) at two or more sizes; "
            f"got {sorted(keys)} at sizes {sorted({p.nbytes for p in points})}"
        )
    ((kind, group),) = keys
    t = np.array([p.seconds for p in points], float)
    n = np.array([p.nbytes for p in points], float)
    design = np.stack([1 / t, n / t], axis=1)  # rows: (alpha, g) -> predicted / t
    (alpha, slope), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha, slope = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    if slope <= 0:
        alpha, slope = float(np.sum(1 / t) / np.sum((1 / t) ** 2)), 0.0
    bandwidth = 1 / slope if slope > 0 else 1e18
    return CollectiveFit(kind, int(group), float(alpha), float(bandwidth))


def fit_interconnect(
    points: Iterable[Point],
    /,
    *,
    peak_flops: float,
    name: str,
    created: str,
    description: str = "",
) -> Interconnect:
    """An ``Interconnect`` holding one :class:`CollectiveFit` per (kind, group size).

    Its ``latency_s`` and ``bandwidth`` (used only for kinds that were not measured)
    are the medians of the fits'.
    """
    by_key: dict[tuple[str, int], list[Point]] = {}
    for p in points:
        by_key.setdefault((p.kind, p.group_size), []).append(p)
    if not by_key:
        raise ValueError("fit_interconnect: no points to fit")
    fits = tuple(fit_collective(by_key[k]) for k in sorted(by_key))
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
    """

    interconnect: Interconnect
    points: tuple[Point, ...]
    flops_per_s: float
    path: Path | None
    wall_s: float

    def fit_errors(self) -> dict[tuple[str, int], float]:
        """(kind, group) -> median |predicted - measured| / measured over its points."""
        out: dict[tuple[str, int], list[float]] = {}
        for p in self.points:
            pred = self.interconnect.time(p.kind, p.group_size, p.nbytes)
            out.setdefault((p.kind, p.group_size), []).append(abs(pred - p.seconds) / p.seconds)
        return {k: statistics.median(v) for k, v in out.items()}

    def __rich__(self) -> Table:
        link = self.interconnect
        table = Table(
            title=f"calibrated preset {link.name} ({len(self.points)} points, "
            f"{self.wall_s:.1f} s; matmul {self.flops_per_s / 1e9:.2f} GFLOP/s per device)",
            title_justify="left",
        )
        for col in ("collective", "p", "alpha", "beta", "fit error (median)"):
            table.add_column(col, justify="left" if col == "collective" else "right")
        errors = self.fit_errors()
        for f in link.fits:
            table.add_row(
                f.kind,
                str(f.group_size),
                f"{f.latency_s * 1e6:.1f} us",
                f"{f.bandwidth / 1e9:.3g} GB/s" if f.bandwidth < 1e17 else "unbounded",
                f"{errors[(f.kind, f.group_size)] * 100:.1f}%",
            )
        return table

    def __str__(self) -> str:
        return rich_text(self, width=120)


def _group_sizes(count: int) -> list[int]:
    return [p for p in range(2, count + 1) if count % p == 0]


def _collective_case(p: int, count: int, nbytes: int) -> Case:
    from shardkit.layout import mesh

    m = (
        mesh((count,), ("x",), axis_types="explicit")
        if p == count
        else mesh((count // p, p), ("x", "y"), axis_types="explicit")
    )
    axis = m.axis_names[-1]
    wrap = partial(_shard_mapped, mesh=m, spec=P(m.axis_names, None))
    return Case(
        name=f"p{p}/{nbytes}",
        params={"group_size": p, "bytes_per_device": nbytes},
        candidates={c: wrap(body) for c, body in _bodies(axis, p).items()},
        make_args=lambda: (_make_input(m, nbytes // _ITEMSIZE),),
    )


def _flop_case(count: int, s: int) -> Case:
    from shardkit.layout import mesh

    m = mesh((count,), ("x",), axis_types="explicit")
    spec = P("x", None)

    def make() -> tuple[jax.Array, jax.Array]:
        sharding = NamedSharding(m, spec)
        make_one = partial(jnp.ones, (count * s, s), jnp.float32)
        x = jax.jit(make_one, out_shardings=sharding)()
        return x, x

    body = jax.shard_map(jnp.matmul, mesh=m, in_specs=(spec, spec), out_specs=spec)
    return Case(name=f"matmul/{s}", params={"s": s}, candidates={"matmul": body}, make_args=make)


def calibrate(
    *,
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    group_sizes: Sequence[int] | None = None,
    repeat: int | None = None,
    save: bool = True,
    path: str | Path | None = None,
    console: Console | None = None,
) -> Calibration:
    """Measure the collectives and a matmul on the current devices, fit, save the preset.

    Args:
      quick: two sizes and few rounds (about 20 s on 8 simulated CPU devices).
      sizes: bytes per device to sweep (at least two), instead of the defaults.
      group_sizes: the group sizes to measure; default every divisor of the device
        count above 1 (other sizes borrow the nearest measured one).
      repeat: exact timed rounds per size; ``None``: adaptive, as the suites.
      save: write the preset (to ``path``, else the config directory's file for these
        devices, :func:`shardkit.inspect._presets.preset_path`).
      path: where to save instead of the config directory.
      console: where progress goes; ``None``: silent.

    Returns:
      The :class:`Calibration`.

    Raises:
      ValueError: fewer than two devices, fewer than two sizes, a size that is not a
        whole number of float32 elements per device divisible by every group size, or
        a group size that does not divide the device count.
    """
    count = len(jax.devices())
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
        if nbytes % (_ITEMSIZE * count):
            raise ValueError(
                f"calibrate: size={nbytes} B per device is not a multiple of "
                f"{_ITEMSIZE * count} B (float32 elements divisible by {count} devices)"
            )
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
    cases = [_collective_case(p, count, n) for p in groups for n in size_list]
    cases.append(_flop_case(count, QUICK_FLOP_SIZE if quick else FLOP_SIZE))
    points: list[Point] = []
    flops = 0.0
    for i, case in enumerate(cases, 1):
        if console is not None:
            console.print(f"[{i}/{len(cases)}] calibrate {case.name}", highlight=False)
        for rec in measure_case(case, suite="calibrate", timing=timing):
            if rec["candidate"] == "matmul":
                s = case.params["s"]
                flops = 2 * s**3 / rec["median_s"]
                continue
            p, per_device = case.params["group_size"], case.params["bytes_per_device"]
            name = rec["candidate"]
            points.append(
                Point(_HLO_KINDS[name], p, nccl_bytes(name, per_device, p), rec["median_s"])
            )
    wall = (datetime.datetime.now(datetime.UTC) - start).total_seconds()
    devs = jax.devices()
    created = start.isoformat(timespec="seconds").replace("+00:00", "Z")
    link = fit_interconnect(
        points,
        peak_flops=flops,
        name=f"calibrated-{preset_path(devs).stem}",
        created=created,
        description=(
            f"Measured by `shardkit bench calibrate` on {count} {devs[0].device_kind} "
            f"device(s) at {created}: t = alpha + n/beta per collective kind and group "
            f"size, fitted on {len(size_list)} sizes from {min(size_list)} to "
            f"{max(size_list)} B per device; peak_flops is a float32 matmul with every "
            "device busy."
        ),
    )
    written = None
    if save:
        written = save_preset(
            link,
            path=path,
            measurements=[dataclasses.asdict(p) for p in points],
        )
    return Calibration(link, tuple(points), flops, written, wall)
