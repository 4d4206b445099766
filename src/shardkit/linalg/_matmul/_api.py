"""``matmul(a, b)``: sharded matrix products by named algorithms, or the cheapest one.

Every algorithm is one ``jax.shard_map`` over the operands' mesh whose collectives
are known in advance (and asserted against the compiled program in the tests):

==================  ==============================  ==================  =========================
algorithm           a (rows, k) @ b (k, cols)       output              collectives
==================  ==============================  ==================  =========================
``local``           ``(am, -) @ (-, bn)``           ``(am, bn)``        none
``allgather``       any                             gathered layout     all-gather(s)
``allreduce``       ``(am, s) @ (s, bn)``           ``(am, bn)``        1 all-reduce over s
``reduce_scatter``  ``(am, s) @ (s, bn)``           ``(am+s, bn)``      1 reduce-scatter over s
``ring``            ``(am, -) @ (s, bn)``, ...      as allgather / rs   p-1 collective-permutes
``cannon``          ``(r, c) @ (r, c)``, r=c sizes  ``(r, c)``          2q collective-permutes
``summa``           ``(r, c) @ (r, c)``             ``(r, c)``          lcm(R,C) all-reduces/axis
==================  ==============================  ==================  =========================

``am``/``bn`` must not share mesh axes except where a gather resolves it (``allgather``
gathers a's rows or b's columns; ``ring`` rotates b's column blocks). See
:mod:`shardkit.linalg._matmul._algos` for each algorithm's exact rule.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal, TypeAlias, cast, get_args, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from shardkit._programs import cached, shard_jit
from shardkit._typing import AnyMesh, ArrayLike
from shardkit.inspect import Interconnect
from shardkit.inspect import interconnect as _interconnect
from shardkit.layout.internal import (
    SpecLike,
    check_placement,
    check_same_devices,
    drop_unit_axes,
    is_traced,
    mesh_summary,
    normalize,
    operand,
    parse_spec,
    spec_summary,
    to_pspec,
)
from shardkit.linalg._matmul._algos import ALGORITHMS, MatmulProblem
from shardkit.linalg._matmul._cost import Candidate, Explanation, enumerate_variants, price
from shardkit.linalg._matmul._model import Spec, spec_text
from shardkit.linalg._partitioned import partitioned

__all__ = ["ALGORITHM_NAMES", "Algorithm", "Candidate", "Explanation", "build", "matmul"]

Algorithm: TypeAlias = Literal[
    "auto", "local", "allgather", "reduce_scatter", "allreduce", "ring", "cannon", "summa"
]
ALGORITHM_NAMES: tuple[str, ...] = get_args(Algorithm)
"""The legal values of ``algorithm=``."""


def _as_operand(x: ArrayLike | jax.ShapeDtypeStruct) -> jax.Array:
    # ShapeDtypeStructs are welcome for explain=True, which returns before anything
    # is computed; typed as arrays, since everything before that asks only their
    # shape, dtype and sharding.
    if isinstance(x, jax.Array | jax.ShapeDtypeStruct) or is_traced(x):
        return cast("jax.Array", x)
    # Not jnp.asarray: it compiles a copy program per shape, which JAX keeps for good.
    return jax.device_put(np.asarray(x))


def _shapes_error(a_shape: tuple[int, ...], b_shape: tuple[int, ...], why: str) -> ValueError:
    return ValueError(
        f"matmul: a.shape={a_shape} and b.shape={b_shape} cannot be multiplied: {why}. "
        "a is (..., m, k) and b is (k, n) or (..., k, n) with the same batch dims."
    )


def _algorithm_error(
    algorithm: str,
    why: str,
    a_shape: Any,
    b_shape: Any,
    sa: PartitionSpec,
    sb: PartitionSpec,
    m: AnyMesh,
) -> ValueError:
    return ValueError(
        f"matmul: algorithm={algorithm!r} does not apply to a.shape={tuple(a_shape)} "
        f"spec={spec_summary(sa)} and b.shape={tuple(b_shape)} spec={spec_summary(sb)} on "
        f"{mesh_summary(m)}: {why}. Reshard the operands, or use algorithm='auto' to "
        "pick an algorithm that fits (explain=True lists them)."
    )


def local(cand: Candidate) -> Any:
    """The per-shard function of ``cand``: its algorithm's body, then its redistribution."""
    body = cand.variant.body
    redist = cand.redistribution.fn if cand.redistribution is not None else None

    def fn(a: jax.Array, b: jax.Array) -> jax.Array:
        c = body(a, b)
        return c if redist is None else redist(c)

    return fn


def build(cand: Candidate, mesh: AnyMesh, sa: Spec, sb: Spec, batch_spec: Spec) -> Any:
    """The jitted ``shard_map`` running ``cand`` on blocks of (normalized) specs ``sa``, ``sb``."""
    out = to_pspec((*batch_spec, *cand.out))
    in_specs = (to_pspec(sa), to_pspec(sb))
    return shard_jit(local(cand), mesh, in_specs, out, check_vma=False)


# Priced candidates: plain values keyed on sizes, no mesh and no compiled program, so a
# cache of their own (shardkit._programs) rather than the program cache's bound.
@functools.lru_cache(maxsize=512)
def _candidates(
    problem: MatmulProblem,
    names: tuple[str, ...],
    target: Spec | None,
    batch_spec: Spec,
    batch_shape: tuple[int, ...],
    link: Interconnect,
) -> tuple[tuple[Candidate, ...], tuple[tuple[str, str], ...]]:
    variants, rejected = enumerate_variants(problem, names)
    cands = sorted(
        (
            price(problem, v, link, target=target, batch_spec=batch_spec, batch_shape=batch_shape)
            for v in variants
        ),
        key=lambda c: c.rank_key,
    )
    return tuple(cands), tuple(rejected.items())


@cached
def _program(key: tuple[Any, ...], mesh: AnyMesh, sa: Spec, sb: Spec) -> Any:
    # Cached so that a second eager call with the same layout reuses the compiled program.
    cands, _ = _candidates(*key)
    return build(cands[0], mesh, sa, sb, key[3])


@overload
def matmul(
    a: ArrayLike | jax.ShapeDtypeStruct,
    b: ArrayLike | jax.ShapeDtypeStruct,
    /,
    *,
    out_spec: SpecLike = ...,
    algorithm: Algorithm = ...,
    mesh: Mesh | None = ...,
    in_specs: tuple[SpecLike, SpecLike] | None = ...,
    interconnect: str | Interconnect | None = ...,
    explain: Literal[False] = ...,
) -> jax.Array: ...


@overload
def matmul(
    a: ArrayLike | jax.ShapeDtypeStruct,
    b: ArrayLike | jax.ShapeDtypeStruct,
    /,
    *,
    out_spec: SpecLike = ...,
    algorithm: Algorithm = ...,
    mesh: Mesh | None = ...,
    in_specs: tuple[SpecLike, SpecLike] | None = ...,
    interconnect: str | Interconnect | None = ...,
    explain: Literal[True],
) -> Explanation: ...


def matmul(
    a: ArrayLike | jax.ShapeDtypeStruct,
    b: ArrayLike | jax.ShapeDtypeStruct,
    /,
    *,
    out_spec: SpecLike = None,
    algorithm: Algorithm = "auto",
    mesh: Mesh | None = None,
    in_specs: tuple[SpecLike, SpecLike] | None = None,
    interconnect: str | Interconnect | None = None,
    explain: bool = False,
) -> jax.Array | Explanation:
    """Multiply sharded matrices ``a @ b`` with a chosen or the cheapest algorithm.

    The operands stay where they are: the algorithm runs as one ``jax.shard_map`` over
    their mesh, with exactly the collectives its rule promises (table in the module
    docstring). ``algorithm="auto"`` prices every applicable variant with the
    :class:`~shardkit.inspect.Interconnect` cost model (bytes per device, alpha-beta
    time, flops) and runs the cheapest; ``explain=True`` returns that table instead
    of computing. ``out_spec`` requests the output layout: an algorithm producing it
    is preferred, else the cheapest redistribution (all-to-all, all-gather or a free
    slice) is appended inside the same ``shard_map``.

    Memory per device: the input blocks, the output block and the algorithm's working
    set: the gathered operand for ``allgather``; for ``ring``, two blocks of the rotated
    operand plus one panel of the local product (it is added to the output in panels,
    never whole); one panel per operand for ``summa``.

    An operand with a zero-size dimension gives the empty product (or zeros, where
    only the inner dimension ``k`` is 0) in the layout the chosen algorithm would
    give, without running it (no collectives).

    Args:
      a: ``(..., m, k)`` array, usually sharded with a ``NamedSharding``.
      b: ``(k, n)`` or ``(..., k, n)`` with the same batch dims (and batch specs) as ``a``.
      out_spec: requested output spec (anything :func:`shardkit.spec` accepts), or None.
      algorithm: ``"auto"`` or one of ``local``, ``allgather``, ``reduce_scatter``,
        ``allreduce``, ``ring``, ``cannon``, ``summa``.
      mesh: the mesh, for host operands (with ``in_specs``). Under ``jax.jit`` on Auto
        axes neither is needed: the product becomes a ``custom_partitioning`` op whose
        program is chosen once the partitioner knows the layouts, with the partitioner's
        wish for the result's layout as ``out_spec`` (unless one is given).
      in_specs: ``(spec_a, spec_b)`` overriding the operands' own shardings.
      interconnect: cost-model preset name or :class:`~shardkit.inspect.Interconnect`;
        None: the preset ``shardkit bench calibrate`` saved for these devices, if any,
        else ``shared-memory``.
      explain: return the priced candidates (an :class:`Explanation`) instead.

    Returns:
      ``a @ b`` as a ``jax.Array`` sharded on the same mesh, or an ``Explanation``.

    Raises:
      ValueError: an unknown algorithm (the legal ones are listed), shapes that do not
        multiply, a spec that does not divide a shape, operands on different meshes,
        an algorithm that does not apply to the specs (the message says why), or
        ``explain=True`` on operands traced under ``jit`` on Auto axes. Under ``jit``
        an algorithm that does not apply to the layouts the partitioner gives raises
        its message when the program compiles (inside JAX's runtime error).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a = shardkit.shard(np.ones((8, 16), np.float32), mesh=m, spec="x,y")
      >>> b = shardkit.shard(np.ones((16, 8), np.float32), mesh=m, spec="y,None")
      >>> c = matmul(a, b, algorithm="allreduce")
      >>> c.sharding.spec, float(np.asarray(c)[0, 0])
      (P('x', None), 16.0)
      >>> matmul(a, b, explain=True).chosen.algorithm
      'reduce_scatter'
    """
    if algorithm not in ALGORITHM_NAMES:
        raise ValueError(
            f"matmul: algorithm={algorithm!r} is not an algorithm; legal values are "
            f"{list(ALGORITHM_NAMES)}"
        )
    a, b = _as_operand(a), _as_operand(b)
    check_same_devices("matmul", {"a": a, "b": b}, mesh=mesh)
    a_shape, b_shape = tuple(a.shape), tuple(b.shape)
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise _shapes_error(a_shape, b_shape, "both operands need at least 2 dimensions")
    if a_shape[-1] != b_shape[-2]:
        raise _shapes_error(
            a_shape, b_shape, f"a has k={a_shape[-1]} columns, b has {b_shape[-2]} rows"
        )
    if len(b_shape) > 2 and b_shape[:-2] != a_shape[:-2]:
        raise _shapes_error(a_shape, b_shape, "b's batch dims differ from a's")
    dtype = jnp.result_type(a.dtype, b.dtype)
    given = (None, None) if in_specs is None else in_specs
    la = operand("matmul", "a", a, mesh=mesh, spec=given[0])
    lb = operand("matmul", "b", b, mesh=mesh, spec=given[1])
    if "auto-traced" in (la.how, lb.how) and (la.spec is None or lb.spec is None):
        # Auto axes under jit: the partitioner knows the layout, so it picks the program.
        if explain:
            raise ValueError(
                "matmul: explain=True needs the operands' layouts, but an operand is traced "
                "under jax.jit on Auto mesh axes, whose sharding is decided only when XLA "
                "partitions the program. Pass in_specs=(spec_a, spec_b) and mesh=..., or "
                "call matmul(..., explain=True) on the placed arrays outside jit."
            )
        return _partitioned(a.astype(dtype), b.astype(dtype), out_spec, algorithm, interconnect)
    m = mesh or la.mesh or lb.mesh
    if m is None:
        raise ValueError(
            "matmul: neither operand is sharded on a mesh; shard them first "
            "(shardkit.shard(x, mesh=mesh, spec=spec)) or pass mesh=... and in_specs=..."
        )
    for which, other in (("a", la.mesh), ("b", lb.mesh)):
        if other is not None and mesh is None and other.shape_tuple != m.shape_tuple:
            raise ValueError(
                f"matmul: a is on {mesh_summary(m)} but {which} is on {mesh_summary(other)}; "
                "put both operands on one mesh"
            )
    pa, pb = la.pspec or PartitionSpec(), lb.pspec or PartitionSpec()  # host data: replicated
    key, sa, sb = _choose(a_shape, b_shape, dtype, m, pa, pb, out_spec, algorithm, interconnect)
    if explain:
        cands, rejected = _candidates(*key)
        title = (
            f"matmul a{a_shape} {spec_summary(pa)} @ b{b_shape} {spec_summary(pb)} on "
            f"{mesh_summary(m)}"
        )
        return Explanation(title, cands, rejected, key[-1].label)
    if 0 in a_shape or 0 in b_shape:
        out = to_pspec((*key[3], *_candidates(*key)[0][0].out))
        return _empty_product(a, b, dtype, NamedSharding(m, out))
    return _program(key, m, sa, sb)(a.astype(dtype), b.astype(dtype))


def _empty_product(a: Any, b: Any, dtype: Any, sharding: NamedSharding | None) -> jax.Array:
    """``a @ b`` when a dimension is 0: zeros (an empty sum where only k is 0), placed.

    No algorithm runs: their collectives reject zero-size blocks (XLA's reduce-scatter
    verifier refuses a 0-sized scatter dimension). ``sharding`` is where the chosen
    algorithm would have put the product (None: the partitioner decides). Under
    ``jit`` the zeros are built from the empty operand's sum (exactly 0), which ties
    the result to the operands' devices; zeros made from nothing would not be.
    """
    shape = (*a.shape[:-1], b.shape[-1])
    if sharding is not None and not is_traced(a, b):
        return jnp.zeros(shape, dtype, device=sharding)
    empty = a if a.size == 0 else b
    c = jax.lax.broadcast(jnp.sum(empty).astype(dtype), shape)
    if sharding is None:
        return c
    if all(t == AxisType.Explicit for t in sharding.mesh.axis_types):
        return jax.sharding.reshard(c, sharding)
    return jax.lax.with_sharding_constraint(c, sharding)


def _choose(
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    dtype: Any,
    m: AnyMesh,
    pa: Any,
    pb: Any,
    out_spec: Any,
    algorithm: str,
    interconnect: str | Interconnect | None,
) -> tuple[tuple[Any, ...], Spec, Spec]:
    """The candidates' cache key and the operands' specs; raises if no algorithm applies."""
    check_placement("matmul(a)", a_shape, pa, m)
    check_placement("matmul(b)", b_shape, pb, m)
    n_cols = b_shape[-1]
    sizes = {str(k): int(v) for k, v in m.shape.items()}
    sa = drop_unit_axes(normalize(pa, len(a_shape)), sizes)
    sb = drop_unit_axes(normalize(pb, len(b_shape)), sizes)
    nb = len(a_shape) - 2
    batch_spec = sa[:nb]
    if len(b_shape) > 2 and sb[:nb] != batch_spec:
        raise ValueError(
            f"matmul: a's batch dims are split as {spec_text(batch_spec)} but b's as "
            f"{spec_text(sb[:nb])} on {mesh_summary(m)}; split them alike"
        )
    batch_axes = {x for e in batch_spec for x in e}
    if len(b_shape) == 2 and batch_axes & {x for e in sb for x in e}:
        raise ValueError(
            f"matmul: b (spec={spec_summary(pb)}) is split over mesh axes "
            f"{sorted(batch_axes & {x for e in sb for x in e})} that split a's batch dims "
            f"(a spec={spec_summary(pa)}) on {mesh_summary(m)}; replicate b over them"
        )
    local_batch = math.prod(
        n // math.prod(sizes[x] for x in e) for n, e in zip(a_shape[:nb], batch_spec, strict=True)
    )
    problem = MatmulProblem(
        a=sa[nb:],
        b=sb[-2:],
        m=a_shape[-2],
        k=a_shape[-1],
        n=n_cols,
        sizes=tuple((k, v) for k, v in sizes.items() if v > 1),
        itemsize=np.dtype(dtype).itemsize,
        batch_a=local_batch,
        batch_b=local_batch if len(b_shape) > 2 else 1,
    )
    target = None
    if out_spec is not None:
        target_p = parse_spec(out_spec)
        out_shape = (*a_shape[:-1], n_cols)
        check_placement("matmul(out_spec)", out_shape, target_p, m)
        target = drop_unit_axes(normalize(target_p, len(out_shape)), sizes)
        if target[:nb] != batch_spec:
            raise NotImplementedError(
                f"matmul: out_spec={spec_summary(target_p)} changes the batch dims' split "
                f"{spec_text(batch_spec)}; keep it, and reshard the result afterwards"
            )
    link = _interconnect(interconnect)
    names = tuple(ALGORITHMS) if algorithm == "auto" else (algorithm,)
    key = (problem, names, target, batch_spec, tuple(a_shape[:nb]), link)
    cands, rejected = _candidates(*key)
    if not cands:
        raise _algorithm_error(algorithm, dict(rejected)[algorithm], a_shape, b_shape, pa, pb, m)
    return key, sa, sb


def _partitioned(
    a: Any, b: Any, out_spec: Any, algorithm: str, interconnect: str | Interconnect | None
) -> jax.Array:
    """``matmul`` as a ``custom_partitioning`` op: the layout comes at partition time.

    The partitioner's wish for the result's sharding is taken as ``out_spec`` when the
    caller gave none, so no reshard follows the product.
    """
    a_shape, b_shape = tuple(a.shape), tuple(b.shape)
    batch = " ".join(f"b{i}" for i in range(len(a_shape) - 2))
    b_batch = batch if len(b_shape) > 2 else ""
    rule = f"{batch} i k, {b_batch} k j -> {batch} i j"

    def program(mesh: Mesh, specs: tuple[Any, ...], wish: tuple[Any, ...]) -> Any:
        target = out_spec if out_spec is not None else wish[0]
        try:
            key, sa, sb = _choose(
                a_shape, b_shape, a.dtype, mesh, specs[0], specs[1], target, algorithm, interconnect
            )
        except (ValueError, NotImplementedError):
            if out_spec is not None or target is None:
                raise
            # The wished-for layout cannot be produced: the algorithm's own output,
            # resharded by the partitioner afterwards.
            key, sa, sb = _choose(
                a_shape, b_shape, a.dtype, mesh, specs[0], specs[1], None, algorithm, interconnect
            )
        cand = _candidates(*key)[0][0]
        out = to_pspec((*key[3], *cand.out))
        return local(cand), (to_pspec(sa), to_pspec(sb)), (out,)

    if 0 in a_shape or 0 in b_shape:
        return _empty_product(a, b, a.dtype, None)
    (c,) = partitioned(lambda a, b: (jnp.matmul(a, b),), program, (a, b), rule)
    return c
