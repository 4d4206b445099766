"""Path rules: which dimension of each parameter a strategy splits, by parameter path.

As in large-model trainers (t5x/MaxText partition rules, flax's logical axes), a rule
is a pair ``(regex, template)``: the first regex that ``re.search`` finds in a
parameter's path (``jax.tree_util.keystr``, e.g. ``"['dense1']['w']"`` or
``".layers[0].weight"``) gives that parameter its template. A template is a
``PartitionSpec``-like tuple whose entries are ``None`` or the logical axis
``"model"``, which each strategy maps to the mesh axes it splits parameters over:

``tp``
  every mesh axis.
``dp_tp``
  the second mesh axis (the model axis of ``(data, model)``).
``fsdp``
  every mesh axis.

``dp`` and ``single`` replicate every parameter and ignore the rules. A parameter no
rule matches gets the default: for ``tp`` and ``dp_tp`` a 2-D kernel is split by
columns (its last dimension), or by rows when only the first divides, else kept
whole; for ``fsdp`` every parameter is split along its largest divisible dimension;
vectors and scalars are replicated under ``tp``. A rule that does not divide raises a
``ValueError`` naming the parameter path, its shape, the spec and the mesh.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from shardkit.layout.internal import check_placement

__all__ = ["MODEL", "Rules", "check_rules", "default_template", "param_specs"]

MODEL = "model"
"""The logical axis of rule templates: the mesh axes a strategy splits parameters over."""

Rules = Sequence[tuple[str, Any]]
"""Path rules: ``(regex, template)`` pairs; the first regex found in a parameter's path wins.

The path is ``jax.tree_util.keystr`` of the parameter's key path (``"['out']['w']"``,
``".layers[0].weight"``); the template holds one entry per dimension, ``None`` or
``"model"`` (:data:`~shardkit.train.MODEL`), the axes the strategy splits parameters
over (every mesh axis for ``tp`` and ``fsdp``, the second for ``dp_tp``). Parameters
no rule matches get the default for dense layers; ``dp`` and ``single`` replicate all.
"""


def check_rules(where: str, rules: Any) -> tuple[tuple[re.Pattern[str], tuple[Any, ...]], ...]:
    """Compile ``rules``, or a ``TypeError``/``ValueError`` naming the bad rule."""
    if rules is None:
        return ()
    example = "e.g. rules=[(r'w1$', (None, 'model')), (r'w2$', ('model', None))]"
    if isinstance(rules, str | bytes) or not isinstance(rules, Sequence):
        raise TypeError(
            f"{where}: rules={rules!r} must be a sequence of (regex, template) pairs, {example}"
        )
    out = []
    for rule in rules:
        if not (isinstance(rule, tuple | list) and len(rule) == 2 and isinstance(rule[0], str)):
            raise TypeError(f"{where}: rule {rule!r} must be a (regex, template) pair, {example}")
        pattern, template = rule
        try:
            compiled = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"{where}: rule regex {pattern!r} does not compile: {e}") from None
        entries = (template,) if template is None or isinstance(template, str) else template
        entries = tuple(entries) if template is not None else ()
        if any(e not in (None, MODEL) for e in entries):
            raise ValueError(
                f"{where}: rule ({pattern!r}, {template!r}): a template holds None or "
                f"{MODEL!r} (the axes the strategy splits parameters over), one entry per "
                f"dimension, {example}"
            )
        out.append((compiled, entries))
    return tuple(out)


def default_template(strategy: str, shape: tuple[int, ...], parts: int) -> tuple[Any, ...]:
    """The template of a parameter no rule matches (see the module docstring)."""
    if strategy == "fsdp":
        divisible = [d for d, n in enumerate(shape) if n % parts == 0]
        if not divisible:
            return ()  # too small to split evenly: kept whole
        dim = max(divisible, key=lambda d: (shape[d], -d))
        return (None,) * dim + (MODEL,)
    if len(shape) != 2:
        return ()
    if shape[1] % parts == 0:
        return (None, MODEL)
    return (MODEL, None) if shape[0] % parts == 0 else ()


def _resolved(template: tuple[Any, ...], axes: tuple[str, ...]) -> P:
    entry = axes[0] if len(axes) == 1 else axes
    return P(*(entry if e == MODEL else None for e in template))


def param_specs(
    abstract: Any,
    /,
    *,
    strategy: str,
    mesh: Mesh,
    axes: tuple[str, ...],
    rules: tuple[tuple[re.Pattern[str], tuple[Any, ...]], ...],
    label: Any = None,
    shown_rules: int | None = None,
) -> Any:
    """The ``PartitionSpec`` of every parameter of ``abstract``, checked against ``mesh``.

    Args:
      abstract: the parameters (arrays or ``jax.ShapeDtypeStruct``).
      strategy: the strategy (``dp`` and ``single`` give ``P()`` everywhere).
      mesh: the mesh.
      axes: the mesh axes ``"model"`` stands for.
      rules: compiled rules (:func:`check_rules`).
      label: ``path -> str`` naming a parameter in errors (default: its key path).
      shown_rules: how many of the first rules are the caller's, named in errors
        (default: all).

    Example:
      >>> m = shardkit.mesh("8", "x", axis_types="auto")
      >>> params = {"w": np.zeros((4, 16)), "b": np.zeros(16)}
      >>> param_specs(params, strategy="tp", mesh=m, axes=("x",), rules=())
      {'b': P(), 'w': P(None, 'x')}
    """
    parts = 1
    for a in axes:
        parts *= mesh.shape[a]
    shown = len(rules) if shown_rules is None else shown_rules
    checks: list[tuple[int, int, str, tuple[int, ...], P]] = []

    def spec(path: Any, leaf: Any) -> P:
        if strategy in ("dp", "single"):
            return P()
        shape = tuple(getattr(leaf, "shape", ()))
        name = jax.tree_util.keystr(path)
        index = next((i for i, (r, _) in enumerate(rules) if r.search(name)), None)
        template = (
            rules[index][1] if index is not None else default_template(strategy, shape, parts)
        )
        result = _resolved(template, axes)
        what = label(path) if label is not None else f"parameter {name}"
        if index is not None and index < shown:
            what += f" (rule {rules[index][0].pattern!r})"
        checks.append((-len(shape), len(checks), what, shape, result))
        return result

    specs = jax.tree_util.tree_map_with_path(spec, abstract)
    # Kernels before vectors: a layer's weight names the problem its bias repeats.
    for _, _, what, shape, result in sorted(checks):
        check_placement(f"make_train_step(strategy={strategy!r}): {what}", shape, result, mesh)
    return specs
