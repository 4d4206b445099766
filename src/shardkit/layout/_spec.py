"""Partition specs from short strings, and shardings from a mesh and a spec."""

from __future__ import annotations

import re
from collections.abc import Sequence

from jax.sharding import Mesh, NamedSharding, PartitionSpec

from shardkit.layout._checks import check_spec_axes
from shardkit.layout._validate import check_mesh_arg

__all__ = ["SpecLike", "sharding", "spec"]

SpecLike = PartitionSpec | str | Sequence[str | tuple[str, ...] | None] | None
_TOKEN = re.compile(r"\s*(\(|\)|,|[A-Za-z_][A-Za-z0-9_]*)\s*")
_NONE_WORDS = {"None", "none", "_", "-"}


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(
                f"spec: cannot parse spec={text!r} at position {pos} ({text[pos:]!r}); "
                "write mesh axis names separated by commas, None for an unsplit "
                "dimension and (a,b) for a dimension split over several axes, "
                "e.g. 'x,None' or '(x,y)'"
            )
        out.append(m.group(1))
        pos = m.end()
    return out


def _parse(text: str) -> PartitionSpec:
    if text.strip() in ("", "()"):
        return PartitionSpec()
    entries: list[str | tuple[str, ...] | None] = []
    group: list[str] | None = None
    expect_entry = True
    for tok in _tokens(text):
        if tok == "(":
            if group is not None or not expect_entry:
                raise ValueError(f"spec: spec={text!r} has a misplaced '('")
            group = []
        elif tok == ")":
            if group is None:
                raise ValueError(f"spec: spec={text!r} has an unmatched ')'")
            entries.append(tuple(group) if group else None)
            group, expect_entry = None, False
        elif tok == ",":
            if group is not None:
                continue
            if expect_entry:
                raise ValueError(f"spec: spec={text!r} has an empty entry; write None")
            expect_entry = True
        elif group is not None:
            if tok in _NONE_WORDS:
                raise ValueError(f"spec: spec={text!r}: None cannot appear inside (...)")
            group.append(tok)
        else:
            if not expect_entry:
                raise ValueError(f"spec: spec={text!r}: missing ',' before {tok!r}")
            entries.append(None if tok in _NONE_WORDS else tok)
            expect_entry = False
    if group is not None:
        raise ValueError(f"spec: spec={text!r} has an unclosed '('")
    if expect_entry:
        raise ValueError(f"spec: spec={text!r} ends with ','; write None for an unsplit dim")
    return PartitionSpec(*entries)


def spec(value: SpecLike = None, /) -> PartitionSpec:
    """Make a ``PartitionSpec`` from a short string; ``PartitionSpec`` passes through.

    ``"x,y"`` splits dimension 0 over mesh axis ``x`` and dimension 1 over ``y``;
    ``"x,None"`` leaves dimension 1 whole; ``"(x,y)"`` splits dimension 0 over both
    axes (``x`` major); ``""`` or ``None`` replicates.

    Args:
      value: a string, a ``PartitionSpec``, ``None``, or a sequence of entries.

    Returns:
      The ``PartitionSpec``.

    Raises:
      ValueError: the string does not parse (the message shows where).
      TypeError: ``value`` is of another type.

    Example:
      >>> spec("x,None")
      P('x', None)
      >>> spec("(x,y)")
      P(('x', 'y'),)
    """
    if value is None:
        return PartitionSpec()
    if isinstance(value, PartitionSpec):
        return value
    if isinstance(value, str):
        return _parse(value)
    if isinstance(value, Sequence):
        return PartitionSpec(*value)
    raise TypeError(
        f"spec: spec={value!r} ({type(value).__name__}) must be a string like 'x,None', "
        "a PartitionSpec, a sequence of entries or None"
    )


def sharding(mesh: Mesh, spec_: SpecLike = None, /) -> NamedSharding:
    """``NamedSharding(mesh, spec(spec_))``, with the spec's axis names checked.

    Args:
      mesh: the device mesh.
      spec_: anything :func:`spec` accepts.

    Returns:
      The ``NamedSharding``.

    Raises:
      TypeError: ``mesh`` is not a ``jax.sharding.Mesh`` (a string such as ``"2x4"``).
      ValueError: the spec names an axis the mesh lacks, or uses an axis twice.

    Example:
      >>> from shardkit.layout import mesh
      >>> sharding(mesh("2x4", "x,y"), "y,x").spec
      P('y', 'x')
    """
    check_mesh_arg("sharding", mesh)
    p = spec(spec_)
    check_spec_axes("sharding", None, p, mesh)
    return NamedSharding(mesh, p)
