"""Sizes the mesh does not divide: only the input's split divides; moves pad and trim.

Every case runs eagerly and inside ``jit`` on an Auto or an Explicit mesh, is compared
with ``np.fft``, and its compiled program is read through ``shardkit.comms``: only
``all_to_all``, exactly the plan's count and exactly the bytes ``FFTPlan.sent_bytes``
predicts (padding included). ``CASES`` is a hand-picked sample; set
``SHARDKIT_FULL_TESTS=1`` (tests/_matrix.py) to run the whole matrix (every transform x mesh x
indivisible shape x dtype x axis type, a few minutes).
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

import shardkit
import shardkit.fft as skfft
from _matrix import FULL
from _meshes import make_mesh
from shardkit.fft._api import _auto_route, _describe
from shardkit.inspect import comms
from shardkit.layout.internal import normalize as normalize_spec
from shardkit.testing import assert_close

NAMES = {"8": "x", "2x4": "x,y", "4x2": "x,y", "1x8": "x,y"}
# The jnp.fft function each public transform is, with its kwargs (see _call).
ALL = (0, 1, 2)
PLANNED = {"fft2": "fftn", "ifft2": "ifftn", "rfft2": "rfftn", "irfft2": "irfftn"}


def _data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


# (transform, mesh, spec, input shape, dtype, axis types, kwargs). Every intermediate
# move needs padding somewhere: 12, 10, 20, 6 and the halved lengths 5 and 4 are not
# multiples of the groups that land on them.
CASES: list[tuple[str, str, str, tuple[int, ...], str, str, dict[str, Any]]] = [
    ("fftn", "8", "x", (16, 12, 10), "complex128", "explicit", {}),
    ("fftn", "8", "x", (16, 12, 10), "complex64", "auto", {}),
    ("ifftn", "1x8", "None,y", (10, 16, 12), "complex128", "explicit", {}),
    ("fftn", "2x4", "x,y", (12, 20, 6), "float64", "explicit", {}),
    ("ifftn", "4x2", "x,y", (20, 12, 6), "complex64", "auto", {}),
    (
        "fftn",
        "8",
        "x",
        (16, 12, 10),
        "complex128",
        "explicit",
        {"s": (16, 10, 10), "axes": (0, 1, 2)},
    ),
    ("rfftn", "8", "x", (16, 12, 9), "float64", "explicit", {}),
    ("rfftn", "2x4", "x,y", (12, 20, 7), "float32", "auto", {}),
    ("rfftn", "2x4", "x,y", (12, 20, 8), "float64", "explicit", {"s": (12, 20, 7), "axes": ALL}),
    (
        "irfftn",
        "8",
        "x",
        (16, 12, 5),
        "complex128",
        "explicit",
        {"s": (16, 12, 9), "axes": (0, 1, 2)},
    ),
    (
        "irfftn",
        "2x4",
        "x,y",
        (12, 20, 4),
        "complex64",
        "auto",
        {"s": (12, 20, 7), "axes": (0, 1, 2)},
    ),
    ("fft2", "2x4", "x,y", (12, 20), "complex128", "explicit", {}),
    ("ifft2", "4x2", "x,y", (20, 12), "float32", "auto", {}),
    ("rfft2", "8", "x", (8, 8), "float64", "explicit", {}),
    ("irfft2", "8", "x", (8, 5), "complex128", "auto", {"s": (8, 8)}),
    ("fft", "8", "x", (16, 12), "complex128", "auto", {"axis": 0}),
    ("ifft", "8", "x", (16, 12), "complex64", "explicit", {"axis": 0}),
]


def _full_matrix() -> list[tuple[str, str, str, tuple[int, ...], str, str, dict[str, Any]]]:
    shapes = [(16, 12, 10), (12, 20, 6), (20, 12, 9), (8, 24, 7)]
    specs = {"8": ["x", "None,x"], "1x8": ["None,y"], "2x4": ["x,y"], "4x2": ["x,y", "y,x"]}
    dtypes = {
        "fftn": ["complex64", "complex128", "float32", "float64"],
        "ifftn": ["complex64", "complex128"],
        "rfftn": ["float32", "float64"],
        "irfftn": ["complex64", "complex128"],
    }
    cases = []
    for name, mesh, shape, types in itertools.product(dtypes, NAMES, shapes, ("auto", "explicit")):
        sizes = dict(zip(NAMES[mesh].split(","), map(int, mesh.split("x")), strict=True))
        in_shape = (*shape[:-1], shape[-1] // 2 + 1) if name == "irfftn" else shape
        kwargs = {"s": shape, "axes": (0, 1, 2)} if name == "irfftn" else {}
        for spec, dtype in itertools.product(specs[mesh], dtypes[name]):
            entries = normalize_spec(shardkit.spec(spec), len(shape))
            parts = [int(np.prod([sizes[a] for a in e])) for e in entries]
            if all(n % k == 0 for n, k in zip(in_shape, parts, strict=True)):
                cases.append((name, mesh, spec, in_shape, dtype, types, kwargs))
    return cases


if FULL:  # the matrix also holds divisible cases: they must not pay for padding
    CASES = _full_matrix()


def _entries(spec: Any, rank: int) -> tuple[tuple[str, ...], ...]:
    return normalize_spec(spec, rank)


def _reference(name: str, a: np.ndarray, kwargs: dict[str, Any]) -> np.ndarray:
    wide = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    return getattr(np.fft, name)(wide, **kwargs)


def _call(name: str, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The N-D transform a call runs and its keywords: 1-D and 2-D forms are fftn & co. with axes."""
    kw: dict[str, Any] = dict(kwargs)
    if name in ("fft", "ifft"):
        kw = {"axes": (kw.pop("axis", -1),), **({"s": (kw["n"],)} if "n" in kw else {})}
    elif name in PLANNED:
        kw.setdefault("axes", (-2, -1))
    return PLANNED.get(name, {"fft": "fftn", "ifft": "ifftn"}.get(name, name)), kw


def _plan(name: str, x: jax.Array, kwargs: dict[str, Any], layout: Any) -> skfft.FFTPlan:
    """The plan the call runs."""
    sharding = x.sharding
    assert isinstance(sharding, NamedSharding)
    assert isinstance(sharding.mesh, jax.sharding.Mesh)
    base, kw = _call(name, kwargs)
    return skfft.plan(
        base, x.shape, spec=sharding.spec, mesh=sharding.mesh, out_layout=layout, **kw
    )


def _moved_plan(name: str, x: jax.Array, kwargs: dict[str, Any]) -> skfft.FFTPlan | None:
    """The plan the Auto route moves every split to, if it does (see ``shardkit.fft._route``)."""
    base, kw = _call(name, kwargs)
    problem = _describe(base, x.shape, kw.get("s"), kw.get("axes"), None, "default", "natural")
    with jax.set_mesh(x.sharding.mesh):  # type: ignore[attr-defined]
        return _auto_route(problem, x)[0].plan


@pytest.mark.parametrize(
    ("name", "mesh_shape", "spec", "shape", "dtype", "types", "kwargs"),
    CASES,
    ids=[f"{c[0]}-{c[1]}-{c[2]}-{'x'.join(map(str, c[3]))}-{c[4]}-{c[5]}" for c in CASES],
)
def test_matches_numpy_eager_and_jit_with_only_padded_all_to_alls(
    name: str,
    mesh_shape: str,
    spec: str,
    shape: tuple[int, ...],
    dtype: str,
    types: str,
    kwargs: dict[str, Any],
) -> None:
    m = make_mesh(mesh_shape, types)
    a = _data(shape, dtype)
    x = shardkit.shard(a, mesh=m, spec=spec)
    ref = _reference(name, a, kwargs)
    tol = np.result_type(a.dtype, np.complex64)

    def f(v: jax.Array) -> jax.Array:
        return getattr(skfft, name)(v, **kwargs)

    eager = f(x)
    assert_close(eager, ref, dtype=tol, what=f"eager {name}")
    compiled = jax.jit(f).lower(x).compile()
    assert_close(compiled(x), ref, dtype=tol, what=f"jit {name}")

    # The plan padded cases must need (Auto axes: the natural one, their fallback layout).
    p = _plan(name, x, kwargs, "natural" if types == "auto" else "default")
    assert p.padded or FULL, f"{p} needs no padding: the case tests nothing new"
    out_spec = _plan(name, x, kwargs, "default").out_spec
    assert _entries(eager.sharding.spec, a.ndim) == _entries(out_spec, a.ndim)  # type: ignore[attr-defined]
    report = comms(compiled)
    report.assert_only({"all-to-all"})
    if types == "auto":
        # The Shardy rule places the output where Explicit axes do (the default
        # layout) wherever it can carry the split, else keeps the input's: the
        # program is that layout's plan, collective for collective.
        got = _entries(compiled(x).sharding.spec, a.ndim)
        moved = _moved_plan(name, x, kwargs)
        if moved is not None:
            # No rule keeps every split: XLA moves this one to the route's split
            # (all-to-alls, asserted above), whose plan then runs.
            assert got == _entries(moved.out_spec, a.ndim)
            assert report.count("all-to-all") >= moved.all_to_alls
            return
        plans = {_entries(q.out_spec, a.ndim): q for q in (p, _plan(name, x, kwargs, "default"))}
        assert got in plans, f"Auto output {got} is neither plan's ({list(plans)})"
        p = plans[got]
    assert report.count("all-to-all") == p.all_to_alls
    assert report.bytes_sent == p.sent_bytes(a.dtype)
    if p.padded:
        assert 0 < p.padding_bytes(a.dtype) < p.sent_bytes(a.dtype)
    else:
        assert p.padding_bytes(a.dtype) == 0


def test_padding_bytes_of_a_slab_by_hand() -> None:
    # 16x12x10 complex128 on 8 devices, split on axis 0. Move 1 sends blocks of
    # 2x16x10 (axis 1 padded 12 -> 16) where 2x12x10 would do; move 2 (back to the
    # natural layout) sends 16x2x10 where an even split holds 16x1.5x10. Each sends
    # 7/8 of its block: 2 * 7/8 * 80 elements * 16 B = 2240 B of padding.
    m = make_mesh("8", "explicit")
    p = skfft.plan("fftn", (16, 12, 10), spec="x", mesh=m)
    assert (p.out_spec, p.all_to_alls) == (shardkit.spec("x,None,None"), 2)
    assert p.sent_bytes(np.complex128) == 2 * 7 * (2 * 16 * 10) * 16 // 8 == 8960
    assert p.padding_bytes(np.complex128) == 2240
    assert p.padding_bytes(np.complex64) == 1120
    divisible = skfft.plan("fftn", (16, 16, 10), spec="x", mesh=m)
    assert divisible.padding_bytes(np.complex128) == 0
    struct = jax.ShapeDtypeStruct(
        (16, 12, 10), jnp.complex128, sharding=NamedSharding(m, shardkit.spec("x"))
    )
    report = comms(skfft.fftn, struct)
    report.assert_only({"all-to-all"})
    assert report.bytes_sent == 8960


def test_real_input_moves_before_its_first_transform_in_its_own_dtype() -> None:
    # fft2 of a 2-D array on a 2-D mesh moves before any FFT: that move carries float32.
    m = make_mesh("2x4", "explicit")
    p = skfft.plan("fftn", (12, 20), spec="x,y", mesh=m)
    assert p.steps[0].op == "all_to_all"
    struct = jax.ShapeDtypeStruct((12, 20), jnp.float32, sharding=NamedSharding(m, p.in_spec))
    report = comms(skfft.fft2, struct)
    report.assert_only({"all-to-all"})
    assert report.bytes_sent == p.sent_bytes(np.float32) < p.sent_bytes(np.complex64)


@pytest.mark.parametrize(
    ("forward", "inverse", "mesh_shape", "spec", "shape"),
    [
        ("fftn", "ifftn", "8", "x", (16, 12, 10)),
        ("fftn", "ifftn", "2x4", "x,y", (6, 12, 10)),
        ("rfftn", "irfftn", "2x4", "x,y", (12, 20, 7)),
        ("rfft2", "irfft2", "8", "x", (8, 9)),
    ],
)
def test_round_trip_restores_values_and_layout(
    forward: str, inverse: str, mesh_shape: str, spec: str, shape: tuple[int, ...]
) -> None:
    real = forward.startswith("r")
    a = _data(shape, "float64" if real else "complex128")
    x = shardkit.shard(a, mesh=make_mesh(mesh_shape, "explicit"), spec=spec)
    y = getattr(skfft, forward)(x)
    z = getattr(skfft, inverse)(
        y, **({"s": shape if forward == "rfftn" else shape[-2:]} if real else {})
    )
    assert _entries(z.sharding.spec, a.ndim) == _entries(x.sharding.spec, a.ndim)  # type: ignore[attr-defined]
    assert_close(z, a)


@pytest.mark.parametrize("types", ["auto", "explicit"])
def test_grad_through_padded_moves(types: str) -> None:
    # 6x12x10 on 2x4: y moves onto axis 2 (10 -> 12, padded), the output comes back.
    m = make_mesh("2x4", types)
    a = _data((6, 12, 10), "complex128", seed=2)
    x = shardkit.shard(a, mesh=m, spec="x,y")

    def loss(fn: Any) -> Any:
        def value(v: jax.Array) -> jax.Array:
            y = fn(v, norm="ortho")
            w = jnp.cos(jnp.arange(y.size, dtype=jnp.float64)).reshape(y.shape)
            return jnp.sum(w * jnp.abs(y) ** 2)

        return value

    with jax.set_mesh(m):
        compiled = jax.jit(jax.grad(loss(skfft.fftn))).lower(x).compile()
        g = compiled(x)
    comms(compiled).assert_only({"all-to-all"})
    assert_close(g, jax.grad(loss(jnp.fft.fftn))(jnp.asarray(a)), what="grad")
