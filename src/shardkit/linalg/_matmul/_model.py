"""The vocabulary of the matmul algorithms: specs as axis tuples, predicted collectives.

A matrix spec is written here as one tuple of mesh axes per dimension (``()`` for an
unsplit dimension), so ``P('x', None)`` is ``(('x',), ())``. An algorithm *variant*
is what one algorithm does for one pair of input specs: the output spec it yields, the
collectives it issues (kind, axes, per-device bytes, runs), its per-device memory and
flops, and the per-shard function that runs inside ``jax.shard_map``.

Bytes follow ``shardkit.inspect``'s convention (per device, ring algorithms), and
times come from :class:`shardkit.inspect.Interconnect`, so a prediction can be held
against the report of the compiled program.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from shardkit.inspect import Interconnect
from shardkit.inspect.internal import message_bytes, traffic
from shardkit.layout.internal import NormSpec

Entry = tuple[str, ...]
Spec = NormSpec  # the normalized spec of shardkit.layout.internal
Body = Callable[[jax.Array, jax.Array], jax.Array]


def _entry(e: Entry) -> str | tuple[str, ...] | None:
    if len(e) == 1:
        return e[0]
    return tuple(e) if e else None


def spec_text(spec: Spec) -> str:
    """``(('x',), ())`` -> ``"P('x', None)"`` (the form users write)."""
    entries = [repr(_entry(e)) for e in spec]
    while entries and entries[-1] == "None":
        entries.pop()
    return f"P({', '.join(entries)})"


def parts(entry: Entry, sizes: Mapping[str, int]) -> int:
    """How many pieces an entry splits a dimension into."""
    return math.prod(sizes[a] for a in entry)


def used(spec: Spec) -> set[str]:
    return {a for e in spec for a in e}


@dataclass(frozen=True)
class Comm:
    """One predicted collective.

    Attributes:
      kind: HLO kind, as :class:`shardkit.inspect.Collective` names it.
      axes: mesh axes the group spans (for a permute: the axes it moves along).
      group_size: devices per group.
      operand_bytes: per-device operand bytes of one run.
      result_bytes: per-device result bytes of one run.
      count: runs per call.
      leading: an all-gather or reduce-scatter along the block's leading dimension
        (contiguous pieces); False along an inner one, which the calibrated cost
        model prices apart.
    """

    kind: str
    axes: tuple[str, ...]
    group_size: int
    operand_bytes: int
    result_bytes: int
    count: int = 1
    leading: bool = True

    @property
    def sent_bytes(self) -> int:
        """Bytes one device sends per run (``shardkit.inspect``'s convention)."""
        if self.kind == "collective-permute":
            return self.operand_bytes
        return traffic(self.kind, self.group_size, self.operand_bytes, self.result_bytes)[0]

    @property
    def total_sent_bytes(self) -> int:
        return self.sent_bytes * self.count

    def time(self, link: Interconnect) -> float:
        """Predicted seconds for all runs under ``link``."""
        n = message_bytes(self.kind, self.operand_bytes, self.result_bytes)
        return self.count * link.time(self.kind, self.group_size, n, leading=self.leading)


@dataclass(frozen=True)
class Variant:
    """One way one algorithm multiplies blocks of the given specs.

    Attributes:
      algorithm: the algorithm's name.
      detail: which flavour (e.g. ``"gather b over y"``).
      out: the output spec of the matrix dims.
      comms: the collectives, in issue order.
      temp_bytes: per-device working memory beyond inputs and output.
      flops: per-device floating-point operations.
      body: ``body(a_block, b_block) -> c_block`` inside ``jax.shard_map``.
      overlap_steps: for ring-style variants, the permutes that could hide behind a
        local product on hardware that overlaps (informational; not priced).
      panel_steps: loop steps that add one panel of a local product into the output
        in place (ring's gather variants); each costs the interconnect's calibrated
        step time on top of the flops (:meth:`~shardkit.inspect.Interconnect.step_time`).
      panel_step_bytes: the output bytes one such step writes.
      product_bytes: the output bytes of the largest local product it writes, once
        per call (:meth:`~shardkit.inspect.Interconnect.write_time`).
    """

    algorithm: str
    detail: str
    out: Spec
    comms: tuple[Comm, ...]
    temp_bytes: int
    flops: float
    body: Body = field(compare=False, repr=False)
    overlap_steps: int = 0
    panel_steps: int = 0
    panel_step_bytes: int = 0
    product_bytes: int = 0


# ---- per-shard helpers (run inside shard_map) -------------------------------------


def index(axes: Entry) -> jax.Array:
    """The linear index of this device along ``axes`` (major to minor)."""
    return jax.lax.axis_index(name(axes))


def name(axes: Entry) -> str | tuple[str, ...]:
    """The axis name a collective takes: one name, or a tuple for several axes."""
    if len(axes) == 1:
        return axes[0]
    return tuple(axes)


def take(x: jax.Array, dim: int, start: jax.Array | int, size: int) -> jax.Array:
    """``x[..., start:start+size, ...]`` along ``dim`` (start may be traced)."""
    return jax.lax.dynamic_slice_in_dim(x, start, size, axis=dim)


def ring_perm(p: int, shift: int = -1) -> list[tuple[int, int]]:
    """Pairs sending from ``i`` to ``i + shift`` (mod p): -1 receives from the next."""
    return [(i, (i + shift) % p) for i in range(p)]


def local_matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.matmul(a, b)


# ---- redistribution ---------------------------------------------------------------


@dataclass(frozen=True)
class Redistribution:
    """Moving a block from one spec to another inside ``shard_map``."""

    comms: tuple[Comm, ...]
    temp_bytes: int
    fn: Callable[[jax.Array], jax.Array] = field(compare=False, repr=False)


def _common(a: Entry, b: Entry) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def redistribution(
    src: Spec,
    dst: Spec,
    shape: Sequence[int],
    itemsize: int,
    sizes: Mapping[str, int],
    batch: int = 0,
) -> Redistribution:
    """The collectives that turn blocks of ``src`` into blocks of ``dst``.

    ``shape`` is the global shape of the matrix dims; ``batch`` the number of leading
    batch dims of the block, and ``itemsize`` counts their per-device elements too.
    Moves of one trailing axis from one dim to the end of another are all-to-alls
    (``P('x', None) -> P(None, 'x')``); other removed axes are all-gathered; added
    axes are taken by slicing, which costs nothing.
    """
    cur = list(src)
    steps: list[tuple[str, Entry, int, int]] = []
    comms: list[Comm] = []
    rank = len(shape)

    def block_bytes(spec: Sequence[Entry]) -> int:
        return itemsize * math.prod(n // parts(e, sizes) for n, e in zip(shape, spec, strict=True))

    peak = block_bytes(cur)
    moved = True
    while moved:
        moved = False
        for d1 in range(rank):
            keep = _common(cur[d1], dst[d1])
            if len(cur[d1]) != keep + 1:
                continue
            axis = cur[d1][-1]
            for d2 in range(rank):
                if d2 != d1 and dst[d2] == (*cur[d2], axis):
                    operand = block_bytes(cur)
                    cur[d1], cur[d2] = cur[d1][:-1], (*cur[d2], axis)
                    comms.append(Comm("all-to-all", (axis,), sizes[axis], operand, operand))
                    steps.append(("a2a", (axis,), d2, d1))
                    moved = True
                    break
    for d in range(rank):
        keep = _common(cur[d], dst[d])
        if len(cur[d]) > keep:
            axes = cur[d][keep:]
            cur[d] = cur[d][:keep]
            out = block_bytes(cur)
            peak = max(peak, out)
            group = parts(axes, sizes)
            if group > 1:
                comms.append(Comm("all-gather", axes, group, out // group, out, leading=d == 0))
                steps.append(("gather", axes, d, 0))
    for d in range(rank):
        if len(dst[d]) > len(cur[d]):
            axes = dst[d][len(cur[d]) :]
            cur[d] = dst[d]
            if parts(axes, sizes) > 1:
                steps.append(("slice", axes, d, 0))

    def fn(x: jax.Array) -> jax.Array:
        off = x.ndim - rank
        for kind, axes, d, other in steps:
            if kind == "a2a":
                x = jax.lax.all_to_all(
                    x, name(axes), split_axis=off + d, concat_axis=off + other, tiled=True
                )
            elif kind == "gather":
                x = jax.lax.all_gather(x, name(axes), axis=off + d, tiled=True)
            else:
                n = x.shape[off + d] // parts(axes, sizes)
                x = take(x, off + d, index(axes) * n, n)
        return x

    return Redistribution(tuple(comms), peak, fn)
