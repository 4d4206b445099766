"""The soak benchmark (shardkit bench soak): a small run keeps the cache at its bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import shardkit
from shardkit.bench import soak
from shardkit.cli import app


def test_small_soak_keeps_the_cache_at_its_bound(tmp_path: Path) -> None:
    before = shardkit.set_program_cache_size(8)
    try:
        # fftn and matmul over 6 meshes: 12 programs for a bound of 8, so programs are
        # evicted and built again as the random order returns to them.
        result = soak(100, configs_count=6, ops=("fftn", "matmul"), sample_every=20)
    finally:
        shardkit.set_program_cache_size(before)
    assert result.calls == 100
    assert result.wrong == 0
    assert result.cache.maxsize == 8
    assert result.largest_cache <= 8
    assert result.cache.size == 8
    assert result.cache.evictions > 0
    assert result.cache.hits + result.cache.misses >= 100
    assert result.bounded
    assert [s.call for s in result.samples] == [0, 20, 40, 60, 80, 100]
    assert all(s.rss_bytes > 0 and s.cache.size <= 8 for s in result.samples)
    saved = json.loads(result.write(tmp_path).read_text())
    assert saved["calls"] == 100
    assert saved["cache"]["maxsize"] == 8
    assert len(saved["samples"]) == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["soak", "fft"], "soak runs alone"),
        (["soak", "--meshes", "8"], "--meshes"),
        (["fft", "--calls", "3"], "only the soak"),
        (["soak", "--calls", "0"], "calls=0"),
    ],
)
def test_soak_cli_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
