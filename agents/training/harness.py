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
  (seeds from ``seed + evaluation.EVAL_SEED_OFFSET``) into ``eval/`` and
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

The harness's parts, one module each: ``run_settings`` (``RunSettings``, the
bindings a run reads, its hyper-parameters and ``config.gin``), ``algorithm``
(the contract of an algorithm module: ``Run`` and the ``Algorithm`` its
``build`` returns), ``stops`` (a loss that is not finite, Ctrl-C and
SIGTERM), ``keyword_messages`` (the sentence for a refused encoder or
environment keyword), ``memory_check`` (whether the environments and stored
observations fit in memory) and ``evaluation`` (the training episodes' metrics
and the evaluations); this module sets a run up and runs the loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
import tf_keras
from tensorboard.plugins.hparams import api as hparams_api
from tf_agents.policies import py_tf_eager_policy
from tf_agents.train import learner, triggers
from tf_agents.train.utils import spec_utils, train_utils
from tqdm import tqdm

from sit_keras import folder_lock, mixed_precision, output_folder, run_kind, xla
from sit_keras.agents.environments import load
from sit_keras.agents.networks import policy_network
from sit_keras.agents.training import auto_settings, checkpoints, memory_check, run_record, workers
from sit_keras.agents.training.algorithm import Algorithm, Run
from sit_keras.agents.training.collection import FixedLengthDriver, metric_results
from sit_keras.agents.training.evaluation import Evaluator, episode_metrics
from sit_keras.agents.training.keyword_messages import unknown_keyword_sentence
from sit_keras.agents.training.run_settings import (
    RunSettings,
    algorithm_module,
    check_bindings,
    hyperparameters,
    run_config,
    split_overrides,
)
from sit_keras.agents.training.stops import Interrupted, StopRequests, WorkerLost, check_finite_loss

CONFIG_FILE = "config.gin"
SPEED_NAMES = ("SPS", "train_fraction", "policy_fraction", "env_fraction", "overhead_fraction")


class SettingsError(ValueError):
    """A user's mistake found while a run is set up (settings, bindings, names): one sentence to print."""


def train_eval(root_dir: str, strategy: tf.distribute.Strategy | None = None, **overrides) -> dict[str, Any]:
    """Trains the agent that ``train_eval.agent`` (or ``agent=``) selects; returns the last results.

    Args:
      root_dir: output folder (see the module docstring); rerunning with the
        same folder resumes from its newest checkpoint. On a cluster of workers
        only the chief writes it (``workers``).
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
      WorkerLost: another worker of the cluster stopped answering.
    """
    try:
        module, run_settings, settings = _settings(overrides, strategy)
    except ValueError as error:
        # gin adds "In call to configurable ..." lines to a settings class's own sentence.
        raise SettingsError(str(error).split("\n  In call to configurable")[0]) from error
    try:
        _check_memory(module, run_settings, settings)
    except ValueError as error:
        raise SettingsError(str(error)) from error
    except TypeError as error:  # the probe environment refused a key of env_kwargs
        sentence = unknown_keyword_sentence(error, run_settings, settings)
        if sentence is None:
            raise
        raise SettingsError(sentence) from error
    strategy = strategy or tf.distribute.get_strategy()
    if workers.num_workers(strategy) > 1 and not getattr(module, "MULTI_WORKER", True):
        raise SettingsError(
            f"train_eval.agent = {run_settings.agent!r} trains on one worker only; this cluster has "
            f"{workers.num_workers(strategy)} (TF_CONFIG): run it without --strategy multi_worker."
        )
    if workers.num_workers(strategy) > 1 and run_settings.precision == mixed_precision.AUTO:
        # Each worker would measure its own host, and the workers could then train in different dtypes.
        raise SettingsError(
            "train_eval.precision = 'auto' measures one host; on a cluster of workers choose float32 or "
            "mixed_bfloat16 for all of them."
        )
    try:
        if workers.is_chief(strategy):
            return _train(root_dir, module, run_settings, settings, strategy)
        # The chief writes root_dir; another worker trains in a folder of its own, deleted at its end.
        with tempfile.TemporaryDirectory(prefix="sit-worker-") as scratch:
            return _train(os.path.join(scratch, "run"), module, run_settings, settings, strategy)
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as error:
        if workers.num_workers(strategy) == 1:
            raise
        lost = workers.lost_worker_sentence(error)
        workers.release_failed_collective(error)
    raise WorkerLost(lost)  # outside the except block: the error, and what it holds, is gone


def _train(root_dir: str, module, run_settings: RunSettings, settings: Any, strategy) -> dict[str, Any]:
    """``train_eval`` once its settings are checked: the run folder's checks, the set-up and the training."""
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
        _seed(run_settings, strategy)
        if run_settings.deterministic:
            tf.config.experimental.enable_op_determinism()
        try:
            algorithm, loop = _set_up(root_dir, module, run_settings, settings, strategy, cleanup)
        except (ValueError, TypeError) as error:
            sentence = (
                str(error)
                if isinstance(error, ValueError)
                else unknown_keyword_sentence(error, run_settings, settings)
            )
            if sentence is None:  # a TypeError of the code, not of a setting
                raise
            if created:  # nothing of a run that never started stays behind
                cleanup.callback(shutil.rmtree, root_dir, ignore_errors=True)
            raise SettingsError(sentence) from error
        run_kind.claim(root_dir, run_kind.RL, _program())
        run_record.record(root_dir, values, loop.env_steps(), resumed)
        return algorithm.train(loop) if algorithm.train is not None else loop.run(algorithm)


def _seed(run_settings: RunSettings, strategy) -> None:
    """Python's, NumPy's and TensorFlow's seeds: unseeded Keras initializers draw from Python's."""
    tf_keras.utils.set_random_seed(run_settings.seed + workers.worker_index(strategy))


def _resolve_precision(module, run_settings: RunSettings, settings: Any, observation_spec, strategy) -> str:
    """The run's dtype policy: its ``precision``, or for ``"auto"`` the one measured faster on this host."""
    if run_settings.precision != mixed_precision.AUTO:
        return run_settings.precision
    choice = auto_settings.choose_precision(
        run_settings, observation_spec, module.minibatch_size(run_settings, settings)
    )
    choice.announce(_program(), "precision")
    # The measurement's models drew from the seeded generators: the run's own start as without it.
    _seed(run_settings, strategy)
    return choice.value


def _resolve_jit_compile(
    module, run_settings: RunSettings, settings: Any, observation_spec, precision: str, strategy
) -> bool:
    """XLA or not: the run's ``jit_compile``, or for ``"auto"`` the one measured faster on this host."""
    jit_compile = run_settings.jit_compile
    if jit_compile == xla.AUTO:
        choice = auto_settings.choose_jit_compile(
            run_settings, precision, observation_spec, module.minibatch_size(run_settings, settings)
        )
        choice.announce(_program(), "jit_compile")
        _seed(run_settings, strategy)
        jit_compile = choice.value == "on"
    if jit_compile:
        xla.start_quietly()
    return jit_compile


def _check_memory(module, run_settings: RunSettings, settings: Any) -> None:
    """Refuses a run whose environments and stored observations cannot fit (``memory_check``).

    One probe environment gives the observation's size, before ``num_envs`` of them are made.
    """

    def probe():
        kwargs = dict(run_settings.env_kwargs or {})
        env = load(run_settings.env_name, num_envs=1, seed=run_settings.seed, **kwargs)
        try:
            return env.observation_spec()
        finally:
            env.close()

    stored, binding = module.stored_observations(run_settings, settings)
    memory_check.check(run_settings.env_name, run_settings.num_envs, stored, binding, probe)


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
    if run_settings.deterministic:
        # XLA's random ops (SAC's sampling, DrAC's crops in the train step) are not seeded by
        # TensorFlow's seeds: two XLA runs with one seed differ (tests/test_jit_compile.py).
        if jit_compile is True:
            raise ValueError(
                "train_eval.deterministic repeats a run bit for bit only without XLA, whose random numbers "
                "in the train step are not TensorFlow's seeded ones: use jit_compile 'off' or 'auto'."
            )
        jit_compile = False
    return module, dataclasses.replace(run_settings, jit_compile=jit_compile), settings


def _set_up(root_dir: str, module, run_settings: RunSettings, settings, strategy, cleanup) -> tuple:
    """Environments, the algorithm, restored checkpoints, descriptions and the loop of a run."""
    # Worker w's environments are seeded after the other workers' (seed + w * num_envs + i).
    first_seed = run_settings.seed + workers.worker_index(strategy) * run_settings.num_envs
    env = load(
        run_settings.env_name, num_envs=run_settings.num_envs, seed=first_seed,
        **dict(run_settings.env_kwargs or {}),
    )  # fmt: skip
    cleanup.callback(env.close)
    if run_settings.num_eval_episodes and set(run_settings.eval_env_kwargs or {}) - set(
        run_settings.env_kwargs or {}
    ):
        # Keys only the evaluation uses: tried now, not after the whole budget has trained.
        load(run_settings.env_name, num_envs=1, seed=run_settings.seed, **run_settings.eval_kwargs).close()
    observation_spec, action_spec, time_step_spec = spec_utils.get_tensor_specs(env)
    precision = _resolve_precision(module, run_settings, settings, observation_spec, strategy)
    jit_compile = _resolve_jit_compile(module, run_settings, settings, observation_spec, precision, strategy)
    # The setting in force from here on: the agent's, and the hyper-parameters written below.
    run_settings = dataclasses.replace(run_settings, jit_compile=jit_compile)
    with strategy.scope():  # the counters, as the agents' variables (each module's build)
        train_step = train_utils.create_train_step()
        env_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
    with mixed_precision.dtype_policy(precision):
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
    # Only the chief restored from root_dir: every worker starts from its values (nothing on one worker).
    shared = {"env_steps": run.env_steps, "train_step": run.train_step, **algorithm.checkpoint_objects}
    workers.broadcast_from_chief(strategy, workers.shared_variables(shared))
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

    def saved(self) -> bool:
        """Whether both SavedModels and the weights of the current train step are written (the trigger
        writes a SavedModel's ``policy_specs.pbtxt`` last, and a checkpoint's index after its data)."""
        saved_model_dir, _, train_step = self._args
        weights = os.path.join(
            learner.POLICY_CHECKPOINT_DIR, f"policy_checkpoint_{int(train_step.numpy()):010d}"
        )
        files = [
            os.path.join(learner.RAW_POLICY_SAVED_MODEL_DIR, "policy_specs.pbtxt"),
            os.path.join(learner.GREEDY_POLICY_SAVED_MODEL_DIR, "policy_specs.pbtxt"),
            os.path.join(weights, "variables", "variables.index"),
        ]
        return all(os.path.exists(os.path.join(saved_model_dir, path)) for path in files)


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

    def run(self, algorithm: Algorithm) -> dict[str, Any]:
        """Collects and learns until ``total_env_steps``; returns the last results, evaluations, history."""
        settings = self.settings
        total = settings.total_env_steps
        collect_policy = py_tf_eager_policy.PyTFEagerPolicy(
            algorithm.collect_policy, use_tf_function=True, batch_time_steps=False
        )
        driver = self.driver(collect_policy, list(algorithm.observers), algorithm.batched_steps)
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
        with StopRequests() as stop:  # Ctrl-C / SIGTERM: a checkpoint after this iteration, then stop
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
                if algorithm.reset_each_iteration:
                    self.time_step = self.context.env.reset()
                    self.policy_state = driver.policy.get_initial_state(self.context.env.batch_size)
                self.time_step, self.policy_state = driver.run(self.time_step, self.policy_state)
                learn_start = time.perf_counter()
                added = self.context.add_env_steps(algorithm.env_steps_per_iteration)
                previous, steps = steps, self.env_steps()
                trained_before = self.train_step()
                learned = algorithm.learn(steps) or learned
                if self.train_step() > trained_before:  # a loss of this iteration's updates (DQN: none yet)
                    check_finite_loss(learned, steps, self.train_step())
                timer.add(added, driver, learn_start - start,
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
            if settings.policy_save_interval and not self.exporter.saved():
                # The run before was stopped between its last checkpoint and its policy export.
                print(f"Exporting the policy of train step {self.train_step()}: the stopped run had not.")
                self.exporter.save()
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
