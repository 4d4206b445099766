"""Linear algebra under ``jax.jit`` on Auto mesh axes, with no extra arguments.

Each operation runs on a matrix placed on an Auto mesh (2x4 and 8), inside ``jit``,
and is compared with NumPy/SciPy. Its compiled program (``shardkit.comms``) must hold
the same collective kinds as the Explicit-mesh program of the same call (which runs
the eager path's ``shard_map``), and no all-gather as large as the matrix.

Each cell compiles the factorizations twice (seconds each on a shared CPU), so by
default every operation runs on one of the two meshes (alternating, about 2 minutes
on two shared CPU cores); set ``SHARDKIT_FULL_TESTS=1`` (tests/_matrix.py) to run
every case on both and compare every one with its Explicit program.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
import scipy.linalg as sl

import shardkit
from _matrix import FULL
from _meshes import make_mesh
from shardkit import linalg
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.testing import assert_close

N, NB = 32, 8
MESHES = [("2x4", "x,y", "x,y"), ("8", "x", "x,None")]


def _matrices() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    g = rng.standard_normal((N, N))
    return {
        "general": g + N * np.eye(N),
        "spd": g @ g.T + N * np.eye(N),
        "lower": np.tril(g) + N * np.eye(N),
        "tall": rng.standard_normal((2 * N, N)),
    }


MATS = _matrices()
RHS = np.random.default_rng(1).standard_normal((N, 3))
RHS_TALL = np.random.default_rng(2).standard_normal((2 * N, 3))

# name -> (matrix, right-hand side, shardkit call, reference)
Case = tuple[str, np.ndarray | None, Callable[..., Any], Callable[[], Any]]
CASES: dict[str, Case] = {
    "solve": (
        "general",
        RHS,
        lambda a, b: linalg.solve(a, b, nb=NB),
        lambda: np.linalg.solve(MATS["general"], RHS),
    ),
    "lu_factor+lu_solve": (
        "general",
        RHS,
        lambda a, b: linalg.lu_solve(linalg.lu_factor(a, nb=NB), b),
        lambda: np.linalg.solve(MATS["general"], RHS),
    ),
    "lu_solve(trans=1)": (
        "general",
        RHS,
        lambda a, b: linalg.lu_solve(linalg.lu_factor(a, nb=NB), b, trans=1),
        lambda: np.linalg.solve(MATS["general"].T, RHS),
    ),
    "det": (
        "general",
        None,
        lambda a: linalg.det(a, nb=NB),
        lambda: np.atleast_1d(np.linalg.det(MATS["general"])),
    ),
    "inv": (
        "general",
        None,
        lambda a: linalg.inv(a, nb=NB),
        lambda: np.linalg.inv(MATS["general"]),
    ),
    "lu": ("general", None, lambda a: linalg.lu(a, nb=NB)[2], lambda: sl.lu(MATS["general"])[-1]),
    "cholesky": (
        "spd",
        None,
        lambda a: linalg.cholesky(a, nb=NB),
        lambda: np.linalg.cholesky(MATS["spd"]),
    ),
    "cho_factor+cho_solve": (
        "spd",
        RHS,
        lambda a, b: linalg.cho_solve(linalg.cho_factor(a, nb=NB), b),
        lambda: np.linalg.solve(MATS["spd"], RHS),
    ),
    "solve_triangular": (
        "lower",
        RHS,
        lambda a, b: linalg.solve_triangular(a, b, lower=True, trans=1, nb=NB),
        lambda: sl.solve_triangular(MATS["lower"], RHS, lower=True, trans=1),
    ),
    "qr": ("general", None, lambda a: linalg.qr(a, nb=NB), lambda: MATS["general"]),
    "lstsq": (
        "tall",
        RHS_TALL,
        lambda a, b: linalg.lstsq(a, b, nb=NB)[0],
        lambda: np.linalg.lstsq(MATS["tall"], RHS_TALL, rcond=None)[0],
    ),
    "matmul": (
        "general",
        RHS,
        lambda a, b: linalg.matmul(a, b),
        lambda: MATS["general"] @ RHS,
    ),
    "cg": (
        "spd",
        RHS[:, 0],
        lambda a, b: linalg.cg(a, b, tol=1e-12)[0],
        lambda: np.linalg.solve(MATS["spd"], RHS[:, 0]),
    ),
    "gmres": (
        "general",
        RHS[:, 0],
        lambda a, b: linalg.gmres(a, b, tol=1e-12)[0],
        lambda: np.linalg.solve(MATS["general"], RHS[:, 0]),
    ),
    "bicgstab": (
        "general",
        RHS[:, 0],
        lambda a, b: linalg.bicgstab(a, b, tol=1e-12)[0],
        lambda: np.linalg.solve(MATS["general"], RHS[:, 0]),
    ),
}


def _cells() -> list[tuple[str, str, str, str]]:
    return [
        (name, *m)
        for i, name in enumerate(sorted(CASES))
        for j, m in enumerate(MESHES)
        if FULL or ((i + j) % 2 == 0 and name not in FLAG_ONLY)
    ]


FLAG_ONLY = ("lu_solve(trans=1)",)
"""Variants of a default cell's code path, run only with the flag."""


LU_KINDS = frozenset({"all-gather", "all-reduce"})
DECLARED: dict[str, frozenset[str]] = {
    "solve": LU_KINDS,
    "lu_factor+lu_solve": LU_KINDS,
    "lu_solve(trans=1)": LU_KINDS,
    "det": LU_KINDS,
    "inv": LU_KINDS,
    "lu": LU_KINDS,
    "cholesky": LU_KINDS,
    "cho_factor+cho_solve": LU_KINDS,
    "solve_triangular": frozenset({"all-reduce"}),
    "qr": frozenset({"all-gather", "all-reduce"}),
    "lstsq": frozenset({"all-gather", "all-reduce"}),
    # Krylov: the matrix-vector product gathers the vector, the dot products all-reduce.
    "cg": frozenset({"all-gather", "all-reduce"}),
    "gmres": frozenset({"all-gather", "all-reduce"}),
    "bicgstab": frozenset({"all-gather", "all-reduce"}),
}
"""The collective kinds each case's eager (Explicit) program holds (matmul's depend on
the layout: it is always compared with its Explicit program)."""
COMPARED = ("solve", "cholesky", "matmul")
"""Cases whose Explicit program is compiled by default too (all with the flag)."""


def _args(case: Case, m: Any, spec: str) -> tuple[Any, ...]:
    kind, rhs, _, _ = case
    a = shard(MATS[kind], mesh=m, spec=spec)
    return (a,) if rhs is None else (a, rhs)


def _no_full_gather(report: Any, what: str) -> None:
    # lstsq's minimum-norm branch (a lax.cond taken only for a nearly rank-deficient a)
    # stacks the row blocks' triangular factors of [a, b]: at most M x (n + nrhs), its
    # documented price; every other gather stays below a whole matrix.
    limit = MATS["tall"].shape[0] * (N + RHS_TALL.shape[1]) + 1 if what == "lstsq" else N * N
    for c in report.collectives:
        if c.kind == "all-gather":
            biggest = max(int(np.prod(s)) for s in c.result_shapes)
            assert biggest < limit, f"{what}: all-gather of {c.result_shapes}, a whole matrix"


def _host(out: Any) -> np.ndarray:
    if isinstance(out, tuple):  # qr: check q r = a
        return np.asarray(out[0]) @ np.asarray(out[1])
    return np.atleast_1d(np.asarray(out))


@pytest.mark.parametrize(("name", "shape", "names", "spec"), _cells())
def test_auto_mesh_under_jit_matches_reference_and_eager_collectives(
    name: str, shape: str, names: str, spec: str
) -> None:
    case = CASES[name]
    auto = make_mesh(shape, "auto", names=names)
    args = _args(case, auto, spec)
    compiled = jax.jit(case[2]).lower(*args).compile()
    assert_close(_host(compiled(*args)), case[3](), what=f"{name} on Auto {shape} under jit")
    report = comms(compiled)
    assert name not in DECLARED or report.kinds == DECLARED[name], (name, report.kinds)
    if name in COMPARED or FULL:
        explicit = comms(case[2], *_args(case, make_mesh(shape, "explicit", names=names), spec))
        assert report.kinds == explicit.kinds, (name, report.kinds, explicit.kinds)
    _no_full_gather(report, name)


@pytest.mark.parametrize(
    "algorithm", ["allgather", "allreduce", "reduce_scatter", "ring", "summa", "cannon"]
)
def test_matmul_every_algorithm_under_jit_on_auto_axes(algorithm: str) -> None:
    m = make_mesh("2x4", "auto")
    x = np.random.default_rng(3).standard_normal((16, 32))
    y = np.random.default_rng(4).standard_normal((32, 8))
    specs = ("x,y", "y,None") if algorithm not in ("summa", "cannon") else ("x,y", "x,y")
    if algorithm == "cannon":
        m = make_mesh("2x2", "auto", devices=range(4))
    a, b = shard(x, mesh=m, spec=specs[0]), shard(y, mesh=m, spec=specs[1])

    def f(p: Any, q: Any) -> Any:
        return linalg.matmul(p, q, algorithm=algorithm)  # type: ignore[arg-type]

    compiled = jax.jit(f).lower(a, b).compile()
    c = compiled(a, b)
    assert_close(c, x @ y, what=algorithm)
    # The partitioner's wish for the result's layout is the out_spec of the program.
    eager = comms(
        lambda p, q: linalg.matmul(p, q, algorithm=algorithm, out_spec=c.sharding.spec),  # type: ignore[arg-type]
        a,
        b,
    )
    assert comms(compiled).kinds == eager.kinds


def test_comms_of_the_public_function_on_an_auto_array() -> None:
    m = make_mesh("2x4", "auto")
    a = shard(MATS["general"], mesh=m, spec="x,y")
    report = shardkit.comms(linalg.solve, a, RHS)
    report.assert_only({"all-reduce", "all-gather"})
    _no_full_gather(report, "solve")


def test_replicated_operand_takes_the_eager_default_layout() -> None:
    # Documented fallback: as eagerly, a replicated matrix is split rows over the first
    # mesh axis and columns over the second, a local slice; nothing is gathered.
    m = make_mesh("2x4", "auto")
    a = shard(MATS["general"], mesh=m, spec=None)
    f = jax.jit(lambda a, b: linalg.solve(a, b, nb=NB))
    assert_close(f(a, RHS), np.linalg.solve(MATS["general"], RHS))
    _no_full_gather(comms(f, a, RHS), "solve of a replicated matrix")


def test_a_layout_the_algorithm_cannot_take_raises_its_error() -> None:
    m = make_mesh("2x4", "auto")
    a, b = (
        shard(np.ones((16, 32)), mesh=m, spec="x,y"),
        shard(np.ones((32, 8)), mesh=m, spec="y,None"),
    )
    # Raised from the partitioner's callback, so wrapped in JAX's runtime error.
    with pytest.raises(Exception, match=r"local needs it whole.*Reshard the operands"):
        jax.jit(lambda p, q: linalg.matmul(p, q, algorithm="local"))(a, b)
    with pytest.raises(ValueError, match="explain=True needs the operands' layouts"):
        jax.jit(lambda p, q: linalg.matmul(p, q, explain=True))(a, b)


def test_matmul_chain_plan_applies_under_jit_on_auto_axes() -> None:
    m = make_mesh("2x4", "auto")
    plan = shardkit.plan.matmul_chain([(32, 16), (16, 32), (32, 8)], mesh=m, dtype=np.float64)
    rng = np.random.default_rng(5)
    mats = [rng.standard_normal(s) for s in plan.shapes]
    placed = [shard(x, mesh=m, spec=s) for x, s in zip(mats, plan.in_specs, strict=True)]
    compiled = jax.jit(plan.apply).lower(*placed).compile()
    assert_close(compiled(*placed), mats[0] @ mats[1] @ mats[2])
    assert comms(compiled).kinds == {c.kind for c in plan.collectives}


def test_host_data_under_jit_runs_on_one_device() -> None:
    # No mesh at all: the op's reference (the same program, one device) runs.
    a = MATS["general"][:16, :16]
    x = jax.jit(lambda a, b: linalg.solve(a, b, nb=NB))(a, RHS[:16])
    assert_close(x, np.linalg.solve(a, RHS[:16]))
