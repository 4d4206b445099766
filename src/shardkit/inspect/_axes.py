"""Map device groups in compiled HLO back to the axis names of the user's mesh.

Compiled HLO numbers devices by their position in the program's device assignment,
which for arguments on one ``Mesh`` is the mesh's devices in row-major order; it names
mesh axes ``axis_0``, ``axis_1`` (or not at all). A group of logical ids spans the
mesh axes ``S`` when its members differ exactly in their coordinates along ``S`` and
it holds every combination of them (``prod(sizes[S])`` members). A group that varies
along ``S`` but holds fewer members covers a part of those axes (e.g. a sub-axis).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _coords(ids: Sequence[int], sizes: tuple[int, ...]) -> np.ndarray:
    return np.stack(np.unravel_index(np.asarray(ids, dtype=np.int64), sizes), axis=-1)


def group_axes(
    groups: Sequence[Sequence[int]], names: tuple[str, ...], sizes: tuple[int, ...]
) -> tuple[tuple[str, ...], bool]:
    """The mesh axes the groups vary along, and whether each group spans them fully.

    Args:
      groups: logical device ids, one list per group.
      names: mesh axis names, major to minor.
      sizes: mesh axis sizes.

    Returns:
      ``(axes, exact)``: the axes (in mesh order) along which any group varies, and
      True when every group holds exactly all combinations along those axes.

    Example:
      >>> group_axes([[0, 4], [1, 5]], ("x", "y"), (2, 4))
      (('x',), True)
      >>> group_axes([[0, 1], [2, 3], [4, 5], [6, 7]], ("x", "y"), (2, 4))
      (('y',), False)
    """
    total = math.prod(sizes)
    varying: set[int] = set()
    per_group: list[tuple[set[int], int]] = []
    for group in groups:
        if any(not 0 <= i < total for i in group):
            raise ValueError(f"device ids {list(group)} fall outside a mesh of {total} devices")
        if len(group) < 2:
            per_group.append((set(), len(group)))
            continue
        c = _coords(group, sizes)
        axes = {a for a in range(len(sizes)) if len(np.unique(c[:, a])) > 1}
        varying |= axes
        per_group.append((axes, len(set(group))))
    exact = all(
        axes == varying and n == math.prod(sizes[a] for a in varying)
        for axes, n in per_group
        if n > 1
    ) and all(n == 1 for _, n in per_group if not varying)
    return tuple(names[a] for a in sorted(varying)), exact


def pair_axes(
    pairs: Sequence[tuple[int, int]], names: tuple[str, ...], sizes: tuple[int, ...]
) -> tuple[str, ...]:
    """The mesh axes along which a source and its target differ, over all pairs.

    Example:
      >>> pair_axes([(0, 1), (1, 2), (2, 3), (3, 0)], ("x", "y"), (2, 4))
      ('y',)
    """
    if not pairs:
        return ()
    src = _coords([p[0] for p in pairs], sizes)
    dst = _coords([p[1] for p in pairs], sizes)
    moved = np.any(src != dst, axis=0)
    return tuple(n for n, m in zip(names, moved, strict=True) if m)
