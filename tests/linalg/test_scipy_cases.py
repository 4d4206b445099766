"""Cases ported from SciPy's, NumPy's and JAX's own linear-algebra tests, on sharded input.

Each case names the test it comes from (``scipy/linalg/tests/test_basic.py``,
``test_decomp.py``, ``test_decomp_cholesky.py``; ``numpy/linalg/tests/test_linalg.py``;
``jax/tests/linalg_test.py``) and runs on the 1-D mesh ``8`` (rows split) and the 2-D
mesh ``2x4``. Most matrices are smaller than the mesh (2x2, 3x3) or one block wide, so
they meet the padding as well; the results are compared with SciPy/NumPy on one device.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _matrix import FULL
from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.layout.internal import operand
from shardkit.linalg import (
    NotPositiveDefiniteError,
    SingularMatrixError,
    batched_solve,
    cho_factor,
    cho_solve,
    cholesky,
    det,
    inv,
    lstsq,
    lu,
    lu_factor,
    lu_solve,
    qr,
    slogdet,
    solve,
    solve_triangular,
)
from shardkit.linalg._inputs import Trans
from shardkit.linalg._lu import _factor_program
from shardkit.linalg._pad import square_plan
from shardkit.testing import assert_close

MESHES = {"8": ("x", "x,None"), "2x4": ("x,y", "x,y")}


def _meshes(first: int) -> list[str]:
    """Both meshes with ``FULL``; otherwise mesh ``first`` (0: ``8``, 1: ``2x4``).

    Compiles dominate the run time: tests on the same small shapes share a mesh (and so
    their compiled programs) by default; the 2-D mesh takes the 8x8 cases.
    """
    names = list(MESHES)
    return names if FULL else [names[first % len(names)]]


def _where(ms: str) -> dict[str, Any]:
    names, sp = MESHES[ms]
    return {"mesh": make_mesh(ms, names=names), "spec": sp}


# ---- dtype promotion and array-likes -------------------------------------------------


@pytest.mark.parametrize("ms", _meshes(0))
def test_hand_written_solves_promote_like_scipy(ms: str) -> None:
    where = _where(ms)
    # scipy test_basic.py TestSolve: test_20Feb04_bug, test_simple, test_simple_complex,
    # test_simple_pos_complexb (Python lists; a complex b with a real a is complex).
    cases = [
        ([[1, 1], [1.0, 0]], [1, 0j]),  # test_20Feb04_bug
        ([[5, 2], [2j, 4]], [[1j, 1j], [0, 2]]),  # test_simple_complex
    ]
    if FULL:  # more of the same programs' inputs
        cases += [
            ([[1, 1], [1.2, 0]], [1, 0j]),  # test_20Feb04_bug
            ([[1, 20], [-30, 4]], [[2, 1], [-30, 4]]),  # test_simple
        ]
    for a, b in cases:
        x = solve(a, b, **where)
        want = sl.solve(np.asarray(a), np.asarray(b))
        assert x.dtype == want.dtype, (a, b, x.dtype)
        assert_close(x, want, what=f"solve({a}, {b})")
    # The example: scipy returns [0.25j, -0.125j].
    assert_close(solve([[5, 2], [2, 4]], [1j, 0], **where), np.array([0.25j, -0.125j]))
    x = cho_solve(cho_factor([[5, 2], [2, 4]], **where), [1j, 0])
    assert x.dtype == np.complex128
    assert_close(x, np.array([0.25j, -0.125j]))
    x = solve_triangular([[5, 2], [0, 4]], [1j, 0], **where)
    assert x.dtype == np.complex128
    assert_close(x, np.array([0.2j, 0]))


@pytest.mark.parametrize("ms", _meshes(0))
def test_integer_input_is_promoted_by_every_function(ms: str) -> None:
    where = _where(ms)
    # numpy test_linalg.py TestSolve.test_types / jax linalg_test.py testSolve (int input).
    a = np.array([[4, 1], [1, 3]], np.int32)
    b = np.array([1, 2], np.int64)
    f = np.float64
    ref = np.linalg.solve(a.astype(f), b.astype(f))
    for name, x in [
        ("solve", solve(a, b, **where)),
        ("lu_solve", lu_solve(lu_factor(a, **where), b)),
        ("cho_solve", cho_solve(cho_factor(a, **where), b)),
    ]:
        assert x.dtype == f, name
        assert_close(x, ref, what=name)
    assert_close(det(a, **where), np.linalg.det(a.astype(f)))
    assert_close(cholesky(a, **where), np.linalg.cholesky(a.astype(f)))
    assert_close(solve_triangular(np.triu(a), b, **where), sl.solve_triangular(np.triu(a), b))


# ---- only the referenced triangle is read ---------------------------------------------


@pytest.mark.parametrize("ms", _meshes(1))
def test_the_unused_triangle_is_never_read(ms: str) -> None:
    where = _where(ms)
    # scipy test_basic.py TestSolveTriangular (the other triangle is ignored) and
    # test_decomp_cholesky.py (cholesky reads one triangle), with NaN as the junk.
    rng = np.random.default_rng(0)
    n = 8
    t = rng.standard_normal((n, n)) + n * np.eye(n)
    b = rng.standard_normal((n, 2))
    for lower in (True, False):
        junk = np.full((n, n), np.nan)
        keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
        a = np.where(keep, t, junk)
        ref_t = np.where(keep, t, 0)
        # Each (lower, trans, unit) is its own program: by default lower meets the plain
        # solve and the unit diagonal, upper the transpose (both read the other block).
        choices: tuple[Trans, ...] = (0, 1) if FULL else ((0 if lower else 1),)
        for trans in choices:
            x = solve_triangular(a, b, lower=lower, trans=trans, nb=4, **where)
            assert_close(x, sl.solve_triangular(ref_t, b, lower=lower, trans=trans))
        if not (lower or FULL):
            continue
        # unit_diagonal: the diagonal is never read either.
        a_unit = a.copy()
        np.fill_diagonal(a_unit, np.nan)
        x = solve_triangular(a_unit, b, lower=lower, unit_diagonal=True, nb=4, **where)
        assert_close(x, sl.solve_triangular(ref_t, b, lower=lower, unit_diagonal=True))
    spd = t @ t.T
    half = np.where(np.tril(np.ones((n, n), bool)), spd, np.nan)
    assert_close(cholesky(half, nb=4, **where), np.linalg.cholesky(spd))
    x = cho_solve(cho_factor(half, nb=4, **where), b)
    assert_close(x, np.linalg.solve(spd, b), scale=float(np.abs(np.linalg.solve(spd, b)).max()))


# ---- empty and degenerate shapes ------------------------------------------------------


@pytest.mark.parametrize("ms", _meshes(0))
def test_empty_and_tiny_shapes(ms: str) -> None:
    where = _where(ms)
    # numpy test_linalg.py: TestSolve.test_0_size, TestDet.test_0_size (det of 0x0 is 1),
    # TestCholesky.test_0_size, TestQR (0 sizes), TestLstsq.test_empty_a_b.
    e = np.zeros((0, 0))
    assert solve(e, np.zeros(0), **where).shape == (0,)
    assert solve(e, np.zeros((0, 3)), **where).shape == (0, 3)
    assert float(det(e, **where)) == 1.0
    sign, logabs = slogdet(e, **where)
    assert (float(sign), float(logabs)) == (1.0, 0.0)
    assert cholesky(e, **where).shape == (0, 0)
    assert inv(e, **where).shape == (0, 0)
    assert [x.shape for x in lu(e, **where)] == [(0, 0)] * 3
    assert [x.shape for x in qr(e, **where)] == [(0, 0), (0, 0)]
    assert solve_triangular(e, np.zeros(0), **where).shape == (0,)
    # scipy.linalg.lu_factor / cho_factor of 0x0: factors whose solves are empty.
    lf, lstatus = lu_factor.with_status(e, **where)
    assert (lf.lu.shape, int(lstatus)) == ((0, 0), 0)
    assert lu_solve(lf, np.zeros(0)).shape == (0,)
    assert lu_solve(lu_factor(e, **where), np.zeros((0, 2)), trans=1).shape == (0, 2)
    cf = cho_factor(e, **where)
    assert cf.c.shape == (0, 0)
    assert cho_solve(cf, np.zeros(0)).shape == (0,)
    assert cho_solve(cf, np.zeros((0, 2))).shape == (0, 2)
    with pytest.raises(ValueError, match=r"b.shape=\(1,\)"):
        lu_solve(lf, np.zeros(1))
    x, _, rank, s = lstsq(e, np.zeros(0), **where)
    assert x.shape == (0,)
    assert int(rank) == 0
    assert s is not None
    assert s.shape == (0,)
    # (n, 0) right-hand sides: empty solutions that read back.
    a = np.array([[4.0, 1, 0], [1, 3, 1], [0, 1, 2]])
    for x in (
        solve(a, np.zeros((3, 0)), **where),
        lu_solve(lu_factor(a, **where), np.zeros((3, 0))),
        cho_solve(cho_factor(a, **where), np.zeros((3, 0))),
        solve_triangular(a, np.zeros((3, 0)), **where),
    ):
        assert np.asarray(x).shape == (3, 0)
    x, _res, rank, s = lstsq(a, np.zeros((3, 0)), **where)
    assert np.asarray(x).shape == (3, 0)
    assert int(rank) == 3
    # 1x1 and 3x3: fewer rows than devices.
    assert_close(solve([[2.0]], [3.0], **where), np.array([1.5]))
    assert_close(det([[-2.0]], **where), np.array(-2.0))
    assert_close(solve(a, [1.0, 2, 3], **where), np.linalg.solve(a, [1.0, 2, 3]))
    with pytest.raises(ValueError, match=r"b.shape=\(2,\)"):
        solve(a, np.zeros(2), **where)


# ---- check_finite ---------------------------------------------------------------------


@pytest.mark.parametrize("ms", _meshes(0))
def test_non_finite_input_is_refused_eagerly_and_nan_under_jit(ms: str) -> None:
    where = _where(ms)
    # scipy test_basic.py TestSolve.test_check_finite / test_decomp.py check_finite cases.
    a = np.array([[4.0, 1], [1, np.inf]])
    b = np.array([1.0, np.nan])
    ok = np.array([[4.0, 1], [1, 3]])
    calls = [
        lambda: solve(a, [1.0, 1], **where),
        lambda: solve(ok, b, **where),
        lambda: lu_factor(a, **where),
        lambda: lu(a, **where),
        lambda: det(a, **where),
        lambda: slogdet(a, **where),
        lambda: inv(a, **where),
        lambda: cholesky(a, **where),
        lambda: cho_factor(a, **where),
        lambda: qr(a, **where),
        lambda: lstsq(a, [1.0, 1], **where),
        lambda: solve_triangular(a, [1.0, 1], **where),
        lambda: lu_solve(lu_factor(ok, **where), b),
        lambda: cho_solve(cho_factor(ok, **where), b),
        lambda: batched_solve(np.stack([a] * 8), np.ones((8, 2)), mesh=where["mesh"], spec="x"),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="must not contain infs or NaNs"):
            call()
    # Opting out skips the check (the result is then undefined, but nothing raises).
    solve(ok, b, check_finite=False, **where)
    # Under jit the values are unknown: the documented NaN fill.
    x = jax.jit(lambda a, b: solve(a, b, **where))(ok, b)
    assert bool(jnp.isnan(x).all())
    _sign, logabs = jax.jit(lambda a: slogdet(a, **where))(a)
    assert bool(jnp.isnan(logabs))


# ---- det and slogdet ------------------------------------------------------------------


@pytest.mark.parametrize("ms", _meshes(1))
def test_det_and_slogdet_match_numpy(ms: str) -> None:
    where = _where(ms)
    # numpy test_linalg.py TestDet (test_types, test_0_size) and jax linalg_test.py
    # testDetOfSingularMatrix / testSlogdet; the overflow example.
    d = np.diag([1e200, 1e200, 1e-200, 1e-200, 1, 1, 1, 1])
    assert_close(det(d, nb=4, **where), np.linalg.det(d))  # 1.0, no inf from partial products
    big = np.diag([1e300, 1e300, -1.0, 1, 1, 1, 1, 1])
    sign, logabs = slogdet(big, nb=4, **where)
    ref = np.linalg.slogdet(big)
    assert float(sign) == -1.0
    assert_close(logabs, ref.logabsdet)
    assert float(det(big, nb=4, **where)) == -np.inf  # the determinant itself overflows
    rng = np.random.default_rng(1)
    mats = {
        "hilbert": sl.hilbert(8),
        "vandermonde": np.vander(np.linspace(0.5, 1.5, 8)),
        "permutation": np.eye(8)[[3, 0, 7, 1, 2, 6, 4, 5]],
        "complex": rng.standard_normal((8, 8)) + 1j * rng.standard_normal((8, 8)),
    }
    for name, m in mats.items():
        sign, logabs = slogdet(m, nb=4, **where)
        ref = np.linalg.slogdet(m)
        assert_close(sign, np.asarray(ref.sign), what=f"{name} sign")
        # Relative accuracy of det is kappa * eps (hilbert(8): kappa ~ 1.5e10; this
        # vandermonde 1.4e7, and two pivot orders' log|det| measured 7e-11 apart).
        tol = 10 * max(float(np.linalg.cond(m)), 10.0) * np.finfo(np.float64).eps
        assert abs(float(logabs) - ref.logabsdet) <= tol, (name, float(logabs), ref, tol)
        assert abs(complex(det(m, nb=4, **where)) / np.linalg.det(m) - 1) <= tol, name
    # An exactly singular matrix (jax testDetOfSingularMatrix): det 0, slogdet (0, -inf).
    sing = np.eye(8)
    sing[:, 3] = 0  # an exactly zero pivot
    sign, logabs = slogdet(sing, nb=4, **where)
    assert float(sign) == 0.0
    assert float(logabs) == -np.inf
    assert float(det(sing, nb=4, **where)) == 0.0


# ---- hard matrices from the peer suites -----------------------------------------------


@pytest.mark.parametrize("ms", _meshes(1))
def test_hard_matrices_solve_like_scipy(ms: str) -> None:
    where = _where(ms)
    # scipy test_basic.py TestSolve.test_random_exact / Hilbert; numpy test_linalg.py
    # (permutation matrices need every pivot exchanged: zero pivots in place).
    hil = sl.hilbert(8)
    b = np.ones(8)
    x = solve(hil, b, nb=4, **where)
    # kappa(hilbert(8)) ~ 1.5e10: compare backward errors, not solutions.
    res = np.abs(hil @ np.asarray(x) - b).max()
    assert res <= 1e-6, res
    perm = np.eye(8)[[1, 0, 3, 2, 5, 4, 7, 6]]  # every diagonal entry zero
    assert_close(solve(perm, np.arange(8.0), nb=4, **where), perm.T @ np.arange(8.0))
    van = np.vander(np.linspace(-1, 1, 8), increasing=True)
    x = solve(van, b, nb=4, **where)
    assert_close(van @ np.asarray(x), b)
    # A nearly singular matrix still solves (scipy TestSolve.test_ill_conditioned style).
    near = np.eye(8)
    near[:2, :2] = [[1.0, 1], [1, 1 + 1e-10]]
    assert_close(near @ np.asarray(solve(near, b, nb=4, **where)), b)
    dep = np.eye(8)
    dep[5] = dep[4]
    with pytest.raises(SingularMatrixError):
        solve(dep, b, nb=4, **where)
    # scipy test_decomp_cholesky.py: a non-positive-definite matrix is an error.
    indef = np.eye(8)
    indef[:2, :2] = [[1.0, 2], [2, 1]]
    with pytest.raises(NotPositiveDefiniteError):
        cholesky(indef, nb=4, **where)
    # jax linalg_test.py testLuSolve: trans=2 is the conjugate transpose.
    rng = np.random.default_rng(2)
    c = rng.standard_normal((8, 8)) + 1j * rng.standard_normal((8, 8))
    rhs = rng.standard_normal((8, 2)) + 1j * rng.standard_normal((8, 2))
    f = lu_factor(c, nb=4, **where)
    for trans in (0, 1, 2):
        ref = sl.lu_solve(sl.lu_factor(c), rhs, trans=trans)
        assert_close(lu_solve(f, rhs, trans=trans), ref, scale=float(np.abs(ref).max()))


# ---- rank-deficient least squares -----------------------------------------------------


def test_rank_deficient_lstsq_matches_numpy() -> None:
    # numpy test_linalg.py TestLstsq.test_rcond / test_empty_lstsq and the cases:
    # the TSQR path returns NumPy's minimum-norm x, rank and singular values.
    m = make_mesh("8")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 3)) @ rng.standard_normal((3, 4))  # rank 3
    b = rng.standard_normal((64, 2))
    x, res, rank, s = lstsq(shard(a, mesh=m, spec="x,None"), b)
    xr, _, rank_r, sr = np.linalg.lstsq(a, b, rcond=None)
    assert int(rank) == rank_r == 3
    assert_close(x, xr)
    assert s is not None
    assert_close(s, sr)
    assert_close(res, np.sum(np.abs(a @ xr - b) ** 2, axis=0), what="residuals")
    # The zero matrix: x = 0, rank 0, the residual |b|^2 (not NaN/inf).
    x, res, rank, s = lstsq(shard(np.zeros((64, 4)), mesh=m, spec="x,None"), np.ones((64, 2)))
    assert int(rank) == 0
    assert_close(x, np.zeros((4, 2)))
    assert_close(res, np.array([64.0, 64.0]))
    # Integer a and a complex b are promoted as everywhere else (the lstsq case).
    ai = np.arange(64 * 4).reshape(64, 4) % 7 + np.eye(64, 4, dtype=int)
    x, *_ = lstsq(ai, 1j * np.ones(64), mesh=m, spec="x,None")
    assert x.dtype == np.complex128
    assert_close(x, np.linalg.lstsq(ai.astype(float), 1j * np.ones(64), rcond=None)[0])


@pytest.mark.parametrize("ms", list(MESHES))
def test_rank_deficient_lstsq_is_minimum_norm_on_every_layout(ms: str) -> None:
    # The block Gram-Schmidt layouts (square, split columns, row blocks shorter than n)
    # fall back to the minimum-norm solve: the same x, rank and s as NumPy's.
    where = _where(ms)
    rng = np.random.default_rng(5)
    cases = [
        (rng.standard_normal((6, 3)) @ rng.standard_normal((3, 4)), rng.standard_normal((6, 2))),
        (rng.standard_normal((8, 5)) @ rng.standard_normal((5, 8)), rng.standard_normal(8)),
        (np.ones((8, 8)), rng.standard_normal(8)),
        (np.zeros((8, 4)), np.ones((8, 2))),
    ]
    # Compiles dominate: by default each mesh takes one case in turn (FULL: all).
    for a, b in cases if FULL else [cases[list(MESHES).index(ms)]]:
        x, res, rank, s = lstsq(a, b, nb=4, **where)
        xr, _, rank_r, _ = np.linalg.lstsq(a, b, rcond=None)
        assert int(rank) == rank_r, a.shape
        assert_close(x, xr, what=f"x of {a.shape}")
        # the sharded r gives no singular values: None, as scipy's lapack_driver="gelsy".
        assert s is None
        assert_close(res, np.sum(np.abs((a @ xr - b).reshape(len(b), -1)) ** 2, axis=0))
    # Under jit with an explicit layout the fallback is a lax.cond: the same answer.
    if ms == "8" and not FULL:
        return
    a, b = cases[0]
    x, _, rank, _ = jax.jit(lambda a, b: lstsq(a, b, nb=4, **where))(a, b)
    assert int(rank) == 3
    assert_close(x, np.linalg.lstsq(a, b, rcond=None)[0])


def _kahan(n: int, theta: float) -> np.ndarray:
    """LAPACK's Kahan matrix ``diag(s^i) (I - c U)``, ``U`` the strict upper ones (s, c of theta)."""
    s, c = np.sin(theta), np.cos(theta)
    return np.diag(s ** np.arange(n)) @ (np.eye(n) - c * np.triu(np.ones((n, n)), 1))


@pytest.mark.parametrize("ms", _meshes(0))
def test_lstsq_rank_estimate_is_not_fooled_by_a_kahan_matrix(ms: str) -> None:
    # numpy test_linalg.py TestLstsq / LAPACK's Kahan test matrix: the r of q K is K (up
    # to signs), whose diagonal ratio min|r_jj| / max|r_jj| = 2e-5 is far above
    # 100 rcond = 1.4e-12, yet sigma_min / sigma_max = 7e-18 < rcond: NumPy's rank is 63.
    # The diagonal alone took it for full rank (rank 64, max|x| 7e15 against 4e4).
    where = _where(ms)
    rng = np.random.default_rng(7)
    q = np.linalg.qr(rng.standard_normal((64, 64)))[0]
    b = rng.standard_normal(64)
    a = q @ _kahan(64, 1.0)
    x, res, rank, s = lstsq(a, b, nb=8, **where)
    xr, _, rank_r, _ = np.linalg.lstsq(a, b, rcond=None)
    assert rank_r == 63
    assert int(rank) == 63
    assert s is None  # the square layouts compute no SVD (scipy's gelsy)
    # The truncated problem's kappa is 3e5: 1e-12 is too tight for x.
    assert_close(x, xr, dtype=np.float32, what="minimum-norm x")
    assert_close(res, np.sum((a @ xr - b) ** 2, keepdims=True), dtype=np.float32)
    # Under jit: the explicit layout's lax.cond, and Auto axes' per-shard program. On the
    # 1-D mesh the explicit case aborted the process in an all-reduce rendezvous: the
    # finite check's all-reduce and the estimate's solves ran beside q^T b's psum, and
    # XLA's CPU runtime entered them in different orders on different devices. Its
    # collectives now form one chain (assert_ordered).
    names, sp = MESHES[ms]
    kinds = ("explicit", "auto") if FULL else (("explicit",) if ms == "8" else ("auto",))
    for kind in kinds:
        arr = shard(
            a,
            mesh=where["mesh"] if kind == "explicit" else make_mesh(ms, kind, names=names),
            spec=sp,
        )
        f = jax.jit(lambda a, b: lstsq(a, b, nb=8))
        x, _, rank, s = f(arr, b)
        assert (int(rank), s) == (63, None)
        assert_close(x, xr, dtype=np.float32, what="minimum-norm x under jit")
        comms(f, arr, b).assert_ordered()
    # Full rank (the same programs): rank n, x NumPy's, and s None rather than NaN.
    a = rng.standard_normal((64, 64)) + 16 * np.eye(64)
    x, res, rank, s = lstsq(a, b, nb=8, **where)
    assert int(rank) == 64 == np.linalg.matrix_rank(a)
    assert s is None
    assert_close(x, np.linalg.solve(a, b), scale=float(np.abs(np.linalg.solve(a, b)).max()))


# ---- wide and rectangular shapes -------------------------------------------------------


@pytest.mark.parametrize("ms", list(MESHES))
def test_wide_qr_lstsq_and_rectangular_lu_match_scipy(ms: str) -> None:
    # scipy.linalg.qr(mode="economic") and scipy.linalg.lu of wide and tall matrices,
    # numpy.linalg.lstsq of underdetermined systems (minimum norm, rank deficient too).
    where = _where(ms)
    rng = np.random.default_rng(6)
    wide = rng.standard_normal((8, 16)) if ms == "2x4" else rng.standard_normal((3, 10))
    q, r = qr(wide, **where)
    q_ref, r_ref = np.linalg.qr(wide)  # scipy.linalg.qr(mode="economic"): the same
    assert (q.shape, r.shape) == (q_ref.shape, r_ref.shape)
    assert_close(np.abs(np.asarray(r)), np.abs(r_ref), what="|r|")
    assert_close(np.asarray(q) @ np.asarray(r), wide, what="q r")
    assert_close(np.asarray(q).T @ np.asarray(q), np.eye(len(wide)), what="q^T q")
    assert np.all(np.tril(np.asarray(r), -1) == 0)
    low = rng.standard_normal((3, 2)) @ rng.standard_normal((2, 10))  # rank 2
    for a, b in ((wide, rng.standard_normal((len(wide), 2))), (low, rng.standard_normal(3))):
        x, res, rank, s = lstsq(a, b, **where)
        xr, _, rank_r, sr = np.linalg.lstsq(a, b, rcond=None)
        assert int(rank) == rank_r
        assert_close(x, xr, what=f"x of {a.shape}")
        assert s is not None
        assert_close(s, sr, what=f"s of {a.shape}")
        assert_close(res, np.sum(np.abs((a @ xr - b).reshape(len(b), -1)) ** 2, axis=0))
    for a in (rng.standard_normal((8, 5)), wide):
        want = sl.lu(a)
        for got, ref, name in zip(lu(a, **where), want, "plu", strict=True):
            assert got.shape == np.shape(ref), name
            assert_close(got, np.asarray(ref), what=name)


# ---- overwrite_a ----------------------------------------------------------------------


def test_overwrite_a_donates_the_matrix_and_saves_a_share() -> None:
    # scipy test_basic.py / test_decomp_cholesky.py overwrite_a cases: the input may be
    # overwritten. Here the input's buffer is donated to the factors (then deleted).
    m = make_mesh("8")
    rng = np.random.default_rng(4)
    a_np = rng.standard_normal((16, 16)) + 16 * np.eye(16)
    a = shard(a_np, mesh=m, spec="x,None")
    x = solve(a, np.ones(16), nb=4, overwrite_a=True)
    assert a.is_deleted()
    assert_close(a_np @ np.asarray(x), np.ones(16))
    if FULL:
        spd = shard(a_np @ a_np.T, mesh=m, spec="x,None")
        f = cho_factor(spd, nb=4, overwrite_a=True)
        assert spd.is_deleted()
        assert_close(a_np @ a_np.T @ np.asarray(cho_solve(f, np.ones(16))), np.ones(16))
        kept = shard(a_np, mesh=m, spec="x,None")
        solve(kept, np.ones(16), nb=4)
        assert not kept.is_deleted()
    # Peak per-device memory of the donated factorization: one share of a (its buffer
    # holds the factors, reordered in place) plus O(n nb), against 2 shares + O(n nb)
    # without donation (test_lu.py). A share is 4 n nb here, so a second share-sized
    # buffer cannot hide in the O(n nb) term. Measured (n=256, nb=8, float32): 1 share +
    # 5.3 n nb elements; before the in-place reordering 1 share + 8.7 n nb (a gathered
    # copy, transposed and transposed back).
    n, nb = 256, 8
    struct = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, P("x", None)))
    _, p, plan, _ = square_plan(operand("t", "a", struct, mesh=m, spec=P("x", None)), nb, "cyclic")
    report = comms(_factor_program(plan, m, p, 2, "tournament").donating, struct)
    share = n * n * 4 // 8
    report.assert_peak_memory_at_most(share + 6 * n * nb * 4)
