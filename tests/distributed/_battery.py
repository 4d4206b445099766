"""The contract battery on 2 processes x 4 devices: run under shardkit.distributed.launch.

Usage: ``python _battery.py OUT.json CELLS`` where CELLS is ``sample`` (one cell per
operation) or ``full`` (both cells of each operation's default sample). Every process
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shardkit.distributed import gather, initialize


def _gathered(out: Any) -> Any:
    return jax.tree.map(lambda v: gather(v) if isinstance(v, jax.Array) else v, out)


def main(out_file: Path, which: str) -> None:
    info = initialize(shutdown_timeout_seconds=5)
    jax.config.update("jax_enable_x64", True)
    import test_contract as battery  # after initialize: it builds meshes on import

    results: dict[str, str] = {}
    for i, op in enumerate(battery.OPS):
        cells = battery._sample(i)
        for cell in cells if which == "full" else cells[:1]:
            key = f"{op.name}[{cell.id}]"
            try:
                expected = battery._unsupported(op, cell)
                if expected is not None:
                    kind, _ = expected
                    try:
                        battery._attempt(op, cell)
                    except kind:
                        results[key] = "ok"
                        continue
                    raise AssertionError(f"expected {kind.__name__}")
                out, ops, fn, args = battery._attempt(op, cell)
                op.check(_gathered(out), ops, cell.dtype)
                if cell.mode == "jit":
                    battery._check_comms(op, fn, args, ops)
                results[key] = "ok"
            except Exception:  # recorded, and the next cell still runs on every process
                results[key] = traceback.format_exc(limit=4)
    if info.process_id == 0:
        out_file.write_text(json.dumps(results, indent=1))
    print(f"process {info.process_id}: {sum(v == 'ok' for v in results.values())} ok")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
