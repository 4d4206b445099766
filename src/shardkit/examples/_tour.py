"""``shardkit tour``: run every seed scenario, print pictures and one verdict each."""

from __future__ import annotations

import time

import jax
from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from shardkit._progress import busy
from shardkit.examples._catalog import scenarios
from shardkit.examples._scenario import Outcome, Scenario, run_scenario

__all__ = ["list_tour", "run_tour"]


def list_tour(console: Console | None = None, /, *, only: str | None = None) -> int:
    """Print the tour's scenario keys and titles (``shardkit tour --list``).

    Args:
      console: where to print (default: a new rich console on stdout).
      only: a regular expression selecting scenarios by key or title.

    Returns:
      How many scenarios were listed.

    Raises:
      ValueError: ``only`` is not a regular expression or selects no scenario.
    """
    console = console or Console()
    selected = _select(only)
    table = Table("key", "title", "seed", "devices", box=None, header_style="bold")
    for s in selected:
        table.add_row(s.key, s.title, s.seed, str(s.min_devices))
    console.print(table)
    return len(selected)


def _select(only: str | None) -> list[Scenario]:
    selected = scenarios(only)
    if not selected:
        keys = ", ".join(s.key for s in scenarios())
        raise ValueError(
            f"only={only!r} matches no scenario key or title; the keys are: {keys} "
            "(shardkit tour --list shows their titles)"
        )
    return selected


def run_tour(
    console: Console | None = None, /, *, only: str | None = None, pictures: bool = True
) -> list[Outcome]:
    """Run the tour's scenarios in order, each one's header printed before it runs.

    Scenarios needing more devices than exist are reported as skipped, not run. On a
    terminal a spinner runs while a scenario computes; in a log a plain line marks it.

    Args:
      console: where to print (default: a new rich console on stdout).
      only: a regular expression selecting scenarios by key or title.
      pictures: print each scenario's sharding pictures and notes, not only verdicts.

    Returns:
      The outcomes, one per scenario run.

    Raises:
      ValueError: ``only`` is not a regular expression or selects no scenario (the
        message lists the scenario keys).
    """
    console = console or Console()
    selected = _select(only)
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
        if pictures:
            console.print(Rule(f"{scenario.key}  {scenario.title}", style="dim"))
            with busy(console if console.is_terminal else None, f"running {scenario.key}"):
                outcome = run_scenario(scenario)
            console.print(outcome.render())
        else:
            with busy(console, f"running {scenario.key} {scenario.title}"):
                outcome = run_scenario(scenario)
            console.print(outcome.verdict())
        outcomes.append(outcome)
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
