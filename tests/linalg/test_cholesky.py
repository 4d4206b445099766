"""shardkit.linalg cholesky / cho_factor / cho_solve against NumPy, non-PD errors, comms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.linalg import NotPositiveDefiniteError, cho_factor, cho_solve, cholesky
from shardkit.testing import assert_close


def _spd(n: int, dtype: type, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, n))
    return (x @ x.T / n + np.eye(n)).astype(dtype)


@pytest.mark.parametrize(
    ("shape", "names", "sp", "types", "n", "dtype"),
    [
        ("8", "x", "x,None", "explicit", 64, np.float64),
        ("2x4", "x,y", "x,y", "auto", 100, np.float64),
        ("4x2", "x,y", "x,y", "explicit", 64, np.float32),
    ],
)
def test_cholesky_and_cho_solve_match_numpy(shape, names, sp, types, n, dtype) -> None:  # type: ignore[no-untyped-def]
    m = make_mesh(shape, types, names=names)
    a_np = _spd(n, dtype)
    a = shard(a_np, mesh=m, spec=sp)
    assert_close(cholesky(a, nb=16), np.linalg.cholesky(a_np.astype(np.float64)), dtype=dtype)
    b = np.arange(n, dtype=dtype)
    x = cho_solve(cho_factor(a, nb=16), b)
    assert_close(
        x,
        np.linalg.solve(a_np.astype(np.float64), b),
        dtype=dtype,
        scale=float(np.abs(np.linalg.solve(a_np.astype(np.float64), b)).max()) * 10,
    )


def test_not_positive_definite_raises_and_reports_status() -> None:
    m = make_mesh("2x4")
    a_np = _spd(32, np.float64)
    a_np[7, 7] = -50.0
    a = shard(a_np, mesh=m, spec="x,y")
    with pytest.raises(NotPositiveDefiniteError, match="column 7") as info:
        cholesky(a, nb=8)
    assert isinstance(info.value, np.linalg.LinAlgError)
    _, status = jax.jit(lambda a: cholesky.with_status(a, nb=8))(a)
    assert int(status) == 8
    assert np.isnan(np.asarray(jax.jit(lambda a: cholesky(a, nb=8))(a))).all()


@pytest.mark.parametrize("shape", ["2x4", "4x2"])
def test_the_first_failure_is_reported_whichever_mesh_column_owns_it(shape: str) -> None:
    # Only the mesh column owning a panel factors it, so the status is the minimum over
    # the columns: two failures on panels of different mesh columns, the earlier wins,
    # in both elimination orders (cholesky: natural; cho_factor: cyclic).
    m = make_mesh(shape, names="x,y")
    a_np = np.eye(64)
    a_np[45, 45] = -1.0  # panel 5 (nb=8)
    a_np[21, 21] = -1.0  # panel 2: the first failure
    a = shard(a_np, mesh=m, spec="x,y")
    with pytest.raises(NotPositiveDefiniteError, match="column 21"):
        cholesky(a, nb=8)
    with pytest.raises(NotPositiveDefiniteError, match="column 21"):
        cho_factor(a, nb=8)
    _, status = jax.jit(lambda a: cholesky.with_status(a, nb=8))(a)
    assert int(status) == 22
    _, status = jax.jit(lambda a: cho_factor.with_status(a, nb=8))(a)
    assert int(status) == 22


def test_cholesky_collectives_form_one_chain_under_jit() -> None:
    # The failure pmin at the end of the factorization and the all-reduce that cuts an
    # indivisible order back (or cho_solve's) share one program under jit: unordered,
    # XLA's CPU runtime may enter them in different orders on different devices (hang).
    m = make_mesh("2x4", "explicit")
    a_np = _spd(30, np.float32)
    a = jax.device_put(a_np, NamedSharding(m, P()))  # 30: the mesh does not divide it
    b = np.arange(30, dtype=np.float32)
    chol = jax.jit(lambda a: cholesky(a, nb=4, mesh=m, spec="x,y"))
    assert_close(chol(a), np.linalg.cholesky(a_np.astype(np.float64)), dtype=np.float32)
    comms(chol, a).assert_ordered()
    solve = jax.jit(lambda a, b: cho_solve(cho_factor(a, nb=4, mesh=m, spec="x,y"), b))
    want = np.linalg.solve(a_np.astype(np.float64), b)
    assert_close(solve(a, b), want, dtype=np.float32, scale=float(np.abs(want).max()) * 10)
    comms(solve, a, b).assert_ordered()


def test_cholesky_collectives_are_panel_sized() -> None:
    m = make_mesh("2x4", "auto")
    n, nb = 256, 32
    s = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=NamedSharding(m, P("x", "y")))
    report = comms(lambda a: cholesky(a, nb=nb, mesh=m, spec=P("x", "y")), s)
    # All-reduces share the diagonal block and the panel along a mesh row; one
    # all-gather per step stacks the panel's rows along a mesh column. None is larger
    # than the n x nb panel.
    report.assert_only({"all-reduce", "all-gather"})
    assert {c.kind for c in report.collectives} == {"all-reduce", "all-gather"}
    for c in report.collectives:
        assert max(int(np.prod(r)) for r in c.result_shapes) <= n * nb
