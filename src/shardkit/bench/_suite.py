"""What a benchmark suite is: a :class:`Suite` and the :class:`SuiteConfig` it runs under.

A suite turns a :class:`SuiteConfig` (sizes, meshes, quick or full) into a list of
:class:`~shardkit.bench._timing.Case`, and declares how its results are tabulated and
plotted, so that the report writer needs no suite-specific code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from shardkit.bench._record import Record
    from shardkit.bench._timing import Case
    from shardkit.layout.internal import AxisTypeLike

_AXIS_NAMES = "xyzwuv"

__all__ = ["Column", "PlotSpec", "Suite", "SuiteConfig"]


@dataclass(frozen=True)
class Column:
    """A metric shown as a table column.

    Attributes:
      key: key in a record's ``metrics`` (or ``params``) mapping.
      title: column heading.
      unit: ``"s"``, ``"B/s"``, ``"B"``, ``"ratio"``, ``"%"`` (a signed change),
        ``"fraction"`` (a share, as a percentage) or ``""``: how to format it.
    """

    key: str
    title: str
    unit: str = ""


@dataclass(frozen=True)
class PlotSpec:
    """One figure per distinct value of ``panel``: ``y`` against ``x``, a line per ``series``.

    Attributes:
      name: file stem, e.g. ``"time"`` (the file is ``<suite>-<name>-<panel>.png``).
      x: a ``params`` key (numbers), on a log axis.
      y: ``"median_s"`` or a ``metrics`` key, on a log axis.
      panel: a ``params`` key; one figure per value.
      series: a ``params`` key; one line per value.
      ylabel: y-axis label.
      xlabel: x-axis label.
    """

    name: str
    x: str
    y: str
    panel: str
    series: str
    ylabel: str
    xlabel: str


@dataclass(frozen=True)
class SuiteConfig:
    """What a suite is asked to run.

    Attributes:
      sizes: problem sizes (the suite says what they measure), or ``None`` for the
        suite's defaults.
      meshes: mesh shapes, e.g. ``("8", "2x4")``.
      quick: small sizes for a fast smoke run.
    """

    sizes: tuple[int, ...] | None
    meshes: tuple[str, ...]
    quick: bool = False

    def pick_sizes(self, quick: tuple[int, ...], full: tuple[int, ...], /) -> tuple[int, ...]:
        """The sizes asked for, else the suite's ``quick`` or ``full`` defaults."""
        return self.sizes or (quick if self.quick else full)

    def mesh_grid(self, *, axis_types: AxisTypeLike = "auto") -> list[tuple[str, Mesh]]:
        """``(label, mesh)`` for each mesh asked for, axes named ``x``, ``y``, ``z``...

        The label is the shape as written on the command line, e.g. ``"2x4"``.
        """
        from shardkit.layout import mesh, parse_mesh_shape

        grid = []
        for text in self.meshes:
            dims = parse_mesh_shape(text)
            m = mesh(dims, tuple(_AXIS_NAMES[: len(dims)]), axis_types=axis_types)
            grid.append(("x".join(map(str, dims)), m))
        return grid


@dataclass(frozen=True)
class Suite:
    """A benchmark suite (the built-in ones are :func:`~shardkit.bench.suites`).

    Attributes:
      name: the name used on the command line.
      description: one paragraph for the report.
      baseline: what the baseline of every case is and why.
      cases: builds the cases for a :class:`SuiteConfig`.
      columns: metrics shown in the tables, after the timings.
      plots: figures drawn in the report.
      key_params: ``params`` keys shown as the leading table columns.
      notes: returns lines for the report (definitions, where predictions come from).
      conclusions: returns lines drawn from the suite's records once they are measured
        (e.g. the median prediction error), appended to the notes.
      derive: returns the suite's records with figures that need several records
        added to their metrics (e.g. an efficiency against another case's time); run
        once all the suite's cases are measured, before the conclusions.
    """

    name: str
    description: str
    baseline: str
    cases: Callable[[SuiteConfig], list[Case]]
    columns: Sequence[Column] = field(default_factory=tuple)
    plots: Sequence[PlotSpec] = field(default_factory=tuple)
    key_params: Sequence[str] = field(default_factory=tuple)
    notes: Callable[[], list[str]] = list
    conclusions: Callable[[Sequence[Record]], list[str]] = lambda records: []
    derive: Callable[[Sequence[Record]], list[Record]] = list
