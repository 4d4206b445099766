"""Script that tests run under shardkit.distributed.launch (2 processes x 4 devices).

Usage: ``python _worker.py compute OUT.json``, ``python _worker.py die MODE VICTIM DIR``
or ``python _worker.py hold DIR``.
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


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    tmp.rename(path)


def _psum_across_processes() -> None:
    """A collective over all 8 devices: blocks while any process is missing."""
    mesh = jax.make_mesh((8,), ("x",))
    x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("x")))
    jax.block_until_ready(jax.jit(jnp.sum)(x))


def _die_main(mode: str, victim: int, pid_dir: Path) -> None:
    """Rank ``victim`` fails right after initialize, by ``mode``, once its peer waits.

    The peer starts a long-lived subprocess, writes its own pid and the subprocess's
    to ``peer.json``, then enters a collective that needs the victim. The victim
    writes the time it failed to ``failed.json`` first.
    """
    initialize(shutdown_timeout_seconds=1)
    peer_file = pid_dir / "peer.json"
    if jax.process_index() == victim:
        while not peer_file.exists():
            time.sleep(0.02)
        time.sleep(0.2)  # let the peer enter the collective
        _write_json(pid_dir / "failed.json", {"time": time.time()})
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "exit":
            os._exit(3)
        if mode == "raise":
            raise RuntimeError("rank failed on purpose")
        assert mode == "early"
        sys.exit(0)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    _write_json(peer_file, {"peer": os.getpid(), "grandchild": sleeper.pid})
    print("peer waiting in a collective for a rank that will never come", flush=True)
    _psum_across_processes()
    time.sleep(300)


def _hold_main(pid_dir: Path) -> None:
    """Every rank joins, writes its pid and a subprocess's, then waits for ever."""
    info = initialize()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    pids = {"rank": os.getpid(), "grandchild": sleeper.pid}
    _write_json(pid_dir / f"rank{info.process_id}.json", pids)
    time.sleep(300)


if __name__ == "__main__":
    if sys.argv[1] == "compute":
        _compute_main(Path(sys.argv[2]))
    elif sys.argv[1] == "hold":
        _hold_main(Path(sys.argv[2]))
    else:
        _die_main(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
