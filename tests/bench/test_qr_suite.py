"""The ``qr`` bench suite: its cases, and cases measured against their baselines.

By default the tall QR's ablation, one triangular solve and one triangular solve's
ablation are measured; every operation with ``SHARDKIT_FULL_TESTS=1``.
"""

from __future__ import annotations

import pytest

from _matrix import FULL
from shardkit.bench import SuiteConfig, Timing, measure_case
from shardkit.bench._suite_qr import OPS, SUITE


def test_cases_cover_every_operation_on_every_mesh() -> None:
    cases = SUITE.cases(SuiteConfig(sizes=(64,), meshes=("8", "2x4"), quick=True))
    assert [c.name for c in cases] == [f"{m}/{op}/64" for m in ("8", "2x4") for op in OPS]


@pytest.mark.parametrize("op", OPS if FULL else ("qr-parts", "trsm-64", "trsm-parts-1024"))
def test_a_case_measures_shardkit_against_its_baselines(op: str) -> None:
    (case,) = [
        c
        for c in SUITE.cases(SuiteConfig(sizes=(64,), meshes=("2x4",), quick=True))
        if c.params["op"] == op
    ]
    records = measure_case(case, suite="qr", timing=Timing(warmup=0, repeat=1))
    assert records[0].is_baseline
    names = {r.candidate for r in records}
    assert {"shardkit", "scipy"} <= names
    assert all(r.median_s > 0 for r in records)
    by_name = {r.candidate: r for r in records}
    # The solutions are checked (a residual), the ablation's parts are not.
    assert by_name["shardkit"].need("resid") < 1e-5
    if op == "qr-parts":
        assert by_name["collectives only"].metric("resid") is None
        assert by_name["flat TSQR"].need("resid") < 1e-5
    if op.startswith("trsm-parts"):
        assert by_name["collectives only"].metric("resid") is None
        assert by_name["shardkit 1 device"].need("resid") < 1e-5
