"""From a :class:`Layout` to what is drawn: the two drawn axes and the 2-D faces.

Arrays of rank 0, 1 and 2 are drawn whole as one face. For rank 3 and above two axes
are drawn (rows and columns) and every block of the remaining *split* axes becomes a
face of its own; remaining axes that are not split are named in a caption.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from shardkit.show._layout import DeviceLike, Interval, Layout

__all__ = ["Cell", "Face", "Scene", "build_scene", "default_axes", "normalize_axes"]


@dataclasses.dataclass(frozen=True)
class Cell:
    """One drawn block: the devices holding it and its index into the full array."""

    devices: tuple[DeviceLike, ...]
    index: tuple[Interval, ...]


@dataclasses.dataclass(frozen=True)
class Face:
    """A 2-D grid of cells; ``rows`` and ``cols`` are the drawn axes' blocks."""

    title: str
    rows: tuple[Interval, ...]
    cols: tuple[Interval, ...]
    cells: tuple[tuple[Cell, ...], ...]
    col_axis: int | None


@dataclasses.dataclass(frozen=True)
class Scene:
    """Everything a renderer needs: header, axis line, faces and captions."""

    header: str
    axes_line: str
    faces: tuple[Face, ...]
    captions: tuple[str, ...]
    aspect: float | None  # rows' extent over columns' extent, None below rank 2


def _split_counts(layout: Layout) -> list[int]:
    return [len(layout.blocks(a)) for a in range(layout.rank)]


def default_axes(layout: Layout) -> tuple[int, int]:
    """The two axes split into the most blocks, ties going to the trailing axes.

    The pair is returned in increasing order, so rows are the earlier axis; an
    unsplit rank-3 array draws its last two axes, like a stack of matrices.
    """
    counts = _split_counts(layout)
    ranked = sorted(range(layout.rank), key=lambda a: (counts[a], a), reverse=True)
    first, second = sorted(ranked[:2])
    return first, second


def _axes_error(axes: object, rank: int, why: str) -> ValueError:
    legal = f"two different axes in range({-rank}, {rank})" if rank >= 2 else "None"
    return ValueError(
        f"show(axes={axes!r}): {why} for an array of rank {rank}; legal values: {legal} "
        "(rows first, then columns), or axes=None for the default pair"
    )


def normalize_axes(axes: object, layout: Layout) -> tuple[int, int] | None:
    """Validates ``axes=`` and returns it as non-negative ints, or the default pair.

    Raises:
      TypeError: ``axes`` is not a pair of ints.
      ValueError: the rank is below 2, the axes are out of range or equal.
    """
    rank = layout.rank
    if axes is None:
        return default_axes(layout) if rank >= 2 else None
    if rank < 2:
        raise _axes_error(axes, rank, "a rank-0 or rank-1 array is always drawn whole")
    if not isinstance(axes, Sequence) or isinstance(axes, str):
        raise TypeError(
            f"show(axes={axes!r}): expected a pair of ints (rows axis, columns axis) or "
            f"None, got {type(axes).__name__}"
        )
    if len(axes) != 2:
        raise _axes_error(axes, rank, f"got {len(axes)} axes, expected exactly 2")
    if not all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
        raise TypeError(f"show(axes={axes!r}): both axes must be ints")
    for a in axes:
        if not -rank <= a < rank:
            raise _axes_error(axes, rank, f"axis {a} is out of range")
    row, col = (a % rank for a in axes)
    if row == col:
        raise _axes_error(axes, rank, "the two axes name the same axis")
    return row, col


def _describe_split(layout: Layout, axis: int) -> str:
    blocks = layout.blocks(axis)
    if len(blocks) == 1:
        return f"axis {axis} ({layout.shape[axis]}): not split"
    sizes = [stop - start for start, stop in blocks]
    if len(set(sizes)) == 1:
        return f"axis {axis} ({layout.shape[axis]}): {len(blocks)} blocks of {sizes[0]}"
    return f"axis {axis} ({layout.shape[axis]}): {len(blocks)} blocks, sizes {sizes}"


def _face(
    layout: Layout,
    title: str,
    fixed: dict[int, Interval],
    row_axis: int | None,
    col_axis: int | None,
) -> Face:
    whole = ((0, 1),)  # the single pseudo-block of a missing drawn axis
    rows = layout.blocks(row_axis) if row_axis is not None else whole
    cols = layout.blocks(col_axis) if col_axis is not None else whole
    grid: list[tuple[Cell, ...]] = []
    for r in rows:
        line: list[Cell] = []
        for c in cols:
            index = tuple(
                r if a == row_axis else c if a == col_axis else fixed[a] for a in range(layout.rank)
            )
            devices = layout.devices_at([start for start, _ in index])
            line.append(Cell(devices=devices, index=index))
        grid.append(tuple(line))
    return Face(title=title, rows=rows, cols=cols, cells=tuple(grid), col_axis=col_axis)


def build_scene(layout: Layout, *, axes: tuple[int, int] | None, max_faces: int) -> Scene:
    """Chooses what to draw: one face below rank 3, one face per remaining block above.

    Args:
      layout: the array's layout.
      axes: the (rows, columns) axes, already normalized; None below rank 2.
      max_faces: above this many faces only the first is drawn, and every axis's
        split is summarized in the captions instead.
    """
    rank = layout.rank
    if rank == 0:
        return Scene(layout.header, "", (_face(layout, "", {}, None, None),), (), None)
    if rank == 1:
        return Scene(layout.header, "", (_face(layout, "", {}, None, 0),), (), None)
    assert axes is not None
    row_axis, col_axis = axes
    extent = layout.shape[col_axis]
    aspect = layout.shape[row_axis] / extent if extent else 1.0
    axes_line = ""
    if rank > 2 or axes != (0, 1):
        axes_line = (
            f"rows: axis {row_axis} ({layout.shape[row_axis]}), "
            f"columns: axis {col_axis} ({layout.shape[col_axis]})"
        )
    others = [a for a in range(rank) if a not in axes]
    split = [a for a in others if len(layout.blocks(a)) > 1]
    captions = [_describe_split(layout, a) for a in others if a not in split]
    choices = [list(enumerate(layout.blocks(a))) for a in split]
    combos = list(itertools.product(*choices))
    if len(combos) > max_faces:
        captions = [
            f"{len(combos)} faces (more than max_faces={max_faces}): only the first is "
            "drawn; the array is split as follows",
            *(_describe_split(layout, a) for a in range(rank)),
        ]
        combos = combos[:1]
    fixed_unsplit = {a: layout.blocks(a)[0] for a in others if a not in split}
    faces = []
    for combo in combos:
        fixed = dict(fixed_unsplit)
        parts = []
        for a, (k, block) in zip(split, combo, strict=True):
            fixed[a] = block
            n = len(layout.blocks(a))
            parts.append(f"axis {a}: block {k + 1}/{n} [{block[0]}:{block[1]}]")
        faces.append(_face(layout, ", ".join(parts), fixed, row_axis, col_axis))
    return Scene(layout.header, axes_line, tuple(faces), tuple(captions), aspect)
