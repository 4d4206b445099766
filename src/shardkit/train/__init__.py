"""Parallel-training recipes: the seeds' models trained with dp, fsdp, tp and dp+tp.

``make_train_step(model, optimizer, strategy=..., mesh=..., key=...)`` returns a
jitted step with explicit shardings and the first sharded state; every strategy
gives the losses of ``single`` (one device) within float32 rounding. The
communication each strategy promises is asserted through ``shardkit.comms`` in the
tests. Needs optax (and orbax-checkpoint for :func:`save_state` /
:func:`restore_state`): the ``train`` extra.
"""

from shardkit.train.checkpoint import restore_state, save_state
from shardkit.train.models import MLP, Logistic, Model
from shardkit.train.run import Optimizer, TrainRun, run_training
from shardkit.train.step import TrainState, make_train_step
from shardkit.train.strategies import STRATEGIES, Strategy, StrategyLayout, strategy_layout

__all__ = [
    "MLP",
    "STRATEGIES",
    "Logistic",
    "Model",
    "Optimizer",
    "Strategy",
    "StrategyLayout",
    "TrainRun",
    "TrainState",
    "make_train_step",
    "restore_state",
    "run_training",
    "save_state",
    "strategy_layout",
]
