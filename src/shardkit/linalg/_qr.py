"""Distributed QR of a sharded matrix, and least squares through it.

Two algorithms; the layout picks one (both give ``a = q r`` with orthonormal ``q``):

* **Blocked Householder QR with TSQR panels** (:mod:`shardkit.linalg._householder`,
  ScaLAPACK's ``pdgeqrf``), in ``a``'s own (natural) layout, wherever the blocks fit a
  panel of about ``nb`` columns (a divisor of the rows and of the columns per device,
  at least a quarter of ``min(nb, M / R, n / C)``): tall ``P(rows, None)``, square,
  split columns ``P(rows, cols)`` on 1-D or 2-D meshes, row blocks shorter than ``n``.
  Per panel of ``nb`` columns its owner column group factors it (a local QR per row
  block, an all-gather of the ``R`` triangles ``nb x nb``; the diagonal's device QRs
  their stack and reconstructs the reflector, one all-reduce of ``((R + 2) nb + 1) x
  nb`` hands out the stack's ``q``, ``T^-1``, ``S R`` and ``S``), sends the panel's
  ``Q`` along the mesh row (an all-reduce of ``(M / R) x nb`` over the column axes,
  none when they are not split) and every device updates its trailing columns with two
  level-3 products (an all-reduce of ``nb x (n / C)`` over the row axes); ``q`` is
  formed as LAPACK's ``orgqr`` does (the panel's ``Q`` along the mesh row again and
  one ``nb x (n / C)`` all-reduce per panel). LAPACK's flops (``8/3 n^3`` square with
  ``q``), spread over the devices. Stable like Householder QR, rank-deficient input
  included. ``r``: a square matrix's rows of ``r`` are its devices' own rows (no
  collective); a tall ``P(rows, None)`` matrix whose row blocks are at least ``n``
  tall (the **TSQR layout**) gets ``r`` replicated (one ``n x n`` all-reduce), other
  layouts ``r``'s rows through one ``n x (n / C)`` all-reduce over the row axes. Mesh
  axes the spec leaves out split the rows further (``q``'s row block is all-gathered
  over them at the end). Measured at ``n = 4096`` float32 on 8 simulated CPU devices:
  1.12x (mesh 8) and 0.95x (2x4) SciPy's CPU seconds, against BCGS2's 1.74x and 2.23x;
  ``16384 x 1024`` on ``P(x, None)``: 0.85x. (The former flat TSQR,
  :func:`_tsqr_local`, QR'd the ``R n x n`` stack of triangles on every device: 4.7x
  LAPACK's CPU time at ``16384 x 1024`` on 8 devices.)
* **Block classical Gram-Schmidt with reorthogonalization (BCGS2**, Barlow and
  Smoktunowicz, Numer. Math. 2013) with TSQR panels, where the blocks leave only
  narrow Householder panels (e.g. a prime number of rows per device). One
  ``jax.shard_map`` in the matrix's natural layout; a ``lax.fori_loop`` over the
  ``n / nb`` panels of ``nb`` columns (program size does not grow with ``n``). For
  each panel:

  1. its columns are broadcast along the mesh row (all-reduce over the column axes,
     ``(M / R) x nb``);
  2. the ``q`` columns left of the panel are projected out: their coefficients in one
     ``n x nb`` all-reduce over the whole mesh, the correction in one
     ``(M / R) x nb`` all-reduce over the column axes;
  3. TSQR of the result over the row axes (all-gather of ``R`` blocks ``nb x nb``);
  4. steps 2 and 3 once more on the panel's ``q`` (the reorthogonalization), then the
     owner column group writes the panel's ``q`` over ``a``'s columns and its column
     of ``r`` (``r`` is sharded like ``a``).

  Every collective is panel-sized. Flops: about ``4 M n^2`` (``4 n^3`` square), and
  every column group repeats the panel TSQRs.

Both report a numerically rank-deficient ``a`` the same way (below), from ``r``'s
diagonal; Householder's ``q`` stays orthonormal regardless, BCGS2's does not.

**Memory per device** (Householder, square): the input's share, the block being
reduced, ``q``'s and ``r``'s shares plus ``O(n nb)``; under ``jit`` without
``qr.with_status`` the NaN fill may cost one more share (``jnp.linalg.qr`` gathers the
matrix: 25 shares at ``n = 2048`` on 8 devices).

**Rank deficiency and the condition limit of BCGS2.** With a stable panel QR, BCGS2
keeps ``||I - q^T q|| = O(eps)`` and ``||a - q r|| = O(eps) ||a||`` as long as
``kappa(a)`` stays well below ``1 / eps`` (about ``1e15`` in float64, ``1e7`` in
float32). Outside the TSQR layout (Householder or BCGS2) a numerically rank-deficient
``a`` (a diagonal ``|r_jj| <= n * eps * max|r_jj|``, or NaN) is reported: eagerly
:class:`RankDeficientError` (a
:class:`~shardkit.linalg.SingularMatrixError`, hence a ``numpy.linalg.LinAlgError``)
names the column; under ``jax.jit`` ``qr.with_status(...)`` returns the status (``0``,
or ``j + 1`` for column ``j``), otherwise the results are NaN-filled. :func:`lstsq`
answers such an ``a`` with NumPy's minimum-norm solution instead (see there).

**Complex** matrices use ``q^H`` throughout (``r = q^H a``).

**Sizes the mesh does not divide** (host or replicated input, ``mesh=``/``spec=``):
``a`` is padded to ``[[a, 0], [0, d I], [0, 0]]`` (``d = max|a|``; columns to a
multiple of the column split, one new row per new column, rows to a multiple of the
row split), whose QR is ``q`` and ``r`` bordered by ``±I``: the result is cut back
exactly, and comes back replicated (one all-reduce of ``q``'s ``M x n``).

**Wide matrices** (``M < n``, see :mod:`shardkit.linalg._wide`): :func:`qr` gives
SciPy's economic ``q`` (``M x M``, replicated) and ``r`` (``M x n``) from a
Householder QR of the leading ``M x M`` block (gathered: small when ``M`` is narrow);
:func:`lstsq` the minimum-norm solution through a TSQR of ``a^H``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular as _local_trsm
from jax.sharding import PartitionSpec

from shardkit._programs import cached
from shardkit.layout.internal import (
    Operand,
    check_same_devices,
    mesh_summary,
    normalize,
    operand,
    spec_summary,
)
from shardkit.linalg._blockcyclic import (
    DEFAULT_BLOCK,
    AnyMesh,
    Plan,
    SpecLike,
    Spmd,
    after,
    axis_index,
    dslice,
    dupdate,
    matrix_layout,
    matrix_operand,
    on_owner,
    place,
    plan_for,
    psum,
)
from shardkit.linalg._condest import inverse_condition
from shardkit.linalg._dtype import as_inexact, common, real_dtype
from shardkit.linalg._householder import householder_local
from shardkit.linalg._inputs import ArrayInput, gate, nan_unless, require_finite, rhs_shape
from shardkit.linalg._pad import cut, pad_tall, scale, tall_sizes
from shardkit.linalg._partitioned import on_layout
from shardkit.linalg._status import (
    Checked,
    Failure,
    Problem,
    RankDeficientError,
    checked,
    is_traced,
    reports_status,
    succeeded,
)
from shardkit.linalg._triangular import triangular_program as _trsm_program
from shardkit.linalg._triangular import triangular_solve
from shardkit.linalg._wide import wide_lstsq, wide_qr

__all__ = ["DEFAULT_PANEL", "MIN_NORM_GUARD", "RankDeficientError", "lstsq", "qr"]

_T = TypeVar("_T")

DEFAULT_PANEL = 64
"""Default panel width ``nb`` of the QR (rounded down to divide the local rows and columns)."""


def _tsqr_local(a: jax.Array, rows: tuple[str, ...]) -> tuple[jax.Array, jax.Array]:
    n = a.shape[1]
    q1, r1 = jnp.linalg.qr(a)
    if not rows:
        return q1, r1
    stack = jax.lax.all_gather(r1, rows, tiled=True)  # (R n, n)
    q2, r = jnp.linalg.qr(stack)
    mine = dslice(q2, (axis_index(rows) * n, 0), (n, n))
    return q1 @ mine, r


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Static description of one QR problem (hashable: it keys the program caches)."""

    mesh: AnyMesh
    spec: PartitionSpec
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    big: int  # M
    n: int
    nr: int
    nc: int
    tsqr: bool
    nb: int  # BCGS2 panel width (divides n / C and is at most M / R)
    cb: int  # BCGS2 projection chunk width (a multiple of nb dividing n / C)
    shape: tuple[int, int]  # the user's (M, n); (big, n) is the padded shape
    spare: tuple[str, ...] = ()  # TSQR: mesh axes a is replicated over (split rows further)
    nsp: int = 1  # their size
    hb: int = 1  # Householder's panel width (divides the rows and columns per device)
    house: bool = False  # not TSQR: Householder (else BCGS2)

    @property
    def padded(self) -> bool:
        """Whether ``a`` is padded (the mesh does not divide it)."""
        return self.shape != (self.big, self.n)

    @property
    def r_spec(self) -> PartitionSpec:
        """``r``'s spec: rows over the row axes when they divide ``n``, columns as ``a``'s."""
        split = bool(self.rows) and self.n % self.nr == 0
        return PartitionSpec(self.rows if split else None, self.cols or None)

    @property
    def own_r(self) -> bool:
        """Householder on a square block layout: each device's rows of ``a`` are its rows of ``r``."""
        return self.house and not self.spare and self.big == self.n

    @property
    def r_rows(self) -> int:
        """Rows of ``r`` per device."""
        return self.n // self.nr if self.r_spec[0] is not None else self.n


def _layout(op: Operand, nb: Any) -> _Layout:
    where = op.where
    if isinstance(nb, bool) or not isinstance(nb, int) or nb < 1:
        raise ValueError(
            f"{where}: nb={nb!r} is not a positive int; nb is the panel width of the "
            f"block Gram-Schmidt QR (default {DEFAULT_PANEL}, rounded down to divide the "
            "local column count)"
        )
    m, p, rows, cols = matrix_layout(op, pad=True)
    user = (op.shape[0], op.shape[1])
    big, n = user
    nr = math.prod(m.shape[x] for x in rows)
    nc = math.prod(m.shape[x] for x in cols)
    if big < n:
        raise NotImplementedError(
            f"{where}: a.shape={(big, n)} is wide (M < n) with spec={spec_summary(p)} on "
            f"{mesh_summary(m)}: QR of wide matrices is not implemented. Factor a.T "
            "instead (an LQ factorization of a), or pad a with zero rows to M >= n."
        )
    big, n = tall_sizes(big, n, nr, nc)
    mr, k = big // nr, n // nc
    nb_eff = max(d for d in range(1, min(nb, k, mr) + 1) if k % d == 0)
    # Chunks of the projections hold at most about n * nb elements (or one panel).
    cap = max(nb_eff, (n * nb_eff) // mr)
    cb = max(d for d in range(nb_eff, k + 1, nb_eff) if k % d == 0 and d <= cap)
    tsqr = not cols and mr >= n
    spare: tuple[str, ...] = ()
    nsp = 1
    unused = tuple(x for x in m.axis_names if x not in rows + cols)
    size = math.prod(m.shape[x] for x in unused)
    if unused and mr % size == 0 and (mr // size >= n or not tsqr):
        spare, nsp = unused, size
    ms = mr // nsp
    # No wider than a: a narrow a's panel (and its stack of triangles) stays small.
    # Split columns: a whole panel on one column group.
    hb = max(d for d in range(1, min(nb, ms, n) + 1) if ms % d == 0 and (tsqr or k % d == 0))
    # Householder wherever a panel of about nb columns fits the blocks; BCGS2 (panels
    # of nb_eff columns) where their sizes leave only narrow ones.
    house = not tsqr and 4 * hb >= min(nb, ms, k)
    if not (tsqr or house):
        spare, nsp = (), 1
    return _Layout(m, p, rows, cols, big, n, nr, nc, tsqr, nb_eff, cb, user, spare, nsp, hb, house)


# ---- TSQR ---------------------------------------------------------------------------


def _householder(lay: _Layout, a: jax.Array, form_q: bool, b: jax.Array | None = None) -> Any:
    """:func:`~shardkit.linalg._householder.householder_local` on the layout ``lay``."""
    return householder_local(
        a,
        rows=lay.rows,
        spare=lay.spare,
        sizes=(lay.nr * lay.nsp, lay.nsp),
        n=lay.n,
        nb=lay.hb,
        form_q=form_q,
        extra=b,
        cols=lay.cols,
        own_r=lay.own_r,
    )


@cached
def _hqr_program(lay: _Layout) -> Any:
    """``(q, r)`` on the TSQR layout: blocked Householder with TSQR panels, ``r`` replicated."""

    def body(a: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = _householder(lay, a, True)
        return out["q"], out["r"]

    return Spmd(body, lay.mesh, lay.spec, (lay.spec, PartitionSpec()))


@cached
def _tsqr_program(lay: _Layout) -> Any:
    return Spmd(
        lambda a: _tsqr_local(a, lay.rows),
        lay.mesh,
        lay.spec,
        (lay.spec, PartitionSpec()),
    )


def _diagonal_status(d: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """``(status, ratio)`` from ``r``'s diagonal ``d`` (replicated; see the module docstring).

    The status is ``j + 1`` for the first ``|r_jj| <= n * eps * max|r_jj|`` (or NaN),
    else 0; the ratio ``min|r_jj| / max|r_jj|`` is the cheap condition estimate
    :func:`lstsq` reads (an upper bound on ``1 / kappa(a)``).
    """
    dabs = jnp.abs(d)
    bad = (dabs <= n * jnp.finfo(d.dtype).eps * jnp.max(dabs)) | jnp.isnan(dabs)
    status = jnp.where(jnp.any(bad), jnp.argmax(bad) + 1, 0).astype(jnp.int32)
    top = jnp.max(dabs)
    ratio = jnp.where(top > 0, jnp.min(dabs) / jnp.where(top > 0, top, 1), 0)
    return status, ratio


def _nan_fill(status: jax.Array, *xs: jax.Array) -> tuple[jax.Array, ...]:
    """``xs`` NaN-filled where ``status`` reports rank deficiency (``jit`` without a status)."""
    return tuple(jnp.where(status != 0, jnp.full_like(x, jnp.nan), x) for x in xs)


def _house_local(a: jax.Array, lay: _Layout) -> tuple[jax.Array, ...]:
    """Householder QR on a layout other than TSQR's: local ``q``, local ``r``, ``r``'s diagonal."""
    out = _householder(lay, a, True)
    q, r = out["q"], out["r"]
    if not lay.own_r and lay.r_spec[0] is not None:  # r's rows split like a's row axes
        r = dslice(r, (axis_index(lay.rows) * lay.r_rows, 0), (lay.r_rows, r.shape[1]))
    # r's consumers (lstsq's condition estimate: collectives) after q's loop: one chain.
    return q, after(r, q), out["diag"]


def _factor_local(a: jax.Array, lay: _Layout, fill: bool) -> tuple[jax.Array, ...]:
    """The factorization of a layout other than TSQR's, Householder or BCGS2: (local ``q``,
    local ``r``, status, diagonal ratio), NaN-filled on rank deficiency with ``fill``."""
    q, r, d = (_house_local if lay.house else _bcgs2_local)(a, lay)
    status, ratio = _diagonal_status(d, lay.n)
    if fill:
        q, r = _nan_fill(status, q, r)
    return q, r, status, ratio


@cached
def _factor_program(lay: _Layout, fill: bool) -> Any:
    return Spmd(
        lambda a: _factor_local(a, lay, fill),
        lay.mesh,
        lay.spec,
        (lay.spec, lay.r_spec, PartitionSpec(), PartitionSpec()),
    )


# ---- BCGS2 --------------------------------------------------------------------------


class _Bcgs2Stage(NamedTuple):
    """What every BCGS2 step reads, fixed for the whole factorization (one device)."""

    lay: _Layout
    mr: int  # local rows
    k: int  # local columns
    r: jax.Array  # this device's row group
    c: jax.Array  # this device's column group
    lanes: jax.Array  # 0 .. cb - 1


class _Bcgs2Carry(NamedTuple):
    """The loop state: ``q`` written over ``a``, the local rows of ``r``, ``r``'s diagonal."""

    qa: jax.Array
    rl: jax.Array
    d: jax.Array


def _chunk(st: _Bcgs2Stage, qa: jax.Array, j: jax.Array, act: jax.Array) -> jax.Array:
    """Local columns ``j cb ..`` of ``q``; columns at or right of the panel still hold
    ``a``: zeroed (an inf there must not turn into NaN through a zero coefficient)."""
    cb = st.lay.cb
    blk = dslice(qa, (0, j * cb), (st.mr, cb))
    return jnp.where((j * cb + st.lanes < act)[None, :], blk, 0)


def _coefficients(
    st: _Bcgs2Stage, qa: jax.Array, w: jax.Array, act: jax.Array, j: jax.Array, buf: jax.Array
) -> jax.Array:
    cb = st.lay.cb
    return dupdate(buf, jnp.conj(_chunk(st, qa, j, act)).T @ w, (st.c * st.k + j * cb, 0))


def _correction(
    st: _Bcgs2Stage, qa: jax.Array, s: jax.Array, act: jax.Array, j: jax.Array, acc: jax.Array
) -> jax.Array:
    cb, nb = st.lay.cb, st.lay.nb
    return acc + _chunk(st, qa, j, act) @ dslice(s, (st.c * st.k + j * cb, 0), (cb, nb))


def _project(
    st: _Bcgs2Stage, qa: jax.Array, w: jax.Array, act: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``w - q s`` and ``s = q^H w`` for the ``act`` local ``q`` columns (``s``: ``n x nb``).

    Only the chunks holding ``q`` are multiplied (a dynamic trip count): the flops
    follow the growing ``q`` instead of the whole local block.
    """
    lay = st.lay
    nch = (act + lay.cb - 1) // lay.cb
    zero = jnp.zeros((lay.n, lay.nb), qa.dtype)
    s = lax.fori_loop(jnp.int32(0), nch, functools.partial(_coefficients, st, qa, w, act), zero)
    s = psum(s, lay.rows + lay.cols)
    acc = jnp.zeros((st.mr, lay.nb), qa.dtype)
    corr = lax.fori_loop(jnp.int32(0), nch, functools.partial(_correction, st, qa, s, act), acc)
    return w - psum(corr, lay.cols), s


def _bcgs2_panel(st: _Bcgs2Stage, p: jax.Array, carry: _Bcgs2Carry) -> _Bcgs2Carry:
    """Panel ``p``: project twice against ``q`` (with a TSQR of each result), write it."""
    lay, k = st.lay, st.k
    nb, n, nrl = lay.nb, lay.n, lay.r_rows
    qa, rl, d = carry
    j0 = p * nb
    owner = j0 // k
    off = j0 - owner * k
    mine = st.c == owner
    act = jnp.clip(j0 - st.c * k, 0, k)
    old = dslice(qa, (0, off), (st.mr, nb))
    w = psum(jnp.where(mine, old, 0), lay.cols)
    y1, s1 = _project(st, qa, w, act)
    q1, r1 = _tsqr_local(y1, lay.rows)
    y2, s2 = _project(st, qa, q1, act)
    qp, r2 = _tsqr_local(y2, lay.rows)
    # w = q (s1 + s2 r1) + qp (r2 r1): Barlow and Smoktunowicz's BCGS2.
    rdiag = r2 @ r1
    rcol = dupdate(s1 + s2 @ r1, rdiag, (j0, 0))
    # Only the owner column group writes: the others aim past the end (dropped).
    # (A select against the old columns would make XLA copy the whole local
    # block into LAPACK's column-major layout.)
    dest = jnp.where(mine, off + jnp.arange(nb, dtype=jnp.int32), k)
    qa = qa.at[:, dest].set(qp, mode="drop")
    rmine = dslice(rcol, (st.r * nrl, 0), (nrl, nb)) if nrl < n else rcol
    rl = rl.at[:, dest].set(rmine, mode="drop")
    return _Bcgs2Carry(qa, rl, dupdate(d, jnp.diagonal(rdiag), (j0,)))


def _bcgs2_local(a: jax.Array, lay: _Layout) -> tuple[jax.Array, ...]:
    """The BCGS2 kernel, inside ``shard_map``: local ``q``, local ``r``, ``r``'s diagonal.

    Flat functions around a stage record (:class:`_Bcgs2Stage`) and NamedTuple loop
    state (:class:`_Bcgs2Carry`), as the LU kernel.
    """
    mr, k = a.shape
    lanes = jnp.arange(lay.cb, dtype=jnp.int32)
    st = _Bcgs2Stage(lay, mr, k, axis_index(lay.rows), axis_index(lay.cols), lanes)
    init = _Bcgs2Carry(a, jnp.zeros((lay.r_rows, k), a.dtype), jnp.zeros((lay.n,), a.dtype))
    step = functools.partial(_bcgs2_panel, st)
    return tuple(lax.fori_loop(jnp.int32(0), jnp.int32(lay.n // lay.nb), step, init))


def _padded(a: Any, lay: _Layout) -> Any:
    """``a`` bordered to the padded shape (see the module docstring), or ``a``."""
    return pad_tall(a, lay.big, lay.n, scale(a), lay.mesh) if lay.padded else a


def _factor(a: Any, lay: _Layout, fill: bool) -> tuple[jax.Array, ...]:
    """``(q, r, status, ratio)``: ratio is ``min|r_jj| / max|r_jj|`` (1 for TSQR)."""
    x = place(_padded(a, lay), lay.mesh, lay.spec)
    if lay.tsqr:
        q, r = _hqr_program(lay)(x)
        return q, r, jnp.int32(0), jnp.float32(1)
    return _factor_program(lay, fill)(x)


def _on_layout(a: Any, op: Operand, rest: tuple[Any, ...], nb: int, make: Any, rule: str) -> Any:
    """Auto mesh axes under ``jit``: ``make(lay)`` is the per-shard program (see _partitioned)."""

    def layout(known: Operand) -> tuple[Any, PartitionSpec, _Layout]:
        lay = _layout(known, nb)
        return lay.mesh, lay.spec, lay

    return on_layout(
        op,
        (a, *rest),
        lambda lay, m, p: make(lay),
        rule,
        nb=nb,
        order="natural",
        layout=layout,
    )


def _qr_local(lay: _Layout, fill: bool) -> Any:
    """The factorization's per-shard program: ``(q, r, status)`` and its specs."""
    rep = PartitionSpec()
    if lay.tsqr:
        hqr = _hqr_program(lay).body

        def local(a: jax.Array) -> tuple[jax.Array, ...]:
            return (*hqr(a), jnp.int32(0))

        return local, (lay.spec,), (lay.spec, rep, rep)
    factor = _factor_program(lay, fill).body

    def local_factor(a: jax.Array) -> tuple[jax.Array, ...]:
        return factor(a)[:3]

    return local_factor, (lay.spec,), (lay.spec, lay.r_spec, rep)


def _rank_status(where: str, result: _T, status: jax.Array, a: Any, *, fill: bool) -> Checked[_T]:
    """The :class:`Checked` of a BCGS2 result (``fill``: the program has NaN-filled it
    already, the convention has nothing left to do)."""
    if fill:
        return Checked(result, status)
    problem = Problem(where, Failure.RANK_DEFICIENT, tuple(a.shape), a.dtype)
    return checked(problem, result, status, traced=is_traced(status))


def _qr(
    want_status: bool,
    a: ArrayInput,
    /,
    *,
    nb: int = DEFAULT_PANEL,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    check_finite: bool = True,
) -> Checked[tuple[jax.Array, jax.Array]]:
    """Reduced QR ``a = q r`` of a sharded ``(M, n)`` matrix, like ``jnp.linalg.qr``.

    Blocked Householder QR with TSQR panels in ``a``'s own layout (see the module
    docstring), at LAPACK's flops (``8/3 n^3`` for a square ``a``). Per panel of ``nb``
    columns: an all-gather of ``R`` blocks ``nb x nb`` over the row axes, an
    all-reduce of ``((R + 2) nb + 1) x nb``, one of ``nb x (n / C)`` over the row axes
    and, when the columns are split, one of ``(M / R) x nb`` over the column axes; to
    form ``q`` the last two again. ``r`` replicated on the TSQR layout (``P(rows,
    None)`` with ``M / R >= n``; one ``n x n`` all-reduce), else sharded like ``a``.
    Nothing matrix-sized moves. Memory per device: the input's share, the reduced
    block's, ``q``'s and ``r``'s plus ``O(n nb)`` (and up to one more share for the
    NaN fill under ``jit``). BCGS2 (``~4 M n^2`` flops, orthogonality ``O(eps)`` while
    ``kappa(a) << 1 / eps``) only where the blocks leave narrow panels. Complex ``a``:
    ``q^H q = I``. Sizes the mesh does not divide are padded (module docstring):
    ``(M + e') (n + e) - M n`` more elements (``e < C`` new columns, ``e' < R`` more
    rows), and ``q``, ``r`` come back replicated.

    Args:
      a: ``(M, n)`` float or complex matrix (wide ``M < n``: see the module
        docstring; ``q`` is then ``M x M``, ``r`` ``M x n``), sharded ``P(rows, cols)``
        (either may be ``None``), or host data with ``mesh=``/``spec=`` (any ``M, n``).
      nb: panel width, rounded down to a divisor of the rows per device (and, outside
        the TSQR layout, of ``n / C``); BCGS2: to a divisor of ``n / C`` at most ``M / R``.
      mesh: the mesh, when ``a`` does not carry it (host data). Not needed under
        ``jit`` on Auto axes: the layout comes from the partitioner.
      spec: ``a``'s spec, likewise.
      check_finite: eagerly, raise ``ValueError`` when ``a`` holds an inf or NaN
        (SciPy's default); under ``jit`` NaN-fill ``q`` and ``r`` instead.

    Returns:
      ``(q, r)``: ``q`` ``(M, n)`` sharded like ``a``; ``r`` ``(n, n)`` upper triangular,
      replicated on the TSQR layout, else sharded like ``a`` (rows replicated when the
      row split does not divide ``n``; replicated when ``a`` is padded). NaN-filled
      under ``jit`` for a rank-deficient ``a`` (outside the TSQR layout).
      ``qr.with_status(...)``: ``((q, r), status)``, status ``j + 1`` naming the first
      numerically dependent column ``j`` (always ``0`` on the TSQR layout).

    Raises:
      RankDeficientError: eagerly, outside the TSQR layout, when ``a`` is numerically
        rank deficient.
      ValueError: a bad ``nb`` or an unknown layout.
      TypeError: ``a`` is half precision (use float32) or not numeric.

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a_np = np.random.default_rng(0).standard_normal((32, 32))
      >>> q, r = shardkit.linalg.qr(shardkit.shard(a_np, mesh=m, spec="x,y"), nb=4)
      >>> q.sharding.spec, r.sharding.spec
      (P('x', 'y'), P('x', 'y'))
      >>> q_np, r_np = np.asarray(q), np.asarray(r)
      >>> bool(np.allclose(q_np @ r_np, a_np)), bool(np.allclose(q_np.T @ q_np, np.eye(32)))
      (True, True)
      >>> bool(np.allclose(np.tril(r_np, -1), 0))
      True
      >>> t = shardkit.linalg.qr(shardkit.shard(a_np[:, :4], mesh=shardkit.mesh("8", "x"), spec="x,None"))
      >>> t[1].shape, t[1].sharding.is_fully_replicated  # tall-skinny: TSQR, r replicated
      ((4, 4), True)
      >>> shardkit.linalg.qr(shardkit.shard(np.ones((32, 32)), mesh=m, spec="x,y"))
      Traceback (most recent call last):
      ...
      shardkit.linalg.RankDeficientError: qr: a (shape=(32, 32), dtype=float64) is numerically rank deficient: |r_jj| of column 1 is at most n * eps * max|r_jj| (or NaN), so r is singular (and block Gram-Schmidt's q is not orthonormal). Check a for dependent columns, use lstsq for a minimum-norm solution, or the layout P(rows, None) with M / R >= n (its QR reports no rank); under jax.jit call shardkit.linalg.qr.with_status(...) to receive this status instead.
    """
    a = as_inexact("qr", "a", a)
    op = matrix_operand("qr", a, mesh, spec, square=False)
    ok = require_finite("qr", check_finite, a=a)
    a = gate(ok, a)
    if a.shape[1] == 0:  # no columns: q (M, 0), r (0, 0)
        out = (jnp.zeros((a.shape[0], 0), a.dtype), jnp.zeros((0, 0), a.dtype))
        return succeeded(out)
    if a.shape[0] < a.shape[1]:  # wide: SciPy's economic QR
        out = jnp.linalg.qr(a) if op.unknown else wide_qr(a, op)
        out = nan_unless(tuple(out), ok)
        return succeeded(out)
    fill = is_traced(a) and not want_status
    if op.unknown:
        # r's rows follow a's only when a is square (a rule ties equal lengths alone).
        rule = "i j -> i j, i j, " if a.shape[0] == a.shape[1] else "i j -> i j, k j, "
        q, r, status = _on_layout(a, op, (), nb, lambda lay: _qr_local(lay, fill), rule)
        q, r = nan_unless((q, r), ok)
        return _rank_status("qr", (q, r), status, a, fill=fill)
    lay = _layout(op, nb)
    q, r, status, _ = _factor(a, lay, fill)
    if lay.padded:
        big, n = lay.shape
        q = cut(q, lay.mesh, lay.spec, (big, n))
        r = cut(r, lay.mesh, PartitionSpec() if lay.tsqr else lay.r_spec, (n, n))
    q, r = nan_unless((q, r), ok)
    return _rank_status("qr", (q, r), status, a, fill=fill)


qr = reports_status(_qr)


# ---- least squares ------------------------------------------------------------------


def _min_norm(r: jax.Array, c: jax.Array, rcond: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(x, rank, s)``: the minimum-norm ``x`` minimizing ``||r x - c||``, as ``numpy.linalg.lstsq``.

    ``r = U S V^H``; singular values at most ``rcond * s_max`` count as zero, so a
    rank-deficient (even zero) ``r`` gives finite ``x`` orthogonal to its null space.
    """
    u, s, vh = jnp.linalg.svd(r, full_matrices=False)
    keep = s > rcond * s[0]
    inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(r.dtype)
    x = jnp.conj(vh).T @ (inv[:, None] * (jnp.conj(u).T @ c))
    return x, jnp.sum(keep).astype(jnp.int32), s


@cached
def _tsqr_lstsq_program(lay: _Layout, rcond: float) -> Any:
    rows = lay.rows
    n = lay.shape[1]

    axes = rows + lay.spare

    def body(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
        # r and q^H b only: Householder on [a, b], q never formed.
        out = _householder(lay, a, False, b)
        r, qtb = out["r"], out["qtb"]
        nrhs = b.shape[1]

        def solve(r: jax.Array, qtb: jax.Array) -> jax.Array:
            # The padded border (rows and columns past n) is a block of r of its own:
            # a's own columns meet only a's rows, so r[:n, :n] is a's r.
            x, rank, s = _min_norm(r[:n, :n], qtb[:n], rcond)
            return jnp.concatenate([jnp.ravel(x), s.astype(x.dtype), rank[None].astype(x.dtype)])

        def idle(r: jax.Array, qtb: jax.Array) -> jax.Array:
            return jnp.zeros((n * nrhs + n + 1,), r.dtype)

        # One device computes the SVD of r, the others receive x, s and rank.
        packed = psum(on_owner(axis_index(axes) == 0, axes, solve, idle, r, qtb), axes)
        x = packed[: n * nrhs].reshape(n, nrhs)
        s = jnp.real(packed[n * nrhs : n * nrhs + n]).astype(real_dtype(r.dtype))
        rank = jnp.real(packed[-1]).astype(jnp.int32)
        x = jnp.zeros((lay.n, nrhs), x.dtype).at[:n].set(x)
        res = psum(jnp.sum(jnp.abs(a @ x - b) ** 2, axis=0), rows)
        return x, res, s, rank

    rep = PartitionSpec()
    return Spmd(
        body,
        lay.mesh,
        (lay.spec, PartitionSpec(lay.spec[0], None)),
        (rep, rep, rep, rep),
    )


MIN_NORM_GUARD = 100.0
""":func:`lstsq` outside the TSQR layout solves for NumPy's minimum-norm ``x`` instead when its
estimate of ``1 / kappa(a)`` is at most ``MIN_NORM_GUARD * rcond`` (or the QR reports rank
deficiency, or its ``x`` is not finite). The estimate is the smaller of
``min|r_jj| / max|r_jj|`` and an inverse power estimate of ``sigma_min(r)`` over the
largest column norm (:mod:`shardkit.linalg._condest`; the diagonal alone misses
Kahan-like ``r``); both are upper bounds on ``1 / kappa``, the guard factor covers the
usual gap."""


def _min_norm_local(lay: _Layout, rcond: float) -> Any:
    """NumPy's minimum-norm least squares, per shard: ``(x, residuals, s, rank)``, replicated.

    Householder TSQR of ``[a, b]`` in ``a``'s layout: each device all-gathers its row
    block over the column axes (``(M / R) x n``), factors ``[a_i, b_i]`` and one
    all-gather over the row axes stacks the ``R`` triangular factors (``R min(M / R,
    n + nrhs)`` rows of ``n + nrhs``); the ``r`` of the stack is ``[r, q^H b]`` (and the
    residual's norm below), ``q`` is never formed. Then the SVD of ``r`` (replicated,
    ``O(n^3)`` on every device), as on the TSQR path. The stack is the price: small when
    ``n`` is narrow, as large as ``a`` (on every device) for a square matrix.
    """
    rows, cols = lay.rows, lay.cols
    n = lay.shape[1]

    def body(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
        full = lax.all_gather(a, cols, axis=1, tiled=True) if cols else a
        r = jnp.linalg.qr(jnp.concatenate([full, b], axis=1), mode="r")
        if rows:
            r = jnp.linalg.qr(lax.all_gather(r, rows, tiled=True), mode="r")
        # [a_pad, b_pad] = q r with every row of r kept: the padded border's columns
        # (n to lay.n) are left out, a's own least-squares problem is r's.
        x, rank, sv = _min_norm(r[:, :n], r[:, lay.n :], rcond)
        x = jnp.zeros((lay.n, b.shape[1]), x.dtype).at[:n].set(x)
        res = psum(jnp.sum(jnp.abs(full @ x - b) ** 2, axis=0), rows)
        return x, res, sv, rank

    return body


@cached
def _min_norm_program(lay: _Layout, rcond: float) -> Any:
    rep = PartitionSpec()
    return Spmd(
        _min_norm_local(lay, rcond),
        lay.mesh,
        (lay.spec, PartitionSpec(lay.spec[0], None)),
        (rep, rep, rep, rep),
    )


def _needs_min_norm(status: jax.Array, ratio: jax.Array, x: jax.Array, rcond: float) -> jax.Array:
    """Whether the QR's answer must give way to the minimum-norm one (see MIN_NORM_GUARD)."""
    # Not "ratio <= guard": a NaN estimate (non-finite r) must choose the fallback too.
    return (status != 0) | ~(ratio > MIN_NORM_GUARD * rcond) | ~jnp.all(jnp.isfinite(x))


def _r_operand(lay: _Layout) -> Operand:
    """The record of BCGS2's sharded ``r`` (its layout is ``lay``'s, never read again)."""
    return Operand("lstsq", "r", (lay.n, lay.n), lay.mesh, normalize(lay.r_spec, 2), "concrete")


def _r_plan(lay: _Layout) -> Plan | None:
    """The natural-order plan of the sharded ``r`` (None when ``r`` is replicated)."""
    if all(e is None for e in lay.r_spec):
        return None
    return plan_for(_r_operand(lay), lay.nb, "natural")[2]


def _inverse_condition_local(lay: _Layout) -> Any:
    """``r -> min(diagonal ratio, power estimate)`` of ``1 / kappa`` (see MIN_NORM_GUARD)."""
    plan = _r_plan(lay)
    return lambda r, ratio: jnp.minimum(ratio, inverse_condition(r, plan, lay.shape[1]))


@cached
def _inverse_condition_program(lay: _Layout) -> Any:
    rep = PartitionSpec()
    return Spmd(_inverse_condition_local(lay), lay.mesh, (lay.r_spec, rep), rep)


@cached
def _qtb_program(lay: _Layout) -> Any:
    """``q^H b`` (replicated ``n x nrhs``): one all-reduce over the whole mesh."""
    k = lay.n // lay.nc

    def body(q: jax.Array, b: jax.Array) -> jax.Array:
        buf = jnp.zeros((lay.n, b.shape[1]), b.dtype)
        buf = dupdate(buf, jnp.conj(q).T @ b, (axis_index(lay.cols) * k, 0))
        return psum(buf, lay.rows + lay.cols)

    return Spmd(
        body,
        lay.mesh,
        (lay.spec, PartitionSpec(lay.spec[0], None)),
        PartitionSpec(),
    )


@cached
def _residual_program(lay: _Layout) -> Any:
    """``sum(|a x - b|^2, axis=0)``: all-reduces of ``(M / R) x nrhs`` and ``nrhs``."""
    k = lay.n // lay.nc

    def body(a: jax.Array, x: jax.Array, b: jax.Array) -> jax.Array:
        ax = psum(a @ dslice(x, (axis_index(lay.cols) * k, 0), (k, x.shape[1])), lay.cols)
        return psum(jnp.sum(jnp.abs(ax - b) ** 2, axis=0), lay.rows)

    rep = PartitionSpec()
    return Spmd(
        body,
        lay.mesh,
        (lay.spec, rep, PartitionSpec(lay.spec[0], None)),
        rep,
    )


def _lstsq_local(lay: _Layout, rcond: float) -> Any:
    """Least squares' per-shard program: ``(x, residuals, status, rank)``, all replicated.

    The eager path's programs composed: TSQR's, or the QR, ``q^T b``, the triangular
    solve on the sharded ``r`` (then one all-gather of ``x``, ``n x nrhs``) and the
    residual, with the minimum-norm program in a ``lax.cond`` when the condition
    estimate asks for it. No ``s``: which of the two runs is the partitioner's choice
    under ``jit`` on Auto axes, and the sharded ``r`` gives no singular values.
    """
    rep = PartitionSpec()
    b_spec = PartitionSpec(lay.spec[0], None)
    if lay.tsqr:
        tsqr = _tsqr_lstsq_program(lay, rcond).body

        def local_tsqr(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
            x, res, _, rank = tsqr(a, b)
            return x, res, jnp.int32(0), rank

        return local_tsqr, (lay.spec, b_spec), (rep,) * 4
    factor = _factor_program(lay, False).body
    min_norm = _min_norm_local(lay, rcond)
    qtb_of = _qtb_program(lay).body
    residual = _residual_program(lay).body
    cond = _inverse_condition_local(lay)
    plan = _r_plan(lay)
    trsm = None
    if plan is not None:
        trsm = _trsm_program(plan, lay.mesh, lay.r_spec, False, False, False).body

    def local(a: jax.Array, b: jax.Array) -> tuple[jax.Array, ...]:
        q, r, status, ratio = factor(a)
        # One chain of collectives: the estimate's solves, then q^T b's psum (after).
        estimate = cond(r, ratio)
        qtb = qtb_of(after(q, estimate), b)
        if trsm is None or plan is None:
            x = _local_trsm(r, qtb, lower=False)
        else:
            x = trsm(r, qtb)
            x = lax.all_gather(x, plan.row_axes, tiled=True) if plan.row_axes else x

        def standing() -> tuple[jax.Array, ...]:
            return x, residual(a, x, b), jnp.int32(lay.shape[1])

        def fallback() -> tuple[jax.Array, ...]:
            xm, res, _, rank = min_norm(a, b)
            return xm, res, rank

        need = _needs_min_norm(status, estimate, x, rcond)
        x, res, rank = lax.cond(need, fallback, standing)
        return x, res, jnp.int32(0), rank

    return local, (lay.spec, b_spec), (rep,) * 4


_LstsqResult = tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]
"""``(x, residuals, rank, s)``; ``s`` is None where no SVD is computed (see :func:`lstsq`)."""


def _lstsq(
    want_status: bool,
    a: ArrayInput,
    b: ArrayInput,
    /,
    *,
    rcond: float | None = None,
    nb: int = DEFAULT_PANEL,
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
    check_finite: bool = True,
) -> Checked[_LstsqResult]:
    """Least squares ``min ||a x - b||`` for sharded ``a``, like ``jnp.linalg.lstsq``.

    Through :func:`qr`. **Rank deficiency** is handled as ``numpy.linalg.lstsq`` handles
    it, on every layout: ``x`` is the minimum-norm solution, singular values at most
    ``rcond * s_max`` count as zero (``rank``), so a rank-deficient or zero ``a`` gives
    a finite ``x``, the same as NumPy's (tested against it on both paths).

    * Tall-skinny ``P(rows, None)`` input: Householder QR of ``[a, b]`` (as
      :func:`qr`, without forming ``q``: ``r`` and ``q^H b`` come out of the
      factorization), then the SVD of the small replicated ``r`` on one device (one
      all-reduce of ``x``, ``s`` and ``rank`` to the others): ``x`` is the
      minimum-norm solution, singular values at most ``rcond * s_max`` count as zero
      (``rank``), so a rank-deficient or zero ``a`` gives a finite ``x`` (the same as
      NumPy's, tested against it) and ``s`` are ``a``'s singular values.
    * Other layouts use :func:`qr` (Householder, or BCGS2), then ``q^H b`` (one
      ``n x nrhs`` all-reduce),
      :func:`~shardkit.linalg.solve_triangular` on the sharded ``r`` and the residual
      (an ``(M / R) x nrhs`` all-reduce). ``r`` is never gathered, so no SVD comes from
      it: **``s`` is None** on these layouts, as ``scipy.linalg.lstsq`` returns it for
      ``lapack_driver="gelsy"`` (also when the minimum-norm path below runs, so that
      one layout always answers with one type, under ``jit`` too), and ``rank`` is
      ``n`` when the condition estimate finds ``a`` well away from rank deficiency.
      The estimate is the smaller of ``min|r_jj| / max|r_jj|``
      and two steps of inverse power iteration for ``sigma_min(r)`` (four triangular
      solves on the sharded ``r``, no gather; the diagonal alone misses Kahan-like
      matrices). When it is at most ``100 * rcond`` (or the QR finds a
      zero ``|r_jj|``, or ``x`` is not finite), the answer is recomputed by the
      **minimum-norm path**: a
      Householder TSQR of ``[a, b]`` over the row blocks (all-gathers of each row block
      over the column axes, ``(M / R) x n``, and of the ``R`` triangular factors,
      ``R min(M / R, n + nrhs) x (n + nrhs)``, on every device) and the SVD of the
      replicated ``r`` (``O(n^3)`` flops per device); ``rank`` is then NumPy's. For a narrow ``a`` the stack is small; for a square one it is a copy of
      ``a`` on every device, which is why only a (nearly) rank-deficient ``a`` pays it
      (measured, float64, ``n = 256`` on 2x4 simulated CPU devices sharing two cores:
      0.04 s per call full rank, 1.3 s with one dependent column, the redundant SVDs
      dominating).
      Under ``jit`` the choice is a ``lax.cond`` (both branches compiled).

    **Wide** ``a`` (``M < n``, underdetermined): the minimum-norm solution through a
    Householder TSQR of ``a^H = q r`` (``x = q (r^H)^+ b``, formed as
    ``a^H V S^-2 V^H b`` so that ``q`` never exists; see :mod:`shardkit.linalg._wide`
    for its all-gathers, each of ``M``-sized pieces); ``x`` replicated, ``rank`` and
    ``s`` NumPy's. Under ``jit`` on Auto axes ``jnp.linalg.lstsq`` runs instead (XLA
    gathers ``a``). Tall or square ``a`` under ``jit`` on Auto axes: the partitioner
    picks the layout, hence the path, after ``lstsq`` returns; ``s`` is None.

    ``residuals`` are the squared norms of ``a x - b`` for the ``x`` returned, for every
    ``M`` and rank (NumPy returns them only for full rank and ``M > n``). Complex ``a``
    or ``b``: ``x = r^-1 q^H b``. Sizes the mesh does not divide are padded as in
    :func:`qr` (``b`` with zero rows; the border leaves ``x``, the residuals, ``rank``
    and ``s`` unchanged) and ``x`` comes back replicated. An empty problem (``M``,
    ``n`` or ``nrhs`` zero) gives zeros, as NumPy.

    Args:
      a: ``(M, n)`` float or complex matrix, sharded ``P(rows, cols)`` (or
        host data with ``mesh=``/``spec=``, any ``M, n``).
      b: ``(M,)`` or ``(M, nrhs)``.
      rcond: relative cutoff of the singular values; ``None``: NumPy's
        ``max(M, n) * eps``.
      nb: the QR's panel width (see :func:`qr`).
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.
      check_finite: eagerly, raise ``ValueError`` when ``a`` or ``b`` holds an inf or
        NaN (SciPy's default); under ``jit`` NaN-fill the results instead.

    Returns:
      ``(x, residuals, rank, s)``: ``x`` with ``b``'s trailing shape (replicated for
      TSQR and the minimum-norm path, rows sharded like ``r``'s rows otherwise);
      ``residuals`` the squared norms
      of ``a x - b`` per right-hand side (``(nrhs,)``, also for square ``a``);
      ``s`` ``a``'s singular values (descending) on the TSQR layout and for wide
      ``a``, None on the other layouts and under ``jit`` on Auto axes (see above).

    Raises:
      ValueError: ``b`` does not fit ``a``, a bad ``nb``, a layout error, or (eagerly)
        an inf or NaN in the input.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a_np = np.random.default_rng(0).standard_normal((64, 3))
      >>> x, res, rank, s = shardkit.linalg.lstsq(shardkit.shard(a_np, mesh=m, spec="x,None"), a_np @ np.ones(3))
      >>> bool(np.allclose(np.asarray(x), 1)), int(rank)
      (True, 3)
      >>> dup = shardkit.shard(np.repeat(a_np[:, :2], [2, 1], axis=1), mesh=m, spec="x,None")  # rank 2
      >>> x, res, rank, s = shardkit.linalg.lstsq(dup, a_np[:, 0])
      >>> (np.asarray(x).round(6) + 0.0).tolist(), int(rank)
      ([0.5, 0.5, 0.0], 2)
      >>> sq = np.random.default_rng(1).standard_normal((32, 32))
      >>> x, res, rank, s = shardkit.linalg.lstsq(shardkit.shard(sq, mesh=shardkit.mesh("2x4", "x,y"), spec="x,y"), sq @ np.ones(32), nb=4)
      >>> bool(np.allclose(np.asarray(x), 1)), int(rank)
      (True, 32)
    """
    where = "lstsq"
    a = as_inexact(where, "a", a)
    dt = common(where, a.dtype, b)
    check_same_devices(where, {"a": a, "b": b}, mesh=mesh)
    ok = require_finite(where, check_finite, a=a, b=b)
    a, b = gate(ok, a), gate(ok, b)
    a = a if a.dtype == dt else a.astype(dt)
    if a.ndim != 2:
        raise ValueError(
            f"{where}: a.shape={tuple(a.shape)} is not a matrix; pass a of shape (m, n)"
        )
    op = operand(where, "a", a, mesh=mesh, spec=spec)
    rhs_shape(where, b, int(a.shape[0]), tuple(a.shape))
    b = jnp.asarray(b).astype(dt)
    tol = float(max(a.shape) * jnp.finfo(a.dtype).eps) if rcond is None else float(rcond)
    if 0 in a.shape:  # nothing to factor: x = 0 and the residual is |b|^2
        nrhs = () if b.ndim == 1 else (b.shape[1],)
        x = jnp.zeros((a.shape[1], *nrhs), dt)
        res = jnp.sum(jnp.abs(b[:, None] if b.ndim == 1 else b) ** 2, axis=0)
        s = jnp.zeros((0,), real_dtype(dt))
        out = (x, res, jnp.zeros((), jnp.int32), s)
        return succeeded(out)
    none = b.ndim == 2 and b.shape[1] == 0  # rank and s still describe a
    rhs = jnp.zeros((a.shape[0],), dt) if none else b
    if a.shape[0] < a.shape[1]:
        out, status = _wide(a, op, rhs, tol), jnp.zeros((), jnp.int32)
    else:
        out, status = _tall_lstsq(a, op, rhs, tol, nb)
    if none:
        x, res, rank, s = out
        out = (jnp.zeros((a.shape[1], 0), dt), jnp.zeros((0,), res.dtype), rank, s)
    return Checked(nan_unless(out, ok), status)


lstsq = reports_status(_lstsq)


def _wide(a: Any, op: Operand, b: jax.Array, tol: float) -> tuple[jax.Array, ...]:
    """:func:`lstsq` of a wide ``a``: the minimum-norm solution (see :mod:`._wide`)."""
    b2 = b[:, None] if b.ndim == 1 else b
    if op.unknown:  # Auto axes under jit: XLA's partitioner places it
        x, _, rank, s = jnp.linalg.lstsq(a, b2, rcond=tol)
        res = jnp.sum(jnp.abs(a @ x - b2) ** 2, axis=0)
        rank = rank.astype(jnp.int32)
    else:
        x, res, rank, s = wide_lstsq(a, op, b2, tol)
    return (x[:, 0] if b.ndim == 1 else x, res, rank, s)


def _tall_lstsq(a: Any, op: Operand, b: jax.Array, tol: float, nb: int) -> tuple[Any, jax.Array]:
    """:func:`lstsq` on a non-empty problem: ``(x, residuals, rank, s)`` and the status.

    The status is always 0: every path answers a rank-deficient ``a`` with NumPy's
    minimum-norm solution.
    """
    b2 = b[:, None] if b.ndim == 1 else b
    ok = jnp.zeros((), jnp.int32)
    if op.unknown:
        x, res, _, rank = _on_layout(
            a,
            op,
            (b2,),
            nb,
            lambda lay: _lstsq_local(lay, tol),
            "i j, i k -> j k, k, , ",
        )
        return (x[:, 0] if b.ndim == 1 else x, res, rank, None), ok
    lay = _layout(op, nb)
    if lay.padded:
        b2 = pad_tall(b2, lay.big, b2.shape[1], 0.0, lay.mesh)
    b2 = place(b2, lay.mesh, PartitionSpec(lay.spec[0], None))
    n = lay.shape[1]
    ap = place(_padded(a, lay), lay.mesh, lay.spec)
    if lay.tsqr:
        x, res, s, rank = _tsqr_lstsq_program(lay, tol)(ap, b2)
        x = x[:n]
        return (x[:, 0] if b.ndim == 1 else x, res, rank, s), ok
    q, r, status, ratio = _factor(a, lay, False)
    estimate = _inverse_condition_program(lay)(r, ratio)
    # q^T b's psum after the estimate's solves (a replicated scalar): one chain of
    # collectives, which XLA's CPU runtime needs (see after()).
    qtb = _qtb_program(lay)(after(q, estimate), b2)
    if all(e is None for e in lay.r_spec):
        x = _local_trsm(r, qtb, lower=False)
    else:
        r_op = _r_operand(lay)
        x = triangular_solve(r, r_op, qtb, lower=False, unit=False, trans=0, nb=DEFAULT_BLOCK)
    xr = place(x, lay.mesh, PartitionSpec())

    def standing() -> tuple[jax.Array, ...]:
        res = _residual_program(lay)(ap, xr, b2)
        # Under a traced cond both answers must carry one type: the replicated x.
        return (xr if lay.padded or is_traced(xr) else x), res, jnp.int32(n)

    def min_norm() -> tuple[jax.Array, ...]:
        xm, res, _, rank = _min_norm_program(lay, tol)(ap, b2)
        return xm, res, rank

    need = _needs_min_norm(status, estimate, xr, tol)
    if is_traced(need):
        x, res, rank = lax.cond(need, min_norm, standing)
    else:
        x, res, rank = min_norm() if bool(need) else standing()
    if x.shape[0] != n:
        x = x[:n]
    # The sharded r gives no singular values (the minimum-norm branch does, but one answer
    # has one type, under jit too): s is None, as scipy's gelsy driver returns it.
    return (x[:, 0] if b.ndim == 1 else x, res, rank, None), ok
