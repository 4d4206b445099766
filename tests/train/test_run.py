"""run_training (``shardkit train``): progress, figures from the compiled step, a PNG."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest

from shardkit import train


def test_run_prints_progress_and_writes_the_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    console = io.StringIO()
    png = tmp_path / "loss.png"
    run = train.run_training(
        progress=console,
        strategy="dp_tp",
        mesh="4x2",
        steps=6,
        sizes=(16, 32, 32, 8),
        batch_size=32,
        optimizer="muon",  # shardkit.train.muon: the CLI's --optimizer muon
        learning_rate=0.02,
        plot=png,
    )
    assert run.plot == png
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(run.losses) == 6
    assert run.losses[-1] < run.losses[0]
    assert run.bytes_per_step == run.report.bytes_sent > 0
    assert run.steps_per_s > 0
    assert run.peak_bytes
    text = console.getvalue()
    for needle in (
        "compiling the step ...",  # printed before the compile, not after
        "dp_tp on mesh 4x2",
        "MLP 16-32-32-8",
        "muon lr=0.02",
        "training 6/6 loss",  # plain progress lines when not on a terminal
        "s elapsed)",
        "steps/s",
        "sent per device",
        "loss curve",
    ):
        assert needle in text


def test_run_rejects_bad_options() -> None:
    console = io.StringIO()
    with pytest.raises(ValueError, match=r"strategy='ddp'; choose one of"):
        train.run_training(progress=console, strategy="ddp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps=0 must be at least 1"):
        train.run_training(progress=console, steps=0)
    with pytest.raises(
        ValueError, match=r"optimizer='lion'; choose one of \['sgd', 'adam', 'muon'\]"
    ):
        train.run_training(
            progress=console,
            mesh="8",
            strategy="dp",
            sizes=(16, 8),
            batch_size=8,
            optimizer="lion",  # type: ignore[arg-type]
        )
    with pytest.raises(ValueError, match=r"--batch-size 30.*not divisible by 4"):
        train.run_training(progress=console, mesh="4x2", sizes=(16, 32, 8), batch_size=30)


def test_run_stops_at_a_non_finite_loss_unless_keep_going(tmp_path: Path) -> None:
    console = io.StringIO()
    options = {"strategy": "dp", "mesh": "8", "sizes": (8, 4), "batch_size": 8}
    run = train.run_training(
        progress=console, steps=4, learning_rate=1e30, keep_going=True, **options
    )
    assert len(run.losses) == 4
    assert math.isfinite(run.losses[0])
    assert not math.isfinite(run.losses[1])
    text = console.getvalue()
    assert "the loss stopped being finite at step 2; 3 of 4 steps skipped" in text
    assert "training 2/4 loss inf (skipped)" in text
    # The options and the plot's folder are checked before anything is compiled.
    early = io.StringIO()
    with pytest.raises(ValueError, match=r"--plot .*does not exist; create it first"):
        train.run_training(
            progress=early, steps=4, learning_rate=1e30, plot=tmp_path / "no" / "l.png", **options
        )
    assert "compiling" not in early.getvalue()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, r"batch_size=0 must be a positive integer \(--batch-size\)"),
        ({"steps": -2}, r"steps=-2 must be at least 1"),
        ({"learning_rate": float("nan")}, r"learning_rate=nan must be a finite positive"),
        ({"learning_rate": -1.0}, r"learning_rate=-1.0 must be a finite positive"),
        ({"sizes": (8,)}, r"sizes=\(8,\) must be at least two positive layer widths"),
    ],
)
def test_run_rejects_bad_numbers(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        train.run_training(**kwargs)


def test_progress_option_and_the_deprecated_console() -> None:
    from rich.console import Console

    from shardkit.train.internal import progress_console

    options: dict[str, Any] = {"strategy": "dp", "mesh": "8", "sizes": (8, 8), "batch_size": 8}
    lent = Console(record=True, width=120)
    with progress_console(lent):  # how `shardkit train` lends its console
        run = train.run_training(steps=1, progress=True, **options)
    assert len(run.losses) == 1
    assert "training 1/1 loss" in lent.export_text()
    # The old spelling warns first; steps=0 then fails before anything is compiled.
    old = Console(record=True, width=120)
    with (
        pytest.warns(
            DeprecationWarning, match=r"run_training\(console, \.\.\.\) is deprecated"
        ) as rec,
        pytest.raises(ValueError, match="steps"),
    ):
        train.run_training(old, steps=0, **options)
    assert rec[0].filename == __file__
    with pytest.raises(TypeError, match="got both"):
        train.run_training(old, steps=1, progress=True, **options)
    with pytest.raises(TypeError, match=r"progress=.*must be True"):
        train.run_training(steps=1, progress=old, **options)  # type: ignore[arg-type]
