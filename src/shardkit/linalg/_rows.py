"""Matrices split by rows over the whole mesh: the spectral decompositions' working layout.

Inside ``shard_map`` over every mesh axis (their tuple ``ax``, ``p`` devices), an
``N x K`` matrix lives as ``P(ax, None)``: device ``i`` holds rows ``i*b .. (i+1)*b``
(``b = N / p``), all columns. The kernels here keep it so, moving at most one device's
block per collective (``N^2 / p`` elements of an ``N x N`` matrix: never a gather):

* :func:`ring_matmul` ``A @ B``: ``B``'s row blocks travel once around the ring of
  devices (``p - 1`` collective-permutes of one block each), each device multiplying
  the block it holds into its rows of the product (``2 N K N / p`` flops per device).
* :func:`adjoint` ``A^H``: one all-to-all of one block (``b x b`` pieces), then a
  local transpose.
* :func:`identity_rows` and :func:`row_index`: the device's rows of ``I`` and their
  global indices.

Every collective of one kernel reads the result of the one before it, so XLA's CPU
runtime never has two of them in flight at once (see :mod:`shardkit.inspect._order`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from shardkit.linalg._blockcyclic import axis_index, dslice, dupdate

__all__ = [
    "adjoint",
    "broadcast_rows",
    "identity_rows",
    "ring_gram",
    "ring_matmul",
    "ring_outer",
    "ring_pass",
    "ring_permutation",
    "row_index",
]


def row_index(rows: int, ax: tuple[str, ...]) -> jax.Array:
    """Global indices (int32) of this device's ``rows`` rows."""
    return axis_index(ax) * rows + jnp.arange(rows, dtype=jnp.int32)


def identity_rows(rows: int, cols: int, dtype: jnp.dtype, ax: tuple[str, ...]) -> jax.Array:
    """This device's ``rows`` rows of the ``cols x cols`` identity."""
    g = row_index(rows, ax)
    return (g[:, None] == jnp.arange(cols, dtype=jnp.int32)[None, :]).astype(dtype)


def ring_pass(
    acc: jax.Array,
    blk: jax.Array,
    visit: Callable[[jax.Array, jax.Array, jax.Array], jax.Array],
    ax: tuple[str, ...],
    p: int,
    send: Callable[[jax.Array], jax.Array] | None = None,
) -> jax.Array:
    """``acc`` after ``visit(t, acc, block)`` with every device's ``blk`` in turn.

    The blocks pass around the ring (device ``i`` receives from ``i + 1``): at step
    ``t`` device ``i`` holds device ``(i + t) mod p``'s block. ``p - 1`` sends, each
    ``send(block)`` (one collective-permute by default; a caller may split it).
    """
    perm = ring_permutation(p)
    move = send if send is not None else (lambda b: lax.ppermute(b, ax, perm))

    def step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        acc, blk = carry
        return visit(t, acc, blk), move(blk)

    if p > 1:
        acc, blk = lax.fori_loop(jnp.int32(0), jnp.int32(p - 1), step, (acc, blk))
    return visit(jnp.int32(p - 1), acc, blk)


def ring_permutation(p: int) -> list[tuple[int, int]]:
    """The ring's collective-permute pairs: device ``j`` sends to ``j - 1``."""
    return [(j, (j - 1) % p) for j in range(p)]


def ring_matmul(a: jax.Array, b: jax.Array, ax: tuple[str, ...], p: int) -> jax.Array:
    """Local rows of ``A @ B``: ``a`` is ``(rows, N)``, ``b`` this device's ``(N/p, K)`` rows of ``B``.

    ``B``'s blocks pass around the ring (:func:`ring_pass`); at step ``t`` device ``i``
    holds block ``(i + t) mod p`` and multiplies it by the matching columns of ``a``.
    """
    if p == 1:
        return a @ b
    me = axis_index(ax)
    bs = b.shape[0]

    def multiply(t: jax.Array, acc: jax.Array, blk: jax.Array) -> jax.Array:
        return acc + dslice(a, (0, ((me + t) % p) * bs), (a.shape[0], bs)) @ blk

    acc = jnp.zeros((a.shape[0], b.shape[1]), jnp.result_type(a, b))
    return ring_pass(acc, b, multiply, ax, p)


def adjoint(x: jax.Array, ax: tuple[str, ...], p: int) -> jax.Array:
    """Local rows of ``X^H`` for a square ``X`` held as ``(N/p, N)`` rows: one all-to-all."""
    b, n = x.shape
    if p == 1:
        return jnp.conj(x).T
    # pieces[j] = x[:, J_j] goes to device j; device i receives X[I_j, I_i] from each j.
    pieces = x.reshape(b, p, b).transpose(1, 0, 2)
    got = lax.all_to_all(pieces, ax, 0, 0, tiled=True)  # got[j] = X[I_j, I_i]
    # (X^H)[I_i, I_j] = X[I_j, I_i]^H: row r, column j*b + c is conj(got[j, c, r]).
    return jnp.conj(got).transpose(2, 0, 1).reshape(b, n)


def ring_gram(u: jax.Array, a: jax.Array, ax: tuple[str, ...], p: int) -> jax.Array:
    """Local rows of ``U^H A`` for ``U`` (``M x N``) and ``A`` (``M x K``) held as row blocks.

    A ring reduce-scatter: the partial sum for output block ``j`` travels the ring,
    each device adding ``U_i[:, J_j]^H A_i``; no device ever holds more than one
    ``(N/p) x K`` block of the product.
    """
    if p == 1:
        return jnp.conj(u).T @ a
    me = axis_index(ax)
    bs = u.shape[1] // p
    perm = ring_permutation(p)

    def part(t: jax.Array) -> jax.Array:
        blk = (me + t + 1) % p
        return jnp.conj(dslice(u, (0, blk * bs), (u.shape[0], bs))).T @ a

    def step(t: jax.Array, acc: jax.Array) -> jax.Array:
        return lax.ppermute(acc, ax, perm) + part(t)

    return lax.fori_loop(jnp.int32(1), jnp.int32(p), step, part(jnp.int32(0)))


def broadcast_rows(x: jax.Array, owner: jax.Array, ax: tuple[str, ...]) -> jax.Array:
    """Device ``owner``'s block ``x`` on every device: one all-reduce of one block."""
    if not ax:
        return x
    return lax.psum(jnp.where(axis_index(ax) == owner, x, jnp.zeros_like(x)), ax)


def ring_outer(a: jax.Array, b: jax.Array, ax: tuple[str, ...], p: int) -> jax.Array:
    """Local rows of ``A B^H`` for ``A`` (``M x K``) and ``B`` (``N x K``) held as row blocks.

    ``B``'s row blocks pass around the ring (:func:`ring_pass`); at each step a device fills the column
    block of its rows of the product that the block it holds gives (``(M/p) x (N/p)``).
    """
    if p == 1:
        return a @ jnp.conj(b).T
    me = axis_index(ax)
    bs = b.shape[0]

    def put(t: jax.Array, acc: jax.Array, blk: jax.Array) -> jax.Array:
        return dupdate(acc, a @ jnp.conj(blk).T, (0, ((me + t) % p) * bs))

    acc = jnp.zeros((a.shape[0], bs * p), jnp.result_type(a, b))
    return ring_pass(acc, b, put, ax, p)
