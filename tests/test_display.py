"""Notebook displays: each report's HTML shows exactly the lines of its text form."""

from __future__ import annotations

import html
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shardkit
from _meshes import make_mesh
from shardkit._display import rich_text


def html_text(markup: str) -> str:
    """The characters an HTML ``<pre>`` block displays, trailing blanks removed."""
    assert markup.startswith("<pre"), markup[:80]
    text = html.unescape(re.sub(r"<[^>]+>", "", markup))
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def plain(obj: Any) -> str:
    return "\n".join(line.rstrip() for line in str(obj).splitlines())


def test_html_text_sees_a_difference() -> None:
    # the comparison below could not pass by accident: a changed fact shows
    assert html_text("<pre><code>a &lt; b</code></pre>") == "a < b"
    assert html_text("<pre><code>a &lt; b</code></pre>") != "a < c"


def test_comm_report_html_has_the_text_lines() -> None:
    m = make_mesh("2x4")
    a = shardkit.shard(np.ones((16, 16), np.float32), mesh=m, spec="x,y")
    report = shardkit.comms(jax.jit(lambda v: jnp.sum(v, axis=0)), a)
    assert report.collectives  # the table has rows
    assert html_text(report._repr_html_()) == plain(report)
    assert "all-reduce" in report._repr_html_()


def test_chain_plan_html_has_the_text_lines() -> None:
    m = make_mesh("8")
    plan = shardkit.plan.matmul_chain([(16, 8), (8, 16), (16, 8)], mesh=m, memory_limit=1024)
    assert html_text(plan._repr_html_()) == plain(plan)
    assert plan.order in html_text(plan._repr_html_())


def test_matmul_explanation_html_has_the_text_lines() -> None:
    m = make_mesh("2x4")
    a = shardkit.shard(np.ones((16, 8), np.float32), mesh=m, spec="x,y")
    b = shardkit.shard(np.ones((8, 16), np.float32), mesh=m, spec="y,None")
    explanation = shardkit.linalg.matmul(a, b, explain=True)
    text = html_text(explanation._repr_html_())
    assert text == plain(explanation)
    assert explanation.chosen.algorithm in text


@pytest.mark.parametrize(("spec", "moves"), [("x,y", 2), ("x", 1), (None, 0)])
def test_fft_plan_display_shows_every_fact_of_its_text(spec: str | None, moves: int) -> None:
    m = make_mesh("2x4")
    plan = shardkit.fft.plan("fftn", (8, 8, 8), spec=spec, mesh=m)
    assert plan.all_to_alls == moves
    rich_form = plain(rich_text(plan, width=120))
    assert html_text(plan._repr_html_()) == rich_form
    facts = [plan.name, plan.decomposition, str(plan.in_shape), str(plan.in_spec)]
    facts += [str(plan.out_shape), str(plan.out_spec), *map(str, plan.steps)]
    for fact in facts:
        assert fact in str(plan), fact
        assert fact in rich_form, fact
    assert f"{moves} all_to_all" in rich_form
