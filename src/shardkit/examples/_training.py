"""Seeds 001 and 004: data-parallel and tensor-parallel training, and sharded random numbers.

Seed 001 trains a logistic model on a batch split over 8 devices; seed 004 trains a
784-8192-8192-8192-10 MLP with 8-way data parallelism and with 4-way data x 2-way
tensor parallelism (here with the same layer count at small widths), and here also
with a 4-stage pipeline (1F1B schedule) over 2-way data parallelism. Each scenario
checks the losses against one device and the step's collectives against the textbook.
Seed 004's "sharp bit" about ``jax_threefry_partitionable`` closes the file.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit import random as sk_random
from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import comms
from shardkit.layout import mesh, sharding

_F32 = 4


def _run(
    model: Any, optimizer: Any, strategy: str, m: Any, batch: Any, steps: int
) -> tuple[Any, Any, np.ndarray]:
    from shardkit.train import make_train_step

    step, state = make_train_step(
        model, optimizer, strategy=strategy, mesh=m, key=jax.random.key(0)
    )
    first = state
    losses = []
    for _ in range(steps):
        state, loss = step(state, batch)
        losses.append(float(loss))
    return (step, first), state, np.array(losses)


def _grad_bytes(model: Any) -> int:
    return sum(math.prod(s) * _F32 for layer in model.param_shapes() for s in layer.values())


@scenario("001/train", "data-parallel logistic model: batch split over 8 devices", seed="001")
def logistic_dp(c: Checks) -> None:
    import optax

    from shardkit.train import Logistic, strategy_layout

    model = Logistic(features=32)
    m = mesh("8", "X", axis_types="auto")
    layout = strategy_layout(model, strategy="dp", mesh=m)
    x, y = model.batch(jax.random.key(1701), 128 * 8, layout.batch)
    c.show(x, "X: each device gets 128 of the 1024 examples")
    (step, first), state, dp = _run(model, optax.sgd(0.5), "dp", m, (x, y), 100)
    _, _, single = _run(model, optax.sgd(0.5), "single", None, (np.asarray(x), np.asarray(y)), 100)
    c.note(f"loss {dp[0]:.4f} -> {dp[-1]:.4f} over 100 SGD steps (lr 0.5)")
    c.check("the loss goes down", dp[-1] < 0.7 * dp[0], f"{dp[0]} -> {dp[-1]}")
    c.close("losses equal one device's", dp, single, dtype=np.float32)
    c.check(
        "weights stay replicated on every device",
        all(leaf.sharding.is_fully_replicated for leaf in jax.tree.leaves(state.params)),
    )
    report = comms(step, first, (x, y))
    c.items.append(report)
    c.check("only an all-reduce", report.kinds == {"all-reduce"}, str(report.kinds))
    want = 2 * (_grad_bytes(model) + _F32) * 7 // 8
    c.check(
        "it moves the gradients (and the loss) once: 2(P-1)/P x their bytes",
        report.bytes_sent == want,
        f"{report.bytes_sent} B != {want} B",
    )


_SIZES = (784, 128, 128, 128, 10)  # seed 004's layer count; widths / 64 for this machine
_BATCH = 256


def _mlp_batch() -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
    from shardkit.train import MLP

    model = MLP(_SIZES)
    x, y = model.batch(jax.random.key(0), _BATCH)
    return model, (np.asarray(x), np.asarray(y))


@scenario("004/train-dp", "MLP 784-128-128-128-10 with 8-way data parallelism", seed="004")
def mlp_dp(c: Checks) -> None:
    import optax

    model, batch = _mlp_batch()
    m = mesh("8", "batch", axis_types="auto")
    (step, first), _, dp = _run(model, optax.sgd(1e-3), "dp", m, batch, 30)
    _, _, single = _run(model, optax.sgd(1e-3), "single", None, batch, 30)
    c.note(f"loss {dp[0]:.3f} -> {dp[-1]:.3f} over 30 steps")
    c.check("the loss goes down", dp[-1] < dp[0], f"{dp[0]} -> {dp[-1]}")
    c.close("losses equal one device's", dp, single, dtype=np.float32)
    report = comms(step, first, batch)
    c.items.append(report)
    want = 2 * (_grad_bytes(model) + _F32) * 7 // 8
    c.check("one all-reduce of the gradients", report.kinds == {"all-reduce"}, str(report.kinds))
    c.check(
        "its bytes are 2(P-1)/P x the gradients'",
        report.bytes_sent == want,
        f"{report.bytes_sent} != {want}",
    )


@scenario("004/train-dp-tp", "the same MLP with 4-way data x 2-way tensor parallelism", seed="004")
def mlp_dp_tp(c: Checks) -> None:
    import optax

    from shardkit.train import strategy_layout

    model, batch = _mlp_batch()
    m = mesh("4x2", "batch,model", axis_types="auto")
    (step, first), state, got = _run(model, optax.sgd(1e-3), "dp_tp", m, batch, 30)
    _, _, single = _run(model, optax.sgd(1e-3), "single", None, batch, 30)
    c.note(
        "layers pair up: the first of a pair split by columns over 'model', the second by "
        "rows (the seed keeps W1 and W4 whole and splits W2, W3; pairing from the first "
        "layer also splits W1, which needs no communication)"
    )
    c.show(state.params[0]["w"], "W1 (784x128), columns split")
    c.show(state.params[1]["w"], "W2 (128x128), rows split")
    c.close("losses equal one device's", got, single, dtype=np.float32)
    report = comms(step, first, batch)
    c.items.append(report)
    c.check("only all-reduces", report.kinds == {"all-reduce"}, str(report.kinds))
    rows = _BATCH // 4
    acts = []
    roles = strategy_layout(model, strategy="dp_tp", mesh=m).roles
    for i, role in enumerate(roles):
        if role == "row":
            acts.append(rows * _SIZES[i + 1] * _F32)
        elif role == "column" and i > 0:
            acts.append(rows * _SIZES[i] * _F32)
    on_model = [
        sum(math.prod(s) for s in col.operand_shapes) * _F32
        for col in report.collectives
        if col.axes == ("model",) and col.dtype == "f32"
    ]
    c.check(
        "over 'model': one activation all-reduce per layer pair (forward), of B/4 rows",
        sorted(on_model) == sorted(acts),
        f"{on_model} != {acts}",
    )
    flags = [
        len(col.operand_shapes)
        for col in report.collectives
        if col.axes == ("model",) and col.dtype == "pred"
    ]
    split = sum(not p.sharding.is_fully_replicated for p in jax.tree.leaves(first.params))
    c.check(
        "and one all-reduce of a NaN/inf flag per gradient split over 'model' "
        "(make_train_step skips non-finite steps)",
        flags == [split],
        f"{flags} != [{split}]",
    )
    c.check(
        "over 'batch': the gradient all-reduce",
        any(col.axes == ("batch",) for col in report.collectives),
        str([col.axes for col in report.collectives]),
    )


@scenario(
    "004/random", "the sharp bit: random numbers drawn in place, same on any mesh", seed="004"
)
def sharded_random(c: Checks) -> None:
    key = jax.random.key(42)
    x_sharding = sharding(mesh("8", "x", axis_types="auto"), "x")
    raw = jax.random.key_data(key)

    with jax.threefry_partitionable(False):
        plain = jax.jit(lambda k: jax.random.uniform(k, (24,)), out_shardings=x_sharding)
        stable = comms(plain, jax.random.PRNGKey(42))
        ours_off = comms(
            lambda d: sk_random.uniform(
                jax.random.wrap_key_data(d), (24,), out_sharding=x_sharding
            ),
            raw,
        )
    c.check(
        "with the flag off, jax.random communicates (the seed's collective-permute)",
        stable.count() > 0,
        str(stable.kinds),
    )
    c.check(
        "shardkit.random.uniform sends nothing even then",
        ours_off.count() == 0,
        str(ours_off.kinds),
    )
    with jax.threefry_partitionable(True):
        ref = np.asarray(jax.random.normal(key, (16, 8), jnp.float32))
    layouts = [
        ("8", "x", P("x")),
        ("2x4", "x,y", P("x", "y")),
        ("4x2", "x,y", P("y", "x")),
        ("1x8", "x,y", P(None, "y")),
    ]
    same = True
    for shape, names, spec in layouts:
        s = NamedSharding(mesh(shape, names, axis_types="auto"), spec)
        a = sk_random.normal(key, (16, 8), out_sharding=s, dtype=jnp.float32)
        same &= bool(np.array_equal(np.asarray(a), ref))
        if shape == "2x4":
            c.show(a, "normal(key, (16, 8)) on 2x4")
    c.check("values identical on meshes 8, 2x4, 4x2, 1x8 and to the unsharded draw", same)
    c.check(
        "the global flag is left as it was", jax.config.values["jax_threefry_partitionable"] is True
    )


def schedule_table(timeline: list[list[str]], title: str) -> Any:
    """A pipeline schedule as a table: one row per stage, one column per tick."""
    from rich.table import Table

    table = Table(title=title, show_header=False, box=None, padding=(0, 1))
    for s, row in enumerate(timeline):
        cells = [f"[green]{op}[/]" if op.startswith("F") else f"[magenta]{op}[/]" for op in row]
        table.add_row(
            f"stage {s}", *[cell if op else "." for cell, op in zip(cells, row, strict=True)]
        )
    return table


@scenario(
    "004/train-pp",
    "the same MLP with 2-way data x 4-stage pipeline parallelism (1F1B)",
    seed="004",
)
def mlp_dp_pp(c: Checks) -> None:
    import optax

    from shardkit.train import make_train_step

    model, batch = _mlp_batch()
    m = mesh("2x4", "data,stage", axis_types="auto")
    step, state = make_train_step(
        model,
        optax.sgd(1e-3),
        strategy="dp_pp",
        mesh=m,
        key=jax.random.key(0),
        microbatches=4,
        schedule="1f1b",
    )
    first, losses = state, []
    for _ in range(5):
        state, loss = step(state, batch)
        losses.append(float(loss))
    _, _, single = _run(model, optax.sgd(1e-3), "single", None, batch, 5)
    pipe = step.pipeline  # type: ignore[attr-defined]
    c.note(pipe.describe(_BATCH))
    c.items.append(schedule_table(pipe.schedule.timeline(), "1F1B: forward F, backward B"))
    c.close("losses equal one device's", np.array(losses), single, dtype=np.float32)
    w = state.params["w"]
    c.check(
        "each device holds only its stage's layers (1/4 of the stacked weights)",
        w.addressable_shards[0].data.shape[0] == 1 and w.shape[0] == 4,
        str(w.sharding),
    )
    report = comms(step, first, batch)
    c.items.append(report)
    kinds = report.kinds
    c.check("no parameter is gathered", "all-gather" not in kinds, str(kinds))
    permutes = [col for col in report.collectives if col.kind == "collective-permute"]
    c.check(
        "activations and cotangents move by collective-permutes over 'stage' only",
        bool(permutes) and all(col.axes == ("stage",) for col in permutes),
        str([col.axes for col in permutes]),
    )
    c.check(
        "one per tick and direction the schedule sends in",
        sum(col.count for col in permutes) == pipe.schedule.permutes,
        f"{sum(col.count for col in permutes)} != {pipe.schedule.permutes}",
    )
    grads = sum(
        sum(math.prod(s) for s in col.operand_shapes) * _F32
        for col in report.collectives
        if col.kind == "all-reduce" and col.axes == ("data",)
    )
    stage_bytes = sum(math.prod(a.shape) // 4 * _F32 for a in jax.tree.leaves(pipe.plan.abstract))
    c.check(
        "over 'data': one all-reduce of the stage's gradients (and the loss)",
        grads == stage_bytes + _F32,
        f"{grads} != {stage_bytes + _F32}",
    )


SCENARIOS = (
    logistic_dp,
    mlp_dp,
    mlp_dp_tp,
    mlp_dp_pp,
    sharded_random,
)
"""This module's scenarios, in tour order."""
