"""Bad input to ``shardkit.plan.matmul_chain`` (issue 18): never planned silently.

Every case fails before any pricing, so these tests compile nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
from jax.sharding import Mesh

from _meshes import make_mesh
from shardkit import plan


@pytest.fixture(scope="module")
def mesh() -> Mesh:
    return make_mesh("2x4")


def test_a_three_dimensional_shape_is_not_truncated(mesh: Mesh) -> None:
    with pytest.raises(ValueError, match=r"shapes\[0\]=\(8, 16, 4\) is not a matrix shape.*2-D"):
        plan.matmul_chain([(8, 16, 4), (16, 8)], mesh=mesh)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [(-8, 16), (0, 16), (8.5, 16)])
def test_sizes_must_be_positive_integers(mesh: Mesh, bad: tuple[float, int]) -> None:
    with pytest.raises(ValueError, match=r"shapes\[0\]=.*sizes must be positive integers"):
        plan.matmul_chain([bad, (16, 8)], mesh=mesh)  # type: ignore[arg-type]


def test_shapes_of_the_wrong_kind(mesh: Mesh) -> None:
    with pytest.raises(TypeError, match=r"shapes='8x16' must be a list of matrix shapes"):
        plan.matmul_chain("8x16", mesh=mesh)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"shapes=\[\] is empty; give at least one matrix"):
        plan.matmul_chain([], mesh=mesh)  # type: ignore[arg-type]


def test_numpy_integer_sizes_are_accepted() -> None:
    small = make_mesh("2")  # the smallest search: this test plans for real
    p = plan.matmul_chain([(np.int64(8), np.int64(16)), np.array([16, 8])], mesh=small)  # type: ignore[arg-type]
    assert p.shapes == ((8, 16), (16, 8))


def test_an_out_spec_naming_a_missing_axis(mesh: Mesh) -> None:
    pattern = r"matmul_chain\(out_spec\).*spec names mesh axis 'z'.*its axes are \['x', 'y'\]"
    with pytest.raises(ValueError, match=pattern):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, out_spec="z")  # type: ignore[arg-type]


def test_an_out_spec_that_does_not_divide_the_result(mesh: Mesh) -> None:
    with pytest.raises(ValueError, match=r"matmul_chain\(out_spec\).*not divisible by 4.*Pad"):
        plan.matmul_chain([(6, 16), (16, 6)], mesh=mesh, out_spec="y")  # type: ignore[arg-type]


def test_an_out_spec_with_three_entries(mesh: Mesh) -> None:
    with pytest.raises(
        ValueError, match=r"out_spec=P\('x', None, 'y'\) has 3 entries.*at most two"
    ):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, out_spec="x,None,y")  # type: ignore[arg-type]


def test_too_few_in_specs(mesh: Mesh) -> None:
    with pytest.raises(ValueError, match=r"in_specs has 1 entries for a chain of 2.*one spec per"):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, in_specs=["x"])  # type: ignore[arg-type]


def test_in_specs_as_one_string(mesh: Mesh) -> None:
    with pytest.raises(TypeError, match=r"in_specs='x' must be a list with one spec"):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, in_specs="x")  # type: ignore[arg-type]


def test_an_in_spec_naming_a_missing_axis(mesh: Mesh) -> None:
    with pytest.raises(ValueError, match=r"matmul_chain\(in_specs\[1\]\).*axis 'q'"):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, in_specs=[None, "q"])  # type: ignore[arg-type]


def test_a_candidate_spec_naming_a_missing_axis(mesh: Mesh) -> None:
    with pytest.raises(ValueError, match=r"matmul_chain\(candidates\[0\]\).*axis 'z'"):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, candidates=["z"])  # type: ignore[arg-type]


def test_a_mesh_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match=r"mesh='2x4' \(str\) must be a jax\.sharding\.Mesh"):
        plan.matmul_chain([(8, 16), (16, 8)], mesh="2x4")  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [-1, 0, 1.5])
def test_a_bad_memory_limit(mesh: Mesh, limit: float) -> None:
    with pytest.raises((TypeError, ValueError), match=r"memory_limit=.*bytes per device"):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, memory_limit=limit)  # type: ignore[arg-type]


def test_a_dtype_that_is_not_numeric(mesh: Mesh) -> None:
    with pytest.raises(TypeError, match=r"dtype='banana' is not a numeric dtype.*np\.float32"):
        plan.matmul_chain([(8, 16), (16, 8)], mesh=mesh, dtype="banana")  # type: ignore[arg-type]


def test_candidate_specs_of_a_three_dimensional_shape(mesh: Mesh) -> None:
    with pytest.raises(ValueError, match=r"candidate_specs: shape=\(8, 8, 8\) is not a matrix"):
        plan.candidate_specs((8, 8, 8), mesh)
