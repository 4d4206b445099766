"""Every JAX transformation on every route: vmap, jacfwd/jacrev, second-order grads.

Ported in spirit from jaxDecomp's and JAX's FFT tests: ``check_grads`` to second
order, ``vmap`` against a Python loop, Jacobians against ``jnp.fft``'s, and the
compiled programs' collectives (all-to-alls only) on Auto and Explicit meshes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import shardkit
import shardkit.fft as skfft
from _matrix import FULL
from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.testing import assert_close


def _data(shape: tuple[int, ...], complex_: bool, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    return a + 1j * rng.standard_normal(shape) if complex_ else a


@pytest.mark.parametrize(
    ("name", "shape", "cplx", "mesh_shape", "spec"),
    [("fftn", (8, 8, 4), True, "2x4", "x,y")],
)
def test_check_grads_second_order_auto(
    name: str, shape: Any, cplx: bool, mesh_shape: str, spec: str
) -> None:
    m = make_mesh(mesh_shape, "auto")
    x = shardkit.shard(_data(shape, cplx), mesh=m, spec=spec)
    fn = getattr(skfft, name)
    with jax.set_mesh(m):
        # Reverse mode to second order covers the JVP too (its transpose is the VJP).
        check_grads(jax.jit(lambda v: fn(v, norm="ortho")), (x,), order=2, modes=("rev",))


@pytest.mark.parametrize(
    ("name", "shape", "cplx", "mesh_shape", "spec"),
    [
        ("rfftn", (8, 8, 4), False, "8", "x"),
        *([("fftn", (8, 8, 4), True, "2x4", "x,y")] if FULL else []),
    ],
)
def test_check_grads_second_order_explicit(
    name: str, shape: Any, cplx: bool, mesh_shape: str, spec: str
) -> None:
    m = make_mesh(mesh_shape, "explicit")
    x = shardkit.shard(_data(shape, cplx), mesh=m, spec=spec)
    fn = getattr(skfft, name)
    with jax.set_mesh(m):
        check_grads(jax.jit(lambda v: fn(v, norm="ortho")), (x,), order=2, modes=("rev",))


@pytest.mark.parametrize(
    ("name", "ref", "shape", "mesh_shape", "spec", "types"),
    [("rfftn", jnp.fft.rfftn, (8, 8, 4), "2x4", "x,y", "explicit")],
)
def test_hessian_vector_product(
    name: str, ref: Any, shape: Any, mesh_shape: str, spec: str, types: str
) -> None:
    m = make_mesh(mesh_shape, types)
    a = _data(shape, False)
    x = shardkit.shard(a, mesh=m, spec=spec)
    fn = getattr(skfft, name)
    w = jnp.asarray(np.cos(np.arange(np.prod(shape))).reshape(shape))

    def loss(f: Callable[..., jax.Array]) -> Callable[[jax.Array], jax.Array]:
        return lambda v: jnp.sum(jnp.abs(f(v * w)) ** 4)

    def hvp(f: Callable[..., jax.Array]) -> Callable[[jax.Array], jax.Array]:
        return jax.grad(lambda v: jnp.vdot(jax.grad(loss(f))(v), w).real)

    with jax.set_mesh(m):
        want = jax.jit(hvp(ref))(jnp.asarray(a))  # one compile, not one per eager op
        assert_close(jax.jit(hvp(fn))(x), want, what="jit(grad(grad))")


@pytest.mark.parametrize("types", ["auto", "explicit"])
def test_vmap_matches_loop_and_keeps_plan(types: str) -> None:
    m = make_mesh("2x4", types)
    a = _data((3, 8, 8, 4), True)
    x = shardkit.shard(a, mesh=m, spec="None,x,y")
    with jax.set_mesh(m):
        f = jax.jit(jax.vmap(lambda v: skfft.fftn(v, norm="ortho")))
        assert_close(f(x), np.stack([np.fft.fftn(a[i], norm="ortho") for i in range(3)]))
        if types == "auto":
            comms(f, x).assert_only({"all-to-all"})
        if types == "explicit":
            return
        # A vmapped rfftn over a second mapped axis (in_axes=1), eagerly.
        b = np.real(a).copy()
        y = jax.vmap(skfft.rfftn, in_axes=1, out_axes=1)(shardkit.shard(b, mesh=m, spec="None,x,y"))
        assert_close(y, np.stack([np.fft.rfftn(b[:, i]) for i in range(8)], axis=1))


def test_jacobians_of_a_split_axis() -> None:
    m = make_mesh("8", "auto")
    a = _data((2, 8), True, seed=2)
    x = shardkit.shard(a, mesh=m, spec="None,x")
    with jax.set_mesh(m):

        def ours(v: jax.Array) -> jax.Array:
            return skfft.fft(v, axis=1)

        want = jax.jacfwd(lambda v: jnp.fft.fft(v, axis=1), holomorphic=True)(jnp.asarray(a))
        assert_close(jax.jacfwd(ours, holomorphic=True)(x), want, what="jacfwd")
        assert_close(jax.jit(jax.jacrev(ours, holomorphic=True))(x), want, what="jacrev")


def test_linear_transpose_is_the_adjoint() -> None:
    # (jax.linear_transpose drops Explicit shardings from the primal's type.)
    m = make_mesh("2x4", "auto")
    a = _data((8, 8, 4), True, seed=5)
    x = shardkit.shard(a, mesh=m, spec="x,y")
    with jax.set_mesh(m):
        f = functools.partial(skfft.ifftn, norm="forward")
        ct = f(x)  # a cotangent with the output's type (Explicit axes check it)
        (got,) = jax.jit(jax.linear_transpose(f, x))(ct)
        (want,) = jax.linear_transpose(lambda v: jnp.fft.ifftn(v, norm="forward"), a)(ct)
        assert_close(got, want)


def test_auto_eager_grad_runs_the_plan() -> None:
    """The split last axis once aborted XLA's own FFT partitioning; the plan moves it."""
    m = make_mesh("8", "auto")
    a = _data((4, 8, 16), True, seed=7)
    x = shardkit.shard(a, mesh=m, spec="None,None,x")

    def loss(f: Callable[..., jax.Array]) -> Callable[[jax.Array], jax.Array]:
        return lambda v: jnp.sum(jnp.abs(f(v)) ** 2 * jnp.cos(jnp.abs(v)))

    with jax.set_mesh(m):
        want = jax.jit(jax.grad(loss(jnp.fft.fftn)))(jnp.asarray(a))
        assert_close(jax.grad(loss(skfft.fftn))(x), want, what="eager grad")


def test_auto_jit_integer_input_dtype_matches_jnp() -> None:
    m = make_mesh("8", "auto")
    a = np.arange(8 * 8 * 4).reshape(8, 8, 4) % 3
    x = shardkit.shard(a.astype("int32"), mesh=m, spec="x")
    with jax.set_mesh(m):
        got = jax.jit(skfft.fftn)(x)
        assert got.dtype == jnp.fft.fftn(a.astype("int32")).dtype == skfft.fftn(x).dtype
        assert_close(got, np.fft.fftn(a))
        for dtype in ("bool", "int8", "int64"):
            b = shardkit.shard(a.astype(dtype), mesh=m, spec="x")
            for name in ("fftn", "rfftn"):
                traced = jax.eval_shape(jax.jit(getattr(skfft, name)), b).dtype
                assert traced == getattr(jnp.fft, name)(b).dtype, (dtype, name)


def test_primitive_is_registered_as_needing_devices() -> None:
    """The one private hook (``shardkit.fft._compat``) still exists in this JAX."""
    from jax._src import dispatch

    from shardkit.fft._partition import fft_p

    assert fft_p in dispatch.prim_requires_devices_during_lowering
