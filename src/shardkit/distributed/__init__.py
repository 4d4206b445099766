"""Multi-process JAX jobs: a local launcher and the runtime calls scripts make.

Run a script as 2 processes with 4 simulated CPU devices each (8 global devices)::

    shardkit launch -n 2 --devices-per-process 4 -- python script.py

where ``script.py`` starts with :func:`initialize` and then works with global meshes
and arrays as on one process; :func:`gather` brings a result to every process.
"""

from shardkit.distributed._launch import (
    COORDINATOR_ENV,
    LOCAL_DEVICES_ENV,
    NUM_PROCESSES_ENV,
    PROCESS_ID_ENV,
    launch,
)
from shardkit.distributed._runtime import (
    ProcessInfo,
    gather,
    initialize,
    is_initialized,
    process_info,
)

__all__ = [
    "COORDINATOR_ENV",
    "LOCAL_DEVICES_ENV",
    "NUM_PROCESSES_ENV",
    "PROCESS_ID_ENV",
    "ProcessInfo",
    "gather",
    "initialize",
    "is_initialized",
    "launch",
    "process_info",
]
