"""The four-step FFT of a split axis that no other axis can relieve (a long 1-D signal).

With ``N = N1 * N2`` and ``n = N2 * n1 + n2``, ``k = k1 + N1 * k2``::

    X[k1 + N1 k2] = sum_n2 w_N^(n2 k1) [sum_n1 x[N2 n1 + n2] w_N1^(n1 k1)] w_N2^(n2 k2)

Each device's contiguous block of ``x`` is ``N1 / P`` rows of the ``N1 x N2``
matrix ``x[N2 n1 + n2]``. Three tiled ``all_to_all`` over the axis's ``P``
devices: rows -> columns (then local FFTs of length ``N1`` and the twiddles
``w_N^(n2 k1)``), columns -> rows (local FFTs of length ``N2``), and rows ->
columns once more so that each device holds a contiguous block of ``X`` (in
``x``'s layout). Needs ``P`` to divide both ``N1`` and ``N2`` (so ``P**2 | N``);
``N1`` is the divisor closest to ``sqrt(N)``. Each move sends ``(P - 1) / P`` of
the block; the peak is one block plus its twiddles.

The C2R transform (``irfft``) of a split half-spectrum ``X[0..M)`` to ``n = 2 M``
real points (numpy's ``irfft(X, n=2 * M)``, which zero-pads the Nyquist term
``X[M]``) packs the real output as ``M`` complex points ``z[m] = x[2m] + i
x[2m+1]``, whose spectrum is ``Z[k] = E[k] + i O[k]`` with ``E[k] = (X[k] +
conj(X[M-k])) / 2`` and ``O[k] = (X[k] - conj(X[M-k])) w_n^(-k) / 2``. The
mirrored ``X[M-k]`` lives on the mirrored device: two ``collective_permute``s
(the block, from device ``P-1-j``; its first element, from device ``P-j``) bring
it, then the four-step inverse FFT of length ``M`` gives ``z``, each device's
block of which is its block of ``x``. The forward R2C transform has no such
form: its ``n//2+1`` outputs are never a multiple of ``P`` when ``P**2`` divides
``n/2``, and JAX has no uneven sharding.

:func:`planned` is the planners' entry point: the plan of
:func:`~shardkit.fft._plan.make_plan`, or this one where that finds no axis to move
a split to.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from shardkit.fft._plan import FFTPlan, make_plan
from shardkit.fft._problem import FftProblem
from shardkit.fft._steps import Step
from shardkit.layout.internal import to_pspec as _to_spec

__all__ = ["FourStepPlan", "four_step_plan", "planned"]


@dataclasses.dataclass(frozen=True)
class FourStepPlan(FFTPlan):
    """An :class:`~shardkit.fft.FFTPlan` for a 1-D transform of a split axis (four-step).

    Attributes:
      axis: the transformed axis.
      n1: rows of the ``N1 x N2`` factorization.
      n2: columns.
      mesh_axes: the mesh axes splitting ``axis``.
      parts: how many devices they span.
      inverse: whether it is the inverse transform.
      real: the C2R transform (``irfft`` to ``n = 2 * M`` of a half-spectrum of
        length ``M``); :attr:`n1` and :attr:`n2` then factor ``M``, and the
        steps list the complex inverse FFT of length ``M`` (the two
        ``collective_permute``s of the mirrored block are not among them, nor in
        :meth:`sent_bytes`).
    """

    axis: int = 0
    n1: int = 1
    n2: int = 1
    mesh_axes: tuple[str, ...] = ()
    parts: int = 1
    inverse: bool = False
    real: bool = False

    def local(self, block: jax.Array, /) -> jax.Array:
        """Run the four steps on this device's block (inside ``shard_map``)."""
        return _four_step_c2r(block, self) if self.real else _four_step(block, self)


def _factor(n: int, parts: int) -> int | None:
    """``N1`` with ``parts | N1`` and ``parts | N / N1``, closest to ``sqrt(n)``."""
    options = [d for d in range(parts, n + 1, parts) if n % d == 0 and (n // d) % parts == 0]
    return min(options, key=lambda d: abs(math.log(d / math.sqrt(n)))) if options else None


def four_step_plan(problem: FftProblem, /) -> FourStepPlan | None:
    """The four-step plan for a transform of one split axis, or ``None`` if none fits.

    Fits a C2C transform when one axis is transformed, to its own length, split
    over ``P`` devices with ``P**2`` dividing its length, and no other axis is
    split; a C2R one likewise, with the real length twice the input's (``n = 2 M``)
    and ``P**2`` dividing ``M``.
    """
    shape, entries, mesh_sizes = problem.shape, problem.spec, problem.mesh_sizes
    rank = len(shape)
    if len(problem.axes) != 1 or problem.kind == "r2c":
        return None
    (axis,), (n,) = problem.axes, problem.sizes
    real = problem.kind == "c2r"
    group = tuple(entries[axis])
    parts = math.prod(mesh_sizes[a] for a in group)
    others = [
        d for d in range(rank) if d != axis and math.prod(mesh_sizes[a] for a in entries[d]) > 1
    ]
    length = n // 2 if real else n
    if parts == 1 or others or length != shape[axis] or (real and n % 2):
        return None
    n1 = _factor(length, parts)
    if n1 is None:
        return None
    block = list(shape)
    block[axis] = length // parts
    move = Step(
        "all_to_all",
        mesh_axes=group,
        src=axis,
        dst=axis,
        group=parts,
        block=tuple(block),
        shape=shape,
        parts=tuple(parts if d == axis else 1 for d in range(rank)),
    )
    op = "ifft" if problem.inverse else "fft"
    steps = (
        move,
        Step(op, axes=(axis,), sizes=(n1,)),
        move,
        Step(op, axes=(axis,), sizes=(length // n1,)),
        move,
    )
    in_spec = _to_spec(entries)
    out_shape = list(shape)
    out_shape[axis] = n
    return FourStepPlan(
        name=problem.name,
        in_shape=shape,
        in_spec=in_spec,
        out_shape=tuple(out_shape),
        out_spec=in_spec,
        steps=steps,
        decomposition="four-step",
        layout="natural",
        norm=problem.norm,
        axis=axis,
        n1=n1,
        n2=length // n1,
        mesh_axes=group,
        parts=parts,
        inverse=problem.inverse,
        real=real,
    )


def planned(
    problem: FftProblem, /, *, ctx: str = "", out_target: Sequence[tuple[str, ...]] | None = None
) -> FFTPlan:
    """:func:`~shardkit.fft._plan.make_plan`, or the four-step plan where no axis can take the split.

    A C2C transform of one split axis with no other axis to move the split to (a
    split 1-D signal) runs the four-step algorithm instead of being refused, and so
    does a C2R one to twice the input's length.
    """
    try:
        return make_plan(problem, ctx=ctx, out_target=out_target)
    except NotImplementedError:
        four = four_step_plan(problem)
        if four is None:
            raise
        return four


def _four_step(block: jax.Array, p: FourStepPlan) -> jax.Array:
    name = p.mesh_axes[0] if len(p.mesh_axes) == 1 else p.mesh_axes
    n, n1, n2, parts = p.n1 * p.n2, p.n1, p.n2, p.parts
    if not jnp.issubdtype(block.dtype, jnp.complexfloating):
        block = block.astype(jnp.result_type(block.dtype, jnp.complex64))
    b = jnp.moveaxis(block, p.axis, -1)
    lead = b.shape[:-1]
    r = len(lead)
    fft = jnp.fft.ifft if p.inverse else jnp.fft.fft
    b = b.reshape(*lead, n1 // parts, n2)
    b = jax.lax.all_to_all(b, name, split_axis=r + 1, concat_axis=r, tiled=True)
    b = fft(b, axis=r, norm=p.norm)  # (n1 k1, n2 / P columns)
    # Twiddles w_N^(n2 k1) for this device's columns, exact integer phases mod N.
    cols = jax.lax.axis_index(name) * (n2 // parts) + jnp.arange(n2 // parts)
    phase = (jnp.arange(n1)[:, None] * cols[None, :]) % n
    real = jnp.finfo(b.dtype).dtype
    angle = (2 * np.pi / n) * phase.astype(real) * (1 if p.inverse else -1)
    b = b * jax.lax.complex(jnp.cos(angle), jnp.sin(angle)).astype(b.dtype)
    b = jax.lax.all_to_all(b, name, split_axis=r, concat_axis=r + 1, tiled=True)
    b = fft(b, axis=r + 1, norm=p.norm)  # (n1 / P rows k1, k2)
    b = jax.lax.all_to_all(b, name, split_axis=r + 1, concat_axis=r, tiled=True)
    b = jnp.swapaxes(b, r, r + 1).reshape(*lead, n // parts)
    return jnp.moveaxis(b, -1, p.axis)


def _four_step_c2r(block: jax.Array, p: FourStepPlan) -> jax.Array:
    """``irfft`` to ``2 M`` points of this device's block of a half-spectrum of length ``M``."""
    name = p.mesh_axes[0] if len(p.mesh_axes) == 1 else p.mesh_axes
    m, parts = p.n1 * p.n2, p.parts
    ctype = jnp.result_type(block.dtype, jnp.complex64)
    x = jnp.moveaxis(block.astype(ctype), p.axis, -1)
    width = x.shape[-1]  # M / P
    k = jax.lax.axis_index(name) * width + jnp.arange(width)
    # As numpy's C2R, the DC term's imaginary part (zero for a real signal) is ignored.
    x = jnp.where(k == 0, jnp.real(x).astype(ctype), x)
    # The mirror X[M - k] of this device's X[k], k = j * width + r: for r >= 1 it is
    # element width - r of device P - 1 - j; for r = 0 the first element of device
    # P - j (device 0's is the Nyquist term X[M], zero: no device sends it one).
    rev = jax.lax.ppermute(x, name, perm=[(i, parts - 1 - i) for i in range(parts)])
    head = jax.lax.ppermute(x[..., :1], name, perm=[(i, parts - i) for i in range(1, parts)])
    mirror = jnp.conj(jnp.concatenate([head, jnp.flip(rev, -1)[..., :-1]], axis=-1))
    real = jnp.finfo(ctype).dtype
    angle = (np.pi / m) * k.astype(real)  # w_n^(-k), n = 2 M
    twiddle = jax.lax.complex(jnp.cos(angle), jnp.sin(angle)).astype(ctype)
    spectrum = (x + mirror) / 2 + 1j * ((x - mirror) * twiddle / 2)
    inner = dataclasses.replace(p, axis=x.ndim - 1, inverse=True, norm="backward", real=False)
    z = _four_step(spectrum, inner)  # z[m] = x[2m] + i x[2m+1], this device's rows
    out = jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1).reshape(*z.shape[:-1], 2 * width)
    n = 2 * m
    scale = {"ortho": math.sqrt(n), "forward": float(n)}.get(p.norm or "backward", 1.0)
    out = out if scale == 1.0 else out * scale
    return jnp.moveaxis(out, -1, p.axis)
