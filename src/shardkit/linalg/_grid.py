"""A near-square grid of devices for a matrix split over one mesh dimension.

LU on a matrix split by rows only (``P('x', None)`` on 8 devices) broadcasts each
panel's ``nb`` rows of U and its row exchanges across all ``n`` columns: its panel
collectives are ``n`` wide, and the whole column of devices joins each one. On a
``R x C`` grid of the same devices they are ``n / C`` wide, which is why ScaLAPACK
advises a near-square process grid. :func:`grid_for` picks ``R <= C``, ``R * C = P``
with ``R`` the largest divisor of ``P`` not above ``sqrt(P)`` (2x4 for 8 devices, 4x4
for 16); :func:`to_grid` moves the matrix there (one all-to-all of its share per
device) and :func:`to_home` brings results back to the layout the caller gave.

Measured at n=4096 float32 on 8 simulated CPU devices (2 cores): ``solve`` on
``P('x', None)`` took 1.83-2.02 CPU-s factoring in place and 1.37-1.69 on the 2x4
grid, the move itself 0.03. Below :data:`GRID_MIN_ORDER` the panels are too small for
the difference to pay for the move. Under ``jit`` the grid is an abstract mesh over
the program's devices; on Auto axes the layout must be known (``mesh=``/``spec=``):
when the partitioner picks it, the matrix is factored as it is.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, PartitionSpec

from shardkit.layout.internal import Operand
from shardkit.linalg._blockcyclic import AnyMesh, matrix_layout, place
from shardkit.linalg._pad import is_numpy

_A = TypeVar("_A")

GRID_MIN_ORDER = 256
"""Smallest order factored on a grid rather than on a one-dimensional split."""

GRID_AXES = ("grid_rows", "grid_cols")
"""The grid's axis names (a mesh of its own, so they cannot meet the caller's)."""


@dataclasses.dataclass(frozen=True)
class Grid:
    """Where a one-dimensional layout's matrix is factored, and where results go back.

    Attributes:
      mesh: the ``R x C`` grid of the caller's devices (abstract under ``jit``).
      home: the caller's mesh.
      rows: the caller's row axes (``()`` for a column split).
    """

    mesh: AnyMesh
    home: AnyMesh
    rows: tuple[str, ...]

    @property
    def parts(self) -> int:
        """The number of devices along the caller's row axes."""
        return math.prod(self.home.shape[x] for x in self.rows)

    @property
    def spec(self) -> PartitionSpec:
        """The matrix's spec on the grid."""
        return PartitionSpec(*GRID_AXES)


def _split(p: int) -> tuple[int, int]:
    r = max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
    return r, p // r


def grid_for(op: Operand) -> Grid | None:
    """The grid to factor square ``a`` on, or None to factor it as laid out.

    A grid is used when ``a`` is split over one dimension by axes that hold every
    device of the mesh, ``P`` has a divisor ``1 < R <= sqrt(P)``, ``n >=``
    :data:`GRID_MIN_ORDER` is a multiple of ``R`` and ``C``.
    """
    if len(op.shape) != 2 or op.shape[0] < GRID_MIN_ORDER:
        return None
    m, _, rows, cols = matrix_layout(op, pad=True)
    split_rows = tuple(x for x in rows if m.shape[x] > 1)
    split_cols = tuple(x for x in cols if m.shape[x] > 1)
    if bool(split_rows) == bool(split_cols):
        return None
    axes = split_rows or split_cols
    parts = math.prod(m.shape[x] for x in axes)
    types = {m.axis_types[m.axis_names.index(x)] for x in axes}
    if parts != math.prod(m.shape.values()) or len(types) != 1:
        return None
    (kind,) = types
    if op.how == "auto-traced" and kind == AxisType.Explicit:
        # Host data passed to jit: only the given mesh's shard_map names the program's
        # devices, and the grid's abstract mesh cannot.
        return None
    r, c = _split(parts)
    n = op.shape[0]
    if r == 1 or n % r or n % c:  # an order the grid does not divide is padded as laid out
        return None
    home = m
    if isinstance(m, Mesh) and not op.traced:
        order = [m.axis_names.index(x) for x in axes]
        order += [i for i in range(len(m.axis_names)) if i not in order]
        devices = np.transpose(np.asarray(m.devices), order).reshape(r, c)
        grid: AnyMesh = Mesh(devices, GRID_AXES, axis_types=(kind, kind))
    else:
        # Traced: abstract meshes, whose devices are the program's, in its order (a
        # concrete second mesh would fail XLA's one-mesh check on Auto axes).
        home = m.abstract_mesh if isinstance(m, Mesh) else m
        grid = AbstractMesh((r, c), GRID_AXES, axis_types=(kind, kind))
    return Grid(grid, home, tuple(rows))


def to_grid(a: Any, g: Grid) -> jax.Array:
    """``a`` laid out on the grid (host data is placed there directly)."""
    return place(a, g.mesh, g.spec)


def to_home(x: Any, g: Grid) -> Any:
    """A result on the grid moved to the caller's mesh: rows split like ``a``'s rows when
    they divide, replicated otherwise (as the factorization on ``a``'s own layout)."""
    if x.ndim == 0:
        return place(x, g.home, PartitionSpec())
    split = bool(g.rows) and x.shape[0] % g.parts == 0
    spec = PartitionSpec(g.rows if split else None, *([None] * (x.ndim - 1)))
    return place(x, g.home, spec)


def regrid(a: _A, op: Operand) -> tuple[_A | jax.Array, Operand, Grid | None]:
    """``(a, op, grid)`` to factor: ``a`` moved to :func:`grid_for`'s grid (``op`` then
    records the grid's layout), or as given (also when the layout is left to the
    partitioner).

    Callers run it before the finite check, so that the check's all-reduce reads the
    moved matrix: XLA may move a resharding above the check's select, and then nothing
    would order the two.
    """
    if op.unknown:
        return a, op, None
    g = grid_for(op)
    if g is None:
        return a, op, None
    x: Any = a
    if op.traced and isinstance(op.mesh, Mesh):
        # On the given mesh first: a traced argument without a layout (host data passed
        # to jit) otherwise leaves the program on one device, and the grid has eight.
        m, p, _, _ = matrix_layout(op, pad=True)
        x = place(a, m, p)
    return to_grid(x, g), op.moved(g.mesh, g.spec), g


def rhs_to_grid(b: Any, g: Grid | None) -> Any:
    """Right-hand sides on the grid's mesh, replicated (host data stays as it is).

    Everything the factorization's results meet (the finite check, the status) then
    lives on one mesh, as Explicit axes require; :func:`home` moves the results back.
    """
    if g is None or is_numpy(b):
        return b
    return place(b, g.mesh, PartitionSpec())


def home(out: Any, g: Grid | None) -> Any:
    """The arrays of ``out`` (a result, or a tuple with its status) moved by :func:`to_home`."""
    if g is None:
        return out
    return jax.tree.map(lambda x: to_home(x, g), out)
