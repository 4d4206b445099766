"""Statistics, interleaving and case measurement with fake clocks and fake compilers."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from shardkit.bench import (
    Case,
    Timing,
    interleave,
    measure_case,
    paired_ratios,
    ratio_median,
    summarize,
)


def test_summarize_median_min_max() -> None:
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max, s.n) == (2.5, 1.0, 10.0, 4)


def test_summarize_rejects_empty() -> None:
    with pytest.raises(ValueError, match="samples"):
        summarize([])


def test_ratios_are_paired_round_by_round() -> None:
    # A drifting machine: every round is twice as slow as the last, yet the paired
    # ratio stays exactly 3, while the ratio of medians would not see the pairing.
    base = [1.0, 2.0, 4.0, 8.0, 16.0]
    cand = [3 * b for b in base]
    assert paired_ratios(cand, base) == [3.0] * 5
    assert ratio_median(cand, base) == 3.0
    with pytest.raises(ValueError, match="equal and non-zero"):
        paired_ratios([1.0], [1.0, 2.0])


def test_interleave_alternates_candidates_and_baseline() -> None:
    order: list[str] = []
    ticks = itertools.count()
    calls = {name: (lambda n=name: order.append(n)) for name in ("base", "A", "B")}
    times = interleave(calls, timing=Timing(repeat=3), clock=lambda: float(next(ticks)))
    assert order == ["base", "A", "B"] * 3
    assert {k: len(v) for k, v in times.items()} == {"base": 3, "A": 3, "B": 3}


def test_interleave_stops_on_budget_with_a_minimum() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    times = interleave(
        {"a": lambda: None}, timing=Timing(min_repeat=3, max_repeat=50, budget_s=0.1), clock=clock
    )
    assert len(times["a"]) == 3
    times = interleave(
        {"a": lambda: None}, timing=Timing(min_repeat=1, max_repeat=4, budget_s=1e9), clock=clock
    )
    assert len(times["a"]) == 4


@pytest.mark.parametrize(
    "kwargs", [{"repeat": 0}, {"warmup": -1}, {"min_repeat": 5, "max_repeat": 2}]
)
def test_timing_validation(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="Timing"):
        Timing(**kwargs)


def test_measure_case_records_with_fake_compiler_and_clock() -> None:
    durations = {"base": 1.0, "fast": 0.5, "slow": 2.0}
    now = [0.0]
    warm: list[str] = []

    def clock() -> float:
        return now[0]

    def compiler(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], object]:
        now[0] += 10.0  # compile time, reported apart from the timings
        name = fn(*args)

        def call() -> object:
            warm.append(name)
            now[0] += durations[name]
            return None

        return call

    case = Case(
        name="c",
        params={"n": 4},
        candidates={"fast": lambda x: "fast", "slow": lambda x: "slow"},
        baseline=lambda x: "base",
        baseline_name="base",
        make_args=lambda: (0,),
        metrics=lambda name, t: {"per_s": 1 / t},
    )
    records = measure_case(
        case, suite="s", timing=Timing(warmup=2, repeat=4), clock=clock, compiler=compiler
    )
    assert [r.candidate for r in records] == ["base", "fast", "slow"]
    assert warm[:6] == ["base", "base", "fast", "fast", "slow", "slow"]
    base, fast, slow = records
    assert base.is_baseline
    assert base.ratio_median is None
    assert fast.ratio_median == 0.5
    assert slow.ratio_median == 2.0
    assert fast.compile_s == 10.0
    assert fast.times_s == (0.5,) * 4
    assert fast.median_s == 0.5
    assert slow.metrics == {"per_s": 0.5}
    assert base.params == {"n": 4}
    assert base.suite == "s"
