"""Notebook and terminal displays shared by the report classes.

A report's text form (``str``) and its HTML form (``_repr_html_``) are two renderings
of one rich renderable (its ``__rich__``), so both always show the same facts.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

__all__ = ["rich_html", "rich_text"]

# The HTML lives inside a notebook cell, not a page of its own: a bare <pre> whose
# colours are inline styles, as rich's own Jupyter display produces.
_PRE = (
    '<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
    "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">"
    "<code>{code}</code></pre>"
)


def _console(width: int, *, color: bool) -> Console:
    return Console(
        width=width,
        file=io.StringIO(),
        record=True,
        no_color=not color,
        color_system="truecolor" if color else None,
        highlight=False,
        force_terminal=color,
        force_jupyter=False,
    )


def rich_text(renderable: Any, /, *, width: int) -> str:
    """``renderable`` as plain text ``width`` columns wide, trailing blanks removed."""
    console = _console(width, color=False)
    console.print(renderable)
    return console.export_text().rstrip()


def rich_html(renderable: Any, /, *, width: int) -> str:
    """``renderable`` as an HTML ``<pre>`` block with inline styles, for ``_repr_html_``.

    Example:
      >>> from rich.text import Text
      >>> rich_html(Text("a < b"), width=20)[:4]
      '<pre'
    """
    console = _console(width, color=True)
    console.print(renderable)
    return console.export_html(inline_styles=True, code_format=_PRE)
