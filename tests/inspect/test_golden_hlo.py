"""Hand-written HLO in the GPU/TPU syntaxes, read on a CPU-only machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from _meshes import make_mesh
from shardkit.inspect import CommReport, report_from_text

GOLDEN = Path(__file__).parent / "golden"


def _report(name: str, *, shape: str | None = None, names: str = "x,y") -> CommReport:
    m = make_mesh(shape, "auto", names=names) if shape else None
    return report_from_text((GOLDEN / f"{name}.hlo").read_text(), name=name, mesh=m)


def test_async_pairs_and_wrapped_collectives() -> None:
    r = _report("gpu_async", shape="2x4")
    assert r.unknown == ()
    rows = [
        (c.kind, c.axes, c.group_size, c.count, c.sent_bytes, c.is_async) for c in r.collectives
    ]
    # Per-device f32[8,4] blocks are 128 B. Hand-computed (see _traffic):
    assert rows == [
        ("all-gather", ("y",), 4, 1, 384, True),  # 3/4 of the 512 B result
        ("collective-permute", ("x",), 8, 1, 128, True),  # the whole block
        ("all-reduce", ("x", "y"), 8, 1, 224, True),  # 2 * 7/8 * 128
        ("reduce-scatter", ("y",), 4, 1, 96, True),  # 3/4 * 128, [2,4]<=[8]
        ("all-to-all", ("x",), 2, 1, 64, True),  # 1/2 * 128, [4,2]<=[2,4]T(1,0)
        ("all-reduce", ("y",), 4, 3, 192, True),  # 2 * 3/4 * 128, 3 loop trips
    ]
    assert r.collectives[0].result_shapes == ((8, 16),)
    assert r.collectives[3].result_shapes == ((2, 4),)
    assert r.bytes_sent == 384 + 128 + 224 + 96 + 64 + 3 * 192
    r.assert_bytes_at_most(1472)
    with pytest.raises(AssertionError, match="1472 B"):
        r.assert_bytes_at_most(1471)


def test_trip_counts_solved_nested_and_unbounded() -> None:
    r = _report("loops", shape="4", names="x")
    assert r.unknown == ()
    rows = [
        (c.kind, c.count, c.unbounded, c.sent_bytes, c.axes, c.axes_exact) for c in r.collectives
    ]
    assert rows == [
        ("all-reduce", 5, False, 24, ("x",), True),  # i = 0, 2, ..., 8; 2 * 3/4 * 16 B
        ("collective-permute", 20, False, 16, ("x",), True),  # 4 inner trips x 5
        ("collective-broadcast", 1, True, 16, ("x",), False),  # pairs of a 4-axis
    ]
    assert r.unbounded
    with pytest.raises(AssertionError, match="unbounded"):
        r.assert_bytes_at_most(10**9)
    assert "unbounded" in str(r)


def test_unknown_syntax_is_reported_and_fails_assertions() -> None:
    r = _report("unknown")
    assert [c.kind for c in r.collectives] == ["all-reduce"]
    assert r.collectives[0].axes is None
    ops = sorted(u.opcode for u in r.unknown)
    assert ops == [
        "all-gather",
        "all-reduce",
        "custom-call",
        "ragged-all-to-all",
        "send",
        "send-done",
    ]
    assert "UNRECOGNIZED" in str(r)
    with pytest.raises(AssertionError, match="unrecognized"):
        r.assert_only({"all-reduce"})
    with pytest.raises(AssertionError, match="unrecognized"):
        r.assert_none("all-to-all")
    with pytest.raises(AssertionError, match="unrecognized"):
        r.assert_bytes_at_most(10**9)


def test_module_without_entry_is_unknown() -> None:
    r = report_from_text("HloModule empty\n")
    assert [u.reason for u in r.unknown] == ["the module has no ENTRY computation"]
