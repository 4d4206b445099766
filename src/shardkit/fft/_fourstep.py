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

:func:`planned` is the planners' entry point: the plan of
:func:`~shardkit.fft._plan.make_plan`, or this one where that finds no axis to move
a split to.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from shardkit.fft._plan import FFTPlan, make_plan
from shardkit.fft._problem import Problem
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
    """

    axis: int = 0
    n1: int = 1
    n2: int = 1
    mesh_axes: tuple[str, ...] = ()
    parts: int = 1
    inverse: bool = False

    def local(self, block: jax.Array, /) -> jax.Array:
        """Run the four steps on this device's block (inside ``shard_map``)."""
        return _four_step(block, self)


def _factor(n: int, parts: int) -> int | None:
    """``N1`` with ``parts | N1`` and ``parts | N / N1``, closest to ``sqrt(n)``."""
    options = [d for d in range(parts, n + 1, parts) if n % d == 0 and (n // d) % parts == 0]
    return min(options, key=lambda d: abs(math.log(d / math.sqrt(n)))) if options else None


def four_step_plan(problem: Problem, /) -> FourStepPlan | None:
    """The four-step plan for a C2C transform of one split axis, or ``None`` if none fits.

    Fits when one axis is transformed, to its own length, split over ``P`` devices
    with ``P**2`` dividing its length, and no other axis is split.
    """
    shape, entries, mesh_sizes = problem.shape, problem.spec, problem.mesh_sizes
    rank = len(shape)
    if len(problem.axes) != 1:
        return None
    (axis,), (n,) = problem.axes, problem.sizes
    group = tuple(entries[axis])
    parts = math.prod(mesh_sizes[a] for a in group)
    others = [
        d for d in range(rank) if d != axis and math.prod(mesh_sizes[a] for a in entries[d]) > 1
    ]
    if parts == 1 or others or n != shape[axis]:
        return None
    n1 = _factor(n, parts)
    if n1 is None:
        return None
    block = list(shape)
    block[axis] = n // parts
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
        Step(op, axes=(axis,), sizes=(n // n1,)),
        move,
    )
    in_spec = _to_spec(entries)
    return FourStepPlan(
        name=problem.name,
        in_shape=shape,
        in_spec=in_spec,
        out_shape=shape,
        out_spec=in_spec,
        steps=steps,
        decomposition="four-step",
        layout="natural",
        norm=problem.norm,
        axis=axis,
        n1=n1,
        n2=n // n1,
        mesh_axes=group,
        parts=parts,
        inverse=problem.inverse,
    )


def planned(problem: Problem, /, *, ctx: str = "") -> FFTPlan:
    """:func:`~shardkit.fft._plan.make_plan`, or the four-step plan where no axis can take the split.

    A C2C transform of one split axis with no other axis to move the split to (a
    split 1-D signal) runs the four-step algorithm instead of being refused.
    """
    try:
        return make_plan(problem, ctx=ctx)
    except NotImplementedError:
        if problem.kind != "c2c":
            raise
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
