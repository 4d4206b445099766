"""Resuming ``run_training`` from its checkpoint folder: the options check, then the state."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from shardkit.train._manager import CheckpointManager

__all__ = ["check_resumable", "resume"]

_COMPARED = {
    "sizes": "--sizes",
    "batch_size": "--batch-size",
    "optimizer": "--optimizer",
    "learning_rate": "--learning-rate",
    "seed": "the seed",
}


def check_resumable(ckpt: CheckpointManager, record: dict[str, Any]) -> None:
    """The newest checkpoint, if any, was written by a run with these options."""
    found = ckpt.metadata()
    saved = {} if found is None else found.get("run", {})
    for name, option in _COMPARED.items():
        if name in saved and saved[name] != record[name]:
            show = ",".join(map(str, saved[name])) if name == "sizes" else saved[name]
            mine = ",".join(map(str, record[name])) if name == "sizes" else record[name]
            raise ValueError(
                f"shardkit train: --checkpoint-dir {str(ckpt.directory)!r} holds a run with "
                f"{option} {show}, not {mine}; rerun with the options that started it to "
                "resume, or give another --checkpoint-dir to start a new run"
            )


def resume(
    console: Console, ckpt: CheckpointManager, state: Any, layout: dict[str, str], steps: int
) -> Any:
    """The newest complete checkpoint's state, or ``state`` when there is none."""
    meta = ckpt.restore_latest(state)
    if meta is None:
        return state
    note = ""
    if meta.metadata.get("layout", layout) != layout:
        was = meta.metadata["layout"]
        note = (
            f" (saved by {was.get('strategy')} on mesh {was.get('mesh')}: losses agree with "
            "an uninterrupted run within float rounding, not bit for bit)"
        )
    console.print(
        f"resuming from the checkpoint of step {meta.step} in {ckpt.directory}{note}",
        highlight=False,
        soft_wrap=True,
    )
    if meta.step >= steps:
        console.print(f"step {meta.step} already reaches --steps {steps}: nothing to train")
    return meta.state
