"""Collectives no data dependency orders: found in HLO text and in compiled programs.

On simulated CPU devices such a pair hung ``jit(lstsq)`` (XLA's CPU runtime runs the
two concurrently on a pool of one thread per device); ``CommReport.unordered`` lists
them and ``assert_ordered`` fails on them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import shardkit
from _meshes import make_mesh
from shardkit.inspect import report_from_text
from shardkit.inspect._hlo import parse_module
from shardkit.inspect._order import unordered_collectives
from shardkit.linalg._blockcyclic import after

_HEAD = """HloModule m, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[4] get-tuple-element(%t), index=1
  %r = f32[4] all-reduce(%v), channel_id=3, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %o = (s32[], f32[4]) tuple(%i, %r)
}

%cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
"""


def _entry(lines: str) -> str:
    return _HEAD + "\nENTRY %main (p: f32[4], q: f32[4]) -> f32[4] {\n" + lines + "\n}\n"


def _pairs(text: str) -> list[tuple[str, str]]:
    return [(x.name, y.name) for x, y in unordered_collectives(parse_module(text))]


_LOOP = """  %p = f32[4] parameter(0)
  %q = f32[4] parameter(1)
  %z = s32[] constant(0)
  %t0 = (s32[], f32[4]) tuple(%z, %p)
  %w = (s32[], f32[4]) while(%t0), condition=%cond, body=%body
  %wv = f32[4] get-tuple-element(%w), index=1"""


def test_a_loop_of_collectives_beside_an_independent_all_reduce_is_unordered() -> None:
    text = _entry(
        _LOOP
        + """
  %a = f32[4] all-reduce(%q), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %out = f32[4] add(%wv, %a)"""
    )
    assert _pairs(text) == [("w", "a")]
    report = report_from_text(text)
    assert [(u.first, u.second) for u in report.unordered] == [("while w", "all-reduce a")]
    with pytest.raises(AssertionError, match="1 unordered collective pair"):
        report.assert_ordered()
    assert "no data dependency" in str(report)


def test_an_operand_chain_or_a_control_edge_orders_them() -> None:
    chained = _entry(
        _LOOP
        + """
  %dep = f32[4] add(%q, %wv)
  %a = f32[4] all-reduce(%dep), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %out = f32[4] add(%wv, %a)"""
    )
    assert _pairs(chained) == []
    report_from_text(chained).assert_ordered()
    control = _entry(
        _LOOP
        + """
  %a = f32[4] all-reduce(%q), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add, control-predecessors={%w}
  ROOT %out = f32[4] add(%wv, %a)"""
    )
    assert _pairs(control) == []


def test_compiled_programs_and_after() -> None:
    m = make_mesh("8", "auto", "x")

    def body(a: jax.Array, b: jax.Array, chain: bool) -> jax.Array:
        y = lax.fori_loop(0, 3, lambda i, t: lax.psum(t, "x") / 8, a)
        z = lax.pmax(after(b, y) if chain else b, "x")
        return y + z

    x = jax.device_put(np.ones(64, np.float32), jax.NamedSharding(m, P("x")))
    for chain, expected in ((False, 1), (True, 0)):
        f = jax.shard_map(
            lambda a, b, chain=chain: body(a, b, chain),
            mesh=m,
            in_specs=(P("x"), P("x")),
            out_specs=P("x"),
            check_vma=False,
        )
        report = shardkit.comms(f, x, x)
        assert len(report.unordered) == expected, report
        np.testing.assert_allclose(np.asarray(jax.jit(f)(x, x)), 1.0 + 1.0)
    # after() changes no value, NaN and inf included.
    v = jnp.array([1.0, jnp.nan, -jnp.inf])
    np.testing.assert_array_equal(np.asarray(after(v, jnp.array([jnp.inf]))), np.asarray(v))
