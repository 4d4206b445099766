"""The shared deprecation helper: one message shape, the caller's line, both spellings refused."""

from __future__ import annotations

import warnings

import pytest

from shardkit._deprecation import UNSET, Unset, pick, renamed


def _public(value: int | Unset = UNSET, new: int | None = None) -> int | None:
    return pick("f", old="old=", old_value=value, new="new=", new_value=new, stacklevel=4)


def test_renamed_names_the_new_spelling_and_points_at_the_caller() -> None:
    def public() -> None:
        renamed("f", "f(x, mesh)", "f(x, mesh=mesh)")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        public()
    (w,) = caught
    assert w.category is DeprecationWarning
    assert str(w.message) == (
        "f: f(x, mesh) is deprecated and will be removed in the next release; "
        "write f(x, mesh=mesh) instead"
    )
    assert w.filename == __file__


def test_pick_prefers_the_new_spelling_and_warns_on_the_old() -> None:
    assert _public(new=3) == 3
    assert _public() is None
    with pytest.warns(DeprecationWarning, match="old= is deprecated.*write new= instead") as rec:
        assert _public(2) == 2
    assert rec[0].filename == __file__
    with pytest.raises(TypeError, match="got both old= \\(deprecated\\) and new=; pass only new="):
        _public(2, new=3)
    assert repr(UNSET) == "<unset>"
