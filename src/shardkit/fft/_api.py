"""The transforms: ``jnp.fft``'s signatures, computed without gathering.

Routing, by what is known about the input's sharding:

* a concrete array with a ``NamedSharding`` (eager use): the plan for its spec runs
  in a jitted ``shard_map``;
* a traced array whose type carries the spec (``Explicit`` mesh axes, inside
  ``jit``, ``grad``, ``vmap``...): the same ``shard_map``, traced in place;
* a traced array on ``Auto`` axes (or with no sharding in its type): the route
  chosen from the mesh against every split the input can have
  (:mod:`shardkit.fft._route`): a ``custom_partitioning`` op whose partition the
  partitioner calls with the operand's sharding (:mod:`shardkit.fft._partition`),
  or, where no sharding rule keeps every split, one split's plan in a
  ``shard_map`` that every input is moved to;
* anything on one device: ``jnp.fft`` itself.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from shardkit._deprecation import moved
from shardkit._programs import cached, shard_jit
from shardkit.fft._fourstep import planned
from shardkit.fft._operand import path
from shardkit.fft._partition import apply, check_traced
from shardkit.fft._plan import FFTPlan
from shardkit.fft._problem import (
    KINDS,
    FftProblem,
    InLayout,
    Kind,
    Name,
    OutLayout,
    is_name,
    transposed_order,
    unpermute,
)
from shardkit.fft._route import Route, route
from shardkit.layout.internal import (
    SpecLike,
    check_mesh_arg,
    check_placement,
    is_traced,
    mesh_summary,
    normalize,
    operand,
    parse_spec,
    spec_summary,
)

__all__ = ["plan", "transform"]

_NORMS = (None, "backward", "ortho", "forward")
_LAYOUTS = ("default", "natural", "transposed")
_IN_LAYOUTS = ("natural", "transposed")


def _normalize_axes(
    where: str, shape: tuple[int, ...], s: Sequence[int] | None, axes: Sequence[int] | None
) -> tuple[int, ...]:
    rank = len(shape)
    if axes is None:
        if s is None:
            return tuple(range(rank))
        if len(s) > rank:
            raise ValueError(f"{where}: s={tuple(s)} has more entries than x has axes ({rank})")
        return tuple(range(rank - len(s), rank))
    try:
        out = tuple(operator.index(a) for a in axes)
    except TypeError:
        raise TypeError(f"{where}: axes={axes!r} must be a sequence of ints") from None
    bad = [a for a in out if not -rank <= a < rank]
    if bad:
        raise ValueError(
            f"{where}: axes={tuple(out)} names axis {bad[0]}, out of range for an array "
            f"of rank {rank} (legal: {-rank}..{rank - 1})"
        )
    out = tuple(a % rank for a in out)
    if len(set(out)) != len(out):
        raise ValueError(f"{where}: axes={tuple(axes)} repeats an axis; give each at most once")
    return out


def _normalize_sizes(
    where: str, kind: Kind, shape: tuple[int, ...], s: Sequence[int] | None, axes: tuple[int, ...]
) -> tuple[int, ...]:
    if s is None:
        sizes = [shape[a] for a in axes]
        if kind == "c2r" and axes:
            sizes[-1] = 2 * (shape[axes[-1]] - 1)
    else:
        try:
            sizes = [operator.index(n) for n in s]
        except TypeError:
            raise TypeError(f"{where}: s={s!r} must be a sequence of ints") from None
        if len(sizes) != len(axes):
            raise ValueError(
                f"{where}: s={tuple(sizes)} and axes={axes} differ in length; give one "
                "size per transformed axis"
            )
    if any(n < 1 for n in sizes):
        raise ValueError(f"{where}: s={tuple(sizes)}: every transformed length must be >= 1")
    return tuple(sizes)


def _auto_route(problem: FftProblem, arr: jax.Array) -> tuple[Route, Any]:
    """The Auto-axes route (see :mod:`~shardkit.fft._route`) and the mesh it was chosen for.

    Non-float inputs are cast as ``jnp.fft`` casts them.
    """
    dtype = np.dtype(arr.dtype)
    if not jnp.issubdtype(dtype, jnp.inexact):
        # jnp.fft promotes ints and bools to the default float dtype's complex twin
        # through its own rules; match its output dtype exactly.
        out = jax.eval_shape(
            functools.partial(problem.reference, s=problem.sizes, axes=problem.axes),
            jax.ShapeDtypeStruct(problem.shape, dtype),
        ).dtype
        dtype = (
            np.dtype(jnp.finfo(out).dtype)
            if problem.kind != "c2r"
            else np.result_type(out, np.complex64)
        )
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty:  # no jax.set_mesh: the operand's type may carry it
        mesh = getattr(getattr(jax.typeof(arr), "sharding", None), "mesh", None)
    return route(problem, str(dtype), mesh), mesh


def _check_options(where: str, norm: str | None, out_layout: str, in_layout: str) -> None:
    if norm not in _NORMS:
        raise ValueError(f"{where}: norm={norm!r}; legal values are {list(_NORMS)}")
    if out_layout not in _LAYOUTS:
        raise ValueError(f"{where}: out_layout={out_layout!r}; legal values are {list(_LAYOUTS)}")
    if in_layout not in _IN_LAYOUTS:
        raise ValueError(f"{where}: in_layout={in_layout!r}; legal values are {list(_IN_LAYOUTS)}")


@cached
def _program(p: FFTPlan, mesh: Any, traced: bool) -> Callable[[jax.Array], jax.Array]:
    """The plan's jitted ``shard_map``; ``traced`` (Explicit axes inside ``jit``): with
    tangents moved to the input's split (see :func:`shardkit._programs.shard_jit`)."""
    return shard_jit(p.local, mesh, p.in_spec, p.out_spec, reshard_tangents=traced)


def _describe(
    name: Name,
    stored: tuple[int, ...],
    s: Sequence[int] | None,
    axes: Sequence[int] | None,
    norm: str | None,
    out_layout: OutLayout,
    in_layout: InLayout,
) -> FftProblem:
    """The one :class:`~shardkit.fft._problem.FftProblem` of a public call (axes and ``s`` checked).

    ``stored`` is the input array's shape; with ``in_layout="transposed"`` its
    transformed axes are rolled (see :func:`~shardkit.fft._problem.transposed_order`)
    and ``axes``/``s`` name the logical ones.
    """
    axes_t = _normalize_axes(name, stored, s, axes)
    roll = transposed_order(len(stored), axes_t)
    in_order = roll if in_layout == "transposed" else ()
    shape = unpermute(stored, in_order)
    sizes = _normalize_sizes(name, KINDS[name][0], shape, s, axes_t)
    return FftProblem(
        name,
        shape,
        axes_t,
        sizes,
        norm,
        "natural" if out_layout == "natural" else "default",
        in_order=in_order,
        out_order=roll if out_layout == "transposed" else (),
    )


def _reference(problem: FftProblem, arr: jax.Array) -> jax.Array:
    """``jnp.fft``'s transform, for inputs on one device (in the problem's axis orders)."""
    return problem.stored_reference(arr, norm=problem.norm)


def _ctx(x_shape: tuple[int, ...], spec: PartitionSpec, mesh: Any) -> str:
    return f"array shape={x_shape}, spec={spec_summary(spec)}, {mesh_summary(mesh)}"


def transform(
    name: Name,
    x: jax.typing.ArrayLike,
    s: Sequence[int] | None,
    axes: Sequence[int] | None,
    norm: str | None,
    out_layout: OutLayout,
    in_layout: InLayout = "natural",
) -> jax.Array:
    """Run transform ``name`` (``fftn``, ``ifftn``, ``rfftn``, ``irfftn``) on ``x``."""
    kind = KINDS[name][0]
    _check_options(name, norm, out_layout, in_layout)
    arr = x if isinstance(x, jax.Array) else jnp.asarray(x)
    if arr.ndim == 0:
        raise ValueError(f"{name}: x has rank 0; an FFT needs at least one axis")
    if kind == "r2c" and jnp.issubdtype(arr.dtype, jnp.complexfloating):
        raise TypeError(
            f"{name}: x has dtype {arr.dtype}; the R2C transform takes a real input. "
            "Use fftn for complex inputs."
        )
    problem = _describe(name, tuple(arr.shape), s, axes, norm, out_layout, in_layout)
    if not problem.axes:
        return _reference(problem, arr)
    route, mesh, spec = path(operand(name, "x", arr))
    if route == "local":
        return _reference(problem, arr)
    if route == "auto":
        r, mesh = _auto_route(problem, arr)
        if r.plan is not None:
            check_traced(r.op, jnp.asarray(arr, r.op.in_dtype))
            return _program(r.plan, mesh, False)(arr)
        return apply(r.op, arr)
    assert spec is not None
    p = _checked_plan(name, problem, spec, mesh)
    return _program(p, mesh, route != "eager")(arr)


def plan(
    name: str,
    shape: Sequence[int],
    legacy_spec: SpecLike = None,
    legacy_mesh: Mesh | None = None,
    /,
    *,
    mesh: Mesh | None = None,
    spec: SpecLike = None,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str | None = None,
    out_layout: OutLayout = "default",
    in_layout: InLayout = "natural",
    chunks: int | None = None,
) -> FFTPlan:
    """Plan a distributed transform: the per-shard form, for your own ``shard_map``.

    The plan holds the input and output specs and the steps (local FFTs and
    ``all_to_all`` moves); ``plan.local`` runs them on one device's block and must be
    called inside ``jax.shard_map`` over ``mesh`` with ``in_specs=plan.in_spec`` and
    ``out_specs=plan.out_spec``.

    Args:
      name: ``"fftn"``, ``"ifftn"``, ``"rfftn"`` or ``"irfftn"`` (``fft2`` and ``fft``
        are ``fftn`` with ``axes``).
      shape: the global input shape.
      legacy_spec: deprecated; the third positional argument of
        ``plan(name, shape, spec, mesh)``. Pass ``spec=``.
      legacy_mesh: deprecated; the fourth positional argument. Pass ``mesh=``.
      mesh: the device mesh (required).
      spec: the input's ``PartitionSpec`` (or a string for :func:`shardkit.spec`);
        omitted means replicated. ``shape`` and ``spec`` are the input array's own
        (rolled when ``in_layout="transposed"``).
      s: transformed lengths, as in ``jnp.fft.fftn``.
      axes: transformed axes, as in ``jnp.fft.fftn``.
      norm: ``None``, ``"backward"``, ``"ortho"`` or ``"forward"``.
      out_layout: ``"default"``, ``"natural"`` or ``"transposed"`` (see
        :func:`shardkit.fft.fftn`).
      in_layout: ``"natural"`` or ``"transposed"`` (see :func:`shardkit.fft.ifftn`).
      chunks: cut each ``all_to_all`` and the local FFT after it into this many
        pieces along an axis neither touches (see :attr:`FFTPlan.chunks`); 1 runs
        them whole. ``None`` (the default, also what :func:`~shardkit.fft.fftn`
        uses) runs blocks under 2**20 elements whole and cuts larger ones into up
        to 16 pieces of at least 2**17 elements, each sending at least 2**15 to
        every device of the group (measured on CPU devices; see the guide).

    Returns:
      The :class:`~shardkit.fft.FFTPlan`.

    Raises:
      ValueError: unknown ``name``, bad ``s``/``axes``/``norm``/``out_layout``, an
        input split the mesh does not divide, or an output that no layout divides
        (the message names the axis and the remedy). Intermediate lengths the mesh
        does not divide are padded: see ``plan.padded`` and ``plan.padding_bytes``.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> p = shardkit.fft.plan("fftn", (16, 16, 16), mesh=m, spec="x,y,None")
      >>> p.out_spec, p.all_to_alls, p.decomposition
      (P(None, 'x', 'y'), 2, 'pencil')
      >>> x = shardkit.shard(np.ones((16, 16, 16), np.complex64), mesh=m, spec="x,y,None")
      >>> f = jax.shard_map(p.local, mesh=m, in_specs=p.in_spec, out_specs=p.out_spec)
      >>> complex(np.asarray(f(x))[0, 0, 0])
      (4096+0j)
    """
    if not is_name(name):
        raise ValueError(f"plan: name={name!r}; legal values are {sorted(KINDS)}")
    if moved(
        "plan",
        old="plan(name, shape, spec, mesh)",
        new="plan(name, shape, mesh=mesh, spec=spec)",
        old_given=legacy_spec is not None or legacy_mesh is not None,
        new_given=mesh is not None or spec is not None,
    ):
        spec, mesh = legacy_spec, legacy_mesh
    if mesh is None:
        raise TypeError(
            "plan: mesh= is missing; pass the device mesh and the input's spec, e.g. "
            "shardkit.fft.plan('fftn', shape, mesh=shardkit.mesh('2x4', 'x,y'), spec='x,y')"
        )
    check_mesh_arg("plan", mesh)
    _check_options("plan", norm, out_layout, in_layout)
    shape_t = tuple(int(n) for n in shape)
    p_spec = parse_spec(spec)
    problem = _describe(name, shape_t, s, axes, norm, out_layout, in_layout)
    if chunks is not None and (
        isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1
    ):
        raise ValueError(f"plan: chunks={chunks!r}; legal values are None or ints >= 1")
    problem = dataclasses.replace(problem, chunks=chunks)
    return _checked_plan("plan", problem, p_spec, mesh)


def _checked_plan(where: str, problem: FftProblem, spec: PartitionSpec, mesh: Mesh) -> FFTPlan:
    """Check ``problem``'s input fits ``spec`` on ``mesh`` (errors name ``where``), then plan."""
    check_placement(where, problem.in_shape, spec, mesh)
    placed = problem.placed(spec, dict(mesh.shape))
    return planned(placed, ctx=_ctx(problem.in_shape, spec, mesh))


def _frequencies(
    name: str,
    values: np.ndarray,
    like: jax.Array | None,
    axis: int,
    dtype: jax.typing.DTypeLike | None,
) -> jax.Array:
    out = jnp.asarray(values, dtype=dtype)
    if like is None:
        return out
    rank = like.ndim
    if not -rank <= axis < rank:
        raise ValueError(f"{name}: axis={axis} is out of range for like of rank {rank}")
    axis %= rank
    if like.shape[axis] != values.shape[0]:
        raise ValueError(
            f"{name}: like has length {like.shape[axis]} along axis={axis} but the grid "
            f"has {values.shape[0]} points; pass n and d of the transform that made like"
        )
    shape = [1] * rank
    shape[axis] = values.shape[0]
    out = out.reshape(shape)
    sharding = like.sharding if not is_traced(like) else None
    if isinstance(sharding, NamedSharding):
        entry = normalize(sharding.spec, rank)[axis]
        spec: list[tuple[str, ...] | None] = [None] * rank
        spec[axis] = entry or None
        out = jax.device_put(out, NamedSharding(sharding.mesh, PartitionSpec(*spec)))
    return out


def fftfreq(
    n: int,
    d: float = 1.0,
    *,
    like: jax.Array | None = None,
    axis: int = -1,
    dtype: jax.typing.DTypeLike | None = None,
) -> jax.Array:
    """Sample frequencies of an ``n``-point FFT, placed like a transform's output.

    Without ``like`` this is ``jnp.fft.fftfreq(n, d)``. With ``like`` (an array from
    :func:`fftn` and friends) the result has shape ``[1, ..., n, ..., 1]`` (``n`` at
    ``axis``) and is split along ``axis`` exactly as ``like`` is, replicated along
    the other mesh axes: it broadcasts against ``like`` with no communication, in
    either output layout.

    Args:
      n: transform length.
      d: sample spacing.
      like: an array whose layout along ``axis`` the grid should follow.
      axis: the axis of ``like`` the frequencies belong to.
      dtype: the result dtype (default: the default float dtype).

    Returns:
      The frequencies ``[0, 1, ..., n/2-1, -n/2, ..., -1] / (d n)``.

    Raises:
      ValueError: ``axis`` out of range, or ``like``'s length there is not ``n``.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> y = shardkit.fft.fftn(shardkit.shard(np.ones((16, 8)), mesh=m, spec="x,None"))
      >>> k = shardkit.fft.fftfreq(8, like=y, axis=1)
      >>> k.shape, k.sharding.spec
      ((1, 8), P(None, 'x'))
    """
    return _frequencies("fftfreq", np.fft.fftfreq(n, d), like, axis, dtype)


def rfftfreq(
    n: int,
    d: float = 1.0,
    *,
    like: jax.Array | None = None,
    axis: int = -1,
    dtype: jax.typing.DTypeLike | None = None,
) -> jax.Array:
    """Sample frequencies of an ``n``-point real FFT (``n // 2 + 1`` of them).

    As :func:`fftfreq`, with ``like`` the output of :func:`rfftn` (whose halved last
    axis is never split when the mesh does not divide ``n // 2 + 1``).

    Args:
      n: the real transform length.
      d: sample spacing.
      like: an array whose layout along ``axis`` the grid should follow.
      axis: the axis of ``like`` the frequencies belong to.
      dtype: the result dtype.

    Returns:
      The frequencies ``[0, 1, ..., n//2] / (d n)``.

    Raises:
      ValueError: ``axis`` out of range, or ``like``'s length there is not ``n//2+1``.

    Example:
      >>> shardkit.fft.rfftfreq(8).tolist()
      [0.0, 0.125, 0.25, 0.375, 0.5]
    """
    return _frequencies("rfftfreq", np.fft.rfftfreq(n, d), like, axis, dtype)
