from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from typer.testing import CliRunner

from shardkit.cli import app

runner = CliRunner(env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})


def test_tour_selected_scenario_passes() -> None:
    result = runner.invoke(app, ["tour", "--only", "002/1\\.2", "--no-pictures"])
    assert result.exit_code == 0, result.output
    assert "PASS 002/1.2" in result.output
    assert "1 of 1 scenarios passed" in result.output


def test_tour_unknown_selection_is_a_usage_error() -> None:
    result = runner.invoke(app, ["tour", "--only", "nothing-matches-this"])
    assert result.exit_code == 2
    assert "matches no scenario" in result.output


def test_show_draws_and_writes_svg_html(tmp_path: Path) -> None:
    svg, html = tmp_path / "a.svg", tmp_path / "a.html"
    result = runner.invoke(
        app,
        [
            "show",
            "--shape",
            "16,16",
            "--mesh",
            "2x4",
            "--names",
            "x,y",
            "--spec",
            "y,x",
            "--svg",
            str(svg),
            "--html",
            str(html),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "float32[16@y,16@x] on mesh(x=2,y=4; Explicit)" in result.output.replace("\n", "")
    ET.fromstring(svg.read_text())
    assert "<svg" in html.read_text()


def test_show_bad_spec_names_the_problem() -> None:
    result = runner.invoke(app, ["show", "--shape", "16,16", "--mesh", "2x4", "--spec", "q"])
    assert result.exit_code == 2
    assert "'q'" in result.output


def test_devices_lists_eight() -> None:
    result = runner.invoke(app, ["devices"])
    assert result.exit_code == 0
    assert "8 cpu device(s) (simulated)" in result.output


def test_console_script_runs_in_fresh_process() -> None:
    out = _run_cli("--devices", "4", "devices", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "4 cpu device(s)" in out.stdout


def _run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``python -m shardkit ARGS`` in a fresh process (a new JAX backend)."""
    return subprocess.run(
        [sys.executable, "-m", "shardkit", *args], capture_output=True, text=True, timeout=timeout
    )


def test_launch_runs_psum_across_two_processes(tmp_path: Path) -> None:
    script = tmp_path / "psum.py"
    script.write_text(
        "import jax, numpy as np\n"
        "from jax.sharding import PartitionSpec as P\n"
        "from shardkit.distributed import initialize\n"
        "initialize()\n"
        "import shardkit\n"
        "m = shardkit.mesh('8', 'x')\n"
        "x = shardkit.shard(np.arange(8.0), m, 'x')\n"
        "total = jax.shard_map(lambda b: jax.lax.psum(b.sum(), 'x'), mesh=m,"
        " in_specs=P('x'), out_specs=P())(x)\n"
        "print('total', float(total.addressable_data(0)), 'of', jax.device_count())\n"
    )
    out = _run_cli(
        "launch",
        "-n",
        "2",
        "--devices-per-process",
        "4",
        "--timeout",
        "120",
        "--",
        sys.executable,
        str(script),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[0] total 28.0 of 8" in out.stdout
    assert "[1] total 28.0 of 8" in out.stdout


def test_launch_forwards_failure() -> None:
    code = "import os, sys; sys.exit(3 if os.environ['SHARDKIT_PROCESS_ID'] == '1' else 0)"
    out = _run_cli("launch", "-n", "2", "--", sys.executable, "-c", code, timeout=120)
    assert out.returncode == 3


def test_inspect_example_reports_the_gather() -> None:
    result = runner.invoke(app, ["inspect", "--example", "fft"])
    assert result.exit_code == 0, result.output
    assert "all-gather" in result.output


def test_inspect_target_json(tmp_path: Path) -> None:
    import json

    result = runner.invoke(
        app,
        [
            "inspect",
            "jax.numpy:matmul",
            "--mesh",
            "2x4",
            "--names",
            "x,y",
            "--json",
            "--arg",
            "float32[64,32]@x,None",
            "--arg",
            "float32[32,64]@None,y",
            "--interconnect",
            "nvlink",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["collectives"] == []


def test_inspect_needs_exactly_one_target() -> None:
    result = runner.invoke(app, ["inspect"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["inspect", "--example", "nope"])
    assert result.exit_code == 2
    assert "legal values" in result.output


def test_bench_quick_writes_reports(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "bench",
            "collectives",
            "--quick",
            "--meshes",
            "8",
            "--sizes",
            "1KiB",
            "--repeat",
            "2",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "results.json").exists()
    assert (tmp_path / "report.html").exists()


def test_bench_unknown_suite_is_a_usage_error() -> None:
    result = runner.invoke(app, ["bench", "nope", "--quick"])
    assert result.exit_code == 2
    assert "legal values" in result.output


def test_train_runs_and_plots(tmp_path: Path) -> None:
    png = tmp_path / "loss.png"
    result = runner.invoke(
        app,
        [
            "train",
            "--strategy",
            "dp_tp",
            "--mesh",
            "4x2",
            "--steps",
            "3",
            "--sizes",
            "16,32,32,8",
            "--batch-size",
            "32",
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_train_bad_strategy_is_a_usage_error() -> None:
    result = runner.invoke(app, ["train", "--strategy", "nope", "--steps", "1"])
    assert result.exit_code == 2
