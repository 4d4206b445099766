"""Parallel training: the seeds' models, or your own, with dp, fsdp, tp, dp+tp and pipelines.

``make_train_step(model, optimizer, strategy=..., mesh=..., key=...)`` returns a
jitted step with explicit shardings and the first sharded state. Any optax optimizer
works; its state is sharded like the parameters it mirrors, and :func:`muon` is
``optax.contrib.muon`` with its Newton-Schulz iteration run on the shards
(:func:`muon_plan` shows how). A step whose loss or
gradients are not finite is skipped and counted by default (``on_nonfinite=``). ``model`` is a
bundled :class:`MLP` or :class:`Logistic`, or your own: a parameter pytree, an
Equinox module or a Flax NNX module, with ``loss=``; pipeline parallelism (``pp``,
``dp_pp``, ``microbatches=``, ``schedule=``) takes the MLP or :class:`Layers`; path rules
(:data:`~shardkit.train.Rules`) say which dimension of each parameter a strategy
splits. Every strategy gives the losses of ``single`` (one device) within float32 rounding. The
communication each strategy promises is asserted through ``shardkit.comms`` in the
tests. A :class:`CheckpointManager` (orbax's manager) saves a run every few steps and
restores the newest complete checkpoint, onto any strategy or mesh; a process killed
during a save leaves the previous one intact. Needs optax (and orbax-checkpoint for
checkpoints): the ``train`` extra.
"""

from shardkit.train._checkpoint import restore_state, save_state
from shardkit.train._layers import Layers
from shardkit.train._manager import CheckpointManager, Restored
from shardkit.train._models import MLP, Logistic, Model
from shardkit.train._muon import muon, muon_plan
from shardkit.train._newton_schulz import MuonMatrix
from shardkit.train._rules import MODEL, Rules
from shardkit.train._run import Optimizer, TrainRun, run_training
from shardkit.train._schedule import Schedule
from shardkit.train._step import NonFinite, TrainState, make_train_step
from shardkit.train._strategies import STRATEGIES, Strategy, StrategyLayout, strategy_layout

__all__ = [
    "MLP",
    "MODEL",
    "STRATEGIES",
    "CheckpointManager",
    "Layers",
    "Logistic",
    "Model",
    "MuonMatrix",
    "NonFinite",
    "Optimizer",
    "Restored",
    "Rules",
    "Schedule",
    "Strategy",
    "StrategyLayout",
    "TrainRun",
    "TrainState",
    "make_train_step",
    "muon",
    "muon_plan",
    "restore_state",
    "run_training",
    "save_state",
    "strategy_layout",
]
