"""The factorizations multiply at full precision whatever JAX's default matmul precision.

On GPUs JAX's default multiplies float32 in TF32; a factorization's trailing updates
then lose three digits of backward error (measured on one H100: ``solve`` at n=4096,
2.2e-07 -> 3.8e-04). On CPUs the precision changes nothing numerically, so the test
reads the lowered program: every ``dot_general`` must say HIGHEST, even under
``jax.default_matmul_precision("bfloat16")``.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

from _meshes import make_mesh
from shardkit.layout import shard
from shardkit.linalg import cho_factor, cho_solve, cholesky, lstsq, lu_factor, lu_solve, qr, solve

CASES = {
    "cholesky": lambda a: cholesky(a, nb=16),
    "cho_solve": lambda a: cho_solve(cho_factor(a, nb=16), a),
    "lu_solve": lambda a: lu_solve(lu_factor(a, nb=16), a),
    "solve": lambda a: solve(a, a, nb=16),
    "qr": lambda a: qr(a, nb=16),
    "lstsq": lambda a: lstsq(a, a, nb=16)[0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_product_of_a_factorization_is_highest_precision(name: str) -> None:
    m = make_mesh("2x4")
    a = shard(np.eye(64, dtype=np.float32) * 3 + 0.01, mesh=m, spec="x,y")
    with jax.default_matmul_precision("bfloat16"):
        text = jax.jit(CASES[name]).lower(a).as_text()
    dots = re.findall(r"stablehlo\.dot_general[^\n]*", text)
    assert dots, f"{name}: no dot_general in the lowered program"
    low = [d for d in dots if "HIGHEST" not in d]
    assert not low, f"{name}: {len(low)} of {len(dots)} products below HIGHEST: {low[0][:300]}"
