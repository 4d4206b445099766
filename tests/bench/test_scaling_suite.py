"""The scaling suite: efficiency, predictions and their error, cluster extrapolation."""

from __future__ import annotations

import math

import pytest

from shardkit.bench import Record, Timing, measure_case, suites
from shardkit.bench._suite_scaling import (
    CLUSTER_PRESET,
    cluster_prediction,
    derive,
    scaling_case,
    work,
)
from shardkit.inspect import Interconnect


def test_a_matmul_case_measures_efficiency_and_prediction() -> None:
    timing = Timing(warmup=0, repeat=2)
    records = [
        r
        for p in (1, 2)
        for r in measure_case(scaling_case("matmul", "weak", p, 32), suite="scaling", timing=timing)
    ]
    assert [(r.candidate, r.params["devices"]) for r in records] == [
        ("1 device", 1),
        ("shardkit", 1),
        ("1 device", 2),
        ("shardkit", 2),
    ]
    two = records[3]
    assert two.params["n"] == 40  # 32 * 2^(1/3), to a multiple of 2
    assert two.need("work_ratio") == pytest.approx((40 / 32) ** 3)
    assert two.need("comm_s") > 0
    assert any(k.endswith(" runs") for k in two.metrics)
    derived = derive(records)
    assert derived[0] is records[0]  # baselines pass through
    d = derived[3]
    assert two.ratio_median is not None
    assert d.need("efficiency") == pytest.approx(d.need("work_ratio") / (2 * two.ratio_median))
    cores = min(2, int(d.need("host_cores")))
    predicted = records[2].median_s * d.need("work_ratio") / cores + d.need("comm_s")
    assert d.need("predicted_s") == pytest.approx(predicted)
    assert d.need("prediction_error") == pytest.approx((predicted - two.median_s) / two.median_s)
    with pytest.raises(KeyError, match="no metric 'efficiency'"):
        records[3].need("efficiency")
    lines = suites()["scaling"].conclusions(derived)
    assert lines[0].startswith("Prediction error on 2, 4 and 8 devices: median")
    assert any(line.startswith(f"Predicted on {CLUSTER_PRESET}, matmul weak") for line in lines)


def test_cluster_prediction_extrapolates_the_collectives() -> None:
    # An all-to-all whose runs stay 2 and whose bytes sent per device fall as 1/p; the
    # model takes the operand, (p-1)/p of which a device sends.
    runs = [
        Record(
            "scaling",
            f"fft/strong/{p}",
            "shardkit",
            (1.0,),
            params={"devices": p, "op": "fft", "mode": "strong"},
            metrics={
                "all-to-all runs": 2.0,
                "all-to-all sent": 4e6 / p,
                "all-to-all group": float(p),
            },
        )
        for p in (2, 4, 8)
    ]
    link = Interconnect("toy", latency_s=1e-6, bandwidth=1e9, peak_flops=1e12)
    seconds, eff = cluster_prediction(runs, "fft", 64, "strong", 64, link)
    comm = 2 * link.time("all-to-all", 64, 4e6 / 64 * 64 / 63)
    assert seconds == pytest.approx(work("fft", 64) / 64 / 1e12 + comm)
    assert eff == pytest.approx(work("fft", 64) / 1e12 / (64 * seconds))
    assert 0 < eff < 1


def test_work_and_validation() -> None:
    assert work("solve", 3) == pytest.approx(18.0)
    assert work("fft", 4) == pytest.approx(5 * 64 * math.log2(64))
    with pytest.raises(ValueError, match="legal values are"):
        scaling_case("svd", "strong", 2, 32)
