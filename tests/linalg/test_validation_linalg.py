"""Bad input to the iterative solvers and to matmul's operands (issue 18).

``cg(..., maxiter=-5)`` used to report "converged" after 0 iterations; operands on
different devices used to fail inside jit with "incompatible devices".
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import shardkit
from _meshes import make_mesh
from shardkit import linalg
from shardkit.linalg._status import Failure, Problem


@pytest.fixture(scope="module")
def a() -> jax.Array:
    return shardkit.shard(np.diag(np.arange(1.0, 9.0)), mesh=make_mesh("8"), spec="x,None")


@pytest.mark.parametrize("solver", [linalg.cg, linalg.bicgstab, linalg.gmres])
@pytest.mark.parametrize("maxiter", [-5, 0])
def test_maxiter_below_one_is_refused(a: jax.Array, solver: object, maxiter: int) -> None:
    pattern = rf"maxiter={maxiter} must be at least 1; pass the iteration limit.*or None"
    with pytest.raises(ValueError, match=pattern):
        solver(a, np.ones(8), maxiter=maxiter)  # type: ignore[operator]


def test_maxiter_of_the_wrong_type(a: jax.Array) -> None:
    with pytest.raises(TypeError, match=r"cg: maxiter=2\.5 \(float\) must be an integer"):
        linalg.cg(a, np.ones(8), maxiter=2.5)  # type: ignore[arg-type]


def test_numpy_integer_maxiter_tol_and_restart_are_accepted(a: jax.Array) -> None:
    # They pass the boundary (as Python numbers): the first complaint is about x0.
    with pytest.raises(ValueError, match=r"cg: x0\.shape"):
        linalg.cg(a, np.ones(8), np.ones(3), maxiter=np.int64(5), tol=np.float32(1e-6))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"gmres: x0\.shape"):
        linalg.gmres(a, np.ones(8), np.ones(3), restart=np.int32(8), maxiter=np.int64(3))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"tol": -1e-6}, r"cg: tol=-1e-06 must be a finite number >= 0; pass a relative tol"),
        ({"tol": float("nan")}, r"cg: tol=nan must be a finite number"),
        ({"atol": float("inf")}, r"cg: atol=inf must be a finite number >= 0; pass an absolute"),
        ({"tol": "small"}, r"cg: tol='small' \(str\) must be a real number"),
    ],
)
def test_bad_tolerances(a: jax.Array, kwargs: dict[str, object], pattern: str) -> None:
    with pytest.raises((TypeError, ValueError), match=pattern):
        linalg.cg(a, np.ones(8), **kwargs)  # type: ignore[arg-type]


def test_an_initial_guess_of_the_wrong_shape(a: jax.Array) -> None:
    pattern = r"cg: x0\.shape=\(4,\) does not match b\.shape=\(8,\); pass x0 of shape \(8,\)"
    with pytest.raises(ValueError, match=pattern):
        linalg.cg(a, np.ones(8), np.ones(4))
    with pytest.raises(ValueError, match=r"cg: x0\.shape=\(4,\).*or None to start from zeros"):
        linalg.cg(lambda v: 2.0 * v, np.ones(8), np.ones(4))


def test_an_initial_guess_that_is_not_numeric(a: jax.Array) -> None:
    with pytest.raises(TypeError, match=r"cg: x0 of type ndarray \(dtype <U1\) is not a numeric"):
        linalg.cg(a, np.ones(8), np.array(["a"] * 8))


def test_a_restart_below_one(a: jax.Array) -> None:
    with pytest.raises(ValueError, match=r"gmres: restart=0 must be at least 1; e\.g\. restart=20"):
        linalg.gmres(a, np.ones(8), restart=0)


def test_solver_operands_on_other_devices(a: jax.Array) -> None:
    other = shardkit.shard(np.ones(8), mesh=make_mesh("4", devices=[4, 5, 6, 7]), spec="x")
    small = shardkit.shard(np.eye(8), mesh=make_mesh("4", devices=[0, 1, 2, 3]), spec="x,None")
    with pytest.raises(ValueError, match=r"cg: the operands live on different devices: a is on"):
        linalg.cg(small, other)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("solve", lambda a, b: linalg.solve(a, b)),
        ("solve_triangular", lambda a, b: linalg.solve_triangular(a, b, lower=True)),
        ("lstsq", lambda a, b: linalg.lstsq(a, b)),
        ("batched_solve", linalg.batched_solve),
    ],
)
def test_direct_solver_operands_on_other_devices(name: str, call: Any) -> None:
    left = make_mesh("4", devices=[0, 1, 2, 3])
    right = make_mesh("4", devices=[4, 5, 6, 7])
    small = shardkit.shard(np.eye(8), mesh=left, spec="x,None")
    other = shardkit.shard(np.ones(8), mesh=right, spec="x")
    if name == "batched_solve":  # placed batches: one system per device
        small = shardkit.shard(np.eye(8)[None].repeat(4, 0), mesh=left, spec="x")
        other = shardkit.shard(np.ones((4, 8)), mesh=right, spec="x")
    with pytest.raises(ValueError, match=rf"{name}: the operands live on different devices"):
        call(small, other)


def test_matmul_operands_on_different_devices() -> None:
    left = make_mesh("4", devices=[0, 1, 2, 3])
    right = make_mesh("4", devices=[4, 5, 6, 7])
    x = shardkit.shard(np.ones((8, 8)), mesh=left, spec="x")
    y = shardkit.shard(np.ones((8, 8)), mesh=right, spec="x")
    pattern = (
        r"matmul: the operands live on different devices: a is on .*\[0, 1, 2, 3\]; b is on "
        r".*\[4, 5, 6, 7\]\. Put every operand on a's mesh first, e\.g\. shardkit\.shard"
    )
    with pytest.raises(ValueError, match=pattern):
        linalg.matmul(x, y)


def test_matmul_operands_on_an_explicit_and_an_auto_mesh() -> None:
    # Both used to fail inside shard_map ("in_specs ... does not match the specs").
    a = shardkit.shard(np.ones((8, 8)), mesh=make_mesh("2x4"), spec="x,y")
    b = shardkit.shard(np.ones((8, 8)), mesh=make_mesh("2x4", "auto"), spec="x,y")
    pattern = r"matmul: the operands are on different meshes.*a is on mesh\(x=2,y=4; Explicit\)"
    with pytest.raises(ValueError, match=pattern):
        linalg.matmul(a, b)


@pytest.mark.parametrize("b", [1.0, np.ones((4, 2))], ids=["scalar", "matrix"])
def test_callable_operator_needs_a_vector_b(b: float | np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"cg: b\.shape=\(.*\) is not a vector; .*shape \(n,\)"):
        linalg.cg(lambda v: 2 * v, b)


@pytest.mark.parametrize("solver", [linalg.solve, linalg.solve_triangular, linalg.lstsq])
def test_every_solve_says_the_same_about_a_right_hand_side_that_does_not_fit(
    a: jax.Array, solver: object
) -> None:
    pattern = (
        r": b\.shape=\(3,\) does not fit a\.shape=\(8, 8\); pass b of shape \(8,\) or \(8, nrhs\)"
    )
    with pytest.raises(ValueError, match=pattern):
        solver(a, np.ones(3))  # type: ignore[operator]


def test_a_status_of_an_unknown_failure_kind_fails_loudly() -> None:
    assert isinstance(
        Problem("qr", Failure.RANK_DEFICIENT, (4, 4), np.float64).error(2),
        linalg.RankDeficientError,
    )
    with pytest.raises(TypeError, match=r"failure='not_pd' is not a Failure"):
        Problem("cholesky", "not_pd", (4, 4), np.float64).error(1)  # type: ignore[arg-type]
