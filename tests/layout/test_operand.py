"""One layout resolution per array argument of a public call (issue: operands resolved once).

Every public function asks :func:`shardkit.layout.internal.operand` once per array
argument whose layout it needs and hands the record to its internal cores, which never
read the layout from an array again. The count is taken on the one place a layout is
read from an array (``_resolve._found``), eagerly and while tracing under ``jit`` on
Explicit axes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest

import shardkit
import shardkit.layout._resolve as resolve_module
from _meshes import make_mesh
from shardkit import fft, linalg

N = 16
_RNG = np.random.default_rng(0)
_SPD = (lambda g: g @ g.T + N * np.eye(N))(_RNG.standard_normal((N, N)))
_TRI = np.tril(_RNG.standard_normal((N, N))) + N * np.eye(N)
_B = np.ones(N)

# name -> (call on the placed arrays, the arrays' specs, how many arguments have a layout)
CASES: dict[str, tuple[Callable[..., Any], tuple[str, ...], int]] = {
    "solve": (lambda a: linalg.solve(a, _B, nb=4), ("x,y",), 1),
    "lu_factor": (lambda a: linalg.lu_factor(a, nb=4).lu, ("x,y",), 1),
    "det": (lambda a: linalg.det(a, nb=4), ("x,y",), 1),
    "slogdet": (lambda a: linalg.slogdet(a, nb=4)[1], ("x,y",), 1),
    "inv": (lambda a: linalg.inv(a, nb=4), ("x,y",), 1),
    "lu": (lambda a: linalg.lu(a, nb=4)[2], ("x,y",), 1),
    "cholesky": (lambda a: linalg.cholesky(a, nb=4), ("x,y",), 1),
    "cho_factor": (lambda a: linalg.cho_factor(a, nb=4).c, ("x,y",), 1),
    "solve_triangular": (
        lambda a: linalg.solve_triangular(a, _B, lower=True, nb=4),
        ("x,y",),
        1,
    ),
    "qr": (lambda a: linalg.qr(a, nb=4)[1], ("x,y",), 1),
    "lstsq": (lambda a: linalg.lstsq(a, _B, nb=4)[0], ("x,y",), 1),
    "cg": (lambda a: linalg.cg(a, _B)[0], ("x,y",), 1),
    "matmul": (lambda a, b: linalg.matmul(a, b), ("x,y", "y,None"), 2),
    "fftn": (lambda x: fft.fftn(x), ("x,y",), 1),
    "fftshift": (lambda x: fft.fftshift(x), ("x,y",), 1),
    "halo_exchange": (lambda x: fft.halo_exchange(x, 1), ("x,y",), 1),
}


def _inputs(name: str, mesh: Any, specs: tuple[str, ...]) -> list[jax.Array]:
    if name.startswith("cho"):
        data = [_SPD]
    elif name == "solve_triangular":
        data = [_TRI]
    elif name in ("fftn", "fftshift", "halo_exchange"):
        data = [_RNG.standard_normal((N, N)).astype(np.complex64)]
    else:
        data = [_SPD + _RNG.standard_normal((N, N))] * len(specs)
    return [shardkit.shard(d, mesh=mesh, spec=s) for d, s in zip(data, specs, strict=True)]


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    found = resolve_module._found

    def counting(x: Any, rank: int) -> Any:
        calls[0] += 1
        return found(x, rank)

    monkeypatch.setattr(resolve_module, "_found", counting)
    return calls


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_operand_is_resolved_once(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fn, specs, arrays = CASES[name]
    mesh = make_mesh("2x4")
    xs = _inputs(name, mesh, specs)
    calls = _counted(monkeypatch)
    jax.jit(fn).trace(*xs)  # Explicit axes: the layout is known while tracing
    assert calls[0] == arrays, f"{name} under jit: {calls[0]} layout resolutions"
    if name == "fftn":  # eagerly as well (solve's eager path: the closing note's count)
        calls[0] = 0
        fn(*xs)
        assert calls[0] == arrays, f"{name} eagerly: {calls[0]} layout resolutions"
