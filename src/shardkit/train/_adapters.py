"""What ``make_train_step`` trains: a bundled model, a parameter pytree, an Equinox or NNX module.

Each becomes a :class:`Trainable`: the trainable parameters as one pytree (which the
strategies shard leaf by leaf through path rules, :data:`~shardkit.train.Rules`), a
loss of those parameters, and the way back to the user's object. Equinox modules
train their inexact (floating) arrays, NNX modules their ``nnx.Param`` variables;
everything else (static fields, other NNX variables) is held fixed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import jax
import jax.numpy as jnp

from shardkit.train._layers import Layers, layer_parts
from shardkit.train._models import Model

__all__ = ["Trainable", "as_trainable"]

LossFn = Callable[[Any, Any], jax.Array]


@dataclass(frozen=True, eq=False)
class Trainable:
    """A model as a strategy sees it.

    Attributes:
      kind: ``"shardkit"`` (MLP, Logistic), ``"pytree"``, ``"equinox"``, ``"nnx"`` or
        ``"layers"`` (:class:`~shardkit.train.Layers`).
      model: what the caller passed.
      abstract: the trainable parameters as ``jax.ShapeDtypeStruct`` leaves.
      loss: ``loss(params, batch, hooks) -> scalar``.
      draw: ``draw(key, shardings) -> params`` placed with ``shardings``.
      rebuild: ``rebuild(params)``: the caller's kind of model with these parameters.
      label: ``label(path)`` names a parameter in errors.
    """

    kind: str
    model: Any
    abstract: Any
    loss: Callable[[Any, Any, Any], jax.Array]
    draw: Callable[[Any, Any], Any]
    rebuild: Callable[[Any], Any]
    label: Callable[[Any], str]

    @property
    def bundled(self) -> bool:
        """An :class:`~shardkit.train.MLP` or :class:`~shardkit.train.Logistic`."""
        return self.kind == "shardkit"


def _module_of(name: str, attr: str) -> Any:
    """``name.attr`` if the library is already imported (a user's module implies it is)."""
    module = sys.modules.get(name)
    return getattr(module, attr, None) if module is not None else None


def _label(path: Any) -> str:
    return f"parameter {jax.tree_util.keystr(path)}"


def _placed(params: Any) -> Callable[[Any, Any], Any]:
    def draw(key: Any, shardings: Any) -> Any:
        del key  # the caller's values are the initial parameters
        return jax.device_put(params, shardings)

    return draw


def _check_leaves(where: str, params: Any) -> Any:
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    if not flat:
        raise ValueError(f"{where}: the model has no parameters (its pytree has no leaves)")
    for path, leaf in flat:
        dtype = getattr(leaf, "dtype", None)
        if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
            raise TypeError(
                f"{where}: parameter {jax.tree_util.keystr(path)} is {type(leaf).__name__}"
                f"{f' of dtype {dtype}' if dtype is not None else ''}; every leaf of a "
                "parameter pytree must be a floating-point array (keep other values in the "
                "loss function's closure)"
            )
    return jax.eval_shape(lambda p: p, params)


def _no_loss(params: Any, batch: Any) -> jax.Array:
    del params, batch
    return jnp.zeros(())


def _check_loss(where: str, kind: str, loss: Any, need: bool = True) -> LossFn:
    if loss is None and not need:  # a layout only: the loss is never called
        return _no_loss
    if not callable(loss):
        raise TypeError(
            f"{where}: a {kind} model needs loss=, a function loss(model, batch) -> scalar "
            f"(got loss={loss!r}), e.g. loss=lambda p, b: jnp.mean((apply(p, b[0]) - b[1])**2)"
        )
    return cast(LossFn, loss)


def as_trainable(where: str, model: Any, loss: Any = None, *, need_loss: bool = True) -> Trainable:
    """``model`` (and ``loss`` for a user model) as a :class:`Trainable`.

    Raises:
      TypeError: ``loss`` is missing for a user model or given for a bundled one; a
        parameter leaf is not a floating-point array.
      ValueError: a parameter pytree without leaves.
    """
    if isinstance(model, Model):
        if loss is not None:
            raise TypeError(
                f"{where}: {type(model).__name__} has its own loss; pass loss= only with "
                "a parameter pytree, an Equinox module or a Flax NNX module"
            )
        return _bundled(model)
    if isinstance(model, Layers):
        return _layers(where, model, _check_loss(where, "Layers", loss, need_loss))
    nnx_module = _module_of("flax.nnx", "Module")
    if nnx_module is not None and isinstance(model, nnx_module):
        return _nnx(where, model, _check_loss(where, "Flax NNX", loss, need_loss))
    eqx_module = _module_of("equinox", "Module")
    if eqx_module is not None and isinstance(model, eqx_module):
        return _equinox(where, model, _check_loss(where, "Equinox", loss, need_loss))
    leaves = jax.tree.leaves(model)
    lone = len(leaves) == 1 and leaves[0] is model and not hasattr(model, "dtype")
    if not leaves or lone or (need_loss and loss is None and not _is_params(model)):
        raise TypeError(
            f"{where}: model={model!r} ({type(model).__name__}) must be a shardkit.train.MLP "
            "or Logistic, e.g. shardkit.train.MLP((784, 1024, 10)), or your own model: a "
            "parameter pytree, an Equinox module or a Flax NNX module, with loss="
        )
    fn = _check_loss(where, "parameter-pytree", loss, need_loss)
    abstract = _check_leaves(where, model)
    return Trainable(
        "pytree",
        model,
        abstract,
        lambda p, batch, hooks: fn(p, batch),
        _placed(model),
        lambda p: p,
        _label,
    )


def _is_params(model: Any) -> bool:
    return all(hasattr(leaf, "dtype") for leaf in jax.tree.leaves(model))


def _bundled(model: Model) -> Trainable:
    abstract = tuple(
        {k: jax.ShapeDtypeStruct(s, model.dtype) for k, s in layer.items()}
        for layer in model.param_shapes()
    )

    def label(path: Any) -> str:
        index, name = (getattr(k, "idx", getattr(k, "key", k)) for k in path)
        return f"layer {index} {name}"

    return Trainable(
        "shardkit",
        model,
        abstract,
        model.loss,
        lambda key, shardings: model.init(key, shardings),
        lambda p: p,
        label,
    )


def _equinox(where: str, model: Any, loss: LossFn) -> Trainable:
    import equinox as eqx

    params, static = eqx.partition(model, eqx.is_inexact_array)
    abstract = _check_leaves(where, params)

    def rebuild(p: Any) -> Any:
        return eqx.combine(p, static)

    return Trainable(
        "equinox",
        model,
        abstract,
        lambda p, batch, hooks: loss(rebuild(p), batch),
        _placed(params),
        rebuild,
        _label,
    )


def _nnx(where: str, model: Any, loss: LossFn) -> Trainable:
    from flax import nnx

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    abstract = _check_leaves(where, params)

    def rebuild(p: Any) -> Any:
        return nnx.merge(graphdef, p, rest)

    return Trainable(
        "nnx",
        model,
        abstract,
        lambda p, batch, hooks: loss(rebuild(p), batch),
        _placed(params),
        rebuild,
        _label,
    )


def _layers(where: str, model: Layers, loss: LossFn) -> Trainable:
    """A :class:`Layers` model: one parameter pytree per layer, ``loss(outputs, targets)``."""
    parts = [layer_parts(layer) for layer in model.layers]
    params = tuple(part.params for part in parts)
    abstract = _check_leaves(where, params)

    def rebuild(p: Any) -> Layers:
        return Layers(tuple(part.rebuild(q) for part, q in zip(parts, p, strict=True)), model.apply)

    def layers_loss(p: Any, batch: Any, hooks: Any) -> jax.Array:
        del hooks
        x, y = batch
        return loss(rebuild(p)(x), y)

    return Trainable("layers", model, abstract, layers_loss, _placed(params), rebuild, _label)
