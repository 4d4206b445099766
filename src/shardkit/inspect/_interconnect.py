"""An alpha-beta cost model of collectives, with presets for common interconnects.

A collective over ``p`` devices on ``n`` bytes costs ``steps * alpha + volume / beta``
where ``alpha`` is the per-message latency, ``beta`` the per-device, per-direction
link bandwidth, and ``steps`` and ``volume`` depend on the algorithm:

=====================  ============================  ===============================
collective             ring                          tree (logarithmic)
=====================  ============================  ===============================
all-reduce             2(p-1) a + 2(p-1)/p n/b       2 lg p a + 2(p-1)/p n/b
all-gather             (p-1) a + (p-1)/p n/b         lg p a + (p-1)/p n/b
reduce-scatter         (p-1) a + (p-1)/p n/b         lg p a + (p-1)/p n/b
all-to-all             (p-1) a + (p-1)/p n/b         lg p a + (lg p / 2) n/b
collective-permute     a + n/b                       a + n/b
collective-broadcast   (p-1) a + n/b                 lg p (a + n/b)
=====================  ============================  ===============================

``n`` is the full buffer: the gathered result of an all-gather, the operand of the
others. The ring column is NCCL's (the ``busbw`` factors in nccl-tests'
``doc/PERFORMANCE.md``); the tree column is recursive doubling/halving, Rabenseifner's
all-reduce, Bruck's all-to-all and the binomial-tree broadcast, as analysed in
R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 19(1), 2005. The model ignores contention, topology and
overlap with compute: it ranks programs, it does not time them.

A *calibrated* interconnect (``shardkit bench calibrate``, saved as a preset by
:func:`~shardkit.inspect.interconnect`) also carries the measured times of each collective
kind and group size (:class:`CollectiveFit`: a table of sizes and times, with its
least-squares ``t = alpha + n / beta``), which replace the formulas above where they
apply; for all-gathers and reduce-scatters, separately along an array's leading
dimension (contiguous pieces) and along an inner one (strided pieces, which a device
must pack and unpack: several times slower on CPU devices). It carries a measured
``peak_flops``; ``product_write``, what writing a large local product costs beyond its
flops (fresh memory, on CPU devices); and ``panel_step_s``: what one step of a local
product computed panel by panel in a loop (as ring matmuls compute theirs) costs over
computing it whole, since on devices that do not overlap communication with compute
the stepping is not free.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["INTERCONNECTS", "CollectiveAlgorithm", "CollectiveFit", "Interconnect"]

CollectiveAlgorithm = Literal["ring", "tree"]
_ALGORITHMS = ("ring", "tree")
_KINDS = (
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
)


@dataclass(frozen=True)
class CollectiveFit:
    """Measured times of one collective kind on one group size.

    ``nbytes`` is what :meth:`Interconnect.time` takes (the full buffer: the gathered
    result of an all-gather, the operand of the others), so ``bandwidth`` is an
    *algorithm* bandwidth of that collective on that group size, not a link figure.

    Without ``sizes``, the time is ``latency_s + nbytes / bandwidth``. With them (a
    calibrated table), it follows the measured ``seconds``: interpolated between
    neighbouring sizes on log-log axes (a power law per range of sizes), the smallest
    size's time below it, and beyond the largest in proportion to the size (the
    largest size's bandwidth). On CPU devices the cost per byte grows several times
    past the caches, which one ``alpha + n / beta`` line cannot follow; past the
    largest measured size (64 MiB by default) memory bandwidth bounds it, and carrying
    the last range's steeper growth on would overprice large buffers many times.

    Attributes:
      kind: the HLO collective kind, e.g. ``"all-gather"``.
      group_size: devices per group.
      latency_s: ``alpha`` of the least-squares line, seconds at zero bytes (for a
        one-collective program this includes launching it).
      bandwidth: ``beta`` of that line, bytes of ``nbytes`` per second.
      sizes: measured ``nbytes``, increasing (empty: the line alone).
      seconds: the measured times at ``sizes`` (made non-decreasing).
      leading: measured along the array's leading dimension (True; every kind but
        all-gather and reduce-scatter is only measured so) or along an inner one of a
        square matrix (False), whose pieces are strided.

    Example:
      >>> CollectiveFit("all-reduce", 4, 1e-5, 1e9).time(1e6)
      0.00101
      >>> table = CollectiveFit("all-reduce", 4, 1e-5, 1e9, (1e3, 1e6), (1e-5, 1e-3))
      >>> round(table.time(1e6) * 1e3, 6), round(table.time(4e6) * 1e3, 6)
      (1.0, 4.0)
    """

    kind: str
    group_size: int
    latency_s: float
    bandwidth: float
    sizes: tuple[float, ...] = ()
    seconds: tuple[float, ...] = ()
    leading: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(float(n) for n in self.sizes))
        object.__setattr__(self, "seconds", tuple(float(t) for t in self.seconds))
        if self.kind not in _KINDS:
            raise ValueError(f"CollectiveFit: kind={self.kind!r}; legal values are {_KINDS}")
        if self.group_size < 1 or not self.latency_s >= 0 or not self.bandwidth > 0:
            raise ValueError(
                f"CollectiveFit: group_size={self.group_size!r}, latency_s={self.latency_s!r}, "
                f"bandwidth={self.bandwidth!r} need group_size >= 1, latency_s >= 0 and "
                "bandwidth > 0"
            )
        n, t = self.sizes, self.seconds
        if (
            len(n) != len(t)
            or len(n) == 1
            or any(b <= a for a, b in itertools.pairwise(n))
            or any(b < a for a, b in itertools.pairwise(t))
            or any(not v > 0 for v in (*n, *t))
        ):
            raise ValueError(
                f"CollectiveFit: sizes={n!r}, seconds={t!r} need as many positive times as "
                "sizes (none, or two or more), sizes increasing, times non-decreasing"
            )

    def time(self, nbytes: float) -> float:
        """Predicted seconds for ``nbytes``."""
        n, t = self.sizes, self.seconds
        if not n:
            return self.latency_s + nbytes / self.bandwidth
        if nbytes <= n[0]:
            return t[0]
        if nbytes > n[-1]:
            return t[-1] * nbytes / n[-1]
        i = next(j for j in range(1, len(n)) if nbytes <= n[j])
        slope = math.log(t[i] / t[i - 1]) / math.log(n[i] / n[i - 1])
        return t[i - 1] * (nbytes / n[i - 1]) ** slope


def _as_fit(value: CollectiveFit | dict | list | tuple) -> CollectiveFit:
    if isinstance(value, CollectiveFit):
        return value
    if isinstance(value, dict):
        return CollectiveFit(**value)
    return CollectiveFit(*value)


@dataclass(frozen=True)
class Interconnect:
    """How fast devices talk (alpha-beta) and compute, for predicted times.

    Attributes:
      name: short name, e.g. ``"nvlink"``.
      latency_s: ``alpha``, seconds per message step.
      bandwidth: ``beta``, bytes per second per device in each direction.
      algorithm: ``"ring"`` or ``"tree"`` (logarithmic) collective algorithms.
      peak_flops: peak floating-point operations per second of one device joined by
        this link, for the compute-time estimate.
      description: what the figures describe and where they come from.
      fits: measured per-(kind, group size) fits that override the formulas (a
        calibrated preset); empty for the built-in presets.
      panel_step_s: seconds each loop step of a local product computed panel by panel
        (a ring matmul's, accumulated in place) adds over computing the product
        whole; 0 for the built-in presets, measured by ``shardkit bench calibrate``.
      panel_step_bytes: the output bytes one panel step wrote where ``panel_step_s``
        was measured: a step writing ``b`` bytes costs ``panel_step_s * b /
        panel_step_bytes`` (:meth:`step_time`); 0 (presets saved before it) prices
        every step at ``panel_step_s``.
      product_write: ``(output bytes, seconds)`` pairs, increasing: what a local
        product writing that many bytes took beyond its flops at ``peak_flops``
        (:meth:`write_time`); empty (the built-in presets) prices none.
      calibrated: when the fits were measured (ISO 8601), or None for a built-in preset.

    Example:
      >>> link = Interconnect("toy", latency_s=1e-6, bandwidth=1e9, peak_flops=1e12)
      >>> round(link.time("all-reduce", 4, 1_000_000) * 1e6, 1)  # microseconds
      1506.0
    """

    name: str
    latency_s: float
    bandwidth: float
    algorithm: CollectiveAlgorithm = "ring"
    peak_flops: float = 1e12
    description: str = ""
    fits: tuple[CollectiveFit, ...] = ()
    calibrated: str | None = None
    panel_step_s: float = 0.0
    panel_step_bytes: float = 0.0
    product_write: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        # Fits may arrive as JSON (lists of dicts, from a preset file or a saved report).
        object.__setattr__(self, "fits", tuple(_as_fit(f) for f in self.fits))
        writes = tuple((float(n), float(t)) for n, t in self.product_write)
        object.__setattr__(self, "product_write", writes)
        if any(n <= 0 or t < 0 for n, t in writes) or any(
            b[0] <= a[0] or b[1] < a[1] for a, b in itertools.pairwise(writes)
        ):
            raise ValueError(
                f"Interconnect: product_write={writes!r} needs (bytes, seconds) pairs with "
                "bytes positive and increasing, seconds non-negative and non-decreasing"
            )
        if self.algorithm not in _ALGORITHMS:
            raise ValueError(
                f"Interconnect: algorithm={self.algorithm!r}; legal values are {_ALGORITHMS}"
            )
        for field in ("latency_s", "bandwidth", "peak_flops", "panel_step_s", "panel_step_bytes"):
            value = getattr(self, field)
            zero_ok = field in ("latency_s", "panel_step_s", "panel_step_bytes")
            if not (value >= 0 if zero_ok else value > 0):
                need = "non-negative" if zero_ok else "positive"
                raise ValueError(f"Interconnect: {field}={value!r} must be {need}")

    def step_time(self, step_bytes: float, /) -> float:
        """Seconds one panel step writing ``step_bytes`` of output adds (see ``panel_step_s``).

        A step's extra cost is reading and writing its slice of the output between
        permutes, so it grows with that slice: measured on 8 simulated CPU devices,
        a ring matmul's step cost 0.86 ms at n=2048 and 3.6 ms at n=4096 (4x the
        bytes per step), and a constant per step had ``auto`` pick the ring at 4096,
        15% slower than the all-gather.

        Example:
          >>> link = Interconnect("toy", 1e-6, 1e9, panel_step_s=1e-3, panel_step_bytes=2**20)
          >>> link.step_time(2**22) * 1e3
          4.0
        """
        if self.panel_step_bytes <= 0 or step_bytes <= 0:
            return self.panel_step_s
        return self.panel_step_s * step_bytes / self.panel_step_bytes

    def write_time(self, out_bytes: float, /) -> float:
        """Seconds a local product writing ``out_bytes`` takes beyond its flops.

        Linear between the measured ``product_write`` points (and from zero bytes to
        the first), in proportion to the size past the last; 0 without points. On CPU
        devices a product's output is fresh memory each call: measured on 8 simulated
        devices, a float32 product costs nothing extra up to 16 MiB of output and
        about 2.6 ms per MiB at 64 MiB, which made one ``(4096 x 512) @ (512 x 4096)``
        product 24% slower than the same flops in eight row blocks (876 against 709 ms).

        Example:
          >>> link = Interconnect("toy", 1e-6, 1e9, product_write=((2**24, 0.0), (2**26, 0.375)))
          >>> link.write_time(2**23), link.write_time(2**25), link.write_time(2**27)
          (0.0, 0.125, 0.75)
        """
        points = self.product_write
        if not points or out_bytes <= 0:
            return 0.0
        lo_n, lo_t = 0.0, 0.0
        for n, t in points:
            if out_bytes <= n:
                return lo_t + (t - lo_t) * (out_bytes - lo_n) / (n - lo_n)
            lo_n, lo_t = n, t
        return lo_t * out_bytes / lo_n

    def with_algorithm(self, algorithm: CollectiveAlgorithm, /) -> Interconnect:
        """The same link with another collective algorithm."""
        return dataclasses.replace(self, algorithm=algorithm)

    @property
    def label(self) -> str:
        """The name and where the figures come from, as reports print it."""
        if self.calibrated is None:
            return f"{self.name} (built-in preset)"
        return f"{self.name} (calibrated on {self.calibrated[:10]})"

    def fit(self, kind: str, group_size: int, *, leading: bool = True) -> CollectiveFit | None:
        """The measured fit for ``kind`` nearest to ``group_size`` (log scale), if any.

        A group size that was not measured borrows the nearest measured one of the same
        kind; the fits do not extrapolate to groups of one, which cost nothing. Fits
        measured along the requested kind of dimension (``leading`` or inner) are
        preferred; a kind measured only one way serves both.
        """
        same = [f for f in self.fits if f.kind == kind]
        same = [f for f in same if f.leading == leading] or same
        if not same or group_size <= 1 < min(f.group_size for f in same):
            return None
        return min(
            same,
            key=lambda f: (abs(math.log2(f.group_size) - math.log2(group_size)), f.group_size),
        )

    def time(self, kind: str, group_size: int, nbytes: float, *, leading: bool = True) -> float:
        """Predicted seconds for one collective of ``nbytes`` over ``group_size`` devices.

        ``nbytes`` is the full buffer: the gathered result of an all-gather, the
        operand of the others. A group of one costs nothing. ``leading``: an
        all-gather or reduce-scatter along the array's leading dimension; False, along
        an inner one (priced by the inner-dimension fits where calibrated; the
        formulas do not tell them apart).

        Raises:
          ValueError: ``kind`` is not one of the six collectives.
        """
        p, a, b = group_size, self.latency_s, self.bandwidth
        fit = self.fit(kind, p, leading=leading) if self.fits else None
        if fit is not None:
            return fit.time(nbytes)
        if kind == "collective-permute":
            return a + nbytes / b
        if p <= 1:
            return 0.0
        frac = (p - 1) / p * nbytes / b
        lg = math.ceil(math.log2(p))
        ring = self.algorithm == "ring"
        if kind == "all-reduce":
            return (2 * (p - 1) if ring else 2 * lg) * a + 2 * frac
        if kind in ("all-gather", "reduce-scatter"):
            return ((p - 1) if ring else lg) * a + frac
        if kind == "all-to-all":
            return (p - 1) * a + frac if ring else lg * a + lg / 2 * nbytes / b
        if kind == "collective-broadcast":
            return (p - 1) * a + nbytes / b if ring else lg * (a + nbytes / b)
        raise ValueError(
            f"Interconnect.time: kind={kind!r} is not a collective; legal values are "
            "all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute, "
            "collective-broadcast"
        )


_CPU_SIZES = (1 << 10, 1 << 18, 1 << 20, 4 << 20, 16 << 20, 64 << 20)


def _cpu_fit(kind: str, leading: bool, ms: tuple[float, ...]) -> CollectiveFit:
    # Group size 8: the fit every group size of a CPU host borrows (the calibration's
    # groups of 2, 4 and 8 differed by less than the machine's noise).
    return CollectiveFit(
        kind, 8, 2e-4, 1.2e9, _CPU_SIZES, tuple(t * 1e-3 for t in ms), leading=leading
    )


_CPU = Interconnect(
    "cpu",
    latency_s=2e-4,
    bandwidth=1.2e9,
    peak_flops=16e9,
    description=(
        "CPU devices of one host, simulated (jax_num_cpu_devices=8) or not, as "
        "`shardkit bench calibrate` measured them on a 2-core host under load "
        "(2026-11-28): the 8-device groups' median times at 1 KiB to 64 MiB per "
        "collective kind, along an array's leading dimension and, for all-gathers and "
        "reduce-scatters, an inner one (strided pieces: 4-60x slower); a float32 "
        "matmul FLOP rate with every device busy; what writing a product's output "
        "costs beyond its flops (fresh memory past the caches); and what each panel "
        "step of a ring matmul adds. What `matmul(algorithm='auto')` needs to rank "
        "its algorithms on CPU devices without a calibration of its own."
    ),
    fits=(
        _cpu_fit("all-gather", True, (0.24, 0.31, 0.54, 2.0, 10.0, 680.0)),
        _cpu_fit("all-gather", False, (0.24, 0.77, 3.6, 59.0, 670.0, 3700.0)),
        _cpu_fit("all-reduce", True, (0.24, 0.38, 0.93, 3.2, 17.0, 1200.0)),
        _cpu_fit("all-to-all", True, (0.23, 0.59, 1.6, 8.0, 200.0, 2000.0)),
        _cpu_fit("collective-permute", True, (0.24, 0.33, 0.69, 3.3, 16.0, 820.0)),
        _cpu_fit("reduce-scatter", True, (0.24, 0.32, 0.64, 2.1, 7.5, 73.0)),
        _cpu_fit("reduce-scatter", False, (0.24, 0.66, 2.3, 15.0, 56.0, 950.0)),
    ),
    panel_step_s=0.013,
    panel_step_bytes=float(1 << 20),
    product_write=((4 << 20, 0.0), (16 << 20, 0.0059), (64 << 20, 0.44)),
)

INTERCONNECTS: dict[str, Interconnect] = {
    "cpu": _CPU,
    "shared-memory": Interconnect(
        "shared-memory",
        latency_s=1e-6,
        bandwidth=10e9,
        peak_flops=100e9,
        description=(
            "CPU devices of one host exchanging through shared memory: ~1 us per "
            "synchronised hand-off, ~10 GB/s single-core copy bandwidth (the order of "
            "one core's STREAM Copy figure, J. McCalpin, www.cs.virginia.edu/stream), "
            "~100 GFLOP/s per core (AVX2: 2 FMA units x 8 fp32 lanes x 2 flops x 3 GHz)."
        ),
    ),
    "pcie": Interconnect(
        "pcie",
        latency_s=10e-6,
        bandwidth=31.5e9,
        peak_flops=19.5e12,
        description=(
            "GPUs on PCIe 4.0 x16: 16 GT/s x 16 lanes with 128b/130b coding = 31.5 GB/s "
            "per direction (PCI-SIG, PCI Express Base Specification 4.0); ~10 us per "
            "step through host bridges; 19.5 TFLOP/s fp32 per device (NVIDIA A100 PCIe "
            "datasheet)."
        ),
    ),
    "nvlink": Interconnect(
        "nvlink",
        latency_s=3e-6,
        bandwidth=450e9,
        peak_flops=67e12,
        description=(
            "NVLink 4 GPUs (H100 SXM): 900 GB/s total, 450 GB/s per direction, per GPU "
            "(NVIDIA H100 Tensor Core GPU datasheet); ~3 us per step (NCCL small-message "
            "latency); 67 TFLOP/s fp32 (989 TFLOP/s dense bf16 with tensor cores)."
        ),
    ),
    "ici": Interconnect(
        "ici",
        latency_s=2e-6,
        bandwidth=200e9,
        peak_flops=197e12,
        description=(
            "TPU inter-chip interconnect (TPU v5e): 1,600 Gbps = 200 GB/s of ICI "
            "bandwidth per chip and 197 TFLOP/s bf16 (Google Cloud TPU v5e "
            "documentation, 'System architecture'); ~2 us per hop."
        ),
    ),
    "ethernet": Interconnect(
        "ethernet",
        latency_s=20e-6,
        bandwidth=12.5e9,
        peak_flops=19.5e12,
        description=(
            "Hosts joined by 100 Gb/s Ethernet (IEEE 802.3ba/802.3bj): 12.5 GB/s per "
            "direction; ~20 us per step through the network stack (RoCE is lower, TCP "
            "higher); devices as the PCIe preset."
        ),
    ),
}
"""Preset interconnects by name; each ``description`` cites the source of its figures."""
