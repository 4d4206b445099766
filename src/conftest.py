"""Doctest setup for the package's docstring examples: 8 simulated CPU devices."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import shardkit

shardkit.use_cpu_devices(8)


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict[str, Any]) -> None:
    doctest_namespace.update(jax=jax, np=np, shardkit=shardkit)
