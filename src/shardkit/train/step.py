"""``make_train_step``: a jitted training step with explicit shardings, and its first state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from jax.sharding import Mesh

from shardkit.train.models import Model, Params
from shardkit.train.strategies import strategy_layout

__all__ = ["TrainState", "make_train_step"]


class TrainState(NamedTuple):
    """The training state: parameters and optimizer state (a pytree).

    Attributes:
      params: one ``{"w", "b"}`` dict per layer.
      opt_state: the optax optimizer's state.
    """

    params: Params
    opt_state: Any


Batch = tuple[jax.Array, jax.Array]
StepFn = Callable[[TrainState, Batch], tuple[TrainState, jax.Array]]


def _require_optax() -> Any:
    try:
        import optax
    except ImportError as e:  # pragma: no cover - optax is in the train extra
        raise ImportError("shardkit.train needs optax: pip install 'shardkit[train]'") from e
    return optax


def make_train_step(
    model: Model,
    optimizer: Any,
    /,
    *,
    strategy: str,
    mesh: Mesh | None,
    key: jax.Array,
) -> tuple[StepFn, TrainState]:
    """A jitted ``step(state, (x, y)) -> (state, loss)`` for a strategy, and the first state.

    The step is ``jax.jit`` with explicit ``in_shardings`` and ``out_shardings`` from
    :func:`~shardkit.train.strategy_layout`: the parameters and optimizer state keep
    their strategy's sharding across steps, the batch arrives split as
    ``strategy_layout(...).batch`` says (NumPy batches are placed there by jit; a
    ``jax.Array`` committed elsewhere must be moved first, with ``jax.device_put``), and
    the loss comes back replicated. The first state is drawn in place with those
    shardings from ``key`` (:mod:`shardkit.random`), so every strategy starts from
    the same parameters. Communication per step is the strategy's (see
    :mod:`shardkit.train.strategies`); ``shardkit.comms(step, state, batch)`` shows it.

    On a mesh with Explicit axes the state, batch and loss live on that mesh (their
    shardings are part of their types) and the step's body runs under
    ``jax.sharding.auto_axes``, which views the axes as Auto: ``with_sharding_constraint``
    accepts only Auto axes, and this way the program, its communication and its losses
    are exactly those of the same mesh with Auto axes. Entering and leaving the Auto
    region reshards to the same specs, which moves nothing.

    Args:
      model: an :class:`~shardkit.train.MLP` or :class:`~shardkit.train.Logistic`.
      optimizer: an optax ``GradientTransformation`` (e.g. ``optax.sgd(0.05)``).
      strategy: ``single``, ``dp``, ``fsdp``, ``tp`` or ``dp_tp``.
      mesh: a mesh with Auto or Explicit axes (``dp_tp`` needs 2-D); may be None
        for ``single``.
      key: the PRNG key of the initial parameters.

    Returns:
      ``(step, state)``.

    Raises:
      ValueError: unknown strategy, or a mesh that does not fit (see
        :func:`~shardkit.train.strategy_layout`).
      NotImplementedError: a mesh with Manual axes.
      ImportError: optax is missing (the ``train`` extra).

    Example:
      >>> import optax
      >>> m = shardkit.mesh("4x2", "data,model")  # Explicit axes; "auto" works alike
      >>> model = shardkit.train.MLP((16, 32, 32, 8))
      >>> step, state = shardkit.train.make_train_step(
      ...     model, optax.sgd(0.01), strategy="dp_tp", mesh=m, key=jax.random.key(0))
      >>> layout = shardkit.train.strategy_layout(model, strategy="dp_tp", mesh=m)
      >>> batch = model.batch(jax.random.key(1), 32, layout.batch)
      >>> state, loss0 = step(state, batch)
      >>> state, loss1 = step(state, batch)
      >>> bool(loss1 < loss0), jax.typeof(state.params[0]["w"])
      (True, ShapedArray(float32[16,32@model]))
    """
    optax = _require_optax()
    layout = strategy_layout(model, strategy=strategy, mesh=mesh)
    params = model.init(key, layout.params)
    opt_shardings = layout.opt_state(optimizer, params)
    opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(params)
    state_shardings = TrainState._make((layout.params, opt_shardings))
    grad_shardings = layout.param_constraints()

    def loss_fn(p: Params, batch: Batch) -> jax.Array:
        return model.loss(p, batch, layout)

    def step(state: TrainState, batch: Batch) -> tuple[TrainState, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
        grads = jax.lax.with_sharding_constraint(grads, grad_shardings)
        updates, new_opt = optimizer.update(grads, state.opt_state, state.params)
        return TrainState(optax.apply_updates(state.params, updates), new_opt), loss

    step.__name__ = f"train_step_{strategy}"
    body: Callable[..., Any] = step
    if layout.explicit:
        body = jax.sharding.auto_axes(step, out_sharding=(state_shardings, layout.replicated))
    jitted = jax.jit(
        body,
        in_shardings=(state_shardings, (layout.batch, layout.batch)),
        out_shardings=(state_shardings, layout.replicated),
    )
    return jitted, TrainState(params, opt_state)
