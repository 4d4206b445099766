"""Numerical failure of the factorizations: errors raised eagerly, statuses under ``jit``.

Every factorization computes an ``int32`` status: ``0`` on success, else ``j + 1`` for
the first column ``j`` (natural, 0-based numbering of ``a``'s columns) where it failed.
Called eagerly, a nonzero status raises one of the errors below; traced inside
``jax.jit`` the status cannot be read, so the functions either return it
(``return_status=True``) or fill their result with NaN (never a silent inf).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from shardkit.layout.internal import is_traced

__all__ = [
    "Failure",
    "LinAlgStatusError",
    "NotPositiveDefiniteError",
    "Problem",
    "RankDeficientError",
    "SingularMatrixError",
    "finish",
    "is_traced",
    "succeeded",
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
    """QR met a numerically zero ``|r_jj|``: ``a``'s columns are (nearly) dependent."""


class Failure(enum.Enum):
    """What a nonzero status of a factorization means: the error it raises eagerly."""

    SINGULAR = "singular"
    """LU: a numerically zero pivot (:class:`SingularMatrixError`)."""
    NOT_POSITIVE_DEFINITE = "not_positive_definite"
    """Cholesky: a non-positive pivot (:class:`NotPositiveDefiniteError`)."""
    RANK_DEFICIENT = "rank_deficient"
    """QR outside the TSQR layout: a numerically zero ``|r_jj|`` (:class:`RankDeficientError`)."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """Which call's status it is, and the matrix it names in its error message.

    Attributes:
      where: the public function.
      failure: what a nonzero status means.
      shape, dtype: the matrix's (its own, not padded).
    """

    where: str
    failure: Failure
    shape: tuple[int, ...]
    dtype: Any

    def error(self, status: int) -> LinAlgStatusError:
        """The error of a nonzero ``status`` (``j + 1``: column ``j`` failed)."""
        where, col = self.where, status - 1
        matrix = f"(shape={self.shape}, dtype={np.dtype(self.dtype).name})"
        under_jit = "under jax.jit pass return_status=True to receive this status instead."
        if self.failure is Failure.SINGULAR:
            return SingularMatrixError(
                where,
                col,
                f"{where}: the matrix {matrix} is singular to working precision: no pivot in "
                f"column {col} is larger than n * eps * max|a|. Check the input for dependent "
                f"rows or columns; {under_jit}",
            )
        if self.failure is Failure.RANK_DEFICIENT:
            return RankDeficientError(
                where,
                col,
                f"{where}: a {matrix} is numerically rank deficient: |r_jj| of column {col} is "
                "at most n * eps * max|r_jj| (or NaN), so r is singular (and block "
                "Gram-Schmidt's q is not orthonormal). Check a for dependent columns, use "
                "lstsq for a minimum-norm solution, or the layout P(rows, None) with "
                f"M / R >= n (its QR reports no rank); {under_jit}",
            )
        if self.failure is Failure.NOT_POSITIVE_DEFINITE:
            return NotPositiveDefiniteError(
                where,
                col,
                f"{where}: the matrix {matrix} is not positive definite: the pivot of column "
                f"{col} is not positive. Use lu/solve for indefinite matrices; {under_jit}",
            )
        raise TypeError(
            f"{where}: failure={self.failure!r} is not a Failure; pass one of {list(Failure)}"
        )


def finish(
    problem: Problem, result: Any, status: jax.Array, *, traced: bool, return_status: bool
) -> Any:
    """Apply the status convention to ``result`` (an array or a pytree of arrays).

    ``return_status``: ``(result, status)``. Otherwise, eagerly: raise ``problem``'s
    error on a nonzero status; traced: NaN-fill every inexact array of ``result`` when
    the status is nonzero.
    """
    if return_status:
        return result, status
    if not traced:
        s = int(status)
        if s != 0:
            raise problem.error(s)
        return result
    bad = status != 0

    def fill(x: Any) -> Any:
        if (isinstance(x, jax.Array) or is_traced(x)) and jnp.issubdtype(x.dtype, jnp.inexact):
            return jnp.where(bad, jnp.full_like(x, jnp.nan), x)
        return x

    return jax.tree.map(fill, result)


def succeeded(result: Any, return_status: bool) -> Any:
    """``result`` of a problem that cannot fail (empty input), with status 0 when asked."""
    return (result, jnp.zeros((), jnp.int32)) if return_status else result
