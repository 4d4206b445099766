"""Gradients: against jnp.fft's and against finite differences, on every route."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shardkit
import shardkit.fft as skfft
from _matrix import rotate
from _meshes import make_mesh
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


@functools.cache
def _reference(name: str, dtype: str, norm: str | None) -> dict[str, np.ndarray]:
    """jnp.fft's grad, JVP and VJP, and the finite-difference check of its loss.

    Shared by the Auto and Explicit cases, each jitted once: eager references
    compile every small op separately, which used to cost more than the checks.
    """
    a = _input(name, dtype)
    ref = getattr(jnp.fft, name)
    loss = jax.jit(_loss(ref, norm))
    fwd = jax.jit(lambda v: ref(v, norm=norm))
    ct = np.asarray(fwd(a))[::-1].copy()
    (vjp,) = jax.jit(lambda v, c: jax.vjp(lambda u: ref(u, norm=norm), v)[1](c))(a, ct)
    d = np.random.default_rng(4).standard_normal(a.shape).astype(a.dtype)
    eps = 1e-6
    fd = (loss(a + eps * d) - loss(a - eps * d)) / (2 * eps)
    return {
        "grad": np.asarray(jax.jit(jax.grad(loss))(a)),
        "jvp": np.asarray(fwd(np.roll(a, 1))),
        "ct": ct,
        "vjp": np.asarray(vjp),
        "direction": d,
        "fd": np.asarray(fd),
    }


# Each case on one axis type in turn (both with SHARDKIT_FULL_TESTS=1).
@pytest.mark.parametrize(("name", "dtype", "norm", "types"), rotate(CASES, ["auto", "explicit"]))
def test_grad_jvp_vjp(name: str, dtype: str, norm: str | None, types: str) -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    m = make_mesh("2x4", types)
    a = _input(name, dtype)
    r = _reference(name, dtype, norm)
    x = shardkit.shard(a, mesh=m, spec="x,y,None")
    ours = getattr(skfft, name)
    with jax.set_mesh(m):
        g = jax.jit(jax.grad(_loss(ours, norm)))(x)
        assert_close(g, r["grad"], what="grad")
        t = np.roll(a, 1)
        _, tan = jax.jvp(
            lambda v: ours(v, norm=norm), (x,), (shardkit.shard(t, mesh=m, spec="x,y,None"),)
        )
        assert_close(tan, r["jvp"], what="jvp")
        y, pullback = jax.vjp(lambda v: ours(v, norm=norm), x)
        assert_close(y, r["ct"][::-1], what="forward")
        (vx,) = pullback(jax.device_put(r["ct"], y.sharding))
        assert_close(vx, r["vjp"], what="vjp")
    # Finite differences of the loss along a random real direction.
    d, fd = r["direction"], float(r["fd"])
    directional = np.sum(
        np.real(np.asarray(g) * np.conj(d)) if np.iscomplexobj(a) else np.asarray(g) * d
    )
    assert abs(directional - fd) <= 1e-5 * max(1.0, abs(fd))
