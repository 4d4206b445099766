"""The parts of ``shardkit.linalg`` other shardkit packages share (not public API).

``shardkit.plan`` searches the layouts of a matmul chain with the matmul engine's own
pieces, so that a plan's predictions are the prices ``matmul(algorithm="auto")`` would
quote: the algorithm table (:data:`ALGORITHMS`) and :class:`MatmulProblem`, the variant
enumeration and pricing (:func:`enumerate_variants`, :func:`price`), the communication
model (:class:`Comm`, ``Spec``, :func:`spec_text`) and the ``shard_map`` builder
(:func:`build`). ``shardkit.bench``'s LU ablation times the factorization's own
pieces: its defaults and plan (:data:`DEFAULT_BLOCK`, :data:`DEFAULT_STAGES`,
:func:`make_plan`), the tiled trailing update (:func:`active_update`) and the grid
``solve`` moves a one-dimensional split to (:func:`grid_for`, :func:`to_grid`); its QR
ablation the tall QR kernel (:func:`householder_local`), its trailing-update products
(:func:`project`, :func:`active_update`) and the flat TSQR it replaced
(:func:`tsqr_local`). ``shardkit.train``'s pipeline and Newton-Schulz kernels (Muon) use the
per-shard helpers :func:`after` (a data dependency ordering two collectives),
:func:`axis_index` and :func:`dslice`. Like
``equinox.internal``, it may change without notice.
"""

from shardkit.linalg._blockcyclic import (
    DEFAULT_BLOCK,
    DEFAULT_STAGES,
    after,
    axis_index,
    dslice,
    make_plan,
)
from shardkit.linalg._grid import grid_for, to_grid
from shardkit.linalg._householder import householder_local, project
from shardkit.linalg._matmul import (
    ALGORITHMS,
    Comm,
    MatmulProblem,
    Spec,
    build,
    enumerate_variants,
    price,
    spec_text,
)
from shardkit.linalg._qr import _tsqr_local as tsqr_local
from shardkit.linalg._tiles import active_update
from shardkit.linalg._triangular import SPLIT_RHS

__all__ = [
    "ALGORITHMS",
    "DEFAULT_BLOCK",
    "DEFAULT_STAGES",
    "SPLIT_RHS",
    "Comm",
    "MatmulProblem",
    "Spec",
    "active_update",
    "after",
    "axis_index",
    "build",
    "dslice",
    "enumerate_variants",
    "grid_for",
    "householder_local",
    "make_plan",
    "price",
    "project",
    "spec_text",
    "to_grid",
    "tsqr_local",
]
