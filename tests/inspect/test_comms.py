"""comms() on programs whose collectives are known by hand.

Per-device blocks are float32[8,4] = 128 B throughout (a float32[16,16] array on 2x4
or 4x2 meshes split over both axes; float32[64,4] split over an 8-device mesh), so:
all-reduce over p sends 2 (p-1)/p * 128, all-gather (p-1)/p of the gathered result,
reduce-scatter and all-to-all (p-1)/p * 128, a permute 128.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import shardkit
from _meshes import make_mesh
from shardkit.inspect import Collective, CommReport, comms

F32 = jnp.float32


def _need(n: int) -> None:
    if jax.device_count() < n:
        pytest.skip(f"needs {n} devices")


def _run(
    shape: str,
    names: str,
    body: Callable[..., Any],
    out: P,
    *,
    axis_types: Literal["auto", "explicit"] = "auto",
) -> CommReport:
    _need(8)
    m = make_mesh(shape, axis_types, names=names)
    in_spec = P(*m.axis_names) if len(m.axis_names) == 2 else P(m.axis_names[0], None)
    global_shape = (16, 16) if len(m.axis_names) == 2 else (64, 4)
    x = jax.ShapeDtypeStruct(global_shape, F32, sharding=jax.NamedSharding(m, in_spec))
    f = jax.shard_map(body, mesh=m, in_specs=in_spec, out_specs=out, check_vma=False)
    return comms(f, x)


def _one(report: CommReport) -> Collective:
    assert report.unknown == ()
    assert len(report.collectives) == 1, report
    return report.collectives[0]


def _shift(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


# (mesh, names, body, out_specs, kind, axes, group size, sent bytes per device)
CASES = [
    ("8", "x", lambda a: jax.lax.psum(a, "x"), P(None, None), "all-reduce", ("x",), 8, 224),
    ("8", "x", lambda a: jax.lax.all_gather(a, "x", tiled=True), P(None, None), "all-gather", ("x",), 8, 896),
    ("8", "x", lambda a: jax.lax.all_to_all(a, "x", 0, 0, tiled=True), P("x", None), "all-to-all", ("x",), 8, 112),
    ("8", "x", lambda a: jax.lax.ppermute(a, "x", _shift(8)), P("x", None), "collective-permute", ("x",), 8, 128),
    ("8", "x", lambda a: jax.lax.psum_scatter(a, "x", tiled=True), P("x", None), "reduce-scatter", ("x",), 8, 112),
    ("2x4", "x,y", lambda a: jax.lax.psum(a, "x"), P(None, "y"), "all-reduce", ("x",), 2, 128),
    ("2x4", "x,y", lambda a: jax.lax.psum(a, "y"), P("x", None), "all-reduce", ("y",), 4, 192),
    ("2x4", "x,y", lambda a: jax.lax.psum(a, ("x", "y")), P(), "all-reduce", ("x", "y"), 8, 224),
    ("2x4", "x,y", lambda a: jax.lax.all_gather(a, "y", axis=1, tiled=True), P("x", None), "all-gather", ("y",), 4, 384),
    ("2x4", "x,y", lambda a: jax.lax.all_to_all(a, "y", 0, 1, tiled=True), P("x", "y"), "all-to-all", ("y",), 4, 96),
    ("2x4", "x,y", lambda a: jax.lax.ppermute(a, "y", _shift(4)), P("x", "y"), "collective-permute", ("y",), 8, 128),
    ("2x4", "x,y", lambda a: jax.lax.ppermute(a, "x", [(0, 1), (1, 0)]), P("x", "y"), "collective-permute", ("x",), 8, 128),
    ("2x4", "x,y", lambda a: jax.lax.psum_scatter(a, ("x", "y"), tiled=True), P(("x", "y")), "reduce-scatter", ("x", "y"), 8, 112),
    ("4x2", "x,y", lambda a: jax.lax.psum(a, "x"), P(None, "y"), "all-reduce", ("x",), 4, 192),
    ("4x2", "x,y", lambda a: jax.lax.all_gather(a, "x", axis=0, tiled=True), P(None, "y"), "all-gather", ("x",), 4, 384),
    ("4x2", "x,y", lambda a: jax.lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True), P("x", "y"), "reduce-scatter", ("y",), 2, 64),
]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "names", "body", "out", "kind", "axes", "p", "sent"),
    CASES,
    ids=[f"{c[0]}-{c[4]}-{','.join(c[5])}" for c in CASES],
)
def test_shard_map_collectives(shape, names, body, out, kind, axes, p, sent) -> None:  # type: ignore[no-untyped-def]
    c = _one(_run(shape, names, body, out))
    assert (c.kind, c.axes, c.axes_exact, c.group_size, c.count) == (kind, axes, True, p, 1)
    assert (c.sent_bytes, c.received_bytes) == (sent, sent)
    assert c.dtype == "f32"


@pytest.mark.parametrize("axis_types", ["auto", "explicit"])
def test_explicit_and_auto_meshes_agree(axis_types: Literal["auto", "explicit"]) -> None:
    r = _run("2x4", "x,y", lambda a: jax.lax.psum(a, "y"), P("x", None), axis_types=axis_types)
    c = _one(r)
    assert (c.kind, c.axes, c.sent_bytes) == ("all-reduce", ("y",), 192)


def test_fori_loop_counts_trips() -> None:
    def body(a: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, 5, lambda i, c: jax.lax.psum(c, "y") * 0.5, a)

    r = _run("2x4", "x,y", body, P("x", "y"))
    c = _one(r)
    assert (c.kind, c.axes, c.count, c.unbounded) == ("all-reduce", ("y",), 5, False)
    assert r.bytes_sent == 5 * 192
    r.assert_bytes_at_most(960)


def test_while_loop_without_trip_count_is_unbounded() -> None:
    def body(a: jax.Array) -> jax.Array:
        return jax.lax.while_loop(lambda c: c.sum() < 100.0, lambda c: jax.lax.psum(c, "y"), a)

    c = _one(_run("2x4", "x,y", body, P("x", "y")))
    assert (c.count, c.unbounded) == (1, True)


def test_axes_follow_mesh_positions_not_device_ids() -> None:
    _need(8)
    m = make_mesh("2x4", "auto", devices=list(range(7, -1, -1)))
    x = jax.ShapeDtypeStruct((16, 16), F32, sharding=jax.NamedSharding(m, P("x", "y")))
    f = jax.shard_map(
        lambda a: jax.lax.psum(a, "x"), mesh=m, in_specs=P("x", "y"), out_specs=P(None, "y")
    )
    assert _one(comms(f, x)).axes == ("x",)


@pytest.mark.parametrize("axis_types", ["auto", "explicit"])
def test_row_by_column_matmul_communicates_nothing(
    axis_types: Literal["auto", "explicit"],
) -> None:
    _need(8)
    m = make_mesh("2x4", axis_types)
    a = shardkit.shard(np.ones((32, 16), np.float32), mesh=m, spec="x,None")
    b = shardkit.shard(np.ones((16, 32), np.float32), mesh=m, spec="None,y")
    r = comms(jnp.matmul, a, b)
    r.assert_none()
    r.assert_only(set())
    assert r.mesh_axes == (("x", 2), ("y", 4))
    assert r.flops is not None
    assert r.flops > 0
    assert r.memory is not None
    # Inputs: 2 * 32*16*4 B over 8 devices = 512 B ideal; a device holds a [16,16]
    # block of a and a [16,8] block of b.
    assert r.memory.ideal_bytes == 512
    assert r.memory.argument_bytes == 16 * 16 * 4 + 16 * 8 * 4
    assert r.memory.peak_bytes >= r.memory.argument_bytes + r.memory.output_bytes
    assert r.memory.ratio_to_ideal == r.memory.peak_bytes / 512


def test_sum_over_sharded_rows_all_reduces_over_x() -> None:
    _need(8)
    m = make_mesh("2x4", "auto")
    x = jax.ShapeDtypeStruct((16, 16), F32, sharding=jax.NamedSharding(m, P("x", "y")))
    r = comms(lambda a: a.sum(axis=0), x)
    assert {c.kind for c in r.collectives} <= {"all-reduce", "all-gather"}
    assert any(c.axes == ("x",) for c in r.collectives)


def test_accepts_lowered_and_compiled_and_mesh_keyword() -> None:
    _need(8)
    m = make_mesh("8", "auto")
    x = jax.ShapeDtypeStruct((64, 4), F32, sharding=jax.NamedSharding(m, P("x", None)))
    lowered = jax.jit(lambda a: a.sum(axis=0)).lower(x)
    for target in (lowered, lowered.compile()):
        c = _one(comms(target))
        assert (c.kind, c.axes) == ("all-reduce", ("x",))
    other = make_mesh("2x4", "auto", names="a,b")
    assert _one(comms(lowered, mesh=other)).axes == ("a", "b")


def test_bad_inputs() -> None:
    with pytest.raises(TypeError, match="must be a function"):
        comms(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="legal values are"):
        comms(lambda a: a, np.ones(2), interconnect="carrier-pigeon")


def test_peak_flops_override_sets_compute_time() -> None:
    m = np.ones((64, 64), np.float32)
    r = comms(jnp.matmul, m, m, peak_flops=1e9)
    assert r.flops is not None
    assert r.compute_time_s == pytest.approx(r.flops / 1e9)
    assert r.bound == "compute"


def test_comms_accepts_typed_prng_keys() -> None:
    import jax.numpy as jnp

    key = jax.random.key(0)
    report = comms(lambda k, x: jax.random.normal(k, x.shape) + x, key, jnp.zeros(8, jnp.float32))
    assert report.count() == 0


def test_comms_lists_the_padding_of_a_size_the_mesh_does_not_divide() -> None:
    from shardkit import linalg

    m = make_mesh("2x4")
    rng = np.random.default_rng(0)

    def report(n: int) -> Any:
        a = jnp.asarray(rng.standard_normal((n, n)) + n * np.eye(n))
        b = jnp.asarray(rng.standard_normal((n, 2)))
        return shardkit.comms(lambda a, b: linalg.solve(a, b, mesh=m, spec="x,y", nb=8), a, b)

    padded = report(30)
    assert {(p.what, p.shape, p.padded_shape, p.extra_bytes) for p in padded.padding} == {
        ("matrix", (30, 30), (32, 32), (32 * 32 - 30 * 30) * 8),  # float64
        ("rhs", (30, 2), (32, 2), 2 * 2 * 8),
    }
    assert "padding: matrix 30x30 -> 32x32 (+992 B in all)" in str(padded)
    assert "padding +1.0 KiB in all" in padded.summary()
    assert type(padded).from_json(padded.to_json()).padding == padded.padding
    assert report(32).padding == ()


def test_comms_lists_the_fft_blocks_padded_per_device() -> None:
    m = make_mesh("8")
    x = shardkit.shard(np.ones((16, 12, 10), np.complex64), mesh=m, spec="x")
    report = shardkit.comms(shardkit.fft.fftn, x)
    # The all-to-all that splits 12 over 8 pads each device's (2, 12, 10) block to 16.
    assert [(p.what, p.shape, p.padded_shape, p.per_device) for p in report.padding] == [
        ("fft_block", (2, 12, 10), (2, 16, 10), True)
    ]
    assert report.padding[0].extra_bytes == 2 * 4 * 10 * 8
    assert "padding +640 B per device" in report.summary()
    full = shardkit.shard(np.ones((16, 16, 8), np.complex64), mesh=m, spec="x")
    assert shardkit.comms(shardkit.fft.fftn, full).padding == ()
