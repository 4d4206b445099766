"""Benchmarks: suites of interleaved, side-by-side timings and their reports.

``run_bench(["collectives"], out="bench-out")`` runs the registered suites (see
:mod:`shardkit.bench.registry`), each case compiled once, warmed up and timed in
rounds that interleave candidates with their baseline, and writes ``results.json``
(schema ``shardkit.bench/1``, :mod:`shardkit.bench.report`), ``report.md`` and
``report.html`` with PNG plots (matplotlib: the ``bench`` extra).
"""

from shardkit.bench.env import environment
from shardkit.bench.registry import (
    Column,
    PlotSpec,
    Suite,
    SuiteConfig,
    register_suite,
    registered_suites,
)
from shardkit.bench.report import SCHEMA, read_results, validate_results, write_report
from shardkit.bench.run import DEFAULT_MESHES, BenchResult, parse_size, run_bench
from shardkit.bench.runner import FULL_TIMING, QUICK_TIMING, Case, Timing, interleave, measure_case
from shardkit.bench.stats import Summary, paired_ratios, ratio_median, summarize

__all__ = [
    "DEFAULT_MESHES",
    "FULL_TIMING",
    "QUICK_TIMING",
    "SCHEMA",
    "BenchResult",
    "Case",
    "Column",
    "PlotSpec",
    "Suite",
    "SuiteConfig",
    "Summary",
    "Timing",
    "environment",
    "interleave",
    "measure_case",
    "paired_ratios",
    "parse_size",
    "ratio_median",
    "read_results",
    "register_suite",
    "registered_suites",
    "run_bench",
    "summarize",
    "validate_results",
    "write_report",
]
