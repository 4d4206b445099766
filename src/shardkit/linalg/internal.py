"""The parts of ``shardkit.linalg`` other shardkit packages share (not public API).

``shardkit.plan`` searches the layouts of a matmul chain with the matmul engine's own
pieces, so that a plan's predictions are the prices ``matmul(algorithm="auto")`` would
quote: the algorithm table (:data:`ALGORITHMS`) and :class:`Problem`, the variant
enumeration and pricing (:func:`enumerate_variants`, :func:`price`), the communication
model (:class:`Comm`, ``Spec``, :func:`spec_text`) and the ``shard_map`` builder
(:func:`build`). Like ``equinox.internal``, it may change without notice.
"""

from shardkit.linalg._matmul import (
    ALGORITHMS,
    Comm,
    Problem,
    Spec,
    build,
    enumerate_variants,
    price,
    spec_text,
)

__all__ = [
    "ALGORITHMS",
    "Comm",
    "Problem",
    "Spec",
    "build",
    "enumerate_variants",
    "price",
    "spec_text",
]
