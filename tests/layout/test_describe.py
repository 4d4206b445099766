from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _meshes import make_mesh
from shardkit.layout import describe, format_bytes, shard, sharding


@pytest.fixture
def m() -> jax.sharding.Mesh:
    return make_mesh("2x4", "auto")


def test_describe_block(m: jax.sharding.Mesh) -> None:
    x = shard(np.zeros((16, 16), np.float32), mesh=m, spec="x,y")
    assert describe(x) == (
        "float32[16@x,16@y] on mesh(x=2,y=4): 8 shards of float32[8,4] (128 B each), 1 copy"
    )


def test_describe_replication(m: jax.sharding.Mesh) -> None:
    x = shard(np.zeros((16, 16), np.float32), mesh=m, spec="x,None")
    assert describe(x) == (
        "float32[16@x,16] on mesh(x=2,y=4): 2 shards of float32[8,16] (512 B each), "
        "4 copies of each over y (8 devices)"
    )
    full = shard(np.zeros((16, 16), np.float64), mesh=m, spec="")
    assert describe(full) == (
        "float64[16,16] on mesh(x=2,y=4): 1 shard of float64[16,16] (2.0 KiB), "
        "8 copies over x,y (8 devices)"
    )


def test_describe_multi_axis_explicit_and_sub_mesh() -> None:
    ex = make_mesh("2x4")
    x = shard(np.zeros((16, 4), np.int32), mesh=ex, spec="(y,x)")
    assert describe(x).startswith("int32[16@(y,x),4] on mesh(x=2,y=4; Explicit): 8 shards")
    sub = make_mesh("2x2", ("auto", "explicit"), names="a,b", devices=[0, 2, 4, 6])
    y = shard(np.zeros((4, 4), np.float32), mesh=sub, spec="a")
    assert "mesh(a=2:Auto,b=2:Explicit)" in describe(y)
    assert "2 copies of each over b (4 devices)" in describe(y)


def test_describe_single_device_numpy_and_struct(m: jax.sharding.Mesh) -> None:
    assert (
        describe(jnp.zeros(3, jnp.float32))
        == "float32[3] on cpu:0: 1 shard of float32[3] (12 B), 1 copy"
    )
    assert describe(np.zeros((2, 2))) == "float64[2,2] in host memory (NumPy)"
    s = jax.ShapeDtypeStruct((16, 16), jnp.bfloat16, sharding=sharding(m, "y"))
    assert describe(s) == (
        "bfloat16[16@y,16] on mesh(x=2,y=4): 4 shards of bfloat16[4,16] (128 B each), "
        "2 copies of each over x (8 devices)"
    )


def test_describe_sharding_alone(m: jax.sharding.Mesh) -> None:
    s = sharding(m, "x,y")
    assert describe(s) == "[@x,@y] on mesh(x=2,y=4): 8 shards (2x4 blocks), 1 copy"
    assert describe(s, shape=(16, 8)) == "[16@x,8@y] on mesh(x=2,y=4): 8 shards of [8,2], 1 copy"


def test_describe_inside_jit_explicit() -> None:
    ex = make_mesh("2x4")
    seen: list[str] = []

    @jax.jit
    def f(a: jax.Array) -> jax.Array:
        seen.append(describe(jax.typeof(a)))
        return a

    f(shard(np.zeros((16, 16), np.float32), mesh=ex, spec="x,y"))
    assert seen == [
        "float32[16@x,16@y] on mesh(x=2,y=4; Explicit) (traced): shards of float32[8,4]"
    ]


def test_describe_type_error() -> None:
    with pytest.raises(TypeError, match="describe: x=int has no shape"):
        describe(3)


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (3 * 2**20, "3.0 MiB")]
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


def test_describe_a_pytree_gives_one_line_per_leaf_with_its_path() -> None:
    tree = {
        "w": shard(np.zeros((8, 2), np.float32), mesh=make_mesh("8", "auto"), spec="x"),
        "n": [np.zeros(3)],
    }
    assert describe(tree).splitlines() == [
        "['n'][0]: float64[3] in host memory (NumPy)",
        "['w']: float32[8@x,2] on mesh(x=8): 8 shards of float32[1,2] (8 B each), 1 copy",
    ]
    with pytest.raises(TypeError, match=r"describe: x\['s'\] is a str"):
        describe({"s": "text"})
