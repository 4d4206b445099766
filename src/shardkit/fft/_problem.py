"""The description of one distributed FFT: what to compute, and where the input lives.

Built once at the public boundary (:mod:`shardkit.fft._api`) and passed whole to the
planner (:func:`~shardkit.fft._plan.make_plan`), the four-step planner and the
Auto-axes primitive (whose parameter holds it, so it keys the cached partition
rules). Frozen and hashable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeGuard

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from shardkit.layout.internal import NormSpec, normalize

__all__ = [
    "KINDS",
    "AxisOrder",
    "FftProblem",
    "InLayout",
    "Kind",
    "Name",
    "OutLayout",
    "PlanLayout",
    "is_name",
    "permute",
    "transposed_order",
    "unpermute",
]

Name = Literal["fftn", "ifftn", "rfftn", "irfftn"]
Kind = Literal["c2c", "r2c", "c2r"]
# What the public ``out_layout`` takes; ``"transposed"`` is ``"default"``'s splits
# with the transformed axes rolled (see ``transposed_order``).
OutLayout = Literal["default", "natural", "transposed"]
# What the public ``in_layout`` takes.
InLayout = Literal["natural", "transposed"]
# Where the planner puts the splits (the axis order is separate: ``FftProblem.out_order``).
PlanLayout = Literal["default", "natural"]
# An axis order: position ``i`` of the stored array holds logical axis ``order[i]``
# (``stored = logical.transpose(order)``); ``()`` is the identity.
AxisOrder = tuple[int, ...]


def transposed_order(rank: int, axes: tuple[int, ...]) -> AxisOrder:
    """The ``"transposed"`` layout's axis order: the transformed axes rolled by one.

    With ``t = sorted(axes)``, position ``t[i]`` holds logical axis ``t[i + 1]``
    (cyclically); other axes stay. For a 3-D ``fftn`` it is ``(1, 2, 0)``:
    ``fftn(x).transpose(1, 2, 0)``, jaxDecomp's ``pfft3d`` order. ``()`` (identity)
    when fewer than two axes are transformed.
    """
    t = sorted(axes)
    order = list(range(rank))
    for i, a in enumerate(t):
        order[a] = t[(i + 1) % len(t)]
    return () if order == list(range(rank)) else tuple(order)


def permute(values: Sequence[Any], order: AxisOrder) -> tuple[Any, ...]:
    """Logical per-axis ``values`` in the stored order ``order``."""
    return tuple(values[o] for o in order) if order else tuple(values)


def unpermute(values: Sequence[Any], order: AxisOrder) -> tuple[Any, ...]:
    """Stored per-axis ``values`` (in order ``order``) back in the logical order."""
    if not order:
        return tuple(values)
    out: list[Any] = [None] * len(values)
    for i, o in enumerate(order):
        out[o] = values[i]
    return tuple(out)


# name -> (kind, inverse, the single-device jnp.fft function)
KINDS: Mapping[str, tuple[Kind, bool, Callable[..., jax.Array]]] = {
    "fftn": ("c2c", False, jnp.fft.fftn),
    "ifftn": ("c2c", True, jnp.fft.ifftn),
    "rfftn": ("r2c", False, jnp.fft.rfftn),
    "irfftn": ("c2r", True, jnp.fft.irfftn),
}


def is_name(name: object) -> TypeGuard[Name]:
    """Whether ``name`` is one of the transforms a :class:`FftProblem` describes."""
    return name in KINDS


@dataclasses.dataclass(frozen=True)
class FftProblem:
    """One transform of one array: the planner's whole input.

    Shapes, specs and ``axes`` are *logical* (the axes of ``x`` for ``fftn``);
    ``in_order``/``out_order`` say how the input and output arrays store them.

    Attributes:
      name: ``"fftn"``, ``"ifftn"``, ``"rfftn"`` or ``"irfftn"`` (the 1-D and 2-D
        forms are these with ``axes``); it fixes :attr:`kind` and :attr:`inverse`.
      shape: the global input shape.
      axes: the transformed axes (non-negative), in the order given.
      sizes: numpy's ``s``, one length per axis (for ``irfftn`` the real output
        length of the last).
      norm: numpy's ``norm``.
      out_layout: where the output's splits go, ``"default"`` or ``"natural"`` (on
        Auto axes: the one promised to the partitioner).
      spec: the input's split, one tuple of mesh axes per dimension (normalized;
        replicated until :meth:`placed`).
      mesh: the mesh's ``(axis name, size)`` pairs, in order (empty until placed).
      in_order: the input array's axis order (``x = logical.transpose(in_order)``;
        ``()`` for the logical order).
      out_order: the output array's axis order, likewise.
      chunks: how many pieces each ``all_to_all`` and the local FFT after it are
        cut into, so that the exchange of one overlaps the transform of another
        (``None``: the planner's choice, by block size).
    """

    name: Name
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    norm: str | None = None
    out_layout: PlanLayout = "default"
    spec: NormSpec = ()
    mesh: tuple[tuple[str, int], ...] = ()
    in_order: AxisOrder = ()
    out_order: AxisOrder = ()
    chunks: int | None = None

    def __post_init__(self) -> None:
        # One spelling per field, so that equal problems hash equal.
        for field in ("shape", "axes", "sizes"):
            object.__setattr__(self, field, tuple(int(n) for n in getattr(self, field)))
        object.__setattr__(self, "spec", normalize(self.spec, len(self.shape)))
        for field in ("in_order", "out_order"):
            order = tuple(int(a) for a in getattr(self, field))
            object.__setattr__(self, field, () if order == tuple(range(len(order))) else order)

    @property
    def in_shape(self) -> tuple[int, ...]:
        """The input array's shape (in :attr:`in_order`)."""
        return permute(self.shape, self.in_order)

    @property
    def kind(self) -> Kind:
        """``"c2c"``, ``"r2c"`` (``rfftn``) or ``"c2r"`` (``irfftn``)."""
        return KINDS[self.name][0]

    @property
    def inverse(self) -> bool:
        """Whether the transform is an inverse one (``ifftn``, ``irfftn``)."""
        return KINDS[self.name][1]

    @property
    def reference(self) -> Callable[..., jax.Array]:
        """The single-device ``jnp.fft`` function of :attr:`name`."""
        return KINDS[self.name][2]

    def stored_reference(self, x: jax.Array, *, norm: str | None) -> jax.Array:
        """:attr:`reference` on an input stored in :attr:`in_order`, output in :attr:`out_order`."""
        if self.in_order:
            x = jnp.transpose(x, unpermute(range(len(self.shape)), self.in_order))
        y = self.reference(x, s=self.sizes, axes=self.axes, norm=norm)
        return jnp.transpose(y, self.out_order) if self.out_order else y

    @property
    def mesh_sizes(self) -> dict[str, int]:
        """:attr:`mesh` as a mapping from axis name to size."""
        return dict(self.mesh)

    def placed(self, spec: PartitionSpec | NormSpec, mesh_sizes: Mapping[str, int]) -> FftProblem:
        """The same transform of an input split as ``spec`` over a mesh of ``mesh_sizes``.

        ``spec`` is the input array's own (in :attr:`in_order`).
        """
        logical = unpermute(normalize(spec, len(self.shape)), self.in_order)
        return dataclasses.replace(self, spec=logical, mesh=tuple(mesh_sizes.items()))
