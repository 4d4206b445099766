"""Pipeline parallelism: ``pp`` (mesh axis ``stage``) and ``dp_pp`` (``data``, ``stage``).

The model's layers are cut into ``S`` contiguous stages balanced by cost (parameter
count, the flops per example of a dense layer); stage ``s`` holds only its layers.
The parameters live stacked: every leaf of one layer's structure gets two leading
dimensions ``(S, K)`` (``K`` the most layers a stage holds), split over ``stage``, so
each device holds its own stage's ``K`` layers and nothing else. A stage with fewer
layers skips its spare slots (their gradients are zero). The bundled MLP's layers
have different widths: its stacked layers are padded with zeros to the widest, which
keeps every value exact (zero rows and columns add nothing and receive zero
gradients; an elementwise optimizer such as sgd or adam leaves them zero).

One step is a ``shard_map`` over ``stage`` running a static schedule
(:mod:`shardkit.train._schedule`): at each tick every stage runs the forward or the
backward of one microbatch (the backward recomputes the stage's forward from its
stashed input and pulls the cotangent through it with ``jax.vjp``), then one
``ppermute`` sends activations to the next stage and one sends cotangents to the
previous stage; a run of ticks in which no stage sends one way (gpipe's forward and
backward phases, 1f1b's warm-up and drain) leaves that permute out. Nothing else moves during the schedule: no parameter is ever
gathered. Afterwards the last stage's loss is summed over ``stage`` (one scalar) and,
under ``dp_pp``, the gradients and the loss are averaged over ``data`` (one
all-reduce of the stage's gradients). Every collective is ordered by data
dependency, as XLA's CPU runtime needs.

The optimizer sees the stacked parameters, so ``state.params`` holds them;
``step.model(state.params)`` gives back the caller's layers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit.layout import format_bytes
from shardkit.layout.internal import as_count, is_traced, mesh_summary
from shardkit.linalg.internal import after
from shardkit.train._adapters import Trainable
from shardkit.train._layers import Layers, layer_parts, same_structure
from shardkit.train._models import MLP
from shardkit.train._schedule import SCHEDULES, Timetable, build_schedule

__all__ = [
    "PIPELINE_STRATEGIES",
    "Pipeline",
    "PipelinePlan",
    "bind_pipeline",
    "check_microbatches",
    "plan_pipeline",
]

PIPELINE_STRATEGIES = ("pp", "dp_pp")


def balanced_stages(costs: Sequence[float], stages: int) -> tuple[tuple[int, int], ...]:
    """Contiguous ``(start, stop)`` runs of layers, one per stage, minimizing the largest cost.

    Among cuts with the same largest cost, the one with the evenest costs wins.

    Example:
      >>> from shardkit.train._pipeline import balanced_stages
      >>> balanced_stages([1, 4, 4, 1], 2), balanced_stages([5, 1, 1, 1, 1, 1], 3)
      (((0, 2), (2, 4)), ((0, 1), (1, 3), (3, 6)))
    """
    n = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    inf = (float("inf"), float("inf"))
    # best[k][i]: (largest stage cost, sum of squared stage costs) of the first i layers
    # in k stages, smallest first by the one, then by the other (the evener cut).
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = (0.0, 0.0)
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                run = float(prefix[i] - prefix[j])
                worst, squares = best[k - 1][j]
                candidate = (max(worst, run), squares + run * run)
                if candidate < best[k][i]:
                    best[k][i], cut[k][i] = candidate, j
    bounds, i = [], n
    for k in range(stages, 0, -1):
        bounds.append((cut[k][i], i))
        i = cut[k][i]
    return tuple(reversed(bounds))


@dataclass(frozen=True, eq=False)
class _Stack:
    """A model as the pipeline runs it: same-structured layers between an input and a loss.

    Attributes:
      layer: one (padded) layer's parameters as ``ShapeDtypeStruct`` leaves.
      costs: each layer's cost (its parameter count).
      apply: ``apply(layer, h, last) -> h`` (``last``: a traced bool, the model's last layer).
      head: ``head(h, targets) -> loss`` of one microbatch (a mean over its examples).
      embed: the inputs as the first stage's activations.
      pad: per-layer parameters padded to ``layer``'s shapes.
      unpad: the caller's parameters back from the padded layers.
      width: the features per example an activation carries between stages (a
        prefix of the stage's own activation), or None where the inputs decide.
    """

    layer: Any
    costs: tuple[float, ...]
    apply: Callable[[Any, jax.Array, jax.Array], jax.Array]
    head: Callable[[jax.Array, Any], jax.Array]
    embed: Callable[[jax.Array], jax.Array]
    pad: Callable[[Any], list[Any]]
    unpad: Callable[[list[Any]], Any]
    width: int | None


def _mlp_stack(model: Any) -> _Stack:
    """The bundled MLP: every layer's ``w`` padded to ``(widest input, widest output)``.

    Inside a stage activations are as wide as the widest layer, zero beyond each
    layer's own width; between stages they travel at the widest output.
    """
    sizes = model.layer_sizes
    n_in, n_out = max(sizes[:-1]), max(sizes[1:])
    width = max(sizes)
    shapes = model.param_shapes()

    def apply(layer: Any, h: jax.Array, last: jax.Array) -> jax.Array:
        z = h[:, :n_in] @ layer["w"] + layer["b"]
        z = jnp.where(last, z, jax.nn.relu(z))
        return jnp.pad(z, ((0, 0), (0, width - n_out)))

    def head(h: jax.Array, y: jax.Array) -> jax.Array:  # MLP.loss of the outputs
        return jnp.mean(jnp.sum((h[:, : sizes[-1]] - y) ** 2, axis=-1))

    def embed(x: jax.Array) -> jax.Array:
        return jnp.pad(x, ((0, 0), (0, width - x.shape[1])))

    def pad(params: Any) -> list[Any]:
        def padded(v: jax.Array, to: tuple[int, ...]) -> jax.Array:
            return jnp.pad(v, [(0, t - n) for n, t in zip(v.shape, to, strict=True)])

        return [{"w": padded(p["w"], (n_in, n_out)), "b": padded(p["b"], (n_out,))} for p in params]

    def unpad(layers: list[Any]) -> Any:
        return tuple(
            {k: v[tuple(slice(0, n) for n in shape[k])] for k, v in layer.items()}
            for layer, shape in zip(layers, shapes, strict=True)
        )

    one = {"w": jax.ShapeDtypeStruct((n_in, n_out), model.dtype)}
    one["b"] = jax.ShapeDtypeStruct((n_out,), model.dtype)
    costs = tuple(float(math.prod(s["w"]) + math.prod(s["b"])) for s in shapes)
    return _Stack(one, costs, apply, head, embed, pad, unpad, n_out)


def _layers_stack(where: str, t: Trainable, loss: Callable[[Any, Any], jax.Array]) -> _Stack:
    """A :class:`~shardkit.train.Layers` model: its layers as they are (same shapes)."""
    model: Layers = t.model
    parts = [layer_parts(layer) for layer in model.layers]
    same_structure(where, parts)
    rebuild = parts[0].rebuild

    def apply(layer: Any, h: jax.Array, last: jax.Array) -> jax.Array:
        del last
        return model.call(rebuild(layer), h)

    layer = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), t.abstract[0])
    costs = tuple(float(sum(math.prod(a.shape) for a in jax.tree.leaves(p))) for p in t.abstract)
    return _Stack(layer, costs, apply, loss, lambda x: x, list, tuple, None)


@dataclass(frozen=True, eq=False)
class PipelinePlan:
    """How a model's layers are cut into stages on a mesh (``strategy_layout``'s part).

    Attributes:
      strategy: ``"pp"`` or ``"dp_pp"``.
      mesh: the mesh.
      stage_axis: the mesh axis the stages lie along.
      data_axis: the mesh axis the batch is split over (``dp_pp``), or None.
      bounds: per stage, the ``(start, stop)`` run of layers it holds.
      abstract: the stacked parameters, leaves ``(S, K, ...)``.
      specs: their specs (the leading dimension split over ``stage_axis``).
    """

    strategy: str
    mesh: Mesh
    stage_axis: str
    data_axis: str | None
    bounds: tuple[tuple[int, int], ...]
    stack: _Stack
    abstract: Any
    specs: Any

    @property
    def stages(self) -> int:
        """The number of stages ``S``."""
        return len(self.bounds)

    @property
    def per_stage(self) -> int:
        """``K``: the most layers one stage holds (the stacked parameters' second dimension)."""
        return max(b - a for a, b in self.bounds)

    @property
    def data_parts(self) -> int:
        """How many ways the batch is split (1 under ``pp``)."""
        return int(self.mesh.shape[self.data_axis]) if self.data_axis else 1

    def flags(self) -> tuple[np.ndarray, np.ndarray]:
        """``(real, last)``, ``(S, K)`` booleans: a slot holds a layer; it is the model's last."""
        k = self.per_stage
        real = np.array([[i < b - a for i in range(k)] for a, b in self.bounds])
        last = np.array(
            [[a + i == self.bounds[-1][1] - 1 for i in range(k)] for a, _ in self.bounds]
        )
        return real, last & real

    def stack_params(self, params: Any) -> Any:
        """The caller's parameters as the stacked ``(S, K, ...)`` leaves (traceable)."""
        layers = self.stack.pad(params)
        zero = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), self.stack.layer)
        rows = []
        for a, b in self.bounds:
            run = layers[a:b] + [zero] * (self.per_stage - (b - a))
            rows.append(jax.tree.map(lambda *v: jnp.stack(v), *run))
        return jax.tree.map(lambda *v: jnp.stack(v), *rows)

    def unstack_params(self, stacked: Any) -> Any:
        """The caller's parameters from the stacked ones."""
        layers = [
            jax.tree.map(lambda v, s=s, i=i: v[s, i], stacked)
            for s, (a, b) in enumerate(self.bounds)
            for i in range(b - a)
        ]
        return self.stack.unpad(layers)

    def own_bytes(self) -> list[int]:
        """Per stage, the bytes of its own layers' parameters (unpadded)."""
        item = jax.tree.leaves(self.stack.layer)[0].dtype.itemsize
        costs = self.stack.costs  # parameter counts
        return [int(sum(costs[a:b])) * item for a, b in self.bounds]

    def stage_names(self) -> str:
        """The layers of each stage, e.g. ``"0-1 | 2 | 3"``."""
        return " | ".join(f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in self.bounds)


def _pipeline_axes(strategy: str, mesh: Mesh) -> tuple[str, str | None]:
    names = tuple(str(n) for n in mesh.axis_names)
    want = 1 if strategy == "pp" else 2
    if len(names) != want:
        example = (
            "shardkit.mesh('8', 'stage')" if want == 1 else "shardkit.mesh('2x4', 'data,stage')"
        )
        raise ValueError(
            f"make_train_step(strategy={strategy!r}): mesh={mesh_summary(mesh)} must be "
            f"{want}-D ({'stage' if want == 1 else 'data, stage'}); build one with {example}"
        )
    return (names[0], None) if want == 1 else (names[1], names[0])


def plan_pipeline(
    where: str, t: Trainable, strategy: str, mesh: Mesh, loss: Any = None
) -> PipelinePlan:
    """Cut ``t``'s layers into the mesh's stages, balanced by cost.

    Raises:
      TypeError: a model that is not a sequence of layers.
      ValueError: a mesh of the wrong rank, more stages than layers, or layers of
        different structures or shapes.
    """
    stage_axis, data_axis = _pipeline_axes(strategy, mesh)
    if isinstance(t.model, MLP):
        stack = _mlp_stack(t.model)
    elif t.kind == "layers":
        stack = _layers_stack(where, t, loss)
    else:
        raise TypeError(
            f"{where}(strategy={strategy!r}): a pipeline cuts the model between layers, "
            f"so a {type(t.model).__name__} model needs to come as shardkit.train.Layers(list_of_layers, "
            "apply=...) with loss=loss(outputs, targets); the bundled MLP works as it is"
        )
    stages = int(mesh.shape[stage_axis])
    layers = len(stack.costs)
    if stages > layers:
        raise ValueError(
            f"{where}(strategy={strategy!r}): mesh={mesh_summary(mesh)} has {stages} "
            f"stages along {stage_axis!r}, more than the model's {layers} layers; use at "
            f"most {layers} devices along {stage_axis!r} (e.g. shardkit.mesh('{layers}', "
            f"'stage')), or a deeper model"
        )
    bounds = balanced_stages(stack.costs, stages)
    k = max(b - a for a, b in bounds)
    abstract = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct((stages, k, *a.shape), a.dtype), stack.layer
    )
    specs = jax.tree.map(lambda _: P(stage_axis), stack.layer)
    return PipelinePlan(strategy, mesh, stage_axis, data_axis, bounds, stack, abstract, specs)


@dataclass(frozen=True, eq=False)
class Pipeline:
    """A pipeline plan bound to a schedule: the step's value-and-gradient, checks and report.

    Attributes:
      plan: the stages.
      schedule: the static schedule.
      trainable: the model with stacked parameters (what the optimizer sees).
      value_and_grad: ``(params, batch) -> (loss, grads)``, the schedule run as a ``shard_map``.
    """

    plan: PipelinePlan
    schedule: Timetable
    trainable: Trainable
    value_and_grad: Callable[[Any, Any], tuple[jax.Array, Any]]

    def check_batch(self, where: str, batch_size: int) -> None:
        """Raise ``ValueError`` unless each data shard's batch splits into the microbatches."""
        check_microbatches(where, self.plan, self.schedule.microbatches, batch_size)

    def stage_memory(self, batch_size: int, features: int | None = None) -> tuple[int, int]:
        """``(parameter bytes, activation bytes)`` one device of every stage holds.

        Parameters: the stage's ``K`` stacked (padded) layers. Activations: the
        schedule's buffer slots (``slots`` microbatches), each holding a microbatch's
        stage input and its cotangent; ``features`` is the activation's size per
        example (the bundled MLP's widest layer by default).
        """
        leaves = jax.tree.leaves(self.plan.stack.layer)
        params = self.plan.per_stage * sum(a.size * a.dtype.itemsize for a in leaves)
        width = features if features is not None else self.plan.stack.width or 0
        mb = batch_size // (self.plan.data_parts * self.schedule.microbatches)
        act = self.schedule.slots * 2 * mb * width * leaves[0].dtype.itemsize
        return params, act

    def describe(self, batch_size: int, features: int | None = None) -> str:
        """The report's lines: stages, schedule, bubble fraction, per-stage memory."""
        s, m = self.plan.stages, self.schedule.microbatches
        mem = self.stage_memory(batch_size, features)
        mb = batch_size // (self.plan.data_parts * m)
        return (
            f"pipeline: {s} stages (layers {self.plan.stage_names()}), {m} microbatches of "
            f"{mb}, schedule {self.schedule.name}: bubble (S-1)/(M+S-1) = {s - 1}/{m + s - 1}"
            f" = {self.schedule.bubble:.1%}\n"
            f"per stage (one device): parameters {format_bytes(mem[0])} stacked (unpadded: "
            f"{' | '.join(format_bytes(n) for n in self.plan.own_bytes())}), "
            f"activations {format_bytes(mem[1])} (at most {self.schedule.slots} "
            "microbatches held)"
        )


def _activations(stack: _Stack, params: Any, h: jax.Array, micro: int) -> jax.Array:
    """The first stage's inputs in the dtype the layers compute in (e.g. float64 weights).

    Raises:
      ValueError: a layer changes the activation's shape (stages pass one shape along).
    """
    first = jax.tree.map(lambda a: a[0], params)
    mb = jax.ShapeDtypeStruct((h.shape[0] // micro, *h.shape[1:]), h.dtype)
    out = jax.eval_shape(lambda q, v: stack.apply(q, v, jnp.bool_(False)), first, mb)
    if out.shape != mb.shape:
        raise ValueError(
            f"make_train_step: a layer maps a microbatch of shape {mb.shape} to {out.shape}; "
            "pipeline stages pass one activation shape along, so give every layer the "
            "same input and output shape (move an embedding or a head into the loss)"
        )
    return h.astype(jnp.result_type(h.dtype, out.dtype))


def check_microbatches(where: str, plan: PipelinePlan, microbatches: int, batch_size: int) -> None:
    """Raise ``ValueError`` unless ``microbatches`` divides each data shard's batch."""
    d, m = plan.data_parts, microbatches
    if batch_size % (d * m):
        shard = (
            f"the {d} data shards' {batch_size // d} examples each"
            if d > 1
            else f"the {batch_size} examples"
        )
        raise ValueError(
            f"{where}: batch size {batch_size} on mesh={mesh_summary(plan.mesh)}: "
            f"microbatches={m} does not divide {shard}; use a batch size that is a "
            f"multiple of {d * m}, or microbatches= that divides it"
        )


class _Ticks(NamedTuple):
    """The carry of the scan over one stage's ticks.

    Attributes:
      stash: activations received from the previous stage, by slot.
      cot: cotangents received from the next stage (the last stage's own), by slot.
      grads: this stage's gradients so far.
      loss: the loss so far (the last stage's).
    """

    stash: jax.Array
    cot: jax.Array
    grads: Any
    loss: jax.Array


@dataclass(frozen=True, eq=False)
class _StageRun:
    """What every tick of one stage reads; built once per step, inside ``shard_map``.

    Attributes:
      stack: the layers' stack.
      stage: the mesh axis of the stages.
      p: this stage's layers.
      s: this stage's index.
      xs, ys: the embedded microbatches and their targets.
      is_real, is_last: per layer slot: a real layer; the model's last layer.
      width: the embedded activations' width; between: what travels between stages
        (None: all of it).
      tab: this stage's timetable rows (kind, microbatch, slot, receive slots) by tick.
      n_micro: microbatches per step.
      forward_perm, backward_perm: the ``ppermute`` pairs to the next and previous stage.
    """

    stack: _Stack
    stage: str
    p: Any
    s: jax.Array
    xs: jax.Array
    ys: Any
    is_real: jax.Array
    is_last: jax.Array
    width: int
    between: int | None
    tab: jax.Array
    n_micro: int
    forward_perm: list[tuple[int, int]]
    backward_perm: list[tuple[int, int]]

    def narrow(self, h: jax.Array) -> jax.Array:
        """What travels between stages."""
        return h if self.between is None else h[:, : self.between]

    def widen(self, h: jax.Array) -> jax.Array:
        return h if self.between is None else jnp.pad(h, ((0, 0), (0, self.width - self.between)))

    def run(self, q: Any, h: jax.Array) -> jax.Array:
        """The stage's layers ``q`` on ``h`` (padding slots pass ``h`` through)."""
        one = functools.partial(_layer_step, self.stack)
        return jax.lax.scan(one, h, (q, self.is_real, self.is_last))[0]

    def head(self, h: jax.Array, m: jax.Array) -> jax.Array:
        return self.stack.head(h, jax.tree.map(lambda a: a[m], self.ys)) / self.n_micro


def _layer_step(stack: _Stack, h: jax.Array, item: Any) -> tuple[jax.Array, None]:
    layer, r, end = item
    return jnp.where(r, stack.apply(layer, h, end), h), None


# The four kinds of tick, as ``lax.switch`` branches of ``(grads, loss)``:
# ``(send forward, send backward, grads, loss, this slot's new cotangent)``.


def _idle(zero: jax.Array, g_out: jax.Array, g: Any, acc: jax.Array) -> Any:
    return zero, zero, g, acc, g_out


def _forward(
    ctx: _StageRun, x_in: jax.Array, zero: jax.Array, g_out: jax.Array, g: Any, acc: jax.Array
) -> Any:
    return ctx.narrow(ctx.run(ctx.p, x_in)), zero, g, acc, g_out


def _last_forward(
    ctx: _StageRun, x_in: jax.Array, m: jax.Array, zero: jax.Array, g: Any, acc: jax.Array
) -> Any:
    value, d = jax.value_and_grad(ctx.head)(ctx.run(ctx.p, x_in), m)
    return zero, zero, g, acc + value, ctx.narrow(d)


def _backward(
    ctx: _StageRun, x_in: jax.Array, g_out: jax.Array, zero: jax.Array, g: Any, acc: jax.Array
) -> Any:
    _, pull = jax.vjp(ctx.run, ctx.p, x_in)
    dp, dx = pull(ctx.widen(g_out))
    return zero, ctx.narrow(dx), jax.tree.map(jnp.add, g, dp), acc, g_out


def _tick(
    ctx: _StageRun, sends: tuple[bool, bool], carry: _Ticks, t: jax.Array
) -> tuple[_Ticks, None]:
    """Tick ``t``: this stage's work of the timetable, then the sends of this run of ticks."""
    stash, cot, grads, loss = carry
    kind, m, slot, rf, rb = (ctx.tab[i, t] for i in range(5))
    # Stage 0 reads its inputs from the batch (for the backward's recompute too).
    x_in = jnp.where(ctx.s == 0, ctx.xs[m], ctx.widen(stash[slot]))
    g_out = cot[slot]
    zero = jnp.zeros_like(g_out)
    branches = (
        functools.partial(_idle, zero, g_out),
        functools.partial(_forward, ctx, x_in, zero, g_out),
        functools.partial(_last_forward, ctx, x_in, m, zero),
        functools.partial(_backward, ctx, x_in, g_out, zero),
    )
    send_f, send_b, grads, loss, g_new = jax.lax.switch(kind, branches, grads, loss)
    cot = cot.at[slot].set(g_new)
    # Only the directions some stage sends in during this run of ticks move.
    if sends[0]:
        got_f = jax.lax.ppermute(send_f, ctx.stage, ctx.forward_perm)
        fs = jnp.maximum(rf, 0)
        stash = stash.at[fs].set(jnp.where(rf >= 0, got_f, stash[fs]))
        send_b = after(send_b, got_f)
    if sends[1]:
        got_b = jax.lax.ppermute(send_b, ctx.stage, ctx.backward_perm)
        bs = jnp.maximum(rb, 0)
        cot = cot.at[bs].set(jnp.where(rb >= 0, got_b, cot[bs]))
    return _Ticks(stash, cot, grads, loss), None


def _stage_body(
    plan: PipelinePlan, sched: Timetable, params: Any, x: jax.Array, y: Any
) -> tuple[jax.Array, Any]:
    """One stage's step inside ``shard_map``: the timetable's ticks, then the loss and grads."""
    stack, stage, data = plan.stack, plan.stage_axis, plan.data_axis
    n_stages, n_micro = plan.stages, sched.microbatches
    tables = np.stack(
        [sched.kind, sched.microbatch, sched.slot, sched.recv_forward, sched.recv_backward]
    )
    real, last = plan.flags()
    p = jax.tree.map(lambda a: a[0], params)
    s = jax.lax.axis_index(stage)
    h0 = _activations(stack, p, stack.embed(x), n_micro)
    mb = h0.shape[0] // n_micro
    xs = h0.reshape(n_micro, mb, *h0.shape[1:])
    ys = jax.tree.map(lambda a: a.reshape(n_micro, mb, *a.shape[1:]), y)
    between = stack.width
    ctx = _StageRun(
        stack,
        stage,
        p,
        s,
        xs,
        ys,
        jnp.asarray(real)[s],
        jnp.asarray(last)[s],
        h0.shape[1],
        between,
        jnp.asarray(tables)[:, :, s],
        n_micro,
        [(i, i + 1) for i in range(n_stages - 1)],
        [(i + 1, i) for i in range(n_stages - 1)],
    )
    shape = h0.shape[1:] if between is None else (between,)
    buf = jnp.zeros((sched.slots, mb, *shape), h0.dtype)
    state = _Ticks(buf, buf, jax.tree.map(jnp.zeros_like, p), jnp.zeros((), h0.dtype))
    for start, stop, sends in sched.segments():
        state, _ = jax.lax.scan(
            functools.partial(_tick, ctx, sends), state, jnp.arange(start, stop)
        )
    grads, loss = state.grads, state.loss
    if n_stages > 1:
        loss = jax.lax.psum(loss, stage)  # held by the last stage only
        # The gradients leave after it, so that what the step does with them next
        # (the finite test's all-reduce) cannot run beside it.
        grads = after(grads, loss)
    if data is not None:
        grads, loss = jax.lax.pmean((grads, loss), data)
    return loss, jax.tree.map(lambda g: g[None], grads)


def _value_and_grad(plan: PipelinePlan, sched: Timetable, mesh: Mesh) -> Callable[..., Any]:
    data = plan.data_axis
    batch_spec = P(data) if data else P()
    program = jax.shard_map(
        functools.partial(_stage_body, plan, sched),
        mesh=mesh,
        in_specs=(plan.specs, batch_spec, batch_spec),
        out_specs=(P(), plan.specs),
        check_vma=False,
    )

    def value_and_grad(params: Any, batch: Any) -> tuple[jax.Array, Any]:
        x, y = batch
        return program(params, x, y)

    return value_and_grad


def bind_pipeline(
    where: str,
    plan: PipelinePlan,
    t: Trainable,
    *,
    microbatches: Any,
    schedule: Any,
    mesh: Mesh,
) -> Pipeline:
    """The step's pipeline: ``plan`` run by ``schedule`` over ``microbatches`` on ``mesh``.

    ``mesh`` is the mesh the step's body sees (its Auto view under ``auto_axes``).

    Raises:
      ValueError: an unknown schedule or a microbatch count below 1.
    """
    if schedule not in SCHEDULES:
        raise ValueError(
            f"{where}: schedule={schedule!r}; choose one of {list(SCHEDULES)} (gpipe: all "
            "forwards then all backwards; 1f1b: one forward, one backward, at most S "
            "microbatches in flight)"
        )
    m = plan.stages if microbatches is None else microbatches
    m = as_count(where, "microbatches", m, minimum=1, fix="e.g. microbatches=8")
    sched = build_schedule(schedule, plan.stages, m)
    replicated = NamedSharding(plan.mesh, P())
    shardings = jax.tree.map(lambda s: NamedSharding(plan.mesh, s), plan.specs)
    stack_program = jax.jit(plan.stack_params, out_shardings=shardings)

    def draw(key: Any, _: Any) -> Any:
        params = t.draw(key, jax.tree.map(lambda _: replicated, t.abstract))
        return stack_program(params)

    def rebuild(stacked: Any) -> Any:
        # Replicated first: indexing a stage-split array on an Explicit mesh needs a
        # gather anyway, and this is the caller asking for the whole model.
        if not any(is_traced(v) for v in jax.tree.leaves(stacked)):
            stacked = jax.device_put(stacked, replicated)
        return t.rebuild(plan.unstack_params(stacked))

    vg = _value_and_grad(plan, sched, mesh)
    stacked = Trainable(
        t.kind,
        t.model,
        plan.abstract,
        lambda p, batch, hooks: vg(p, batch)[0],
        draw,
        rebuild,
        lambda path: f"stacked parameter {jax.tree_util.keystr(path)}",
    )
    return Pipeline(plan, sched, stacked, vg)
