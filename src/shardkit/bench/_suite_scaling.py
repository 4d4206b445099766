"""The ``scaling`` suite: strong and weak scaling of fft, solve, qr and matmul.

Each case is one (operation, mode, device count ``p``) with ``p`` in 1, 2, 4, 8 (the
first ``p`` devices, a 1-D Auto-axes mesh ``x``; a process has a fixed number of
simulated devices, and these sub-meshes of it are what varies):

``strong``
  a fixed problem: ``fft`` an ``n^3`` complex64 volume, ``solve`` an ``n x n``
  system with one right-hand side, ``qr`` an ``n x n`` matrix, ``matmul`` two
  ``n x n`` matrices (``algorithm="auto"``), all split by rows (``P('x')``); ``n``
  is 128 for fft and 2048 for the others (``--sizes`` gives one per operation, in
  the order fft, solve, qr, matmul; ``--quick`` 16 and 64).
``weak``
  a fixed amount of work per device: the edge grows as ``n p^(1/3)`` (rounded to a
  multiple of ``p``) from ``n`` = 64 for fft and 1024 for the others on one device,
  so that ``p`` devices do about ``p`` times the one-device work.

The baseline of every case is the same operation on one device at the one-device size
(``n``), interleaved with the ``p``-device run, so the round-by-round ratio survives
the drifts of a shared machine. From it, :func:`derive` adds the **efficiency**
``(work_p / work_1) / (p * ratio)`` (1 is perfect scaling; ``work`` the operation's
flops) and the cost model's **prediction** of the ``p``-device time: the one-device
time scaled by the work and divided by the devices' share of the host's cores (the
simulated devices of one process share its cores: compute beyond that many devices
does not speed up), plus the predicted time of the compiled program's collectives
under the default cost model (:func:`shardkit.inspect.comms`). The conclusions give
the median prediction error on 2, 4 and 8 devices, and the prediction for the same
workloads on 64 to 1024 devices of the ``ici`` preset: compute at the preset's peak
FLOP rate, and the collectives of the 2-, 4- and 8-device programs extrapolated in
``p`` (count and message size each follow the power law fitted to those three).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit.bench._record import Record
from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._timing import Case
from shardkit.inspect import INTERCONNECTS, Interconnect, comms
from shardkit.inspect.internal import KINDS

__all__ = [
    "CLUSTER_DEVICES",
    "CLUSTER_PRESET",
    "DEVICES",
    "MODES",
    "OPS",
    "cluster_prediction",
    "derive",
    "host_cores",
    "scaling_case",
    "work",
]

OPS = ("fft", "solve", "qr", "matmul")
"""The operations measured."""

MODES = ("strong", "weak")
"""Strong scaling (a fixed problem) and weak scaling (fixed work per device)."""

DEVICES = (1, 2, 4, 8)
"""The device counts measured (those the process has)."""

CLUSTER_DEVICES = (64, 128, 256, 512, 1024)
"""The device counts of the cluster predictions."""

CLUSTER_PRESET = "ici"
"""The named interconnect preset the cluster predictions use."""

_SIZES = {"fft": 128, "solve": 2048, "qr": 2048, "matmul": 2048}
_WEAK_SIZES = {"fft": 64, "solve": 1024, "qr": 1024, "matmul": 1024}
_QUICK_SIZES = {"fft": 16, "solve": 64, "qr": 64, "matmul": 64}
_BASELINE = "1 device"
_CANDIDATE = "shardkit"


def work(op: str, n: float, /) -> float:
    """Floating-point operations of ``op`` at edge ``n`` (the usual leading terms).

    ``fft``: ``5 N log2 N`` for ``N = n^3`` complex points; ``solve``: ``2/3 n^3``
    (LU); ``qr``: ``4/3 n^3`` (Householder, square); ``matmul``: ``2 n^3``.

    Example:
      >>> work("matmul", 10), work("fft", 2)
      (2000.0, 120.0)
    """
    if op == "fft":
        points = float(n) ** 3
        return 5 * points * math.log2(points)
    scale = {"solve": 2 / 3, "qr": 4 / 3, "matmul": 2.0}[op]
    return scale * float(n) ** 3


def host_cores() -> int:
    """The CPU cores this process may run on (its simulated devices share them)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _size(base: int, mode: str, p: int) -> int:
    # Weak scaling: the edge grows as p^(1/3), rounded to a multiple of p.
    if mode == "strong" or p == 1:
        return base
    return max(p, round(base * p ** (1 / 3) / p) * p)


def _args(op: str, n: int, m: Any) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng(0)
    rows = NamedSharding(m, P("x"))
    if op == "fft":
        x = rng.standard_normal((n, n, n)) + 1j * rng.standard_normal((n, n, n))
        return (jax.device_put(x.astype(np.complex64), rows),)
    a = rng.standard_normal((n, n)).astype(np.float32)
    if op == "solve":
        return jax.device_put(a, rows), jax.device_put(
            np.ones(n, np.float32), NamedSharding(m, P())
        )
    if op == "qr":
        return (jax.device_put(a, rows),)
    b = rng.standard_normal((n, n)).astype(np.float32)
    return jax.device_put(a, rows), jax.device_put(b, rows)


def _op(op: str, m: Any) -> Callable[..., Any]:
    from shardkit.fft import fftn
    from shardkit.linalg import matmul, qr, solve

    spec = P("x")
    return {
        "fft": lambda x: fftn(x),
        "solve": lambda a, b: solve(a, b, mesh=m, spec=spec),
        "qr": lambda a: tuple(qr(a, mesh=m, spec=spec)),
        "matmul": lambda a, b: matmul(a, b, mesh=m, in_specs=(spec, spec)),
    }[op]


def _structs(op: str, n: int, m: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
    rows = NamedSharding(m, P("x"))
    if op == "fft":
        return (jax.ShapeDtypeStruct((n, n, n), jnp.complex64, sharding=rows),)
    a = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=rows)
    if op == "solve":
        return a, jax.ShapeDtypeStruct((n,), jnp.float32, sharding=NamedSharding(m, P()))
    return (a,) if op == "qr" else (a, a)


def _comm_metrics(op: str, n: int, m: Any) -> dict[str, float | None]:
    """Predicted communication seconds, and per collective kind its runs and mean message."""
    report = comms(_op(op, m), *_structs(op, n, m))
    out: dict[str, float | None] = {"comm_s": report.comm_time_s}
    for kind in KINDS:
        found = [c for c in report.collectives if c.kind == kind]
        runs = sum(c.count for c in found)
        if runs:
            sent = sum(c.sent_bytes * c.count for c in found) / runs
            group = sum(c.group_size * c.count for c in found) / runs
            out |= {f"{kind} runs": float(runs), f"{kind} sent": sent, f"{kind} group": group}
    return out


def scaling_case(op: str, mode: str, p: int, n1: int, /) -> Case:
    """The case of ``op`` in ``mode`` (``"strong"`` or ``"weak"``) on the first ``p``
    devices, ``n1`` the one-device edge; its baseline is ``op`` on one device at ``n1``.

    Raises:
      ValueError: an unknown ``op`` or ``mode`` (the message lists the legal ones).
    """
    from shardkit.layout import mesh

    if op not in OPS or mode not in MODES:
        raise ValueError(
            f"scaling_case: op={op!r}, mode={mode!r}; legal values are {OPS} and {MODES}"
        )
    one, m = mesh(1, "x", axis_types="auto"), mesh(p, "x", axis_types="auto")
    n = _size(n1, mode, p)
    base_fn, fn = _op(op, one), _op(op, m)
    k = len(_structs(op, n, m))
    fixed: dict[str, float | None] = {
        "work_ratio": work(op, n) / work(op, n1),
        "host_cores": float(host_cores()),
    }
    fixed |= _comm_metrics(op, n, m) if p > 1 else {"comm_s": 0.0}

    def make() -> tuple[Any, ...]:
        return (*_args(op, n1, one), *_args(op, n, m))

    return Case(
        name=f"{op}/{mode}/{p}",
        params={"op": op, "mode": mode, "devices": p, "n": n, "series": op},
        candidates={_CANDIDATE: lambda *a: fn(*a[k:])},
        baseline=lambda *a: base_fn(*a[:k]),
        baseline_name=_BASELINE,
        make_args=make,
        metrics=partial(_case_metrics, fixed=fixed),
    )


def _cases(config: SuiteConfig) -> list[Case]:
    count = len(jax.devices())
    sizes = {"strong": _SIZES, "weak": _WEAK_SIZES}
    if config.quick:
        sizes = dict.fromkeys(MODES, _QUICK_SIZES)
    if config.sizes:
        given = dict(zip(OPS, (config.sizes * len(OPS))[: len(OPS)], strict=True))
        sizes = dict.fromkeys(MODES, given)
    return [
        scaling_case(op, mode, p, sizes[mode][op])
        for op in OPS
        for mode in MODES
        for p in DEVICES
        if p <= count
    ]


def _case_metrics(
    name: str, seconds: float, *, fixed: Mapping[str, float | None]
) -> Mapping[str, float | None]:
    del seconds
    return dict(fixed) if name == _CANDIDATE else {}


def derive(records: Sequence[Record], /) -> list[Record]:
    """Add each run's efficiency, predicted seconds and prediction error.

    The prediction of a ``p``-device run is its case's one-device time times the work
    ratio, divided by ``min(p, host cores)``, plus the predicted ``comm_s``.

    Example:
      >>> base = Record("scaling", "c", "1 device", (1.0,), is_baseline=True)
      >>> run = Record("scaling", "c", "shardkit", (0.5,), ratio_median=0.5,
      ...              params={"devices": 2}, metrics={"work_ratio": 1.0, "comm_s": 0.1,
      ...              "host_cores": 2})
      >>> out = derive([base, run])[1].metrics
      >>> out["efficiency"], round(out["predicted_s"], 3), round(out["prediction_error"], 3)
      (1.0, 0.6, 0.2)
    """
    base = {r.case: r.median_s for r in records if r.is_baseline}
    out = []
    for r in records:
        ratio, ratio_w, comm = r.ratio_median, r.metric("work_ratio"), r.metric("comm_s")
        if r.is_baseline or ratio is None or ratio_w is None or comm is None or r.case not in base:
            out.append(r)
            continue
        p = int(r.params["devices"])
        cores = int(r.metric("host_cores") or 1)
        predicted = base[r.case] * ratio_w / min(p, cores) + comm
        extra = {
            "efficiency": ratio_w / (p * ratio),
            "predicted_s": predicted,
            "prediction_error": (predicted - r.median_s) / r.median_s,
        }
        out.append(replace(r, metrics={**r.metrics, **extra}))
    return out


def _full_buffer(kind: str, sent: float, group: int) -> float:
    """The buffer the cost formulas take, from the bytes one device sends (the inverse
    of :func:`shardkit.inspect.internal.traffic`'s ring convention)."""
    if kind in ("collective-permute", "collective-broadcast"):
        return sent
    share = (group - 1) / group
    return sent / (2 * share if kind == "all-reduce" else share)


def _power_law(points: Sequence[tuple[float, float]], p: float) -> float:
    """Least-squares ``y = a x^b`` through ``points`` (positive), evaluated at ``p``."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    if len(points) < 2:
        return math.exp(ys[0])
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return math.exp(my + b * (math.log(p) - mx))


def cluster_prediction(
    runs: Sequence[Record], op: str, n1: int, mode: str, p: int, link: Interconnect, /
) -> tuple[float, float]:
    """Predicted ``(seconds, efficiency)`` of ``op`` on ``p`` devices of ``link``.

    ``runs`` are the measured multi-device records of one (op, mode): the collectives
    of their compiled programs, per kind, are extrapolated to ``p`` (runs, bytes sent
    per device and group size each by the power law in the device count fitted to
    them); compute is the work over ``p`` at ``link.peak_flops``. The efficiency is
    the one-device time (work at peak) over ``p`` times this, scaled by the work.
    """
    # The edge a weak workload would have, unrounded (nothing needs to divide here).
    n = n1 if mode == "strong" else n1 * p ** (1 / 3)
    comm = 0.0
    for kind in KINDS:
        pts = [
            (float(r.params["devices"]), r.metric(f"{kind} runs"), r.metric(f"{kind} sent"))
            for r in runs
            if r.metric(f"{kind} runs")
        ]
        groups = [(float(r.params["devices"]), r.metric(f"{kind} group")) for r in runs]
        if not pts:
            continue
        count = _power_law([(d, c) for d, c, _ in pts if c], p)
        sent = _power_law([(d, s) for d, _, s in pts if s], p)
        frac = statistics.fmean(g / d for d, g in groups if g)
        group = max(2, round(frac * p))
        comm += count * link.time(kind, group, _full_buffer(kind, sent, group))
    seconds = work(op, n) / p / link.peak_flops + comm
    one = work(op, n1) / link.peak_flops
    return seconds, (work(op, n) / work(op, n1)) * one / (p * seconds)


def _conclusions(records: Sequence[Record]) -> list[str]:
    # One device is its own baseline: the prediction is checked on 2, 4 and 8.
    runs = [
        r
        for r in records
        if not r.is_baseline
        and r.metric("prediction_error") is not None
        and int(r.params["devices"]) > 1
    ]
    errors = [abs(e) for r in runs if (e := r.metric("prediction_error")) is not None]
    if not errors:
        return []
    lines = [
        f"Prediction error on 2, 4 and 8 devices: median |predicted - measured| / measured "
        f"= {statistics.median(errors):.1%} over {len(errors)} runs (target 30%); by "
        "operation: "
        + ", ".join(
            f"{op} {statistics.median(v):.0%}"
            for op in OPS
            if (
                v := [
                    abs(e)
                    for r in runs
                    if r.params["op"] == op and (e := r.metric("prediction_error")) is not None
                ]
            )
        )
        + f"; the host has {host_cores()} core(s) for its simulated devices."
    ]
    for mode in MODES:
        lines.append(f"Efficiency, {mode} scaling (measured): " + _efficiency_table(runs, mode))
    link = INTERCONNECTS[CLUSTER_PRESET]
    for op in OPS:
        for mode in MODES:
            mine = [r for r in runs if r.params["op"] == op and r.params["mode"] == mode]
            base = [r for r in records if r.params.get("op") == op and r.params["devices"] == 1]
            if not mine or not base:
                continue
            n1 = int(base[0].params["n"])
            cells = []
            for p in CLUSTER_DEVICES:
                t, eff = cluster_prediction(mine, op, n1, mode, p, link)
                cells.append(f"{p}: {t * 1e3:.3g} ms (efficiency {eff:.2g})")
            lines.append(
                f"Predicted on {CLUSTER_PRESET}, {op} {mode} (n={n1} on one device): "
                + ", ".join(cells)
            )
    return lines


def _efficiency_table(runs: Sequence[Record], mode: str) -> str:
    cells = []
    for op in OPS:
        effs = [
            f"{r.params['devices']}: {e:.0%}"
            for r in runs
            if r.params["op"] == op
            and r.params["mode"] == mode
            and (e := r.metric("efficiency")) is not None
        ]
        if effs:
            cells.append(f"{op} " + ", ".join(effs))
    return "; ".join(cells)


def _notes() -> list[str]:
    return [
        "Baseline: the same operation on one device at the one-device size, interleaved; "
        "ratio = p-device time / one-device time, round by round.",
        "efficiency = (work_p / work_1) / (p * ratio); work = flops (fft 5 N log2 N, "
        "solve 2/3 n^3, qr 4/3 n^3, matmul 2 n^3).",
        "predicted = one-device time * work ratio / min(p, host cores) + comm_s "
        "(the compiled program's collectives under the default cost model).",
        f"Cluster predictions: the {CLUSTER_PRESET} preset "
        f"({INTERCONNECTS[CLUSTER_PRESET].description}), compute at its peak FLOP rate.",
    ]


SUITE = Suite(
    name="scaling",
    description=(
        "Strong (fixed n) and weak (fixed work per device) scaling of fft, solve, qr and "
        "matmul over 1, 2, 4 and 8 devices, with the cost model's predictions."
    ),
    baseline="1 device: the same operation on one device at the one-device size.",
    cases=_cases,
    columns=(
        Column("n", "n"),
        Column("work_ratio", "work/work1", "ratio"),
        Column("efficiency", "efficiency", "fraction"),
        Column("comm_s", "comm (model)", "s"),
        Column("predicted_s", "predicted", "s"),
        Column("prediction_error", "pred. error", "%"),
    ),
    plots=(
        PlotSpec("efficiency", "devices", "efficiency", "mode", "series", "efficiency", "devices"),
        PlotSpec("time", "devices", "median_s", "mode", "series", "median time (s)", "devices"),
    ),
    key_params=("op", "mode", "devices"),
    notes=_notes,
    conclusions=_conclusions,
    derive=derive,
)
