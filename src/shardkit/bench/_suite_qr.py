"""The ``qr`` suite: orthogonal factorizations, least squares and triangular solves.

The cases of issue 34's first two items, each one (mesh, n, op) on float32 data, with
the candidates and metrics of the ``linalg`` suite (:mod:`shardkit.bench._suite_linalg`,
whose functions it shares):

``qr``
  square ``n x n`` (blocked Householder), ``P(x, None)`` on a 1-D mesh, ``P(x, y)`` on 2-D.
``qr-tall``
  ``4n x n/4`` (16384 x 1024 at the default n=4096), rows split ``P(x, None)``:
  Householder QR with TSQR panels; dask's TSQR beside it.
``lstsq``
  the same tall matrix and one right-hand side, against ``scipy.linalg.lstsq``
  (``gelsd``) and ``dask.array.linalg.lstsq``.
``qr-parts``
  the ablation of ``qr-tall`` (:mod:`shardkit.bench._qr_ablation`).
``trsm-1``, ``trsm-64``, ``trsm-1024``
  upper triangular ``n x n`` with 1, 64, 1024 right-hand sides; shardkit and SciPy
  with ``check_finite=False``, ``shardkit checked`` with the default check.
``trsm-parts-1``, ``trsm-parts-64``, ``trsm-parts-1024``
  the ablations of those solves (:mod:`shardkit.bench._trsm_ablation`).

``--sizes`` gives ``n`` (default 4096; ``--quick``: 256).
"""

from __future__ import annotations

from shardkit.bench._suite import Column, PlotSpec, Suite, SuiteConfig
from shardkit.bench._suite_linalg import TRSM_PARTS, TRSM_RHS, cases_for
from shardkit.bench._timing import Case

__all__ = ["DEFAULT_SIZES", "OPS", "QUICK_SIZES"]

DEFAULT_SIZES = (4096,)
"""``n`` of a full run."""

QUICK_SIZES = (256,)
"""``n`` of a ``--quick`` run."""

OPS = ("qr", "qr-tall", "lstsq", "qr-parts", *TRSM_RHS, *TRSM_PARTS)
"""The operations timed (see the module docstring)."""


def _cases(config: SuiteConfig) -> list[Case]:
    return cases_for(config, OPS, config.pick_sizes(QUICK_SIZES, DEFAULT_SIZES))


def _notes() -> list[str]:
    return [
        "Ratio: median over rounds of (candidate wall time / jnp on the sharded input).",
        "cpu_s: time.process_time of a call, median of 3 extra calls (all threads of this "
        "process; BLAS and XLA pinned to one thread per simulated device).",
        "qr-tall and lstsq: 4n x n/4, rows split; lstsq has one right-hand side and "
        "resid is ||A^T (Ax-b)|| / (||A|| ||Ax-b||).",
        "qr-parts (ablation of qr-tall): 'shardkit r only' the kernel without forming q; "
        "'shardkit 1 device' the kernel on one device; 'flat TSQR' the algorithm it "
        "replaced; 'panels only' the panels' local QRs; 'updates only' the tiled level-3 "
        "products; 'collectives only' the kernel's collectives, chained; 'SVD of r' "
        "lstsq's rank decision on one device; 'scipy r only' LAPACK geqrf alone.",
        "trsm-k: upper triangular n x n with k right-hand sides; shardkit and scipy with "
        "check_finite=False, 'shardkit checked' with the default check.",
        "trsm-parts-k (ablation of trsm-k): 'shardkit 1 device' the same algorithm on one "
        "device (the local work alone); 'collectives only' the sweep's collectives alone, "
        "chained (the diagonal blocks' all-reduce, one nb x k all-reduce per block step, "
        "from 256 right-hand sides on one all-gather more).",
        "scipy and dask run through jax.pure_callback on the one-device copy.",
    ]


SUITE = Suite(
    name="qr",
    description=(
        "shardkit.linalg qr (square and tall), lstsq (tall) and solve_triangular "
        "(float32) against jnp on the same sharded input, one device, SciPy and dask.array; "
        "with an ablation of the tall QR."
    ),
    baseline="jnp: jnp.linalg / jax.scipy.linalg under jax.jit on the same sharded input.",
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
