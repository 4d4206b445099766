"""The ``matmul`` suite: every :func:`shardkit.linalg.matmul` algorithm against XLA's choice.

Each case is one (mesh, n, input layout): two ``n x n`` float32 matrices placed on an
Auto-axes mesh, and the applicable algorithms plus ``auto`` timed, interleaved, with:

``xla``
  The baseline: ``jnp.dot`` under ``jax.jit`` on the same sharded inputs, so XLA's
  SPMD partitioner picks the strategy. ``1 device`` (``jnp.dot`` on one device's
  copies) is timed alongside as a candidate.

Every record adds, from :func:`shardkit.inspect.comms` of the compiled program (on
``ShapeDtypeStruct`` arguments: nothing allocated), the bytes one device sends, the
per-device peak memory, and both as ratios to XLA's choice; the notes compare
``auto``'s pick (under the default, possibly calibrated, cost model and under the
platform's built-in preset, ``"cpu"`` on CPU devices) with the measured-fastest algorithm of each case.
Layouts: on a 1-D mesh ``rows`` (``a P(x)``, ``b P(x)``: all-gather or ring) and
``k`` (``a P(None, x)``, ``b P(x)``: reductions); on a 2-D mesh ``blocks`` (``a``,
``b`` ``P(x, y)``: gathers or SUMMA; Cannon needs a square mesh) and ``k``
(``a P(x, y)``, ``b P(y)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from shardkit.bench._record import Record
from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._timing import Case
from shardkit.inspect import CommReport, comms
from shardkit.inspect.internal import builtin_preset
from shardkit.linalg import matmul

__all__ = ["DEFAULT_SIZES", "QUICK_SIZES", "auto_summary", "layouts"]

DEFAULT_SIZES = (2048, 4096)
"""Matrix sizes ``n`` of a full run (``n x n`` float32)."""

QUICK_SIZES = (256,)
"""The size of a ``--quick`` run."""

BASELINE = "xla"
ONE_DEVICE = "1 device"
_ALGOS = ("local", "allgather", "reduce_scatter", "allreduce", "ring", "cannon", "summa")


def layouts(names: tuple[str, ...]) -> dict[str, tuple[P, P]]:
    """The input layouts timed on a mesh with these axis names.

    Example:
      >>> layouts(("x",))["rows"]
      (P('x',), P('x',))
    """
    if len(names) == 1:
        (x,) = names
        return {"rows": (P(x), P(x)), "k": (P(None, x), P(x))}
    x, y = names[:2]
    return {"blocks": (P(x, y), P(x, y)), "k": (P(x, y), P(y))}


def _applicable(a: Any, b: Any, m: Any, specs: tuple[P, P]) -> list[str]:
    out = []
    for algo in _ALGOS:
        try:
            matmul(a, b, algorithm=algo, explain=True, mesh=m, in_specs=specs)
        except ValueError:
            continue
        out.append(algo)
    return out


def _make_args(m: Any, n: int, specs: tuple[P, P]) -> tuple[jax.Array, ...]:
    key = jax.random.PRNGKey(0)
    ka, kb = jax.random.split(key)
    sa, sb = (NamedSharding(m, s) for s in specs)
    a = jax.jit(partial(jax.random.normal, ka, (n, n), jnp.float32), out_shardings=sa)()
    b = jax.jit(partial(jax.random.normal, kb, (n, n), jnp.float32), out_shardings=sb)()
    one = SingleDeviceSharding(jax.devices()[0])
    return a, b, jax.device_put(a, one), jax.device_put(b, one)


def _reports(
    fns: Mapping[str, Callable[..., Any]], structs: tuple[Any, ...]
) -> dict[str, CommReport]:
    return {name: comms(fn, *structs) for name, fn in fns.items()}


def _metrics(
    name: str, seconds: float, *, reports: dict[str, CommReport]
) -> Mapping[str, float | None]:
    del seconds
    r, base = reports[name], reports[BASELINE]
    peak = r.memory.peak_bytes if r.memory else None
    base_peak = base.memory.peak_bytes if base.memory else None
    return {
        "bytes_sent": float(r.bytes_sent),
        "bytes_vs_xla": r.bytes_sent / base.bytes_sent if base.bytes_sent else None,
        "peak_bytes": float(peak) if peak is not None else None,
        "peak_vs_xla": peak / base_peak if peak and base_peak else None,
    }


def _cases(config: SuiteConfig) -> list[Case]:
    sizes = config.pick_sizes(QUICK_SIZES, DEFAULT_SIZES)
    cases = []
    for label, m in config.mesh_grid():
        names = m.axis_names
        for layout, specs in layouts(names).items():
            for n in sizes:
                one = SingleDeviceSharding(jax.devices()[0])
                structs = (
                    jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, specs[0])),
                    jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, specs[1])),
                    jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=one),
                    jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=one),
                )

                def algo_fn(
                    algo: str, specs: tuple[P, P] = specs, m: Any = m
                ) -> Callable[..., Any]:
                    return lambda a, b, a1, b1: matmul(a, b, algorithm=algo, mesh=m, in_specs=specs)  # type: ignore[arg-type]

                candidates: dict[str, Callable[..., Any]] = {
                    algo: algo_fn(algo) for algo in _applicable(*structs[:2], m, specs)
                }
                candidates["auto"] = algo_fn("auto")
                picks = {
                    key: matmul(
                        *structs[:2], explain=True, mesh=m, in_specs=specs, interconnect=link
                    ).chosen.algorithm
                    for key, link in (("auto_pick", None), ("builtin_pick", builtin_preset()))
                }
                candidates[ONE_DEVICE] = lambda a, b, a1, b1: jnp.dot(a1, b1)
                baseline = lambda a, b, a1, b1: jnp.dot(a, b)  # noqa: E731
                reports = _reports({BASELINE: baseline, **candidates}, structs)
                cases.append(
                    Case(
                        name=f"{label}/{layout}/{n}",
                        params={
                            "mesh": label,
                            "layout": layout,
                            "n": n,
                            "series": f"{label}/{layout}",
                            **picks,
                        },
                        candidates=candidates,
                        baseline=baseline,
                        baseline_name=BASELINE,
                        make_args=partial(_make_args, m, n, specs),
                        metrics=partial(_metrics, reports=reports),
                    )
                )
    return cases


def _notes() -> list[str]:
    from shardkit.inspect import interconnect

    return [
        "Ratio: median over rounds of (candidate time / XLA jnp.dot time) in the same round.",
        "bytes_sent and peak_bytes: shardkit.comms of each compiled program (per device); "
        "bytes_vs_xla and peak_vs_xla divide by the baseline's.",
        f"auto: the algorithm matmul picks with the default cost model, "
        f"{interconnect(None).label}.",
        "Cannon needs a square mesh; on 8 devices none of the default meshes is square.",
    ]


def auto_summary(records: Sequence[Record], /) -> list[str]:
    """Per case, the measured-fastest algorithm against auto's pick and the built-in's.

    ``auto_pick`` is what ``algorithm="auto"`` chose under the default cost model (a
    calibrated preset when one is saved), ``builtin_pick`` under the built-in
    preset of the platform (``"cpu"`` on CPU devices); both are compared with the algorithm of least median
    ratio to XLA (least median time without one).
    """
    cases: dict[str, list[Record]] = {}
    for r in records:
        cases.setdefault(r.case, []).append(r)
    lines, hits = [], {"auto_pick": 0, "builtin_pick": 0}
    for name, recs in cases.items():
        algos = [r for r in recs if r.candidate in _ALGOS]
        if not algos:
            continue
        best = min(algos, key=lambda r: r.speed)
        params = best.params
        for key in hits:
            hits[key] += params.get(key) == best.candidate
        speeds = ", ".join(f"{r.candidate} {r.speed:.3g}" for r in algos)
        auto = next((r for r in recs if r.candidate == "auto"), None)
        auto_text = f"; auto ran at {auto.speed:.3g}" if auto is not None else ""
        lines.append(
            f"{name}: fastest {best.candidate} ({speeds}{auto_text}); auto picks "
            f"{params.get('auto_pick')}, the built-in {builtin_preset()} preset {params.get('builtin_pick')}."
        )
    if not lines:
        return []
    return [
        f"auto picked the measured-fastest algorithm in {hits['auto_pick']} of {len(lines)} "
        f"cases (the built-in {builtin_preset()} preset would in {hits['builtin_pick']}); figures "
        "are median time ratios to XLA.",
        *lines,
    ]


SUITE = Suite(
    name="matmul",
    description=(
        "shardkit.linalg.matmul algorithms (and auto) on n x n float32 matrices, "
        "per mesh and input layout, against jnp.dot on the same sharded inputs."
    ),
    baseline="xla: jnp.dot under jax.jit on the same sharded inputs (XLA's own strategy).",
    cases=_cases,
    columns=(
        Column("bytes_sent", "sent/dev", "B"),
        Column("bytes_vs_xla", "bytes/xla", "ratio"),
        Column("peak_bytes", "peak/dev", "B"),
        Column("peak_vs_xla", "peak/xla", "ratio"),
    ),
    plots=(PlotSpec("time", "n", "median_s", "series", "candidate", "median time (s)", "n"),),
    key_params=("mesh", "layout", "n"),
    notes=_notes,
    conclusions=auto_summary,
)
