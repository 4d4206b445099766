"""The tour's scenarios, listed module by module (no registration by import side effect)."""

from __future__ import annotations

import re

from shardkit.examples._scenario import Scenario, _natural_key

__all__ = ["catalog", "scenarios"]


def catalog() -> tuple[Scenario, ...]:
    """Every scenario of the tour, module by module.

    The scenario modules are imported on first use, not with ``shardkit``: they pull
    in SciPy and the training recipes.
    """
    from shardkit.examples import (
        _automatic,
        _fft,
        _in_jit,
        _inspection,
        _layouts,
        _linalg,
        _manual,
        _matmul,
        _spectral,
        _training,
    )

    return (
        *_layouts.SCENARIOS,
        *_automatic.SCENARIOS,
        *_manual.SCENARIOS,
        *_inspection.SCENARIOS,
        *_matmul.SCENARIOS,
        *_fft.SCENARIOS,
        *_linalg.SCENARIOS,
        *_spectral.SCENARIOS,
        *_in_jit.SCENARIOS,
        *_training.SCENARIOS,
    )


def scenarios(only: str | None = None) -> list[Scenario]:
    """The tour's scenarios in key order, optionally those whose key or title match.

    Raises:
      ValueError: ``only`` is not a regular expression.
    """
    found = sorted(catalog(), key=lambda s: _natural_key(s.key))
    if only is None:
        return found
    try:
        pattern = re.compile(only, re.IGNORECASE)
    except re.error as e:
        raise ValueError(
            f"only={only!r} is not a regular expression ({e}); write e.g. '002', "
            "'fft|lu' or '004/train', or escape special characters with a backslash"
        ) from None
    return [s for s in found if pattern.search(s.key) or pattern.search(s.title)]
