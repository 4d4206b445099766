"""`shardkit launch`: the command line's statuses and messages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shardkit.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("kind", "status", "message"),
    [
        pytest.param("dir", 126, "is a directory, not a program", id="directory"),
        pytest.param("script", 126, "is not executable", id="not-executable"),
        pytest.param("missing", 127, "no such file", id="missing"),
        pytest.param("name", 127, "command not found: 'no-such-program-xyz'", id="not-on-path"),
    ],
)
def test_a_command_that_cannot_run_is_one_line_with_a_shells_status(
    tmp_path: Path, kind: str, status: int, message: str
) -> None:
    script = tmp_path / "script.py"
    script.write_text("print('never')\n")
    program = {
        "dir": str(tmp_path),
        "script": str(script),
        "missing": str(tmp_path / "missing"),
        "name": "no-such-program-xyz",
    }[kind]
    result = runner.invoke(app, ["launch", "-n", "2", "--", program, "arg"])
    assert result.exit_code == status
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("shardkit launch: ")
    assert message in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.timeout(30)
def test_timeout_says_that_it_fired_and_exits_124() -> None:
    result = runner.invoke(
        app,
        [
            "launch",
            "-n",
            "2",
            "--timeout",
            "0.5",
            "--",
            "python",
            "-c",
            "import time; time.sleep(60)",
        ],
    )
    assert result.exit_code == 124
    assert result.stderr.splitlines() == [
        "shardkit launch: timed out after 0.5 s; stopped ranks 0, 1"
    ]


@pytest.mark.timeout(30)
def test_python_is_the_interpreter_shardkit_runs_in() -> None:
    result = runner.invoke(
        app,
        ["launch", "-n", "1", "--", "python", "-c", "import sys; print(sys.executable)"],
        env={"PATH": ""},
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"[0] {sys.executable}"]
