"""SAC with TF-Agents: short runs (states, pixels), resume, gradient routing, export round trip, configs."""

from __future__ import annotations

import glob
import os
import shutil

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_agents.agents.sac import sac_agent
from tf_agents.policies import actor_policy, greedy_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from sit_keras.agents import evaluate, policy_network, sac_networks, train
from sit_keras.agents.sac_train import _starts_a_transition, sac_train_eval

# PolicySaver records the squashed Normal's type spec; loading it needs tf_agents imported (it is).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Encoding a StructuredValue with type tf_agents.distributions:UserWarning"
)

# Pendulum, cut to 50-step episodes: one continuous action in [-2, 2]. 40 random steps, then 40
# iterations of 4 environment steps and 4 gradient steps. The shared "mlp" encoder has weights (16
# units) so that the export round trip restores an encoder too.
SHORT_RUN = {
    "env_name": "gymnasium:Pendulum-v1",
    "env_kwargs": {"max_episode_steps": 50},
    "encoder": "mlp",
    "encoder_kwargs": {"units": (16,)},
    "actor_fc_layer_params": (32,),
    "critic_fc_layer_params": (32,),
    "total_env_steps": 200,
    "initial_collect_steps": 40,
    "collect_steps_per_iteration": 4,
    "train_steps_per_iteration": 4,
    "replay_capacity": 1000,
    "batch_size": 32,
    "log_interval": 80,
    "checkpoint_interval": 80,
    "policy_save_interval": 200,
    "eval_interval": 200,
    "num_eval_episodes": 2,
    "progress": False,
}

ENCODER_KERNEL = "agent/_critic_network_1/_encoder/layer_with_weights-0/kernel/.ATTRIBUTES"
TINY_CNN = {"filters": (4,), "strides": 4, "output_dim": 16}
TINY_SIET = {
    "dim": 8, "num_heads": 2, "stem_kernel_size": 0, "pool_size": 1, "window": 4,
    "local_layers": 1, "global_layers": 1, "output_dim": 8,
}  # fmt: skip


def _tags(log_dir: str) -> set[str]:
    tags = set()
    for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root_dir = str(tmp_path_factory.mktemp("sac"))
    gin.clear_config()
    return root_dir, sac_train_eval(root_dir, **SHORT_RUN)


def test_state_run_collects_trains_evaluates_and_logs(trained_run):
    root_dir, results = trained_run
    assert results["env_steps"] == 200
    # One gradient step per environment step after the 40 random ones.
    assert results["train_step"] == 160
    assert [h["env_steps"] for h in results["history"]] == [120, 200]
    assert np.isfinite(results["AverageReturn"]) and results["AverageEpisodeLength"] == 50
    assert results["EvalAverageEpisodeLength"] == 50 and np.isfinite(results["EvalAverageReturn"])
    assert 0 < results["alpha"] < 1 and results["SPS"] > 0
    for tag in ["Losses/critic_loss", "Losses/actor_loss", "Losses/alpha_loss"]:
        assert tag in _tags(os.path.join(root_dir, "train"))
    collect_tags = _tags(os.path.join(root_dir, "collect"))
    for tag in [
        "Metrics/AverageReturn",
        "Eval/EvalAverageReturn",
        "charts/SPS",
        "charts/alpha",
        "charts/train_fraction",
        "config/operative_gin",
        "_hparams_/session_start_info",
    ]:
        assert tag in collect_tags, collect_tags
    assert os.path.exists(os.path.join(root_dir, "config.gin"))
    assert glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index"))
    assert glob.glob(os.path.join(root_dir, "replay_buffer", "ckpt-*.index"))
    assert os.path.exists(os.path.join(root_dir, "policies", "greedy_policy", "saved_model.pb"))


def test_rerun_resumes_counters_and_replay_buffer(trained_run, tmp_path, capsys):
    root_dir = str(tmp_path / "resumed")
    shutil.copytree(trained_run[0], root_dir)  # the other tests keep the first run's outputs
    gin.clear_config()
    resumed = sac_train_eval(root_dir, **{**SHORT_RUN, "total_env_steps": 240, "policy_save_interval": 0})
    assert "at 200 environment steps" in capsys.readouterr().out
    # The restored buffer needs no new random steps: 10 more iterations, 40 more gradient steps.
    assert resumed["env_steps"] == 240
    assert resumed["train_step"] == 200


def test_description_rebuilds_the_trained_actor(trained_run):
    """policy_network.json + the checkpoint give the exported greedy policy's actions exactly."""
    root_dir, _ = trained_run
    description = policy_network.read_description(root_dir)
    assert description.agent == "sac" and description.network_class == "SacActorNetwork"
    assert description.checkpoint_attribute == "_actor_network"
    actor = policy_network.build_network(description)
    policy_network.restore_network(actor, root_dir, description.checkpoint_attribute)
    # The shared encoder's weights come from the checkpoint too.
    reader = tf.train.load_checkpoint(os.path.join(root_dir, "checkpoints"))
    (key,) = [k for k in reader.get_variable_to_shape_map() if k.startswith(ENCODER_KERNEL)]
    np.testing.assert_array_equal(actor.encoder.trainable_weights[0].numpy(), reader.get_tensor(key))

    observations = np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)
    step = ts.TimeStep(
        step_type=np.ones(16, np.int32),
        reward=np.zeros(16, np.float32),
        discount=np.ones(16, np.float32),
        observation=observations,
    )
    exported = evaluate.load_policy(os.path.join(root_dir, "policies", "greedy_policy"))
    expected = exported.action(step).action
    rebuilt = greedy_policy.GreedyPolicy(
        actor_policy.ActorPolicy(
            ts.time_step_spec(description.observation_spec), description.action_spec, actor, training=False
        )
    )
    action = tf.function(lambda s: rebuilt.action(s).action)(tf.nest.map_structure(tf.constant, step))
    np.testing.assert_array_equal(action.numpy(), expected)
    mode = actor(observations)[0].mode()
    np.testing.assert_allclose(mode.numpy(), expected, rtol=0, atol=1e-6)


def _pixel_agent(encoder: str, encoder_kwargs, actor_lr: float, critic_lr: float) -> sac_agent.SacAgent:
    observation_spec = tensor_spec.BoundedTensorSpec((16, 16, 3), tf.uint8, 0, 255)
    action_spec = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)
    actor = sac_networks.SacActorNetwork(observation_spec, action_spec, encoder, encoder_kwargs, (8,))
    agent = sac_agent.SacAgent(
        ts.time_step_spec(observation_spec),
        action_spec,
        actor_network=actor,
        **sac_networks.twin_critics(actor, action_spec, (8,)),
        actor_optimizer=tf_keras.optimizers.Adam(actor_lr),
        critic_optimizer=tf_keras.optimizers.Adam(critic_lr),
        alpha_optimizer=tf_keras.optimizers.Adam(0.0),
        target_update_tau=0.5,
        target_update_period=1,
    )
    agent.initialize()
    rng = np.random.default_rng(1)
    for variable in agent.variables:  # perturbed, not freshly initialised, weights
        if variable.dtype == tf.float32:
            variable.assign(variable + rng.normal(0, 0.05, variable.shape).astype(np.float32))
    return agent


def _experience(agent: sac_agent.SacAgent):
    experience = tensor_spec.sample_spec_nest(agent.collect_data_spec, seed=3, outer_dims=(6, 2))
    # Mid-episode transitions: every pair is a real transition.
    mid = tf.fill([6, 2], ts.StepType.MID)
    # The reward spec is unbounded: rewards sampled from it overflow the TD targets.
    reward = tf.random.stateless_uniform([6, 2], seed=(3, 4))
    return experience._replace(step_type=mid, next_step_type=mid, reward=reward, discount=tf.ones([6, 2]))


def _values(variables) -> list[np.ndarray]:
    return [v.numpy().copy() for v in variables]


@pytest.mark.parametrize(
    "encoder, encoder_kwargs",
    [
        ("cnn", TINY_CNN),
        ("siet", TINY_SIET),
    ],
)  # fmt: skip
def test_the_critic_trains_the_shared_encoder_and_the_actor_does_not(encoder, encoder_kwargs):
    agent = _pixel_agent(encoder, encoder_kwargs, actor_lr=1e-2, critic_lr=1e-2)
    actor, critic_1 = agent._actor_network, agent._critic_network_1
    critic_2, target_1 = agent._critic_network_2, agent._target_critic_network_1
    encoder_vars = actor.encoder.trainable_weights
    # One encoder object behind the actor and both critics; the targets have their own.
    assert critic_1.encoder is actor.encoder and critic_2.encoder is actor.encoder
    assert agent._target_critic_network_2.encoder is target_1.encoder
    assert not {id(v) for v in target_1.encoder.weights} & {id(v) for v in encoder_vars}
    actor_trainable = {id(v) for v in actor.trainable_variables}
    assert not actor_trainable & {id(v) for v in encoder_vars}
    assert {id(v) for v in encoder_vars} <= {id(v) for v in critic_1.trainable_variables}
    assert {id(v) for v in encoder_vars} <= {id(v) for v in actor.variables}

    experience = _experience(agent)
    time_steps, policy_steps, next_time_steps = agent._as_transition(experience)
    with tf.GradientTape(persistent=True) as tape:
        distribution, _ = actor(time_steps.observation, training=True)
        log_prob = distribution.log_prob(policy_steps.action)
        critic_loss = agent.critic_loss(
            time_steps, policy_steps.action, next_time_steps, td_errors_loss_fn=tf.math.squared_difference
        )
    # The actor reads the features through stop_gradient: pi's gradients never reach the encoder.
    assert all(g is None for g in tape.gradient(log_prob, encoder_vars))
    assert all(g is not None for g in tape.gradient(log_prob, actor.trainable_variables))
    critic_grads = tape.gradient(critic_loss, encoder_vars)
    assert all(g is not None for g in critic_grads)
    assert any(float(tf.reduce_max(tf.abs(g))) > 0 for g in critic_grads)

    # A train step with a zero critic learning rate changes the actor's head, not the encoder.
    frozen = _pixel_agent(encoder, encoder_kwargs, actor_lr=1e-2, critic_lr=0.0)
    before_encoder = _values(frozen._actor_network.encoder.weights)
    before_head = _values(frozen._actor_network.trainable_variables)
    frozen.train(_experience(frozen))
    for old, new in zip(before_encoder, frozen._actor_network.encoder.weights, strict=True):
        np.testing.assert_array_equal(old, new.numpy())
    after_head = frozen._actor_network.trainable_variables
    assert any(not np.array_equal(o, n.numpy()) for o, n in zip(before_head, after_head, strict=True))

    # With the critic learning, the encoder moves and its target follows by tau = 0.5.
    before_encoder = _values(encoder_vars)
    before_target = _values(target_1.encoder.trainable_weights)
    agent.train(experience)
    assert any(not np.array_equal(o, n.numpy()) for o, n in zip(before_encoder, encoder_vars, strict=True))
    targets = target_1.encoder.trainable_weights
    for old_target, source, target in zip(before_target, encoder_vars, targets, strict=True):
        expected = 0.5 * old_target + 0.5 * source.numpy()
        np.testing.assert_allclose(target.numpy(), expected, rtol=1e-5, atol=1e-6)


def _ensure_agent_dispatch() -> None:
    """Configs start with ``train.agent = 'sac'`` for sit-train's dispatch; a stand-in until it exists."""
    try:
        gin.parse_config("train.agent = 'sac'")
    except ValueError:
        gin.external_configurable(lambda agent="ppo": agent, name="train")
    gin.clear_config()


def test_dmc_sac_configs_parse():
    _ensure_agent_dispatch()
    configs = glob.glob("configs/dmc/walker_walk_*.gin") + glob.glob("configs/dmc/cartpole_swingup_*.gin")
    # cartpole_swingup_pi.gin and _mlp.gin are PPO configs of the permutation-invariant policies.
    sac_configs = sorted(path for path in configs if not path.endswith(("_pi.gin", "_mlp.gin")))
    assert len(sac_configs) == 6, sac_configs
    for path in sac_configs:
        gin.clear_config()
        train.parse_gin([path], [])
        assert gin.query_parameter("train.agent") == "sac"
        assert gin.query_parameter("sac_train_eval.env_name").startswith("dmc:")
        if "walker_walk" in path:
            assert gin.query_parameter("sac_train_eval.total_env_steps") == 500_000
            assert gin.query_parameter("sac_train_eval.env_kwargs")["image_size"] == 64
    gin.clear_config()


def test_pixel_config_trains_on_dmc(tmp_path):
    """cartpole_swingup_pixels_cnn.gin, shrunk: 2 environments of 64x64x9 pixels, a tiny CNN."""
    _ensure_agent_dispatch()
    gin.clear_config()
    train.parse_gin(
        ["configs/dmc/cartpole_swingup_pixels_cnn.gin"],
        [
            "sac_train_eval.num_envs = 2",
            f"sac_train_eval.encoder_kwargs = {TINY_CNN}",
            "sac_train_eval.actor_fc_layer_params = (16,)",
            "sac_train_eval.critic_fc_layer_params = (16,)",
            "sac_train_eval.total_env_steps = 16",
            "sac_train_eval.initial_collect_steps = 8",
            "sac_train_eval.replay_capacity = 64",
            "sac_train_eval.batch_size = 4",
            "sac_train_eval.log_interval = 4",
            "sac_train_eval.checkpoint_interval = 8",
            "sac_train_eval.eval_interval = 0",
            "sac_train_eval.policy_save_interval = 0",
            "sac_train_eval.checkpoint_replay_buffer = False",
            "sac_train_eval.progress = False",
        ],
    )
    root_dir = str(tmp_path / "pixels")
    results = sac_train_eval(root_dir)
    gin.clear_config()
    # 4 random batched steps of 2 environments, then 4 iterations of one batched step and one update.
    assert results["env_steps"] == 16 and results["train_step"] == 4
    assert len(results["history"]) == 2
    description = policy_network.read_description(root_dir)
    assert tuple(description.observation_spec.shape) == (64, 64, 9)
    assert description.observation_spec.dtype == tf.uint8
    assert description.env_kwargs["action_repeat"] == 8
    assert "sac_train_eval.batch_size = 4" in (tmp_path / "pixels" / "config.gin").read_text()


def test_pairs_that_start_at_an_episode_end_are_not_transitions():
    first, mid, last = (int(t) for t in (ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST))
    expected = [((first, mid), True), ((mid, mid), True), ((mid, last), True), ((last, first), False)]
    for step_types, keep in expected:
        pair = trajectory.Trajectory(
            step_type=tf.constant(step_types, tf.int32),
            observation=tf.zeros([2, 3]),
            action=tf.zeros([2, 1]),
            policy_info=(),
            next_step_type=tf.constant((*step_types[1:], mid), tf.int32),
            reward=tf.zeros([2]),
            discount=tf.ones([2]),
        )
        assert bool(_starts_a_transition(pair, ())) == keep, step_types


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"env_name": "gymnasium:CartPole-v1"}, "SAC needs continuous actions"),
        ({"encoder": "resnet"}, "Unknown encoder 'resnet'"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"replay_capacity": 1}, "replay_capacity must hold 2 steps"),
    ],
)
def test_bad_settings_are_clear(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        sac_train_eval(str(tmp_path), **{**SHORT_RUN, **overrides})
