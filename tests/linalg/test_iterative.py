"""shardkit.linalg cg / bicgstab / gmres: convergence, status, vector-sized traffic."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.linalg import bicgstab, cg, gmres

N = 64


def _spd() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((N, N))
    return x @ x.T / N + np.eye(N)


@pytest.mark.parametrize(("shape", "names", "sp"), [("8", "x", "x,None"), ("2x4", "x,y", "x,y")])
def test_krylov_solvers_converge(shape: str, names: str, sp: str) -> None:
    m = make_mesh(shape, "explicit", names=names)
    a_np = _spd()
    b = np.random.default_rng(1).standard_normal(N)
    a = shard(a_np, mesh=m, spec=sp)
    for solver in (cg, bicgstab, gmres):
        x, info = solver(a, b, tol=1e-10)
        assert int(info.status) == 0, (solver.__name__, info)
        np.testing.assert_allclose(a_np @ np.asarray(x), b, atol=1e-8)
    x, info = cg(a, b, tol=1e-10, M="jacobi")
    assert int(info.status) == 0


def test_linear_operator_and_iteration_limit() -> None:
    m = make_mesh("8", "explicit")
    a_np = _spd()
    b = shard(np.ones(N), mesh=m, spec="x")
    d = shard(np.diag(a_np).copy(), mesh=m, spec="x")
    x, info = cg(lambda v: d * v, b, tol=1e-12)
    np.testing.assert_allclose(np.asarray(x), 1 / np.diag(a_np), rtol=1e-10)
    _, info = cg(shard(a_np, mesh=m, spec="x,None"), np.ones(N), tol=1e-14, maxiter=2)
    assert int(info.status) == 2


def test_cg_traffic_per_iteration_is_vector_sized() -> None:
    m = make_mesh("8", "auto")
    a = jax.ShapeDtypeStruct((N, N), jnp.float64, sharding=jax.NamedSharding(m, jax.P("x", None)))
    b = jax.ShapeDtypeStruct((N,), jnp.float64, sharding=jax.NamedSharding(m, jax.P("x")))
    report = comms(lambda a, b: cg(a, b, mesh=m, spec=jax.P("x", None))[0], a, b)
    report.assert_only({"all-gather", "all-reduce"})
    for c in report.collectives:
        assert max(int(np.prod(r)) for r in c.result_shapes) <= N, c
