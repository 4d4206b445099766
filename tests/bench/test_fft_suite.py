"""The ``fft`` bench suite: its cases run, and their metrics come from the programs."""

from __future__ import annotations

import jax
import pytest

from shardkit.bench import SuiteConfig, Timing, measure_case
from shardkit.bench._suite_fft import SUITE, jaxdecomp_status


def test_quick_cases_measure_every_candidate() -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    cases = SUITE.cases(SuiteConfig(sizes=(16,), meshes=("8", "2x4"), quick=True))
    assert [c.name for c in cases] == [
        "1/16",
        "8/16",
        "8/16/gathered",
        "2x4/16",
        "2x4/16/gathered",
    ]
    jd, reason = jaxdecomp_status()
    assert (jd is None) == bool(reason)
    timing = Timing(warmup=0, repeat=1)
    records = measure_case(cases[3], suite="fft", timing=timing)
    records += measure_case(cases[4], suite="fft", timing=timing)
    by_name = {r.candidate: r for r in records}
    assert {
        "shardkit",
        "shardkit-transposed",
        "shardkit-natural",
        "shardkit-auto",
        "shardkit-auto-transposed",
    } <= set(by_name)
    # The floor: the FFTs alone (no collective) and the moves alone (the layout's count).
    assert by_name["floor-fft"].metrics["all_to_all"] == 0
    assert by_name["floor-a2a"].metrics["all_to_all"] == 2
    assert by_name["floor-a2a-natural"].metrics["all_to_all"] == 4
    floor = {k: by_name[k].median_s for k in ("floor-fft", "floor-a2a", "floor-a2a-natural")}
    for name, moves in (("shardkit-auto", "floor-a2a"), ("shardkit-natural", "floor-a2a-natural")):
        want = by_name[name].median_s / (floor["floor-fft"] + floor[moves])
        assert by_name[name].metrics["vs_floor"] == pytest.approx(want)
    assert by_name["floor-fft"].metrics["vs_floor"] is None
    # Its own case shares the main case's jaxdecomp time.
    assert (by_name["jnp-sharded"].metrics["vs_jaxdecomp"] is None) == (jd is None)
    assert by_name["shardkit-transposed"].metrics["all_to_all"] == 2
    assert by_name["shardkit"].metrics["all_to_all"] == 2
    assert by_name["shardkit"].metrics["all_gather"] == 0
    assert by_name["shardkit-natural"].metrics["all_to_all"] == 4
    assert by_name["jnp-sharded"].need("all_gather") >= 1
    assert by_name["shardkit"].need("peak_bytes") < by_name["jnp-sharded"].need("peak_bytes")
    if jd is None:
        assert any("jaxdecomp" in n for n in SUITE.notes())


def test_rejects_a_size_the_mesh_does_not_divide() -> None:
    with pytest.raises(ValueError, match="not divisible by mesh 2x4"):
        SUITE.cases(SuiteConfig(sizes=(6,), meshes=("2x4",)))
