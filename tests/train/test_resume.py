"""Training that loses nothing: checkpoints, resuming, stop signals and kills.

A resumed run's losses are compared with an uninterrupted run's bit for bit (the
metrics files equal byte for byte). The process that is killed outright is a
subprocess started with this process's XLA flags and x64 setting, so that its steps
compute exactly what this process computes.
"""

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
from typing import Any

import jax
import numpy as np
import optax
import pytest
from _train_util import RUN_ARGS, RUN_OPTIONS, TRAIN_NAMES
from typer.testing import CliRunner

from _meshes import make_mesh
from shardkit import train
from shardkit.cli import app

pytest.importorskip("orbax.checkpoint")

OPTIONS = RUN_OPTIONS
CLI = ["train", *RUN_ARGS]
STEPS = 24
TMP_SUFFIX = ".orbax-checkpoint-tmp"


def _run(**kwargs: Any) -> tuple[train.TrainRun, str]:
    console = io.StringIO()
    run = train.run_training(progress=console, **OPTIONS, **kwargs)
    return run, console.getvalue()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The metrics file of an uninterrupted run of STEPS steps."""
    path = tmp_path_factory.mktemp("reference") / "metrics.jsonl"
    run, _ = _run(steps=STEPS, metrics=path)
    assert len(run.losses) == STEPS
    return path.read_text()


def _lines(text: str) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, text.splitlines())}


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().splitlines()) >= n:
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended first: {proc.communicate()}")
        time.sleep(0.01)
    raise AssertionError(f"{path} never reached {n} lines")


def test_checkpoint_manager_keeps_the_newest_complete_checkpoints(tmp_path: Path) -> None:
    model = train.MLP(OPTIONS["sizes"])
    _, state = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy="dp",
        mesh=make_mesh("8", "auto", TRAIN_NAMES),
        key=jax.random.key(0),
    )
    # An unfinished save left by a killed process: never listed, removed by the first save.
    (tmp_path / f"9{TMP_SUFFIX}").mkdir()
    with train.CheckpointManager(tmp_path, every=2, max_to_keep=2) as ckpt:
        assert ckpt.steps == ()
        assert ckpt.restore_latest(state) is None
        tree = {"state": state, "key": jax.random.key(7)}  # typed keys come back as keys
        saved = [ckpt.save(tree, step=s, metadata={"at": s}) for s in (1, 2, 3, 4)]
        assert saved == [False, True, False, True]
        assert not (tmp_path / f"9{TMP_SUFFIX}").exists()
        assert ckpt.save(tree, step=5, force=True)
        assert not ckpt.save(tree, step=5, force=True)  # already there
        assert ckpt.steps == (4, 5)
        assert ckpt.latest_step == 5
        # Onto another layout: tp on the same devices.
        _, target = train.make_train_step(
            model,
            optax.adam(1e-2),
            strategy="tp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            key=jax.random.key(3),
        )
        got = ckpt.restore_latest({"state": target, "key": jax.random.key(0)})
        assert got is not None
        assert got.step == 5
        assert got.metadata == {}
        assert ckpt.metadata(4) == {"at": 4}
        assert jax.random.key_data(got.state["key"]).tolist() == [0, 7]
        for a, b, like in zip(
            jax.tree.leaves(got.state["state"]),
            jax.tree.leaves(state),
            jax.tree.leaves(target),
            strict=True,
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            assert a.sharding.is_equivalent_to(like.sharding, a.ndim)
        with pytest.raises(
            ValueError,
            match=r"CheckpointManager.restore_latest: directory=.*the checkpoint has key",
        ):
            ckpt.restore_latest({"state": state})
        with pytest.raises(TypeError, match="step= is needed for a state of type dict"):
            ckpt.save(tree)
    with pytest.raises(ValueError, match=r"CheckpointManager: every=0 must be at least 1"):
        train.CheckpointManager(tmp_path, every=0)


def test_a_resumed_run_repeats_the_uninterrupted_losses(tmp_path: Path, reference: str) -> None:
    ckpt, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    first, _ = _run(steps=5, checkpoint_dir=ckpt, checkpoint_every=2, metrics=metrics)
    assert first.start_step == 0
    assert sorted(int(p.name) for p in ckpt.iterdir()) == [2, 4, 5]
    # What a kill after step 7 leaves: lines past the checkpoint, the last one cut short.
    with metrics.open("a") as f:
        f.write('{"step": 6, "loss": 1.0}\n{"step": 7, "loss": 2.0}\n{"step": 8, "lo')
    rest, text = _run(steps=STEPS, checkpoint_dir=ckpt, checkpoint_every=50, metrics=metrics)
    assert f"resuming from the checkpoint of step 5 in {ckpt}" in text
    assert rest.start_step == 5
    assert len(rest.losses) == STEPS - 5
    assert metrics.read_text() == reference  # every step once, bit for bit
    assert list(rest.losses) == list(_lines(reference).values())[5:]

    done, text = _run(steps=STEPS, checkpoint_dir=ckpt)
    assert done.losses == ()
    assert f"step {STEPS} already reaches --steps {STEPS}" in text
    with pytest.raises(ValueError, match=r"holds a run with --sizes 16,32,8, not 16,24,8; rerun"):
        train.run_training(**{**OPTIONS, "sizes": (16, 24, 8)}, checkpoint_dir=ckpt)


def test_sigint_finishes_the_step_saves_and_exits_130(tmp_path: Path) -> None:
    ckpt, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    args = [*CLI, "--steps", "5000", "--checkpoint-dir", str(ckpt), "--metrics", str(metrics)]

    def interrupt() -> None:
        _wait_for_lines(metrics, 3)
        os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    sender = threading.Thread(target=interrupt, daemon=True)
    sender.start()
    result = CliRunner().invoke(app, args)
    sender.join()
    assert result.exit_code == 130, result.output
    done = len(metrics.read_text().splitlines())
    assert result.stdout.splitlines()[-1] == (
        f"stopped by SIGINT after step {done} of 5000; saved step {done} to {ckpt}; "
        "run the same command again to resume"
    )
    assert str(done) in os.listdir(ckpt)
    assert signal.getsignal(signal.SIGINT) is before


def _spawn(args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "JAX_ENABLE_X64": "1", "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "shardkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


@pytest.mark.timeout(300)
def test_sigterm_and_a_kill_during_a_save_lose_nothing(tmp_path: Path, reference: str) -> None:
    ckpt, metrics = tmp_path / "ckpt", tmp_path / "metrics.jsonl"
    args = [*CLI, "--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--metrics", str(metrics)]
    args += ["--checkpoint-every", "3"]

    proc = _spawn(args, tmp_path)
    _wait_for_lines(metrics, 2, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    stopped = len(metrics.read_text().splitlines())
    assert out.splitlines()[-1].startswith(
        f"stopped by SIGTERM after step {stopped} of {STEPS}; saved step {stopped} to"
    )

    # Rerun, and kill it while it writes its next checkpoint (orbax's temporary folder).
    proc = _spawn(args, tmp_path)
    deadline = time.monotonic() + 120
    while not any(p.name.endswith(TMP_SUFFIX) for p in ckpt.iterdir()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no save started within 120 s"
        time.sleep(0.001)
    proc.kill()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert f"resuming from the checkpoint of step {stopped} in {ckpt}" in out
    unfinished = [p.name for p in ckpt.iterdir() if p.name.endswith(TMP_SUFFIX)]
    assert unfinished, "the kill landed after the save finished"
    killed_at = _lines(metrics.read_text())

    # The rerun resumes from the checkpoint before the unfinished one.
    run, text = _run(steps=STEPS, checkpoint_dir=ckpt, checkpoint_every=100, metrics=metrics)
    assert run.start_step < int(unfinished[0].removesuffix(TMP_SUFFIX))
    assert f"resuming from the checkpoint of step {run.start_step}" in text
    assert metrics.read_text() == reference
    # The steps replayed after the kill computed the same losses as before it.
    assert all(_lines(reference)[s] == loss for s, loss in killed_at.items())
