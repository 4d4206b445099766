"""Save and restore a sharded training state with orbax-checkpoint, onto any layout.

Each device writes its own shards (orbax's tensorstore backend); a restore reads
each target shard from the files, so a state saved under one strategy or mesh comes
back under another (``dp`` on 8 devices to ``dp_tp`` on 4x2, say) without passing
through one device. Needs ``orbax-checkpoint`` (the ``train`` extra).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax

from shardkit.train.step import TrainState

__all__ = ["restore_state", "save_state"]


def _ocp() -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:
        raise ImportError(
            "shardkit.train.save_state/restore_state need orbax-checkpoint: "
            "pip install 'shardkit[train]' (or pip install orbax-checkpoint)"
        ) from e
    return ocp


def _abstract(tree: Any) -> Any:
    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        sharding = getattr(x, "sharding", None)
        if sharding is None:
            raise TypeError(
                f"restore_state: target leaf {x!r} has no sharding; pass the state of "
                "make_train_step (or jax.ShapeDtypeStruct leaves with a sharding)"
            )
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    return jax.tree.map(leaf, tree)


def save_state(directory: str | os.PathLike[str], state: TrainState, /) -> Path:
    """Write ``state`` (sharded arrays) to a new checkpoint directory and wait for it.

    Args:
      directory: where to write; must not exist yet (orbax refuses to overwrite).
      state: the training state of :func:`~shardkit.train.make_train_step`.

    Returns:
      The absolute checkpoint path.

    Raises:
      ImportError: orbax-checkpoint is not installed.
      FileExistsError: ``directory`` exists.

    Example:
      >>> import optax, tempfile
      >>> model = shardkit.train.MLP((8, 16, 4))
      >>> m = shardkit.mesh("8", "x", axis_types="auto")
      >>> _, state = shardkit.train.make_train_step(model, optax.adam(1e-3), strategy="dp",
      ...                                           mesh=m, key=jax.random.key(0))
      >>> tmp = tempfile.mkdtemp()
      >>> path = shardkit.train.save_state(f"{tmp}/ckpt", state)
      >>> m2 = shardkit.mesh("4x2", "data,model", axis_types="auto")
      >>> _, target = shardkit.train.make_train_step(model, optax.adam(1e-3), strategy="dp_tp",
      ...                                            mesh=m2, key=jax.random.key(1))
      >>> restored = shardkit.train.restore_state(path, target)
      >>> restored.params[0]["w"].sharding.spec, bool((np.asarray(restored.params[0]["w"])
      ...                                              == np.asarray(state.params[0]["w"])).all())
      (P(None, 'model'), True)
    """
    ocp = _ocp()
    path = Path(directory).absolute()
    if path.exists():
        raise FileExistsError(
            f"save_state: directory={str(path)!r} exists; checkpoints are written to a new "
            "directory (pick another name or remove it)"
        )
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, state)
        checkpointer.wait_until_finished()
    return path


def restore_state(directory: str | os.PathLike[str], target: TrainState, /) -> TrainState:
    """Read a checkpoint back with the shardings of ``target`` (any strategy or mesh).

    Args:
      directory: a path written by :func:`save_state`.
      target: a state (or ``jax.ShapeDtypeStruct`` tree with shardings) with the same
        structure, shapes and dtypes; its values are ignored, its shardings used.
        Take it from ``make_train_step`` for the strategy and mesh to resume on.

    Returns:
      The saved state, placed as ``target`` is.

    Raises:
      ImportError: orbax-checkpoint is not installed.
      FileNotFoundError: no checkpoint at ``directory``.
      TypeError: a ``target`` leaf has no sharding.
    """
    ocp = _ocp()
    path = Path(directory).absolute()
    if not path.exists():
        raise FileNotFoundError(f"restore_state: no checkpoint at directory={str(path)!r}")
    abstract = _abstract(target)
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(path, abstract)
    return jax.tree.unflatten(jax.tree.structure(abstract), jax.tree.leaves(restored))
