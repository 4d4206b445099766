"""Benchmarks: suites of interleaved, side-by-side timings and their reports.

``run_bench(["collectives"], out="bench-out")`` runs built-in suites (:func:`suites`),
each case compiled once, warmed up and timed in rounds that interleave candidates with
their baseline, and writes ``results.json`` (schema ``shardkit.bench/1``, checked by
:func:`validate_results`), ``report.md`` and ``report.html`` with PNG plots
(matplotlib: the ``bench`` extra). :func:`calibrate` fits the cost model to the
current devices (``shardkit bench calibrate``). :func:`soak` calls ``fftn``, ``solve``,
``qr`` and ``matmul`` thousands of times over many meshes and shapes and measures
resident memory and the program cache (``shardkit bench soak``).
"""

from shardkit.bench._calibrate import Calibration, calibrate
from shardkit.bench._catalog import suites
from shardkit.bench._env import environment
from shardkit.bench._record import Record
from shardkit.bench._report import SCHEMA, read_results, validate_results, write_report
from shardkit.bench._run_suites import DEFAULT_MESHES, BenchResult, parse_size, run_bench
from shardkit.bench._soak import SoakResult, soak
from shardkit.bench._stats import Summary, paired_ratios, ratio_median, summarize
from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._timing import FULL_TIMING, QUICK_TIMING, Case, Timing, interleave, measure_case

__all__ = [
    "DEFAULT_MESHES",
    "FULL_TIMING",
    "QUICK_TIMING",
    "SCHEMA",
    "BenchResult",
    "Calibration",
    "Case",
    "Column",
    "PlotSpec",
    "Record",
    "SoakResult",
    "Suite",
    "SuiteConfig",
    "Summary",
    "Timing",
    "calibrate",
    "environment",
    "interleave",
    "measure_case",
    "paired_ratios",
    "parse_size",
    "ratio_median",
    "read_results",
    "run_bench",
    "soak",
    "suites",
    "summarize",
    "validate_results",
    "write_report",
]
