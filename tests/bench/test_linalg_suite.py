"""The ``linalg`` bench suite: its cases, and cases measured against their baselines.

By default one operation's case is measured (``solve``); every operation's with
``SHARDKIT_FULL_TESTS=1``. The pipeline around the cases (reports, rendering) is
covered by the matmul suite's quick end-to-end run.
"""

from __future__ import annotations

import pytest

from _matrix import FULL
from shardkit.bench import SuiteConfig, Timing, measure_case
from shardkit.bench._suite_linalg import OPS, SUITE


def test_cases_cover_every_operation_on_every_mesh() -> None:
    cases = SUITE.cases(SuiteConfig(sizes=(64,), meshes=("8", "2x4"), quick=True))
    assert [c.name for c in cases] == [f"{m}/{op}/64" for m in ("8", "2x4") for op in OPS]


@pytest.mark.parametrize("op", OPS if FULL else ("solve",))
def test_a_case_measures_shardkit_against_its_baselines(op: str) -> None:
    (case,) = [
        c
        for c in SUITE.cases(SuiteConfig(sizes=(64,), meshes=("8",), quick=True))
        if c.params["op"] == op
    ]
    records = measure_case(case, suite="linalg", timing=Timing(warmup=0, repeat=1))
    assert records[0].is_baseline
    assert len({r.candidate for r in records}) >= 3
    assert all(r.median_s > 0 for r in records)
    assert all(r.metrics for r in records if not r.is_baseline)
