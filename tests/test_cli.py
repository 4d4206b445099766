from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

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
        "x = shardkit.shard(np.arange(8.0), mesh=m, spec='x')\n"
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


def test_train_pp_reports_the_bubble_and_plots(tmp_path: Path) -> None:
    png = tmp_path / "loss.png"
    args = ["train", "--strategy", "pp", "--mesh", "4", "--microbatches", "8"]
    args += ["--schedule", "1f1b", "--steps", "2", "--sizes", "8,16,16,16,4"]
    result = runner.invoke(app, [*args, "--batch-size", "16", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "4 stages (layers 0 | 1 | 2 | 3), 8 microbatches of 2" in result.output
    assert "bubble (S-1)/(M+S-1) = 3/11 = 27.3%" in result.output
    # Layers of 8x16+16, 16x16+16 (twice) and 16x4+4 floats, each stage holding one.
    assert "stacked (unpadded: 576 B | 1.1 KiB | 1.1 KiB | 272 B)" in result.output
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_train_bad_strategy_is_a_usage_error() -> None:
    result = runner.invoke(app, ["train", "--strategy", "nope", "--steps", "1"])
    assert result.exit_code == 2


# ---- the one error path ------------------------------------------------------------


def _invoke(*args: str) -> Result:
    return runner.invoke(app, list(args), prog_name="shardkit")


def _assert_user_error(result: Result, code: int, *needles: str) -> None:
    """Exit ``code``, handled (no escaped exception, no traceback), at most two lines."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, result.stderr
    assert lines[0].startswith("Error: ")
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


MISSING = "/nonexistent-shardkit-folder/out"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--devices", "0", "devices"], ["--devices", "at least 1"]),
        (["--devices", "-2", "devices"], ["--devices", "at least 1"]),
        (
            ["show", "--shape", "6,6", "--mesh", "2x4", "--names", "x,y", "--spec", "y"],
            ["--spec", "shape=(6, 6)", "not divisible by 4", "Pad dimension 0 to 8"],
        ),
        (
            ["inspect", "jax.numpy:sum", "--mesh", "2x4", "--names", "x,y", "--arg", "f32[6,8]@y"],
            ["--arg 'f32[6,8]@y'", "not divisible by 4", "Pad dimension 0 to 8"],
        ),
        (["show", "--shape", "8", "--svg", f"{MISSING}/a.svg"], ["--svg", "does not exist"]),
        (["show", "--shape", "8", "--html", f"{MISSING}/a.html"], ["--html", "mkdir -p"]),
        (["train", "--steps", "1", "--plot", f"{MISSING}/l.png"], ["--plot", "does not exist"]),
        (["tour", "--only", "(unclosed"], ["--only", "not a regular expression", "escape"]),
        (["tour", "--only", "no-such-scenario"], ["--only", "002/1.1", "004/train-dp", "--list"]),
        (["train", "--batch-size", "0"], ["batch_size=0", "--batch-size", "e.g. 256"]),
        (["train", "--steps", "0"], ["steps=0", "--steps", "at least 1"]),
        (["train", "--strategy", "dp", "--microbatches", "4"], ["--microbatches", "pp and dp_pp"]),
        (
            ["train", "--strategy", "pp", "--mesh", "8", "--sizes", "16,16,8"],
            ["8 stages", "more than the model's 2 layers"],
        ),
        (
            [
                "train",
                "--strategy",
                "pp",
                "--mesh",
                "4",
                "--microbatches",
                "3",
                "--sizes",
                "8,8,8,8,8",
            ],
            ["--batch-size 256", "microbatches=3 does not divide the 256 examples"],
        ),
        (["train", "--steps", "-3"], ["steps=-3", "--steps"]),
        (["train", "--learning-rate", "nan"], ["learning_rate=nan", "--learning-rate", "finite"]),
        (["train", "--learning-rate", "inf"], ["learning_rate=inf", "--learning-rate"]),
        (["train", "--learning-rate", "-0.1"], ["learning_rate=-0.1", "positive"]),
        (["train", "--sizes", "16,x"], ["--sizes", "784,1024,10"]),
        (["train", "--checkpoint-every", "0"], ["checkpoint_every=0", "--checkpoint-every 100"]),
        (["train", "--metrics", f"{MISSING}/m.jsonl"], ["--metrics", "does not exist"]),
        (["train", "--checkpoint-dir", __file__], ["--checkpoint-dir", "existing file"]),
        (["inspect", "no_such_module_sk:f"], ["no_such_module_sk", "current directory", ".py:"]),
        (["bench", "nope"], ["suites=['nope']", "legal values"]),
        (["show"], ["--shape"]),
        (["show", "--shape", "16,-16"], ["--shape", "'16,-16'", "array dimension 1 has size -16"]),
        (["show", "--shape", "0,16"], ["--shape", "array dimension 0 has size 0", "e.g. --shape"]),
        (["show", "--shape", "16,a"], ["--shape", "'16,a' is not an array shape", "8x8x8"]),
        (["nope"], ["No such command 'nope'", "shardkit --help"]),
        (["train", "--strategy", "ddp"], ["--strategy", "'dp_tp'"]),
        (["show", "--shape", "8,8", "--dtype", "f33"], ["--dtype", "'f33'", "float32"]),
        (["show", "--shape", "8,8", "--axes", "0"], ["--axes", "e.g. 0,2"]),
        (["inspect"], ["exactly one of TARGET", "--example"]),
        (["inspect", "jax.numpy:nope"], ["has no 'nope'", "it has: "]),
        (["inspect", "jax.numpy:sum", "--arg", "f32[8]@z"], ["--arg 'f32[8]@z'", "axes are"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0] != "--spec" else None,
)
def test_usage_errors_name_the_argument_and_the_fix(args: list[str], needles: list[str]) -> None:
    result = _invoke(*args)
    _assert_user_error(result, 2, *needles)
    assert "compiling" not in result.output  # checked before any work


@pytest.mark.parametrize("shape", ["16,-16", "0,16", "8x0x8"])
def test_show_shape_errors_speak_of_the_array_not_a_mesh(shape: str) -> None:
    result = _invoke("show", "--shape", shape, "--mesh", "2x4")
    _assert_user_error(result, 2, "--shape", f"{shape!r}", "array dimension")
    assert "mesh" not in result.stderr.lower()


def test_bench_out_existing_file_fails_before_running(tmp_path: Path) -> None:
    taken = tmp_path / "results"
    taken.write_text("keep me")
    result = _invoke("bench", "collectives", "--quick", "--out", str(taken))
    _assert_user_error(result, 2, "--out", "existing file", "folder")
    assert "[1/" not in result.output  # no case ran
    assert taken.read_text() == "keep me"


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--steps", "1", "--plot", "loss.png"],
        ["bench", "collectives", "--quick", "--out", "reports"],
    ],
)
def test_missing_extra_names_the_install_command(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    result = _invoke(*args)
    _assert_user_error(result, 1, "needs matplotlib", "pip install 'shardkit[bench]'")
    assert "compiling" not in result.output
    assert "[1/" not in result.output
    assert not list(tmp_path.iterdir())


def test_inspect_finds_a_module_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shardkit_cwd_target.py").write_text(
        "import jax.numpy as jnp\n\ndef total(a):\n    return jnp.sum(a)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    result = _invoke("inspect", "shardkit_cwd_target:total", "--arg", "f32[16]@x", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["collectives"][0]["kind"] == "all-reduce"
    assert str(tmp_path) not in sys.path  # importable while loading, not left behind


def test_unexpected_error_is_one_line_unless_debug(tmp_path: Path) -> None:
    script = tmp_path / "broken_target.py"
    script.write_text("def f(a):\n    raise RuntimeError('boom in user code')\n")
    result = _invoke("inspect", f"{script}:f", "--arg", "f32[8]")
    _assert_user_error(result, 1, "RuntimeError: boom in user code", "--debug")
    result = _invoke("--debug", "inspect", f"{script}:f", "--arg", "f32[8]")
    assert result.exit_code == 1
    assert isinstance(result.exception, RuntimeError)
    result = _invoke("--debug", "--devices", "0", "devices")
    assert result.exit_code == 2
    assert "Traceback" in result.output
    assert "at least 1" in result.output


def test_help_exits_zero() -> None:
    for args in (["--help"], ["train", "--help"]):
        result = _invoke(*args)
        assert result.exit_code == 0, result.output
        assert "Usage" in result.output


def test_version_is_the_installed_metadata() -> None:
    from importlib.metadata import version

    import shardkit

    result = _invoke("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"shardkit {shardkit.__version__}"
    assert shardkit.__version__ == version("shardkit")


def test_tour_list_shows_keys_and_titles() -> None:
    from shardkit.examples import scenarios

    result = runner.invoke(app, ["tour", "--list", "--only", "^002/1"])
    assert result.exit_code == 0, result.output
    for s in scenarios("^002/1"):
        assert s.key in result.output
        assert s.title in result.output
    assert "PASS" not in result.output  # nothing ran


def test_train_stops_after_max_skipped_non_finite_steps_in_a_row() -> None:
    small = ["train", "--strategy", "dp", "--mesh", "8", "--sizes", "8,4", "--batch-size", "8"]
    result = _invoke(*small, "--steps", "6", "--learning-rate", "1e30", "--max-skipped", "3")
    _assert_user_error(
        result,
        1,
        "stopped at step 4 of 6: steps 2 to 4 were skipped, 3 in a row (--max-skipped 3)",
        "lower the learning rate",
        "--keep-going",
    )
    assert re.search(r"not finite \(the loss is (nan|inf|-inf)\)", result.stderr)
    # --keep-going is run_training(keep_going=True), tested in tests/train/test_run.py
