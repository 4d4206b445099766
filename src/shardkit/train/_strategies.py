"""Sharding rules of each training strategy, as PartitionSpecs for jit to partition by.

A strategy is a set of specs (for every parameter, the optimizer state, the batch)
and, inside the forward pass, sharding constraints on parameters or activations.
``jax.jit`` with explicit in/out shardings and ``with_sharding_constraint`` do the
partitioning, the way seed 004 does it. On a mesh of ``P`` devices:

``single``
  Everything on the mesh's first device. The reference.
``dp``
  Parameters and optimizer state replicated; the batch split over every mesh axis.
  Per step: one all-reduce of the gradients (``2 (P-1)/P`` x gradient bytes per
  device under the ring convention), which XLA may split or fuse.
``fsdp``
  Batch split as for ``dp``; every parameter (and its optimizer state) split over
  every mesh axis along its first divisible dimension, so each device holds 1/P of
  them. Each layer gathers its parameters (a constraint to replicated) before use;
  the gradients leave the step split like the parameters (a reduce-scatter, or an
  all-reduce then a slice where the compiler chooses that).
``tp``
  Consecutive layers in pairs: the first of a pair split by columns (``w P(None, m)``,
  ``b P(m)``), the second by rows (``w P(m, None)``), so the hidden activation
  between them stays split and one all-reduce per pair rebuilds the output. An
  unpaired last layer is replicated. The batch is replicated.
``dp_tp``
  A 2-D mesh ``(data, model)`` as seed 004's 4x2: the batch split over the first
  axis, ``tp``'s rules over the second.
``pp``
  Pipeline parallelism on a 1-D mesh (``stage``): the layers cut into contiguous
  stages balanced by cost, each device holding its stage's layers (stacked, see
  :mod:`shardkit.train._pipeline`), the batch cut into microbatches that flow through
  the stages under a ``gpipe`` or ``1f1b`` schedule. Per step: collective-permutes of
  one microbatch's activations forward and cotangents backward at each tick of the
  schedule that sends them, one scalar all-reduce of the loss; no parameter moves.
``dp_pp``
  A 2-D mesh ``(data, stage)``: the batch split over the first axis, ``pp`` along
  the second, plus one all-reduce of each stage's gradients over ``data``.

Your own models
  A parameter pytree with a loss, an Equinox module or a Flax NNX module (see
  :func:`~shardkit.train.make_train_step`) gets its specs from path rules
  (:data:`~shardkit.train.Rules`): ``rules=`` first, then the default for dense layers.
  The bundled models go through the same rules (their ``partition_rules`` spell out
  the pairs above). Under ``fsdp`` a user model's parameters are all gathered when the
  loss starts; under ``tp`` the compiler propagates the parameters' specs through
  the user's code (no activation constraints), which changes the communication, not
  the losses.

Auto and Explicit meshes
  The specs are the same for both. On a mesh with Explicit axes (``jax.make_mesh``'s
  and ``shardkit.mesh``'s default) the state and batch are placed on that mesh and
  come back on it, so they carry their shardings in their types; the body of the step
  runs under ``jax.sharding.auto_axes`` (see :func:`~shardkit.train.make_train_step`),
  which views every axis as Auto, and the hooks constrain to the same specs on that
  Auto view of the mesh. ``with_sharding_constraint`` accepts only Auto axes, and the
  alternative, annotating every matmul with ``out_sharding=`` and every gather with
  ``reshard``, would leave the partitioning of the backward pass and the optimizer
  update to Explicit-mode rules rather than the ones measured here. So the compiled
  program, its communication and its losses are those of the Auto mesh. Manual axes
  (inside ``shard_map``) are not supported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, Sharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from shardkit._typing import PyTree
from shardkit.layout.internal import check_placement, mesh_summary
from shardkit.train._adapters import Trainable, as_trainable
from shardkit.train._models import Role, tp_roles
from shardkit.train._opt_state import opt_state_shardings
from shardkit.train._pipeline import PIPELINE_STRATEGIES, PipelinePlan, plan_pipeline
from shardkit.train._rules import Rules, check_rules, param_specs

if TYPE_CHECKING:
    import optax

__all__ = ["STRATEGIES", "Strategy", "StrategyLayout", "strategy_layout", "tp_roles"]

Strategy = Literal["single", "dp", "fsdp", "tp", "dp_tp", "pp", "dp_pp"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
"""The strategy names, in the order the reports list them."""


def _axes_entry(axes: tuple[str, ...]) -> Any:
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else axes


@dataclass(frozen=True)
class StrategyLayout:
    """Where a strategy puts every array of a training step.

    Attributes:
      strategy: the strategy's name.
      mesh: the mesh (``None`` only for ``single`` without one).
      params: a sharding per parameter, a pytree shaped like the model's parameters.
      batch: the sharding of inputs and targets (split along the batch dimension).
      data_axes: mesh axes the batch is split over.
      model_axes: mesh axes tensor parallelism splits layers over.
      gather: parameters are gathered per layer in the forward pass (fsdp).
      roles: per layer, ``"column"``, ``"row"`` or ``"replicated"`` (tp, dp_tp).
      pipeline: the stages of ``pp`` and ``dp_pp`` (a ``PipelinePlan``), else None.
    """

    strategy: str
    mesh: Mesh | None
    params: PyTree
    batch: Sharding
    data_axes: tuple[str, ...]
    model_axes: tuple[str, ...]
    gather: bool
    roles: tuple[Role, ...]
    pipeline: PipelinePlan | None = None

    @property
    def replicated(self) -> Sharding:
        """The sharding of a replicated value (the loss, scalar optimizer state)."""
        if self.mesh is None or self.strategy == "single":
            return self.batch
        return NamedSharding(self.mesh, P())

    @property
    def explicit(self) -> bool:
        """Whether the mesh has Explicit axes (the step then runs under ``auto_axes``)."""
        if self.mesh is None or self.strategy == "single":
            return False
        return any(t == AxisType.Explicit for t in self.mesh.axis_types)

    def _constraint(self, *entries: Any) -> Sharding:
        """A sharding for ``with_sharding_constraint``, on the Auto view of the mesh."""
        if self.mesh is None or self.strategy == "single":
            return self.batch
        return NamedSharding(_auto_view(self.mesh), P(*entries))

    def param_constraints(self) -> PyTree:
        """The parameters' shardings as ``with_sharding_constraint`` takes them (Auto view)."""
        if self.mesh is None or not self.explicit:
            return self.params
        auto = _auto_view(self.mesh)

        def on_auto(s: Sharding) -> Sharding:
            return NamedSharding(auto, s.spec) if isinstance(s, NamedSharding) else s

        return jax.tree.map(on_auto, self.params, is_leaf=_is_sharding)

    def gather_all(self, params: PyTree, /) -> PyTree:
        """fsdp of a user model: every parameter constrained to replicated (gathered) at once."""
        if not self.gather:
            return params
        return jax.tree.map(
            lambda v: jax.lax.with_sharding_constraint(v, self._constraint()), params
        )

    # ---- hooks the model calls inside the forward pass -----------------------------

    def param(self, layer: int, name: str, value: jax.Array, /) -> jax.Array:
        """fsdp: constrain the parameter to replicated, so the layer gathers it."""
        del layer, name
        if not self.gather:
            return value
        return jax.lax.with_sharding_constraint(value, self._constraint())

    def activation(self, layer: int, value: jax.Array, /) -> jax.Array:
        """Constrain a layer's output: batch-split, and model-split after a column layer."""
        if self.strategy == "single":
            return value
        data = _axes_entry(self.data_axes)
        model = (
            _axes_entry(self.model_axes) if self.roles and self.roles[layer] == "column" else None
        )
        return jax.lax.with_sharding_constraint(value, self._constraint(data, model))

    # ---- optimizer state and checks --------------------------------------------------

    def opt_state(self, optimizer: optax.GradientTransformation, params: PyTree, /) -> PyTree:
        """Shardings of ``optimizer.init(params)``: the parts that mirror a parameter like it.

        Each leaf of the state is placed by its key path and shape: a leaf whose path
        ends with a parameter's path and has its shape gets that parameter's sharding
        (with extra leading dimensions, as a history of copies, those are kept whole);
        under ``fsdp`` any other leaf with dimensions is split along its largest
        dimension the mesh divides; step counts, scalars, PRNG keys and the rest are
        replicated. This works for states with ``optax.MaskedNode`` entries
        (``multi_transform``, ``optax.contrib.muon``) and factored moments (adafactor).

        Raises:
          TypeError: a state leaf is not an array (the message names its path).
          ValueError: ``optimizer.init(params)`` fails (the message names the optimizer).
        """
        return opt_state_shardings(
            optimizer,
            params,
            param_shardings=self.params,
            replicated=self.replicated,
            split_axes=self.data_axes if self.gather else (),
        )

    def check_batch(self, shape: Sequence[int], /, where: str = "batch") -> None:
        """Raise ``ValueError`` if the batch dimension does not split over the data axes."""
        if isinstance(self.batch, NamedSharding):
            check_placement(where, tuple(shape), self.batch.spec, self.batch.mesh)


def _is_sharding(x: Any) -> bool:
    return isinstance(x, Sharding)


def _auto_view(mesh: Mesh) -> Mesh:
    """The same devices and axis names with every axis Auto (``mesh`` itself if it is)."""
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def _axes(strategy: str, mesh: Mesh) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(data axes, parameter axes)`` of a strategy on ``mesh``."""
    names = tuple(str(n) for n in mesh.axis_names)
    if strategy == "dp":
        return names, ()
    if strategy == "fsdp":
        return names, names
    if strategy == "tp":
        return (), names
    if len(names) != 2:  # dp_tp
        raise ValueError(
            f"make_train_step(strategy='dp_tp'): mesh={mesh_summary(mesh)} must be 2-D "
            "(data, model), like seed 004's 4x2; build one with "
            "shardkit.mesh('4x2', 'data,model', axis_types='auto')"
        )
    return names[:1], names[1:]


def strategy_layout(
    model: PyTree,
    /,
    *,
    strategy: str,
    mesh: Mesh | None = None,
    rules: Rules | None = None,
    loss: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
) -> StrategyLayout:
    """The shardings a strategy gives a model's parameters and batches on ``mesh``.

    Each parameter's spec comes from the path rules (:data:`~shardkit.train.Rules`):
    ``rules`` first, then the bundled models' own (:meth:`~shardkit.train.Model.partition_rules`),
    then the default for dense layers.

    Args:
      model: an :class:`~shardkit.train.MLP` or :class:`~shardkit.train.Logistic`, or
        your own model: a parameter pytree, an Equinox module or a Flax NNX module.
      strategy: one of ``single``, ``dp``, ``fsdp``, ``tp``, ``dp_tp``, ``pp``, ``dp_pp``.
      mesh: the mesh, with Auto or Explicit axes (the shardings are on it either
        way); None (the default) takes the mesh set with ``jax.set_mesh``, if any.
        ``single`` uses the mesh's first device, or the first device without one.
      rules: ``(regex, template)`` pairs mapping parameter paths to specs, where
        ``"model"`` stands for the axes the strategy splits parameters over, e.g.
        ``[(r"w1$", (None, "model")), (r"w2$", ("model", None))]``. Not for ``pp``
        and ``dp_pp``, which split the stacked layers over ``stage``.
      loss: a :class:`~shardkit.train.Layers` model's ``loss(outputs, targets)``
        (``pp`` and ``dp_pp`` only; ``make_train_step`` passes its own).

    Returns:
      A :class:`StrategyLayout`.

    Raises:
      TypeError: ``model`` is not a model; ``mesh`` is not a ``Mesh``; a bad rule.
      ValueError: unknown strategy, a missing or 1-D mesh for ``dp_tp``, a parameter
        that its spec does not divide (the message names the parameter's path, its
        shape, the spec and the mesh), or for ``pp``/``dp_pp`` a mesh of the wrong
        rank, more stages than layers, or ``rules``.
      NotImplementedError: a mesh with Manual axes.

    Example:
      >>> m = shardkit.mesh("4x2", "data,model", axis_types="auto")
      >>> lay = shardkit.train.strategy_layout(shardkit.train.MLP((16, 32, 32, 8)),
      ...                                      strategy="dp_tp", mesh=m)
      >>> [layer["w"].spec for layer in lay.params], lay.batch.spec
      ([P(None, 'model'), P('model', None), P()], P('data',))
    """
    where = "strategy_layout"
    if mesh is None and not jax.sharding.get_mesh().empty:
        mesh = jax.sharding.get_mesh()  # the mesh of `with jax.set_mesh(...)`
    t = model if isinstance(model, Trainable) else as_trainable(where, model, need_loss=False)
    compiled = check_rules(where, rules)
    if strategy not in STRATEGIES:
        raise ValueError(
            f"make_train_step: strategy={strategy!r}; choose one of {list(STRATEGIES)}"
        )
    if strategy == "single":
        device = jax.devices()[0] if mesh is None else mesh.devices.flat[0]
        one = SingleDeviceSharding(device)
        params = jax.tree.map(lambda _: one, t.abstract)
        return StrategyLayout("single", mesh, params, one, (), (), False, ())
    if mesh is None:
        raise TypeError(
            f"make_train_step(strategy={strategy!r}): mesh= is missing and no mesh is set; "
            "pass mesh=shardkit.mesh('4x2', 'data,model'), or call inside "
            "`with jax.set_mesh(mesh):`"
        )
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"make_train_step(strategy={strategy!r}): mesh={mesh!r} must be a jax.sharding.Mesh, "
            "e.g. shardkit.mesh('4x2', 'data,model', axis_types='auto')"
        )
    if any(t == AxisType.Manual for t in mesh.axis_types):
        raise NotImplementedError(
            f"make_train_step(strategy={strategy!r}) on {mesh_summary(mesh)}: Manual mesh "
            "axes are not supported; a training step partitions through jit shardings, so "
            "call it outside shard_map on a mesh with Auto or Explicit axes, e.g. "
            "shardkit.mesh('4x2', 'data,model')."
        )
    if strategy in PIPELINE_STRATEGIES:
        return _pipeline_layout(t, strategy, mesh, compiled, loss)
    data, axes = _axes(strategy, mesh)
    roles: tuple[Role, ...] = ()
    shown = len(compiled)  # the caller's rules; a bundled model's own are not named
    if t.bundled:
        parts = math.prod(mesh.shape[a] for a in axes)
        compiled += check_rules(where, t.model.partition_rules(strategy, parts))
        roles = tp_roles(t.model.num_layers) if strategy in ("tp", "dp_tp") else ()
    specs = param_specs(
        t.abstract,
        strategy=strategy,
        mesh=mesh,
        axes=axes,
        rules=compiled,
        label=t.label,
        shown_rules=shown,
    )
    params = jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=_is_spec)
    batch = NamedSharding(mesh, P(_axes_entry(data)))
    model_axes = axes if strategy in ("tp", "dp_tp") else ()
    return StrategyLayout(
        strategy, mesh, params, batch, data, model_axes, strategy == "fsdp", roles
    )


def _pipeline_layout(
    t: Trainable, strategy: str, mesh: Mesh, rules: Any, loss: Any
) -> StrategyLayout:
    if rules:
        raise ValueError(
            f"make_train_step(strategy={strategy!r}): rules= does not apply to pipeline "
            "parallelism, which splits the stacked layers over the stage axis; leave it out"
        )
    plan = plan_pipeline("make_train_step", t, strategy, mesh, loss)
    params = jax.tree.map(lambda s: NamedSharding(mesh, s), plan.specs, is_leaf=_is_spec)
    data = (plan.data_axis,) if plan.data_axis else ()
    batch = NamedSharding(mesh, P(_axes_entry(data)))
    return StrategyLayout(strategy, mesh, params, batch, data, (), False, (), plan)


def _is_spec(x: Any) -> bool:
    return isinstance(x, P)
