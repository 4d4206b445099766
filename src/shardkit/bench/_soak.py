"""``shardkit bench soak``: bounded memory under long use (DESIGN, invariant 9).

A long-lived process (a notebook, a service, a parameter sweep) meets many meshes and
shapes; every layout compiles programs that shardkit keeps for the next call, in one
bounded cache (:func:`shardkit.set_program_cache_size`). The soak calls ``fftn``,
``solve``, ``qr`` and ``matmul`` over many distinct configurations (a mesh, its axis
types and a problem size each; sizes small, so compiling dominates) in a seeded random
order, checks every result against NumPy, and samples the process's resident memory
(RSS) and the cache's size as it goes. Targets: the cache never holds more than its
bound, and RSS grows by at most :data:`RSS_TARGET_MIB` from the first call to the last.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import gc
import json
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec
from rich.table import Table

from shardkit._programs import ProgramCacheInfo, clear_program_cache, program_cache_info
from shardkit._typing import JSONObject
from shardkit.fft import fftn
from shardkit.layout import mesh, shard
from shardkit.linalg import matmul, qr, solve

__all__ = ["OPS", "RSS_TARGET_MIB", "SoakResult", "soak"]

RSS_TARGET_MIB = 200.0
"""The most resident memory may grow over a soak (issue 33), in MiB."""

OPS = ("fftn", "solve", "qr", "matmul")
"""The functions a soak calls."""

_MIB = 1024.0 * 1024.0

# (mesh shape, axis names) on 2, 4 and 8 devices; each with Auto and Explicit axes.
_MESHES: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (
    ((8,), ("x",)),
    ((2, 4), ("x", "y")),
    ((4, 2), ("x", "y")),
    ((2, 2, 2), ("x", "y", "z")),
    ((4,), ("x",)),
    ((2, 2), ("x", "y")),
    ((2,), ("x",)),
)


@dataclasses.dataclass(frozen=True)
class Config:
    """One soak configuration: a mesh and the problem size ``k`` (rows per device row)."""

    shape: tuple[int, ...]
    names: tuple[str, ...]
    axis_types: str
    k: int

    @property
    def label(self) -> str:
        """E.g. ``2x4/explicit/k=3``."""
        return f"{'x'.join(map(str, self.shape))}/{self.axis_types}/k={self.k}"


def configs(count: int) -> list[Config]:
    """``count`` distinct configurations, every mesh and axis type before a size repeats."""
    out = []
    for i in range(count):
        shape, names = _MESHES[i % len(_MESHES)]
        types = "explicit" if (i // len(_MESHES)) % 2 else "auto"
        out.append(Config(shape, names, types, 2 + i // (2 * len(_MESHES))))
    return out


def rss_bytes() -> int:
    """This process's resident memory now (``/proc``), else its peak (``getrusage``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def trimmed_rss_bytes() -> int | None:
    """RSS once the C heap has returned its free pages to the OS (glibc only, else None).

    Compiling leaves freed memory in glibc's arenas, counted in RSS until reused: the
    difference from :func:`rss_bytes` is that, not memory anything holds.
    """
    name = ctypes.util.find_library("c")
    if name is None or not sys.platform.startswith("linux"):
        return None
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        return None
    return rss_bytes()


@dataclasses.dataclass(frozen=True)
class Sample:
    """The state after ``call`` calls: resident memory and the cache."""

    call: int
    rss_bytes: int
    cache: ProgramCacheInfo


@dataclasses.dataclass(frozen=True)
class SoakResult:
    """What a soak saw (``to_dict`` for JSON; renders as a table).

    Attributes:
      calls: calls made.
      configs: distinct configurations (mesh, axis types, size) they cycled over.
      seconds: wall time of the calls.
      wrong: calls whose result differed from NumPy's.
      largest_cache: the most programs the cache held after any call.
      samples: RSS and cache state, before the first call and every few calls after.
      trimmed_rss_bytes: RSS at the end once freed heap memory went back to the OS
        (``trimmed_rss_bytes``; None where that is not possible).
      cleared_rss_bytes: the same after shardkit's program cache and JAX's own caches
        (``jax.clear_caches``: its tracing caches, up to thousands of entries per
        function, and the executables of eager operations outside shardkit's, which
        the program cache's bound does not cover) were emptied.
    """

    calls: int
    configs: int
    seconds: float
    wrong: int
    largest_cache: int
    samples: tuple[Sample, ...]
    trimmed_rss_bytes: int | None = None
    cleared_rss_bytes: int | None = None

    @property
    def cache(self) -> ProgramCacheInfo:
        """The cache at the end."""
        return self.samples[-1].cache

    @property
    def rss_growth_mib(self) -> float:
        """RSS at the end minus RSS before the first call, in MiB."""
        return (self.samples[-1].rss_bytes - self.samples[0].rss_bytes) / _MIB

    @property
    def settled_growth_mib(self) -> float:
        """RSS growth over the second half of the calls, in MiB (after the cache filled)."""
        half = min(self.samples, key=lambda s: abs(s.call - self.calls // 2))
        return (self.samples[-1].rss_bytes - half.rss_bytes) / _MIB

    @property
    def bounded(self) -> bool:
        """Whether the cache stayed within its bound after every call."""
        return self.largest_cache <= self.cache.maxsize

    @property
    def passed(self) -> bool:
        """Bounded cache, RSS growth within the target, every result right."""
        return self.bounded and self.rss_growth_mib <= RSS_TARGET_MIB and self.wrong == 0

    def to_dict(self) -> JSONObject:
        """A JSON-ready summary with every sample."""
        return {
            "calls": self.calls,
            "configs": self.configs,
            "seconds": self.seconds,
            "wrong": self.wrong,
            "largest_cache": self.largest_cache,
            "cache": self.cache._asdict(),
            "rss_growth_mib": self.rss_growth_mib,
            "settled_growth_mib": self.settled_growth_mib,
            "rss_target_mib": RSS_TARGET_MIB,
            "trimmed_rss_bytes": self.trimmed_rss_bytes,
            "cleared_rss_bytes": self.cleared_rss_bytes,
            "passed": self.passed,
            "samples": [
                {"call": s.call, "rss_bytes": s.rss_bytes, **s.cache._asdict()}
                for s in self.samples
            ],
        }

    def write(self, out: Path) -> Path:
        """Write ``soak.json`` (:meth:`to_dict`) into the folder ``out`` (created); its path."""
        out.mkdir(parents=True, exist_ok=True)
        path = out / "soak.json"
        path.write_text(json.dumps(self.to_dict(), indent=2))
        return path

    def __rich__(self) -> Table:
        c = self.cache
        table = Table(title=f"soak: {self.calls} calls over {self.configs} configurations")
        table.add_column("measure")
        table.add_column("value", justify="right")
        rows = [
            ("wall time", f"{self.seconds:.1f} s"),
            ("wrong results", str(self.wrong)),
            ("RSS before / after", self._rss_pair()),
            ("RSS growth (target)", f"{self.rss_growth_mib:.1f} MiB (<= {RSS_TARGET_MIB:.0f})"),
            ("RSS growth, second half", f"{self.settled_growth_mib:.1f} MiB"),
            ("RSS at the end, free heap returned", self._mib(self.trimmed_rss_bytes)),
            ("the same, every cache emptied", self._mib(self.cleared_rss_bytes)),
            ("cache size / bound", f"{c.size} / {c.maxsize} (largest {self.largest_cache})"),
            ("hits / misses / evictions", f"{c.hits} / {c.misses} / {c.evictions}"),
            ("passed", "yes" if self.passed else "NO"),
        ]
        for row in rows:
            table.add_row(*row)
        return table

    @staticmethod
    def _mib(n: int | None) -> str:
        return "n/a" if n is None else f"{n / _MIB:.0f} MiB"

    def _rss_pair(self) -> str:
        first, last = self.samples[0].rss_bytes / _MIB, self.samples[-1].rss_bytes / _MIB
        return f"{first:.0f} / {last:.0f} MiB"


def _fftn_case(m: Any, cfg: Config, rng: np.random.Generator) -> tuple[Callable[[], Any], Any]:
    rows = m.size * cfg.k
    x = rng.standard_normal((rows, 6)) + 1j * rng.standard_normal((rows, 6))
    xs = shard(x.astype(np.complex64), mesh=m, spec=PartitionSpec(m.axis_names, None))
    return (lambda: fftn(xs)), np.fft.fftn(x)


def _solve_case(m: Any, cfg: Config, rng: np.random.Generator) -> tuple[Callable[[], Any], Any]:
    n = 4 * cfg.k + 3  # never divided by the mesh: the padded path too
    a = (rng.standard_normal((n, n)) + n * np.eye(n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    spec = m.axis_names[0] if len(m.axis_names) == 1 else ",".join(m.axis_names[:2])
    return (lambda: solve(a, b, nb=4, mesh=m, spec=spec)), np.linalg.solve(a, b)


def _qr_case(m: Any, cfg: Config, rng: np.random.Generator) -> tuple[Callable[[], Any], Any]:
    n = 2 + cfg.k
    a = rng.standard_normal((m.size * n, n)).astype(np.float32)
    placed = shard(a, mesh=m, spec=PartitionSpec(m.axis_names, None))

    def run() -> Any:
        q, r = qr(placed)
        return np.asarray(q) @ np.asarray(r)

    return run, a


def _matmul_case(m: Any, cfg: Config, rng: np.random.Generator) -> tuple[Callable[[], Any], Any]:
    rows, inner = m.size * cfg.k, 4 * cfg.k
    a = rng.standard_normal((rows, inner)).astype(np.float32)
    b = rng.standard_normal((inner, 5)).astype(np.float32)
    placed = shard(a, mesh=m, spec=PartitionSpec(m.axis_names, None))
    return (lambda: matmul(placed, b)), a @ b


_CASES = {"fftn": _fftn_case, "solve": _solve_case, "qr": _qr_case, "matmul": _matmul_case}


def _mesh(cfg: Config) -> Any:
    return mesh(cfg.shape, cfg.names, axis_types=cfg.axis_types)  # type: ignore[arg-type]


def soak(
    calls: int = 2000,
    *,
    configs_count: int = 50,
    ops: Sequence[str] = OPS,
    sample_every: int = 25,
    seed: int = 0,
    progress: Callable[[Sample], None] | None = None,
) -> SoakResult:
    """Call ``ops`` ``calls`` times over ``configs_count`` configurations; measure memory.

    The program cache is cleared first, so its counters are this soak's, and at the end,
    with JAX's own caches, to measure what they held; its bound is
    whatever is set (``$SHARDKIT_PROGRAM_CACHE_SIZE``, :func:`shardkit.set_program_cache_size`).
    Each call picks a configuration and an op at random (seeded) and is checked against
    NumPy. Needs as many devices as the largest mesh (8).

    Args:
      calls: calls to make.
      configs_count: distinct configurations (meshes of 2, 4 and 8 devices, Auto and
        Explicit axes, growing sizes).
      ops: which of ``OPS`` to call.
      sample_every: calls between two RSS samples.
      seed: the random order's and the data's seed.
      progress: called with each sample.

    Returns:
      The :class:`SoakResult`.

    Raises:
      ValueError: ``calls`` or ``configs_count`` below 1, or an unknown op.
    """
    if calls < 1 or configs_count < 1:
        raise ValueError(f"soak: calls={calls} and configs_count={configs_count} must be >= 1")
    unknown = [op for op in ops if op not in _CASES]
    if unknown or not ops:
        raise ValueError(f"soak: ops={list(ops)}; choose among {list(OPS)}")
    rng = np.random.default_rng(seed)
    grid = configs(configs_count)
    meshes = [_mesh(cfg) for cfg in grid]
    cases: dict[tuple[int, str], tuple[Callable[[], Any], Any]] = {}
    clear_program_cache()
    gc.collect()
    samples = [Sample(0, rss_bytes(), program_cache_info())]
    wrong = largest = 0
    start = time.perf_counter()
    for call in range(1, calls + 1):
        i, op = int(rng.integers(len(grid))), str(ops[int(rng.integers(len(ops)))])
        if (i, op) not in cases:
            cases[(i, op)] = _CASES[op](meshes[i], grid[i], np.random.default_rng(i))
        run, expected = cases[(i, op)]
        got = np.asarray(run())
        wrong += not np.allclose(got, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())
        largest = max(largest, program_cache_info().size)
        if call % sample_every == 0 or call == calls:
            gc.collect()
            samples.append(Sample(call, rss_bytes(), program_cache_info()))
            if progress is not None:
                progress(samples[-1])
    seconds = time.perf_counter() - start
    trimmed = trimmed_rss_bytes()
    clear_program_cache()
    jax.clear_caches()
    cases.clear()
    gc.collect()
    cleared = trimmed_rss_bytes()
    return SoakResult(calls, len(grid), seconds, wrong, largest, tuple(samples), trimmed, cleared)
