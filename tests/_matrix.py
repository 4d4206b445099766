"""The test matrix: sampled by default, whole with ``SHARDKIT_FULL_TESTS=1``.

``make test`` must stay within minutes on two cores, so the widest parametrizations
run every case once with their variants taken in turn (each variant still runs);
``make test-full`` sets the flag and runs every cell.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

FULL = os.environ.get("SHARDKIT_FULL_TESTS", "") == "1"
"""Whether the whole matrix runs (``SHARDKIT_FULL_TESTS=1``)."""


def rotate(cases: Sequence[tuple[Any, ...]], variants: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Each case with a variant appended: every variant when ``FULL``, else one in turn.

    By default ``[("dp", "8"), ("dp", "2x4"), ("tp", "8")]`` with ``["auto",
    "explicit"]`` gives ``("dp", "8", "auto"), ("dp", "2x4", "explicit"), ("tp", "8",
    "auto")``.
    """
    if FULL:
        return [(*c, v) for c in cases for v in variants]
    return [(*c, variants[i % len(variants)]) for i, c in enumerate(cases)]
