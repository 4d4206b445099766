"""shardkit: distributed numerical computing on sharded JAX arrays.

The public API is this module's ``__all__``; a test checks that every name in it
exists and has a docstring. ``shardkit.__version__`` is the installed package's version.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from shardkit import (
    distributed,
    examples,
    fft,
    inspect,
    layout,
    linalg,
    plan,
    random,
    testing,
    train,
)
from shardkit._config import accelerator_present, pin_cpu_threads, use_cpu_devices
from shardkit._programs import ProgramCacheInfo, program_cache_info, set_program_cache_size
from shardkit.inspect import INTERCONNECTS, Collective, CommReport, Interconnect, comms
from shardkit.layout import describe, mesh, shard, sharding, spec
from shardkit.show import ShardingView, show

try:
    __version__ = _version("shardkit")
except _PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = [
    "INTERCONNECTS",
    "Collective",
    "CommReport",
    "Interconnect",
    "ProgramCacheInfo",
    "ShardingView",
    "accelerator_present",
    "comms",
    "describe",
    "distributed",
    "examples",
    "fft",
    "inspect",
    "layout",
    "linalg",
    "mesh",
    "pin_cpu_threads",
    "plan",
    "program_cache_info",
    "random",
    "set_program_cache_size",
    "shard",
    "sharding",
    "show",
    "spec",
    "testing",
    "train",
    "use_cpu_devices",
]
