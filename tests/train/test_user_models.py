"""Your own model trains like the bundled ones: a parameter pytree, an Equinox module, an NNX one.

Each with every strategy gives the losses of one device (float32 tolerance); path rules
that do not divide raise naming the parameter; checkpoints reshard user models. One
mesh and axis type per case, and two strategies for pytrees, by default;
``SHARDKIT_FULL_TESTS=1`` runs every strategy and the Equinox and NNX checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _train_util import TRAIN_NAMES, losses
from jax.sharding import PartitionSpec as P

from _matrix import FULL
from _meshes import make_mesh
from shardkit import train
from shardkit.testing import assert_close

STEPS = 5
# dp_tp and fsdp by default (2-D meshes, one Explicit); every strategy with FULL.
CASES = [
    ("dp_tp", "4x2", "auto"),
    ("fsdp", "2x4", "explicit"),
    *([("dp", "8", "auto"), ("tp", "8", "auto"), ("tp", "4x2", "explicit")] if FULL else []),
]


def _params() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "hidden": {
            "w": rng.normal(size=(8, 16)).astype(np.float32) / 3,
            "b": np.zeros(16, np.float32),
        },
        "out": {"w": rng.normal(size=(16, 4)).astype(np.float32) / 4, "b": np.zeros(4, np.float32)},
    }


def _apply(p: dict[str, Any], x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ p["hidden"]["w"] + p["hidden"]["b"])
    return h @ p["out"]["w"] + p["out"]["b"]


def _mse(p: dict[str, Any], batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    x, y = batch
    return jnp.mean((_apply(p, x) - y) ** 2)


def _batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)


def _train(
    model: Any,
    loss: Any,
    strategy: str,
    mesh_shape: str | None,
    axis_types: str = "auto",
    **kw: Any,
):  # type: ignore[no-untyped-def]
    step, state = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy=strategy,
        mesh=make_mesh(mesh_shape, axis_types, TRAIN_NAMES),
        loss=loss,
        **kw,
    )
    got, state = losses(step, state, _batch(), STEPS)
    return got, state, step


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return _train(_params(), _mse, "single", None)[0]


@pytest.mark.parametrize(("strategy", "mesh_shape", "axis_types"), CASES)
def test_a_parameter_pytree_trains_like_one_device(
    strategy: str, mesh_shape: str, axis_types: str, reference: np.ndarray
) -> None:
    got, state, _ = _train(_params(), _mse, strategy, mesh_shape, axis_types)
    assert got[-1] < got[0]
    assert_close(got, reference, dtype=np.float32, what=f"pytree {strategy} on {mesh_shape}")
    layout = train.strategy_layout(
        _params(), strategy=strategy, mesh=make_mesh(mesh_shape, axis_types, TRAIN_NAMES)
    )
    for leaf, want in zip(
        jax.tree.leaves(state.params), jax.tree.leaves(layout.params), strict=True
    ):
        assert leaf.sharding.is_equivalent_to(want, leaf.ndim)


def test_default_rules_and_path_rules() -> None:
    mesh = make_mesh("4x2", "auto", TRAIN_NAMES)
    specs = lambda lay: {k: (v["w"].spec, v["b"].spec) for k, v in lay.params.items()}  # noqa: E731
    tp = train.strategy_layout(_params(), strategy="dp_tp", mesh=mesh)
    assert specs(tp) == {"hidden": (P(None, "model"), P()), "out": (P(None, "model"), P())}
    fsdp = train.strategy_layout(_params(), strategy="fsdp", mesh=mesh)
    both = ("data", "model")
    assert specs(fsdp) == {"hidden": (P(None, both), P(both)), "out": (P(both), P())}
    rules = [(r"\['out'\]\['w'\]", ("model", None)), (r"\['hidden'\]\['b'\]", ("model",))]
    ruled = train.strategy_layout(_params(), strategy="dp_tp", mesh=mesh, rules=rules)
    assert specs(ruled) == {
        "hidden": (P(None, "model"), P("model")),
        "out": (P("model", None), P()),
    }
    # the bundled models go through the same rules
    mlp = train.strategy_layout(
        train.MLP((8, 16, 4)), strategy="tp", mesh=mesh, rules=[(r"\[1\]\['w'\]", ())]
    )
    assert mlp.params[1]["w"].spec == P()


def test_a_rule_that_does_not_divide_names_the_parameter() -> None:
    pattern = (
        r"make_train_step\(strategy='tp'\): parameter \['out'\]\['w'\] \(rule .*\): "
        r"array shape=\(16, 4\).*mesh\(x=8\).*dimension 1 \(size 4\).*not divisible by 8"
    )
    with pytest.raises(ValueError, match=pattern):
        train.make_train_step(
            _params(),
            optax.sgd(0.1),
            strategy="tp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            loss=_mse,
            rules=[(r"\['out'\]\['w'\]", (None, "model"))],
        )
    with pytest.raises(ValueError, match=r"a template holds None or 'model'"):
        train.strategy_layout(
            _params(),
            strategy="tp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            rules=[("w", ("x",))],
        )
    with pytest.raises(TypeError, match=r"needs loss="):
        train.make_train_step(
            _params(), optax.sgd(0.1), strategy="dp", mesh=make_mesh("8", "auto", TRAIN_NAMES)
        )
    with pytest.raises(TypeError, match=r"parameter \['n'\] is int"):
        train.make_train_step(
            {"n": 3},
            optax.sgd(0.1),
            strategy="dp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            loss=_mse,
        )


def test_a_user_batch_is_checked() -> None:
    step, state = train.make_train_step(
        _params(),
        optax.sgd(0.1),
        strategy="dp",
        mesh=make_mesh("8", "auto", TRAIN_NAMES),
        loss=_mse,
    )
    x, y = _batch()
    with pytest.raises(ValueError, match=r"disagree on the batch size"):
        step(state, (x, y[:8]))
    with pytest.raises(ValueError, match=r"batch\[0\].*not divisible by 8"):
        step(state, (x[:12], y[:12]))
    bad = {**state.params, "out": {**state.params["out"], "w": np.zeros((16, 5), np.float32)}}
    with pytest.raises(ValueError, match=r"state.params\['out'\]\['w'\] has shape \(16, 5\)"):
        step(state._replace(params=bad), (x, y))


def test_a_user_model_checkpoint_reshards(tmp_path: Path) -> None:
    pytest.importorskip("orbax.checkpoint")
    _, state, step = _train(_params(), _mse, "fsdp", "8")
    path = train.save_state(tmp_path / "ckpt", state)
    expected, _ = losses(step, state, _batch(), 2)
    step2, fresh = train.make_train_step(
        _params(),
        optax.adam(1e-2),
        strategy="dp_tp",
        mesh=make_mesh("2x4", "explicit", TRAIN_NAMES),
        loss=_mse,
    )
    restored = train.restore_state(path, fresh)
    for a, b, like in zip(
        jax.tree.leaves(restored), jax.tree.leaves(state), jax.tree.leaves(fresh), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert a.sharding.is_equivalent_to(like.sharding, a.ndim)
    got2, _ = losses(step2, restored, _batch(), 2)
    assert_close(got2, expected, dtype=np.float32, what="user model after the restore")


# ---- Equinox and Flax NNX --------------------------------------------------------------

# One strategy per library by default (together they cover dp and tp); all with FULL.
LIBRARY_CASES = [("dp", "8"), ("fsdp", "2x4"), ("tp", "4x2"), ("dp_tp", "4x2")]
DEFAULT_CASE = {"equinox": ("tp", "4x2"), "nnx": ("dp", "8")}


def _equinox() -> tuple[Any, Any]:
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.MLP(8, 4, 16, 1, activation=jnp.tanh, key=jax.random.key(0))

    def loss(m: Any, batch: Any) -> jax.Array:
        x, y = batch
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    return model, loss


def _nnx() -> tuple[Any, Any]:
    nnx = pytest.importorskip("flax.nnx")

    class Net(nnx.Module):
        def __init__(self, rngs: Any) -> None:
            self.hidden = nnx.Linear(8, 16, rngs=rngs)
            self.out = nnx.Linear(16, 4, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.out(jnp.tanh(self.hidden(x)))

    def loss(m: Any, batch: Any) -> jax.Array:
        x, y = batch
        return jnp.mean((m(x) - y) ** 2)

    return Net(nnx.Rngs(0)), loss


@pytest.mark.parametrize("library", ["equinox", "nnx"])
def test_equinox_and_nnx_modules_train_like_one_device(library: str, tmp_path: Path) -> None:
    model, loss = _equinox() if library == "equinox" else _nnx()
    ref, _, _ = _train(model, loss, "single", None)
    state: Any = None
    for strategy, mesh_shape in LIBRARY_CASES if FULL else [DEFAULT_CASE[library]]:
        got, state, step = _train(model, loss, strategy, mesh_shape)
        assert_close(got, ref, dtype=np.float32, what=f"{library} {strategy}")
        rebuilt = step.model(state.params)  # type: ignore[attr-defined]
        assert type(rebuilt) is type(model)
    if not FULL:  # orbax's save and restore cost ~8 s; the pytree test covers them
        return
    pytest.importorskip("orbax.checkpoint")
    path = train.save_state(tmp_path / "ckpt", state)
    _, fresh = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy="fsdp",
        mesh=make_mesh("8", "auto", TRAIN_NAMES),
        loss=loss,
    )
    restored = train.restore_state(path, fresh)
    for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(state.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
