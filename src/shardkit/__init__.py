"""shardkit: distributed numerical computing on sharded JAX arrays.

The public API is this module's ``__all__``; a test checks that every name in it
exists and has a docstring.
"""

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
from shardkit.inspect import INTERCONNECTS, Collective, CommReport, Interconnect, comms
from shardkit.layout import describe, mesh, shard, sharding, spec
from shardkit.show import ShardingView, show

__all__ = [
    "INTERCONNECTS",
    "Collective",
    "CommReport",
    "Interconnect",
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
    "random",
    "shard",
    "sharding",
    "show",
    "spec",
    "testing",
    "train",
    "use_cpu_devices",
]
