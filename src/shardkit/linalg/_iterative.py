"""Krylov solvers on sharded vectors: ``cg``, ``bicgstab``, ``gmres``.

With a matrix, the whole iteration runs inside one ``jax.shard_map``: vectors are
split like the matrix's rows, a matrix-vector product is one all-gather of the
vector over the row axes (plus an all-reduce over the column axes when the columns
are split too), and each dot product is a scalar all-reduce (GMRES: one
``restart``-sized all-reduce per Arnoldi step). Per-iteration traffic is vector-sized.
A callable ``a`` (a linear operator on sharded vectors) runs the same algorithm in
the global view under ``jit``; XLA then places the reductions. Under ``jit`` on Auto
mesh axes a placed matrix runs the same per-shard solver once XLA's partitioner has
chosen its layout (:mod:`shardkit.linalg._partitioned`), with no ``mesh=`` needed.

Complex systems use the conjugated inner product ``u^H v`` (cg then needs Hermitian
positive definite ``a``). A matrix whose order the mesh does not divide is padded with
an identity block and zero right-hand-side rows (see :mod:`shardkit.linalg._pad`;
the iterates keep zeros there), which costs one more padded share per device.

The result is ``(x, info)`` like ``jax.scipy.sparse.linalg`` plus a status:
``info.status`` is ``0`` when converged, the number of iterations when ``maxiter``
ran out, ``-1`` on breakdown (a NaN or a zero denominator).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, TypeAlias, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

from shardkit._programs import cached, shard_jit
from shardkit.layout.internal import Operand, as_count, as_real, check_same_devices, normalize
from shardkit.linalg._blockcyclic import (
    AnyMesh,
    SpecLike,
    axis_index,
    dslice,
    make_plan,
    matrix_layout,
    matrix_operand,
    place,
    psum,
)
from shardkit.linalg._dtype import as_inexact, common, real_dtype
from shardkit.linalg._inputs import ArrayInput
from shardkit.linalg._pad import choose, pad_matrix, pad_rows, unpad_rows
from shardkit.linalg._partitioned import partitioned

__all__ = ["IterativeInfo", "bicgstab", "cg", "gmres"]

LinearOperator: TypeAlias = Callable[[jax.Array], jax.Array]
"""A callable ``a``: ``v -> a @ v`` on (sharded) vectors, in the global view."""
Preconditioner: TypeAlias = Literal["jacobi"] | LinearOperator | None
"""``M=``: None, ``"jacobi"`` (a matrix ``a``'s diagonal) or ``v -> M^-1 v`` (a callable ``a``)."""

Ops = tuple[Callable[[jax.Array], jax.Array], Callable[[jax.Array, jax.Array], jax.Array]]


class IterativeInfo(NamedTuple):
    """How an iterative solve ended.

    Attributes:
      status: 0 converged; ``> 0`` iterations done without converging; ``-1`` breakdown.
      iterations: iterations (GMRES: Arnoldi steps) performed.
      residual: final ``||b - a x||`` (recurrence estimate for cg/bicgstab), real.
    """

    status: jax.Array
    iterations: jax.Array
    residual: jax.Array


def _sq(dot: Any, v: jax.Array) -> jax.Array:
    """``||v||^2`` as a real number (``v^H v``)."""
    return jnp.real(dot(v, v))


def _status(conv: jax.Array, res: jax.Array, it: jax.Array) -> jax.Array:
    return jnp.where(jnp.isfinite(res), jnp.where(conv, 0, it), -1).astype(jnp.int32)


def _cg(
    ops: Ops, precond: Any, b: jax.Array, x: jax.Array, thresh: Any, maxiter: int
) -> tuple[Any, ...]:
    mv, dot = ops
    r = b - mv(x)
    z = precond(r)
    p = z
    rz = dot(r, z)
    # rz = r^H M^-1 r is real for Hermitian M (rounding aside): the recurrence keeps
    # the dtype of the vectors, the stopping test the real part of dot(r, r).

    def cond(s: tuple[Any, ...]) -> jax.Array:
        rr, k = s[4], s[5]
        return (k < maxiter) & (jnp.sqrt(rr) > thresh) & jnp.isfinite(rr)

    def body(s: tuple[Any, ...]) -> tuple[Any, ...]:
        x, r, p, rz, _, k = s
        ap = mv(p)
        alpha = rz / dot(p, ap)
        x = x + alpha * p
        r = r - alpha * ap
        z = precond(r)
        rz_new = dot(r, z)
        p = z + (rz_new / rz) * p
        return x, r, p, rz_new, _sq(dot, r), k + 1

    x, _, _, _, rr, k = lax.while_loop(cond, body, (x, r, p, rz, _sq(dot, r), jnp.int32(0)))
    res = jnp.sqrt(rr)
    return x, _status(res <= thresh, res, k), k, res


def _bicgstab(
    ops: Ops, precond: Any, b: jax.Array, x: jax.Array, thresh: Any, maxiter: int
) -> tuple[Any, ...]:
    mv, dot = ops
    r = b - mv(x)
    rhat = r
    one = jnp.ones((), b.dtype)

    def cond(s: tuple[Any, ...]) -> jax.Array:
        rr, k = s[7], s[8]
        return (k < maxiter) & (jnp.sqrt(rr) > thresh) & jnp.isfinite(rr)

    def body(s: tuple[Any, ...]) -> tuple[Any, ...]:
        x, r, p, v, rho, alpha, omega, _, k = s
        rho_new = dot(rhat, r)
        beta = (rho_new / rho) * (alpha / omega)
        p = r + beta * (p - omega * v)
        ph = precond(p)
        v = mv(ph)
        alpha = rho_new / dot(rhat, v)
        s_ = r - alpha * v
        sh = precond(s_)
        t = mv(sh)
        omega = dot(t, s_) / dot(t, t)
        x = x + alpha * ph + omega * sh
        r = s_ - omega * t
        return x, r, p, v, rho_new, alpha, omega, _sq(dot, r), k + 1

    z = jnp.zeros_like(b)
    init = (x, r, z, z, one, one, one, _sq(dot, r), jnp.int32(0))
    x, *_, rr, k = lax.while_loop(cond, body, init)
    res = jnp.sqrt(rr)
    return x, _status(res <= thresh, res, k), k, res


def _gmres(
    ops: Ops, precond: Any, b: jax.Array, x: jax.Array, thresh: Any, maxiter: int, restart: int
) -> tuple[Any, ...]:
    mv, dot = ops
    tiny = jnp.finfo(b.dtype).tiny

    def cycle(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        r = precond(b - mv(x))
        beta = jnp.sqrt(_sq(dot, r))
        v0 = r / jnp.maximum(beta, tiny)
        basis = jnp.zeros((restart + 1, *b.shape), b.dtype).at[0].set(v0)
        h = jnp.zeros((restart + 1, restart), b.dtype)

        def arnoldi(j: jax.Array, s: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            basis, h = s
            w = precond(mv(basis[j]))
            # Classical Gram-Schmidt twice: one restart-sized reduction per pass.
            mask = (jnp.arange(restart + 1) <= j).astype(b.dtype)
            c1 = dot(basis, w) * mask
            w = w - jnp.tensordot(c1, basis, axes=1)
            c2 = dot(basis, w) * mask
            w = w - jnp.tensordot(c2, basis, axes=1)
            nw = jnp.sqrt(_sq(dot, w))
            col = (c1 + c2).at[j + 1].set(nw.astype(b.dtype))
            h = h.at[:, j].set(col)
            basis = basis.at[j + 1].set(jnp.where(nw > tiny, w / jnp.maximum(nw, tiny), 0))
            return basis, h

        basis, h = lax.fori_loop(jnp.int32(0), jnp.int32(restart), arnoldi, (basis, h))
        e1 = jnp.zeros(restart + 1, b.dtype).at[0].set(beta)
        y = jnp.linalg.lstsq(h, e1)[0]
        x = x + jnp.tensordot(y, basis[:restart], axes=1)
        r = b - mv(x)
        return x, jnp.sqrt(_sq(dot, r))

    r0 = b - mv(x)

    def cond(s: tuple[Any, ...]) -> jax.Array:
        _, res, k = s
        return (k < maxiter) & (res > thresh) & jnp.isfinite(res)

    def body(s: tuple[Any, ...]) -> tuple[Any, ...]:
        x, res, k = s
        x, res = cycle(x)
        return x, res, k + 1

    x, res, k = lax.while_loop(cond, body, (x, jnp.sqrt(_sq(dot, r0)), jnp.int32(0)))
    return x, _status(res <= thresh, res, k * restart), k * restart, res


class Method(enum.Enum):
    """The Krylov method of a solve."""

    CG = "cg"
    BICGSTAB = "bicgstab"
    GMRES = "gmres"


@dataclasses.dataclass(frozen=True)
class Krylov:
    """The static configuration of one solve: hashable, the key of its compiled program.

    Attributes:
      method: the Krylov method.
      maxiter: the iteration limit (GMRES: restart cycles).
      restart: GMRES's Arnoldi steps per cycle (0 for the others).
      jacobi: precondition with ``a``'s diagonal (``M="jacobi"``).
    """

    method: Method
    maxiter: int
    restart: int = 0
    jacobi: bool = False


def _iterate(
    cfg: Krylov, ops: Ops, precond: Any, b: jax.Array, x: jax.Array, thresh: Any
) -> tuple[Any, ...]:
    """Run ``cfg.method`` from ``x``: ``(x, status, iterations, residual)``."""
    if cfg.method is Method.CG:
        return _cg(ops, precond, b, x, thresh, cfg.maxiter)
    if cfg.method is Method.BICGSTAB:
        return _bicgstab(ops, precond, b, x, thresh, cfg.maxiter)
    if cfg.method is Method.GMRES:
        return _gmres(ops, precond, b, x, thresh, cfg.maxiter, cfg.restart)
    raise TypeError(f"method={cfg.method!r} is not a Method; pass one of {list(Method)}")


def _jacobi_local(a: jax.Array, rows: tuple[str, ...], cols: tuple[str, ...]) -> jax.Array:
    m, k = a.shape
    g = axis_index(rows) * m + jnp.arange(m)
    lc = g - axis_index(cols) * k
    own = (lc >= 0) & (lc < k)
    d = jnp.where(own, a[jnp.arange(m), jnp.clip(lc, 0, k - 1)], 0)
    return psum(d, cols)


def _body(cfg: Krylov, rows: tuple[str, ...], cols: tuple[str, ...]) -> Callable[..., Any]:
    """The per-shard solver: ``(a, b, x0, tol, atol) -> (x, status, iterations, residual)``.

    Vectors are split like ``a``'s rows over ``rows``; with no axes it is the
    single-device algorithm.
    """

    def body(a: jax.Array, b: jax.Array, x0: jax.Array, tol: jax.Array, atol: jax.Array) -> Any:
        k = a.shape[1]
        c0 = axis_index(cols) * k

        def mv(v: jax.Array) -> jax.Array:
            full = lax.all_gather(v, rows, tiled=True) if rows else v
            return psum(a @ dslice(full, (c0,), (k,)), cols)

        def dot(u: jax.Array, v: jax.Array) -> jax.Array:
            return psum(jnp.tensordot(jnp.conj(u), v, axes=([-1], [-1])), rows)

        if cfg.jacobi:
            d = _jacobi_local(a, rows, cols)
            inv_d = jnp.where(d != 0, 1 / d, 1)
            pre = lambda v: inv_d * v  # noqa: E731
        else:
            pre = lambda v: v  # noqa: E731
        bnorm = jnp.sqrt(_sq(dot, b))
        thresh = jnp.maximum(tol * bnorm, atol)
        return _iterate(cfg, (mv, dot), pre, b, x0, thresh)

    return body


@cached
def _matrix_program(
    cfg: Krylov, mesh: AnyMesh, spec: PartitionSpec, rows: tuple[str, ...], cols: tuple[str, ...]
) -> Any:
    vec = PartitionSpec(rows or None)
    rep = PartitionSpec()
    return shard_jit(
        _body(cfg, rows, cols),
        mesh,
        (spec, vec, vec, rep, rep),
        (vec, rep, rep, rep),
        check_vma=False,
    )


def _check_limits(where: str, tol: Any, atol: Any, maxiter: Any) -> tuple[float, float, int | None]:
    """``tol``, ``atol`` finite and >= 0; ``maxiter`` None or an int >= 1 (NumPy ints too)."""
    tol = as_real(where, "tol", tol, fix="pass a relative tolerance such as tol=1e-6")
    atol = as_real(where, "atol", atol, fix="pass an absolute tolerance such as atol=0.0")
    if maxiter is not None:
        maxiter = as_count(
            where,
            "maxiter",
            maxiter,
            minimum=1,
            fix="pass the iteration limit (e.g. maxiter=100), or None for the default",
        )
    return tol, atol, maxiter


def _initial(where: str, x0: Any, b: jax.Array) -> jax.Array:
    """The initial guess as an array shaped like ``b``, or an error naming ``x0``."""
    shape = tuple(b.shape)
    if isinstance(x0, jax.Array):  # tracers too
        x = x0
    else:
        try:
            host = np.asarray(x0)
        except (TypeError, ValueError):
            host = np.asarray(None)
        if host.dtype.kind not in "biufc":
            raise TypeError(
                f"{where}: x0 of type {type(x0).__name__} (dtype {host.dtype}) is not a "
                f"numeric array; pass a numeric array of shape {shape}, or None to start "
                "from zeros"
            )
        x = jnp.asarray(host)
    if x.shape != b.shape:
        raise ValueError(
            f"{where}: x0.shape={tuple(x.shape)} does not match b.shape={tuple(b.shape)}; "
            f"pass x0 of shape {tuple(b.shape)}, or None to start from zeros"
        )
    return x


def _on_auto_layout(
    cfg: Krylov, a: jax.Array, b: jax.Array, x0: jax.Array, tol: float, atol: float
) -> tuple[Any, ...]:
    """The solve under ``jit`` on Auto axes: the layout comes from the partitioner.

    At partition time ``a``'s sharding gives the row and column axes as eagerly (a
    replicated ``a`` is sliced to the default split); a split the order does not
    divide (only possible for a replicated ``a``) runs unsplit on every device.
    """
    shape, dtype = tuple(a.shape), a.dtype
    rd = real_dtype(dtype)

    def per_shard(rows: tuple[str, ...], cols: tuple[str, ...]) -> Callable[..., Any]:
        body = _body(cfg, rows, cols)
        return lambda a, b, x: body(a, b, x, jnp.asarray(tol, rd), jnp.asarray(atol, rd))

    def program(mesh: Any, specs: tuple[PartitionSpec, ...], wish: Any) -> Any:
        known = Operand(cfg.method.value, "a", shape, mesh, normalize(specs[0], 2), "concrete")
        m, p, rows, cols = matrix_layout(known, pad=True)
        if any(shape[0] % math.prod(m.shape[ax] for ax in axes) for axes in (rows, cols)):
            p, rows, cols = PartitionSpec(), (), ()
        vec, rep = PartitionSpec(rows or None), PartitionSpec()
        return per_shard(rows, cols), (p, vec, vec), (vec, rep, rep, rep)

    return partitioned(per_shard((), ()), program, (a, b, x0), "i j, k, l -> m, , , ")


def _solve(
    method: Method,
    a: Any,
    b: Any,
    x0: Any,
    *,
    tol: float,
    atol: float,
    maxiter: int | None,
    M: Preconditioner,  # noqa: N803  (SciPy's name)
    restart: int = 0,
    mesh: AnyMesh | None,
    spec: Any,
) -> tuple[jax.Array, IterativeInfo]:
    where = method.value
    tol, atol, maxiter = _check_limits(where, tol, atol, maxiter)
    check_same_devices(where, {"a": a, "b": b, "x0": x0}, mesh=mesh)
    if M is not None and M != "jacobi" and not callable(M):
        raise ValueError(f"{where}: M={M!r} must be None, 'jacobi' or a callable")
    if callable(a):
        b = as_inexact(where, "b", b)
        b = jnp.asarray(b)
        if b.ndim != 1:
            raise ValueError(
                f"{where}: b.shape={tuple(b.shape)} is not a vector; with a callable a, "
                "b is the right-hand side of shape (n,): pass one system at a time"
            )
        n = b.shape[0]
        x = jnp.zeros_like(b) if x0 is None else _initial(where, x0, b).astype(b.dtype)
        if M == "jacobi":
            raise ValueError(f"{where}: M='jacobi' needs a matrix a, not a callable")
        pre = M if callable(M) else (lambda v: v)
        dot = lambda u, v: jnp.sum(jnp.conj(u) * v, axis=-1)  # noqa: E731  (explicit-mode safe)
        thresh = jnp.maximum(tol * jnp.sqrt(_sq(dot, b)), atol)
        its = maxiter if maxiter is not None else 10 * n
        op = cast(LinearOperator, a)  # callable(a) narrows it to (...) -> object
        out = _iterate(Krylov(method, its, restart), (op, dot), pre, b, x, thresh)
    else:
        if callable(M):
            raise ValueError(
                f"{where}: a callable M needs a callable a (the global view); with a matrix "
                "use M=None or M='jacobi'"
            )
        a = as_inexact(where, "a", a)
        op = matrix_operand(where, a, mesh, spec)
        n = op.shape[0]
        dt = common(where, a.dtype, b)
        b = jnp.asarray(b).astype(dt)
        if b.shape != (n,):
            raise ValueError(
                f"{where}: b.shape={tuple(b.shape)} does not fit a.shape={tuple(a.shape)}; "
                f"pass b of shape ({n},)"
            )
        x = jnp.zeros_like(b) if x0 is None else _initial(where, x0, b).astype(dt)
        its = maxiter if maxiter is not None else 10 * n
        cfg = Krylov(method, int(its), int(restart), M == "jacobi")
        if op.unknown:
            x, status, k, res = _on_auto_layout(cfg, a.astype(dt), b, x, tol, atol)
            return x, IterativeInfo(status, k, res)
        m, p, rows, cols = matrix_layout(op, pad=True)
        prog = _matrix_program(cfg, m, p, rows, cols)
        vec = PartitionSpec(rows or None)
        nr = math.prod(m.shape[ax] for ax in rows)
        nc = math.prod(m.shape[ax] for ax in cols)
        padding, _ = choose(n, nr, nc, None)
        # The padded layout only (one block per cell); no elimination runs here.
        plan = make_plan(padding.size, rows, cols, nr, nc, padding.cell, "natural")
        ap = pad_matrix(a, padding, plan, m, p)
        ap = ap if ap.dtype == dt else ap.astype(dt)
        b, x = place(pad_rows(b, padding, m), m, vec), place(pad_rows(x, padding, m), m, vec)
        rep = PartitionSpec()
        rd = real_dtype(dt)
        tol_, atol_ = (place(jnp.asarray(t, rd), m, rep) for t in (tol, atol))
        x, status, k, res = prog(ap, b, x, tol_, atol_)
        x = unpad_rows(x[:, None], padding, m, rows)[:, 0]
        out = (x, status, k, res)
    x, status, k, res = out
    return x, IterativeInfo(status, k, res)


def cg(
    a: ArrayInput | LinearOperator,
    b: ArrayInput,
    /,
    x0: ArrayInput | None = None,
    *,
    tol: float = 1e-5,
    atol: float = 0.0,
    maxiter: int | None = None,
    M: Preconditioner = None,  # noqa: N803  (SciPy's name)
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
) -> tuple[jax.Array, IterativeInfo]:
    """Conjugate gradients for symmetric positive definite ``a``, like ``jax.scipy.sparse.linalg.cg``.

    Per iteration: one matrix-vector product (an ``n``-vector all-gather) and three
    scalar all-reduces. Stops when ``||r|| <= max(tol * ||b||, atol)``.

    Args:
      a: ``(n, n)`` sharded matrix, or a callable linear operator on sharded vectors.
      b: ``(n,)`` right-hand side.
      x0: initial guess (zeros).
      tol: relative tolerance.
      atol: absolute tolerance.
      maxiter: iteration limit (``10 n``).
      M: preconditioner: ``None``, ``"jacobi"`` (matrix ``a``) or a callable (callable ``a``).
      mesh: the mesh, when ``a`` does not carry it.
      spec: ``a``'s spec, likewise.

    Returns:
      ``(x, info)`` with ``info`` an :class:`IterativeInfo`.

    Raises:
      TypeError: ``maxiter`` is not an integer (NumPy integers are), ``tol`` or
        ``atol`` is not a real number, ``x0`` is not numeric.
      ValueError: ``maxiter`` below 1, a negative or non-finite tolerance, ``x0`` not
        shaped like ``b``, or operands on different devices (each message names the
        argument and the fix).

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a = shardkit.shard(np.diag(np.arange(1.0, 17)), mesh=m, spec="x,None")
      >>> x, info = shardkit.linalg.cg(a, np.ones(16), tol=1e-10)
      >>> int(info.status), bool(np.allclose(np.asarray(x), 1 / np.arange(1.0, 17)))
      (0, True)
    """
    return _solve(
        Method.CG, a, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M, mesh=mesh, spec=spec
    )


def bicgstab(
    a: ArrayInput | LinearOperator,
    b: ArrayInput,
    /,
    x0: ArrayInput | None = None,
    *,
    tol: float = 1e-5,
    atol: float = 0.0,
    maxiter: int | None = None,
    M: Preconditioner = None,  # noqa: N803  (SciPy's name)
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
) -> tuple[jax.Array, IterativeInfo]:
    """BiCGSTAB for general ``a``, like ``jax.scipy.sparse.linalg.bicgstab``.

    Per iteration: two matrix-vector products and five scalar all-reduces.
    Arguments, result and errors as :func:`cg`.

    Example:
      >>> m = shardkit.mesh("8", "x")
      >>> a_np = np.eye(16) * 4 + np.triu(np.ones((16, 16)), 1) * 0.1
      >>> x, info = shardkit.linalg.bicgstab(shardkit.shard(a_np, mesh=m, spec="x,None"), np.ones(16), tol=1e-10)
      >>> int(info.status), bool(np.allclose(a_np @ np.asarray(x), 1))
      (0, True)
    """
    return _solve(
        Method.BICGSTAB, a, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M, mesh=mesh, spec=spec
    )


def gmres(
    a: ArrayInput | LinearOperator,
    b: ArrayInput,
    /,
    x0: ArrayInput | None = None,
    *,
    tol: float = 1e-5,
    atol: float = 0.0,
    restart: int = 20,
    maxiter: int | None = None,
    M: Preconditioner = None,  # noqa: N803  (SciPy's name)
    mesh: AnyMesh | None = None,
    spec: SpecLike = None,
) -> tuple[jax.Array, IterativeInfo]:
    """Restarted GMRES (left-preconditioned), like ``jax.scipy.sparse.linalg.gmres``.

    Per Arnoldi step: one matrix-vector product and two ``restart + 1``-sized
    all-reduces (classical Gram-Schmidt, twice); the small least-squares problem is
    solved redundantly on every device. ``maxiter`` counts restart cycles (SciPy's
    meaning); ``info.iterations`` counts Arnoldi steps. Errors as :func:`cg`, and a
    ``restart`` below 1 (``ValueError``) or not an integer (``TypeError``).

    Example:
      >>> m = shardkit.mesh("2x4", "x,y")
      >>> a_np = np.eye(16) * 4 + np.triu(np.ones((16, 16)), 1) * 0.1
      >>> x, info = shardkit.linalg.gmres(shardkit.shard(a_np, mesh=m, spec="x,y"), np.ones(16), tol=1e-10)
      >>> int(info.status), bool(np.allclose(a_np @ np.asarray(x), 1))
      (0, True)
    """
    restart = as_count("gmres", "restart", restart, minimum=1, fix="e.g. restart=20")
    its = maxiter if maxiter is not None else 20
    return _solve(
        Method.GMRES,
        a,
        b,
        x0,
        tol=tol,
        atol=atol,
        maxiter=its,
        M=M,
        restart=restart,
        mesh=mesh,
        spec=spec,
    )
