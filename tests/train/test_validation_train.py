"""Bad input to ``shardkit.train`` (issue 18): models, steps, batches and checkpoints.

The batch checks run before the step is compiled, so most tests here compile nothing
beyond the first state; the checkpoint is saved once per module.
"""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import shardkit
from _meshes import make_mesh
from shardkit import train

pytest.importorskip("orbax.checkpoint")

SIZES = (4, 8, 2)


@pytest.fixture(scope="module")
def setup() -> dict[str, Any]:
    mesh = make_mesh("8", "auto", names="data")
    model = train.MLP(SIZES)
    step, state = train.make_train_step(
        model, optax.sgd(0.1), strategy="dp", mesh=mesh, key=jax.random.key(0)
    )
    layout = train.strategy_layout(model, strategy="dp", mesh=mesh)
    return {"mesh": mesh, "model": model, "step": step, "state": state, "layout": layout}


# ---- models and make_train_step -------------------------------------------------------


def test_mlp_accepts_numpy_integer_sizes() -> None:
    model = train.MLP((np.int64(4), np.int32(8), 2))  # type: ignore[arg-type]
    assert model.layer_sizes == (4, 8, 2)
    assert all(type(n) is int for n in model.layer_sizes)
    assert train.Logistic(features=np.int64(6)).layer_sizes == (6, 1)  # type: ignore[arg-type]


def test_mlp_rejects_bad_sizes_naming_layer_sizes() -> None:
    with pytest.raises(ValueError, match=r"MLP: layer_sizes=\(4, 0\) must hold.*positive"):
        train.MLP((4, 0))
    with pytest.raises(TypeError, match=r"MLP: layer_sizes='4,8' \(str\) must be a sequence"):
        train.MLP("4,8")  # type: ignore[arg-type]


def test_an_integer_key_is_refused(setup: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"make_train_step: key=0 is an integer seed.*jax\.random"):
        train.make_train_step(
            setup["model"],
            optax.sgd(0.1),
            strategy="dp",
            mesh=setup["mesh"],
            key=0,  # type: ignore[arg-type]
        )


def test_an_optimizer_given_as_a_string(setup: dict[str, Any]) -> None:
    pattern = r"make_train_step: optimizer='sgd' \(str\) is not an optax optimizer.*optax\.sgd\("
    with pytest.raises(TypeError, match=pattern):
        train.make_train_step(
            setup["model"],
            "sgd",  # type: ignore[arg-type]
            strategy="dp",
            mesh=setup["mesh"],
            key=jax.random.key(0),
        )


def test_a_model_that_is_not_a_shardkit_model(setup: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"make_train_step: model=.*must be a shardkit\.train\.MLP"):
        train.make_train_step(
            (4, 8, 2),  # type: ignore[arg-type]
            optax.sgd(0.1),
            strategy="dp",
            mesh=setup["mesh"],
            key=jax.random.key(0),
        )


def test_strategy_layout_of_something_that_is_not_a_model(setup: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"strategy_layout: model='mlp' \(str\) must be a"):
        train.strategy_layout("mlp", strategy="dp", mesh=setup["mesh"])  # type: ignore[arg-type]


def test_model_init_and_batch_check_key_and_size(setup: dict[str, Any]) -> None:
    model = setup["model"]
    with pytest.raises(TypeError, match=r"MLP\.init: key=0 is an integer seed"):
        model.init(0)
    with pytest.raises(TypeError, match=r"MLP\.batch: key=0 is an integer seed"):
        model.batch(0, 8)
    with pytest.raises(ValueError, match=r"MLP\.batch: batch_size=0 must be at least 1"):
        model.batch(jax.random.key(0), 0)


# ---- the batch a step receives -------------------------------------------------------


def _call(setup: dict[str, Any], batch: Any) -> Any:
    return setup["step"](setup["state"], batch)


def test_targets_of_the_wrong_shape_do_not_broadcast(setup: dict[str, Any]) -> None:
    pattern = r"targets shape=\(16, 1\) must be \(batch, outputs\) = \(16, 2\).*reshape"
    with pytest.raises(ValueError, match=pattern):
        _call(setup, (np.ones((16, 4)), np.ones((16, 1))))


def test_an_empty_batch_is_refused(setup: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"the batch is empty.*NaN.*at least one example"):
        _call(setup, (np.ones((0, 4)), np.ones((0, 2))))


def test_a_batch_the_data_axis_does_not_divide(setup: dict[str, Any]) -> None:
    pattern = r"batch inputs: array shape=\(12, 4\).*not divisible by 8\. Pad dimension 0 to 16"
    with pytest.raises(ValueError, match=pattern):
        _call(setup, (np.ones((12, 4)), np.ones((12, 2))))


def test_a_feature_count_that_does_not_match_the_model(setup: dict[str, Any]) -> None:
    pattern = r"inputs shape=\(16, 5\).*takes 4 features.*pass inputs of shape \(batch, 4\)"
    with pytest.raises(ValueError, match=pattern):
        _call(setup, (np.ones((16, 5)), np.ones((16, 2))))


def test_a_batch_that_is_not_a_pair(setup: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"batch must be a pair \(inputs, targets\).*ndarray"):
        _call(setup, np.ones((16, 4)))


def test_a_batch_on_another_mesh(setup: dict[str, Any]) -> None:
    other = make_mesh("4", "auto", names="data")
    batch = tuple(shardkit.shard(np.ones(s), mesh=other, spec="data") for s in ((16, 4), (16, 2)))
    pattern = r"the operands live on different devices: the target is on mesh\(data=8\).*inputs "
    with pytest.raises(ValueError, match=pattern + r".*jax\.device_put\(batch, layout\.batch\)"):
        _call(setup, batch)


def test_a_batch_on_the_same_devices_with_another_layout(setup: dict[str, Any]) -> None:
    batch = tuple(shardkit.shard(np.ones(s), mesh=setup["mesh"]) for s in ((16, 4), (16, 2)))
    with pytest.raises(ValueError, match=r"inputs are placed as .*jax\.device_put\(inputs, layout"):
        _call(setup, batch)


def _with_first_weight(state: Any, w: Any) -> Any:
    layers = list(state.params)
    layers[0] = {**layers[0], "w": w}
    return state._replace(params=tuple(layers))


def test_a_state_from_another_strategy(setup: dict[str, Any]) -> None:
    state = setup["state"]
    split = NamedSharding(setup["mesh"], PartitionSpec(None, "data"))  # as fsdp would
    moved = _with_first_weight(state, jax.device_put(state.params[0]["w"], split))
    pattern = r"state\.params\[0\]\['w'\] is placed as .*another strategy or mesh.*restore_state"
    with pytest.raises(ValueError, match=pattern):
        setup["step"](moved, (np.ones((16, 4)), np.ones((16, 2))))


def test_a_state_of_another_model(setup: dict[str, Any]) -> None:
    other = _with_first_weight(setup["state"], np.zeros((5, 8), np.float32))
    pattern = r"state\.params\[0\]\['w'\] has shape \(5, 8\), but the step's model needs \(4, 8\)"
    with pytest.raises(ValueError, match=pattern):
        setup["step"](other, (np.ones((16, 4)), np.ones((16, 2))))
    with pytest.raises(TypeError, match=r"state is a dict, not the TrainState of make_train_step"):
        setup["step"]({"params": ()}, (np.ones((16, 4)), np.ones((16, 2))))


def test_lower_checks_the_batch_too(setup: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"targets shape=\(16, 3\)"):
        setup["step"].lower(setup["state"], (np.ones((16, 4)), np.ones((16, 3))))


def test_run_training_stops_after_max_skipped_steps_in_a_row() -> None:
    # keep_going=True is covered in tests/train/test_run.py
    console = io.StringIO()
    pattern = r"stopped at step 6 of 9: steps 2 to 6 were skipped, 5 in a row.*keep_going=True"
    with pytest.raises(FloatingPointError, match=pattern):
        train.run_training(
            progress=console,
            strategy="dp",
            mesh="8",
            steps=np.int64(9),  # type: ignore[arg-type]
            sizes=(8, 4),
            batch_size=8,
            learning_rate=1e30,
        )
    assert "training 6/9 loss inf (skipped)" in console.getvalue()
    with pytest.raises(ValueError, match=r"max_skipped=0 must be a positive integer"):
        train.run_training(progress=console, max_skipped=0)


# ---- checkpoints -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(setup: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train.save_state(tmp_path_factory.mktemp("ckpt") / "state", setup["state"])


def _target(model: train.Model, optimizer: Any, mesh: Any) -> Any:
    """An abstract target (ShapeDtypeStructs with shardings): nothing is compiled."""
    replicated = NamedSharding(mesh, PartitionSpec())
    params = tuple(
        {k: jax.ShapeDtypeStruct(s, model.dtype, sharding=replicated) for k, s in layer.items()}
        for layer in model.param_shapes()
    )
    opt = jax.eval_shape(optimizer.init, params)
    opt = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), opt)
    count = jax.ShapeDtypeStruct((), np.int32, sharding=replicated)
    return train.TrainState(params, opt, count, count)


def test_restore_refuses_to_cast_float32_into_float16(setup: dict[str, Any], saved: Path) -> None:
    model = train.MLP(SIZES, dtype=jax.numpy.float16)
    target = _target(model, optax.sgd(0.1), setup["mesh"])
    pattern = (
        r"params\.0\.b is float32 in the checkpoint but float16 in target; restore_state never"
    )
    with pytest.raises(ValueError, match=pattern):
        train.restore_state(saved, target)


def test_restore_onto_other_layer_sizes(setup: dict[str, Any], saved: Path) -> None:
    target = _target(train.MLP((4, 16, 2)), optax.sgd(0.1), setup["mesh"])
    pattern = r"params\.0\.b has shape \(8,\) in the checkpoint but \(16,\) in target\. Build"
    with pytest.raises(ValueError, match=pattern):
        train.restore_state(saved, target)


def test_restore_onto_another_structure(setup: dict[str, Any], saved: Path) -> None:
    target = _target(setup["model"], optax.adam(0.1), setup["mesh"])
    pattern = r"structure differs.*opt_state\.0\.count.*checkpoint lacks.*same model"
    with pytest.raises(ValueError, match=pattern):
        train.restore_state(saved, target)


def test_restore_from_an_empty_or_missing_directory(setup: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"directory=.*empty.*save_state returned"):
        train.restore_state(tmp_path, setup["state"])
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at directory=.*save_state wrote"):
        train.restore_state(tmp_path / "nothing", setup["state"])


def test_a_corrupt_metadata_file_is_named(
    setup: dict[str, Any], saved: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "ckpt"
    shutil.copytree(saved, broken)
    (broken / "_METADATA").write_text("{not json")
    pattern = rf"checkpoint at directory='{broken}' is corrupt.*file '{broken}/_METADATA'"
    with pytest.raises(ValueError, match=pattern + r".*JSONDecodeError.*save the state again"):
        train.restore_state(broken, setup["state"])


def test_a_valid_checkpoint_still_restores(setup: dict[str, Any], saved: Path) -> None:
    restored = train.restore_state(saved, setup["state"])
    w = restored.params[0]["w"]
    assert np.array_equal(np.asarray(w), np.asarray(setup["state"].params[0]["w"]))


# Last in the module: see the comment at its end.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_truncated_data_file_is_named(setup: dict[str, Any], saved: Path, tmp_path: Path) -> None:
    broken = tmp_path / "ckpt"
    shutil.copytree(saved, broken)
    for f in (broken / "d").iterdir():
        with f.open("r+b") as handle:
            handle.truncate(10)
    pattern = rf"is corrupt or truncated: file '{broken}/d/[0-9a-f]+' cannot be read"
    with pytest.raises(ValueError, match=pattern) as info:
        train.restore_state(broken, setup["state"])
    assert "tensorstore_spec" not in str(info.value)
    # tensorstore finishes the other, abandoned reads on its own threads (a moment later,
    # or at its next read) and reports "Event loop is closed" through
    # sys.unraisablehook: flush them here, where that is ignored, not in a later test.
    train.restore_state(saved, setup["state"])
    time.sleep(0.3)
