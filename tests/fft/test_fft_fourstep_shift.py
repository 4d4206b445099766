"""The four-step FFT of a split axis, the shifts and the Hermitian transforms."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shardkit
import shardkit.fft as skfft
from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout.internal import normalize as normalize_spec
from shardkit.testing import assert_close


def _signal(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


@pytest.mark.parametrize(
    ("mesh_shape", "spec", "shape", "name", "norm", "types"),
    [
        ("8", "x", (128,), "fft", None, "explicit"),
        ("2x4", "(x,y)", (64,), "ifft", "ortho", "auto"),
    ],
)
def test_four_step_matches_numpy(
    mesh_shape: str, spec: str, shape: tuple[int, ...], name: str, norm: str | None, types: str
) -> None:
    m = make_mesh(mesh_shape, types)
    a = _signal(shape)
    x = shardkit.shard(a, mesh=m, spec=spec)
    f = functools.partial(getattr(skfft, name), norm=norm)
    want = getattr(np.fft, name)(a, norm=norm)
    with jax.set_mesh(m):
        y = f(x)
        assert_close(y, want)
        assert normalize_spec(y.sharding.spec, 1) == normalize_spec(x.sharding.spec, 1)  # type: ignore[attr-defined]
        assert_close(jax.jit(f)(x), want)
        report = comms(f, x)
    report.assert_only({"all-to-all"})
    assert report.count("all-to-all") == 3


def test_four_step_grad_on_auto_axes() -> None:
    m = make_mesh("8", "auto")
    a = _signal((2, 128), seed=1)
    x = shardkit.shard(a, mesh=m, spec="None,x")
    w = jnp.arange(128.0)
    with jax.set_mesh(m):
        g = jax.jit(jax.grad(lambda v: jnp.sum(jnp.abs(skfft.fft(v[0])) ** 2 * w)))(x)
        want = jax.grad(lambda v: jnp.sum(jnp.abs(jnp.fft.fft(v[0])) ** 2 * w))(jnp.asarray(a))
        assert_close(g, want, what="grad")


@pytest.mark.parametrize(
    ("mesh_shape", "spec", "norm", "types"),
    [("8", "x", None, "explicit"), ("2x4", "(x,y)", "ortho", "auto")],
)
def test_four_step_irfft_matches_numpy(mesh_shape: str, spec: str, norm: Any, types: str) -> None:
    """A split half-spectrum, Nyquist term dropped, to ``2 M`` real points (``M = 64``)."""
    m = make_mesh(mesh_shape, types)
    a = _signal((64,), seed=4)
    x = shardkit.shard(a, mesh=m, spec=spec)
    f = functools.partial(skfft.irfft, n=128, norm=norm)
    want = np.fft.irfft(a, n=128, norm=norm)
    w = jnp.cos(jnp.arange(128.0))
    with jax.set_mesh(m):
        y = f(x)
        assert y.shape == (128,)
        assert y.dtype == want.dtype
        assert_close(y, want)
        assert normalize_spec(y.sharding.spec, 1) == normalize_spec(x.sharding.spec, 1)  # type: ignore[attr-defined]
        assert_close(jax.jit(f)(x), want)
        report = comms(f, x)
        report.assert_only({"all-to-all", "collective-permute"})
        assert (report.count("all-to-all"), report.count("collective-permute")) == (3, 2)
        if types == "auto":
            g = jax.jit(jax.grad(lambda v: jnp.sum(f(v) * w)))
            want_g = jax.grad(lambda v: jnp.sum(jnp.fft.irfft(v, n=128, norm=norm) * w))(
                jnp.asarray(a)
            )
            assert_close(g(x), want_g, what="grad")
            comms(g, x).assert_only({"all-to-all", "collective-permute"})


def test_split_1d_real_transforms_name_the_reason() -> None:
    m = make_mesh("8")
    with pytest.raises(NotImplementedError, match=r"no four-step R2C transform"):
        skfft.rfft(shardkit.shard(np.ones(128), mesh=m, spec="x"))
    with pytest.raises(NotImplementedError, match=r"Pass n=128"):
        skfft.irfft(shardkit.shard(np.ones(64, np.complex128), mesh=m, spec="x"))


def test_four_step_refusal_names_the_length_rule() -> None:
    m = make_mesh("8")
    with pytest.raises(NotImplementedError, match=r"square of the device count \(64\)"):
        skfft.fft(shardkit.shard(np.ones(24), mesh=m, spec="x"))


@pytest.mark.parametrize(
    ("mesh_shape", "spec", "shape", "axes"),
    [("8", "x", (24,), None), ("2x4", "x,y", (6, 12), None), ("2x4", "y,x", (8, 10), (0,))],
)
def test_shifts_match_numpy_with_permutes_only(
    mesh_shape: str, spec: str, shape: tuple[int, ...], axes: tuple[int, ...] | None
) -> None:
    m = make_mesh(mesh_shape)
    a = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    x = shardkit.shard(a, mesh=m, spec=spec)
    for ours, ref in ((skfft.fftshift, np.fft.fftshift), (skfft.ifftshift, np.fft.ifftshift)):
        y = ours(x, axes)
        assert_close(y, ref(a, axes))
        assert y.sharding == x.sharding
    report = comms(lambda v: skfft.fftshift(v, axes), x)
    report.assert_only({"collective-permute"})
    report.assert_none("all-gather")


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_hermitian_and_real_1d_transforms(norm: Any) -> None:
    m = make_mesh("8")
    v = _signal((8, 9), seed=3)
    r = np.real(v).copy()
    x, xr = shardkit.shard(v, mesh=m, spec="x"), shardkit.shard(r, mesh=m, spec="x")
    assert_close(skfft.hfft(x, norm=norm), np.fft.hfft(v, norm=norm), what="hfft")
    assert_close(skfft.ihfft(xr, norm=norm), np.fft.ihfft(r, norm=norm), what="ihfft")
    assert_close(skfft.rfft(xr, norm=norm), np.fft.rfft(r, norm=norm), what="rfft")
    assert_close(skfft.irfft(x, n=16, norm=norm), np.fft.irfft(v, n=16, norm=norm), what="irfft")


@pytest.mark.parametrize(
    ("mesh_shape", "spec", "shape", "axes"),
    [("8", "x", (24,), None), ("2x4", "x,y", (6, 12), (0, 1))],
)
def test_shifts_on_auto_axes_in_jit_use_permutes_only(
    mesh_shape: str, spec: str, shape: tuple[int, ...], axes: tuple[int, ...] | None
) -> None:
    """XLA partitions ``jnp.fft.fftshift``'s roll by half into whole-block permutes."""
    m = make_mesh(mesh_shape, "auto")
    a = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    x = shardkit.shard(a, mesh=m, spec=spec)
    w = jnp.asarray(np.cos(a))
    with jax.set_mesh(m):
        for ours, ref in ((skfft.fftshift, np.fft.fftshift), (skfft.ifftshift, np.fft.ifftshift)):
            f = jax.jit(functools.partial(ours, axes=axes))
            y = f(x)
            assert_close(y, ref(a, axes))
            assert y.sharding.spec == x.sharding.spec  # type: ignore[attr-defined]
            report = comms(f, x)
            report.assert_only({"collective-permute"})
            # The gradient is the opposite roll, partitioned the same way.
            g = jax.jit(jax.grad(lambda v, f=f: jnp.sum(f(v) * w)))
            comms(g, x).assert_only({"collective-permute"})
        assert_close(g(x), np.fft.fftshift(np.cos(a), axes), what="grad")
