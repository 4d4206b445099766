"""Terminal rendering: box-drawn grids whose cells are sized by their shard's extent.

The same lines serve plain text (``str``) and rich (each cell's interior carries the
colour of its first device). Labels never get cut: a cell shows ``CPU 0-3`` when
every cell of its face fits its full label, else bare device ids, wrapped over lines
when needed, and as a last resort a letter keyed to a legend under the face. Faces
with more columns than fit in ``width`` are wrapped into bands.
"""

from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Sequence

from shardkit.show._colors import device_color
from shardkit.show._layout import DeviceLike, device_label, label_groups
from shardkit.show._scene import Face, Scene

__all__ = ["Line", "render_lines"]

_PADDED_HEIGHT = 24  # interior lines a face may use to pad every label
_STRETCH_HEIGHT = 8  # interior lines a face may grow to for its aspect ratio
_ASPECT = 0.25  # terminal cells are about twice as tall as wide; keep faces squat
_MIN_SHORT = 12  # wider short labels wrap instead of widening their column
_MARKERS = string.ascii_lowercase + string.ascii_uppercase


@dataclasses.dataclass(frozen=True)
class Line:
    """One output line and the coloured (start, stop, device colour) spans in it."""

    text: str
    spans: tuple[tuple[int, int, str], ...] = ()


def _proportional(weights: Sequence[int], total: int, mins: Sequence[int]) -> list[int]:
    """Splits ``total`` by ``weights`` (largest remainder), then enforces ``mins``."""
    n = len(weights)
    if sum(weights) <= 0:
        weights = [1] * n
    weight_sum = sum(weights)
    if len(set(weights)) == 1:
        total = max(total // n * n, n)  # equal shards get equal sizes
    exact = [total * w / weight_sum for w in weights]
    sizes = [math.floor(x) for x in exact]
    by_remainder = sorted(range(n), key=lambda i: exact[i] - sizes[i], reverse=True)
    for i in by_remainder[: total - sum(sizes)]:
        sizes[i] += 1
    sizes = [max(s, m) for s, m in zip(sizes, mins, strict=True)]
    while sum(sizes) > max(total, sum(mins)):
        i = max(range(n), key=lambda k: (sizes[k] - mins[k], k))
        sizes[i] -= 1
    return sizes


def _natural_total(weights: Sequence[int], prefs: Sequence[int]) -> int:
    """The smallest total that gives every part its preferred size proportionally."""
    weight_sum = sum(weights)
    if weight_sum <= 0:
        return sum(prefs)
    return max(
        (math.ceil(p * weight_sum / w) for p, w in zip(prefs, weights, strict=True) if w > 0),
        default=sum(prefs),
    )


def _wrap(prefix: str, groups: Sequence[str], width: int) -> list[str]:
    """Greedy line filling; every line but the last keeps room for its comma."""
    lines: list[str] = []
    current = prefix
    for i, group in enumerate(groups):
        room = width - (0 if i == len(groups) - 1 else 1)
        if not current:
            current = group
            continue
        candidate = current + (" " if current == prefix else ",") + group
        if len(candidate) <= room:
            current = candidate
        else:
            lines.append(current if current == prefix else current + ",")
            current = group
    lines.append(current)
    return lines


def _fit(devices: Sequence[DeviceLike], width: int, height: int, short: bool) -> list[str] | None:
    label = device_label(devices, short=short)
    if len(label) <= width:
        return [label]
    prefix = "" if short else f"{devices[0].platform.upper()}"
    lines = _wrap(prefix, label_groups(devices), width)
    if len(lines) <= height and all(len(line) <= width for line in lines):
        return lines
    return None


def _column_widths(face: Face, avail: int) -> tuple[list[int], bool] | None:
    """Interior widths of the columns and whether labels are full, or None: use bands."""
    cols = list(zip(*face.cells, strict=True))
    full = [max(len(device_label(c.devices)) for c in col) for col in cols]
    short = [max(len(device_label(c.devices, short=True)) for c in col) for col in cols]
    groups = [
        max((len(g) for c in col for g in label_groups(c.devices)), default=0) for col in cols
    ]
    weights = [stop - start for start, stop in face.cols]
    n = len(cols)
    for labels_full, mins in (
        (True, full),
        (False, [max(min(s, _MIN_SHORT), g) for s, g in zip(short, groups, strict=True)]),
    ):
        if sum(mins) > avail:
            continue
        total = min(_natural_total(weights, [m + 2 for m in mins]), avail)
        return _proportional(weights, max(total, sum(mins)), mins), labels_full
    if n == 1:
        return [avail], False
    return None


def _band_width(face: Face, width: int) -> tuple[int, bool]:
    """A uniform column width for banded faces: fewest bands, then widest labels."""
    devices = [c.devices for row in face.cells for c in row]
    full = max(len(device_label(d)) for d in devices)
    longest_group = max((len(g) for d in devices for g in label_groups(d)), default=0)
    short = max(
        min(max(len(device_label(d, short=True)) for d in devices), _MIN_SHORT), longest_group
    )
    options = [
        (full + 2, True),
        (full, True),
        (short + 2, False),
        (short + 1, False),
        (short, False),
    ]

    def bands(option: tuple[int, bool]) -> int:
        per_band = max((width - 1) // (option[0] + 1), 1)
        return math.ceil(len(face.cols) / per_band)

    fewest = min(bands(o) for o in options)
    inner, full_labels = next(o for o in options if bands(o) == fewest)
    return min(inner, width - 2), full_labels


def _row_heights(
    face: Face, labels: list[list[list[str] | None]], aspect: float | None, interior_width: int
) -> list[int]:
    """Label lines plus, while the face stays short, a blank line above and below,
    stretched towards the array's aspect ratio."""
    needed = [max(len(cell) if cell else 1 for cell in row) for row in labels]
    padded = [n + 2 for n in needed]
    mins = padded if sum(padded) <= _PADDED_HEIGHT else needed
    total = sum(mins)
    if aspect is not None:
        total = max(total, min(round(interior_width * aspect * _ASPECT), _STRETCH_HEIGHT))
    weights = [stop - start for start, stop in face.rows]
    heights = _proportional(weights, total, mins)
    # An even margin centres the label; give up a line rather than pad lopsidedly.
    return [
        h - 1 if (h - n) % 2 and h - 1 >= m else h
        for h, n, m in zip(heights, needed, mins, strict=True)
    ]


def _grid(
    face: Face, widths: list[int], col_range: range, full: bool, aspect: float | None
) -> list[Line]:
    cells = [[row[c] for c in col_range] for row in face.cells]
    labels: list[list[list[str] | None]] = [
        [_fit(cell.devices, w, 10**6, not full) for cell, w in zip(row, widths, strict=True)]
        for row in cells
    ]
    heights = _row_heights(face, labels, aspect, sum(widths))
    legend: list[str] = []
    for r, row in enumerate(cells):
        for c, cell in enumerate(row):
            fitted = _fit(cell.devices, widths[c], heights[r], not full)
            if fitted is None:
                marker = _MARKERS[len(legend) % len(_MARKERS)]
                legend.append(f"{marker}: {device_label(cell.devices)}")
                fitted = [marker]
            labels[r][c] = fitted

    def rule(left: str, mid: str, right: str) -> Line:
        return Line(left + mid.join("─" * w for w in widths) + right)

    out = [rule("┌", "┬", "┐")]
    for r, row in enumerate(cells):
        tops = [(heights[r] - len(labels[r][c] or [])) // 2 for c in range(len(row))]
        for k in range(heights[r]):
            text, spans = "│", []
            for c, cell in enumerate(row):
                lines = labels[r][c] or []
                i = k - tops[c]
                content = lines[i] if 0 <= i < len(lines) else ""
                start = len(text)
                text += (" " * ((widths[c] - len(content)) // 2) + content).ljust(widths[c]) + "│"
                if cell.devices:
                    spans.append((start, start + widths[c], device_color(cell.devices[0].id)))
            out.append(Line(text, tuple(spans)))
        out.append(rule("├", "┼", "┤") if r + 1 < len(cells) else rule("└", "┴", "┘"))
    out.extend(Line(entry) for entry in legend)
    return out


def _render_face(face: Face, sizing: Face, width: int, aspect: float | None) -> list[Line]:
    """Draws ``face`` with column widths fitted to ``sizing`` (all faces' cells)."""
    n = len(face.cols)
    fitted = _column_widths(sizing, width - (n + 1))
    if fitted is not None:
        widths, full = fitted
        out = _grid(face, widths, range(n), full, aspect)
        return out if full else [*out, Line(_ids_note(face))]
    inner, full = _band_width(sizing, width)
    bands = math.ceil(n / max((width - 1) // (inner + 1), 1))
    per_band = math.ceil(n / bands)  # balanced: no short last band
    out: list[Line] = []
    for first in range(0, n, per_band):
        band = range(first, min(first + per_band, n))
        start, stop = face.cols[band[0]][0], face.cols[band[-1]][1]
        axis = f"axis {face.col_axis} " if face.col_axis is not None else ""
        blocks = f"block {first + 1}" if len(band) == 1 else f"blocks {first + 1}-{band[-1] + 1}"
        out.append(Line(f"{axis}[{start}:{stop}]: {blocks} of {n}"))
        out.extend(_grid(face, [inner] * len(band), band, full, None))
    return out if full else [*out, Line(_ids_note(face))]


def _ids_note(face: Face) -> str:
    platform = next(
        (c.devices[0].platform.upper() for row in face.cells for c in row if c.devices), "the"
    )
    return f"(cells show {platform} device ids)"


def render_lines(scene: Scene, *, width: int) -> list[Line]:
    """Renders a scene as lines of at most ``width`` columns (the header may wrap)."""
    out = [Line(scene.header)] if scene.header else []
    if scene.axes_line:
        out.append(Line(scene.axes_line))
    # Every face gets the same column widths, so faces line up and compare at a glance.
    sizing = dataclasses.replace(
        scene.faces[0], cells=tuple(row for face in scene.faces for row in face.cells)
    )
    for face in scene.faces:
        if face.title:
            out.append(Line(face.title))
        out.extend(_render_face(face, sizing, width, scene.aspect))
    out.extend(Line(caption) for caption in scene.captions)
    return out
