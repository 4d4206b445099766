"""Shared fixtures of the training tests: a small MLP, a batch, meshes by name."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from _meshes import make_mesh as shared_mesh
from shardkit import train

SIZES = (16, 32, 32, 8)
BATCH = 32
STEPS = 20


def small_mlp(sizes: tuple[int, ...] = SIZES) -> train.MLP:
    return train.MLP(sizes)


def numpy_batch(model: train.Model, n: int = BATCH, seed: int = 1) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a) for a in model.batch(jax.random.key(seed), n))


AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}


def make_mesh(shape: str | None, axis_types: str = "auto") -> Mesh | None:
    if shape is None:
        return None
    return shared_mesh(shape, axis_types, None if "x" not in shape else "data,model")


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
