"""Distributed ``fftn``, ``ifftn``, ``rfftn``, ``irfftn`` and their 1-D and 2-D forms.

Each takes what its ``jnp.fft`` namesake takes (``s``/``n``, ``axes``/``axis``,
``norm``) plus a keyword-only ``out_layout``, and returns what it returns, computed
shard by shard: local FFTs along unsplit axes and ``all_to_all`` moves of the split
axes, never an all-gather. Each device holds one block at a time (peak memory a
small multiple of the shard).

Output layout (``out_layout="default"``): a split transformed axis hands its mesh
axes to the *next* transformed axis (cyclically; the *previous* one for inverse
transforms), which costs one ``all_to_all`` per split axis: a slab ``P('x', None,
None)`` comes out ``P(None, 'x', None)``, a pencil ``P('x', 'y', None)`` comes out
``P(None, 'x', 'y')``. The inverse shifts back, so ``ifftn(fftn(x))`` has ``x``'s
layout. When every transformed axis is split (``fft2`` of a 2-D array on a 2-D
mesh, ``fft`` along a split axis) the output is in the natural layout.
``out_layout="natural"`` always returns the input's layout (one more
``all_to_all`` per move).

Transposed layout (``out_layout="transposed"``): the default layout's splits, with
the transformed axes rolled by one so that the output is stored in the order the
last local FFT leaves it, saving the final local transpose (one pass over the
block). With ``t = sorted(axes)``, output axis ``t[i]`` holds the transform's axis
``t[i + 1]`` (cyclically), other axes stay: a 3-D ``fftn`` returns
``np.fft.fftn(x).transpose(1, 2, 0)``, jaxDecomp's ``pfft3d`` order. An X pencil
``P('x', 'y', None)`` comes back ``P('x', 'y', None)`` (jaxDecomp's output spec),
a slab ``P('x', None, None)`` comes back ``P('x', None, None)`` (``x``'s axis 1 split
where jaxDecomp splits axis 2), ``fft2`` of ``(b, n, m)`` returns ``(b, m, n)``.
One transformed axis has nothing to roll (the default layout). The inverse
transforms accept that order with ``in_layout="transposed"`` (``axes`` and ``s``
name the logical axes, as given to the forward transform), so
``ifftn(fftn(x, out_layout="transposed"), in_layout="transposed")`` is ``x`` in
``x``'s layout; ``plan(..., out_layout=, in_layout=)`` records the orders as
``plan.out_order``/``plan.in_order``. The R2C axis (the last of ``axes``) is transformed first
and its halved length ``n//2+1`` is split only if the mesh divides it.

Sizes the mesh does not divide: only the input's own split has to divide. A move
whose receiving axis the moving group (``g`` devices) does not divide zero-pads
that axis of each device's block up to a multiple of ``g`` before its
``all_to_all``, and the padding is trimmed when the axis is local again (before it
is transformed). JAX has no uneven ``NamedSharding`` (``jax.device_put``,
``jit``'s outputs and Explicit types all reject a split that does not divide), so
an output that would stay padded is returned in the natural layout instead: the
plan appends the reverse moves (a slab then costs two ``all_to_all``, a pencil
four). For example ``fftn`` of a 64x60x36 slab on 8 devices pads 60 to 64 and
returns ``P('x', None, None)``. Padding is avoided where it can be: a split skips
an axis the mesh does not divide for the next unsplit one that it does (``fftn``
of a 64x60x32 slab returns ``P(None, None, 'x')`` after one ``all_to_all``).
``ifftn(fftn(x))`` has ``x``'s layout whenever ``fftn`` needed no padding; after
a padded ``fftn`` (which returns ``x``'s layout) ``ifftn`` may pick another
layout that divides: pass ``out_layout="natural"`` to both to pin the layout
(e.g. for a loop carry on an Explicit mesh). The padding costs bytes: a move over ``g`` devices
sends ``(g - 1) / g`` of its padded block, so each move adds ``(g - 1) / g`` times
(padded block - even share) times the item size; :meth:`FFTPlan.sent_bytes` and
:meth:`FFTPlan.padding_bytes` give the totals (``shardkit.comms`` reports the
former as ``bytes_sent``). A length changed by ``s`` on an input-split axis that
the mesh does not divide cannot return to the natural layout: ``out_layout=
"natural"`` then raises, and so does the default layout when it would need it.

Inside ``jit`` on Explicit mesh axes the same plans run; on Auto axes a
``custom_partitioning`` rule partitions the op with the same plan, output layout
and ``all_to_all`` count whenever the mesh is known while tracing
(``jax.set_mesh``, or the operand's type) and its device count divides the
transformed lengths; otherwise
in the natural layout (a length changed by ``s``/``n`` keeps its split). All work
under every JAX transformation (``grad``/``jvp``/``vjp`` of any order, ``vmap``,
``jacfwd``/``jacrev``, ``linear_transpose``), eagerly and inside ``jit``, on
Auto and Explicit axes; every derivative runs shardkit's plans (all-to-alls only).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from shardkit.fft._api import transform
from shardkit.fft._problem import InLayout, Layout
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """N-D discrete Fourier transform of a sharded array, as ``jnp.fft.fftn``.

    A slab (one split transformed axis) costs one ``all_to_all``, a pencil (two) two;
    each moves ``(g-1)/g`` of the block. See the module docstring for the layout.
    Lengths the mesh does not divide are padded during the moves (only ``x``'s own
    split must divide); the result then comes back in ``x``'s layout, at twice the
    ``all_to_all`` count (see the module docstring for the padding's bytes).

    Args:
      x: the input (any sharding; unsharded inputs use ``jnp.fft.fftn``).
      s: lengths of the transformed axes (crop or zero-pad), as in numpy.
      axes: axes to transform (default: all, or the last ``len(s)``).
      norm: ``None``/``"backward"``, ``"ortho"`` or ``"forward"``, as in numpy.
      out_layout: ``"default"`` (the sharding moves to the next transformed axis),
        ``"natural"`` (the input's sharding) or ``"transposed"`` (the default
        layout with the transformed axes rolled, ``transpose(1, 2, 0)`` in 3-D:
        jaxDecomp's order, one local transpose fewer; see the module docstring).
      in_layout: ``"natural"``, or ``"transposed"`` for an input stored rolled.

    Returns:
      The complex transform, sharded as ``out_layout`` says.

    Raises:
      ValueError: bad ``s``, ``axes``, ``norm`` or ``out_layout`` (legal values listed),
        an input split the mesh does not divide, or an ``s`` that changes the length
        of a split input axis to one the mesh does not divide when the output must
        return to the natural layout (the message names the axis, the spec, the
        mesh and the remedy).
      NotImplementedError: a split axis no other axis can relieve (a split 1-D
        array) whose length the square of its device count does not divide (the
        four-step FFT handles the others; see :func:`fft` and :func:`irfft`).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.random.default_rng(0).standard_normal((16, 16, 16))
      >>> y = shardkit.fft.fftn(shardkit.shard(v, m, "x,None,None"))
      >>> y.sharding.spec
      P(None, 'x', None)
      >>> bool(np.allclose(y, np.fft.fftn(v)))
      True

      jaxDecomp's axis order, without the last local transpose:

      >>> t = shardkit.fft.fftn(shardkit.shard(v, m, "x,None,None"), out_layout="transposed")
      >>> t.sharding.spec, bool(np.allclose(t, np.fft.fftn(v).transpose(1, 2, 0)))
      (P('x', None, None), True)

      12 is not a multiple of 8: the move pads axis 1 to 16 and the result returns
      to the input's layout (7/8 of two padded 2x16x10 blocks are sent):

      >>> w = np.random.default_rng(0).standard_normal((16, 12, 10))
      >>> z = shardkit.fft.fftn(shardkit.shard(w, m, "x"))
      >>> z.sharding.spec, bool(np.allclose(z, np.fft.fftn(w)))
      (P('x', None, None), True)
      >>> p = shardkit.fft.plan("fftn", w.shape, "x", m)
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """N-D inverse FFT, as ``jnp.fft.ifftn``; the default layout undoes :func:`fftn`'s.

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
      >>> x = shardkit.shard(np.ones((8, 8, 8), np.complex128), m, "x,y,None")
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """N-D FFT of a real sharded array, as ``jnp.fft.rfftn`` (R2C).

    The last of ``axes`` is transformed first (real to complex, length ``n//2+1``).
    If it is split, its split first moves to the next transformed axis (one more
    ``all_to_all``; :func:`irfftn` then returns that layout), or, when that one is
    split too or it is the only transformed axis, to an unsplit untransformed axis
    the devices divide (the output keeps the first layout on the way back that
    divides: ``rfft2`` of ``(8, 16, 16)`` on ``P(None, None, 'x')`` returns
    ``P('x', None, None)``). The halved axis is split
    only when the mesh divides ``n//2+1``; otherwise a pencil input (every other
    transformed axis split) comes back in the natural layout. When no other axis
    can take a split (``rfft2`` of a row-split 2-D array) the halved axis takes it,
    padded, and the result comes back in the natural layout. Other lengths the
    mesh does not divide are padded as in :func:`fftn`.

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
      >>> y = shardkit.fft.rfftn(shardkit.shard(v, m, "x,None,None"))
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """Inverse of :func:`rfftn` (C2R), as ``jnp.fft.irfftn``; it mirrors its layout.

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
      >>> x = shardkit.shard(np.ones((16, 8, 6)), m, "x,None,None")
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D FFT over ``axes`` (default the last two), as ``jnp.fft.fft2``; see :func:`fftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.fft2(shardkit.shard(v, m, "x")), np.fft.fft2(v)))
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D inverse FFT, as ``jnp.fft.ifft2``; see :func:`ifftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.ifft2(shardkit.shard(v, m, "x")), np.fft.ifft2(v)))
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D R2C FFT, as ``jnp.fft.rfft2``; see :func:`rfftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(224.0).reshape(16, 14)  # 14 // 2 + 1 = 8: the halved axis splits
      >>> bool(np.allclose(shardkit.fft.rfft2(shardkit.shard(v, m, "x")), np.fft.rfft2(v)))
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
    out_layout: Layout = "default",
    in_layout: InLayout = "natural",
) -> jax.Array:
    """2-D C2R inverse FFT, as ``jnp.fft.irfft2``; see :func:`irfftn`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.fft.rfft2(np.arange(224.0).reshape(16, 14))
      >>> z = shardkit.fft.irfft2(shardkit.shard(v, m, "x"))
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
    out_layout: Layout = "default",
) -> jax.Array:
    """1-D FFT along ``axis``, as ``jnp.fft.fft``.

    Local when ``axis`` is not split; otherwise the split moves to another axis and
    back (two ``all_to_all``, that axis padded if the mesh does not divide it; the
    output is in the natural layout). A split axis with no other axis to take its
    split (a long 1-D signal over all devices) runs the four-step FFT: three
    ``all_to_all`` and local FFTs of lengths ``N1 * N2 = n`` with twiddles between
    them; it needs ``devices**2`` to divide ``n``. The output keeps ``x``'s layout.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> y = shardkit.fft.fft(shardkit.shard(v, m, "x"), axis=0)
      >>> y.sharding.spec, bool(np.allclose(y, np.fft.fft(v, axis=0)))
      (P('x', None), True)

      A 1-D signal split over all 8 devices (four-step, 128 = 16 x 8):

      >>> s = np.cos(np.arange(128.0))
      >>> y = shardkit.fft.fft(shardkit.shard(s, m, "x"))
      >>> y.sharding.spec, bool(np.allclose(y, np.fft.fft(s)))
      (P('x',), True)
      >>> shardkit.fft.plan("fftn", (128,), "x", m).all_to_alls
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
    out_layout: Layout = "default",
) -> jax.Array:
    """1-D inverse FFT along ``axis``, as ``jnp.fft.ifft``; see :func:`fft`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.ifft(shardkit.shard(v, m, "x")), np.fft.ifft(v)))
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
    out_layout: Layout = "default",
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
      >>> bool(np.allclose(shardkit.fft.rfft(shardkit.shard(v, m, "x")), np.fft.rfft(v)))
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
    out_layout: Layout = "default",
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
      >>> z = shardkit.fft.irfft(shardkit.shard(v, m, "x"))
      >>> bool(np.allclose(z, np.arange(128.0).reshape(8, 16)))
      True

      A half-spectrum of 64 points split over all 8 devices, to 128 real points:

      >>> h = np.fft.rfft(np.cos(np.arange(128.0)))[:64]
      >>> z = shardkit.fft.irfft(shardkit.shard(h, m, "x"), n=128)
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
    out_layout: Layout = "default",
) -> jax.Array:
    """FFT of a Hermitian-symmetric signal (real spectrum), as ``numpy.fft.hfft``.

    :func:`irfft` of the conjugate with the opposite normalization; the conjugate is
    elementwise, so the cost and layout are :func:`irfft`'s.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(40.0).reshape(8, 5) * (1 + 1j)
      >>> bool(np.allclose(shardkit.fft.hfft(shardkit.shard(v, m, "x")), np.fft.hfft(v)))
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
    out_layout: Layout = "default",
) -> jax.Array:
    """Inverse of :func:`hfft` (a real input), as ``numpy.fft.ihfft``.

    The conjugate of :func:`rfft` with the opposite normalization.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> v = np.arange(64.0).reshape(8, 8)
      >>> bool(np.allclose(shardkit.fft.ihfft(shardkit.shard(v, m, "x")), np.fft.ihfft(v)))
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
      >>> y = shardkit.fft.fftshift(shardkit.shard(np.arange(16.0), m, "x"))
      >>> np.asarray(y)[:4].tolist(), y.sharding.spec
      ([8.0, 9.0, 10.0, 11.0], P('x',))
    """
    return shift("fftshift", x, axes, inverse=False)


def ifftshift(x: jax.typing.ArrayLike, /, axes: int | Sequence[int] | None = None) -> jax.Array:
    """Inverse of :func:`fftshift` (a roll by ``-(n // 2)``), as ``jnp.fft.ifftshift``.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> x = shardkit.shard(np.arange(24.0), m, "x")
      >>> bool(np.array_equal(shardkit.fft.ifftshift(shardkit.fft.fftshift(x)), np.arange(24.0)))
      True
    """
    return shift("ifftshift", x, axes, inverse=True)
