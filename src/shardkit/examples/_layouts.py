"""Seed 002, exercise 1: sharding layouts on 1-D, 2-D, transposed and partial meshes.

Each exercise asks for the mesh and spec that produce a given picture; the check is
that every block of the 16x16 array lands on the device the picture names.
"""

from __future__ import annotations

import jax
import numpy as np

from shardkit.examples._scenario import Checks, scenario
from shardkit.layout import mesh, shard
from shardkit.testing import to_numpy

_N = 16


def _matrix() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((_N, _N)).astype(np.float32)


def block_owners(x: jax.Array) -> list[list[list[int]]]:
    """The device ids holding each block of a 2-D array, as a grid of sorted id lists."""
    index_map = x.sharding.devices_indices_map(x.shape)
    starts = [sorted({idx[d].indices(x.shape[d])[0] for idx in index_map.values()}) for d in (0, 1)]
    grid: list[list[list[int]]] = [[[] for _ in starts[1]] for _ in starts[0]]
    for device, idx in index_map.items():
        r, c = (starts[d].index(idx[d].indices(x.shape[d])[0]) for d in (0, 1))
        grid[r][c].append(device.id)
    return [[sorted(ids) for ids in row] for row in grid]


def _check_layout(c: Checks, x: jax.Array, want: list[list[int]], a: np.ndarray) -> None:
    got = block_owners(x)
    expected = [[[d] for d in row] for row in want]
    c.check("blocks on the pictured devices", got == expected, f"got {got}, want {expected}")
    c.close("values unchanged", to_numpy(x), a)


@scenario("002/1.0", "1-D sharding of a 16x16 array over 8 devices", seed="002")
def one_d(c: Checks) -> None:
    a = _matrix()
    x = shard(a, mesh=mesh("8", "x"), spec="x")
    c.show(x, "P('x') on 8 devices")
    _check_layout(c, x, [[d] for d in range(8)], a)


@scenario("002/1.0h", "half mesh: the first 4 devices only", seed="002", min_devices=4)
def half_mesh(c: Checks) -> None:
    a = _matrix()
    x = shard(a, mesh=mesh("4", "x", devices=jax.devices()[:4]), spec="x")
    c.show(x, "half mesh")
    _check_layout(c, x, [[d] for d in range(4)], a)


@scenario("002/1.1", "exercise 1.1: transposed (column) sharding", seed="002")
def transposed(c: Checks) -> None:
    a = _matrix()
    x = shard(a, mesh=mesh("8", "x"), spec="None,x")
    c.show(x, "P(None, 'x')")
    _check_layout(c, x, [list(range(8))], a)


@scenario("002/1.2", "exercise 1.2: transposed 2-D sharding", seed="002")
def transposed_2d(c: Checks) -> None:
    a = _matrix()
    x = shard(a, mesh=mesh("2x4", "x,y"), spec="y,x")
    c.show(x, "mesh 2x4, P('y', 'x')")
    _check_layout(c, x, [[0, 4], [1, 5], [2, 6], [3, 7]], a)


@scenario("002/1.3", "exercise 1.3: partial 2-D mesh on devices 0,2,4,6", seed="002")
def partial_2d(c: Checks) -> None:
    a = _matrix()
    x = shard(a, mesh=mesh("2x2", "x,y", devices=[0, 2, 4, 6]), spec="x,y")
    c.show(x, "mesh 2x2 of devices 0,2,4,6")
    _check_layout(c, x, [[0, 2], [4, 6]], a)


@scenario("002/1.4", "exercise 1.4: the mysterious mesh", seed="002")
def mysterious(c: Checks) -> None:
    a = _matrix()
    # Device d sits at mesh position (a, b, c) = (d // 4, d // 2 % 2, d % 2). Splitting
    # rows over (c, a) and columns over b gives rows [0,2], [4,6], [1,3], [5,7].
    m = mesh("2x2x2", "a,b,c")
    x = shard(a, mesh=m, spec="(c,a),b")
    c.show(x, "mesh 2x2x2 (a,b,c), P(('c','a'), 'b')")
    _check_layout(c, x, [[0, 2], [4, 6], [1, 3], [5, 7]], a)


@scenario("004/specs", "multi-axis and partially replicated specs on a 4x2 mesh", seed="004")
def specs_4x2(c: Checks) -> None:
    a = _matrix()
    m = mesh("4x2", "a,b")
    cases = {
        "a,b": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "b,a": [[0, 2, 4, 6], [1, 3, 5, 7]],
        "(a,b),None": [[d] for d in range(8)],
    }
    for text, want in cases.items():
        x = shard(a, mesh=m, spec=text)
        c.show(x, f"P({text})")
        _check_layout(c, x, want, a)
    x = shard(a, mesh=m, spec="a,None")
    c.show(x, "P('a', None): each block on the 2 devices of a mesh row")
    c.check(
        "P('a', None) replicates over b",
        block_owners(x) == [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]],
        str(block_owners(x)),
    )
    c.close("values unchanged", to_numpy(x), a)


@scenario("002/1.5", "beyond JAX's visualizer: a 3-D volume on a 2x4 mesh", seed="002")
def volume(c: Checks) -> None:
    v = np.random.default_rng(3).standard_normal((8, 16, 16)).astype(np.float32)
    x = shard(v, mesh=mesh("2x4", "x,y"), spec="x,y,None")
    c.show(x, "the seeds' FFT volume, P('x', 'y', None)", axes=(1, 2))
    c.raises(
        "jax.debug.visualize_array_sharding refuses rank 3",
        ValueError,
        lambda: jax.debug.visualize_array_sharding(x),
        "1 and 2 dimensions",
    )
    for s in x.addressable_shards:
        c.check(
            f"device {s.device.id} holds its block",
            bool(np.array_equal(np.asarray(s.data), v[s.index])),
        )
    c.close("values unchanged", to_numpy(x), v)


SCENARIOS = (
    one_d,
    half_mesh,
    transposed,
    transposed_2d,
    partial_2d,
    mysterious,
    specs_4x2,
    volume,
)
"""This module's scenarios, in tour order."""
