"""The seed programs and the function behind `shardkit inspect`."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from _meshes import make_mesh
from shardkit._inspect_cli import EXAMPLES, example, inspect_target, parse_arg


@pytest.fixture(autouse=True)
def _eight() -> None:
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_seed_programs_produce_their_collectives(name: str) -> None:
    r = example(name)
    assert r.unknown == ()
    assert r.kinds == EXAMPLES[name].expected
    r.assert_only(EXAMPLES[name].expected)


def test_fft_all_gathers_by_hand() -> None:
    # complex64[64,64,64] on 2x4 split x,y: blocks [32,16,64]; gather y then x.
    r = example("fft")
    rows = [(c.axes, c.result_shapes, c.sent_bytes) for c in r.collectives]
    assert rows == [
        (("y",), ((32, 64, 64),), 32 * 64 * 64 * 8 * 3 // 4),
        (("x",), ((64, 64, 64),), 64 * 64 * 64 * 8 // 2),
    ]


def test_mlp_all_reduces_every_gradient_once() -> None:
    r = example("mlp", interconnect="nvlink")
    (c,) = r.collectives
    params = 64 * 256 + 256 + 256 * 16 + 16
    assert (c.kind, c.axes, c.group_size) == ("all-reduce", ("data",), 8)
    assert c.sent_bytes == 2 * 7 * params * 4 // 8
    assert r.interconnect.name == "nvlink"


def test_matmul_example_on_explicit_and_auto() -> None:
    for axis_types in ("explicit", "auto"):
        example("matmul", axis_types=axis_types).assert_none()


def test_unknown_example() -> None:
    with pytest.raises(ValueError, match="legal values are"):
        example("attention")


def test_parse_arg() -> None:
    m = make_mesh("2x4")
    s = parse_arg("float32[1024,1024]@x,y", m)
    assert (s.shape, s.dtype, tuple(s.sharding.spec)) == (
        (1024, 1024),
        np.dtype("float32"),
        ("x", "y"),
    )
    assert tuple(parse_arg("bf16[8]", m).sharding.spec) == ()
    assert parse_arg("int32[]", m).shape == ()
    with pytest.raises(ValueError, match="dtype\\[dims\\]@spec"):
        parse_arg("float32(8)", m)
    with pytest.raises(ValueError, match="not a NumPy/JAX dtype"):
        parse_arg("floaty[8]@x", m)
    with pytest.raises(ValueError, match="'z'"):
        parse_arg("f32[8]@z", m)


def test_inspect_target_module_and_file(tmp_path: Path) -> None:
    r = inspect_target(
        "jax.numpy:matmul", mesh="2x4", names="x,y", args=["f32[64,32]@x,None", "f32[32,64]@None,y"]
    )
    r.assert_none()
    path = tmp_path / "user_code.py"
    path.write_text("import jax.numpy as jnp\n\ndef total(a):\n    return jnp.sum(a, axis=0)\n")
    r = inspect_target(f"{path}:total", mesh="8", args=["float32[64,4]@x"], interconnect="ethernet")
    assert [c.kind for c in r.collectives] == ["all-reduce"]
    assert r.collectives[0].axes == ("x",)
    with pytest.raises(ValueError, match="MODULE:FUNC"):
        inspect_target("jax.numpy.matmul")
    with pytest.raises(ValueError, match="has no"):
        inspect_target("jax.numpy:no_such_function")
    with pytest.raises(ValueError, match="no Python file"):
        inspect_target(f"{tmp_path / 'missing.py'}:f")
