"""Calibrated cost-model presets: one JSON file per device kind and count.

``shardkit bench calibrate`` measures the collectives and a matmul on the current
devices, fits an :class:`~shardkit.inspect.Interconnect` and saves it here, in
:func:`shardkit._config.config_dir`, as ``<device kind>-x<count>.json``. The cost model's
default (``interconnect=None`` in :func:`~shardkit.inspect.comms`, ``shardkit inspect``
and :func:`~shardkit.linalg.matmul`) is that file when it exists for this process's
devices, else the built-in preset of their platform (:func:`builtin_preset`: ``"cpu"``
on CPU devices, measured on simulated ones, else ``"shared-memory"``). A preset named
explicitly always wins.

The file (``version`` 1)::

    {"version": 1, "device_kind": "cpu", "platform": "cpu", "device_count": 8,
     "created": "2026-...Z", "interconnect": {... Interconnect fields, fits ...},
     "measurements": [{"kind": ..., "group_size": ..., "nbytes": ..., "seconds": ...}]}
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from shardkit._config import config_dir
from shardkit.inspect._interconnect import INTERCONNECTS, Interconnect

__all__ = [
    "CPU_PRESET",
    "DEFAULT_PRESET",
    "PRESET_VERSION",
    "PresetError",
    "builtin_preset",
    "default_interconnect",
    "interconnect",
    "load_preset",
    "preset_path",
    "save_preset",
]

PRESET_VERSION = 1
DEFAULT_PRESET = "shared-memory"
CPU_PRESET = "cpu"
_CACHE: dict[Path, tuple[int, Interconnect]] = {}


class PresetError(ValueError):
    """A preset file that cannot be read: the message names the file and the fix."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def preset_path(devices: Sequence[Any] | None = None, /) -> Path:
    """Where the calibrated preset for ``devices`` (default: ``jax.devices()``) lives.

    The name is the first device's ``device_kind`` (lowercased, runs of other
    characters turned into ``-``) and the device count, e.g. ``cpu-x8.json`` or
    ``nvidia-h100-80gb-hbm3-x8.json``.
    """
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("preset_path: devices=[] is empty; pass at least one device")
    return config_dir() / "presets" / f"{_slug(devs[0].device_kind)}-x{len(devs)}.json"


def save_preset(
    link: Interconnect,
    /,
    *,
    path: str | os.PathLike[str] | None = None,
    measurements: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Write ``link`` as the calibrated preset of this process's devices (or to ``path``).

    The directory is created if missing; the file is written whole, then renamed
    over any previous one, so a reader never sees half a file.

    Returns:
      The file written.
    """
    target = preset_path() if path is None else Path(path)
    devs = jax.devices()
    doc = {
        "version": PRESET_VERSION,
        "device_kind": devs[0].device_kind,
        "platform": devs[0].platform,
        "device_count": len(devs),
        "created": link.calibrated,
        "interconnect": dataclasses.asdict(link),
        "measurements": [dict(m) for m in measurements],
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(target)
    _CACHE.pop(target, None)
    return target


def _corrupt(path: Path, why: str) -> PresetError:
    return PresetError(
        f"cost-model preset {path} is unreadable ({why}); rerun `shardkit bench calibrate` "
        "to measure it again, or delete the file to use the built-in "
        f"{builtin_preset()!r} preset"
    )


def load_preset(path: str | os.PathLike[str], /) -> Interconnect:
    """The ``Interconnect`` saved in a preset file.

    Raises:
      FileNotFoundError: no file at ``path``.
      PresetError: the file is not JSON, has another ``version`` or lacks a field (the
        message names the file and says to recalibrate or delete it).
    """
    p = Path(path)
    text = p.read_text()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _corrupt(p, f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != PRESET_VERSION:
        version = doc.get("version") if isinstance(doc, dict) else None
        raise _corrupt(p, f"version={version!r}, this shardkit reads version {PRESET_VERSION}")
    fields = doc.get("interconnect")
    if not isinstance(fields, dict):
        raise _corrupt(p, "no 'interconnect' object")
    try:
        return Interconnect(**fields)
    except (TypeError, ValueError) as e:
        raise _corrupt(p, str(e)) from None


def builtin_preset() -> str:
    """The built-in preset that stands in for a calibration: ``"cpu"`` on CPU devices.

    On CPU devices a collective along an inner dimension and a large product's output
    cost several times what bytes over a bandwidth predict; the ``"cpu"`` preset,
    measured on simulated CPU devices, carries those costs, so ``matmul``'s ``auto``
    ranks its algorithms right without ``shardkit bench calibrate``. Other platforms
    get ``"shared-memory"`` (calibrate them for figures of their own).
    """
    return CPU_PRESET if jax.devices()[0].platform == "cpu" else DEFAULT_PRESET


def default_interconnect() -> Interconnect:
    """The calibrated preset of this process's devices if one is saved, else the built-in
    preset of their platform (:func:`builtin_preset`).

    Raises:
      PresetError: the saved preset is corrupt (never silently replaced by the default).
    """
    path = preset_path()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return INTERCONNECTS[builtin_preset()]
    cached = _CACHE.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    link = load_preset(path)
    _CACHE[path] = (mtime, link)
    return link


def interconnect(value: str | Interconnect | None, /) -> Interconnect:
    """An ``Interconnect`` from a preset name; ``Interconnect`` objects pass through.

    ``None`` is the default model: the preset ``shardkit bench calibrate`` saved for
    this process's devices if there is one, else the built-in preset of their
    platform (``"cpu"`` on CPU devices, else ``"shared-memory"``).

    Raises:
      ValueError: an unknown preset name (the message lists the presets), or a
        corrupt calibrated preset file (the message names it).
      TypeError: ``value`` is neither a string nor an ``Interconnect``.

    Example:
      >>> interconnect("nvlink").bandwidth
      450000000000.0
    """
    if value is None:
        return default_interconnect()
    if isinstance(value, Interconnect):
        return value
    if isinstance(value, str):
        if value in INTERCONNECTS:
            return INTERCONNECTS[value]
        raise ValueError(
            f"interconnect={value!r} is not a preset; legal values are "
            f"{sorted(INTERCONNECTS)}, or pass an Interconnect(...)"
        )
    raise TypeError(
        f"interconnect={value!r} ({type(value).__name__}) must be a preset name or an Interconnect"
    )
