"""What ``shardkit train`` (the command) needs from the train package beyond its API.

Not part of the public API; like ``equinox.internal``, it may change without notice.
"""

from shardkit.train._output import progress_console

__all__ = ["progress_console"]
