from __future__ import annotations

import itertools
from typing import Literal

import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.layout import shard
from shardkit.testing import assert_close

MESHES = [("8", "x"), ("2x4", "x,y"), ("4x2", "x,y"), ("1x8", "x,y")]
SPECS_1D = ["x", "None,x", ""]
SPECS_2D = ["x,y", "y,x", "(x,y)", "None,(y,x)", "x,None", ""]


@pytest.mark.parametrize(("shape", "names"), MESHES)
@pytest.mark.parametrize("axis_types", ["auto", "explicit"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_shard_places_each_block(
    shape: str, names: str, axis_types: Literal["auto", "explicit"], dtype: type
) -> None:
    m = make_mesh(shape, axis_types, names=names)
    a = np.arange(16 * 24, dtype=dtype).reshape(16, 24)
    for text in SPECS_1D if len(m.axis_names) == 1 else SPECS_2D:
        x = shard(a, mesh=m, spec=text)
        assert isinstance(x.sharding, NamedSharding)
        for s in x.addressable_shards:
            np.testing.assert_array_equal(np.asarray(s.data), a[s.index])
        assert_close(x, a)


def test_shard_accepts_sharding_and_lists() -> None:
    m = make_mesh("2x4")
    x = shard([[1.0] * 8] * 4, mesh=m, spec="x,y")
    assert x.shape == (4, 8)
    y = shard(np.ones((4, 8)), NamedSharding(m, P("x")))
    assert y.sharding == NamedSharding(m, P("x"))


@pytest.mark.parametrize(
    ("shape", "text", "match"),
    [
        (
            (16,),
            "x,y",
            r"array shape=\(16,\), spec=P\('x', 'y'\), mesh\(x=2,y=4; Explicit\).*rank 1",
        ),
        ((16, 16), "q", r"mesh axis 'q'.*axes are \['x', 'y'\]"),
        ((16, 16), "x,x", "'x' is used more than once"),
        ((6, 16), "y", r"dimension 0 \(size 6\).*mesh axis y into 4 parts.*Pad dimension 0 to 8"),
        (
            (16, 12),
            "None,(x,y)",
            r"dimension 1 \(size 12\).*\(x,y\) into 8 parts.*Pad dimension 1 to 16",
        ),
    ],
)
def test_shard_errors_name_shape_spec_mesh_and_remedy(
    shape: tuple[int, ...], text: str, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        shard(np.zeros(shape), mesh=make_mesh("2x4"), spec=text)


def test_shard_type_errors() -> None:
    with pytest.raises(TypeError, match=r"must be a jax\.sharding\.Mesh"):
        shard(np.zeros(4), mesh="2x4")  # type: ignore[arg-type]
    m = make_mesh("2x4")
    with pytest.raises(ValueError, match="either a NamedSharding"):
        shard(np.zeros(4), NamedSharding(m, P("x")), spec="x")
    with pytest.raises(TypeError, match="where x goes is missing"):
        shard(np.zeros(4))
    with pytest.raises(TypeError, match="must be a NamedSharding"):
        shard(np.zeros(4), "x")  # type: ignore[arg-type]


def test_shard_positional_mesh_is_deprecated_and_still_places() -> None:
    m = make_mesh("2x4")
    with pytest.warns(DeprecationWarning, match=r"shard\(x, mesh=mesh, spec=spec\)") as rec:
        a = shard(np.ones((4, 8)), m, "x,y")
    assert rec[0].filename == __file__
    assert a.sharding == NamedSharding(m, P("x", "y"))
    with pytest.raises(TypeError, match="got both"):
        shard(np.ones((4, 8)), m, mesh=m)
    with pytest.raises(TypeError, match="goes with a positional mesh"):
        shard(np.ones((4, 8)), None, "x")


def test_shard_uneven_prime_sizes_rejected_or_placed() -> None:
    m = make_mesh("2x4")
    for rows, cols in itertools.product([7, 8, 13], [3, 4, 12]):
        a = np.ones((rows, cols))
        ok = rows % 2 == 0 and cols % 4 == 0
        if ok:
            assert shard(a, mesh=m, spec="x,y").shape == (rows, cols)
        else:
            with pytest.raises(ValueError, match="not divisible"):
                shard(a, mesh=m, spec="x,y")


def test_shard_places_a_pytree_with_one_spec_or_a_tree_of_specs() -> None:
    m = make_mesh("8")
    one = shard(
        {"w": np.ones((8, 4), np.float32), "pair": (np.ones(8), [1.0] * 8)}, mesh=m, spec="x"
    )
    assert one["w"].sharding.spec == P("x")
    assert one["pair"][1].sharding.spec == P("x")
    tree = {"w": np.ones((8, 4), np.float32), "pair": (np.ones(8), 2.0)}
    with pytest.raises(ValueError, match=r"shard: x\['pair'\]\[1\].*rank"):
        shard(tree, mesh=m, spec="x")  # a scalar leaf cannot be split
    per_leaf = shard(tree, mesh=m, spec={"w": (None, None), "pair": ("x", None)})
    assert per_leaf["w"].sharding.spec == P(None, None)
    assert per_leaf["pair"][0].sharding.spec == P("x")
    assert per_leaf["pair"][1].sharding.spec == P()
    with pytest.raises(ValueError, match=r"shard: x\['w'\]: array shape=\(8, 4\).*not divisible"):
        shard(tree, mesh=m, spec={"w": P(None, "x"), "pair": None})
    assert shard([[1.0] * 4] * 8, mesh=m, spec="x").shape == (8, 4)  # nested numbers stay one array
