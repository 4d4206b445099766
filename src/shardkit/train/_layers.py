"""``Layers``: a user model given as a sequence of same-structured layers.

Pipeline parallelism (``pp``, ``dp_pp``) cuts a model between layers, so it needs the
model as layers: each a parameter pytree (with ``apply(layer, h) -> h``), an Equinox
module or a Flax NNX module (called as ``layer(h)``). The loss then reads the last
layer's output: ``loss(outputs, targets)``, a mean over the examples. The same object
trains under every other strategy too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from shardkit._typing import PyTree

__all__ = ["LayerParts", "Layers", "layer_parts", "same_structure"]


@dataclass(frozen=True, eq=False)
class Layers:
    """A model as a sequence of same-structured layers, ``h = apply(layer, h)`` in turn.

    Pass it to :func:`~shardkit.train.make_train_step` with
    ``loss=lambda outputs, targets: ...`` (a mean over the examples) and batches
    ``(inputs, targets)``. Under ``pp`` and ``dp_pp`` each stage holds a contiguous
    run of layers; the layers must then share their parameters' structure and
    shapes, and keep the activation's shape (as transformer blocks do).

    Attributes:
      layers: the layers: parameter pytrees, Equinox modules or Flax NNX modules.
      apply: ``apply(layer, h) -> h``; by default ``layer(h)`` (modules are callable).

    Example:
      >>> import optax
      >>> rng = np.random.default_rng(0)
      >>> blocks = [{"w": rng.normal(size=(8, 8)).astype(np.float32) / 3} for _ in range(4)]
      >>> model = shardkit.train.Layers(blocks, apply=lambda p, h: jnp.tanh(h @ p["w"]))
      >>> mse = lambda out, y: jnp.mean((out - y) ** 2)
      >>> step, state = shardkit.train.make_train_step(
      ...     model, optax.sgd(0.1), strategy="pp", mesh=shardkit.mesh("4", "stage"),
      ...     loss=mse, microbatches=4, schedule="1f1b")
      >>> state.params["w"].shape  # (stages, layers per stage, 8, 8)
      (4, 1, 8, 8)
      >>> x = y = rng.normal(size=(16, 8)).astype(np.float32)
      >>> float(mse(model(x), y)) > 0  # the whole stack, on one device
      True

      ``step(state, (x, y))`` then trains it, 4 microbatches of 4 through 4 stages.
    """

    layers: Sequence[PyTree]
    apply: Callable[[PyTree, jax.Array], jax.Array] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.layers, str | bytes) or not isinstance(self.layers, Sequence):
            raise TypeError(
                f"Layers: layers={self.layers!r} ({type(self.layers).__name__}) must be a "
                "sequence (list or tuple) of layers: parameter pytrees or modules"
            )
        if not self.layers:
            raise ValueError("Layers: layers=[] holds no layers; pass at least one")
        object.__setattr__(self, "layers", tuple(self.layers))
        if self.apply is None and not all(callable(layer) for layer in self.layers):
            raise TypeError(
                "Layers: apply= is needed for layers that are not callable (parameter "
                "pytrees): pass apply=lambda layer, h: ..., e.g. "
                "lambda p, h: jnp.tanh(h @ p['w'] + p['b'])"
            )
        if self.apply is not None and not callable(self.apply):
            raise TypeError(f"Layers: apply={self.apply!r} must be callable (layer, h) -> h")

    def __call__(self, x: jax.typing.ArrayLike, /) -> jax.Array:
        """The last layer's output for inputs ``x``."""
        h = jnp.asarray(x)
        for layer in self.layers:
            h = self.call(layer, h)
        return h

    def call(self, layer: PyTree, h: jax.Array, /) -> jax.Array:
        """One layer's output: ``apply(layer, h)``, or ``layer(h)``."""
        return self.apply(layer, h) if self.apply is not None else layer(h)


@dataclass(frozen=True, eq=False)
class LayerParts:
    """A layer's trainable parameters and the way back to the layer.

    Attributes:
      params: the trainable arrays (a pytree).
      rebuild: ``rebuild(params)``: the layer with these parameters.
    """

    params: Any
    rebuild: Callable[[Any], Any]


def _module_class(name: str, attr: str) -> Any:
    module = sys.modules.get(name)
    return getattr(module, attr, None) if module is not None else None


def layer_parts(layer: Any) -> LayerParts:
    """Split a layer into its trainable parameters and the rest.

    Equinox modules train their inexact arrays, NNX modules their ``nnx.Param``
    variables, pytrees every leaf.
    """
    nnx_module = _module_class("flax.nnx", "Module")
    if nnx_module is not None and isinstance(layer, nnx_module):
        from flax import nnx

        graphdef, params, rest = nnx.split(layer, nnx.Param, ...)
        return LayerParts(params, lambda p: nnx.merge(graphdef, p, rest))
    eqx_module = _module_class("equinox", "Module")
    if eqx_module is not None and isinstance(layer, eqx_module):
        import equinox as eqx

        params, static = eqx.partition(layer, eqx.is_inexact_array)
        return LayerParts(params, lambda p: eqx.combine(p, static))
    return LayerParts(layer, lambda p: p)


def same_structure(where: str, parts: Sequence[LayerParts]) -> None:
    """Raise ``ValueError`` unless every layer's parameters match the first's structure and shapes."""
    first = parts[0].params
    structure = jax.tree.structure(first)
    shapes = [jnp.shape(v) for v in jax.tree.leaves(first)]
    for i, part in enumerate(parts[1:], start=1):
        if jax.tree.structure(part.params) != structure:
            raise ValueError(
                f"{where}: layer {i}'s parameters are {jax.tree.structure(part.params)}, but "
                f"layer 0's are {structure}; a pipeline stacks the layers, so give them "
                "one structure (keep an embedding or a head in the loss or a separate layer "
                "of the same structure)"
            )
        for (path, value), want in zip(
            jax.tree_util.tree_flatten_with_path(part.params)[0], shapes, strict=True
        ):
            if jnp.shape(value) != want:
                raise ValueError(
                    f"{where}: layer {i}'s parameter {jax.tree_util.keystr(path)} has shape "
                    f"{jnp.shape(value)}, but layer 0's has {want}; pipeline stages stack "
                    "same-shaped layers: give every layer the same widths"
                )
