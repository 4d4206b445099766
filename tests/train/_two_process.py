"""Training on 2 processes x 4 devices: run under shardkit.distributed.launch.

Usage: ``python _two_process.py OUT.json``. Every process trains the cases of
:data:`CASES` (each optimizer under each strategy, on the 8 devices of both processes)
for :data:`STEPS` steps on a batch drawn in place, then feeds one batch holding a NaN;
process 0 writes ``{case: {"losses": [...], "step": n, "skipped": k}}`` to OUT.json
for the test to compare with one device.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax

SIZES = (16, 32, 8)
STEPS = 4


def _labels(params: Any) -> Any:
    return tuple({"w": "matrix", "b": "vector"} for _ in params)


def _shardkit_muon() -> Any:
    from shardkit.train import muon

    return muon(0.02)


OPTIMIZERS = {
    "multi_transform": lambda: optax.multi_transform(
        {"matrix": optax.adam(1e-2), "vector": optax.sgd(0.05, momentum=0.9)}, _labels
    ),
    "contrib.muon": lambda: optax.contrib.muon(0.02),
    "shardkit.muon": lambda: _shardkit_muon(),  # Newton-Schulz on the shards, across processes
    "MultiSteps": lambda: optax.MultiSteps(optax.adam(1e-2), every_k_schedule=2),
}
# strategy: (mesh shape, axis names)
MESHES = {"dp": ("8", "data"), "fsdp": ("2x4", "data,model"), "tp": ("8", "model")}
CASES = [(name, strategy) for name in OPTIMIZERS for strategy in MESHES]
# Pipelines: 8 stages along both processes' devices (the permutes cross processes);
# 2 data rows of 4 stages (each process one row: the gradient all-reduce crosses).
PP_SIZES = (16,) + (16,) * 7 + (8,)
PIPELINES = {
    "pp 1f1b": ("pp", "8", "stage", "1f1b", 4),
    "dp_pp gpipe": ("dp_pp", "2x4", "data,stage", "gpipe", 2),
}


def _train(results: dict[str, Any], case: str, step: Any, state: Any, batch: Any) -> None:
    losses = []
    for _ in range(STEPS):
        state, loss = step(state, batch)
        losses.append(float(loss))  # replicated: every process reads its own copy
    state, loss = step(state, (batch[0] * np.float32(np.nan), batch[1]))
    results[case] = {
        "losses": losses,
        "nan_loss": float(loss),
        "step": int(state.step),
        "skipped": int(state.skipped),
    }


def main(out_file: Path) -> None:
    from shardkit.distributed import initialize

    info = initialize(shutdown_timeout_seconds=5)
    import shardkit
    from shardkit import train

    model = train.MLP(SIZES)
    results: dict[str, Any] = {}
    for name, strategy in CASES:
        shape, names = MESHES[strategy]
        mesh = shardkit.mesh(shape, names)
        layout = train.strategy_layout(model, strategy=strategy, mesh=mesh)
        batch = model.batch(jax.random.key(1), 32, layout.batch)
        step, state = train.make_train_step(
            model, OPTIMIZERS[name](), strategy=strategy, mesh=mesh, key=jax.random.key(0)
        )
        _train(results, f"{name} {strategy}", step, state, batch)
    deep = train.MLP(PP_SIZES)
    for case, (strategy, shape, names, schedule, micro) in PIPELINES.items():
        mesh = shardkit.mesh(shape, names)
        layout = train.strategy_layout(deep, strategy=strategy, mesh=mesh)
        batch = deep.batch(jax.random.key(1), 32, layout.batch)
        step, state = train.make_train_step(
            deep,
            optax.adam(1e-2),
            strategy=strategy,
            mesh=mesh,
            key=jax.random.key(0),
            microbatches=micro,
            schedule=schedule,  # type: ignore[arg-type]
        )
        _train(results, case, step, state, batch)
    if info.process_id == 0:
        out_file.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
