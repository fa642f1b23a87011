"""One training harness for PPO, SAC, DQN / C51 and behaviour cloning: ``train_eval``.

    sit-train --root_dir runs/caveflyer_sit --gin_file configs/procgen/caveflyer_sit.gin \\
        --gin_bindings 'train_eval.total_env_steps = 1_000_000'

``train_eval`` reads two gin configurables: ``train_eval`` (``RunSettings``,
what every algorithm shares: environment, encoder, budget, schedules,
precision) and the selected agent's (``ppo``, ``sac``, ``dqn`` or ``bc``:
its hyper-parameters, one module each). A binding of any other configurable
is an error that names it, before anything is computed or written: a binding
that nothing reads would otherwise be silently ignored.

The harness owns everything but the algorithm:

- the environments (closed on every exit path) and the step counter
  ``env_steps`` (environment steps summed over the environments; Atari:
  agent steps of ``frame_skip`` frames);
- checkpoints (``checkpoints/``: agent, optimizers, counters) and, for
  replay-based agents, ``replay_buffer/``, so that a rerun with the same
  ``root_dir`` resumes exactly;
- interval triggers in environment steps (logging, evaluation, checkpoints,
  policy saving) that fire when a multiple of the interval is crossed, so
  that they keep their schedule across a resume, and all of them at the end;
- evaluation of the agent's evaluation policy on separate environments
  (seeds from ``seed + EVAL_SEED_OFFSET``) into ``eval/`` and
  ``evaluations.json`` for every agent;
- policy saving (TF-Agents' ``PolicySavedModelTrigger``: ``policies/``);
- TensorBoard: ``train/`` (the learner's losses against gradient steps),
  ``collect/`` (``Metrics/*`` and ``charts/*`` speeds against environment
  steps, and the hyper-parameters), ``eval/`` (``Eval/*``);
- timing: steps/s over collection and learning (evaluations and saving are
  paused time) and the shares of the policy, the environments, the learner
  and the rest;
- ``config.gin`` (gin's operative configuration) and ``policy_network.json``
  (the acting network, for export and ``sit-eval``).

Why not TF-Agents' ``actor.Actor`` and ``Learner`` triggers throughout:
``Actor`` counts steps with ``PyDriver``, whose step count varies with the
number of episode ends, while PPO needs exactly ``T`` steps of every
environment per iteration (``collection.FixedLengthDriver``); learner
triggers fire on gradient steps, while budgets and schedules here are in
environment steps (the papers' unit), and the learner's own checkpoints do
not hold the environment-step counter or the replay buffer. The pieces
TF-Agents has are used: ``learner.Learner`` / ``PPOLearner`` for the train
steps and ``train/`` summaries, ``PolicySavedModelTrigger``, py metrics,
``TFUniformReplayBuffer`` and ``common.Checkpointer``.

An algorithm module (``ppo``, ``sac``, ``dqn``, ``bc``) has a gin-configurable
frozen dataclass of hyper-parameters (``SETTINGS``), the run defaults it
fills in (``defaults(run_settings, settings)``), ``check(run_settings,
settings)`` (raises ``ValueError`` before anything is written) and
``build(run, settings) -> Algorithm``.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import difflib
import importlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import gin
import numpy as np
import tensorflow as tf
import tf_keras
from tensorboard.plugins.hparams import api as hparams_api
from tf_agents.metrics import py_metrics
from tf_agents.policies import py_tf_eager_policy, tf_policy
from tf_agents.train import learner, triggers
from tf_agents.train.utils import spec_utils, train_utils
from tqdm import tqdm

from sit_keras import folder_lock, mixed_precision, output_folder, run_kind, xla
from sit_keras.agents import evaluate
from sit_keras.agents.environments import load
from sit_keras.agents.networks import policy_network
from sit_keras.agents.training import checkpoints, run_record, settings_check
from sit_keras.agents.training.collection import (
    EpisodeSuccessMetric,
    FixedLengthDriver,
    NormalizedReturnMetric,
    metric_results,
)
from sit_keras.models import registry

# sit-train's agents: the module of each (its SETTINGS is the gin configurable of the same name).
ALGORITHMS: dict[str, str] = {
    "ppo": "sit_keras.agents.algorithms.ppo",
    "sac": "sit_keras.agents.algorithms.sac",
    "dqn": "sit_keras.agents.algorithms.dqn",
    "bc": "sit_keras.agents.algorithms.bc",
}
RUN_CONFIGURABLE = "train_eval"
EVAL_SEED_OFFSET = 1_000_000
EVALUATIONS_FILE = "evaluations.json"
CONFIG_FILE = "config.gin"
SPEED_NAMES = ("SPS", "train_fraction", "policy_fraction", "env_fraction", "overhead_fraction")


@gin.configurable(RUN_CONFIGURABLE)
@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What every algorithm shares (gin: ``train_eval.<name>``). ``None``: the agent's default.

    Attributes:
      agent: ``"ppo"`` (+ DrAC), ``"sac"``, ``"dqn"`` (DQN, double DQN or
        C51: ``dqn.algorithm``) or ``"bc"`` (behaviour cloning of a teacher).
      env_name, env_kwargs, num_envs: ``environments.load``'s arguments.
      encoder, encoder_kwargs: the torso by name, for every agent: any
        ``actor_critic.NETWORK_ENCODERS`` name (images: the SiT family, ViT,
        CNNs, ``"data_efficient_cnn"``; vectors: ``"mlp"``), or
        ``"attention_neuron"`` (permutation-invariant, recurrent; PPO and BC).
      total_env_steps: the budget, in environment steps summed over the
        environments (Atari: agent steps; BC: teacher steps recorded).
      log_interval: environment steps between ``collect/`` summaries.
      summary_interval: gradient steps between the learner's ``train/`` summaries.
      eval_interval: environment steps between evaluations; 0: only the
        final one. ``num_eval_episodes = 0``: no evaluation at all.
      eval_num_envs: evaluation environments (default: up to 10, one per episode).
      eval_env_kwargs: updates of ``env_kwargs`` for evaluation (Atari:
        whole games, ``terminal_on_life_loss=False``, unless set here).
      checkpoint_interval, policy_save_interval: environment steps; both
        also at the end. ``policy_save_interval = 0``: no policy exports.
      checkpoint_replay_buffer: save replay-based agents' buffers with each
        checkpoint (exact resumption; a 100k-step Atari buffer is 2.8 GB).
      seed: Python, NumPy, TensorFlow and environment seed.
      deterministic: rerun-exact training (``Run.prefetch``): TensorFlow's
        deterministic kernels (``tf.config.experimental.enable_op_determinism``,
        for the whole process) and replay samples drawn after each collection,
        not prefetched during it. A rerun with the same seed on the same host
        repeats every loss; the cost in speed is in docs/training.md ("Deterministic mode").
      precision: ``"float32"``, ``"mixed_bfloat16"`` or ``"mixed_float16"``
        (``sit_keras.mixed_precision``): the networks' compute dtype; their
        variables and output heads stay float32.
      jit_compile: XLA for the train step (``xla.resolve_jit_compile``:
        ``"auto"``, ``True``/``"on"``, ``False``/``"off"``).
      progress: show a progress bar.
    """

    agent: str = "ppo"
    env_name: str | None = None
    env_kwargs: Mapping[str, Any] | None = None
    num_envs: int | None = None
    encoder: str | None = None
    encoder_kwargs: Mapping[str, Any] | None = None
    total_env_steps: int | None = None
    log_interval: int | None = None
    summary_interval: int | None = None
    eval_interval: int | None = None
    num_eval_episodes: int | None = None
    eval_num_envs: int | None = None
    eval_env_kwargs: Mapping[str, Any] | None = None
    checkpoint_interval: int | None = None
    policy_save_interval: int | None = None
    checkpoint_replay_buffer: bool = True
    seed: int = 0
    deterministic: bool = False
    precision: str = "float32"
    jit_compile: bool | str = "auto"
    progress: bool = True

    def with_defaults(self, defaults: Mapping[str, Any]) -> RunSettings:
        """The settings with every ``None`` that ``defaults`` names filled in."""
        return dataclasses.replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})

    def check(self) -> None:
        """Raises ``ValueError`` naming the first setting of the wrong type or out of range."""
        settings_check.check(self, RUN_CONFIGURABLE)
        for name in (
            "num_envs",
            "total_env_steps",
            "log_interval",
            "summary_interval",
            "checkpoint_interval",
        ):
            value = getattr(self, name)
            if value is None or value < 1:
                raise ValueError(f"train_eval.{name} must be >= 1. Received: {name}={value}")
        for name in ("eval_interval", "num_eval_episodes", "policy_save_interval"):
            value = getattr(self, name)
            if value is None or value < 0:
                raise ValueError(f"train_eval.{name} must be >= 0. Received: {name}={value}")
        if self.eval_num_envs is not None and self.eval_num_envs < 1:
            raise ValueError(f"train_eval.eval_num_envs must be >= 1. Received: {self.eval_num_envs}")
        if not self.env_name:
            raise ValueError("train_eval.env_name is not set.")
        mixed_precision.check_precision(self.precision)

    @property
    def eval_kwargs(self) -> dict[str, Any]:
        """The evaluation environments' keywords (``eval_env_kwargs`` over ``env_kwargs``)."""
        merged = {**dict(self.env_kwargs or {}), **dict(self.eval_env_kwargs or {})}
        if self.env_name.partition(":")[0] == "atari" and "terminal_on_life_loss" not in dict(
            self.eval_env_kwargs or {}
        ):
            merged["terminal_on_life_loss"] = False
        return merged

    @property
    def frames_per_env_step(self) -> int:
        """Emulator frames per environment step: ``frame_skip`` on Atari (default 4), else 1."""
        if self.env_name.partition(":")[0] != "atari":
            return 1
        return int(dict(self.env_kwargs or {}).get("frame_skip", 4))


def algorithm_module(agent: str):
    """The module of ``agent`` (an ``ALGORITHMS`` key)."""
    if agent not in ALGORITHMS:
        raise ValueError(
            f"Unknown agent {agent!r} (train_eval.agent). Expected one of: {', '.join(ALGORITHMS)}."
        )
    return importlib.import_module(ALGORITHMS[agent])


def import_algorithms() -> None:
    """Registers every agent's gin configurable (for parsing configs that bind them)."""
    for agent in ALGORITHMS:
        algorithm_module(agent)


def _bound_configurables() -> list[str]:
    """Names (last selector component) of the configurables that gin holds bindings for.

    gin has no public listing of bound selectors; ``gin.config._CONFIG`` maps
    ``(scope, selector)`` to the bound parameters (gin is pinned in constraints.txt).
    """
    return sorted(
        {selector.rpartition(".")[2] for (_, selector), values in gin.config._CONFIG.items() if values}
    )


def check_bindings(agent: str) -> None:
    """Raises ``ValueError`` if gin holds bindings that a run of ``agent`` would not read.

    A run reads ``train_eval.*`` and ``<agent>.*``: ``sac.batch_size`` in a
    PPO run, or a stale ``train.agent``, would otherwise be ignored.
    """
    unread = [name for name in _bound_configurables() if name not in (RUN_CONFIGURABLE, agent)]
    if unread:
        bindings = ", ".join(_shown_bindings(name) for name in unread)
        raise ValueError(
            f"Gin bindings that a {agent!r} run does not read: {bindings}. "
            f"It reads train_eval.* and {agent}.* (train_eval.agent selects the agent)."
        )


def _shown_bindings(name: str, most: int = 4) -> str:
    """``name.a, name.b`` for up to ``most`` bound parameters of ``name``, then how many more."""
    params = sorted(_bindings_of(name))
    shown = ", ".join(f"{name}.{param}" for param in params[:most])
    return shown + (f" (and {len(params) - most} more {name}.*)" if len(params) > most else "")


def _bindings_of(name: str) -> dict[str, Any]:
    for (_, selector), values in gin.config._CONFIG.items():
        if selector.rpartition(".")[2] == name:
            return values
    return {}


def split_overrides(agent_settings: type, overrides: Mapping[str, Any]) -> tuple[dict, dict]:
    """Keyword overrides of ``train_eval`` split into ``RunSettings`` fields and the agent's.

    Raises:
      ValueError: a name that neither has.
    """
    run_fields = {f.name for f in dataclasses.fields(RunSettings)}
    agent_fields = {f.name for f in dataclasses.fields(agent_settings)}
    unknown = sorted(set(overrides) - run_fields - agent_fields)
    if unknown:
        raise ValueError(
            f"Unknown settings {unknown}: neither train_eval nor {agent_settings.__name__} has them."
        )
    run = {k: v for k, v in overrides.items() if k in run_fields}
    return run, {k: v for k, v in overrides.items() if k in agent_fields}


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


class TrainingDiverged(RuntimeError):
    """The loss is not finite: the run stops before it checkpoints or saves that policy."""


def _check_finite_loss(learned: Mapping[str, float], env_steps: int, train_step: int) -> None:
    loss = learned.get("loss")
    if loss is not None and not np.isfinite(loss):
        raise TrainingDiverged(
            f"the loss became {loss} at {env_steps} environment steps (train step {train_step}), so the run "
            "stopped without checkpointing or saving that policy; the folder keeps what came before. Lower "
            "the learning rate or check the rewards and observations."
        )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the loop after an iteration, with a checkpoint; the message says where."""


class _StopRequests:
    """SIGINT and SIGTERM ask the loop to stop after the iteration it is in; a second one stops at once.

    Python delivers signals to the main thread only: elsewhere (a training
    loop in a worker thread) the handlers stay as they are.
    """

    def __enter__(self) -> _StopRequests:
        self.requested = False
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, self._request)
        return self

    def _request(self, number: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exception: Any) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


class SettingsError(ValueError):
    """A user's mistake found while a run is set up (settings, bindings, names): one sentence to print."""


def train_eval(root_dir: str, strategy: tf.distribute.Strategy | None = None, **overrides) -> dict[str, Any]:
    """Trains the agent that ``train_eval.agent`` (or ``agent=``) selects; returns the last results.

    Args:
      root_dir: output folder (see the module docstring); rerunning with the
        same folder resumes from its newest checkpoint.
      strategy: a ``tf.distribute.Strategy`` for the learner (default: none).
      **overrides: ``RunSettings`` fields and the agent's settings by name,
        over the gin bindings (e.g. ``total_env_steps=1000, n_step=3``).

    Returns:
      The last logged results (metrics, ``env_steps``, ``frames``,
      ``train_step``, speeds, the agent's values), ``evaluations`` (every
      evaluation of the run folder) and ``history`` (every log of this run).

    Raises:
      SettingsError: unknown or out-of-range settings, bindings that the run
        does not read, names (environment, encoder) that do not fit; raised
        while the run is set up, before the first training step.
    """
    try:
        module, run_settings, settings = _settings(overrides, strategy)
    except ValueError as error:
        # gin adds "In call to configurable ..." lines to a settings class's own sentence.
        raise SettingsError(str(error).split("\n  In call to configurable")[0]) from error
    strategy = strategy or tf.distribute.get_strategy()
    try:
        output_folder.check(root_dir, "root_dir")
    except ValueError as error:
        raise SettingsError(str(error)) from error
    created = not os.path.exists(root_dir)
    os.makedirs(root_dir, exist_ok=True)
    with contextlib.ExitStack() as cleanup:
        # One writer per run folder, for the whole run (sit_keras.folder_lock).
        try:
            cleanup.enter_context(folder_lock.exclusive(root_dir, _program(), took_over=_say))
        except folder_lock.FolderInUse as error:
            raise SettingsError(str(error)) from error
        # A resume must be the same run (run_record), from checkpoints that can be read: checked
        # before anything is built or written.
        values = hyperparameters(run_settings, settings)
        try:
            run_kind.check(root_dir, run_kind.RL, _program())
            resumed = run_record.check_resume(root_dir, values)
            checkpoints.check_readable(root_dir)
        except ValueError as error:
            raise SettingsError(str(error)) from error
        # Python's, NumPy's and TensorFlow's seeds: unseeded Keras initializers draw from Python's.
        tf_keras.utils.set_random_seed(run_settings.seed)
        if run_settings.deterministic:
            tf.config.experimental.enable_op_determinism()
        try:
            algorithm, loop = _set_up(root_dir, module, run_settings, settings, strategy, cleanup)
        except (ValueError, TypeError) as error:
            sentence = (
                str(error)
                if isinstance(error, ValueError)
                else _unknown_keyword(error, run_settings, settings)
            )
            if sentence is None:  # a TypeError of the code, not of a setting
                raise
            if created:  # nothing of a run that never started stays behind
                cleanup.callback(shutil.rmtree, root_dir, ignore_errors=True)
            raise SettingsError(sentence) from error
        run_kind.claim(root_dir, run_kind.RL, _program())
        run_record.record(root_dir, values, loop.env_steps(), resumed)
        return algorithm.train(loop)


_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")


def _unknown_keyword(error: TypeError, run_settings: RunSettings, settings: Any) -> str | None:
    """The sentence for a key of an encoder's kwargs that its constructor refused, with a guess; else None."""
    if len(error.args) == 2 and str(error.args[0]).startswith("Keyword argument not understood"):
        keyword = str(error.args[1])  # Keras' Layer
    else:
        found = _UNEXPECTED_KEYWORD.search(str(error))
        keyword = found.group(1) if found else None
    given = [(f"{RUN_CONFIGURABLE}.encoder_kwargs", run_settings.encoder, run_settings.encoder_kwargs),
             (f"{run_settings.agent}.value_encoder_kwargs", getattr(settings, "value_encoder", None),
              getattr(settings, "value_encoder_kwargs", None))]  # fmt: skip
    environment = {"env_kwargs": run_settings.env_kwargs, "eval_env_kwargs": run_settings.eval_env_kwargs}
    for name, kwargs in environment.items():
        if keyword is not None and keyword in (kwargs or {}):
            return (
                f"{RUN_CONFIGURABLE}.{name} has the key {keyword!r}, which environment "
                f"{run_settings.env_name!r} does not take."
            )
    for binding, encoder, kwargs in given:
        if keyword is None or encoder is None or keyword not in (kwargs or {}):
            continue
        accepted = registry.accepted_keywords(encoder)
        guess = difflib.get_close_matches(keyword, sorted(accepted), n=1)
        hint = f"did you mean {guess[0]!r}? " if guess else ""
        return (
            f"{binding} has the key {keyword!r}, which encoder {encoder!r} does not take: {hint}"
            f"it takes {', '.join(sorted(accepted - {'name', 'dtype', 'dynamic', 'trainable'}))}."
        )
    return None


def _program() -> str:
    """The command that runs this process (``sit-train``, a benchmark script), for lock records."""
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def _say(sentence: str) -> None:
    print(f"{_program()}: {sentence}", file=sys.stderr)


def _settings(overrides: Mapping[str, Any], strategy) -> tuple[Any, RunSettings, Any]:
    """The agent's module and the checked run and agent settings; nothing is written or computed."""
    agent = overrides.get("agent") or RunSettings().agent
    module = algorithm_module(agent)
    check_bindings(agent)
    run_overrides, agent_overrides = split_overrides(module.SETTINGS, overrides)
    settings = module.SETTINGS(**agent_overrides)
    run_settings = RunSettings(**run_overrides)
    run_settings = run_settings.with_defaults(module.defaults(run_settings, settings))
    run_settings.check()
    module.check(run_settings, settings)
    jit_compile = xla.resolve_jit_compile(run_settings.jit_compile, strategy)
    return module, dataclasses.replace(run_settings, jit_compile=jit_compile), settings


def _set_up(root_dir: str, module, run_settings: RunSettings, settings, strategy, cleanup) -> tuple:
    """Environments, the algorithm, restored checkpoints, descriptions and the loop of a run."""
    env = load(
        run_settings.env_name, num_envs=run_settings.num_envs, seed=run_settings.seed,
        **dict(run_settings.env_kwargs or {}),
    )  # fmt: skip
    cleanup.callback(env.close)
    if run_settings.num_eval_episodes and set(run_settings.eval_env_kwargs or {}) - set(
        run_settings.env_kwargs or {}
    ):
        # Keys only the evaluation uses: tried now, not after the whole budget has trained.
        load(run_settings.env_name, num_envs=1, seed=run_settings.seed, **run_settings.eval_kwargs).close()
    observation_spec, action_spec, time_step_spec = spec_utils.get_tensor_specs(env)
    with strategy.scope():  # the counters, as the agents' variables (each module's build)
        train_step = train_utils.create_train_step()
        env_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
    with mixed_precision.dtype_policy(run_settings.precision):
        run = Run(
            root_dir, run_settings, env, observation_spec, action_spec, time_step_spec,
            train_step=train_step,
            env_steps=env_steps,
            strategy=strategy, jit_compile=run_settings.jit_compile,
        )  # fmt: skip
        algorithm = module.build(run, settings)
    cleanup.callback(algorithm.close)
    checkpointer = checkpoints.restore_training(
        root_dir,
        run.env_steps,
        "environment steps",
        train_step=run.train_step,
        **algorithm.checkpoint_objects,
    )
    buffer_checkpointer = None
    if algorithm.replay_buffer is not None and run_settings.checkpoint_replay_buffer:
        buffer_checkpointer = checkpoints.restore_replay_buffer(root_dir, algorithm.replay_buffer)
    policy_network.write_description(
        root_dir, env_name=run_settings.env_name, env_kwargs=run_settings.env_kwargs,
        eval_env_kwargs=run_settings.eval_kwargs, **algorithm.description,
    )  # fmt: skip
    collect_writer = tf.summary.create_file_writer(os.path.join(root_dir, "collect"))
    config = run_config(run_settings, settings)
    if int(run.env_steps.numpy()) == 0:
        write_hyperparameters(collect_writer, hyperparameters(run_settings, settings), config)
    with open(os.path.join(root_dir, CONFIG_FILE), "w") as f:
        f.write(config)
    evaluator = None
    if run_settings.num_eval_episodes:
        evaluator = Evaluator(root_dir, run_settings, algorithm.eval_policy)
        cleanup.callback(evaluator.close)
    exporter = PolicyExporter(
        os.path.join(root_dir, learner.POLICY_SAVED_MODEL_DIR), algorithm.agent, run.train_step
    )
    loop = TrainingLoop(run, collect_writer, checkpointer, buffer_checkpointer, exporter, evaluator)
    return algorithm, loop


def hyperparameters(run_settings: RunSettings, settings: Any) -> dict[str, Any]:
    """The run's settings as ``{"train_eval.<field>": value, "<agent>.<field>": value}``.

    They are the frozen settings objects the run was built from (gin's
    bindings, then keyword overrides, then the agent's defaults), so no later
    change can make them differ from what ran.
    """
    values = {f"{RUN_CONFIGURABLE}.{k}": v for k, v in dataclasses.asdict(run_settings).items()}
    values.update({f"{run_settings.agent}.{k}": v for k, v in dataclasses.asdict(settings).items()})
    return values


def run_config(run_settings: RunSettings, settings: Any) -> str:
    """``config.gin``: every setting of the run as a gin binding, which reruns it exactly.

    gin's operative configuration would miss the settings given as keyword
    arguments and show the agent's defaults as ``None``.
    """
    lines = [f"# The settings of this {run_settings.agent!r} run; rerun it with --gin_file config.gin."]
    for name, value in hyperparameters(run_settings, settings).items():
        lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"


def write_hyperparameters(writer, values: Mapping[str, Any], config: str) -> None:
    """The hyper-parameters (HParams plugin) and ``config.gin`` (text) at step 0."""
    with writer.as_default():
        hparams_api.hparams(
            {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in values.items()}
        )
        tf.summary.text("config/operative_gin", config.replace("\n", "  \n"), step=0)


def crosses(previous: int, steps: int, interval: int) -> bool:
    """Whether a multiple of ``interval`` lies in ``(previous, steps]``: events keep their
    schedule across a resume. ``interval = 0``: never.

    >>> [crosses(900, 1100, 1000), crosses(1000, 1900, 1000), crosses(0, 5, 0)]
    [True, False, False]
    """
    return interval > 0 and steps // interval > previous // interval


class PolicyExporter:
    """TF-Agents' ``PolicySavedModelTrigger``, made on first use.

    The trigger writes the SavedModels (``greedy_policy`` and ``policy``)
    when it is made, which takes a while for the larger encoders, and then a
    weight checkpoint (``policy_checkpoint_<train step>``) each time it fires.
    ``agent`` needs a ``policy`` only.
    """

    def __init__(self, saved_model_dir: str, agent: Any, train_step: tf.Variable):
        self._args = (saved_model_dir, agent, train_step)
        self._trigger = None

    def save(self) -> None:
        if self._trigger is None:
            saved_model_dir, agent, train_step = self._args
            self._trigger = triggers.PolicySavedModelTrigger(
                saved_model_dir, agent, train_step, interval=1, save_collect_policy=False
            )
        self._trigger(int(self._args[2].numpy()), force_trigger=True)


class Evaluator:
    """Evaluation episodes on separate environments, into ``eval/`` and ``evaluations.json``.

    The environments (``RunSettings.eval_kwargs``, seeds from ``seed +
    EVAL_SEED_OFFSET``) are made on first use: pixel environments are slow to make.
    """

    def __init__(self, root_dir: str, settings: RunSettings, policy: tf_policy.TFPolicy):
        self._path = os.path.join(root_dir, EVALUATIONS_FILE)
        self._settings = settings
        self._policy = py_tf_eager_policy.PyTFEagerPolicy(
            policy, use_tf_function=True, batch_time_steps=False
        )
        self._env = None
        self._writer = tf.summary.create_file_writer(os.path.join(root_dir, "eval"))
        self.evaluations: list[dict[str, Any]] = []
        if os.path.exists(self._path):
            try:
                with open(self._path) as f:
                    self.evaluations = json.load(f)
            except (OSError, ValueError) as error:
                raise ValueError(
                    f"Damaged evaluations file {self._path!r} ({error}); move it away to resume."
                ) from error

    def _episodes(self, policy) -> list[dict[str, Any]]:
        settings = self._settings
        if self._env is None:
            num_envs = settings.eval_num_envs or min(settings.num_eval_episodes, 10)
            self._env = load(
                settings.env_name, num_envs=num_envs, seed=settings.seed + EVAL_SEED_OFFSET,
                **settings.eval_kwargs,
            )  # fmt: skip
        return evaluate.run_episodes(policy, self._env, settings.num_eval_episodes)

    def summary_of(self, policy) -> dict[str, float]:
        """``evaluate.summarize`` of another py policy (e.g. BC's teacher) on the evaluation environments.

        Not recorded in ``evaluations.json``; it plays the environments' next episodes.
        """
        return evaluate.summarize(self._episodes(policy))

    def __call__(self, env_steps: int, train_step: int) -> dict[str, Any]:
        settings = self._settings
        start = time.perf_counter()
        episodes = self._episodes(self._policy)
        summary = evaluate.summarize(episodes)
        result = {
            "env_steps": env_steps,
            "frames": env_steps * settings.frames_per_env_step,
            "train_step": train_step,
            **summary,
            "returns": [e["return"] for e in episodes],
            "seconds": time.perf_counter() - start,
        }
        # A resumed run replaces the evaluations from after its checkpoint.
        self.evaluations = [e for e in self.evaluations if e["env_steps"] < env_steps] + [result]
        evaluate.write_json_atomically(self._path, self.evaluations)
        with self._writer.as_default(step=env_steps):
            for tag, name in EVAL_TAGS.items():
                tf.summary.scalar(f"Eval/{tag}", summary[name])
        self._writer.flush()
        return result

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


EVAL_TAGS = {
    "AverageReturn": "mean_return",
    "StdReturn": "std_return",
    "AverageEpisodeLength": "mean_length",
    "SuccessRate": "success_rate",
}
"""``eval/`` TensorBoard tags and the ``evaluate.summarize`` values they show."""


class Timer:
    """Steps per second and the shares of wall time over a log window (collection and learning only)."""

    def __init__(self):
        self.steps = 0
        self.seconds = self.train = self.policy = self.env = 0.0

    def add(self, steps: int, driver: FixedLengthDriver, collect: float, train: float) -> None:
        """One iteration: ``steps`` environment steps, ``collect`` and ``train`` seconds."""
        self.steps += steps
        self.seconds += collect + train
        self.train += train
        self.policy += driver.policy_seconds
        self.env += driver.env_seconds

    def speed(self) -> dict[str, float]:
        """``SPS`` and the ``train`` (learner), ``policy``, ``env`` and ``overhead`` fractions."""
        seconds = max(self.seconds, 1e-9)
        fractions = [self.train / seconds, self.policy / seconds, self.env / seconds]
        return dict(zip(SPEED_NAMES, [self.steps / seconds, *fractions, 1.0 - sum(fractions)], strict=True))


def episode_metrics(settings: RunSettings) -> list:
    """Return, length and success of the last 100 training episodes (Procgen: the normalised score)."""
    num_envs = settings.num_envs
    return_metric = py_metrics.AverageReturnMetric(buffer_size=100, batch_size=num_envs)
    metrics = [
        return_metric,
        py_metrics.AverageEpisodeLengthMetric(buffer_size=100, batch_size=num_envs),
        EpisodeSuccessMetric(buffer_size=100, batch_size=num_envs),
    ]
    family, _, game = settings.env_name.partition(":")
    if family == "procgen":
        metrics.append(NormalizedReturnMetric(return_metric, game))
    return metrics


class TrainingLoop:
    """Collect, learn, and the triggers (log, evaluate, checkpoint, save), until the budget."""

    def __init__(self, run: Run, writer, checkpointer, buffer_checkpointer, exporter, evaluator):
        self.context = run  # the run's settings, environments and counters
        self.writer = writer
        self.checkpointer = checkpointer
        self.buffer_checkpointer = buffer_checkpointer
        self.exporter = exporter
        self.evaluator = evaluator
        self.metrics = episode_metrics(run.settings)
        self.success_metric = self.metrics[2]
        self.evaluation: dict[str, Any] = {}

    @property
    def settings(self) -> RunSettings:
        return self.context.settings

    def driver(self, policy, observers: list[Callable], batched_steps: int) -> FixedLengthDriver:
        """A driver of the training environments that feeds ``observers`` and the episode metrics."""
        return FixedLengthDriver(
            self.context.env, policy, [*observers, *self.metrics], batched_steps,
            info_observers=[self.success_metric.observe_info],
        )  # fmt: skip

    def env_steps(self) -> int:
        return int(self.context.env_steps.numpy())

    def train_step(self) -> int:
        return int(self.context.train_step.numpy())

    def run(self, algorithm: OnlineAlgorithm) -> dict[str, Any]:
        """Iterates until ``total_env_steps``; returns the last results, evaluations and history."""
        settings = self.settings
        total = settings.total_env_steps
        driver = self.driver(algorithm.collect_policy, algorithm.observers, algorithm.batched_steps)
        self.time_step = self.context.env.reset()
        # Recurrent policies carry their state across iterations, as TF-Agents' actors do.
        self.policy_state = driver.policy.get_initial_state(self.context.env.batch_size)
        algorithm.warm_up(self)
        steps = self.env_steps()
        bar = progress_bar(total, min(steps, total), settings.progress)
        results: dict[str, Any] = {}
        history: list[dict[str, Any]] = []
        learned: dict[str, float] = {}
        timer = Timer()
        with _StopRequests() as stop:  # Ctrl-C / SIGTERM: a checkpoint after this iteration, then stop
            while steps < total:
                if stop.requested:
                    bar.close()
                    self.save_checkpoint()
                    raise Interrupted(
                        f"stopped at {steps} environment steps, saved in "
                        f"{self.checkpointer.manager.latest_checkpoint}; rerun the same command to resume."
                    )
                driver.reset_timings()
                start = time.perf_counter()
                self.time_step, self.policy_state = driver.run(self.time_step, self.policy_state)
                learn_start = time.perf_counter()
                self.context.env_steps.assign_add(algorithm.env_steps_per_iteration)
                previous, steps = steps, self.env_steps()
                trained_before = self.train_step()
                learned = algorithm.learn(steps) or learned
                if self.train_step() > trained_before:  # a loss of this iteration's updates (DQN: none yet)
                    _check_finite_loss(learned, steps, self.train_step())
                timer.add(algorithm.env_steps_per_iteration, driver, learn_start - start,
                          time.perf_counter() - learn_start)  # fmt: skip
                bar.update(min(steps, total) - min(previous, total))
                done = steps >= total
                # Evaluations first, so that a log at the same step carries them.
                self.triggers(previous, steps, done)
                if done or crosses(previous, steps, settings.log_interval):
                    results = self.log(steps, {**learned, **algorithm.log_values(steps)}, timer.speed())
                    history.append(dict(results))
                    bar.set_postfix(ret=f"{results['AverageReturn']:.2f}", refresh=False)
                    timer = Timer()
        bar.close()
        if not results:  # resumed at or past the budget: nothing ran
            results = {"env_steps": steps, "train_step": self.train_step()}
        return self.finish(results, history)

    def triggers(self, previous: int, steps: int, done: bool) -> None:
        """Evaluation, checkpoints and policy saving due between ``previous`` and ``steps``."""
        settings = self.settings
        if self.evaluator is not None and (done or crosses(previous, steps, settings.eval_interval)):
            self.evaluation = self.evaluator(steps, self.train_step())
        if done or crosses(previous, steps, settings.checkpoint_interval):
            self.save_checkpoint()
        if settings.policy_save_interval and (
            done or crosses(previous, steps, settings.policy_save_interval)
        ):
            self.exporter.save()

    def save_checkpoint(self) -> None:
        """The agent and counters, then the replay buffer: a buffer never runs ahead of its agent."""
        self.checkpointer.save(self.context.train_step)
        if self.buffer_checkpointer is not None:
            self.buffer_checkpointer.save(self.context.train_step)

    def log(self, steps: int, values: Mapping[str, float], speed: Mapping[str, float]) -> dict[str, Any]:
        """``collect/``: the episode metrics and ``values`` as ``Metrics/*``, speeds as ``charts/*``."""
        results = {
            **metric_results(self.metrics),
            **{k: float(v) for k, v in values.items()},
            "env_steps": steps,
            "frames": steps * self.settings.frames_per_env_step,
            "train_step": self.train_step(),
            **speed,
        }
        if self.evaluation.get("env_steps") == steps:
            results["EvalAverageReturn"] = self.evaluation["mean_return"]
        with self.writer.as_default(step=steps):
            for name, value in results.items():
                if name in SPEED_NAMES:
                    tf.summary.scalar(f"charts/{name}", value)
                elif name not in ("env_steps", "frames", "train_step", "EvalAverageReturn"):
                    tf.summary.scalar(f"Metrics/{name}", value)
        return results

    def finish(self, results: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        self.writer.flush()
        evaluations = list(self.evaluator.evaluations) if self.evaluator is not None else []
        if evaluations and evaluations[-1]["env_steps"] == results.get("env_steps"):
            results["EvalAverageReturn"] = evaluations[-1]["mean_return"]
        return {**results, "evaluations": evaluations, "history": history}


def progress_bar(total: int, initial: int, enabled: bool) -> tqdm:
    """The console's progress bar (off with ``progress=False``)."""
    return tqdm(
        total=total, initial=initial, unit="step", disable=not enabled, dynamic_ncols=True, smoothing=0.3
    )


def summary_line(results: Mapping[str, Any]) -> str:
    """The results a command line prints: scalars rounded, without the history and evaluation lists."""
    shown = {k: v for k, v in results.items() if k not in ("history", "evaluations")}
    return str({k: round(v, 4) if isinstance(v, float) else v for k, v in shown.items()})
