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
``jit`` on Auto axes the split is decided after tracing, by XLA's partitioner; the
mesh (of ``jax.set_mesh``, or of the operand's type) is known while tracing, and
with it every split the input can have. shardkit checks its route against all of
them and takes the first of:

1. *A sharding rule that keeps every split.* shardkit's ``custom_partitioning`` op
   tells the partitioner where the output goes through a Shardy rule: each input
   dimension's mesh axes land on one output dimension (the default layout's cycle,
   or the input's own dimension, whichever gives more splits over the whole mesh
   the Explicit layout), and the partition runs the plan to exactly that layout
   with ``all_to_all`` only. Slabs and pencils, and ``s=`` that the devices
   divide, get the Explicit layout and ``all_to_all`` count. A split that Explicit
   axes refuse is first moved (``all_to_all``) to one over the same mesh axes
   that reaches the rule's layout.
2. *One input layout for every split.* No fixed rule keeps a split that a length
   change to one the devices do not divide (``s=``/``n=``) or a halved R2C axis
   leaves nowhere: Explicit axes move it to a dimension chosen by the split
   itself. There the Explicit plan of one split over every mesh axis of size > 1
   runs in a ``shard_map``; the partitioner moves any input to that split first
   (``all_to_all``, or slicing from a replicated input), and the output has that
   plan's layout whatever the input's split: ``fft(x, n=20,
   axis=0)`` of a 16x16 array over 8 devices returns ``P(None, 'x')`` for
   ``P('x', None)`` (as on Explicit axes) and for ``P(None, 'x')``, and also for
   a replicated input (which Explicit axes return replicated). XLA moves one
   mesh axis at a time: from a split that groups the mesh axes on dimensions
   otherwise (``P(('x', 'y'), None, None)`` where the plan's split is ``P(None,
   'x', 'y')``) it gathers first. The split chosen is the one the most splits
   reach without a gather, then the one whose output layout the Explicit plans
   of most splits share. With ``out_layout="natural"`` the output then has that
   split's layout, not the input's.
3. *The known limit.* Where no split over every mesh axis has a plan (a split 1-D
   signal that the four-step FFT cannot take, such as 16 points over 8 devices; a
   halved R2C axis that no mesh axis divides and no other axis relieves), the rule
   of 1 runs and a split input is gathered and transformed whole: correct, not
   distributed. The partitioner cannot raise (an exception there reaches the user
   as XLA's ``INTERNAL`` error); eager calls and Explicit axes raise shardkit's
   error, and :func:`plan` tells beforehand.

``tests/fft/test_fft_auto_property.py`` checks all three on random problems (values,
output layout, no all-gather outside the two limits).

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
