"""The contract battery on 2 processes x 4 devices: run under shardkit.distributed.launch.

Usage: ``python _battery.py OUT.json CELLS`` where CELLS is ``sample`` (the first
sample cell of one operation per family: LU, Cholesky, QR, Krylov, matmul, FFT,
spectral) or
``full`` (both cells of every operation's default sample), then solve on a grid
(:mod:`shardkit.linalg._grid`) in both. Every process
runs the same cells in the same order (each is a collective program), gathers each
result to NumPy and checks it against the NumPy/SciPy reference; process 0 writes
``{cell id: "ok" | error text}`` to OUT.json.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, Literal

import jax
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _meshes import make_mesh
from shardkit.distributed import gather, initialize
from shardkit.layout.internal import operand

# One operation per family in the default run (the others share its code paths).
# By default one dense solve, one FFT and one spectral decomposition (every operation,
# matmul, cholesky, lstsq and gmres among them: FULL).
SAMPLE_OPS = ("solve", "fftn", "eigh")


def _gathered(out: Any) -> Any:
    return jax.tree.map(lambda v: gather(v) if isinstance(v, jax.Array) else v, out)


def _grid_solve(types: Literal["explicit", "auto"]) -> None:
    """solve, inv and det of a ``P('x', None)`` matrix moved to a 2x4 grid across the
    two processes (eagerly and under jit), against NumPy, results back on mesh 8."""
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import shardkit.linalg._grid as grid_module
    from shardkit.linalg import det, inv, solve

    n = 64
    a_np = np.random.default_rng(0).standard_normal((n, n)) / 8 + 2 * np.eye(n)
    b = np.arange(n, dtype=np.float64)
    m = make_mesh("8", types)
    a = jax.make_array_from_callback(a_np.shape, NamedSharding(m, P("x", None)), a_np.__getitem__)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grid_module, "GRID_MIN_ORDER", 16)
        assert grid_module.grid_for(operand("solve", "a", a)) is not None
        for wrap in (lambda f: f, jax.jit):
            x = wrap(lambda a: solve(a, b, nb=8))(a)
            assert x.sharding.mesh.axis_names == ("x",)
            np.testing.assert_allclose(a_np @ gather(x), b, atol=1e-11 * n)
            np.testing.assert_allclose(
                gather(wrap(lambda a: inv(a, nb=8))(a)) @ a_np, np.eye(n), atol=1e-12 * n
            )
            np.testing.assert_allclose(
                float(gather(wrap(lambda a: det(a, nb=8))(a))), np.linalg.det(a_np), rtol=1e-12
            )


def main(out_file: Path, which: str) -> None:
    info = initialize(shutdown_timeout_seconds=5)
    jax.config.update("jax_enable_x64", True)
    import test_contract as battery  # after initialize: it builds meshes on import

    results: dict[str, str] = {}
    for i, op in enumerate(battery.OPS):
        if which != "full" and op.name not in SAMPLE_OPS:
            continue
        cells = battery.op_cells(i, op, full=False)
        for cell in cells if which == "full" else cells[:1]:
            key = f"{op.name}[{cell.id}]"
            try:
                battery._run_cell(op, cell, to_host=_gathered)
                results[key] = "ok"
            # Recorded (pytest.raises' "did not raise" is not an Exception), and the next
            # cell still runs on every process.
            except (Exception, pytest.fail.Exception):
                results[key] = traceback.format_exc(limit=4)
    for types in ("explicit", "auto"):
        key = f"solve[grid-{types}]"
        try:
            _grid_solve(types)
            results[key] = "ok"
        except (Exception, pytest.fail.Exception):
            results[key] = traceback.format_exc(limit=4)
    if info.process_id == 0:
        out_file.write_text(json.dumps(results, indent=1))
    print(f"process {info.process_id}: {sum(v == 'ok' for v in results.values())} ok")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
