"""Every function against numpy over a seeded sample of meshes, specs, shapes and dtypes."""

from __future__ import annotations

import itertools
import random
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import shardkit
import shardkit.fft as skfft
from _meshes import make_mesh
from shardkit.layout.internal import normalize as normalize_spec
from shardkit.testing import assert_close

# name -> (numpy reference, kind, kwargs giving the transformed axes)
FUNCS: dict[str, tuple[Any, str]] = {
    "fftn": (np.fft.fftn, "c2c"),
    "ifftn": (np.fft.ifftn, "c2c"),
    "rfftn": (np.fft.rfftn, "r2c"),
    "irfftn": (np.fft.irfftn, "c2r"),
    "fft2": (np.fft.fft2, "c2c"),
    "ifft2": (np.fft.ifft2, "c2c"),
    "rfft2": (np.fft.rfft2, "r2c"),
    "irfft2": (np.fft.irfft2, "c2r"),
    "fft": (np.fft.fft, "c2c"),
    "ifft": (np.fft.ifft, "c2c"),
}
MESHES = {"8": "x", "2x4": "x,y", "4x2": "x,y", "1x8": "x,y"}


def data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def rel_err(got: object, ref: np.ndarray) -> float:
    g = np.asarray(got).astype(np.complex128)
    return float(np.linalg.norm(g - ref) / np.linalg.norm(ref))


def entries(x: jax.Array) -> tuple[tuple[str, ...], ...]:
    """The spec of ``x`` normalized to one tuple per dimension (Auto drops trailing Nones)."""
    spec = x.sharding.spec  # type: ignore[attr-defined]
    return normalize_spec(spec, x.ndim)


SHAPES = [(16, 16, 16), (24, 16, 32), (24, 40, 56), (32, 48), (4, 16, 8, 16)]
SPECS = {
    "8": ["x", "None,x", "None,None,x", "None,None,None,x"],
    "2d": ["x,y", "y,x", "None,x,y", "x,None,y", "None,y", "(x,y)", "None,x,None,y"],
}
DTYPES = {"c2c": ["complex64", "complex128", "float32", "float64"], "r2c": ["float32", "float64"]}
DTYPES["c2r"] = ["complex64", "complex128"]
NORMS = [None, "ortho", "forward"]


def _input_shape(kind: str, shape: tuple[int, ...], last: int) -> tuple[int, ...]:
    if kind != "c2r":
        return shape
    out = list(shape)
    out[last] = shape[last] // 2 + 1
    return tuple(out)


def _cases() -> list[tuple[Any, ...]]:
    cases = []
    for name, (_, kind), mesh_shape, shape, layout, types in itertools.product(
        FUNCS, FUNCS.values(), MESHES, SHAPES, ("default", "natural"), ("auto", "explicit")
    ):
        if FUNCS[name][1] != kind:
            continue
        last = -1
        in_shape = _input_shape(kind, shape, last)
        for spec_text in SPECS["8" if mesh_shape == "8" else "2d"]:
            spec = shardkit.spec(spec_text)
            if len(spec) > len(shape):
                continue
            sizes = dict(
                zip(MESHES[mesh_shape].split(","), map(int, mesh_shape.split("x")), strict=True)
            )
            ok = all(
                n % np.prod([sizes[a] for a in e], dtype=int) == 0
                for n, e in zip(in_shape, normalize_spec(spec, len(shape)), strict=True)
            )
            if not ok:
                continue
            for dtype in DTYPES[kind]:
                cases.append((name, mesh_shape, shape, spec_text, dtype, layout, types))
    return cases


SAMPLE = random.Random(6).sample(_cases(), 40)


def _numpy_input(kind: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if kind == "c2r":
        return np.fft.rfftn(data(shape, "float64"), axes=(-2, -1)).astype(dtype)
    return data(shape, dtype)


@pytest.mark.parametrize(
    ("name", "mesh_shape", "shape", "spec", "dtype", "layout", "types"),
    SAMPLE,
    ids=["-".join(map(str, c)).replace(" ", "") for c in SAMPLE],
)
def test_matches_numpy(
    name: str,
    mesh_shape: str,
    shape: tuple[int, ...],
    spec: str,
    dtype: str,
    layout: str,
    types: str,
) -> None:
    ref_fn, kind = FUNCS[name]
    m = make_mesh(mesh_shape, types)
    a = _numpy_input(kind, shape, dtype)
    if kind == "c2r" and name == "irfftn":
        a = np.fft.rfftn(data(shape, "float64")).astype(dtype)
    x = shardkit.shard(a, mesh=m, spec=spec)
    kwargs: dict[str, Any] = {}
    if kind == "c2r":
        kwargs = {"s": shape[-2:]} if name == "irfft2" else {"s": shape, "axes": range(len(shape))}
    norm = NORMS[len(shape) % 3]
    y = getattr(skfft, name)(x, norm=norm, out_layout=layout, **kwargs)
    wide = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    ref = ref_fn(wide, norm=norm, **kwargs)
    assert_close(y, ref, dtype=np.result_type(a.dtype, np.complex64), what=name)
    if layout == "natural":
        assert entries(y)[: len(shape)] == normalize_spec(
            getattr(x.sharding, "spec", ()), len(shape)
        )
    assert not y.sharding.is_fully_replicated or x.sharding.is_fully_replicated


@pytest.mark.parametrize(
    ("forward", "inverse", "spec", "mesh_shape"),
    [
        ("fftn", "ifftn", "x,y,None", "2x4"),
        ("fftn", "ifftn", "None,None,x", "8"),
        ("fftn", "ifftn", "None,y,x", "4x2"),
        ("fft2", "ifft2", "x,y,None", "2x4"),
        ("rfftn", "irfftn", "x,None,None", "8"),
        ("rfftn", "irfftn", "x,y,None", "2x4"),
    ],
)
def test_round_trip_restores_layout(forward: str, inverse: str, spec: str, mesh_shape: str) -> None:
    a = data((16, 16, 16), "float64" if forward.startswith("r") else "complex128")
    x = shardkit.shard(a, mesh=make_mesh(mesh_shape), spec=spec)
    y = getattr(skfft, forward)(x)
    z = getattr(skfft, inverse)(y, **({"s": a.shape} if forward == "rfftn" else {}))
    assert entries(z) == entries(x)
    assert_close(z, a, dtype=np.float64)


def test_subset_of_axes_and_s() -> None:
    a = data((16, 8, 16), "complex128")
    x = shardkit.shard(a, mesh=make_mesh("8"), spec="x,None,None")
    y = skfft.fftn(x, s=(8, 24), axes=(0, 2))
    assert_close(y, np.fft.fftn(a, s=(8, 24), axes=(0, 2)))
    y = skfft.fftn(x, axes=(1, 2))
    assert entries(y) == (("x",), (), ())
    assert_close(y, np.fft.fftn(a, axes=(1, 2)))


def test_fft_along_a_split_axis_and_unsharded_inputs() -> None:
    a = data((16, 8), "complex128")
    x = shardkit.shard(a, mesh=make_mesh("8"), spec="x,None")
    assert_close(skfft.fft(x, axis=0), np.fft.fft(a, axis=0))
    assert_close(skfft.ifft(x, n=12), np.fft.ifft(a, n=12))
    assert_close(skfft.fftn(a), np.fft.fftn(a))
    assert_close(skfft.fftn(jax.numpy.asarray(a)), np.fft.fftn(a))


def test_fftfreq_follows_the_output_layout() -> None:
    x = shardkit.shard(data((16, 16, 8), "complex128"), mesh=make_mesh("2x4"), spec="x,y,None")
    y = skfft.fftn(x)
    k = skfft.fftfreq(16, 0.5, like=y, axis=1)
    assert k.shape == (1, 16, 1)
    assert normalize_spec(getattr(k.sharding, "spec", ()), 3)[1] == entries(y)[1]
    assert_close(k.reshape(-1), np.fft.fftfreq(16, 0.5))
    assert_close(skfft.rfftfreq(7, 2.0), np.fft.rfftfreq(7, 2.0))
    assert (y * k).sharding == y.sharding
    with pytest.raises(ValueError, match="length 16 along axis=1"):
        skfft.fftfreq(8, like=y, axis=1)


_BAD_LAYOUT: Any = "t"


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda x: skfft.fftn(x, norm="bad"), ValueError, r"norm='bad'; legal values"),
        (lambda x: skfft.fftn(x, out_layout=_BAD_LAYOUT), ValueError, r"out_layout='t'; legal"),
        (lambda x: skfft.fftn(x, axes=(0, 0)), ValueError, "repeats an axis"),
        (lambda x: skfft.fftn(x, axes=(5,)), ValueError, "out of range"),
        (lambda x: skfft.fftn(x, s=(4,), axes=(0, 1)), ValueError, "differ in length"),
        (lambda x: skfft.rfftn(x), TypeError, "takes a real input"),
        (
            lambda x: skfft.fftn(x, s=(12, 16), out_layout="natural"),
            ValueError,
            r"axis 0 \(now of length 12\).*cannot be split unevenly.*choose s",
        ),
    ],
)
def test_bad_arguments(call: Any, exc: type[Exception], match: str) -> None:
    x = shardkit.shard(data((16, 16), "complex64"), mesh=make_mesh("8", "auto"), spec="x,None")
    with pytest.raises(exc, match=match):
        call(x)


def test_indivisible_output_error_names_spec_and_mesh() -> None:
    x = shardkit.shard(data((16, 12, 16), "complex64"), mesh=make_mesh("8"), spec="x,None,None")
    with pytest.raises(ValueError, match=r"fftn: array shape=\(16, 12, 16\), spec=P\('x'") as e:
        skfft.fftn(x, s=(12, 12, 16), out_layout="natural")
    assert "mesh(x=8; Explicit)" in str(e.value)
    assert_close(skfft.fftn(x, axes=(1, 2)), np.fft.fftn(np.asarray(x), axes=(1, 2)))


def test_split_1d_array_runs_four_step_or_is_rejected() -> None:
    a = data((64,), "complex64")
    assert_close(skfft.fft(shardkit.shard(a, mesh=make_mesh("8"), spec="x")), np.fft.fft(a))
    x = shardkit.shard(
        data((24,), "complex64"), mesh=make_mesh("8"), spec="x"
    )  # 8**2 does not divide 24
    with pytest.raises(NotImplementedError, match="four-step"):
        skfft.fft(x)


def test_plan_runs_in_a_user_shard_map() -> None:
    m = make_mesh("2x4")
    a = data((16, 16, 16), "complex128")
    p = skfft.plan("fftn", a.shape, spec="x,y,None", mesh=m, norm="ortho")
    f = jax.shard_map(p.local, mesh=m, in_specs=p.in_spec, out_specs=p.out_spec)
    assert_close(f(shardkit.shard(a, mesh=m, spec="x,y,None")), np.fft.fftn(a, norm="ortho"))
    assert p.out_spec == P(None, "x", "y")
    with pytest.raises(ValueError, match="legal values"):
        skfft.plan("dct", a.shape, spec="x", mesh=m)


@pytest.mark.parametrize("spec", ["x", "None,x"])
def test_2d_real_round_trip_with_a_divisible_halved_axis(spec: str) -> None:
    a = data((16, 14), "float64")  # 14 // 2 + 1 = 8: the halved axis can be split
    y = skfft.rfft2(shardkit.shard(a, mesh=make_mesh("8"), spec="x"))
    assert_close(y, np.fft.rfft2(a))
    assert_close(skfft.irfft2(y, s=a.shape), a)
    half = shardkit.shard(np.fft.rfft2(a), mesh=make_mesh("8"), spec=spec)
    assert_close(skfft.irfft2(half, s=a.shape), a)
