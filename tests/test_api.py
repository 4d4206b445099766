"""The public API: one export list, every name present and documented."""

from __future__ import annotations

import typing

import pytest

import shardkit
import shardkit.distributed
import shardkit.fft
import shardkit.inspect
import shardkit.layout
import shardkit.linalg
import shardkit.plan
import shardkit.random
import shardkit.show
import shardkit.train

MODULES = [
    shardkit,
    shardkit.layout,
    shardkit.distributed,
    shardkit.inspect,
    shardkit.fft,
    shardkit.linalg,
    shardkit.plan,
    shardkit.random,
    shardkit.train,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_export_exists_and_has_a_docstring(module) -> None:  # type: ignore[no-untyped-def]
    assert module.__doc__
    for name in module.__all__:
        obj = getattr(module, name)
        if isinstance(obj, str | tuple | dict) or typing.get_origin(obj) is not None:
            # constants (environment variable names, legal values) and type aliases
            # are documented where they are defined; their names say what they are
            assert name.isupper() or name[0].isupper(), f"{module.__name__}.{name}"
            continue
        assert obj.__doc__, f"{module.__name__}.{name} has no docstring"


def test_exports_are_unique() -> None:
    # Their order is ruff's (RUF022, isort-style), checked by `make lint`.
    for module in MODULES:
        assert len(set(module.__all__)) == len(module.__all__), module.__name__


def test_import_changes_no_global_config() -> None:
    import subprocess
    import sys

    code = "import jax; before = dict(jax.config.values); import shardkit; print(before == dict(jax.config.values))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "True"
