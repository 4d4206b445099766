"""Device colours: a fixed palette indexed by device id, so every array drawn on one
mesh uses the same colour for the same device."""

from __future__ import annotations

__all__ = ["PALETTE", "device_color", "text_color"]

# Matplotlib's tab20 colours (the family JAX's visualizer uses), the ten dark shades
# first and then the ten light ones, so neighbouring ids get different hues.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)


def device_color(device_id: int) -> str:
    """The fill colour of device ``device_id``: ``PALETTE[device_id % 20]``."""
    return PALETTE[device_id % len(PALETTE)]


def text_color(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (WCAG relative luminance)."""
    channels = [int(fill[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    # Contrast against black is (L + 0.05) / 0.05, against white 1.05 / (L + 0.05).
    return "#000000" if (luminance + 0.05) ** 2 > 0.05 * 1.05 else "#ffffff"
