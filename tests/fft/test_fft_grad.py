"""Gradients: against jnp.fft's and against finite differences, on every route."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shardkit
import shardkit.fft as skfft
from shardkit.testing import assert_close

CASES = [
    ("fftn", "complex128", "ortho"),
    ("ifftn", "complex128", None),
    ("rfftn", "float64", "forward"),
    ("irfftn", "complex128", None),
    ("fft2", "float64", None),
]


def _input(name: str, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    shape = (8, 8, 5) if name == "irfftn" else (8, 8, 8)
    a = rng.standard_normal(shape)
    return (a + 1j * rng.standard_normal(shape)).astype(dtype) if dtype.startswith("c") else a


def _loss(fn: Callable[..., jax.Array], norm: str | None) -> Callable[[jax.Array], jax.Array]:
    def loss(v: jax.Array) -> jax.Array:
        y = fn(v, norm=norm)
        w = jnp.cos(jnp.arange(y.size, dtype=jnp.float64)).reshape(y.shape)
        return jnp.sum(w * jnp.abs(y) ** 2)

    return loss


@pytest.mark.parametrize("types", ["auto", "explicit"])
@pytest.mark.parametrize(("name", "dtype", "norm"), CASES)
def test_grad_jvp_vjp(name: str, dtype: str, norm: str | None, types: str) -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    m = shardkit.mesh("2x4", "x,y", axis_types=types)  # type: ignore[arg-type]
    a = _input(name, dtype)
    x = shardkit.shard(a, m, "x,y,None")
    ours, ref = getattr(skfft, name), getattr(jnp.fft, name)
    with jax.set_mesh(m):
        g = jax.jit(jax.grad(_loss(ours, norm)))(x)
        assert_close(g, jax.grad(_loss(ref, norm))(jnp.asarray(a)), what="grad")
        t = np.roll(a, 1)
        _, tan = jax.jvp(lambda v: ours(v, norm=norm), (x,), (shardkit.shard(t, m, "x,y,None"),))
        assert_close(tan, ref(t, norm=norm), what="jvp")
        y, pullback = jax.vjp(lambda v: ours(v, norm=norm), x)
        ct = np.asarray(y)[::-1].copy()
        (vx,) = pullback(jax.device_put(ct, y.sharding))
        (vr,) = jax.vjp(lambda v: ref(v, norm=norm), jnp.asarray(a))[1](jnp.asarray(ct))
        assert_close(vx, vr, what="vjp")
    # Finite differences of the loss along a random real direction.
    loss = _loss(ref, norm)
    d = np.random.default_rng(4).standard_normal(a.shape).astype(a.dtype)
    eps = 1e-6
    fd = (loss(jnp.asarray(a + eps * d)) - loss(jnp.asarray(a - eps * d))) / (2 * eps)
    directional = np.sum(
        np.real(np.asarray(g) * np.conj(d)) if np.iscomplexobj(a) else np.asarray(g) * d
    )
    assert abs(directional - float(fd)) <= 1e-5 * max(1.0, abs(float(fd)))
