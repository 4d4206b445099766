"""``run_bench``: run suites, show progress and a summary, write the reports.

This is the one function behind ``shardkit bench``; the CLI only parses options.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import jax
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shardkit._display import rich_html, rich_text
from shardkit._preflight import check_output_dir, require
from shardkit._progress import busy, resolve_progress
from shardkit._typing import JSONObject
from shardkit.bench._catalog import suites as builtin_suites
from shardkit.bench._env import environment
from shardkit.bench._record import Record
from shardkit.bench._report import (
    SCHEMA,
    format_value,
    records,
    terminal_summary,
    validate_results,
    write_report,
)
from shardkit.bench._suite import SuiteConfig
from shardkit.bench._timing import FULL_TIMING, QUICK_TIMING, Timing, measure_case
from shardkit.layout import parse_mesh_shape

__all__ = ["DEFAULT_MESHES", "BenchResult", "parse_size", "run_bench"]

DEFAULT_MESHES = ("8", "2x4")
"""Meshes used when none are given: a 1-D mesh of 8 and a 2x4 mesh."""

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MIB": 1 << 20}
_UNITS |= {"G": 1 << 30, "GIB": 1 << 30}


def parse_size(value: int | str, /) -> int:
    """Bytes from ``4096``, ``"4096"``, ``"4KiB"``, ``"4K"``, ``"64MiB"`` or ``"1GiB"``.

    Raises:
      ValueError: malformed or non-positive (the message shows the accepted forms).

    Example:
      >>> parse_size("64MiB"), parse_size("1k"), parse_size(512)
      (67108864, 1024, 512)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        text = str(value).strip().upper().replace(" ", "")
        digits = text.rstrip("KMGIB")
        unit = text[len(digits) :]
        if not digits.isdigit() or unit not in _UNITS:
            raise ValueError(
                f"size={value!r} is not a size; write bytes (4096) or a binary unit "
                "(4KiB, 4K, 64MiB, 1GiB)"
            )
        n = int(digits) * _UNITS[unit]
    if n <= 0:
        raise ValueError(f"size={value!r} must be positive")
    return n


@dataclass(frozen=True)
class BenchResult:
    """What :func:`run_bench` measured.

    Attributes:
      data: the ``results.json`` document (schema ``shardkit.bench/1``, see :func:`validate_results`).
      files: the files written (empty without ``out``).
    """

    data: JSONObject
    files: tuple[Path, ...] = ()

    @property
    def records(self) -> list[Record]:
        """One record per (case, function), in run order."""
        return records(self.data)

    @property
    def wall_s(self) -> float:
        """Seconds the suites took to run (reports excluded)."""
        return self.data["wall_s"]

    def summary(self) -> Table:
        """One rich table per suite, under that suite's own column headings: every
        candidate's time, ratio to the baseline and the suite's metrics."""
        return terminal_summary(self.data)

    def __rich__(self) -> Table:
        return self.summary()

    def __str__(self) -> str:
        return rich_text(self, width=160)

    def _repr_html_(self) -> str:
        return rich_html(self, width=160)


def _resolve_suites(suites: str | Sequence[str]) -> list[str]:
    known = builtin_suites()
    names = [suites] if isinstance(suites, str) else list(suites)
    if not names:
        raise ValueError(
            f"run_bench: suites=[] is empty; legal values are 'all' or {sorted(known)}"
        )
    if "all" in names:
        return list(known)
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(
            f"run_bench: suites={bad!r} unknown; legal values are 'all' or {sorted(known)}"
        )
    return list(dict.fromkeys(names))


def _resolve_meshes(meshes: Sequence[str] | str | None) -> tuple[str, ...]:
    if meshes is None:
        return DEFAULT_MESHES
    items = [m.strip() for m in meshes.split(",")] if isinstance(meshes, str) else list(meshes)
    count = len(jax.devices())
    legal = f"shapes like '{count}', '2x{count // 2}' whose device count is at most {count}"
    out = []
    for item in items:
        try:
            dims = parse_mesh_shape(item)
        except (ValueError, TypeError) as e:
            raise ValueError(
                f"run_bench: meshes={item!r} is not a mesh shape ({e}); legal: {legal}"
            ) from None
        if math.prod(dims) > count:
            raise ValueError(
                f"run_bench: meshes={item!r} needs {math.prod(dims)} devices but {count} exist; "
                f"legal: {legal}"
            )
        out.append("x".join(map(str, dims)))
    if not out:
        raise ValueError(f"run_bench: meshes=[] is empty; legal: {legal}")
    return tuple(out)


def run_bench(
    suites: str | Sequence[str],
    /,
    *,
    sizes: Sequence[int | str] | None = None,
    meshes: Sequence[str] | str | None = None,
    repeat: int | None = None,
    out: str | Path | None = None,
    quick: bool = False,
    progress: bool | TextIO = False,
    console: Console | None = None,
) -> BenchResult:
    """Run benchmark suites, print progress and a summary, and write the reports.

    Every case is compiled once (timed apart), warmed up, then timed in interleaved
    rounds with its baseline (see :func:`measure_case`).

    Args:
      suites: ``"all"``, a suite name, or a list of names (e.g. ``["collectives"]``).
      sizes: problem sizes (bytes per device for ``collectives``; ints or strings such
        as ``"64KiB"``), or ``None`` for each suite's defaults.
      meshes: mesh shapes, e.g. ``["8", "2x4"]`` or ``"8,2x4"``; default ``8`` and ``2x4``.
      repeat: exact number of timed rounds per case; ``None``: adaptive (at least 3,
        until a time budget per case is spent).
      out: directory for ``results.json``, ``report.md``, ``report.html`` and the PNG
        plots (created if missing; checked before anything runs); ``None`` writes nothing.
      quick: every suite at small sizes with few rounds (a smoke run of seconds).
      progress: ``True`` prints progress and the summary on standard output, a text
        file receives them, ``False`` (the default) prints nothing.
      console: deprecated (a rich ``Console``); use ``progress=``.

    Returns:
      The :class:`BenchResult`.

    Raises:
      ValueError: unknown suite, malformed or too large mesh, malformed size (each
        message lists the legal values), ``repeat`` below 1, or an ``out`` that is a
        file or lies under one.
      ImportError: ``out`` is given and matplotlib (the ``bench`` extra) is missing;
        checked before anything runs.
    """
    console = resolve_progress("run_bench", console, progress)
    names = _resolve_suites(suites)
    mesh_shapes = _resolve_meshes(meshes)
    size_list = tuple(parse_size(s) for s in sizes) if sizes is not None else None
    if repeat is not None and (
        isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1
    ):
        raise ValueError(f"run_bench: repeat={repeat!r} must be an integer of at least 1")
    if out is not None:
        check_output_dir(out, what="shardkit bench --out")
        require("matplotlib", extra="bench", what="shardkit bench reports (--out)")
    base = QUICK_TIMING if quick else FULL_TIMING
    timing = Timing(**{**asdict(base), "repeat": repeat})
    registry = builtin_suites()
    config = SuiteConfig(size_list, mesh_shapes, quick)
    plan = [(name, case) for name in names for case in registry[name].cases(config)]

    measured, wall_s = _measure_all(plan, timing, console)
    by_suite = {
        name: registry[name].derive([r for r in measured if r.suite == name]) for name in names
    }
    config_record = {
        "suites": names,
        "meshes": list(mesh_shapes),
        "sizes": list(size_list) if size_list is not None else None,
        "repeat": repeat,
        "quick": quick,
        "timing": asdict(timing),
    }
    data = _results(registry, names, by_suite, config_record, wall_s)
    validate_results(data)
    with busy(console if out is not None else None, f"writing the reports to {out}"):
        files = tuple(write_report(data, out)) if out is not None else ()
    result = BenchResult(data, files)
    if console is not None:
        _print_summary(console, result, names, wall_s)
    return result


def _measure_all(
    plan: list[tuple[str, Any]], timing: Timing, console: Console | None
) -> tuple[list[Record], float]:
    """Every case of ``plan`` measured, with progress on ``console``; and the wall time."""
    measured: list[Record] = []
    start = time.perf_counter()
    # A terminal gets a live bar; a log or a pipe gets one line per finished case.
    live = console is not None and console.is_terminal
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not live,
        transient=False,
    ) as progress:
        task = progress.add_task("bench", total=len(plan))
        for i, (name, case) in enumerate(plan, 1):
            progress.update(task, description=f"{name} {case.name}")
            measured += measure_case(case, suite=name, timing=timing)
            progress.advance(task)
            if console is not None and not live:
                console.print(
                    f"[{i}/{len(plan)}] {name} {case.name} "
                    f"({time.perf_counter() - start:.1f} s elapsed)",
                    highlight=False,
                    markup=False,
                )
    return measured, time.perf_counter() - start


def _results(
    registry: Mapping[str, Any],
    names: Sequence[str],
    by_suite: Mapping[str, Sequence[Record]],
    config: JSONObject,
    wall_s: float,
) -> JSONObject:
    """The ``results.json`` document (schema in :mod:`shardkit.bench._report`)."""
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "wall_s": wall_s,
        "config": config,
        "environment": environment(),
        "suites": {
            name: {
                "description": registry[name].description,
                "baseline": registry[name].baseline,
                "notes": registry[name].notes() + registry[name].conclusions(by_suite[name]),
                "key_params": list(registry[name].key_params),
                "columns": [asdict(c) for c in registry[name].columns],
                "plots": [asdict(p) for p in registry[name].plots],
            }
            for name in names
        },
        "records": [r.to_json() for name in names for r in by_suite[name]],
    }


def _print_summary(
    console: Console, result: BenchResult, names: Sequence[str], wall_s: float
) -> None:
    console.print(result.summary())
    for note in (n for name in names for n in result.data["suites"][name]["notes"]):
        console.print(f"[dim]{note}[/dim]")
    if result.files:
        console.print(f"wrote {', '.join(str(f) for f in result.files)}")
    console.print(f"suites ran in {format_value(wall_s, 's')}")
