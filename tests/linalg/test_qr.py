"""shardkit.linalg qr (TSQR) and lstsq against NumPy; square QR is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from shardkit.layout import mesh, shard
from shardkit.linalg import lstsq, qr


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tsqr_and_lstsq(dtype: type) -> None:
    m = mesh("8", "x", axis_types="explicit")
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((128, 6)).astype(dtype)
    q, r = qr(shard(a_np, m, "x,None"))
    tol = 1e-10 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), a_np, atol=tol)
    np.testing.assert_allclose(np.asarray(q).T @ np.asarray(q), np.eye(6), atol=tol)
    b = rng.standard_normal(128).astype(dtype)
    x, res, rank, _ = lstsq(shard(a_np, m, "x,None"), b)
    ref = np.linalg.lstsq(a_np.astype(np.float64), b.astype(np.float64), rcond=None)
    np.testing.assert_allclose(np.asarray(x), ref[0], atol=tol * 10)
    np.testing.assert_allclose(float(res[0]), ref[1][0], rtol=tol * 10)
    assert int(rank) == 6


def test_square_qr_is_not_implemented() -> None:
    m = mesh("2x4", "x,y")
    with pytest.raises(NotImplementedError, match="tall-skinny"):
        qr(shard(np.eye(16), m, "x,y"))
