"""What a tour scenario is, and the runner behind ``shardkit tour``.

A scenario is a function taking a :class:`Checks` recorder. It computes something with
shardkit on simulated devices and records checks against NumPy; it may add pictures
and notes. Scenarios never raise for a failed check: the recorder keeps the failure,
so one broken scenario does not hide the others.
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from shardkit.testing import assert_close

__all__ = ["Checks", "Outcome", "Scenario", "run_scenario", "scenario"]


@dataclass(frozen=True)
class Scenario:
    """One tour step: ``key`` such as ``"002/1.1"``, a title and the seed it solves."""

    key: str
    title: str
    seed: str
    fn: Callable[[Checks], None]
    min_devices: int = 8


def scenario(
    key: str, title: str, *, seed: str, min_devices: int = 8
) -> Callable[[Callable[[Checks], None]], Scenario]:
    """Decorator making a function a tour step; list it in its module's ``SCENARIOS``."""

    def wrap(fn: Callable[[Checks], None]) -> Scenario:
        return Scenario(key, title, seed, fn, min_devices)

    return wrap


def _natural_key(key: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", key)]


@dataclass
class Checks:
    """Records the checks, pictures and notes of one scenario."""

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    items: list[RenderableType] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        """Record a boolean check; ``detail`` explains a failure."""
        (self.passed if ok else self.failed).append(name if ok else f"{name}: {detail}")
        return ok

    def close(self, name: str, actual: Any, desired: Any, **kwargs: Any) -> bool:
        """Record whether ``actual`` matches the NumPy ``desired`` (see ``assert_close``)."""
        try:
            assert_close(actual, desired, what=name, **kwargs)
        except AssertionError as e:
            return self.check(name, False, str(e))
        return self.check(name, True)

    def raises(
        self, name: str, exc: type[BaseException], fn: Callable[[], Any], match: str = ""
    ) -> bool:
        """Record that ``fn()`` raises ``exc`` with a message matching ``match``."""
        try:
            fn()
        except exc as e:
            ok = re.search(match, str(e)) is not None
            return self.check(name, ok, f"message {str(e)[:200]!r} lacks {match!r}")
        return self.check(name, False, f"no {exc.__name__} raised")

    def show(self, x: Any, title: str = "", **kwargs: Any) -> None:
        """Add a picture of ``x``'s sharding, headed by ``title`` and its description."""
        from shardkit.layout import describe
        from shardkit.show import show

        head = f"{title}: " if title else ""
        self.items.append(Text(f"{head}{describe(x)}", style="bold"))
        self.items.append(show(x, **kwargs))

    def note(self, text: str) -> None:
        """Add a line of explanation."""
        self.items.append(Text(text, style="dim"))


@dataclass(frozen=True)
class Outcome:
    """What running a scenario gave: checks passed and failed, pictures, time."""

    scenario: Scenario
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    items: tuple[RenderableType, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.failed and bool(self.passed)

    def verdict(self) -> Text:
        """``PASS 002/1.1 transposed sharding (2 checks, 0.05 s)`` in colour."""
        status = ("PASS", "green") if self.ok else ("FAIL", "bold red")
        text = Text.assemble(
            (f"{status[0]} ", status[1]),
            (f"{self.scenario.key:<10} ", "cyan"),
            self.scenario.title,
            f"  ({len(self.passed)} check{'s' * (len(self.passed) != 1)} passed, "
            f"{self.seconds:.2f} s)",
        )
        for failure in self.failed or ("no check recorded",) * (not self.passed):
            text.append(f"\n     - {failure}", style="red")
        return text

    def render(self) -> Group:
        return Group(*self.items, self.verdict())


def run_scenario(scenario: Scenario) -> Outcome:
    """Run one scenario, turning an unexpected exception into a failed check."""
    checks = Checks()
    start = time.perf_counter()
    try:
        scenario.fn(checks)
    except Exception as e:
        tb = traceback.format_exception(e)
        checks.check("ran to the end", False, "".join(tb[-3:]).strip())
    return Outcome(
        scenario,
        tuple(checks.passed),
        tuple(checks.failed),
        tuple(checks.items),
        time.perf_counter() - start,
    )


def run_all(selected: Iterable[Scenario]) -> list[Outcome]:
    """Run scenarios in order."""
    return [run_scenario(s) for s in selected]
