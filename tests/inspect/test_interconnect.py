"""The alpha-beta model: formulas against hand computation, presets, validation."""

from __future__ import annotations

import pytest

from shardkit.inspect import INTERCONNECTS, Interconnect, interconnect
from shardkit.inspect._traffic import traffic

LINK = Interconnect("unit", latency_s=1.0, bandwidth=1.0, peak_flops=1.0)


@pytest.mark.parametrize(
    ("kind", "p", "n", "ring", "tree"),
    [
        ("all-reduce", 4, 8.0, 2 * 3 + 2 * 0.75 * 8, 2 * 2 + 2 * 0.75 * 8),
        ("all-gather", 4, 8.0, 3 + 0.75 * 8, 2 + 0.75 * 8),
        ("reduce-scatter", 8, 16.0, 7 + 7 / 8 * 16, 3 + 7 / 8 * 16),
        ("all-to-all", 8, 16.0, 7 + 7 / 8 * 16, 3 + 1.5 * 16),
        ("collective-permute", 8, 16.0, 1 + 16, 1 + 16),
        ("collective-broadcast", 4, 8.0, 3 + 8, 2 * (1 + 8)),
        ("all-reduce", 1, 8.0, 0.0, 0.0),
    ],
)
def test_formulas(kind: str, p: int, n: float, ring: float, tree: float) -> None:
    assert LINK.time(kind, p, n) == pytest.approx(ring)
    assert LINK.with_algorithm("tree").time(kind, p, n) == pytest.approx(tree)


def test_traffic_convention() -> None:
    assert traffic("all-gather", 4, 128, 512) == (384, 384)
    assert traffic("reduce-scatter", 8, 128, 16) == (112, 112)
    assert traffic("all-reduce", 8, 128, 128) == (224, 224)
    assert traffic("all-to-all", 4, 128, 128) == (96, 96)
    assert traffic("collective-permute", 2, 128, 128, [(0, 1)]) == (128, 128)
    assert traffic("collective-permute", 2, 128, 128, [(0, 0), (1, 1)]) == (0, 0)
    assert traffic("collective-broadcast", 4, 64, 64) == (64, 64)
    assert traffic("all-reduce", 1, 128, 128) == (0, 0)
    with pytest.raises(ValueError, match="kind='gather'"):
        traffic("gather", 2, 1, 1)


def test_presets_cover_the_issue_and_cite_sources() -> None:
    assert set(INTERCONNECTS) == {"cpu", "shared-memory", "pcie", "nvlink", "ici", "ethernet"}
    for name, link in INTERCONNECTS.items():
        assert link.name == name
        assert link.description
    assert INTERCONNECTS["ethernet"].bandwidth == 100e9 / 8
    # Faster links predict faster collectives for large messages.
    big = [INTERCONNECTS[n].time("all-reduce", 8, 1 << 30) for n in ("ethernet", "pcie", "nvlink")]
    assert big == sorted(big, reverse=True)


def test_validation() -> None:
    assert interconnect(LINK) is LINK
    with pytest.raises(ValueError, match="legal values are"):
        interconnect("token-ring")
    with pytest.raises(TypeError, match="preset name"):
        interconnect(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="algorithm='mesh'"):
        Interconnect("x", 1.0, 1.0, algorithm="mesh")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bandwidth"):
        Interconnect("x", 1.0, 0.0)
    with pytest.raises(ValueError, match="kind='psum'"):
        LINK.time("psum", 2, 1.0)
