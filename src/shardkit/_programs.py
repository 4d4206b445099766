"""One bounded cache for the programs shardkit builds, and the one per-shard program builder.

Every package that compiles something per layout (``fft``, ``linalg``, ``random``,
``train``) keeps the built program here, under a key that determines it (mesh, specs,
shapes, options), so that a second call with the same layout reuses the compiled
program. The cache is one least-recently-used list shared by all packages, bounded
by :func:`shardkit.set_program_cache_size` (``$SHARDKIT_PROGRAM_CACHE_SIZE``, default
:data:`~shardkit._config.DEFAULT_PROGRAM_CACHE_SIZE`): a long-lived process that meets
many meshes and shapes (a notebook, a service, a parameter sweep) keeps at most that
many programs, and an evicted program's compiled executables go with it (JAX keeps
them with the jitted function). Calls from several threads are safe: the list is
changed under a lock, and a program is built outside it (building may trace, or build
other cached programs).

Caches of plain values that hold no mesh and no program (``make_plan``'s block
tables, the matmul planner's priced candidates) stay ``functools.lru_cache``\\ s of
their own: they are cheap and small, and sharing the bound would let them evict
compiled programs.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, ParamSpec, TypeVar

import jax
import jax.core as jax_core
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from shardkit._config import check_cache_size, program_cache_size

__all__ = [
    "ProgramCacheInfo",
    "after",
    "cached",
    "cached_program",
    "clear_program_cache",
    "layout_jit",
    "program_cache_info",
    "set_program_cache_size",
    "shard_jit",
]

P = ParamSpec("P")
R = TypeVar("R")


class ProgramCacheInfo(NamedTuple):
    """What shardkit's program cache holds and how it has been used (since the process
    started, or since its last clear).

    Attributes:
      size: programs held now (at most ``maxsize``).
      maxsize: the bound (:func:`shardkit.set_program_cache_size`).
      hits: lookups answered from the cache.
      misses: lookups that built a program.
      evictions: programs dropped, least recently used first, to keep the bound.
    """

    size: int
    maxsize: int
    hits: int
    misses: int
    evictions: int


class _ProgramCache:
    """A thread-safe least-recently-used map from keys to built programs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._maxsize: int | None = None  # read from the environment on first use
        self._hits = self._misses = self._evictions = 0

    def _bound(self) -> int:
        if self._maxsize is None:
            self._maxsize = program_cache_size()
        return self._maxsize

    def get(self, key: Hashable, build: Callable[[], R]) -> R:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self._hits += 1
                return self._entries[key]
        # Built without the lock: building traces or builds other cached programs, and
        # other threads' lookups should not wait for it. Two threads missing the same
        # key at once both build; the first to finish is kept and handed to both.
        value = build()
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self._hits += 1
                return self._entries[key]
            self._misses += 1
            self._entries[key] = value
            self._trim(self._bound())
        return value

    def _trim(self, bound: int) -> None:
        while len(self._entries) > bound:
            self._entries.popitem(last=False)
            self._evictions += 1

    def resize(self, n: int) -> int:
        with self._lock:
            before = self._bound()
            self._maxsize = n
            self._trim(n)
        return before

    def info(self) -> ProgramCacheInfo:
        with self._lock:
            return ProgramCacheInfo(
                len(self._entries), self._bound(), self._hits, self._misses, self._evictions
            )

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = self._evictions = 0


_CACHE = _ProgramCache()


def set_program_cache_size(n: int, /) -> int:
    """Keep at most ``n`` built programs; returns the bound it replaces.

    shardkit compiles one program per layout it meets (mesh, specs, shapes, options)
    and keeps it for the next call with that layout, in one cache shared by every
    package. The least recently used programs are dropped past the bound, with their
    compiled executables. The bound starts as ``$SHARDKIT_PROGRAM_CACHE_SIZE`` (read
    when the first program is built), else 64; shrinking it drops programs at once.
    A bound smaller than one call's programs (an eager ``solve`` builds up to 8) is
    legal but compiles every call anew.

    Args:
      n: the number of programs to keep, at least 1.

    Returns:
      The previous bound, to restore it later.

    Raises:
      TypeError: ``n`` is not an int.
      ValueError: ``n`` is smaller than 1.

    Example:
      >>> before = shardkit.set_program_cache_size(64)
      >>> shardkit.program_cache_info().maxsize
      64
      >>> shardkit.set_program_cache_size(before)
      64
    """
    return _CACHE.resize(check_cache_size(f"set_program_cache_size(n={n!r})", n))


def program_cache_info() -> ProgramCacheInfo:
    """How many programs shardkit's program cache holds, its bound, hits, misses and evictions.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> x = shardkit.shard(np.ones((16, 4), np.complex64), mesh=m, spec="x,None")
      >>> before = shardkit.program_cache_info()
      >>> _ = shardkit.fft.fftn(x); _ = shardkit.fft.fftn(x)
      >>> info = shardkit.program_cache_info()
      >>> info.hits > before.hits, info.size <= info.maxsize
      (True, True)
    """
    return _CACHE.info()


def clear_program_cache() -> None:
    """Drop every cached program and zero the counters (tests, the soak benchmark)."""
    _CACHE.clear()


def cached_program(key: Hashable, build: Callable[[], R]) -> R:
    """The program kept under ``key``, built by ``build()`` on a miss.

    ``key`` must determine what ``build`` returns (everything its closure captures).
    """
    return _CACHE.get(key, build)


def cached(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with its results kept in the program cache, keyed by ``fn`` and its arguments.

    The replacement for ``functools.lru_cache`` on a program builder: the arguments
    must be hashable and determine the program, as for ``lru_cache``.
    """

    @functools.wraps(fn)
    def lookup(*args: P.args, **kwargs: P.kwargs) -> R:
        key = (fn, args, tuple(sorted(kwargs.items())))
        return _CACHE.get(key, lambda: fn(*args, **kwargs))

    return lookup


def _layout(x: Any) -> Hashable:
    """What an argument's program depends on: shape, dtype, weak type and sharding."""
    if isinstance(x, jax.Array):
        return (x.shape, x.dtype, x.weak_type, x.sharding)
    return (np.shape(x), np.result_type(x), "host")


def layout_jit(fn: Callable[..., R], /, *arrays: Any, **static: Hashable) -> R:
    """``fn(*arrays, **static)``, eagerly as one jitted program per layout of ``arrays``.

    Eager ``jax.numpy`` glue around a per-shard program (indexing, casts, reshapes,
    a finite check) compiles a program per shape and sharding too, which JAX keeps in
    its own caches (thousands of programs per function, beyond shardkit's bound): a
    process meeting many meshes and shapes grows by megabytes a layout. Here each layout's
    program is a fresh ``jit`` in the program cache, so evicting it releases its
    executable with JAX's entries for it. Traced (under ``jit``, ``grad``...), ``fn``
    is simply called: the caller's program includes it.

    Args:
      fn: a function of arrays; ``static`` are hashable options passed by keyword.
      arrays: ``jax.Array`` objects or host data (NumPy arrays, scalars, sequences).

    Returns:
      What ``fn`` returns.
    """
    if any(isinstance(x, jax_core.Tracer) for x in arrays):
        return fn(*arrays, **static)
    arrays = tuple(x if isinstance(x, jax.Array) else np.asarray(x) for x in arrays)
    key = (layout_jit, fn, tuple(map(_layout, arrays)), tuple(sorted(static.items())))
    # A new partial per key: JAX's caches hold a function's programs weakly, by the
    # function object, so this program goes when the cache drops it.
    return _CACHE.get(key, lambda: jax.jit(functools.partial(fn, **static)))(*arrays)


def shard_jit(
    body: Callable[..., Any],
    mesh: Any,
    in_specs: Any,
    out_specs: Any,
    *,
    donate: bool = False,
    check_vma: bool = True,
    reshard_tangents: bool = False,
) -> Any:
    """``jit(shard_map(body, ...))``: the one way shardkit builds a per-shard program.

    Build it inside a :func:`cached` builder (or :func:`cached_program`), so that it
    is compiled once per layout.

    Args:
      body: the per-device function.
      mesh: the mesh (concrete or abstract).
      in_specs, out_specs: as for ``jax.shard_map``.
      donate: donate the first argument (an output of its shape, dtype and layout is
        written into its buffer); only for concrete arrays the caller owns.
      check_vma: ``jax.shard_map``'s check of varying manual axes.
      reshard_tangents: for a *linear* ``body`` on Explicit mesh axes: the program is
        called on a traced operand whose type carries ``in_specs``, and ``shard_map``
        insists that a tangent does too; a tangent that does not (a replicated
        direction given to ``jax.jvp``) is resharded to ``in_specs`` first (one
        operand, one spec). The tangent map is the program itself (hence linear only),
        whose transpose and batching rules serve reverse mode, ``vmap`` and higher
        derivatives.
    """
    run = jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma),
        donate_argnums=0 if donate else (),
    )
    if not reshard_tangents:
        return run
    if not isinstance(in_specs, PartitionSpec):
        raise TypeError(
            f"shard_jit(reshard_tangents=True) takes one operand and one spec, got "
            f"in_specs={in_specs!r}"
        )
    sharding = NamedSharding(mesh, in_specs)

    @jax.custom_jvp
    def op(x: jax.Array) -> jax.Array:
        return run(x)

    @op.defjvp
    def _jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> Any:
        (x,), (t,) = primals, tangents
        return op(x), op(jax.sharding.reshard(jnp.asarray(t, x.dtype), sharding))

    return op


def after(x: Any, *deps: jax.Array) -> Any:
    """``x`` unchanged, made to wait for ``deps`` (inside ``shard_map``, local arrays).

    A data dependency XLA cannot fold away: a select on "``|d| > inf``" of one element
    of each dep, never true. Independent collectives of one program must not run side
    by side: XLA's CPU runtime starts them concurrently on a pool of one thread per
    device, devices reach them in different orders and the rendezvous hangs (see
    :mod:`shardkit.inspect._order`); ordering them costs one select over ``x``.
    """
    never = jnp.bool_(False)
    for d in deps:
        first = jnp.abs(jnp.ravel(d)[:1].astype(jnp.float32 if d.dtype == jnp.bool_ else d.dtype))
        never = never | (first[0] > jnp.inf)

    def wait(leaf: jax.Array) -> jax.Array:
        return jnp.where(never, jnp.zeros_like(leaf), leaf)

    return jax.tree.map(wait, x)
