"""shardkit.distributed.launch with plain (non-JAX) commands."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _procs import wait_gone

from shardkit.distributed import (
    COORDINATOR_ENV,
    LOCAL_DEVICES_ENV,
    NUM_PROCESSES_ENV,
    PROCESS_ID_ENV,
    launch,
)

PY = sys.executable
RANK = f"int(os.environ[{PROCESS_ID_ENV!r}])"


def _run(code: str, **kwargs) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    kwargs.setdefault("num_processes", 2)
    rc = launch([PY, "-c", code], stdout=out, stderr=err, **kwargs)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.timeout(30)
def test_prefixes_every_line_of_stdout_and_stderr_with_the_rank() -> None:
    code = (
        "import os, sys\n"
        f"r = {RANK}\n"
        "print(f'out {r} a'); print(f'out {r} b')\n"
        "print(f'err {r}', file=sys.stderr)\n"
        "sys.stdout.write(f'partial {r}')\n"
    )
    rc, out, err = _run(code)
    assert rc == 0
    assert sorted(out.splitlines()) == sorted(
        f"[{r}] {text} {r}{suffix}"
        for r in (0, 1)
        for text, suffix in (("out", " a"), ("out", " b"), ("partial", ""))
    )
    *children, warning = err.splitlines()
    assert sorted(children) == ["[0] err 0", "[1] err 1"]
    # Plain Python children never join a JAX job: the launcher says so, last.
    assert warning == (
        "shardkit launch: warning: ranks 0, 1 never called shardkit.distributed.initialize(), "
        "so each ran alone on JAX's default devices instead of in one job of 2 x 1 devices; "
        "call it first thing in the script"
    )
    # Each process's own lines keep their order.
    assert out.index("[1] out 1 a") < out.index("[1] out 1 b")


@pytest.mark.timeout(30)
def test_pads_the_rank_prefix_when_there_are_ten_or_more_processes() -> None:
    rc, out, _ = _run(f"import os; print({RANK})", num_processes=11)
    assert rc == 0
    assert sorted(out.splitlines()) == sorted(f"[{r:>2}] {r}" for r in range(11))


@pytest.mark.timeout(30)
def test_children_get_their_coordinates_in_the_environment() -> None:
    names = [COORDINATOR_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV, LOCAL_DEVICES_ENV]
    code = (
        f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {names!r} "
        "+ ['PYTHONUNBUFFERED', 'EXTRA']}))"
    )
    rc, out, _ = _run(code, num_processes=3, devices_per_process=4, env={"EXTRA": "yes"})
    assert rc == 0
    seen = {}
    for line in out.splitlines():
        prefix, payload = line.split(" ", 1)
        seen[prefix] = json.loads(payload)
    assert sorted(seen) == ["[0]", "[1]", "[2]"]
    coordinators = {v[COORDINATOR_ENV] for v in seen.values()}
    assert len(coordinators) == 1
    host, port = coordinators.pop().rsplit(":", 1)
    assert host == "127.0.0.1"
    assert 0 < int(port) < 65536
    for r in range(3):
        v = seen[f"[{r}]"]
        assert v[PROCESS_ID_ENV] == str(r)
        assert v[NUM_PROCESSES_ENV] == "3"
        assert v[LOCAL_DEVICES_ENV] == "4"
        assert v["PYTHONUNBUFFERED"] == "1"
        assert v["EXTRA"] == "yes"


@pytest.mark.timeout(30)
def test_a_given_port_is_used() -> None:
    rc, out, _ = _run(f"import os; print(os.environ[{COORDINATOR_ENV!r}])", port=12345)
    assert rc == 0
    assert sorted(out.splitlines()) == ["[0] 127.0.0.1:12345", "[1] 127.0.0.1:12345"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param("pass", 0, id="all-succeed"),
        pytest.param(f"import os, sys; sys.exit({RANK} * 7)", 7, id="rank1-exits-7"),
        pytest.param(
            f"import os, signal, time\nif {RANK} == 1: os.kill(os.getpid(), signal.SIGKILL)\n"
            "time.sleep(60)",
            128 + 9,
            id="rank1-killed-by-signal",
        ),
        pytest.param(
            f"import os, sys, time\nif {RANK} == 0: sys.exit(5)\ntime.sleep(60)",
            5,
            id="rank0-fails-others-stopped",
        ),
    ],
)
def test_forwards_the_exit_status(code: str, expected: int) -> None:
    start = time.monotonic()
    rc, _, _ = _run(code, grace_seconds=2.0)
    assert rc == expected
    assert time.monotonic() - start < 15


@pytest.mark.timeout(30)
def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = (
        "import os, signal, sys, time\n"
        f"if {RANK} == 0:\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"    open({str(ready)!r}, 'w').close()\n"
        "    time.sleep(60)\n"
        f"while not os.path.exists({str(ready)!r}): time.sleep(0.02)\n"
        "sys.exit(4)\n"
    )
    start = time.monotonic()
    rc, _, _ = _run(code, grace_seconds=1.0)
    elapsed = time.monotonic() - start
    assert rc == 4
    assert 1.0 <= elapsed < 15


@pytest.mark.timeout(30)
def test_descendants_of_children_are_ended_too(tmp_path: Path) -> None:
    # Rank 0 starts a long sleeper and exits 0; rank 1 fails once the sleeper exists.
    pid_file = tmp_path / "sleeper"
    code = (
        "import os, subprocess, sys, time\n"
        f"if {RANK} == 0:\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(pid_file) + '.tmp'!r}, 'w').write(str(p.pid))\n"
        f"    os.rename({str(pid_file) + '.tmp'!r}, {str(pid_file)!r})\n"
        "    time.sleep(60)\n"
        f"while not os.path.exists({str(pid_file)!r}): time.sleep(0.02)\n"
        "sys.exit(2)\n"
    )
    rc, _, _ = _run(code, grace_seconds=2.0)
    assert rc == 2
    assert wait_gone([int(pid_file.read_text())]) == []


@pytest.mark.timeout(30)
def test_timeout_ends_the_job_with_124() -> None:
    start = time.monotonic()
    rc, _, _ = _run("import time; time.sleep(60)", timeout_seconds=1.0, grace_seconds=1.0)
    assert rc == 124
    assert time.monotonic() - start < 10


@pytest.mark.timeout(30)
def test_keyboard_interrupt_ends_the_children(tmp_path: Path) -> None:
    code = (
        "import os, time\n"
        f"open(os.path.join({str(tmp_path)!r}, str(os.getpid()) + '.pid'), 'w').close()\n"
        "time.sleep(60)\n"
    )

    def interrupt_when_started() -> None:
        deadline = time.monotonic() + 20
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        # A real SIGINT, as Ctrl-C sends (interrupt_main does nothing when a test
        # runner left SIGINT ignored; its handler is set to Python's default below).
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = threading.Thread(target=interrupt_when_started)
    thread.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(code, grace_seconds=2.0)
    finally:
        thread.join()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 15
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2
    assert wait_gone(pids) == []


def test_a_missing_program_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        launch([str(tmp_path / "no-such-program")], num_processes=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"num_processes": 0}, r"num_processes=0 must be at least 1", id="n=0"),
        pytest.param({"num_processes": -2}, r"num_processes=-2", id="n<0"),
        pytest.param(
            {"num_processes": 2, "devices_per_process": 0},
            r"devices_per_process=0 must be at least 1",
            id="devices=0",
        ),
        pytest.param({"num_processes": 2, "port": 0}, r"port=0", id="port=0"),
        pytest.param({"num_processes": 2, "port": 70000}, r"port=70000", id="port-too-big"),
        pytest.param(
            {"num_processes": 2, "grace_seconds": -1.0}, r"grace_seconds=-1.0", id="grace<0"
        ),
        pytest.param(
            {"num_processes": 2, "timeout_seconds": 0.0}, r"timeout_seconds=0.0", id="timeout=0"
        ),
    ],
)
def test_rejects_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        launch([PY, "-c", "pass"], **kwargs)


def test_rejects_an_empty_command() -> None:
    with pytest.raises(ValueError, match=r"command=\[\] is empty"):
        launch([], num_processes=2)


@pytest.mark.parametrize(
    ("command", "kwargs", "match"),
    [
        pytest.param("python x.py", {"num_processes": 2}, r"shlex.split", id="command-str"),
        pytest.param([PY, 3], {"num_processes": 2}, r"must be a str, got 3", id="command-int"),
        pytest.param([PY], {"num_processes": 2.0}, r"num_processes=2.0", id="n-float"),
        pytest.param([PY], {"num_processes": True}, r"num_processes=True", id="n-bool"),
        pytest.param(
            [PY],
            {"num_processes": 2, "devices_per_process": "4"},
            r"devices_per_process='4'",
            id="devices-str",
        ),
        pytest.param(
            [PY], {"num_processes": 2, "grace_seconds": "5"}, r"grace_seconds='5'", id="grace-str"
        ),
        pytest.param(
            [PY], {"num_processes": 2, "verbose": "yes"}, r"verbose='yes'", id="verbose-str"
        ),
    ],
)
def test_rejects_bad_types(command: object, kwargs: dict, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        launch(command, **kwargs)  # pyright: ignore[reportArgumentType]


@pytest.mark.timeout(30)
def test_sigterm_to_the_launcher_ends_the_children_then_the_launcher(tmp_path: Path) -> None:
    child = (
        "import os, time\n"
        f"open(os.path.join({str(tmp_path)!r}, str(os.getpid()) + '.pid'), 'w').close()\n"
        "time.sleep(60)\n"
    )
    launcher = (
        "import sys\n"
        "from shardkit.distributed import launch\n"
        f"sys.exit(launch([sys.executable, '-c', {child!r}], num_processes=2))\n"
    )
    proc = subprocess.Popen([PY, "-c", launcher])
    try:
        deadline = time.monotonic() + 20
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2
    assert wait_gone(pids) == []


@pytest.mark.timeout(30)
def test_python_means_the_launchers_own_interpreter() -> None:
    # No PATH at all: `python` cannot come from there.
    code = "import sys; print(sys.executable)"
    rc, out, _ = _run_command(["python", "-c", code], env={"PATH": ""})
    assert rc == 0
    assert out.splitlines() == [f"[0] {PY}", f"[1] {PY}"]
    rc, out, _ = _run_command(["python3", "-c", code], env={"PATH": ""})
    assert rc == 0
    assert out.splitlines() == [f"[0] {PY}", f"[1] {PY}"]


def _run_command(command: list[str], **kwargs) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = launch(command, num_processes=2, stdout=out, stderr=err, **kwargs)
    out_lines = sorted(out.getvalue().splitlines())
    return rc, "\n".join(out_lines) + "\n", err.getvalue()


def test_a_program_that_cannot_run_is_reported_before_anything_starts(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("print('never')\n")
    with pytest.raises(IsADirectoryError, match=r"is a directory, not a program"):
        launch([str(tmp_path)], num_processes=2)
    with pytest.raises(PermissionError, match=r"script.py is not executable.*python .*script.py"):
        launch([str(script)], num_processes=2)
    with pytest.raises(FileNotFoundError, match=r"command not found: 'no-such-program-xyz'"):
        launch(["no-such-program-xyz"], num_processes=2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("code", "timeout", "expected", "summary"),
    [
        pytest.param(
            f"import os, sys, time\nif {RANK} == 1: sys.exit(7)\ntime.sleep(60)",
            20.0,
            7,
            "rank 1 exited with status 7; stopped rank 0",
            id="status",
        ),
        pytest.param(
            f"import os, signal, time\nif {RANK} == 0: os.kill(os.getpid(), signal.SIGKILL)\n"
            "time.sleep(60)",
            20.0,
            137,
            "rank 0 exited with status 137 (killed by SIGKILL); stopped rank 1",
            id="signal",
        ),
        pytest.param(
            "import time; time.sleep(60)",
            0.5,
            124,
            "timed out after 0.5 s; stopped ranks 0, 1",
            id="timeout",
        ),
    ],
)
def test_one_summary_line_says_how_the_job_ended(
    code: str, timeout: float, expected: int, summary: str
) -> None:
    rc, _, err = _run(code, grace_seconds=2.0, timeout_seconds=timeout)
    assert rc == expected
    assert err.splitlines() == [f"shardkit launch: {summary}"]


@pytest.mark.timeout(30)
def test_an_abort_right_before_a_peers_death_is_not_taken_for_the_cause(tmp_path: Path) -> None:
    # JAX aborts a rank as soon as rank 0 (its coordination service) dies; a launcher
    # that happens to see the abort first must still name rank 0.
    flag = tmp_path / "aborting"
    code = (
        "import os, signal, time\n"
        f"if {RANK} == 1:\n"
        f"    open({str(flag)!r}, 'w').close()\n"
        "    os.abort()\n"
        f"while not os.path.exists({str(flag)!r}): time.sleep(0.005)\n"
        "time.sleep(0.05)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    rc, _, err = _run(code, grace_seconds=2.0)
    assert rc == 137
    assert err.splitlines() == [
        "shardkit launch: rank 0 exited with status 137 (killed by SIGKILL); rank 1 ended too"
    ]


@pytest.mark.timeout(30)
def test_an_abort_on_its_own_is_the_cause() -> None:
    code = f"import os, time\nif {RANK} == 1: os.abort()\ntime.sleep(60)"
    rc, _, err = _run(code, grace_seconds=2.0)
    assert rc == 134
    assert err.splitlines() == [
        "shardkit launch: rank 1 exited with status 134 (killed by SIGABRT); stopped rank 0"
    ]
