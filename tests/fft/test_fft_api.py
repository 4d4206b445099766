"""The public names of ``shardkit.fft``: each exists and is documented."""

from __future__ import annotations

import shardkit.fft as skfft


def test_every_export_has_a_docstring() -> None:
    for name in skfft.__all__:
        obj = getattr(skfft, name)
        assert obj.__doc__, name
        assert obj.__doc__.strip(), name


def test_signatures_mirror_jnp_fft() -> None:
    import inspect

    import jax.numpy as jnp

    for name in ("fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"):
        ours = list(inspect.signature(getattr(skfft, name)).parameters)
        theirs = list(inspect.signature(getattr(jnp.fft, name)).parameters)
        assert ours[1:4] == theirs[1:4], name
        assert ours[-2:] == ["out_layout", "in_layout"], name
    assert list(inspect.signature(skfft.fft).parameters)[1:4] == ["n", "axis", "norm"]
