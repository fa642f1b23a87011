"""DQN and C51 training through the harness (``train_eval.agent = 'dqn'``): short real runs (CartPole
states, Atari Pong pixels), resume, n-step sequences, the target network, the epsilon schedule, the
exported network, the gin configs and clear errors."""

from __future__ import annotations

import doctest
import glob
import json
import os
import re

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from summaries import summary_tags
from tf_agents.agents.dqn import dqn_agent
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from sit_keras.agents import evaluate, train
from sit_keras.agents.algorithms import dqn
from sit_keras.agents.environments import load
from sit_keras.agents.networks import policy_network, q_networks
from sit_keras.agents.training import checkpoints, harness
from sit_keras.agents.training.evaluation import EVAL_TAGS, EVALUATIONS_FILE
from sit_keras.agents.training.run_settings import RunSettings, check_bindings

CARTPOLE_RUN = {
    "agent": "dqn",
    "env_name": "gymnasium:CartPole-v1",
    "num_envs": 2,
    "algorithm": "dqn",
    "encoder": "mlp",
    "encoder_kwargs": {"units": (16,)},
    "total_env_steps": 160,
    "replay_capacity": 1000,
    "min_replay_size": 40,
    "batch_size": 8,
    "n_step": 3,
    "target_update_period": 10,
    "learning_rate": 1e-3,
    "reward_clip": None,
    "epsilon_decay_steps": 60,
    "eval_interval": 80,
    "num_eval_episodes": 2,
    "eval_num_envs": 2,
    "log_interval": 40,
    "checkpoint_interval": 80,
    "policy_save_interval": 160,
    "summary_interval": 20,
    "progress": False,
}
# Pong through configs/atari/pong_cnn.gin, shrunk: 2 environments, a tiny data-efficient CNN,
# short games; C51 as in the config.
ATARI_BINDINGS = [
    "train_eval.num_envs = 2",
    "train_eval.encoder_kwargs = {'filters': (4, 8), 'output_dim': 16}",
    "train_eval.env_kwargs = {'sticky_action_probability': 0.0, 'terminal_on_life_loss': True, "
    "'max_episode_frames': 2000}",
    "train_eval.eval_env_kwargs = {'max_episode_frames': 400}",
    "train_eval.total_env_steps = 200",
    "dqn.replay_capacity = 1000",
    "dqn.min_replay_size = 60",
    "dqn.batch_size = 8",
    "dqn.n_step = 3",
    "dqn.target_update_period = 10",
    "dqn.epsilon_decay_steps = 50",
    "train_eval.eval_interval = 0",
    "train_eval.num_eval_episodes = 2",
    "train_eval.log_interval = 100",
    "train_eval.checkpoint_interval = 200",
    "train_eval.policy_save_interval = 200",
    "train_eval.summary_interval = 50",
    "train_eval.progress = False",
]
ATARI_CONFIGS = sorted(glob.glob("configs/atari/*.gin"))


def _parse_atari_config(path: str, bindings: list[str] = ()) -> None:
    """A config of configs/atari and ``bindings`` through sit-train's parser, on a clear gin config."""
    gin.clear_config()
    train.parse_gin([path], list(bindings))


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """DQN on CartPole; records the shape of every experience batch the agent is traced with."""
    root_dir = str(tmp_path_factory.mktemp("dqn_cartpole"))
    shapes = []
    original = dqn_agent.DqnAgent._train

    def recording_train(self, experience, weights=None):
        shapes.append(tuple(experience.observation.shape))
        return original(self, experience, weights)

    gin.clear_config()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dqn_agent.DqnAgent, "_train", recording_train)
        results = train.train_eval(root_dir, **CARTPOLE_RUN)
    return root_dir, results, shapes


@pytest.fixture(scope="module")
def atari_c51_run(tmp_path_factory):
    root_dir = str(tmp_path_factory.mktemp("c51_pong"))
    _parse_atari_config("configs/atari/pong_cnn.gin", ATARI_BINDINGS)
    results = train.train_eval(root_dir)
    gin.clear_config()
    return root_dir, results


def test_cartpole_dqn_collects_trains_evaluates_and_logs(cartpole_run):
    root_dir, results, _ = cartpole_run
    start = dqn.learning_starts(40, num_envs=2, n_step=3)
    assert start == 40
    assert results["env_steps"] == 160 and results["frames"] == 160
    # One gradient step at agent step 40 and one per agent step after it.
    assert results["train_step"] == dqn.updates_due(160, start, 1) == 121
    assert results["epsilon"] == pytest.approx(0.01) and np.isfinite(results["loss"])
    assert [e["env_steps"] for e in results["evaluations"]] == [80, 160]
    assert [e["train_step"] for e in results["evaluations"]] == [dqn.updates_due(80, start, 1), 121]
    assert all(e["num_episodes"] == 2 and e["mean_return"] >= 8 for e in results["evaluations"])
    with open(os.path.join(root_dir, EVALUATIONS_FILE)) as f:
        assert json.load(f) == results["evaluations"]
    assert [h["env_steps"] for h in results["history"]] == [40, 80, 120, 160]
    assert {"Losses/td_loss", "Losses/total_loss"} <= summary_tags(os.path.join(root_dir, "train"))
    collect_tags = summary_tags(os.path.join(root_dir, "collect"))
    for tag in [
        "Metrics/AverageReturn",
        "Metrics/epsilon",
        "Metrics/loss",
        "charts/SPS",
        "config/operative_gin",
        "_hparams_/session_start_info",
    ]:
        assert tag in collect_tags, collect_tags
    eval_tags = summary_tags(os.path.join(root_dir, "eval"))
    assert {f"Eval/{tag}" for tag in EVAL_TAGS} <= eval_tags, eval_tags
    for path in [
        "config.gin",
        "policy_network.json",
        "evaluations.json",
        "policies/greedy_policy/saved_model.pb",
    ]:
        assert os.path.exists(os.path.join(root_dir, path)), path
    assert glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index"))
    assert glob.glob(os.path.join(root_dir, checkpoints.REPLAY_BUFFER_DIR, "ckpt-*.index"))


def test_results_carry_the_final_evaluation(cartpole_run):
    """``EvalAverageReturn`` (was ``eval_mean_return``) is the return of the evaluation at the end."""
    _, results, _ = cartpole_run
    assert results["EvalAverageReturn"] == results["evaluations"][-1]["mean_return"]


def test_the_agent_trains_on_n_plus_1_step_sequences(cartpole_run):
    _, _, shapes = cartpole_run
    # n_step + 1 = 4 steps of CartPole's 4 observations; batches of 8 (the learner's first,
    # variable-creating trace has an unknown batch size).
    assert {shape[1:] for shape in shapes} == {(4, 4)}
    assert (8, 4, 4) in shapes


def test_rerun_resumes_counters_target_schedule_and_replay(cartpole_run, capsys):
    root_dir, _, _ = cartpole_run
    checkpoint = tf.train.latest_checkpoint(os.path.join(root_dir, "checkpoints"))
    # The target network's update counter (TF-Agents' Periodically) is part of the agent's checkpoint.
    assert (
        tf.train.load_variable(checkpoint, "agent/_update_target/_counter/.ATTRIBUTES/VARIABLE_VALUE") == 121
    )
    gin.clear_config()
    resumed = train.train_eval(root_dir, **{**CARTPOLE_RUN, "total_env_steps": 240})
    assert "Resumed from" in capsys.readouterr().out
    assert resumed["env_steps"] == 240
    assert resumed["train_step"] == dqn.updates_due(240, 40, 1) == 201
    checkpoint = tf.train.latest_checkpoint(os.path.join(root_dir, "checkpoints"))
    assert (
        tf.train.load_variable(checkpoint, "agent/_update_target/_counter/.ATTRIBUTES/VARIABLE_VALUE") == 201
    )
    # The replay buffer went on from its 80 items per environment (a fresh one would hold 40).
    replay = tf.train.latest_checkpoint(os.path.join(root_dir, checkpoints.REPLAY_BUFFER_DIR))
    assert tf.train.load_variable(replay, "replay_buffer/_last_id/.ATTRIBUTES/VARIABLE_VALUE") == 119
    # Evaluations keep their schedule (multiples of eval_interval) and their history.
    assert [e["env_steps"] for e in resumed["evaluations"]] == [80, 160, 240]
    with open(os.path.join(root_dir, EVALUATIONS_FILE)) as f:
        assert [e["env_steps"] for e in json.load(f)] == [80, 160, 240]


def test_atari_c51_from_the_pong_config(atari_c51_run):
    root_dir, results = atari_c51_run
    assert results["env_steps"] == 200
    assert results["frames"] == 800  # frame skip 4
    assert results["train_step"] == dqn.updates_due(200, 60, 1) == 141
    # eval_interval = 0: the final evaluation only.
    (evaluation,) = results["evaluations"]
    assert evaluation["env_steps"] == 200 and evaluation["frames"] == 800 and evaluation["num_episodes"] == 2
    # Pong scores -21 .. 21; the 400-frame evaluation games are truncated early.
    assert all(-21 <= r <= 21 for r in evaluation["returns"])
    description = policy_network.read_description(root_dir)
    assert description.agent == "c51"
    assert description.network_class == "EncoderCategoricalQNetwork"
    assert description.checkpoint_attribute == "_q_network"
    assert description.extra["min_q_value"] == -10.0 and description.extra["max_q_value"] == 10.0
    assert description.extra["eval_env_kwargs"]["terminal_on_life_loss"] is False
    assert description.env_kwargs["terminal_on_life_loss"] is True
    assert tuple(description.observation_spec.shape) == (84, 84, 4)
    assert {"Losses/critic_loss"} <= summary_tags(os.path.join(root_dir, "train"))


# DQN itself: the CartPole runs; the Atari configs and pipeline: the Pong C51 run above.
@pytest.mark.large
def test_atari_dqn_short_run(tmp_path):
    _parse_atari_config("configs/atari/breakout_cnn.gin", [*ATARI_BINDINGS, "dqn.algorithm = 'dqn'"])
    results = train.train_eval(str(tmp_path))
    gin.clear_config()
    assert results["env_steps"] == 200 and results["train_step"] == 141
    assert policy_network.read_description(str(tmp_path)).agent == "dqn"


def _greedy_from_network(description, net, observations: np.ndarray) -> np.ndarray:
    outputs, _ = net(tf.constant(observations), training=False)
    if description.agent == "c51":
        support = tf.linspace(
            description.extra["min_q_value"], description.extra["max_q_value"], net.num_atoms
        )
        outputs = tf.reduce_sum(tf.nn.softmax(outputs) * tf.cast(support, outputs.dtype), axis=-1)
    return np.argmax(outputs.numpy(), axis=-1)


@pytest.mark.parametrize("run", ["cartpole_run", "atari_c51_run"])
def test_policy_network_json_rebuilds_the_greedy_policy(run, request):
    root_dir = request.getfixturevalue(run)[0]
    description = policy_network.read_description(root_dir)
    net = policy_network.build_network(description)
    policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    saved = evaluate.load_policy(os.path.join(root_dir, "policies", "greedy_policy"))
    env = load(description.env_name, num_envs=2, seed=7, **description.env_kwargs)
    try:
        time_step = env.reset()
        rng = np.random.default_rng(0)
        compared = 0
        for _ in range(12):
            expected = saved.action(time_step).action
            np.testing.assert_array_equal(
                _greedy_from_network(description, net, time_step.observation), expected
            )
            compared += len(expected)
            time_step = env.step(rng.integers(0, description.action_spec.maximum + 1, size=2))
    finally:
        env.close()
    assert compared == 24


def test_epsilon_schedule_values():
    schedule = [
        float(dqn.epsilon_schedule(step, warmup_steps=1600, decay_steps=2000, final_epsilon=0.01))
        for step in (0, 1599, 1600, 2600, 3600, 100_000)
    ]
    assert schedule == pytest.approx([1.0, 1.0, 1.0, 0.505, 0.01, 0.01])
    assert float(dqn.epsilon_schedule(tf.constant(2100, tf.int64), 1600, 2000, 0.01)) == pytest.approx(
        1.0 - 0.99 * 0.25
    )
    # No decay: a switch at the end of the warm-up.
    assert [float(dqn.epsilon_schedule(s, 10, 0, 0.05)) for s in (9, 10)] == pytest.approx([1.0, 0.05])


def test_docstring_examples_run():
    for module in (dqn, q_networks, harness):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_updates_due_counts_one_update_per_period():
    assert [dqn.updates_due(s, start=10, update_period=4) for s in (9, 10, 13, 14, 22)] == [
        0,
        1,
        1,
        2,
        4,
    ]
    # The buffer needs a whole (n + 1)-step sequence in every environment's block.
    assert dqn.learning_starts(min_replay_size=10, num_envs=4, n_step=5) == 24


def test_evaluation_plays_whole_atari_games():
    def eval_kwargs(env_name, env_kwargs, eval_env_kwargs):
        return RunSettings(
            env_name=env_name, env_kwargs=env_kwargs, eval_env_kwargs=eval_env_kwargs
        ).eval_kwargs

    kwargs = eval_kwargs("atari:Pong", {"terminal_on_life_loss": True, "noop_max": 5}, None)
    assert kwargs == {"terminal_on_life_loss": False, "noop_max": 5}
    assert eval_kwargs("atari:Pong", {}, {"terminal_on_life_loss": True}) == {"terminal_on_life_loss": True}
    assert eval_kwargs("gymnasium:CartPole-v1", {"a": 1}, {"b": 2}) == {"a": 1, "b": 2}


# -- n-step sequences and the target network, on hand-made data -------------------------------------

_OBSERVATION_SPEC = tensor_spec.TensorSpec((3,), tf.float32)
_ACTION_SPEC = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1)


def _agent(algorithm: str = "dqn", n_step: int = 3, gamma: float = 0.9, target_update_period: int = 3):
    if algorithm == "c51":
        net = q_networks.EncoderCategoricalQNetwork(
            _OBSERVATION_SPEC, _ACTION_SPEC, "mlp", {"units": (8,)}, num_atoms=5
        )
    else:
        net = q_networks.EncoderQNetwork(_OBSERVATION_SPEC, _ACTION_SPEC, "mlp", {"units": (8,)})
    agent = dqn.make_agent(
        algorithm, ts.time_step_spec(_OBSERVATION_SPEC), _ACTION_SPEC, net,
        optimizer=tf_keras.optimizers.SGD(0.1), epsilon_greedy=0.1, n_step_update=n_step,
        target_update_period=target_update_period, gamma=gamma, min_q_value=-1.0, max_q_value=1.0,
    )  # fmt: skip
    agent.initialize()
    return agent


def _sequences(batch: int, steps: int, seed: int = 0) -> trajectory.Trajectory:
    rng = np.random.default_rng(seed)
    return trajectory.Trajectory(
        step_type=tf.ones((batch, steps), tf.int32),  # MID steps
        observation=tf.constant(rng.normal(size=(batch, steps, 3)), tf.float32),
        action=tf.constant(rng.integers(0, 2, (batch, steps)), tf.int64),
        policy_info=(),
        next_step_type=tf.ones((batch, steps), tf.int32),
        reward=tf.constant(rng.normal(size=(batch, steps)), tf.float32),
        discount=tf.ones((batch, steps), tf.float32),
    )


@pytest.mark.parametrize("algorithm", ["dqn", "c51"])
def test_agents_take_n_plus_1_step_sequences(algorithm):
    agent = _agent(algorithm, n_step=3)
    assert agent.train_sequence_length == 4
    assert np.isfinite(float(agent.train(_sequences(batch=5, steps=4)).loss))
    if algorithm == "dqn":  # DqnAgent checks the length; CategoricalDqnAgent does not
        with pytest.raises(ValueError):
            agent.train(_sequences(batch=5, steps=3))


def test_dqn_n_step_target_discounts_n_rewards():
    agent = _agent("dqn", n_step=3, gamma=0.9)
    experience = _sequences(batch=4, steps=4)
    _, _, next_time_steps = agent._as_transition(experience)
    rewards = experience.reward.numpy()
    expected = rewards[:, 0] + 0.9 * rewards[:, 1] + 0.81 * rewards[:, 2]
    np.testing.assert_allclose(next_time_steps.reward.numpy(), expected, rtol=1e-5, atol=1e-6)
    # TD target: n-step return + gamma * discount * Q(s_{t+3}) = ... + 0.9 ** 3 * Q.
    np.testing.assert_allclose(0.9 * next_time_steps.discount.numpy(), 0.9**3, rtol=1e-6)
    np.testing.assert_array_equal(next_time_steps.observation.numpy(), experience.observation.numpy()[:, 3])


def test_c51_n_step_target_discounts_n_rewards():
    agent = _agent("c51", n_step=3, gamma=0.9)
    experience = _sequences(batch=4, steps=4)
    agent._loss(experience, gamma=0.9)
    rewards = experience.reward.numpy()
    expected = rewards[:, 0] + 0.9 * rewards[:, 1] + 0.81 * rewards[:, 2]
    # Target atoms: n-step return + 0.9 ** 3 * support, from the distribution at s_{t+3}.
    np.testing.assert_allclose(agent._discounted_returns.numpy()[:, 0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent._final_value_discount.numpy(), 0.9**3, rtol=1e-6)


def _fill(buffer: tf_uniform_replay_buffer.TFUniformReplayBuffer, step_types: list[int]) -> None:
    for t, step_type in enumerate(step_types):
        buffer.add_batch(
            trajectory.Trajectory(
                step_type=tf.constant([step_type], tf.int32),
                observation=tf.constant([[float(t), 0.0, 0.0]]),
                action=tf.constant([0], tf.int64),
                policy_info=(),
                next_step_type=tf.constant([0 if step_type == 2 else 1], tf.int32),
                reward=tf.constant([1.0]),
                discount=tf.constant([1.0]),
            )
        )


def test_sampled_sequences_are_consecutive_and_never_start_on_a_last_step():
    tf.random.set_seed(0)
    agent = _agent("dqn")
    buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=1, max_length=32
    )
    # Episodes FIRST MID MID LAST (0 1 1 2), twice, then FIRST MID MID.
    step_types = [0, 1, 1, 2] * 2 + [0, 1, 1]
    _fill(buffer, step_types)
    experience, _ = next(iter(dqn.sample_sequences(buffer, n_step=2, batch_size=64)))
    assert tuple(experience.observation.shape) == (64, 3, 3)
    times = experience.observation.numpy()[:, :, 0].astype(int)
    np.testing.assert_array_equal(np.diff(times, axis=1), 1)
    starts = set(times[:, 0].tolist())
    # 9 windows of 3 steps fit in 11 steps; the two that start on LAST (t = 3, 7) are skipped.
    assert starts == {0, 1, 2, 4, 5, 6, 8}


def test_target_network_is_a_separate_copy_that_follows_the_period():
    agent = _agent("dqn", n_step=1, target_update_period=3)
    online, target = agent._q_network, agent._target_q_network
    assert online is not target
    assert not {id(v) for v in online.variables} & {id(v) for v in target.variables}

    def same() -> bool:
        return all(
            np.array_equal(a.numpy(), b.numpy())
            for a, b in zip(online.variables, target.variables, strict=True)
        )

    assert same()  # initialize() copies the weights
    snapshots = []
    for step in range(1, 7):
        agent.train(_sequences(batch=8, steps=2, seed=step))
        snapshots.append((step, same()))
    # Copied after every third gradient step only.
    assert snapshots == [(1, False), (2, False), (3, True), (4, False), (5, False), (6, True)]


# -- networks ---------------------------------------------------------------------------------------


def test_q_networks_shapes_and_fresh_copies():
    observation_spec = tensor_spec.BoundedTensorSpec((84, 84, 4), tf.uint8, 0, 255)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 5)
    images = tf.constant(np.random.default_rng(0).integers(0, 256, (3, 2, 84, 84, 4)), tf.uint8)
    q_net = q_networks.EncoderQNetwork(observation_spec, action_spec)
    q_values, _ = q_net(images[:, 0])
    assert q_values.shape == (3, 6)
    assert q_net(images)[0].shape == (3, 2, 6)
    # Data-efficient Rainbow's CNN: conv 32 and 64 (5x5, stride 5, "same": 84 -> 17 -> 4), dense 256.
    (encoder,) = q_net._torso.layers
    assert [(c.filters, c.kernel_size, c.strides) for c in encoder.convs] == [
        (32, (5, 5), (5, 5)),
        (64, (5, 5), (5, 5)),
    ]
    assert (
        q_net.count_params()
        == (5 * 5 * 4 + 1) * 32 + (5 * 5 * 32 + 1) * 64 + (4 * 4 * 64 + 1) * 256 + 257 * 6
    )
    c51 = q_networks.EncoderCategoricalQNetwork(
        observation_spec, action_spec, encoder_kwargs={"filters": (4,), "output_dim": 8}, num_atoms=11
    )
    assert c51.num_atoms == 11
    assert c51(images[:, 0])[0].shape == (3, 6, 11)
    assert c51(images)[0].shape == (3, 2, 6, 11)
    target = c51.copy(name="target")
    target.create_variables()
    assert not {id(v) for v in c51.variables} & {id(v) for v in target.variables}
    assert not np.allclose(target(images[:, 0])[0].numpy(), c51(images[:, 0])[0].numpy())


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda o: q_networks.EncoderQNetwork(o, tensor_spec.BoundedTensorSpec((), tf.float32, 0.0, 1.0)),
            "discrete",
        ),
        (
            lambda o: q_networks.EncoderQNetwork(o, tensor_spec.BoundedTensorSpec((2,), tf.int64, 0, 3)),
            "scalar",
        ),
        (lambda o: q_networks.EncoderQNetwork(o, _ACTION_SPEC, encoder="resnet"), "Unknown encoder 'resnet'"),
        (lambda o: q_networks.EncoderCategoricalQNetwork(o, _ACTION_SPEC, "mlp", num_atoms=1), "num_atoms"),
    ],
)
def test_q_networks_reject_bad_settings(make, match):
    with pytest.raises(ValueError, match=match):
        make(_OBSERVATION_SPEC)


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"algorithm": "rainbow"}, "Unknown algorithm 'rainbow'"),
        ({"n_step": 0}, "dqn.n_step must be >= 1"),
        ({"algorithm": "c51", "min_q_value": 1.0, "max_q_value": 1.0}, "min_q_value must be < max_q_value"),
        ({"encoder": "resnet"}, "Unknown encoder 'resnet'"),
        ({"env_name": "gymnasium:NoSuchEnv-v0"}, "NoSuchEnv"),
        ({"total_env_steps": -5}, "total_env_steps must be >= 1"),
        ({"total_agent_steps": 100}, r"Unknown settings \['total_agent_steps'\]"),
        ({"eval_episodes": 2}, r"Unknown settings \['eval_episodes'\]"),
    ],
)
def test_bad_settings_are_clear(tmp_path, overrides, match):
    """A SettingsError (a ValueError) that names the setting; the run folder is not created."""
    root_dir = tmp_path / "run"
    gin.clear_config()
    with pytest.raises(harness.SettingsError, match=match):
        train.train_eval(str(root_dir), **{**CARTPOLE_RUN, **overrides})
    assert not root_dir.exists()


# -- gin configs ------------------------------------------------------------------------------------

GAMES = {"spaceinvaders": "SpaceInvaders", "breakout": "Breakout", "pong": "Pong",
         "kungfumaster": "KungFuMaster", "mspacman": "MsPacman"}  # fmt: skip


def test_atari_configs_parse_and_bind_the_dqn_trainer():
    expected = {"configs/atari/dqn.gin"} | {
        f"configs/atari/{game}_{model}.gin" for game in GAMES for model in ("cnn", "siet")
    }
    assert set(ATARI_CONFIGS) == expected
    for path in ATARI_CONFIGS:
        with open(path) as f:
            bindings = [
                line for line in f if re.match(r"^[A-Za-z_]", line) and not line.startswith("include")
            ]
        assert bindings[0].strip() == "train_eval.agent = 'dqn'", path
        _parse_atari_config(path)
        assert gin.query_parameter("train_eval.agent") == "dqn"
        assert gin.query_parameter("dqn.algorithm") == "c51"
        assert gin.query_parameter("dqn.n_step") == 20
        assert gin.query_parameter("dqn.target_update_period") == 2000
        assert gin.query_parameter("train_eval.total_env_steps") == 100_000
        # Every binding is read by a DQN run (train_eval.* and dqn.*).
        check_bindings("dqn")
        stem = os.path.basename(path)[: -len(".gin")]
        if stem != "dqn":
            game, model = stem.rsplit("_", 1)
            assert gin.query_parameter("train_eval.env_name") == f"atari:{GAMES[game]}"
            encoder = gin.query_parameter("train_eval.encoder")
            assert encoder == {"cnn": "data_efficient_cnn", "siet": "siet"}[model]
    gin.clear_config()


def test_siet_config_builds_table_2_atari_siet():
    _parse_atari_config("configs/atari/pong_siet.gin")
    kwargs = gin.query_parameter("train_eval.encoder_kwargs")
    gin.clear_config()
    observation_spec = tensor_spec.BoundedTensorSpec((84, 84, 4), tf.uint8, 0, 255)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 5)
    net = q_networks.EncoderCategoricalQNetwork(observation_spec, action_spec, "siet", kwargs)
    (encoder,) = net._torso.layers
    assert (encoder.local_layers, encoder.global_layers, encoder.dim, encoder.output_dim) == (1, 2, 128, 256)
    assert encoder.patch_grid == (7, 7)
    # About 309k weights in the paper (Table 2, Table 3; "3x smaller than the CNN").
    assert 250_000 < encoder.count_params() < 320_000


def test_bindings_that_a_dqn_run_does_not_read_are_refused(tmp_path):
    """sit-train's parser takes the configs; a binding of another agent's settings (SAC's here)
    or of an old trainer's name is an error that names it, before the run folder is made."""
    _parse_atari_config("configs/atari/pong_cnn.gin", ["sac.batch_size = 4"])
    try:
        with pytest.raises(harness.SettingsError, match=r"'dqn' run does not read: sac.batch_size"):
            train.train_eval(str(tmp_path / "run"))
    finally:
        gin.clear_config()
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="dqn_train_eval"):
        _parse_atari_config("configs/atari/pong_cnn.gin", ["dqn_train_eval.n_step = 3"])
    gin.clear_config()
