"""Test-wide setup, before any backend starts: 8 simulated CPU devices and 64-bit types.

x64 is on so that float64 results are really computed in float64; tests that mean
float32 say so.
"""

from __future__ import annotations

import jax

import shardkit

shardkit.use_cpu_devices(8)
jax.config.update("jax_enable_x64", True)
