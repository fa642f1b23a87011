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
- ``build(run, settings) -> Algorithm``: the agent on ``Run``'s environments and counters.

The harness reads ``Algorithm``'s ``agent``, ``checkpoint_objects``,
``replay_buffer``, ``description`` and ``eval_policy`` and calls ``train(loop)``
and ``close()``; ``OnlineAlgorithm``'s ``train`` hands itself to
``TrainingLoop.run``, which reads ``collect_policy``, ``observers``,
``batched_steps`` and ``env_steps_per_iteration`` and calls ``warm_up``,
``learn`` and ``log_values``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tensorflow as tf
from tf_agents.policies import tf_policy

from sit_keras import xla
from sit_keras.agents.training.run_settings import RunSettings

if TYPE_CHECKING:  # for the annotations only: the harness imports this module
    from sit_keras.agents.training.harness import TrainingLoop


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

    def prefetch(self, dataset: tf.data.Dataset, buffer_size: int) -> tf.data.Dataset:
        """``dataset.prefetch(buffer_size)``, or ``dataset`` itself in a deterministic run.

        A replay dataset that prefetches samples the buffer while the next
        collection adds to it, so which steps a batch can hold depends on
        thread timing; read without prefetching, it samples after collection.
        """
        return dataset if self.settings.deterministic else dataset.prefetch(buffer_size)

    def compile_train(self, agent) -> None:
        """XLA for ``agent.train`` when asked (before a learner traces it)."""
        if self.jit_compile:
            agent.train = xla.compile_with_xla(agent.train)


class Algorithm(abc.ABC):
    """What the harness needs of an agent; algorithm modules subclass it (or ``OnlineAlgorithm``).

    Attributes set by subclasses:
      agent: has ``policy`` for policy saving (``PolicySavedModelTrigger``).
      checkpoint_objects: saved in ``checkpoints/`` beside the counters.
      replay_buffer: a ``TFUniformReplayBuffer`` to checkpoint, or ``None``.
      description: ``policy_network.write_description``'s ``agent``,
        ``network``, ``network_kwargs``, ``checkpoint_attribute`` (and ``extra``).
      eval_policy: the TF policy evaluated by ``Evaluator``.
    """

    agent: Any
    checkpoint_objects: dict[str, Any]
    replay_buffer: Any = None
    description: dict[str, Any]
    eval_policy: tf_policy.TFPolicy

    @abc.abstractmethod
    def train(self, loop: TrainingLoop) -> dict[str, Any]:
        """The whole training with the loop's pieces; returns ``loop.finish``'s results."""

    def close(self) -> None:
        """Releases what the algorithm holds (dataset threads); nothing by default."""
        return None


class OnlineAlgorithm(Algorithm):
    """An agent that collects and learns in turns (PPO, SAC, DQN): ``TrainingLoop.run`` drives it.

    Attributes set by subclasses, besides ``Algorithm``'s:
      collect_policy: the py policy that collects.
      observers: trajectory observers of the collection (the replay buffer).
      batched_steps: batched steps of the environments per iteration.
      env_steps_per_iteration: what one iteration adds to ``env_steps``.
    """

    collect_policy: Any
    observers: list[Callable]
    batched_steps: int
    env_steps_per_iteration: int

    def warm_up(self, loop: TrainingLoop) -> None:
        """Before the first iteration (e.g. random steps into an empty buffer); nothing by default."""
        return None

    @abc.abstractmethod
    def learn(self, env_steps: int) -> dict[str, float]:
        """The train steps due after a collection; returns scalars for ``collect/`` (e.g. the loss)."""

    def log_values(self, env_steps: int) -> dict[str, float]:
        """Scalars of the agent's state to log (e.g. epsilon, the temperature)."""
        return {}

    def train(self, loop: TrainingLoop) -> dict[str, Any]:
        """Collect and learn until the budget."""
        return loop.run(self)
