"""Distributed N-D FFTs that never all-gather: slab and pencil decompositions.

``shardkit.fft.fftn`` and friends take ``jnp.fft``'s arguments and compute the
transform shard by shard: local FFTs along unsplit axes and ``all_to_all`` moves of
the split ones (one for a slab, two for a pencil). They work eagerly, inside ``jit``
(Explicit axes through ``shard_map``, Auto axes through a ``custom_partitioning``
rule) and under every transformation (``grad`` of any order, ``vmap``,
``jacfwd``/``jacrev``, ``linear_transpose``). Only the input's own split has to divide
its lengths: moves pad what the mesh does not divide and trim it afterwards (see
:func:`fftn`). ``out_layout="transposed"`` returns jaxDecomp's axis order
(``fftn(x).transpose(1, 2, 0)`` in 3-D) one local transpose cheaper, and the inverse
transforms take it back with ``in_layout="transposed"``. :func:`plan` exposes the per-shard form for use
inside your own ``shard_map``. For hand-written spectral and stencil codes:
:func:`halo_exchange` (neighbours' cells, ``ppermute`` only) and the pencil
transposes :func:`x_to_y`, :func:`y_to_z`, :func:`z_to_y`, :func:`y_to_x` and
:func:`transpose_split` (one ``all_to_all`` each).
"""

from shardkit.fft._api import fftfreq, plan, rfftfreq
from shardkit.fft._halo import halo_exchange
from shardkit.fft._pencils import transpose_split, x_to_y, y_to_x, y_to_z, z_to_y
from shardkit.fft._plan import FFTPlan
from shardkit.fft._steps import Step
from shardkit.fft._transforms import (
    fft,
    fft2,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifft2,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfft2,
    irfftn,
    rfft,
    rfft2,
    rfftn,
)

__all__ = [
    "FFTPlan",
    "Step",
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "halo_exchange",
    "hfft",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfft2",
    "irfftn",
    "plan",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
    "transpose_split",
    "x_to_y",
    "y_to_x",
    "y_to_z",
    "z_to_y",
]
