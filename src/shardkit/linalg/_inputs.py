"""The checks every linear-algebra entry point makes on its input, beside :mod:`._dtype`.

``check_finite=True`` (SciPy's name and default; :func:`require_finite`): eagerly, an inf or NaN in the input raises
a ``ValueError`` saying so before any factorization runs (otherwise LU's pivot test,
``|u_jj| <= n eps max|a|``, is False for NaN and the NaN would come back as a result,
or as a "singular" report that blames the rows). The check reads every element once
(one scalar all-reduce for a sharded array) and waits for it. Traced under
``jax.jit`` the values are unknown: :func:`require_finite` then returns the flag, the
caller passes its input through :func:`gate` and its result through :func:`nan_unless`,
which NaN-fills the result when the input was not finite (never an error, never an
infinite or made-up number).

Why the input is gated rather than only the result filled: the flag's all-reduce must
run before every collective of the factorization, not beside them. XLA's CPU runtime
starts independent instructions of one device's program concurrently on a pool of one
thread per device; a flag computed from the input alone is independent of the whole
factorization, devices then reach the collectives in different orders, and the
process aborts in a rendezvous ("Termination timeout for all reduce", seen with
``jit(lstsq)`` on 8 simulated devices). ``where(ok, a, nan)`` orders everything after
the flag for the price of one select, which XLA fuses into the input's first copy.
:func:`shardkit.inspect.comms` reports such unordered pairs.

Empty problems (an order 0 matrix or ``nrhs = 0``) never reach the distributed
programs, whose layouts need at least one block: :func:`rhs_shape` validates ``b``
and the callers answer as NumPy does (``det`` 1, empty solutions).
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike as JaxArrayLike

from shardkit._programs import layout_jit
from shardkit.layout.internal import is_traced

__all__ = [
    "TRANS_CODES",
    "ArrayInput",
    "Trans",
    "as_rhs",
    "empty_solution",
    "from_rhs",
    "gate",
    "nan_unless",
    "referenced",
    "require_finite",
    "rhs_shape",
    "trans_code",
]


_T = TypeVar("_T")

ArrayInput: TypeAlias = JaxArrayLike | npt.ArrayLike
"""A matrix or right-hand side as the linear-algebra functions take it, as SciPy does:
a ``jax.Array`` (or tracer), a NumPy array, a scalar or nested sequences of numbers."""


Trans: TypeAlias = Literal[0, 1, 2, "N", "T", "C"]
"""Which system a solve with a factor or triangle answers, SciPy's spelling: ``0``/``"N"``
``a x = b``, ``1``/``"T"`` ``a^T x = b``, ``2``/``"C"`` ``a^H x = b`` (the same as ``1``
for real ``a``)."""

TRANS_CODES: dict[Any, int] = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}


def trans_code(where: str, trans: Any) -> int:
    """``trans`` (:data:`Trans`) as ``0``, ``1`` or ``2``.

    Raises:
      ValueError: it is not one of :data:`Trans`.
    """
    if isinstance(trans, bool) or trans not in TRANS_CODES:
        raise ValueError(
            f"{where}: trans={trans!r} is not one of {list(TRANS_CODES)} "
            "(a x = b, a^T x = b, a^H x = b)"
        )
    return TRANS_CODES[trans]


def _finite(x: jax.Array) -> jax.Array:
    return jnp.isfinite(x).all()


def _all_finite(x: Any) -> Any:
    if isinstance(x, jax.Array) or is_traced(x):
        # One program per layout, in the program cache: eagerly, op-by-op ``isfinite``
        # then ``all`` would compile two, kept by JAX for the process's life.
        return layout_jit(_finite, x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.bool_(True)
    return bool(np.isfinite(np.asarray(x)).all())


def _dtype_name(x: Any) -> str:
    return np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype).name


def require_finite(where: str, check: bool, **arrays: Any) -> jax.Array | None:
    """Eagerly raise when one of ``arrays`` (by name) holds an inf or NaN.

    Traced under ``jit`` nothing can raise: the result is then the replicated flag
    "every traced array is finite", for :func:`gate` and :func:`nan_unless`; None
    when ``check`` is False or nothing is traced.

    Raises:
      ValueError: an array is not finite (scipy: "array must not contain infs or NaNs").
    """
    if not check:
        return None
    ok = None
    for name, x in arrays.items():
        if is_traced(x):
            # Each flag's all-reduce reads the previous flag: the checks run in order.
            flag = _all_finite(x if ok is None else _nan_where_not(ok, x))
            ok = flag if ok is None else ok & flag
        elif not bool(_all_finite(x)):
            raise ValueError(
                f"{where}: {name} (shape={tuple(np.shape(x))}, dtype={_dtype_name(x)}) "
                "must not contain infs or NaNs. Remove or replace them (e.g. jnp.nan_to_num), "
                "or pass check_finite=False to skip this check (the result is then "
                "undefined for such input)."
            )
    return ok


def _nan_where_not(ok: jax.Array, x: Any) -> Any:
    if (isinstance(x, jax.Array) or is_traced(x)) and jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.where(ok, x, jnp.full_like(x, jnp.nan))
    return x


def gate(ok: jax.Array | None, x: _T) -> _T:
    """``x`` made to depend on the finite flag ``ok`` (NaN where it is False).

    Every program reading the gated array, collectives included, runs after the flag's
    all-reduce (see the module docstring for the hang this prevents). Only a traced
    array is gated: a concrete one stays concrete (its programs ran eagerly while
    tracing). ``ok=None``: ``x`` unchanged.
    """
    if ok is None or not is_traced(x):
        return x
    return _nan_where_not(ok, x)


def nan_unless(result: Any, ok: jax.Array | None) -> Any:
    """``result`` with every inexact array NaN-filled unless the flag ``ok`` is True.

    ``ok`` is :func:`require_finite`'s flag (None eagerly or unchecked: ``result`` as is).
    """
    if ok is None:
        return result
    return jax.tree.map(lambda x: _nan_where_not(ok, x), result)


def rhs_shape(
    where: str, b: Any, rows: int, a_shape: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """``b``'s shape after checking that it is ``(rows,)`` or ``(rows, nrhs)``.

    The one check of every solve's right-hand side (LU, Cholesky, triangular, least
    squares), so that all of them say the same. ``a_shape`` is the matrix's shape for
    the message (``(rows, rows)`` when not given).

    Raises:
      ValueError: it is not.
    """
    shape = tuple(np.shape(b))
    if len(shape) not in (1, 2) or shape[0] != rows:
        a_shape = (rows, rows) if a_shape is None else tuple(a_shape)
        raise ValueError(
            f"{where}: b.shape={shape} does not fit a.shape={a_shape}; "
            f"pass b of shape ({rows},) or ({rows}, nrhs)"
        )
    return shape


def as_rhs(
    where: str, b: Any, rows: int, dtype: Any, a_shape: tuple[int, ...] | None = None
) -> tuple[jax.Array, bool]:
    """``b`` checked by :func:`rhs_shape`, as a ``(rows, nrhs)`` array of ``dtype``, and whether it was a vector."""
    vec = len(rhs_shape(where, b, rows, a_shape)) == 1
    return layout_jit(_as_matrix, b, dtype=np.dtype(dtype)), vec


def _as_matrix(b: jax.Array, *, dtype: np.dtype[Any]) -> jax.Array:
    b = jnp.asarray(b).astype(dtype)
    return b[:, None] if b.ndim == 1 else b


def _first_column(x: jax.Array) -> jax.Array:
    return x[:, 0]


def from_rhs(x: jax.Array, vec: bool) -> jax.Array:
    """A solution of :func:`as_rhs`'s ``(rows, nrhs)`` system in the shape of ``b``:
    its column as a vector when ``b`` was one (one program per layout)."""
    return layout_jit(_first_column, x) if vec else x


def empty_solution(where: str, a: Any, b: Any, dtype: Any) -> jax.Array | None:
    """Zeros of ``b``'s shape when ``a x = b`` is empty (``a`` is 0x0 or ``nrhs = 0``), else None.

    A non-square ``a`` gives None: the layout code reports it with its own error.

    Raises:
      ValueError: ``b`` does not fit ``a``.
    """
    if len(a.shape) != 2 or a.shape[0] != a.shape[1]:
        return None
    shape = rhs_shape(where, b, int(a.shape[0]), tuple(a.shape))
    return jnp.zeros(shape, dtype) if 0 in shape else None


def referenced(a: Any, *, lower: bool, unit: bool = False) -> Any:
    """The triangle of square ``a`` a triangular solve or Cholesky reads; zeros elsewhere.

    What :func:`require_finite` checks for them: NaN in the ignored triangle (or on a
    unit diagonal) is no error, as it is never read. Host data stays on the host.
    """
    xp = np if not (isinstance(a, jax.Array) or is_traced(a)) else jnp
    n = a.shape[0]
    i = xp.arange(n)[:, None]
    j = xp.arange(a.shape[1])[None, :]
    keep = (i > j) if lower else (i < j)
    if not unit:
        keep = keep | (i == j)
    return xp.where(keep, a, xp.zeros((), a.dtype))
