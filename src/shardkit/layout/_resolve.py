"""Where an operand lives: its mesh, its normalized spec and how that was found.

Every public function asks this one question once per array argument
(:func:`operand`) and hands the answer, an :class:`Operand`, to its internal cores.
How it was found:

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
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from shardkit._typing import AnyMesh
from shardkit.layout._checks import entry_axes
from shardkit.layout._spec import SpecLike
from shardkit.layout._spec import spec as parse_spec

__all__ = [
    "AnyMesh",
    "How",
    "NormSpec",
    "Operand",
    "canonical",
    "drop_unit_axes",
    "every_split",
    "is_traced",
    "normalize",
    "operand",
    "parse_spec",
    "to_pspec",
]

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
class Operand:
    """One operand of a public call, resolved once by :func:`operand`.

    The public function resolves each array argument once and hands this record to its
    unchecked internal cores, which read the layout from it and never derive it again.

    Attributes:
      where: the public function (for messages), e.g. ``"solve"``.
      name: the argument's name, e.g. ``"a"``.
      shape: the operand's global shape.
      mesh: the (concrete or abstract) mesh, or ``None`` when there is none.
      spec: the normalized spec, or ``None`` while the partitioner has not decided it.
      how: how it was found (see the module docstring): what the array itself is.
      given: whether the caller named the layout (``mesh=`` or ``spec=``).
    """

    where: str
    name: str
    shape: tuple[int, ...]
    mesh: AnyMesh | None
    spec: NormSpec | None
    how: How
    given: bool = False

    @property
    def pspec(self) -> PartitionSpec | None:
        """:attr:`spec` as users write it, ``P('x')`` (``None`` when unknown)."""
        return None if self.spec is None else canonical(to_pspec(self.spec))

    @property
    def unknown(self) -> bool:
        """Whether the layout is the partitioner's to decide: a tracer on Auto axes (or
        an array of another sharding) and no ``mesh=``/``spec=`` from the caller."""
        return self.how == "auto-traced" and not self.given

    @property
    def traced(self) -> bool:
        """Whether the operand is a tracer (inside ``jit``, ``vmap``, ``grad``...)."""
        return self.how in ("explicit-traced", "auto-traced")

    def moved(self, mesh: AnyMesh, spec: PartitionSpec) -> Operand:
        """The same operand after the call itself moved it to ``mesh`` and ``spec`` (a
        layout it chose, e.g. a factorization grid, or the one the partitioner decided):
        known from then on, never resolved again. ``how`` still says what it is."""
        return dataclasses.replace(
            self, mesh=mesh, spec=normalize(spec, len(self.shape)), given=True
        )


def _found(x: Any, rank: int) -> tuple[AnyMesh | None, NormSpec | None, How]:
    if is_traced(x):
        sh = getattr(jax.typeof(x), "sharding", None)
        m = getattr(sh, "mesh", None)
        if not isinstance(sh, NamedSharding) or m is None or m.empty:
            return None, None, "auto-traced"
        norm = normalize(sh.spec, rank)
        # A split can only sit on Explicit axes: a spec naming one is known.
        if any(norm) or all(t == AxisType.Explicit for t in m.axis_types):
            return m, norm, "explicit-traced"
        return m, None, "auto-traced"
    sh = getattr(x, "sharding", None)
    if isinstance(sh, NamedSharding):
        return sh.mesh, normalize(sh.spec, rank), "concrete"
    if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
        return None, None, "auto-traced"
    return None, None, "host"


def operand(
    where: str,
    name: str,
    x: Any,
    /,
    *,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
) -> Operand:
    """The mesh and normalized spec of ``x``: given, read from it, or not yet decided.

    The one layout resolution of a public call: ``where``/``name`` say whose argument it
    is. ``mesh=``/``spec=`` override what ``x`` carries (host data needs them). A given
    ``mesh`` without a ``spec`` keeps ``x``'s own spec when ``x`` lives on that mesh,
    and is replicated otherwise. ``how`` always says what ``x`` itself is.

    Args:
      where: the public function, for messages.
      name: the argument's name, for messages.
      x: a ``jax.Array``, a tracer, a ``ShapeDtypeStruct`` or host data.
      mesh: the mesh ``x`` goes to, overriding its own.
      spec: its spec (anything :func:`shardkit.spec` accepts), overriding its own.

    Returns:
      An :class:`Operand`.

    Example:
      >>> from shardkit.layout import mesh, shard
      >>> op = operand("f", "a", shard(np.ones((4, 8)), mesh=mesh("2x4", "x,y"), spec="x"))
      >>> op.spec, op.how, op.pspec
      ((('x',), ()), 'concrete', P('x',))
      >>> operand("f", "a", np.ones(3)).how
      'host'
    """
    shape = tuple(int(n) for n in (x.shape if hasattr(x, "shape") else np.shape(x)))
    m, norm, how = _found(x, len(shape))
    if mesh is None and spec is None:
        return Operand(where, name, shape, m, norm, how)
    target = mesh if mesh is not None else m
    if spec is not None:
        norm = normalize(parse_spec(spec), len(shape))
    elif m is None or (mesh is not None and m != mesh):
        norm = normalize(None, len(shape))
    return Operand(where, name, shape, target, norm, how, given=True)
