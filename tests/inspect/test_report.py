"""CommReport: assertions that fail when they should, JSON, diff, rendering."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.inspect import CommReport, MemoryStats, comms


@pytest.fixture(scope="module")
def reports() -> dict[str, CommReport]:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    m = make_mesh("2x4", "auto")
    x = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=jax.NamedSharding(m, P("x", "y")))

    def run(body, out):  # type: ignore[no-untyped-def]
        f = jax.shard_map(body, mesh=m, in_specs=P("x", "y"), out_specs=out, check_vma=False)
        return comms(f, x)

    return {
        "gather": run(lambda a: jax.lax.all_gather(a, "y", axis=1, tiled=True), P("x", None)),
        "a2a": run(lambda a: jax.lax.all_to_all(a, "y", 0, 1, tiled=True), P("x", "y")),
        "none": run(lambda a: a * 2, P("x", "y")),
    }


def test_assert_only(reports: dict[str, CommReport]) -> None:
    reports["a2a"].assert_only({"all-to-all"})
    reports["a2a"].assert_only("all-to-all")
    reports["none"].assert_only({"all-to-all"})
    with pytest.raises(
        AssertionError, match=r"expected only \['all-to-all'\] but found \['all-gather'\]"
    ):
        reports["gather"].assert_only({"all-to-all"})


def test_assert_none(reports: dict[str, CommReport]) -> None:
    reports["a2a"].assert_none("all-gather")
    reports["none"].assert_none()
    with pytest.raises(AssertionError, match="1 all-gather"):
        reports["gather"].assert_none("all-gather", "all-reduce")
    with pytest.raises(AssertionError, match="found 1 all-to-all"):
        reports["a2a"].assert_none()


def test_assert_bytes_and_peak_memory(reports: dict[str, CommReport]) -> None:
    r = reports["gather"]
    assert r.bytes_sent == 384
    r.assert_bytes_at_most(384)
    with pytest.raises(AssertionError, match="sends 384 B per device per call, more than 383 B"):
        r.assert_bytes_at_most(383)
    assert r.memory is not None
    peak = r.memory.peak_bytes
    r.assert_peak_memory_at_most(peak)
    with pytest.raises(AssertionError, match="exceeds"):
        r.assert_peak_memory_at_most(peak - 1)
    no_memory = CommReport.from_dict({**r.to_dict(), "memory": None})
    with pytest.raises(AssertionError, match="no memory analysis"):
        no_memory.assert_peak_memory_at_most(10**12)


def test_bad_kinds_are_value_errors(reports: dict[str, CommReport]) -> None:
    with pytest.raises(ValueError, match="legal values are"):
        reports["a2a"].assert_only({"alltoall"})
    with pytest.raises(ValueError, match="kind='gather'"):
        reports["a2a"].assert_none("gather")
    with pytest.raises(ValueError, match="legal values"):
        reports["a2a"].count("psum")


def test_json_round_trip(reports: dict[str, CommReport]) -> None:
    for r in reports.values():
        text = r.to_json()
        assert json.loads(text)["format"] == "shardkit.comms/1"
        assert CommReport.from_json(text) == r
    with pytest.raises(ValueError, match="format"):
        CommReport.from_dict({"format": "other"})


def test_diff(reports: dict[str, CommReport]) -> None:
    d = reports["gather"].diff(reports["a2a"])
    assert d.changed
    assert [(key.split()[0], b, a) for key, b, a, _, _ in d.rows] == [
        ("all-gather", 1, 0),
        ("all-to-all", 0, 1),
    ]
    assert d.bytes_sent == (384, 96)
    text = str(d)
    assert "- all-gather f32[8,4] -> f32[8,16] over y: runs 1 -> 0" in text
    assert "+ all-to-all" in text
    same = reports["a2a"].diff(reports["a2a"])
    assert not same.changed
    assert same.rows == ()


def test_rendering(reports: dict[str, CommReport]) -> None:
    text = str(reports["gather"])
    for piece in ("all-gather", "f32[8,4] -> f32[8,16]", "384 B", "mesh(x=2,y=4)", "peak"):
        assert piece in text
    assert "collectives none" in reports["none"].summary()
    assert "-bound" in reports["gather"].summary()


def test_memory_peak_rule() -> None:
    m = MemoryStats(100, 50, 30, 20, 0, None, 40)
    assert m.peak_bytes == 160  # 100 + 50 + 30 - 20
    assert m.ratio_to_ideal == 4.0
    assert MemoryStats(100, 50, 30, 20, 0, 500, None).peak_bytes == 500
    assert MemoryStats(1, 1, 1, 0, 0, None, None).ratio_to_ideal is None
