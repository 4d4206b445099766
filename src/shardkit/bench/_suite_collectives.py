"""The ``collectives`` suite: psum, all_gather, psum_scatter, all_to_all and ppermute.

Each case is one (mesh, mesh axis, bytes per device) triple. Every device holds a
``float32`` buffer of the given size (inside ``shard_map``); the collectives run
over one mesh axis (a group of ``n`` devices), interleaved with the baseline:

``local``
  The baseline: an elementwise pass (``2 * x``) over the same per-device buffer in the
  same ``shard_map``, with no communication. A collective's ratio is therefore "how
  many local passes over the data it costs": 1 would mean communication is free.

Bandwidths follow nccl-tests (NVIDIA/nccl-tests, ``doc/PERFORMANCE.md``, and the
``*GetBw`` functions of ``src/*.cu``): ``algbw = S / t`` and ``busbw = algbw * factor``
where ``S`` is the data size as nccl-tests counts it and the factor makes ``busbw``
comparable to the link's peak bandwidth for the ring algorithm:

==============  ===============  =========================================  ==========
shardkit        nccl-tests       ``S``                                      factor
==============  ===============  =========================================  ==========
psum            all_reduce       per-device buffer                          2(n-1)/n
all_gather      all_gather       gathered buffer = n x per-device input     (n-1)/n
psum_scatter    reduce_scatter   per-device input (the full buffer)         (n-1)/n
all_to_all      alltoall         per-device send buffer                     (n-1)/n
ppermute        sendrecv         per-device buffer sent                     1
==============  ===============  =========================================  ==========

``bytes_per_device`` is always the per-device *input*, so ``all_gather`` moves ``n``
times as much in total as the others at the same size, which is what ``S`` accounts for.

``all_gather`` and ``psum_scatter`` gather and split the buffer's leading dimension
(contiguous pieces); ``all_gather_inner`` and ``psum_scatter_inner`` do the same along
the inner dimension of the buffer viewed as a square-ish matrix, as a matmul gathers
a's columns or scatters an output's columns. Their pieces are strided, and on CPU
devices XLA transposes around the collective: at 16 MiB over 8 devices, a
reduce-scatter took 7 ms along the leading dimension and 35 ms along the inner one, an
all-gather 18 and 123 ms (``shardkit bench calibrate``).

Each record adds the predicted time of the collective under :mod:`shardkit.inspect`'s
default cost model (the preset ``shardkit bench calibrate`` saved for these devices if
there is one, else the platform's built-in preset, ``"cpu"`` on CPU devices) and the relative error
``(predicted - measured) / measured``; the notes end with the median of its absolute
value over every collective timed, overall and per collective.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit.bench._record import Record
from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._timing import Case
from shardkit.inspect.internal import builtin_preset

__all__ = [
    "COLLECTIVES",
    "DEFAULT_SIZES",
    "INNER",
    "NCCL_NAMES",
    "QUICK_SIZES",
    "bandwidths",
    "bus_factor",
    "nccl_bytes",
    "prediction_summary",
    "square_rows",
]

COLLECTIVES = (
    "psum",
    "all_gather",
    "psum_scatter",
    "all_to_all",
    "ppermute",
    "all_gather_inner",
    "psum_scatter_inner",
)
"""The collectives timed, by their ``jax.lax`` names (``_inner``: along an inner dimension)."""

INNER = {"all_gather_inner": "all_gather", "psum_scatter_inner": "psum_scatter"}
"""The inner-dimension variants and the collective each is."""

NCCL_NAMES = {
    "psum": "all_reduce",
    "all_gather": "all_gather",
    "psum_scatter": "reduce_scatter",
    "all_to_all": "alltoall",
    "ppermute": "sendrecv",
    "all_gather_inner": "all_gather",
    "psum_scatter_inner": "reduce_scatter",
}
"""The nccl-tests benchmark each collective corresponds to."""

_HLO_KINDS = {
    "psum": "all-reduce",
    "all_gather": "all-gather",
    "psum_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
    "ppermute": "collective-permute",
    "all_gather_inner": "all-gather",
    "psum_scatter_inner": "reduce-scatter",
}

DEFAULT_SIZES = tuple(1024 * 4**k for k in range(9))
"""1 KiB to 64 MiB per device, in powers of 4."""

QUICK_SIZES = (1024, 16 * 1024, 256 * 1024)
"""1 KiB, 16 KiB and 256 KiB per device, for ``--quick``."""

BASELINE = "local"
_ITEMSIZE = 4  # float32


def _check(collective: str) -> str:
    """The collective ``collective`` is (an inner variant's plain name); raises if unknown."""
    if collective not in NCCL_NAMES:
        raise ValueError(f"collective={collective!r}; legal values are {list(NCCL_NAMES)}")
    return INNER.get(collective, collective)


def nccl_bytes(collective: str, bytes_per_device: int, n: int, /) -> int:
    """The size ``S`` nccl-tests divides by the time to get ``algbw``.

    Args:
      collective: one of :data:`COLLECTIVES`.
      bytes_per_device: the per-device input buffer.
      n: devices in the group.

    Returns:
      ``n * bytes_per_device`` for ``all_gather`` (nccl-tests counts the gathered
      buffer), ``bytes_per_device`` otherwise.

    Raises:
      ValueError: unknown ``collective``.

    Example:
      >>> nccl_bytes("all_gather", 1024, 8), nccl_bytes("psum", 1024, 8)
      (8192, 1024)
    """
    return n * bytes_per_device if _check(collective) == "all_gather" else bytes_per_device


def bus_factor(collective: str, n: int, /) -> float:
    """nccl-tests' ``busbw / algbw`` factor for a group of ``n`` devices.

    ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and
    all-to-all, 1 for send/recv (nccl-tests ``doc/PERFORMANCE.md``).

    Raises:
      ValueError: unknown ``collective``.

    Example:
      >>> bus_factor("psum", 8), bus_factor("ppermute", 8)
      (1.75, 1.0)
    """
    collective = _check(collective)
    if collective == "ppermute":
        return 1.0
    frac = (n - 1) / n
    return 2 * frac if collective == "psum" else frac


def bandwidths(
    collective: str, bytes_per_device: int, n: int, seconds: float, /
) -> tuple[float, float]:
    """``(algbw, busbw)`` in bytes per second, defined as nccl-tests defines them.

    Example:
      >>> bandwidths("psum", 1000, 4, 1e-6)
      (1000000000.0, 1500000000.0)
    """
    algbw = nccl_bytes(collective, bytes_per_device, n) / seconds
    return algbw, algbw * bus_factor(collective, n)


def _predictor() -> tuple[str, Callable[..., float]]:
    """The label and ``time`` of ``shardkit.inspect``'s default cost model."""
    from shardkit.inspect import interconnect

    link = interconnect(None)
    return link.label, link.time


def square_rows(elems: int, /, *, gathered: int = 1, split: int = 1) -> int:
    """Rows of the square-ish matrix an inner-dimension collective views a buffer as.

    The largest power of two ``r`` dividing ``elems`` with ``r * r <= elems *
    gathered`` and ``elems / r`` divisible by ``split``: a gather of ``gathered``
    pieces of ``r x elems/r`` then makes a matrix as close to square as the size
    allows, and so does a scatter of ``r x elems/r`` into ``split`` pieces.

    Example:
      >>> square_rows(4096), square_rows(512, gathered=8), square_rows(96, split=4)
      (64, 64, 8)
    """
    best, r = 1, 1
    while elems % r == 0 and r * r <= elems * gathered:
        if (elems // r) % split == 0:
            best = r
        r *= 2
    return best


def _bodies(axis: str, n: int) -> dict[str, Callable[[jax.Array], jax.Array]]:
    """The collectives over ``axis`` (``n`` devices) on a per-device ``(1, elems)`` buffer.

    The leading-dimension ones work on the buffer as a vector; the ``_inner`` ones on
    it as a ``square_rows`` by ``elems / rows`` matrix, along its second dimension
    (for the all-gather, the rows of the gathered result's square).
    """
    ring = [(i, (i + 1) % n) for i in range(n)]

    def flat(f: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
        return lambda x: f(x.reshape(-1)).reshape(1, -1)

    def inner(f: Callable[[jax.Array], jax.Array], **shape: int) -> Callable[..., jax.Array]:
        return lambda x: f(x.reshape(square_rows(x.size, **shape), -1)).reshape(1, -1)

    return {
        "psum": lambda x: jax.lax.psum(x, axis),
        "all_gather": flat(lambda v: jax.lax.all_gather(v, axis, axis=0, tiled=True)),
        "psum_scatter": flat(
            lambda v: jax.lax.psum_scatter(v, axis, scatter_dimension=0, tiled=True)
        ),
        "all_to_all": lambda x: jax.lax.all_to_all(
            x, axis, split_axis=1, concat_axis=1, tiled=True
        ),
        "ppermute": lambda x: jax.lax.ppermute(x, axis, ring),
        "all_gather_inner": inner(
            lambda v: jax.lax.all_gather(v, axis, axis=1, tiled=True), gathered=n
        ),
        "psum_scatter_inner": inner(
            lambda v: jax.lax.psum_scatter(v, axis, scatter_dimension=1, tiled=True), split=n
        ),
    }


def _shard_mapped(
    body: Callable[[jax.Array], jax.Array], *, mesh: jax.sharding.Mesh, spec: P
) -> Callable[..., Any]:
    return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)


def _make_input(m: jax.sharding.Mesh, elems: int) -> jax.Array:
    # One row of `elems` per device, created in place (no host copy of large buffers).
    sharding = NamedSharding(m, P(m.axis_names, None))
    shape = (m.devices.size, elems)
    return jax.jit(partial(jnp.ones, shape, jnp.float32), out_shardings=sharding)()


def _metrics(
    name: str, seconds: float, *, bytes_per_device: int, n: int, predictor: Any
) -> Mapping[str, float | None]:
    if name == BASELINE:
        return {
            "algbw": bytes_per_device / seconds if seconds > 0 else None,
            "busbw": None,
            "predicted_s": None,
            "prediction_error": None,
            "builtin_error": None,
        }
    algbw, busbw = bandwidths(name, bytes_per_device, n, seconds) if seconds > 0 else (None, None)
    size = nccl_bytes(name, bytes_per_device, n)
    leading = name not in INNER
    predicted = float(predictor[1](_HLO_KINDS[name], n, size, leading=leading))
    builtin = _builtin().time(_HLO_KINDS[name], n, size, leading=leading)
    ok = seconds > 0
    return {
        "algbw": algbw,
        "busbw": busbw,
        "predicted_s": predicted,
        "prediction_error": (predicted - seconds) / seconds if ok else None,
        "builtin_error": (builtin - seconds) / seconds if ok else None,
    }


def _builtin() -> Any:
    from shardkit.inspect import INTERCONNECTS

    return INTERCONNECTS[builtin_preset()]


def _size_label(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def _cases(config: SuiteConfig) -> list[Case]:
    sizes = config.pick_sizes(QUICK_SIZES, DEFAULT_SIZES)
    predictor = _predictor()
    cases = []
    for label, m in config.mesh_grid(axis_types="explicit"):
        names = m.axis_names
        spec = P(names, None)
        for axis, n in m.shape.items():
            if n == 1:
                continue  # a group of one does not communicate
            bodies = _bodies(axis, n)
            for nbytes in sizes:
                elems = nbytes // _ITEMSIZE
                if nbytes % _ITEMSIZE or elems % n:
                    raise ValueError(
                        f"collectives: size={nbytes} B per device is not a whole number of "
                        f"float32 elements divisible by the group size n={n} of mesh "
                        f"{label} axis {axis!r}; use a multiple of {_ITEMSIZE * n} bytes"
                    )
                wrap = partial(_shard_mapped, mesh=m, spec=spec)
                cases.append(
                    Case(
                        name=f"{label}/{axis}/{_size_label(nbytes)}",
                        params={
                            "mesh": label,
                            "axis": axis,
                            "series": f"{label}/{axis}",
                            "group_size": n,
                            "bytes_per_device": nbytes,
                        },
                        candidates={c: wrap(bodies[c]) for c in COLLECTIVES},
                        baseline=wrap(lambda x: 2 * x),
                        baseline_name=BASELINE,
                        make_args=partial(lambda mm, e: (_make_input(mm, e),), m, elems),
                        metrics=partial(
                            _metrics, bytes_per_device=nbytes, n=n, predictor=predictor
                        ),
                    )
                )
    return cases


def _notes() -> list[str]:
    return [
        "algbw = S/t and busbw = algbw x factor as in nccl-tests doc/PERFORMANCE.md "
        "(S: gathered size for all_gather, per-device input otherwise; factor 2(n-1)/n "
        "psum, (n-1)/n all_gather/psum_scatter/all_to_all, 1 ppermute).",
        "Ratio: median over rounds of (collective time / local-pass time) in the same round.",
        f"Predictions: shardkit.inspect's default cost model, {_predictor()[0]}; "
        "error = (predicted - measured) / measured.",
    ]


def prediction_summary(records: Sequence[Record], /) -> list[str]:
    """The median of ``|predicted - measured| / measured``, overall and per collective.

    The built-in preset (``builtin_preset``)'s figure follows in brackets when the default
    model is another (a calibrated preset).

    Example:
      >>> from shardkit.bench import Record
      >>> recs = [Record("collectives", "8/x/1KiB", "psum", (1e-3,),
      ...                metrics={"prediction_error": e}) for e in (-0.5, 0.1, 0.2)]
      >>> prediction_summary(recs)[0]
      'Prediction error: median |predicted - measured| / measured = 20.0% over 3 timings.'
    """

    def medians(key: str) -> tuple[float | None, dict[str, float]]:
        errors: dict[str, list[float]] = {}
        for r in records:
            e = r.metric(key)
            if e is not None:
                errors.setdefault(r.candidate, []).append(abs(e))
        every = [e for v in errors.values() for e in v]
        if not every:
            return None, {}
        return statistics.median(every), {c: statistics.median(v) for c, v in errors.items()}

    overall, each = medians("prediction_error")
    if overall is None:
        return []
    count = sum(r.metric("prediction_error") is not None for r in records)
    base, base_each = medians("builtin_error")
    differs = base is not None and any(
        r.metric("builtin_error") != r.metric("prediction_error") for r in records if r.metrics
    )

    def pair(value: float, builtin: float | None) -> str:
        return f"{value:.1%}" + (
            f" ({builtin_preset()}: {builtin:.1%})" if differs and builtin else ""
        )

    return [
        "Prediction error: median |predicted - measured| / measured = "
        f"{pair(overall, base)} over {count} timings.",
        "Prediction error by collective (median): "
        + ", ".join(f"{c} {pair(v, base_each.get(c))}" for c, v in each.items())
        + ".",
    ]


SUITE = Suite(
    name="collectives",
    description=(
        "psum, all_gather, psum_scatter, all_to_all and ppermute (ring shift) in "
        "shard_map over each axis of each mesh, float32, sizes per device; all_gather "
        "and psum_scatter also along an inner dimension (_inner)."
    ),
    baseline=(
        "local: an elementwise pass (2*x) over the same per-device buffer in the same "
        "shard_map, no communication."
    ),
    cases=_cases,
    columns=(
        Column("algbw", "algbw", "B/s"),
        Column("busbw", "busbw", "B/s"),
        Column("predicted_s", "predicted", "s"),
        Column("prediction_error", "pred. error", "%"),
    ),
    plots=(
        PlotSpec(
            "time",
            "bytes_per_device",
            "median_s",
            "candidate",
            "series",
            "median time (s)",
            "bytes per device",
        ),
        PlotSpec(
            "busbw",
            "bytes_per_device",
            "busbw",
            "candidate",
            "series",
            "bus bandwidth (B/s)",
            "bytes per device",
        ),
    ),
    key_params=("mesh", "axis", "bytes_per_device"),
    notes=_notes,
    conclusions=prediction_summary,
)
