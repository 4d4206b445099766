"""Where an optax optimizer's state lives: sharded like the parameters it mirrors.

``optax.tree_map_params`` finds the parameter-shaped parts of a state by initializing
the optimizer on a placeholder, which fails for optimizers whose ``init`` looks at
the parameters (``multi_transform``'s label functions, masks) or whose state holds
``optax.MaskedNode`` where the parameters hold arrays (``optax.contrib.muon``), and
gives a factored statistic (``adafactor``'s row and column moments) the sharding of
a full parameter it cannot have. Here every leaf of the real state is placed by its
key path and shape instead:

- a leaf whose path ends with a parameter's path (``opt_state[0].mu[1]['w']`` ends
  with ``[1]['w']``; the longest such parameter path wins) and has that parameter's
  shape gets the parameter's sharding; with extra leading dimensions (a history of
  ``m`` copies, as ``optax.lbfgs`` keeps) those dimensions are kept whole;
- under ``fsdp``, any other leaf with dimensions is split like an unmatched parameter
  (its largest dimension the mesh divides), so no state is whole on every device;
- everything else (step counts, scalars, hyperparameters, PRNG keys, factored
  statistics under the other strategies) is replicated.

A leaf that is not an array (a string, a Python object) cannot be placed and raises
a ``TypeError`` naming the optimizer and the leaf's path.
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding
from jax.sharding import PartitionSpec as P

from shardkit.train._rules import MODEL, default_template

__all__ = ["check_same_structure", "describe_optimizer", "opt_state_shardings", "require_optax"]


def require_optax() -> Any:
    """The ``optax`` module, or an ``ImportError`` that names the extra to install."""
    try:
        import optax
    except ImportError as e:  # pragma: no cover - optax is in the train extra
        raise ImportError("shardkit.train needs optax: pip install 'shardkit[train]'") from e
    return optax


def describe_optimizer(optimizer: Any) -> str:
    """A short name for errors: optax's factory (``optax partition``) or the ``init``'s name."""
    init = getattr(optimizer, "init", None)
    qualname = getattr(init, "__qualname__", "") or ""
    module = getattr(init, "__module__", "") or ""
    if not qualname:
        return type(optimizer).__name__
    if module.split(".", 1)[0] != "optax":  # the user's own: where its init is defined
        return f"{module}.{qualname}" if module else qualname
    head = qualname.split(".<locals>", 1)[0]
    if head.endswith(".init"):  # a class with an init method (optax.MultiSteps)
        head = head[: -len(".init")]
    return f"optax {head}"


def _is_array_leaf(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array | np.ndarray | np.generic | numbers.Number)


def _ends_with(path: tuple[Any, ...], suffix: tuple[Any, ...]) -> bool:
    return len(suffix) <= len(path) and path[len(path) - len(suffix) :] == suffix


def opt_state_shardings(
    optimizer: Any,
    params: Any,
    /,
    *,
    param_shardings: Any,
    replicated: Sharding,
    split_axes: tuple[str, ...] = (),
    where: str = "make_train_step",
) -> Any:
    """The sharding of every leaf of ``optimizer.init(params)`` (see the module docstring).

    Args:
      optimizer: anything with optax's ``init``.
      params: the parameters (arrays or ``jax.ShapeDtypeStruct``).
      param_shardings: a sharding per parameter, shaped like ``params``.
      replicated: the sharding of replicated leaves.
      split_axes: mesh axes that split unmatched leaves with dimensions (``fsdp``'s),
        or ``()`` to replicate them.
      where: the caller, for errors.

    Raises:
      TypeError: a state leaf is not an array (named by its path), or ``init`` raised one.
      ValueError: ``optimizer.init(params)`` raised (its message is kept).
    """
    name = describe_optimizer(optimizer)
    found: list[tuple[tuple[Any, ...], tuple[int, ...]]] = []
    treedef: list[Any] = []

    def init(p: Any) -> None:
        state = optimizer.init(p)
        flat, tree = jax.tree_util.tree_flatten_with_path(state)
        treedef.append(tree)
        for path, leaf in flat:
            if not _is_array_leaf(leaf):
                raise _UnplaceableError(path, leaf)
            found.append((tuple(path), tuple(np.shape(leaf))))

    # Shapes only: on an Explicit mesh, init on the placed parameters could meet
    # sharding-type rules (a reshape of a split kernel in optax.flatten).
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), params)
    try:
        jax.eval_shape(init, shapes)
    except _UnplaceableError as e:
        raise TypeError(
            f"{where}: the state of optimizer={name} holds "
            f"{type(e.leaf).__name__} {_short(e.leaf)} at opt_state"
            f"{jax.tree_util.keystr(e.path)}, which is not an array and cannot be placed "
            "on the mesh; keep non-array values out of the optimizer state (in the "
            "optimizer's closure), or build the optimizer from optax's transformations"
        ) from None
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        kind = TypeError if isinstance(e, TypeError) else ValueError
        raise kind(
            f"{where}: optimizer={name}: init(params) failed with {type(e).__name__}: "
            f"{first[:300]}. The parameters are {jax.tree.structure(params)}; check the "
            "optimizer's labels, masks and options against that structure"
        ) from e

    targets = [
        (tuple(path), tuple(np.shape(leaf)), sharding)
        for (path, leaf), sharding in zip(
            jax.tree_util.tree_flatten_with_path(params)[0],
            jax.tree.leaves(param_shardings, is_leaf=_is_sharding),
            strict=True,
        )
    ]
    # Longest parameter path first, so ['b']['a'] wins over ['a'] for ...['b']['a'].
    targets.sort(key=lambda t: -len(t[0]))
    out = [_place(path, shape, targets, replicated, split_axes) for path, shape in found]
    return jax.tree.unflatten(treedef[0], out)


def _place(
    path: tuple[Any, ...],
    shape: tuple[int, ...],
    targets: list[tuple[tuple[Any, ...], tuple[int, ...], Sharding]],
    replicated: Sharding,
    split_axes: tuple[str, ...],
) -> Sharding:
    for param_path, param_shape, sharding in targets:
        if not _ends_with(path, param_path):
            continue
        if shape == param_shape:
            return sharding
        extra = len(shape) - len(param_shape)
        if extra > 0 and shape[extra:] == param_shape and isinstance(sharding, NamedSharding):
            spec = tuple(sharding.spec) + (None,) * (len(param_shape) - len(sharding.spec))
            return NamedSharding(sharding.mesh, P(*((None,) * extra + spec)))
    if split_axes and shape and isinstance(replicated, NamedSharding):
        mesh = replicated.mesh
        parts = 1
        for a in split_axes:
            parts *= mesh.shape[a]
        template = default_template("fsdp", shape, parts)
        entry = split_axes[0] if len(split_axes) == 1 else split_axes
        return NamedSharding(mesh, P(*(entry if e == MODEL else None for e in template)))
    return replicated


def check_same_structure(
    optimizer: Any, state: Any, new: Any, /, *, where: str = "make_train_step"
) -> None:
    """``TypeError`` unless ``update`` returned a state of ``init``'s structure.

    The step keeps the optimizer state's shardings from one step to the next, so the
    state must keep its structure; the message names the first path that differs.
    """
    if jax.tree.structure(state) == jax.tree.structure(new):
        return
    before = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    after = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(new)[0]]
    only_after = [p for p in after if p not in set(before)]
    only_before = [p for p in before if p not in set(after)]
    if only_after:
        diff = f"it has opt_state{only_after[0]}, which init's state lacks"
    elif only_before:
        diff = f"it lacks opt_state{only_before[0]}, which init's state has"
    else:
        diff = f"{jax.tree.structure(new)} against init's {jax.tree.structure(state)}"
    raise TypeError(
        f"{where}: optimizer={describe_optimizer(optimizer)}: update returned a state "
        f"of another structure than init's ({diff}); the step keeps the state's layout "
        "from step to step, so update must return the structure init does"
    )


class _UnplaceableError(Exception):
    def __init__(self, path: Any, leaf: Any) -> None:
        super().__init__()
        self.path = path
        self.leaf = leaf


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_sharding(x: Any) -> bool:
    return isinstance(x, Sharding)
