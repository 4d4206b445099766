"""``shardkit.train.muon``: optax's Muon whose Newton-Schulz iteration runs on the shards.

The optimizer is ``optax.contrib.muon``'s, piece for piece (the same arguments, the
same state, the same partition of the parameters into Muon's 2-D matrices and
AdamW's rest); only the orthogonalization differs. Inside a step of
:func:`~shardkit.train.make_train_step` the step tells the optimizer where every
parameter lives (:func:`layout_scope`), and every 2-D matrix with the default
dimension numbers is orthogonalized by :func:`~shardkit.train._newton_schulz.orthogonalize_sharded`.
Elsewhere (one device, your own ``jax.jit``, ``muon_weight_dimension_numbers`` with
batch axes, complex parameters) it is optax's iteration on the whole array, which the
compiler partitions as it does optax's.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardkit._typing import DTypeLike, PyTree
from shardkit.inspect import Interconnect
from shardkit.train._adapters import as_trainable
from shardkit.train._newton_schulz import (
    MuonMatrix,
    newton_schulz,
    orthogonalize_sharded,
    plan_matrices,
)
from shardkit.train._rules import Rules
from shardkit.train._strategies import _auto_view, strategy_layout

if TYPE_CHECKING:
    import optax

__all__ = ["layout_scope", "muon", "muon_plan"]

_NS_PRESETS: dict[str, Any] = {
    "standard": (3.4445, -4.7750, 2.0315),
    "dion": (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ),
}
_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")

# The layout of the training step being traced (set by make_train_step around update).
_LAYOUT: contextvars.ContextVar[tuple[Any, Any]] = contextvars.ContextVar(
    "shardkit_muon_layout", default=(None, None)
)


@contextlib.contextmanager
def layout_scope(layout: Any, *, after: jax.Array | None = None) -> Iterator[None]:
    """While tracing a step: where its parameters live (a ``StrategyLayout``).

    ``after``: a replicated value of the step (its finite-gradients flag) that the
    orthogonalization's collectives wait for, so that the flag's all-reduce is never
    in flight beside them.
    """
    token = _LAYOUT.set((layout, after))
    try:
        yield
    finally:
        _LAYOUT.reset(token)


def _optax() -> Any:
    from shardkit.train._opt_state import require_optax

    return require_optax()


def muon(
    learning_rate: optax.ScalarOrSchedule,
    ns_coeffs: tuple[float, float, float]
    | tuple[tuple[float, float, float], ...]
    | str = _NS_PRESETS["standard"],
    ns_steps: int = 5,
    beta: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mask: PyTree = None,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps_root: float = 0.0,
    adam_weight_decay: float = 0.0,
    adam_learning_rate: optax.ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers: PyTree = None,
    consistent_rms: float | None = None,
    interconnect: str | Interconnect | None = None,
) -> optax.GradientTransformation:
    """Muon (``optax.contrib.muon``) with its Newton-Schulz iteration run on sharded weights.

    Takes ``optax.contrib.muon``'s arguments and gives its updates (within float32
    rounding) and its state (the same structure, so either's checkpoint restores into
    the other). In a step of :func:`~shardkit.train.make_train_step` under ``fsdp``,
    ``tp`` or ``dp_tp``, each 2-D matrix's orthogonalization never gathers the matrix
    onto every device and never repeats an iteration on every device: either the
    iteration runs on the matrix's own shards with distributed products (one
    all-reduce of the Gram matrix's upper triangle per iteration), or the step's
    matrices of one shape are dealt out one per device (one all-to-all to their
    owners, one back), whichever the cost model prices lower
    (:func:`~shardkit.train.muon_plan` shows the choice, the bytes and the flops).
    Other parameters (biases, vectors) get AdamW, as in optax.

    What it saves depends on the shapes. Products send one triangle of ``m x m`` per
    iteration for an ``m x n`` matrix (``m <= n``): far less than the compiler's
    repeated gathers when ``m`` is small against ``n`` or the matrix is split by rows,
    less by a smaller margin for large near-square matrices. Measured on 8 CPU devices
    (``shardkit bench train``, MLP 784-w-w-10, batch 256), as a fraction of
    ``optax.contrib.muon``'s step bytes: w=1024 (the bench's default) 0.44 (fsdp), 0.41
    (tp), 0.47 (dp_tp); w=256 0.61, 0.25, 0.26; w=128 0.73, 0.21, 0.23. Under fsdp the
    step's own traffic, the same in both (each layer's forward all-gather, and the
    gradients' all-reduce: the CPU compiler does not make it a reduce-scatter), is a
    third of optax's step at w=256, and the products' Gram sums are a floor while the
    flop bound holds: dealing the model's three matrices would leave one device the
    first layer's whole iteration (5.6x its share). Under ``dp`` (every weight
    replicated) the matrices are split too and their updates all-gathered, which sends
    bytes where optax's repeated iteration sends none.

    Args:
      learning_rate: a float or an optax schedule.
      ns_coeffs: Newton-Schulz coefficients ``(c0, c1, c2)``, a tuple of such per
        iteration, or a preset: ``"standard"``, ``"dion"``.
      ns_steps: Newton-Schulz iterations (a Python int).
      beta: momentum decay.
      eps: added to denominators.
      weight_decay: decoupled weight decay of the Muon matrices (times the rate).
      weight_decay_mask: which parameters decay (a tree or a function of the params).
      mu_dtype: the momentum's dtype.
      nesterov: Nesterov momentum.
      adaptive: scale updates by the dual norm of the momentum.
      preconditioning: ``"frobenius"``, ``"spectral"``, ``"aol"`` or ``"schatten"``.
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay, adam_learning_rate: AdamW's,
        for the parameters Muon leaves out (the rate defaults to ``learning_rate``).
      muon_weight_dimension_numbers: ``optax.contrib.MuonDimensionNumbers`` per
        parameter (or a function of the params); ``None`` leaves marks AdamW. Matrices
        with batch axes or other axes than ``(0, 1)`` take optax's whole-array path.
      consistent_rms: scale updates to this RMS (``sqrt(max(fan_in, fan_out)) *
        consistent_rms``) in place of the width scaling.
      interconnect: the cost model choosing between products and dealing: a preset
        name or an :class:`~shardkit.inspect.Interconnect` (default: the calibrated
        or built-in one, as :func:`shardkit.inspect.interconnect`).

    Returns:
      An ``optax.GradientTransformation``.

    Raises:
      ValueError: an unknown ``ns_coeffs`` preset or ``preconditioning``, coefficients
        not of shape ``(3,)`` or ``(k, 3)``, or fewer than one iteration.
      ImportError: optax is missing (the ``train`` extra).

    Example:
      >>> import optax
      >>> m = shardkit.mesh("8", "x", axis_types="auto")
      >>> model = shardkit.train.MLP((16, 32, 32, 8))
      >>> step, state = shardkit.train.make_train_step(
      ...     model, shardkit.train.muon(0.02), strategy="fsdp", mesh=m,
      ...     key=jax.random.key(0))
      >>> layout = shardkit.train.strategy_layout(model, strategy="fsdp", mesh=m)
      >>> batch = model.batch(jax.random.key(1), 32, layout.batch)
      >>> state, loss0 = step(state, batch)
      >>> state, loss1 = step(state, batch)
      >>> bool(loss1 < loss0)
      True
    """
    optax = _optax()
    ns_coeffs, steps = _check_iteration(ns_coeffs, ns_steps, preconditioning)
    leaves = _Leaves(muon_weight_dimension_numbers, optax.contrib.MuonDimensionNumbers())
    labels, dims_tree = leaves.labels, leaves.dims_tree

    settings = {
        "steps": steps,
        "preconditioning": preconditioning,
        "eps": eps,
        "interconnect": interconnect,
    }
    return optax.partition(
        {
            "muon": optax.chain(
                _scale_by_muon(
                    ns_coeffs, steps, beta, mu_dtype, nesterov, adaptive, dims_tree, settings
                ),
                _scale_by_shape(dims_tree, consistent_rms),
                optax.add_decayed_weights(weight_decay, weight_decay_mask),
                optax.scale_by_learning_rate(learning_rate),
            ),
            "adam": optax.adamw(
                learning_rate=learning_rate if adam_learning_rate is None else adam_learning_rate,
                b1=adam_b1,
                b2=adam_b2,
                eps=eps,
                eps_root=adam_eps_root,
                weight_decay=adam_weight_decay,
                mu_dtype=mu_dtype,
                nesterov=nesterov,
            ),
        },
        labels,
    )


def _check_iteration(ns_coeffs: Any, ns_steps: int, preconditioning: str) -> tuple[Any, int]:
    """``ns_coeffs`` (a preset's name resolved), ``ns_steps`` and ``preconditioning`` checked."""
    if isinstance(ns_coeffs, str):
        if ns_coeffs not in _NS_PRESETS:
            raise ValueError(
                f"muon: ns_coeffs={ns_coeffs!r} is not a preset; choose one of "
                f"{sorted(_NS_PRESETS)} or pass (c0, c1, c2)"
            )
        ns_coeffs = _NS_PRESETS[ns_coeffs]
    if preconditioning not in _PRECONDITIONINGS:
        raise ValueError(
            f"muon: preconditioning={preconditioning!r}; choose one of {list(_PRECONDITIONINGS)}"
        )
    shape = np.shape(np.asarray(ns_coeffs, dtype=np.float64))
    if len(shape) not in (1, 2) or shape[-1] != 3:
        raise ValueError(
            f"muon: ns_coeffs has shape {shape}; pass (c0, c1, c2) or one such triple per "
            "iteration, shape (k, 3)"
        )
    steps = int(ns_steps)
    if steps < 1 or (len(shape) == 2 and shape[0] < 1):
        raise ValueError(f"muon: ns_steps={ns_steps!r} must be at least 1")
    return ns_coeffs, steps


@dataclasses.dataclass(frozen=True)
class _Leaves:
    """Which leaves Muon updates (the rest go to AdamW), from ``muon_weight_dimension_numbers``.

    Attributes:
      given: the dimension numbers (a tree, or a function of the parameters), or None:
        every 2-D leaf, with ``default``.
      default: ``optax.contrib.MuonDimensionNumbers()``.
    """

    given: Any
    default: Any

    def dims_of(self, params: Any) -> Any:
        return self.given(params) if callable(self.given) else self.given

    def labels(self, params: Any) -> Any:
        """``"muon"`` or ``"adam"`` at each leaf (``optax.partition``'s labels)."""
        if self.given is None:
            return jax.tree.map(lambda x: "muon" if np.ndim(x) == 2 else "adam", params)
        return jax.tree.map(
            lambda d, sub: jax.tree.map(lambda _: "adam" if d is None else "muon", sub),
            self.dims_of(params),
            params,
            is_leaf=_is_dims_or_none,
        )

    def dims_tree(self, params: Any) -> Any:
        """Dimension numbers at Muon's leaves, MaskedNode at AdamW's (partition's shape)."""
        optax = _optax()
        masked = optax.MaskedNode()
        mask = jax.tree.map(lambda label: label == "muon", self.labels(params))
        given = self.default if self.given is None else self.dims_of(params)
        return jax.tree.map(
            lambda d, sub: jax.tree.map(lambda on: d if on else masked, sub),
            given,
            mask,
            is_leaf=lambda x: _is_dims_or_none(x) or isinstance(x, optax.MaskedNode),
        )


def _is_dims_or_none(x: Any) -> bool:
    from optax.contrib import MuonDimensionNumbers

    return x is None or isinstance(x, MuonDimensionNumbers)


def _fans(x: Any, dims: Any) -> tuple[int, int]:
    red, out = _axes(np.ndim(x), dims)
    return math.prod(x.shape[a] for a in red), math.prod(x.shape[a] for a in out)


def _axes(ndim: int, dims: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    def norm(a: Any) -> tuple[int, ...]:
        return tuple(i % ndim for i in ((a,) if isinstance(a, int) else a))

    return norm(dims.reduction_axis), norm(dims.output_axis)


def _scale_by_shape(dims_tree: Callable[[Any], Any], consistent_rms: float | None) -> Any:
    """optax's width (or consistent-RMS) scaling of the orthogonalized updates."""
    optax = _optax()

    def scale(u: jax.Array, dims: Any) -> jax.Array:
        fan_in, fan_out = _fans(u, dims)
        if consistent_rms is None:
            return jnp.sqrt(jnp.maximum(1, fan_out / fan_in)) * u
        return jnp.sqrt(jnp.maximum(fan_in, fan_out)) * consistent_rms * u

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        del params
        dims = dims_tree(updates)
        return jax.tree.map(scale, updates, dims, is_leaf=_is_dims_or_none), state

    return optax.GradientTransformation(optax.init_empty_state, update)


def _scale_by_muon(
    ns_coeffs: Any,
    steps: int,
    beta: float,
    mu_dtype: Any,
    nesterov: bool,
    adaptive: bool,
    dims_tree: Callable[[Any], Any],
    settings: dict[str, Any],
) -> Any:
    """optax's ``scale_by_muon`` (its init and state), orthogonalizing on the shards."""
    optax = _optax()
    base = optax.contrib.scale_by_muon(ns_coeffs, steps, beta, mu_dtype=mu_dtype)

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        del params
        mu = optax.tree.update_moment(updates, state.mu, beta, 1)
        count = optax.safe_increment(state.count)
        if nesterov:
            mu_hat = jax.tree.map(
                lambda m, g: beta * m + (1 - beta) * g,
                optax.tree.bias_correction(mu, beta, optax.safe_increment(count)),
                optax.tree.bias_correction(updates, beta, count),
            )
        else:
            mu_hat = optax.tree.bias_correction(mu, beta, count)
        out = _orthogonalize(mu_hat, dims_tree(updates), state.ns_coeffs, settings)
        if adaptive:
            out = jax.tree.map(lambda x, y: jnp.sum(x.conj() * y) * y, mu_hat, out)
        new = state._replace(count=count, mu=optax.tree.cast(mu, mu_dtype))
        return out, new

    return optax.GradientTransformation(base.init, update)


def _orthogonalize(mu_hat: Any, dims: Any, coeffs: jax.Array, settings: dict[str, Any]) -> Any:
    """Every matrix of ``mu_hat`` orthogonalized: the sharded ones together, on the mesh."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(mu_hat)
    dim_leaves = treedef.flatten_up_to(dims)
    out: list[Any] = [None] * len(flat)
    layout, wait = _LAYOUT.get()
    mesh = getattr(layout, "mesh", None)
    if isinstance(mesh, Mesh) and mesh.size > 1 and layout.strategy != "single":
        where = {
            jax.tree_util.keystr(path): s
            for path, s in jax.tree_util.tree_flatten_with_path(
                layout.params, is_leaf=lambda v: isinstance(v, NamedSharding)
            )[0]
        }
        chosen = [
            (i, where[jax.tree_util.keystr(path)])
            for i, ((path, x), d) in enumerate(zip(flat, dim_leaves, strict=True))
            if _shardable(x, d) and isinstance(where.get(jax.tree_util.keystr(path)), NamedSharding)
        ]
        if chosen:
            auto = _auto_view(mesh)
            items = [
                (
                    jax.tree_util.keystr(flat[i][0]),
                    tuple(flat[i][1].shape),
                    s.spec,
                    jnp.dtype(flat[i][1].dtype).itemsize,
                )
                for i, s in chosen
            ]
            steps = settings["steps"]
            plans = plan_matrices(items, auto, steps=steps, link=settings["interconnect"])
            done = orthogonalize_sharded(
                [flat[i][1] for i, _ in chosen],
                plans,
                coeffs,
                auto,
                steps=steps,
                preconditioning=settings["preconditioning"],
                eps=settings["eps"],
                wait=wait,
            )
            for (i, _), y in zip(chosen, done, strict=True):
                out[i] = y
    for i, ((_, x), d) in enumerate(zip(flat, dim_leaves, strict=True)):
        if out[i] is None:
            out[i] = _whole(x, d, coeffs, settings)
    return jax.tree.unflatten(treedef, out)


def _shardable(x: Any, dims: Any) -> bool:
    if np.ndim(x) != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
        return False
    return _axes(2, dims) == ((0,), (1,))


def _whole(x: jax.Array, dims: Any, coeffs: jax.Array, settings: dict[str, Any]) -> jax.Array:
    """optax's iteration on the whole array (batch axes vmapped), for the compiler to partition."""
    red, out = _axes(np.ndim(x), dims)
    batch = tuple(a for a in range(np.ndim(x)) if a not in red + out)
    order = batch + red + out
    sizes = [math.prod(x.shape[a] for a in axes) for axes in (batch, red, out)]
    flat = x.transpose(order).reshape(sizes)

    def one(y: jax.Array) -> jax.Array:
        wide = y.T if y.shape[0] > y.shape[1] else y
        z = newton_schulz(
            wide,
            coeffs,
            steps=settings["steps"],
            preconditioning=settings["preconditioning"],
            eps=settings["eps"],
        )
        return z.T if y.shape[0] > y.shape[1] else z

    done = jax.vmap(one)(flat)
    back = tuple(x.shape[a] for a in order)
    return done.reshape(back).transpose(tuple(np.argsort(order)))


def muon_plan(
    model: PyTree,
    /,
    *,
    strategy: str,
    mesh: Mesh | None = None,
    ns_steps: int = 5,
    rules: Rules | None = None,
    interconnect: str | Interconnect | None = None,
) -> tuple[MuonMatrix, ...]:
    """How :func:`muon` orthogonalizes each matrix of ``model`` under ``strategy`` on ``mesh``.

    One :class:`MuonMatrix` per 2-D parameter: products on its own shards or dealt
    to an owner, the cost model's choice, with the bytes each device sends and the
    Newton-Schulz flops each device does per step, counted by construction from the
    products each device runs (``2 m k n`` per ``m x k`` by ``k x n`` product).

    Args:
      model: a bundled model or your own (as :func:`~shardkit.train.make_train_step`).
      strategy: ``fsdp``, ``tp``, ``dp_tp`` (or ``dp``).
      mesh: the mesh.
      ns_steps: Newton-Schulz iterations.
      rules: path rules, as :func:`~shardkit.train.strategy_layout` takes them.
      interconnect: the cost model (a preset name or an ``Interconnect``).

    Returns:
      A tuple of :class:`MuonMatrix`, in the parameters' order.

    Raises:
      ValueError, TypeError: as :func:`~shardkit.train.strategy_layout`.

    Example:
      >>> m = shardkit.mesh("8", "x", axis_types="auto")
      >>> plan = shardkit.train.muon_plan(
      ...     shardkit.train.MLP((16, 32, 32, 8)), strategy="fsdp", mesh=m)
      >>> [(p.path, p.method, p.variant) for p in plan]
      [("[0]['w']", 'products', 'twice'), ("[1]['w']", 'products', 'twice'), ("[2]['w']", 'products', 'twice')]
      >>> sum(p.flops for p in plan) / (sum(p.total_flops for p in plan) / 8)  # within 1.25
      1.0456...
    """
    t = as_trainable("muon_plan", model, need_loss=False)
    layout = strategy_layout(t, strategy=strategy, mesh=mesh, rules=rules)
    if layout.mesh is None or strategy == "single":
        return ()
    flat = jax.tree_util.tree_flatten_with_path(
        layout.params, is_leaf=lambda v: isinstance(v, NamedSharding)
    )[0]
    abstract = [tuple(a.shape) for a in jax.tree.leaves(t.abstract)]
    items = [
        (jax.tree_util.keystr(path), shape, s.spec, 4)
        for (path, s), shape in zip(flat, abstract, strict=True)
        if len(shape) == 2 and isinstance(s, NamedSharding)
    ]
    return plan_matrices(items, _auto_view(layout.mesh), steps=int(ns_steps), link=interconnect)
