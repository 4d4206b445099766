"""Bench records: typed fields, derived statistics, and their JSON form checked on reading."""

from __future__ import annotations

import json

import pytest

from shardkit.bench import Record


def _record() -> Record:
    return Record(
        "matmul",
        "8/rows/256",
        "ring",
        (0.3, 0.1, 0.2),
        baseline="xla",
        params={"mesh": "8", "n": 256},
        metrics={"bytes_sent": 1024.0, "peak_vs_xla": float("nan")},
        compile_s=1.5,
        ratio_median=1.25,
    )


def test_statistics_are_derived_from_the_timings() -> None:
    r = _record()
    assert (r.median_s, r.min_s, r.max_s, r.repeats) == (0.2, 0.1, 0.3, 3)
    assert r.speed == 1.25
    assert Record("s", "c", "base", (2.0, 4.0), is_baseline=True).speed == 3.0
    assert (r.value("n"), r.value("bytes_sent"), r.value("candidate")) == (256, 1024.0, "ring")
    assert r.value("absent") is None
    assert r.metric("absent") is None


def test_json_round_trip_writes_non_finite_figures_as_null() -> None:
    obj = json.loads(json.dumps(_record().to_json(), allow_nan=False))
    assert obj["median_s"] == 0.2
    assert obj["repeats"] == 3
    assert obj["metrics"]["peak_vs_xla"] is None
    back = Record.from_json(obj)
    assert back.metrics == {"bytes_sent": 1024.0, "peak_vs_xla": None}
    assert back.times_s == (0.3, 0.1, 0.2)
    assert back.params == {"mesh": "8", "n": 256}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"candidate": 3}, r"rec\['candidate'\]=3 is int, expected str"),
        ({"is_baseline": 1}, r"rec\['is_baseline'\]=1 is int, expected bool"),
        ({"repeats": 2}, r"rec: len\(times_s\) != repeats"),
        ({"ratio_median": "fast"}, r"rec\['ratio_median'\]='fast' must be a number or null"),
        ({"baseline": 1}, r"rec\['baseline'\]=1 must be a string or null"),
        ({"times_s": [-1.0, 1.0, 1.0]}, r"rec\['times_s'\]: .*must be finite and >= 0"),
    ],
)
def test_from_json_names_the_bad_key(change: dict[str, object], match: str) -> None:
    obj = {**_record().to_json(), **change}
    with pytest.raises(ValueError, match=match):
        Record.from_json(obj, where="rec")


def test_from_json_names_a_missing_key() -> None:
    obj = _record().to_json()
    del obj["metrics"]
    with pytest.raises(ValueError, match=r"rec lacks the key 'metrics'"):
        Record.from_json(obj, where="rec")
