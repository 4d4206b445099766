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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, Sharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from shardkit.layout.internal import check_placement, mesh_summary
from shardkit.train.models import Model, Params

__all__ = ["STRATEGIES", "Strategy", "StrategyLayout", "strategy_layout"]

Strategy = Literal["single", "dp", "fsdp", "tp", "dp_tp"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
"""The strategy names, in the order the reports list them."""

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
      params: a sharding per parameter, shaped like the model's parameters.
      batch: the sharding of inputs and targets (split along the batch dimension).
      data_axes: mesh axes the batch is split over.
      model_axes: mesh axes tensor parallelism splits layers over.
      gather: parameters are gathered per layer in the forward pass (fsdp).
      roles: per layer, ``"column"``, ``"row"`` or ``"replicated"`` (tp, dp_tp).
    """

    strategy: str
    mesh: Mesh | None
    params: tuple[Mapping[str, Sharding], ...]
    batch: Sharding
    data_axes: tuple[str, ...]
    model_axes: tuple[str, ...]
    gather: bool
    roles: tuple[Role, ...]

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

    def param_constraints(self) -> tuple[Mapping[str, Sharding], ...]:
        """The parameters' shardings as ``with_sharding_constraint`` takes them (Auto view)."""
        if self.mesh is None or not self.explicit:
            return self.params
        auto = _auto_view(self.mesh)

        def on_auto(s: Sharding) -> Sharding:
            return NamedSharding(auto, s.spec) if isinstance(s, NamedSharding) else s

        return tuple({k: on_auto(s) for k, s in layer.items()} for layer in self.params)

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

    def opt_state(self, optimizer: Any, params: Params, /) -> Any:
        """Shardings of ``optimizer.init(params)``: parameter-shaped parts like the params.

        Other leaves (step counts) are replicated.
        """
        import optax

        abstract = jax.eval_shape(optimizer.init, params)
        return optax.tree_map_params(
            optimizer,
            lambda _, sharding: sharding,
            abstract,
            self.params,
            transform_non_params=lambda _: self.replicated,
            is_leaf=lambda x: isinstance(x, Sharding),
        )

    def check_batch(self, shape: Sequence[int], /, where: str = "batch") -> None:
        """Raise ``ValueError`` if the batch dimension does not split over the data axes."""
        if isinstance(self.batch, NamedSharding):
            check_placement(where, tuple(shape), self.batch.spec, self.batch.mesh)


def check_model(where: str, model: Any) -> None:
    """``model`` is a shardkit model (:class:`~shardkit.train.MLP`, ``Logistic``)."""
    if not isinstance(model, Model):
        raise TypeError(
            f"{where}: model={model!r} ({type(model).__name__}) must be a "
            "shardkit.train.MLP or Logistic, e.g. shardkit.train.MLP((784, 1024, 10))"
        )


def _auto_view(mesh: Mesh) -> Mesh:
    """The same devices and axis names with every axis Auto (``mesh`` itself if it is)."""
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def _param_specs(
    model: Model, strategy: str, mesh: Mesh
) -> tuple[tuple[dict[str, P], ...], tuple[Role, ...], tuple[str, ...], tuple[str, ...]]:
    names = tuple(str(n) for n in mesh.axis_names)
    shapes = model.param_shapes()
    if strategy == "dp":
        return tuple({k: P() for k in layer} for layer in shapes), (), names, ()
    if strategy == "fsdp":
        every = _axes_entry(names)
        specs = []
        for layer in shapes:
            specs.append({k: _fsdp_spec(shape, mesh.size, every) for k, shape in layer.items()})
        return tuple(specs), (), names, ()
    if strategy == "tp":
        data, model_axes = (), names
    else:  # dp_tp
        if len(names) != 2:
            raise ValueError(
                f"make_train_step(strategy='dp_tp'): mesh={mesh_summary(mesh)} must be 2-D "
                "(data, model), like seed 004's 4x2; build one with "
                "shardkit.mesh('4x2', 'data,model', axis_types='auto')"
            )
        data, model_axes = names[:1], names[1:]
    roles = tp_roles(model.num_layers)
    m = _axes_entry(model_axes)
    rule: dict[Role, dict[str, P]] = {
        "column": {"w": P(None, m), "b": P(m)},
        "row": {"w": P(m, None), "b": P()},
        "replicated": {"w": P(), "b": P()},
    }
    return tuple(rule[r] for r in roles), roles, data, model_axes


def _fsdp_spec(shape: tuple[int, ...], size: int, every: Any) -> P:
    for dim, n in enumerate(shape):
        if n % size == 0:
            return P(*([None] * dim), every)
    return P()  # too small to split evenly: kept whole (and counted as such)


def strategy_layout(model: Model, /, *, strategy: str, mesh: Mesh | None) -> StrategyLayout:
    """The shardings a strategy gives a model's parameters and batches on ``mesh``.

    Args:
      model: an :class:`~shardkit.train.MLP` or :class:`~shardkit.train.Logistic`.
      strategy: one of ``single``, ``dp``, ``fsdp``, ``tp``, ``dp_tp``.
      mesh: the mesh, with Auto or Explicit axes (the shardings are on it either
        way); ``single`` uses its first device, or the first device when None.

    Returns:
      A :class:`StrategyLayout`.

    Raises:
      TypeError: ``model`` is not a shardkit model; ``mesh`` is not a ``Mesh``.
      ValueError: unknown strategy, a missing or 1-D mesh for ``dp_tp``, or a layer
        that the model axes do not divide (the message names layer, spec and mesh).
      NotImplementedError: a mesh with Manual axes.

    Example:
      >>> m = shardkit.mesh("4x2", "data,model", axis_types="auto")
      >>> lay = shardkit.train.strategy_layout(shardkit.train.MLP((16, 32, 32, 8)),
      ...                                      strategy="dp_tp", mesh=m)
      >>> [layer["w"].spec for layer in lay.params], lay.batch.spec
      ([P(None, 'model'), P('model', None), P()], P('data',))
    """
    check_model("strategy_layout", model)
    if strategy not in STRATEGIES:
        raise ValueError(
            f"make_train_step: strategy={strategy!r}; choose one of {list(STRATEGIES)}"
        )
    if strategy == "single":
        device = jax.devices()[0] if mesh is None else mesh.devices.flat[0]
        one = SingleDeviceSharding(device)
        params = tuple(dict.fromkeys(layer, one) for layer in model.param_shapes())
        return StrategyLayout("single", mesh, params, one, (), (), False, ())
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
    specs, roles, data, model_axes = _param_specs(model, strategy, mesh)
    for i, (layer, shapes) in enumerate(zip(specs, model.param_shapes(), strict=True)):
        for name, spec in layer.items():
            where = f"make_train_step(strategy={strategy!r}): layer {i} {name}"
            check_placement(where, shapes[name], spec, mesh)
    params = tuple({k: NamedSharding(mesh, s) for k, s in layer.items()} for layer in specs)
    batch = NamedSharding(mesh, P(_axes_entry(data)))
    return StrategyLayout(
        strategy, mesh, params, batch, data, model_axes, strategy == "fsdp", roles
    )
