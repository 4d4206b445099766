"""The memory line's ratio to an ideal shard, and comms on operands of other devices (issue 18).

The ideal is the inputs split evenly over the devices. For a program whose outputs
outweigh all its inputs (random draws from a key) it bounds nothing: the line then
says so instead of printing "2097932.00x the ideal shard".
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import shardkit
from _meshes import make_mesh
from shardkit.inspect import CommReport, MemoryStats, comms, interconnect


def _report(memory: MemoryStats, num_devices: int = 8) -> CommReport:
    return CommReport(
        name="f",
        mesh_axes=(("x", num_devices),),
        num_devices=num_devices,
        collectives=(),
        unknown=(),
        memory=memory,
        flops=None,
        interconnect=interconnect("shared-memory"),
    )


def _memory_line(report: CommReport) -> str:
    text = " ".join(str(report).split())  # the console may wrap the line
    return text[text.index("memory/device") :].split(" f: collectives")[0]


def test_the_ratio_is_printed_where_the_inputs_bound_the_memory() -> None:
    m = MemoryStats(1024, 2048, 0, 0, 0, None, ideal_bytes=512)  # outputs < all inputs (4 KiB)
    assert _memory_line(_report(m)).endswith("(6.00x the ideal shard)")


def test_no_ratio_where_the_outputs_outweigh_the_inputs() -> None:
    m = MemoryStats(8, 1 << 20, 3 << 20, 0, 0, None, ideal_bytes=1)
    line = _memory_line(_report(m))
    assert "x the ideal shard" not in line
    assert line.endswith("(no ideal shard: the outputs outweigh the inputs)")
    assert m.ratio_to_ideal == m.peak_bytes  # the figure stays available; only not printed


def test_no_ratio_without_an_ideal() -> None:
    m = MemoryStats(8, 8, 0, 0, 0, None, None)
    assert _memory_line(_report(m)).endswith("peak 16 B")


def test_a_program_whose_only_argument_is_a_key() -> None:
    report = comms(lambda k: jax.random.normal(k, (32, 32)), jax.random.key(0))
    line = _memory_line(report)
    assert "x the ideal shard" not in line
    assert "outputs outweigh the inputs" in line


def test_comms_on_operands_of_different_devices() -> None:
    left = make_mesh("4", devices=[0, 1, 2, 3])
    right = make_mesh("4", devices=[4, 5, 6, 7])
    a = shardkit.shard(np.ones((8, 8)), mesh=left, spec="x")
    b = shardkit.shard(np.ones((8, 8)), mesh=right, spec="x")
    pattern = (
        r"comms: the operands live on different devices: args\[0\] is on .*\[0, 1, 2, 3\]; "
        r"args\[1\] is on .*\[4, 5, 6, 7\]\. Put every operand on args\[0\]'s mesh first"
    )
    with pytest.raises(ValueError, match=pattern):
        comms(lambda p, q: p @ q, a, b)
    with pytest.raises(ValueError, match=r"args\[0\] is on .*; q is on"):
        comms(lambda p, q: p @ q, a, q=b)


def test_comms_on_operands_of_two_explicit_meshes() -> None:
    a = shardkit.shard(np.ones((8, 8)), mesh=make_mesh("2x4"), spec="x,y")
    b = shardkit.shard(np.ones((8, 8)), mesh=make_mesh("8", names="z"), spec="z")
    with pytest.raises(ValueError, match=r"comms: the operands are on different meshes"):
        comms(lambda p, q: p @ q, a, b)
