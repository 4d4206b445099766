"""``show`` on real arrays over 8 simulated CPU devices: inputs, renderers, errors."""

from __future__ import annotations

import importlib
import io
import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P
from rich.console import Console

from _meshes import make_mesh
from shardkit.show import ShardingView, show
from shardkit.show._colors import PALETTE, device_color, text_color
from shardkit.show._layout import compress_ids, layout_from_index_map

SVG = "{http://www.w3.org/2000/svg}"


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> jax.sharding.Mesh:
    return make_mesh("x".join(map(str, shape)), names=",".join(names))


def _sub_mesh() -> jax.sharding.Mesh:
    return make_mesh("2x2", "auto", names="a,b", devices=[4, 5, 6, 7])


def _put(shape: tuple[int, ...], sharding: jax.sharding.Sharding) -> jax.Array:
    return jax.device_put(jnp.zeros(shape, jnp.float32), sharding)


def _grid_rows(text: str) -> list[list[str]]:
    """The labels of each text row of cells, e.g. [['CPU 0', 'CPU 1'], ...]."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            if any(cells):
                rows.append(cells)
    return rows


@pytest.mark.parametrize(
    ("mesh_shape", "spec", "shape", "expected"),
    [
        ((8,), P("x"), (32,), [[f"CPU {i}" for i in range(8)]]),
        (
            (2, 4),
            P("x", "y"),
            (16, 16),
            [["CPU 0", "CPU 1", "CPU 2", "CPU 3"], ["CPU 4", "CPU 5", "CPU 6", "CPU 7"]],
        ),
        (
            (4, 2),
            P("x", "y"),
            (16, 16),
            [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"], ["CPU 4", "CPU 5"], ["CPU 6", "CPU 7"]],
        ),
        ((2, 4), P(("x", "y")), (16, 4), [[f"CPU {i}"] for i in range(8)]),
        ((2, 4), P(None, "x"), (16, 16), [["CPU 0-3", "CPU 4-7"]]),
        ((2, 4), P("y", None), (16, 16), [["CPU 0,4"], ["CPU 1,5"], ["CPU 2,6"], ["CPU 3,7"]]),
        ((2, 4), P(), (16, 16), [["CPU 0-7"]]),
        ((2, 4), P(), (), [["CPU 0-7"]]),
    ],
)
def test_named_sharding_labels(
    mesh_shape: tuple[int, ...], spec: P, shape: tuple[int, ...], expected: list[list[str]]
) -> None:
    names = ("x", "y")[: len(mesh_shape)]
    x = _put(shape, NamedSharding(_mesh(mesh_shape, names), spec))
    text = str(show(x))
    mesh_text = ",".join(f"{n}={m}" for n, m in zip(names, mesh_shape, strict=True))
    assert text.splitlines()[0] == f"float32[{','.join(map(str, shape))}] mesh({mesh_text}) {spec}"
    assert _grid_rows(text) == expected


def test_sub_mesh_and_single_device() -> None:
    x = _put((4, 4), NamedSharding(_sub_mesh(), P("a")))
    assert _grid_rows(str(show(x))) == [["CPU 4,5"], ["CPU 6,7"]]
    y = _put((3, 5), SingleDeviceSharding(jax.devices()[2]))
    text = str(show(y))
    assert text.splitlines()[0] == "float32[3,5] on CPU 2"
    assert _grid_rows(text) == [["CPU 2"]]


def test_accepted_input_forms_agree() -> None:
    sharding = NamedSharding(_mesh((2, 4), ("x", "y")), P("x", "y"))
    grid = _grid_rows(str(show(_put((8, 8), sharding))))
    struct = jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=sharding)
    assert _grid_rows(str(show(struct))) == grid
    assert _grid_rows(str(show(((8, 8), sharding)))) == grid
    assert _grid_rows(str(show(shape=(8, 8), sharding=sharding))) == grid
    assert str(show(shape=(8, 8), sharding=sharding)).splitlines()[0].startswith("[8,8] mesh")


def test_rank3_default_axes_and_faces() -> None:
    sharding = NamedSharding(_mesh((2, 4), ("x", "y")), P("x", None, "y"))
    x = _put((4, 6, 16), sharding)
    view = show(x)
    assert view.axes == (0, 2)  # the two split axes
    lines = str(view).splitlines()
    assert lines[1] == "rows: axis 0 (4), columns: axis 2 (16)"
    assert lines[-1] == "axis 1 (6): not split"
    faces = show(x, axes=(1, 2))
    titles = [line for line in str(faces).splitlines() if line.startswith("axis 0: block")]
    assert titles == ["axis 0: block 1/2 [0:2]", "axis 0: block 2/2 [2:4]"]
    assert show(x, axes=(-2, -1)).axes == (1, 2)


def test_rich_rendering_matches_plain_text_and_is_coloured() -> None:
    x = _put((16, 16), NamedSharding(_mesh((2, 4), ("x", "y")), P("x", "y")))
    view = show(x)
    console = Console(
        record=True, width=100, color_system="truecolor", force_terminal=True, file=io.StringIO()
    )
    view.print(console)
    assert console.export_text(clear=False) == str(view) + "\n"
    assert "48;2;31;119;180m CPU 0 " in console.export_text(styles=True)  # device 0's fill
    narrow = Console(record=True, width=30, file=io.StringIO())
    narrow.print(view)
    assert all(len(line) <= 30 for line in narrow.export_text().splitlines()[1:])


def test_svg_and_html_are_well_formed() -> None:
    x = _put((4, 8, 16), NamedSharding(_mesh((2, 4), ("x", "y")), P("x", None, "y")))
    view = show(x, axes=(1, 2))
    root = ET.fromstring(view.to_svg())
    assert root.tag == f"{SVG}svg"
    rects = root.findall(f".//{SVG}rect")
    assert len(rects) == 8  # 2 faces of 4 blocks
    titles = [t.text or "" for t in root.findall(f".//{SVG}title")]
    assert titles[0] == "CPU 0\nindex [0:2, 0:8, 0:4]"
    assert {r.get("fill") for r in rects} == {device_color(i) for i in range(8)}
    html = ET.fromstring(view._repr_html_())
    assert html.tag == "div"
    assert html.find(f"{SVG}svg") is not None


def test_svg_escapes_text() -> None:
    sharding = NamedSharding(_mesh((8,), ("x",)), P("x"))
    layout = layout_from_index_map(sharding.devices_indices_map((8,)), (8,), header="a<b & 'c'")
    root = ET.fromstring(ShardingView(layout).to_svg())
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "a<b & 'c'" in texts


def test_show_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    show(_put((8,), NamedSharding(_mesh((8,), ("x",)), P("x"))))
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    ("shape", "axes", "message"),
    [
        ((8, 8, 8), (0, 3), r"axes=\(0, 3\).*axis 3 is out of range.*rank 3.*range\(-3, 3\)"),
        ((8, 8, 8), (1, -2), r"axes=\(1, -2\).*same axis.*rank 3"),
        ((8, 8, 8), (0, 1, 2), r"got 3 axes, expected exactly 2"),
        ((8,), (0, 1), r"axes=\(0, 1\).*rank 1.*legal values: None"),
        ((), (0, 1), r"rank 0"),
    ],
)
def test_bad_axes_raise_value_error(
    shape: tuple[int, ...], axes: tuple[int, ...], message: str
) -> None:
    sharding = NamedSharding(_mesh((2, 4), ("x", "y")), P())
    with pytest.raises(ValueError, match=message):
        show(shape=shape, sharding=sharding, axes=axes)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("axes", ["01", 1, (0, 1.0)])
def test_axes_of_wrong_type_raise_type_error(axes: object) -> None:
    sharding = NamedSharding(_mesh((2, 4), ("x", "y")), P())
    with pytest.raises(TypeError, match=r"show\(axes="):
        show(shape=(4, 4, 4), sharding=sharding, axes=axes)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((np.zeros(4),), {}, r"expected a jax.Array.*got ndarray"),
        (("x",), {}, r"got str"),
        ((), {}, r"needs an array"),
        ((((4,), "not a sharding"),), {}, r"got tuple"),
        ((), {"shape": (4,), "sharding": "x"}, r"sharding='x'.*expected a jax.sharding.Sharding"),
        ((), {"shape": "44", "sharding": None}, r"needs an array"),
        ((jax.ShapeDtypeStruct((4,), jnp.float32),), {}, r"has no sharding"),
    ],
)
def test_bad_inputs_raise_type_error(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        show(*args, **kwargs)  # pyright: ignore[reportArgumentType]


def test_array_and_keywords_together_raise() -> None:
    sharding = NamedSharding(_mesh((8,), ("x",)), P("x"))
    with pytest.raises(TypeError, match="not both"):
        show(_put((8,), sharding), shape=(8,), sharding=sharding)


def test_traced_value_raises() -> None:
    def f(x: jax.Array) -> jax.Array:
        show(x)
        return x

    with pytest.raises(TypeError, match="traced value"):
        jax.jit(f)(jnp.zeros(4))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"width": 10}, ValueError), ({"width": 80.0}, TypeError), ({"max_faces": 0}, ValueError)],
)
def test_bad_options(kwargs: dict[str, object], error: type[Exception]) -> None:
    sharding = NamedSharding(_mesh((8,), ("x",)), P("x"))
    with pytest.raises(error, match=next(iter(kwargs))):
        show(shape=(8,), sharding=sharding, **kwargs)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([0], "0"),
        ([0, 1], "0,1"),
        ([0, 1, 2, 3], "0-3"),
        ([0, 4], "0,4"),
        ([0, 8, 16, 24], "0,8..24"),
        ([0, 8, 16], "0,8,16"),
        ([5, 0, 1, 2, 3, 8, 16, 24, 32], "0-3,5,8,16..32"),
    ],
)
def test_compress_ids(ids: list[int], expected: str) -> None:
    assert compress_ids(ids) == expected


def test_colours_depend_only_on_device_id() -> None:
    assert device_color(3) == device_color(23) == PALETTE[3]
    assert len(set(PALETTE)) == 20
    assert text_color("#1f77b4") == "#ffffff"
    assert text_color("#ffbb78") == "#000000"


def test_public_names_are_documented() -> None:
    # shardkit re-exports the function `show`, which shadows the subpackage attribute.
    package = importlib.import_module("shardkit.show")
    for name in package.__all__:
        assert getattr(package, name).__doc__, f"shardkit.show.{name} has no docstring"
