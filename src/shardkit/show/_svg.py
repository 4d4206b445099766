"""SVG and HTML rendering: one ``<rect>`` per block, sized by its extent.

Every block is a ``<g>`` holding a ``<title>`` tooltip (devices and index ranges), the
``<rect>`` filled with its first device's colour and, where it fits, a ``<text>``
label (the full ``CPU 0-3`` label, else bare ids, else none: the tooltip still has it).
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from shardkit.show._colors import device_color, text_color
from shardkit.show._layout import device_label
from shardkit.show._scene import Cell, Face, Scene

__all__ = ["render_html", "render_svg"]

_FONT = 12
_CHAR = 7.3  # advance of a 12px monospace character
_LINE = 18
_PAD = 8
_MIN_ROW = 20.0
_NEUTRAL = "#e0e0e0"


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _tooltip(cell: Cell) -> str:
    index = ", ".join(f"{start}:{stop}" for start, stop in cell.index)
    lines = [device_label(cell.devices) if cell.devices else "no device", f"index [{index}]"]
    processes = sorted({getattr(d, "process_index", 0) for d in cell.devices})
    if len(processes) > 1 or processes[:1] not in ([], [0]):
        lines.append(f"process {','.join(map(str, processes))}")
    return "\n".join(lines)


def _edges(sizes: list[int], total: float, minimum: float) -> list[float]:
    weight_sum = sum(sizes) or len(sizes)
    spans = [max(total * (s if sum(sizes) else 1) / weight_sum, minimum) for s in sizes]
    edges = [0.0]
    for span in spans:
        edges.append(edges[-1] + span)
    return edges


def _face(
    face: Face, x0: float, y0: float, width: float, aspect: float | None
) -> tuple[list[str], float]:
    """The face's elements and its height in pixels."""
    height = 60.0 if aspect is None else min(max(width * aspect, 40.0), 0.5 * width)
    xs = _edges([b - a for a, b in face.cols], width, 0.0)
    ys = _edges([b - a for a, b in face.rows], height, _MIN_ROW)
    parts: list[str] = []
    for r, row in enumerate(face.cells):
        for c, cell in enumerate(row):
            x, y = x0 + xs[c], y0 + ys[r]
            w, h = xs[c + 1] - xs[c], ys[r + 1] - ys[r]
            fill = device_color(cell.devices[0].id) if cell.devices else _NEUTRAL
            parts.append(f"<g><title>{escape(_tooltip(cell))}</title>")
            parts.append(
                f'<rect x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(w)}" height="{_fmt(h)}" '
                f'fill="{fill}" stroke="#ffffff" stroke-width="1"/>'
            )
            label = next(
                (
                    text
                    for text in (device_label(cell.devices), device_label(cell.devices, short=True))
                    if text and len(text) * _CHAR <= w - 4 and h >= _FONT + 2
                ),
                None,
            )
            if label is not None:
                parts.append(
                    f'<text x="{_fmt(x + w / 2)}" y="{_fmt(y + h / 2)}" text-anchor="middle" '
                    f'dominant-baseline="central" fill="{text_color(fill)}">{escape(label)}</text>'
                )
            parts.append("</g>")
    return parts, ys[-1]


def render_svg(scene: Scene, *, width: int) -> str:
    """An SVG document of the scene; ``width`` is the text width in columns."""
    face_width = float(max(6 * width, max((14 * len(f.cols) for f in scene.faces), default=0)))
    body: list[str] = []
    y = float(_PAD)
    texts = [t for t in (scene.header, scene.axes_line) if t]
    widest = max((len(t) for t in (*texts, *scene.captions)), default=0) * _CHAR

    def text_line(text: str) -> None:
        nonlocal y
        body.append(f'<text x="{_PAD}" y="{_fmt(y + _FONT)}" fill="#333333">{escape(text)}</text>')
        y += _LINE

    for text in texts:
        text_line(text)
    for face in scene.faces:
        if face.title:
            text_line(face.title)
        parts, height = _face(face, _PAD, y, face_width, scene.aspect)
        body.extend(parts)
        y += height + _PAD
    for caption in scene.captions:
        text_line(caption)
    total_w = max(face_width, widest) + 2 * _PAD
    total_h = y + _PAD
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_fmt(total_w)}" '
        f'height="{_fmt(total_h)}" viewBox="0 0 {_fmt(total_w)} {_fmt(total_h)}" '
        f'font-family="monospace" font-size="{_FONT}">'
    )
    return "\n".join([head, *body, "</svg>"])


def render_html(scene: Scene, *, width: int) -> str:
    """An HTML fragment embedding the SVG, for Jupyter's ``_repr_html_``."""
    label = quoteattr(scene.header or "sharding")
    return (
        f'<div class="shardkit-show" title={label} style="overflow-x:auto">\n'
        f"{render_svg(scene, width=width)}\n</div>"
    )
