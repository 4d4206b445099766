"""The HLO reader: shapes, instructions and every device-group syntax."""

from __future__ import annotations

import pytest

from shardkit.inspect._hlo import (
    ArrayShape,
    HloSyntaxError,
    flatten,
    parse_groups,
    parse_module,
    parse_pairs,
    parse_shape,
)


def test_shapes_arrays_tuples_layouts_and_bytes() -> None:
    assert parse_shape("f32[8,4]{1,0}") == ArrayShape("f32", (8, 4))
    assert parse_shape("pred[]") == ArrayShape("pred", ())
    assert parse_shape("bf16[2,<=8]{1,0:T(8,128)}") == ArrayShape("bf16", (2, 8))
    nested = parse_shape("((f32[8,4]{1,0}), c64[2], s32[])")
    assert flatten(nested) == (
        ArrayShape("f32", (8, 4)),
        ArrayShape("c64", (2,)),
        ArrayShape("s32", ()),
    )
    assert [a.nbytes for a in flatten(nested)] == [128, 16, 4]
    assert ArrayShape("s4", (3,)).nbytes == 2
    assert ArrayShape("token", ()).nbytes == 0
    with pytest.raises(HloSyntaxError):
        parse_shape("float[8]")


def test_explicit_groups_and_empty_means_all() -> None:
    assert parse_groups("{{0,4},{1,5}}", 8) == [[0, 4], [1, 5]]
    assert parse_groups("{}", 4) == [[0, 1, 2, 3]]


def test_iota_groups_plain_and_transposed() -> None:
    assert parse_groups("[2,4]<=[8]", 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # arange(8).reshape(4, 2).T -> rows (0,2,4,6), (1,3,5,7)
    assert parse_groups("[2,4]<=[4,2]T(1,0)", 8) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert parse_groups("[4,2]<=[2,4]T(1,0)", 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_mesh_axes_groups_as_xla_prints_them() -> None:
    mesh = "mesh['axis_0'=2,'axis_1'=4]"
    assert parse_groups(f"{mesh} {{'axis_1'}}", 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_groups(f"{mesh} {{'axis_0'}}", 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parse_groups(f"{mesh} {{'axis_0','axis_1'}}", 8) == [list(range(8))]
    # Axes listed minor first order the members that way.
    assert parse_groups(f"{mesh} {{'axis_1','axis_0'}}", 8) == [[0, 4, 1, 5, 2, 6, 3, 7]]
    # Size-1 axes, as XLA adds when it reshapes the mesh.
    three = "mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_0'}"
    assert parse_groups(three, 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_mesh_axes_sub_axes_and_device_ids() -> None:
    # 'a':(1)2 reshapes a=8 into [1,2,4] and groups over the 2: stride 4.
    assert parse_groups("mesh[a=8] {a:(1)2}", 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # 'a':(2)2 reshapes into [2,2,2] and groups over the middle: stride 2.
    assert parse_groups("mesh[a=8] {a:(2)2}", 8) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    shuffled = "mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'b'}"
    assert parse_groups(shuffled, 4) == [[3, 2], [1, 0]]


def test_pairs_and_unknown_syntax() -> None:
    assert parse_pairs("{{0,1},{1,0}}") == [(0, 1), (1, 0)]
    with pytest.raises(HloSyntaxError):
        parse_groups("devices<0,1>", 2)
    with pytest.raises(HloSyntaxError):
        parse_groups("mesh['a'=2] {'b'}", 2)
    with pytest.raises(HloSyntaxError):
        parse_pairs("[0->1]")


def test_module_instructions_attributes_and_calls() -> None:
    text = """HloModule m, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0), metadata={op_name="a, {b}" source_file="f.py"}
  ROOT %r = f32[4]{0} all-reduce(f32[4]{0} %x), channel_id=1, replica_groups={{0,1}}, to_apply=%add
}
"""
    module = parse_module(text)
    assert module.num_partitions == 2
    assert module.entry == "main"
    assert not module.unparsed
    root = module.computations["main"].root
    assert root is not None
    assert (root.opcode, root.operands) == ("all-reduce", ["x"])
    assert root.attrs["replica_groups"] == "{{0,1}}"
    assert module.called(root) == [("to_apply", "add")]
    assert module.computations["main"].by_name["x"].attrs["metadata"].startswith("{op_name=")


def test_mesh_groups_with_short_iota_device_ids() -> None:
    # As XLA prints it for jnp.linalg.cholesky on a 2x4 mesh: the devices are
    # iota([2,4]) transposed, laid out as a 4x2 mesh, grouped along its minor axis.
    text = "mesh['axis_0'=4,'axis_1'=2], device_ids=([2,4]T(1,0)) {'axis_1'}"
    assert parse_groups(text, 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    text = "mesh['axis_0'=4,'axis_1'=2], device_ids=([2,4]T(1,0)) {'axis_0'}"
    assert parse_groups(text, 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_mesh_groups_with_mismatched_device_ids_is_a_syntax_error() -> None:
    with pytest.raises(HloSyntaxError, match="device_ids"):
        parse_groups("mesh['a'=4,'b'=2], device_ids=(0,1,2,3) {'a'}", 8)
