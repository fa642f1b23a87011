"""The contract between the harness and an algorithm module (``ppo``, ``sac``, ``dqn``, ``bc``).

An algorithm module (``run_settings.ALGORITHMS`` names them) exposes:

- ``SETTINGS``: a gin-configurable frozen dataclass of hyper-parameters,
  configurable under the agent's name (``ppo.*``, ``sac.*``, ...);
- ``RANGES``: the ranges of its numeric settings, which ``SETTINGS`` checks when
  it is made (``settings_check.check``; the harness does not read them);
- ``defaults(run_settings, settings)``: the run defaults it fills in (the
  ``RunSettings`` fields left ``None``);
- ``check(run_settings, settings)``: raises ``ValueError`` before anything is written;
- ``stored_observations(run_settings, settings)``: how many observations it keeps at
  once (rollout, replay buffer, recorded rounds) and the binding that sets them, for
  the memory check (``memory_check``);
- ``minibatch_size(run_settings, settings)``: observations per gradient step, at
  which ``precision="auto"`` and ``jit_compile="auto"`` time the model (``auto_settings``);
- ``MULTI_WORKER`` (optional, default ``True``): ``False`` if it cannot train on a
  cluster of workers (``workers``);
- ``build(run, settings) -> Algorithm``: one function that makes the agent on
  ``Run``'s environments and counters, and returns what the harness needs of it.

What every algorithm needs made the same way is made here, once: ``Run.make_agent``
(the agent's variables under the run's ``tf.distribute`` strategy, ``initialize``,
XLA for its train step) and ``Run.learner`` (TF-Agents' ``Learner`` or
``PPOLearner`` on the run's counter and strategy; the harness checkpoints). The
harness itself makes the rest: environments, checkpoints, the policy saver, the
evaluator, the triggers, and the py policy that collects (``PyTFEagerPolicy``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.policies import tf_policy
from tf_agents.train import learner as learner_lib

from sit_keras import xla
from sit_keras.agents.training import workers
from sit_keras.agents.training.run_settings import RunSettings

if TYPE_CHECKING:  # for the annotations only: the harness imports this module
    from sit_keras.agents.training.harness import TrainingLoop

AgentT = TypeVar("AgentT")


@dataclasses.dataclass
class Run:
    """What an algorithm module's ``build`` gets: the settings, environments, specs and counters."""

    root_dir: str
    settings: RunSettings
    env: Any
    observation_spec: Any
    action_spec: Any
    time_step_spec: Any
    train_step: tf.Variable
    env_steps: tf.Variable
    strategy: tf.distribute.Strategy
    jit_compile: bool

    def make_agent(self, make: Callable[[], AgentT]) -> AgentT:
        """``make()`` (networks, optimizers, agent) under the strategy, initialized, its train step compiled.

        Only variables belong under the strategy: buffers and learners are made
        outside it (``Run.learner``).
        """
        with self.strategy.scope():
            agent = make()
            agent.initialize()
        if self.jit_compile:  # before a learner traces it
            agent.train = xla.compile_with_xla(agent.train)
        return agent

    def learner(
        self, agent: tf_agent.TFAgent, learner_class: type = learner_lib.Learner, **kwargs
    ) -> learner_lib.Learner:
        """``learner_class`` (``Learner`` or ``PPOLearner``) for ``agent`` on this run's counter and strategy.

        ``train/`` holds its summaries every ``summary_interval`` gradient steps
        (the chief's only, on a cluster of workers); it never checkpoints (the
        harness does, with the environment-step counter).
        """
        summary_interval = self.settings.summary_interval if workers.is_chief(self.strategy) else 0
        return learner_class(
            self.root_dir, self.train_step, agent,
            checkpoint_interval=-1, summary_interval=summary_interval, strategy=self.strategy,
            **kwargs,
        )  # fmt: skip

    def add_env_steps(self, steps_per_worker: int) -> int:
        """Counts ``steps_per_worker`` steps of every worker's environments; returns what was added."""
        added = steps_per_worker * workers.num_workers(self.strategy)
        self.env_steps.assign_add(added)
        return added

    def on_any_worker(self, flag: bool) -> bool:
        """Whether ``flag`` holds on some worker: a choice every worker must make alike (e.g. a warm-up)."""
        return workers.on_any_worker(self.strategy, flag)

    def prefetch(self, dataset: tf.data.Dataset, buffer_size: int) -> tf.data.Dataset:
        """``dataset.prefetch(buffer_size)``, or ``dataset`` itself in a deterministic run.

        A replay dataset that prefetches samples the buffer while the next
        collection adds to it, so which steps a batch can hold depends on
        thread timing; read without prefetching, it samples after collection.
        """
        return dataset if self.settings.deterministic else dataset.prefetch(buffer_size)


def _nothing(*unused) -> None:
    return None


def _no_values(unused_env_steps: int) -> dict[str, float]:
    return {}


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """What ``build`` returns: everything the harness reads of an algorithm.

    Every algorithm:
      agent: its ``policy`` is what the policy saver writes.
      eval_policy: the TF policy ``Evaluator`` runs.
      checkpoint_objects: saved in ``checkpoints/`` beside the counters.
      description: ``policy_network.write_description``'s ``agent``,
        ``network``, ``network_kwargs``, ``checkpoint_attribute`` (and ``extra``).
      replay_buffer: a ``TFUniformReplayBuffer`` to checkpoint with the agent, or ``None``.
      close: releases what it holds (dataset threads) when the run ends.

    Collect and learn in turns (PPO, SAC, DQN), driven by ``TrainingLoop.run``:
      collect_policy: the TF policy that collects (the harness runs it as a py policy).
      observers: trajectory observers of the collection (the replay buffer).
      batched_steps: batched steps of the environments per iteration.
      env_steps_per_iteration: what one iteration of one worker adds to ``env_steps``.
      learn: ``learn(env_steps)`` runs the train steps due after a collection
        and returns scalars for ``collect/`` (e.g. the loss).
      warm_up: ``warm_up(loop)`` before the first iteration (e.g. random steps
        into an empty buffer).
      log_values: ``log_values(env_steps)``: scalars of the agent's state to log
        (the temperature, epsilon).
      reset_each_iteration: every iteration starts with the environments reset
        and the collect policy's initial state, instead of going on where the
        last one stopped (PPO's ``ppo.reset_each_iteration``).

    Or a schedule of its own (behaviour cloning's rounds):
      train: ``train(loop)`` runs the whole training with the loop's pieces
        (driver, checkpoints, log, policy saver, evaluator) and returns
        ``loop.finish``'s results.
    """

    agent: Any
    eval_policy: tf_policy.TFPolicy
    checkpoint_objects: Mapping[str, Any]
    description: Mapping[str, Any]
    replay_buffer: Any = None
    close: Callable[[], None] = _nothing
    collect_policy: tf_policy.TFPolicy | None = None
    observers: Sequence[Callable] = ()
    batched_steps: int = 0
    env_steps_per_iteration: int = 0
    learn: Callable[[int], Mapping[str, float]] | None = None
    warm_up: Callable[[TrainingLoop], None] = _nothing
    log_values: Callable[[int], Mapping[str, float]] = _no_values
    reset_each_iteration: bool = False
    train: Callable[[TrainingLoop], dict[str, Any]] | None = None

    def __post_init__(self):
        online = self.collect_policy is not None and self.learn is not None
        if online == (self.train is not None):
            raise ValueError(
                "An algorithm either collects and learns in turns (collect_policy and learn) or "
                "trains on its own schedule (train), not both and not neither."
            )
        if online and (self.batched_steps < 1 or self.env_steps_per_iteration < 1):
            raise ValueError(
                "An algorithm that collects needs batched_steps and env_steps_per_iteration >= 1. "
                f"Received: {self.batched_steps}, {self.env_steps_per_iteration}"
            )
