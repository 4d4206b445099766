"""Simulated CPU devices, thread pinning, accelerator detection, the config directory and
the program cache's size.

Nothing here runs at import time: every change to JAX's configuration or the process
environment is an explicit call.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import jax
import threadpoolctl

__all__ = [
    "CONFIG_DIR_VARIABLE",
    "DEFAULT_PROGRAM_CACHE_SIZE",
    "PROGRAM_CACHE_SIZE_VARIABLE",
    "accelerator_present",
    "check_cache_size",
    "config_dir",
    "pin_cpu_threads",
    "program_cache_size",
    "use_cpu_devices",
]

CONFIG_DIR_VARIABLE = "SHARDKIT_CONFIG_DIR"
"""Environment variable naming shardkit's config directory (overrides the default)."""

PROGRAM_CACHE_SIZE_VARIABLE = "SHARDKIT_PROGRAM_CACHE_SIZE"
"""Environment variable setting how many built programs shardkit keeps (its program cache)."""

DEFAULT_PROGRAM_CACHE_SIZE = 64
"""The program cache's bound when :data:`PROGRAM_CACHE_SIZE_VARIABLE` is unset.

One eager ``solve`` keeps up to 8 programs (its right-hand side's shape, padding,
factorization, solve, status renumbering, the vector's column), a ``qr`` 2, an
``fftn`` or a ``matmul`` 1: 64 holds the working set of about a dozen layouts. The
soak's programs (``solve``, ``qr``, ``fftn`` and ``matmul`` at sizes up to 40) held
near 3 MiB of resident memory each on 8 simulated CPU devices (64 of them about
180 MiB): the bound is what keeps a long-lived process's memory flat.
"""

# Flags that keep each simulated device's XLA and BLAS work on one thread. With 8
# simulated devices sharing 2 cores, multi-threaded Eigen/BLAS inside every device
# oversubscribes the machine (a sharded solve ran 60x slower unpinned).
_SINGLE_THREAD_XLA_FLAGS = (
    "--xla_cpu_multi_thread_eigen=false",
    "intra_op_parallelism_threads=1",
)
_BLAS_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
)
_ACCELERATOR_PLUGINS = (
    "jax_cuda12_plugin",
    "jax_cuda13_plugin",
    "jax_rocm60_plugin",
    "jax_rocm7_plugin",
    "libtpu",
)


def _backend_started_error(requested: int, current: int) -> RuntimeError:
    return RuntimeError(
        f"use_cpu_devices(n={requested}): JAX's CPU backend already started with "
        f"{current} device(s), and the device count cannot change once it has. "
        "Call shardkit.use_cpu_devices() before any JAX operation runs (right after "
        "`import jax`), or set the count in a fresh process "
        f"(e.g. `shardkit --devices {requested} ...`)."
    )


def use_cpu_devices(n: int = 8, /, *, pin_threads: bool = True) -> None:
    """Simulate ``n`` CPU devices in this process.

    Must run before JAX's backend starts. Calling it again with the same count after
    the backend started is a no-op, so libraries and tests can both call it.

    Args:
      n: number of simulated CPU devices (at least 1).
      pin_threads: also pin XLA's and BLAS's intra-op threads to one per device
        (see :func:`pin_cpu_threads`), only possible before the backend starts.

    Raises:
      TypeError: ``n`` is not an integer.
      ValueError: ``n`` is smaller than 1.
      RuntimeError: the backend already started with a different device count.

    Example:
      >>> import shardkit
      >>> shardkit.use_cpu_devices(8)
      >>> len(jax.devices("cpu"))
      8
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"use_cpu_devices(n=...) takes an int, got n={n!r} ({type(n).__name__})")
    if n < 1:
        raise ValueError(f"use_cpu_devices(n={n}): the device count must be at least 1")
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        current = len(jax.devices("cpu"))
        if current != n:
            raise _backend_started_error(n, current) from None
        return
    if pin_threads:
        pin_cpu_threads()


def pin_cpu_threads() -> None:
    """Run each simulated device's XLA and BLAS work on a single thread.

    Sets ``XLA_FLAGS`` (appending, never replacing, what the user set) and the usual
    BLAS thread variables where the user has not set them. XLA reads its flags when the
    backend starts, so they only have an effect before then. A BLAS library loads its
    thread count once, when it is loaded: one already loaded (SciPy imported first,
    whose LAPACK jaxlib's CPU kernels call) is limited to one thread at run time
    (``threadpoolctl``) instead. Without that a sharded ``solve`` at n=4096 on 8
    simulated devices ran 6x slower when SciPy was imported before this call.
    """
    flags = os.environ.get("XLA_FLAGS", "").split()
    for flag in _SINGLE_THREAD_XLA_FLAGS:
        name = flag.split("=")[0]
        if not any(f.split("=")[0] == name for f in flags):
            flags.append(flag)
    os.environ["XLA_FLAGS"] = " ".join(flags)
    for var in _BLAS_THREAD_VARIABLES:
        os.environ.setdefault(var, "1")
    if any(os.environ[var] != "1" for var in _BLAS_THREAD_VARIABLES):
        return  # the user chose a BLAS thread count: keep it
    # Only libraries already loaded are changed; later ones read the variables above.
    threadpoolctl.threadpool_limits(limits=1, user_api="blas")


def accelerator_present() -> bool:
    """Whether JAX will find a GPU or TPU, judged without starting the backend.

    True when ``JAX_PLATFORMS`` names a non-CPU platform, or an accelerator plugin
    (CUDA, ROCm, TPU) is installed and ``JAX_PLATFORMS`` does not restrict JAX to CPU.
    """
    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms:
        return any(p and p != "cpu" for p in platforms.split(","))
    return any(importlib.util.find_spec(name) is not None for name in _ACCELERATOR_PLUGINS)


def check_cache_size(where: str, n: object) -> int:
    """``n`` as a program cache bound: an int of at least 1 (``where`` names the caller).

    Raises:
      TypeError: ``n`` is not an int.
      ValueError: ``n`` is smaller than 1.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{where}: the cache size must be an int, got {n!r} ({type(n).__name__})")
    if n < 1:
        raise ValueError(
            f"{where}: the cache size must be at least 1 (programs kept), got {n}; "
            "a bound of 1 keeps only the last program built"
        )
    return n


def program_cache_size() -> int:
    """The program cache's bound from the environment: ``$SHARDKIT_PROGRAM_CACHE_SIZE``,
    else :data:`DEFAULT_PROGRAM_CACHE_SIZE`.

    Read once, when shardkit first builds a program;
    :func:`shardkit.set_program_cache_size` changes it afterwards.

    Raises:
      ValueError: the variable is set to something other than a positive integer.
    """
    raw = os.environ.get(PROGRAM_CACHE_SIZE_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_PROGRAM_CACHE_SIZE
    where = f"${PROGRAM_CACHE_SIZE_VARIABLE}={raw!r}"
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(
            f"{where} is not an integer; set it to the number of programs to keep "
            f"(default {DEFAULT_PROGRAM_CACHE_SIZE}), or unset it"
        ) from None
    return check_cache_size(where, n)


def config_dir() -> Path:
    """The directory shardkit keeps per-user files in (e.g. calibrated cost-model presets).

    ``$SHARDKIT_CONFIG_DIR`` when set, else ``$XDG_CONFIG_HOME/shardkit``, else
    ``~/.config/shardkit`` (the XDG Base Directory default). Nothing is created here:
    writers create the directory when they first save.
    """
    override = os.environ.get(CONFIG_DIR_VARIABLE, "").strip()
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "shardkit"
