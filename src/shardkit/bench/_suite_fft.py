"""The ``fft`` suite: distributed 3-D complex64 FFTs, shardkit against the alternatives.

Each case is one (mesh, edge length ``n``) pair: an ``n^3`` complex64 volume split
as a slab (1-D mesh, ``P('x')``) or a pencil (2-D mesh, ``P('x', 'y')``). Timed side
by side, in interleaved rounds:

``jaxdecomp``
  The baseline when it imports: ``jaxdecomp.fft.pfft3d`` (its pure-JAX backend).
  It is in the ``bench`` extra; when it does not import the suite notes why and
  ``shardkit`` becomes the baseline. Note that ``pfft3d`` returns
  ``fftn(x).transpose(1, 2, 0)``: it skips the transpose back to the input's axis
  order that every other candidate performs.
``jaxdecomp+transpose``
  ``pfft3d(x).transpose(2, 0, 1)``: jaxdecomp computing the same array as ``shardkit``
  (the natural axis order), the like-for-like comparison for it.
``shardkit``
  :func:`shardkit.fft.fftn`, default layout (one ``all_to_all`` per split axis), on
  Explicit mesh axes (inside ``jit`` Explicit axes carry the spec, so the default
  layout's plan runs).
``shardkit-transposed``
  :func:`shardkit.fft.fftn` with ``out_layout="transposed"``: ``fftn(x).transpose(1,
  2, 0)``, ``pfft3d``'s own axis order, the like-for-like comparison for ``jaxdecomp``.
``shardkit-natural``
  :func:`shardkit.fft.fftn` with ``out_layout="natural"`` (the input's layout).
``shardkit-auto`` and ``shardkit-auto-transposed``
  :func:`shardkit.fft.fftn` inside ``jit`` on Auto axes (the ``custom_partitioning``
  rule), default and transposed layouts.
``floor-fft``, ``floor-a2a`` and ``floor-a2a-natural``
  The floor (:mod:`shardkit.bench._fft_floor`): the plan's local FFTs alone, and
  its ``all_to_all`` moves alone (default layout; natural layout), each a
  ``shard_map`` over the same per-device blocks, FFTs on contiguous axes and
  exchanges of contiguous pieces. ``vs floor`` is a candidate's time over
  ``floor-fft`` plus its layout's ``floor-a2a``; a transform cut into pieces (the
  planner's ``chunks``) can go below it, its pieces staying in cache between the
  exchange and the FFT where the floor's whole blocks do not.
``jnp-sharded``
  ``jnp.fft.fftn`` on the sharded volume: XLA all-gathers it. Timed in a case of
  its own (``<mesh>/<n>/gathered``, no baseline; its ``vs jaxdecomp`` uses the
  main case's time): in the same rounds its gather (288 MiB per device at 256^3)
  slowed whichever candidate ran next, jaxdecomp, by up to 1.7x.
``single-device``
  A case of its own (mesh ``1``): ``jnp.fft.fftn`` of the whole volume on device 0.

Every candidate gets the same volume on the same devices as a 2-D mesh split
``P('x', 'y')`` (a slab over ``n`` devices is an ``n x 1`` mesh, jaxdecomp's form
of a slab): one copy on Auto axes (jaxdecomp, ``jnp``, the floors, ``shardkit-auto*``), one on
Explicit axes (``shardkit``, ``shardkit-natural``).

``n`` (``--sizes``) is the edge length: 128 and 256 by default, 32 with ``--quick``.
Every record adds, from the compiled program (``shardkit.comms``), the bytes each
device sends and its peak memory, and the time relative to jaxdecomp.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from shardkit.bench._fft_floor import floor_fft, floor_moves
from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._timing import Case
from shardkit.layout import mesh as make_mesh
from shardkit.layout import parse_mesh_shape

__all__ = ["DEFAULT_SIZES", "QUICK_SIZES", "jaxdecomp_status"]

DEFAULT_SIZES = (128, 256)
"""Edge lengths of the full run."""

QUICK_SIZES = (32,)
"""Edge length of ``--quick``."""

BASELINE = "single-device"  # the one candidate of the single-device cases
_DTYPE = jnp.complex64


def jaxdecomp_status() -> tuple[Any, str]:
    """``(module, "")`` when jaxdecomp imports, else ``(None, reason)``."""
    try:
        jaxdecomp = importlib.import_module("jaxdecomp")
    except Exception as e:  # any import failure: missing, wrong JAX, missing backend
        return None, (
            f"jaxdecomp does not import ({type(e).__name__}: {e}); its baseline is left out "
            "(pip install 'shardkit[bench]' installs it)"
        )
    return jaxdecomp, ""


def _meshes(mesh_str: str) -> tuple[Mesh, Mesh, str]:
    """Auto and Explicit 2-D meshes on the same devices; ``n`` becomes ``n x 1``."""
    dims = parse_mesh_shape(mesh_str)
    if len(dims) > 2:
        raise ValueError(f"fft: meshes={mesh_str!r}: the fft suite takes 1-D or 2-D meshes")
    dims2 = (*dims, 1) if len(dims) == 1 else dims
    kind = "slab" if 1 in dims2 else "pencil"
    auto = make_mesh(dims2, ("x", "y"), axis_types="auto")
    return auto, make_mesh(dims2, ("x", "y"), axis_types="explicit"), kind


def _volume(shardings: tuple[jax.sharding.Sharding, ...], n: int) -> tuple[jax.Array, ...]:
    def make() -> jax.Array:
        k1, k2 = jax.random.split(jax.random.key(0))
        re = jax.random.normal(k1, (n, n, n), jnp.float32)
        return jax.lax.complex(re, jax.random.normal(k2, (n, n, n), jnp.float32))

    return tuple(jax.jit(make, out_shardings=sh)() for sh in shardings)


# name -> (function of one volume, index of the volume it takes: 0 Auto, 1 Explicit)
Candidates = dict[str, tuple[Callable[[jax.Array], jax.Array], int]]


def _candidates(jd: Any, auto: Mesh, n: int) -> Candidates:
    from shardkit import fft as skfft

    out: Candidates = {}
    if jd is not None:  # first, so that its time is known when the others' ratios are
        out["jaxdecomp"] = (jd.fft.pfft3d, 0)
        # pfft3d returns fftn(x).transpose(1, 2, 0); transposing back gives the same
        # array shardkit returns, so this is the like-for-like comparison.
        out["jaxdecomp+transpose"] = (lambda x: jd.fft.pfft3d(x).transpose(2, 0, 1), 0)
    # The floors next, so that every shardkit candidate's vs floor is known.
    default = skfft.plan("fftn", (n,) * 3, mesh=auto, spec=P("x", "y"))
    natural = skfft.plan("fftn", (n,) * 3, mesh=auto, spec=P("x", "y"), out_layout="natural")
    out["floor-fft"] = (floor_fft(default, auto), 0)
    out["floor-a2a"] = (floor_moves(default, auto), 0)
    out["floor-a2a-natural"] = (floor_moves(natural, auto), 0)
    out["shardkit"] = (skfft.fftn, 1)
    out["shardkit-transposed"] = (partial(skfft.fftn, out_layout="transposed"), 1)
    out["shardkit-natural"] = (partial(skfft.fftn, out_layout="natural"), 1)
    out["shardkit-auto"] = (skfft.fftn, 0)
    out["shardkit-auto-transposed"] = (partial(skfft.fftn, out_layout="transposed"), 0)
    return out


# Timed in a case of its own, after the others: in the same rounds the candidate after
# it ran up to 1.7x slower (measured on jaxdecomp at 256^3 after its 288 MiB-per-device
# gather), which skewed every ratio to that candidate.
_GATHERED: Candidates = {"jnp-sharded": (jnp.fft.fftn, 0)}


def _metrics(
    name: str,
    seconds: float,
    *,
    fns: Candidates,
    structs: tuple[jax.ShapeDtypeStruct, ...],
    state: dict[str, float],
) -> Mapping[str, float | None]:
    from shardkit.inspect import comms

    fn, index = fns[name]
    report = comms(fn, structs[index])
    if name in _EARLY:  # their metrics are taken before the others'
        state[name] = seconds
    ref, ref_t = state.get("jaxdecomp"), state.get("jaxdecomp+transpose")
    return {
        "vs_floor": _vs_floor(name, seconds, state),
        "bytes_sent": float(report.bytes_sent),
        "all_to_all": float(report.count("all-to-all")),
        "all_gather": float(report.count("all-gather")),
        "peak_bytes": float(report.memory.peak_bytes) if report.memory is not None else None,
        "vs_jaxdecomp": seconds / ref if ref else None,
        "vs_jaxdecomp_t": seconds / ref_t if ref_t else None,
    }


# The candidates other ratios divide by, first in their case.
_EARLY = ("jaxdecomp", "jaxdecomp+transpose", "floor-fft", "floor-a2a", "floor-a2a-natural")


def _vs_floor(name: str, seconds: float, state: dict[str, float]) -> float | None:
    """``seconds`` over the floor of candidate ``name``'s layout (shardkit only)."""
    if not name.startswith("shardkit"):
        return None
    moves = state.get("floor-a2a-natural" if name.endswith("natural") else "floor-a2a")
    ffts = state.get("floor-fft")
    return seconds / (ffts + moves) if ffts and moves else None


def _pick(fn: Callable[[jax.Array], jax.Array], index: int) -> Callable[..., jax.Array]:
    def call(*volumes: jax.Array) -> jax.Array:
        return fn(volumes[index])

    return call


def _case(
    label: str,
    kind: str,
    n: int,
    shardings: tuple[jax.sharding.Sharding, ...],
    fns: Candidates,
    *,
    state: dict[str, float],
    baseline: bool = True,
    suffix: str = "",
) -> Case:
    """One case: the first of ``fns`` is its baseline (with ``baseline``).

    ``state`` holds the jaxdecomp times the ``vs jaxdecomp`` ratios divide by; a case
    without a baseline shares it with an earlier case on the same volume.
    """
    devices = len(shardings[0].device_set)
    structs = tuple(jax.ShapeDtypeStruct((n,) * 3, _DTYPE, sharding=sh) for sh in shardings)
    names = list(fns)
    return Case(
        name=f"{label}/{n}{suffix}",
        params={
            "mesh": label,
            "n": n,
            "decomposition": kind,
            "bytes_per_device": n**3 * 8 // devices,
        },
        candidates={k: _pick(*fns[k]) for k in (names[1:] if baseline else names)},
        baseline=_pick(*fns[names[0]]) if baseline else None,
        baseline_name=names[0] if baseline else "baseline",
        make_args=partial(_volume, shardings, n),
        metrics=partial(_metrics, fns=fns, structs=structs, state=state),
    )


def _cases(config: SuiteConfig) -> list[Case]:
    sizes = config.pick_sizes(QUICK_SIZES, DEFAULT_SIZES)
    jd, _ = jaxdecomp_status()
    cases = []
    for n in sizes:
        # One device, whole volume: what every distributed candidate should beat.
        one = (SingleDeviceSharding(jax.devices()[0]),)
        cases.append(_case("1", "single-device", n, one, {BASELINE: (jnp.fft.fftn, 0)}, state={}))
    for mesh_str in config.meshes:
        auto, explicit, kind = _meshes(mesh_str)
        label = "x".join(map(str, parse_mesh_shape(mesh_str)))
        for n in sizes:
            if any(n % p for p in auto.shape.values()):
                raise ValueError(
                    f"fft: size n={n} is not divisible by mesh {label}; use a multiple of "
                    f"{math.lcm(*auto.shape.values())}"
                )
            shardings = (NamedSharding(auto, P("x", "y")), NamedSharding(explicit, P("x", "y")))
            state: dict[str, float] = {}
            fns = _candidates(jd, auto, n)
            cases.append(_case(label, kind, n, shardings, fns, state=state))
            cases.append(
                _case(
                    label,
                    kind,
                    n,
                    shardings,
                    _GATHERED,
                    state=state,
                    baseline=False,
                    suffix="/gathered",
                )
            )
    return cases


def _notes() -> list[str]:
    _, reason = jaxdecomp_status()
    notes = [
        "3-D complex64 volume n^3 split P('x','y') on a 2-D mesh (a slab over n devices "
        "is an n x 1 mesh); jaxdecomp, jnp, the floors and shardkit-auto(-transposed) read a "
        "copy on Auto axes, "
        "shardkit and shardkit-natural one on Explicit axes.",
        "bytes sent and peak memory per device come from each candidate's compiled "
        "program (shardkit.comms, compiled on its own input only).",
        "vs floor: median time / (floor-fft + floor-a2a) in the same case, the natural "
        "layout's moves for shardkit-natural: the local FFTs alone plus the all_to_alls "
        "alone on the same per-device blocks, whole.",
        "vs jaxdecomp: median time / jaxdecomp's median time in the same case; vs "
        "jaxdecomp+T: the same against jaxdecomp+transpose (pfft3d transposed back to "
        "the natural axis order).",
    ]
    if reason:
        notes.append(reason)
    return notes


SUITE = Suite(
    name="fft",
    description=(
        "3-D complex64 FFT of an n^3 volume: shardkit.fft.fftn (default, transposed and "
        "natural layouts) against jaxdecomp's pfft3d, jnp.fft.fftn on the sharded volume and "
        "jnp.fft.fftn on one device."
    ),
    baseline=(
        "jaxdecomp's pfft3d on the same input (shardkit's default layout when "
        "jaxdecomp does not import); the single-device case has no baseline."
    ),
    cases=_cases,
    columns=(
        Column("vs_floor", "vs floor", "ratio"),
        Column("vs_jaxdecomp", "vs jaxdecomp", "ratio"),
        Column("vs_jaxdecomp_t", "vs jaxdecomp+T", "ratio"),
        Column("all_to_all", "all-to-all", ""),
        Column("all_gather", "all-gather", ""),
        Column("bytes_sent", "sent/device", "B"),
        Column("peak_bytes", "peak/device", "B"),
    ),
    plots=(PlotSpec("time", "n", "median_s", "mesh", "candidate", "median time (s)", "n"),),
    key_params=("mesh", "n"),
    notes=_notes,
)
