"""Where an operand lives: its mesh, its normalized spec and how that was found.

Every algorithm package asks this one question before it runs, and gets one answer:

``"concrete"``
  a ``jax.Array`` (or a ``ShapeDtypeStruct``) carrying a ``NamedSharding``;
``"explicit-traced"``
  a tracer whose type carries the spec (``Explicit`` mesh axes under ``jit``);
``"auto-traced"``
  the layout is decided later by XLA's partitioner: a tracer on ``Auto`` mesh axes
  (its type knows the abstract mesh, never the spec), or an array whose sharding is
  not a ``NamedSharding``. An algorithm that must see the layout runs through
  ``custom_partitioning``, whose callback receives it;
``"host"``
  data on no mesh (NumPy, lists, a one-device array): the caller's ``mesh=``/``spec=``
  say where it goes.

A spec is normalized to one tuple of mesh axes per dimension (:data:`NormSpec`),
``P('x', None)`` of a rank-2 array being ``(('x',), ())``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import jax
import jax.core as jax_core
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from shardkit.layout._checks import entry_axes
from shardkit.layout._spec import SpecLike
from shardkit.layout._spec import spec as parse_spec

__all__ = [
    "AnyMesh",
    "How",
    "NormSpec",
    "Placement",
    "canonical",
    "drop_unit_axes",
    "every_split",
    "is_traced",
    "normalize",
    "parse_spec",
    "placement",
    "to_pspec",
]

AnyMesh: TypeAlias = Mesh | AbstractMesh
NormSpec: TypeAlias = tuple[tuple[str, ...], ...]
How: TypeAlias = Literal["concrete", "explicit-traced", "auto-traced", "host"]


def normalize(spec: PartitionSpec | Sequence[object] | None, rank: int) -> NormSpec:
    """One tuple of mesh axes per dimension, padded with ``()`` (or cut) to ``rank``.

    Example:
      >>> normalize(PartitionSpec("x", ("y", "z")), 3)
      (('x',), ('y', 'z'), ())
    """
    entries: NormSpec = tuple(entry_axes(e) for e in (spec if spec is not None else ()))
    padded: NormSpec = entries + ((),) * rank
    return padded[:rank]


def every_split(shape: Sequence[int], sizes: Mapping[str, int]) -> tuple[NormSpec, ...]:
    """Every way to split an array of ``shape`` over mesh axes of ``sizes`` that divides it.

    Each axis of size > 1 splits one dimension or none; axes sharing a dimension
    are taken in every order. Fewest split axes first, then in a fixed order.

    Example:
      >>> every_split((16, 12), {"x": 8})
      (((), ()), (('x',), ()))
    """
    axes = [a for a, n in sizes.items() if n > 1]
    found: set[NormSpec] = set()
    for where in itertools.product(range(-1, len(shape)), repeat=len(axes)):
        groups = [
            [a for a, w in zip(axes, where, strict=True) if w == d] for d in range(len(shape))
        ]
        for entries in itertools.product(*(itertools.permutations(g) for g in groups)):
            if all(
                n % math.prod(sizes[a] for a in e) == 0 for n, e in zip(shape, entries, strict=True)
            ):
                found.add(tuple(entries))
    return tuple(sorted(found, key=lambda s: (sum(map(len, s)), str(s))))


def to_pspec(norm: NormSpec) -> PartitionSpec:
    """``(('x',), ())`` -> ``P('x', None)``; unsplit dims are kept as ``None``.

    Example:
      >>> to_pspec((("x",), (), ("y", "z")))
      P('x', None, ('y', 'z'))
    """
    return PartitionSpec(*(None if not e else e[0] if len(e) == 1 else e for e in norm))


def canonical(spec: PartitionSpec) -> PartitionSpec:
    """``spec`` as users write it: no trailing ``None``, ``('x',)`` written ``'x'``.

    Example:
      >>> canonical(PartitionSpec(("x",), None))
      P('x',)
    """
    norm = normalize(spec, len(spec))
    while norm and not norm[-1]:
        norm = norm[:-1]
    return to_pspec(norm)


def drop_unit_axes(norm: NormSpec, sizes: Mapping[str, int]) -> NormSpec:
    """``norm`` without the mesh axes of size 1 (they split nothing)."""
    return tuple(tuple(a for a in e if sizes.get(a, 1) > 1) for e in norm)


def is_traced(*xs: Any) -> bool:
    """Whether any of ``xs`` is a tracer (inside ``jit``, ``vmap``, ``grad``...)."""
    return any(isinstance(x, jax_core.Tracer) for x in xs)


@dataclasses.dataclass(frozen=True)
class Placement:
    """The answer of :func:`placement`.

    Attributes:
      mesh: the (concrete or abstract) mesh, or ``None`` when there is none.
      spec: the normalized spec, or ``None`` while the partitioner has not decided it.
      how: how it was found (see the module docstring).
    """

    mesh: AnyMesh | None
    spec: NormSpec | None
    how: How

    @property
    def pspec(self) -> PartitionSpec | None:
        """:attr:`spec` as users write it, ``P('x')`` (``None`` when unknown)."""
        return None if self.spec is None else canonical(to_pspec(self.spec))


def _found(x: Any, rank: int) -> Placement:
    if is_traced(x):
        sh = getattr(jax.typeof(x), "sharding", None)
        m = getattr(sh, "mesh", None)
        if not isinstance(sh, NamedSharding) or m is None or m.empty:
            return Placement(None, None, "auto-traced")
        norm = normalize(sh.spec, rank)
        # A split can only sit on Explicit axes: a spec naming one is known.
        if any(norm) or all(t == AxisType.Explicit for t in m.axis_types):
            return Placement(m, norm, "explicit-traced")
        return Placement(m, None, "auto-traced")
    sh = getattr(x, "sharding", None)
    if isinstance(sh, NamedSharding):
        return Placement(sh.mesh, normalize(sh.spec, rank), "concrete")
    if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
        return Placement(None, None, "auto-traced")
    return Placement(None, None, "host")


def placement(x: Any, /, *, mesh: AnyMesh | None = None, spec: SpecLike = None) -> Placement:
    """The mesh and normalized spec of ``x``: given, read from it, or not yet decided.

    ``mesh=``/``spec=`` override what ``x`` carries (host data needs them). A given
    ``mesh`` without a ``spec`` keeps ``x``'s own spec when ``x`` lives on that mesh,
    and is replicated otherwise. ``how`` always says what ``x`` itself is.

    Args:
      x: a ``jax.Array``, a tracer, a ``ShapeDtypeStruct`` or host data.
      mesh: the mesh ``x`` goes to, overriding its own.
      spec: its spec (anything :func:`shardkit.spec` accepts), overriding its own.

    Returns:
      A :class:`Placement`.

    Example:
      >>> from shardkit.layout import mesh, shard
      >>> p = placement(shard(np.ones((4, 8)), mesh=mesh("2x4", "x,y"), spec="x"))
      >>> p.spec, p.how
      ((('x',), ()), 'concrete')
      >>> placement(np.ones(3)).how
      'host'
    """
    rank = len(getattr(x, "shape", ()))
    found = _found(x, rank)
    if mesh is None and spec is None:
        return found
    m = mesh if mesh is not None else found.mesh
    if spec is not None:
        return Placement(m, normalize(parse_spec(spec), rank), found.how)
    same = found.mesh is not None and (mesh is None or found.mesh == mesh)
    return Placement(m, found.spec if same else normalize(None, rank), found.how)
