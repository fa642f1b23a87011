"""SAC with TF-Agents through the harness (``train_eval.agent = 'sac'``): short runs (states, pixels),
resume, gradient routing, export round trip, configs, the encoder registry and clear errors."""

from __future__ import annotations

import glob
import json
import os
import shutil

import gin
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from summaries import hyperparameters, summary_tags
from tf_agents.agents.sac import sac_agent
from tf_agents.policies import actor_policy, greedy_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from sit_keras.agents import evaluate, train
from sit_keras.agents.algorithms import dqn, sac
from sit_keras.agents.networks import policy_network, q_networks, sac_networks
from sit_keras.agents.training import harness
from sit_keras.agents.training.evaluation import EVAL_TAGS, EVALUATIONS_FILE
from sit_keras.agents.training.run_settings import RunSettings, algorithm_module, check_bindings

# PolicySaver records the squashed Normal's type spec; loading it needs tf_agents imported (it is).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Encoding a StructuredValue with type tf_agents.distributions:UserWarning"
)

# Pendulum, cut to 50-step episodes: one continuous action in [-2, 2]. 40 random steps, then 40
# iterations of 4 environment steps and 4 gradient steps. The shared "mlp" encoder has weights (16
# units) so that the export round trip restores an encoder too.
SHORT_RUN = {
    "agent": "sac",
    "env_name": "gymnasium:Pendulum-v1",
    "env_kwargs": {"max_episode_steps": 50},
    "encoder": "mlp",
    "encoder_kwargs": {"units": (16,)},
    "actor_fc_layer_params": (32,),
    "critic_fc_layer_params": (32,),
    "total_env_steps": 200,
    "initial_collect_steps": 40,
    "collect_steps_per_env": 4,
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


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root_dir = str(tmp_path_factory.mktemp("sac"))
    gin.clear_config()
    return root_dir, train.train_eval(root_dir, **SHORT_RUN)


def test_state_run_collects_trains_evaluates_and_logs(trained_run):
    root_dir, results = trained_run
    assert results["env_steps"] == 200 and results["frames"] == 200
    # One gradient step per environment step after the 40 random ones.
    assert results["train_step"] == 160
    # Logs when a multiple of log_interval (80) is crossed, and at the end.
    assert [h["env_steps"] for h in results["history"]] == [80, 160, 200]
    assert np.isfinite(results["AverageReturn"]) and results["AverageEpisodeLength"] == 50
    assert 0 < results["alpha"] < 1 and results["SPS"] > 0 and np.isfinite(results["loss"])
    # One evaluation (eval_interval = 200 = the budget) of the greedy policy: eval/ and evaluations.json.
    (evaluation,) = results["evaluations"]
    assert evaluation["env_steps"] == 200 and evaluation["train_step"] == 160
    assert evaluation["num_episodes"] == 2 and evaluation["mean_length"] == 50
    assert np.isfinite(evaluation["mean_return"]) and len(evaluation["returns"]) == 2
    assert results["EvalAverageReturn"] == evaluation["mean_return"]
    with open(os.path.join(root_dir, EVALUATIONS_FILE)) as f:
        assert json.load(f) == results["evaluations"]
    for tag in ["Losses/critic_loss", "Losses/actor_loss", "Losses/alpha_loss"]:
        assert tag in summary_tags(os.path.join(root_dir, "train"))
    collect_tags = summary_tags(os.path.join(root_dir, "collect"))
    for tag in [
        "Metrics/AverageReturn",
        "Metrics/alpha",
        "Metrics/loss",
        "charts/SPS",
        "charts/train_fraction",
        "config/operative_gin",
        "_hparams_/session_start_info",
    ]:
        assert tag in collect_tags, collect_tags
    assert not any(tag.startswith("Eval/") for tag in collect_tags), collect_tags
    eval_tags = summary_tags(os.path.join(root_dir, "eval"))
    assert {f"Eval/{tag}" for tag in EVAL_TAGS} <= eval_tags, eval_tags
    # The hyper-parameters are the settings the run was built from: train_eval.* and sac.*.
    hparams = hyperparameters(os.path.join(root_dir, "collect"))
    assert hparams["train_eval.agent"] == "sac" and hparams["train_eval.num_envs"] == 1
    assert hparams["sac.batch_size"] == 32 and hparams["sac.collect_steps_per_env"] == 4
    assert os.path.exists(os.path.join(root_dir, harness.CONFIG_FILE))
    assert glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index"))
    assert glob.glob(os.path.join(root_dir, "replay_buffer", "ckpt-*.index"))
    assert os.path.exists(os.path.join(root_dir, "policies", "greedy_policy", "saved_model.pb"))


def test_rerun_resumes_counters_and_replay_buffer(trained_run, tmp_path, capsys):
    root_dir = str(tmp_path / "resumed")
    shutil.copytree(trained_run[0], root_dir)  # the other tests keep the first run's outputs
    gin.clear_config()
    resumed = train.train_eval(root_dir, **{**SHORT_RUN, "total_env_steps": 240, "policy_save_interval": 0})
    assert "at 200 environment steps" in capsys.readouterr().out
    # The restored buffer needs no new random steps: 10 more iterations, 40 more gradient steps.
    assert resumed["env_steps"] == 240
    assert resumed["train_step"] == 200
    # The evaluations of the first run are kept; the final one is added.
    assert [e["env_steps"] for e in resumed["evaluations"]] == [200, 240]


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
        # 14-41 s; the shared-encoder logic is the CNN case's, and SiET's SAC train step is checked
        # against TF-Agents' in test_encoder_passes.py::test_sac_train_step_equals_tf_agents_sac[siet].
        pytest.param("siet", TINY_SIET, marks=pytest.mark.large),
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


def test_dmc_sac_configs_parse():
    configs = glob.glob("configs/dmc/walker_walk_*.gin") + glob.glob("configs/dmc/cartpole_swingup_*.gin")
    # cartpole_swingup_pi.gin and _mlp.gin are PPO configs of the permutation-invariant policies.
    sac_configs = sorted(path for path in configs if not path.endswith(("_pi.gin", "_mlp.gin")))
    assert len(sac_configs) == 6, sac_configs
    # The teacher on the AttentionNeuron paper's own cart-pole (a Gymnasium environment).
    sac_configs.append("configs/cartpole/swingup_harder_sac.gin")
    for path in sac_configs:
        gin.clear_config()
        train.parse_gin([path], [])
        assert gin.query_parameter("train_eval.agent") == "sac"
        env_name = gin.query_parameter("train_eval.env_name")
        assert env_name.startswith(("dmc:", "gymnasium:CartPoleSwingUpHarder")), env_name
        if "walker_walk" in path:
            assert gin.query_parameter("train_eval.total_env_steps") == 500_000
            assert gin.query_parameter("train_eval.env_kwargs")["image_size"] == 64
        # Every binding is read by a SAC run (train_eval.* and sac.*).
        check_bindings("sac")
    gin.clear_config()


# cartpole_swingup_pixels_cnn.gin, shrunk: 2 environments of 64x64x9 pixels, tiny networks.
PIXEL_BINDINGS = [
    "train_eval.num_envs = 2",
    "sac.actor_fc_layer_params = (16,)",
    "sac.critic_fc_layer_params = (16,)",
    "train_eval.total_env_steps = 16",
    "sac.initial_collect_steps = 8",
    "sac.replay_capacity = 64",
    "sac.batch_size = 4",
    "train_eval.log_interval = 4",
    "train_eval.checkpoint_interval = 8",
    "train_eval.num_eval_episodes = 0",
    "train_eval.policy_save_interval = 0",
    "train_eval.checkpoint_replay_buffer = False",
    "train_eval.progress = False",
]


def test_pixel_config_trains_on_dmc(tmp_path):
    """cartpole_swingup_pixels_cnn.gin (its CNN shrunk) trains through sit-train's parser and train_eval."""
    gin.clear_config()
    train.parse_gin(
        ["configs/dmc/cartpole_swingup_pixels_cnn.gin"],
        [*PIXEL_BINDINGS, f"train_eval.encoder_kwargs = {TINY_CNN}"],
    )
    root_dir = str(tmp_path / "pixels")
    results = train.train_eval(root_dir)
    gin.clear_config()
    # 4 random batched steps of 2 environments, then 4 iterations of one batched step and one update.
    assert results["env_steps"] == 16 and results["train_step"] == 4
    # Logs at 12 and 16 (multiples of 4 crossed after the 8 random steps).
    assert [h["env_steps"] for h in results["history"]] == [12, 16]
    # num_eval_episodes = 0: no evaluation at all.
    assert results["evaluations"] == [] and not os.path.exists(os.path.join(root_dir, "eval"))
    assert not os.path.exists(os.path.join(root_dir, EVALUATIONS_FILE))
    description = policy_network.read_description(root_dir)
    assert description.network_kwargs["encoder"] == "cnn"
    assert tuple(description.observation_spec.shape) == (64, 64, 9)
    assert description.observation_spec.dtype == tf.uint8
    assert description.env_kwargs["action_repeat"] == 8
    config = (tmp_path / "pixels" / harness.CONFIG_FILE).read_text()
    assert "sac.batch_size = 4" in config and "train_eval.agent = 'sac'" in config


# data_efficient_cnn (Atari's CNN, a "cnn" preset) shrunk for 16x16 images: 5x5 stride 5 -> 4x4 -> 1x1.
TINY_DATA_EFFICIENT_CNN = {"filters": (4, 8), "output_dim": 16}
_PIXEL_SPEC = tensor_spec.BoundedTensorSpec((16, 16, 3), tf.uint8, 0, 255)


def _run_settings(agent: str, encoder: str) -> RunSettings:
    module = algorithm_module(agent)
    settings = RunSettings(agent=agent, encoder=encoder)
    return settings.with_defaults(module.defaults(settings, module.SETTINGS()))


def test_sac_and_dqn_take_data_efficient_cnn_and_refuse_attention_neuron(tmp_path):
    """The one encoder registry (agents/networks/encoders.py): every feed-forward torso, no recurrent one."""
    images = tf.constant(np.random.default_rng(0).integers(0, 256, (3, 16, 16, 3)), tf.uint8)
    # Accepted by both agents' checks, and their networks build on it.
    sac.check(_run_settings("sac", "data_efficient_cnn"), sac.SAC())
    dqn.check(_run_settings("dqn", "data_efficient_cnn"), dqn.DQN())
    action_spec = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)
    actor = sac_networks.SacActorNetwork(
        _PIXEL_SPEC, action_spec, "data_efficient_cnn", TINY_DATA_EFFICIENT_CNN, (8,)
    )
    critic = sac_networks.twin_critics(actor, action_spec, (8,))["critic_network"]
    assert actor(images)[0].mode().shape == (3, 2)
    assert critic((images, tf.zeros((3, 2))))[0].shape == (3,)
    assert [c.filters for c in actor.encoder.layers[0].convs] == [4, 8]
    q_net = q_networks.EncoderQNetwork(
        _PIXEL_SPEC, tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3), "data_efficient_cnn",
        TINY_DATA_EFFICIENT_CNN,
    )  # fmt: skip
    assert q_net(images)[0].shape == (3, 4)
    # Refused by name, before anything is written.
    gin.clear_config()
    for agent in ("sac", "dqn"):
        module = algorithm_module(agent)
        with pytest.raises(ValueError, match="'attention_neuron'"):
            module.check(_run_settings(agent, "attention_neuron"), module.SETTINGS())
        root_dir = tmp_path / agent
        with pytest.raises(harness.SettingsError, match=rf"'attention_neuron' is recurrent, and '{agent}'"):
            train.train_eval(str(root_dir), agent=agent, encoder="attention_neuron", progress=False)
        assert not root_dir.exists()


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
        assert bool(sac._starts_a_transition(pair, ())) == keep, step_types


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"env_name": "gymnasium:CartPole-v1"}, "SAC needs continuous actions"),
        ({"encoder": "resnet"}, "Unknown encoder 'resnet'"),
        ({"batch_size": 0}, "sac.batch_size must be >= 1"),
        ({"replay_capacity": 1}, "replay_capacity must hold 2 steps"),
        ({"total_env_steps": 0}, "total_env_steps must be >= 1"),
        ({"gradient_clipping": 1.0}, r"Unknown settings \['gradient_clipping'\]"),
    ],
)
def test_bad_settings_are_clear(tmp_path, overrides, match):
    """A SettingsError (a ValueError) that names the setting; the run folder is not created."""
    root_dir = tmp_path / "run"
    gin.clear_config()
    with pytest.raises(harness.SettingsError, match=match):
        train.train_eval(str(root_dir), **{**SHORT_RUN, **overrides})
    assert not root_dir.exists()
