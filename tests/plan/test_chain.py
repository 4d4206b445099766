"""shardkit.plan.matmul_chain: optimal under its model, and the model holds when compiled."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.inspect import INTERCONNECTS, comms
from shardkit.layout.internal import normalize
from shardkit.linalg.internal import ALGORITHMS, MatmulProblem, enumerate_variants, price
from shardkit.plan import ChainPlan, candidate_specs, matmul_chain
from shardkit.testing import assert_close

LINK = INTERCONNECTS["shared-memory"]


def _block(shape, p, sizes) -> int:  # type: ignore[no-untyped-def]
    s = normalize(p, 2)
    return 4 * math.prod(n // math.prod(sizes[a] for a in e) for n, e in zip(shape, s, strict=True))


@functools.cache
def _steps(sizes_t, sa_shape, sb_shape, sa, sb, target):  # type: ignore[no-untyped-def]
    """Every (comm time, working bytes) of every variant: no pruning, unlike the planner."""
    sizes = dict(sizes_t)
    norm = lambda p: tuple(tuple(a for a in e if sizes[a] > 1) for e in normalize(p, 2))  # noqa: E731
    pb = MatmulProblem(norm(sa), norm(sb), sa_shape[0], sa_shape[1], sb_shape[1], sizes_t, 4)
    variants, _ = enumerate_variants(pb, tuple(ALGORITHMS))
    inputs = _block(sa_shape, sa, sizes) + _block(sb_shape, sb, sizes)
    out = []
    for v in variants:
        c = price(pb, v, LINK, target=norm(target))
        out.append((c.comm_time_s, c.peak_bytes - inputs))
    return tuple(out)


def _trees(i: int, j: int):  # type: ignore[no-untyped-def]
    if i == j:
        yield i
        return
    for k in range(i, j):
        for left in _trees(i, k):
            for right in _trees(k + 1, j):
                yield (left, right)


def brute_force(shapes, m, pool, limit):  # type: ignore[no-untyped-def]
    """The least cost over every order, spec assignment and algorithm variant."""
    sizes = {str(k): int(v) for k, v in m.shape.items()}
    sizes_t = tuple((k, v) for k, v in sizes.items() if v > 1)

    def specs(shape):  # type: ignore[no-untyped-def]
        legal = candidate_specs(shape, m)
        return [p for p in pool if p in legal]

    def options(tree):  # type: ignore[no-untyped-def]
        # -> (cost, peak, leaf bytes, result bytes (0 for a leaf), spec, shape)
        if isinstance(tree, int):
            for p in specs(shapes[tree]):
                b = _block(shapes[tree], p, sizes)
                yield 0.0, b, b, 0, p, shapes[tree]
            return
        for cl, pl, ll, rl, sl, shl in options(tree[0]):
            for cr, pr, lr, rr, sr, shr in options(tree[1]):
                shape = (shl[0], shr[1])
                for t in specs(shape):
                    for comm, work in _steps(sizes_t, shl, shr, sl, sr, t):
                        peak = max(pl + lr, ll + rl + pr, ll + lr + rl + rr + work)
                        yield cl + cr + comm, peak, ll + lr, _block(shape, t, sizes), t, shape

    best = math.inf
    for tree in _trees(0, len(shapes) - 1):
        for cost, peak, *_ in options(tree):
            if peak <= limit:
                best = min(best, cost)
    return best


@pytest.mark.parametrize(
    ("mesh_shape", "shapes", "pool", "limit"),
    [
        ("8", [(16, 8), (8, 16), (16, 16), (16, 8)], None, 1024),
        ("8", [(16, 8), (8, 16), (16, 16), (16, 8)], None, 1600),
        ("8", [(32, 8), (8, 32), (32, 8)], None, 700),
        ("8", [(32, 8), (8, 32), (32, 8)], None, 1400),
        ("2x4", [(16, 16)] * 3, [P(), P("x"), P(None, "y"), P("x", "y"), P(("x", "y"))], 1200),
        ("2x4", [(16, 8), (8, 16), (16, 16)], [P("x"), P(None, "y"), P("x", "y"), P("y")], 900),
    ],
)
def test_dynamic_programming_is_optimal_under_the_model(mesh_shape, shapes, pool, limit) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh(mesh_shape)
    pool_ = list(candidate_specs((max(max(s) for s in shapes),) * 2, m)) if pool is None else pool
    want = brute_force([tuple(s) for s in shapes], m, pool_, limit)
    if not math.isfinite(want):
        with pytest.raises(ValueError, match="fits memory_limit"):
            matmul_chain(shapes, mesh=m, memory_limit=limit, candidates=pool_, interconnect=LINK)
        return
    # The brute force prices with LINK (the CPU default is the tabulated "cpu" preset).
    plan = matmul_chain(shapes, mesh=m, memory_limit=limit, candidates=pool_, interconnect=LINK)
    assert plan.comm_time_s == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert plan.peak_bytes <= limit


def _run_and_compare(plan: ChainPlan) -> None:
    rng = np.random.default_rng(3)
    mats = [rng.standard_normal(s) for s in plan.shapes]
    want = mats[0]
    for x in mats[1:]:
        want = want @ x
    assert_close(plan.apply(*mats), want)
    report = comms(plan.apply, *plan.place(*mats))
    got = {
        k: (report.count(k), sum(c.total_sent_bytes for c in report.collectives if c.kind == k))
        for k in report.kinds
    }
    assert got == plan.predicted, f"{plan}\n{report}"


@pytest.mark.parametrize("limit", [None, 4096, 2048])  # float64: twice float32
@pytest.mark.parametrize("types", ["explicit", "auto"])
def test_seed_chain_on_2x4_runs_as_predicted(limit, types) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh("2x4", types)
    plan = matmul_chain([(16, 16)] * 4, mesh=m, memory_limit=limit, dtype=np.float64)
    if limit is None:
        assert plan.bytes_sent == 0
    else:
        assert plan.peak_bytes <= limit
        assert plan.bytes_sent > 0
    _run_and_compare(plan)


def test_out_spec_and_in_specs_are_respected() -> None:
    m = make_mesh("8")
    plan = matmul_chain(
        [(16, 8), (8, 16), (16, 8)],
        mesh=m,
        memory_limit=4096,
        out_spec="None",
        in_specs=["x", None, None],
        dtype=np.float64,
    )
    assert plan.out_spec == P()
    assert plan.in_specs[0] == P("x")
    _run_and_compare(plan)
    assert "A0" in str(plan)


def test_errors() -> None:
    m = make_mesh("8")
    with pytest.raises(ValueError, match="do not chain"):
        matmul_chain([(4, 8), (4, 8)], mesh=m)
    with pytest.raises(ValueError, match="fits memory_limit=16"):
        matmul_chain([(16, 16)] * 2, mesh=m, memory_limit=16)
    with pytest.raises(ValueError, match="empty"):
        matmul_chain([], mesh=m)
    plan = matmul_chain([(8, 8)] * 2, mesh=m)
    with pytest.raises(ValueError, match="priced for float32"):
        plan.apply(np.ones((8, 8)), np.ones((8, 8)))


def test_positional_mesh_and_specs_are_deprecated() -> None:
    m = make_mesh("8")
    shapes = [(16, 8), (8, 16)]
    new = matmul_chain(shapes, mesh=m, memory_limit=4096, candidates=["x", None])
    with pytest.warns(DeprecationWarning, match=r"write matmul_chain\(shapes, mesh=mesh\)") as rec:
        old = matmul_chain(shapes, m, memory_limit=4096, candidates=["x", None])
    assert rec[0].filename == __file__
    with pytest.warns(DeprecationWarning, match="specs= is deprecated.*write candidates="):
        renamed = matmul_chain(shapes, mesh=m, memory_limit=4096, specs=["x", None])
    assert old.in_specs == new.in_specs == renamed.in_specs
    with pytest.raises(TypeError, match="got both"):
        matmul_chain(shapes, m, mesh=m)
    with pytest.raises(TypeError, match="matmul_chain: mesh= is missing"):
        matmul_chain(shapes)
