"""shardkit.linalg on complex dtypes and on orders the mesh (or the block size) does not divide.

Every result is checked against NumPy/SciPy on one device, eagerly and under
``jax.jit``, on the 1-D mesh ``8`` and the 2-D mesh ``2x4`` (Explicit axes). The cases
are a fixed sample of (mesh x spec x n x dtype x nb), chosen so that each operation
meets every dtype, both meshes, host and placed input, sizes the mesh divides and
sizes it does not (13, 30, 37, 63: ``n < nb * mesh``, several panels, ``n`` prime).

``make test`` runs one case of each operation here (plus the collective and error
checks): the contract battery (tests/test_contract.py) already runs every operation on
a complex and on an indivisible cell, eagerly or under jit, by default. Set
``SHARDKIT_FULL_TESTS=1`` (tests/_matrix.py) to run the whole cross product instead
(about 20 minutes on one CPU core).
"""

from __future__ import annotations

import itertools
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
from shardkit.linalg import (
    SingularMatrixError,
    batched_solve,
    bicgstab,
    cg,
    cho_factor,
    cho_solve,
    cholesky,
    det,
    gmres,
    inv,
    lstsq,
    lu,
    lu_factor,
    lu_solve,
    qr,
    solve,
    solve_triangular,
)
from shardkit.linalg._inputs import Trans
from shardkit.linalg._pad import choose
from shardkit.testing import assert_close, tolerance

MESHES = {"8": ("x", "x,None"), "2x4": ("x,y", "x,y")}
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)

# (mesh, n, dtype, nb, placed): placed input needs a size the mesh divides (32, 44, 64);
# host input any size. 44 on 2x4 has n / lcm = 11, prime: nb=8 pads to 48, blocks of 6.
SAMPLE = [
    ("8", 13, np.complex128, 4, False),
    ("2x4", 30, np.complex64, 4, False),
    ("2x4", 37, np.float32, 8, False),
    ("8", 63, np.float64, 8, False),
    ("2x4", 44, np.complex128, 8, True),
    ("8", 32, np.complex64, 4, True),
]
CASES = (
    [
        (ms, n, dt, 4, n % 8 == 0)
        for ms, n, dt in itertools.product(MESHES, (13, 30, 37, 63, 64), DTYPES)
    ]
    if FULL
    else SAMPLE
)


def _name(case: tuple[Any, ...]) -> str:
    ms, n, dt, nb, placed = case
    return f"{ms}-n{n}-{np.dtype(dt).name}-nb{nb}-{'placed' if placed else 'host'}"


def _random(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _ill(n: int, dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """kappa 1e6 (double) or 1e3 (single precision), with complex singular vectors."""
    kappa = 1e6 if np.finfo(dtype).eps < 1e-10 else 1e3
    u, _ = np.linalg.qr(_random((n, n), np.complex128, rng))
    v, _ = np.linalg.qr(_random((n, n), np.complex128, rng))
    a = (u * np.logspace(0, -np.log10(kappa), n)) @ v.conj().T
    return (a if np.issubdtype(dtype, np.complexfloating) else a.real).astype(dtype)


def _hpd(n: int, dtype: Any, rng: np.random.Generator) -> np.ndarray:
    x = _random((n, n), dtype, rng).astype(np.complex128)
    a = x @ x.conj().T / n + np.eye(n)
    return (a if np.issubdtype(dtype, np.complexfloating) else a.real).astype(dtype)


def _backward(a: np.ndarray, x: Any, b: np.ndarray) -> float:
    a, x, b = (np.asarray(v, np.complex128) for v in (a, x, b))
    den = np.linalg.norm(a, 2) * np.linalg.norm(x) + np.linalg.norm(b)
    return float(np.linalg.norm(a @ x - b) / den)


def assert_backward(a: np.ndarray, x: Any, b: np.ndarray, what: str) -> None:
    """Backward error within 2x of SciPy's own solve (floor eps / 4), as test_lu does."""
    assert np.asarray(x).dtype == np.result_type(a.dtype, b.dtype), what
    ours, ref = _backward(a, x, b), _backward(a, sl.solve(a, b), b)
    eps = float(np.finfo(a.dtype).eps)
    assert ours <= 2 * max(ref, eps / 4), f"{what}: backward error {ours:.3g} vs scipy {ref:.3g}"


def _input(a: np.ndarray, m: Any, sp: str, placed: bool) -> Any:
    return shard(a, mesh=m, spec=sp) if placed else a


# ---- LU and what is built on it -------------------------------------------------------


# complex64 and float64 meet LU in the jit, singularity and promotion tests below; the
# contract battery (tests/test_contract.py) runs every LU operation on padded host
# input in all four dtypes, so by default this runs one host and one placed case.
@pytest.mark.parametrize("case", CASES if FULL else [SAMPLE[0]], ids=_name)
def test_lu_family_matches_scipy(case: tuple[Any, ...]) -> None:
    ms, n, dt, nb, placed = case
    m, sp = make_mesh(ms), MESHES[ms][1]
    rng = np.random.default_rng(n)
    kw = {"nb": nb, "mesh": m, "spec": sp}
    b = _random((n, 2), dt, rng)
    ill = _ill(n, dt, rng)
    assert_backward(ill, solve(_input(ill, m, sp, placed), b, **kw), b, "solve ill-conditioned")
    a_np = _random((n, n), dt, rng)
    a = _input(a_np, m, sp, placed)
    assert_backward(a_np, solve(a, b, **kw), b, "solve")
    f = lu_factor(a, **kw)
    assert f.padding.n == n
    cases: list[tuple[Trans, np.ndarray]] = [(0, a_np), (1, a_np.T), (2, a_np.conj().T)]
    for trans, op in cases:
        assert_backward(op, lu_solve(f, b, trans=trans), b, f"lu_solve trans={trans}")
    rtol = 50 * n * tolerance(dt)[0]
    d_ref = np.linalg.det(a_np.astype(np.complex128))
    assert abs(complex(det(a, **kw)) - d_ref) <= rtol * abs(d_ref), "det"
    if placed or FULL:  # inv compiles its own (n right-hand sides) substitution
        a_inv = np.asarray(inv(a, **kw))
        cond = float(np.linalg.cond(a_np))
        assert_close(a_inv @ a_np, np.eye(n), dtype=dt, scale=cond, what="inv")


@pytest.mark.skipif(
    not FULL, reason="the contract battery's sample runs solve under jit on complex, padded cells"
)
@pytest.mark.parametrize("case", [SAMPLE[1], SAMPLE[4], SAMPLE[5]], ids=_name)
def test_solve_under_jit_matches_eager(case: tuple[Any, ...]) -> None:
    ms, n, dt, nb, placed = case
    m, sp = make_mesh(ms), MESHES[ms][1]
    rng = np.random.default_rng(7)
    a_np, b = _random((n, n), dt, rng), _random((n,), dt, rng)
    a = _input(a_np, m, sp, placed)
    x = jax.jit(lambda a, b: solve(a, b, nb=nb, mesh=m, spec=sp))(a, b)
    assert x.shape == (n,)
    assert_backward(a_np, x, b, "jit solve")
    x_eager = solve(a, b, nb=nb, mesh=m, spec=sp)
    assert_close(x, x_eager, dtype=dt, scale=float(np.abs(np.asarray(x_eager)).max()))
    if placed:
        return
    d = jax.jit(lambda a: det(a, nb=nb, mesh=m, spec=sp))(a)
    d_eager = det(a, nb=nb, mesh=m, spec=sp)
    assert_close(jnp.atleast_1d(d), np.atleast_1d(d_eager), dtype=dt, scale=abs(complex(d)))


def test_complex_lu_keeps_lapacks_pivots_and_pads_off_the_mesh() -> None:
    # 13 on 2x4: padded to 16, and the factors come back cut to 13 x 13 (replicated).
    m = make_mesh("2x4")
    a_np = _random((13, 13), np.complex128, np.random.default_rng(3))
    a_np[:6, :6] = 0  # pivots must come from far down the column
    p, low, u = lu(a_np, nb=4, mesh=m, spec="x,y")
    ref: Any = sl.lu(a_np)
    p_ref, l_ref, u_ref = ref
    assert_close(p, p_ref)
    assert_close(low, l_ref)
    assert_close(u, u_ref, scale=float(np.abs(u_ref).max()))
    assert p.shape == (13, 13)


def test_padding_keeps_the_singularity_test_and_names_user_columns() -> None:
    m = make_mesh("2x4")
    rng = np.random.default_rng(4)
    a_np = 1e-30 * _random((30, 30), np.complex128, rng)  # tiny scale: the border must follow
    x = solve(a_np, np.ones(30), nb=4, mesh=m, spec="x,y")
    assert_backward(a_np, x, np.ones(30, np.complex128), "tiny-scale solve")
    a_np[:, 17] = a_np[:, 11]
    with pytest.raises(SingularMatrixError) as info:
        solve(a_np, np.ones(30), nb=4, mesh=m, spec="x,y")
    assert info.value.column in (11, 17)
    _, status = jax.jit(lambda a: lu_factor.with_status(a, nb=4, mesh=m, spec="x,y"))(a_np)
    assert int(status) - 1 in (11, 17)


@pytest.mark.parametrize(
    ("n", "nr", "nc", "nb", "size", "block"),
    [
        (999, 2, 4, 128, 1000, 125),  # the sizes
        (1001, 2, 4, 128, 1008, 126),
        (13, 8, 1, 128, 16, 2),  # n below the mesh: one block of 2 per device
        (64, 2, 4, 8, 64, 8),  # divides: nothing padded
        (100, 2, 4, 32, 100, 32),  # n / L = 25 has the divisor 25 >= 32 / 2: not padded
        (8 * 131, 8, 1, 128, 1056, 66),  # n / L prime: padded rather than nb = 1
    ],
)
def test_padding_is_small(n: int, nr: int, nc: int, nb: int, size: int, block: int) -> None:
    padding, nbp = choose(n, nr, nc, nb)
    assert (padding.size, nbp) == (size, block)
    assert padding.size % padding.cells == 0
    if padding.size != n:
        assert padding.size % (padding.cells * nbp) == 0
    pos = padding.positions()
    assert (np.diff(pos) > 0).all()
    assert pos[-1] < padding.size
    assert sorted(np.flatnonzero(padding.index() >= 0)) == sorted(pos)


# ---- Cholesky, triangular, QR, Krylov, batched ---------------------------------------


@pytest.mark.parametrize("case", [SAMPLE[1]] if not FULL else CASES, ids=_name)
def test_cholesky_hermitian_matches_numpy(case: tuple[Any, ...]) -> None:
    ms, n, dt, nb, placed = case
    m, sp = make_mesh(ms), MESHES[ms][1]
    a_np = _hpd(n, dt, np.random.default_rng(n))
    a = _input(a_np, m, sp, placed)
    low = cholesky(a, nb=nb, mesh=m, spec=sp)
    assert low.dtype == dt
    assert_close(low, np.linalg.cholesky(a_np.astype(np.complex128)), dtype=dt)
    b = _random((n, 3), dt, np.random.default_rng(1))
    assert_backward(a_np, cho_solve(cho_factor(a, nb=nb, mesh=m, spec=sp), b), b, "cho_solve")
    low_jit = jax.jit(lambda a: cholesky(a, nb=nb, mesh=m, spec=sp))(a)
    assert_close(low_jit, low, dtype=dt)


@pytest.mark.parametrize("case", [SAMPLE[5]] if not FULL else CASES, ids=_name)
def test_solve_triangular_conjugate_transpose(case: tuple[Any, ...]) -> None:
    ms, n, dt, nb, placed = case
    m, sp = make_mesh(ms), MESHES[ms][1]
    rng = np.random.default_rng(2)
    a_np = (_random((n, n), dt, rng) + n * np.eye(n)).astype(dt)
    a = _input(a_np, m, sp, placed)
    b = _random((n, 2), dt, rng)
    cases: list[tuple[bool, Any]] = [(True, 2), (False, 1), (False, 0), (True, "C")]
    for lower, trans in cases:
        x = solve_triangular(a, b, lower=lower, trans=trans, nb=nb, mesh=m, spec=sp)
        ref = sl.solve_triangular(a_np, b, lower=lower, trans=trans)
        assert_close(x, ref, dtype=dt, scale=float(np.abs(ref).max()), what=f"{lower} {trans}")


@pytest.mark.parametrize(
    ("ms", "sp", "shape", "dt"),
    [
        ("2x4", "x,y", (30, 13), np.complex64),  # BCGS2, rows and columns padded
        *(
            [
                ("8", "x,None", (37, 5), np.complex128),  # TSQR, rows padded
                ("8", "None,x", (64, 32), np.complex128),  # BCGS2, divisible, complex
            ]
            if FULL
            else []
        ),
    ],
)
def test_qr_and_lstsq_complex_and_padded(ms: str, sp: str, shape: Any, dt: Any) -> None:
    m = make_mesh(ms)
    rng = np.random.default_rng(5)
    a_np = _random(shape, dt, rng)
    b = _random((shape[0],), dt, rng)
    q, r = (np.asarray(v) for v in qr(a_np, nb=4, mesh=m, spec=sp))
    assert q.shape == shape
    assert r.shape == (shape[1], shape[1])
    assert q.dtype == dt
    assert_close(q @ r, a_np, dtype=dt, what="q r")
    assert_close(q.conj().T @ q, np.eye(shape[1]), dtype=dt, what="q^H q")
    assert_close(np.tril(r, -1), np.zeros_like(r), dtype=dt, scale=1.0, what="r upper")
    x, res, rank, _ = jax.jit(lambda a, b: lstsq(a, b, nb=4, mesh=m, spec=sp))(a_np, b)
    x_ref, res_ref, rank_ref, _ = np.linalg.lstsq(a_np, b, rcond=None)
    cond = float(np.linalg.cond(a_np))
    assert_close(x, x_ref, dtype=dt, scale=cond * float(np.abs(x_ref).max()), what="x")
    assert_close(res, res_ref, dtype=dt, scale=cond * float(res_ref.max()), what="residual")
    assert int(rank) == rank_ref


@pytest.mark.parametrize(
    ("ms", "n", "dt"),
    [("8", 32, np.complex64), *([("2x4", 13, np.complex128)] if FULL else [])],
)
def test_krylov_complex_with_conjugated_products(ms: str, n: int, dt: Any) -> None:
    m, sp = make_mesh(ms), MESHES[ms][1]
    rng = np.random.default_rng(6)
    hpd = _hpd(n, dt, rng)
    general = (_random((n, n), dt, rng) / np.sqrt(n) + 3 * np.eye(n)).astype(dt)
    b = _random((n,), dt, rng)
    tol = 1e-5 if dt == np.complex64 else 1e-11
    for solver, a_np in ((cg, hpd), (gmres, general), (bicgstab, general)):
        x, info = solver(a_np, b, tol=tol, mesh=m, spec=sp)
        assert int(info.status) == 0, (solver.__name__, info)
        assert x.dtype == dt
        assert info.residual.dtype == np.finfo(dt).dtype
        rel = np.linalg.norm(a_np @ np.asarray(x) - b) / np.linalg.norm(b)
        assert rel <= 10 * tol, (solver.__name__, rel)


def test_batched_solve_complex_and_promotion() -> None:
    m = make_mesh("8")
    rng = np.random.default_rng(8)
    a_np = _random((8, 5, 5), np.complex64, rng) + 3 * np.eye(5, dtype=np.complex64)
    b = _random((8, 5), np.complex64, rng)
    x = batched_solve(shard(a_np, mesh=m, spec="x"), b)
    assert x.dtype == np.complex64
    assert_close(x, np.linalg.solve(a_np, b[..., None])[..., 0], dtype=np.complex64, scale=10.0)
    # 13 systems on 8 devices: padded with 3 identity systems, x comes back replicated.
    a13 = _random((13, 4, 4), np.complex128, rng) + 3 * np.eye(4)
    b13 = _random((13, 4, 2), np.complex128, rng)
    x13, status = jax.jit(lambda a, b: batched_solve.with_status(a, b, mesh=m))(a13, b13)
    assert_close(x13, np.linalg.solve(a13, b13), scale=10.0)
    np.testing.assert_array_equal(np.asarray(status), np.zeros(13))
    a13[11] = 0
    with pytest.raises(SingularMatrixError, match="system 11 of 13"):
        batched_solve(a13, b13, mesh=m)
    ai = np.stack([np.eye(3, dtype=np.int32) * (i + 2) for i in range(8)])
    xi = batched_solve(shard(ai, mesh=m, spec="x"), np.ones((8, 3), np.int32))
    assert xi.dtype == jnp.result_type(float)
    assert_close(xi[:, 0], 1 / np.arange(2.0, 10.0))


def test_integer_input_is_promoted_like_jnp_linalg() -> None:
    m = make_mesh("8")
    a = (np.eye(12, dtype=np.int64) * 2).astype(np.int32)
    x = solve(a, np.arange(12), nb=4, mesh=m, spec="x,None")
    assert x.dtype == jnp.linalg.solve(jnp.asarray(a), jnp.arange(12)).dtype
    assert_close(x, np.arange(12) / 2)


@pytest.mark.parametrize("half", [jnp.float16, jnp.bfloat16])
def test_half_precision_is_a_clear_type_error(half: Any) -> None:
    m = make_mesh("2x4")
    a = np.eye(16).astype(half)
    calls = [
        ("solve", lambda: solve(a, np.ones(16), mesh=m, spec="x,y")),
        ("cholesky", lambda: cholesky(a, mesh=m, spec="x,y")),
        ("qr", lambda: qr(a, mesh=m, spec="x,y")),
        ("cg", lambda: cg(a, np.ones(16), mesh=m, spec="x,y")),
        ("solve_triangular", lambda: solve_triangular(a, np.ones(16), mesh=m, spec="x,y")),
        ("batched_solve", lambda: batched_solve(a[None].repeat(8, 0), np.ones((8, 16)), mesh=m)),
    ]
    name = np.dtype(half).name
    for where, call in calls:
        with pytest.raises(TypeError, match=rf"{where}: a\.dtype={name} .*'complex128'"):
            call()
    with pytest.raises(TypeError, match=rf"b\.dtype={name}"):
        solve(np.eye(16), np.ones(16, half), mesh=m, spec="x,y")


# ---- the compiled programs: no new kind of collective, nothing matrix-sized ----------


def _kinds(report: Any) -> set[str]:
    return {c.kind for c in report.collectives}


def test_complex_and_padded_solve_use_the_real_collectives() -> None:
    m = make_mesh("2x4")
    split, rep = NamedSharding(m, P("x", "y")), NamedSharding(m, P())

    def run(nb: int) -> Any:
        return lambda a, b: solve(a, b, nb=nb, mesh=m, spec="x,y")

    def args(n: int, dt: Any, sharding: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
        return (
            jax.ShapeDtypeStruct((n, n), dt, sharding=sharding),
            jax.ShapeDtypeStruct((n,), dt, sharding=rep),
        )

    # The real program on 48 with blocks of 6 is the plan both padded cases run:
    # 44 placed (44 / lcm(2, 4) = 11 is prime, so nb=8 pads to 48) and 45 replicated.
    real = comms(run(6), *args(48, jnp.float32, split))
    padded = comms(run(8), *args(44, jnp.complex64, split))
    host = comms(run(8), *args(45, jnp.complex64, rep))
    assert _kinds(real) == {"all-reduce", "all-gather"}
    count = sum(c.count for c in real.collectives)
    for report in (padded, host):
        report.assert_only(_kinds(real))
        for c in report.collectives:
            # Panel-sized, as the real program's (2 nb rows of the padded 48 + the panel).
            assert max(int(np.prod(s)) for s in c.result_shapes) <= 2 * 6 * (48 + 6), c
        # Padding adds at most the max|a| reduction and the unpadding's all-reduce.
        assert sum(c.count for c in report.collectives) <= count + 2


def test_complex_and_padded_cholesky_use_the_real_collectives() -> None:
    m = make_mesh("2x4")
    rep = NamedSharding(m, P())

    def run(a: Any, b: Any) -> Any:
        return cho_solve(cho_factor(a, nb=8, mesh=m, spec="x,y"), b)

    def args(n: int, dt: Any, sharding: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
        return (
            jax.ShapeDtypeStruct((n, n), dt, sharding=sharding),
            jax.ShapeDtypeStruct((n,), dt, sharding=rep),
        )

    real = comms(run, *args(48, jnp.float32, NamedSharding(m, P("x", "y"))))
    assert _kinds(real) == {"all-reduce", "all-gather"}
    for n, dt, sharding in (
        (44, jnp.complex128, NamedSharding(m, P("x", "y"))),  # placed, padded to 48
        (30, jnp.complex64, rep),  # host-like (replicated), padded to 32
    ):
        report = comms(run, *args(n, dt, sharding))
        report.assert_only(_kinds(real))
        for c in report.collectives:
            if c.kind == "all-gather":  # the panel's rows, never the matrix
                assert max(int(np.prod(r)) for r in c.result_shapes) <= 48 * 8


def test_complex_and_padded_qr_and_cg_use_the_real_collectives() -> None:
    m = make_mesh("2x4")
    split, rep = NamedSharding(m, P("x", "y")), NamedSharding(m, P())

    def qr_run(a: Any) -> Any:
        return qr.with_status(a, nb=4, mesh=m, spec="x,y")

    def cg_run(a: Any, b: Any) -> Any:
        return cg(a, b, mesh=m, spec="x,y")[0]

    real = comms(qr_run, jax.ShapeDtypeStruct((32, 16), jnp.float32, sharding=split))
    padded = comms(qr_run, jax.ShapeDtypeStruct((30, 13), jnp.complex64, sharding=rep))
    padded.assert_only(_kinds(real))
    for c in padded.collectives:
        # Panel-sized (the padded 32 x 16 with panels of 4), or the cut-back q (30 x 13).
        assert max(int(np.prod(s)) for s in c.result_shapes) <= 30 * 13, c
    real_cg = comms(
        cg_run,
        jax.ShapeDtypeStruct((32, 32), jnp.float32, sharding=split),
        jax.ShapeDtypeStruct((32,), jnp.float32, sharding=NamedSharding(m, P("x"))),
    )
    padded_cg = comms(
        cg_run,
        jax.ShapeDtypeStruct((30, 30), jnp.complex64, sharding=rep),
        jax.ShapeDtypeStruct((30,), jnp.complex64, sharding=rep),
    )
    padded_cg.assert_only(_kinds(real_cg))
    for c in padded_cg.collectives:
        assert max(int(np.prod(s)) for s in c.result_shapes) <= 32, c  # vector-sized
