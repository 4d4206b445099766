"""Halo exchange and pencil transposes against NumPy, with their collectives."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding

import shardkit
import shardkit.fft as skfft
from _meshes import make_mesh
from _references import halo_reference
from shardkit.inspect import comms
from shardkit.layout.internal import normalize as normalize_spec
from shardkit.testing import assert_close


@pytest.mark.parametrize(
    ("mesh_shape", "spec", "shape", "widths", "parts", "periodic"),
    [
        ("8", "x", (16, 6), [1, 0], [8, 1], True),
        ("8", "x", (24,), [3], [8], False),
        ("2x4", "x,y", (8, 12, 3), [2, 3, 0], [2, 4, 1], True),
        ("4x2", "x,y", (8, 6), [1, 2], [4, 2], False),
        ("8", "None,x", (5, 16), [1, 2], [1, 8], True),
    ],
)
def test_halo_exchange_matches_numpy(
    mesh_shape: str,
    spec: str,
    shape: tuple[int, ...],
    widths: list[int],
    parts: list[int],
    periodic: bool,
) -> None:
    m = make_mesh(mesh_shape)
    a = np.random.default_rng(0).standard_normal(shape)
    x = shardkit.shard(a, mesh=m, spec=spec)
    y = skfft.halo_exchange(x, widths, periodic=periodic)
    assert_close(y, halo_reference(a, parts, widths, periodic))
    assert normalize_spec(y.sharding.spec, y.ndim) == normalize_spec(x.sharding.spec, x.ndim)  # type: ignore[attr-defined]
    report = comms(lambda v: skfft.halo_exchange(v, widths, periodic=periodic), x)
    report.assert_only({"collective-permute"})
    split = sum(1 for p, w in zip(parts, widths, strict=True) if p > 1 and w)
    assert report.count("collective-permute") == 2 * split


def test_halo_exchange_auto_axes_in_jit_needs_spec() -> None:
    m = make_mesh("2x4", "auto")
    a = np.arange(64.0).reshape(8, 8)
    x = shardkit.shard(a, mesh=m, spec="x,y")
    with jax.set_mesh(m):
        with pytest.raises(ValueError, match="pass spec="):
            jax.jit(lambda v: skfft.halo_exchange(v, 1))(x)
        y = jax.jit(lambda v: skfft.halo_exchange(v, 1, spec="x,y"))(x)
    assert_close(y, halo_reference(a, [2, 4], [1, 1], True))


def test_halo_exchange_rejects_a_halo_wider_than_the_block() -> None:
    m = make_mesh("8")
    x = shardkit.shard(np.ones(16), mesh=m, spec="x")
    with pytest.raises(ValueError, match=r"asks 3 cells on axis 0, whose blocks hold 2"):
        skfft.halo_exchange(x, 3)


@pytest.mark.parametrize("types", ["explicit", "auto"])
def test_pencil_round_trip(types: str) -> None:
    m = make_mesh("2x4", types)
    a = np.random.default_rng(1).standard_normal((8, 8, 8)) + 0j
    x = shardkit.shard(a, mesh=m, spec="None,x,y")  # X pencil
    with jax.set_mesh(m):
        y = skfft.x_to_y(x)
        z = skfft.y_to_z(y)
        back = skfft.y_to_x(skfft.z_to_y(z))
    expected = {"y": (("x",), (), ("y",)), "z": (("x",), ("y",), ()), "back": ((), ("x",), ("y",))}
    for name, arr in (("y", y), ("z", z), ("back", back)):
        assert normalize_spec(arr.sharding.spec, 3) == expected[name]  # type: ignore[attr-defined]
        assert_close(arr, a)
    struct = jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(m, x.sharding.spec))  # type: ignore[attr-defined]
    with jax.set_mesh(m):
        report = (
            comms(skfft.x_to_y, struct)
            if types == "explicit"
            else comms(lambda v: skfft.x_to_y(v, spec="None,x,y"), x)
        )
    report.assert_only({"all-to-all"})
    assert report.count("all-to-all") == 1


def test_transpose_split_errors_name_the_problem() -> None:
    m = make_mesh("8")
    x = shardkit.shard(np.ones((8, 6)), mesh=m, spec="x")
    with pytest.raises(ValueError, match=r"axis 1 \(length 6\) cannot take axis 0's split"):
        skfft.transpose_split(x, src=0, dst=1)
    with pytest.raises(ValueError, match="axis 1 is not split"):
        skfft.transpose_split(x, src=1, dst=0)
