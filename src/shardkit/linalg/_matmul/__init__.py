"""The matmul engine: the algorithms, their cost model and ``matmul`` itself (private).

Its export list is the interface of the two packages that use it: ``shardkit.linalg``
re-exports :func:`matmul`, ``Algorithm``, ``ALGORITHM_NAMES``, :class:`Candidate` and
:class:`Explanation`; ``shardkit.plan`` prices and runs candidate layouts of a chain
through the rest, which ``shardkit.linalg.internal`` declares for it (the algorithm
table and problem, the variant enumeration and pricing, the communication model and
the ``shard_map`` builder).

Modules: ``_model`` (specs, communication steps and their prices), ``_algos`` (each
algorithm's layout rule and per-shard body), ``_cost`` (enumerating and pricing the
variants, ``explain`` tables) and ``_api`` (``matmul``).
"""

from shardkit.linalg._matmul._algos import ALGORITHMS, MatmulProblem
from shardkit.linalg._matmul._api import ALGORITHM_NAMES, Algorithm, build, matmul
from shardkit.linalg._matmul._cost import Candidate, Explanation, enumerate_variants, price
from shardkit.linalg._matmul._model import Comm, Spec, spec_text

__all__ = [
    "ALGORITHMS",
    "ALGORITHM_NAMES",
    "Algorithm",
    "Candidate",
    "Comm",
    "Explanation",
    "MatmulProblem",
    "Spec",
    "build",
    "enumerate_variants",
    "matmul",
    "price",
    "spec_text",
]
