"""Auto axes inside ``jit`` against Explicit axes, over random problems (issue 35).

For random meshes, shapes, specs, transforms, ``axes=`` and ``s=``: the Auto route
(:mod:`shardkit.fft._route`) always gives numpy's values, never an ``INTERNAL``
error, the output layout its route promises (:meth:`Route.out_spec`) and no
all-gather, except where the route reports the documented limits (``limited``: no
split over every mesh axis has a plan; or XLA cannot move the split to the
route's by ``all_to_all``, :meth:`Route.reaches`); and where the op gathers, it
warns. Where the promised layout is the Explicit
plan's and the rule carries the split, the number of ``all_to_all`` is the same
too. 20 cases run by default (4 of them limited), all 160 with
``SHARDKIT_FULL_TESTS=1`` (29 limited).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import warnings
from typing import Any

import jax
import numpy as np
import pytest

import shardkit
import shardkit.fft as skfft
from _matrix import FULL
from _meshes import make_mesh
from shardkit.fft._api import _auto_route, _describe
from shardkit.inspect import comms
from shardkit.layout.internal import normalize
from shardkit.testing import assert_close

MESHES = ("8", "2x4", "4x2")
LENGTHS = (4, 8, 12, 16)
NEW = (None, None, 4, 7, 12, 20)  # None: keep the length
NAMES = ("fftn", "ifftn", "rfftn", "irfftn")


def _specs(shape: tuple[int, ...], mesh_shape: str) -> list[str]:
    names = ["x"] if "x" not in mesh_shape else ["x", "y"]
    sizes = dict(zip(names, map(int, mesh_shape.split("x")), strict=True))
    out = []
    for where in itertools.product(range(-1, len(shape)), repeat=len(names)):
        for order in itertools.permutations(names):
            spec = [[a for a in order if where[names.index(a)] == d] for d in range(len(shape))]
            if all(
                n % math.prod(sizes[a] for a in e) == 0 for n, e in zip(shape, spec, strict=True)
            ):
                text = ",".join(
                    "None" if not e else e[0] if len(e) == 1 else f"({','.join(e)})" for e in spec
                )
                out.append(text)
    return sorted(set(out))


def _case(seed: int) -> tuple[Any, ...]:
    rng = random.Random(seed)
    mesh_shape = rng.choice(MESHES)
    shape = tuple(rng.choice(LENGTHS) for _ in range(rng.choice((1, 2, 2, 3, 3))))
    spec = rng.choice(_specs(shape, mesh_shape))
    axes = tuple(rng.sample(range(len(shape)), rng.randint(1, len(shape))))
    name = rng.choice(NAMES)
    new = [rng.choice(NEW) for _ in axes]
    s = tuple(n or shape[a] for n, a in zip(new, axes, strict=True))
    if name == "irfftn" and rng.random() < 0.5:
        s = (*s[:-1], 2 * (shape[axes[-1]] - 1))
    return seed, mesh_shape, shape, spec, name, axes, s


SEEDS = range(160) if FULL else range(0, 160, 8)


def _run(m: jax.sharding.Mesh, fn: Any, a: np.ndarray, spec: str) -> tuple[Any, Any]:
    x = shardkit.shard(a, mesh=m, spec=spec)
    with jax.set_mesh(m):
        f = jax.jit(fn)
        return f(x), comms(f, x)


@pytest.mark.parametrize("case", [_case(i) for i in SEEDS], ids=lambda c: f"seed{c[0]}")
def test_auto_matches_explicit(case: tuple[Any, ...]) -> None:
    _, mesh_shape, shape, spec, name, axes, s = case
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape)
    if name != "rfftn":
        a = a + 1j * rng.standard_normal(shape)
    fn = functools.partial(getattr(skfft, name), s=s, axes=axes)
    want = getattr(np.fft, name)(a, s=s, axes=axes)

    auto_mesh = make_mesh(mesh_shape, "auto")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        auto, report = _run(auto_mesh, fn, a, spec)
    assert_close(auto, want)  # every case: right values, no INTERNAL error
    with jax.set_mesh(auto_mesh):
        problem = _describe(name, shape, s, axes, None, "default", "natural")
        route, _ = _auto_route(problem, shardkit.shard(a, mesh=auto_mesh, spec=spec))
    split = normalize(shardkit.spec(spec), len(shape))
    promised = route.out_spec(split)
    assert normalize(auto.sharding.spec, auto.ndim) == promised
    if route.reaches(split):
        # A gather by the op is never silent, and nothing else warns.
        warned = any("the partitioner gathers" in str(w.message) for w in caught)
        assert warned == (report.count("all-gather") > 0), [str(w.message) for w in caught]
    if route.limited or not route.reaches(split):
        return  # the documented limits (the layout contract in shardkit.fft)
    report.assert_none("all-gather")

    expl_mesh = make_mesh(mesh_shape, "explicit")
    try:
        expl, expl_report = _run(expl_mesh, fn, a, spec)
    except (ValueError, NotImplementedError):
        return  # Explicit refuses this split; Auto moves it, by all-to-alls
    assert_close(expl, want)
    if promised == normalize(expl.sharding.spec, expl.ndim) and route.plan is None:
        # The rule carries the split as Explicit axes place it: the same program.
        assert report.count("all-to-all") == expl_report.count("all-to-all")
