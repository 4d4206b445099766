"""The environment a benchmark ran in, recorded beside its results.

Timings mean little without the machine that produced them: versions, devices
(simulated CPU devices or real accelerators), CPU count, BLAS threads, flags, date.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import sys
from typing import Any

import jax

from shardkit._config import accelerator_present

__all__ = ["environment"]

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads() -> dict[str, Any]:
    try:
        import threadpoolctl  # type: ignore[import-not-found]
    except ImportError:
        return {
            "source": "environment",
            **{var: os.environ.get(var) for var in _THREAD_VARIABLES},
        }
    pools = threadpoolctl.threadpool_info()
    return {
        "source": "threadpoolctl",
        "pools": [
            {k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version")}
            for p in pools
        ],
    }


def environment() -> dict[str, object]:
    """A JSON-serializable record of the software, devices and machine.

    Starts JAX's backend if it has not started (the device list needs it).

    Returns:
      A dict with keys ``jax``, ``jaxlib``, ``python``, ``platform`` (JAX backend),
      ``device_kind``, ``device_count``, ``simulated`` (True for CPU devices with no
      accelerator present), ``cpu_count``, ``blas_threads``, ``xla_flags``,
      ``hostname``, ``os``, ``date`` (UTC, ISO 8601) and ``load_avg`` (the 1, 5 and
      15 minute load averages, ``None`` where the OS has none: on a shared machine
      they say how much else was running).

    Example:
      >>> env = environment()
      >>> env["device_count"], env["platform"], env["simulated"]
      (8, 'cpu', True)
    """
    import jaxlib

    devices = jax.devices()
    kinds = sorted({d.device_kind for d in devices})
    backend = jax.default_backend()
    return {
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", None),
        "python": platform.python_version(),
        "platform": backend,
        "device_kind": ", ".join(kinds),
        "device_count": len(devices),
        "simulated": backend == "cpu" and not accelerator_present(),
        "cpu_count": os.cpu_count(),
        "blas_threads": _blas_threads(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()} ({sys.platform})",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_avg": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
