"""``show``: a renderable picture of where an array's blocks live."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import jax
import jax.core
import numpy as np

from shardkit.layout.internal import is_traced
from shardkit.show._layout import Layout, device_label, layout_from_index_map
from shardkit.show._scene import Scene, build_scene, normalize_axes
from shardkit.show._svg import render_html, render_svg
from shardkit.show._text import render_lines

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

__all__ = ["ShardingView", "show"]

_MIN_WIDTH = 20


class ShardingView:
    """A picture of an array's sharding, rendered only when asked.

    Renders as plain text (``str(view)``), in colour through rich (``print(view)``
    with rich, ``console.print(view)`` or :meth:`print`), as SVG (:meth:`to_svg`) and
    as HTML in notebooks (``_repr_html_``). Usually built by :func:`show`.

    Args:
      layout: which devices hold which block (see ``shardkit.show._layout``).
      axes: the (rows, columns) axes to draw for rank >= 2, or None for the default.
      width: the text picture's maximum width in columns.
      max_faces: the most 2-D faces drawn for rank >= 3 before summarizing instead.

    Raises:
      TypeError: ``axes``, ``width`` or ``max_faces`` has the wrong type.
      ValueError: ``axes`` does not fit the rank, ``width`` or ``max_faces`` is too small.

    Example:
      >>> import jax, shardkit
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> mesh = jax.make_mesh((2, 4), ("x", "y"))
      >>> view = shardkit.show(shape=(8, 8), sharding=NamedSharding(mesh, P(None, "x")))
      >>> print(view)
      [8,8] mesh(x=2,y=4) P(None, 'x')
      ┌─────────┬─────────┐
      │         │         │
      │ CPU 0-3 │ CPU 4-7 │
      │         │         │
      └─────────┴─────────┘
      >>> view.to_svg().startswith("<svg")
      True
    """

    def __init__(
        self, layout: Layout, /, *, axes: object = None, width: int = 80, max_faces: int = 16
    ) -> None:
        _check_int("width", width, _MIN_WIDTH)
        _check_int("max_faces", max_faces, 1)
        self.layout = layout
        self.axes = normalize_axes(axes, layout)
        self.width = width
        self.max_faces = max_faces
        self._scene: Scene = build_scene(layout, axes=self.axes, max_faces=max_faces)

    def __repr__(self) -> str:
        return f"ShardingView({self._scene.header or self.layout.shape}, axes={self.axes})"

    def text(self, *, width: int | None = None) -> str:
        """The plain-text picture (no colour), at most ``width`` columns wide."""
        width = self.width if width is None else width
        _check_int("width", width, _MIN_WIDTH)
        return "\n".join(line.text for line in render_lines(self._scene, width=width))

    def __str__(self) -> str:
        return self.text()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.style import Style
        from rich.text import Text

        from shardkit.show._colors import text_color

        width = max(min(self.width, options.max_width), _MIN_WIDTH)
        for line in render_lines(self._scene, width=width):
            text = Text(line.text, no_wrap=False)
            for start, stop, fill in line.spans:
                text.stylize(Style(color=text_color(fill), bgcolor=fill), start, stop)
            yield text

    def print(self, console: Console | None = None) -> None:
        """Prints the picture in colour to ``console`` (a new ``rich`` console if None)."""
        if console is None:
            from rich.console import Console

            console = Console()
        console.print(self)

    def to_svg(self) -> str:
        """The picture as a standalone SVG document (a string), with tooltips per block."""
        return render_svg(self._scene, width=self.width)

    def _repr_html_(self) -> str:
        return render_html(self._scene, width=self.width)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"show({name}={value!r}): expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"show({name}={value}): must be at least {minimum}")


def _header(shape: tuple[int, ...], dtype: object, sharding: jax.sharding.Sharding) -> str:
    dims = ",".join(map(str, shape))
    name = np.dtype(cast("np.typing.DTypeLike", dtype)).name if dtype is not None else ""
    text = f"{name}[{dims}]"
    if isinstance(sharding, jax.sharding.NamedSharding):
        mesh = ",".join(f"{name}={size}" for name, size in sharding.mesh.shape.items())
        return f"{text} mesh({mesh}) {sharding.spec}"
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        (device,) = sharding.device_set
        return f"{text} on {device_label([device])}"
    return f"{text} {type(sharding).__name__}"


def _resolve(
    x: object, shape: Sequence[int] | None, sharding: object
) -> tuple[tuple[int, ...], object, object]:
    """(shape, dtype, sharding) from any of the accepted input forms."""
    if x is None:
        if shape is None or sharding is None:
            raise TypeError(
                "show() needs an array, a ShapeDtypeStruct, a (shape, sharding) pair, or "
                "both shape= and sharding= keywords"
            )
        return _check_shape(shape), None, sharding
    if shape is not None or sharding is not None:
        raise TypeError(
            f"show(x, shape=..., sharding=...): pass either x (a {type(x).__name__}) or "
            "the shape= and sharding= keywords, not both"
        )
    if is_traced(x):
        raise TypeError(
            "show() got a traced value (inside jit, vmap or grad), whose sharding is not "
            "known until compilation; call show() on the result outside the transformation, "
            "or use jax.debug.inspect_array_sharding inside it"
        )
    if isinstance(x, jax.Array | jax.ShapeDtypeStruct):
        if getattr(x, "sharding", None) is None:
            raise TypeError(
                f"show(x): this {type(x).__name__} of shape {tuple(x.shape)} has no sharding; "
                "build it with jax.ShapeDtypeStruct(shape, dtype, sharding=...)"
            )
        return tuple(x.shape), x.dtype, x.sharding
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], jax.sharding.Sharding):
        return _check_shape(x[0]), None, x[1]
    raise TypeError(
        f"show(x): expected a jax.Array, a jax.ShapeDtypeStruct with a sharding, or a "
        f"(shape, sharding) pair; got {type(x).__name__}"
    )


def _check_shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, Sequence) or isinstance(shape, str):
        raise TypeError(f"show(shape={shape!r}): expected a tuple of ints")
    if not all(isinstance(n, int | np.integer) and not isinstance(n, bool) for n in shape):
        raise TypeError(f"show(shape={shape!r}): every dimension must be an int")
    if any(n < 0 for n in shape):
        raise ValueError(f"show(shape={tuple(shape)}): dimensions must be non-negative")
    return tuple(int(n) for n in shape)


def show(
    x: object = None,
    /,
    *,
    axes: tuple[int, int] | None = None,
    width: int = 80,
    max_faces: int = 16,
    shape: Sequence[int] | None = None,
    sharding: jax.sharding.Sharding | None = None,
) -> ShardingView:
    """Draws which devices hold which block of a sharded array.

    Returns a renderable and prints nothing: ``str(view)`` is plain text, rich
    consoles and ``view.print()`` draw it in colour, ``view.to_svg()`` gives SVG and
    notebooks show it as HTML. Blocks are sized by their extent and labelled with the
    devices holding them, every replica included, ids compressed (``CPU 0-3``,
    ``CPU 0,8..56``), or bare ids when cells are narrow. Colours are a function of the
    device id (a 20-colour palette), so one mesh looks the same across arrays; a
    replicated block takes the colour of its lowest-id device.

    Rank 0 and 1 arrays draw as one row, rank 2 as a grid. For rank >= 3, two axes
    are drawn; by default the two split into the most blocks, ties going to the
    trailing axes (an unsplit array draws its last two axes). Every block of the other
    split axes becomes a 2-D face titled e.g. ``axis 0: block 1/2 [0:8]``; other axes
    that are not split are named in a caption; beyond ``max_faces`` faces only the
    first is drawn and each axis's split is summarized. Reads only the sharding
    (``devices_indices_map``): no data moves.

    Args:
      x: a ``jax.Array``, a ``jax.ShapeDtypeStruct`` with a sharding, or a
        ``(shape, sharding)`` pair; or None with ``shape=`` and ``sharding=``.
      axes: the (rows, columns) array axes to draw, for rank >= 2.
      width: the text picture's maximum width in columns (at least 20).
      max_faces: the most faces drawn for rank >= 3.
      shape: the array shape, with ``sharding=`` instead of ``x``.
      sharding: any ``jax.sharding.Sharding``, with ``shape=`` instead of ``x``.

    Returns:
      A :class:`ShardingView`.

    Raises:
      TypeError: ``x`` is not one of the accepted forms, is traced, or has no sharding.
      ValueError: ``axes`` is out of range, repeats an axis, or is given below rank 2.

    Example:
      >>> import jax, jax.numpy as jnp, shardkit
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> mesh = jax.make_mesh((2, 4), ("x", "y"))
      >>> x = jax.device_put(jnp.zeros((16, 16), jnp.float32), NamedSharding(mesh, P("x", "y")))
      >>> print(shardkit.show(x).text().splitlines()[0])
      float32[16,16] mesh(x=2,y=4) P('x', 'y')
    """
    shape_, dtype, sharding_ = _resolve(x, shape, sharding)
    if not isinstance(sharding_, jax.sharding.Sharding):
        raise TypeError(
            f"show(sharding={sharding_!r}): expected a jax.sharding.Sharding, "
            f"got {type(sharding_).__name__}"
        )
    index_map = sharding_.devices_indices_map(shape_)
    layout = layout_from_index_map(index_map, shape_, header=_header(shape_, dtype, sharding_))
    return ShardingView(layout, axes=axes, width=width, max_faces=max_faces)
