from __future__ import annotations

import pytest
from jax.sharding import PartitionSpec as P

from _meshes import make_mesh
from shardkit.layout import sharding, spec


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("x,y", P("x", "y")),
        ("x,None", P("x", None)),
        (" x , _ ", P("x", None)),
        ("(x,y)", P(("x", "y"))),
        ("(x, y), None, z", P(("x", "y"), None, "z")),
        ("", P()),
        ("()", P()),
        ("None", P(None)),
        ("(x)", P(("x",))),
    ],
)
def test_spec_parses(text: str, want: P) -> None:
    assert spec(text) == want


def test_spec_passes_through_and_sequences() -> None:
    p = P("x", None)
    assert spec(p) is p
    assert spec(None) == P()
    assert spec(["x", None]) == p


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ("x,,y", "empty entry"),
        ("(x", "unclosed"),
        ("x)", "unmatched"),
        ("x y", "missing ','"),
        ("(x,None)", "None cannot appear"),
        ("x,", "ends with ','"),
        ("x;y", "position 1"),
        ("((x))", "misplaced"),
    ],
)
def test_spec_errors(bad: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        spec(bad)


def test_spec_type_error() -> None:
    with pytest.raises(TypeError, match="spec=3"):
        spec(3)  # type: ignore[arg-type]


def test_sharding_checks_axes() -> None:
    m = make_mesh("2x4")
    assert sharding(m, "y,x").spec == P("y", "x")
    with pytest.raises(ValueError, match=r"axis 'q'.*axes are \['x', 'y'\]"):
        sharding(m, "q")
    with pytest.raises(ValueError, match="'x' is used more than once"):
        sharding(m, "x,(y,x)")
