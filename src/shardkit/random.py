"""Mesh-invariant sharded random numbers, generated in place with no communication.

``normal(key, shape, out_sharding=sharding)`` returns the same values as
``jax.random.normal(key, shape)`` computed on one device, whatever the mesh and spec
of ``out_sharding`` (JAX's own name for it, as in ``jax.random.normal``), and every device computes only its own block: the compiled program
holds no collective (``shardkit.comms`` proves it in the tests).

This rests on JAX's *partitionable* threefry implementation, the flag
``jax_threefry_partitionable`` that seed 004's "sharp bit" is about. With the flag
off, JAX's stable implementation makes a sharded draw gather counters
(an all-gather and a collective-permute on 8 CPU devices), and its values differ from
the partitionable ones. The flag is on by default since JAX 0.5, but a user (or a
library) may turn it off globally; these functions therefore trace their draw under
the scoped ``jax.threefry_partitionable(True)`` context manager, so they are
partitionable whatever the global setting, and they change no global state. The
reference they equal is the unsharded draw under the same setting::

    with jax.threefry_partitionable(True):
        ref = jax.random.normal(key, shape, dtype)

The values of the partitionable implementation are fixed for a given JAX version
but may change across releases (as JAX documents).

Keys may be typed keys (``jax.random.key``) or legacy ``uint32[2]`` keys
(``jax.random.PRNGKey``). The functions also work inside ``jax.jit``, where the
sharding becomes a constraint on the draw. The positional ``sharding`` of earlier
releases still works, with a ``DeprecationWarning``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, Sharding

from shardkit._deprecation import UNSET, pick
from shardkit._programs import cached
from shardkit._typing import ArrayLike, DTypeLike
from shardkit.layout.internal import check_placement, is_traced

__all__ = ["bernoulli", "normal", "randint", "uniform"]

Sampler = Callable[..., jax.Array]


def _normal(key: jax.Array, shape: tuple[int, ...], dtype: Any, out: Any) -> jax.Array:
    return jax.random.normal(key, shape, dtype, out_sharding=out)


def _uniform(
    key: jax.Array,
    shape: tuple[int, ...],
    dtype: Any,
    out: Any,
    minval: jax.Array,
    maxval: jax.Array,
) -> jax.Array:
    return jax.random.uniform(key, shape, dtype, minval, maxval, out_sharding=out)


def _bernoulli(
    key: jax.Array, shape: tuple[int, ...], dtype: Any, out: Any, p: jax.Array
) -> jax.Array:
    del dtype
    return jax.random.bernoulli(key, p, shape, out_sharding=out)


def _randint(
    key: jax.Array,
    shape: tuple[int, ...],
    dtype: Any,
    out: Any,
    minval: jax.Array,
    maxval: jax.Array,
) -> jax.Array:
    return jax.random.randint(key, shape, minval, maxval, dtype, out_sharding=out)


_SAMPLERS: dict[str, Sampler] = {
    "normal": _normal,
    "uniform": _uniform,
    "bernoulli": _bernoulli,
    "randint": _randint,
}


@cached
def _jitted(name: str, shape: tuple[int, ...], dtype: Any, sharding: Sharding) -> Any:
    sampler = _SAMPLERS[name]
    # On Explicit axes the draw's own type must carry the split: without out_sharding
    # it is replicated by type, every device draws the whole array and out_shardings
    # then slices it (inside a caller's jit, an all-gather). Auto axes take the
    # out_shardings constraint, which the partitioner propagates into the draw.
    mesh = getattr(sharding, "mesh", None)
    explicit = mesh is not None and AxisType.Explicit in tuple(mesh.axis_types)
    out = sharding if explicit else None

    def draw(key: jax.Array, *operands: jax.Array) -> jax.Array:
        return sampler(key, shape, dtype, out, *operands)

    draw.__name__ = f"shardkit_random_{name}"
    return jax.jit(draw, out_shardings=sharding)


def _out(where: str, sharding: Sharding | None, out_sharding: Sharding | None) -> Sharding:
    """The result's sharding, from ``out_sharding=`` or the deprecated positional one."""
    out = pick(
        where,
        old=f"the positional sharding, {where}(key, shape, sharding)",
        old_value=UNSET if sharding is None else sharding,
        new=f"{where}(key, shape, out_sharding=sharding)",
        new_value=out_sharding,
        stacklevel=5,
    )
    if out is None:
        raise TypeError(
            f"{where}: out_sharding= is missing; pass where the result lives, e.g. "
            f"{where}(key, shape, out_sharding=shardkit.sharding(mesh, 'x,y'))"
        )
    return out


def _check(where: str, key: Any, shape: Any, sharding: Any) -> tuple[int, ...]:
    if not isinstance(sharding, Sharding):
        raise TypeError(
            f"{where}: out_sharding={sharding!r} ({type(sharding).__name__}) must be a "
            "jax.sharding.Sharding, e.g. shardkit.sharding(mesh, 'x,y') or "
            "jax.NamedSharding(mesh, jax.P('x', 'y'))"
        )
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    if not isinstance(shape, Sequence | tuple) or not all(
        isinstance(d, int | np.integer) and d >= 0 for d in shape
    ):
        raise TypeError(f"{where}: shape={shape!r} must be a tuple of non-negative integers")
    shape = tuple(int(d) for d in shape)
    if isinstance(sharding, NamedSharding):
        check_placement(f"{where}(out_sharding=...)", shape, sharding.spec, sharding.mesh)
    else:
        sharding.shard_shape(shape)  # raises for an indivisible shape
    dtype = getattr(key, "dtype", None)
    if dtype is None or not (
        jnp.issubdtype(dtype, jax.dtypes.prng_key) or np.dtype(dtype) == np.uint32
    ):
        raise TypeError(
            f"{where}: key={key!r} must be a PRNG key from jax.random.key or "
            "jax.random.PRNGKey, not a value of type "
            f"{type(key).__name__} (dtype {dtype})"
        )
    return shape


def _draw(name: str, key: Any, shape: Any, sharding: Any, dtype: Any, *operands: Any) -> jax.Array:
    shape = _check(name, key, shape, sharding)
    with jax.threefry_partitionable(True):
        return _jitted(name, shape, dtype, sharding)(key, *operands)


def _float_dtype(where: str, dtype: Any) -> Any:
    dt = jnp.dtype(dtype) if dtype is not None else jnp.dtype(jnp.zeros(0).dtype)
    if not jnp.issubdtype(dt, jnp.floating):
        raise ValueError(f"{where}: dtype={dt.name} must be a floating dtype")
    return dt


def _values(where: str, name: str, x: Any, example: str) -> np.ndarray | None:
    """``x``'s values, or None where they are traced under ``jit`` and unknown yet.

    Raises TypeError unless they are real numbers (bool, int or float).
    """
    if is_traced(x) or (isinstance(x, jax.Array) and not x.is_fully_addressable):
        return None
    try:
        values = np.asarray(x)
    except (TypeError, ValueError):
        values = np.asarray(None)
    if not (values.dtype == np.bool_ or jnp.issubdtype(values.dtype, jnp.integer)) and not (
        jnp.issubdtype(values.dtype, jnp.floating)  # bfloat16 too, whose NumPy kind is "V"
    ):
        raise TypeError(
            f"{where}: {name}={x!r} ({type(x).__name__}) must be a real number or an "
            f"array of them, e.g. {name}={example}"
        )
    return values


def _check_interval(where: str, minval: Any, maxval: Any, dtype: Any = None) -> None:
    """Raises unless ``minval < maxval`` everywhere, in ``dtype``; traced bounds pass.

    Read from the arguments as given: inside ``jit`` even a constant becomes a tracer
    once ``jnp.asarray`` has converted it.
    """
    lo_example, hi_example = ("0", "10") if where == "randint" else ("0.0", "1.0")
    lo_v = _values(where, "minval", minval, lo_example)
    hi_v = _values(where, "maxval", maxval, hi_example)
    if lo_v is None or hi_v is None:
        return
    if dtype is not None:
        lo_v, hi_v = lo_v.astype(dtype), hi_v.astype(dtype)
    if bool(np.all(lo_v < hi_v)):
        return
    elementwise = "" if lo_v.size == 1 and hi_v.size == 1 else ", elementwise"
    raise ValueError(
        f"{where}: minval={minval!r} must be below maxval={maxval!r} (compared as "
        f"{np.result_type(lo_v, hi_v).name}{elementwise}; NaN never is); "
        f"jax.random.{where} would return minval for an empty or reversed interval "
        "instead of failing. Pass minval < maxval, e.g. swap them"
    )


def normal(
    key: ArrayLike,
    shape: Sequence[int],
    sharding: Sharding | None = None,
    /,
    *,
    out_sharding: Sharding | None = None,
    dtype: DTypeLike | None = None,
) -> jax.Array:
    """Standard normal values of ``shape``, placed with ``out_sharding``, drawn in place.

    Each device draws only its own block (no collective; compute and memory 1/P of
    the array per device when it is fully sharded). The values are bit-identical for
    every mesh and spec, and to the unsharded ``jax.random.normal(key, shape, dtype)``
    under ``jax.threefry_partitionable(True)`` (JAX's default).

    Args:
      key: a PRNG key (``jax.random.key`` or ``jax.random.PRNGKey``).
      shape: the global shape.
      sharding: deprecated positional spelling of ``out_sharding``.
      out_sharding: where the result lives, e.g. ``shardkit.sharding(mesh, "x,y")``
        (JAX's name, as in ``jax.random.normal(..., out_sharding=...)``).
      dtype: a floating dtype; JAX's default float when None.

    Returns:
      A ``jax.Array`` of ``shape`` with ``out_sharding``.

    Raises:
      TypeError: ``key``, ``shape`` or ``out_sharding`` has the wrong type (or is missing).
      ValueError: the spec does not fit the mesh or does not divide ``shape``.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y", axis_types="auto")
      >>> key = jax.random.key(0)
      >>> a = shardkit.random.normal(key, (4, 8), out_sharding=shardkit.sharding(m, "x,y"), dtype=np.float32)
      >>> shardkit.describe(a)
      'float32[4@x,8@y] on mesh(x=2,y=4): 8 shards of float32[2,2] (16 B each), 1 copy'
      >>> b = shardkit.random.normal(key, (4, 8), out_sharding=shardkit.sharding(m, "y,None"), dtype=np.float32)
      >>> bool((np.asarray(a) == np.asarray(b)).all())
      True
      >>> bool((np.asarray(a) == np.asarray(jax.random.normal(key, (4, 8), np.float32))).all())
      True
    """
    return _draw(
        "normal", key, shape, _out("normal", sharding, out_sharding), _float_dtype("normal", dtype)
    )


def uniform(
    key: ArrayLike,
    shape: Sequence[int],
    sharding: Sharding | None = None,
    /,
    *,
    out_sharding: Sharding | None = None,
    dtype: DTypeLike | None = None,
    minval: ArrayLike = 0.0,
    maxval: ArrayLike = 1.0,
) -> jax.Array:
    """Uniform values in ``[minval, maxval)`` of ``shape``, placed with ``out_sharding``.

    Drawn in place with no communication; identical for every mesh and spec and to
    ``jax.random.uniform(key, shape, dtype, minval, maxval)`` (see :func:`normal`).

    Args:
      key: a PRNG key.
      shape: the global shape.
      sharding: deprecated positional spelling of ``out_sharding``.
      out_sharding: where the result lives.
      dtype: a floating dtype; JAX's default float when None.
      minval: lower bound (inclusive), a scalar (or an array broadcasting to ``shape``).
      maxval: upper bound (exclusive), above ``minval`` in ``dtype``. The check runs
        where the bounds are known: on values, and on constants inside ``jax.jit``.
        Bounds traced under ``jit`` are not checked; there, as in
        ``jax.random.uniform``, ``maxval <= minval`` gives ``minval``.

    Returns:
      A ``jax.Array`` of ``shape`` with ``out_sharding``.

    Raises:
      TypeError: ``key``, ``shape`` or ``out_sharding`` has the wrong type (or is missing), or a bound
        is not a real number.
      ValueError: the spec does not fit the mesh or does not divide ``shape``, or
        ``minval >= maxval`` (or NaN).

    Example:
      >>> m = shardkit.mesh("8", "x", axis_types="auto")
      >>> u = shardkit.random.uniform(jax.random.key(1), (16,), out_sharding=shardkit.sharding(m, "x"),
      ...                             dtype=np.float32, minval=-1.0, maxval=1.0)
      >>> bool((np.asarray(u) >= -1).all() and (np.asarray(u) < 1).all())
      True
    """
    out = _out("uniform", sharding, out_sharding)
    dt = _float_dtype("uniform", dtype)
    _check_interval("uniform", minval, maxval, dt)
    return _draw("uniform", key, shape, out, dt, jnp.asarray(minval, dt), jnp.asarray(maxval, dt))


def bernoulli(
    key: ArrayLike,
    shape: Sequence[int],
    sharding: Sharding | None = None,
    /,
    *,
    out_sharding: Sharding | None = None,
    p: ArrayLike = 0.5,
) -> jax.Array:
    """Booleans that are True with probability ``p``, of ``shape``, placed with ``out_sharding``.

    Drawn in place with no communication; identical for every mesh and spec and to
    ``jax.random.bernoulli(key, p, shape)`` (see :func:`normal`).

    Args:
      key: a PRNG key.
      shape: the global shape.
      sharding: deprecated positional spelling of ``out_sharding``.
      out_sharding: where the result lives.
      p: probability of True, a scalar in ``[0, 1]`` (or such an array broadcasting
        to ``shape``). Checked where known, as ``uniform``'s bounds are; a ``p``
        traced under ``jit`` is not, and gives what ``jax.random.bernoulli`` gives.

    Returns:
      A boolean ``jax.Array`` of ``shape`` with ``out_sharding``.

    Raises:
      TypeError: ``key``, ``shape`` or ``out_sharding`` has the wrong type (or is missing), or ``p`` is
        not a real number.
      ValueError: the spec does not fit the mesh or does not divide ``shape``, or
        ``p`` is outside ``[0, 1]`` (or NaN).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y", axis_types="auto")
      >>> mask = shardkit.random.bernoulli(jax.random.key(2), (8, 8), out_sharding=shardkit.sharding(m, "x,y"),
      ...                                  p=0.25)
      >>> mask.dtype, mask.sharding.spec
      (dtype('bool'), P('x', 'y'))
    """
    # p keeps the dtype JAX would give it, since the draw's precision follows p's dtype.
    values = _values("bernoulli", "p", p, "0.25")
    if values is not None and not bool(np.all((values >= 0) & (values <= 1))):
        raise ValueError(
            f"bernoulli: p={p!r} must be a probability in [0, 1]"
            f"{'' if values.size == 1 else ' everywhere'} (NaN is not); "
            "jax.random.bernoulli would return all True above 1 and all False below 0 "
            "instead of failing. Pass the probability of True, e.g. p=0.25"
        )
    out = _out("bernoulli", sharding, out_sharding)
    return _draw("bernoulli", key, shape, out, None, jnp.asarray(p))


def randint(
    key: ArrayLike,
    shape: Sequence[int],
    sharding: Sharding | None = None,
    /,
    *,
    out_sharding: Sharding | None = None,
    minval: ArrayLike,
    maxval: ArrayLike,
    dtype: DTypeLike = np.int32,
) -> jax.Array:
    """Integers in ``[minval, maxval)`` of ``shape``, placed with ``out_sharding``.

    Drawn in place with no communication; identical for every mesh and spec and to
    ``jax.random.randint(key, shape, minval, maxval, dtype)`` (see :func:`normal`).

    Args:
      key: a PRNG key.
      shape: the global shape.
      sharding: deprecated positional spelling of ``out_sharding``.
      out_sharding: where the result lives.
      minval: lower bound (inclusive), a scalar.
      maxval: upper bound (exclusive), above ``minval``; checked as ``uniform``'s
        bounds are (bounds traced under ``jit`` are not, and ``maxval <= minval``
        then gives ``minval``, as in ``jax.random.randint``).
      dtype: an integer dtype (int32 by default).

    Returns:
      An integer ``jax.Array`` of ``shape`` with ``out_sharding``.

    Raises:
      TypeError: ``key``, ``shape`` or ``out_sharding`` has the wrong type (or is missing), or a bound
        is not a real number.
      ValueError: the spec does not fit the mesh, does not divide ``shape``,
        ``dtype`` is not an integer dtype, or ``minval >= maxval``.

    Example:
      >>> m = shardkit.mesh("4x2", "x,y", axis_types="auto")
      >>> r = shardkit.random.randint(jax.random.key(3), (4, 6), out_sharding=shardkit.sharding(m, "x,y"),
      ...                             minval=0, maxval=10)
      >>> r.dtype, int(np.asarray(r).min()) >= 0, int(np.asarray(r).max()) < 10
      (dtype('int32'), True, True)
    """
    out = _out("randint", sharding, out_sharding)
    dt = jnp.dtype(dtype)
    if not jnp.issubdtype(dt, jnp.integer):
        raise ValueError(f"randint: dtype={dt.name} must be an integer dtype")
    # Compared as given: JAX clips the bounds to the dtype's range when it draws.
    _check_interval("randint", minval, maxval)
    return _draw("randint", key, shape, out, dt, jnp.asarray(minval, dt), jnp.asarray(maxval, dt))
