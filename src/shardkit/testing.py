"""Numerical comparison with tolerances keyed by dtype; it always raises on mismatch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from shardkit._typing import ArrayLike, DTypeLike

__all__ = ["assert_close", "to_numpy", "tolerance"]

# (rtol, atol) relative to the reference's largest magnitude, by the lower precision
# of the two compared dtypes. float32 allows for reordered sums across shards.
_TOLERANCES: dict[str, tuple[float, float]] = {
    "bfloat16": (2e-2, 2e-2),
    "float16": (5e-3, 5e-3),
    "float32": (2e-5, 2e-6),
    "complex64": (2e-5, 2e-6),
    "float64": (1e-12, 1e-13),
    "complex128": (1e-12, 1e-13),
}


def tolerance(dtype: DTypeLike, /) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing values of ``dtype``; integers and bools: exact.

    Raises:
      ValueError: ``dtype`` is neither numeric nor bool (listing the known dtypes).
    """
    dt = np.dtype(dtype)
    if dt.kind in "biu":
        return (0.0, 0.0)
    if dt.name not in _TOLERANCES:
        raise ValueError(
            f"tolerance: no tolerance for dtype={dt.name}; known: {sorted(_TOLERANCES)} "
            "and integer/bool dtypes (compared exactly)"
        )
    return _TOLERANCES[dt.name]


def to_numpy(x: ArrayLike, /) -> np.ndarray:
    """A NumPy copy of ``x``, gathering across processes when it is not addressable here."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def assert_close(
    actual: ArrayLike,
    desired: ArrayLike,
    /,
    *,
    dtype: DTypeLike | None = None,
    what: str = "result",
    scale: float | None = None,
) -> None:
    """Raise ``AssertionError`` unless ``actual`` matches ``desired`` within tolerance.

    The tolerance comes from :func:`tolerance` for ``dtype`` (default: the less
    precise of the two arrays' dtypes). ``atol`` scales with the reference's largest
    magnitude (or ``scale``), so large-valued results are judged relatively.

    Args:
      actual: computed value (``jax.Array``, possibly sharded across processes).
      desired: reference value (NumPy).
      dtype: the dtype whose tolerance applies.
      what: names the quantity in the error message.
      scale: magnitude for ``atol`` (default ``max|desired|``, at least 1).

    Raises:
      AssertionError: shapes differ, NaN/inf disagree, or values differ beyond the
        tolerance; the message gives the worst element and the tolerance used.
    """
    a, d = to_numpy(actual), to_numpy(desired)
    if a.shape != d.shape:
        raise AssertionError(f"{what}: shape {a.shape} != expected {d.shape}")
    inexact = [t for t in (a.dtype, d.dtype) if jnp.issubdtype(t, jnp.inexact)]
    if dtype is None:
        dtype = max(inexact, key=lambda t: float(jnp.finfo(t).eps)) if inexact else a.dtype
    rtol, atol = tolerance(dtype)
    if a.size == 0:
        return
    a, d = a.reshape(a.shape or (1,)), d.reshape(d.shape or (1,))  # scalars: masks need arrays
    if inexact:
        wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(d) else np.float64
        a64, d64 = a.astype(wide), d.astype(wide)
        if scale is None:
            finite = np.abs(d64[np.isfinite(d64)])
            scale = max(float(finite.max()) if finite.size else 1.0, 1.0)
        if not np.array_equal(np.isnan(a64), np.isnan(d64)):
            raise AssertionError(f"{what}: NaN pattern differs from the reference")
        err = np.abs(a64 - d64)
        err[np.isnan(d64)] = 0.0
        bound = atol * scale + rtol * np.abs(d64)
        bound[np.isnan(d64)] = np.inf
        bad = ~(err <= bound)
    else:
        err = np.abs(a.astype(np.int64) - d.astype(np.int64)).astype(np.float64)
        bound = np.zeros_like(err)
        bad = err > 0
        scale = 1.0
    if bad.any():
        worst = np.unravel_index(int(np.argmax(np.where(bad, err - bound, -np.inf))), a.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {a.size} elements differ beyond "
            f"rtol={rtol:g}, atol={atol:g}x{scale:g} (dtype {np.dtype(dtype).name}); worst at "
            f"index {tuple(int(i) for i in worst)}: got {a[worst]!r}, expected {d[worst]!r}"
        )
