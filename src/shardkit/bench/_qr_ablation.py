"""The ``qr-parts`` ablation: where the tall QR's time goes (``4n x n/4``, rows split).

:func:`shardkit.linalg.qr` on a tall ``P(rows, None)`` matrix is a blocked Householder
QR with TSQR panels (:mod:`shardkit.linalg._householder`). Each candidate isolates one
part, on the case's mesh and the same matrix:

``shardkit``
  :func:`shardkit.linalg.qr` (``q`` and ``r``).
``shardkit r only``
  The same kernel without forming ``q`` (what :func:`~shardkit.linalg.lstsq` runs,
  there with ``b`` beside ``a``): the factorization's share.
``shardkit 1 device``
  The same kernel on a one-device mesh: the algorithm without any collective.
``flat TSQR``
  The algorithm it replaced: a local QR per device, an all-gather of the ``n x n``
  triangles and the QR of their stack on every device, ``q`` formed as a product.
``panels only``
  The panels' local QRs (``(M / R) x nb`` each, and the product that forms their
  ``q``) alone, no update and no collective.
``updates only``
  The trailing updates' and ``q``'s tiled level-3 products alone (``W^H A`` and
  ``A - W V`` on the shrinking corner, twice: factorization and ``q``).
``collectives only``
  The kernel's collectives alone, in its order and shapes, chained: per panel the
  all-gather of the triangles, the ``(P nb + 2 nb + 1) x nb`` (the stack's ``q``,
  ``T^-1``, ``S R``, ``S``) and ``nb x n`` all-reduces (and one
  ``nb x n`` per panel for ``q``), ``r``'s ``n x n``.
``SVD of r``
  :func:`~shardkit.linalg.lstsq`'s rank decision: the SVD of the ``n x n`` ``r`` on
  one device.
``scipy r only``
  LAPACK's ``geqrf`` alone (``scipy.linalg.qr(mode="r")``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
from jax import lax
from jax.sharding import PartitionSpec as P

from shardkit.linalg import qr
from shardkit.linalg.internal import active_update, householder_local, project, tsqr_local

__all__ = ["PARTS_NOT_SOLUTIONS", "qr_ablation_candidates"]

PARTS_NOT_SOLUTIONS = frozenset(
    {
        "shardkit r only",
        "panels only",
        "updates only",
        "collectives only",
        "SVD of r",
        "scipy r only",
    }
)
"""Candidates whose output is no ``(q, r)`` (no residual is computed for them)."""

PANEL = 64
"""The panel width :func:`shardkit.linalg.qr` uses by default (``DEFAULT_PANEL``)."""


def _rows_axes(m: Any, spec: P) -> tuple[tuple[str, ...], tuple[str, ...], int, int]:
    """Row axes, spare axes and their sizes, as :func:`shardkit.linalg.qr` splits them."""
    rows = (spec[0],) if isinstance(spec[0], str) else tuple(spec[0] or ())
    spare = tuple(x for x in m.axis_names if x not in rows)
    total = int(np.prod([m.shape[x] for x in m.axis_names]))
    nsp = int(np.prod([m.shape[x] for x in spare])) if spare else 1
    return rows, spare, total, nsp


def _kernel(m: Any, spec: P, n: int, form_q: bool) -> Callable[..., Any]:
    rows, spare, total, nsp = _rows_axes(m, spec)

    def body(a: jax.Array) -> jax.Array:
        nb = min(PANEL, a.shape[0] // nsp, n)
        out = householder_local(
            a, rows=rows, spare=spare, sizes=(total, nsp), n=n, nb=nb, form_q=form_q
        )
        return out["r"]

    return jax.shard_map(body, mesh=m, in_specs=spec, out_specs=P(), check_vma=False)


def _flat_tsqr(m: Any, spec: P) -> Callable[..., Any]:
    rows, _, _, _ = _rows_axes(m, spec)
    return jax.shard_map(
        lambda a: tsqr_local(a, rows), mesh=m, in_specs=spec, out_specs=(spec, P()), check_vma=False
    )


def _slice(x: jax.Array, starts: tuple[Any, ...], sizes: tuple[int, ...]) -> jax.Array:
    """``lax.dynamic_slice`` with int32 starts (x64 mode mixes in int64)."""
    return lax.dynamic_slice(x, tuple(jnp.asarray(i, jnp.int32) for i in starts), sizes)


def _local_rows(m: Any, spec: P, a: jax.Array) -> jax.Array:
    """The rows one device works on (its block, split further over the spare axes)."""
    _, spare, _, nsp = _rows_axes(m, spec)
    if not spare:
        return a
    ms = a.shape[0] // nsp
    return _slice(a, (lax.axis_index(spare) * ms, 0), (ms, a.shape[1]))


def _panels_only(m: Any, spec: P, n: int) -> Callable[..., Any]:
    def body(a: jax.Array) -> jax.Array:
        x = _local_rows(m, spec, a)
        nb = min(PANEL, x.shape[0], n)

        def panel(p: jax.Array, acc: jax.Array) -> jax.Array:
            pan = _slice(x, (0, p * nb), (x.shape[0], nb)) + acc[0, 0]
            q1, r1 = jnp.linalg.qr(pan)
            return acc + (q1 @ r1)[:1, :1]

        acc = lax.fori_loop(jnp.int32(0), jnp.int32(n // nb), panel, jnp.zeros((1, 1), x.dtype))
        return jnp.zeros((a.shape[0],), a.dtype) + acc[0, 0]

    return jax.shard_map(body, mesh=m, in_specs=spec, out_specs=P(spec[0]), check_vma=False)


def _updates_only(m: Any, spec: P, n: int) -> Callable[..., Any]:
    def body(a: jax.Array) -> jax.Array:
        x = _local_rows(m, spec, a)
        mr = x.shape[0]
        nb = min(PANEL, mr, n)
        ri = lax.axis_index(tuple(m.axis_names)).astype(jnp.int32)
        grow = ri * mr + jnp.arange(mr, dtype=jnp.int32)

        def step(p: jax.Array, y: jax.Array) -> jax.Array:
            j = p * nb
            lo = jnp.clip(j - ri * mr, 0, mr)
            w = jnp.where((grow >= j)[:, None], _slice(x, (0, j), (mr, nb)), 0)
            v = project(w, y, lo, j + nb) * 1e-3
            return active_update(y, w, v, (0, 0), lo, j + nb, nb=nb)

        y = lax.fori_loop(jnp.int32(0), jnp.int32(n // nb), step, x)  # the factorization's updates
        y = lax.fori_loop(jnp.int32(0), jnp.int32(n // nb), step, y)  # as many for q
        return y[:, 0]

    return jax.shard_map(body, mesh=m, in_specs=spec, out_specs=P(spec[0]), check_vma=False)


def _collectives_only(m: Any, spec: P, n: int) -> Callable[..., Any]:
    rows, spare, total, nsp = _rows_axes(m, spec)
    axes = rows + spare

    def body(a: jax.Array) -> jax.Array:
        nb = min(PANEL, a.shape[0] // nsp, n)
        s = a[0, 0] * 0

        def panel(_: jax.Array, s: jax.Array) -> jax.Array:
            s = lax.all_gather(jnp.full((nb, nb), s), axes, tiled=True)[0, 0]
            s = lax.psum(jnp.full((total * nb + 2 * nb + 1, nb), s), axes)[0, 0]
            return lax.psum(jnp.full((nb, n), s), axes)[0, 0]

        def q_panel(_: jax.Array, s: jax.Array) -> jax.Array:
            return lax.psum(jnp.full((nb, n), s), axes)[0, 0]

        s = lax.fori_loop(0, n // nb, panel, s)
        s = lax.psum(jnp.full((n, n), s), axes)[0, 0]
        s = lax.fori_loop(0, n // nb, q_panel, s)
        return jnp.zeros((a.shape[0],), a.dtype) + s

    return jax.shard_map(body, mesh=m, in_specs=spec, out_specs=P(spec[0]), check_vma=False)


def _one_device_qr(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    m1 = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])
    return qr(a, mesh=m1, spec=P("x", None))


def _svd_of_r(a: jax.Array) -> jax.Array:
    n = a.shape[1]
    return jnp.linalg.svd(jnp.triu(a[:n]), full_matrices=False)[1]


def _scipy_r(a: jax.Array) -> jax.Array:
    n = a.shape[1]

    def call(x: Any) -> np.ndarray:
        out: Any = sl.qr(np.asarray(x), mode="r", check_finite=False)
        return np.asarray(out[0][:n], x.dtype)

    return jax.pure_callback(call, jax.ShapeDtypeStruct((n, n), a.dtype), a)


def qr_ablation_candidates(m: Any, spec: P, n: int) -> dict[str, Callable[..., Any]]:
    """The ablation's own candidates (``(a, b, a1, b1) -> out``) for the mesh ``m``.

    ``n`` is the matrix's column count (its rows are ``a.shape[0]``).
    """
    r_only = _kernel(m, spec, n, False)
    flat = _flat_tsqr(m, spec)
    panels = _panels_only(m, spec, n)
    updates = _updates_only(m, spec, n)
    colls = _collectives_only(m, spec, n)
    return {
        "shardkit": lambda a, b, a1, b1: qr(a, mesh=m, spec=spec),
        "shardkit r only": lambda a, b, a1, b1: r_only(a),
        "shardkit 1 device": lambda a, b, a1, b1: _one_device_qr(a1),
        "flat TSQR": lambda a, b, a1, b1: flat(a),
        "panels only": lambda a, b, a1, b1: panels(a),
        "updates only": lambda a, b, a1, b1: updates(a),
        "collectives only": lambda a, b, a1, b1: colls(a),
        "SVD of r": lambda a, b, a1, b1: _svd_of_r(a1),
        "scipy r only": lambda a, b, a1, b1: _scipy_r(a1),
    }
