"""``matmul_chain``: the cheapest order and shardings for ``A1 @ A2 @ ... @ An``.

Dynamic programming over the multiplication order (the matrix-chain recursion) and
over a finite set of candidate specs for every operand and intermediate. An edge
``(left spec, right spec) -> result spec`` costs the cheapest
:func:`shardkit.linalg.matmul` candidate producing that result (an algorithm plus
any redistribution of its output), priced by the ``shardkit.inspect`` cost model.

Memory model (per device): every input block is live for the whole chain; while a
subtree is evaluated its left sibling's result stays live; a step holds its operands,
its output and its algorithm's working set. A subtree's best options are kept as a
Pareto front of (communication time, peak memory, bytes of its input blocks), so the
plan is optimal under ``memory_limit`` and not only without it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from shardkit._deprecation import UNSET, moved, pick
from shardkit._typing import ArrayLike, DTypeLike
from shardkit.inspect import Interconnect
from shardkit.inspect import interconnect as _interconnect
from shardkit.layout import format_bytes
from shardkit.layout.internal import (
    SpecLike,
    as_count,
    canonical,
    check_mesh_arg,
    check_placement,
    check_spec_axes,
    drop_unit_axes,
    every_split,
    is_int,
    is_traced,
    mesh_summary,
    normalize,
    parse_spec,
    spec_summary,
    to_pspec,
)
from shardkit.linalg import Candidate
from shardkit.linalg.internal import (
    ALGORITHMS,
    Comm,
    MatmulProblem,
    Spec,
    build,
    enumerate_variants,
    price,
    spec_text,
)

__all__ = ["ChainPlan", "ChainStep", "candidate_specs", "matmul_chain"]

MatrixShape = tuple[int, int]


def candidate_specs(shape: Sequence[int], mesh: Mesh) -> tuple[PartitionSpec, ...]:
    """Every way to split a matrix over the mesh axes that divides ``shape``.

    Each mesh axis (of size > 1) splits the rows, the columns or nothing; axes sharing
    a dimension are taken in every order: ``P()``, ``P('x')``, ``P(None, 'x')``,
    ``P('x', 'y')``, ``P(('x', 'y'))``, ...

    Example:
      >>> [str(s) for s in candidate_specs((16, 16), shardkit.mesh("8", "x"))]
      ['P()', "P('x',)", "P(None, 'x')"]
    """
    if len(shape) != 2 or not all(is_int(n) and n >= 1 for n in shape):
        raise ValueError(
            f"candidate_specs: shape={tuple(shape)!r} is not a matrix shape; give "
            "(rows, columns), two positive sizes"
        )
    mesh = check_mesh_arg("candidate_specs", mesh)
    found = {canonical(to_pspec(s)) for s in every_split(shape, dict(mesh.shape))}
    return tuple(sorted(found, key=lambda p: (sum(map(len, normalize(p, 2))), str(p))))


@dataclass(frozen=True)
class ChainStep:
    """One product of the plan.

    Attributes:
      left: operand index (``int``) or earlier step index (``"s0"``) of the left factor.
      right: the same for the right factor.
      algorithm: the :func:`shardkit.linalg.matmul` algorithm.
      detail: its flavour.
      in_specs: the two factors' specs.
      out_spec: the result's spec.
      collectives: predicted collectives (algorithm, then redistribution).
      comm_time_s: predicted communication seconds.
    """

    left: int | str
    right: int | str
    algorithm: str
    detail: str
    in_specs: tuple[PartitionSpec, PartitionSpec]
    out_spec: PartitionSpec
    collectives: tuple[Comm, ...]
    comm_time_s: float
    candidate: Candidate


@dataclass(frozen=True)
class ChainPlan:
    """An order, the specs of every operand and intermediate, and what it will send.

    Attributes:
      mesh: the mesh.
      shapes: the operands' shapes.
      order: the parenthesization, e.g. ``"((A0 A1) (A2 A3))"``.
      in_specs: the spec to place each operand with.
      steps: the products in execution order.
      comm_time_s: predicted communication seconds (the objective).
      peak_bytes: predicted per-device peak memory under the chain's memory model.
      memory_limit: the limit it was planned under, or None.
      dtype: the element type priced.
    """

    mesh: Mesh
    shapes: tuple[MatrixShape, ...]
    order: str
    in_specs: tuple[PartitionSpec, ...]
    steps: tuple[ChainStep, ...]
    comm_time_s: float
    peak_bytes: int
    memory_limit: int | None
    dtype: str

    @property
    def out_spec(self) -> PartitionSpec:
        """The result's spec."""
        return self.steps[-1].out_spec if self.steps else self.in_specs[0]

    @property
    def collectives(self) -> tuple[Comm, ...]:
        """Every predicted collective, step by step."""
        return tuple(c for s in self.steps for c in s.collectives)

    @property
    def predicted(self) -> dict[str, tuple[int, int]]:
        """``{kind: (runs, bytes sent per device)}`` over the whole chain."""
        out: dict[str, tuple[int, int]] = {}
        for c in self.collectives:
            runs, sent = out.get(c.kind, (0, 0))
            out[c.kind] = (runs + c.count, sent + c.total_sent_bytes)
        return out

    @property
    def bytes_sent(self) -> int:
        """Predicted bytes one device sends over the chain."""
        return sum(c.total_sent_bytes for c in self.collectives)

    def place(self, *arrays: ArrayLike) -> tuple[jax.Array, ...]:
        """The operands placed with :attr:`in_specs` (free of collectives under ``jit``)."""
        if len(arrays) != len(self.shapes):
            raise ValueError(
                f"ChainPlan: got {len(arrays)} arrays for a chain of {len(self.shapes)}"
            )
        out = []
        explicit = all(t == AxisType.Explicit for t in self.mesh.axis_types)
        for i, (x, s) in enumerate(zip(arrays, self.in_specs, strict=True)):
            if tuple(np.shape(x)) != self.shapes[i]:
                raise ValueError(
                    f"ChainPlan.apply: operand {i} has shape {tuple(np.shape(x))}, planned "
                    f"for {self.shapes[i]}"
                )
            dt = np.dtype(
                x.dtype
                if isinstance(x, jax.Array | np.ndarray | np.generic)
                else np.asarray(x).dtype
            )
            if dt.name != self.dtype:
                raise ValueError(
                    f"ChainPlan.apply: operand {i} is {dt.name} but the plan "
                    f"was priced for {self.dtype}; plan with matmul_chain(..., dtype=...) or "
                    "cast the operands"
                )
            sh = NamedSharding(self.mesh, s)
            if is_traced(x):
                x = (
                    jax.sharding.reshard(x, sh)
                    if explicit
                    else jax.lax.with_sharding_constraint(x, sh)
                )
            elif not (isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sh, 2)):
                x = jax.device_put(x, sh)
            out.append(x)
        return tuple(out)

    def apply(self, *arrays: ArrayLike) -> jax.Array:
        """Place the operands as planned and run the products in order.

        Example:
          >>> m = shardkit.mesh("8", "x")
          >>> plan = shardkit.plan.matmul_chain([(16, 8), (8, 16), (16, 8)], mesh=m, memory_limit=1024)
          >>> mats = [np.ones(s, np.float32) for s in plan.shapes]  # priced as float32
          >>> float(np.asarray(plan.apply(*mats))[0, 0])
          128.0
        """
        vals: list[Any] = list(self.place(*arrays))
        results: list[jax.Array] = []
        for step in self.steps:
            x = vals[step.left] if isinstance(step.left, int) else results[int(step.left[1:])]
            y = vals[step.right] if isinstance(step.right, int) else results[int(step.right[1:])]
            sizes = dict(self.mesh.shape)
            sa, sb = (drop_unit_axes(normalize(p, 2), sizes) for p in step.in_specs)
            results.append(build(step.candidate, self.mesh, sa, sb, ())(x, y))
        return results[-1] if results else vals[0]

    def __rich__(self) -> Group:
        limit = (
            "no memory limit"
            if self.memory_limit is None
            else f"limit {format_bytes(self.memory_limit)}"
        )
        table = Table(
            title=f"{self.order} on {mesh_summary(self.mesh)} ({limit})", title_justify="left"
        )
        for col in ("step", "left", "right", "algorithm", "specs", "collectives", "sent/dev"):
            table.add_column(col)
        for i, s in enumerate(self.steps):
            comms = ", ".join(f"{c.count}x {c.kind}" for c in s.collectives) or "none"
            table.add_row(
                f"s{i}",
                f"A{s.left}" if isinstance(s.left, int) else s.left,
                f"A{s.right}" if isinstance(s.right, int) else s.right,
                f"{s.algorithm} {s.detail}".strip(),
                f"{_txt(s.in_specs[0])} @ {_txt(s.in_specs[1])} -> {_txt(s.out_spec)}",
                comms,
                format_bytes(sum(c.total_sent_bytes for c in s.collectives)),
            )
        head = ", ".join(f"A{i}: {_txt(p)}" for i, p in enumerate(self.in_specs))
        return Group(
            Text(f"inputs {head}"),
            table,
            Text(
                f"predicted: {format_bytes(self.bytes_sent)} sent/device, "
                f"peak {format_bytes(self.peak_bytes)}/device, comm {self.comm_time_s * 1e6:.3g} us"
            ),
        )

    def __str__(self) -> str:
        console = Console(width=140, no_color=True, highlight=False)
        with console.capture() as capture:
            console.print(self)
        return capture.get().rstrip()

    def _repr_html_(self) -> str:
        from shardkit._display import rich_html

        return rich_html(self, width=140)


def _txt(p: PartitionSpec) -> str:
    return spec_text(normalize(p, 2))


# ---- the model: one step's options -------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    sizes: tuple[tuple[str, int], ...]
    itemsize: int
    link: Interconnect

    def norm(self, p: PartitionSpec) -> Spec:
        return drop_unit_axes(normalize(p, 2), dict(self.sizes))

    def block(self, shape: MatrixShape, p: PartitionSpec) -> int:
        d = dict(self.sizes)
        s = self.norm(p)
        return self.itemsize * math.prod(
            n // math.prod(d[a] for a in e) for n, e in zip(shape, s, strict=True)
        )


# Plain cost figures keyed on sizes (no mesh, no program): a planner's search reads
# them many times, apart from the program cache (shardkit._programs).
@functools.lru_cache(maxsize=200_000)
def step_options(
    ctx: _Ctx,
    sa_shape: MatrixShape,
    sb_shape: MatrixShape,
    sa: PartitionSpec,
    sb: PartitionSpec,
    target: PartitionSpec,
) -> tuple[tuple[float, int, Candidate], ...]:
    """``(comm seconds, working bytes, candidate)`` for one product, Pareto-pruned.

    Working bytes: the step's memory beyond its two operand blocks (output,
    temporaries, redistribution buffers).
    """
    problem = MatmulProblem(
        a=ctx.norm(sa),
        b=ctx.norm(sb),
        m=sa_shape[0],
        k=sa_shape[1],
        n=sb_shape[1],
        sizes=ctx.sizes,
        itemsize=ctx.itemsize,
    )
    variants, _ = enumerate_variants(problem, tuple(ALGORITHMS))
    tgt = ctx.norm(target)
    inputs = ctx.block(sa_shape, sa) + ctx.block(sb_shape, sb)
    opts = []
    for v in variants:
        c = price(problem, v, ctx.link, target=tgt)
        opts.append((c.comm_time_s, c.peak_bytes - inputs, c))
    opts.sort(key=lambda o: (o[0], o[1], o[2].bytes_sent, o[2].rank_key))
    front: list[tuple[float, int, Candidate]] = []
    for o in opts:
        if not any(f[0] <= o[0] and f[1] <= o[1] for f in front):
            front.append(o)
    return tuple(front)


@dataclass(frozen=True)
class _Option:
    cost: float
    peak: int  # subtree peak, its own input blocks included
    leaves: int  # bytes of the subtree's input blocks
    tree: Any  # ("leaf", i, spec) | ("node", left _Option, right _Option, spec, Candidate)


def combine(
    left: _Option, right: _Option, res_left: int, res_right: int, step: tuple[float, int, Candidate]
) -> tuple[float, int]:
    """Cost and peak of evaluating left, then right, then their product."""
    cost = left.cost + right.cost + step[0]
    peak = max(
        left.peak + right.leaves,
        left.leaves + res_left + right.peak,
        left.leaves + right.leaves + res_left + res_right + step[1],
    )
    return cost, peak


def _pareto(options: Iterable[_Option]) -> list[_Option]:
    out: list[_Option] = []
    for o in sorted(options, key=lambda o: (o.cost, o.peak, o.leaves)):
        if not any(f.cost <= o.cost and f.peak <= o.peak and f.leaves <= o.leaves for f in out):
            out.append(o)
    return out


def matmul_chain(
    shapes: Sequence[Sequence[int]],
    legacy_mesh: Mesh | None = None,
    /,
    *,
    mesh: Mesh | None = None,
    memory_limit: int | None = None,
    out_spec: SpecLike = None,
    in_specs: Sequence[SpecLike] | None = None,
    candidates: Sequence[SpecLike] | None = None,
    dtype: DTypeLike = np.float32,
    interconnect: str | Interconnect | None = None,
    specs: Sequence[SpecLike] | None = None,
) -> ChainPlan:
    """Plan ``A0 @ A1 @ ... @ An-1``: order and specs of least predicted communication.

    Minimizes the predicted communication time (``shardkit.inspect`` cost model)
    over every parenthesization and every candidate spec (:func:`candidate_specs`) of
    each operand and intermediate, keeping the predicted per-device peak memory at
    most ``memory_limit``. Without a limit, replicating everything costs nothing to
    communicate and wins; the limit is what makes the question interesting.

    Args:
      shapes: the matrices' shapes ``(m, k), (k, n), ...``.
      legacy_mesh: deprecated; the positional mesh of earlier releases. Pass ``mesh=``.
      mesh: the device mesh (required).
      memory_limit: per-device bytes the plan may hold at its peak, or None.
      out_spec: the result's spec, or None for the cheapest.
      in_specs: fixes the operands' specs, one per matrix (None entries stay free).
      candidates: the candidate specs to search (default: :func:`candidate_specs`).
      dtype: the element type priced.
      interconnect: cost-model preset name or ``Interconnect``; None: the preset
        ``shardkit bench calibrate`` saved for these devices, else ``"shared-memory"``.
      specs: deprecated name of ``candidates``.

    Returns:
      A :class:`ChainPlan`; ``plan.apply(*arrays)`` runs it.

    Raises:
      TypeError: ``mesh`` is missing or not a ``Mesh``; ``shapes``, ``in_specs`` or ``dtype`` of
        the wrong kind.
      ValueError: fewer than one matrix, a shape that is not a pair of positive sizes,
        shapes that do not chain, an ``in_specs`` without one entry per matrix, a spec
        naming an axis the mesh lacks or not dividing its matrix, a ``memory_limit``
        below 1, or no plan within ``memory_limit``.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> plan = matmul_chain([(16, 16)] * 4, mesh=m)
      >>> plan.bytes_sent  # without a memory limit nothing needs to move
      0
      >>> matmul_chain([(16, 16)] * 4, mesh=m, memory_limit=1024).bytes_sent > 0
      True
    """
    shp = _check_shapes(shapes)
    mesh, candidates = _legacy_arguments(legacy_mesh, mesh, specs, candidates)
    memory_limit = _check_chain(shp, memory_limit)
    dtype = _check_dtype(dtype)
    link = _interconnect(interconnect)
    ctx = _Ctx(
        tuple((str(k), int(v)) for k, v in mesh.shape.items() if v > 1),
        dtype.itemsize,
        link,
    )
    pool = (
        None
        if candidates is None
        else tuple(_spec_arg("candidates", i, s, None, mesh) for i, s in enumerate(candidates))
    )

    def cands(shape: MatrixShape) -> tuple[PartitionSpec, ...]:
        base = candidate_specs(shape, mesh)
        return base if pool is None else tuple(p for p in pool if p in base)

    n = len(shp)
    fixed = _check_in_specs(in_specs, shp, mesh)
    result = (shp[0][0], shp[-1][1])
    target_out = None if out_spec is None else _spec_arg("out_spec", None, out_spec, result, mesh)
    limit = math.inf if memory_limit is None else memory_limit
    # best[(i, j)][spec] -> Pareto options for the product A_i..A_j with that spec.
    best: dict[tuple[int, int], dict[PartitionSpec, list[_Option]]] = {}
    for i in range(n):
        given = fixed[i]
        allowed = cands(shp[i]) if given is None else (given,)
        best[i, i] = {}
        for p in allowed:
            b = ctx.block(shp[i], p)
            if b <= limit:
                best[i, i][p] = [_Option(0.0, b, b, ("leaf", i, p))]
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            targets = cands((shp[i][0], shp[j][1]))
            if j - i == n - 1 and target_out is not None:
                targets = (target_out,)
            table = _product_options(ctx, shp, best, (i, j), targets, limit)
            best[i, j] = {t: _pareto(opts) for t, opts in table.items()}
    finals = [o for opts in best[0, n - 1].values() for o in opts]
    if not finals:
        raise ValueError(
            f"matmul_chain: no plan for shapes={list(shp)} on {mesh_summary(mesh)} fits "
            f"memory_limit={memory_limit} bytes per device; raise the limit, use a larger "
            "mesh, or allow more specs"
        )
    top = min(finals, key=lambda o: (o.cost, o.peak))
    return _to_plan(top, mesh, shp, memory_limit, dtype.name)


def _product_options(
    ctx: _Ctx,
    shp: tuple[MatrixShape, ...],
    best: dict[tuple[int, int], dict[PartitionSpec, list[_Option]]],
    span: tuple[int, int],
    targets: tuple[PartitionSpec, ...],
    limit: float,
) -> dict[PartitionSpec, list[_Option]]:
    """Every option within ``limit`` for the product ``A_i..A_j`` (``span``), by its spec.

    Each split ``A_i..A_k @ A_k+1..A_j`` combines the two sides' options (``best``)
    with every step that makes a ``targets`` spec of their product.
    """
    i, j = span
    table: dict[PartitionSpec, list[_Option]] = {}
    for k in range(i, j):
        lshape, rshape = (shp[i][0], shp[k][1]), (shp[k + 1][0], shp[j][1])
        for sl, lopts in best[i, k].items():
            res_l = 0 if k == i else ctx.block(lshape, sl)
            for sr, ropts in best[k + 1, j].items():
                res_r = 0 if k + 1 == j else ctx.block(rshape, sr)
                for t in targets:
                    for step in step_options(ctx, lshape, rshape, sl, sr, t):
                        for lo in lopts:
                            for ro in ropts:
                                cost, peak = combine(lo, ro, res_l, res_r, step)
                                if peak <= limit:
                                    table.setdefault(t, []).append(
                                        _Option(
                                            cost,
                                            peak,
                                            lo.leaves + ro.leaves,
                                            ("node", lo, ro, t, step[2]),
                                        )
                                    )
    return table


# ---- argument checks ------------------------------------------------------------------


def _legacy_arguments(legacy_mesh: Any, mesh: Any, specs: Any, candidates: Any) -> tuple[Mesh, Any]:
    """``(mesh, candidates)`` from the new keywords, or the old spellings (deprecated)."""
    if moved(
        "matmul_chain",
        old="the positional mesh, matmul_chain(shapes, mesh)",
        new="matmul_chain(shapes, mesh=mesh)",
        old_given=legacy_mesh is not None,
        new_given=mesh is not None,
        stacklevel=5,  # the caller of matmul_chain, through this helper
    ):
        mesh = legacy_mesh
    candidates = pick(
        "matmul_chain",
        old="specs=",
        old_value=UNSET if specs is None else specs,
        new="candidates=",
        new_value=candidates,
        stacklevel=5,
    )
    if mesh is None:
        raise TypeError(
            "matmul_chain: mesh= is missing; pass the device mesh, e.g. "
            "matmul_chain(shapes, mesh=shardkit.mesh('2x4', 'x,y'))"
        )
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"matmul_chain: mesh={mesh!r} ({type(mesh).__name__}) must be a "
            "jax.sharding.Mesh, e.g. shardkit.mesh('2x4', 'x,y')"
        )
    return mesh, candidates


def _check_chain(shp: tuple[MatrixShape, ...], memory_limit: int | None) -> int | None:
    """``memory_limit`` a positive count or None, and the shapes chain."""
    if memory_limit is not None:
        memory_limit = as_count(
            "matmul_chain", "memory_limit", memory_limit, minimum=1, fix="bytes per device, or None"
        )
    for i in range(len(shp) - 1):
        if shp[i][1] != shp[i + 1][0]:
            raise ValueError(
                f"matmul_chain: shapes[{i}]={shp[i]} and shapes[{i + 1}]={shp[i + 1]} do not "
                "chain; each matrix's columns must equal the next one's rows"
            )
    return memory_limit


def _check_shapes(shapes: Any) -> tuple[MatrixShape, ...]:
    """Each shape a pair of positive ints (NumPy integers too), named on failure."""
    if isinstance(shapes, str) or not isinstance(shapes, Sequence | np.ndarray):
        raise TypeError(
            f"matmul_chain: shapes={shapes!r} must be a list of matrix shapes, "
            "e.g. [(16, 8), (8, 32)]"
        )
    if len(shapes) == 0:
        raise ValueError("matmul_chain: shapes=[] is empty; give at least one matrix")
    out: list[MatrixShape] = []
    for i, s in enumerate(shapes):
        if isinstance(s, str) or not isinstance(s, Sequence | np.ndarray) or len(s) != 2:
            raise ValueError(
                f"matmul_chain: shapes[{i}]={s!r} is not a matrix shape; each operand is a "
                "2-D matrix given as (rows, columns). Reshape higher-rank operands to 2-D "
                "(or use shardkit.linalg.matmul, which takes batch dimensions)"
            )
        if not all(is_int(d) and d >= 1 for d in s):
            raise ValueError(
                f"matmul_chain: shapes[{i}]={tuple(s)!r}: sizes must be positive integers; "
                "give every dimension a size of at least 1"
            )
        out.append((int(s[0]), int(s[1])))
    return tuple(out)


def _check_dtype(dtype: Any) -> np.dtype[Any]:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind not in "biufc":
        raise TypeError(
            f"matmul_chain: dtype={dtype!r} is not a numeric dtype; pass e.g. "
            "dtype=np.float32 or 'float64'"
        )
    return dt


def _spec_arg(
    name: str, index: int | None, value: Any, shape: MatrixShape | None, mesh: Mesh
) -> PartitionSpec:
    """A spec argument parsed, its axes checked against ``mesh`` (and ``shape`` if given)."""
    label = name if index is None else f"{name}[{index}]"
    p = parse_spec(value)
    if len(p) > 2:
        raise ValueError(
            f"matmul_chain: {label}={spec_summary(p)} has {len(p)} entries, but the chain's "
            "matrices are 2-D; give at most two entries (rows, columns)"
        )
    where = f"matmul_chain({label})"
    if shape is None:
        check_spec_axes(where, None, p, mesh)
    else:
        check_placement(where, shape, p, mesh)
    return canonical(p)


def _check_in_specs(
    in_specs: Sequence[Any] | None, shp: tuple[MatrixShape, ...], mesh: Mesh
) -> list[PartitionSpec | None]:
    n = len(shp)
    if in_specs is None:
        return [None] * n
    if isinstance(in_specs, str | PartitionSpec) or not isinstance(in_specs, Sequence):
        raise TypeError(
            f"matmul_chain: in_specs={in_specs!r} must be a list with one spec (or None) per "
            f"matrix, e.g. in_specs=['x', None] for {n} matrices"
        )
    if len(in_specs) != n:
        raise ValueError(
            f"matmul_chain: in_specs has {len(in_specs)} entries for a chain of {n} matrices; "
            "give one spec per matrix, None where the planner may choose"
        )
    return [
        None if p is None else _spec_arg("in_specs", i, p, shp[i], mesh)
        for i, p in enumerate(in_specs)
    ]


def _to_plan(
    top: _Option, mesh: Mesh, shp: tuple[MatrixShape, ...], limit: int | None, dtype: str
) -> ChainPlan:
    in_specs: dict[int, PartitionSpec] = {}
    steps: list[ChainStep] = []

    def walk(o: _Option) -> tuple[int | str, PartitionSpec, str]:
        if o.tree[0] == "leaf":
            _, i, p = o.tree
            in_specs[i] = p
            return i, p, f"A{i}"
        _, lo, ro, t, cand = o.tree
        left, lp, ltxt = walk(lo)
        right, rp, rtxt = walk(ro)
        steps.append(
            ChainStep(
                left,
                right,
                cand.algorithm,
                cand.detail,
                (lp, rp),
                t,
                cand.collectives,
                cand.comm_time_s,
                cand,
            )
        )
        return f"s{len(steps) - 1}", t, f"({ltxt} {rtxt})"

    _, _, order = walk(top)
    return ChainPlan(
        mesh=mesh,
        shapes=shp,
        order=order,
        in_specs=tuple(in_specs[i] for i in range(len(shp))),
        steps=tuple(steps),
        comm_time_s=top.cost,
        peak_bytes=top.peak,
        memory_limit=limit,
        dtype=dtype,
    )
