"""Numerical failure of the factorizations: errors raised eagerly, statuses under ``jit``.

Every factorization computes an ``int32`` status: ``0`` on success, else ``j + 1`` for
the first column ``j`` (natural, 0-based numbering of ``a``'s columns) where it failed.
Called eagerly, a nonzero status raises one of the errors below; traced inside
``jax.jit`` the status cannot be read, so the functions either return it
(``return_status=True``) or fill their result with NaN (never a silent inf).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from shardkit.layout.internal import is_traced

__all__ = [
    "LinAlgStatusError",
    "NotPositiveDefiniteError",
    "RankDeficientError",
    "SingularMatrixError",
    "finish",
    "is_traced",
]


class LinAlgStatusError(np.linalg.LinAlgError):
    """A sharded factorization failed at ``column`` (a ``numpy.linalg.LinAlgError``).

    Subclassing NumPy's error lets ``except np.linalg.LinAlgError`` catch it, as it
    catches ``np.linalg.solve``'s own failures.

    Attributes:
      column: the first column (0-based) where the factorization failed.
      where: the function that failed.
    """

    def __init__(self, where: str, column: int, message: str) -> None:
        super().__init__(message)
        self.column = column
        self.where = where

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from the constructor's arguments (pickling, e.g. across processes)
        return type(self), (self.where, self.column, str(self))


class SingularMatrixError(LinAlgStatusError):
    """LU met a pivot of magnitude at most ``n * eps * max|a|``: ``a`` is (numerically) singular."""


class NotPositiveDefiniteError(LinAlgStatusError):
    """Cholesky met a non-positive (or NaN) pivot: ``a`` is not positive definite."""


class RankDeficientError(SingularMatrixError):
    """Block Gram-Schmidt QR met a numerically zero ``|r_jj|``: ``a``'s columns are (nearly) dependent."""


def _raise(where: str, status: int, kind: str, shape: tuple[int, ...], dtype: Any) -> None:
    col = status - 1
    if kind == "singular":
        raise SingularMatrixError(
            where,
            col,
            f"{where}: the matrix (shape={shape}, dtype={np.dtype(dtype).name}) is singular "
            f"to working precision: no pivot in column {col} is larger than "
            "n * eps * max|a|. Check the input for dependent rows or columns; under "
            "jax.jit pass return_status=True to receive this status instead.",
        )
    if kind == "rank_deficient":
        raise RankDeficientError(
            where,
            col,
            f"{where}: a (shape={shape}, dtype={np.dtype(dtype).name}) is numerically "
            f"rank deficient: |r_jj| of column {col} is at most n * eps * max|r_jj| (or "
            "NaN), so block Gram-Schmidt cannot make q orthonormal. Check a for dependent "
            "columns, or use the layout P(rows, None) with M / R >= n (Householder TSQR "
            "copes with rank deficiency); under jax.jit pass return_status=True to "
            "receive this status instead.",
        )
    raise NotPositiveDefiniteError(
        where,
        col,
        f"{where}: the matrix (shape={shape}, dtype={np.dtype(dtype).name}) is not positive "
        f"definite: the pivot of column {col} is not positive. Use lu/solve for indefinite "
        "matrices; under jax.jit pass return_status=True to receive this status instead.",
    )


def finish(
    where: str,
    result: Any,
    status: jax.Array,
    *,
    kind: str,
    shape: tuple[int, ...],
    dtype: Any,
    traced: bool,
    return_status: bool,
) -> Any:
    """Apply the status convention to ``result`` (an array or a tuple of arrays).

    ``return_status``: ``(result, status)``. Otherwise, eagerly: raise on a nonzero
    status; traced: NaN-fill every inexact array of ``result`` when the status is nonzero.
    """
    if return_status:
        return result, status
    if not traced:
        s = int(status)
        if s != 0:
            _raise(where, s, kind, shape, dtype)
        return result
    bad = status != 0

    def fill(x: Any) -> Any:
        if (isinstance(x, jax.Array) or is_traced(x)) and jnp.issubdtype(x.dtype, jnp.inexact):
            return jnp.where(bad, jnp.full_like(x, jnp.nan), x)
        return x

    return jax.tree.map(fill, result)
