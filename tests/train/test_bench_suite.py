"""The ``train`` bench suite: every strategy against one device, figures from the programs."""

from __future__ import annotations

import pytest

from _matrix import FULL
from shardkit.bench import SuiteConfig, Timing, measure_case
from shardkit.bench._suite_train import SUITE


def test_quick_case_measures_every_strategy() -> None:
    cases = SUITE.cases(SuiteConfig(sizes=(32,), meshes=("8", "2x4"), quick=True))
    assert [c.name for c in cases] == [
        "8/32",
        "muon-fsdp/8/32",
        "muon-tp/8/32",
        "2x4/32",
        "muon-fsdp/2x4/32",
        "muon-tp/2x4/32",
        "muon-dp_tp/2x4/32",
    ]
    assert set(cases[0].candidates) == {"dp", "fsdp", "tp"}
    assert set(cases[1].candidates) == {"shardkit.muon", "optax.adam"}
    assert cases[1].baseline_name == "optax.contrib.muon"
    records = measure_case(cases[3], suite="train", timing=Timing(warmup=0, repeat=2))
    by_name = {r.candidate: r for r in records}
    assert set(by_name) == {"single", "dp", "fsdp", "tp", "dp_tp"}
    assert by_name["single"].is_baseline
    assert by_name["single"].need("bytes_sent") == 0
    assert all(by_name[k].need("bytes_sent") > 0 for k in ("dp", "fsdp", "tp", "dp_tp"))
    assert all(r.need("steps_per_s") > 0 and r.need("peak_bytes") > 0 for r in by_name.values())
    # fsdp holds about 1/8 of the state (the 10-wide last bias stays whole).
    assert by_name["fsdp"].need("state_bytes") < by_name["dp"].need("state_bytes") / 7


@pytest.mark.skipif(not FULL, reason="SHARDKIT_FULL_TESTS=1: three more compiled steps")
def test_muon_case_sends_less_than_optax() -> None:
    cases = SUITE.cases(SuiteConfig(sizes=(32,), meshes=("8",), quick=True))
    records = measure_case(cases[2], suite="train", timing=Timing(warmup=0, repeat=1))
    sent = {r.candidate: r.need("bytes_sent") for r in records}
    assert set(sent) == {"optax.contrib.muon", "shardkit.muon", "optax.adam"}
    assert sent["shardkit.muon"] <= sent["optax.contrib.muon"] / 2


def test_rejects_a_batch_the_mesh_does_not_divide() -> None:
    with pytest.raises(ValueError, match="not divisible by 3"):
        SUITE.cases(SuiteConfig(sizes=(32,), meshes=("3",), quick=True))
