"""The contract battery on 2 processes x 4 devices: run under shardkit.distributed.launch.

Usage: ``python _battery.py OUT.json CELLS`` where CELLS is ``sample`` (the first
sample cell of one operation per family: LU, Cholesky, QR, Krylov, matmul, FFT) or
``full`` (both cells of every operation's default sample). Every process
runs the same cells in the same order (each is a collective program), gathers each
result to NumPy and checks it against the NumPy/SciPy reference; process 0 writes
``{cell id: "ok" | error text}`` to OUT.json.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import jax
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shardkit.distributed import gather, initialize

# One operation per family in the default run (the others share its code paths).
SAMPLE_OPS = ("solve", "cholesky", "lstsq", "gmres", "matmul", "fftn")


def _gathered(out: Any) -> Any:
    return jax.tree.map(lambda v: gather(v) if isinstance(v, jax.Array) else v, out)


def main(out_file: Path, which: str) -> None:
    info = initialize(shutdown_timeout_seconds=5)
    jax.config.update("jax_enable_x64", True)
    import test_contract as battery  # after initialize: it builds meshes on import

    results: dict[str, str] = {}
    for i, op in enumerate(battery.OPS):
        if which != "full" and op.name not in SAMPLE_OPS:
            continue
        cells = battery._sample(i)
        for cell in cells if which == "full" else cells[:1]:
            key = f"{op.name}[{cell.id}]"
            try:
                battery._run_cell(op, cell, to_host=_gathered)
                results[key] = "ok"
            # Recorded (pytest.raises' "did not raise" is not an Exception), and the next
            # cell still runs on every process.
            except (Exception, pytest.fail.Exception):
                results[key] = traceback.format_exc(limit=4)
    if info.process_id == 0:
        out_file.write_text(json.dumps(results, indent=1))
    print(f"process {info.process_id}: {sum(v == 'ok' for v in results.values())} ok")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
