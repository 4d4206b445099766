"""End to end: the --quick run of every suite, the JSON schema and the report files."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from shardkit.bench import (
    SCHEMA,
    read_results,
    run_bench,
    suites,
    validate_results,
    write_report,
)
from shardkit.bench._report import terminal_summary
from shardkit.bench._suite_collectives import COLLECTIVES


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, str]:
    out = tmp_path_factory.mktemp("bench")
    printed = io.StringIO()
    result = run_bench(["collectives"], quick=True, out=out, progress=printed)
    return result, out, printed.getvalue()


def test_quick_collectives_cover_every_collective_and_axis(quick: tuple[Any, Path, str]) -> None:
    result, _, _ = quick
    seen = {(r.params["mesh"], r.params["axis"], r.candidate) for r in result.records}
    for mesh, axes in (("8", ["x"]), ("2x4", ["x", "y"])):
        for axis in axes:
            for c in (*COLLECTIVES, "local"):
                assert (mesh, axis, c) in seen
    assert all(r.median_s > 0 for r in result.records)
    assert all(r.ratio_median is not None for r in result.records if not r.is_baseline)


def test_quick_writes_valid_reports(quick: tuple[Any, Path, str]) -> None:
    _result, out, text = quick
    data = read_results(out / "results.json")
    assert data["schema"] == SCHEMA
    validate_results(data)
    assert data["environment"]["device_count"] == 8
    assert data["environment"]["simulated"] is True
    md = (out / "report.md").read_text()
    assert "| 8 | x | 1 KiB | psum |" in md
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert any(p.suffix == ".png" for p in out.iterdir())
    assert "shardkit bench" in text
    assert "elapsed)" in text  # one progress line per case when not on a terminal


def test_validate_rejects_broken_documents(quick: tuple[Any, Path, str]) -> None:
    result, _, _ = quick
    broken = json.loads(json.dumps(result.data))
    broken["schema"] = "other/9"
    with pytest.raises(ValueError, match="schema"):
        validate_results(broken)
    broken = json.loads(json.dumps(result.data))
    del broken["records"][0]["median_s"]
    with pytest.raises(ValueError, match="median_s"):
        validate_results(broken)


def test_report_rerenders_from_json(quick: tuple[Any, Path, str], tmp_path: Path) -> None:
    _, out, _ = quick
    files = write_report(read_results(out / "results.json"), tmp_path)
    assert {f.name for f in files} >= {"report.md", "report.html"}


def test_the_suites_are_listed_once_each() -> None:
    from shardkit.bench._catalog import SUITES

    names = [suite.name for suite in SUITES]
    assert {"collectives", "fft", "matmul", "linalg", "train"} <= set(names)
    assert len(names) == len(set(names))
    assert list(suites()) == names


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"suites": "nope"}, "legal values are 'all'"),
        ({"suites": "collectives", "meshes": "4x4"}, "needs 16 devices"),
        ({"suites": "collectives", "meshes": "2y4"}, "not a mesh shape"),
        ({"suites": "collectives", "repeat": 0}, "at least 1"),
        ({"suites": "collectives", "sizes": ["12parsecs"]}, "not a size"),
        ({"suites": "collectives", "quick": True, "out": __file__}, "is an existing file"),
    ],
)
def test_run_bench_errors(kwargs: dict[str, Any], match: str) -> None:
    suites = kwargs.pop("suites")
    with pytest.raises(ValueError, match=match):
        run_bench(suites, **kwargs)


@pytest.mark.parametrize("suite", ["matmul"])
def test_quick_suite_runs_end_to_end(suite: str) -> None:
    # collectives, fft, linalg and train have their own tests (linalg: test_linalg_suite).
    result = run_bench(suite, quick=True, meshes="8", repeat=1)
    validate_results(result.data)
    records = [r for r in result.records if r.suite == suite]
    assert len({r.candidate for r in records}) >= 3
    assert all(r.median_s > 0 for r in records)


def test_terminal_summary_gives_each_suite_its_own_headings(
    quick: tuple[Any, Path, str],
) -> None:
    result, _, _ = quick
    data = json.loads(json.dumps(result.data))
    record = dict(data["records"][0], suite="other", params={"n": 4096}, metrics={"rate": 2.0})
    data["records"].append(record)
    data["suites"]["other"] = {
        "description": "another suite",
        "baseline": "none",
        "notes": [],
        "key_params": ["n"],
        "columns": [{"key": "rate", "title": "GFLOP/s", "unit": ""}],
        "plots": [],
    }
    validate_results(data)
    console = Console(record=True, width=240)
    console.print(terminal_summary(data))
    text = console.export_text()
    collectives, other = text.split("other: another suite")
    assert "GFLOP/s" not in collectives
    assert "bytes" in collectives  # a collectives key parameter heads its own table
    assert "GFLOP/s" in other
    assert "4096" in other
    assert "bytes" not in other


def test_result_displays_its_summary_table(quick: tuple[Any, Path, str]) -> None:
    import html
    import re

    result, _, _ = quick
    text = str(result)
    shown = html.unescape(re.sub(r"<[^>]+>", "", result._repr_html_()))
    assert [line.rstrip() for line in shown.strip("\n").splitlines()] == [
        line.rstrip() for line in text.splitlines()
    ]
    for candidate in {r.candidate for r in result.records}:
        assert candidate in text
    assert f"shardkit bench ({result.wall_s:.1f} s)" in text


def test_progress_option_and_the_deprecated_console() -> None:
    # No public function takes a console: progress= (True, False or a text file); the
    # old console= still works for one release, with a warning naming progress=.
    with (
        pytest.warns(DeprecationWarning, match=r"run_bench\(\.\.\., progress=True\)"),
        pytest.raises(ValueError, match="nope"),
    ):
        run_bench("nope", console=Console(file=io.StringIO()))
    with pytest.raises(TypeError, match="both"):
        run_bench("fft", console=Console(file=io.StringIO()), progress=True)
    with pytest.raises(TypeError, match=r"run_bench: progress=.* must be True"):
        run_bench("fft", progress=Console())  # pyright: ignore[reportArgumentType]
