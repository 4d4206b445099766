"""Timing cases: compile once, warm up, then interleaved timed rounds.

A :class:`Case` holds a ``baseline`` and named ``candidates`` (functions of the same
arguments). :func:`measure_case` compiles each with ``jax.jit(f).lower(*args).compile()``
(the compile time is reported separately), calls each compiled function ``warmup``
times, then times rounds in which the baseline and every candidate run once each, in
the same order every round (``B A1 A2 ... B A1 A2 ...``), each call ending in
``jax.block_until_ready``. Because the members of a round run side by side, the
per-round ratio ``candidate / baseline`` survives a drift of the machine's speed
(see :mod:`shardkit.bench._stats`).

With a fixed ``repeat`` exactly that many rounds run; otherwise rounds run until a
time budget per case is spent, at least ``min_repeat`` and at most ``max_repeat``.
The clock is ``time.perf_counter`` unless one is injected (the tests use a fake).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax

from shardkit._typing import JSONObject, PyTree
from shardkit.bench._record import Record
from shardkit.bench._stats import ratio_median, summarize

__all__ = ["FULL_TIMING", "QUICK_TIMING", "Case", "Timing", "interleave", "measure_case"]

Clock = Callable[[], float]
Compiler = Callable[[Callable[..., Any], tuple[Any, ...]], Callable[[], object]]
Metrics = Callable[[str, float], Mapping[str, float | None]]


@dataclass(frozen=True)
class Timing:
    """How many warm-up calls and timed rounds to run.

    Attributes:
      warmup: untimed calls of each compiled function before the first round.
      repeat: exact number of timed rounds, or ``None`` to stop on ``budget_s``.
      min_repeat: fewest rounds when ``repeat`` is ``None``.
      max_repeat: most rounds when ``repeat`` is ``None``.
      budget_s: seconds of timed rounds per case when ``repeat`` is ``None``.
    """

    warmup: int = 2
    repeat: int | None = None
    min_repeat: int = 3
    max_repeat: int = 50
    budget_s: float = 1.0

    def __post_init__(self) -> None:
        if self.repeat is not None and self.repeat < 1:
            raise ValueError(f"Timing: repeat={self.repeat} must be at least 1")
        if self.warmup < 0 or self.min_repeat < 1 or self.max_repeat < self.min_repeat:
            raise ValueError(
                f"Timing: warmup={self.warmup}, min_repeat={self.min_repeat}, "
                f"max_repeat={self.max_repeat} need warmup >= 0 and "
                "1 <= min_repeat <= max_repeat"
            )


FULL_TIMING = Timing(warmup=2, min_repeat=3, max_repeat=50, budget_s=1.0)
"""Timing of a full run: at least 3 rounds, about a second of rounds per case."""

QUICK_TIMING = Timing(warmup=1, min_repeat=3, max_repeat=10, budget_s=0.05)
"""Timing of a ``--quick`` run: 3 to 10 rounds, about 50 ms of rounds per case."""


@dataclass(frozen=True)
class Case:
    """One benchmark case: a baseline and candidates timed side by side.

    Attributes:
      name: unique within its suite, e.g. ``"2x4/y/64KiB"``.
      params: what the case measures (scalars; they become table columns and plot
        axes), e.g. ``{"mesh": "2x4", "axis": "y", "bytes_per_device": 65536}``.
      candidates: name -> function of ``*make_args()``, each timed against the baseline.
      baseline: the reference function, or ``None`` (no ratios then).
      baseline_name: the baseline's name in the results.
      make_args: builds the arguments (called once per case, so that large inputs
        exist only while their case runs).
      metrics: ``metrics(name, median_seconds)`` -> derived figures for one function
        (e.g. bandwidths); ``None`` for none.
    """

    name: str
    params: JSONObject
    candidates: Mapping[str, Callable[..., PyTree]]
    baseline: Callable[..., PyTree] | None = None
    baseline_name: str = "baseline"
    make_args: Callable[[], tuple[PyTree, ...]] = tuple
    metrics: Metrics | None = None


def _jit_compile(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], object]:
    compiled = jax.jit(fn).lower(*args).compile()

    def call() -> object:
        return jax.block_until_ready(compiled(*args))

    return call


def interleave(
    calls: Mapping[str, Callable[[], object]],
    /,
    *,
    timing: Timing,
    clock: Clock = time.perf_counter,
) -> dict[str, list[float]]:
    """Time rounds of ``calls``, each round calling every entry once, in mapping order.

    Args:
      calls: name -> zero-argument function that runs to completion (blocking).
      timing: round count or time budget (see :class:`Timing`); warm-up is not done here.
      clock: returns seconds; ``time.perf_counter`` by default.

    Returns:
      name -> one duration per round, in round order.

    Example:
      >>> ticks = iter(range(100))
      >>> out = interleave({"a": lambda: None, "b": lambda: None},
      ...                  timing=Timing(repeat=2), clock=lambda: float(next(ticks)))
      >>> out
      {'a': [1.0, 1.0], 'b': [1.0, 1.0]}
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    start = clock()
    rounds = 0
    while True:
        for name, call in calls.items():
            t0 = clock()
            call()
            times[name].append(clock() - t0)
        rounds += 1
        if timing.repeat is not None:
            if rounds >= timing.repeat:
                break
        elif rounds >= timing.max_repeat or (
            rounds >= timing.min_repeat and clock() - start >= timing.budget_s
        ):
            break
    return times


def measure_case(
    case: Case,
    /,
    *,
    suite: str,
    timing: Timing,
    clock: Clock = time.perf_counter,
    compiler: Compiler = _jit_compile,
) -> list[Record]:
    """Compile, warm up and time one case; one :class:`Record` per function.

    Args:
      case: the case.
      suite: the suite's name, stored in every record.
      timing: warm-up and rounds.
      clock: returns seconds; injected by tests.
      compiler: ``compiler(fn, args)`` -> zero-argument blocking call; by default
        ``jax.jit(fn).lower(*args).compile()`` wrapped in ``jax.block_until_ready``.

    Returns:
      The baseline's record first (if any), then one per candidate, each with compile
      time, raw timings, median/min/max, the median round-by-round ratio to the
      baseline and the case's metrics.
    """
    args = case.make_args()
    fns: dict[str, Callable[..., Any]] = {}
    if case.baseline is not None:
        fns[case.baseline_name] = case.baseline
    fns.update(case.candidates)
    calls: dict[str, Callable[[], object]] = {}
    compile_s: dict[str, float] = {}
    for name, fn in fns.items():
        t0 = clock()
        calls[name] = compiler(fn, args)
        compile_s[name] = clock() - t0
    for call in calls.values():
        for _ in range(timing.warmup):
            call()
    times = interleave(calls, timing=timing, clock=clock)
    del calls, args
    base = times.get(case.baseline_name) if case.baseline is not None else None
    records = []
    for name in fns:
        is_base = case.baseline is not None and name == case.baseline_name
        median = summarize(times[name]).median
        records.append(
            Record(
                suite=suite,
                case=case.name,
                candidate=name,
                times_s=tuple(times[name]),
                is_baseline=is_base,
                baseline=case.baseline_name if case.baseline is not None else None,
                params=dict(case.params),
                metrics=dict(case.metrics(name, median)) if case.metrics is not None else {},
                compile_s=compile_s[name],
                ratio_median=(
                    ratio_median(times[name], base) if base is not None and not is_base else None
                ),
            )
        )
    return records
