"""The contract battery: every public distributed operation over the whole matrix.

Each operation runs over {Auto, Explicit} axes x {eager, jit} x {1-D mesh "8", 2-D
mesh "2x4"} x {a size the mesh divides, one it does not} x {float32, float64,
complex64, complex128}: 64 cells per operation. Each cell compares the result with a
NumPy/SciPy reference under ``shardkit.testing``'s tolerance for its dtype and, for
the jitted cells, asserts through ``shardkit.comms`` that the compiled program never
all-gathers a whole operand, uses only the collectives the operation promises and
runs them in one chain (``assert_ordered``).

``make test`` runs a sample (for each operation two complementary cells, which take
every value of the two-valued dimensions, with the combinations and dtypes rotated
across operations); ``SHARDKIT_FULL_TESTS=1`` runs all of it. A cell that stays
unsupported is listed in ``UNSUPPORTED`` with the clear error it raises, and the
battery asserts that error.

Indivisible sizes: placed arrays must divide their mesh (JAX has no uneven
``NamedSharding``), so the linear algebra takes host data with ``mesh=``/``spec=``
and pads internally; the FFT takes a placed array whose own split divides while an
intermediate all-to-all step does not.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl

import shardkit
from _matrix import FULL
from _meshes import make_mesh
from shardkit import fft, linalg, plan
from shardkit.testing import assert_close, tolerance

AXES: tuple[Literal["auto", "explicit"], ...] = ("auto", "explicit")
MODES = ("eager", "jit")
MESHES = {"1d": ("8", "x"), "2d": ("2x4", "x,y")}
SIZES = ("div", "indiv")
DTYPES = ("float32", "float64", "complex64", "complex128")


@dataclasses.dataclass(frozen=True)
class Cell:
    """One point of the matrix."""

    axes: Literal["auto", "explicit"]
    mode: str
    mesh: str
    size: str
    dtype: str

    @property
    def id(self) -> str:
        return "-".join((self.axes, self.mode, self.mesh, self.size, self.dtype))


ALL_CELLS = [Cell(*c) for c in itertools.product(AXES, MODES, MESHES, SIZES, DTYPES)]


def _sample(offset: int) -> list[Cell]:
    """Two complementary cells: each takes the other's value on every two-valued dimension.

    ``offset`` (the operation's index) picks which combination the first cell takes and
    the two dtypes, so that across the operations every combination and dtype runs.
    """
    bits = (offset & 1, (offset >> 1) & 1, ((offset >> 2) ^ offset) & 1, ((offset >> 1) ^ 1) & 1)
    out = []
    for flip in (0, 1):
        a, m, me, si = (b ^ flip for b in bits)
        out.append(
            Cell(AXES[a], MODES[m], ("1d", "2d")[me], SIZES[si], DTYPES[(offset + 2 * flip) % 4])
        )
    return out


def _rng(cell: Cell) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(cell.id.encode()))


def _draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _well_conditioned(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    return (_draw(rng, (n, n), dtype) / np.sqrt(n) + 2 * np.eye(n)).astype(dtype)


def _hermitian_pd(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    b = _draw(rng, (n, n), dtype) / np.sqrt(n)
    return (b @ b.conj().T + np.eye(n)).astype(dtype)


@dataclasses.dataclass(frozen=True)
class Op:
    """One public operation as the battery drives it.

    ``inputs`` draws NumPy operands for a size; ``specs`` places each of them on a
    mesh kind (``None``: replicated); ``call`` runs shardkit with keywords: ``mesh=``
    and ``spec=`` for host data, ``mesh=`` alone (which it may ignore) for placed
    operands of ops that take only those; ``check`` compares with the reference;
    ``allowed`` lists the collective kinds the jitted program may use; ``ordered``
    whether its collectives must form one chain (False where XLA's partitioner, not
    shardkit, places some of them: the chain plan's resharding of its operands).
    """

    name: str
    sizes: dict[str, int]
    inputs: Callable[[np.random.Generator, int, str], tuple[np.ndarray, ...]]
    specs: Callable[[str], tuple[str | None, ...]]
    call: Callable[..., Any]
    check: Callable[[Any, tuple[np.ndarray, ...], str], None]
    allowed: frozenset[str]
    host_layout: bool = True  # indivisible sizes: host data + mesh=/spec= keywords
    ordered: bool = True


SQUARE = {"div": 32, "indiv": 30}
LINALG = frozenset({"all-reduce", "all-gather", "collective-permute"})
# The spectral decompositions add the all-to-alls of the move to rows and of X^H.
SPECTRAL = LINALG | {"all-to-all"}


def _square_specs(mesh: str) -> tuple[str | None, ...]:
    return ("x,None" if mesh == "1d" else "x,y", None)


def _close(what: str) -> Callable[[Any, Any, str], None]:
    def check(got: Any, want: Any, dtype: str) -> None:
        assert_close(got, want, dtype=dtype, what=what)

    return check


def _solved(what: str) -> Callable[[Any, tuple[np.ndarray, ...], str], None]:
    def check(x: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
        a, b = ops
        assert_close(x, np.linalg.solve(a.astype(np.complex128), b), dtype=dtype, what=what)

    return check


def _hermitian_of(a: np.ndarray) -> np.ndarray:
    """The Hermitian matrix eigh reads from ``a``'s lower triangle (as scipy does)."""
    h = np.tril(a) + np.tril(a, -1).conj().T
    h[np.diag_indices(a.shape[0])] = np.real(h.diagonal())
    return h


def _check_eigh(got: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    w, v = (np.asarray(x) for x in got)
    h = _hermitian_of(ops[0])
    assert_close(w, sl.eigvalsh(h.astype(np.complex128)), dtype=dtype, what="eigenvalues")
    assert_close((v * w) @ v.conj().T, h, dtype=dtype, what="v diag(w) v^H")
    assert_close(v.conj().T @ v, np.eye(len(w)), dtype=dtype, what="v^H v")


def _check_svd(got: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    u, s, vh = (np.asarray(x) for x in got)
    a = ops[0]
    assert_close(s, np.linalg.svd(a.astype(np.complex128), compute_uv=False), dtype=dtype, what="s")
    assert_close((u * s) @ vh, a, dtype=dtype, what="u diag(s) vh")
    assert_close(u.conj().T @ u, np.eye(len(s)), dtype=dtype, what="u^H u")


def _check_polar(got: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    u, p = (np.asarray(x) for x in got)
    assert_close(u @ p, ops[0], dtype=dtype, what="u p")
    assert_close(u.conj().T @ u, np.eye(u.shape[1]), dtype=dtype, what="u^H u")
    assert_close(p, p.conj().T, dtype=dtype, what="p Hermitian")


def _check_qr(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    (a,) = ops
    q, r = (np.asarray(v) for v in out)
    assert_close(q @ r, a, dtype=dtype, what="q @ r")
    assert_close(q.conj().T @ q, np.eye(q.shape[1]), dtype=dtype, what="q^H q")
    np.testing.assert_array_equal(np.triu(r), r)


def _check_lstsq(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    a, b = ops
    want = np.linalg.lstsq(a.astype(np.complex128), b, rcond=None)[0]
    assert_close(out[0], want, dtype=dtype, what="lstsq x")


def _check_iterative(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    x, info = out
    a, b = ops
    assert int(info.status) == 0, info
    rtol, _ = tolerance(dtype)
    residual = np.linalg.norm(a @ np.asarray(x) - b) / np.linalg.norm(b)
    assert residual <= max(1e-5, 100 * rtol), residual


def _fft_inputs(rng: np.random.Generator, n: int, dtype: str) -> tuple[np.ndarray, ...]:
    # div (n = 16): every all-to-all step divides; indiv (n = 12): the input's split
    # divides (16 over 8, 16 over 2 and 4) but the transposed axes (12, 10) do not.
    return (_draw(rng, (16, n, 8 if n == 16 else 10), dtype),)


def _chain_call(a: Any, b: Any, c: Any, *, mesh: Any) -> Any:
    p = plan.matmul_chain([a.shape, b.shape, c.shape], mesh=mesh, dtype=a.dtype)
    return p.apply(a, b, c)


OPS: tuple[Op, ...] = (
    Op(
        "solve",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt), _draw(rng, (n, 2), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.solve(a, b, nb=8, **kw),
        _solved("solve"),
        LINALG,
    ),
    Op(
        "lu_factor+lu_solve",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt), _draw(rng, (n,), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.lu_solve(linalg.lu_factor(a, nb=8, **kw), b),
        _solved("lu_solve"),
        LINALG,
    ),
    Op(
        "det",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.det(a, nb=8, **kw),
        lambda got, ops, dt: assert_close(got, np.linalg.det(ops[0]), dtype=dt, what="det"),
        LINALG,
    ),
    Op(
        "inv",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.inv(a, nb=8, **kw),
        lambda got, ops, dt: assert_close(got, np.linalg.inv(ops[0]), dtype=dt, what="inv"),
        LINALG,
    ),
    Op(
        "cholesky",
        SQUARE,
        lambda rng, n, dt: (_hermitian_pd(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.cholesky(a, nb=8, **kw),
        lambda got, ops, dt: assert_close(
            got, np.linalg.cholesky(ops[0]), dtype=dt, what="cholesky"
        ),
        LINALG,
    ),
    Op(
        "cho_factor+cho_solve",
        SQUARE,
        lambda rng, n, dt: (_hermitian_pd(rng, n, dt), _draw(rng, (n, 3), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.cho_solve(linalg.cho_factor(a, nb=8, **kw), b),
        _solved("cho_solve"),
        LINALG,
    ),
    Op(
        "solve_triangular",
        SQUARE,
        lambda rng, n, dt: (np.tril(_well_conditioned(rng, n, dt)), _draw(rng, (n, 2), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.solve_triangular(a, b, lower=True, nb=8, **kw),
        lambda got, ops, dt: assert_close(
            got, sl.solve_triangular(ops[0], ops[1], lower=True), dtype=dt, what="trsm"
        ),
        LINALG,
    ),
    Op(
        "qr",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.qr(a, nb=8, **kw),
        _check_qr,
        LINALG,
    ),
    Op(
        "lstsq",
        # Tall enough that TSQR's gathered stack of R factors (8 x 8 per device) is
        # smaller than a itself.
        {"div": 128, "indiv": 124},
        lambda rng, n, dt: (_draw(rng, (n, 8), dt), _draw(rng, (n,), dt)),
        lambda mesh: ("x,None" if mesh == "1d" else "(x,y),None", None),
        lambda a, b, **kw: linalg.lstsq(a, b, **kw),
        _check_lstsq,
        LINALG,
    ),
    Op(
        "eigh",
        SQUARE,
        lambda rng, n, dt: (_draw(rng, (n, n), dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.eigh(a, **kw),
        _check_eigh,
        SPECTRAL,
    ),
    Op(
        "svd",
        SQUARE,
        lambda rng, n, dt: (_draw(rng, (n, n), dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.svd(a, **kw),
        _check_svd,
        SPECTRAL,
    ),
    Op(
        "polar",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.polar(a, **kw),
        _check_polar,
        SPECTRAL,
    ),
    Op(
        "cg",
        SQUARE,
        lambda rng, n, dt: (_hermitian_pd(rng, n, dt), _draw(rng, (n,), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.cg(a, b, tol=1e-6, **kw),
        _check_iterative,
        frozenset({"all-reduce", "all-gather"}),
    ),
    Op(
        "gmres",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt), _draw(rng, (n,), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.gmres(a, b, tol=1e-6, **kw),
        _check_iterative,
        frozenset({"all-reduce", "all-gather"}),
    ),
    Op(
        "batched_solve",
        {"div": 8, "indiv": 6},
        lambda rng, n, dt: (
            np.stack([_well_conditioned(rng, 5, dt) for _ in range(n)]),
            _draw(rng, (n, 5), dt),
        ),
        lambda mesh: ("x" if mesh == "1d" else "(x,y)", "x" if mesh == "1d" else "(x,y)"),
        lambda a, b, **kw: linalg.batched_solve(a, b, **kw),
        lambda got, ops, dt: assert_close(
            got,
            np.linalg.solve(ops[0].astype(np.complex128), ops[1][..., None])[..., 0],
            dtype=dt,
            what="batched_solve",
        ),
        frozenset({"all-reduce"}),  # a padded batch comes back replicated
    ),
    Op(
        "matmul",
        {"div": 32, "indiv": 31},
        lambda rng, n, dt: (_draw(rng, (n, 16), dt), _draw(rng, (16, 24), dt)),
        lambda mesh: ("x,None" if mesh == "1d" else "x,y", "x" if mesh == "1d" else "y"),
        lambda a, b, **kw: linalg.matmul(a, b),
        lambda got, ops, dt: assert_close(got, ops[0] @ ops[1], dtype=dt, what="matmul"),
        frozenset({"all-reduce", "all-gather", "reduce-scatter", "collective-permute"}),
        host_layout=False,
    ),
    Op(
        "matmul_chain.apply",
        {"div": 32, "indiv": 31},
        lambda rng, n, dt: (
            _draw(rng, (n, 16), dt),
            _draw(rng, (16, 16), dt),
            _draw(rng, (16, 8), dt),
        ),
        lambda mesh: ("x", None, None) if mesh == "1d" else ("x,y", "y", None),
        _chain_call,
        lambda got, ops, dt: assert_close(
            got, ops[0] @ ops[1] @ ops[2], dtype=dt, what="chain product"
        ),
        frozenset(
            {"all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all"}
        ),
        host_layout=False,
        ordered=False,
    ),
    Op(
        "fftn",
        {"div": 16, "indiv": 12},
        _fft_inputs,
        lambda mesh: ("x" if mesh == "1d" else "x,y",),
        lambda x, **kw: fft.fftn(x),
        lambda got, ops, dt: assert_close(
            got, np.fft.fftn(ops[0]), dtype=dt, what="fftn", scale=float(np.sqrt(ops[0].size))
        ),
        frozenset({"all-to-all"}),
        host_layout=False,
    ),
)


# Cells that stay unsupported, each with the clear error it raises:
# (operation, predicate on the cell, exception type, message pattern).
# matmul and the chain plan take placed operands only, and JAX places an array only on
# a mesh that divides it: shard() refuses with its padding advice.
UNSUPPORTED: tuple[tuple[str, Callable[[Cell], bool], type[Exception], str], ...] = (
    ("matmul", lambda c: c.size == "indiv", ValueError, r"shard: .* is not divisible by .* Pad"),
    (
        "matmul_chain.apply",
        lambda c: c.size == "indiv",
        ValueError,
        r"shard: .* is not divisible by .* Pad",
    ),
)


def _unsupported(op: Op, cell: Cell) -> tuple[type[Exception], str] | None:
    for name, applies, kind, pattern in UNSUPPORTED:
        if name == op.name and applies(cell):
            return kind, pattern
    return None


def _mesh(cell: Cell) -> Any:
    shape, names = MESHES[cell.mesh]
    return make_mesh(shape, cell.axes, names)


def _prepare(op: Op, cell: Cell) -> tuple[tuple[np.ndarray, ...], list[Any], dict[str, Any]]:
    """NumPy operands, the arguments shardkit gets, and ``mesh=``/``spec=`` keywords."""
    m = _mesh(cell)
    ops = op.inputs(_rng(cell), op.sizes[cell.size], cell.dtype)
    specs = op.specs(cell.mesh)
    if cell.size == "indiv" and op.host_layout:
        return ops, [jnp.asarray(x) for x in ops], {"mesh": m, "spec": specs[0]}
    args = [shardkit.shard(x, mesh=m, spec=s or "") for x, s in zip(ops, specs, strict=True)]
    return ops, args, {} if op.host_layout else {"mesh": m}


def _largest_operand(ops: Sequence[np.ndarray]) -> int:
    return max(x.size for x in ops)


def _check_comms(
    op: Op, fn: Callable[..., Any], args: list[Any], ops: Sequence[np.ndarray]
) -> None:
    report = shardkit.comms(fn, *args)
    if op.ordered:  # one chain: an unordered pair can hang on simulated CPU devices
        report.assert_ordered()
    kinds = set(report.kinds)
    assert kinds <= op.allowed, f"{op.name}: collectives {sorted(kinds - op.allowed)} not allowed"
    whole = _largest_operand(ops)
    for c in report.collectives:
        if c.kind == "all-gather":
            gathered = max(math.prod(s) for s in c.result_shapes)
            assert gathered < whole, (
                f"{op.name}: an all-gather of {c.result_shapes} elements gathers a whole operand "
                f"({whole} elements)"
            )


def _attempt(
    op: Op, cell: Cell
) -> tuple[Any, tuple[np.ndarray, ...], Callable[..., Any], list[Any]]:
    """Place the operands and run the cell: (result, NumPy operands, function, arguments)."""
    ops, args, layout = _prepare(op, cell)
    fn = functools.partial(op.call, **layout)
    return (jax.jit(fn) if cell.mode == "jit" else fn)(*args), ops, fn, args


def _run_cell(op: Op, cell: Cell, to_host: Callable[[Any], Any] = lambda out: out) -> None:
    """Run one cell and check it; ``to_host`` brings the result to this process first."""
    expected = _unsupported(op, cell)
    if expected is not None:  # placing the operands is part of the attempt
        kind, pattern = expected
        with pytest.raises(kind, match=pattern):
            _attempt(op, cell)
        return
    out, ops, fn, args = _attempt(op, cell)
    op.check(to_host(out), ops, cell.dtype)
    if cell.mode == "jit":
        _check_comms(op, fn, args, ops)


def _params() -> list[Any]:
    out = []
    for i, op in enumerate(OPS):
        cells = ALL_CELLS if FULL else _sample(i)
        out += [pytest.param(op, cell, id=f"{op.name}[{cell.id}]") for cell in cells]
    return out


@pytest.mark.parametrize(("op", "cell"), _params())
def test_contract(op: Op, cell: Cell) -> None:
    _run_cell(op, cell)


def test_sample_takes_every_value_of_every_dimension() -> None:
    for offset in range(len(OPS)):
        cells = _sample(offset)
        for field, values in (
            ("axes", AXES),
            ("mode", MODES),
            ("mesh", tuple(MESHES)),
            ("size", SIZES),
        ):
            assert {getattr(c, field) for c in cells} == set(values), (offset, field)
    assert {c.dtype for o in range(len(OPS)) for c in _sample(o)} == set(DTYPES)
    combos = {(c.axes, c.mode, c.mesh) for o in range(len(OPS)) for c in _sample(o)}
    assert len(combos) == 8  # every axis type x mode x mesh combination runs somewhere


def test_unsupported_cells_name_real_operations() -> None:
    names = {op.name for op in OPS}
    assert {name for name, *_ in UNSUPPORTED} <= names
    assert all(re.compile(p) for *_, p in UNSUPPORTED)
