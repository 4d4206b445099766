"""The layout helpers shardkit's own packages share (not part of the public API).

fft, linalg, plan, random and train ask these, and never re-derive them: where an
operand lives (:func:`placement`), the one normalized spec (:data:`NormSpec`), the
spec parser under a name that leaves ``spec`` free for parameters
(:func:`parse_spec`), the traced-value test (:func:`is_traced`), the placement checks
and the error builders. Like ``equinox.internal``, it may change without notice.
"""

from shardkit.layout._checks import check_placement, check_spec_axes, entry_axes
from shardkit.layout._errors import indivisible_error, mesh_summary, spec_summary
from shardkit.layout._marks import PaddingMark, find_padding, padding_scope
from shardkit.layout._resolve import (
    AnyMesh,
    How,
    NormSpec,
    Placement,
    canonical,
    drop_unit_axes,
    is_traced,
    normalize,
    parse_spec,
    placement,
    to_pspec,
)

__all__ = [
    "AnyMesh",
    "How",
    "NormSpec",
    "PaddingMark",
    "Placement",
    "canonical",
    "check_placement",
    "check_spec_axes",
    "drop_unit_axes",
    "entry_axes",
    "find_padding",
    "indivisible_error",
    "is_traced",
    "mesh_summary",
    "normalize",
    "padding_scope",
    "parse_spec",
    "placement",
    "spec_summary",
    "to_pspec",
]
