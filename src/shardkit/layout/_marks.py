"""Marks that shardkit leaves in a compiled program for ``shardkit.comms`` to read.

Padding an operand the mesh does not divide happens inside shardkit's programs, where
XLA's memory figures count it but cannot say why. :func:`padding_scope` wraps the ops
that build a padded copy in a named scope whose name carries what was padded, from
which shape to which and the extra bytes; the scope lands in every op's
``metadata={op_name=...}`` of the compiled HLO (also through caches: it is part of
the program), and :func:`find_padding` reads it back.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

import jax
import numpy as np

__all__ = ["PaddingMark", "find_padding", "padding_scope"]

_PREFIX = "shardkit_padding"
_MARK = re.compile(
    _PREFIX + r"\.(?P<what>\w+)\.(?P<shape>\d+(?:x\d+)*)_to_(?P<padded>\d+(?:x\d+)*)"
    r"\.(?P<where>bytes|devbytes)_(?P<bytes>\d+)\.k(?P<k>\d+)"
)
_serial = itertools.count()


@dataclasses.dataclass(frozen=True)
class PaddingMark:
    """One padded copy in a program: what, from which shape to which, its extra bytes.

    ``per_device``: the shapes and bytes are one device's block (padding inside a
    per-shard program); otherwise they are the whole array's.
    """

    what: str
    shape: tuple[int, ...]
    padded_shape: tuple[int, ...]
    extra_bytes: int
    per_device: bool = False


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "1"


@contextmanager
def padding_scope(
    what: str,
    shape: tuple[int, ...],
    padded: tuple[int, ...],
    dtype: object,
    *,
    per_device: bool = False,
) -> Iterator[None]:
    """Marks the ops built inside as padding ``what`` from ``shape`` to ``padded``.

    ``per_device``: the shapes are one device's block (inside ``shard_map``).
    """
    extra = (math.prod(padded) - math.prod(shape)) * np.dtype(dtype).itemsize  # type: ignore[call-overload]
    tag = re.sub(r"\W", "_", what)
    unit = "devbytes" if per_device else "bytes"
    name = f"{_PREFIX}.{tag}.{_dims(shape)}_to_{_dims(padded)}.{unit}_{extra}.k{next(_serial)}"
    with jax.named_scope(name):
        yield


def find_padding(hlo_text: str) -> tuple[PaddingMark, ...]:
    """The padded copies marked in a compiled program's text, each once, in order."""
    seen: dict[str, PaddingMark] = {}
    for m in _MARK.finditer(hlo_text):
        if m.group(0) not in seen:
            seen[m.group(0)] = PaddingMark(
                m.group("what"),
                tuple(int(d) for d in m.group("shape").split("x")),
                tuple(int(d) for d in m.group("padded").split("x")),
                int(m.group("bytes")),
                m.group("where") == "devbytes",
            )
    return tuple(seen.values())
