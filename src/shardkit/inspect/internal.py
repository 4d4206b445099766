"""The parts of ``shardkit.inspect`` other shardkit packages share (not public API).

The matmul engine prices its candidates with the same per-device traffic figures the
reports use (:func:`traffic`, :func:`message_bytes`), and ``shardkit bench calibrate``
saves its fitted model where :func:`~shardkit.inspect.interconnect` finds it
(:func:`preset_path`, :func:`save_preset`). Like ``equinox.internal``, it may change
without notice.
"""

from shardkit.inspect._presets import builtin_preset, preset_path, save_preset
from shardkit.inspect._program import KINDS
from shardkit.inspect._traffic import message_bytes, traffic

__all__ = ["KINDS", "builtin_preset", "message_bytes", "preset_path", "save_preset", "traffic"]
