"""The fft suite's floor programs: what they compute, and only the collectives they promise."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from tests._meshes import make_mesh

import shardkit
from shardkit.bench._fft_floor import floor_fft, floor_moves
from shardkit.testing import assert_close

N = 16


def _volume(m: jax.sharding.Mesh) -> tuple[np.ndarray, jax.Array]:
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((N,) * 3) + 1j * rng.standard_normal((N,) * 3)).astype(np.complex64)
    return a, shardkit.shard(a, mesh=m, spec="x,y")


@pytest.mark.parametrize("axis_types", ["auto", "explicit"])
def test_floor_fft_transforms_each_block_along_contiguous_axes(axis_types: str) -> None:
    m = make_mesh("8x1", axis_types)
    a, x = _volume(m)
    p = shardkit.fft.plan("fftn", a.shape, mesh=m, spec="x,y")
    report = shardkit.comms(floor_fft(p, m), x)
    report.assert_only(set())
    out = np.asarray(jax.jit(floor_fft(p, m))(x))
    # The slab's stages: a 2-D FFT of each 2x16x16 block, then 1-D FFTs of length 16
    # over the same 512 elements read as rows.
    for d in range(8):
        block = np.fft.fftn(a[2 * d : 2 * d + 2], axes=(1, 2))
        want = np.fft.fft(block.reshape(-1, N), axis=1).reshape(block.shape)
        assert_close(out[2 * d : 2 * d + 2], want)


@pytest.mark.parametrize("axis_types", ["auto", "explicit"])
def test_floor_moves_exchange_contiguous_pieces(axis_types: str) -> None:
    m = make_mesh("8x1", axis_types)
    a, x = _volume(m)
    p = shardkit.fft.plan("fftn", a.shape, mesh=m, spec="x,y")
    out = np.asarray(jax.jit(floor_moves(p, m))(x))
    # Device r receives piece r of every device's flattened block, in device order.
    pieces = a.reshape(8, 8, -1)  # [device, piece, elements]
    assert_close(out, pieces.transpose(1, 0, 2).reshape(a.shape))


def test_floor_moves_follow_the_plans_layout() -> None:
    m = make_mesh("2x4", "auto")
    a, x = _volume(m)
    default = shardkit.fft.plan("fftn", a.shape, mesh=m, spec="x,y")
    natural = shardkit.fft.plan("fftn", a.shape, mesh=m, spec="x,y", out_layout="natural")
    for p, moves in ((default, 2), (natural, 4)):
        report = shardkit.comms(floor_moves(p, m), x)
        report.assert_only({"all-to-all"})
        report.assert_ordered()
        assert report.count("all-to-all") == moves
        assert report.bytes_sent == p.sent_bytes(np.complex64)


def test_floors_refuse_what_they_cannot_bound() -> None:
    m = make_mesh("8x1", "auto")
    real = shardkit.fft.plan("rfftn", (N,) * 3, mesh=m, spec="x,y")
    with pytest.raises(NotImplementedError, match="only complex fftn plans"):
        floor_fft(real, m)(jax.numpy.zeros((N,) * 3))
    padded = shardkit.fft.plan("fftn", (N, 12, 10), mesh=m, spec="x,y")
    assert padded.padded
    with pytest.raises(NotImplementedError, match="pads its block"):
        floor_moves(padded, m)(jax.numpy.zeros((N, 12, 10), jax.numpy.complex64))
