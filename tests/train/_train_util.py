"""Shared fixtures of the training tests: a small MLP, a batch, the meshes' axis names."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType

from shardkit import train

SIZES = (16, 32, 32, 8)
BATCH = 32
STEPS = 20


def small_mlp(sizes: tuple[int, ...] = SIZES) -> train.MLP:
    return train.MLP(sizes)


def numpy_batch(model: train.Model, n: int = BATCH, seed: int = 1) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a) for a in model.batch(jax.random.key(seed), n))


AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}

# The training tests' axis names by mesh rank, for the shared make_mesh (tests/_meshes.py):
# a 1-D mesh's axis is "x", a 2-D mesh's are "data" and "model".
TRAIN_NAMES = {1: "x", 2: "data,model"}


def losses(step, state, batch, steps: int = STEPS):  # type: ignore[no-untyped-def]
    out = []
    for _ in range(steps):
        state, loss = step(state, batch)
        out.append(float(loss))
    return np.array(out), state


# The options of the resume tests' runs (tiny, fast), for run_training and the command.
RUN_OPTIONS: dict[str, Any] = {
    "strategy": "dp",
    "mesh": "8",
    "sizes": (16, 32, 8),
    "batch_size": 32,
    "optimizer": "adam",
}
RUN_ARGS = [
    arg
    for name, value in RUN_OPTIONS.items()
    for arg in (
        "--" + name.replace("_", "-"),
        ",".join(map(str, value)) if isinstance(value, tuple) else str(value),
    )
]
