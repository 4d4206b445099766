"""Save a sharded state with orbax and resume on another mesh or strategy, same next loss.

The target mesh has Auto axes, or once Explicit axes (a state from an Auto mesh
resumed onto an Explicit one).
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import optax
import pytest
from _train_util import TRAIN_NAMES, losses, numpy_batch, small_mlp

from _matrix import FULL
from _meshes import make_mesh
from shardkit import train
from shardkit.testing import assert_close

pytest.importorskip("orbax.checkpoint")


@pytest.mark.parametrize(
    ("saved", "resumed", "axis_types"),
    [
        (("fsdp", "2x4"), ("tp", "8"), "auto"),
        (("fsdp", "4x2"), ("dp_tp", "2x4"), "explicit"),
        *(
            [(("dp", "8"), ("dp_tp", "4x2"), "auto"), (("dp_tp", "2x4"), ("single", None), "auto")]
            if FULL
            else []
        ),
    ],
)
def test_resume_on_another_layout_gives_the_same_next_loss(
    tmp_path: Path, saved: tuple[str, str], resumed: tuple[str, str | None], axis_types: str
) -> None:
    model = small_mlp()
    batch = numpy_batch(model)
    step, state = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy=saved[0],
        mesh=make_mesh(saved[1], "auto", TRAIN_NAMES),
        key=jax.random.key(0),
    )
    _, state = losses(step, state, batch, 3)
    path = train.save_state(tmp_path / "ckpt", state)
    expected, _ = losses(step, state, batch, 2)

    mesh = make_mesh(resumed[1], axis_types, TRAIN_NAMES)
    step2, fresh = train.make_train_step(
        model, optax.adam(1e-2), strategy=resumed[0], mesh=mesh, key=jax.random.key(9)
    )
    restored = train.restore_state(path, fresh)
    assert isinstance(restored, train.TrainState)
    assert jax.tree.structure(restored) == jax.tree.structure(fresh)
    for got, want, like in zip(
        jax.tree.leaves(restored), jax.tree.leaves(state), jax.tree.leaves(fresh), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.sharding.is_equivalent_to(like.sharding, got.ndim)
        if mesh is not None:  # on the target's own mesh, axis types included
            assert got.sharding.mesh == mesh
    got_losses, _ = losses(step2, restored, batch, 2)
    assert_close(got_losses, expected, dtype=np.float32, what="losses after the restore")


def test_save_refuses_an_existing_directory_and_restore_a_missing_one(tmp_path: Path) -> None:
    model = small_mlp()
    _, state = train.make_train_step(
        model,
        optax.sgd(0.1),
        strategy="dp",
        mesh=make_mesh("8", "auto", TRAIN_NAMES),
        key=jax.random.key(0),
    )
    with pytest.raises(FileExistsError, match="exists"):
        train.save_state(tmp_path, state)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train.restore_state(tmp_path / "missing", state)
