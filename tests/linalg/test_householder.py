"""The Householder QR kernel with TSQR panels (tall, square, split columns) and lstsq through it."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.linalg import lstsq, qr
from shardkit.linalg._householder import project, signs
from shardkit.testing import assert_close


def assert_householder_qr(a: np.ndarray, q: Any, r: Any) -> None:
    """``q r = a``, ``q^H q = I`` and ``r`` upper triangular, to a few ``n eps``."""
    n = a.shape[1]
    eps = float(np.finfo(a.dtype).eps)
    q64, r64 = np.asarray(q).astype(np.complex128), np.asarray(r).astype(np.complex128)
    assert q64.shape == a.shape
    assert r64.shape == (n, n)
    residual = np.linalg.norm(a - q64 @ r64) / max(np.linalg.norm(a), 1e-300)
    orth = np.linalg.norm(np.eye(n) - q64.conj().T @ q64)
    assert residual <= 4 * n * eps, f"||a - q r|| / ||a|| = {residual:.3g}"
    assert orth <= 4 * n * eps, f"||I - q^H q|| = {orth:.3g}"
    assert (np.tril(r64, -1) == 0).all(), "r is not upper triangular"


def _draw(rng: np.random.Generator, shape: tuple[int, int], dtype: Any) -> np.ndarray:
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


# (mesh, spec, (M, n), dtype, nb): 2x4 with P(x, None) splits the rows over y too;
# n = 13 pads to a whole panel inside the kernel; nb = 64 rounds down to the rows.
CASES = [
    ("8", "x,None", (256, 24), np.float64, 8),
    ("8", "x,None", (256, 13), np.complex128, 4),
    ("2x4", "x,None", (512, 24), np.float32, 8),
    ("2x4", "x,None", (512, 13), np.complex64, 64),
    ("2x4", "(x,y),None", (256, 16), np.float64, 64),
]


@pytest.mark.parametrize(("shape", "sp", "size", "dtype", "nb"), CASES)
def test_tall_qr_matches_numpy(
    shape: str, sp: str, size: tuple[int, int], dtype: Any, nb: int
) -> None:
    m = make_mesh(shape)
    a_np = _draw(np.random.default_rng(0), size, dtype)
    a = shard(a_np, mesh=m, spec=sp)
    q, r = qr(a, nb=nb)
    assert q.dtype == dtype
    assert q.sharding == a.sharding
    assert r.sharding.is_fully_replicated
    assert_householder_qr(a_np, q, r)
    _, r_ref = np.linalg.qr(a_np.astype(np.complex128))
    assert_close(
        np.abs(np.asarray(r)), np.abs(r_ref), dtype=dtype, scale=float(np.abs(r_ref).max())
    )


@pytest.mark.parametrize("shape", ["8", "2x4"])
def test_tall_qr_of_rank_deficient_matrices_stays_orthonormal(shape: str) -> None:
    m = make_mesh(shape)
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal((256, 24))
    a_np[:, 5] = a_np[:, 3]  # a dependent column
    a_np[:, 9] = 0  # a zero column
    a_np[:, 16:] = 0  # a whole zero panel (nb = 8)
    for a in (a_np, np.zeros((256, 24))):
        q, r = qr(shard(a, mesh=m, spec="x,None"), nb=8)
        assert_householder_qr(a, q, r)


@pytest.mark.parametrize(("shape", "sp"), [("2x4", "x,y"), ("2x4", "x,None")])
def test_square_qr_of_rank_deficient_matrices_stays_orthonormal(shape: str, sp: str) -> None:
    # Split columns, and rows split further over the spare axis y (r's rows gathered):
    # Householder (nb = 4 divides the blocks); the status names the first dependent
    # column, q stays orthonormal all the same.
    m = make_mesh(shape)
    a_np = _draw(np.random.default_rng(5), (32, 32), np.complex128)
    a_np[:, 6] = a_np[:, 2]  # a dependent column
    a_np[:, 20:24] = 0  # a whole zero panel
    (q, r), status = qr.with_status(shard(a_np, mesh=m, spec=sp), nb=4)
    assert int(status) == 7
    assert q.sharding == shard(a_np, mesh=m, spec=sp).sharding
    assert_householder_qr(a_np, q, r)


def test_lstsq_tall_matches_numpy_full_and_deficient_rank() -> None:
    m = make_mesh("2x4")
    rng = np.random.default_rng(2)
    a_np = rng.standard_normal((512, 20))
    b = rng.standard_normal((512, 3))
    for a in (a_np, np.repeat(a_np[:, :10], 2, axis=1)):
        x, res, rank, s = lstsq(shard(a, mesh=m, spec="x,None"), b, nb=8)
        ref_x, _, ref_rank, ref_s = np.linalg.lstsq(a, b, rcond=None)
        assert_close(x, ref_x, scale=float(np.abs(ref_x).max()))
        assert int(rank) == ref_rank
        assert s is not None
        assert_close(s, ref_s)
        assert_close(res, np.sum((a @ np.asarray(x) - b) ** 2, axis=0))
        assert x.sharding.is_fully_replicated


def test_tall_qr_moves_only_panels_and_r() -> None:
    m = make_mesh("8", "auto")
    big, n, nb, item = 2048, 128, 32, 4
    sp = P("x", None)
    a = jax.ShapeDtypeStruct((big, n), jnp.float32, sharding=NamedSharding(m, sp))
    report = comms(lambda a: qr(a, nb=nb, mesh=m, spec=sp), a)
    report.assert_only({"all-reduce", "all-gather"})
    assert report.count("all-gather") == n // nb  # one stack of triangles per panel
    for c in report.collectives:
        out = max(int(np.prod(s)) for s in c.result_shapes)
        # Panels' triangles (8 nb x nb), (10 nb + 1) x nb, the updates' nb x n, r's n x n.
        assert out <= n * n, f"{c.kind} {c.result_shapes} is more than r-sized"
    # Per panel: the stack (8 nb^2) gathered, the stack's q, T^-1, S R and S handed out
    # by the diagonal's device (8 nb^2 + 2 nb^2 + nb), two nb x n (update, q).
    per_panel = 8 * nb * nb + (8 * nb + 2 * nb + 1) * nb + 2 * nb * n
    report.assert_bytes_at_most(2 * item * (per_panel * (n // nb) + n * n))
    share = big * n * item // 8
    # a, q, the local work block and W/T's: measured ~3.6 shares + n^2 at this size.
    report.assert_peak_memory_at_most(4 * share + 4 * n * n * item)


def test_spare_axes_split_the_rows_and_gather_q_once() -> None:
    m = make_mesh("2x4", "auto")
    big, n, nb = 1024, 64, 16
    sp = P("x", None)
    a = jax.ShapeDtypeStruct((big, n), jnp.float32, sharding=NamedSharding(m, sp))
    report = comms(lambda a: qr(a, nb=nb, mesh=m, spec=sp), a)
    # One stack of 8 triangles per panel (over x and y), and q's rows over y once.
    assert report.count("all-gather") == n // nb + 1
    rows = [c for c in report.collectives if c.kind == "all-gather" and c.group_size == 4]
    assert [(c.result_shapes, c.count) for c in rows] == [(((big // 2, n),), 1)]


def test_signs_keep_the_reconstruction_nonsingular() -> None:
    # A permutation top block: the diagonal's own signs (S = -sign(diag), here -1)
    # would make I - top^T S singular; the LU's signs keep every pivot >= 1.
    top = jnp.array([[0.0, 1.0], [1.0, 0.0]])
    s = signs(top)
    assert np.abs(np.linalg.det(np.eye(2) - np.asarray(top).T * np.asarray(s)[None, :])) >= 1
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((40, 8)))
    s = np.asarray(signs(jnp.asarray(q[:8])))
    assert set(np.abs(s).round(12)) == {1.0}
    # The top block of W = Q - [S; 0] has an LU without pivoting whose pivots are at
    # least 1 in magnitude (Ballard et al.'s modified LU).
    u = q[:8] - np.diag(s)
    for i in range(8):
        assert abs(u[i, i]) >= 1 - 1e-12
        u[i + 1 :] -= np.outer(u[i + 1 :, i] / u[i, i], u[i])


def test_project_covers_the_active_corner_only() -> None:
    rng = np.random.default_rng(4)
    for m, k in ((700, 300), (64, 40)):
        a = rng.standard_normal((m, k))
        w = rng.standard_normal((m, 8))
        for lo, clo in ((0, 0), (130, 37), (m - 1, k - 1), (m, k)):
            wz = np.where(np.arange(m)[:, None] >= lo, w, 0)
            got = np.asarray(project(jnp.asarray(wz), jnp.asarray(a), lo, clo))
            want = np.where(np.arange(k)[None, :] >= clo, wz.T @ a, 0)
            np.testing.assert_allclose(got, want, atol=1e-10)
