"""Compiled-program introspection: collectives, memory and a communication cost model.

``comms(f, *args)`` compiles ``f`` and returns a :class:`CommReport` listing every
collective (kind, shapes, bytes per device, loop counts, mesh axes), the per-device
memory and a predicted time under an :class:`Interconnect` model.
"""

from shardkit.inspect.comms import comms, report_from_text
from shardkit.inspect.interconnect import INTERCONNECTS, Interconnect, interconnect
from shardkit.inspect.report import Collective, CommDiff, CommReport, MemoryStats, UnknownOp

__all__ = [
    "INTERCONNECTS",
    "Collective",
    "CommDiff",
    "CommReport",
    "Interconnect",
    "MemoryStats",
    "UnknownOp",
    "comms",
    "interconnect",
    "report_from_text",
]
