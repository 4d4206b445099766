"""The description of one distributed FFT: what to compute, and where the input lives.

Built once at the public boundary (:mod:`shardkit.fft._api`) and passed whole to the
planner (:func:`~shardkit.fft._plan.make_plan`), the four-step planner and the
Auto-axes primitive (whose parameter holds it, so it keys the cached partition
rules). Frozen and hashable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Literal, TypeGuard

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from shardkit.layout.internal import NormSpec, normalize

__all__ = ["KINDS", "Kind", "Layout", "Name", "Problem", "is_name"]

Name = Literal["fftn", "ifftn", "rfftn", "irfftn"]
Kind = Literal["c2c", "r2c", "c2r"]
Layout = Literal["default", "natural"]

# name -> (kind, inverse, the single-device jnp.fft function)
KINDS: Mapping[str, tuple[Kind, bool, Callable[..., jax.Array]]] = {
    "fftn": ("c2c", False, jnp.fft.fftn),
    "ifftn": ("c2c", True, jnp.fft.ifftn),
    "rfftn": ("r2c", False, jnp.fft.rfftn),
    "irfftn": ("c2r", True, jnp.fft.irfftn),
}


def is_name(name: object) -> TypeGuard[Name]:
    """Whether ``name`` is one of the transforms a :class:`Problem` describes."""
    return name in KINDS


@dataclasses.dataclass(frozen=True)
class Problem:
    """One transform of one array: the planner's whole input.

    Attributes:
      name: ``"fftn"``, ``"ifftn"``, ``"rfftn"`` or ``"irfftn"`` (the 1-D and 2-D
        forms are these with ``axes``); it fixes :attr:`kind` and :attr:`inverse`.
      shape: the global input shape.
      axes: the transformed axes (non-negative), in the order given.
      sizes: numpy's ``s``, one length per axis (for ``irfftn`` the real output
        length of the last).
      norm: numpy's ``norm``.
      out_layout: the output layout asked for (on Auto axes: the one promised to
        the partitioner).
      spec: the input's split, one tuple of mesh axes per dimension (normalized;
        replicated until :meth:`placed`).
      mesh: the mesh's ``(axis name, size)`` pairs, in order (empty until placed).
    """

    name: Name
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    norm: str | None = None
    out_layout: Layout = "default"
    spec: NormSpec = ()
    mesh: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        # One spelling per field, so that equal problems hash equal.
        for field in ("shape", "axes", "sizes"):
            object.__setattr__(self, field, tuple(int(n) for n in getattr(self, field)))
        object.__setattr__(self, "spec", normalize(self.spec, len(self.shape)))

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

    @property
    def mesh_sizes(self) -> dict[str, int]:
        """:attr:`mesh` as a mapping from axis name to size."""
        return dict(self.mesh)

    def placed(self, spec: PartitionSpec | NormSpec, mesh_sizes: Mapping[str, int]) -> Problem:
        """The same transform of an input split as ``spec`` over a mesh of ``mesh_sizes``."""
        return dataclasses.replace(
            self, spec=normalize(spec, len(self.shape)), mesh=tuple(mesh_sizes.items())
        )
