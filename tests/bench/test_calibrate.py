"""Calibration: the alpha-beta fit, preset files, and who reads the calibrated preset."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from typer.testing import CliRunner

import shardkit
from _meshes import make_mesh
from shardkit._config import config_dir
from shardkit.bench import Record
from shardkit.bench._calibrate import Point, calibrate, fit_collective, fit_interconnect
from shardkit.bench._suite_collectives import prediction_summary
from shardkit.bench._suite_matmul import auto_summary
from shardkit.cli import app
from shardkit.inspect import CollectiveFit, CommReport, Interconnect, comms, interconnect
from shardkit.inspect._presets import (
    PresetError,
    default_interconnect,
    load_preset,
    preset_path,
    save_preset,
)
from shardkit.linalg import matmul

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
SIZES = (1 << 10, 1 << 14, 1 << 18, 1 << 22)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SHARDKIT_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


def _points(alpha: float, beta: float, noise: float = 0.0, seed: int = 0) -> list[Point]:
    rng = np.random.default_rng(seed)
    return [
        Point("all-reduce", 4, n, (alpha + n / beta) * (1 + noise * rng.uniform(-1, 1)))
        for n in SIZES
        for _ in range(3)
    ]


def _link(alpha: dict[str, float], beta: dict[str, float], *, table: bool = False) -> Interconnect:
    points = [
        Point(k, p, n, alpha[k] + n / beta[k]) for k in KINDS for p in (2, 4, 8) for n in SIZES
    ]
    return fit_interconnect(
        points, peak_flops=5e9, name="test-calibrated", created="2026-01-02", table=table
    )


def test_fit_recovers_known_parameters() -> None:
    fit = fit_collective(_points(2e-4, 3e8))
    assert (fit.kind, fit.group_size) == ("all-reduce", 4)
    assert fit.latency_s == pytest.approx(2e-4, rel=1e-9)
    assert fit.bandwidth == pytest.approx(3e8, rel=1e-9)
    noisy = fit_collective(_points(2e-4, 3e8, noise=0.05))
    assert noisy.latency_s == pytest.approx(2e-4, rel=0.1)
    assert noisy.bandwidth == pytest.approx(3e8, rel=0.1)


def test_fit_clamps_negative_latency_and_rejects_one_size() -> None:
    points = [Point("all-gather", 2, n, n / 1e9 - 1e-7) for n in SIZES]
    fit = fit_collective(points)
    assert fit.latency_s == 0.0
    assert fit.bandwidth == pytest.approx(1e9, rel=0.05)
    with pytest.raises(ValueError, match="two or more sizes"):
        fit_collective([Point("all-gather", 2, 1024, 1e-5)] * 3)


def test_table_follows_measured_times() -> None:
    # Per-byte cost quadruples past 1 MiB, as on CPU devices past the caches; one point
    # is out of order (noise) and is pooled with its neighbour.
    times = {1 << 10: 1e-4, 1 << 14: 0.9e-4, 1 << 20: 1e-3, 1 << 22: 16e-3}
    fit = fit_collective([Point("all-to-all", 8, n, t) for n, t in times.items()])
    assert fit.seconds[:2] == pytest.approx((0.95e-4, 0.95e-4))
    assert fit.time(1 << 20) == pytest.approx(1e-3)
    assert fit.time(1 << 22) == pytest.approx(16e-3)
    assert fit.time(1 << 21) == pytest.approx(4e-3)  # log-log midpoint of 1 and 16 ms
    assert fit.time(1 << 23) == pytest.approx(32e-3)  # past the table: linear
    assert fit.time(10) == pytest.approx(0.95e-4)
    line = abs(fit.latency_s + (1 << 21) / fit.bandwidth - 4e-3) / 4e-3
    assert line > 0.3  # what a single alpha-beta line misses here
    with pytest.raises(ValueError, match="non-decreasing"):
        CollectiveFit("all-to-all", 8, 0.0, 1.0, (1.0, 2.0), (2.0, 1.0))


def test_fitted_interconnect_uses_fits_and_nearest_group() -> None:
    link = _link(dict.fromkeys(KINDS, 1e-4), dict.fromkeys(KINDS, 1e9))
    assert len(link.fits) == 15
    assert link.peak_flops == 5e9
    assert link.time("all-gather", 4, 1e6) == pytest.approx(1e-4 + 1e-3)
    assert link.time("all-gather", 16, 1e6) == pytest.approx(1e-4 + 1e-3)  # borrows p=8
    assert link.time("all-gather", 1, 1e6) == 0.0
    assert link.fit("all-gather", 3) == link.fit("all-gather", 4)
    assert link.label == "test-calibrated (calibrated on 2026-01-02)"
    assert interconnect("shared-memory").label == "shared-memory (built-in preset)"


def test_config_dir_override_and_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SHARDKIT_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_dir() == tmp_path / "shardkit"
    monkeypatch.setenv("SHARDKIT_CONFIG_DIR", str(tmp_path / "mine"))
    assert config_dir() == tmp_path / "mine"


def test_preset_round_trip_and_default(config: Path) -> None:
    assert interconnect(None) is shardkit.INTERCONNECTS["cpu"]  # the CPU built-in
    link = _link(dict.fromkeys(KINDS, 1e-4), dict.fromkeys(KINDS, 1e9), table=True)
    path = save_preset(link, measurements=[{"kind": "all-gather", "seconds": 1.0}])
    assert path == preset_path()
    assert path.is_relative_to(config)
    assert path.name == f"cpu-x{len(jax.devices())}.json"
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    assert doc["device_count"] == len(jax.devices())
    assert load_preset(path) == link
    assert default_interconnect() == link
    assert interconnect(None) == link
    assert interconnect("pcie").name == "pcie"  # an explicit preset wins


@pytest.mark.parametrize(
    ("text", "match"),
    [("{not json", "not JSON"), ('{"version": 99}', "version=99"), ('{"version": 1}', "no 'inter")],
)
def test_corrupt_preset_is_a_clear_error(config: Path, text: str, match: str) -> None:
    path = preset_path()
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(PresetError, match=match) as info:
        interconnect(None)
    assert str(path) in str(info.value)
    assert "bench calibrate" in str(info.value)


def test_comms_report_uses_and_names_the_calibrated_preset(config: Path) -> None:
    m = make_mesh("8", "auto")
    x = jax.ShapeDtypeStruct((64, 4), jnp.float32, sharding=NamedSharding(m, shardkit.spec("x")))
    before = comms(lambda a: a.sum(axis=0), x)
    link = _link(dict.fromkeys(KINDS, 1.0), dict.fromkeys(KINDS, 1e9), table=True)
    save_preset(link)
    after = comms(lambda a: a.sum(axis=0), x)
    assert after.interconnect == link
    assert after.comm_time_s > 0.9
    assert before.comm_time_s < 1e-3
    assert "calibrated on 2026-01-02" in after.summary()
    assert "built-in preset" in comms(lambda a: a.sum(0), x, interconnect="ici").summary()
    assert CommReport.from_json(after.to_json()) == after


def test_matmul_auto_follows_the_calibrated_preset(config: Path) -> None:
    m = make_mesh("2x4", "auto")
    spec = shardkit.spec("x,y")
    s = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(m, spec))

    def pick(**kw: object) -> str:
        return matmul(s, s, explain=True, mesh=m, in_specs=(spec, spec), **kw).chosen.algorithm  # type: ignore[arg-type]

    assert pick() == "allgather"
    # All-reduces made far cheaper than all-gathers: SUMMA (all-reduces) wins.
    alpha = dict.fromkeys(KINDS, 1e-3) | {"all-reduce": 1e-6}
    beta = dict.fromkeys(KINDS, 1e7) | {"all-reduce": 1e12}
    save_preset(_link(alpha, beta))
    assert pick() == "summa"
    assert pick(interconnect="shared-memory") == "allgather"
    assert "calibrated on" in str(matmul(s, s, explain=True, mesh=m, in_specs=(spec, spec)))


def test_calibrate_measures_fits_and_saves(config: Path) -> None:
    result = calibrate(sizes=(256, 512), group_sizes=(4,), repeat=1, quick=True)
    assert result.path == preset_path()
    assert result.path is not None
    assert result.path.exists()
    fits = {(f.kind, f.group_size, f.leading) for f in result.interconnect.fits}
    inner = {("all-gather", 4, False), ("reduce-scatter", 4, False)}
    assert fits == {(k, 4, True) for k in KINDS} | inner
    assert len(result.points) == 2 * len(fits)
    assert result.flops_per_s > 0
    # Products of 256 and 512 rows (k = 512): their outputs, and what they took.
    assert [n for n, _, _ in result.writes] == [4.0 * 256**2, 4.0 * 512**2]
    writes = result.interconnect.product_write
    assert [n for n, _ in writes] == [n for n, _, _ in result.writes]
    assert all(t >= 0 for _, t in writes)
    assert writes[0][1] <= writes[1][1]
    assert "Products (s x 512) @ (512 x s)" in " ".join(str(result).split())
    assert "reduce-scatter (inner dim)" in str(result)
    assert result.ring["panel_steps"] == 64  # ring vs all-gather on n = 32 x 8 rows
    assert result.interconnect.panel_step_s == result.ring["panel_step_s"] >= 0
    assert result.interconnect.panel_step_bytes == result.ring["panel_step_bytes"] == 4 * 256 * 4
    assert len(result.load) in (0, 3)
    assert interconnect(None) == result.interconnect
    assert "all-gather" in str(result)
    with pytest.raises(ValueError, match="divisors of the device count"):
        calibrate(sizes=(256, 512), group_sizes=(3,))


def test_cli_calibrate_runs_alone() -> None:
    out = CliRunner().invoke(app, ["bench", "calibrate", "matmul"])
    assert out.exit_code == 2
    assert "calibrate runs alone" in out.output
    out = CliRunner().invoke(app, ["bench", "calibrate", "--meshes", "2x4"])
    assert out.exit_code == 2
    assert "--meshes does not apply" in out.output


def test_summaries_of_predictions_and_picks() -> None:
    recs = [
        Record("collectives", "8/x/1KiB", c, (1e-3,), metrics={"prediction_error": e})
        for c, e in (("psum", 0.1), ("psum", -0.3), ("ppermute", 2.0), ("local", None))
    ]
    lines = prediction_summary(recs)
    assert "= 30.0% over 3 timings" in lines[0]
    assert "psum 20.0%" in lines[1]
    params = {"auto_pick": "summa", "builtin_pick": "allgather"}
    mm = [
        Record("matmul", "c", c, (t,), ratio_median=t / 0.5, params=params)
        for c, t in (("xla", 0.5), ("allgather", 2.0), ("summa", 1.0), ("auto", 1.0))
    ]
    lines = auto_summary(mm)
    assert lines[0].startswith("auto picked the measured-fastest algorithm in 1 of 1 cases")
    assert "would in 0" in lines[0]
    assert "fastest summa" in lines[1]


def test_collective_fit_validates() -> None:
    with pytest.raises(ValueError, match="legal values"):
        CollectiveFit("broadcast", 2, 0.0, 1.0)
    with pytest.raises(ValueError, match="bandwidth > 0"):
        CollectiveFit("all-gather", 2, 0.0, 0.0)


def test_auto_prices_the_ring_panel_steps() -> None:
    # Rows layout on 8 devices: all-gather of b, or a ring of permutes whose local
    # product runs in p x panels steps. Permutes priced far below all-gathers, so a
    # communication-only model picks the ring; the calibrated cost per panel step
    # (compute, which these devices do not overlap) makes the all-gather cheaper.
    m = make_mesh("8", "auto")
    spec = shardkit.spec("x")
    s = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(m, spec))
    alpha = dict.fromkeys(KINDS, 1e-5) | {"all-gather": 1e-3}
    beta = dict.fromkeys(KINDS, 1e10) | {"all-gather": 1e7}
    comm_only = _link(alpha, beta)

    def explain(link: Interconnect) -> shardkit.linalg.Explanation:
        return matmul(s, s, explain=True, mesh=m, in_specs=(spec, spec), interconnect=link)

    assert explain(comm_only).chosen.algorithm == "ring"
    stepped = dataclasses.replace(comm_only, panel_step_s=1e-3)
    chosen = explain(stepped).chosen
    assert chosen.algorithm == "allgather"
    ring = next(c for c in explain(stepped).candidates if c.algorithm == "ring")
    assert ring.variant.panel_steps == 8 * 8  # 8 permute steps x 8 panels of 4 rows
    assert ring.compute_time_s == pytest.approx(ring.flops / 5e9 + 64e-3)
    assert ring.time_s > chosen.time_s > ring.comm_time_s
    # The step cost scales with the output bytes a step writes (32 rows / 8 panels x 256
    # columns x 4 bytes here): measured at half those bytes, each step costs twice.
    assert ring.variant.panel_step_bytes == 4 * 256 * 4
    halved = dataclasses.replace(stepped, panel_step_bytes=2 * 256 * 4)
    ring2 = next(c for c in explain(halved).candidates if c.algorithm == "ring")
    assert ring2.compute_time_s == pytest.approx(ring.flops / 5e9 + 128e-3)
    # A preset saved before panel_step_s (or panel_step_bytes) existed still loads:
    # no step cost, or an unscaled one.
    fields = dataclasses.asdict(stepped)
    del fields["panel_step_bytes"]
    assert Interconnect(**fields).step_time(10**6) == 1e-3
    del fields["panel_step_s"]
    assert Interconnect(**fields).panel_step_s == 0.0
    with pytest.raises(ValueError, match="must be non-negative"):
        dataclasses.replace(comm_only, panel_step_s=-1.0)


def test_inner_dimension_fits_price_gathers_and_scatters_apart() -> None:
    lead = [Point("all-gather", 8, n, 1e-4 + n / 1e9) for n in SIZES]
    inner = [Point("all-gather", 8, n, 1e-4 + n / 1e8, leading=False) for n in SIZES]
    permute = [Point("collective-permute", 8, n, 1e-4 + n / 1e9) for n in SIZES]
    link = fit_interconnect(
        [*lead, *inner, *permute], peak_flops=1e9, name="t", created="2026-01-02"
    )
    n = 1 << 22
    assert link.time("all-gather", 8, n) == pytest.approx(1e-4 + n / 1e9, rel=1e-6)
    assert link.time("all-gather", 8, n, leading=False) == pytest.approx(1e-4 + n / 1e8, rel=1e-6)
    # A kind measured one way only serves both.
    assert link.time("collective-permute", 8, n, leading=False) == link.time(
        "collective-permute", 8, n
    )
    # The inner fit survives a preset round trip, and a preset saved before it (no
    # "leading" key) reads as leading.
    fields = json.loads(json.dumps(dataclasses.asdict(link)))
    assert Interconnect(**fields) == link
    for fit in fields["fits"]:
        del fit["leading"]
    assert all(f.leading for f in Interconnect(**fields).fits)


def test_product_write_prices_large_products() -> None:
    link = Interconnect("toy", 1e-6, 1e9, product_write=((4 << 20, 0.0), (64 << 20, 0.15)))
    assert link.write_time(16 << 20) == pytest.approx(0.15 * 12 / 60)
    assert link.write_time(128 << 20) == pytest.approx(0.3)
    assert Interconnect("toy", 1e-6, 1e9).write_time(1 << 30) == 0.0
    with pytest.raises(ValueError, match="product_write"):
        Interconnect("toy", 1e-6, 1e9, product_write=((2.0, 1.0), (1.0, 2.0)))
    # k split over 8 devices (a P(None, x), b P(x)): a reduce-scatter computes one
    # output-sized product; a ring of permutes computes 8 products of an eighth each.
    m = make_mesh("8", "auto")
    n = 4096
    a = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, shardkit.spec("_,x")))
    b = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, shardkit.spec("x")))

    def explain(link: Interconnect) -> shardkit.linalg.Explanation:
        return matmul(a, b, explain=True, interconnect=link)

    # Every collective equally cheap: the reduce-scatter's one launch wins...
    alpha: dict[str, float] = dict.fromkeys(KINDS, 1e-4)
    beta: dict[str, float] = dict.fromkeys(KINDS, 1e12)
    flat = _link(alpha, beta)
    assert explain(flat).chosen.algorithm == "reduce_scatter"
    # ... until writing a 64 MiB product costs more than writing an 8 MiB one.
    costly = dataclasses.replace(flat, product_write=((8 << 20, 0.0), (64 << 20, 0.1)))
    picked = explain(costly)
    assert picked.chosen.algorithm == "ring"
    rs = next(c for c in picked.candidates if c.algorithm == "reduce_scatter")
    assert rs.variant.product_bytes == 4 * n * n
    assert picked.chosen.variant.product_bytes == 4 * n * n // 8
    assert rs.compute_time_s == pytest.approx(rs.flops / 5e9 + 0.1)


def test_matmul_comms_know_their_dimension() -> None:
    # 2x4 blocks: the all-gather variant gathers a's columns over y (an inner
    # dimension) and b's rows over x (the leading one).
    m = make_mesh("2x4", "auto")
    spec = shardkit.spec("x,y")
    s = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(m, spec))
    ex = matmul(s, s, explain=True, mesh=m, in_specs=(spec, spec), algorithm="allgather")
    gathers = {c.axes: c.leading for c in ex.chosen.collectives}
    assert gathers == {("y",): False, ("x",): True}
    # The compiled program says the same, and comms prices each with its fit.
    lead = [Point("all-gather", p, n, 1e-4 + n / 1e9) for p in (2, 4) for n in SIZES]
    inner = [
        Point("all-gather", p, n, 1e-4 + n / 1e7, leading=False) for p in (2, 4) for n in SIZES
    ]
    link = fit_interconnect([*lead, *inner], peak_flops=1e9, name="t", created="2026-01-02")
    report = comms(lambda a, b: matmul(a, b, algorithm="allgather"), s, s, interconnect=link)
    found = {c.axes: c for c in report.collectives if c.kind == "all-gather"}
    assert set(found) == {("x",), ("y",)}
    for axes, leading in gathers.items():
        c = found[axes]
        nbytes = 4 * math.prod(c.result_shapes[0])
        assert c.time_s == pytest.approx(
            link.time("all-gather", c.group_size, nbytes, leading=leading)
        )
    assert found[("y",)].time_s > 10 * found[("x",)].time_s
