"""shardkit.linalg qr / lstsq against NumPy: TSQR, Householder and BCGS2 (square, split columns), statuses, comms, memory."""

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
from shardkit.linalg import RankDeficientError, SingularMatrixError, lstsq, qr
from shardkit.testing import assert_close


def ill(n: int, kappa: float, dtype: Any, seed: int = 0) -> np.ndarray:
    """A random ``n x n`` matrix with singular values ``logspace(0, -log10(kappa))``."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return ((u * np.logspace(0, -np.log10(kappa), n)) @ v.T).astype(dtype)


def assert_qr(a: np.ndarray, q: Any, r: Any) -> None:
    """``q r = a``, ``q`` orthonormal and ``r`` upper triangular, to ``O(n eps)`` (float64 checks)."""
    n = a.shape[1]
    eps = float(np.finfo(a.dtype).eps)
    a64, q64, r64 = (np.asarray(v, np.float64) for v in (a, q, r))
    assert q64.shape == a.shape
    assert r64.shape == (n, n)
    residual = np.linalg.norm(a64 - q64 @ r64) / np.linalg.norm(a64)
    orth = np.linalg.norm(np.eye(n) - q64.T @ q64)
    assert residual <= n * eps, f"||a - q r|| / ||a|| = {residual:.3g} > n eps"
    assert orth <= n * eps, f"||I - q^T q|| = {orth:.3g} > n eps"
    assert (np.tril(r64, -1) == 0).all(), "r is not upper triangular"


def test_tsqr_and_lstsq() -> None:
    m = make_mesh("8")
    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32):
        a_np = rng.standard_normal((128, 6)).astype(dtype)
        q, r = qr(shard(a_np, mesh=m, spec="x,None"))
        assert r.sharding.is_fully_replicated  # TSQR: r replicated
        assert_qr(a_np, q, r)
        tol = 1e-10 if dtype == np.float64 else 1e-4
        b = rng.standard_normal(128).astype(dtype)
        x, res, rank, _ = lstsq(shard(a_np, mesh=m, spec="x,None"), b)
        ref = np.linalg.lstsq(a_np.astype(np.float64), b.astype(np.float64), rcond=None)
        np.testing.assert_allclose(np.asarray(x), ref[0], atol=tol * 10)
        np.testing.assert_allclose(float(res[0]), ref[1][0], rtol=tol * 10)
        assert int(rank) == 6


# (mesh, spec, axis types, (M, n), dtype, nb): the layouts other than TSQR's. 40 / 8 = 5,
# 48 / 4 = 12, 56 / 2 = 28 columns per device (nb rounds down to 5, 6, 7); the last three
# have row blocks shorter than n; 104 / 8 = 13 rows per device leave Householder only
# panels of one column: BCGS2.
CASES = [
    ("8", "x,None", "explicit", (32, 32), np.float64, 4),
    ("8", "None,x", "auto", (40, 40), np.float32, 8),
    ("2x4", "x,y", "auto", (48, 48), np.float32, 8),
    ("4x2", "x,y", "explicit", (56, 56), np.float64, 8),
    ("1x8", "x,y", "auto", (32, 32), np.float64, 8),
    ("2x4", "x,y", "explicit", (64, 32), np.float64, 8),
    ("2x4", "(x,y),None", "explicit", (64, 32), np.float32, 8),
    ("8", "x,None", "explicit", (104, 48), np.float64, 8),
]


@pytest.mark.parametrize(("shape", "sp", "types", "size", "dtype", "nb"), CASES)
def test_block_layouts_qr_matches_numpy(shape, sp, types, size, dtype, nb) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh(shape, types)
    a_np = np.random.default_rng(1).standard_normal(size).astype(dtype)
    a = shard(a_np, mesh=m, spec=sp)
    q, r = qr(a, nb=nb)
    assert q.dtype == dtype
    assert r.dtype == dtype
    assert q.sharding == a.sharding
    assert r.sharding == shard(np.zeros((size[1],) * 2), mesh=m, spec=sp).sharding
    assert_qr(a_np, q, r)
    _, r_ref = np.linalg.qr(a_np.astype(np.float64))
    # QR is unique up to the signs of q's columns (r's rows).
    assert_close(
        np.abs(np.asarray(r)), np.abs(r_ref).astype(dtype), scale=float(np.abs(r_ref).max())
    )


def test_jit_explicit_and_auto_agree_with_eager() -> None:
    a_np = np.random.default_rng(2).standard_normal((48, 48))
    m = make_mesh("2x4")
    q, r = qr(shard(a_np, mesh=m, spec="x,y"), nb=4)
    qj, rj = jax.jit(lambda a: qr(a, nb=4))(shard(a_np, mesh=m, spec="x,y"))
    ma = make_mesh("2x4", "auto")
    qa, ra = jax.jit(lambda a: qr(a, nb=4, mesh=ma, spec="x,y"))(shard(a_np, mesh=ma, spec="x,y"))
    for got in (qj, qa):
        assert_close(got, q)
    for got in (rj, ra):
        assert_close(got, r)


@pytest.mark.parametrize(("shape", "sp"), [("2x4", "x,y"), ("8", "x,None")])
def test_ill_conditioned_stays_orthogonal(shape: str, sp: str) -> None:
    m = make_mesh(shape)
    for kappa in (1e6, 1e12):
        a_np = ill(48, kappa, np.float64)
        q, r = qr(shard(a_np, mesh=m, spec=sp), nb=4)
        assert_qr(a_np, q, r)  # ||I - q^T q|| <= 48 eps, measured ~3e-15


@pytest.mark.parametrize(
    ("shape", "sp", "size"), [("2x4", "x,y", (32, 32)), ("8", "x,None", (64, 32))]
)
def test_lstsq_beyond_tall_skinny(shape: str, sp: str, size: tuple[int, int]) -> None:
    m = make_mesh(shape, "auto")
    rng = np.random.default_rng(3)
    a_np, b = rng.standard_normal(size), rng.standard_normal((size[0], 2))
    x, res, rank, s = lstsq(shard(a_np, mesh=m, spec=sp), b, nb=4)
    ref_x, ref_res, _, _ = np.linalg.lstsq(a_np, b, rcond=None)
    assert_close(x, ref_x, dtype=np.float32)  # kappa ~1e2: 1e-12 is too tight for x
    if size[0] > size[1]:
        assert_close(res, ref_res)
    else:
        assert float(np.max(np.asarray(res))) <= 1e-20
    assert int(rank) == size[1]
    assert s is None  # the sharded r gives no singular values (as scipy's gelsy driver)
    x1, *_ = lstsq(shard(a_np, mesh=m, spec=sp), b[:, 0], nb=4)
    assert x1.shape == (size[1],)


def test_rank_deficient_raises_eagerly_and_reports_status_under_jit() -> None:
    m = make_mesh("2x4")
    a_np = np.random.default_rng(4).standard_normal((32, 32))
    a_np[:, 5] = a_np[:, 3]
    a = shard(a_np, mesh=m, spec="x,y")
    with pytest.raises(RankDeficientError, match=r"rank deficient.*column 5") as info:
        qr(a, nb=4)
    assert info.value.column == 5
    assert isinstance(info.value, SingularMatrixError | np.linalg.LinAlgError)
    (_, r), status = qr.with_status(a, nb=4)
    assert int(status) == 6
    assert abs(float(np.asarray(r)[5, 5])) < 1e-12
    _, status = jax.jit(lambda a: qr.with_status(a, nb=4))(a)
    assert int(status) == 6
    q_nan, r_nan = jax.jit(lambda a: qr(a, nb=4))(a)
    assert np.isnan(np.asarray(q_nan)).all()
    assert np.isnan(np.asarray(r_nan)).all()
    with pytest.raises(RankDeficientError, match="column 0"):
        qr(shard(np.zeros((32, 32)), mesh=m, spec="x,y"))
    # lstsq answers as numpy.linalg.lstsq instead (minimum norm), eagerly and under jit.
    b = np.ones(32)
    ref, _, rank_ref, _ = np.linalg.lstsq(a_np, b, rcond=None)
    for x, res, rank, s in (lstsq(a, b, nb=4), jax.jit(lambda a, b: lstsq(a, b, nb=4))(a, b)):
        assert int(rank) == rank_ref == 31
        assert_close(x, ref, dtype=np.float32)
        assert s is None  # this layout computes no singular values (scipy's gelsy)
        assert_close(res, np.sum((a_np @ ref - b) ** 2, keepdims=True), dtype=np.float32)


def test_errors_name_the_problem() -> None:
    m = make_mesh("2x4")
    for bad in (0, -4, "8", 2.0, True):
        with pytest.raises(ValueError, match=f"nb={bad!r}"):
            qr(shard(np.eye(16), mesh=m, spec="x,y"), nb=bad)  # type: ignore[arg-type]
    # Sizes the mesh does not divide are padded now (test_dtypes_padding checks more).
    q, r = qr(np.eye(10), mesh=m, spec="x,y")
    assert_close(np.asarray(q) @ np.asarray(r), np.eye(10))
    with pytest.raises(ValueError, match=r"b\.shape=\(5,\)"):
        lstsq(shard(np.eye(16), mesh=m, spec="x,y"), np.ones(5))


@pytest.mark.parametrize(("shape", "sp"), [("8", P("x", None)), ("2x4", P("x", "y"))])
def test_qr_never_moves_the_matrix_and_bounds_memory(shape: str, sp: P) -> None:
    m = make_mesh(shape, "auto")
    n, nb, item = 256, 32, 4
    a = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, sp))
    rows = m.shape["x"]
    report = comms(lambda a: qr.with_status(a, nb=nb, mesh=m, spec=sp), a)
    report.assert_only({"all-reduce", "all-gather"})
    for c in report.collectives:
        out = max(int(np.prod(s)) for s in c.result_shapes)
        # Panel-sized: the panel's Q (n / R) x nb, the updates' nb x (n / C), R blocks
        # nb x nb, the stack's q with T^-1, S R and S ((R + 2) nb + 1) x nb.
        limit = max(n, (rows + 2) * nb + 1) * nb
        assert out <= limit, f"{c.kind} {c.result_shapes} is more than panel-sized"
    assert report.count("all-gather") == n // nb  # one TSQR per panel
    # Per panel: the stack of R triangles twice (gathered, then its q handed out with
    # T^-1, S R and S), two updates of nb x (n / C) (factorization and q) and, when the
    # columns are split, the panel's Q along the mesh row twice ((n / R) x nb); r stays
    # where it is (square).
    cols = m.shape["y"] if len(sp) > 1 and sp[1] is not None else 1
    stacks = rows * nb * nb + (rows * nb + 2 * nb + 1) * nb
    per_panel = stacks + 2 * nb * n // cols + 2 * (n // rows) * nb * (cols > 1)
    report.assert_bytes_at_most(2 * item * per_panel * (n // nb))
    share = n * n * item // 8
    # Measured (n = 256): 3 shares (a, q, r) + ~2.5 n nb; the jit NaN fill adds one share.
    report.assert_peak_memory_at_most(3 * share + 8 * n * nb * item)
    filled = comms(lambda a: qr(a, nb=nb, mesh=m, spec=sp), a)
    filled.assert_peak_memory_at_most(4 * share + 8 * n * nb * item)
    ref = comms(jnp.linalg.qr, a)  # gathers the whole matrix on every device
    assert report.memory is not None
    assert ref.memory is not None
    assert report.memory.peak_bytes < ref.memory.peak_bytes / 2
