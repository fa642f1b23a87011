"""PPO (+ DrAC) for the harness: ``train_eval.agent = 'ppo'``, hyper-parameters ``ppo.*``.

One iteration: ``FixedLengthDriver`` runs the collect policy for
``collect_steps_per_env + 1`` steps of ``num_envs`` environments into a
``TFUniformReplayBuffer``; TF-Agents' ``PPOLearner`` computes GAE returns and
advantages (``agent.preprocess_sequence``) and runs ``num_epochs`` epochs of
``num_minibatches`` shuffled minibatches (of single steps; for recurrent
networks, of whole environment sequences); the buffer is cleared. The last
step of each environment only bootstraps the values (its own advantage is
unknown), so ``collect_steps_per_env`` steps per environment are trained on
and counted. Evaluation runs the stochastic policy (``agent.policy``, as
trained; ``sit-eval`` also runs the greedy one).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import gin
import tensorflow as tf
import tf_keras
from tf_agents.networks import utils as network_utils
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.specs import tensor_spec
from tf_agents.train import ppo_learner
from tf_agents.utils import common

from sit_keras.agents.algorithms import warm_start
from sit_keras.agents.algorithms.augmentation import make_augmentation
from sit_keras.agents.algorithms.ppo_agent import DrACPPOAgent
from sit_keras.agents.networks import encoders
from sit_keras.agents.training import checkpoints, settings_check, workers
from sit_keras.agents.training.algorithm import Algorithm, Run
from sit_keras.agents.training.run_settings import RunSettings


@gin.configurable("ppo")
@dataclasses.dataclass(frozen=True)
class PPO:
    """PPO's hyper-parameters (gin: ``ppo.<name>``).

    Defaults: Raileanu et al. 2021 (PPO + DrAC on Procgen) with the SiT
    paper's 2 epochs (section 5.2); its 96 minibatches do not divide the
    64 x 256 steps of an iteration, so 128 (of 128 steps each), as the
    Procgen configs.

    Attributes:
      fc_layer_params: dense layers after the encoder (actor and critic).
      value_encoder, value_encoder_kwargs: the critic's torso; ``None``: the
        actor's (separate weights). Only the actor is deployed, so a cheaper
        critic (e.g. ``"cnn"``) speeds up training without changing the policy.
      shared_torso: the value head on the actor's torso (one encoder trained by
        the policy and value losses together, as IMPALA's network in the SiT
        paper's MiniGrid runs) instead of a critic of its own; needs
        ``value_encoder=None`` and a feed-forward encoder.
      collect_steps_per_env: ``T`` (steps per environment and iteration).
      learning_rate, anneal_learning_rate, adam_epsilon: Adam; annealing
        decays the rate linearly to 0 over the run's gradient steps (PPO's
        ``anneal_lr``): the late updates of a nearly solved task then cannot undo it.
      num_epochs, num_minibatches: passes over an iteration's data and the
        minibatches it is split into (``num_envs * T`` must divide; recurrent
        networks train on whole sequences, ``num_envs`` must divide).
      max_grad_norm: gradient clipping by global norm.
      normalize_advantages: scale each minibatch's advantages to unit variance
        (TF-Agents' PPO); False uses the GAE advantages as they are (IMPALA).
      drac_coef, augmentation: DrAC (0 disables it).
      initial_actor_dir: a training folder (e.g. a ``sit-distill`` student's)
        whose acting network is this run's actor: the run starts from its
        newest weights instead of random ones (``warm_start``); the critic
        starts afresh. ``None``: random weights. A resumed run reads its own
        checkpoint instead, and no longer needs the folder.
      initial_action_probabilities: a discrete actor's policy at the start, the
        same in every state (its logits' bias set to their logs,
        ``warm_start.set_action_probabilities``); e.g. ``(0.7, 0.1, 0.1, 0.1)``
        moves MiniGrid's agent forward more often than a uniform policy while
        it has learned nothing (docs/lavacrossing.md). ``None``: the random
        start (near uniform).
      initial_action_std: a continuous actor's sampling standard deviation at
        the start (its state-independent std set to this); ``None`` keeps the
        network's (a cloned actor's is untrained: 0.69 of the action range).
      reset_each_iteration: start every iteration with the environments reset
        (new episodes, the recurrent state at its initial value) instead of
        going on mid-episode. A recurrent network trains on each sequence from
        its initial state (as TF-Agents' PPO): mid-episode, that is not the
        state it collected with, and the importance ratios compare two
        different policies. Episodes are cut at ``collect_steps_per_env``
        steps, so set it to the episode length.
      actor_frozen_env_steps: the first environment steps train the critic
        alone (the policy, entropy and KL terms weigh 0): a started actor is
        not moved by the advantages of a critic that has not learned its
        returns yet. Rounded up to whole iterations.
    """

    fc_layer_params: Sequence[int] = ()
    value_encoder: str | None = None
    value_encoder_kwargs: Mapping[str, Any] | None = None
    shared_torso: bool = False
    collect_steps_per_env: int = 256
    learning_rate: float = 5e-4
    anneal_learning_rate: bool = False
    adam_epsilon: float = 1e-5
    discount: float = 0.999
    gae_lambda: float = 0.95
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    clip_ratio: float = 0.2
    max_grad_norm: float = 0.5
    num_epochs: int = 2
    num_minibatches: int = 128
    normalize_rewards: bool = True
    normalize_advantages: bool = True
    drac_coef: float = 0.1
    augmentation: str = "crop"
    initial_actor_dir: str | None = None
    initial_action_probabilities: Sequence[float] | None = None
    initial_action_std: float | None = None
    reset_each_iteration: bool = False
    actor_frozen_env_steps: int = 0

    def __post_init__(self):
        settings_check.check(self, "ppo", RANGES)
        for name in ("collect_steps_per_env", "num_epochs", "num_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"ppo.{name} must be >= 1. Received: {name}={getattr(self, name)}")
        probabilities = self.initial_action_probabilities
        if probabilities is not None:
            # A probability of 0 would be a logit of -inf: an action that could never be learned.
            if not all(isinstance(p, (int, float)) and p > 0 for p in probabilities) or not math.isclose(
                sum(probabilities), 1.0, abs_tol=1e-6
            ):
                raise ValueError(
                    "ppo.initial_action_probabilities must be positive numbers that sum to 1. "
                    f"Received: {probabilities!r}"
                )


SETTINGS = PPO
# Checked before the run starts (settings_check): a negative rate would train to NaN.
RANGES = {
    "learning_rate": settings_check.POSITIVE, "adam_epsilon": settings_check.POSITIVE,
    "discount": settings_check.FRACTION, "gae_lambda": settings_check.FRACTION,
    "entropy_coef": settings_check.NON_NEGATIVE, "value_coef": settings_check.NON_NEGATIVE,
    "clip_ratio": settings_check.POSITIVE, "max_grad_norm": settings_check.POSITIVE,
    "drac_coef": settings_check.NON_NEGATIVE, "initial_action_std": settings_check.POSITIVE,
    "actor_frozen_env_steps": settings_check.NON_NEGATIVE,
}  # fmt: skip


def defaults(run: RunSettings, settings: PPO) -> dict[str, Any]:
    """The run defaults for PPO (Procgen, Raileanu et al. 2021). Logs every iteration."""
    num_envs = run.num_envs or 64
    return {
        "env_name": "procgen:caveflyer",
        "num_envs": num_envs,
        "encoder": "sit",
        "total_env_steps": 25_000_000,
        "log_interval": num_envs * settings.collect_steps_per_env,
        "summary_interval": 1,
        "eval_interval": 0,
        "num_eval_episodes": 10,
        "checkpoint_interval": 100_000,
        "policy_save_interval": 500_000,
    }


def minibatch_size(run: RunSettings, settings: PPO) -> int:
    """Observations per gradient step: an iteration's rollout split into ``num_minibatches``."""
    return max(1, run.num_envs * settings.collect_steps_per_env // settings.num_minibatches)


def stored_observations(run: RunSettings, settings: PPO) -> tuple[int, str]:
    """Observations kept at once (a rollout of ``T + 1`` steps per environment) and their binding."""
    return run.num_envs * (settings.collect_steps_per_env + 1), "ppo.collect_steps_per_env"


def check(run: RunSettings, settings: PPO) -> None:
    """Raises ``ValueError`` for settings that do not fit together (before the run starts)."""
    encoders.check_encoder(run.encoder, "ppo")
    if settings.value_encoder is not None:
        encoders.check_encoder(settings.value_encoder, "ppo")
    if settings.shared_torso and settings.value_encoder is not None:
        raise ValueError(
            f"ppo.shared_torso puts the value head on the actor's encoder, so ppo.value_encoder must "
            f"be None. Received: value_encoder={settings.value_encoder!r}"
        )
    if settings.shared_torso and run.encoder in encoders.RECURRENT_ENCODERS:
        raise ValueError(f"ppo.shared_torso needs a feed-forward encoder. Received: encoder={run.encoder!r}")
    steps_per_iteration = run.num_envs * settings.collect_steps_per_env
    if steps_per_iteration % settings.num_minibatches:
        raise ValueError(
            f"num_envs * collect_steps_per_env = {steps_per_iteration} must be a multiple of "
            f"num_minibatches = {settings.num_minibatches}."
        )
    # Recurrent networks (AttentionNeuron) train on whole sequences, split by environment.
    recurrent = {run.encoder, settings.value_encoder} & set(encoders.RECURRENT_ENCODERS)
    if recurrent and run.num_envs % settings.num_minibatches:
        raise ValueError(
            f"With recurrent networks ({', '.join(sorted(recurrent))}) a minibatch is a set of whole "
            f"environment sequences: num_envs = {run.num_envs} must be a multiple of "
            f"num_minibatches = {settings.num_minibatches}."
        )
    if settings.drac_coef > 0:
        make_augmentation(settings.augmentation, 64)  # an unknown name fails here


def build(run: Run, settings: PPO) -> Algorithm:
    """``DrACPPOAgent`` with ``PPOLearner`` fed one iteration at a time (``IterationData``)."""
    rs = run.settings
    T = settings.collect_steps_per_env
    steps_per_iteration = rs.num_envs * T
    actor_kwargs = encoders.actor_network_kwargs(rs.encoder, rs.encoder_kwargs, settings.fc_layer_params)
    agent = run.make_agent(lambda: _agent(run, settings, actor_kwargs, steps_per_iteration))
    recurrent = bool(agent.actor_net.state_spec or agent._value_net.state_spec)
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=rs.num_envs, max_length=T + 1
    )
    iterations = IterationData(
        agent, replay_buffer, rs.num_envs, T, settings.num_minibatches if recurrent else None
    )
    ppo = run.learner(
        agent,
        WorkerPPOLearner,
        experience_dataset_fn=iterations.experience_dataset,
        normalization_dataset_fn=iterations.normalization_dataset,
        num_samples=iterations.num_samples,
        num_epochs=settings.num_epochs,
        minibatch_size=None if recurrent else steps_per_iteration // settings.num_minibatches,
        shuffle_buffer_size=steps_per_iteration,
    )

    def learn(unused_env_steps: int) -> dict[str, float]:
        iterations.put()
        loss_info = ppo.run()
        return {"loss": float(loss_info.loss)} if loss_info is not None else {}

    return Algorithm(
        agent=agent,
        eval_policy=agent.policy,
        checkpoint_objects={"agent": agent},
        description={
            "agent": "ppo",
            "network": agent.actor_net,
            "network_kwargs": actor_kwargs,
            "checkpoint_attribute": "_actor_net",
        },
        # PPO's buffer holds one iteration and is cleared after it: nothing to resume from.
        replay_buffer=None,
        close=iterations.close,
        collect_policy=agent.collect_policy,
        observers=[replay_buffer.add_batch],
        batched_steps=T + 1,
        env_steps_per_iteration=steps_per_iteration,
        learn=learn,
        reset_each_iteration=settings.reset_each_iteration,
    )


class WorkerPPOLearner(ppo_learner.PPOLearner):
    """TF-Agents' ``PPOLearner``, where each worker trains on the whole of its own iteration.

    ``PPOLearner`` shares an iteration's minibatches among all the replicas in
    sync, as if one input pipeline fed them. Under ``MultiWorkerMirroredStrategy``
    each worker has a pipeline of its own experience, so a worker would train on
    1 / workers of it and leave the rest to the next iteration. Here each
    worker's minibatches are shared among its own replicas only: one train step
    averages the gradients of one minibatch per replica, of every worker. The
    reward normaliser, which each worker updates from its own experience, then
    takes the chief's statistics, so that every worker scales rewards alike.
    With one worker this is ``PPOLearner``, whose input pipelines it builds
    without tf.data's autotuning (``_create_datasets``).
    """

    def __init__(self, *args, strategy: tf.distribute.Strategy, **kwargs):
        super().__init__(*args, strategy=strategy, **kwargs)
        self._strategy = strategy
        self.num_replicas = workers.num_local_replicas(strategy)

    def _create_datasets(self, strategy: tf.distribute.Strategy) -> None:
        """``PPOLearner``'s two endless pipelines, as TF-Agents builds them, but without tf.data's autotuning.

        Each ``learner.run()`` reads one iteration from ``IterationData`` through
        a ``counter().flat_map`` pipeline. With autotuning on, each pipeline's
        iterator has a model thread that sleeps between optimisations, for up to
        60 s once a run has gone on for a while, and that the iterator's deletion
        waits for: collecting a finished run's garbage then took tens of seconds
        instead of half a second (``benchmarks/finished_run_collection.py``), a
        stall for the next run or test in the same process. These pipelines
        (cache, shuffle, batch) have nothing to tune.
        """
        untuned = tf.data.Options()
        untuned.autotune.enabled = False

        def experience(_) -> tf.data.Dataset:
            return tf.data.Dataset.counter().flat_map(self._one_iteration).with_options(untuned)

        normalization = tf.data.Dataset.counter().flat_map(lambda _: self._normalization_dataset_fn())
        self._normalization_dataset = normalization.with_options(untuned)
        self._normalization_iterator = iter(self._normalization_dataset)
        with strategy.scope():
            if strategy.num_replicas_in_sync > 1:
                self._train_dataset = strategy.distribute_datasets_from_function(experience)
            else:
                self._train_dataset = experience(0)
            self._train_iterator = iter(self._train_dataset)

    def _one_iteration(self, _) -> tf.data.Dataset:
        """One iteration's data, ``num_epochs`` times: whole sequences, or shuffled minibatches of steps."""
        data = self._experience_dataset_fn().take(self._num_samples).cache().repeat(self._num_epochs)
        if not self._minibatch_size:
            return data
        # Steps from any sequences may share a minibatch: PPO's loss handles episode boundaries.
        squash = network_utils.BatchSquash(2).flatten
        steps = data.map(lambda sequence, info: tf.nest.map_structure(squash, (sequence, info))).unbatch()
        steps = steps.shuffle(self._shuffle_buffer_size).batch(1, drop_remainder=True)
        return steps.batch(self._minibatch_size, drop_remainder=True)

    def _update_normalizers(self, iterator) -> int:
        frames = super()._update_normalizers(iterator)
        normalizers = (self._agent._observation_normalizer, self._agent._reward_normalizer)
        variables = [v for normalizer in normalizers if normalizer is not None for v in normalizer.variables]
        workers.broadcast_from_chief(self._strategy, variables)
        return frames


def _agent(
    run: Run, settings: PPO, actor_kwargs: Mapping[str, Any], steps_per_iteration: int
) -> DrACPPOAgent:
    """The actor and value networks and the agent (``Run.make_agent`` calls it under the strategy)."""
    actor_net = encoders.actor_network(run.observation_spec, run.action_spec, **actor_kwargs)
    if settings.initial_actor_dir is not None and not checkpoints.has_checkpoint(run.root_dir):
        _start_from(actor_net, actor_kwargs, settings.initial_actor_dir, run)
    if settings.initial_action_std is not None:
        warm_start.set_action_std(actor_net, settings.initial_action_std)
    if settings.initial_action_probabilities is not None:
        warm_start.set_action_probabilities(actor_net, settings.initial_action_probabilities)
    if settings.shared_torso:
        value_net = encoders.shared_value_network(actor_net)
    else:
        value_encoder, value_kwargs = settings.value_encoder, settings.value_encoder_kwargs
        if value_encoder is None:
            value_encoder, value_kwargs = run.settings.encoder, run.settings.encoder_kwargs
        value_net = encoders.value_network(
            run.observation_spec, value_encoder, value_kwargs, settings.fc_layer_params
        )
    observation_shape = run.observation_spec.shape
    image_size = int(observation_shape[0]) if observation_shape.rank == 3 else 0
    return DrACPPOAgent(
        run.time_step_spec,
        run.action_spec,
        optimizer=tf_keras.optimizers.Adam(
            learning_rate=_learning_rate(settings, run.settings.total_env_steps, steps_per_iteration),
            epsilon=settings.adam_epsilon,
        ),
        actor_net=actor_net,
        value_net=value_net,
        greedy_eval=False,
        importance_ratio_clipping=settings.clip_ratio,
        lambda_value=settings.gae_lambda,
        discount_factor=settings.discount,
        entropy_regularization=settings.entropy_coef,
        value_pred_loss_coef=settings.value_coef,
        num_epochs=1,  # the learner repeats the data num_epochs times
        use_gae=True,
        use_td_lambda_return=True,
        normalize_rewards=settings.normalize_rewards,
        normalize_observations=False,
        gradient_clipping=settings.max_grad_norm,
        compute_value_and_advantage_in_train=False,
        update_normalizers_in_train=False,
        train_step_counter=run.train_step,
        augmentation=make_augmentation(settings.augmentation, image_size) if settings.drac_coef > 0 else None,
        drac_coef=settings.drac_coef,
        normalize_advantages=settings.normalize_advantages,
        actor_frozen_train_steps=_frozen_train_steps(settings, steps_per_iteration),
    )


def _start_from(actor_net, actor_kwargs: Mapping[str, Any], actor_dir: str, run: Run) -> None:
    """``ppo.initial_actor_dir`` of a new run (a resumed one reads its own checkpoint, not that folder):
    the actor's weights from the folder's newest checkpoint, once its network is checked to be this one."""
    setting = "ppo.initial_actor_dir"
    description = warm_start.read_folder(actor_dir, setting)
    warm_start.check_same_actor(description, type(actor_net).__name__, actor_kwargs, setting, actor_dir)
    warm_start.check_same_specs(description, run.observation_spec, run.action_spec, setting, actor_dir)
    warm_start.load_actor(actor_net, description, actor_dir)


def _frozen_train_steps(settings: PPO, steps_per_iteration: int) -> int:
    """``ppo.actor_frozen_env_steps`` in gradient steps: whole iterations of epochs x minibatches."""
    iterations = -(-settings.actor_frozen_env_steps // steps_per_iteration)  # ceil
    return iterations * settings.num_epochs * settings.num_minibatches


def _learning_rate(settings: PPO, total_env_steps: int, steps_per_iteration: int):
    if not settings.anneal_learning_rate:
        return settings.learning_rate
    iterations = -(-total_env_steps // steps_per_iteration)  # ceil
    return tf_keras.optimizers.schedules.PolynomialDecay(
        settings.learning_rate,
        decay_steps=iterations * settings.num_epochs * settings.num_minibatches,
        end_learning_rate=0.0,
    )


class IterationData:
    """Hands each iteration's trajectories to ``PPOLearner``'s datasets, through blocking queues.

    The learner reads its experience and normalization datasets as endless
    streams, one element per ``learner.run()``, behind tf.data's prefetching,
    which starts on the next element as soon as the last minibatch of the
    current one is taken: before the next collection. Reading the replay
    buffer there gives the previous iteration's data again, or an empty
    buffer once it is cleared (an error). Here the loop ``put``s an
    iteration's data after collecting it, into queues of one element that
    the datasets' reads wait on. GAE (``agent.preprocess_sequence``) runs in
    ``put`` on whole sequences, with the reward normalizer as it was before
    this iteration's update (which ``learner.run`` does), so every run
    computes the same advantages.

    Feed-forward networks: one element of all ``(num_envs, T)`` steps, which
    the learner shuffles into minibatches of single steps. Recurrent networks
    (``num_minibatches`` given): ``num_minibatches`` elements of
    ``num_envs / num_minibatches`` whole sequences each (environments
    shuffled once per iteration, the same split in every epoch: the learner
    caches the elements), and the normalizers read each step once.
    """

    def __init__(self, agent, replay_buffer, num_envs: int, steps: int, num_minibatches: int | None):
        self._agent = agent
        self._replay_buffer = replay_buffer
        self._num_envs = num_envs
        self._num_minibatches = num_minibatches
        self.num_samples = num_minibatches or 1
        self._preprocess = common.function(agent.preprocess_sequence)
        # The last step of each environment only bootstraps the values.
        raw = tensor_spec.zero_spec_nest(agent.collect_data_spec, outer_dims=(num_envs, steps + 1))
        self._raw = self._queue(self._drop_bootstrap_step(raw))
        self._preprocessed = self._queue(self._drop_bootstrap_step(self._preprocess(raw)))

    @staticmethod
    def _drop_bootstrap_step(trajectories):
        return tf.nest.map_structure(lambda t: t[:, :-1], trajectories)

    @staticmethod
    def _queue(example) -> tuple[tf.queue.FIFOQueue, Any]:
        flat = tf.nest.flatten(example)
        queue = tf.queue.FIFOQueue(1, [t.dtype for t in flat], shapes=[t.shape for t in flat])
        return queue, example

    def put(self) -> None:
        """Queues the replay buffer's trajectories (raw, and with advantages) and clears it."""
        trajectories = self._replay_buffer.gather_all()
        preprocessed = self._preprocess(trajectories)
        if self._num_minibatches is not None:
            # The environments in a new order each iteration, drawn here from the run's seed: in the
            # datasets' functions, tf.data warns that a random op falls back on the outer graph's seed.
            order = tf.random.shuffle(tf.range(self._num_envs))
            preprocessed = tf.nest.map_structure(lambda t: tf.gather(t, order), preprocessed)
        for (queue, _), data in ((self._raw, trajectories), (self._preprocessed, preprocessed)):
            queue.enqueue(tf.nest.flatten(self._drop_bootstrap_step(data)))
        self._replay_buffer.clear()

    def _dataset(self, source) -> tf.data.Dataset:
        queue, example = source

        # Plain TF code: no AutoGraph conversion needed.
        @tf.autograph.experimental.do_not_convert
        def take(_):
            values = queue.dequeue()  # one tensor for a one-component queue
            return tf.nest.pack_sequence_as(example, values if isinstance(values, list) else [values])

        dataset = tf.data.Dataset.range(1).map(take)
        if self._num_minibatches is None:
            return dataset.map(lambda t: (t, ()))
        return dataset.flat_map(self._split_environments)

    @tf.autograph.experimental.do_not_convert
    def _split_environments(self, trajectories) -> tf.data.Dataset:
        n = self._num_envs

        def split(t):
            shape = tf.concat([[self._num_minibatches, n // self._num_minibatches], tf.shape(t)[1:]], 0)
            return tf.reshape(t, shape)

        parts = tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(split, trajectories))
        return parts.map(lambda part: (part, ()))

    def experience_dataset(self) -> tf.data.Dataset:
        return self._dataset(self._preprocessed)

    def normalization_dataset(self) -> tf.data.Dataset:
        return self._dataset(self._raw)

    def close(self) -> None:
        """Releases the datasets' pending reads (their prefetch threads) at the end of training."""
        for queue, _ in (self._raw, self._preprocessed):
            queue.close(cancel_pending_enqueues=True)
