"""shardkit.linalg.matmul: every algorithm against NumPy, its collectives, its memory."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.inspect import CommReport, comms
from shardkit.layout import shard
from shardkit.linalg import ALGORITHM_NAMES, Algorithm, Candidate, Explanation, matmul
from shardkit.testing import assert_close

M, K, N = 24, 40, 56  # odd shapes, divisible by the 2- and 4-way splits used below


def _data(dtype: Any = np.float64, shape_a=(M, K), shape_b=(K, N), seed=0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape_a).astype(dtype), rng.standard_normal(shape_b).astype(dtype)


def _by_kind(collectives) -> Counter:  # type: ignore[no-untyped-def]
    out: Counter = Counter()
    for c in collectives:
        out[c.kind, "runs"] += c.count
        out[c.kind, "bytes"] += c.total_sent_bytes
    return out


def assert_matches(report: CommReport, cand: Candidate) -> None:
    """The compiled program's kinds, runs and bytes per kind equal the prediction."""
    assert _by_kind(report.collectives) == _by_kind(cand.collectives), (
        f"{cand.algorithm} ({cand.detail}) predicted {cand.collectives}\n{report}"
    )
    assert report.bytes_sent == cand.bytes_sent
    assert not report.unknown


# (mesh, spec a, spec b, algorithms that apply)
CASES = [
    ("2x4", "x", "None,y", {"local"}),
    ("2x4", "x,None", "None", {"local"}),
    ("2x4", "None", "None,y", {"local"}),
    ("2x4", "x,y", "y,None", {"allgather", "allreduce", "reduce_scatter", "ring"}),
    ("4x2", "x,y", "y,None", {"allgather", "allreduce", "reduce_scatter", "ring"}),
    ("8", "x", "x", {"allgather", "ring"}),
    ("8", "x", "None,x", {"allgather", "ring"}),
    ("8", "None,x", "x", {"allgather", "allreduce", "reduce_scatter", "ring"}),
    ("8", "None,x", "None", {"allgather", "ring"}),
    ("1x8", "None,y", "y", {"allgather", "allreduce", "reduce_scatter", "ring"}),
    ("2x4", "x,y", "x,y", {"allgather", "summa"}),
    ("4x2", "x,y", "x,y", {"allgather", "summa"}),
    ("2x2", "x,y", "x,y", {"allgather", "cannon", "summa"}),
]
ALGOS: list[Algorithm] = [
    "local",
    "allgather",
    "reduce_scatter",
    "allreduce",
    "ring",
    "cannon",
    "summa",
]


@pytest.mark.parametrize(("shape", "sa", "sb", "applicable"), CASES)
def test_every_algorithm_matches_numpy_and_its_formula(shape, sa, sb, applicable) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh(shape)
    x, y = _data()
    a, b = shard(x, mesh=m, spec=sa), shard(y, mesh=m, spec=sb)
    ran = set()
    for algo in ALGOS:
        if algo not in applicable:
            with pytest.raises(ValueError, match=f"algorithm={algo!r} does not apply"):
                matmul(a, b, algorithm=algo)
            continue
        ran.add(algo)
        assert_close(matmul(a, b, algorithm=algo), x @ y, what=f"{algo} {sa} @ {sb}")
        report = comms(partial(matmul, algorithm=algo), a, b)
        assert_matches(report, matmul(a, b, algorithm=algo, explain=True).chosen)
    assert ran == applicable
    auto = matmul(a, b)
    assert_close(auto, x @ y, what="auto")
    assert_matches(comms(matmul, a, b), matmul(a, b, explain=True).chosen)


@pytest.mark.parametrize("types", ["auto", "explicit"])
@pytest.mark.parametrize("algo", ["allreduce", "reduce_scatter", "ring", "allgather"])
def test_axis_types_eager_and_jit(types, algo) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh("2x4", types)
    x, y = _data()
    a, b = shard(x, mesh=m, spec="x,y"), shard(y, mesh=m, spec="y,None")
    eager = matmul(a, b, algorithm=algo)
    if types == "explicit":
        traced = jax.jit(lambda p, q: matmul(p, q, algorithm=algo))(a, b)
    else:
        # No arguments needed: the layout comes from the partitioner (see
        # tests/linalg/test_autojit.py); in_specs still fixes it at trace time.
        assert_close(jax.jit(lambda p, q: matmul(p, q, algorithm=algo))(a, b), x @ y)
        traced = jax.jit(
            lambda p, q: matmul(p, q, algorithm=algo, mesh=m, in_specs=("x,y", "y,None"))
        )(a, b)
    assert_close(eager, x @ y)
    assert_close(traced, x @ y)
    assert isinstance(eager.sharding, NamedSharding)
    assert isinstance(traced.sharding, NamedSharding)
    assert eager.sharding.spec == traced.sharding.spec


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
@pytest.mark.parametrize(
    ("shape", "sa", "sb", "algo"),
    [
        ("2x4", "x", "None,y", "local"),
        ("2x4", "x,y", "y,None", "allreduce"),
        ("2x4", "x,y", "y,None", "reduce_scatter"),
        ("8", "x", "x", "ring"),
        ("8", "None,x", "x", "ring"),
        ("8", "x", "None,x", "allgather"),
        ("2x2", "x,y", "x,y", "cannon"),
        ("2x4", "x,y", "x,y", "summa"),
    ],
)
def test_low_precision(dtype, shape, sa, sb, algo) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh(shape)
    x, y = _data(np.float32)
    a, b = shard(x.astype(dtype), mesh=m, spec=sa), shard(y.astype(dtype), mesh=m, spec=sb)
    c = matmul(a, b, algorithm=algo)
    assert c.dtype == jnp.dtype(dtype)
    want = np.asarray(x.astype(dtype), np.float64) @ np.asarray(y.astype(dtype), np.float64)
    assert_close(c, want, dtype=dtype)


@pytest.mark.parametrize("b_batched", [True, False])
@pytest.mark.parametrize("algo", ["auto", "allreduce", "reduce_scatter", "ring", "allgather"])
def test_batch_dimensions(b_batched, algo) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh("2x4")
    x, y = _data(shape_a=(4, 8, 16), shape_b=(4, 16, 8) if b_batched else (16, 8))
    a = shard(x, mesh=m, spec="x,None,y")
    b = shard(y, mesh=m, spec="x,y,None" if b_batched else "y,None")
    c = matmul(a, b, algorithm=algo)
    assert_close(c, x @ y)
    assert isinstance(c.sharding, NamedSharding)
    assert c.sharding.spec[0] == "x"
    cand = matmul(a, b, algorithm=algo, explain=True).chosen
    assert_matches(comms(lambda p, q: matmul(p, q, algorithm=algo), a, b), cand)


@pytest.mark.parametrize(
    ("sa", "sb", "out", "kind"),
    [
        ("x", "None", "None,x", "all-to-all"),
        ("x", "None", None, None),
        ("x", "None", "None", "all-gather"),
        ("None", "None", "x,None", None),
    ],
)
def test_out_spec_redistribution(sa, sb, out, kind) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh("8")
    x, y = _data()
    a, b = shard(x, mesh=m, spec=sa), shard(y, mesh=m, spec=sb)
    c = matmul(a, b, out_spec=out)
    assert_close(c, x @ y)
    if out is not None:
        assert c.sharding.is_equivalent_to(shard(x @ y, mesh=m, spec=out).sharding, 2)
    report = comms(lambda p, q: matmul(p, q, out_spec=out), a, b)
    assert_matches(report, matmul(a, b, out_spec=out, explain=True).chosen)
    assert report.kinds == ({kind} if kind else set())


def test_out_spec_steers_the_algorithm() -> None:
    m = make_mesh("2x4")
    x, y = _data()
    a, b = shard(x, mesh=m, spec="x,y"), shard(y, mesh=m, spec="y,None")
    chosen = matmul(a, b, out_spec="x,y", explain=True).chosen
    assert chosen.out_spec == "P('x', 'y')"
    # The partial sums over y are scattered, rotated or (at this small size, where the
    # CPU preset's tables price an all-reduce below a reduce-scatter along an inner
    # dimension) reduced and sliced; never moved again afterwards.
    assert chosen.algorithm in ("reduce_scatter", "ring", "allreduce")
    assert all(c.kind != "all-to-all" for c in chosen.collectives)


def _compiled(algo: Algorithm, m: Any, sa: P, sb: P, n: int) -> tuple[CommReport, Candidate]:
    """The compiled report and the prediction of ``algo`` on ``n x n`` float32 (no data)."""
    a, b = (
        jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, s)) for s in (sa, sb)
    )
    report = comms(lambda p, q: matmul(p, q, algorithm=algo), a, b)
    assert report.memory is not None
    return report, matmul(a, b, algorithm=algo, explain=True).chosen


@pytest.mark.parametrize(("shape", "spec"), [("8", P("x")), ("2x4", P(("x", "y")))])
def test_ring_peak_memory_is_at_most_half_of_allgather(shape, spec) -> None:  # type: ignore[no-untyped-def]
    # The case: n=2048 float32, a and b row-sharded 8 ways; compiled, never run.
    # Blocks are 2 MiB: all-gather holds a, b, the gathered b (16 MiB) and the output
    # (22 MiB); the ring a, b, the output, two of b's blocks and one panel's product.
    m = make_mesh(shape)
    ring, _ = _compiled("ring", m, spec, spec, 2048)
    gather, _ = _compiled("allgather", m, spec, spec, 2048)
    ring.assert_only("collective-permute")
    assert ring.count("collective-permute") == 7
    assert ring.memory is not None
    assert gather.memory is not None
    assert ring.memory.peak_bytes <= 0.5 * gather.memory.peak_bytes, (ring.memory, gather.memory)


def test_ring_reduce_scatter_keeps_its_memory_advantage() -> None:
    m = make_mesh("8")
    ring, _ = _compiled("ring", m, P(None, "x"), P("x"), 2048)
    rs, _ = _compiled("reduce_scatter", m, P(None, "x"), P("x"), 2048)
    assert ring.count("collective-permute") == 7
    assert ring.memory is not None
    assert rs.memory is not None
    assert ring.memory.peak_bytes <= 0.5 * rs.memory.peak_bytes, (ring.memory, rs.memory)


@pytest.mark.parametrize(
    ("shape", "sa", "sb"),
    [
        ("8", P("x"), P("x")),  # rotate b's row blocks
        ("8", P(None, "x"), P()),  # rotate a's column blocks
        ("2x4", P("x"), P("y")),  # rotate b's row blocks, a's rows split too
        ("2x4", P(None, ("x", "y")), P()),
    ],
)
def test_ring_rotation_predicted_peak_is_the_compiled_peak(shape, sa, sb) -> None:  # type: ignore[no-untyped-def]
    report, cand = _compiled("ring", make_mesh(shape), sa, sb, 256)
    assert cand.detail.startswith("rotate b's row" if sb != P() else "rotate a's column")
    assert report.memory is not None
    # Only scalars (loop counters, indices) are left out of the prediction.
    assert cand.peak_bytes <= report.memory.peak_bytes <= cand.peak_bytes + 1024, (
        cand.detail,
        report.memory,
    )


def test_auto_picks_the_cheapest_and_explains() -> None:
    m = make_mesh("8")
    x, y = _data()
    a, b = shard(x, mesh=m, spec="None,x"), shard(y, mesh=m, spec="x")
    ex = matmul(a, b, explain=True)
    assert isinstance(ex, Explanation)
    times = [c.time_s for c in ex.candidates]
    assert times == sorted(times)
    text = str(ex)
    for word in ("reduce_scatter", "allreduce", "not applicable"):
        assert word in text
    assert ex.chosen.bytes_sent <= min(
        c.bytes_sent for c in ex.candidates if c.algorithm == "allreduce"
    )


def test_second_eager_call_does_not_recompile() -> None:
    m = make_mesh("8")
    x, y = _data()
    a, b = shard(x, mesh=m, spec="None,x"), shard(y, mesh=m, spec="x")
    matmul(a, b)
    with jax.log_compiles(True):
        import logging

        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append  # type: ignore[method-assign]
        logger = logging.getLogger("jax")
        logger.addHandler(handler)
        try:
            matmul(a, b)
        finally:
            logger.removeHandler(handler)
    assert not [r for r in records if "Compiling" in r.getMessage()]


def test_algorithm_names() -> None:
    assert ("auto", *ALGOS) == ALGORITHM_NAMES


def test_errors_name_the_problem() -> None:
    m = make_mesh("2x4")
    x, y = _data()
    a, b = shard(x, mesh=m, spec="x,y"), shard(y, mesh=m, spec="y,None")
    with pytest.raises(ValueError, match=r"algorithm='fast'.*legal values are \['auto', 'local'"):
        matmul(a, b, algorithm="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"a has k=40 columns, b has 24 rows"):
        matmul(a, shard(x, mesh=m, spec="x"))
    with pytest.raises(ValueError, match=r"square grid.*summa"):
        matmul(shard(x, mesh=m, spec="x,y"), shard(y, mesh=m, spec="x,y"), algorithm="cannon")
    with pytest.raises(ValueError, match=r"matmul\(out_spec\).*6 is not divisible by 8"):
        matmul(shard(np.ones((6, 40)), mesh=m, spec="x"), b, out_spec="(x,y)")
    with pytest.raises(ValueError, match="neither operand is sharded"):
        matmul(x, y)
    with pytest.raises(ValueError, match="batch dims"):
        matmul(shard(np.ones((2, 8, 8)), mesh=m, spec="x"), np.ones((4, 8, 8)))
    with pytest.raises(ValueError, match="split a's batch dims"):
        matmul(
            shard(np.ones((2, 8, 8)), mesh=m, spec="x"), shard(np.ones((8, 8)), mesh=m, spec="x")
        )
    with pytest.raises(ValueError, match=r"different|on mesh"):
        matmul(a, shard(y, mesh=make_mesh("8"), spec="x"))


ZERO_SIZE = [
    pytest.param((0, 8), (8, 8), "x,y", "y,None", id="no-rows"),
    pytest.param((8, 0), (0, 8), "x,None", "None,y", id="no-inner"),
    pytest.param((8, 8), (8, 0), "x,y", "y,None", id="no-columns"),
    pytest.param((2, 0, 8), (8, 8), "x,None,y", "y,None", id="batched-no-rows"),
    pytest.param((0, 4, 8), (0, 8, 8), "None,x,y", "None,y,None", id="empty-batch"),
]


@pytest.mark.parametrize("types", ["auto", "explicit"])
@pytest.mark.parametrize(("shape_a", "shape_b", "sa", "sb"), ZERO_SIZE)
def test_zero_size_operands_give_the_empty_product(types, shape_a, shape_b, sa, sb) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh("2x4", types)
    a = shard(np.ones(shape_a, np.float32), mesh=m, spec=sa)
    b = shard(np.ones(shape_b, np.float64), mesh=m, spec=sb)
    expected = np.ones(shape_a, np.float32) @ np.ones(shape_b, np.float64)
    eager = matmul(a, b)
    assert (eager.shape, eager.dtype) == (expected.shape, expected.dtype)
    np.testing.assert_array_equal(jax.device_get(eager), expected)
    # Where the algorithm chosen for these layouts would have put the product.
    chosen = matmul(a, b, explain=True).chosen
    batch = [None if e == "None" else e for e in sa.split(",")[:-2]]
    assert eager.sharding == NamedSharding(m, P(*batch, *chosen.out))
    pinned = matmul(a, b, out_spec=",".join([*sa.split(",")[:-2], "None", "y"]))
    assert isinstance(pinned.sharding, NamedSharding)
    assert pinned.sharding.spec[-1] == "y"
    for algo in {c.algorithm for c in matmul(a, b, explain=True).candidates}:
        assert matmul(a, b, algorithm=algo).shape == expected.shape, algo  # type: ignore[arg-type]
    if types == "explicit":
        traced = jax.jit(matmul)(a, b)
        assert traced.sharding == eager.sharding
    else:
        assert jax.jit(matmul)(a, b).shape == expected.shape
        traced = jax.jit(partial(matmul, mesh=m, in_specs=(sa, sb)))(a, b)
    # JAX itself cannot copy some empty outputs of jit to the host (as
    # jax.jit(lambda a: a[:, :0]) shows on Explicit axes), so values are
    # compared where the product is not empty.
    assert (traced.shape, traced.dtype) == (expected.shape, expected.dtype)
    if expected.size:
        np.testing.assert_array_equal(jax.device_get(traced), expected)


# The matmul bench's eight cases and the algorithm measured fastest in each on 8
# simulated CPU devices (2-core host under load, `shardkit bench matmul`, 2026-11-28).
_MEASURED_FASTEST = {
    ("8", "rows", 2048): "allgather",
    ("8", "rows", 4096): "allgather",
    ("8", "k", 2048): "reduce_scatter",
    ("8", "k", 4096): "ring",
    ("2x4", "blocks", 2048): "summa",
    ("2x4", "blocks", 4096): "summa",
    ("2x4", "k", 2048): "ring",
    ("2x4", "k", 4096): "ring",
}


@pytest.mark.parametrize("shape", ["8", "2x4"])
def test_auto_without_calibration_picks_the_measured_fastest(shape: str) -> None:
    # No preset is saved in the tests' config directory, so this is what a new user
    # gets on CPU devices: the built-in "cpu" preset. Pricing compiles nothing.
    from shardkit.bench._suite_matmul import layouts
    from shardkit.inspect import INTERCONNECTS, interconnect

    assert interconnect(None) is INTERCONNECTS["cpu"]
    m = make_mesh(shape, axis_types="auto")
    for (mesh_shape, layout, n), fastest in _MEASURED_FASTEST.items():
        if mesh_shape != shape:
            continue
        specs = layouts(m.axis_names)[layout]
        a, b = (
            jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, s)) for s in specs
        )
        chosen = matmul(a, b, explain=True, mesh=m, in_specs=specs).chosen
        assert chosen.algorithm == fastest, (shape, layout, n)


@pytest.mark.parametrize(
    ("shape", "specs", "algorithm"),
    [
        ("2x4", ("x,y", "x,y"), "summa"),
        ("2x2", ("x,y", "x,y"), "cannon"),
        ("8", ("x,None", "x,None"), "ring"),
        ("2x4", ("x,y", "y,None"), "reduce_scatter"),
    ],
)
def test_the_algorithms_collectives_form_one_chain(
    shape: str, specs: tuple[str, str], algorithm: Algorithm
) -> None:
    # Independent collectives of one program can hang XLA's CPU runtime (devices reach
    # them in different orders): SUMMA's two panel all-reduces and Cannon's two shifts
    # per step were unordered; every pair is ordered by data dependency now.
    m = make_mesh(shape, devices=range(4) if shape == "2x2" else None)
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((32, 32)), rng.standard_normal((32, 32))
    a, b = shard(a_np, mesh=m, spec=specs[0]), shard(b_np, mesh=m, spec=specs[1])
    fn = jax.jit(lambda a, b: matmul(a, b, algorithm=algorithm))
    comms(fn, a, b).assert_ordered()
    assert_close(fn(a, b), a_np @ b_np)
