"""QDWH polar iterations on a matrix split by rows over the whole mesh (inside ``shard_map``).

The polar factor ``U`` of ``X`` (``M x N``, ``M >= N``) by the QR-based dynamically
weighted Halley iteration of Nakatsukasa, Bai and Gygi (SIAM J. Matrix Anal. Appl.
31(5), 2010)::

    [sqrt(c_k) X_k; I] = [Q1; Q2] R,    X_{k+1} = b_k/c_k X_k + (a_k - b_k/c_k)/sqrt(c_k) Q1 Q2^H

``X_0 = X / alpha`` with ``alpha = ||X||_F >= ||X||_2``; the weights ``(a_k, b_k, c_k)``
follow from a lower bound ``l_0`` of the smallest singular value of ``X_0`` alone, so
the whole schedule is computed ahead (:func:`schedule`) and the loop stops when it is
exhausted and the iterate moved by less than ``(5 eps)^(1/3)`` (then the next, cubically
convergent, step would change it by ``eps``).

**The QR.** Each device stacks its own rows of ``sqrt(c) X`` over its rows of ``I``; a
QR is blind to the order of the rows, so the stack needs no communication. The QR is
:func:`~shardkit.linalg._rowqr.row_qr` (BCGS2 with TSQR panels whose leaves keep the
two row groups apart), which keeps ``q`` orthonormal while the stacked matrix's
condition ``~ 1 / l_0`` stays well below ``1 / eps``. ``l_0`` is therefore floored at
:data:`L0_FLOOR` (``1e-5`` in single, ``1e-10`` in double precision): singular values
below it still converge, a step or two later.

**Cholesky-based iterations.** Once ``c_k <= 100`` (``I + c X^H X`` then has condition
at most 101) an iteration needs no QR: ``X_{k+1} = b/c X + (a - b/c) X Z^{-1}`` with
``Z = R^H R`` factored by :func:`gram_solve` (Nakatsukasa and Higham's switch, as
JAX's single-device QDWH does). In single precision that is every iteration but the
first, in double all but two.

Cost per QR-based iteration: the QR of the ``(M + N) x N`` stack (about ``4 (M + N) N^2`` flops)
and one ring product ``Q1 Q2^H`` (``2 M N^2``), spread over the devices; collectives:
BCGS2's panel-sized all-reduces and all-gathers, one all-to-all of a block (``Q2^H``)
and ``p - 1`` collective-permutes of a block.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from shardkit.linalg._blockcyclic import after, axis_index, dslice, dupdate, on_owner, psum, trsm
from shardkit.linalg._rowqr import panel_width, row_qr
from shardkit.linalg._rows import adjoint, broadcast_rows, identity_rows, ring_gram, ring_matmul

__all__ = ["L0_FLOOR", "MAX_EXTRA", "frobenius", "gram_solve", "polar_local", "schedule"]

L0_FLOOR = {4: 1e-5, 8: 1e-10}
"""Floor of ``l_0`` by the real dtype's size in bytes (see the module docstring)."""
MAX_EXTRA = 6
"""Iterations allowed past the schedule, for singular values below ``l_0``."""


def schedule(l0: float, eps: float) -> tuple[tuple[float, float, float], ...]:
    """QDWH's ``(a_k, b_k, c_k)`` from ``l_0`` until ``l_k`` is within ``5 eps`` of 1."""
    out: list[tuple[float, float, float]] = []
    ell = l0
    while 1 - ell > 5 * eps and len(out) < 12:
        l2 = ell * ell
        dd = (4 * (1 - l2) / (l2 * l2)) ** (1 / 3)
        sqd = math.sqrt(1 + dd)
        a = sqd + math.sqrt(max(8 - 4 * dd + 8 * (2 - l2) / (l2 * sqd), 0.0)) / 2
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        ell = min(1.0, ell * (a + b * l2) / (1 + c * l2))
        out.append((a, b, c))
    return tuple(out)


def frobenius(x: jax.Array, ax: tuple[str, ...]) -> jax.Array:
    """``||X||_F`` of a matrix held as row blocks (replicated)."""
    return jnp.sqrt(psum(jnp.sum(jnp.abs(x) ** 2), ax))


def gram_solve(x: jax.Array, c: jax.Array, ax: tuple[str, ...], p: int) -> jax.Array:
    """This device's rows of ``X (I + c X^H X)^{-1}``, ``X`` held as ``(M/p, N)`` rows.

    ``Z = I + c X^H X`` (rows, by :func:`ring_gram`) is factored ``Z = R^H R`` by a
    row-broadcast Cholesky: at step ``k`` device ``k`` factors its diagonal block and
    forms its row block of ``R``, which one all-reduce brings to every device; the
    devices below update their rows of ``Z`` with it, and every device moves its rows
    of ``X`` one block further through ``Y = X R^{-1}`` (right-looking). A second sweep,
    the row blocks sent again from last to first, gives ``Y R^{-H}``. Each device keeps
    only its own row block of ``R``; collectives: ``2p`` all-reduces of one block.
    """
    rows, n = x.shape
    b = n // p
    dt = x.dtype
    me = axis_index(ax)
    blk = jnp.arange(n, dtype=jnp.int32) // b
    z = c.astype(dt) * ring_gram(x, x, ax, p) + identity_rows(b, n, dt, ax)

    def own_row(z: jax.Array) -> jax.Array:
        ll = jnp.linalg.cholesky(dslice(z, (0, me * b), (b, b)))
        r = jnp.where(blk[None, :] > me, trsm(ll, z, lower=True), 0)
        return dupdate(r, jnp.conj(ll).T, (0, me * b))

    def forward(
        k: jax.Array, carry: tuple[jax.Array, jax.Array, jax.Array]
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        z, y, mine = carry
        r = on_owner(me == k, ax, own_row, lambda z: z, z)
        mine = jnp.where(me == k, r, mine)
        r = broadcast_rows(after(r, y), k, ax)
        yk = trsm(
            dslice(r, (0, k * b), (b, b)), dslice(y, (0, k * b), (rows, b)), lower=False, left=False
        )
        y = dupdate(y - yk @ jnp.where(blk[None, :] > k, r, 0), yk, (0, k * b))
        z = on_owner(
            me > k, ax, lambda z: z - jnp.conj(dslice(r, (0, me * b), (b, b))).T @ r, lambda z: z, z
        )
        return z, y, mine

    _, y, mine = lax.fori_loop(jnp.int32(0), jnp.int32(p), forward, (z, x, jnp.zeros_like(z)))

    def backward(i: jax.Array, w: jax.Array) -> jax.Array:
        k = p - 1 - i
        r = broadcast_rows(after(mine, w), k, ax)
        wk = dslice(w, (0, k * b), (rows, b)) - w @ jnp.conj(jnp.where(blk[None, :] > k, r, 0)).T
        wk = trsm(jnp.conj(dslice(r, (0, k * b), (b, b))).T, wk, lower=True, left=False)
        return dupdate(w, wk, (0, k * b))

    return lax.fori_loop(jnp.int32(0), jnp.int32(p), backward, y)


def polar_local(x: jax.Array, ax: tuple[str, ...], p: int) -> tuple[jax.Array, jax.Array]:
    """This device's rows of the polar factor ``U`` of ``X``, and the iteration count.

    ``x`` is ``(M / p, N)``. Iterations whose weight ``c_k`` exceeds 100 are QR-based;
    the rest (``I + c X^H X`` then has condition at most 101) solve with a Cholesky
    factor (:func:`gram_solve`), as Nakatsukasa and Higham advise.
    """
    rows, n = x.shape
    dt = x.dtype
    rdt = jnp.finfo(dt).dtype
    eps = float(jnp.finfo(dt).eps)
    sched = schedule(L0_FLOOR[np.dtype(rdt).itemsize], eps)
    steps = len(sched) + MAX_EXTRA
    nqr = sum(1 for _, _, c in sched if c > 100)
    table = np.array(list(sched) + [(3.0, 1.0, 3.0)] * MAX_EXTRA, np.float64)
    ta, tb, tc = (jnp.asarray(table[:, i], rdt) for i in range(3))
    alpha = frobenius(x, ax)
    x = x / jnp.where(alpha > 0, alpha, 1).astype(dt)
    eye = identity_rows(n // p, n, dt, ax)
    nb = panel_width(rows + n // p, n)
    tol = jnp.asarray((5 * eps) ** (1 / 3), rdt)

    def qr_step(k: jax.Array, u: jax.Array) -> jax.Array:
        a, b, c = ta[k], tb[k], tc[k]
        stack = jnp.concatenate([jnp.sqrt(c).astype(dt) * u, eye])
        q = row_qr(stack, (rows, n // p), ax, nb)
        prod = ring_matmul(q[:rows], adjoint(q[rows:], ax, p), ax, p)
        return (b / c).astype(dt) * u + ((a - b / c) / jnp.sqrt(c)).astype(dt) * prod

    def more(state: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
        k, _, moved = state
        return (k < steps) & ((k < len(sched)) | (moved > tol))

    def chol_step(
        state: tuple[jax.Array, jax.Array, jax.Array],
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        k, u, _ = state
        a, b, c = ta[k], tb[k], tc[k]
        new = (b / c).astype(dt) * u + (a - b / c).astype(dt) * gram_solve(u, c, ax, p)
        moved = frobenius(new - u, ax) / math.sqrt(n)
        return k + 1, new, moved

    x = lax.fori_loop(jnp.int32(0), jnp.int32(nqr), qr_step, x) if nqr else x
    init = (jnp.int32(nqr), x, jnp.asarray(jnp.inf, rdt))
    k, u, _ = lax.while_loop(more, chol_step, init)
    return u, k
