"""The built-in suites, listed explicitly (no registration by import side effect)."""

from __future__ import annotations

from shardkit.bench._suite import Suite
from shardkit.bench._suite_collectives import SUITE as _COLLECTIVES
from shardkit.bench._suite_eigh import SUITE as _EIGH
from shardkit.bench._suite_fft import SUITE as _FFT
from shardkit.bench._suite_linalg import SUITE as _LINALG
from shardkit.bench._suite_matmul import SUITE as _MATMUL
from shardkit.bench._suite_qr import SUITE as _QR
from shardkit.bench._suite_scaling import SUITE as _SCALING
from shardkit.bench._suite_train import SUITE as _TRAIN

__all__ = ["SUITES", "suites"]

SUITES: tuple[Suite, ...] = (
    _COLLECTIVES,
    _FFT,
    _LINALG,
    _QR,
    _EIGH,
    _MATMUL,
    _TRAIN,
    _SCALING,
)
"""The built-in suites, in the order ``shardkit bench all`` runs them."""


def suites() -> dict[str, Suite]:
    """The built-in suites by name, in the order ``shardkit bench all`` runs them."""
    return {suite.name: suite for suite in SUITES}
