"""The tolerance helper must fail on a mismatch: a helper that cannot fail proves nothing."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from _meshes import make_mesh
from shardkit.layout import shard
from shardkit.testing import assert_close, tolerance


def test_passes_within_tolerance() -> None:
    assert_close(np.array([1, 2, 3], np.float32), np.array([1, 2, 3 + 1e-6]))
    assert_close(jnp.ones(4, jnp.bfloat16), np.full(4, 1.001))
    assert_close(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    assert_close(shard(np.arange(8.0), mesh=make_mesh("8"), spec="x"), np.arange(8.0))
    assert_close(jnp.float32(2.0), np.float64(2.0 + 1e-7))  # 0-d, as det returns


@pytest.mark.parametrize(
    ("actual", "desired", "match"),
    [
        (np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]), r"1 of 2 elements.*float64"),
        (np.array([1.0, 2.0], np.float32), np.array([1.0, 2.001]), "float32"),
        (np.array([1, 2]), np.array([1, 3]), "index \\(1,\\)"),
        (np.array([np.nan]), np.array([1.0]), "NaN pattern"),
        (np.array([1.0]), np.array([np.nan]), "NaN pattern"),
        (np.ones(2), np.ones(3), "shape"),
        (np.array([1 + 1j]), np.array([1 - 1j]), "complex128"),
        (np.float64(1.0), np.float64(1.5), r"1 of 1 elements.*got np\.float64\(1\.0\)"),
        (np.float64(np.nan), np.float64(1.0), "NaN pattern"),
    ],
)
def test_mismatch_raises(actual: np.ndarray, desired: np.ndarray, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        assert_close(actual, desired)


def test_tolerance_table() -> None:
    assert tolerance(np.int32) == (0.0, 0.0)
    assert tolerance(np.float32)[0] > tolerance(np.float64)[0]
    with pytest.raises(ValueError, match="dtype=str"):
        tolerance(np.str_)
