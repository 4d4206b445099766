"""Order statistics of timings and of paired candidate/baseline ratios.

Pure Python, no JAX: everything here is tested with fake timings. Medians rather than
means because timing noise is one-sided (a preempted run is slower, never faster).
Ratios are formed round by round (candidate time / baseline time of the same round of
the interleaved schedule) and their median reported, so that a drift in the machine's
speed that affects both members of a pair cancels out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Summary", "paired_ratios", "ratio_median", "summarize"]


@dataclass(frozen=True)
class Summary:
    """Median, minimum and maximum of repeated timings, in seconds.

    Attributes:
      median: median of the samples.
      min: fastest sample.
      max: slowest sample.
      n: number of samples.
    """

    median: float
    min: float
    max: float
    n: int


def summarize(samples: Sequence[float], /) -> Summary:
    """Summarize repeated timings.

    Args:
      samples: one or more durations in seconds.

    Returns:
      The :class:`Summary` of the samples.

    Raises:
      ValueError: ``samples`` is empty or holds a negative or non-finite value.

    Example:
      >>> summarize([3.0, 1.0, 2.0, 10.0])
      Summary(median=2.5, min=1.0, max=10.0, n=4)
    """
    values = [float(s) for s in samples]
    if not values:
        raise ValueError("summarize: samples=[] is empty; time at least one run")
    bad = [v for v in values if not (v >= 0.0 and v != float("inf"))]
    if bad:
        raise ValueError(f"summarize: samples hold {bad[:3]!r}; durations must be finite and >= 0")
    return Summary(statistics.median(values), min(values), max(values), len(values))


def paired_ratios(candidate: Sequence[float], baseline: Sequence[float], /) -> list[float]:
    """Round-by-round ratios ``candidate[i] / baseline[i]``.

    Args:
      candidate: a candidate's timings, one per round of the interleaved schedule.
      baseline: the baseline's timings of the same rounds.

    Returns:
      One ratio per round (``inf`` where the baseline took zero time).

    Raises:
      ValueError: the two sequences differ in length or are empty.

    Example:
      >>> paired_ratios([2.0, 4.0], [1.0, 1.0])
      [2.0, 4.0]
    """
    if len(candidate) != len(baseline) or not candidate:
        raise ValueError(
            f"paired_ratios: len(candidate)={len(candidate)} and len(baseline)="
            f"{len(baseline)} must be equal and non-zero (one timing per round)"
        )
    return [c / b if b > 0 else float("inf") for c, b in zip(candidate, baseline, strict=True)]


def ratio_median(candidate: Sequence[float], baseline: Sequence[float], /) -> float:
    """Median of the round-by-round ratios (see :func:`paired_ratios`).

    Example:
      >>> ratio_median([2.0, 4.0, 30.0], [1.0, 1.0, 10.0])
      3.0
    """
    return statistics.median(paired_ratios(candidate, baseline))
