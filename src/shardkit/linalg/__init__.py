"""Sharded linear algebra: matrix products by named algorithms or by cost model."""

from shardkit.linalg.matmul import ALGORITHM_NAMES, Algorithm, Candidate, Explanation, matmul

__all__ = ["ALGORITHM_NAMES", "Algorithm", "Candidate", "Explanation", "matmul"]
