"""The ``eigh`` bench suite: its cases, one case measured against SciPy, its accuracy metric."""

from __future__ import annotations

import numpy as np
import pytest

from shardkit.bench import SuiteConfig, Timing, measure_case, suites
from shardkit.bench._suite_eigh import OPS, SUITE, accuracy


def test_the_suite_is_listed_and_covers_every_op_on_every_mesh() -> None:
    assert suites()["eigh"] is SUITE
    cases = SUITE.cases(SuiteConfig(sizes=(32,), meshes=("8", "2x4"), quick=True))
    assert [c.name for c in cases] == [f"{m}/{op}/32" for m in ("8", "2x4") for op in OPS]
    assert all(c.baseline_name == "scipy" for c in cases)


def test_accuracy_is_zero_for_exact_factors_and_large_for_wrong_ones() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16))
    sym = (a + a.T) / 2
    w, v = np.linalg.eigh(sym)
    assert max(accuracy("eigh", sym, (w, v))) < 1
    assert accuracy("eigh", sym, (w[::-1], v))[0] > 1e3
    u, s, vh = np.linalg.svd(a)
    assert max(accuracy("svd", a, (u, s, vh))) < 1
    assert accuracy("svd", a, (u, s, 2 * vh))[1] > 1e3
    up = u @ vh
    assert max(accuracy("polar", a, (up, vh.T @ np.diag(s) @ vh))) < 1
    assert accuracy("polar", a, (up, np.eye(16)))[0] > 1e3


@pytest.mark.parametrize("mesh", ["2x4"])
def test_a_case_measures_shardkit_and_jnp_against_scipy(mesh: str) -> None:
    (case,) = [
        c
        for c in SUITE.cases(SuiteConfig(sizes=(32,), meshes=(mesh,), quick=True))
        if c.params["op"] == "eigh"
    ]
    records = measure_case(case, suite="eigh", timing=Timing(warmup=0, repeat=1))
    by_name = {r.candidate: r for r in records}
    assert list(by_name) == ["scipy", "shardkit", "jnp"]
    assert by_name["scipy"].is_baseline
    assert by_name["scipy"].metrics["cpu_ratio"] == 1.0
    ours = by_name["shardkit"]
    assert ours.need("cpu_ratio") > 0
    assert ours.need("resid") < 50
    assert ours.need("orth") < 50
    assert ours.need("bytes_sent") > 0
    assert ours.need("peak_bytes") > 0
