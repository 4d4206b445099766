"""Numerical failure of the factorizations: errors raised eagerly, statuses under ``jit``.

Every factorization computes an ``int32`` status: ``0`` on success, else ``j + 1`` for
the first column ``j`` (natural, 0-based numbering of ``a``'s columns) where it failed.
Called eagerly, a nonzero status raises one of the errors below; traced inside
``jax.jit`` the status cannot be read, so the functions either return it
(``f.with_status(...)``) or fill their result with NaN (never a silent inf).

The convention lives here once: a function's implementation returns a
:class:`Checked` (its result, status and what a failure means), and
:func:`reports_status` makes the public function of it, typed without overloads:
``f(...)`` gives the result under the convention, ``f.with_status(...)`` the pair
``(result, status)``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from shardkit._deprecation import renamed
from shardkit.layout.internal import is_traced

__all__ = [
    "Checked",
    "Failure",
    "LinAlgStatusError",
    "NotPositiveDefiniteError",
    "Problem",
    "RankDeficientError",
    "SingularMatrixError",
    "StatusFunction",
    "checked",
    "finish",
    "is_traced",
    "reports_status",
    "succeeded",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_R_co = TypeVar("_R_co", covariant=True)


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
        under_jit = (
            f"under jax.jit call shardkit.linalg.{where}.with_status(...) to receive this "
            "status instead."
        )
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


@dataclasses.dataclass(frozen=True)
class Checked(Generic[_R]):
    """A result and its status before the status convention is applied (:func:`finish`).

    Attributes:
      result: the array or pytree of arrays.
      status: the ``int32`` status (``0``: success).
      problem: what a nonzero status means (``None``: the call cannot fail).
      traced: whether the call was traced (the convention NaN-fills instead of raising).
      check: instead of ``problem``, a convention of the function's own (called when
        the caller did not ask for the status; e.g. a batch's per-system statuses).
    """

    result: _R
    status: jax.Array
    problem: Problem | None = None
    traced: bool = False
    check: Callable[[], None] | None = None

    def settled(self) -> _R:
        """:attr:`result` under the convention: raised eagerly, NaN-filled when traced."""
        if self.check is not None:
            self.check()
        if self.problem is None:
            return self.result
        return finish(
            self.problem, self.result, self.status, traced=self.traced, return_status=False
        )


def checked(problem: Problem, result: _R, status: jax.Array, *, traced: bool) -> Checked[_R]:
    """A :class:`Checked` of a call that can fail as ``problem`` says."""
    return Checked(result, status, problem, traced)


def succeeded(result: _R) -> Checked[_R]:
    """A :class:`Checked` of a problem that cannot fail (empty input): status 0."""
    return Checked(result, jnp.zeros((), jnp.int32))


class StatusFunction(Protocol[_P, _R_co]):
    """A public function that reports a status (see :func:`reports_status`).

    ``f(...)`` returns the result (eagerly a failure raises, under ``jit`` the result is
    NaN-filled); ``f.with_status(...)`` returns ``(result, status)`` and never raises
    for a numerical failure.
    """

    __name__: str

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R_co: ...

    def with_status(self, *args: _P.args, **kwargs: _P.kwargs) -> tuple[_R_co, jax.Array]: ...


def _result_annotation(annotation: Any) -> Any:
    """``Checked[X]`` (a string under postponed annotations) -> ``X``."""
    text = annotation if isinstance(annotation, str) else ""
    if text.startswith("Checked[") and text.endswith("]"):
        return text[len("Checked[") : -1]
    return annotation


def reports_status(
    impl: Callable[Concatenate[bool, _P], Checked[_R]],
) -> StatusFunction[_P, _R]:
    """The public function of ``impl(want_status, *args, **kwargs) -> Checked``.

    ``want_status`` tells ``impl`` whether the caller asked for the status (a few
    implementations return a cheaper result then). The public function keeps ``impl``'s
    name (without its leading underscore), docstring and signature (without the flag).
    The old spelling ``f(..., return_status=True)`` still works, with a
    ``DeprecationWarning`` naming ``f.with_status(...)``.
    """
    name = impl.__name__.lstrip("_")

    def with_status(*args: _P.args, **kwargs: _P.kwargs) -> tuple[_R, jax.Array]:
        out = impl(True, *args, **kwargs)
        return out.result, out.status

    @functools.wraps(impl)
    def call(*args: Any, **kwargs: Any) -> Any:
        if "return_status" in kwargs:
            want = kwargs.pop("return_status")
            renamed(
                f"shardkit.linalg.{name}",
                f"{name}(..., return_status=...)",
                f"shardkit.linalg.{name}.with_status(...) for (result, status), or "
                f"shardkit.linalg.{name}(...) for the result alone",
            )
            if want:
                return with_status(*args, **kwargs)
        return impl(False, *args, **kwargs).settled()

    sig = inspect.signature(impl)
    call.__name__ = call.__qualname__ = name
    call.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=list(sig.parameters.values())[1:],
        return_annotation=_result_annotation(sig.return_annotation),
    )
    call.with_status = with_status  # type: ignore[attr-defined]
    with_status.__name__ = "with_status"
    with_status.__qualname__ = f"{name}.with_status"
    with_status.__doc__ = f"``(result, status)`` of :func:`{name}` (see its docstring)."
    return call  # type: ignore[return-value]
