"""The seven matmul algorithms: which input specs each accepts and what it issues.

Write the operands' matrix specs as ``a: (am, ak)`` and ``b: (bk, bn)`` (tuples of mesh
axes, see ``_matmul_model``); ``|e|`` is the number of pieces entry ``e`` splits into.
Every function below returns the variants an algorithm offers for one :class:`MatmulProblem`,
or a string saying why it does not apply (used in error messages and ``explain``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from shardkit.linalg._blockcyclic import after
from shardkit.linalg._matmul._model import (
    Comm,
    Entry,
    Spec,
    Variant,
    index,
    local_matmul,
    name,
    parts,
    ring_perm,
    spec_text,
    take,
)


@dataclass(frozen=True)
class MatmulProblem:
    """The matrix dims of one product and the per-device sizes around them.

    Attributes:
      a: spec of a's matrix dims ``(am, ak)``.
      b: spec of b's matrix dims ``(bk, bn)``.
      m: rows of a.
      k: contraction size.
      n: columns of b.
      sizes: sizes of the mesh axes that split matrix dims (size-1 axes dropped).
      itemsize: bytes per element of the result dtype.
      batch_a: a's batch elements per device (1 without batch dims).
      batch_b: b's batch elements per device (1 when b has no batch dims).
    """

    a: Spec
    b: Spec
    m: int
    k: int
    n: int
    sizes: tuple[tuple[str, int], ...]
    itemsize: int
    batch_a: int = 1
    batch_b: int = 1

    @property
    def size(self) -> Mapping[str, int]:
        return dict(self.sizes)

    def p(self, entry: Entry) -> int:
        return parts(entry, self.size)

    def a_bytes(self, rows: Entry, cols: Entry, k: int | None = None) -> int:
        k = self.k if k is None else k
        return self.batch_a * self.itemsize * (self.m // self.p(rows)) * (k // self.p(cols))

    def b_bytes(self, rows: Entry, cols: Entry, k: int | None = None) -> int:
        k = self.k if k is None else k
        return self.batch_b * self.itemsize * (k // self.p(rows)) * (self.n // self.p(cols))

    def c_bytes(self, rows: Entry, cols: Entry) -> int:
        return self.batch_a * self.itemsize * (self.m // self.p(rows)) * (self.n // self.p(cols))

    def flops(self, rows: Entry, k: int, cols: Entry) -> float:
        """Per-device flops of a local product of a block of ``rows`` x ``k`` by ``k`` x ``cols``."""
        return 2.0 * self.batch_a * (self.m // self.p(rows)) * k * (self.n // self.p(cols))


Result = list[Variant] | str


def _out_shape(a: jax.Array, b: jax.Array) -> tuple[int, ...]:
    return (*a.shape[:-1], b.shape[-1])


def _loop(n: int, step: Any, init: Any) -> Any:
    """``n`` steps in a while loop, so that one step's buffers are live at a time."""
    return jax.lax.fori_loop(0, n, step, init) if n > 0 else init


def _parts(n: int, most: int) -> int:
    """The largest divisor of ``n`` that is at most ``most`` (equal panels for a loop)."""
    return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)


def _accumulate(acc: jax.Array, product: Any, dim: int, parts: int) -> jax.Array:
    """``acc + P`` one panel of ``P`` at a time along ``dim``, ``acc`` updated in place.

    ``product(lo, size)`` gives the panel of ``P`` at ``lo`` along ``dim``. Adding the
    whole ``P`` would first materialize it, a second output-sized block; a loop over
    panels holds one panel's product (``1/parts`` of it), and the update of the loop
    carry is in place. Unrolled panels would not do: XLA schedules every product first.
    """
    size = acc.shape[dim] // parts

    def step(j: jax.Array, acc: jax.Array) -> jax.Array:
        lo = j * size
        panel = take(acc, dim, lo, size) + product(lo, size)
        return jax.lax.dynamic_update_slice_in_dim(acc, panel, lo, axis=dim)

    return _loop(parts, step, acc)


def local(pb: MatmulProblem) -> Result:
    """No communication: ``a (am, -) @ b (-, bn) -> (am, bn)``, ``am`` and ``bn`` disjoint."""
    (am, ak), (bk, bn) = pb.a, pb.b
    if ak or bk:
        return (
            f"the contraction dimension is split (a: {spec_text(pb.a)}, b: {spec_text(pb.b)}); "
            "local needs it whole on both operands"
        )
    if set(am) & set(bn):
        return f"a's rows and b's columns both split over {sorted(set(am) & set(bn))}"
    out = pb.c_bytes(am, bn)
    return [
        Variant(
            "local", "", (am, bn), (), 0, pb.flops(am, pb.k, bn), local_matmul, product_bytes=out
        )
    ]


def _contraction_split(pb: MatmulProblem, algorithm: str) -> Entry | str:
    (am, ak), (bk, bn) = pb.a, pb.b
    if not ak or ak != bk:
        return (
            f"{algorithm} needs the contraction dimension split the same way on both "
            f"operands (a: {spec_text(pb.a)}, b: {spec_text(pb.b)})"
        )
    if set(am) & set(bn):
        return f"a's rows and b's columns both split over {sorted(set(am) & set(bn))}"
    return ak


def allreduce(pb: MatmulProblem) -> Result:
    """Partial products summed: ``a (am, s) @ b (s, bn) -> (am, bn)``, one all-reduce over s."""
    s = _contraction_split(pb, "allreduce")
    if isinstance(s, str):
        return s
    am, bn = pb.a[0], pb.b[1]
    out = pb.c_bytes(am, bn)
    comm = Comm("all-reduce", s, pb.p(s), out, out)

    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        return jax.lax.psum(a @ b, name(s))

    return [
        Variant(
            "allreduce",
            f"psum over {','.join(s)}",
            (am, bn),
            (comm,),
            out,
            pb.flops(am, pb.k // pb.p(s), bn),
            body,
            product_bytes=out,
        )
    ]


def reduce_scatter(pb: MatmulProblem) -> Result:
    """``a (am, s) @ b (s, bn) -> (am+s, bn)`` or ``(am, bn+s)``: one reduce-scatter over s."""
    s = _contraction_split(pb, "reduce_scatter")
    if isinstance(s, str):
        return s
    am, bn = pb.a[0], pb.b[1]
    p = pb.p(s)
    full = pb.c_bytes(am, bn)
    out: list[Variant] = []
    for dim, (rows, cols) in enumerate((((*am, *s), bn), (am, (*bn, *s)))):
        if ((pb.m // pb.p(am)) if dim == 0 else (pb.n // pb.p(bn))) % p:
            continue
        comm = Comm("reduce-scatter", s, p, full, full // p, leading=dim == 0 and pb.batch_a == 1)

        def body(a: jax.Array, b: jax.Array, dim: int = dim) -> jax.Array:
            c = a @ b
            return jax.lax.psum_scatter(c, name(s), scatter_dimension=c.ndim - 2 + dim, tiled=True)

        detail = f"scatter {'rows' if dim == 0 else 'columns'} over {','.join(s)}"
        flops = pb.flops(am, pb.k // p, bn)
        out.append(
            Variant(
                "reduce_scatter",
                detail,
                (rows, cols),
                (comm,),
                full,
                flops,
                body,
                product_bytes=full,
            )
        )
    return out or f"neither the output's rows nor its columns divide into {p} parts"


def allgather(pb: MatmulProblem) -> Result:
    """Gather until the product is local: contraction splits, then a rows/columns clash."""
    (am, ak), (bk, bn) = pb.a, pb.b
    clash = set(am) & set(bn)
    if not (ak or bk or clash):
        return "nothing needs gathering; use algorithm='local'"
    choices = (
        [("a rows", True, False), ("b columns", False, True)] if clash else [("", False, False)]
    )
    variants = []
    for label, gather_rows, gather_cols in choices:
        comms: list[Comm] = []
        temp = 0
        rows, cols = (() if gather_rows else am), (() if gather_cols else bn)
        if ak:
            res = pb.a_bytes(am, ())
            comms.append(Comm("all-gather", ak, pb.p(ak), res // pb.p(ak), res, leading=False))
        if gather_rows:
            res = pb.a_bytes((), ())
            lead = pb.batch_a == 1
            comms.append(Comm("all-gather", am, pb.p(am), res // pb.p(am), res, leading=lead))
        if ak or gather_rows:
            temp += pb.a_bytes(rows, ())
        if bk:
            res = pb.b_bytes((), bn)
            lead = pb.batch_b == 1
            comms.append(Comm("all-gather", bk, pb.p(bk), res // pb.p(bk), res, leading=lead))
        if gather_cols:
            res = pb.b_bytes((), ())
            comms.append(Comm("all-gather", bn, pb.p(bn), res // pb.p(bn), res, leading=False))
        if bk or gather_cols:
            temp += pb.b_bytes((), cols)

        def body(
            a: jax.Array,
            b: jax.Array,
            gather_rows: bool = gather_rows,
            gather_cols: bool = gather_cols,
        ) -> jax.Array:
            if ak:
                a = jax.lax.all_gather(a, name(ak), axis=a.ndim - 1, tiled=True)
            if gather_rows:
                a = jax.lax.all_gather(a, name(am), axis=a.ndim - 2, tiled=True)
            if (ak or gather_rows) and (bk or gather_cols):
                b = after(b, a)  # b's gathers after a's: one chain (see after())
            if bk:
                b = jax.lax.all_gather(b, name(bk), axis=b.ndim - 2, tiled=True)
            if gather_cols:
                b = jax.lax.all_gather(b, name(bn), axis=b.ndim - 1, tiled=True)
            return a @ b

        what = [f"a columns over {','.join(ak)}"] * bool(ak) + [
            f"b rows over {','.join(bk)}"
        ] * bool(bk)
        if label:
            what.append(label + " over " + ",".join(am if gather_rows else bn))
        detail = "gather " + "; ".join(what)
        variants.append(
            Variant(
                "allgather",
                detail,
                (rows, cols),
                tuple(comms),
                temp,
                pb.flops(rows, pb.k, cols),
                body,
                product_bytes=pb.c_bytes(rows, cols),
            )
        )
    return variants


def ring(pb: MatmulProblem) -> Result:
    """Collective matmul: the gather or reduce-scatter as ``p - 1`` overlapped permutes."""
    (am, ak), (bk, bn) = pb.a, pb.b
    out: list[Variant] = []
    if bk and not ak and not set(am) & set(bn):
        out.append(_ring_gather_k(pb, rotate_b=True))
    if ak and not bk and not set(am) & set(bn):
        out.append(_ring_gather_k(pb, rotate_b=False))
    if ak and ak == bk and not set(am) & set(bn):
        out += _ring_scatter(pb)
    if not ak and not bk and set(am) & set(bn):
        out.append(_ring_gather_n(pb))
    if out:
        return out
    return (
        f"ring needs exactly one operand's contraction split, both split alike, or a's rows "
        f"and b's columns split over the same axes (a: {spec_text(pb.a)}, b: {spec_text(pb.b)})"
    )


def _ring_gather_k(pb: MatmulProblem, *, rotate_b: bool) -> Variant:
    (am, ak), (bk, bn) = pb.a, pb.b
    s = bk if rotate_b else ak
    p, kb = pb.p(s), pb.k // pb.p(s)
    moved = pb.b_bytes(bk, bn) if rotate_b else pb.a_bytes(am, ak)
    perm = ring_perm(p)

    def add(acc: jax.Array, a: jax.Array, b: jax.Array, j: jax.Array) -> jax.Array:
        # Panels along the dim of the operand that is sliced by k (a's rows when b
        # rotates, b's columns when a does), so the rotated block is read whole.
        dim = acc.ndim - 2 if rotate_b else acc.ndim - 1

        def product(lo: jax.Array, size: int) -> jax.Array:
            if rotate_b:
                return take(take(a, a.ndim - 2, lo, size), a.ndim - 1, j * kb, kb) @ b
            return a @ take(take(b, b.ndim - 1, lo, size), b.ndim - 2, j * kb, kb)

        return _accumulate(acc, product, dim, _parts(acc.shape[dim], p))

    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        i = index(s)

        def step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            acc, blk = carry
            acc = add(acc, a, blk, (i + t) % p) if rotate_b else add(acc, blk, b, (i + t) % p)
            return acc, jax.lax.ppermute(blk, name(s), perm)

        acc = jnp.zeros(_out_shape(a, b), jnp.result_type(a, b))
        acc, blk = _loop(p - 1, step, (acc, b if rotate_b else a))
        last = (i + p - 1) % p
        return add(acc, a, blk, last) if rotate_b else add(acc, blk, b, last)

    comm = Comm("collective-permute", s, 0, moved, moved, p - 1)
    who = "b's row" if rotate_b else "a's column"
    # Two rotated blocks (the one in use and the one arriving), one panel's product,
    # and the k-slice of the fixed operand that panel reads.
    local_len = pb.m // pb.p(am) if rotate_b else pb.n // pb.p(bn)
    panels = _parts(local_len, p)
    sliced = pb.a_bytes(am, (), k=kb) if rotate_b else pb.b_bytes((), bn, k=kb)
    return Variant(
        "ring",
        f"rotate {who} blocks over {','.join(s)}",
        (am, bn),
        (comm,) if p > 1 else (),
        2 * moved + (pb.c_bytes(am, bn) + sliced) // panels,
        pb.flops(am, pb.k, bn),
        body,
        overlap_steps=p - 1,
        panel_steps=p * panels,
        panel_step_bytes=pb.c_bytes(am, bn) // panels,
        product_bytes=pb.c_bytes(am, bn),
    )


def _ring_scatter(pb: MatmulProblem) -> list[Variant]:
    (am, s), (_, bn) = pb.a, pb.b
    p = pb.p(s)
    variants = []
    for dim in (0, 1):
        local_len = pb.m // pb.p(am) if dim == 0 else pb.n // pb.p(bn)
        if local_len % p:
            continue
        chunk = local_len // p
        perm = ring_perm(p)

        def body(
            a: jax.Array, b: jax.Array, dim: int = dim, chunk: int = chunk, perm: Any = perm
        ) -> jax.Array:
            i = index(s)

            def part(j: jax.Array) -> jax.Array:
                if dim == 0:
                    return take(a, a.ndim - 2, j * chunk, chunk) @ b
                return a @ take(b, b.ndim - 1, j * chunk, chunk)

            def step(t: jax.Array, acc: jax.Array) -> jax.Array:
                # The running sum for block (i+t+1) mod p goes to the previous device,
                # which adds its own part next step: after p-1 hops block i is home.
                return jax.lax.ppermute(acc + part((i + t + 1) % p), name(s), perm)

            shape = list(_out_shape(a, b))
            shape[len(shape) - 2 + dim] = chunk
            acc = jnp.zeros(shape, jnp.result_type(a, b))
            return _loop(p - 1, step, acc) + part(i)

        block = pb.c_bytes(am, bn) // p
        rows, cols = ((*am, *s), bn) if dim == 0 else (am, (*bn, *s))
        variants.append(
            Variant(
                "ring",
                f"reduce-scatter {'rows' if dim == 0 else 'columns'} by permutes over {','.join(s)}",
                (rows, cols),
                (Comm("collective-permute", s, 0, block, block, p - 1),),
                2 * block,
                pb.flops(am, pb.k // p, bn),
                body,
                overlap_steps=p - 1,
                product_bytes=block,
            )
        )
    return variants


def _ring_gather_n(pb: MatmulProblem) -> Variant:
    am, bn = pb.a[0], pb.b[1]
    p, nb = pb.p(bn), pb.n // pb.p(bn)
    perm = ring_perm(p)
    moved = pb.b_bytes((), bn)

    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        i = index(bn)

        def put(c: jax.Array, blk: jax.Array, j: jax.Array) -> jax.Array:
            return jax.lax.dynamic_update_slice_in_dim(c, a @ blk, j * nb, axis=c.ndim - 1)

        def step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            c, blk = carry
            return put(c, blk, (i + t) % p), jax.lax.ppermute(blk, name(bn), perm)

        shape = (*_out_shape(a, b)[:-1], pb.n)
        c, blk = _loop(p - 1, step, (jnp.zeros(shape, jnp.result_type(a, b)), b))
        return put(c, blk, (i + p - 1) % p)

    return Variant(
        "ring",
        f"rotate b's column blocks over {','.join(bn)}",
        (am, ()),
        (Comm("collective-permute", bn, 0, moved, moved, p - 1),),
        moved + pb.c_bytes(am, ()),
        pb.flops(am, pb.k, ()),
        body,
        overlap_steps=p - 1,
        product_bytes=pb.c_bytes(am, ()),
    )


def _grid(pb: MatmulProblem, algorithm: str) -> tuple[str, str] | str:
    (am, ak), (bk, bn) = pb.a, pb.b
    if not (len(am) == 1 and len(ak) == 1 and am != ak and (am, ak) == (bk, bn)):
        return (
            f"{algorithm} needs a and b both split as P(r, c) over two distinct mesh axes "
            f"(a 2-D block layout); got a: {spec_text(pb.a)}, b: {spec_text(pb.b)}"
        )
    return am[0], ak[0]


def cannon(pb: MatmulProblem) -> Result:
    """Cannon on a square ``q x q`` grid: skew, then ``q`` steps of multiply and shift."""
    grid = _grid(pb, "cannon")
    if isinstance(grid, str):
        return grid
    r, c = grid
    q, qc = pb.size[r], pb.size[c]
    if q != qc:
        return f"cannon needs a square grid, but mesh axes {r}={q} and {c}={qc} differ; use algorithm='summa'"
    a_blk, b_blk = pb.a_bytes((r,), (c,)), pb.b_bytes((r,), (c,))
    skew_a = [(i * q + (i + j) % q, i * q + j) for i in range(q) for j in range(q)]
    skew_b = [(((i + j) % q) * q + j, i * q + j) for i in range(q) for j in range(q)]
    left, up = ring_perm(q), ring_perm(q)

    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        # b's shifts wait for a's (after): one chain of collectives, which XLA's CPU
        # runtime needs (two independent permutes may rendezvous in different orders).
        a = jax.lax.ppermute(a, (r, c), skew_a)
        b = jax.lax.ppermute(after(b, a), (r, c), skew_b)

        def step(t: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            acc, a, b = carry
            acc = acc + a @ b
            a = jax.lax.ppermute(after(a, b), c, left)
            return acc, a, jax.lax.ppermute(after(b, a), r, up)

        acc = jnp.zeros(_out_shape(a, b), jnp.result_type(a, b))
        acc, a, b = _loop(q - 1, step, (acc, a, b))
        return acc + a @ b

    comms = (
        Comm("collective-permute", (r, c), 0, a_blk, a_blk),
        Comm("collective-permute", (r, c), 0, b_blk, b_blk),
        Comm("collective-permute", (c,), 0, a_blk, a_blk, q - 1),
        Comm("collective-permute", (r,), 0, b_blk, b_blk, q - 1),
    )
    return [
        Variant(
            "cannon",
            f"{q}x{q} grid over {r},{c}",
            ((r,), (c,)),
            tuple(x for x in comms if x.count),
            a_blk + b_blk + pb.c_bytes((r,), (c,)),
            pb.flops((r,), pb.k // q, (c,)) * q,
            body,
            overlap_steps=q - 1,
            product_bytes=pb.c_bytes((r,), (c,)),
        )
    ]


def summa(pb: MatmulProblem) -> Result:
    """SUMMA on an ``R x C`` grid: ``lcm(R, C)`` panel broadcasts along rows and columns.

    A broadcast from one owner is written as a ``psum`` of the panel zeroed on the
    other devices (``shard_map`` has no broadcast), so each panel compiles to an
    **all-reduce**: twice a broadcast's bytes, but only one panel is ever held.
    """
    grid = _grid(pb, "summa")
    if isinstance(grid, str):
        return grid
    r, c = grid
    nr, nc = pb.size[r], pb.size[c]
    steps = math.lcm(nr, nc)
    if pb.k % steps:
        return f"the contraction size k={pb.k} is not divisible by lcm({r}={nr}, {c}={nc})={steps} panels"
    w = pb.k // steps
    a_panel, b_panel = pb.a_bytes((r,), (), k=w), pb.b_bytes((), (c,), k=w)

    def body(a: jax.Array, b: jax.Array) -> jax.Array:
        # A loop, not unrolled: XLA would combine independent panel psums into one
        # all-reduce of every panel at once, losing SUMMA's one-panel working set.
        # The panels' all-reduces form one chain (after): each waits for the one before,
        # the row panel's for the column panel's and the next step's for this step's
        # (carried as one element, ``last``), as XLA's CPU runtime needs.
        def step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, ...]:
            acc, last = carry
            owner_c, off_a = jnp.divmod(t, steps // nc)
            owner_r, off_b = jnp.divmod(t, steps // nr)
            pa = take(a, a.ndim - 1, off_a * w, w)
            pb_ = take(b, b.ndim - 2, off_b * w, w)
            if nc > 1:
                pa = after(pa, last)
                pa = jax.lax.psum(jnp.where(index((c,)) == owner_c, pa, jnp.zeros_like(pa)), c)
            if nr > 1:
                pb_ = after(pb_, pa)
                pb_ = jax.lax.psum(jnp.where(index((r,)) == owner_r, pb_, jnp.zeros_like(pb_)), r)
            return acc + pa @ pb_, jnp.ravel(pb_)[:1]

        acc = jnp.zeros(_out_shape(a, b), jnp.result_type(a, b))
        last = jnp.zeros((1,), jnp.result_type(a, b))
        return jax.lax.fori_loop(0, steps, step, (acc, last))[0]

    comms = []
    if nc > 1:
        comms.append(Comm("all-reduce", (c,), nc, a_panel, a_panel, steps))
    if nr > 1:
        comms.append(Comm("all-reduce", (r,), nr, b_panel, b_panel, steps))
    return [
        Variant(
            "summa",
            f"{steps} panels on the {nr}x{nc} grid over {r},{c}",
            ((r,), (c,)),
            tuple(comms),
            2 * (a_panel + b_panel) + pb.c_bytes((r,), (c,)),
            pb.flops((r,), pb.k, (c,)),
            body,
            product_bytes=pb.c_bytes((r,), (c,)),
        )
    ]


ALGORITHMS = {
    "local": local,
    "allgather": allgather,
    "reduce_scatter": reduce_scatter,
    "allreduce": allreduce,
    "ring": ring,
    "cannon": cannon,
    "summa": summa,
}
