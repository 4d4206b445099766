"""The one private JAX hook the FFT primitive needs, kept in one place.

``custom_partitioning`` needs the physical devices while it is lowered. JAX only
passes them to the lowering of a ``jit`` whose jaxpr contains a primitive listed in
``jax._src.dispatch.prim_requires_devices_during_lowering`` (``custom_partitioning``
itself is listed). The FFT primitive lowers *to* ``custom_partitioning``, so it must
be listed too; JAX has no public way to say so. ``tests/fft/test_fft_transformations.py``
checks the registry still exists.
"""

from __future__ import annotations

from typing import Any

__all__ = ["require_devices_during_lowering"]


def require_devices_during_lowering(primitive: Any) -> None:
    """Make ``jit`` hand the device assignment to ``primitive``'s lowering."""
    from jax._src import dispatch  # private: see the module docstring

    dispatch.prim_requires_devices_during_lowering.add(primitive)
