"""A benchmark record: one function's timings in one case, typed, and its JSON form.

:func:`~shardkit.bench.measure_case` returns :class:`Record` objects; ``results.json``
stores each as the object :meth:`Record.to_json` writes (schema ``shardkit.bench/1``,
see :mod:`shardkit.bench._report`), and :meth:`Record.from_json` reads one back,
checking every key and type, so that the report writers and the suites' conclusions
read typed fields instead of string keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shardkit.bench._stats import Summary, summarize

__all__ = ["Record", "check_fields"]

Scalar = int | float | str


def _kind_ok(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def check_fields(where: str, obj: Any, fields: Mapping[str, type], /) -> None:
    """Raise unless ``obj`` is a dict holding every key of ``fields`` with a value of its type.

    ``float`` accepts integers too (JSON writes ``2.0`` as ``2`` in other tools); no
    type accepts a bool but ``bool``.

    Raises:
      ValueError: naming ``where``, the first missing key or wrongly typed value.

    Example:
      >>> check_fields("rec", {"n": True}, {"n": int})
      Traceback (most recent call last):
      ...
      ValueError: rec['n']=True is bool, expected int
    """
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is {type(obj).__name__}, expected an object")
    for key, kind in fields.items():
        if key not in obj:
            raise ValueError(f"{where} lacks the key {key!r}")
        value = obj[key]
        if not _kind_ok(value, kind):
            raise ValueError(
                f"{where}[{key!r}]={value!r} is {type(value).__name__}, expected {kind.__name__}"
            )


_JSON_FIELDS: dict[str, type] = {
    "suite": str,
    "case": str,
    "candidate": str,
    "is_baseline": bool,
    "params": dict,
    "compile_s": float,
    "times_s": list,
    "median_s": float,
    "min_s": float,
    "max_s": float,
    "repeats": int,
    "metrics": dict,
}


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass(frozen=True)
class Record:
    """One function (a candidate or the baseline) timed in one case.

    The median, minimum, maximum and round count are derived from ``times_s``, so a
    record cannot disagree with its own timings.

    Attributes:
      suite: the suite's name.
      case: the case's name, unique within its suite (e.g. ``"8/rows/2048"``).
      candidate: the function's name (the baseline's name for the baseline).
      times_s: one duration per interleaved round, in round order.
      is_baseline: this is the case's baseline.
      baseline: the case's baseline name, or ``None`` when the case has none.
      params: what the case measures (scalars: table columns and plot axes).
      metrics: derived figures (bandwidths, bytes, prediction errors); ``None`` where
        a figure does not apply.
      compile_s: seconds spent compiling the function.
      ratio_median: median over rounds of this function's time over the baseline's in
        the same round; ``None`` for the baseline and without one.

    Example:
      >>> r = Record("matmul", "8/rows/256", "ring", (0.3, 0.1, 0.2), params={"n": 256})
      >>> r.median_s, r.repeats, r.value("n"), r.value("candidate")
      (0.2, 3, 256, 'ring')
      >>> Record.from_json(r.to_json()) == r
      True
    """

    suite: str
    case: str
    candidate: str
    times_s: tuple[float, ...]
    is_baseline: bool = False
    baseline: str | None = None
    params: Mapping[str, Scalar] = field(default_factory=dict)
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    compile_s: float = 0.0
    ratio_median: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "times_s", tuple(float(t) for t in self.times_s))
        summarize(self.times_s)  # raises on no timings or a negative one

    @property
    def summary(self) -> Summary:
        """Median, minimum, maximum and count of ``times_s``."""
        return summarize(self.times_s)

    @property
    def median_s(self) -> float:
        """The median of ``times_s``."""
        return self.summary.median

    @property
    def min_s(self) -> float:
        """The fastest round."""
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        """The slowest round."""
        return max(self.times_s)

    @property
    def repeats(self) -> int:
        """How many rounds were timed."""
        return len(self.times_s)

    @property
    def speed(self) -> float:
        """The ratio to the baseline where there is one, else the median time.

        The round-by-round ratio survives drifts of a shared machine's speed, so
        candidates of one case are best ranked by it.
        """
        return self.ratio_median if self.ratio_median is not None else self.median_s

    def metric(self, key: str, /) -> float | None:
        """A metric, ``None`` when absent."""
        return self.metrics.get(key)

    def need(self, key: str, /) -> float:
        """A metric that must be there.

        Raises:
          KeyError: the metric is absent or ``None`` (the message names the record).
        """
        value = self.metrics.get(key)
        if value is None:
            raise KeyError(
                f"{self.suite} {self.case} {self.candidate}: no metric {key!r} "
                f"(has {sorted(k for k, v in self.metrics.items() if v is not None)})"
            )
        return value

    def value(self, key: str, /) -> Any:
        """What a table or plot names ``key``: a ``params`` key, a ``metrics`` key, or a field."""
        if key in self.params:
            return self.params[key]
        if key in self.metrics:
            return self.metrics[key]
        return getattr(self, key, None)

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` object (non-finite figures become ``null``)."""
        s = self.summary
        return {
            "suite": self.suite,
            "case": self.case,
            "candidate": self.candidate,
            "baseline": self.baseline,
            "is_baseline": self.is_baseline,
            "params": dict(self.params),
            "compile_s": self.compile_s,
            "times_s": list(self.times_s),
            "median_s": s.median,
            "min_s": s.min,
            "max_s": s.max,
            "repeats": s.n,
            "ratio_median": _finite(self.ratio_median),
            "metrics": {k: _finite(v) for k, v in self.metrics.items()},
        }

    @classmethod
    def from_json(cls, obj: Any, /, *, where: str = "record") -> Record:
        """Read a ``results.json`` record back, checking its keys and types.

        Raises:
          ValueError: a missing key, a wrongly typed value, or ``repeats`` that is not
            the number of timings (the message names ``where`` and the key).
        """
        check_fields(where, obj, _JSON_FIELDS)
        baseline, ratio = obj.get("baseline"), obj.get("ratio_median")
        if baseline is not None and not isinstance(baseline, str):
            raise ValueError(f"{where}['baseline']={baseline!r} must be a string or null")
        if ratio is not None and not _kind_ok(ratio, float):
            raise ValueError(f"{where}['ratio_median']={ratio!r} must be a number or null")
        if len(obj["times_s"]) != obj["repeats"]:
            raise ValueError(f"{where}: len(times_s) != repeats")
        try:
            return cls(
                suite=obj["suite"],
                case=obj["case"],
                candidate=obj["candidate"],
                times_s=tuple(obj["times_s"]),
                is_baseline=obj["is_baseline"],
                baseline=baseline,
                params=dict(obj["params"]),
                metrics=dict(obj["metrics"]),
                compile_s=float(obj["compile_s"]),
                ratio_median=None if ratio is None else float(ratio),
            )
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}['times_s']: {e}") from None
