"""The one way an old spelling keeps working for a release: a ``DeprecationWarning``.

Issue 30 gave the public API one placement vocabulary (an operand's own sharding
first, else ``mesh=`` and ``spec=`` keywords; outputs ``out_spec=``, or
``out_sharding=`` where JAX says so). Every function whose old spelling differs calls
:func:`renamed` (or :func:`pick`) here, so the message names the new spelling the
same way everywhere and the old spellings can be found and removed in one release.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

__all__ = ["UNSET", "Unset", "moved", "pick", "renamed"]

T = TypeVar("T")


class Unset:
    """The type of :data:`UNSET`: an argument the caller did not pass."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = Unset()


def renamed(where: str, old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warns that ``where`` was called with ``old``, which will go; ``new`` replaces it.

    ``stacklevel`` counts from this function: 3 points at the public function's caller
    when the public function calls this directly.
    """
    warnings.warn(
        f"{where}: {old} is deprecated and will be removed in the next release; "
        f"write {new} instead",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def moved(
    where: str, *, old: str, new: str, old_given: bool, new_given: bool, stacklevel: int = 4
) -> bool:
    """Whether the caller used the old spelling (then warned); raises if it used both.

    For arguments that moved together (``f(x, mesh, spec)`` to ``f(x, mesh=, spec=)``):
    the caller takes the old values where this returns True.

    Raises:
      TypeError: both spellings were given.
    """
    if old_given and new_given:
        raise TypeError(f"{where}: got both {old} (deprecated) and {new}; pass only {new}")
    if old_given:
        renamed(where, old, new, stacklevel=stacklevel)
    return old_given


def pick(
    where: str,
    *,
    old: str,
    old_value: T | Unset,
    new: str,
    new_value: T,
    stacklevel: int = 4,
) -> T:
    """The value of the new spelling, or of the old one (with a warning) where only it is given.

    Raises:
      TypeError: both spellings were given.
    """
    if isinstance(old_value, Unset):
        return new_value
    if not isinstance(new_value, Unset) and new_value is not None:
        raise TypeError(f"{where}: got both {old} (deprecated) and {new}; pass only {new}")
    renamed(where, old, new, stacklevel=stacklevel)
    return old_value
