"""The layout helpers shardkit's own packages share (not part of the public API).

fft, linalg, plan, random and train ask these, and never re-derive them: where an
operand lives (:func:`operand`, resolved once per public call), the one normalized spec (:data:`NormSpec`), the
spec parser under a name that leaves ``spec`` free for parameters
(:func:`parse_spec`), the traced-value test (:func:`is_traced`), the placement checks,
the argument checks at the public boundary (:mod:`shardkit.layout._validate`: counts,
tolerances, PRNG keys, operands on one set of devices), the error builders and the
axis-type alias the command line accepts (:data:`AxisTypeLike`). Like
``equinox.internal``, it may change without notice.
"""

from shardkit.layout._checks import check_placement, check_spec_axes, entry_axes
from shardkit.layout._errors import indivisible_error, mesh_summary, spec_summary
from shardkit.layout._marks import PaddingMark, find_padding, padding_scope
from shardkit.layout._mesh import AxisTypeLike
from shardkit.layout._resolve import (
    AnyMesh,
    How,
    NormSpec,
    Operand,
    canonical,
    drop_unit_axes,
    every_split,
    is_traced,
    normalize,
    operand,
    parse_spec,
    to_pspec,
)
from shardkit.layout._spec import SpecLike
from shardkit.layout._validate import (
    as_count,
    as_real,
    check_key,
    check_mesh_arg,
    check_same_devices,
    is_int,
)

__all__ = [
    "AnyMesh",
    "AxisTypeLike",
    "How",
    "NormSpec",
    "Operand",
    "PaddingMark",
    "SpecLike",
    "as_count",
    "as_real",
    "canonical",
    "check_key",
    "check_mesh_arg",
    "check_placement",
    "check_same_devices",
    "check_spec_axes",
    "drop_unit_axes",
    "entry_axes",
    "every_split",
    "find_padding",
    "indivisible_error",
    "is_int",
    "is_traced",
    "mesh_summary",
    "normalize",
    "operand",
    "padding_scope",
    "parse_spec",
    "spec_summary",
    "to_pspec",
]
