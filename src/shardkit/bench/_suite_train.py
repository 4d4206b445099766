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

Muon cases (``muon-<strategy>/<mesh>/<w>``, one per strategy ``fsdp``, ``tp`` and,
on 2-D meshes, ``dp_tp``): the same step with ``optax.contrib.muon`` (the baseline),
:func:`shardkit.train.muon` and ``optax.adam``, all on the mesh under that strategy.

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
MUON_BASELINE = "optax.contrib.muon"
_MUON = (MUON_BASELINE, "shardkit.muon", "optax.adam")


def _state_bytes(state: Any) -> int:
    return sum(
        math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
        for x in jax.tree.leaves(state)
    )


def _optimizer(name: str) -> Any:
    import optax

    from shardkit.train import muon

    if name == "shardkit.muon":
        return muon(0.02)
    if name == MUON_BASELINE:
        return optax.contrib.muon(0.02)
    return optax.adam(1e-3) if name == "optax.adam" else optax.sgd(1e-3)


def _build(
    m: Any,
    width: int,
    batch_size: int,
    names: tuple[str, ...],
    holder: dict[str, Any],
    strategy: str | None = None,
) -> tuple[Any, ...]:
    """Each candidate's step and first state: ``names`` are strategies (SGD), or
    optimizers under ``strategy``."""
    from shardkit.train import MLP, make_train_step, strategy_layout

    model = MLP((784, width, width, 10))
    key = jax.random.key(0)
    args: list[Any] = []
    for name in names:
        how = name if strategy is None else strategy
        mesh = None if how == BASELINE else m
        opt = _optimizer("optax.sgd" if strategy is None else name)
        step, state = make_train_step(model, opt, strategy=how, mesh=mesh, key=key)
        batch = model.batch(
            jax.random.key(1), batch_size, strategy_layout(model, strategy=how, mesh=mesh).batch
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
            cases.append(_case(f"{label}/{width}", m, label, width, batch_size, names, None))
            for s in strategies[1:]:  # Muon where it shards weights: fsdp, tp, dp_tp
                name = f"muon-{s}/{label}/{width}"
                cases.append(_case(name, m, label, width, batch_size, _MUON, s))
    return cases


def _case(
    name: str,
    m: Any,
    label: str,
    width: int,
    batch_size: int,
    names: tuple[str, ...],
    strategy: str | None,
) -> Case:
    """One case: ``names[0]`` the baseline, the rest candidates (see :func:`_build`)."""
    holder: dict[str, Any] = {"steps": {}, "reports": {}, "state_bytes": {}}
    fns = {n: _candidate(n, i, holder) for i, n in enumerate(names)}
    params: dict[str, Any] = {"mesh": label, "width": width, "batch": batch_size}
    if strategy is not None:
        params["strategy"] = strategy
    return Case(
        name=name,
        params=params,
        candidates={k: v for k, v in fns.items() if k != names[0]},
        baseline=fns[names[0]],
        baseline_name=names[0],
        make_args=lambda: _build(m, width, batch_size, names, holder, strategy),
        metrics=lambda n, s: _metrics(n, s, holder=holder),
    )


def _notes() -> list[str]:
    return [
        "One SGD step of MLP 784-w-w-10 (float32); each strategy starts from the same "
        "parameters and batch as the single-device baseline.",
        "Ratio: median over rounds of (strategy step time / single-device step time).",
        "bytes_sent, peak_bytes: shardkit.comms of each compiled step, per device; "
        "state_bytes: parameters and optimizer state one device holds.",
        "On simulated CPU devices all 'devices' share the machine's cores, so steps/s "
        "measures overheads, not a speed-up.",
        "muon-<strategy> cases: the step with optax.contrib.muon (the baseline), "
        "shardkit.train.muon and optax.adam (all lr 0.02 / 1e-3), on the mesh under that "
        "strategy; shardkit.train.muon's bytes_sent against the baseline's is the saving "
        "of orthogonalizing on the shards.",
    ]


SUITE = Suite(
    name="train",
    description=(
        "One training step of seed 004's MLP (784-w-w-10) under every shardkit.train "
        "strategy (dp, fsdp, tp, dp_tp) against the same step on one device; and the "
        "Muon step (shardkit.train.muon, optax.contrib.muon, adam) under fsdp, tp, dp_tp."
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
