"""Test-wide setup shared by tests/ and the docstring examples under src/.

Doctests and tests share one process, so both see 8 simulated CPU devices and x64.
Before the backend starts, XLA's CPU compiler is told to skip LLVM's expensive
optimizations: the suite compiles hundreds of small programs and runs each only a
few times, so compile time dominates (measured: tests/train 130 s -> 65 s, tests/fft
and tests/inspect 76 s -> 62 s). HLO passes, buffer assignment and hence the
collectives and memory figures the tests assert are unchanged. A flag already set
in ``XLA_FLAGS`` wins.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

_FAST_COMPILE_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
)
_flags = os.environ.get("XLA_FLAGS", "").split()
_flags += [f for f in _FAST_COMPILE_FLAGS if not any(g.startswith(f.split("=")[0]) for g in _flags)]
os.environ["XLA_FLAGS"] = " ".join(_flags)

# A calibrated cost-model preset in the user's config directory would change predicted
# times and matmul's choices: tests and doctests read (and write) an empty one instead.
os.environ["SHARDKIT_CONFIG_DIR"] = tempfile.mkdtemp(prefix="shardkit-test-config-")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import shardkit  # noqa: E402

shardkit.use_cpu_devices(8)
jax.config.update("jax_enable_x64", True)


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict[str, Any]) -> None:
    doctest_namespace.update(jax=jax, np=np, shardkit=shardkit)
