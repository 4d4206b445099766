"""``results.json``, ``report.md`` and ``report.html`` (with PNG plots) of a benchmark run.

The report is written from the JSON document alone, so a saved ``results.json`` can be
re-rendered. Plots need matplotlib (the ``bench`` extra); it is imported only when
plots are drawn, through its object-oriented API (no pyplot, no global backend change).

Schema ``shardkit.bench/1`` of ``results.json``::

    {
      "schema": "shardkit.bench/1",
      "created": str,              # UTC ISO 8601
      "wall_s": float,             # the whole run, compile and reports excluded
      "config": {
        "suites": [str], "meshes": [str], "sizes": [int] | null,
        "repeat": int | null, "quick": bool,
        "timing": {"warmup": int, "repeat": int | null, "min_repeat": int,
                   "max_repeat": int, "budget_s": float}
      },
      "environment": {...},        # shardkit.bench._env.environment()
      "suites": {
        NAME: {
          "description": str, "baseline": str, "notes": [str],
          "key_params": [str],
          "columns": [{"key": str, "title": str, "unit": str}],
          "plots": [{"name": str, "x": str, "y": str, "panel": str, "series": str,
                     "xlabel": str, "ylabel": str}]
        }
      },
      "records": [
        {
          "suite": str, "case": str, "candidate": str,
          "baseline": str | null,    # the case's baseline name, null if none
          "is_baseline": bool,
          "params": {str: int | float | str},
          "compile_s": float,
          "times_s": [float],        # one per interleaved round
          "median_s": float, "min_s": float, "max_s": float, "repeats": int,
          "ratio_median": float | null,  # median over rounds of t / t_baseline
          "metrics": {str: float | null}
        }
      ]
    }

Units: seconds, bytes, bytes per second. Plot and table keys name a ``params`` key, a
``metrics`` key, or a record field (``candidate``, ``median_s``, ...).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from shardkit._preflight import require
from shardkit._typing import JSONObject
from shardkit.bench._record import Record, check_fields
from shardkit.bench._suite import Column, PlotSpec

__all__ = [
    "SCHEMA",
    "format_value",
    "read_results",
    "records",
    "terminal_summary",
    "validate_results",
    "write_html",
    "write_markdown",
    "write_plots",
    "write_report",
]

SCHEMA = "shardkit.bench/1"
"""The ``schema`` value of ``results.json`` documents written by this module."""

_TOP = {
    "schema": str,
    "created": str,
    "wall_s": float,
    "config": dict,
    "environment": dict,
    "suites": dict,
    "records": list,
}
_SUITE = {
    "description": str,
    "baseline": str,
    "notes": list,
    "key_params": list,
    "columns": list,
    "plots": list,
}


def validate_results(data: Any, /) -> None:
    """Raise unless ``data`` follows the ``shardkit.bench/1`` schema (module docstring).

    Raises:
      ValueError: naming the first missing key or wrongly typed value.
    """
    check_fields("results", data, _TOP)
    if data["schema"] != SCHEMA:
        raise ValueError(f"results['schema']={data['schema']!r}; expected {SCHEMA!r}")
    for name, suite in data["suites"].items():
        check_fields(f"results['suites'][{name!r}]", suite, _SUITE)
    records(data)


def records(data: Mapping[str, Any], /, suite: str | None = None) -> list[Record]:
    """The records of a ``results.json`` document (of one ``suite`` if given), checked.

    Raises:
      ValueError: a record that does not follow the schema, or names a suite the
        document does not describe (the message names the record).
    """
    out = []
    for i, obj in enumerate(data["records"]):
        where = f"results['records'][{i}]"
        rec = Record.from_json(obj, where=where)
        if rec.suite not in data["suites"]:
            raise ValueError(f"{where}['suite']={rec.suite!r} is not in results['suites']")
        if suite is None or rec.suite == suite:
            out.append(rec)
    return out


def _columns(meta: Mapping[str, Any]) -> list[Column]:
    return [Column(**c) for c in meta["columns"]]


def _plots(meta: Mapping[str, Any]) -> list[PlotSpec]:
    return [PlotSpec(**p) for p in meta["plots"]]


def read_results(path: str | Path, /) -> JSONObject:
    """Load and validate a ``results.json``."""
    data = json.loads(Path(path).read_text())
    validate_results(data)
    return data


def _scaled(value: float, units: Sequence[tuple[str, float]]) -> str:
    for unit, scale in units:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    unit, scale = units[-1]
    return f"{value / scale:.3g} {unit}"


def format_value(value: Any, unit: str = "", /) -> str:
    """Format a table cell: seconds, bytes, bytes per second, ratios or percentages.

    Example:
      >>> format_value(0.00123, "s"), format_value(2.5e9, "B/s"), format_value(65536, "B")
      ('1.23 ms', '2.5 GB/s', '64 KiB')
      >>> format_value(None, "s"), format_value(-0.5, "%"), format_value(1.234, "ratio")
      ('-', '-50%', '1.23x')
      >>> format_value(0.8, "fraction")
      '80%'

    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, str):
        return value
    if unit == "s":
        return _scaled(value, (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)))
    if unit == "B/s":
        return _scaled(value, (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)))
    if unit == "B":
        return _scaled(value, (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)))
    if unit == "ratio":
        return f"{value:.3g}x"
    if unit == "%":
        return f"{value * 100:+.0f}%"
    if unit == "fraction":
        return f"{value:.0%}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _param_unit(key: str) -> str:
    return "B" if key.startswith("bytes") else ""


def table_rows(data: Mapping[str, Any], suite: str, /) -> tuple[list[str], list[list[str]]]:
    """The header and formatted rows of one suite's table (records in run order)."""
    meta = data["suites"][suite]
    columns = _columns(meta)
    header = [
        *meta["key_params"],
        "candidate",
        "median",
        "min",
        "max",
        "ratio",
        "compile",
        *[c.title for c in columns],
    ]
    rows = []
    for rec in records(data, suite):
        rows.append(
            [
                *[format_value(rec.params.get(k), _param_unit(k)) for k in meta["key_params"]],
                rec.candidate + (" (baseline)" if rec.is_baseline else ""),
                format_value(rec.median_s, "s"),
                format_value(rec.min_s, "s"),
                format_value(rec.max_s, "s"),
                format_value(rec.ratio_median, "ratio"),
                format_value(rec.compile_s, "s"),
                *[format_value(rec.value(c.key), c.unit) for c in columns],
            ]
        )
    return header, rows


def terminal_summary(data: Mapping[str, Any], /) -> Table:
    """The terminal form of the report: one table per suite, each under its own headings.

    Suites measure different things (bytes per device and bandwidth for collectives,
    matrix sizes and FLOP rates for matmul), so they never share one header row; the
    suites' tables are stacked in one borderless grid.
    """
    grid = Table.grid(padding=(1, 0))
    grid.title = f"shardkit bench ({data['wall_s']:.1f} s)"
    for name, meta in data["suites"].items():
        header, rows = table_rows(data, name)
        table = Table(title=f"{name}: {meta['description']}", title_justify="left")
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i < len(meta["key_params"]) + 1 else "right")
        for row in rows:
            table.add_row(*row)
        grid.add_row(table)
    return grid


def _env_lines(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(k, json.dumps(v) if not isinstance(v, str) else v) for k, v in env.items()]


def write_markdown(data: Mapping[str, Any], path: str | Path, /) -> Path:
    """Write ``report.md``: environment, configuration and one table per suite."""
    out = [f"# shardkit bench report ({data['created']})", ""]
    out += [f"Schema `{data['schema']}`; run took {data['wall_s']:.1f} s.", ""]
    out += ["## Environment", "", "| key | value |", "|---|---|"]
    out += [f"| {k} | `{v}` |" for k, v in _env_lines(data["environment"])]
    out += ["", "## Configuration", "", f"`{json.dumps(data['config'])}`", ""]
    for name, meta in data["suites"].items():
        header, rows = table_rows(data, name)
        out += [f"## Suite `{name}`", "", meta["description"], ""]
        out += [f"Baseline: {meta['baseline']}", ""]
        out += [f"- {note}" for note in meta["notes"]]
        out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(row) + " |" for row in rows]
        for plot in _plots(meta):
            out += ["", f"![{name} {plot.name}]({_plot_file(name, plot.name)})"]
        out.append("")
    p = Path(path)
    p.write_text("\n".join(out))
    return p


def _plot_file(suite: str, plot: str) -> str:
    return f"{suite}-{plot}.png"


def write_plots(data: Mapping[str, Any], out_dir: str | Path, /) -> list[Path]:
    """Draw every suite's plots as PNG files in ``out_dir``; one panel per ``panel`` value.

    Raises:
      ImportError: matplotlib is missing (install the ``bench`` extra).
    """
    figure = require("matplotlib.figure", extra="bench", what="shardkit.bench plots")
    paths = []
    for name, meta in data["suites"].items():
        recs = records(data, name)
        for plot in _plots(meta):
            panels = list(
                dict.fromkeys(r.value(plot.panel) for r in recs if r.value(plot.y) is not None)
            )
            if not panels:
                continue
            ncols = min(3, len(panels))
            nrows = math.ceil(len(panels) / ncols)
            fig = figure.Figure(figsize=(4.2 * ncols, 3.2 * nrows), layout="constrained")
            axes = fig.subplots(nrows, ncols, squeeze=False)
            for ax, panel in zip(axes.flat, panels, strict=False):
                chosen = [r for r in recs if r.value(plot.panel) == panel]
                for series in dict.fromkeys(r.value(plot.series) for r in chosen):
                    pts = sorted(
                        (x, y)
                        for r in chosen
                        if r.value(plot.series) == series
                        and (x := r.value(plot.x)) is not None
                        and (y := r.value(plot.y)) is not None
                        and y > 0
                    )
                    if pts:
                        xs, ys = zip(*pts, strict=True)
                        ax.plot(xs, ys, marker="o", label=str(series))
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_title(str(panel))
                ax.set_xlabel(plot.xlabel)
                ax.set_ylabel(plot.ylabel)
                ax.grid(True, which="both", alpha=0.3)
                if ax.get_legend_handles_labels()[0]:
                    ax.legend(fontsize="small")
            for ax in list(axes.flat)[len(panels) :]:
                ax.set_visible(False)
            fig.suptitle(f"{name}: {plot.ylabel} vs {plot.xlabel}")
            path = Path(out_dir) / _plot_file(name, plot.name)
            fig.savefig(path, format="png", dpi=80)
            paths.append(path)
    return paths


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = (
    "body{font-family:sans-serif;margin:2em;}table{border-collapse:collapse;font-size:90%}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}"
    "img{max-width:100%}"
)


def write_html(data: Mapping[str, Any], path: str | Path, /) -> Path:
    """Write ``report.html``: the Markdown report's tables, with the PNG plots (already
    written next to it by :func:`write_plots`) embedded as ``data:image/png;base64`` URIs,
    so that the file stands alone."""
    p = Path(path)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>shardkit bench {html.escape(data['created'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>shardkit bench report ({html.escape(data['created'])})</h1>",
        f"<p>Schema <code>{html.escape(data['schema'])}</code>; run took "
        f"{data['wall_s']:.1f} s.</p><h2>Environment</h2>",
        _html_table(["key", "value"], _env_lines(data["environment"])),
        f"<h2>Configuration</h2><pre>{html.escape(json.dumps(data['config'], indent=1))}</pre>",
    ]
    for name, meta in data["suites"].items():
        header, rows = table_rows(data, name)
        parts.append(f"<h2>Suite {html.escape(name)}</h2><p>{html.escape(meta['description'])}</p>")
        parts.append(f"<p>Baseline: {html.escape(meta['baseline'])}</p><ul>")
        parts += [f"<li>{html.escape(n)}</li>" for n in meta["notes"]]
        parts.append("</ul>")
        for plot in _plots(meta):
            png = p.parent / _plot_file(name, plot.name)
            if png.exists():
                b64 = base64.b64encode(png.read_bytes()).decode("ascii")
                parts.append(
                    f"<p><img alt='{html.escape(name)} {html.escape(plot.name)}' "
                    f"src='data:image/png;base64,{b64}'></p>"
                )
        parts.append(_html_table(header, rows))
    parts.append("</body></html>")
    p.write_text("\n".join(parts))
    return p


def write_report(data: Mapping[str, object], out_dir: str | Path, /) -> list[Path]:
    """Validate ``data`` and write ``results.json``, the PNG plots, ``report.md`` and
    ``report.html`` into ``out_dir`` (created if needed).

    Returns:
      The paths written.

    Raises:
      ValueError: ``data`` does not follow the schema.
      ImportError: matplotlib is missing (install the ``bench`` extra).
    """
    validate_results(data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    buf = io.StringIO()
    json.dump(data, buf, indent=1, allow_nan=False)
    results.write_text(buf.getvalue())
    pngs = write_plots(data, out)
    return [
        results,
        *pngs,
        write_markdown(data, out / "report.md"),
        write_html(data, out / "report.html"),
    ]
