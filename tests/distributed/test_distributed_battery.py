"""The contract battery on JAX's multi-process runtime: 2 processes x 4 CPU devices.

The same cells as tests/test_contract.py (by default one cell for one operation of
each family, see ``_battery.SAMPLE_OPS``; both sample cells of every operation with
``SHARDKIT_FULL_TESTS=1``), each checked on every process against the NumPy/SciPy
reference after gathering the result.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from _battery import SAMPLE_OPS

from _matrix import FULL
from shardkit.distributed import launch

WORKER = str(Path(__file__).with_name("_battery.py"))


@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_the_battery_holds_on_two_processes(tmp_path: Path) -> None:
    out_file = tmp_path / "battery.json"
    out, err = io.StringIO(), io.StringIO()
    rc = launch(
        [sys.executable, WORKER, str(out_file), "full" if FULL else "sample"],
        num_processes=2,
        devices_per_process=4,
        timeout_seconds=850,
        stdout=out,
        stderr=err,
    )
    assert rc == 0, f"stdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}"
    results = json.loads(out_file.read_text())
    import test_contract as battery

    grid = 2  # solve on a grid of the two processes' devices, Explicit and Auto axes
    assert len(results) == (2 * len(battery.OPS) if FULL else len(SAMPLE_OPS)) + grid
    failed = {cell: text for cell, text in results.items() if text != "ok"}
    assert not failed, "\n".join(f"{cell}:\n{text}" for cell, text in failed.items())
