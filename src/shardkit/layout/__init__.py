"""The vocabulary: meshes, specs, shardings, placement and descriptions."""

from shardkit.layout.describe import describe, format_bytes
from shardkit.layout.mesh import mesh, parse_mesh_shape
from shardkit.layout.place import shard
from shardkit.layout.spec import sharding, spec

__all__ = ["describe", "format_bytes", "mesh", "parse_mesh_shape", "shard", "sharding", "spec"]
