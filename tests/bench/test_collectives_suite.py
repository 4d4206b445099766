"""The collectives suite's bandwidth conventions against nccl-tests' definitions."""

from __future__ import annotations

import pytest

from shardkit.bench._suite_collectives import (
    COLLECTIVES,
    NCCL_NAMES,
    bandwidths,
    bus_factor,
    nccl_bytes,
)

# nccl-tests doc/PERFORMANCE.md: busbw = algbw * factor, with
#   AllReduce 2(n-1)/n, ReduceScatter (n-1)/n, AllGather (n-1)/n, AllToAll (n-1)/n,
#   SendRecv 1; algbw = S / t, S the size nccl-tests reports (for AllGather the
#   gathered output, for ReduceScatter the full input).
NCCL_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_bus_factor_matches_nccl_tests(collective: str, n: int) -> None:
    assert bus_factor(collective, n) == pytest.approx(NCCL_FACTORS[NCCL_NAMES[collective]](n))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_sizes_and_bandwidths(n: int) -> None:
    per_device = 1 << 20
    assert nccl_bytes("all_gather", per_device, n) == n * per_device
    for c in ("psum", "psum_scatter", "all_to_all", "ppermute"):
        assert nccl_bytes(c, per_device, n) == per_device
    algbw, busbw = bandwidths("psum", per_device, n, 0.5)
    assert algbw == per_device / 0.5
    assert busbw == pytest.approx(algbw * 2 * (n - 1) / n)


def test_unknown_collective_lists_legal_values() -> None:
    with pytest.raises(ValueError, match="psum"):
        bus_factor("broadcast", 8)
