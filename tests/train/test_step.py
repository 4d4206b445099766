"""Every strategy trains like one device: same losses for 20 steps on meshes 8, 2x4, 4x2
(by default each strategy on one 1-D and one 2-D mesh, every pair with the flag).

Each mesh with Auto axes and with Explicit axes (the default of ``jax.make_mesh`` and
``shardkit.mesh``, where the state must also carry its sharding in its type): the axis
types in turn by default, both with ``SHARDKIT_FULL_TESTS=1`` (tests/_matrix.py).
"""

from __future__ import annotations

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _train_util import AXIS_TYPES, TRAIN_NAMES, losses, numpy_batch, small_mlp
from jax.sharding import PartitionSpec as P

from _matrix import FULL, rotate
from _meshes import make_mesh
from shardkit import train
from shardkit.testing import assert_close

# (strategy, mesh): every strategy on every mesh it accepts (dp_tp needs 2-D).
# By default each strategy on one 1-D and one 2-D mesh (dp_tp on both 2-D ones).
CASES = [
    (s, m)
    for s in ("dp", "fsdp", "tp", "dp_tp")
    for m in ("8", "2x4", "4x2")
    if not (s == "dp_tp" and m == "8")
    and (FULL or (s, m) not in {("dp", "4x2"), ("fsdp", "2x4"), ("tp", "4x2")})
]

OPTIMIZERS = {"sgd": lambda: optax.sgd(0.05), "adam": lambda: optax.adam(1e-2)}

# Measured: the largest relative deviation from `single` over 20 steps is 2.1e-7
# (SGD; 1.9e-7 with Adam), i.e. one or two float32 ulps from reordered sums; float32's own
# tolerance (rtol 2e-5, shardkit.testing) covers it with a wide margin.


def _trimmed(spec: P) -> tuple[object, ...]:
    """The spec without trailing Nones (types spell P() of a vector as P(None,))."""
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)


def _reference(opt: str, model: train.Model, batch) -> np.ndarray:  # type: ignore[no-untyped-def]
    step, state = train.make_train_step(
        model, OPTIMIZERS[opt](), strategy="single", mesh=None, key=jax.random.key(0)
    )
    ref, _ = losses(step, state, batch)
    return ref


@pytest.fixture(scope="module")
def references() -> dict[str, np.ndarray]:
    model = small_mlp()
    batch = numpy_batch(model)
    return {opt: _reference(opt, model, batch) for opt in OPTIMIZERS}


@pytest.mark.parametrize(("strategy", "mesh_shape", "axis_types"), rotate(CASES, list(AXIS_TYPES)))
def test_losses_match_single_device_sgd(
    strategy: str,
    mesh_shape: str,
    axis_types: str,
    references,  # type: ignore[no-untyped-def]
) -> None:
    model = small_mlp()
    batch = numpy_batch(model)
    mesh = make_mesh(mesh_shape, axis_types, TRAIN_NAMES)
    step, state = train.make_train_step(
        model, optax.sgd(0.05), strategy=strategy, mesh=mesh, key=jax.random.key(0)
    )
    got, state = losses(step, state, batch)
    assert got[-1] < 0.5 * got[0]  # it trains
    what = f"{strategy} losses on {mesh_shape} ({axis_types})"
    assert_close(got, references["sgd"], dtype=np.float32, what=what)
    layout = train.strategy_layout(model, strategy=strategy, mesh=mesh)
    for leaf, want in zip(
        jax.tree.leaves(state.params), jax.tree.leaves(layout.params), strict=True
    ):
        assert leaf.sharding.is_equivalent_to(want, leaf.ndim)
        assert leaf.sharding.mesh == mesh  # the state stays on the caller's mesh
        if axis_types == "explicit":  # ... with its sharding in its type
            assert _trimmed(jax.typeof(leaf).sharding.spec) == _trimmed(want.spec)


@pytest.mark.parametrize(
    ("strategy", "mesh_shape", "axis_types"),
    [
        # dp and fsdp with Adam: also tests/train/test_optimizers.py's adam-based cases.
        *([("dp", "8", "auto"), ("fsdp", "2x4", "auto")] if FULL else []),
        ("dp_tp", "4x2", "auto"),
        ("tp", "4x2", "auto"),
        ("fsdp", "4x2", "explicit"),  # Adam's moments sharded like the parameters
    ],
)
def test_losses_match_single_device_adam(
    strategy: str,
    mesh_shape: str,
    axis_types: str,
    references,  # type: ignore[no-untyped-def]
) -> None:
    model = small_mlp()
    batch = numpy_batch(model)
    step, state = train.make_train_step(
        model,
        optax.adam(1e-2),
        strategy=strategy,
        mesh=make_mesh(mesh_shape, axis_types, TRAIN_NAMES),
        key=jax.random.key(0),
    )
    got, _ = losses(step, state, batch)
    assert_close(got, references["adam"], dtype=np.float32, what=f"{strategy} adam losses")


def test_four_layers_and_the_logistic_model() -> None:
    model = small_mlp((16, 32, 32, 32, 8))
    batch = numpy_batch(model)
    ref = None
    for strategy, shape in [("single", None), ("tp", "8"), ("dp_tp", "2x4")]:
        step, state = train.make_train_step(
            model,
            optax.sgd(0.02),
            strategy=strategy,
            mesh=make_mesh(shape, "auto", TRAIN_NAMES),
            key=jax.random.key(3),
        )
        got, _ = losses(step, state, batch, 5)
        ref = got if ref is None else ref
        assert_close(got, ref, dtype=np.float32, what=strategy)
    logistic = train.Logistic(features=32)
    batch = numpy_batch(logistic, 64)
    ref = None
    for strategy, shape in [("single", None), ("dp", "8"), ("fsdp", "8")]:
        step, state = train.make_train_step(
            logistic,
            optax.sgd(0.5),
            strategy=strategy,
            mesh=make_mesh(shape, "auto", TRAIN_NAMES),
            key=jax.random.key(0),
        )
        got, _ = losses(step, state, batch, 10)
        ref = got if ref is None else ref
        assert got[-1] < got[0]
        assert_close(got, ref, dtype=np.float32, what=f"logistic {strategy}")


def test_initial_parameters_do_not_depend_on_the_strategy() -> None:
    model = small_mlp()
    states = [
        train.make_train_step(
            model,
            optax.sgd(0.1),
            strategy=s,
            mesh=make_mesh(m, "auto", TRAIN_NAMES),
            key=jax.random.key(5),
        )[1]
        for s, m in [("single", None), ("fsdp", "8"), ("dp_tp", "4x2")]
    ]
    for other in states[1:]:
        for a, b in zip(
            jax.tree.leaves(states[0].params), jax.tree.leaves(other.params), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert states[0].params[0]["w"].dtype == np.float32


def test_bad_configurations_raise() -> None:
    model = small_mlp()
    opt = optax.sgd(0.1)
    key = jax.random.key(0)
    with pytest.raises(
        ValueError,
        match=r"strategy='zero'; choose one of \['single', 'dp', 'fsdp', 'tp', 'dp_tp', 'pp', 'dp_pp'\]",
    ):
        train.make_train_step(
            model, opt, strategy="zero", mesh=make_mesh("8", "auto", TRAIN_NAMES), key=key
        )
    with pytest.raises(ValueError, match=r"mesh=mesh\(x=8\) must be 2-D"):
        train.make_train_step(model, opt, strategy="dp_tp", mesh=make_mesh("8", "auto"), key=key)
    with pytest.raises(TypeError, match=r"mesh= is missing and no mesh is set.*jax\.set_mesh"):
        train.make_train_step(model, opt, strategy="dp", key=key)
    with pytest.raises(TypeError, match=r"must be a jax\.sharding\.Mesh"):
        train.make_train_step(model, opt, strategy="dp", mesh="8", key=key)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"layer 0 w: array shape=\(16, 36\).*not divisible by 8"):
        train.make_train_step(
            small_mlp((16, 36, 8)),
            opt,
            strategy="tp",
            mesh=make_mesh("8", "auto", TRAIN_NAMES),
            key=key,
        )
    manual = make_mesh("2x4", "manual", TRAIN_NAMES)
    with pytest.raises(NotImplementedError, match="Manual mesh axes are not supported"):
        train.make_train_step(model, opt, strategy="dp", mesh=manual, key=key)
    with pytest.raises(ValueError, match="at least two positive integers"):
        train.MLP((16,))
    with pytest.raises(ValueError, match=r"must be \(features, 1\)"):
        train.Logistic((4, 2))
    layout = train.strategy_layout(model, strategy="dp", mesh=make_mesh("8", "auto", TRAIN_NAMES))
    with pytest.raises(ValueError, match="not divisible by 8"):
        layout.check_batch((12, 16))


def test_a_list_batch_trains_like_a_pair() -> None:
    model = small_mlp((16, 32, 8))
    x, y = numpy_batch(model)
    mesh = make_mesh("4x2", "auto", TRAIN_NAMES)
    runs = []
    for batch in ((x, y), [x, y]):
        step, state = train.make_train_step(
            model, optax.sgd(0.05), strategy="dp_tp", mesh=mesh, key=jax.random.key(0)
        )
        out = []
        for _ in range(3):
            state, loss = step(state, batch)
            out.append(float(loss))
        runs.append(out)
        assert cast(Any, step).lower(state, batch) is not None  # a jitted step
    np.testing.assert_array_equal(runs[0], runs[1])
    with pytest.raises(TypeError, match=r"batch must be a pair \(inputs, targets\), got list of"):
        step(state, [x, y, y])
    # A parameter pytree's loss gets the list as it was given.
    params = {"w": np.ones((16, 8), np.float32)}

    def mse(p: Any, batch: Any) -> jax.Array:
        assert isinstance(batch, list)
        inputs, targets = batch
        return jnp.mean((inputs @ p["w"] - targets) ** 2)

    step, state = train.make_train_step(
        params, optax.sgd(0.01), strategy="fsdp", mesh=mesh, loss=mse
    )
    state, loss = step(state, [x, y])
    np.testing.assert_allclose(float(loss), np.mean((x @ params["w"] - y) ** 2), rtol=1e-5)


def test_the_mesh_set_with_jax_set_mesh_is_the_default() -> None:
    model = small_mlp((16, 32, 8))
    m = make_mesh("4x2", names="data,model")
    given = train.strategy_layout(model, strategy="dp_tp", mesh=m)
    with jax.set_mesh(m):
        ambient = train.strategy_layout(model, strategy="dp_tp")
    assert ambient.mesh == m
    assert ambient.params == given.params
    assert ambient.batch == given.batch
