"""The vocabulary: meshes, specs, shardings, placement and descriptions."""

from shardkit.layout._describe import describe, format_bytes
from shardkit.layout._mesh import mesh, parse_mesh_shape
from shardkit.layout._place import shard
from shardkit.layout._spec import sharding, spec

__all__ = ["describe", "format_bytes", "mesh", "parse_mesh_shape", "shard", "sharding", "spec"]
