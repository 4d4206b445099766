"""Checks that run before long work starts: output paths and optional extras.

A benchmark or a training run that fails on its last line, because the folder of
its plot does not exist or matplotlib is missing, wastes the whole run. The entry
points (``run_training``, ``run_bench``, the CLI) call these first.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

__all__ = ["check_output_dir", "check_output_file", "require"]


def _nearest_existing(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path(".")


def check_output_file(path: str | Path, /, *, what: str) -> Path:
    """``path`` as a Path, after checking that a file can be written there.

    Args:
      path: the file to be written (an existing file is overwritten).
      what: the argument's name as the user wrote it, e.g. ``"shardkit train --plot"``.

    Raises:
      ValueError: ``path`` is a directory, or its folder does not exist or is not
        writable; the message names ``what`` and the fix.
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{what} {str(p)!r} is a directory; give a file name inside it")
    folder = p.parent
    if not folder.is_dir():
        raise ValueError(
            f"{what} {str(p)!r}: the folder {str(folder)!r} does not exist; "
            f"create it first (mkdir -p {folder}) or choose another path"
        )
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{what} {str(p)!r}: the folder {str(folder)!r} is not writable")
    return p


def check_output_dir(path: str | Path, /, *, what: str) -> Path:
    """``path`` as a Path, after checking that it is, or can be created as, a folder.

    Missing folders (parents included) are fine: the writer creates them.

    Raises:
      ValueError: ``path`` or one of its parents is an existing file, or the nearest
        existing parent is not writable; the message names ``what`` and the fix.
    """
    p = Path(path)
    existing = _nearest_existing(p)
    if not existing.is_dir():
        raise ValueError(
            f"{what} {str(p)!r}: {str(existing)!r} is an existing file, not a folder; "
            "give a folder path (it is created if missing)"
        )
    if not os.access(existing, os.W_OK):
        raise ValueError(f"{what} {str(p)!r}: the folder {str(existing)!r} is not writable")
    return p


def require(module: str, /, *, extra: str, what: str) -> ModuleType:
    """Import an optional dependency, or say which extra installs it.

    Args:
      module: the module to import, e.g. ``"matplotlib"``.
      extra: the shardkit extra that provides it, e.g. ``"bench"``.
      what: the feature that needs it, e.g. ``"shardkit train --plot"``.

    Raises:
      ImportError: ``module`` is not installed; the message gives the install command.

    Example:
      >>> require("json", extra="test", what="reading results").__name__
      'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{what} needs {module}, which is not installed: pip install 'shardkit[{extra}]'"
        ) from e
