"""The dtypes the factorizations and solvers accept, checked once at the API boundary.

float32, float64, complex64 and complex128 are computed as they are. Integers and
bools are promoted as ``jnp.linalg`` promotes them (to the default float dtype).
float16 and bfloat16 are refused with a ``TypeError`` here, before anything reaches
LAPACK (whose kernels have no half-precision versions: ``jnp.linalg.solve`` fails on
them deep inside jaxlib).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.core as jax_core
import jax.numpy as jnp
import numpy as np

__all__ = ["SUPPORTED", "as_inexact", "common", "real_dtype"]

SUPPORTED: tuple[str, ...] = ("float32", "float64", "complex64", "complex128")
"""The dtypes the linear algebra computes in."""


def _check(where: str, name: str, shape: tuple[int, ...], dt: np.dtype[Any]) -> np.dtype[Any]:
    if dt.kind in "biu":
        return np.dtype(jnp.result_type(float))
    if dt.name not in SUPPORTED:
        raise TypeError(
            f"{where}: {name}.dtype={dt.name} (shape={shape}) is not supported; use one of "
            f"{list(SUPPORTED)} (integer input is promoted to the default float dtype). "
            "Half precision has no LAPACK kernels: convert with "
            f"{name}.astype(jnp.float32) and cast the result back."
        )
    return dt


def as_inexact(where: str, name: str, x: Any) -> jax.Array | np.ndarray[Any, Any]:
    """``x`` as an array of a supported dtype (a tracer or ``jax.Array`` stays on device).

    Raises:
      TypeError: ``x`` is half precision or not numeric.
    """
    if not isinstance(x, jax.Array | jax_core.Tracer):
        x = np.asarray(x)
        if x.dtype == np.float64 and not jax.config.read("jax_enable_x64"):
            x = x.astype(np.float32)
        if x.dtype == np.complex128 and not jax.config.read("jax_enable_x64"):
            x = x.astype(np.complex64)
    dt = np.dtype(x.dtype)
    if dt.kind not in "biufc":
        raise TypeError(f"{where}: {name}.dtype={dt.name} is not numeric; use {list(SUPPORTED)}")
    want = _check(where, name, tuple(x.shape), dt)
    if want == dt:
        return x
    return x.astype(want)


def common(where: str, dtype: Any, b: Any, name: str = "b") -> np.dtype[Any]:
    """The dtype a solve with matrix dtype ``dtype`` and right-hand side ``b`` computes in.

    As ``jnp.linalg.solve``: a complex ``b`` with a real matrix makes the solve complex.
    """
    bd = np.dtype(b.dtype if hasattr(b, "dtype") else np.asarray(b).dtype)
    if bd.kind not in "biufc":
        raise TypeError(f"{where}: {name}.dtype={bd.name} is not numeric; use {list(SUPPORTED)}")
    bd = _check(where, name, tuple(np.shape(b)), bd) if bd.kind in "fc" else np.dtype(dtype)
    return np.dtype(jnp.result_type(dtype, bd))


def real_dtype(dtype: Any) -> np.dtype[Any]:
    """The real dtype of the same precision (``complex64`` -> ``float32``)."""
    return np.dtype(jnp.finfo(dtype).dtype)
