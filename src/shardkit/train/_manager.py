"""``CheckpointManager``: a training run's checkpoints in one directory, with orbax's manager.

A thin layer over ``orbax.checkpoint.CheckpointManager``: each checkpoint is a step
directory holding the state (sharded arrays, each process writing its own shards)
and a small JSON record of whatever else the run needs to resume (its options, the
seed, the data position). orbax writes a step into a temporary directory and renames
it into place once every file is written, so a process killed at any moment, in the
middle of a save included, leaves the previous checkpoints complete; the unfinished
one is never listed, and orbax removes it once the directory is opened again (in the
background, finished before the first save).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import jax

from shardkit._typing import JSONObject, PyTree
from shardkit.layout.internal import as_count
from shardkit.train._checkpoint import (
    _abstract,
    _check_against,
    _corrupt,
    _ocp,
    _saved_leaves,
)

__all__ = ["CheckpointManager", "Restored"]

_WHERE = "CheckpointManager"


class Restored(NamedTuple):
    """What :meth:`CheckpointManager.restore_latest` read back.

    Attributes:
      step: the checkpoint's step.
      state: the saved state, placed as the target is.
      metadata: the JSON record saved with it (``{}`` if none was given).
    """

    step: int
    state: PyTree
    metadata: JSONObject


class CheckpointManager:
    """Saves a training state every few steps and finds the newest complete one again.

    Wraps orbax's ``CheckpointManager`` (no format of its own): step ``k`` lives in
    ``directory/k``, holding the state's arrays (each device's shards written by its
    own process, as :func:`~shardkit.train.save_state` does) and a JSON ``metadata``
    record. A save is complete once orbax has renamed its temporary directory into
    place; a process killed before that, during a save or at any other moment, leaves
    the checkpoints before it intact; the unfinished one is never listed, and is
    removed once the directory is opened again (before the next save). Each save blocks until it is complete (no background threads, so
    no collective of a save runs beside a training step). The newest ``max_to_keep``
    checkpoints are kept.

    On several processes (``shardkit.distributed``) every process makes the same calls
    in the same order: a save and a restore are collective.

    Typed PRNG keys (``jax.random.key``) may be leaves of the state; they come back as
    keys.

    Args:
      directory: the run's checkpoint folder (created if missing).
      every: ``save`` writes the steps that ``every`` divides (and any step with
        ``force=True``).
      max_to_keep: how many of the newest checkpoints to keep (None: all).

    Raises:
      ImportError: orbax-checkpoint (the ``train`` extra) is not installed.
      TypeError: ``every`` or ``max_to_keep`` is not an int.
      ValueError: ``every`` or ``max_to_keep`` is below 1, or ``directory`` is a file.

    Example:
      >>> import optax, tempfile
      >>> model = shardkit.train.MLP((8, 16, 4))
      >>> m = shardkit.mesh("8", "x", axis_types="auto")
      >>> step, state = shardkit.train.make_train_step(model, optax.adam(1e-3), strategy="dp",
      ...                                              mesh=m, key=jax.random.key(0))
      >>> where = shardkit.train.strategy_layout(model, strategy="dp", mesh=m).batch
      >>> data_key = jax.random.key(1)
      >>> with shardkit.train.CheckpointManager(tempfile.mkdtemp(), every=2) as ckpt:
      ...     if (found := ckpt.restore_latest(state)) is not None:
      ...         state = found.state  # resume where the last run stopped
      ...     for i in range(int(state.step), 5):
      ...         batch = model.batch(jax.random.fold_in(data_key, i), 32, where)  # from the step
      ...         state, loss = step(state, batch)
      ...         saved = ckpt.save(state, metadata={"next_batch": i + 1}, force=i == 4)
      ...     ckpt.steps, ckpt.restore_latest(state).metadata
      ((2, 4, 5), {'next_batch': 5})
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        /,
        *,
        every: int = 1,
        max_to_keep: int | None = 3,
    ) -> None:
        ocp = _ocp()
        self.every = as_count(_WHERE, "every", every, minimum=1, fix="e.g. every=100")
        if max_to_keep is not None:
            max_to_keep = as_count(
                _WHERE, "max_to_keep", max_to_keep, minimum=1, fix="or None to keep all"
            )
        path = Path(directory).absolute()
        if path.exists() and not path.is_dir():
            raise ValueError(
                f"{_WHERE}: directory={str(path)!r} is a file; give a folder (it is created "
                "if missing)"
            )
        self.directory = path
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            create=True,
            cleanup_tmp_directories=True,
            enable_async_checkpointing=False,
        )
        self._manager = ocp.CheckpointManager(
            path,
            options=options,
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "meta": ocp.JsonCheckpointHandler(),
            },
        )

    @property
    def steps(self) -> tuple[int, ...]:
        """The steps of the complete checkpoints, oldest first."""
        return tuple(sorted(self._manager.all_steps()))

    @property
    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or None when there is none."""
        return self._manager.latest_step()

    def save(
        self,
        state: PyTree,
        /,
        *,
        step: int | None = None,
        metadata: Mapping[str, object] | None = None,
        force: bool = False,
    ) -> bool:
        """Write ``state`` as checkpoint ``step`` if ``every`` divides it (or ``force``).

        Args:
          state: a pytree of arrays, e.g. a :class:`~shardkit.train.TrainState`.
          step: the checkpoint's number; by default ``state.step`` (a ``TrainState``
            counts its steps).
          metadata: a JSON-serializable mapping saved with it (the options, the data
            position, anything the run needs to resume).
          force: save even where ``every`` does not divide ``step``.

        Returns:
          Whether a checkpoint was written (not when ``every`` does not divide
          ``step``, nor when checkpoint ``step`` already exists).

        Raises:
          TypeError: ``step`` is missing for a state without a ``step`` field.
          ValueError: ``step`` is negative.
        """
        if step is None:
            if not hasattr(state, "step"):
                raise TypeError(
                    f"{_WHERE}.save: step= is needed for a state of type "
                    f"{type(state).__name__} (only a TrainState carries its step)"
                )
            step = int(state.step)
        step = as_count(f"{_WHERE}.save", "step", step, minimum=0)
        if not (force or step % self.every == 0) or step in self._manager.all_steps():
            return False
        ocp = _ocp()
        return bool(
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state),
                    meta=ocp.args.JsonSave(dict(metadata or {})),
                ),
                force=True,
            )
        )

    def metadata(self, step: int | None = None, /) -> JSONObject | None:
        """The JSON record saved with checkpoint ``step`` (the newest by default).

        Reads nothing else, so a run can check what it resumes before restoring.

        Returns:
          The record (``{}`` if none was given), or None when there is no checkpoint.

        Raises:
          FileNotFoundError: checkpoint ``step`` does not exist.
        """
        if step is None:
            step = self._manager.latest_step()
            if step is None:
                return None
        if step not in self._manager.all_steps():
            raise FileNotFoundError(
                f"{_WHERE}.metadata: no complete checkpoint of step={step} in "
                f"{str(self.directory)!r}; it has steps {list(self.steps)}"
            )
        ocp = _ocp()
        found = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(found.meta or {})

    def restore_latest(self, target: PyTree, /) -> Restored | None:
        """Read the newest complete checkpoint with the shardings of ``target``.

        Args:
          target: a state with the saved structure, shapes and dtypes (its values are
            ignored, its shardings used: it may come from another strategy or mesh),
            or a tree of ``jax.ShapeDtypeStruct`` with shardings.

        Returns:
          A :class:`Restored`, or None when the directory holds no complete checkpoint.

        Raises:
          TypeError: a ``target`` leaf has no sharding.
          ValueError: the checkpoint's structure, a shape or a dtype differs from
            ``target``'s (checked before anything is read), or a file of it is
            corrupt (the message names it).
        """
        step = self._manager.latest_step()
        if step is None:
            return None
        ocp = _ocp()
        path = self.directory / str(step)
        where = f"{_WHERE}.restore_latest"
        abstract = _abstract(target, where=where)
        try:
            saved = _saved_leaves(self._manager.item_metadata(step)["state"])
        except Exception as e:  # orbax raises bare JSON/tensorstore errors
            raise _corrupt(path, e, where=where) from None
        if saved is not None:
            _check_against(path, saved, abstract, where=where)
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
                ),
            )
        except Exception as e:
            raise _corrupt(path, e, where=where) from None
        state = jax.tree.unflatten(jax.tree.structure(abstract), jax.tree.leaves(restored.state))
        return Restored(step, state, dict(restored.meta or {}))

    def close(self) -> None:
        """Waits for orbax's pending work and releases its resources."""
        self._manager.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CheckpointManager({str(self.directory)!r}, every={self.every}, steps={self.steps})"
