"""The seeds' models as stacks of dense layers: the MLP of seed 004 and the logistic model of 001.

A model here is a chain of dense layers ``h = act(h @ w + b)``. Its parameters are a
tuple with one ``{"w": (n_in, n_out), "b": (n_out,)}`` dict per layer, so that a
training strategy can give every layer its own sharding (see
:mod:`shardkit.train`) and ask for a hook between layers: ``apply`` calls
``hooks.param(i, name, value)`` before using a parameter (fsdp gathers it there) and
``hooks.activation(i, h)`` on each layer's output (tp constrains it there).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Sharding

from shardkit import random as sk_random
from shardkit._programs import cached
from shardkit._typing import DTypeLike, PyTree
from shardkit.layout.internal import as_count, check_key, is_int
from shardkit.train._rules import MODEL, Rules

__all__ = ["MLP", "Hooks", "Logistic", "Model", "Params", "tp_roles"]

Params = tuple[dict[str, jax.Array], ...]
"""One ``{"w": ..., "b": ...}`` dict per dense layer."""


class Hooks(Protocol):
    """What a strategy may do to parameters and activations inside the forward pass."""

    def param(self, layer: int, name: str, value: jax.Array, /) -> jax.Array:
        """Return the parameter as the layer should use it (e.g. gathered)."""
        ...

    def activation(self, layer: int, value: jax.Array, /) -> jax.Array:
        """Return the layer's pre-activation output, possibly constrained."""
        ...


Role = Literal["replicated", "column", "row"]


def tp_roles(num_layers: int) -> tuple[Role, ...]:
    """Column/row roles of consecutive layer pairs; an unpaired last layer is replicated.

    Example:
      >>> tp_roles(3)
      ('column', 'row', 'replicated')
    """
    pair: tuple[Role, ...] = ("column", "row")
    last: tuple[Role, ...] = ("replicated",)
    return pair * (num_layers // 2) + last * (num_layers % 2)


_TP_TEMPLATES: dict[Role, dict[str, tuple[Any, ...]]] = {
    "column": {"w": (None, MODEL), "b": (MODEL,)},
    "row": {"w": (MODEL, None), "b": ()},
    "replicated": {"w": (), "b": ()},
}


class _NoHooks:
    def param(self, layer: int, name: str, value: jax.Array, /) -> jax.Array:
        del layer, name
        return value

    def activation(self, layer: int, value: jax.Array, /) -> jax.Array:
        del layer
        return value


def _check_sizes(where: str, sizes: Sequence[int]) -> tuple[int, ...]:
    if isinstance(sizes, str) or not isinstance(sizes, Sequence | np.ndarray):
        raise TypeError(
            f"{where}: layer_sizes={sizes!r} ({type(sizes).__name__}) must be a sequence of "
            "layer widths (inputs, ..., outputs), e.g. (784, 1024, 1024, 10)"
        )
    given = tuple(sizes)
    if len(given) < 2 or not all(is_int(n) and n > 0 for n in given):
        raise ValueError(
            f"{where}: layer_sizes={given!r} must hold at least two positive integers "
            "(inputs, ..., outputs), e.g. (784, 1024, 1024, 10)"
        )
    return tuple(operator.index(n) for n in given)  # NumPy integers become ints


@dataclass(frozen=True)
class Model:
    """A chain of dense layers; see :class:`MLP` and :class:`Logistic`.

    Attributes:
      layer_sizes: ``(inputs, hidden..., outputs)``.
      dtype: parameter and data dtype.
    """

    layer_sizes: tuple[int, ...]
    dtype: DTypeLike = jnp.float32

    @property
    def num_layers(self) -> int:
        """The number of dense layers."""
        return len(self.layer_sizes) - 1

    def param_shapes(self) -> tuple[dict[str, tuple[int, ...]], ...]:
        """``({"w": (n_in, n_out), "b": (n_out,)}, ...)``, one dict per layer."""
        pairs = zip(self.layer_sizes[:-1], self.layer_sizes[1:], strict=True)
        return tuple({"w": (i, o), "b": (o,)} for i, o in pairs)

    def partition_rules(self, strategy: str, parts: int, /) -> Rules:
        """The path rules (:data:`~shardkit.train.Rules`) of every layer under ``strategy``.

        ``tp``/``dp_tp``: layers in column/row pairs (``tp_roles``); ``fsdp``: each
        parameter split along its first dimension that ``parts`` divides.

        Example:
          >>> [t for _, t in shardkit.train.MLP((4, 8, 2)).partition_rules("tp", 2)]
          [(None, 'model'), ('model',), ('model', None), ()]
        """
        rules: list[tuple[str, Any]] = []
        for i, layer in enumerate(self.param_shapes()):
            role = tp_roles(self.num_layers)[i]
            for name, shape in layer.items():
                if strategy in ("tp", "dp_tp"):
                    template = _TP_TEMPLATES[role][name]
                elif strategy == "fsdp":
                    dim = next((d for d, n in enumerate(shape) if n % parts == 0), None)
                    template = () if dim is None else (None,) * dim + (MODEL,)
                else:
                    template = ()
                rules.append((rf"^\[{i}\]\['{name}'\]$", template))
        return tuple(rules)

    def init(self, key: jax.Array, /, shardings: PyTree = None) -> Params:
        """Initial parameters, each drawn in place with its sharding (None: one device).

        The values do not depend on ``shardings`` (see :mod:`shardkit.random`), so
        every strategy starts from the same point.
        """
        key = check_key(f"{type(self).__name__}.init", "key", key)
        if shardings is None:
            one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
            shardings = tuple(dict.fromkeys(layer, one) for layer in self.param_shapes())
        frozen = tuple(tuple(sorted(layer.items())) for layer in shardings)
        with jax.threefry_partitionable(True):
            return _init_program(self, frozen)(key)

    def _init_layer(
        self, key: jax.Array, shapes: dict[str, tuple[int, ...]], shardings: dict[str, Sharding]
    ) -> dict[str, jax.Array]:
        raise NotImplementedError

    def apply(self, params: Params, x: jax.Array, /, hooks: Hooks | None = None) -> jax.Array:
        """The model's output for inputs ``x``."""
        raise NotImplementedError

    def loss(
        self, params: Params, batch: tuple[jax.Array, jax.Array], /, hooks: Hooks | None = None
    ) -> jax.Array:
        """The mean loss over ``batch = (inputs, targets)``."""
        raise NotImplementedError

    def batch(
        self, key: jax.Array, batch_size: int, /, sharding: Sharding | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """A synthetic ``(inputs, targets)`` batch as in the seed, drawn in place."""
        raise NotImplementedError


@cached
def _init_program(model: Model, shardings: tuple[tuple[tuple[str, Sharding], ...], ...]) -> Any:
    """One jitted program drawing every layer (compiled once per model and layout).

    The shardkit.random draws inside it act as constraints, so each device draws only
    its own blocks of every parameter.
    """
    shapes = model.param_shapes()
    layers = tuple(dict(layer) for layer in shardings)

    def draw(k: jax.Array) -> Params:
        keys = jax.random.split(k, len(shapes))
        return tuple(
            model._init_layer(ki, shape, si)
            for ki, shape, si in zip(keys, shapes, layers, strict=True)
        )

    return jax.jit(draw, out_shardings=layers)


def _dense(params: Params, x: jax.Array, hooks: Hooks, final: Any) -> jax.Array:
    h = x
    last = len(params) - 1
    for i, layer in enumerate(params):
        w, b = hooks.param(i, "w", layer["w"]), hooks.param(i, "b", layer["b"])
        h = hooks.activation(i, h @ w + b)
        h = final(h) if i == last else jax.nn.relu(h)
    return h


@cached
def _batch_program(model: Any, batch_size: int, s: Sharding) -> Any:
    # One compiled draw per (model, batch size, layout): a fresh closure per call
    # would retrace and recompile every batch (1.5-2.7 s each on 2 cores).
    return jax.jit(lambda k: model._draw(k, batch_size, s), out_shardings=(s, s))


def _draw_batch(
    model: Any, key: jax.Array, batch_size: int, sharding: Sharding | None
) -> tuple[jax.Array, jax.Array]:
    where = f"{type(model).__name__}.batch"
    key = check_key(where, "key", key)
    batch_size = as_count(where, "batch_size", batch_size, minimum=1, fix="e.g. 64")
    s = sharding or jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with jax.threefry_partitionable(True):
        return _batch_program(model, batch_size, s)(key)


@dataclass(frozen=True)
class MLP(Model):
    """Seed 004's multi-layer perceptron: relu between layers, mean squared error.

    Seed 004 uses ``(784, 8192, 8192, 8192, 10)`` with batch 8192; the default here
    fits a laptop. Weights are ``N(0, 1/n_in)``, biases ``N(0, 1)`` as in the seed;
    the loss is ``mean(sum((pred - target)**2, axis=-1))``.

    Example:
      >>> model = shardkit.train.MLP((4, 8, 2))
      >>> params = model.init(jax.random.key(0))
      >>> [tuple(layer["w"].shape) for layer in params], params[0]["w"].dtype
      ([(4, 8), (8, 2)], dtype('float32'))
      >>> x, y = model.batch(jax.random.key(1), 16)
      >>> float(model.loss(params, (x, y))) > 0
      True
    """

    layer_sizes: tuple[int, ...] = (784, 1024, 1024, 10)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer_sizes", _check_sizes("MLP", self.layer_sizes))

    def _init_layer(
        self, key: jax.Array, shapes: dict[str, tuple[int, ...]], shardings: dict[str, Sharding]
    ) -> dict[str, jax.Array]:
        kw, kb = jax.random.split(key)
        n_in = shapes["w"][0]
        w = sk_random.normal(kw, shapes["w"], out_sharding=shardings["w"], dtype=self.dtype)
        w = w * jnp.asarray(1.0 / n_in**0.5, self.dtype)
        b = sk_random.normal(kb, shapes["b"], out_sharding=shardings["b"], dtype=self.dtype)
        return {"w": w, "b": b}

    def apply(self, params: Params, x: jax.Array, /, hooks: Hooks | None = None) -> jax.Array:
        """The network's output (no activation on the last layer)."""
        return _dense(params, x, hooks or _NoHooks(), lambda h: h)

    def loss(
        self, params: Params, batch: tuple[jax.Array, jax.Array], /, hooks: Hooks | None = None
    ) -> jax.Array:
        """``mean(sum((apply(x) - y)**2, axis=-1))``."""
        x, y = batch
        pred = self.apply(params, x, hooks)
        return jnp.mean(jnp.sum((pred - y) ** 2, axis=-1))

    def batch(
        self, key: jax.Array, batch_size: int, /, sharding: Sharding | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Normal inputs and normal targets, as seed 004 draws them."""
        return _draw_batch(self, key, batch_size, sharding)

    def _draw(self, k: jax.Array, batch_size: int, s: Sharding) -> tuple[jax.Array, jax.Array]:
        n_in, n_out = self.layer_sizes[0], self.layer_sizes[-1]
        kx, ky = jax.random.split(k)
        x = sk_random.normal(kx, (batch_size, n_in), out_sharding=s, dtype=self.dtype)
        return x, sk_random.normal(ky, (batch_size, n_out), out_sharding=s, dtype=self.dtype)


@dataclass(frozen=True)
class Logistic(Model):
    """Seed 001's logistic model: ``sigmoid(x @ w + b)`` with a squared-error loss.

    Parameters start at zero (as in the seed); labels are ``x @ w_true > 0`` for a
    random ``w_true``.

    Example:
      >>> model = shardkit.train.Logistic(features=32)
      >>> params = model.init(jax.random.key(0))
      >>> params[0]["w"].shape, float(params[0]["w"].sum())
      ((32, 1), 0.0)
    """

    layer_sizes: tuple[int, ...] = (32, 1)
    features: int | None = None

    def __post_init__(self) -> None:
        sizes = (self.features, 1) if self.features is not None else self.layer_sizes
        sizes = _check_sizes("Logistic", sizes)
        if len(sizes) != 2 or sizes[1] != 1:
            raise ValueError(
                f"Logistic: layer_sizes={sizes!r} must be (features, 1); use MLP for more layers"
            )
        object.__setattr__(self, "layer_sizes", sizes)
        object.__setattr__(self, "features", sizes[0])

    def _init_layer(
        self, key: jax.Array, shapes: dict[str, tuple[int, ...]], shardings: dict[str, Sharding]
    ) -> dict[str, jax.Array]:
        del key, shardings
        return {k: jnp.zeros(shape, self.dtype) for k, shape in shapes.items()}

    def apply(self, params: Params, x: jax.Array, /, hooks: Hooks | None = None) -> jax.Array:
        """Probabilities ``sigmoid(x @ w + b)``, shape ``(batch, 1)``."""
        return _dense(params, x, hooks or _NoHooks(), jax.nn.sigmoid)

    def loss(
        self, params: Params, batch: tuple[jax.Array, jax.Array], /, hooks: Hooks | None = None
    ) -> jax.Array:
        """``mean((sigmoid(x @ w + b) - y)**2)`` as in the seed."""
        x, y = batch
        return jnp.mean((self.apply(params, x, hooks) - y) ** 2)

    def batch(
        self, key: jax.Array, batch_size: int, /, sharding: Sharding | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Normal inputs and labels ``x @ w_true > 0`` (``w_true`` from ``key`` too)."""
        return _draw_batch(self, key, batch_size, sharding)

    def _draw(self, k: jax.Array, batch_size: int, s: Sharding) -> tuple[jax.Array, jax.Array]:
        d = self.layer_sizes[0]
        kx, kw = jax.random.split(k)
        x = sk_random.normal(kx, (batch_size, d), out_sharding=s, dtype=self.dtype)
        w_true = jax.random.normal(kw, (d, 1), self.dtype)
        return x, (x @ w_true > 0).astype(self.dtype)
