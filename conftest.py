"""Doctest setup for the docstring examples under src/: the same devices and types as tests/.

Doctests and tests share one process, so both see 8 simulated CPU devices and x64.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import shardkit

shardkit.use_cpu_devices(8)
jax.config.update("jax_enable_x64", True)


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict[str, Any]) -> None:
    doctest_namespace.update(jax=jax, np=np, shardkit=shardkit)
