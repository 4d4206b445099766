"""Pipeline parallelism (``pp``, ``dp_pp``): schedules, losses against one device, comms, errors.

The schedules are checked as tables (no compile). The step is compiled once per case
and that executable both trains (the losses of ``single`` within float32 rounding)
and is inspected: activations and cotangents move only by collective-permutes over
``stage``, one per tick and direction the schedule sends in; the loss is one scalar all-reduce over
``stage``; under ``dp_pp`` the gradients are averaged over ``data``; no parameter is
ever gathered, and every collective is ordered. By default two cases run (pp 1f1b,
dp_pp gpipe, on Auto and Explicit axes in turn); ``SHARDKIT_FULL_TESTS=1`` runs all.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _train_util import AXIS_TYPES, numpy_batch

from _matrix import FULL, rotate
from _meshes import make_mesh
from shardkit import train
from shardkit.inspect import comms
from shardkit.testing import assert_close
from shardkit.train._pipeline import balanced_stages
from shardkit.train._schedule import BACKWARD, IDLE, build_schedule

SIZES = (8, 16, 16, 16, 4)  # four layers: first and last narrower (padded in the stack)
BATCH = 16
STEPS = 3


# ---- schedules (tables only) ---------------------------------------------------------


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "micro"), [(1, 3), (2, 4), (4, 8), (4, 2), (3, 5)])
def test_schedule_runs_each_operation_once_after_its_inputs(
    name: str, stages: int, micro: int
) -> None:
    s = build_schedule(name, stages, micro)
    when: dict[tuple[str, int, int], int] = {}
    for t in range(s.ticks):
        for st in range(stages):
            kind, m = int(s.kind[t, st]), int(s.microbatch[t, st])
            if kind != IDLE:
                op = ("B" if kind == BACKWARD else "F", st, m)
                assert op not in when, op
                when[op] = t
    assert len(when) == 2 * stages * micro
    for st in range(stages):
        for m in range(micro):
            if st:
                assert when[("F", st, m)] > when[("F", st - 1, m)]
            if st < stages - 1:
                assert when[("B", st, m)] > when[("B", st + 1, m)]
            assert when[("B", st, m)] > when[("F", st, m)]
    # Forward and backward each take M + S - 1 ticks: the bubble is (S-1)/(M+S-1).
    assert s.ticks == 2 * (micro + stages - 1)
    assert s.bubble == pytest.approx((stages - 1) / (micro + stages - 1))
    # gpipe holds every microbatch; 1f1b at most S (one per stage still to run it).
    assert s.slots == (micro if name == "gpipe" else min(stages, micro))
    # The runs of ticks cover the schedule, each sending at least the ways its ticks
    # send; gpipe's two phases send one way each (permutes of zeros only where a
    # phase's last ticks idle).
    segments = s.segments()
    assert [a for a, _, _ in segments] == [0] + [z for _, z, _ in segments[:-1]]
    assert segments[-1][1] == s.ticks
    for a, z, (f, b) in segments:
        assert f or not (s.recv_forward[a:z] >= 0).any()
        assert b or not (s.recv_backward[a:z] >= 0).any()
    if stages == 1:
        assert s.permutes == 0
    if name == "gpipe" and stages > 1:
        assert [sends for _, _, sends in segments] == [(True, False), (False, True)]
        assert s.permutes == s.ticks


def test_1f1b_timeline_alternates_after_warm_up() -> None:
    rows = build_schedule("1f1b", 2, 4).timeline()
    assert rows[0] == ["F0", "F1", "", "B0", "F2", "B1", "F3", "B2", "", "B3"]
    assert rows[1] == ["", "F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", ""]


def test_stages_are_contiguous_and_balanced_by_cost() -> None:
    assert balanced_stages([1, 1, 1, 1], 2) == ((0, 2), (2, 4))
    assert balanced_stages([8, 1, 1, 1, 1, 1, 1, 1, 1], 2) == ((0, 1), (1, 9))
    assert balanced_stages([1, 2, 3], 3) == ((0, 1), (1, 2), (2, 3))
    lay = train.strategy_layout(
        train.MLP(SIZES), strategy="pp", mesh=make_mesh("2", "auto", "stage")
    )
    assert lay.pipeline is not None
    assert lay.pipeline.bounds == ((0, 2), (2, 4))
    assert lay.params["w"].spec == jax.sharding.PartitionSpec("stage")
    assert lay.batch.is_fully_replicated  # every stage sees the batch; stage 0 reads it


# ---- training against one device, and the compiled collectives ------------------------

CASES = [("pp", "4", "1f1b", 4), ("dp_pp", "2x4", "gpipe", 2)]
if FULL:
    CASES += [("pp", "4", "gpipe", 8), ("dp_pp", "2x4", "1f1b", 4), ("pp", "2", "1f1b", 4)]


def _mesh(strategy: str, shape: str, axis_types: str) -> jax.sharding.Mesh:
    return make_mesh(shape, axis_types, "stage" if strategy == "pp" else "data,stage")


_REFERENCES: dict[str, Any] = {}


def _mlp_reference(model: train.MLP, batch: Any) -> Any:
    """The one-device losses and parameters of the MLP cases (computed once)."""
    if "mlp" not in _REFERENCES:
        _REFERENCES["mlp"] = _reference(model, optax.adam(1e-2), batch, key=jax.random.key(0))
    return _REFERENCES["mlp"]


def _reference(model: Any, opt: Any, batch: Any, loss: Any = None, key: Any = None) -> Any:
    step, state = train.make_train_step(
        model, opt, strategy="single", mesh=None, key=key, loss=loss
    )
    out = []
    for _ in range(STEPS):
        state, value = step(state, batch)
        out.append(float(value))
    return np.array(out), state


@pytest.mark.parametrize(
    ("strategy", "shape", "schedule", "micro", "axis_types"), rotate(CASES, list(AXIS_TYPES))
)
def test_pipeline_trains_like_one_device_moving_only_permutes(
    strategy: str, shape: str, schedule: str, micro: int, axis_types: str
) -> None:
    model = train.MLP(SIZES)
    batch = numpy_batch(model, BATCH)
    ref, ref_state = _mlp_reference(model, batch)
    mesh = _mesh(strategy, shape, axis_types)
    step, state = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy=strategy,
        mesh=mesh,
        key=jax.random.key(0),
        microbatches=micro,
        schedule=schedule,  # type: ignore[arg-type]
    )
    pipe = step.pipeline  # type: ignore[attr-defined]
    compiled = step.lower(state, batch).compile()  # type: ignore[attr-defined]
    got = []
    for _ in range(STEPS):
        state, value = compiled(state, batch)
        got.append(float(value))
    what = f"{strategy} {schedule} on {shape} ({axis_types})"
    assert_close(np.array(got), ref, dtype=np.float32, what=what)
    for mine, theirs in zip(step.model(state.params), ref_state.params, strict=True):  # type: ignore[attr-defined]
        for k in ("w", "b"):
            assert_close(np.asarray(mine[k]), np.asarray(theirs[k]), dtype=np.float32, what=what)

    # A batch the microbatches do not divide is refused before anything runs.
    data = math.prod(mesh.shape.values()) // pipe.plan.stages
    bad = numpy_batch(model, data * (micro + 1))
    with pytest.raises(ValueError, match=rf"microbatches={micro} does not divide the"):
        step(state, bad)

    report = comms(compiled, state, batch)
    report.assert_ordered()
    width, mb = max(SIZES), BATCH // data // micro
    kinds = {c.kind for c in report.collectives}
    assert kinds <= {"collective-permute", "all-reduce"}, report.collectives
    permutes = [c for c in report.collectives if c.kind == "collective-permute"]
    assert all(c.axes == ("stage",) and c.operand_shapes == ((mb, width),) for c in permutes)
    # One permute per tick and direction some stage sends in (never a zeros-only run).
    assert sum(c.count for c in permutes) == pipe.schedule.permutes, permutes
    for c in report.collectives:
        if c.kind != "all-reduce":
            continue
        if c.axes == ("stage",):  # the loss, and the finite flags of the split gradients
            assert all(math.prod(s) == 1 for s in c.operand_shapes), c
        else:  # dp_pp: the stage's gradients (and the loss) averaged over data
            assert strategy == "dp_pp", c
            assert c.axes == ("data",), c
            k = pipe.plan.per_stage  # the compiler may drop unit dimensions
            sizes = sorted(math.prod(s) for s in c.operand_shapes)
            assert sizes == [1, k * width, k * width * width], c


def test_layers_model_trains_with_pp_like_one_device() -> None:
    rng = np.random.default_rng(0)
    blocks = [
        {"w": (rng.normal(size=(8, 8)) / 3).astype(np.float32), "b": np.zeros(8, np.float32)}
        for _ in range(5)
    ]

    def apply(p: Any, h: jax.Array) -> jax.Array:
        return jnp.tanh(h @ p["w"] + p["b"])

    def mse(out: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((out - y) ** 2)

    model = train.Layers(blocks, apply=apply)
    x = rng.normal(size=(BATCH, 8)).astype(np.float32)
    batch = (x, np.sin(x))
    # The model is the plain forward pass (the reference below trains it on one device).
    assert_close(np.asarray(model(x)), _forward(blocks, x), dtype=np.float32, what="Layers")
    ref, _ = _reference(model, optax.sgd(0.1), batch, loss=mse)
    step, state = train.make_train_step(
        model,
        optax.sgd(0.1),
        strategy="pp",
        mesh=make_mesh("2", "explicit", "stage"),
        loss=mse,
        microbatches=4,
    )
    assert state.params["w"].shape == (2, 3, 8, 8)  # 5 layers: stages of 3 and 2
    got = []
    for _ in range(STEPS):
        state, value = step(state, batch)
        got.append(float(value))
    assert_close(np.array(got), ref, dtype=np.float32, what="Layers under pp")
    back = step.model(state.params)  # type: ignore[attr-defined]
    assert isinstance(back, train.Layers)
    assert len(back.layers) == 5
    assert back.layers[4]["w"].shape == (8, 8)


def _forward(blocks: list[dict[str, np.ndarray]], x: np.ndarray) -> np.ndarray:
    h = x.astype(np.float64)
    for p in blocks:
        h = np.tanh(h @ p["w"] + p["b"])
    return h


@pytest.mark.skipif(not FULL, reason="another compile: SHARDKIT_FULL_TESTS=1")
def test_equinox_stack_trains_with_dp_pp_like_one_device() -> None:
    eqx = pytest.importorskip("equinox")
    keys = jax.random.split(jax.random.key(3), 4)
    model = train.Layers([eqx.nn.Linear(8, 8, key=k) for k in keys])

    def mse(out: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((jax.vmap(jnp.tanh)(out) - y) ** 2)

    def batched(layer: Any, h: jax.Array) -> jax.Array:
        return jax.vmap(layer)(h)

    model = train.Layers(model.layers, apply=batched)
    x = np.random.default_rng(1).normal(size=(BATCH, 8)).astype(np.float32)
    batch = (x, np.cos(x))
    ref, _ = _reference(model, optax.adam(1e-2), batch, loss=mse)
    step, state = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy="dp_pp",
        mesh=make_mesh("2x4", "auto", "data,stage"),
        loss=mse,
        microbatches=2,
        schedule="gpipe",
    )
    got = []
    for _ in range(STEPS):
        state, value = step(state, batch)
        got.append(float(value))
    assert_close(np.array(got), ref, dtype=np.float32, what="Equinox stack under dp_pp")
    assert isinstance(step.model(state.params).layers[0], eqx.nn.Linear)  # type: ignore[attr-defined]


# ---- errors (nothing compiled beyond the first state) ---------------------------------


def _make(strategy: str = "pp", shape: str = "4", **kw: Any) -> Any:
    return train.make_train_step(
        kw.pop("model", train.MLP(SIZES)),
        optax.sgd(0.1),
        strategy=strategy,
        mesh=kw.pop("mesh", None) or _mesh(strategy, shape, "auto"),
        key=jax.random.key(0),
        **kw,
    )


def test_pipeline_option_errors_name_the_argument_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"8 stages along 'stage', more than the model's 4 layers"):
        _make("pp", "8")
    with pytest.raises(ValueError, match=r"schedule='zb'; choose one of \['gpipe', '1f1b'\]"):
        _make(schedule="zb")
    with pytest.raises(ValueError, match=r"microbatches=0 must be"):
        _make(microbatches=0)
    with pytest.raises(ValueError, match=r"microbatches= applies to the pipeline strategies"):
        _make("dp", mesh=make_mesh("8", "auto", "data"), microbatches=4)
    with pytest.raises(ValueError, match=r"must be 1-D \(stage\).*shardkit.mesh\('8', 'stage'\)"):
        _make("pp", mesh=make_mesh("2x4", "auto", "data,stage"))
    with pytest.raises(ValueError, match=r"rules= does not apply to pipeline"):
        _make(rules=[(r"w", (None, "model"))])
    with pytest.raises(TypeError, match=r"a Logistic model needs to come as shardkit.train.Layers"):
        _make(model=train.Logistic(features=4), shape="2")


def test_layers_of_different_shapes_are_refused_for_a_pipeline() -> None:
    blocks = [{"w": np.ones((4, 4), np.float32)}, {"w": np.ones((4, 2), np.float32)}]
    model = train.Layers(blocks, apply=lambda p, h: h @ p["w"])
    with pytest.raises(ValueError, match=r"layer 1's parameter \['w'\] has shape \(4, 2\)"):
        _make(model=model, shape="2", loss=lambda out, y: jnp.mean(out - y))
    with pytest.raises(TypeError, match=r"Layers: apply= is needed"):
        train.Layers(blocks)
    square = train.Layers(blocks[:1] * 2, apply=lambda p, h: (h @ p["w"])[:, :2])
    step, state = _make(model=square, shape="2", loss=lambda out, y: jnp.mean(out - y))
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"maps a microbatch of shape \(2, 4\) to \(2, 2\)"):
        step(state, (x, x))
