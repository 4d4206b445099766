"""Any optax optimizer trains under every strategy, its state sharded like the parameters.

Each optimizer trains a small MLP for a few steps under ``fsdp`` (every fifth also under
``dp``; with ``SHARDKIT_FULL_TESTS=1`` each under ``dp``, ``fsdp``, ``tp`` and ``dp_tp``
on every mesh) and gives the losses
of one device; the meshes and axis types are taken in turn by default. Its state
is checked leaf by leaf: a leaf that mirrors a parameter (its path ends with the
parameter's, same shape) has the parameter's sharding, scalars are replicated, under
``dp`` everything is, and under ``fsdp`` no leaf the mesh could split is whole on
every device.

Measured (jax 0.10.2, optax 0.2.8, 4 steps): the largest relative deviation of the
losses from one device is 2.4e-7 (noisy_sgd; 1e-7 for most), within float32's
tolerance (rtol 2e-5, shardkit.testing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
import pytest
from _train_util import AXIS_TYPES, TRAIN_NAMES, losses, numpy_batch, small_mlp

from _matrix import FULL
from _meshes import make_mesh
from shardkit import train
from shardkit.testing import assert_close

SIZES = (16, 32, 8)
STEPS = 4


def _labels(params: Any) -> Any:
    return tuple({"w": "matrix", "b": "vector"} for _ in params)


def _decay_mask(params: Any) -> Any:
    return tuple({"w": True, "b": False} for _ in params)


# name: (factory, leaves that mirror a parameter of the (16, 32, 8) MLP, whose four
# parameters are two kernels and two biases).
OPTIMIZERS: dict[str, tuple[Callable[[], Any], int]] = {
    # adam's mu, nu of the kernels; sgd's momentum of the biases
    "multi_transform": (
        lambda: optax.multi_transform(
            {"matrix": optax.adam(1e-2), "vector": optax.sgd(0.05, momentum=0.9)}, _labels
        ),
        6,
    ),
    "adamw_masked": (lambda: optax.adamw(1e-2, weight_decay=0.1, mask=_decay_mask), 8),
    # Newton-Schulz momentum of the kernels (MaskedNode elsewhere); adam's of the biases
    "contrib.muon": (lambda: optax.contrib.muon(0.02), 6),
    "contrib.schedule_free_adamw": (lambda: optax.contrib.schedule_free_adamw(1e-2), 8),
    "inject_hyperparams": (lambda: optax.inject_hyperparams(optax.adam)(learning_rate=1e-2), 8),
    "MultiSteps": (lambda: optax.MultiSteps(optax.adam(1e-2), every_k_schedule=2), 12),
    # the (16, 32) kernel's moment factored into a row and a column vector (split under
    # fsdp, not parameter-shaped); the (32, 8) kernel (8 < 16) and the biases unfactored
    "adafactor": (lambda: optax.adafactor(1e-2, min_dim_size_to_factor=16), 3),
    "lion": (lambda: optax.lion(1e-3), 4),
    "clip_then_adam": (
        lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2)),
        8,
    ),
    "noisy_sgd": (lambda: optax.noisy_sgd(1e-2, key=0), 0),  # a count and a PRNG key
    "contrib.reduce_on_plateau": (
        lambda: optax.chain(optax.adam(1e-2), optax.contrib.reduce_on_plateau()),
        8,
    ),
    "flatten": (lambda: optax.flatten(optax.adam(1e-2)), 0),  # one vector of all
    "contrib.prodigy": (lambda: optax.contrib.prodigy(), 16),
    "apply_if_finite": (lambda: optax.apply_if_finite(optax.adam(1e-2), 3), 8),
    "lamb": (lambda: optax.lamb(1e-2), 8),
    # takes value, grad and value_fn; its line search compiles slowly (about 3 s a step)
    "lbfgs": (lambda: optax.lbfgs(), 12),
}
# Ten by default; all sixteen, under every strategy, with SHARDKIT_FULL_TESTS=1.
SLOW_OR_ALIKE = ("lbfgs", "lamb", "contrib.prodigy", "flatten", "noisy_sgd")
DEFAULT = [n for n in OPTIMIZERS if n not in (*SLOW_OR_ALIKE, "contrib.reduce_on_plateau")]

STRATEGY_MESHES = {"dp": ["8", "2x4"], "fsdp": ["2x4", "8"], "tp": ["8"], "dp_tp": ["4x2"]}


def _cases() -> list[tuple[str, str, str, str]]:
    names = list(OPTIMIZERS) if FULL else DEFAULT
    types = list(AXIS_TYPES)
    out = []
    for i, name in enumerate(names):
        # By default every optimizer under fsdp (its state split like the parameters)
        # and every fifth under dp too (a replicated state: the same for any optimizer).
        strategies = list(STRATEGY_MESHES) if FULL else ["dp", "fsdp"] if i % 5 == 0 else ["fsdp"]
        for strategy in strategies:
            meshes = STRATEGY_MESHES[strategy]
            if FULL:
                out += [(name, strategy, m, t) for m in meshes for t in types]
            else:
                out.append((name, strategy, meshes[i % len(meshes)], types[i % len(types)]))
    return out


@pytest.fixture(scope="module")
def references() -> dict[str, np.ndarray]:
    return {}


def _reference(name: str, cache: dict[str, np.ndarray]) -> np.ndarray:
    if name not in cache:
        model = small_mlp(SIZES)
        step, state = train.make_train_step(
            model, OPTIMIZERS[name][0](), strategy="single", mesh=None, key=jax.random.key(0)
        )
        cache[name] = losses(step, state, numpy_batch(model), STEPS)[0]
    return cache[name]


def _ends_with(path: tuple[Any, ...], suffix: tuple[Any, ...]) -> bool:
    return path[len(path) - len(suffix) :] == suffix


def _check_state(name: str, strategy: str, state: train.TrainState, layout: Any) -> None:
    params = [
        (tuple(p), leaf.shape, want)
        for (p, leaf), want in zip(
            jax.tree_util.tree_flatten_with_path(state.params)[0],
            jax.tree.leaves(layout.params, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding)),
            strict=True,
        )
    ]
    mirrors = 0
    parts = math.prod(layout.mesh.shape.values())
    for path, leaf in jax.tree_util.tree_flatten_with_path(state.opt_state)[0]:
        where = f"{name} under {strategy}: opt_state{jax.tree_util.keystr(path)}"
        sharding = leaf.sharding
        assert sharding.mesh == layout.mesh, where
        if leaf.ndim == 0 or strategy == "dp":
            assert sharding.is_fully_replicated, f"{where} should be replicated: {sharding}"
            continue
        mirrored = [w for p, s, w in params if _ends_with(tuple(path), p) and s == leaf.shape]
        if mirrored:
            mirrors += 1
            assert sharding.is_equivalent_to(mirrored[0], leaf.ndim), f"{where}: {sharding}"
        elif strategy == "fsdp" and any(d % parts == 0 for d in leaf.shape):
            assert not sharding.is_fully_replicated, f"{where} is whole on every device"
    if strategy != "dp":
        assert mirrors == OPTIMIZERS[name][1], f"{name}: {mirrors} leaves mirror a parameter"


@pytest.mark.parametrize(("name", "strategy", "mesh_shape", "axis_types"), _cases())
def test_optimizer_trains_like_one_device(
    name: str,
    strategy: str,
    mesh_shape: str,
    axis_types: str,
    references: dict[str, np.ndarray],
) -> None:
    model = small_mlp(SIZES)
    mesh = make_mesh(mesh_shape, axis_types, TRAIN_NAMES)
    step, state = train.make_train_step(
        model, OPTIMIZERS[name][0](), strategy=strategy, mesh=mesh, key=jax.random.key(0)
    )
    got, state = losses(step, state, numpy_batch(model), STEPS)
    ref = _reference(name, references)
    assert got[-1] < got[0], f"{name} does not train: {got}"
    what = f"{name} {strategy} losses on {mesh_shape} ({axis_types})"
    assert_close(got, ref, dtype=np.float32, what=what)
    _check_state(name, strategy, state, train.strategy_layout(model, strategy=strategy, mesh=mesh))


def test_a_state_that_is_not_an_array_is_named() -> None:
    def init(params: Any) -> Any:
        del params
        return {"count": np.zeros((), np.int32), "kind": "adam"}

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        del params
        return updates, state

    opt = optax.GradientTransformation(init, update)
    pattern = (
        r"make_train_step: the state of optimizer=test_optimizers\..*\.init holds str 'adam' at "
        r"opt_state\['kind'\], which is not an array and cannot be placed"
    )
    with pytest.raises(TypeError, match=pattern):
        train.make_train_step(
            small_mlp(SIZES),
            opt,
            strategy="fsdp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            key=jax.random.key(0),
        )


def test_labels_that_do_not_fit_the_parameters_name_the_optimizer() -> None:
    opt = optax.multi_transform(
        {"a": optax.adam(1e-2), "b": optax.sgd(0.1)},
        lambda p: [{"w": "a", "b": "b"} for _ in p],  # a list, but the parameters are a tuple
    )
    pattern = (
        r"make_train_step: optimizer=optax partition: init\(params\) failed with ValueError: "
        r".*The parameters are PyTreeDef\(\(\{'b': \*, 'w': \*\}.*check the optimizer's labels"
    )
    with pytest.raises(ValueError, match=pattern):
        train.make_train_step(
            small_mlp(SIZES),
            opt,
            strategy="dp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            key=jax.random.key(0),
        )


def test_an_update_that_changes_the_state_structure_is_named() -> None:
    def init(params: Any) -> Any:
        del params
        return {"count": np.zeros((), np.int32)}

    def update(updates: Any, state: Any, params: Any = None) -> Any:
        del params
        return updates, {**state, "extra": state["count"]}

    model = small_mlp(SIZES)
    step, state = train.make_train_step(
        model,
        optax.GradientTransformation(init, update),
        strategy="dp",
        mesh=make_mesh("8", "auto", TRAIN_NAMES),
        key=jax.random.key(0),
    )
    pattern = (
        r"optimizer=test_optimizers\..*\.init: update returned a state of another structure "
        r"than init's \(it has opt_state\['extra'\], which init's state lacks\)"
    )
    with pytest.raises(TypeError, match=pattern):
        step(state, numpy_batch(model))
