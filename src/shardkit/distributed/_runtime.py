"""Join a multi-process JAX job and move results between its processes.

:func:`initialize` is the one call a script needs to run under
:func:`shardkit.distributed.launch` (simulated CPU devices, one coordinator on
127.0.0.1) and, unchanged, under a real cluster's launcher (SLURM, Open MPI), where
JAX finds its own settings. Run as a plain single process, it does nothing, so the
same script also runs with ``python script.py``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from typing import Literal

import jax
import numpy as np
import numpy.typing as npt
from jax.experimental import multihost_utils

from shardkit._config import use_cpu_devices
from shardkit.distributed import _control, _rendezvous
from shardkit.distributed._launch import (
    COORDINATOR_ENV,
    LOCAL_DEVICES_ENV,
    NUM_PROCESSES_ENV,
    PROCESS_ID_ENV,
)
from shardkit.distributed._quiet import StdoutFilter

__all__ = ["ProcessInfo", "gather", "initialize", "is_initialized", "process_info"]

Mode = Literal["launcher", "cluster", "single"]

_LAUNCHER_VARIABLES = (COORDINATOR_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV, LOCAL_DEVICES_ENV)
# The environments `jax.distributed.initialize()` detects by itself without opting in,
# recognised by the variables JAX itself checks. Cloud TPU needs a metadata query to
# detect and is reached through `cluster_detection_method` instead.
_CLUSTER_VARIABLES: Mapping[str, tuple[str, ...]] = {
    "slurm": (
        "SLURM_JOB_ID",
        "SLURM_STEP_NODELIST",
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "SLURM_LOCALID",
    ),
    "ompi": ("OMPI_MCA_orte_hnp_uri",),
}


# Keeps gloo's chatter off stdout in cluster mode; one per process.
_stdout_filter = StdoutFilter()


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """Where this process sits in a (possibly multi-process) JAX job.

    Attributes:
      process_id: this process's index, ``jax.process_index()``.
      num_processes: number of processes, ``jax.process_count()``.
      local_device_count: devices this process drives, ``jax.local_device_count()``.
      global_device_count: devices of the whole job, ``jax.device_count()``.
      mode: how the job was set up: ``"launcher"`` (from
        :func:`shardkit.distributed.launch`'s variables), ``"cluster"`` (JAX's
        cluster detection, e.g. SLURM) or ``"single"`` (no distributed runtime; a
        plain single process).
    """

    process_id: int
    num_processes: int
    local_device_count: int
    global_device_count: int
    mode: Mode


@dataclasses.dataclass(frozen=True)
class _LauncherSettings:
    coordinator: str
    num_processes: int
    process_id: int
    local_devices: int


def _env_error(message: str) -> ValueError:
    return ValueError(
        f"initialize(): {message}. These variables are set by shardkit.distributed.launch "
        "(`shardkit launch -n 2 -- python script.py`); set all four or none of "
        f"{', '.join(_LAUNCHER_VARIABLES)}."
    )


def _read_int(environ: Mapping[str, str], name: str, minimum: int) -> int:
    raw = environ[name]
    try:
        value = int(raw)
    except ValueError:
        raise _env_error(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise _env_error(f"{name}={value} must be at least {minimum}")
    return value


def _launcher_settings(environ: Mapping[str, str]) -> _LauncherSettings | None:
    """Reads launch()'s variables: None if absent, ValueError if partial or malformed."""
    present = [name for name in _LAUNCHER_VARIABLES if name in environ]
    if not present:
        return None
    missing = [name for name in _LAUNCHER_VARIABLES if name not in environ]
    if missing:
        raise _env_error(f"{', '.join(present)} set but {', '.join(missing)} missing")
    coordinator = environ[COORDINATOR_ENV]
    host, sep, port = coordinator.rpartition(":")
    if not (host and sep and port.isdigit()):
        raise _env_error(f"{COORDINATOR_ENV}={coordinator!r} is not of the form host:port")
    settings = _LauncherSettings(
        coordinator=coordinator,
        num_processes=_read_int(environ, NUM_PROCESSES_ENV, 1),
        process_id=_read_int(environ, PROCESS_ID_ENV, 0),
        local_devices=_read_int(environ, LOCAL_DEVICES_ENV, 1),
    )
    if settings.process_id >= settings.num_processes:
        raise _env_error(
            f"{PROCESS_ID_ENV}={settings.process_id} must be below "
            f"{NUM_PROCESSES_ENV}={settings.num_processes}"
        )
    return settings


def _detected_cluster(environ: Mapping[str, str]) -> str | None:
    for name, variables in _CLUSTER_VARIABLES.items():
        if all(v in environ for v in variables):
            return name
    return None


def _check_timeout(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"initialize(): {name} takes an int number of seconds, got {name}={value!r} "
            f"({type(value).__name__})"
        )
    if value < 1:
        raise ValueError(f"initialize(): {name}={value} must be at least 1 second")
    return value


def _reach_coordinator(method: str | None, timeout_seconds: int) -> None:
    """In a cluster: ranks above 0 wait (up to the timeout) for the coordinator to listen."""
    from jax._src.clusters import ClusterEnv  # JAX's own reading of the cluster's variables

    try:
        address, count, rank, _ = ClusterEnv.auto_detect_unset_distributed_params(
            None, None, None, None, method, timeout_seconds
        )
    except Exception:  # JAX's initialize reports a cluster it cannot read, in its words
        return
    if address and isinstance(count, int) and isinstance(rank, int):
        _rendezvous.reach(address, rank, count, timeout_seconds=timeout_seconds)


def is_initialized() -> bool:
    """Whether JAX's distributed runtime is running in this process."""
    return jax.distributed.is_initialized()


def process_info() -> ProcessInfo:
    """Describes this process's place in the job (starts JAX's backend if needed).

    Returns:
      A :class:`ProcessInfo`; ``mode`` is ``"single"`` when the distributed runtime is
      not running, ``"launcher"`` when it runs and launch()'s variables are set, and
      ``"cluster"`` otherwise.
    """
    if not is_initialized():
        mode: Mode = "single"
    elif all(name in os.environ for name in _LAUNCHER_VARIABLES):
        mode = "launcher"
    else:
        mode = "cluster"
    return _info(mode)


def _info(mode: Mode) -> ProcessInfo:
    return ProcessInfo(
        process_id=jax.process_index(),
        num_processes=jax.process_count(),
        local_device_count=jax.local_device_count(),
        global_device_count=jax.device_count(),
        mode=mode,
    )


def initialize(
    *,
    cluster_detection_method: str | None = None,
    initialization_timeout_seconds: int = 60,
    heartbeat_timeout_seconds: int = 10,
    shutdown_timeout_seconds: int = 3,
    verbose: bool = False,
) -> ProcessInfo:
    """Joins this process to its multi-process JAX job, if it is part of one.

    Call it first thing in a script, before any JAX computation. Three cases:

    * Run by :func:`shardkit.distributed.launch` (its ``SHARDKIT_*`` variables are
      set): restricts JAX to CPU unless ``JAX_PLATFORMS`` is set, selects gloo for
      cross-process CPU collectives, turns off JAX's preemption service (so the
      launcher's SIGTERM ends the process at once), creates ``SHARDKIT_LOCAL_DEVICES`` simulated CPU
      devices (with :func:`shardkit.use_cpu_devices`) and connects to the coordinator.
      The ranks first check in at the coordinator's address (rank 0 listens there,
      the others connect and retry), so that a missing coordinator or rank makes
      every rank that came raise ``RuntimeError`` within
      ``initialization_timeout_seconds``, where JAX's client would abort the process.
      Short heartbeat and shutdown timeouts make a dead peer an error within seconds
      rather than a hang. Through the launcher's control socket it reports that it
      joined, marks an uncaught exception (``sys.excepthook``) and, at interpreter
      exit (``atexit``), agrees with the launcher whether to leave through JAX's
      shutdown barrier (every rank is at its exit) or at once with its own status (a
      peer failed or is not coming), so a failure ends the job without native abort
      dumps.
    * In a cluster JAX detects (SLURM, Open MPI) or with ``cluster_detection_method``
      given: calls ``jax.distributed.initialize()`` and lets JAX read the cluster's
      settings; the heartbeat and shutdown timeouts keep JAX's defaults there, since
      real jobs may compile for longer than a short heartbeat allows. Ranks above 0
      first wait up to ``initialization_timeout_seconds`` for the coordinator's
      address to listen and raise ``RuntimeError`` when it does not, where JAX's
      client would abort the process after its own 300 s.
    * Otherwise: does nothing, and reports ``mode="single"``.

    Calling it again once the runtime is up returns the current :class:`ProcessInfo`.

    Args:
      cluster_detection_method: passed to ``jax.distributed.initialize`` to force one
        detection method (e.g. ``"mpi4py"``); ignored under ``launch``.
      initialization_timeout_seconds: how long to wait for every process to connect,
        check-in included (launcher mode); in a cluster, how long a rank above 0
        waits for the coordinator to listen.
      heartbeat_timeout_seconds: after this long without a heartbeat a process counts
        as dead and the job fails (launcher mode).
      shutdown_timeout_seconds: how long a finishing process waits for the others at
        exit (launcher mode); under the launcher, ranks that reach their ends
        further apart than this fail the job.
      verbose: in a cluster, keep gloo's connection lines ("[Gloo] Rank 0 is
        connected to 1 peer ranks ...") on stdout. By default they are dropped there,
        as :func:`~shardkit.distributed.launch` drops them unless ``verbose``: with
        gloo as JAX's CPU collectives, this process's stdout (descriptor 1) then runs
        through a pipe and a thread that copies all else, until exit.

    Returns:
      This process's :class:`ProcessInfo`.

    Raises:
      ValueError: the ``SHARDKIT_*`` variables are partial or malformed, or a timeout
        is below 1 second.
      TypeError: a timeout is not an int, or ``verbose`` not a bool.
      RuntimeError: JAX's backend already started with another device count (see
        :func:`shardkit.use_cpu_devices`); or, under ``launch``'s variables, the
        coordinator or a rank did not come within ``initialization_timeout_seconds``,
        or rank 0 cannot listen on the coordinator's address (the message says which);
        in a cluster, a rank above 0 found no coordinator within that timeout.

    Example:
      >>> from shardkit.distributed import initialize
      >>> initialize().mode  # a plain process: nothing to join
      'single'
    """
    timeouts = {
        "initialization_timeout": _check_timeout(
            "initialization_timeout_seconds", initialization_timeout_seconds
        ),
        "heartbeat_timeout_seconds": _check_timeout(
            "heartbeat_timeout_seconds", heartbeat_timeout_seconds
        ),
        "shutdown_timeout_seconds": _check_timeout(
            "shutdown_timeout_seconds", shutdown_timeout_seconds
        ),
    }
    if not isinstance(verbose, bool):
        raise TypeError(f"initialize(): verbose takes a bool, got verbose={verbose!r}")
    settings = _launcher_settings(os.environ)
    if is_initialized():
        return process_info()
    if settings is not None:
        if "JAX_PLATFORMS" not in os.environ:
            jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # The preemption service catches SIGTERM to announce a preemption; from the
        # local launcher SIGTERM means "a peer died, stop now", so let it kill.
        jax.config.update("jax_enable_preemption_service", False)
        use_cpu_devices(settings.local_devices)
        control = _control.take_control_socket(os.environ)
        # JAX's client aborts the process if it cannot register in time; meet first.
        started = time.monotonic()
        _rendezvous.check_in(
            settings.coordinator,
            settings.process_id,
            settings.num_processes,
            timeout_seconds=initialization_timeout_seconds,
        )
        left = initialization_timeout_seconds - (time.monotonic() - started)
        timeouts["initialization_timeout"] = max(1, math.ceil(left))
        jax.distributed.initialize(
            coordinator_address=settings.coordinator,
            num_processes=settings.num_processes,
            process_id=settings.process_id,
            # Listen on loopback only, like the address handed out, not on all interfaces.
            coordinator_bind_address=settings.coordinator,
            # All four values are given; keep a SLURM or MPI environment around the
            # launcher from overriding them.
            cluster_detection_method="deactivate",
            **timeouts,
        )
        if control is not None:
            _control.ExitHook(control, jax.distributed.shutdown).install(shutdown_timeout_seconds)
        return _info("launcher")
    if cluster_detection_method is not None or _detected_cluster(os.environ) is not None:
        _reach_coordinator(cluster_detection_method, initialization_timeout_seconds)
        jax.distributed.initialize(cluster_detection_method=cluster_detection_method)
        collectives = getattr(jax.config, "jax_cpu_collectives_implementation", None)
        if not verbose and collectives == "gloo":
            _stdout_filter.start()
        return _info("cluster")
    return _info("single")


def gather(x: npt.ArrayLike, /) -> np.ndarray:
    """Copies a global array, sharded over any processes, to every process as NumPy.

    A collective: every process must call it with its part of the same array. For an
    array spread over several processes this all-gathers it, moving the whole array
    to every process (communication and host memory: the full array per process).
    An array this process holds entirely, or a NumPy array, is just converted.

    Args:
      x: a ``jax.Array`` (possibly not fully addressable) or array-like.

    Returns:
      The whole array as a NumPy array, the same on every process.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from shardkit.distributed import gather
      >>> gather(jnp.arange(4)).tolist()
      [0, 1, 2, 3]
    """
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
