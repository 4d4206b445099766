"""Which collectives of a compiled program no data dependency orders.

XLA's CPU runtime runs the instructions of one device's program concurrently as soon
as their operands are ready, on a pool of one thread per device. Two collectives (or
a ``while``/``conditional`` holding collectives) that no chain of operands orders can
then start in different orders on different devices; each blocks its thread in a
rendezvous until every device joins, the pool runs out of threads, and the process
aborts after 40 s ("Termination timeout for all reduce RendezvousKey...", seen on
8 simulated CPU devices with ``jit(lstsq)`` before the fix). Accelerator runtimes
issue collectives in one stream order and do not hang this way, but an unordered
pair is still a schedule the compiler, not the program, decides.

:func:`unordered_collectives` lists those pairs, per computation: the program is safe
on every backend when it returns nothing.
"""

from __future__ import annotations

import re

from shardkit.inspect._hlo import Computation, Instruction, Module
from shardkit.inspect._program import KINDS

_COLLECTIVE = frozenset((*KINDS, *(f"{k}-start" for k in KINDS), "send", "recv"))
_PREDECESSORS = re.compile(r"%?([\w.\-]+)")


def _deps(instr: Instruction) -> list[str]:
    """Operands and control predecessors: everything that must finish before ``instr``."""
    control = instr.attrs.get("control-predecessors", "").strip("{}")
    return [*instr.operands, *_PREDECESSORS.findall(control)]


def _bears(module: Module, instr: Instruction, memo: dict[str, bool]) -> bool:
    """Whether ``instr`` is a collective or calls a computation that runs one."""
    if instr.opcode in _COLLECTIVE:
        return True
    for _, callee in module.called(instr):
        if callee not in memo:
            memo[callee] = False  # recursion guard; HLO has no recursive calls
            comp = module.computations[callee]
            memo[callee] = any(_bears(module, i, memo) for i in comp.instructions)
        if memo[callee]:
            return True
    return False


def _unordered_in(
    module: Module, comp: Computation, memo: dict[str, bool]
) -> list[tuple[Instruction, Instruction]]:
    bearing = [i for i in comp.instructions if _bears(module, i, memo)]
    if len(bearing) < 2:
        return []
    ancestors: dict[str, frozenset[str]] = {}
    for instr in comp.instructions:  # printed in a topological order
        found: set[str] = set()
        for dep in _deps(instr):
            if dep in comp.by_name:
                found.add(dep)
                found |= ancestors.get(dep, frozenset())
        ancestors[instr.name] = frozenset(found)
    return [
        (x, y)
        for k, x in enumerate(bearing)
        for y in bearing[k + 1 :]
        if x.name not in ancestors[y.name] and y.name not in ancestors[x.name]
    ]


def unordered_collectives(module: Module) -> list[tuple[Instruction, Instruction]]:
    """Pairs of collective-running instructions of one computation that may run concurrently.

    An instruction runs a collective when it is one, or is a ``while``, ``conditional``
    or ``call`` whose computations run one. Two of them in one computation are ordered
    when one is among the other's transitive operands or control predecessors.
    Computations are taken in the module's order, each pair once.
    """
    memo: dict[str, bool] = {}
    return [
        pair for comp in module.computations.values() for pair in _unordered_in(module, comp, memo)
    ]
