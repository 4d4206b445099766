"""Distributed N-D FFTs that never all-gather: slab and pencil decompositions.

``shardkit.fft.fftn`` and friends take ``jnp.fft``'s arguments and compute the
transform shard by shard: local FFTs along unsplit axes and ``all_to_all`` moves of
the split ones (one for a slab, two for a pencil). They work eagerly, inside ``jit``
(Explicit axes through ``shard_map``, Auto axes through a ``custom_partitioning``
rule) and under every transformation (``grad`` of any order, ``vmap``,
``jacfwd``/``jacrev``, ``linear_transpose``). :func:`plan` exposes the per-shard
form for use inside your own ``shard_map``. For hand-written spectral and stencil
codes: :func:`halo_exchange` (neighbours' cells, ``ppermute`` only) and the pencil
transposes :func:`x_to_y`, :func:`y_to_z`, :func:`z_to_y`, :func:`y_to_x` and
:func:`transpose_split` (one ``all_to_all`` each).

**The layout contract.** This section is the one statement of where a transform's
output lives; the functions' docstrings point here. :func:`plan` answers it for a
given shape, spec and mesh without running anything (``plan(...).out_spec``).

* *Input.* Only the input's own split has to divide its lengths (as for any JAX
  array). Lengths the mesh does not divide later (``s=``/``n=``, a halved R2C axis)
  are zero-padded inside the moves and trimmed before they are transformed; a move
  over ``g`` devices sends ``(g - 1) / g`` of its padded block
  (:meth:`FFTPlan.sent_bytes`, :meth:`FFTPlan.padding_bytes`).
* ``out_layout="default"``: each split transformed axis hands its mesh axes to the
  next transformed axis in sorted order, cyclically (the previous one for the
  inverse transforms), one ``all_to_all`` per split axis: a slab ``P('x', None,
  None)`` comes out ``P(None, 'x', None)``, a pencil ``P('x', 'y', None)``
  ``P(None, 'x', 'y')``, and ``ifftn`` shifts back. A split passes over an unsplit
  axis that it does not divide to a later one that it does (``fftn`` of a 64x60x32
  slab on 8 devices returns ``P(None, None, 'x')``). Where no transformed axis can
  take a split (every transformed axis split, or a split 1-D transform along one
  axis of a larger array) it borrows an unsplit untransformed axis, or stacks onto
  another transformed axis, and moves back. R2C (:func:`rfftn`) transforms the last
  of ``axes`` first; its halved length ``n//2+1`` takes a split only where the mesh
  divides it (a split R2C axis first hands its split to the next transformed axis
  or to a free untransformed one); C2R mirrors this.
* *Never an uneven output.* JAX has no uneven ``NamedSharding``, so where that
  layout would split an axis its mesh axes do not divide (a length changed by
  ``s=``/``n=``, a halved R2C axis), the plan walks back towards the input's layout
  and returns the first layout on the way that divides (``fftn`` of a 64x60x36 slab
  returns ``P('x', None, None)`` after two ``all_to_all``; ``fft(x, n=20,
  axis=0)`` of a 16x16 ``P('x', None)`` on 8 devices returns ``P(None, 'x')``),
  else the nearest layout that divides (fewest moves). It raises ``ValueError``
  only where no placement of the input's mesh axes divides the output.
* ``out_layout="natural"``: the input's layout (the reverse moves appended, twice
  the ``all_to_all`` of a default plan); ``ValueError`` where it does not divide
  the output (a length changed by ``s=`` on a split axis), naming the axis.
* ``out_layout="transposed"``: the default layout's splits, with the transformed
  axes rolled by one, the order the last local FFT leaves them in (one local
  transpose fewer): with ``t = sorted(axes)``, output axis ``t[i]`` holds the
  transform's axis ``t[i + 1]`` (cyclically), so a 3-D ``fftn`` returns
  ``np.fft.fftn(x).transpose(1, 2, 0)``, jaxDecomp's order. The inverse transforms
  take it back with ``in_layout="transposed"`` (``axes`` and ``s`` still name the
  logical axes).
* *Round trips.* ``ifftn(fftn(x))`` has ``x``'s layout whenever ``fftn`` padded
  nothing (the inverse retraces the moves); otherwise pass
  ``out_layout="natural"`` to both to pin the layout (e.g. a loop carry).
* *One split axis, nothing to move it to* (a 1-D signal over all devices): the
  four-step FFT (three ``all_to_all``, ``x``'s layout), which needs the square of
  the device count to divide the length; :func:`irfft` likewise to ``n = 2 M``.
  Otherwise ``NotImplementedError`` (as for a split R2C axis no axis can relieve).

**Where the contract holds.** Eagerly (a concrete sharded array) and inside ``jit``
on Explicit mesh axes, every call runs exactly the plan for its input's spec. Inside
``jit`` on Auto axes the split is decided after tracing, by XLA's partitioner, and
shardkit's ``custom_partitioning`` op tells it where the output goes through a
Shardy sharding rule fixed while tracing (from the mesh of ``jax.set_mesh``, or of
the operand's type): each input dimension's mesh axes land on one output dimension,
the default layout's cycle where the device count divides every length in it (and
some axis is always free to receive), else the input's dimension, a dimension
whose length changes keeping its split only where every split the mesh can make
of it divides the common factor of both lengths. The partition then runs the plan to exactly that layout with
``all_to_all`` only. So Auto axes give the Explicit layout and ``all_to_all``
count whenever the rule places the actual split where Explicit axes do (the slabs
and pencils above, ``s=`` that the devices divide). The known limits, both
checked by ``tests/fft/test_fft_auto_property.py``:

* a split the rule cannot carry: a transformed axis whose length changes to one
  the devices do not divide (``fft(x, n=20, axis=0)`` of ``P('x', None)`` over 8),
  or a split R2C axis whose ``n//2+1`` they do not divide (``rfft2`` of
  ``(8, 16, 16)`` on ``P(None, None, 'x')``). Explicit axes move such a split to
  another dimension, chosen by the split itself; one fixed rule cannot move the
  transformed axis's split there and keep that dimension's own, so the output is
  replicated along the dropped mesh axes (one all-gather). Where the rule keeps
  every mesh axis but places one elsewhere, the output comes in the rule's layout,
  still by ``all_to_all`` only;
* a split for which Explicit axes raise (the four-step FFT's length rule, a split
  R2C axis with no free axis, ``out_layout="natural"`` where the input's layout
  does not divide the output): the partitioner cannot raise (an exception there
  reaches the user as XLA's ``INTERNAL`` error), so it gathers and transforms
  whole: correct, not distributed. Eager calls and Explicit axes raise
  shardkit's error; ask :func:`plan` beforehand.

To keep an exact layout under ``jit``, use Explicit mesh axes
(``shardkit.mesh(..., axis_types="explicit")``, JAX's default for
``jax.make_mesh``), and check the program with ``shardkit.comms``.
"""

from shardkit.fft._api import fftfreq, plan, rfftfreq
from shardkit.fft._halo import halo_exchange
from shardkit.fft._pencils import transpose_split, x_to_y, y_to_x, y_to_z, z_to_y
from shardkit.fft._plan import FFTPlan
from shardkit.fft._steps import Step
from shardkit.fft._transforms import (
    fft,
    fft2,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifft2,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfft2,
    irfftn,
    rfft,
    rfft2,
    rfftn,
)

__all__ = [
    "FFTPlan",
    "Step",
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "halo_exchange",
    "hfft",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfft2",
    "irfftn",
    "plan",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
    "transpose_split",
    "x_to_y",
    "y_to_x",
    "y_to_z",
    "z_to_y",
]
