"""Bad input to the vocabulary (mesh, shard) and the shared boundary checks of issue 18.

Each test asserts that the message names the argument and the remedy, and that the
error is shardkit's own (never one raised from inside JAX).
"""

from __future__ import annotations

from typing import Literal

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import shardkit
from shardkit.layout import internal

# ---- NumPy integers are accepted wherever Python ints are ---------------------------


def test_mesh_accepts_numpy_integers_and_arrays() -> None:
    for shape in ((np.int64(2), np.int64(4)), np.array([2, 4]), [np.int32(2), 4]):
        m = shardkit.mesh(shape, "x,y")
        assert dict(m.shape) == {"x": 2, "y": 4}
    assert dict(shardkit.mesh(np.int64(8)).shape) == {"x": 8}
    ids = [d.id for d in shardkit.mesh("2", devices=[np.int64(3), np.int64(5)]).devices.flat]
    assert ids == [3, 5]


def test_mesh_devices_that_are_neither_devices_nor_ids() -> None:
    with pytest.raises(TypeError, match=r"devices=\.\.\. holds 'a' \(str\).*jax\.devices\(\)"):
        shardkit.mesh("2", devices=["a", "b"])


def test_mesh_devices_as_an_array_or_of_the_wrong_type() -> None:
    grid = shardkit.mesh("2x2", devices=[0, 2, 4, 6]).devices  # a 2-D array of devices
    assert [d.id for d in shardkit.mesh("4", devices=grid).devices.flat] == [0, 2, 4, 6]
    with pytest.raises(TypeError, match=r"mesh: devices=4 \(int\) must be a list of"):
        shardkit.mesh("4", devices=4)  # type: ignore[arg-type]


def test_sharding_with_a_string_mesh() -> None:
    with pytest.raises(TypeError, match=r"sharding: mesh='2x4' \(str\).*shardkit\.mesh"):
        shardkit.sharding("2x4", "x")  # type: ignore[arg-type]


def test_mesh_rejects_floats_and_bools_naming_the_fix() -> None:
    with pytest.raises(TypeError, match=r"shape=\(2\.0, 4\).*tuple of ints.*shardkit\.mesh"):
        shardkit.mesh((2.0, 4))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"shape=True"):
        shardkit.mesh(True)


# ---- shard of things that are not one numeric array -----------------------------------


def test_shard_of_a_string_names_x_and_the_fix() -> None:
    m = shardkit.mesh("2x4", "x,y")
    with pytest.raises(TypeError, match=r"shard: x='abc' has dtype <U3.*not numeric.*np\.asarray"):
        shardkit.shard("abc", mesh=m)


def test_shard_of_a_pytree_places_each_leaf() -> None:
    # issue 16: shard accepts pytrees, like jax.device_put (it used to refuse them)
    m = shardkit.mesh("2x4", "x,y")
    assert shardkit.shard({"a": np.ones(4)}, mesh=m)["a"].sharding.spec == PartitionSpec()
    with pytest.raises(TypeError, match=r"shard: x\[0\]\['a'\]='abc' has dtype <U3"):
        shardkit.shard([{"a": "abc"}], mesh=m)


def test_shard_of_a_ragged_list_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"shard: x=.*not an array.*rectangular"):
        shardkit.shard([[1, 2], [3]], mesh=shardkit.mesh("8"))


def test_shard_still_places_numbers_bools_and_lists() -> None:
    m = shardkit.mesh("8")
    assert shardkit.shard([1.0] * 8, mesh=m, spec="x").shape == (8,)
    assert shardkit.shard(np.ones(8, bool), mesh=m, spec="x").dtype == np.bool_
    assert shardkit.shard(3, mesh=m).shape == ()


# ---- the shared checks -----------------------------------------------------------------


def test_as_count_accepts_numpy_integers_and_names_the_argument() -> None:
    assert internal.as_count("f", "n", np.int64(3)) == 3
    assert internal.as_count("f", "n", np.array(4)) == 4
    with pytest.raises(ValueError, match=r"f: n=-1 must be at least 1; give a count"):
        internal.as_count("f", "n", -1, minimum=1, fix="give a count")
    with pytest.raises(TypeError, match=r"f: n=2\.5 \(float\) must be an integer"):
        internal.as_count("f", "n", 2.5)
    with pytest.raises(TypeError, match=r"f: n=True \(bool\)"):
        internal.as_count("f", "n", True)


def test_as_real_rejects_nan_negative_and_non_numbers() -> None:
    assert internal.as_real("f", "tol", np.float32(0.5)) == 0.5
    assert internal.as_real("f", "tol", jax.numpy.asarray(0.25)) == 0.25
    with pytest.raises(ValueError, match=r"f: tol=nan must be a finite number >= 0; use 1e-6"):
        internal.as_real("f", "tol", float("nan"), fix="use 1e-6")
    with pytest.raises(ValueError, match=r"tol=-1\.0 must be a finite number >= 0"):
        internal.as_real("f", "tol", -1)
    with pytest.raises(TypeError, match=r"f: tol='1e-6' \(str\) must be a real number"):
        internal.as_real("f", "tol", "1e-6")


def test_check_key_accepts_new_and_legacy_keys_only() -> None:
    internal.check_key("f", "key", jax.random.key(0))
    internal.check_key("f", "key", jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match=r"f: key=0 is an integer seed.*key=jax\.random\.key"):
        internal.check_key("f", "key", 0)
    with pytest.raises(TypeError, match=r"f: key=.*not a PRNG key.*jax\.random\.key\(0\)"):
        internal.check_key("f", "key", np.ones(3))
    with pytest.raises(ValueError, match=r"array of \(2,\) keys.*key=keys\[0\]"):
        internal.check_key("f", "key", jax.random.split(jax.random.key(0)))


def test_check_mesh_arg_names_the_mesh_to_build() -> None:
    m = shardkit.mesh("8")
    assert internal.check_mesh_arg("f", m) is m
    with pytest.raises(TypeError, match=r"f: mesh='2x4' \(str\).*shardkit\.mesh\('2x4'\)"):
        internal.check_mesh_arg("f", "2x4")


def test_check_same_devices_names_each_operand_and_the_fix() -> None:
    left = shardkit.mesh("4", "x", devices=[0, 1, 2, 3])
    right = shardkit.mesh("4", "x", devices=[4, 5, 6, 7])
    a = shardkit.shard(np.ones(8), mesh=left, spec="x")
    b = shardkit.shard(np.ones(8), mesh=right, spec="x")
    pattern = (
        r"f: the operands live on different devices: a is on mesh\(x=4; Explicit\) on devices "
        r"\[0, 1, 2, 3\]; b is on .*\[4, 5, 6, 7\]\. Put every operand on a's mesh"
    )
    with pytest.raises(ValueError, match=pattern):
        internal.check_same_devices("f", {"a": a, "b": b})
    with pytest.raises(ValueError, match=r"mesh is on .*a is on"):
        internal.check_same_devices("f", {"a": a}, mesh=right)
    with pytest.raises(ValueError, match=r"move them"):
        internal.check_same_devices("f", {"t": (a, b)}, fix="move them")
    # host data, uncommitted arrays and equal device sets pass
    internal.check_same_devices("f", {"a": a, "h": np.ones(3), "u": jax.numpy.ones(3)})
    same = jax.device_put(np.ones(8), NamedSharding(left, PartitionSpec()))
    internal.check_same_devices("f", {"a": a, "s": same}, mesh=left)


def test_check_same_devices_refuses_two_explicit_meshes_over_the_same_devices() -> None:
    cases: tuple[tuple[Literal["explicit", "auto"], bool], ...] = (
        ("explicit", True),
        ("auto", False),
    )
    for axis_types, refused in cases:
        a = shardkit.shard(
            np.ones(8), mesh=shardkit.mesh("2x4", "x,y", axis_types=axis_types), spec="y"
        )
        b = shardkit.shard(
            np.ones(8), mesh=shardkit.mesh("8", "z", axis_types=axis_types), spec="z"
        )
        if not refused:
            internal.check_same_devices("f", {"a": a, "b": b})  # jit reconciles Auto meshes
            continue
        pattern = (
            r"f: the operands are on different meshes over the same devices: a is on "
            r"mesh\(x=2,y=4; Explicit\); b is on mesh\(z=8; Explicit\).*Put every operand on one"
        )
        with pytest.raises(ValueError, match=pattern):
            internal.check_same_devices("f", {"a": a, "b": b})


# ---- fft.plan with a mesh of the wrong type (the one fft boundary check here) ---------


def test_fft_plan_with_a_string_mesh_names_the_fix() -> None:
    with pytest.raises(TypeError, match=r"plan: mesh='2x4' \(str\).*shardkit\.mesh\('2x4'\)"):
        shardkit.fft.plan("fftn", (8, 8, 8), spec="x", mesh="2x4")  # type: ignore[arg-type]
