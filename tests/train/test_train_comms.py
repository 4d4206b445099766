"""Each strategy's step communicates what the textbook says, checked through shardkit.comms.

Bytes are per device under ``shardkit.comms``' ring convention: an all-reduce of
``N`` bytes over ``p`` devices sends ``2 (p-1)/p N``, an all-gather of a result of
``R`` bytes ``(p-1)/p R``. ``f`` is 4 (float32); the loss is one more float32 in the
gradient all-reduce, where the compiler fuses it in.

What the CPU compiler emits (jax 0.10.2): ``dp`` one fused all-reduce of every
gradient and the loss; ``tp`` one all-reduce per layer pair forward (of the pair's
output) and one backward (of the pair's input gradient, none for the first pair);
``fsdp`` one all-gather per split parameter (the backward pass reuses them) and, for
the gradients, an all-reduce of the full gradients that each device then slices
(not a reduce-scatter, which would send half the bytes); ``dp_tp`` the ``tp``
all-reduces over the model axis on ``B/D`` rows plus the gradient all-reduce of the
local gradient shards over the data axis. The default ``on_nonfinite="skip"`` adds
one all-reduce of one boolean per gradient that stays split (tp's and dp_tp's column
and row layers: 3 bytes on the tests' MLP); dp's and fsdp's gradients are tested where
they are whole, at no cost.

On a mesh with Explicit axes the step's body runs with the axes viewed as Auto, so
each formula holds there unchanged; every strategy is checked on one Explicit mesh.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
import pytest
from _train_util import BATCH, TRAIN_NAMES, numpy_batch, small_mlp

from _meshes import make_mesh
from shardkit import train
from shardkit.inspect import CommReport, comms
from shardkit.train._strategies import tp_roles

F = 4  # bytes of a float32


def _ar(n: int, p: int) -> int:
    return 2 * n * (p - 1) // p


def _report(
    model: train.Model,
    strategy: str,
    mesh_shape: str,
    opt: optax.GradientTransformation | None = None,
    axis_types: str = "auto",
    on_nonfinite: str = "skip",
) -> tuple[CommReport, train.TrainState]:
    step, state = train.make_train_step(
        model,
        opt or optax.sgd(0.1),
        strategy=strategy,
        mesh=make_mesh(mesh_shape, axis_types, TRAIN_NAMES),
        key=jax.random.key(0),
        on_nonfinite=on_nonfinite,  # type: ignore[arg-type]
    )
    return comms(step, state, numpy_batch(model)), state


def _param_bytes(model: train.Model) -> int:
    return sum(math.prod(s) * F for layer in model.param_shapes() for s in layer.values())


def _all_reduces(report: CommReport, axes: tuple[str, ...]) -> list[int]:
    """Operand bytes of each float32 all-reduce run over exactly ``axes``."""
    out = []
    for c in report.collectives:
        if c.kind == "all-reduce" and c.axes is not None and set(c.axes) == set(axes):
            assert c.dtype in ("f32", "pred"), c
            if c.dtype == "f32":
                out += [sum(math.prod(s) for s in c.operand_shapes) * F] * c.count
    return out


def _finite_flags(report: CommReport, axes: tuple[str, ...] | None = None) -> int:
    """Booleans all-reduced (over ``axes``, or any): the default on_nonfinite="skip" test.

    The step tests every gradient for NaN and inf; a gradient that stays split (tp's
    column and row layers) adds its one-byte flag to one all-reduce.
    """
    flags = [
        c
        for c in report.collectives
        if c.kind == "all-reduce"
        and c.dtype == "pred"
        and (axes is None or (c.axes is not None and set(c.axes) == set(axes)))
    ]
    assert all(c.count == 1 and all(s == () for s in c.operand_shapes) for c in flags)
    assert len(flags) <= 1
    return sum(len(c.operand_shapes) for c in flags)


def _split(state: train.TrainState) -> int:
    """How many parameters are split (not whole on every device)."""
    return sum(not x.sharding.is_fully_replicated for x in jax.tree.leaves(state.params))


def _tp_activation_bytes(model: train.Model, rows: int) -> list[int]:
    sizes, out = model.layer_sizes, []
    for layer, role in enumerate(tp_roles(model.num_layers)):
        if role == "row":
            out.append(rows * sizes[layer + 1] * F)  # forward: the pair's output
        if role == "column" and layer > 0:
            out.append(rows * sizes[layer] * F)  # backward: the pair's input gradient
    return out


@pytest.mark.parametrize(
    ("mesh_shape", "axis_types"), [("8", "auto"), ("2x4", "auto"), ("2x4", "explicit")]
)
def test_dp_one_all_reduce_of_the_gradients(mesh_shape: str, axis_types: str) -> None:
    model = small_mlp()
    report, _ = _report(model, "dp", mesh_shape, axis_types=axis_types)
    p = 8
    report.assert_only({"all-reduce"})
    names = ("x",) if mesh_shape == "8" else ("data", "model")
    grads = _param_bytes(model) + F
    assert _all_reduces(report, names) == [grads]
    assert report.bytes_sent == _ar(grads, p)


@pytest.mark.parametrize(
    ("sizes", "mesh_shape", "axis_types"),
    [
        ((16, 32, 32, 8), "8", "auto"),
        ((16, 32, 32, 32, 8), "2x4", "auto"),
        ((16, 32, 32, 32, 8), "8", "explicit"),
    ],
)
def test_tp_activation_all_reduces_per_layer_pair(
    sizes: tuple[int, ...], mesh_shape: str, axis_types: str
) -> None:
    model = small_mlp(sizes)
    report, state = _report(model, "tp", mesh_shape, axis_types=axis_types)
    report.assert_only({"all-reduce"})
    names = ("x",) if mesh_shape == "8" else ("data", "model")
    want = _tp_activation_bytes(model, BATCH)
    assert sorted(_all_reduces(report, names)) == sorted(want)
    flags = _finite_flags(report, names)
    assert flags == _split(state) > 0  # one byte per split gradient
    assert report.bytes_sent == sum(_ar(n, 8) for n in want) + _ar(flags, 8)


def test_on_nonfinite_apply_tests_no_gradient() -> None:
    # The textbook tp step, without the finiteness flags of the default "skip".
    model = small_mlp()
    report, _ = _report(model, "tp", "8", on_nonfinite="apply")
    want = _tp_activation_bytes(model, BATCH)
    assert _finite_flags(report) == 0
    assert sorted(_all_reduces(report, ("x",))) == sorted(want)
    assert report.bytes_sent == sum(_ar(n, 8) for n in want)


@pytest.mark.parametrize(
    ("mesh_shape", "axis_types"), [("8", "auto"), ("4x2", "auto"), ("8", "explicit")]
)
def test_fsdp_gathers_each_parameter_once_and_reduces_gradients(
    mesh_shape: str, axis_types: str
) -> None:
    model = small_mlp()
    report, _ = _report(model, "fsdp", mesh_shape, optax.adam(1e-3), axis_types)
    p = 8
    report.assert_only({"all-gather", "all-reduce", "reduce-scatter"})
    gathers = [c for c in report.collectives if c.kind == "all-gather"]
    shapes = [s for layer in model.param_shapes() for s in layer.values()]
    assert sorted(c.result_shapes[0] for c in gathers) == sorted(shapes)
    assert all(c.count == 1 and c.group_size == p for c in gathers)
    gather_bytes = sum((p - 1) * math.prod(s) * F // p for s in shapes)
    grads = _param_bytes(model) + F
    if "reduce-scatter" in report.kinds:  # the textbook form, where a compiler emits it
        scatter = sum((p - 1) * math.prod(s) * F // p for s in shapes)
        assert report.bytes_sent <= gather_bytes + scatter + _ar(F, p)
    else:  # what the CPU compiler emits: all-reduce of the full gradients, then a slice
        assert [c.count for c in report.collectives if c.kind == "all-reduce"] == [1]
        assert report.bytes_sent == gather_bytes + _ar(grads, p)


def test_fsdp_holds_one_eighth_of_parameters_and_optimizer_state() -> None:
    model = small_mlp()
    report, state = _report(model, "fsdp", "2x4", optax.adam(1e-3))
    p = 8

    def per_device(tree) -> int:  # type: ignore[no-untyped-def]
        return sum(
            math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
            for x in jax.tree.leaves(tree)
        )

    def total(tree) -> int:  # type: ignore[no-untyped-def]
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree) if x.ndim > 0)

    assert per_device(state.params) * p == total(state.params)
    count = 4  # adam's int32 step count, replicated
    assert (per_device(state.opt_state) - count) * p == total(state.opt_state)
    batch_bytes = sum(a.nbytes for a in numpy_batch(model)) // p
    assert report.memory is not None
    assert report.memory.argument_bytes == per_device(state) + batch_bytes
    dp_report, _ = _report(model, "dp", "2x4", optax.adam(1e-3))
    assert dp_report.memory is not None
    # The peak also counts temporaries: the gathered parameters and, on CPU, the full
    # gradients of the all-reduce, so it is not 1/8 of dp's; it is still well below.
    assert report.memory.peak_bytes < dp_report.memory.peak_bytes / 2


@pytest.mark.parametrize(
    ("mesh_shape", "axis_types"), [("4x2", "auto"), ("2x4", "auto"), ("4x2", "explicit")]
)
def test_dp_tp_model_axis_activations_and_data_axis_gradients(
    mesh_shape: str, axis_types: str
) -> None:
    model = small_mlp()
    report, state = _report(model, "dp_tp", mesh_shape, axis_types=axis_types)
    d, m = (int(n) for n in mesh_shape.split("x"))
    report.assert_only({"all-reduce"})
    acts = _tp_activation_bytes(model, BATCH // d)
    assert sorted(_all_reduces(report, ("model",))) == sorted(acts)
    local_grads = sum(
        math.prod(x.sharding.shard_shape(x.shape)) * F for x in jax.tree.leaves(state.params)
    )
    assert _all_reduces(report, ("data",)) == [local_grads + F]
    flags = _finite_flags(report, ("model",))
    assert flags == _split(state) > 0  # the gradients split over the model axis
    assert report.bytes_sent == (
        sum(_ar(n, m) for n in acts) + _ar(local_grads + F, d) + _ar(flags, m)
    )


@pytest.mark.parametrize("axis_types", ["auto", "explicit"])
def test_single_device_step_communicates_nothing(axis_types: str) -> None:
    report, _ = _report(small_mlp(), "single", "8", axis_types=axis_types)
    report.assert_none()
    assert np.isclose(report.bytes_sent, 0)
