"""Visualization of sharded arrays: terminal (plain and rich), SVG and HTML.

``show(x)`` returns a :class:`ShardingView` that renders only when asked.
"""

from shardkit.show._view import ShardingView, show

__all__ = ["ShardingView", "show"]
