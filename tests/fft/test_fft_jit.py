"""Inside ``jit``: Explicit axes (shard_map) and Auto axes (custom_partitioning).

Collectives and memory are read from the compiled program through ``shardkit.comms``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

import shardkit
import shardkit.fft as skfft
from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout.internal import normalize as normalize_spec
from shardkit.testing import assert_close


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _struct(n: int, mesh: jax.sharding.Mesh, spec: str, dtype: object = jnp.complex64) -> object:
    return jax.ShapeDtypeStruct((n,) * 3, dtype, sharding=NamedSharding(mesh, shardkit.spec(spec)))


@pytest.mark.parametrize(
    ("mesh_shape", "spec", "layout", "expected"),
    [
        ("8", "x,None,None", "default", 1),
        ("8", "x,None,None", "natural", 2),
        ("2x4", "x,y,None", "default", 2),
        ("2x4", "x,y,None", "natural", 4),
        ("1x8", "None,y,None", "default", 1),
    ],
)
def test_explicit_axes_only_all_to_all(
    mesh_shape: str, spec: str, layout: str, expected: int
) -> None:
    m = make_mesh(mesh_shape, "explicit")
    out_layout: Any = layout
    report = comms(lambda v: skfft.fftn(v, out_layout=out_layout), _struct(32, m, spec))
    report.assert_only({"all-to-all"})
    report.assert_none("all-gather")
    assert report.count("all-to-all") == expected


@pytest.mark.parametrize(("mesh_shape", "spec", "expected"), [("8", "x", 1), ("2x4", "x,y", 2)])
def test_auto_axes_partition_instead_of_gathering(
    mesh_shape: str, spec: str, expected: int
) -> None:
    m = make_mesh(mesh_shape, "auto")
    a = _data((16, 16, 16), "complex128")
    x = shardkit.shard(a, mesh=m, spec=spec)
    for name in ("fftn", "ifftn"):
        f = jax.jit(getattr(skfft, name))
        report = comms(f, x)
        report.assert_only({"all-to-all"})
        assert report.count("all-to-all") == expected
        y = f(x)
        assert_close(y, getattr(np.fft, name)(a))
        # The default layout, as on Explicit axes (the mesh is in the operand's type).
        want = skfft.plan(name, a.shape, spec=spec, mesh=m).out_spec
        assert normalize_spec(y.sharding.spec, 3) == normalize_spec(want, 3)  # type: ignore[attr-defined]
    assert comms(jnp.fft.fftn, x).count("all-gather") >= 1


def test_auto_axes_real_transforms_and_grad_do_not_gather() -> None:
    m = make_mesh("2x4", "auto")
    a = np.real(_data((16, 16, 16), "complex128")).copy()
    x = shardkit.shard(a, mesh=m, spec="x,y")

    def loss(v: jax.Array) -> jax.Array:
        return jnp.sum(jnp.abs(skfft.irfftn(skfft.rfftn(v) * 2.0, s=v.shape)) ** 2)

    comms(jax.grad(loss), x).assert_only({"all-to-all"})
    assert_close(jax.jit(jax.grad(loss))(x), 8 * a)


def test_explicit_jit_matches_eager() -> None:
    m = make_mesh("4x2", "explicit")
    a = _data((16, 8, 16), "complex64")
    x = shardkit.shard(a, mesh=m, spec="x,None,y")
    eager, jitted = skfft.fftn(x), jax.jit(skfft.fftn)(x)
    assert jitted.sharding == eager.sharding
    assert_close(jitted, eager)


@pytest.mark.parametrize(("mesh_shape", "spec"), [("8", "x,None,None"), ("2x4", "x,y,None")])
def test_peak_memory_at_most_four_shards_at_128(mesh_shape: str, spec: str) -> None:
    m = make_mesh(mesh_shape, "explicit")
    shard_bytes = 128**3 * 8 // 8
    report = comms(skfft.fftn, _struct(128, m, spec))
    report.assert_none("all-gather")
    # XLA's own peak is 2 shards; the bound adds arguments, outputs and temporaries
    # (4 shards) plus a few scalars.
    report.assert_peak_memory_at_most(4 * shard_bytes + 1024)
    assert report.bytes_sent <= report.count("all-to-all") * shard_bytes


@pytest.mark.parametrize(
    ("dtype", "bound"), [("complex64", 3e-7), ("complex128", 1e-14), ("float32", 3e-7)]
)
def test_accuracy_64_cubed(dtype: str, bound: float) -> None:
    m = make_mesh("2x4", "explicit")
    a = _data((64, 64, 64), "complex128")
    a = np.real(a).copy() if dtype == "float32" else a
    x = shardkit.shard(a.astype(dtype), mesh=m, spec="x,y,None")
    ref = np.fft.fftn(a.astype(dtype).astype(a.dtype))
    got = np.asarray(skfft.fftn(x)).astype(np.complex128)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err <= bound, f"relative error {err:.2e} > {bound:.0e}"
