"""Sharding planners driven by ``shardkit.inspect``'s cost model (matmul chains first)."""

from shardkit.plan._chain import ChainPlan, ChainStep, candidate_specs, matmul_chain

__all__ = ["ChainPlan", "ChainStep", "candidate_specs", "matmul_chain"]
