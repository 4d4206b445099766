"""Compiled-program introspection: collectives, memory and a communication cost model.

``comms(f, *args)`` compiles ``f`` and returns a :class:`CommReport` listing every
collective (kind, shapes, bytes per device, loop counts, mesh axes), the per-device
memory and a predicted time under an :class:`Interconnect` model.
"""

from shardkit.inspect._comms import comms, report_from_text
from shardkit.inspect._interconnect import INTERCONNECTS, CollectiveFit, Interconnect
from shardkit.inspect._presets import interconnect
from shardkit.inspect._report import (
    Collective,
    CommDiff,
    CommReport,
    MemoryStats,
    UnknownOp,
    UnorderedPair,
)

__all__ = [
    "INTERCONNECTS",
    "Collective",
    "CollectiveFit",
    "CommDiff",
    "CommReport",
    "Interconnect",
    "MemoryStats",
    "UnknownOp",
    "UnorderedPair",
    "comms",
    "interconnect",
    "report_from_text",
]
