"""``make_train_step``: a jitted training step with explicit shardings, and its first state."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from shardkit._typing import PyTree
from shardkit.layout.internal import check_key, check_same_devices, is_traced
from shardkit.train._adapters import Trainable, as_trainable
from shardkit.train._muon import layout_scope
from shardkit.train._opt_state import check_same_structure, require_optax
from shardkit.train._pipeline import Pipeline, bind_pipeline
from shardkit.train._rules import Rules
from shardkit.train._schedule import Schedule
from shardkit.train._strategies import StrategyLayout, _auto_view, _is_sharding, strategy_layout

if TYPE_CHECKING:
    import optax

__all__ = ["NONFINITE", "NonFinite", "TrainState", "make_train_step"]


class TrainState(NamedTuple):
    """The training state: parameters, optimizer state and two step counts (a pytree).

    Attributes:
      params: the trainable parameters: one ``{"w", "b"}`` dict per layer of a bundled
        model, the caller's pytree, the floating arrays of an Equinox module
        (``eqx.partition``) or the ``nnx.Param`` state of an NNX module (``nnx.split``);
        ``step.model(state.params)`` rebuilds the caller's kind of model.
      opt_state: the optax optimizer's state.
      step: how many steps this state has been through, skipped ones included (an
        int32 scalar, replicated).
      skipped: how many of them were skipped because their loss or gradients were not
        finite (``on_nonfinite="skip"``; an int32 scalar, replicated).
    """

    params: PyTree
    opt_state: PyTree
    step: PyTree  # an int32 scalar; PyTree since the same tuple carries shardings too
    skipped: PyTree


NonFinite = Literal["skip", "raise", "apply"]
"""What a training step does when its loss or a gradient is NaN or infinite."""

NONFINITE: tuple[str, ...] = get_args(NonFinite)


Batch = tuple[jax.Array, jax.Array]
StepFn = Callable[[TrainState, Any], tuple[TrainState, jax.Array]]


def make_train_step(
    model: PyTree,
    optimizer: optax.GradientTransformation,
    /,
    *,
    strategy: str,
    mesh: Mesh | None = None,
    key: jax.Array | None = None,
    loss: Callable[[PyTree, PyTree], jax.Array] | None = None,
    rules: Rules | None = None,
    on_nonfinite: NonFinite = "skip",
    microbatches: int | None = None,
    schedule: Schedule | None = None,
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
    :mod:`shardkit.train`); ``shardkit.comms(step, state, batch)`` shows it.

    On a mesh with Explicit axes the state, batch and loss live on that mesh (their
    shardings are part of their types) and the step's body runs under
    ``jax.sharding.auto_axes``, which views the axes as Auto: ``with_sharding_constraint``
    accepts only Auto axes, and this way the program, its communication and its losses
    are exactly those of the same mesh with Auto axes. Entering and leaving the Auto
    region reshards to the same specs, which moves nothing.

    Your own model trains the same way: pass its parameters (any pytree of
    floating-point arrays), an Equinox module or a Flax NNX module as ``model`` and
    ``loss(model, batch) -> scalar``; the model's values are the initial parameters,
    placed with the strategy's shardings, and ``batch`` may be any pytree whose
    leaves share their first (batch) dimension. Which dimension of each parameter a
    strategy splits comes from path rules (``rules=``, :data:`~shardkit.train.Rules`).

    Args:
      model: an :class:`~shardkit.train.MLP` or :class:`~shardkit.train.Logistic`;
        or a parameter pytree, an Equinox module or a Flax NNX module with ``loss``.
      optimizer: any optax optimizer: a ``GradientTransformation`` (e.g.
        ``optax.sgd(0.05)``, ``optax.multi_transform``, ``optax.contrib.muon``), or an
        object with optax's ``init`` and ``update`` (``optax.MultiSteps``). Its state
        is sharded like the parameters it mirrors (a leaf whose path ends with a
        parameter's path and has its shape), other leaves with dimensions are split
        under ``fsdp``, and scalars and counts are replicated. An ``update`` that takes
        keyword arguments gets ``value`` (the loss), ``grad`` and ``value_fn`` (the
        loss of given parameters on this batch), as ``optax.lbfgs`` and
        ``optax.contrib.reduce_on_plateau`` need.
      strategy: ``single``, ``dp``, ``fsdp``, ``tp``, ``dp_tp``, ``pp`` or ``dp_pp``.
      mesh: a mesh with Auto or Explicit axes (``dp_tp`` and ``dp_pp`` need 2-D,
        ``pp`` 1-D); None (the default) takes the mesh set with ``jax.set_mesh``,
        and ``single`` needs none.
      key: the PRNG key of the initial parameters of a bundled model (a user model
        brings its own values).
      loss: ``loss(params_or_module, batch) -> scalar`` of a user model.
      rules: ``(regex, template)`` path rules (see :func:`~shardkit.train.strategy_layout`).
      on_nonfinite: what a step whose loss or gradients hold a NaN or an infinity does.
        ``"skip"`` (the default, as ``optax.apply_if_finite``): the parameters and the
        optimizer state stay as they were, the returned loss is the non-finite one and
        ``state.skipped`` counts the step. ``"raise"``: the same, and the call then
        raises ``FloatingPointError`` naming the step (``state.step``); it waits for
        each step's result, and inside an outer ``jax.jit`` it cannot raise and acts as
        ``"skip"``. ``"apply"``: the update is applied whatever it holds (NaN
        parameters from then on), and nothing is tested. The test costs no communication where the
        gradients are whole (dp; fsdp on CPU) and one boolean per split gradient in
        one all-reduce where they stay split (tp, dp_tp, pp, dp_pp).
      microbatches: ``pp`` and ``dp_pp``: how many microbatches each data shard's
        batch is cut into (default: the number of stages); it must divide it.
      schedule: ``pp`` and ``dp_pp``: ``"gpipe"`` (all forwards, then all backwards;
        activations of every microbatch held) or ``"1f1b"`` (the default: one forward,
        one backward; at most one microbatch per stage in flight per later stage).
        Both leave ``(S-1)/(M+S-1)`` of a stage's time idle (the bubble).

    Pipeline parallelism (``pp``, ``dp_pp``) takes the bundled MLP, or your model as a
    :class:`~shardkit.train.Layers` of same-structured layers with
    ``loss(outputs, targets)``. ``state.params`` then holds the layers stacked by
    stage (leaves ``(stages, layers per stage, ...)``, split over the stage axis, the
    MLP's narrower layers padded with zeros); the optimizer updates them as they are,
    which for elementwise optimizers (sgd, adam, adamw, ...) and global-norm clipping
    equals updating the layers one by one. An optimizer that treats a parameter as a
    matrix (``optax.contrib.muon``, adafactor's factored moments) sees each stacked
    ``(stages, layers, ...)`` leaf instead, and gives other updates than on one
    device. ``step.model(state.params)`` gives the layers back.

    Returns:
      ``(step, state)``: ``state.step`` and ``state.skipped`` start at 0. Under ``pp``
      and ``dp_pp``, ``step.pipeline`` holds the stages (``.plan.bounds``), the
      schedule (``.schedule.timeline()``, ``.schedule.bubble``) and
      ``.describe(batch_size)``, the report's lines; it is None for the other strategies.

    The step checks its state (the parameters' shapes and shardings are this model's
    and strategy's: a state from another strategy or mesh must first be read onto
    this one with :func:`~shardkit.train.restore_state`) and each batch before
    running: a pair ``(inputs, targets)`` (a tuple, or a list ``[inputs, targets]``) with
    inputs ``(batch, layer_sizes[0])``, targets ``(batch, layer_sizes[-1])``, at least
    one example, a batch the data axes divide, on the step's devices and layout (a user
    model's batch: leaves with one shared, divisible first dimension).
    Each failure raises ``ValueError`` (``TypeError`` for a batch that is not a pair)
    naming what was wrong and the fix, before anything is compiled.

    Raises:
      FloatingPointError: with ``on_nonfinite="raise"``, from a step whose loss or
        gradients are not finite.
      TypeError: ``model`` is not a model (or a user model without ``loss``),
        ``optimizer`` is not an optax optimizer (a string such as ``"sgd"``
        included) or its state holds a leaf that is not an array (named by its
        path), ``key`` is not a PRNG key.
      ValueError: unknown strategy, ``on_nonfinite`` or ``schedule``, a mesh that does
        not fit (see :func:`~shardkit.train.strategy_layout`), more pipeline stages
        than layers, ``microbatches`` or ``schedule`` with a strategy that is not a
        pipeline, or ``optimizer.init(params)`` fails
        (e.g. ``multi_transform`` labels of another structure; the message names the
        optimizer and the parameters' structure).
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
      >>> int(state.step), int(state.skipped)  # no NaN or inf so far
      (2, 0)

      A parameter pytree with its loss, and a rule for its first kernel:

      >>> params = {"w1": np.ones((4, 16), np.float32), "w2": np.ones((16, 2), np.float32)}
      >>> def mse(p, batch):
      ...     x, y = batch
      ...     return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)
      >>> step, state = shardkit.train.make_train_step(
      ...     params, optax.sgd(0.01), strategy="tp", mesh=m, loss=mse,
      ...     rules=[(r"w1", (None, "model"))])
      >>> state.params["w1"].sharding.spec, state.params["w2"].sharding.spec
      (P(None, ('data', 'model')), P(('data', 'model'), None))
    """
    optax = require_optax()
    t = as_trainable("make_train_step", model, loss)
    _check_optimizer(optimizer)
    _check_nonfinite(on_nonfinite)
    if t.bundled or key is not None:
        key = check_key("make_train_step", "key", key)
    layout = strategy_layout(t, strategy=strategy, mesh=mesh, rules=rules, loss=loss)
    pipe = _pipeline(layout, t, microbatches, schedule)
    if pipe is not None:
        t = pipe.trainable
    first, state_shardings = _first_state(layout, t, optimizer, key)
    grad_shardings = layout.param_constraints()
    takes_extra = _takes_extra_args(optimizer.update)
    check_finite = on_nonfinite != "apply"

    def loss_fn(p: Any, batch: Any) -> jax.Array:
        if not t.bundled:  # the bundled models gather layer by layer, through the hooks
            p = layout.gather_all(p)
        return t.loss(p, batch, layout)

    value_and_grad = pipe.value_and_grad if pipe is not None else jax.value_and_grad(loss_fn)

    def step(state: TrainState, batch: Any) -> tuple[TrainState, jax.Array]:
        loss, raw = value_and_grad(state.params, batch)
        grads = jax.lax.with_sharding_constraint(raw, grad_shardings)
        # Optimizers that take extra arguments (optax.lbfgs, contrib.reduce_on_plateau)
        # get the loss, the gradients and the loss as a function of the parameters.
        extra = (
            {"value": loss, "grad": grads, "value_fn": lambda p: loss_fn(p, batch)}
            if takes_extra
            else {}
        )
        # The flag is read before the gradients are constrained to their split, which lets the
        # compiler test a gradient where it is whole (fsdp on CPU: no communication); a
        # gradient that stays split (tp) costs one boolean in one all-reduce, which
        # shardkit.train.muon's collectives wait for (layout_scope), so none run side by side.
        finite = _all_finite(loss, raw) if check_finite else None
        with layout_scope(layout, after=finite):  # shardkit.train.muon iterates on the shards
            updates, new_opt = optimizer.update(grads, state.opt_state, state.params, **extra)
        check_same_structure(optimizer, state.opt_state, new_opt)
        new_params = optax.apply_updates(state.params, updates)
        if not check_finite:
            return TrainState(new_params, new_opt, state.step + 1, state.skipped), loss
        # As optax.apply_if_finite: a step whose loss or gradients are not finite leaves
        # the parameters and the optimizer state as they were, and is counted.
        assert finite is not None
        kept_params, kept_opt = jax.tree.map(
            lambda new, old: _select(finite, new, old),
            (new_params, new_opt),
            (state.params, state.opt_state),
        )
        skipped = state.skipped + jnp.where(finite, 0, 1).astype(state.skipped.dtype)
        return TrainState(kept_params, kept_opt, state.step + 1, skipped), loss

    step.__name__ = f"train_step_{strategy}"
    body: Callable[..., Any] = step
    if layout.explicit:
        body = jax.sharding.auto_axes(step, out_sharding=(state_shardings, layout.replicated))
    batch_shardings = (layout.batch, layout.batch) if t.bundled else layout.batch
    jitted = jax.jit(
        body,
        in_shardings=(state_shardings, batch_shardings),
        out_shardings=(state_shardings, layout.replicated),
    )
    checked = _CheckedStep(jitted, t, layout, raise_nonfinite=on_nonfinite == "raise", pipe=pipe)
    return checked, first


def _check_nonfinite(on_nonfinite: Any) -> None:
    if on_nonfinite not in NONFINITE:
        raise ValueError(
            f"make_train_step: on_nonfinite={on_nonfinite!r}; choose one of {list(NONFINITE)} "
            "(skip: leave the state as it was and count the step; raise: FloatingPointError "
            "naming the step; apply: apply the update anyway)"
        )


def _first_state(
    layout: StrategyLayout, t: Trainable, optimizer: Any, key: Any
) -> tuple[TrainState, TrainState]:
    """The first state (parameters drawn from ``key``, the optimizer's initial state) and its shardings."""
    params = t.draw(key, layout.params)
    opt_shardings = layout.opt_state(optimizer, params)
    init = optimizer.init
    if layout.explicit:  # as the step: the optimizer's code sees Auto axes
        init = jax.sharding.auto_axes(init, out_sharding=opt_shardings)
    opt_state = jax.jit(init, out_shardings=opt_shardings)(params)
    counts = jax.device_put(np.zeros((), np.int32), layout.replicated)
    state_shardings = TrainState(layout.params, opt_shardings, layout.replicated, layout.replicated)
    return TrainState(params, opt_state, counts, counts), state_shardings


def _pipeline(
    layout: StrategyLayout, t: Trainable, microbatches: Any, schedule: Any
) -> Pipeline | None:
    """``pp``/``dp_pp``: the layout's stages bound to the schedule; else None (after checks)."""
    if layout.pipeline is None:
        if microbatches is not None or schedule is not None:
            given = "microbatches" if microbatches is not None else "schedule"
            raise ValueError(
                f"make_train_step(strategy={layout.strategy!r}): {given}= applies to the "
                "pipeline strategies 'pp' and 'dp_pp' only; leave it out, or choose one"
            )
        return None
    assert layout.mesh is not None  # a pipeline layout always has its mesh
    return bind_pipeline(
        "make_train_step",
        layout.pipeline,
        t,
        microbatches=microbatches,
        schedule="1f1b" if schedule is None else schedule,
        mesh=_auto_view(layout.mesh),
    )


def _check_optimizer(optimizer: Any) -> None:
    if callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None)):
        return
    hint = (
        f"optax.{optimizer}(learning_rate), e.g. optax.{optimizer}(1e-3)"
        if isinstance(optimizer, str) and optimizer in ("sgd", "adam", "adamw")
        else "an optax GradientTransformation, e.g. optax.sgd(0.05) or optax.adam(1e-3)"
    )
    raise TypeError(
        f"make_train_step: optimizer={optimizer!r} ({type(optimizer).__name__}) is not an "
        f"optax optimizer (it needs init and update); pass {hint}"
    )


def _all_finite(loss: jax.Array, grads: Any) -> jax.Array:
    """Whether the loss and every gradient are finite (a replicated boolean)."""
    flags = [jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]
    return functools.reduce(jnp.logical_and, flags, jnp.isfinite(loss))


def _select(flag: jax.Array, new: Any, old: Any) -> Any:
    """``new`` where ``flag`` else ``old``; PRNG keys too (jnp.where would give their data)."""
    if jnp.issubdtype(jnp.result_type(new), jax.dtypes.prng_key):
        return jax.lax.select(flag, new, old)
    return jnp.where(flag, new, old)


def _takes_extra_args(update: Any) -> bool:
    """Whether ``update`` accepts keywords beyond optax's three arguments."""
    try:
        parameters = inspect.signature(update).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _shape(value: Any) -> tuple[int, ...]:
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else tuple(np.shape(value))


class _CheckedStep:
    """The jitted step, with its state and batch checked before each call (and ``lower``).

    The checks read shapes and shardings only, so they cost microseconds per step and
    nothing inside the compiled program. Every other attribute is the jitted function's.
    """

    def __init__(
        self,
        jitted: Any,
        model: Trainable,
        layout: StrategyLayout,
        *,
        raise_nonfinite: bool = False,
        pipe: Pipeline | None = None,
    ) -> None:
        self._jitted = jitted
        self._model = model
        self._layout = layout
        self._raise_nonfinite = raise_nonfinite
        self.pipeline = pipe
        self.__name__ = jitted.__name__
        self.__wrapped__ = jitted

    def __call__(self, state: TrainState, batch: Any, /) -> tuple[TrainState, jax.Array]:
        self._check_state(state)
        batch = self._checked_batch(batch)
        new, loss = self._jitted(state, batch)
        if self._raise_nonfinite and not is_traced(new.skipped):
            self._raise_if_skipped(state, new, loss)
        return new, loss

    def lower(self, state: TrainState, batch: Any, /) -> Any:
        """``jax.jit``'s ``lower``, after the state and batch checks."""
        self._check_state(state)
        return self._jitted.lower(state, self._checked_batch(batch))

    def _checked_batch(self, batch: Any) -> Any:
        """The batch, checked; a bundled model's ``[x, y]`` as the pair ``(x, y)`` jit takes."""
        self._check(batch)
        if self._model.bundled and isinstance(batch, list):
            return tuple(batch)
        return batch

    def _raise_if_skipped(self, state: TrainState, new: TrainState, loss: jax.Array) -> None:
        """``on_nonfinite="raise"``: the step was not applied (it waits for the step)."""
        if int(new.skipped) == int(state.skipped):
            return
        raise FloatingPointError(
            f"{self.__name__}(state, batch): step {int(new.step)} has a non-finite loss "
            f"({float(loss)}) or gradients, and on_nonfinite='raise'; the state passed in "
            "is unchanged. Look for NaN or inf in the batch, lower the learning rate, or "
            "make the step with on_nonfinite='skip' to leave out such steps and count them "
            "(state.skipped)"
        )

    def model(self, params: Any, /) -> Any:
        """The caller's kind of model with ``params`` (e.g. an Equinox or NNX module).

        A bundled model's or a parameter pytree's parameters come back as they are.
        """
        return self._model.rebuild(params)

    def _check_state(self, state: Any) -> None:
        """The parameters have the model's structure, shapes and this strategy's shardings."""
        where = f"{self.__name__}(state, batch)"
        if not isinstance(state, TrainState):
            raise TypeError(
                f"{where}: state is a {type(state).__name__}, not the TrainState of "
                "make_train_step; pass the state it returned (or one restore_state read)"
            )
        fix = (
            "pass the state make_train_step returned for this model and strategy, or read "
            "a saved one onto it with restore_state(path, that_state)"
        )
        t = self._model
        sizes = f" (layer_sizes={t.model.layer_sizes})" if t.bundled else ""
        structure = jax.tree.structure(t.abstract)
        try:
            values = structure.flatten_up_to(state.params)
        except (TypeError, ValueError):
            raise ValueError(
                f"{where}: state.params is {jax.tree.structure(state.params)}, but the step's "
                f"model has {structure}{sizes}; {fix}"
            ) from None
        wanted = jax.tree_util.tree_flatten_with_path(t.abstract)[0]
        targets = jax.tree.leaves(self._layout.params, is_leaf=_is_sharding)
        for (path, abstract), value, target in zip(wanted, values, targets, strict=True):
            name = f"state.params{jax.tree_util.keystr(path)}"
            want, got = tuple(abstract.shape), _shape(value)
            if got != want:
                raise ValueError(
                    f"{where}: {name} has shape {got}, but the step's model needs {want}"
                    f"{sizes}; {fix}"
                )
            if (
                isinstance(value, jax.Array)
                and not is_traced(value)
                and value.committed
                and not value.sharding.is_equivalent_to(target, len(want))
            ):
                raise ValueError(
                    f"{where}: {name} is placed as {value.sharding}, but the "
                    f"{self._layout.strategy} step keeps it as {target}; the "
                    f"state comes from another strategy or mesh: {fix}"
                )

    def __getattr__(self, name: str) -> Any:
        if name in ("_jitted", "_model", "_layout", "_raise_nonfinite", "pipeline"):  # unset (copy)
            raise AttributeError(name)
        return getattr(self._jitted, name)

    def _check(self, batch: Any) -> None:
        if self._model.bundled:
            self._check_pair(batch)
        else:
            self._check_tree(batch)

    def _check_tree(self, batch: Any) -> None:
        """A user model's batch: leaves with one shared first dimension the data axes divide."""
        where = f"{self.__name__}(state, batch)"
        leaves = [
            (f"batch{jax.tree_util.keystr(p)}", v)
            for p, v in jax.tree_util.tree_flatten_with_path(batch)[0]
        ]
        if not leaves:
            raise TypeError(
                f"{where}: batch={batch!r} holds no arrays; pass a pytree of arrays whose "
                "first dimension is the batch, e.g. step(state, (x, y))"
            )
        shapes = {name: _shape(v) for name, v in leaves}
        for name, shape in shapes.items():
            if not shape:
                raise ValueError(
                    f"{where}: {name} is a scalar; every leaf of the batch needs a first "
                    "(batch) dimension, which the strategy splits over its data axes"
                )
        sizes = {shape[0] for shape in shapes.values()}
        if len(sizes) > 1:
            listed = ", ".join(f"{n} {s}" for n, s in shapes.items())
            raise ValueError(
                f"{where}: the batch's leaves disagree on the batch size (first dimension): "
                f"{listed}; give every leaf the same number of examples"
            )
        if sizes == {0}:
            raise ValueError(
                f"{where}: the batch is empty ({leaves[0][0]} shape={shapes[leaves[0][0]]}); "
                "the mean loss of no examples is undefined. Pass at least one example per "
                "data shard"
            )
        for name, shape in shapes.items():
            self._layout.check_batch(shape, where=f"{where}: {name}")
        if self.pipeline is not None:
            self.pipeline.check_batch(where, next(iter(sizes)))
        self._check_placed(where, dict(leaves))

    def _check_pair(self, batch: Any) -> None:
        where = f"{self.__name__}(state, batch)"
        if not isinstance(batch, tuple | list) or len(batch) != 2:
            raise TypeError(
                f"{where}: batch must be a pair (inputs, targets), got "
                f"{type(batch).__name__}"
                + (f" of length {len(batch)}" if isinstance(batch, tuple | list) else "")
                + "; pass step(state, (x, y)), e.g. batch = model.batch(key, 64, layout.batch)"
            )
        x, y = batch
        sizes = self._model.model.layer_sizes
        xs, ys = _shape(x), _shape(y)
        if len(xs) != 2 or xs[1] != sizes[0]:
            raise ValueError(
                f"{where}: inputs shape={xs} does not fit the model, whose first layer takes "
                f"{sizes[0]} features (layer_sizes={sizes}); pass inputs of shape "
                f"(batch, {sizes[0]}), or build the model with layer_sizes[0]="
                f"{xs[-1] if xs else 1}"
            )
        if xs[0] == 0:
            raise ValueError(
                f"{where}: the batch is empty (inputs shape={xs}); the mean loss of no "
                "examples is undefined (NaN). Pass at least one example per data shard"
            )
        if ys != (xs[0], sizes[-1]):
            raise ValueError(
                f"{where}: targets shape={ys} must be (batch, outputs) = "
                f"{(xs[0], sizes[-1])} for inputs of shape {xs} and a model with "
                f"{sizes[-1]} outputs; reshape the targets (they would broadcast silently)"
            )
        self._layout.check_batch(xs, where=f"{where}: batch inputs")
        if self.pipeline is not None:
            self.pipeline.check_batch(where, xs[0])
        self._check_placed(where, {"inputs": x, "targets": y})

    def _check_placed(self, where: str, named: dict[str, Any]) -> None:
        """The batch's arrays are on the step's devices, split as the strategy takes them."""
        target = self._layout.batch
        move = (
            "Move the batch first with jax.device_put(batch, layout.batch) "
            "(layout = shardkit.train.strategy_layout(model, strategy=..., mesh=...)), or "
            "draw it there with model.batch(key, size, layout.batch)"
        )
        check_same_devices(where, named, mesh=target, fix=move)
        for name, value in named.items():
            sharding = getattr(value, "sharding", None)
            if (
                isinstance(value, jax.Array)
                and not is_traced(value)
                and value.committed
                and sharding is not None
                and not sharding.is_equivalent_to(target, value.ndim)
            ):
                raise ValueError(
                    f"{where}: {name} are placed as {sharding}, but the "
                    f"{self._layout.strategy} step takes its batch as {target}; move it "
                    f"first with jax.device_put({name}, layout.batch) "
                    "(layout = shardkit.train.strategy_layout(model, strategy=..., mesh=...))"
                )
