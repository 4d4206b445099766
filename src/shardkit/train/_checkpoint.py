"""Save and restore a sharded training state with orbax-checkpoint, onto any layout.

Each device writes its own shards (orbax's tensorstore backend); a restore reads
each target shard from the files, so a state saved under one strategy or mesh comes
back under another (``dp`` on 8 devices to ``dp_tp`` on 4x2, say) without passing
through one device. Needs ``orbax-checkpoint`` (the ``train`` extra).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from shardkit.train._step import TrainState

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


def _abstract(tree: Any, *, where: str = "restore_state") -> Any:
    def leaf(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        sharding = getattr(x, "sharding", None)
        if sharding is None:
            raise TypeError(
                f"{where}: target leaf {x!r} has no sharding; pass the state of "
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
      FileNotFoundError: no checkpoint at ``directory`` (missing, empty, or without
        the metadata ``save_state`` writes).
      TypeError: a ``target`` leaf has no sharding.
      ValueError: the checkpoint's structure, a shape or a dtype differs from
        ``target``'s (checked before anything is read; dtypes are never cast), or a
        file of the checkpoint is corrupt or truncated (the message names it).
    """
    ocp = _ocp()
    path = Path(directory).absolute()
    if not path.is_dir():
        raise FileNotFoundError(
            f"restore_state: no checkpoint at directory={str(path)!r}"
            + (" (it is a file)" if path.exists() else "")
            + "; pass the directory save_state wrote (it returns the path)"
        )
    if not (path / _METADATA).is_file():
        contents = "is empty" if not any(path.iterdir()) else f"has no {_METADATA} file"
        raise FileNotFoundError(
            f"restore_state: directory={str(path)!r} {contents}, so it holds no checkpoint "
            "written by save_state; pass the directory save_state returned"
        )
    abstract = _abstract(target)
    with ocp.StandardCheckpointer() as checkpointer:
        try:
            saved = _saved_leaves(checkpointer.metadata(path))
        except Exception as e:  # orbax raises bare JSON/tensorstore errors
            raise _corrupt(path, e, where="restore_state") from None
        # Unreadable metadata comes back as None (orbax logs it): the restore below then
        # fails on the damaged file, and that failure is the one reported.
        if saved is not None:
            _check_against(path, saved, abstract, where="restore_state")
        try:
            restored = checkpointer.restore(path, abstract)
        except Exception as e:
            raise _corrupt(path, e, where="restore_state") from None
    return jax.tree.unflatten(jax.tree.structure(abstract), jax.tree.leaves(restored))


# ---- checks against the saved metadata --------------------------------------------------

_METADATA = "_METADATA"


def _key_name(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def _leaves_by_name(tree: Any) -> dict[str, Any]:
    """``{"params.0.w": leaf}``: orbax's names for the leaves of a state."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {".".join(_key_name(k) for k in path): leaf for path, leaf in flat}


def _saved_leaves(metadata: Any) -> dict[str, tuple[tuple[int, ...], str]] | None:
    """``{name: (shape, dtype)}`` of the saved arrays, or None when orbax could not tell."""
    tree = getattr(metadata, "item_metadata", metadata)
    if tree is None:
        return None
    out = {}
    for name, leaf in _leaves_by_name(tree).items():
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is not None and dtype is not None:
            out[name] = (tuple(shape), np.dtype(dtype).name)
    return out


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _stored(x: Any) -> tuple[tuple[int, ...], str]:
    """The shape and dtype name orbax stores for ``x`` (a typed PRNG key as its key data)."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.eval_shape(jax.random.key_data, x)
    return tuple(x.shape), np.dtype(x.dtype).name


def _check_against(
    path: Path, saved: dict[str, tuple[tuple[int, ...], str]], abstract: Any, *, where: str
) -> None:
    """Structure, shapes and dtypes of ``abstract`` equal the checkpoint's.

    ``where`` names the caller in the message, e.g. ``"restore_state"``.
    """
    wanted = {n: _stored(x) for n, x in _leaves_by_name(abstract).items()}
    caller, where = where, f"{where}: directory={str(path)!r}"
    fix = (
        "Build the target with make_train_step from the same model (layer_sizes, dtype) "
        "and optimizer as the saved state; only the strategy and the mesh may differ"
    )
    missing = [n for n in wanted if n not in saved]
    extra = [n for n in saved if n not in wanted]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"the target has {_listed(missing)}, which the checkpoint lacks")
        if extra:
            parts.append(f"the checkpoint has {_listed(extra)}, which the target lacks")
        raise ValueError(
            f"{where}: the checkpoint's structure differs from target's: {'; '.join(parts)}. {fix}."
        )
    for name, (shape, dtype) in wanted.items():
        s_shape, s_dtype = saved[name]
        if s_shape != shape:
            raise ValueError(
                f"{where}: {name} has shape {s_shape} in the checkpoint but {shape} in "
                f"target. {fix}."
            )
        if s_dtype != dtype:
            raise ValueError(
                f"{where}: {name} is {s_dtype} in the checkpoint but {dtype} in target; "
                f"{caller} never casts. Restore into a target of the saved dtype (e.g. "
                f"MLP(..., dtype=jnp.{s_dtype})), then cast the result if needed"
            )


_FILE = re.compile(r'local file "([^"]+)"')


def _corrupt(path: Path, error: Exception, *, where: str) -> ValueError:
    """A corrupt or truncated checkpoint: its path, the bad file and the reason, briefly.

    tensorstore names the file it failed on (the last ``local file "..."`` of its
    message); a bare ``JSONDecodeError`` comes from the tree metadata, ``_METADATA``.
    """
    text = str(error)
    files = _FILE.findall(text)
    if files:
        bad: str | None = files[-1]
    elif isinstance(error, json.JSONDecodeError):
        bad = str(path / _METADATA)
    else:
        bad = None
    reason = text.split(" [tensorstore_spec", 1)[0].rsplit(": ", 1)[-1].strip()
    reason = f"{type(error).__name__}: {reason[:200]}"
    named = f"file {bad!r}" if bad else "a file in it"
    return ValueError(
        f"{where}: the checkpoint at directory={str(path)!r} is corrupt or "
        f"truncated: {named} cannot be read ({reason}). Restore from another "
        "checkpoint (or delete this one), or save the state again"
    )
