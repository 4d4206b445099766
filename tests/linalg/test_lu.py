"""shardkit.linalg LU: solve / lu / lu_factor / det / inv against SciPy, statuses, comms, memory."""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.extend.core import Literal, jaxprs_in_params
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit.linalg._grid as grid_module
from _matrix import FULL, rotate
from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.linalg import (
    SingularMatrixError,
    det,
    from_block_cyclic,
    inv,
    lu,
    lu_factor,
    lu_solve,
    solve,
    to_block_cyclic,
)
from shardkit.linalg._inputs import Trans
from shardkit.linalg._lu_kernel import BULK_SCOPE, _panel_permutation
from shardkit.testing import assert_close


def matrix(kind: str, n: int, dtype: Any, seed: int = 0) -> np.ndarray:
    """``random``, ``zero_blocks`` (``[[0, B], [C, 0]]``) or ``ill`` (kappa 1e6 f64 / 1e3 f32)."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        a = rng.standard_normal((n, n))
    elif kind == "zero_blocks":
        h = n // 2
        a = np.zeros((n, n))
        a[:h, h:] = rng.standard_normal((h, n - h))
        a[h:, :h] = rng.standard_normal((n - h, h))
    else:
        kappa = 1e6 if np.dtype(dtype) == np.float64 else 1e3
        u, _ = np.linalg.qr(rng.standard_normal((n, n)))
        v, _ = np.linalg.qr(rng.standard_normal((n, n)))
        a = (u * np.logspace(0, -np.log10(kappa), n)) @ v.T
    return a.astype(dtype)


def backward_error(a: np.ndarray, x: np.ndarray, b: np.ndarray) -> float:
    """``||a x - b|| / (||a|| ||x|| + ||b||)`` in float64 (2-norms; Frobenius for matrices)."""
    a, x, b = (np.asarray(v, np.float64) for v in (a, x, b))
    return float(
        np.linalg.norm(a @ x - b) / (np.linalg.norm(a, 2) * np.linalg.norm(x) + np.linalg.norm(b))
    )


def assert_backward_error(a: np.ndarray, x: Any, b: np.ndarray, ref_x: np.ndarray) -> None:
    """Our backward error is within 2x of the reference solution's (with a floor at eps/4)."""
    ours = backward_error(a, np.asarray(x), b)
    ref = backward_error(a, ref_x, b)
    eps = float(np.finfo(a.dtype).eps)
    assert ours <= 2 * max(ref, eps / 4), f"backward error {ours:.3g} vs scipy {ref:.3g}"


# (mesh, spec, axis types, n, dtype, nb): a seeded sample; 100 is not a multiple of nb.
CASES = [
    ("8", "x,None", "explicit", 64, np.float64, 8),
    ("8", "None,x", "auto", 48, np.float32, 8),
    ("2x4", "x,y", "auto", 100, np.float64, 32),
    ("4x2", "x,y", "explicit", 64, np.float32, 8),
]


# Each case with one pivoting rule in turn (both with SHARDKIT_FULL_TESTS=1).
@pytest.mark.parametrize(
    ("shape", "sp", "types", "n", "dtype", "nb", "pivoting"),
    rotate(CASES, ["tournament", "partial"]),
)
def test_solve_backward_error_within_2x_of_scipy(shape, sp, types, n, dtype, nb, pivoting) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh(shape, types)
    rng = np.random.default_rng(1)
    for kind in ("random", "zero_blocks", "ill"):
        a_np = matrix(kind, n, dtype)
        b = rng.standard_normal(n).astype(dtype)
        x = solve(shard(a_np, mesh=m, spec=sp), b, nb=nb, pivoting=pivoting)
        assert x.dtype == dtype
        assert_backward_error(a_np, x, b, sl.solve(a_np, b))
    b2 = rng.standard_normal((n, 3)).astype(dtype)
    a_np = matrix("random", n, dtype, seed=2)
    x2 = solve(shard(a_np, mesh=m, spec=sp), b2, nb=nb, pivoting=pivoting)
    assert x2.shape == (n, 3)
    assert_backward_error(a_np, x2, b2, sl.solve(a_np, b2))


@pytest.mark.parametrize(
    ("shape", "sp", "pivoting"),
    [
        ("2x4", "x,y", "partial"),
        ("8", "x,None", "partial"),
        # One row of devices: the tournament's one LU of the whole panel is LAPACK's.
        ("1x8", "x,y", "tournament"),
        ("8", "None,x", "tournament"),
    ],
)
def test_lu_equals_scipy_factors(shape: str, sp: str, pivoting: Any) -> None:
    m = make_mesh(shape)
    a_np = matrix("zero_blocks", 64, np.float64)  # dask's block-local pivoting fails this one
    p, low, u = lu(shard(a_np, mesh=m, spec=sp), nb=8, pivoting=pivoting)
    ref: Any = sl.lu(a_np)
    p_ref, l_ref, u_ref = ref
    assert_close(p, p_ref)
    assert_close(low, l_ref)
    assert_close(u, u_ref, scale=float(np.abs(u_ref).max()))
    assert p.sharding == shard(a_np, mesh=m, spec=sp).sharding


def test_tournament_lu_factors_a_and_differs_from_lapack_only_in_pivots() -> None:
    # 4 rows of devices: the tournament may pick other pivots; p l u is still a, l is unit
    # lower with |l| <= a small bound (no growth), u is upper.
    m = make_mesh("4x2")
    a_np = matrix("random", 64, np.float64, seed=5)
    p, low, u = (
        np.asarray(v) for v in lu(shard(a_np, mesh=m, spec="x,y"), nb=8, pivoting="tournament")
    )
    assert_close(p @ low @ u, a_np)
    np.testing.assert_array_equal(np.tril(low), low)
    np.testing.assert_array_equal(np.diag(low), 1)
    np.testing.assert_array_equal(np.triu(u), u)
    np.testing.assert_array_equal(np.sort(p.sum(0)), np.ones(64))
    assert np.abs(low).max() <= 8  # partial pivoting: 1; CALU's bound is larger, 8 is ample


@st.composite
def _pivot_rows(draw: Any) -> tuple[int, list[int]]:
    nb = draw(st.integers(1, 8))
    j0 = draw(st.integers(0, 8))
    n = j0 + nb + draw(st.integers(0, 12))
    rows = draw(st.permutations(list(range(j0, n))))[:nb]
    dead = draw(st.lists(st.booleans(), min_size=nb, max_size=nb))
    return j0, [-1 if d else r for r, d in zip(rows, dead, strict=True)] + [n]


# Jitted: one compilation per panel width instead of one per eager op and drawn shape.
_jit_panel_permutation = jax.jit(_panel_permutation)


@settings(max_examples=60, deadline=None)
@given(_pivot_rows())
def test_panel_permutation_matches_sequential_swaps(case: tuple[int, list[int]]) -> None:
    j0, rows = case
    *chosen, n = rows
    touched, came_from, parity = (
        np.asarray(v) for v in _jit_panel_permutation(jnp.asarray(chosen, jnp.int32), jnp.int32(j0))
    )
    new = np.arange(n)
    new[touched] = came_from
    assert sorted(new) == list(range(n)), "not a permutation"
    for i, c in enumerate(chosen):
        if c >= 0:
            assert new[j0 + i] == c
    # The parity is the permutation's: count the transpositions that sort it.
    order, swaps = new.copy(), 0
    for i in range(n):
        while order[i] != i:
            k = order[i]
            order[i], order[k] = order[k], order[i]
            swaps += 1
    assert int(parity) == swaps % 2


def test_det_inv_trans_and_block_cyclic_round_trip() -> None:
    m = make_mesh("2x4")
    a_np = matrix("random", 32, np.float64)
    a = shard(a_np, mesh=m, spec="x,y")
    np.testing.assert_allclose(float(det(a, nb=8)), np.linalg.det(a_np), rtol=1e-10)
    np.testing.assert_allclose(
        float(det(a, nb=8, pivoting="partial")), np.linalg.det(a_np), rtol=1e-10
    )
    np.testing.assert_allclose(np.asarray(inv(a, nb=8)), np.linalg.inv(a_np), atol=1e-10)
    f = lu_factor(a, nb=8)
    b = np.arange(32.0)
    np.testing.assert_allclose(np.asarray(lu_solve(f, b, trans=1)), sl.solve(a_np.T, b), atol=1e-10)
    bc = to_block_cyclic(a, nb=8)
    np.testing.assert_array_equal(np.asarray(from_block_cyclic(bc)), a_np)


def test_singular_raises_eagerly_and_reports_status_under_jit() -> None:
    m = make_mesh("2x4")
    a_np = matrix("random", 32, np.float64)
    a_np[:, 5] = a_np[:, 3]  # dependent columns
    a = shard(a_np, mesh=m, spec="x,y")
    with pytest.raises(SingularMatrixError, match=r"singular.*column") as info:
        solve(a, np.ones(32), nb=8)
    assert info.value.column in (3, 5)
    assert isinstance(info.value, np.linalg.LinAlgError)
    _, status = jax.jit(lambda a, b: solve.with_status(a, b, nb=8))(a, np.ones(32))
    assert int(status) - 1 in (3, 5)
    x_nan = jax.jit(lambda a, b: solve(a, b, nb=8))(a, np.ones(32))
    assert np.isnan(np.asarray(x_nan)).all()
    with pytest.raises(SingularMatrixError):
        lu(shard(np.zeros((32, 32)), mesh=m, spec="x,y"))
    assert float(det(shard(np.zeros((32, 32)), mesh=m, spec="x,y"))) == 0.0


def test_layout_errors_name_the_fix() -> None:
    m = make_mesh("8", "auto")
    # (under jit on Auto axes the layout comes from the partitioner: test_autojit.py)
    with pytest.raises(ValueError, match=r"cannot tell the layout.*mesh=\.\.\."):
        solve(np.eye(16), np.ones(16))
    # Orders the mesh does not divide are padded by solve; the block-cyclic helpers,
    # which expose the layout itself, still refuse them.
    assert_close(solve(np.eye(12), np.ones(12), mesh=m, spec="x,None"), np.ones(12))
    with pytest.raises(ValueError, match="not divisible"):
        to_block_cyclic(np.eye(12), mesh=m, spec="x,None")
    with pytest.raises(ValueError, match="order="):
        lu_factor(shard(np.eye(16), mesh=m, spec="x,None"), order="diagonal")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"pivoting='rook'.*'tournament'"):
        solve(shard(np.eye(16), mesh=m, spec="x,None"), np.ones(16), pivoting="rook")  # type: ignore[arg-type]


def _struct(n: int, m: Any, sp: P, dtype: Any = jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((n, n), dtype, sharding=NamedSharding(m, sp))


# Each layout with one pivoting rule in turn (all four with SHARDKIT_FULL_TESTS=1).
@pytest.mark.parametrize(
    ("shape", "sp", "pivoting"),
    rotate([("8", P("x", None)), ("2x4", P("x", "y"))], ["tournament", "partial"]),
)
def test_solve_never_moves_the_matrix_and_bounds_memory(
    shape: str, sp: P, pivoting: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The factorization on the layout given: mesh 8's P('x', None) would otherwise move
    # to a 2x4 grid first (tests/linalg/test_grid.py holds that path to its own bounds).
    monkeypatch.setattr(grid_module, "GRID_MIN_ORDER", 1 << 30)
    m = make_mesh(shape, "auto")
    n, nb = 256, 32
    rows = 8 if shape == "8" else 2
    b = jax.ShapeDtypeStruct((n,), jnp.float32, sharding=NamedSharding(m, P()))
    report = comms(
        lambda a, b: solve(a, b, nb=nb, mesh=m, spec=sp, pivoting=pivoting), _struct(n, m, sp), b
    )
    full = n * n * 4
    report.assert_none("all-to-all")
    gathers = 0
    for c in report.collectives:
        out = max(int(np.prod(s)) for s in c.result_shapes) * 4
        # Largest: the panel's row exchanges, 2 nb rows of n / C (+ nb panel columns; here
        # 1/4 of the matrix on mesh 8 because n = 8 nb; 1/32 at n = 4096, nb = 128).
        assert out <= 2 * nb * (n + nb) * 4, f"{c.kind} {c.result_shapes} is more than panel-sized"
        if c.kind == "all-gather":
            gathers += c.count
            if pivoting == "tournament":
                # The nominees: nb rows of the panel (+ their row index) per device row.
                assert out <= rows * nb * (nb + 1) * 4, f"all-gather {c.result_shapes}"
            else:
                # (|value|, row, 16 entries of the row, row j) per device row.
                assert out <= rows * (2 + 2 * 16) * 4, f"all-gather {c.result_shapes} is too big"
    # One all-gather per panel (tournament) or per column (partial).
    assert gathers == (n // nb if pivoting == "tournament" else n), gathers
    share = full // 8
    # The bound, 2 shares + O(n nb): the input, one working copy, and panel-sized
    # buffers (the row exchange's 2 nb x (n/C + nb) all-reduce in and out, the U rows,
    # the panel). Measured at n=256 and 1024: 2 shares + 2.6-5.4 n nb elements.
    report.assert_peak_memory_at_most(2 * share + 6 * n * nb * 4)
    ref = comms(jnp.linalg.solve, _struct(n, m, sp), b)
    assert report.memory is not None
    assert ref.memory is not None
    assert report.memory.peak_bytes < ref.memory.peak_bytes / 2


def _has_collective(eqn: Any) -> bool:
    """A collective, or a loop or cond holding one."""
    if eqn.primitive.name in ("psum", "psum_invariant", "all_gather", "pmax", "ppermute"):
        return True
    return any(_has_collective(e) for j in jaxprs_in_params(eqn.params) for e in j.eqns)


def _panel_loop_bodies(jaxpr: Any) -> list[Any]:
    """The bodies of the loops over panels: those whose own equations hold the bulk update."""
    out = []
    for eqn in jaxpr.eqns:
        for sub in jaxprs_in_params(eqn.params):
            if eqn.primitive.name == "while" and any(
                BULK_SCOPE in str(e.source_info.name_stack) for e in sub.eqns
            ):
                out.append(sub)
            out.extend(_panel_loop_bodies(sub))
    return out


def _ancestors(jaxpr: Any) -> list[set[int]]:
    """For each equation, the equations it depends on (transitively, through data)."""
    made: dict[Any, int] = {}
    anc: list[set[int]] = []
    for i, eqn in enumerate(jaxpr.eqns):
        deps: set[int] = set()
        for v in eqn.invars:
            if not isinstance(v, Literal) and v in made:
                deps |= anc[made[v]] | {made[v]}
        anc.append(deps)
        made.update((v, i) for v in eqn.outvars)
    return anc


@pytest.mark.parametrize(
    ("shape", "pivoting"), [("2x4", "tournament"), ("2x4", "partial"), ("8", "tournament")]
)
def test_lookahead_panel_collectives_do_not_wait_for_the_bulk_update(
    shape: str, pivoting: Any
) -> None:
    # Lookahead: within a step, the next panel's collectives (its column broadcast and
    # pivot search) must not depend on the step's bulk trailing update (so that they
    # can overlap it), and every collective must depend on the one before it (XLA's
    # CPU runtime deadlocks on collectives that data do not order).
    m = make_mesh(shape)
    b = jax.ShapeDtypeStruct((64,), jnp.float32, sharding=NamedSharding(m, P()))
    sp = P("x", None) if shape == "8" else P("x", "y")
    fn = lambda a, b: solve(a, b, nb=8, pivoting=pivoting, lookahead=True)  # noqa: E731
    bodies = _panel_loop_bodies(jax.make_jaxpr(fn)(_struct(64, m, sp), b).jaxpr)
    assert bodies
    for body in bodies:
        anc = _ancestors(body)
        colls = [i for i, e in enumerate(body.eqns) if _has_collective(e)]
        bulk = {i for i, e in enumerate(body.eqns) if BULK_SCOPE in str(e.source_info.name_stack)}
        assert any(body.eqns[i].primitive.name in ("dot_general", "while") for i in bulk)
        assert len(colls) >= 3
        for c in colls:
            assert not anc[c] & bulk, f"collective {body.eqns[c].primitive} waits for the update"
        for before, after in itertools.pairwise(colls):
            assert before in anc[after], "two collectives of a step are not ordered by data"
        bulk_needs = set().union(*(anc[i] for i in bulk))
        # The panel's pivot search (its last collectives) runs beside the update.
        assert colls[-1] not in bulk_needs


@pytest.mark.parametrize(
    ("shape", "sp", "pivoting", "n"),
    [
        ("2x4", P("x", "y"), "tournament", 64),
        # Three more layouts with SHARDKIT_FULL_TESTS=1 (8 CPU-s each).
        *(
            [
                ("8", P("x", None), "partial", 61),
                ("2x4", P("x", "y"), "partial", 61),
                ("4x2", P("x", "y"), "tournament", 64),
            ]
            if FULL
            else []
        ),
    ],
)
def test_lookahead_gives_the_same_factors(shape: str, sp: P, pivoting: Any, n: int) -> None:
    # Lookahead only reorders the work of a step: the same pivots and, to rounding, the
    # same factors, eagerly and under jit (sizes the mesh does not divide: padded).
    m = make_mesh(shape)
    rng = np.random.default_rng(7)
    a_np = rng.standard_normal((n, n))
    a = jax.device_put(a_np, NamedSharding(m, sp)) if n % 8 == 0 else a_np
    kw: dict[str, Any] = {"nb": 4, "pivoting": pivoting, "mesh": m, "spec": sp}
    plain = lu_factor(a, **kw)
    ahead = lu_factor(a, lookahead=True, **kw)
    np.testing.assert_array_equal(np.asarray(ahead.perm), np.asarray(plain.perm))
    assert_close(np.asarray(ahead.lu), np.asarray(plain.lu))
    b = rng.standard_normal(n)
    x = jax.jit(lambda a, b: solve(a, b, lookahead=True, **kw))(a, b)
    assert_close(a_np @ np.asarray(x), b)
    with pytest.raises(TypeError, match="lookahead='yes' must be True or False"):
        solve(a, b, lookahead="yes", **kw)  # type: ignore[arg-type]


def test_with_status_and_the_deprecated_keyword() -> None:
    # One status convention for every function that can fail: f(...) raises eagerly,
    # f.with_status(...) returns (result, status); the old return_status=True spelling
    # still works for one release, with a DeprecationWarning naming the new one.
    import inspect

    m = make_mesh("8")
    a = shard(np.zeros((16, 16)), mesh=m, spec="x,None")
    x, status = solve.with_status(a, np.ones(16), nb=4)
    assert int(status) == 1
    assert x.shape == (16,)
    with pytest.warns(DeprecationWarning, match=r"solve\.with_status"):
        _, old = solve(a, np.ones(16), nb=4, return_status=True)  # pyright: ignore[reportCallIssue]
    assert int(old) == 1
    params = inspect.signature(solve).parameters
    assert "return_status" not in params
    assert "want_status" not in params
    assert solve.__name__ == "solve"
    assert "with_status" in (solve.__doc__ or "")


def test_one_option_vocabulary() -> None:
    # The same options with the same names and types across the LU family: order= and
    # stages= wherever a factorization runs, trans= as in solve_triangular.
    m = make_mesh("8")
    a_np = np.random.default_rng(3).standard_normal((16, 16)) + 4 * np.eye(16)
    a = shard(a_np, mesh=m, spec="x,None")
    b = np.arange(16.0)
    for order in ("cyclic", "natural"):
        np.testing.assert_allclose(
            a_np @ np.asarray(solve(a, b, nb=4, order=order, stages=2)), b, atol=1e-10
        )
        np.testing.assert_allclose(
            float(det(a, nb=4, order=order, stages=2)), np.linalg.det(a_np), rtol=1e-10
        )
        np.testing.assert_allclose(
            np.asarray(inv(a, nb=4, order=order, stages=2)), np.linalg.inv(a_np), atol=1e-10
        )
    f = lu_factor(a, nb=4)
    cases: list[tuple[Trans, np.ndarray]] = [(1, a_np.T), ("T", a_np.T), ("N", a_np), ("C", a_np.T)]
    for trans, op in cases:
        np.testing.assert_allclose(op @ np.asarray(lu_solve(f, b, trans=trans)), b, atol=1e-10)
    with pytest.raises(ValueError, match=r"trans='X' is not one of"):
        lu_solve(f, b, trans="X")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match=r"order='bad'"):
        solve(a, b, order="bad")  # pyright: ignore[reportArgumentType]
