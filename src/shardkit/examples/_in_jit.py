"""Tutorial-style code calling shardkit inside its own jitted function.

The seed tutorials build Auto meshes with ``jax.make_mesh(..., axis_types=(Auto,) *
2)`` and place arrays with ``jax.device_put(x, NamedSharding(mesh, P(...)))``; their
work happens inside ``jax.jit``, where an Auto-axes array's layout is unknown while
tracing. ``002/jit`` writes one such step, a linear solve and a 3-D FFT, calls
:func:`shardkit.linalg.solve` and :func:`shardkit.fft.fftn` inside it with no extra
arguments, checks both against NumPy/SciPy, and shows through
:func:`shardkit.inspect.comms` that the compiled step runs shardkit's algorithms
(no collective moves the whole matrix or grid), unlike ``jnp.linalg.solve`` and
``jnp.fft.fftn`` in the same step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from shardkit import fft, linalg
from shardkit.examples._scenario import Checks, scenario
from shardkit.inspect import comms


@scenario(
    "002/jit", "tutorial code: solve and fftn inside its own jax.jit on an Auto mesh", seed="002"
)
def inside_jit(c: Checks) -> None:
    n, grid = 64, (16, 16, 16)
    m = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    rng = np.random.default_rng(0)
    a_np = (rng.standard_normal((n, n)) / np.sqrt(n) + 2 * np.eye(n)).astype(np.float32)
    b_np = rng.standard_normal(n).astype(np.float32)
    u_np = rng.standard_normal(grid).astype(np.complex64)
    a = jax.device_put(a_np, NamedSharding(m, P("x", "y")))
    b = jax.device_put(b_np, NamedSharding(m, P()))
    u = jax.device_put(u_np, NamedSharding(m, P("x", "y")))

    @jax.jit
    def step(a: jax.Array, b: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
        return linalg.solve(a, b), fft.fftn(u)

    x, uk = step(a, b, u)
    c.close("solve(A, b) inside jit equals SciPy's", x, sl.solve(a_np, b_np), dtype=np.float32)
    c.close(
        "fftn(u) inside jit equals NumPy's",
        uk,
        np.fft.fftn(u_np),
        dtype=np.complex64,
        scale=float(np.sqrt(u_np.size)),
    )
    c.show(uk, "fftn(u) from the jitted step")

    ours = comms(step, a, b, u)
    plain = comms(jax.jit(lambda a, b, u: (jnp.linalg.solve(a, b), jnp.fft.fftn(u))), a, b, u)
    whole = max(n * n, int(np.prod(grid)))
    biggest = max(max(int(np.prod(s)) for s in col.result_shapes) for col in ours.collectives)
    c.check(
        "no collective of the jitted step moves a whole operand",
        biggest < whole,
        f"largest collective result {biggest} elements, operands {n * n} and {np.prod(grid)}",
    )
    c.check("the FFT moves data by all-to-all", "all-to-all" in ours.kinds, str(ours.kinds))
    c.check(
        "jnp.linalg.solve and jnp.fft.fftn in the same step gather",
        "all-gather" in plain.kinds,
        str(plain.kinds),
    )
    c.note(
        f"collectives of the jitted step: {', '.join(sorted(ours.kinds))}; "
        f"with jnp.linalg.solve and jnp.fft.fftn instead: {', '.join(sorted(plain.kinds))}"
    )
    c.items.append(ours)


SCENARIOS = (inside_jit,)
"""This module's scenarios, in tour order."""
