"""The seed tutorials' scenarios, solved with shardkit and checked against NumPy.

``shardkit tour`` runs them all; the tests run each one. Scenarios live in the
package (not beside it) so that an installed ``shardkit`` can run its own tour.
"""

from __future__ import annotations

import importlib

from shardkit.examples._scenario import Checks, Outcome, Scenario, register, run_scenario, scenarios

__all__ = ["Checks", "Outcome", "Scenario", "load_all", "register", "run_scenario", "scenarios"]

_MODULES = (
    "layouts",
    "automatic",
    "manual",
    "inspection",
    "matmul",
    "fft",
    "linalg",
    "in_jit",
    "training",
)


def load_all() -> None:
    """Import every scenario module so that its scenarios register themselves."""
    for name in _MODULES:
        importlib.import_module(f"shardkit.examples.{name}")
