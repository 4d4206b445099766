"""shardkit.layout.internal.operand: one answer to "where does this operand live"."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.layout import shard, spec
from shardkit.layout.internal import (
    canonical,
    drop_unit_axes,
    is_traced,
    normalize,
    operand,
    parse_spec,
    to_pspec,
)


def test_concrete_host_and_struct() -> None:
    m = make_mesh("2x4")
    found = operand("t", "x", shard(np.ones((4, 8)), mesh=m, spec="y"))
    assert (found.mesh, found.spec, found.how, found.pspec) == (m, (("y",), ()), "concrete", P("y"))
    host = operand("t", "x", np.ones((4, 8)))
    assert (host.mesh, host.spec, host.how) == (None, None, "host")
    s = jax.ShapeDtypeStruct((4, 8), np.float32, sharding=NamedSharding(m, P(None, ("x", "y"))))
    assert operand("t", "x", s).spec == ((), ("x", "y"))
    assert operand("t", "x", jax.ShapeDtypeStruct((4,), np.float32)).how == "host"


def test_given_mesh_and_spec_override() -> None:
    m, other = make_mesh("2x4"), make_mesh("8")
    a = shard(np.ones((8, 8)), mesh=m, spec="x,y")
    assert operand("t", "x", a, spec="y").spec == (("y",), ())
    assert operand("t", "x", a, mesh=m).spec == (("x",), ("y",))  # its own spec on its own mesh
    moved = operand("t", "x", a, mesh=other)  # another mesh: replicated unless spec= says
    assert (moved.mesh, moved.spec, moved.how) == (other, ((), ()), "concrete")
    host = operand("t", "x", np.ones((8, 8)), mesh=other, spec="x")
    assert (host.mesh, host.spec, host.how) == (other, (("x",), ()), "host")


@pytest.mark.parametrize("types", ["explicit", "auto"])
def test_traced_values(types: Any) -> None:
    m = make_mesh("2x4", types)
    a = shard(np.ones((8, 8)), mesh=m, spec="x,y")
    seen: dict[str, Any] = {}

    def f(x: jax.Array) -> jax.Array:
        seen["traced"] = is_traced(x)
        seen["found"] = operand("t", "x", x)
        return x

    jax.jit(f)(a)
    found = seen["found"]
    assert seen["traced"]
    assert not is_traced(a)
    if types == "explicit":
        assert (found.spec, found.how) == ((("x",), ("y",)), "explicit-traced")
    else:  # the abstract mesh is known while tracing, the split is not
        assert (found.spec, found.how, found.pspec) == (None, "auto-traced", None)
        assert dict(found.mesh.shape) == {"x": 2, "y": 4}


def test_normalized_spec_helpers() -> None:
    assert normalize(P("x"), 3) == (("x",), (), ())
    assert normalize(None, 2) == ((), ())
    assert to_pspec((("x",), (), ("y", "z"))) == P("x", None, ("y", "z"))
    assert canonical(P(("x",), None)) == P("x")
    assert drop_unit_axes((("x", "y"), ()), {"x": 1, "y": 4}) == (("y",), ())
    assert parse_spec is spec  # internal code imports the parser under this name
