"""Non-finite steps: skipped and counted by default, raised or applied on request.

A batch with a NaN input gives a NaN loss and NaN gradients. By default the step
leaves the parameters and the optimizer state as they were and counts the step
(``state.skipped``), so training goes on exactly as if that batch had not come: the
losses equal those of one device trained on the good batches only.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _train_util import TRAIN_NAMES, numpy_batch, small_mlp

from _meshes import make_mesh
from shardkit import train
from shardkit.testing import assert_close

SIZES = (16, 32, 8)


def _bad(batch: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    x = batch[0].copy()
    x[3, 5] = np.nan
    return (x, *batch[1:])


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _same(a: Any, b: Any) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(_leaves(a), _leaves(b), strict=True))


@pytest.mark.parametrize(
    ("strategy", "mesh_shape", "axis_types"),
    [("dp", "8", "auto"), ("fsdp", "2x4", "explicit"), ("tp", "8", "auto")],
)
def test_a_nan_batch_is_skipped_and_counted(
    strategy: str, mesh_shape: str, axis_types: str, reference: np.ndarray
) -> None:
    model = small_mlp(SIZES)
    good = numpy_batch(model)
    step, state = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy=strategy,
        mesh=make_mesh(mesh_shape, axis_types, TRAIN_NAMES),
        key=jax.random.key(0),
    )
    assert (int(state.step), int(state.skipped)) == (0, 0)
    got = []
    for i in range(5):
        before = state
        state, loss = step(state, _bad(good) if i == 2 else good)
        got.append(float(loss))
        if i == 2:
            assert np.isnan(got[-1])
            assert _same(state.params, before.params)  # not applied...
            assert _same(state.opt_state, before.opt_state)  # ... adam's count included
    assert (int(state.step), int(state.skipped)) == (5, 1)
    assert state.skipped.sharding.is_fully_replicated
    # One device, the four good batches only: the same losses.
    assert_close(np.array(got[:2] + got[3:]), reference, dtype=np.float32, what=strategy)


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    model = small_mlp(SIZES)
    step, state = train.make_train_step(
        model, optax.adam(1e-2), strategy="single", mesh=None, key=jax.random.key(0)
    )
    out = []
    for _ in range(4):
        state, loss = step(state, numpy_batch(model))
        out.append(float(loss))
    assert (int(state.step), int(state.skipped)) == (4, 0)
    return np.array(out)


def _sqrt_loss(params: Any, batch: Any) -> jax.Array:
    # Finite at w = 0 (the loss is 0 there) but its gradient is infinite.
    x, _ = batch
    return jnp.mean(x) * 0 + jnp.sum(jnp.sqrt(jnp.abs(params["w"])))


def test_an_infinite_gradient_under_a_finite_loss_is_skipped_too() -> None:
    params = {"w": np.zeros((8, 16), np.float32)}
    batch = (np.ones((8, 4), np.float32), np.ones((8, 1), np.float32))
    for strategy in ("fsdp", "tp"):  # the gradient split over the devices
        step, state = train.make_train_step(
            params,
            optax.sgd(0.1),
            strategy=strategy,
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            loss=_sqrt_loss,
        )
        state, loss = step(state, batch)
        assert float(loss) == 0.0
        assert int(state.skipped) == 1, strategy
        assert _same(state.params, params)


def test_raise_names_the_step_and_apply_applies() -> None:
    model = small_mlp(SIZES)
    good = numpy_batch(model)
    mesh = make_mesh("8", "auto", TRAIN_NAMES)
    step, state = train.make_train_step(
        model,
        optax.sgd(0.05),
        strategy="dp",
        mesh=mesh,
        key=jax.random.key(0),
        on_nonfinite="raise",
    )
    state, _ = step(state, good)
    state, _ = step(state, good)
    pattern = (
        r"train_step_dp\(state, batch\): step 3 has a non-finite loss \(nan\) or gradients, "
        r"and on_nonfinite='raise'; the state passed in is unchanged.*on_nonfinite='skip'"
    )
    with pytest.raises(FloatingPointError, match=pattern):
        step(state, [*_bad(good)])  # a list batch is checked and run like a pair
    state, loss = step(state, good)  # the state passed in still trains
    assert np.isfinite(float(loss))
    assert int(state.step) == 3
    step, state = train.make_train_step(
        model,
        optax.sgd(0.05),
        strategy="dp",
        mesh=mesh,
        key=jax.random.key(0),
        on_nonfinite="apply",
    )
    state, loss = step(state, _bad(good))
    assert np.isnan(float(loss))
    assert np.isnan(np.asarray(state.params[0]["w"])).any()  # what every step did before
    assert (int(state.step), int(state.skipped)) == (1, 0)


def test_an_unknown_policy_lists_the_choices() -> None:
    pattern = r"on_nonfinite='ignore'; choose one of \['skip', 'raise', 'apply'\]"
    with pytest.raises(ValueError, match=pattern):
        train.make_train_step(
            small_mlp(SIZES),
            optax.sgd(0.1),
            strategy="dp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            key=jax.random.key(0),
            on_nonfinite="ignore",  # type: ignore[arg-type]
        )
