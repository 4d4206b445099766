"""Plans: decomposition, number of moves and output layouts, without running anything."""

from __future__ import annotations

import itertools
import math

import pytest
from jax.sharding import PartitionSpec as P

import shardkit.fft as skfft
from _meshes import make_mesh
from shardkit.fft._plan import make_plan
from shardkit.fft._problem import FftProblem
from shardkit.layout.internal import normalize as normalize_spec

SIZES8 = {"x": 8}
SIZES24 = {"x": 2, "y": 4}


def _plan(shape, spec, sizes, axes=None, **kw):  # type: ignore[no-untyped-def]
    axes = tuple(range(len(shape))) if axes is None else axes
    s = kw.pop("s", tuple(shape[a] for a in axes))
    name = "ifftn" if kw.pop("inverse", False) else "fftn"
    return make_plan(FftProblem(name, shape, axes, s, **kw).placed(spec, sizes))


def test_slab_moves_once_to_the_next_axis() -> None:
    p = _plan((16, 16, 16), P("x"), SIZES8)
    assert (p.decomposition, p.all_to_alls, p.out_spec) == ("slab", 1, P(None, "x", None))
    assert [s.op for s in p.steps] == ["fft", "all_to_all", "fft"]


def test_pencil_moves_twice() -> None:
    p = _plan((16, 16, 16), P("x", "y"), SIZES24)
    assert (p.decomposition, p.all_to_alls, p.out_spec) == ("pencil", 2, P(None, "x", "y"))


@pytest.mark.parametrize(
    ("spec", "out"),
    [
        (P(None, None, "x"), P("x", None, None)),
        (P(None, "x"), P(None, None, "x")),
    ],
)
def test_last_axis_wraps_around(spec: P, out: P) -> None:
    assert _plan((16, 16, 16), spec, SIZES8).out_spec == out


def test_natural_adds_the_reverse_moves() -> None:
    p = _plan((16, 16, 16), P("x", "y"), SIZES24, out_layout="natural")
    assert (p.all_to_alls, p.out_spec, p.layout) == (4, P("x", "y", None), "natural")


def test_inverse_shifts_back() -> None:
    fwd = _plan((16, 16, 16), P("x", "y"), SIZES24)
    inv = _plan((16, 16, 16), fwd.out_spec, SIZES24, inverse=True)
    assert inv.out_spec == P("x", "y", None)


def test_every_axis_split_stacks_and_returns_natural() -> None:
    p = _plan((16, 16), P("x", "y"), SIZES24)
    assert (p.all_to_alls, p.out_spec) == (4, P("x", "y"))


def test_fft_along_a_split_axis_borrows_the_other() -> None:
    p = _plan((16, 16), P("x"), SIZES8, axes=(0,))
    assert (p.all_to_alls, p.out_spec) == (2, P("x", None))


def test_untransformed_split_axis_is_left_alone() -> None:
    p = _plan((16, 16, 16), P("x"), SIZES8, axes=(1, 2))
    assert (p.all_to_alls, p.decomposition) == (0, "local")


def test_indivisible_destination_is_padded_and_the_output_returns_natural() -> None:
    p = _plan((16, 12, 10), P("x"), SIZES8)
    moves = [s for s in p.steps if s.op == "all_to_all"]
    assert (p.all_to_alls, p.out_spec, p.layout, p.padded) == (
        2,
        P("x", None, None),
        "natural",
        True,
    )
    assert (moves[0].pad, moves[0].trim, moves[0].block) == (((8, 12, 16),), (), (2, 16, 10))
    assert (moves[1].pad, moves[1].trim, moves[1].block) == ((), ((8, 12, 16),), (16, 2, 10))
    assert "pad 12->16" in str(p)
    assert "trim 16->12" in str(p)


def test_a_natural_layout_the_mesh_cannot_divide_names_axis_and_remedy() -> None:
    with pytest.raises(ValueError, match=r"axis 0 \(now of length 12\).*\(8 devices\).*choose s"):
        _plan((16, 16, 16), P("x"), SIZES8, s=(12, 16, 16), out_layout="natural")
    assert _plan((16, 16, 16), P("x"), SIZES8, s=(12, 16, 16)).out_spec == P(None, "x", None)


def test_split_1d_array_is_not_implemented() -> None:
    with pytest.raises(NotImplementedError, match="four-step"):
        _plan((64,), P("x"), SIZES8)


def test_rfft_halved_axis_joins_the_cycle_only_when_divisible() -> None:
    slab = make_plan(FftProblem("rfftn", (16, 16, 16), (0, 1, 2), (16,) * 3).placed(P("x"), SIZES8))
    assert (slab.all_to_alls, slab.out_spec, slab.out_shape) == (1, P(None, "x", None), (16, 16, 9))
    pencil = make_plan(
        FftProblem("rfftn", (16, 16, 16), (0, 1, 2), (16,) * 3).placed(P("x", "y"), SIZES24)
    )
    assert (pencil.out_spec, pencil.layout) == (P("x", "y", None), "natural")
    wide = make_plan(
        FftProblem("rfftn", (16, 16, 14), (0, 1, 2), (16, 16, 14)).placed(P("x", "y"), SIZES24)
    )
    assert (wide.all_to_alls, wide.out_spec) == (2, P(None, "x", "y"))


def test_plan_text_lists_steps() -> None:
    text = str(_plan((16, 16, 16), P("x"), SIZES8))
    assert "all_to_all(x: axis 0 -> 1)" in text


def test_r2c_with_only_the_halved_axis_free_pads_it() -> None:
    p = make_plan(FftProblem("rfftn", (8, 8), (0, 1), (8, 8)).placed(P("x"), SIZES8))
    assert (p.all_to_alls, p.out_spec, p.out_shape) == (2, P("x", None), (8, 5))
    assert p.steps[1].pad == ((8, 5, 8),)
    assert p.steps[3].trim == ((8, 5, 8),)


def test_split_r2c_axis_with_a_split_neighbour_is_rejected_clearly() -> None:
    with pytest.raises(NotImplementedError, match=r"R2C axis 2 is split and the next"):
        make_plan(
            FftProblem("rfftn", (8, 8, 8), (0, 1, 2), (8,) * 3).placed(P("x", None, "y"), SIZES24)
        )


def test_a_split_moves_past_an_indivisible_axis_to_one_that_divides() -> None:
    p = _plan((16, 12, 16), P("x"), SIZES8)
    assert (p.all_to_alls, p.out_spec, p.padded) == (1, P(None, None, "x"), False)
    back = _plan((16, 12, 16), p.out_spec, SIZES8, inverse=True)
    assert (back.all_to_alls, back.out_spec, back.padded) == (1, P("x", None, None), False)


def test_no_layout_divides_is_reported_with_the_remedy() -> None:
    # The R2C axis holds the split and is halved to 5; 12 and 12 are not multiples of 8.
    with pytest.raises(ValueError, match=r"no output layout divides.*axis 2 \(now of length 5\)"):
        make_plan(
            FftProblem("rfftn", (12, 12, 8), (0, 1, 2), (12, 12, 8)).placed(
                P(None, None, "x"), SIZES8
            )
        )


@pytest.mark.parametrize(
    ("sizes", "specs"),
    [(SIZES8, [P("x"), P(None, "x")]), (SIZES24, [P("x", "y"), P(None, "y", "x")])],
)
def test_inverse_retraces_every_unpadded_forward_plan(
    sizes: dict[str, int], specs: list[P]
) -> None:
    # Padded forward plans return their input's layout; every other one must be undone
    # by the default inverse, whatever the lengths (6, 12, 20 pad on these meshes).
    unpadded = 0
    for shape, spec in itertools.product(itertools.product((6, 8, 12, 20), repeat=3), specs):
        entries = normalize_spec(spec, 3)
        if any(n % math.prod(sizes[a] for a in e) for n, e in zip(shape, entries, strict=True)):
            continue
        fwd = _plan(shape, spec, sizes)
        if fwd.padded:
            assert normalize_spec(fwd.out_spec, 3) == entries, str(fwd)
            continue
        unpadded += 1
        inv = _plan(shape, fwd.out_spec, sizes, inverse=True)
        assert (normalize_spec(inv.out_spec, 3), inv.padded) == (entries, False), f"{fwd}\n{inv}"
    assert unpadded >= 10


def test_problem_is_one_hashable_description() -> None:
    # Spellings of the same split give equal problems (they key the cached programs).
    a = FftProblem("ifftn", (16, 16, 16), (0, 1, 2), (16,) * 3).placed(P("x"), SIZES8)
    b = FftProblem("ifftn", (16, 16, 16), (0, 1, 2), (16,) * 3).placed(P(("x",), None), SIZES8)
    assert a == b
    assert len({a, b}) == 1
    assert (a.kind, a.inverse, a.spec, a.mesh) == ("c2c", True, (("x",), (), ()), (("x", 8),))
    assert make_plan(a) == make_plan(b)
    assert FftProblem("rfftn", (8, 8), (0, 1), (8, 8)).kind == "r2c"


def test_plan_positional_spec_and_mesh_are_deprecated() -> None:
    m = make_mesh("2x4")
    new = skfft.plan("fftn", (8, 8, 8), mesh=m, spec="x,y")
    with pytest.warns(
        DeprecationWarning, match=r"write plan\(name, shape, mesh=mesh, spec=spec\)"
    ) as rec:
        old = skfft.plan("fftn", (8, 8, 8), "x,y", m)
    assert rec[0].filename == __file__
    assert (old.in_spec, old.out_spec, old.all_to_alls) == (
        new.in_spec,
        new.out_spec,
        new.all_to_alls,
    )
    with pytest.raises(TypeError, match="got both"):
        skfft.plan("fftn", (8, 8, 8), "x,y", m, mesh=m)
    with pytest.raises(TypeError, match="plan: mesh= is missing"):
        skfft.plan("fftn", (8, 8, 8), spec="x")
