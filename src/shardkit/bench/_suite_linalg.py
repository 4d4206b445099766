"""The ``linalg`` suite: shardkit's distributed solve / cholesky / qr against the rest.

Each case is one (mesh, n, op) on float32 data placed on an Auto-axes mesh:

``jnp`` (baseline)
  ``jnp.linalg.*`` under ``jax.jit`` on the same sharded input (XLA gathers the
  matrix to every device and every device factors it).
``shardkit``
  :func:`shardkit.linalg.solve` / :func:`~shardkit.linalg.cholesky` /
  :func:`~shardkit.linalg.qr` (``qr``: square, blocked Householder; ``tsqr``:
  tall-skinny ``n x n/16``, TSQR). For ``solve`` also ``shardkit partial``
  (``pivoting="partial"``; the default is tournament pivoting) and ``shardkit
  lookahead`` (``lookahead=True``).
``1 device``
  ``jnp.linalg.*`` on one device's copy.
``scipy``
  SciPy (LAPACK) through ``jax.pure_callback`` on the one-device copy.
``dask``
  ``dask.array.linalg`` (threaded scheduler, square ``n/4`` chunks; ``tsqr``: row
  chunks; none for square ``qr``, which dask only does as TSQR) through
  ``jax.pure_callback``, when ``dask[array]`` is installed.

The ``solve-parts`` case is an ablation of ``solve`` (see
:mod:`shardkit.bench._lu_ablation`): the same algorithm on one device, the mesh's
collectives alone, the update's tiled matmuls against one BLAS call, with SciPy and
dask alongside.

Metrics per candidate: ``cpu_s`` (process CPU seconds of a call, all threads, the median
of :data:`CPU_CALLS` calls: the simulated devices share the machine's cores, BLAS and
XLA pinned to one thread each; one call's figure moved by 10-15% between runs),
``resid`` (solve: ``||Ax-b|| / (||A|| ||x|| + ||b||)``; cholesky: ``||A - L L^T|| / ||A||``;
qr: ``||A - Q R|| / ||A||``, Frobenius norms), and for the JAX programs the bytes one
device sends and the per-device peak memory over the device's share of ``A``
(``mem/share``), from :func:`shardkit.inspect.comms`.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from shardkit.bench._lu_ablation import NOT_SOLUTIONS, ablation_candidates
from shardkit.bench._qr_ablation import PARTS_NOT_SOLUTIONS, qr_ablation_candidates
from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._timing import Case
from shardkit.bench._trsm_ablation import TRSM_NOT_SOLUTIONS, trsm_ablation_candidates
from shardkit.inspect import comms
from shardkit.linalg import cholesky, lstsq, qr, solve, solve_triangular

__all__ = ["DEFAULT_SIZES", "OPS", "QUICK_SIZES", "cases_for"]

DEFAULT_SIZES = (2048, 4096)
"""Matrix orders ``n`` of a full run."""

QUICK_SIZES = (256,)
"""The size of a ``--quick`` run."""

OPS = ("solve", "cholesky", "qr", "tsqr", "solve-parts")
"""The operations timed: ``qr`` is square (blocked Householder), ``tsqr`` is ``n x n/16``;
``solve-parts`` is the ablation of ``solve``."""

BASELINE = "jnp"

HOST_CANDIDATES = frozenset({"scipy", "dask", "BLAS gemm", "scipy r only"})
"""Candidates that run on the host (through a callback): no comms report."""

CPU_CALLS = 3
"""Calls whose process CPU time is measured per candidate (the median is reported)."""


def _have_dask() -> bool:
    try:
        import dask.array  # noqa: F401
    except ImportError:
        return False
    return True


TRSM_RHS = {"trsm-1": 1, "trsm-64": 64, "trsm-1024": 1024}
"""The ``qr`` suite's triangular solves and their numbers of right-hand sides."""

TRSM_PARTS = {f"trsm-parts-{k}": k for k in TRSM_RHS.values()}
"""The ablations of those solves (:mod:`shardkit.bench._trsm_ablation`)."""


def _kind(op: str) -> str:
    """The operation whose data, reference and check ``op`` uses (the ablations: their op's)."""
    if op in TRSM_RHS or op in TRSM_PARTS:
        return "trsm"
    return {"solve-parts": "solve", "qr-parts": "qr-tall"}.get(op, op)


def _tall(n: int) -> tuple[int, int]:
    """The ``qr`` suite's tall shape for size ``n``: ``4n x n/4`` (16384 x 1024 at 4096)."""
    return 4 * n, max(8, n // 4)


def _data(op: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    rhs = (TRSM_RHS | TRSM_PARTS).get(op, 1)
    op = _kind(op)
    rng = np.random.default_rng(0)
    if op in ("qr-tall", "lstsq"):
        a = rng.standard_normal(_tall(n)).astype(np.float32)
        return a, rng.standard_normal(a.shape[0]).astype(np.float32)
    if op == "trsm":
        a = np.triu(rng.standard_normal((n, n)) / np.sqrt(n) + 2 * np.eye(n)).astype(np.float32)
        return a, rng.standard_normal((n, rhs)).astype(np.float32)
    if op == "tsqr":
        return rng.standard_normal((n, max(8, n // 16))).astype(np.float32), np.zeros(1, np.float32)
    if op == "qr":
        return rng.standard_normal((n, n)).astype(np.float32), np.zeros(1, np.float32)
    a = rng.standard_normal((n, n)).astype(np.float32)
    if op == "cholesky":
        a = (a @ a.T / n + np.eye(n, dtype=np.float32)).astype(np.float32)
    return a, rng.standard_normal(n).astype(np.float32)


def _spec(op: str, names: tuple[str, ...]) -> P:
    if op in ("tsqr", "qr-tall", "qr-parts", "lstsq") or len(names) == 1:
        return P(names[0], None)
    return P(names[0], names[1])


def _scipy(op: str, a: np.ndarray, b: np.ndarray) -> Any:
    op = _kind(op)
    if op == "solve":
        return sl.solve(a, b, check_finite=False)
    if op == "cholesky":
        return sl.cholesky(a, lower=True, check_finite=False)
    if op == "lstsq":
        solution: Any = sl.lstsq(a, b, check_finite=False)
        return solution[0]
    if op == "trsm":
        return sl.solve_triangular(a, b, check_finite=False)
    return sl.qr(a, mode="economic", check_finite=False)


def _dask(op: str, a: np.ndarray, b: np.ndarray) -> Any:
    # Typed loosely: dask's stubs do not describe its lazy submodules.
    dask: Any = importlib.import_module("dask")
    da: Any = importlib.import_module("dask.array")
    op = _kind(op)

    with dask.config.set(scheduler="threads"):
        if op == "lstsq":
            da_a = da.from_array(a, chunks=(a.shape[0] // 8, a.shape[1]))
            da_b = da.from_array(b[:, None], chunks=(a.shape[0] // 8, 1))
            return np.asarray(da.linalg.lstsq(da_a, da_b)[0].compute())[:, 0]
        if op in ("tsqr", "qr-tall"):
            q, r = da.linalg.qr(da.from_array(a, chunks=(a.shape[0] // 8, a.shape[1])))
            return tuple(np.asarray(v) for v in dask.compute(q, r))
        ch = a.shape[0] // 4
        da_a = da.from_array(a, chunks=(ch, ch))
        if op == "solve":
            return np.asarray(da.linalg.solve(da_a, da.from_array(b, chunks=ch)).compute())
        if op == "trsm":
            da_b = da.from_array(b, chunks=(ch, b.shape[1]))
            return np.asarray(da.linalg.solve_triangular(da_a, da_b).compute())
        return np.asarray(da.linalg.cholesky(da_a, lower=True).compute())


def _host(fn: Callable[..., Any], op: str, a: jax.Array, b: jax.Array) -> Any:
    op = _kind(op)
    n, k = a.shape
    if op in ("qr", "tsqr", "qr-tall"):
        out = (jax.ShapeDtypeStruct((n, k), a.dtype), jax.ShapeDtypeStruct((k, k), a.dtype))
    elif op == "solve":
        out = jax.ShapeDtypeStruct((n,), a.dtype)
    elif op == "lstsq":
        out = jax.ShapeDtypeStruct((k,), a.dtype)
    elif op == "trsm":
        out = jax.ShapeDtypeStruct(b.shape, a.dtype)
    else:
        out = jax.ShapeDtypeStruct((n, n), a.dtype)

    def call(a_: Any, b_: Any) -> Any:
        res = fn(op, np.asarray(a_), np.asarray(b_))
        return (
            tuple(np.asarray(r, a.dtype) for r in res)
            if op in ("qr", "tsqr", "qr-tall")
            else np.asarray(res, a.dtype)
        )

    return jax.pure_callback(call, out, a, b)


def _residual(op: str, a: np.ndarray, b: np.ndarray, out: Any) -> float:
    op = _kind(op)
    a64 = a.astype(np.float64)
    if op == "solve":
        x = np.asarray(out, np.float64)
        return float(
            np.linalg.norm(a64 @ x - b)
            / (np.linalg.norm(a64, 2) * np.linalg.norm(x) + np.linalg.norm(b))
        )
    if op == "cholesky":
        low = np.asarray(out, np.float64)
        return float(np.linalg.norm(a64 - low @ low.T) / np.linalg.norm(a64))
    if op == "lstsq":  # the normal equations' residual, relative: 0 at the minimizer
        x = np.asarray(out[0] if isinstance(out, tuple) else out, np.float64)
        res = a64 @ x - b
        return float(
            np.linalg.norm(a64.T @ res) / (np.linalg.norm(a64) * max(np.linalg.norm(res), 1e-300))
        )
    if op == "trsm":
        x = np.asarray(out, np.float64)
        return float(
            np.linalg.norm(a64 @ x - b)
            / (np.linalg.norm(a64) * np.linalg.norm(x) + np.linalg.norm(b))
        )
    q, r = (np.asarray(v, np.float64) for v in out)
    return float(np.linalg.norm(a64 - q @ r) / np.linalg.norm(a64))


_JNP: dict[str, Callable[..., Any]] = {
    "solve": lambda a, b: jnp.linalg.solve(a, b),
    "cholesky": lambda a, b: jnp.linalg.cholesky(a),
    "qr": lambda a, b: tuple(jnp.linalg.qr(a)),
    "tsqr": lambda a, b: tuple(jnp.linalg.qr(a)),
    "solve-parts": lambda a, b: jnp.linalg.solve(a, b),
    "qr-tall": lambda a, b: tuple(jnp.linalg.qr(a)),
    "qr-parts": lambda a, b: tuple(jnp.linalg.qr(a)),
    "lstsq": lambda a, b: jnp.linalg.lstsq(a, b)[0],
    **{
        op: (lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=False))
        for op in TRSM_RHS | TRSM_PARTS
    },
}
"""``jnp.linalg`` for each op: the baseline (sharded input) and ``1 device``."""


def _candidates(op: str, m: Any, spec: P, n: int) -> dict[str, Callable[..., Any]]:
    if op == "solve-parts":
        out = ablation_candidates(m, spec, n)
        out["scipy"] = lambda a, b, a1, b1: _host(_scipy, op, a1, b1)
        if _have_dask():
            out["dask"] = lambda a, b, a1, b1: _host(_dask, op, a1, b1)
        return out
    if op == "qr-parts":
        out = qr_ablation_candidates(m, spec, _tall(n)[1])
        out["scipy"] = lambda a, b, a1, b1: _host(_scipy, op, a1, b1)
        return out
    if op in TRSM_PARTS:
        out = trsm_ablation_candidates(m, spec, n, TRSM_PARTS[op])
        out["scipy"] = lambda a, b, a1, b1: _host(_scipy, op, a1, b1)
        return out
    jnp_op = _JNP[op]
    trsm = partial(solve_triangular, lower=False, mesh=m, spec=spec)
    ours: Callable[..., Any] = {
        "solve": lambda a, b: solve(a, b, mesh=m, spec=spec),
        "cholesky": lambda a, b: cholesky(a, mesh=m, spec=spec),
        "qr": lambda a, b: qr(a, mesh=m, spec=spec),
        "tsqr": lambda a, b: qr(a, mesh=m, spec=spec),
        "qr-tall": lambda a, b: qr(a, mesh=m, spec=spec),
        "lstsq": lambda a, b: lstsq(a, b, mesh=m, spec=spec)[0],
        # Like SciPy's call (check_finite=False): the check is timed apart.
        **{t: (lambda a, b: trsm(a, b, check_finite=False)) for t in TRSM_RHS},
    }[op]
    out: dict[str, Callable[..., Any]] = {
        "shardkit": lambda a, b, a1, b1: ours(a, b),
    }
    if op in TRSM_RHS:
        out["shardkit checked"] = lambda a, b, a1, b1: trsm(a, b)
    if op == "solve":
        out["shardkit partial"] = lambda a, b, a1, b1: solve(
            a, b, mesh=m, spec=spec, pivoting="partial"
        )
        out["shardkit lookahead"] = lambda a, b, a1, b1: solve(
            a, b, mesh=m, spec=spec, lookahead=True
        )
    out |= {
        "1 device": lambda a, b, a1, b1: jnp_op(a1, b1),
        "scipy": lambda a, b, a1, b1: _host(_scipy, op, a1, b1),
    }
    if _have_dask() and op != "qr":
        out["dask"] = lambda a, b, a1, b1: _host(_dask, op, a1, b1)
    return out


def _make_args(op: str, n: int, m: Any, spec: P) -> tuple[jax.Array, ...]:
    a, b = _data(op, n)
    one = SingleDeviceSharding(jax.devices()[0])
    return (
        jax.device_put(a, NamedSharding(m, spec)),
        jax.device_put(b, NamedSharding(m, P())),
        jax.device_put(a, one),
        jax.device_put(b, one),
    )


class _Measure:
    """CPU seconds, residual and comms of each function, measured once per case."""

    def __init__(self, op: str, n: int, m: Any, spec: P, fns: Mapping[str, Callable[..., Any]]):
        self.op, self.n, self.m, self.spec, self.fns = op, n, m, spec, fns
        self.cache: dict[str, dict[str, float | None]] = {}

    def __call__(self, name: str, seconds: float) -> Mapping[str, float | None]:
        del seconds
        if name not in self.cache:
            self.cache[name] = self._measure(name)
        return self.cache[name]

    def _measure(self, name: str) -> dict[str, float | None]:
        args = _make_args(self.op, self.n, self.m, self.spec)
        fn = jax.jit(self.fns[name])
        out = jax.block_until_ready(fn(*args))  # compile and warm up
        spent = []
        for _ in range(CPU_CALLS):
            c0 = time.process_time()
            jax.block_until_ready(fn(*args))
            spent.append(time.process_time() - c0)
        cpu = statistics.median(spent)
        a, b = _data(self.op, self.n)
        res = (
            None
            if name in NOT_SOLUTIONS | PARTS_NOT_SOLUTIONS | TRSM_NOT_SOLUTIONS
            else _residual(self.op, a, b, jax.device_get(out))
        )
        metrics: dict[str, float | None] = {"cpu_s": cpu, "resid": res}
        share = a.nbytes / self.m.size
        if name in HOST_CANDIDATES:
            metrics.update(bytes_sent=None, peak_bytes=None, mem_ratio=None)
            return metrics
        structs = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding) for x in args)
        try:
            report = comms(self.fns[name], *structs)
        except ValueError:
            # shardkit.inspect cannot parse some replica-group forms XLA emits for
            # jnp.linalg on 2-D meshes; leave the figures empty rather than abort.
            metrics.update(bytes_sent=None, peak_bytes=None, mem_ratio=None)
            return metrics
        peak = report.memory.peak_bytes if report.memory else None
        metrics.update(
            bytes_sent=float(report.bytes_sent),
            peak_bytes=float(peak) if peak is not None else None,
            mem_ratio=peak / share if peak is not None else None,
        )
        return metrics


def _cases(config: SuiteConfig) -> list[Case]:
    return cases_for(config, OPS, config.pick_sizes(QUICK_SIZES, DEFAULT_SIZES))


def cases_for(config: SuiteConfig, ops: tuple[str, ...], sizes: tuple[int, ...]) -> list[Case]:
    """The cases of ``ops`` at ``sizes`` on the configured meshes (this suite's and ``qr``'s)."""
    cases = []
    for label, m in config.mesh_grid():
        names = m.axis_names
        for n in sizes:
            for op in ops:
                spec = _spec(op, names)
                cands = _candidates(op, m, spec, n)
                jnp_fn = partial(lambda op, a, b, a1, b1: _JNP[op](a, b), op)
                measure = _Measure(op, n, m, spec, {BASELINE: jnp_fn, **cands})
                cases.append(
                    Case(
                        name=f"{label}/{op}/{n}",
                        params={"mesh": label, "op": op, "n": n, "series": f"{label}/{op}"},
                        candidates=cands,
                        baseline=jnp_fn,
                        baseline_name=BASELINE,
                        make_args=partial(_make_args, op, n, m, spec),
                        metrics=measure,
                    )
                )
    return cases


def _notes() -> list[str]:
    return [
        "Ratio: median over rounds of (candidate wall time / jnp.linalg on the sharded input).",
        f"cpu_s: time.process_time of a call, median of {CPU_CALLS} extra calls (all threads of "
        "this process; BLAS and XLA are pinned to one thread per simulated device).",
        "resid: solve ||Ax-b||/(||A|| ||x||+||b||); cholesky ||A-LL^T||/||A||; qr ||A-QR||/||A||.",
        "mem/share: per-device peak memory (shardkit.comms) over the device's share of A.",
        "shardkit solve: tournament pivoting (CALU, the default); 'shardkit partial': "
        "LAPACK's partial pivoting (one small all-gather per column); 'shardkit lookahead': "
        "the next panel pivoted before the bulk of each update (for devices with their own "
        "links; simulated CPU devices have nothing to overlap).",
        "qr: square n x n, blocked Householder with TSQR panels (LAPACK's flops); "
        "no dask (its QR needs chunks at least as tall as wide). tsqr: n x n/16, rows sharded.",
        "scipy and dask run through jax.pure_callback on the one-device copy.",
        "solve-parts (ablation of solve): 'shardkit 1 device' is the same algorithm on a "
        "one-device mesh; 'collectives only' the mesh's LU collectives alone, chained; "
        "'XLA tiles' the update's 2n^3/3 flops as its tiled matmuls on one device; "
        "'BLAS gemm' the same flops as one host BLAS call.",
    ] + (
        []
        if _have_dask()
        else ["dask is not installed: its baseline is left out (pip install 'shardkit[bench]')."]
    )


SUITE = Suite(
    name="linalg",
    description=(
        "shardkit.linalg solve / cholesky / qr (float32) against jnp.linalg on the same "
        "sharded input, one device, SciPy and dask.array."
    ),
    baseline="jnp: jnp.linalg under jax.jit on the same sharded input.",
    cases=_cases,
    columns=(
        Column("cpu_s", "cpu", "s"),
        Column("resid", "resid"),
        Column("bytes_sent", "sent/dev", "B"),
        Column("peak_bytes", "peak/dev", "B"),
        Column("mem_ratio", "mem/share", "ratio"),
    ),
    plots=(PlotSpec("time", "n", "median_s", "series", "candidate", "median time (s)", "n"),),
    key_params=("mesh", "op", "n"),
    notes=_notes,
)
