"""Distributed ``fftn``, ``ifftn``, ``rfftn``, ``irfftn`` and their 1-D and 2-D forms.

Each takes what its ``jnp.fft`` namesake takes (``s``/``n``, ``axes``/``axis``,
``norm``) plus a keyword-only ``out_layout``, and returns what it returns, computed
shard by shard: local FFTs along unsplit axes and ``all_to_all`` moves of the split
axes, never an all-gather. Each device holds one block at a time (peak memory a
small multiple of the shard). Where the output lives (``out_layout``,
``in_layout``, padding, eager and ``jit`` on Explicit and Auto axes, and the known
limits) is stated once, in the :mod:`shardkit.fft` package docstring (the layout
contract); the functions here point to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from shardkit.fft._api import transform
from shardkit.fft._problem import InLayout, OutLayout
from shardkit.fft._shift import shift

__all__ = [
    "fft",
    "fft2",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftn",
]

_AXES_2D = (-2, -1)


def _one(n: int | None) -> tuple[int, ...] | None:
    return None if n is None else (n,)


def fftn(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """N-D discrete Fourier transform of a sharded array, as ``jnp.fft.fftn``.

    A slab (one split transformed axis) costs one ``all_to_all``, a pencil (two) two;
    each moves ``(g-1)/g`` of the block. Where the output lives, and what padding
    costs where the mesh does not divide a length, is the layout contract in
    :mod:`shardkit.fft`.

    Args:
      x: the input (any sharding; unsharded inputs use ``jnp.fft.fftn``).
      s: lengths of the transformed axes (crop or zero-pad), as in numpy.
      axes: axes to transform (default: all, or the last ``len(s)``).
      norm: ``None``/``"backward"``, ``"ortho"`` or ``"forward"``, as in numpy.
      out_layout: ``"default"``, ``"natural"`` or ``"transposed"`` (see the
        layout contract in :mod:`shardkit.fft`).
      in_layout: ``"natural"``, or ``"transposed"`` for an input stored rolled.

    Returns:
      The complex transform, sharded as ``out_layout`` says.

    Raises:
      ValueError: bad ``s``, ``axes``, ``norm`` or ``out_layout`` (legal values listed),
        an input split the mesh does not divide, or an output no layout of the
        asked kind divides (``out_layout="natural"`` after an ``s`` that changes a
        split axis to a length the mesh does not divide; the message names the
        axis, the spec, the mesh and the remedy).
      NotImplementedError: a split axis no other axis can relieve (a split 1-D
        array) whose length the square of its device count does not divide (the
        four-step FFT handles the others; see :func:`fft` and :func:`irfft`).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.random.default_rng(0).standard_normal((16, 16, 16))
      >>> y = shardkit.fft.fftn(shardkit.shard(v, mesh=m, spec="x,None,None"))
      >>> y.sharding.spec
      P(None, 'x', None)
      >>> bool(np.allclose(y, np.fft.fftn(v)))
      True

      jaxDecomp's axis order, without the last local transpose:

      >>> t = shardkit.fft.fftn(shardkit.shard(v, mesh=m, spec="x,None,None"), out_layout="transposed")
      >>> t.sharding.spec, bool(np.allclose(t, np.fft.fftn(v).transpose(1, 2, 0)))
      (P('x', None, None), True)

      12 is not a multiple of 8: the move pads axis 1 to 16 and the result returns
      to the input's layout (7/8 of two padded 2x16x10 blocks are sent):

      >>> w = np.random.default_rng(0).standard_normal((16, 12, 10))
      >>> z = shardkit.fft.fftn(shardkit.shard(w, mesh=m, spec="x"))
      >>> z.sharding.spec, bool(np.allclose(z, np.fft.fftn(w)))
      (P('x', None, None), True)
      >>> p = shardkit.fft.plan("fftn", w.shape, spec="x", mesh=m)
      >>> p.all_to_alls, p.sent_bytes(np.complex128), p.padding_bytes(np.complex128)
      (2, 8960, 2240)
    """
    return transform("fftn", x, s, axes, norm, out_layout, in_layout)


def ifftn(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """N-D inverse FFT, as ``jnp.fft.ifftn``; the default layout undoes :func:`fftn`'s.

    The layout contract is in :mod:`shardkit.fft`.

    Args:
      x: the input.
      s: lengths of the transformed axes.
      axes: axes to transform.
      norm: ``None``/``"backward"``, ``"ortho"`` or ``"forward"``.
      out_layout: ``"default"`` (the split moves to the previous transformed axis),
        ``"natural"`` or ``"transposed"``.
      in_layout: ``"natural"``, or ``"transposed"``: ``x`` is the spectrum with its
        transformed axes rolled, as ``fftn(..., out_layout="transposed")`` returns
        it (``axes`` and ``s`` name the unrolled axes).

    Returns:
      The complex inverse transform.

    Raises:
      ValueError: as :func:`fftn`.
      NotImplementedError: as :func:`fftn`.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> x = shardkit.shard(np.ones((8, 8, 8), np.complex128), mesh=m, spec="x,y,None")
      >>> z = shardkit.fft.ifftn(shardkit.fft.fftn(x))
      >>> z.sharding.spec == x.sharding.spec, bool(np.allclose(z, 1))
      (True, True)

      Back from jaxDecomp's order (the spectrum transposed ``(1, 2, 0)``):

      >>> t = shardkit.fft.fftn(x, out_layout="transposed")
      >>> t.sharding.spec
      P('x', 'y', None)
      >>> z = shardkit.fft.ifftn(t, in_layout="transposed")
      >>> z.sharding.spec == x.sharding.spec, bool(np.allclose(z, 1))
      (True, True)
    """
    return transform("ifftn", x, s, axes, norm, out_layout, in_layout)


def rfftn(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """N-D FFT of a real sharded array, as ``jnp.fft.rfftn`` (R2C).

    The last of ``axes`` is transformed first (real to complex, length ``n//2+1``);
    a split there first moves to another axis (one more ``all_to_all``). The halved
    axis is split only where the mesh divides ``n//2+1``. Where the output lives is
    the layout contract in :mod:`shardkit.fft` (``rfft2`` of ``(8, 16, 16)`` on
    ``P(None, None, 'x')`` returns ``P('x', None, None)``, the first layout on the
    way back that divides).

    Args:
      x: a real input.
      s: lengths of the transformed axes (real lengths).
      axes: axes to transform; the last is the R2C axis.
      norm: ``None``/``"backward"``, ``"ortho"`` or ``"forward"``.
      out_layout: ``"default"``, ``"natural"`` or ``"transposed"`` (see :func:`fftn`).
      in_layout: ``"natural"`` or ``"transposed"`` (see :func:`ifftn`).

    Returns:
      The complex half-spectrum.

    Raises:
      TypeError: ``x`` is complex.
      ValueError: as :func:`fftn`.
      NotImplementedError: the R2C axis is split and no axis can take its split
        (the next transformed axis is split and no untransformed axis is free).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.random.default_rng(0).standard_normal((16, 8, 6))
      >>> y = shardkit.fft.rfftn(shardkit.shard(v, mesh=m, spec="x,None,None"))
      >>> y.shape, y.sharding.spec
      ((16, 8, 4), P(None, 'x', None))
      >>> bool(np.allclose(y, np.fft.rfftn(v)))
      True
    """
    return transform("rfftn", x, s, axes, norm, out_layout, in_layout)


def irfftn(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """Inverse of :func:`rfftn` (C2R), as ``jnp.fft.irfftn``.

    The C2R axis (the last of ``axes``) is transformed last. The layout contract is
    in :mod:`shardkit.fft`.

    Args:
      x: the complex half-spectrum.
      s: real output lengths (default: ``2 * (m - 1)`` on the last axis).
      axes: axes to transform; the last is the C2R axis, transformed last.
      norm: ``None``/``"backward"``, ``"ortho"`` or ``"forward"``.
      out_layout: ``"default"``, ``"natural"`` or ``"transposed"``.
      in_layout: ``"natural"``, or ``"transposed"`` for the output of
        ``rfftn(..., out_layout="transposed")`` (see :func:`ifftn`).

    Returns:
      The real inverse transform.

    Raises:
      ValueError: as :func:`fftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> x = shardkit.shard(np.ones((16, 8, 6)), mesh=m, spec="x,None,None")
      >>> z = shardkit.fft.irfftn(shardkit.fft.rfftn(x), s=(16, 8, 6))
      >>> z.sharding.spec == x.sharding.spec, bool(np.allclose(z, 1))
      (True, True)
    """
    return transform("irfftn", x, s, axes, norm, out_layout, in_layout)


def fft2(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] = _AXES_2D,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D FFT over ``axes`` (default the last two), as ``jnp.fft.fft2``; see :func:`fftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.fft2(shardkit.shard(v, mesh=m, spec="x")), np.fft.fft2(v)))
      True
    """
    return transform("fftn", x, s, axes, norm, out_layout, in_layout)


def ifft2(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] = _AXES_2D,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D inverse FFT, as ``jnp.fft.ifft2``; see :func:`ifftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.ifft2(shardkit.shard(v, mesh=m, spec="x")), np.fft.ifft2(v)))
      True
    """
    return transform("ifftn", x, s, axes, norm, out_layout, in_layout)


def rfft2(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] = _AXES_2D,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D R2C FFT, as ``jnp.fft.rfft2``; see :func:`rfftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(224.0).reshape(16, 14)  # 14 // 2 + 1 = 8: the halved axis splits
      >>> bool(np.allclose(shardkit.fft.rfft2(shardkit.shard(v, mesh=m, spec="x")), np.fft.rfft2(v)))
      True
    """
    return transform("rfftn", x, s, axes, norm, out_layout, in_layout)


def irfft2(
    x: jax.typing.ArrayLike,
    /,
    s: Sequence[int] | None = None,
    axes: Sequence[int] = _AXES_2D,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D C2R inverse FFT, as ``jnp.fft.irfft2``; see :func:`irfftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.fft.rfft2(np.arange(224.0).reshape(16, 14))
      >>> z = shardkit.fft.irfft2(shardkit.shard(v, mesh=m, spec="x"))
      >>> bool(np.allclose(z, np.arange(224.0).reshape(16, 14)))
      True
    """
    return transform("irfftn", x, s, axes, norm, out_layout, in_layout)


def fft(
    x: jax.typing.ArrayLike,
    /,
    n: int | None = None,
    axis: int = -1,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
) -> jax.Array:
    """1-D FFT along ``axis``, as ``jnp.fft.fft``.

    Local when ``axis`` is not split; otherwise the split moves to another axis (one
    ``all_to_all``), and back where that layout divides the output (two): the
    layout contract in :mod:`shardkit.fft` (``fft(x, n=20, axis=0)`` of a 16x16
    ``P('x', None)`` on 8 devices returns ``P(None, 'x')``). A split axis with no
    other axis to take its split (a long 1-D signal over all devices) runs the
    four-step FFT: three ``all_to_all`` and local FFTs of lengths ``N1 * N2 = n``
    with twiddles between them; it needs ``devices**2`` to divide ``n``. Its output
    keeps ``x``'s layout.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> y = shardkit.fft.fft(shardkit.shard(v, mesh=m, spec="x"), axis=0)
      >>> y.sharding.spec, bool(np.allclose(y, np.fft.fft(v, axis=0)))
      (P('x', None), True)

      A 1-D signal split over all 8 devices (four-step, 128 = 16 x 8):

      >>> s = np.cos(np.arange(128.0))
      >>> y = shardkit.fft.fft(shardkit.shard(s, mesh=m, spec="x"))
      >>> y.sharding.spec, bool(np.allclose(y, np.fft.fft(s)))
      (P('x',), True)
      >>> shardkit.fft.plan("fftn", (128,), spec="x", mesh=m).all_to_alls
      3
    """
    return transform("fftn", x, _one(n), (axis,), norm, out_layout)


def ifft(
    x: jax.typing.ArrayLike,
    /,
    n: int | None = None,
    axis: int = -1,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
) -> jax.Array:
    """1-D inverse FFT along ``axis``, as ``jnp.fft.ifft``; see :func:`fft`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.ifft(shardkit.shard(v, mesh=m, spec="x")), np.fft.ifft(v)))
      True
    """
    return transform("ifftn", x, _one(n), (axis,), norm, out_layout)


def rfft(
    x: jax.typing.ArrayLike,
    /,
    n: int | None = None,
    axis: int = -1,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
) -> jax.Array:
    """1-D R2C FFT along ``axis``, as ``jnp.fft.rfft``; see :func:`rfftn`.

    A split ``axis`` that no other axis can relieve (a real 1-D signal split over
    all devices) is refused: its ``n//2+1`` outputs cannot be split evenly (JAX has
    no uneven sharding), so there is no four-step R2C form; :func:`fft` of the
    signal runs the four-step FFT (the second half of its spectrum is the
    conjugate mirror of the first).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(128.0).reshape(8, 16)
      >>> bool(np.allclose(shardkit.fft.rfft(shardkit.shard(v, mesh=m, spec="x")), np.fft.rfft(v)))
      True
    """
    return transform("rfftn", x, _one(n), (axis,), norm, out_layout)


def irfft(
    x: jax.typing.ArrayLike,
    /,
    n: int | None = None,
    axis: int = -1,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
) -> jax.Array:
    """1-D C2R inverse FFT along ``axis``, as ``jnp.fft.irfft``; see :func:`irfftn`.

    A split ``axis`` of length ``M`` that no other axis can relieve (a half-spectrum
    split over all devices) runs the four-step C2R transform when ``n = 2 * M``
    (numpy then zero-pads the Nyquist term ``X[M]``, and the input's length and the
    output's both divide) and ``devices**2`` divides ``M``: the real output is
    packed as ``M`` complex points, two ``collective_permute``s bring each device
    the mirrored block ``X[M - k]``, and the four-step inverse FFT of length ``M``
    (three ``all_to_all``) gives each device its block of the output, in ``x``'s
    layout. Other lengths are refused (``n//2+1`` is then never a multiple of the
    device count).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.fft.rfft(np.arange(128.0).reshape(8, 16))
      >>> z = shardkit.fft.irfft(shardkit.shard(v, mesh=m, spec="x"))
      >>> bool(np.allclose(z, np.arange(128.0).reshape(8, 16)))
      True

      A half-spectrum of 64 points split over all 8 devices, to 128 real points:

      >>> h = np.fft.rfft(np.cos(np.arange(128.0)))[:64]
      >>> z = shardkit.fft.irfft(shardkit.shard(h, mesh=m, spec="x"), n=128)
      >>> z.sharding.spec, bool(np.allclose(z, np.fft.irfft(h, n=128)))
      (P('x',), True)
    """
    return transform("irfftn", x, _one(n), (axis,), norm, out_layout)


_SWAP = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


def _swapped(where: str, norm: str | None) -> str:
    if norm not in _SWAP:
        raise ValueError(f"{where}: norm={norm!r}; legal values are {list(_SWAP)}")
    return _SWAP[norm]


def hfft(
    x: jax.typing.ArrayLike,
    /,
    n: int | None = None,
    axis: int = -1,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
) -> jax.Array:
    """FFT of a Hermitian-symmetric signal (real spectrum), as ``numpy.fft.hfft``.

    :func:`irfft` of the conjugate with the opposite normalization; the conjugate is
    elementwise, so the cost and layout are :func:`irfft`'s.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(40.0).reshape(8, 5) * (1 + 1j)
      >>> bool(np.allclose(shardkit.fft.hfft(shardkit.shard(v, mesh=m, spec="x")), np.fft.hfft(v)))
      True
    """
    conj = jnp.conj(x if isinstance(x, jax.Array) else jnp.asarray(x))
    return irfft(conj, n, axis, _swapped("hfft", norm), out_layout=out_layout)


def ihfft(
    x: jax.typing.ArrayLike,
    /,
    n: int | None = None,
    axis: int = -1,
    norm: str | None = None,
    *,
    out_layout: OutLayout = "default",
) -> jax.Array:
    """Inverse of :func:`hfft` (a real input), as ``numpy.fft.ihfft``.

    The conjugate of :func:`rfft` with the opposite normalization.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.ihfft(shardkit.shard(v, mesh=m, spec="x")), np.fft.ihfft(v)))
      True
    """
    return jnp.conj(rfft(x, n, axis, _swapped("ihfft", norm), out_layout=out_layout))


def fftshift(x: jax.typing.ArrayLike, /, axes: int | Sequence[int] | None = None) -> jax.Array:
    """Move the zero frequency to the centre, as ``jnp.fft.fftshift``, without gathering.

    A roll by ``n // 2`` along each of ``axes`` (default all): split axes exchange
    parts of their blocks with ``ppermute`` (at most two per axis; see
    :mod:`shardkit.fft._shift`), unsplit ones roll locally; the layout is kept.
    On Auto axes inside ``jit`` it is ``jnp.fft.fftshift``, which XLA partitions
    the same way: with an even device count along an axis the roll is a whole
    number of blocks, and each block moves with one ``collective_permute`` (its
    gradient, the opposite roll, too).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> y = shardkit.fft.fftshift(shardkit.shard(np.arange(16.0), mesh=m, spec="x"))
      >>> np.asarray(y)[:4].tolist(), y.sharding.spec
      ([8.0, 9.0, 10.0, 11.0], P('x',))
    """
    return shift("fftshift", x, axes, inverse=False)


def ifftshift(x: jax.typing.ArrayLike, /, axes: int | Sequence[int] | None = None) -> jax.Array:
    """Inverse of :func:`fftshift` (a roll by ``-(n // 2)``), as ``jnp.fft.ifftshift``.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> x = shardkit.shard(np.arange(24.0), mesh=m, spec="x")
      >>> bool(np.array_equal(shardkit.fft.ifftshift(shardkit.fft.fftshift(x)), np.arange(24.0)))
      True
    """
    return shift("ifftshift", x, axes, inverse=True)
