"""Tour scenarios pass (every third one by default, all with the flag), each on its own."""

from __future__ import annotations

import pytest
from rich.console import Console

from _matrix import FULL
from shardkit.examples import Checks, Scenario, run_scenario, run_tour, scenarios

ALL = scenarios()
# `make run` (the tour, which CI runs from a fresh clone) runs every scenario; the
# default test run takes every third one, SHARDKIT_FULL_TESTS=1 all of them.
# The heaviest, 002/4.6 (eigh), is left to tests/linalg/test_spectral.py and the tour.
SAMPLED = ALL if FULL else [s for s in ALL[::3] if s.key != "002/4.6"]


@pytest.mark.parametrize("scenario", SAMPLED, ids=[s.key for s in SAMPLED])
def test_scenario_passes(scenario) -> None:  # type: ignore[no-untyped-def]
    outcome = run_scenario(scenario)
    assert outcome.failed == ()
    assert outcome.passed


def test_tour_covers_the_seeds() -> None:
    keys = {s.key for s in ALL}
    assert len(keys) == len(ALL), "two scenarios share a key"
    assert {"002/1.1", "002/1.2", "002/1.3", "002/1.4", "002/2"} <= keys
    assert {s.seed for s in ALL} >= {"000", "001", "002", "003", "004"}


def test_checks_record_failures_without_raising() -> None:
    c = Checks()
    assert not c.close("wrong", [1.0], [2.0])
    assert not c.raises("no raise", ValueError, lambda: None)
    assert not c.raises("wrong message", ValueError, lambda: int("x"), match="zzz")
    assert c.raises("right", ValueError, lambda: int("x"), match="invalid literal")
    assert len(c.failed) == 3


def test_failed_scenario_is_reported() -> None:
    def broken(c: Checks) -> None:
        c.check("fine", True)
        raise RuntimeError("boom")

    outcome = run_scenario(Scenario("x/1", "broken", "x", broken))
    assert not outcome.ok
    assert "boom" in outcome.failed[0]
    assert "FAIL" in outcome.verdict().plain


def test_run_tour_prints_verdicts_and_rejects_empty_selection() -> None:
    console = Console(record=True, width=120)
    outcomes = run_tour(console, only="002/1\\.1", pictures=True)
    assert [o.scenario.key for o in outcomes] == ["002/1.1"]
    text = console.export_text()
    assert "PASS 002/1.1" in text
    assert "CPU 7" in text or "7" in text
    with pytest.raises(ValueError, match="matches no scenario"):
        run_tour(console, only="no-such-scenario")


def test_tour_prints_a_scenario_header_before_running_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardkit.examples import _catalog

    console = Console(record=True, width=120)

    def sees_its_header(c: Checks) -> None:
        text = console.export_text(clear=False)
        c.check("header printed before the run", "zz/header" in text and "printed first" in text)

    key = "zz/header"
    extra = Scenario(key, "printed first", "zz", sees_its_header, 1)
    listed = _catalog.catalog()
    monkeypatch.setattr(_catalog, "catalog", lambda: (*listed, extra))
    for pictures in (True, False):
        console.export_text()  # clear
        (outcome,) = run_tour(console, only="^zz/header$", pictures=pictures)
        assert outcome.ok, outcome.failed


def test_bad_or_empty_selection_lists_the_keys() -> None:
    with pytest.raises(ValueError, match=r"not a regular expression .*escape"):
        scenarios("[")
    with pytest.raises(ValueError, match=r"matches no scenario.*002/1\.1.*--list"):
        run_tour(Console(record=True), only="no-such-scenario")
