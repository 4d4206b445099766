"""shardkit.linalg.batched_solve: matches NumPy, no collective, singular systems named."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from _meshes import make_mesh
from shardkit.inspect import comms
from shardkit.layout import shard
from shardkit.linalg import SingularMatrixError, batched_solve
from shardkit.testing import assert_close


@pytest.mark.parametrize(("shape", "names", "sp"), [("8", "x", "x"), ("2x4", "x,y", "(x,y)")])
def test_batched_solve_matches_numpy_without_communication(shape: str, names: str, sp: str) -> None:
    m = make_mesh(shape, "explicit", names=names)
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((16, 6, 6)) + 6 * np.eye(6)
    b_np = rng.standard_normal((16, 6))
    a, b = shard(a_np, mesh=m, spec=sp), shard(b_np, mesh=m, spec=sp)
    assert_close(batched_solve(a, b), np.linalg.solve(a_np, b_np[..., None])[..., 0], scale=10.0)
    report = comms(batched_solve, a, b)
    assert report.count() == 0, str(report)


def test_singular_system_is_named() -> None:
    m = make_mesh("8")
    a_np = np.stack([np.eye(4)] * 8)
    a_np[5] = 0.0
    a = shard(a_np, mesh=m, spec="x")
    with pytest.raises(SingularMatrixError, match="system 5"):
        batched_solve(a, np.ones((8, 4)))
    x, status = jax.jit(lambda a, b: batched_solve.with_status(a, b))(a, np.ones((8, 4)))
    assert np.asarray(status).tolist() == [0, 0, 0, 0, 0, 1, 0, 0]
    assert np.isnan(np.asarray(x)[5]).all()
