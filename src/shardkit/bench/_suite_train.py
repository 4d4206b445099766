"""The ``train`` suite: one training step of every strategy against one device.

Each case is one (mesh, hidden width ``w``) pair: seed 004's MLP shape at a smaller
width, ``784-w-w-10``, float32, SGD, a batch of 256 (64 with ``--quick``). Timed side
by side, in interleaved rounds:

``single``
  The baseline: the step on the mesh's first device.
``dp``, ``fsdp``, ``tp``, ``dp_tp``
  :func:`shardkit.train.make_train_step` with that strategy on the mesh (``dp_tp``
  on 2-D meshes only), each on the same initial parameters and batch.

Every record adds steps per second (``1 / median``) and, from ``shardkit.comms`` of
the compiled step, the bytes each device sends per step, its peak memory, and the
bytes of training state (parameters and optimizer state) it holds.

``--sizes`` sets the hidden width ``w``: 1024 by default, 128 with ``--quick``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax

from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._timing import Case
from shardkit.inspect import CommReport, comms
from shardkit.layout import mesh as make_mesh
from shardkit.layout import parse_mesh_shape

__all__ = ["DEFAULT_WIDTHS", "QUICK_WIDTHS", "SUITE"]

DEFAULT_WIDTHS = (1024,)
"""Hidden widths ``w`` of a full run (MLP ``784-w-w-10``)."""

QUICK_WIDTHS = (128,)
"""The hidden width of a ``--quick`` run."""

BASELINE = "single"
_STRATEGIES = ("dp", "fsdp", "tp", "dp_tp")


def _state_bytes(state: Any) -> int:
    return sum(
        math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
        for x in jax.tree.leaves(state)
    )


def _build(
    m: Any, width: int, batch_size: int, names: tuple[str, ...], holder: dict[str, Any]
) -> tuple[Any, ...]:
    import optax

    from shardkit.train import MLP, make_train_step, strategy_layout

    model = MLP((784, width, width, 10))
    key = jax.random.key(0)
    args: list[Any] = []
    for name in names:
        mesh = None if name == BASELINE else m
        step, state = make_train_step(model, optax.sgd(1e-3), strategy=name, mesh=mesh, key=key)
        batch = model.batch(
            jax.random.key(1), batch_size, strategy_layout(model, strategy=name, mesh=mesh).batch
        )
        holder["steps"][name] = step
        holder["reports"][name] = comms(step, state, batch)
        holder["state_bytes"][name] = _state_bytes(state)
        args += [state, batch]
    return tuple(args)


def _candidate(name: str, index: int, holder: dict[str, Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return holder["steps"][name](args[2 * index], args[2 * index + 1])

    return run


def _metrics(name: str, seconds: float, *, holder: dict[str, Any]) -> Mapping[str, float | None]:
    r: CommReport = holder["reports"][name]
    peak = r.memory.peak_bytes if r.memory else None
    return {
        "steps_per_s": 1.0 / seconds if seconds > 0 else None,
        "bytes_sent": float(r.bytes_sent),
        "peak_bytes": float(peak) if peak is not None else None,
        "state_bytes": float(holder["state_bytes"][name]),
    }


def _cases(config: SuiteConfig) -> list[Case]:
    widths = config.pick_sizes(QUICK_WIDTHS, DEFAULT_WIDTHS)
    batch_size = 64 if config.quick else 256
    cases = []
    for mesh_str in config.meshes:
        dims = parse_mesh_shape(mesh_str)
        axis_names = "data,model" if len(dims) == 2 else ",".join(f"a{i}" for i in range(len(dims)))
        m = make_mesh(dims, axis_names, axis_types="auto")
        label = "x".join(map(str, dims))
        strategies = [s for s in _STRATEGIES if s != "dp_tp" or len(dims) == 2]
        names = (BASELINE, *strategies)
        for width in widths:
            from shardkit.train import MLP, strategy_layout

            model = MLP((784, width, width, 10))
            for s in strategies:  # fail at case building, with the layout's message
                strategy_layout(model, strategy=s, mesh=m).check_batch(
                    (batch_size, 784), where=f"bench train (batch {batch_size})"
                )
            holder: dict[str, Any] = {"steps": {}, "reports": {}, "state_bytes": {}}
            fns = {name: _candidate(name, i, holder) for i, name in enumerate(names)}
            cases.append(
                Case(
                    name=f"{label}/{width}",
                    params={"mesh": label, "width": width, "batch": batch_size},
                    candidates={k: v for k, v in fns.items() if k != BASELINE},
                    baseline=fns[BASELINE],
                    baseline_name=BASELINE,
                    make_args=lambda m=m, w=width, h=holder, n=names: _build(
                        m, w, batch_size, n, h
                    ),
                    metrics=lambda name, s, h=holder: _metrics(name, s, holder=h),
                )
            )
    return cases


def _notes() -> list[str]:
    return [
        "One SGD step of MLP 784-w-w-10 (float32); each strategy starts from the same "
        "parameters and batch as the single-device baseline.",
        "Ratio: median over rounds of (strategy step time / single-device step time).",
        "bytes_sent, peak_bytes: shardkit.comms of each compiled step, per device; "
        "state_bytes: parameters and optimizer state one device holds.",
        "On simulated CPU devices all 'devices' share the machine's cores, so steps/s "
        "measures overheads, not a speed-up.",
    ]


SUITE = Suite(
    name="train",
    description=(
        "One training step of seed 004's MLP (784-w-w-10) under every shardkit.train "
        "strategy (dp, fsdp, tp, dp_tp) against the same step on one device."
    ),
    baseline="single: the same step, parameters and batch on the mesh's first device.",
    cases=_cases,
    columns=(
        Column("steps_per_s", "steps/s"),
        Column("bytes_sent", "sent/dev", "B"),
        Column("peak_bytes", "peak/dev", "B"),
        Column("state_bytes", "state/dev", "B"),
    ),
    plots=(
        PlotSpec("time", "width", "median_s", "mesh", "candidate", "step time (s)", "hidden width"),
    ),
    key_params=("mesh", "width"),
    notes=_notes,
)
