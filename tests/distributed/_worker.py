"""Script that tests run under shardkit.distributed.launch (2 processes x 4 devices).

Usage: ``python _worker.py compute OUT.json`` or ``python _worker.py die MODE PID_DIR``.
:func:`compute` is also imported by the tests to compute the single-process reference.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit.distributed import gather, initialize

SHAPE = (8 * 3, 7)  # rows split over 8 devices, a prime number of columns


def data() -> np.ndarray:
    """The seeded input every process (and the reference) builds the array from."""
    return np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)


def compute(mesh: jax.sharding.Mesh) -> dict[str, list]:
    """Collectives and jitted ops on a global array sharded over ``mesh``'s axis x."""
    a = data()
    x = jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("x")), lambda idx: a[idx])

    def block_sums(b: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.lax.psum(b, "x"), jax.lax.psum(b.sum(axis=0, keepdims=True), "x")

    summed_blocks, column_sums = jax.shard_map(
        block_sums, mesh=mesh, in_specs=P("x"), out_specs=(P(), P())
    )(x)
    total = jax.jit(lambda v: jnp.sum(v * v))(x)
    elementwise = jax.jit(lambda v: jnp.sin(v) * 2.0 + 1.0)(x)
    return {
        "gathered": gather(x).tolist(),
        "summed_blocks": gather(summed_blocks).tolist(),
        "column_sums": gather(column_sums).tolist(),
        "total": gather(total).tolist(),
        "elementwise": gather(elementwise).tolist(),
    }


def _compute_main(out: Path) -> None:
    info = initialize()
    mesh = jax.make_mesh((8,), ("x",))
    results = compute(mesh)
    if info.process_id == 0:
        out.write_text(json.dumps({"info": dataclasses.asdict(info), "results": results}))
    print(f"done process {info.process_id} of {info.num_processes}")


def _die_main(mode: str, pid_dir: Path) -> None:
    """Rank 1 dies right after initialize; rank 0 (and a child of its) would wait."""
    info = initialize()
    rank0_file = pid_dir / "rank0.json"
    if info.process_id == 1:
        while not rank0_file.exists():
            time.sleep(0.02)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    tmp = pid_dir / "rank0.tmp"
    tmp.write_text(json.dumps({"rank0": os.getpid(), "grandchild": sleeper.pid}))
    tmp.rename(rank0_file)
    print("rank 0 waiting for a peer that will never come", flush=True)
    time.sleep(300)


if __name__ == "__main__":
    if sys.argv[1] == "compute":
        _compute_main(Path(sys.argv[2]))
    else:
        _die_main(sys.argv[2], Path(sys.argv[3]))
