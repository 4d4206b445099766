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
import inspect
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
from _references import halo_reference
from shardkit import fft, linalg, plan, train
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
    ``covers`` names the public functions the operation runs (the registry guard
    below checks that every public function is covered or exempt); ``dtypes``,
    ``modes`` and the keys of ``sizes`` are the values of the matrix it takes.
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
    covers: tuple[str, ...] = ()  # the public functions it runs ("linalg.solve"); () = name
    dtypes: tuple[str, ...] = DTYPES  # the dtypes it takes (random draws: "bool", "int32")
    modes: tuple[str, ...] = MODES
    sampled: int = 1  # cells in the default run (the first operations' two: see _sample)

    @property
    def functions(self) -> tuple[str, ...]:
        return self.covers or (self.name,)


SQUARE = {"div": 32, "indiv": 30}
# The jit cell alone by default for the operations whose eager, padded (host data)
# path compiles for seconds and is checked eagerly on padded sizes in tests/linalg
# (test_dtypes_padding.py: the LU family; test_spectral.py: eigh, svd, polar).
ONE_CELL = 1
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


REAL = ("float32", "float64")
COMPLEX = ("complex64", "complex128")


def _draw_square(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    return _draw(rng, (n, n), dtype)


def _matrix_op(
    name: str,
    matrix: Callable[[np.random.Generator, int, str], np.ndarray],
    call: Callable[..., Any],
    check: Callable[[Any, tuple[np.ndarray, ...], str], None],
    allowed: frozenset[str] = LINALG,
    covers: tuple[str, ...] = (),
) -> Op:
    """A linalg operation of one square matrix, drawn by ``matrix``."""
    return Op(
        name,
        SQUARE,
        lambda rng, n, dt: (matrix(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        call,
        check,
        allowed,
        covers=covers or (f"linalg.{name}",),
    )


def _check_lu(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    p, low, up = (np.asarray(v) for v in out)
    assert_close(p @ low @ up, ops[0], dtype=dtype, what="p @ l @ u")
    np.testing.assert_array_equal(np.tril(low), low)
    np.testing.assert_array_equal(np.diag(low), np.ones(len(low)))
    np.testing.assert_array_equal(np.triu(up), up)


def _check_slogdet(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    sign, logabs = out
    want_sign, want_logabs = np.linalg.slogdet(ops[0].astype(np.complex128))
    assert_close(sign, want_sign, dtype=dtype, what="sign")
    assert_close(logabs, want_logabs, dtype=dtype, what="log|det|")


def _fft_inputs(rng: np.random.Generator, n: int, dtype: str) -> tuple[np.ndarray, ...]:
    # div (n = 16): every all-to-all step divides; indiv (n = 12): the input's split
    # divides (16 over 8, 16 over 2 and 4) but the transposed axes (12, 10) do not.
    return (_draw(rng, (16, n, 8 if n == 16 else 10), dtype),)


def _close_to(reference: Callable[..., np.ndarray], **kw: Any) -> Callable[..., None]:
    """A check against ``reference(operand, **kw)``, the tolerance scaled for a sum."""

    def check(got: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
        want = reference(ops[0], **kw)
        scale = float(np.sqrt(max(ops[0].size, want.size)))
        assert_close(got, want, dtype=dtype, what=reference.__name__, scale=scale)

    return check


def _fft_op(name: str, dtypes: tuple[str, ...], axes: tuple[int, ...] | None) -> Op:
    """An FFT of the fftn operands along ``axes`` (all of them for ``None``)."""
    kw: dict[str, Any] = {}
    if axes is not None:
        kw = {"axis": axes[0]} if len(axes) == 1 else {"axes": axes}
    fn = getattr(fft, name)
    return Op(
        name,
        {"div": 16, "indiv": 12},
        _fft_inputs,
        lambda mesh: ("x" if mesh == "1d" else "x,y",),
        lambda x, **_: fn(x, **kw),
        _close_to(getattr(np.fft, name), **kw),
        frozenset({"all-to-all"}),
        host_layout=False,
        covers=(f"fft.{name}",),
        dtypes=dtypes,
    )


def _shift_op(name: str) -> Op:
    fn = getattr(fft, name)
    return Op(
        name,
        {"div": 16},
        _fft_inputs,
        lambda mesh: ("x" if mesh == "1d" else "x,y",),
        lambda x, **_: fn(x),
        _close_to(getattr(np.fft, name)),
        frozenset({"collective-permute", "all-to-all"}),
        host_layout=False,
        covers=(f"fft.{name}",),
    )


def _planned_fftn(x: Any, *, mesh: Any, spec: str) -> Any:
    p = fft.plan("fftn", x.shape, mesh=mesh, spec=spec)
    return jax.shard_map(p.local, mesh=mesh, in_specs=p.in_spec, out_specs=p.out_spec)(x)


def _check_freqs(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    f, r = out
    assert_close(f, np.fft.fftfreq(16).reshape(16, 1, 1), dtype=dtype, what="fftfreq")
    assert_close(r, np.fft.rfftfreq(30).reshape(16, 1, 1), dtype=dtype, what="rfftfreq")


def _check_halo(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    (a,) = ops
    # Each of p blocks along an axis grows by one cell on either side (an unsplit axis
    # is one block: it wraps around itself).
    parts = [(g - n) // 2 for g, n in zip(out.shape, a.shape, strict=True)]
    want = halo_reference(a, parts, [1 if p else 0 for p in parts], True)
    np.testing.assert_array_equal(np.asarray(out), want)


DRAW_SHAPE = (16, 16)


def _key_inputs(rng: np.random.Generator, n: int, dtype: str) -> tuple[np.ndarray, ...]:
    """The key's data, and an empty template of the draw's dtype."""
    key = jax.random.key(int(rng.integers(1 << 30)))
    return np.asarray(jax.random.key_data(key)), np.zeros(1, dtype)


def _random_kw(name: str, dtype: Any) -> dict[str, Any]:
    return {
        "normal": {"dtype": dtype},
        "uniform": {"dtype": dtype, "minval": -2.0, "maxval": 3.0},
        "bernoulli": {"p": 0.3},
        "randint": {"minval": -5, "maxval": 1000, "dtype": dtype},
    }[name]


def _draw_sharded(name: str, data: Any, template: Any, *, mesh: Any, spec: Any) -> Any:
    sharding = shardkit.sharding(mesh, ",".join(mesh.axis_names))
    key = jax.random.wrap_key_data(data)
    return getattr(shardkit.random, name)(
        key, DRAW_SHAPE, out_sharding=sharding, **_random_kw(name, template.dtype)
    )


def _check_draw(name: str, out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    data, template = ops
    kw = _random_kw(name, template.dtype)
    fn = getattr(jax.random, name)
    key = jax.random.wrap_key_data(jnp.asarray(data))
    with jax.threefry_partitionable(True):
        if name == "bernoulli":
            want = fn(key, kw["p"], DRAW_SHAPE)
        elif name == "normal":
            want = fn(key, DRAW_SHAPE, kw["dtype"])
        elif name == "randint":
            want = fn(key, DRAW_SHAPE, kw["minval"], kw["maxval"], kw["dtype"])
        else:
            want = fn(key, DRAW_SHAPE, kw["dtype"], kw["minval"], kw["maxval"])
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))


TRAIN_SIZES = (16, 32, 8)


def _train_inputs(rng: np.random.Generator, n: int, dtype: str) -> tuple[np.ndarray, ...]:
    model = train.MLP(TRAIN_SIZES)
    return tuple(np.asarray(a) for a in model.batch(jax.random.key(int(rng.integers(99))), n))


def _train_run(mesh: Any, batch: Sequence[Any], strategy: str) -> np.ndarray:
    """The losses of three muon steps of a small MLP."""
    step, state = train.make_train_step(
        train.MLP(TRAIN_SIZES),
        train.muon(0.02),
        strategy=strategy,
        mesh=mesh,
        key=jax.random.key(0),
    )
    losses = []
    for _ in range(3):
        state, loss = step(state, tuple(batch))
        losses.append(float(loss))
    return np.array(losses)


def _train_losses(*batch: Any, mesh: Any, spec: Any) -> np.ndarray:
    return _train_run(mesh, batch, "fsdp" if len(mesh.axis_names) == 1 else "dp_tp")


def _check_train(out: Any, ops: tuple[np.ndarray, ...], dtype: str) -> None:
    # The single-device run is the reference: a NumPy MLP with muon would repeat it.
    assert_close(out, _train_run(None, ops, "single"), dtype=dtype, what="losses")


def _chain_call(a: Any, b: Any, c: Any, *, mesh: Any, **_: Any) -> Any:
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
        covers=("linalg.solve",),
        sampled=ONE_CELL,
    ),
    Op(
        "lu_factor+lu_solve",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt), _draw(rng, (n,), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.lu_solve(linalg.lu_factor(a, nb=8, **kw), b),
        _solved("lu_solve"),
        LINALG,
        covers=("linalg.lu_factor", "linalg.lu_solve"),
        sampled=ONE_CELL,
    ),
    Op(
        "det",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.det(a, nb=8, **kw),
        lambda got, ops, dt: assert_close(got, np.linalg.det(ops[0]), dtype=dt, what="det"),
        LINALG,
        covers=("linalg.det",),
        sampled=ONE_CELL,
    ),
    Op(
        "inv",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.inv(a, nb=8, **kw),
        lambda got, ops, dt: assert_close(got, np.linalg.inv(ops[0]), dtype=dt, what="inv"),
        LINALG,
        covers=("linalg.inv",),
        sampled=ONE_CELL,
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
        covers=("linalg.cholesky",),
        sampled=2,
    ),
    Op(
        "cho_factor+cho_solve",
        SQUARE,
        lambda rng, n, dt: (_hermitian_pd(rng, n, dt), _draw(rng, (n, 3), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.cho_solve(linalg.cho_factor(a, nb=8, **kw), b),
        _solved("cho_solve"),
        LINALG,
        covers=("linalg.cho_factor", "linalg.cho_solve"),
        sampled=2,
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
        covers=("linalg.solve_triangular",),
        sampled=2,
    ),
    Op(
        "qr",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.qr(a, nb=8, **kw),
        _check_qr,
        LINALG,
        covers=("linalg.qr",),
        sampled=2,
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
        covers=("linalg.lstsq",),
        sampled=2,
    ),
    Op(
        "eigh",
        SQUARE,
        lambda rng, n, dt: (_draw(rng, (n, n), dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.eigh(a, **kw),
        _check_eigh,
        SPECTRAL,
        covers=("linalg.eigh",),
        sampled=ONE_CELL,
    ),
    Op(
        "svd",
        SQUARE,
        lambda rng, n, dt: (_draw(rng, (n, n), dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.svd(a, **kw),
        _check_svd,
        SPECTRAL,
        covers=("linalg.svd",),
        sampled=ONE_CELL,
    ),
    Op(
        "polar",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt),),
        lambda mesh: _square_specs(mesh)[:1],
        lambda a, **kw: linalg.polar(a, **kw),
        _check_polar,
        SPECTRAL,
        covers=("linalg.polar",),
        sampled=ONE_CELL,
    ),
    Op(
        "cg",
        SQUARE,
        lambda rng, n, dt: (_hermitian_pd(rng, n, dt), _draw(rng, (n,), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.cg(a, b, tol=1e-6, **kw),
        _check_iterative,
        frozenset({"all-reduce", "all-gather"}),
        covers=("linalg.cg",),
        sampled=2,
    ),
    Op(
        "gmres",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt), _draw(rng, (n,), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.gmres(a, b, tol=1e-6, **kw),
        _check_iterative,
        frozenset({"all-reduce", "all-gather"}),
        covers=("linalg.gmres",),
        sampled=2,
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
        covers=("linalg.batched_solve",),
        sampled=2,
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
        covers=("linalg.matmul",),
        sampled=2,
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
        covers=("plan.matmul_chain",),
        sampled=2,
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
        covers=("fft.fftn",),
        sampled=2,
    ),
    # The rest of linalg.
    _matrix_op("lu", _well_conditioned, lambda a, **kw: linalg.lu(a, nb=8, **kw), _check_lu),
    _matrix_op(
        "slogdet", _well_conditioned, lambda a, **kw: linalg.slogdet(a, nb=8, **kw), _check_slogdet
    ),
    Op(
        "bicgstab",
        SQUARE,
        lambda rng, n, dt: (_well_conditioned(rng, n, dt), _draw(rng, (n,), dt)),
        _square_specs,
        lambda a, b, **kw: linalg.bicgstab(a, b, tol=1e-6, **kw),
        _check_iterative,
        frozenset({"all-reduce", "all-gather"}),
        covers=("linalg.bicgstab",),
    ),
    _matrix_op(
        "eigvalsh",
        _draw_square,
        lambda a, **kw: linalg.eigvalsh(a, **kw),
        lambda got, ops, dt: assert_close(
            got, sl.eigvalsh(_hermitian_of(ops[0]).astype(np.complex128)), dtype=dt, what="w"
        ),
        SPECTRAL,
    ),
    _matrix_op(
        "svdvals",
        _draw_square,
        lambda a, **kw: linalg.svdvals(a, **kw),
        lambda got, ops, dt: assert_close(
            got, np.linalg.svd(ops[0].astype(np.complex128), compute_uv=False), dtype=dt, what="s"
        ),
        SPECTRAL,
    ),
    _matrix_op(
        "to_block_cyclic+from_block_cyclic",
        _draw_square,
        lambda a, **kw: linalg.from_block_cyclic(linalg.to_block_cyclic(a, nb=8, **kw)),
        lambda got, ops, dt: np.testing.assert_array_equal(np.asarray(got), ops[0]),
        LINALG | {"all-to-all"},
        covers=("linalg.to_block_cyclic", "linalg.from_block_cyclic"),
    ),
    # The FFT family, on the fftn operands (a 1-D transform along axis 1, which the
    # 2-D mesh splits).
    *(
        _fft_op(name, dtypes, axes=axes)
        for name, dtypes, axes in (
            ("fft", DTYPES, (1,)),
            ("ifft", DTYPES, (1,)),
            ("rfft", REAL, (1,)),
            ("irfft", COMPLEX, (1,)),
            ("hfft", COMPLEX, (1,)),
            ("ihfft", REAL, (1,)),
            ("fft2", DTYPES, (1, 2)),
            ("ifft2", DTYPES, (1, 2)),
            ("rfft2", REAL, (1, 2)),
            ("irfft2", COMPLEX, (1, 2)),
            ("ifftn", DTYPES, None),
            ("rfftn", REAL, None),
            ("irfftn", COMPLEX, None),
        )
    ),
    Op(
        "fft.plan",
        {"div": 16, "indiv": 12},
        _fft_inputs,
        lambda mesh: ("x" if mesh == "1d" else "x,y",),
        _planned_fftn,
        lambda got, ops, dt: assert_close(
            got, np.fft.fftn(ops[0]), dtype=dt, what="plan", scale=float(np.sqrt(ops[0].size))
        ),
        frozenset({"all-to-all"}),
        host_layout=False,
        covers=("fft.plan",),
        dtypes=COMPLEX,
    ),
    *(_shift_op(name) for name in ("fftshift", "ifftshift")),
    Op(
        "fftfreq+rfftfreq",
        {"div": 16},
        _fft_inputs,
        lambda mesh: ("x" if mesh == "1d" else "x,y",),
        lambda x, **kw: (
            fft.fftfreq(16, like=x, axis=0, dtype=x.real.dtype),
            fft.rfftfreq(30, like=x, axis=0, dtype=x.real.dtype),
        ),
        _check_freqs,
        frozenset(),
        host_layout=False,
        covers=("fft.fftfreq", "fft.rfftfreq"),
        dtypes=REAL,
    ),
    Op(
        "halo_exchange",
        {"div": 16},
        lambda rng, n, dt: (_draw(rng, (n, 8), dt),),
        lambda mesh: ("x,None" if mesh == "1d" else "x,y",),
        lambda x, *, spec, **kw: fft.halo_exchange(x, 1, spec=spec),
        _check_halo,
        frozenset({"collective-permute"}),
        host_layout=False,
        covers=("fft.halo_exchange",),
    ),
    *(
        Op(
            name,
            {"div": 8},
            lambda rng, n, dt: (_draw(rng, (n, n, n), dt),),
            lambda mesh, _s=specs: (_s[0 if mesh == "1d" else 1],),
            lambda x, _f=fn, *, spec, **kw: _f(x, spec=spec),
            lambda got, ops, dt: np.testing.assert_array_equal(np.asarray(got), ops[0]),
            frozenset({"all-to-all"}),
            host_layout=False,
            covers=(f"fft.{name}",),
        )
        for name, fn, specs in (
            ("x_to_y", fft.x_to_y, ("None,x,None", "None,x,y")),
            ("y_to_x", fft.y_to_x, ("x,None,None", "x,None,y")),
            ("y_to_z", fft.y_to_z, ("None,None,x", "x,None,y")),
            ("z_to_y", fft.z_to_y, ("None,x,None", "x,y,None")),
            (
                "transpose_split",
                functools.partial(fft.transpose_split, src=0, dst=2),
                ("x,None,None", "x,y,None"),
            ),
        )
    ),
    # random: the values of jax.random's single-device draw, bit for bit, with no
    # collective (the key is replicated, each device draws its own block).
    *(
        Op(
            f"random.{name}",
            {"div": 16},
            _key_inputs,
            lambda mesh: (None, None),
            functools.partial(_draw_sharded, name),
            functools.partial(_check_draw, name),
            frozenset(),
            host_layout=False,
            covers=(f"random.{name}",),
            dtypes=dtypes,
        )
        for name, dtypes in (
            ("normal", REAL),
            ("uniform", REAL),
            ("bernoulli", ("bool",)),
            ("randint", ("int32",)),
        )
    ),
    Op(
        "make_train_step+muon",
        {"div": 32},
        _train_inputs,
        lambda mesh: ("x", "x"),
        _train_losses,
        _check_train,
        frozenset({"all-reduce", "all-gather", "reduce-scatter", "all-to-all"}),
        host_layout=False,
        covers=("train.make_train_step", "train.muon"),
        dtypes=("float32",),
        modes=("eager",),
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
    # The block-cyclic layout is the one the solvers pad into: it takes no padding itself.
    (
        "to_block_cyclic+from_block_cyclic",
        lambda c: c.size == "indiv",
        ValueError,
        r"to_block_cyclic: .* is not divisible by .* Pad",
    ),
)


# Cells that still fail, each with the reason: they run as strict xfails, so a fix
# shows as an unexpected pass (then remove the entry).
# (None today: halo_exchange's unordered ppermutes and random's all-gather on Explicit
# axes under jit were fixed.)
KNOWN_FAILURES: tuple[tuple[str, Callable[[Cell], bool], str], ...] = ()


def _known_failure(op: Op, cell: Cell) -> str | None:
    for name, applies, reason in KNOWN_FAILURES:
        if name == op.name and applies(cell):
            return reason
    return None


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
    return ops, args, {} if op.host_layout else {"mesh": m, "spec": specs[0]}


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


# Operations whose cells run only with SHARDKIT_FULL_TESTS=1: each compiles for seconds
# and the default run already checks it elsewhere against a reference (named here).
FULL_ONLY = {
    "lu": "tests/linalg/test_lu.py, test_dtypes_padding.py",
    "slogdet": "tests/linalg/test_grid.py, test_scipy_cases.py",
    "bicgstab": "tests/linalg/test_autojit.py, test_dtypes_padding.py",
    "eigvalsh": "tests/linalg/test_spectral.py (eigh with eigvals_only)",
    "svdvals": "tests/linalg/test_spectral.py (svd with compute_uv=False)",
    "fft.plan": "tests/fft/test_fft_plan.py; fftn's cells run the same plans",
    "make_train_step+muon": "tests/train/test_step.py, test_muon.py",
}


def op_cells(i: int, op: Op, full: bool = FULL) -> list[Cell]:
    """The cells operation ``i`` runs: all it takes when ``full``, else ``op.sampled``.

    The sample is ``_sample(i)``'s first cells with every value the operation does not
    take (a dtype, the indivisible size, jit) replaced by one it takes.
    """
    if full:
        sizes = [s for s in SIZES if s in op.sizes]
        return [Cell(*c) for c in itertools.product(AXES, op.modes, MESHES, sizes, op.dtypes)]
    out: list[Cell] = []
    # A cell that passes first, then the jit cell: only there are the collectives checked.
    cells = sorted(_sample(i), key=lambda c: (_known_failure(op, c) is not None, c.mode != "jit"))
    for cell in cells[: 0 if op.name in FULL_ONLY else op.sampled]:
        cell = dataclasses.replace(
            cell,
            mode=cell.mode if cell.mode in op.modes else op.modes[0],
            size=cell.size if cell.size in op.sizes else "div",
            dtype=cell.dtype if cell.dtype in op.dtypes else op.dtypes[i % len(op.dtypes)],
        )
        if cell not in out:
            out.append(cell)
    return out


def _params() -> list[Any]:
    out = []
    for i, op in enumerate(OPS):
        for cell in op_cells(i, op):
            reason = _known_failure(op, cell)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(op, cell, id=f"{op.name}[{cell.id}]", marks=marks))
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


# Public functions of the distributed packages that the battery does not run, and why.
EXEMPT = {
    "plan.candidate_specs": "lists specs for matmul_chain to price; computes nothing on devices",
    "train.strategy_layout": "returns the specs make_train_step places by; no computation",
    "train.muon_plan": "returns muon's plan of which device orthogonalizes which matrix",
    "train.save_state": "checkpoint I/O (tests/train/test_checkpoint.py restores across layouts)",
    "train.restore_state": "checkpoint I/O (tests/train/test_checkpoint.py)",
    "train.run_training": "the command's training loop (tests/train/test_run.py)",
}
PACKAGES = {"fft": fft, "linalg": linalg, "plan": plan, "random": shardkit.random, "train": train}


def _public_functions() -> set[str]:
    return {
        f"{name}.{attr}"
        for name, package in PACKAGES.items()
        for attr in package.__all__
        if inspect.isfunction(getattr(package, attr))
    }


def test_every_public_function_is_in_the_registry_or_exempt() -> None:
    covered = {f for op in OPS for f in op.functions}
    public = _public_functions()
    missing = public - covered - set(EXEMPT)
    assert not missing, f"public functions outside the contract battery: {sorted(missing)}"
    assert not covered & set(EXEMPT), sorted(covered & set(EXEMPT))
    assert covered | set(EXEMPT) <= public, sorted((covered | set(EXEMPT)) - public)


def test_every_operation_runs_a_cell_and_its_full_matrix_holds_them() -> None:
    assert set(FULL_ONLY) <= {op.name for op in OPS}
    for i, op in enumerate(OPS):
        sample = op_cells(i, op, full=False)
        assert 1 <= len(sample) <= op.sampled or (op.name in FULL_ONLY and not sample), op.name
        assert set(sample) <= set(op_cells(i, op, full=True)), op.name
