"""The seed tutorials' scenarios, solved with shardkit and checked against NumPy.

``shardkit tour`` runs them all (:func:`run_tour`); the tests run each one. Scenarios
live in the package (not beside it) so that an installed ``shardkit`` can run its own
tour. Each scenario module lists its scenarios in a ``SCENARIOS`` tuple and the
catalog lists the modules: nothing registers itself on import.
"""

from shardkit.examples._catalog import scenarios
from shardkit.examples._scenario import Checks, Outcome, Scenario, run_scenario, scenario
from shardkit.examples._tour import list_tour, run_tour

__all__ = [
    "Checks",
    "Outcome",
    "Scenario",
    "list_tour",
    "run_scenario",
    "run_tour",
    "scenario",
    "scenarios",
]
