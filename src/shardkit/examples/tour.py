"""``shardkit tour``: run every seed scenario, print pictures and one verdict each."""

from __future__ import annotations

import time

import jax
from rich.console import Console
from rich.rule import Rule

from shardkit.examples._scenario import Outcome, run_scenario, scenarios

__all__ = ["run_tour"]


def run_tour(
    console: Console | None = None, /, *, only: str | None = None, pictures: bool = True
) -> list[Outcome]:
    """Run the tour's scenarios in order, printing as each one finishes.

    Scenarios needing more devices than exist are reported as skipped, not run.

    Args:
      console: where to print (default: a new rich console on stdout).
      only: a regular expression selecting scenarios by key or title.
      pictures: print each scenario's sharding pictures and notes, not only verdicts.

    Returns:
      The outcomes, one per scenario run.

    Raises:
      ValueError: ``only`` selects no scenario.
    """
    console = console or Console()
    selected = scenarios(only)
    if not selected:
        raise ValueError(f"run_tour: only={only!r} matches no scenario key or title")
    count = jax.device_count()
    console.print(
        Rule(
            f"shardkit tour: {len(selected)} scenarios on {count} {jax.devices()[0].platform} devices"
        )
    )
    outcomes: list[Outcome] = []
    start = time.perf_counter()
    for scenario in selected:
        if scenario.min_devices > count:
            console.print(f"[yellow]SKIP[/] {scenario.key} needs {scenario.min_devices} devices")
            continue
        outcome = run_scenario(scenario)
        outcomes.append(outcome)
        if pictures:
            console.print(Rule(f"{scenario.key}  {scenario.title}", style="dim"))
            console.print(outcome.render())
        else:
            console.print(outcome.verdict())
    failed = [o.scenario.key for o in outcomes if not o.ok]
    checks = sum(len(o.passed) for o in outcomes)
    elapsed = time.perf_counter() - start
    summary = (
        f"{len(outcomes) - len(failed)} of {len(outcomes)} scenarios passed "
        f"({checks} checks) in {elapsed:.1f} s"
    )
    console.print(Rule(style="green" if not failed else "red"))
    console.print(f"[bold {'green' if not failed else 'red'}]{summary}[/]")
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/]")
    return outcomes
