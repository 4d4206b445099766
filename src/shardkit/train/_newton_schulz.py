"""Muon's Newton-Schulz orthogonalization of sharded matrices: the plan and the kernels.

``optax.contrib.muon`` left to the compiler partitions each product of the iteration
``X <- c0 X + (c1 A + c2 A^2) X`` (``A = X X^T``, ``X`` the wide way round) by the
parameter's split: a matrix split by rows is gathered to every device for ``X X^T``
and again for ``B X``, each iteration, and ``A^2`` is computed whole on every device.
Here every 2-D matrix of a step is orthogonalized inside one ``shard_map`` over the
whole mesh of ``P`` devices in one of two ways, whichever the cost model
(:func:`shardkit.inspect.interconnect`: alpha-beta collectives plus flops at
``peak_flops``) prices lower:

``products``
  The matrix is re-split by columns over all ``P`` devices (its *working layout*:
  a local slice where the parameter is split by columns or replicated, one
  all-to-all over the row axes where it is split by rows; zero columns pad what the
  mesh does not divide, which changes nothing: a zero column stays zero). Each
  iteration sums the Gram matrix ``X X^T`` of the local columns with one all-reduce
  of its upper triangle (``m (m+1) / 2`` numbers, ``A`` is symmetric), then every
  device updates its own columns. ``A^2`` is the one product left, in three variants
  priced per matrix: ``twice`` computes ``A (A X_j)`` (``6 m^2 n / P`` flops, no
  further collective), ``gram`` computes ``A^2`` whole on every device (``2 m^3``:
  cheap where ``m`` is small against ``n / P``), and ``split`` computes ``A^2``'s
  columns ``J`` on device ``J`` and all-gathers ``B`` (``m^2`` more numbers, the
  flops exactly shared). Each matrix takes its cheapest variant; where the step's
  Newton-Schulz flops per device would exceed 1.25x an even share of the one-device
  count, iterations move to variants with fewer flops, one iteration at a time (the
  best flops saved per second added first), until they do not: a matrix may run
  some iterations ``twice`` and the rest ``split``, so it all-gathers ``B`` only as
  often as the bound needs.
``dealt``
  ``P`` matrices of one shape (whatever their splits) are dealt out one per device: one
  all-to-all brings each device its whole matrix (one gather to its owner), the
  owner iterates alone, and one all-to-all sends the columns back (one scatter).
  Two matrix-sized exchanges per ``P`` matrices, and each device does one matrix's
  flops. Groups of fewer than ``P`` are not dealt (a device would idle).

A matrix replicated on part of the mesh (``dp_tp``'s data axis, ``tp``'s unpaired
last layer) is split over those devices too and its update all-gathered over them at
the end, so no device repeats another's iteration. Every collective of the program is
chained to the one before through a data dependency (the CPU runtime would otherwise
hang on two in flight at once).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from shardkit.inspect import Interconnect, interconnect
from shardkit.linalg.internal import after, axis_index, dslice

__all__ = [
    "MuonMatrix",
    "NewtonSchulzVariant",
    "newton_schulz",
    "orthogonalize_sharded",
    "plan_matrices",
]

NewtonSchulzVariant = Literal["twice", "gram", "split", "local"]
NewtonSchulzMethod = Literal["products", "dealt"]

# The step's Newton-Schulz flops a device may do, over its even share.
_FLOP_SLACK = 1.25
_VARIANTS: tuple[NewtonSchulzVariant, ...] = ("twice", "gram", "split")
_WHOLE: tuple[NewtonSchulzVariant, ...] = ("twice", "gram")  # no A^2 all-gather


@dataclass(frozen=True)
class MuonMatrix:
    """How one matrix's Newton-Schulz iteration runs on the mesh (see :func:`~shardkit.train.muon_plan`).

    Attributes:
      path: the parameter's key path (``"[1]['w']"``).
      shape: the parameter's shape.
      spec: its ``PartitionSpec`` on the mesh.
      method: ``"products"`` (its own shards, distributed products) or ``"dealt"``
        (iterated whole on one owner device).
      variant: how ``products`` forms ``A^2`` (``twice``, ``gram`` or ``split``);
        ``local`` for a dealt matrix.
      split_steps: of the iterations, how many form ``A^2`` with ``split`` in place
        of ``variant`` (the flop bound's trade: fewer flops, one all-gather of ``B``
        each); 0 unless the bound asked for it.
      owner: the owner's index over the mesh (``dealt``), else None.
      bytes_sent: predicted bytes each device sends for this matrix per step.
      flops: Newton-Schulz flops per device for this matrix per step (its share of a
        dealt group: one matrix's on each owner), counted by construction.
      total_flops: the same iteration's flops on one device.
      seconds: the cost model's time for the matrix (a dealt group's over its size).
    """

    path: str
    shape: tuple[int, ...]
    spec: P
    method: NewtonSchulzMethod
    variant: NewtonSchulzVariant
    owner: int | None
    bytes_sent: float
    flops: float
    total_flops: float
    seconds: float
    split_steps: int = 0

    def variants(self, steps: int) -> tuple[NewtonSchulzVariant, ...]:
        """The variant of each of ``steps`` iterations (the ``split`` ones last)."""
        k = min(self.split_steps, steps)
        return (self.variant,) * (steps - k) + ("split",) * k


# ---- layouts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    """A matrix the wide way round (``m <= n``) and how its blocks sit on the mesh."""

    transposed: bool
    m: int
    n: int
    rows: tuple[str, ...]  # axes splitting the m dimension
    cols: tuple[str, ...]  # axes splitting the n dimension
    free: tuple[str, ...]  # axes it is replicated over
    width: int  # columns per device in the working layout
    padded: int  # local columns (n / |cols|) padded to a multiple of |free| |rows|


def _entry_axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _size(mesh: Mesh, axes: tuple[str, ...]) -> int:
    return math.prod(mesh.shape[a] for a in axes)


def _layout(shape: tuple[int, ...], spec: P, mesh: Mesh) -> _Layout:
    entries = tuple(spec) + (None,) * (2 - len(tuple(spec)))
    r_ax, c_ax = _entry_axes(entries[0]), _entry_axes(entries[1])
    r, c = shape
    transposed = r > c
    if transposed:
        r, c, r_ax, c_ax = c, r, c_ax, r_ax
    used = set(r_ax) | set(c_ax)
    free = tuple(str(a) for a in mesh.axis_names if a not in used)
    q = _size(mesh, free) * _size(mesh, r_ax)
    local = c // _size(mesh, c_ax)
    padded = -(-local // q) * q
    return _Layout(transposed, r, c, r_ax, c_ax, free, padded // q, padded)


def _to_working(x: jax.Array, lay: _Layout, mesh: Mesh) -> jax.Array:
    """A device's block of the parameter -> its ``m x width`` columns of the wide matrix."""
    if lay.transposed:
        x = x.T
    if x.shape[1] < lay.padded:
        x = jnp.pad(x, ((0, 0), (0, lay.padded - x.shape[1])))
    if lay.free:
        part = lay.padded // _size(mesh, lay.free)
        x = dslice(x, (0, axis_index(lay.free) * part), (x.shape[0], part))
    if lay.rows:
        x = lax.all_to_all(x, lay.rows, 1, 0, tiled=True)
    return x


def _from_working(x: jax.Array, lay: _Layout, local_cols: int) -> jax.Array:
    """The inverse of :func:`_to_working`: the device's block of the update."""
    if lay.rows:
        x = lax.all_to_all(x, lay.rows, 0, 1, tiled=True)
    if lay.free:
        x = lax.all_gather(x, lay.free, axis=1, tiled=True)
    x = x[:, :local_cols]
    return x.T if lay.transposed else x


# ---- the iteration ------------------------------------------------------------------------


def _sum_symmetric(g: jax.Array, ax: tuple[str, ...]) -> jax.Array:
    """``psum`` of a symmetric matrix over ``ax``, sending its upper triangle only."""
    if not ax:
        return g
    iu = np.triu_indices(g.shape[0])
    upper = jnp.zeros_like(g).at[iu].set(lax.psum(g[iu], ax))
    return upper + jnp.triu(upper, 1).T


def _precondition(
    x: jax.Array, g: jax.Array, preconditioning: str, eps: Any
) -> tuple[jax.Array, jax.Array]:
    """``(x, A)`` scaled as optax scales them before (or in) the first iteration.

    Everything comes from the Gram matrix ``g = X X^T`` (Frobenius norm: its trace;
    spectral norm: its largest eigenvalue), so no collective beyond the first Gram sum.
    """
    if preconditioning == "aol":
        s = lax.rsqrt(jnp.clip(jnp.abs(g).sum(axis=-1), min=eps))
        return x * s[:, None], g * s[:, None] * s[None, :]
    if preconditioning == "schatten":
        s = lax.rsqrt(jnp.clip(jnp.linalg.norm(g, ord="fro"), min=eps))
        return x * s, g * s * s
    if preconditioning == "spectral":
        norm = jnp.sqrt(jnp.clip(jnp.linalg.eigvalsh(g)[-1], min=0))
    else:  # frobenius
        norm = jnp.sqrt(jnp.clip(jnp.trace(g), min=0))
    s = 1 / (norm + eps)
    return x * s, g * s * s


def newton_schulz(
    x: jax.Array,
    coeffs: jax.Array,
    /,
    *,
    steps: int,
    preconditioning: str,
    eps: Any,
    ax: tuple[str, ...] = (),
    p: int = 1,
    variant: NewtonSchulzVariant | Sequence[NewtonSchulzVariant] = "local",
) -> jax.Array:
    """Muon's orthogonalization of ``X`` (``m x n``, ``m <= n``) held as column blocks.

    ``x`` is this device's ``m x w`` columns; the blocks over ``ax`` (``p`` devices) make
    up ``X``. With ``ax=()`` it is ``optax.contrib.muon``'s iteration on one device.
    ``coeffs`` is ``(3,)`` (``steps`` iterations) or ``(k, 3)`` (one row per iteration).
    ``variant``: one for every iteration, or one per iteration.
    """
    coeffs = coeffs.astype(x.dtype)
    rows = [coeffs] * steps if coeffs.ndim == 1 else [coeffs[i] for i in range(coeffs.shape[0])]
    kinds = (variant,) * len(rows) if isinstance(variant, str) else tuple(variant)
    m = x.shape[0]
    pad = (-m) % p if "split" in kinds else 0
    if pad:  # zero rows stay zero and leave the others alone
        x = jnp.pad(x, ((0, pad), (0, 0)))
    x, a = _precondition(x, _sum_symmetric(x @ x.T, ax), preconditioning, eps)
    for i, (c, kind) in enumerate(zip(rows, kinds, strict=True)):
        if i:
            a = _sum_symmetric(x @ x.T, ax)
        if kind == "twice":
            ax_ = a @ x
            x = c[0] * x + c[1] * ax_ + c[2] * (a @ ax_)
            continue
        if kind == "split":
            part = a.shape[0] // p
            aj = dslice(a, (0, axis_index(ax) * part), (a.shape[0], part))
            b = lax.all_gather(c[1] * aj + c[2] * (a @ aj), ax, axis=1, tiled=True)
        else:
            b = c[1] * a + c[2] * (a @ a)
        x = c[0] * x + b @ x
    return x[:m] if pad else x


# ---- the plan -----------------------------------------------------------------------------


def _iteration_flops(m: float, n: float) -> float:
    """One iteration on one device: ``X X^T``, ``A^2`` and ``B X``."""
    return 2 * m * m * n + 2 * m**3 + 2 * m * m * n


def _variant_cost(
    v: NewtonSchulzVariant, lay: _Layout, p: int, steps: int, link: Interconnect, itemsize: int
) -> tuple[float, float, float]:
    """``(bytes sent per device, flops per device, seconds)`` of ``products`` with ``v``."""
    m, w = lay.m, lay.width
    tri = m * (m + 1) / 2 * itemsize
    sent = 2 * (p - 1) / p * tri
    seconds = link.time("all-reduce", p, tri)
    if v == "twice":
        flops = 2 * m * m * w + 4 * m * m * w
    elif v == "gram":
        flops = 2 * m * m * w + 2 * m**3 + 2 * m * m * w
    else:
        mp = -(-m // p) * p
        flops = 2 * mp * mp * w + 2 * mp**3 / p + 2 * mp * mp * w
        sent += (p - 1) / p * mp * mp * itemsize
        seconds += link.time("all-gather", p, mp * mp * itemsize, leading=False)
    return sent * steps, flops * steps, (seconds + flops / link.peak_flops) * steps


def _layout_bytes(lay: _Layout, mesh: Mesh, itemsize: int) -> float:
    """Bytes a device sends moving into the working layout and back."""
    sent = 0.0
    if lay.rows:
        r = _size(mesh, lay.rows)
        sent += 2 * (r - 1) / r * lay.m / r * lay.padded / _size(mesh, lay.free) * itemsize
    if lay.free:
        f = _size(mesh, lay.free)
        sent += (f - 1) / f * lay.m / _size(mesh, lay.rows) * lay.padded * itemsize
    return sent


@dataclass(frozen=True)
class _Item:
    index: int
    path: str
    shape: tuple[int, ...]
    spec: P
    lay: _Layout
    itemsize: int


def _deal_seconds(net: Interconnect, lay: _Layout, size: int, p: int, total: float) -> float:
    """Predicted time to deal a matrix out and back (two all-to-alls) and iterate on it whole."""
    return 2 * net.time("all-to-all", p, p * lay.m * lay.width * size) + total / net.peak_flops


def _dealt_owners(
    todo: Sequence[_Item],
    costs: Sequence[dict[str, tuple[float, float, float]]],
    pick: dict[int, NewtonSchulzVariant],
    p: int,
    steps: int,
    net: Interconnect,
) -> dict[int, int]:
    """``{matrix: device}`` for the matrices dealt whole to one device each.

    Matrices of one working shape are dealt together, whatever their layouts, in full
    rounds of ``p``, where dealing beats their picked products.
    """
    owner: dict[int, int] = {}
    groups: dict[Any, list[_Item]] = {}
    for it in todo:
        groups.setdefault((it.lay.m, it.lay.n, it.lay.width, it.itemsize), []).append(it)
    for members in groups.values():
        lay, size = members[0].lay, members[0].itemsize
        full = len(members) // p * p if p > 1 else 0
        deal = _deal_seconds(net, lay, size, p, _iteration_flops(lay.m, lay.n) * steps)
        if full and deal < sum(costs[it.index][pick[it.index]][2] for it in members[:p]):
            owner.update({it.index: k % p for k, it in enumerate(members[:full])})
    return owner


def plan_matrices(
    items: Sequence[tuple[str, tuple[int, ...], P, int]],
    mesh: Mesh,
    *,
    steps: int,
    link: Interconnect | str | None = None,
) -> tuple[MuonMatrix, ...]:
    """The plan of every matrix ``(path, shape, spec, itemsize)`` on ``mesh`` (see the module)."""
    net = interconnect(link)
    p = mesh.size
    todo = [
        _Item(i, path, tuple(shape), spec, _layout(tuple(shape), spec, mesh), size)
        for i, (path, shape, spec, size) in enumerate(items)
    ]
    costs = [
        {v: _variant_cost(v, it.lay, p, steps, net, it.itemsize) for v in _VARIANTS} for it in todo
    ]
    pick: dict[int, NewtonSchulzVariant] = {
        it.index: min(_VARIANTS, key=lambda v: costs[it.index][v][2]) for it in todo
    }
    owner = _dealt_owners(todo, costs, pick, p, steps, net)
    shares = [_iteration_flops(it.lay.m, it.lay.n) * steps / p for it in todo]
    split = _trade_flops(costs, pick, owner, shares, steps)
    out = []
    for it in todo:
        total = _iteration_flops(it.lay.m, it.lay.n) * steps
        moved = _layout_bytes(it.lay, mesh, it.itemsize)
        if it.index in owner:
            lay, size = it.lay, it.itemsize
            deal_bytes = 2 * (p - 1) * lay.m * lay.width * size / p
            deal = _deal_seconds(net, lay, size, p, total)
            out.append(
                MuonMatrix(
                    it.path,
                    it.shape,
                    it.spec,
                    "dealt",
                    "local",
                    owner[it.index],
                    moved + deal_bytes,
                    total / p,
                    total,
                    deal / p,
                )
            )
        else:
            k = split.get(it.index, 0)
            sent, flops, secs = (
                (steps - k) / steps * a + k / steps * b
                for a, b in zip(
                    costs[it.index][pick[it.index]], costs[it.index]["split"], strict=True
                )
            )
            out.append(
                MuonMatrix(
                    it.path,
                    it.shape,
                    it.spec,
                    "products",
                    pick[it.index],
                    None,
                    moved + sent,
                    flops,
                    total,
                    secs,
                    k,
                )
            )
    return tuple(out)


def _trade_flops(
    costs: Sequence[dict[str, tuple[float, float, float]]],
    pick: dict[int, NewtonSchulzVariant],
    owner: dict[int, int],
    shares: Sequence[float],
    steps: int,
) -> dict[int, int]:
    """Keep the step's products within 1.25x a device's share of the flops in all.

    Where the cheapest variants sum over (``A^2`` whole, ``A X`` twice), trade seconds
    for fewer flops, the most flops saved per second added first: a whole matrix to a
    variant with fewer flops (``pick`` updated in place), or one more of its
    iterations to ``split``. Returns ``{matrix: iterations moved to split}``; a matrix
    moved whole is ``pick``-ed ``split`` instead.
    """
    per = [{v: tuple(x / steps for x in c) for v, c in cs.items()} for cs in costs]
    split: dict[int, int] = {}

    def flops(i: int) -> float:
        k = split.get(i, 0)
        return (steps - k) * per[i][pick[i]][1] + k * per[i]["split"][1]

    spent = sum(shares[i] if i in owner else flops(i) for i in range(len(costs)))
    while spent > _FLOP_SLACK * sum(shares):
        moves: list[tuple[float, float, int, NewtonSchulzVariant, int]] = []
        for i, c in enumerate(per):
            if i in owner:
                continue
            k, base = split.get(i, 0), c[pick[i]]
            moves.extend(  # the whole matrix's other iterations to v
                ((steps - k) * (base[1] - c[v][1]), (steps - k) * (c[v][2] - base[2]), i, v, k)
                for v in _WHOLE
                if c[v][1] < base[1]
            )
            if pick[i] != "split" and k < steps and c["split"][1] < base[1]:
                moves.append((base[1] - c["split"][1], c["split"][2] - base[2], i, pick[i], k + 1))
        if not moves:
            break
        saved, _, i, v, k = max(moves, key=lambda t: t[0] / max(t[1], 1e-12))
        pick[i] = "split" if k == steps else v
        split[i] = 0 if k == steps else k
        spent -= saved
    return split


# ---- the program --------------------------------------------------------------------------


def orthogonalize_sharded(
    xs: Sequence[jax.Array],
    plans: Sequence[MuonMatrix],
    coeffs: jax.Array,
    mesh: Mesh,
    *,
    steps: int,
    preconditioning: str,
    eps: Any,
    wait: jax.Array | None = None,
) -> list[jax.Array]:
    """Muon's orthogonalization of every matrix of ``xs`` in one ``shard_map`` over ``mesh``.

    ``plans[i]`` says how ``xs[i]`` (split as ``plans[i].spec``) is iterated; the
    results come back split the same way. ``mesh`` has Auto axes (the training step's
    view of its mesh). ``wait``: a replicated value whose collectives must come first.
    """
    ax = tuple(str(a) for a in mesh.axis_names)
    p = mesh.size
    iterations = coeffs.shape[0] if coeffs.ndim == 2 else steps
    lays = [_layout(tuple(x.shape), pl.spec, mesh) for x, pl in zip(xs, plans, strict=True)]

    def body(c: jax.Array, flag: jax.Array, *blocks: jax.Array) -> tuple[jax.Array, ...]:
        def iterate(
            x: jax.Array,
            variant: Sequence[NewtonSchulzVariant] | NewtonSchulzVariant = "local",
            on: tuple[str, ...] = (),
        ) -> jax.Array:
            return newton_schulz(
                x,
                c,
                steps=steps,
                preconditioning=preconditioning,
                eps=eps,
                ax=on,
                p=p if on else 1,
                variant=variant,
            )

        def cols(i: int) -> int:  # the block's columns the wide way round
            return blocks[i].shape[0] if lays[i].transposed else blocks[i].shape[1]

        out: list[jax.Array | None] = [None] * len(blocks)
        last = flag
        dealt: dict[Any, list[int]] = {}
        for i, pl in enumerate(plans):
            if pl.method == "dealt":
                key = (lays[i].m, lays[i].n, lays[i].width, blocks[i].dtype)
                dealt.setdefault(key, []).append(i)
        for i, pl in enumerate(plans):
            if pl.method == "dealt":
                continue
            x = after(blocks[i], last)
            y = iterate(_to_working(x, lays[i], mesh), pl.variants(iterations), ax)
            out[i] = last = _from_working(y, lays[i], cols(i))
        for members in dealt.values():
            for start in range(0, len(members), p):
                group = members[start : start + p]
                work: list[jax.Array] = []
                for i in group:  # one after another: each may hold an all-to-all
                    dep = work[-1] if work else last
                    work.append(_to_working(after(blocks[i], dep), lays[i], mesh))
                mine = lax.all_to_all(jnp.stack(work), ax, 0, 2, tiled=True)[0]
                back = lax.all_to_all(iterate(mine)[None], ax, 2, 0, tiled=True)
                prev: jax.Array = back
                for k, i in enumerate(group):
                    out[i] = prev = _from_working(after(back[k], prev), lays[i], cols(i))
                last = prev
        return tuple(o for o in out if o is not None)

    specs = tuple(pl.spec for pl in plans)
    run = jax.shard_map(
        body, mesh=mesh, in_specs=(P(), P(), *specs), out_specs=specs, check_vma=False
    )
    flag = jnp.zeros((), jnp.float32) if wait is None else wait.astype(jnp.float32)
    return list(run(coeffs, flag, *xs))
