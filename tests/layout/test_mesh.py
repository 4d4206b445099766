from __future__ import annotations

import jax
import pytest
from jax.sharding import AxisType

from shardkit.layout import mesh, parse_mesh_shape


@pytest.mark.parametrize(
    ("text", "dims"),
    [("8", (8,)), ("2x4", (2, 4)), ("2X2x2", (2, 2, 2)), (8, (8,)), ((4, 2), (4, 2))],
)
def test_parse_mesh_shape(text: object, dims: tuple[int, ...]) -> None:
    assert parse_mesh_shape(text) == dims  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["2y4", "", "2x", "0x8", (2, 0)])
def test_parse_mesh_shape_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="shape="):
        parse_mesh_shape(bad)  # type: ignore[arg-type]


def test_parse_mesh_shape_type_error() -> None:
    with pytest.raises(TypeError, match="shape="):
        parse_mesh_shape(2.5)  # type: ignore[arg-type]


def test_mesh_defaults_explicit_like_make_mesh() -> None:
    m = mesh("2x4", "x,y")
    assert dict(m.shape) == {"x": 2, "y": 4}
    assert m.axis_types == (AxisType.Explicit, AxisType.Explicit)
    assert [d.id for d in m.devices.flat] == list(range(8))


def test_mesh_default_names_and_axis_types() -> None:
    m = mesh((2, 2, 2), axis_types="auto")
    assert m.axis_names == ("x", "y", "z")
    assert m.axis_types == (AxisType.Auto,) * 3
    mixed = mesh("2x4", "a b", axis_types=("auto", AxisType.Explicit))
    assert mixed.axis_types == (AxisType.Auto, AxisType.Explicit)


def test_sub_mesh_by_ids_and_devices() -> None:
    m = mesh("2x2", "x,y", devices=[0, 2, 4, 6])
    assert [d.id for d in m.devices.flat] == [0, 2, 4, 6]
    half = mesh("4", "x", devices=jax.devices()[:4])
    assert [d.id for d in half.devices.flat] == [0, 1, 2, 3]
    assert [d.id for d in mesh("4", "x").devices.flat] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shape": "4x4"}, r"needs 16 devices but only 8 exist.*use_cpu_devices\(16\)"),
        ({"shape": "2x4", "names": "x"}, r"names='x' gives 1 axis name"),
        ({"shape": "2x4", "names": "x,x"}, "distinct"),
        ({"shape": "2x4", "names": "x,1y"}, "identifiers"),
        ({"shape": "2x4", "axis_types": "sideways"}, r"'sideways' is not an axis type.*auto"),
        ({"shape": "2x4", "axis_types": ("auto",) * 3}, "gives 3 types"),
        ({"shape": "2x2", "devices": [0, 1, 2]}, "3 device"),
        ({"shape": "2x2", "devices": [0, 1, 2, 2]}, "more than once"),
        ({"shape": "2", "devices": [0, 99]}, "device id 99"),
        ({"shape": (2, 2, 2, 1, 1)}, "needs axis names"),
    ],
)
def test_mesh_errors(kwargs: dict[str, object], match: str) -> None:
    shape = kwargs.pop("shape")
    names = kwargs.pop("names", None)
    with pytest.raises(ValueError, match=match):
        mesh(shape, names, **kwargs)  # type: ignore[arg-type]
