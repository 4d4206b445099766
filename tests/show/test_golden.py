"""Golden plain-text pictures of 1- to 64-device layouts, built from fake devices.

Regenerate with ``SHARDKIT_UPDATE_GOLDEN=1 pytest tests/show`` and inspect the diff by
eye before committing: the goldens are the specification of what users see.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.show import ShardingView
from shardkit.show._layout import Layout, label_groups, layout_from_index_map

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SHARDKIT_UPDATE_GOLDEN") == "1"

SpecEntry = str | tuple[str, ...] | None


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    """Just enough of ``jax.Device`` for the renderers."""

    id: int
    platform: str = "cpu"
    device_kind: str = "fake cpu"
    process_index: int = 0


def fake_index_map(
    mesh_shape: Sequence[int],
    names: Sequence[str],
    spec: Sequence[SpecEntry],
    shape: Sequence[int],
    devices: Sequence[FakeDevice] | None = None,
) -> dict[FakeDevice, tuple[slice, ...]]:
    """What ``NamedSharding(mesh, P(*spec)).devices_indices_map(shape)`` returns.

    Mesh axes in one spec entry are major-to-minor, as in JAX; device ``k`` of
    ``devices`` (default ``FakeDevice(k)``) sits at flat mesh position ``k``.
    """
    count = math.prod(mesh_shape)
    devices = list(devices) if devices is not None else [FakeDevice(i) for i in range(count)]
    sizes = dict(zip(names, mesh_shape, strict=True))
    entries = list(spec) + [None] * (len(shape) - len(spec))
    out: dict[FakeDevice, tuple[slice, ...]] = {}
    for flat, coord in enumerate(itertools.product(*(range(m) for m in mesh_shape))):
        where = dict(zip(names, coord, strict=True))
        index = []
        for size, entry in zip(shape, entries, strict=True):
            axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
            block, parts = 0, 1
            for axis in axes:
                block, parts = block * sizes[axis] + where[axis], parts * sizes[axis]
            step = size // parts
            index.append(slice(block * step, (block + 1) * step))
        out[devices[flat]] = tuple(index)
    return out


def fake_layout(
    mesh_shape: Sequence[int],
    names: Sequence[str],
    spec: Sequence[SpecEntry],
    shape: Sequence[int],
    devices: Sequence[FakeDevice] | None = None,
) -> Layout:
    mesh = ",".join(f"{n}={m}" for n, m in zip(names, mesh_shape, strict=True))
    header = f"float32[{','.join(map(str, shape))}] mesh({mesh}) {P(*spec)}"
    index_map = fake_index_map(mesh_shape, names, spec, shape, devices)
    return layout_from_index_map(index_map, shape, header=header)


def _shuffled(n: int, seed: int) -> list[FakeDevice]:
    devices = [FakeDevice(i) for i in range(n)]
    random.Random(seed).shuffle(devices)
    return devices


def _uneven() -> Layout:
    index_map = {
        FakeDevice(i): (slice(start, stop),)
        for i, (start, stop) in enumerate([(0, 3), (3, 6), (6, 9), (9, 10)])
    }
    return layout_from_index_map(index_map, (10,), header="float32[10] uneven")


def _single(shape: tuple[int, ...]) -> Layout:
    index = tuple(slice(None) for _ in shape)
    header = f"float32[{','.join(map(str, shape))}] on CPU 0"
    return layout_from_index_map({FakeDevice(0): index}, shape, header=header)


def _huge_ids() -> Layout:
    # Ids this large make one id group wider than the narrowest picture: the cell
    # shows a letter and the legend under the face spells the devices out.
    devices = [FakeDevice(100_000 + 8 * k) for k in range(8)] + [FakeDevice(7)]
    index_map = {d: (slice(0, 4), slice(0, 4)) for d in devices[:8]}
    index_map[devices[8]] = (slice(4, 8), slice(0, 4))
    return layout_from_index_map(index_map, (8, 4), header="float32[8,4] huge ids")


CASES: dict[str, tuple[Callable[[], Layout], dict[str, object]]] = {
    "dev1_scalar": (lambda: _single(()), {}),
    "dev1_matrix": (lambda: _single((3, 5)), {}),
    "dev4_uneven_1d": (_uneven, {}),
    "dev8_block_2x4": (lambda: fake_layout((2, 4), "xy", ("x", "y"), (16, 16)), {}),
    "dev8_1d": (lambda: fake_layout((2, 4), "xy", (("x", "y"),), (32,)), {}),
    "dev8_partial_replica": (lambda: fake_layout((2, 4), "xy", (None, "x"), (16, 16)), {}),
    "dev8_replicated": (lambda: fake_layout((2, 4), "xy", (), (16, 16)), {}),
    "dev8_3d_faces": (
        lambda: fake_layout((2, 4), "xy", ("x", None, "y"), (8, 16, 16)),
        {"axes": (1, 2)},
    ),
    "dev32_block_4x8": (lambda: fake_layout((4, 8), "xy", ("x", "y"), (64, 64)), {}),
    "dev32_1d_bands": (lambda: fake_layout((32,), "x", ("x",), (64,)), {}),
    "dev32_rows_replicated": (lambda: fake_layout((4, 8), "xy", ("y", None), (64, 64)), {}),
    "dev64_block_8x8": (lambda: fake_layout((8, 8), "xy", ("x", "y"), (64, 64)), {}),
    "dev64_cols_replicated": (lambda: fake_layout((8, 8), "xy", (None, "y"), (64, 64)), {}),
    "dev64_1d_bands": (lambda: fake_layout((8, 8), "xy", (("x", "y"),), (128,)), {}),
    "dev64_3d_faces": (lambda: fake_layout((4, 4, 4), "xyz", ("x", "y", "z"), (8, 8, 8)), {}),
    "dev64_4d_faces": (
        lambda: fake_layout((2, 4, 8), "abc", ("a", "b", None, "c"), (4, 8, 6, 16)),
        {},
    ),
    "dev64_6d_summary": (
        lambda: fake_layout((2,) * 6, "abcdef", tuple("abcdef"), (2, 4, 2, 2, 2, 8)),
        {"max_faces": 4},
    ),
    "dev64_shuffled_wrapped": (
        lambda: fake_layout((4, 16), "xy", ("x", None), (8, 8), _shuffled(64, 0)),
        {"width": 40},
    ),
    "dev8_block_2x4_narrow": (
        lambda: fake_layout((2, 4), "xy", ("x", "y"), (16, 16)),
        {"width": 24},
    ),
    "dev9_huge_ids_legend": (_huge_ids, {"width": 20}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_text(name: str) -> None:
    build, options = CASES[name]
    view = ShardingView(build(), **options)  # pyright: ignore[reportArgumentType]
    text = str(view) + "\n"
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing {path}; create it with SHARDKIT_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"{name}: picture differs from {path}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_grids_fit_width_and_no_label_is_cut(name: str) -> None:
    build, options = CASES[name]
    layout = build()
    view = ShardingView(layout, **options)  # pyright: ignore[reportArgumentType]
    text = str(view)
    for line in text.splitlines():
        if line[:1] in "┌│├└":
            assert len(line) <= view.width, f"{name}: {line!r} is wider than width={view.width}"
    drawn = [cell.devices for face in view._scene.faces for row in face.cells for cell in row]
    for devices in drawn:
        for group in label_groups(devices):
            # Whole groups only: a label cut mid-number would not match.
            pattern = rf"(?<![\d.]){re.escape(group)}(?![\d.])"
            assert re.search(pattern, text), f"{name}: devices {group} missing from picture"


MESHES = [((8,), "x"), ((2, 4), "xy"), ((4, 2), "xy")]
SPECS: list[tuple[SpecEntry, ...]] = [
    (),
    ("x",),
    (None, "x"),
    ("x", "y"),
    ("y", "x"),
    (("x", "y"),),
    (None, ("y", "x")),
]


def _uses(spec: tuple[SpecEntry, ...]) -> set[str]:
    return {a for entry in spec for a in ((entry,) if isinstance(entry, str) else entry or ())}


@pytest.mark.parametrize(
    ("mesh_shape", "names", "spec"),
    [(m, n, s) for m, n in MESHES for s in SPECS if _uses(s) <= set(n)],
)
def test_fake_index_map_matches_named_sharding(
    mesh_shape: tuple[int, ...], names: str, spec: tuple[SpecEntry, ...]
) -> None:
    shape_text = "x".join(map(str, mesh_shape))
    mesh = make_mesh(shape_text, "auto", names=",".join(names), devices=list(range(8)))
    shape = (16, 24)
    real = NamedSharding(mesh, P(*spec)).devices_indices_map(shape)
    fake = fake_index_map(mesh_shape, names, spec, shape)

    def normal(index_map: Mapping[Any, Sequence[slice]]) -> dict[int, tuple[object, ...]]:
        return {
            d.id: tuple(ix.indices(n) for ix, n in zip(index, shape, strict=True))
            for d, index in index_map.items()
        }

    assert normal(real) == normal(fake)
