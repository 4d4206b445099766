"""Auto axes inside ``jit`` give the Explicit layout, dtype and ``all_to_all`` count.

The partitioner learns the split only after tracing; the Shardy rule promises the
default layout when the mesh is known while tracing (``jax.set_mesh``), and keeps
the split of an axis whose length ``s=``/``n=`` changes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

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

NAMES = {"8": "x", "2x4": "x,y"}

CASES: list[tuple[str, str, tuple[int, ...], bool, Callable[..., jax.Array], Callable]] = [
    ("8", "x", (8, 8, 8), False, skfft.fftn, np.fft.fftn),
    (
        "2x4",
        "x,y",
        (8, 8, 8),
        False,
        functools.partial(skfft.ifftn, s=(8, 16, 8), axes=(0, 1, 2)),
        functools.partial(np.fft.ifftn, s=(8, 16, 8), axes=(0, 1, 2)),
    ),
    (
        "8",
        "x",
        (8, 8, 4),
        False,
        functools.partial(skfft.fft, n=16, axis=0),
        functools.partial(np.fft.fft, n=16, axis=0),
    ),
    ("8", "x", (8, 8, 14), True, skfft.rfftn, np.fft.rfftn),
]


def _run(mesh_shape: str, types: str, spec: str, a: np.ndarray, fn: Callable) -> tuple:
    m = make_mesh(mesh_shape, types, names=NAMES[mesh_shape])  # type: ignore[arg-type]
    x = shardkit.shard(a, mesh=m, spec=spec)
    with jax.set_mesh(m):
        f = jax.jit(fn)
        y = f(x)
        report = comms(f, x)
    report.assert_only({"all-to-all"})
    return y, normalize_spec(y.sharding.spec, y.ndim), report.count("all-to-all")  # type: ignore[attr-defined]


@pytest.mark.parametrize(("mesh_shape", "spec", "shape", "real", "fn", "ref"), CASES)
def test_auto_matches_explicit(
    mesh_shape: str, spec: str, shape: tuple[int, ...], real: bool, fn: Callable, ref: Callable
) -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape) if real else rng.standard_normal(shape) * (1 + 0.5j)
    auto, auto_spec, auto_moves = _run(mesh_shape, "auto", spec, a, fn)
    expl, expl_spec, expl_moves = _run(mesh_shape, "explicit", spec, a, fn)
    assert_close(auto, ref(a))
    assert_close(expl, ref(a))
    assert auto_spec == expl_spec
    assert auto_moves == expl_moves
    assert auto.dtype == expl.dtype


def test_auto_default_layout_gradient_moves_only() -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    m = make_mesh("2x4", "auto")
    a = np.random.default_rng(1).standard_normal((8, 8, 8))
    x = shardkit.shard(a, mesh=m, spec="x,y")

    def loss(f: Callable[..., jax.Array]) -> Callable[[jax.Array], jax.Array]:
        return lambda v: jnp.sum(jnp.abs(f(v, s=(8, 16, 8))) ** 2 * jnp.arange(8.0))

    with jax.set_mesh(m):
        report = comms(jax.grad(loss(skfft.fftn)), x)
        report.assert_only({"all-to-all"})
        assert report.count("all-to-all") == 4  # two forward, two back


def test_eager_auto_errors_arrive_unwrapped() -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    m = make_mesh("8", "auto")
    x = shardkit.shard(np.ones(24), mesh=m, spec="x")  # 8**2 does not divide 24: no four-step
    with jax.set_mesh(m), pytest.raises(NotImplementedError, match="square of the device"):
        jax.grad(lambda v: jnp.sum(jnp.abs(skfft.fft(v))))(x)


def test_jit_auto_errors_are_shardkit_errors() -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    m = make_mesh("8", "auto")
    other = make_mesh("2x4", "auto", names="a,b")
    a = np.arange(24.0)
    x = shardkit.shard(a, mesh=m, spec="x")
    bad: list[tuple[Callable, type[Exception], str]] = [
        (lambda v: skfft.fftn(v, axes=(1,)), ValueError, "out of range"),
        (lambda v: skfft.fftn(v, s=(8, 8)), ValueError, "more entries"),
        (lambda v: skfft.rfftn(v.astype(complex)), TypeError, "real input"),
        (functools.partial(skfft.fft, norm="bogus"), ValueError, "legal values"),
    ]
    with jax.set_mesh(m):
        for fn, error, message in bad:
            with pytest.raises(error, match=message):
                jax.jit(fn)(x)
    with jax.set_mesh(other), pytest.raises(ValueError, match="mesh in context"):
        jax.jit(skfft.fft)(x)
    # A split no plan takes (64 does not divide 24) is known only to the partitioner,
    # which never raises: it gathers and transforms whole, and warns with the error.
    w = jnp.cos(jnp.arange(24.0))
    with jax.set_mesh(m):
        with pytest.warns(UserWarning, match="square of the device"):
            y = jax.jit(skfft.fft)(x)
        with pytest.warns(UserWarning, match="square of the device"):
            g = jax.jit(jax.grad(lambda v: jnp.sum(w * jnp.abs(skfft.fft(v)) ** 2)))(x)
    assert_close(y, np.fft.fft(a))
    want = jax.grad(lambda v: jnp.sum(w * jnp.abs(jnp.fft.fft(v)) ** 2))(jnp.asarray(a))
    assert_close(g, want, what="grad")


@pytest.mark.parametrize(
    ("spec", "fn", "ref", "out"),
    [
        ("None,None,x", skfft.rfft2, np.fft.rfft2, (("x",), (), ())),
        (
            "x",
            functools.partial(skfft.rfftn, axes=(0,)),
            functools.partial(np.fft.rfftn, axes=(0,)),
            ((), ("x",), ()),
        ),
    ],
)
def test_split_real_axis_moves_its_split_to_a_free_axis(
    spec: str, fn: Callable, ref: Callable, out: tuple
) -> None:
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices")
    m = make_mesh("8")
    a = np.random.default_rng(2).standard_normal((8, 16, 16))
    y = fn(shardkit.shard(a, mesh=m, spec=spec))
    assert_close(y, ref(a))
    assert normalize_spec(y.sharding.spec, 3) == out
