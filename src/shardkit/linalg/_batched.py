"""``batched_solve``: many independent systems, sharded over the batch axis, no communication.

Seed 002's exercise 2: each device solves its own systems with LAPACK (a ``vmap`` of
an LU solve inside ``jax.shard_map``), so the compiled program holds no collective.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import lu_factor as _lu_factor
from jax.scipy.linalg import lu_solve as _lu_solve
from jax.sharding import NamedSharding, PartitionSpec

from shardkit._programs import cached, shard_jit
from shardkit.layout.internal import check_same_devices, indivisible_error, operand
from shardkit.linalg._blockcyclic import AnyMesh, SpecLike, place
from shardkit.linalg._dtype import as_inexact, common
from shardkit.linalg._inputs import ArrayInput, require_finite
from shardkit.linalg._pad import choose, is_numpy, pad_rows, unpad_rows
from shardkit.linalg._status import Checked, SingularMatrixError, is_traced, reports_status

__all__ = ["batched_solve"]


def _split(a: Any) -> bool:
    """Whether ``a`` is a ``jax.Array`` split over some mesh axis (it cannot be padded locally)."""
    sh = getattr(a, "sharding", None)
    return isinstance(sh, NamedSharding) and not sh.is_fully_replicated


def _one(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    n = a.shape[-1]
    lu_, piv = _lu_factor(a)
    d = jnp.abs(jnp.diagonal(lu_))
    tol = n * jnp.finfo(a.dtype).eps * jnp.max(jnp.abs(a))
    bad = d <= tol
    status = jnp.where(bad.any(), jnp.argmax(bad).astype(jnp.int32) + 1, jnp.int32(0))
    x = _lu_solve((lu_, piv), b)
    return jnp.where(status == 0, x, jnp.nan), status


@cached
def _program(mesh: AnyMesh, a_spec: PartitionSpec, b_spec: PartitionSpec, vec: bool) -> Any:
    def body(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
        if vec:
            x, s = jax.vmap(_one)(a, b[..., None])
            return x[..., 0], s
        return jax.vmap(_one)(a, b)

    s_spec = PartitionSpec(a_spec[0] if len(a_spec) else None)
    return shard_jit(body, mesh, (a_spec, b_spec), (b_spec, s_spec), check_vma=False)


def _batched_solve(
    want_status: bool,
    a: ArrayInput,
    b: ArrayInput,
    /,
    *,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    check_finite: bool = True,
) -> Checked[jax.Array]:
    """Solve ``a[i] x[i] = b[i]`` for a batch sharded over its first axis; no communication.

    Each device runs a batched LAPACK LU on its own systems. ``b`` is resharded to
    ``a``'s batch sharding (free when it already matches). Memory: the device's share.
    A batch the mesh does not divide (host or replicated ``a``) is padded with identity
    systems up to the next multiple of the device count (at most ``P - 1`` more
    ``n x n`` systems); ``x`` then comes back replicated (one all-reduce of ``x``).
    Float or complex (a complex ``b`` makes the solve complex); integers are promoted.

    Args:
      a: ``(batch, n, n)``, the batch axis sharded (``P("x")`` or ``P(("x", "y"))``).
      b: ``(batch, n)`` or ``(batch, n, nrhs)``.
      mesh: the mesh, when ``a`` does not carry it.
      spec: the batch spec, when ``a`` does not carry it (e.g. ``"x"``).
      check_finite: eagerly, raise ``ValueError`` when ``a`` or ``b`` holds an inf or
        NaN (SciPy's default); under ``jit`` NaN-fill the ``x`` of each such system.

    Returns:
      ``x`` sharded like ``b`` (NaN for a singular system under ``jit``);
      ``batched_solve.with_status(...)``: ``(x, status)``, per system 0 or ``j + 1`` for
      its first numerically zero pivot column ``j``.

    Raises:
      SingularMatrixError: eagerly, naming the first singular system.
      ValueError: shapes or layout do not fit (a split ``a`` whose batch the mesh
        does not divide).
      TypeError: ``a`` or ``b`` is half precision (use float32) or not numeric.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(np.stack([np.eye(4) * (i + 1) for i in range(8)]), mesh=m, spec="x")
      >>> x = shardkit.linalg.batched_solve(a, np.ones((8, 4)))
      >>> np.asarray(x)[:, 0].tolist()
      [1.0, 0.5, 0.3333333333333333, 0.25, 0.2, 0.16666666666666666, 0.14285714285714285, 0.125]
    """
    where = "batched_solve"
    a0 = a
    a = as_inexact(where, "a", a)
    if a.ndim != 3 or a.shape[1] != a.shape[2]:
        raise ValueError(f"{where}: a.shape={tuple(a.shape)} is not (batch, n, n)")
    dt = common(where, a.dtype, b)
    check_same_devices(where, {"a": a, "b": b}, mesh=mesh)
    require_finite(where, check_finite, a=a, b=b)
    a = jnp.asarray(a) if a.dtype == dt else jnp.asarray(a).astype(dt)
    b = jnp.asarray(b).astype(dt)
    if b.ndim not in (2, 3) or b.shape[:2] != a.shape[:2]:
        raise ValueError(
            f"{where}: b.shape={tuple(b.shape)} does not fit a.shape={tuple(a.shape)}; "
            "pass (batch, n) or (batch, n, nrhs)"
        )
    found = operand(where, "a", a, mesh=mesh, spec=spec)
    m = found.mesh
    if m is None or m.empty:
        raise ValueError(
            f"{where}: a (shape={tuple(a.shape)}) carries no mesh; shard it over the batch "
            "axis with shardkit.shard(a, mesh=mesh, spec='x') or pass mesh=... and spec=..."
        )
    batch = found.spec[0] if found.spec else ()  # unknown (Auto axes under jit): all axes
    if not batch:
        batch = tuple(m.axis_names)
    parts = 1
    for ax in batch:
        parts *= m.shape[ax]
    entry = batch[0] if len(batch) == 1 else batch
    a_spec = PartitionSpec(entry, None, None)
    if a.shape[0] % parts and not is_numpy(a0) and _split(a0):
        raise indivisible_error(where, tuple(a.shape), a_spec, m, 0, batch, parts)
    vec = b.ndim == 2
    b_spec = PartitionSpec(entry, None) if vec else PartitionSpec(entry, None, None)
    # A batch the mesh does not divide gets identity systems (zero right-hand sides).
    padding = choose(int(a.shape[0]), parts, 1, None)[0]
    system = tuple(a.shape[1:])
    if padding.size != padding.n:
        n = int(a.shape[1])
        eye = (padding.index() < 0)[:, None, None] * np.eye(n)
        a = pad_rows(a, padding, m) + jnp.asarray(eye, dt)
        b = pad_rows(b, padding, m)
    ap, bp = place(a, m, a_spec), place(b, m, b_spec)
    x, status = _program(m, a_spec, b_spec, vec)(ap, bp)
    if check_finite and is_traced(a, b):
        # Per system, so that the fill stays local (no communication, as promised).
        ok = jnp.isfinite(ap).all(axis=(1, 2)) & jnp.isfinite(bp.reshape(bp.shape[0], -1)).all(1)
        x = jnp.where(ok.reshape((-1,) + (1,) * (x.ndim - 1)), x, jnp.nan)
    if padding.size != padding.n:
        x = unpad_rows(x.reshape(padding.size, -1), padding, m, batch).reshape(-1, *x.shape[1:])
        status = unpad_rows(status[:, None], padding, m, batch)[:, 0]
    traced = is_traced(a, b)

    def check() -> None:
        if traced:
            return
        s = jax.device_get(status)
        bad = [i for i, v in enumerate(s.tolist()) if v]
        if bad:
            i = bad[0]
            raise SingularMatrixError(
                where,
                int(s[i]) - 1,
                f"{where}: system {i} of {padding.n} (a[{i}], shape={system}) "
                f"is singular to working precision at column {int(s[i]) - 1} "
                f"({len(bad)} singular systems in all: {bad[:8]}). Under jax.jit call "
                "shardkit.linalg.batched_solve.with_status(...) to receive the statuses.",
            )

    return Checked(x, status, traced=traced, check=check)


batched_solve = reports_status(_batched_solve)
