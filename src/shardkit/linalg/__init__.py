"""Sharded linear algebra: matrix products, factorizations and solvers that never gather.

Products by named algorithms or by cost model (:func:`matmul`); LU with pivoting
across whole columns (tournament or partial), Cholesky and triangular solves on a
block-cyclic layout (:func:`solve`, :func:`lu_factor`, :func:`cholesky`, ...); QR
(blocked Householder with TSQR panels, in the matrix's own layout) and least squares;
Krylov solvers on sharded vectors; batched solves without communication; the
spectral decompositions :func:`eigh`, :func:`svd` and :func:`polar` (QDWH and
spectral divide and conquer on the matrix split by rows, never gathered).

Inside ``jax.jit`` on Auto mesh axes the operands carry no spec while tracing; the
factorizations, solves, ``qr``/``lstsq`` and ``matmul`` then become
``custom_partitioning`` ops that run the same per-shard program as eagerly once XLA's
partitioner knows the layout (no ``mesh=``/``spec=`` needed). A replicated operand
takes the eager default layout (a free local slice); factors made there
(``lu_factor``, ``cho_factor``) are in natural order so that any layout reads them.
"""

from shardkit.linalg._batched import batched_solve
from shardkit.linalg._blockcyclic import (
    ORDER_NAMES,
    BlockCyclic,
    Order,
    from_block_cyclic,
    to_block_cyclic,
)
from shardkit.linalg._cholesky import CholeskyFactors, cho_factor, cho_solve, cholesky
from shardkit.linalg._iterative import IterativeInfo, bicgstab, cg, gmres
from shardkit.linalg._lu import LUFactors, det, inv, lu, lu_factor, lu_solve, slogdet, solve
from shardkit.linalg._matmul import ALGORITHM_NAMES, Algorithm, Candidate, Explanation, matmul
from shardkit.linalg._qr import lstsq, qr
from shardkit.linalg._spectral import SpectralError, eigh, eigvalsh, polar, svd, svdvals
from shardkit.linalg._status import (
    LinAlgStatusError,
    NotPositiveDefiniteError,
    RankDeficientError,
    SingularMatrixError,
)
from shardkit.linalg._triangular import solve_triangular

__all__ = [
    "ALGORITHM_NAMES",
    "ORDER_NAMES",
    "Algorithm",
    "BlockCyclic",
    "Candidate",
    "CholeskyFactors",
    "Explanation",
    "IterativeInfo",
    "LUFactors",
    "LinAlgStatusError",
    "NotPositiveDefiniteError",
    "Order",
    "RankDeficientError",
    "SingularMatrixError",
    "SpectralError",
    "batched_solve",
    "bicgstab",
    "cg",
    "cho_factor",
    "cho_solve",
    "cholesky",
    "det",
    "eigh",
    "eigvalsh",
    "from_block_cyclic",
    "gmres",
    "inv",
    "lstsq",
    "lu",
    "lu_factor",
    "lu_solve",
    "matmul",
    "polar",
    "qr",
    "slogdet",
    "solve",
    "solve_triangular",
    "svd",
    "svdvals",
    "to_block_cyclic",
]

# The errors are defined beside the status machinery in _status; tracebacks, reprs
# and the API reference name them where users import them from.
for _error in (
    LinAlgStatusError,
    NotPositiveDefiniteError,
    RankDeficientError,
    SingularMatrixError,
    SpectralError,
):
    _error.__module__ = __name__
del _error
