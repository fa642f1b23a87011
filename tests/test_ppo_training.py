"""PPO (+ DrAC) training through the harness: a short real run, its outputs, resume and errors."""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import gin
import numpy as np
import pytest
import tensorflow as tf
from run_folders import run_in_process
from summaries import hyperparameters, scalar_series, summary_tags

from sit_keras.agents import evaluate, train
from sit_keras.agents.algorithms import ppo
from sit_keras.agents.algorithms.augmentation import make_augmentation, random_crop
from sit_keras.agents.algorithms.ppo_agent import explained_variance
from sit_keras.agents.training import harness
from sit_keras.agents.training.evaluation import EVALUATIONS_FILE
from sit_keras.agents.training.run_settings import RunSettings, algorithm_module, check_bindings

# 4 environments x 16 steps per iteration, 2 iterations: seconds on a CPU. Evaluated (4 episodes)
# after each iteration. train_eval splits the names between train_eval.* and ppo.*.
SHORT_RUN = {
    "env_name": "minigrid:LavaGapS5",
    "num_envs": 4,
    "encoder": "cnn",
    "encoder_kwargs": {"filters": (8,), "strides": 1, "output_dim": 16},
    "total_env_steps": 128,
    "collect_steps_per_env": 16,
    "num_minibatches": 4,
    "num_epochs": 2,
    "discount": 0.99,
    "drac_coef": 0.1,
    "checkpoint_interval": 64,
    "policy_save_interval": 64,
    "eval_interval": 64,
    "num_eval_episodes": 4,
    "progress": False,
}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root_dir = str(tmp_path_factory.mktemp("ppo"))
    gin.clear_config()
    results = train.train_eval(root_dir, **SHORT_RUN)
    return root_dir, results


def test_short_run_collects_trains_and_logs(trained_run):
    root_dir, results = trained_run
    assert results["env_steps"] == 128
    # 2 iterations x 2 epochs x 4 minibatches.
    assert results["train_step"] == 16
    assert 0.0 <= results["SuccessRate"] <= 1.0
    train_tags = summary_tags(os.path.join(root_dir, "train"))
    for tag in [
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "losses/drac_policy",
        "losses/drac_value",
    ]:
        assert tag in train_tags, train_tags
    collect_tags = summary_tags(os.path.join(root_dir, "collect"))
    for tag in [
        "Metrics/AverageReturn",
        "Metrics/AverageEpisodeLength",
        "Metrics/SuccessRate",
        "Metrics/loss",
        "charts/SPS",
        "charts/train_fraction",
        "charts/env_fraction",
        "config/operative_gin",
        "_hparams_/session_start_info",
    ]:
        assert tag in collect_tags, collect_tags
    # Logged every iteration (the default log_interval: num_envs * collect_steps_per_env).
    assert [h["env_steps"] for h in results["history"]] == [64, 128]
    # config.gin and the hyper-parameters are the settings the run used: train_eval.* and ppo.*, the
    # keyword arguments and the agent's defaults included.
    with open(os.path.join(root_dir, "config.gin")) as f:
        config = f.read().splitlines()
    for binding in [
        "train_eval.agent = 'ppo'",
        "train_eval.num_envs = 4",
        "train_eval.log_interval = 64",
        "ppo.collect_steps_per_env = 16",
        "ppo.learning_rate = 0.0005",
    ]:
        assert binding in config, config
    hparams = hyperparameters(os.path.join(root_dir, "collect"))
    assert hparams["train_eval.num_envs"] == 4 and hparams["ppo.collect_steps_per_env"] == 16
    assert hparams["train_eval.log_interval"] == 64 and hparams["train_eval.eval_interval"] == 64
    assert os.path.exists(os.path.join(root_dir, "policy_network.json"))
    assert glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index"))
    assert os.path.exists(os.path.join(root_dir, "policies", "greedy_policy", "saved_model.pb"))
    assert glob.glob(os.path.join(root_dir, "policies", "checkpoints", "policy_checkpoint_*"))


def test_short_run_evaluates_into_eval_and_evaluations_json(trained_run):
    """PPO evaluates its policy on separate environments every eval_interval and at the end."""
    root_dir, results = trained_run
    eval_tags = summary_tags(os.path.join(root_dir, "eval"))
    for tag in ["Eval/AverageReturn", "Eval/StdReturn", "Eval/AverageEpisodeLength", "Eval/SuccessRate"]:
        assert tag in eval_tags, eval_tags
    with open(os.path.join(root_dir, EVALUATIONS_FILE)) as f:
        evaluations = json.load(f)
    assert evaluations == results["evaluations"]
    assert [(e["env_steps"], e["train_step"]) for e in evaluations] == [(64, 8), (128, 16)]
    for evaluation in evaluations:
        assert evaluation["num_episodes"] == len(evaluation["returns"]) == 4
        assert 0.0 <= evaluation["success_rate"] <= 1.0
        assert evaluation["mean_return"] == pytest.approx(np.mean(evaluation["returns"]))
    # Each log carries the evaluation of its own step.
    assert [h["EvalAverageReturn"] for h in results["history"]] == [e["mean_return"] for e in evaluations]
    assert results["EvalAverageReturn"] == evaluations[-1]["mean_return"]


def test_rerun_resumes_the_counters(trained_run, tmp_path):
    root_dir, _ = trained_run
    gin.clear_config()
    resumed = train.train_eval(root_dir, **{**SHORT_RUN, "total_env_steps": 192})
    # One more iteration on top of the checkpointed two.
    assert resumed["env_steps"] == 192
    assert resumed["train_step"] == 24
    # The evaluation schedule goes on: the new evaluation is added to the earlier ones.
    assert [e["env_steps"] for e in resumed["evaluations"]] == [64, 128, 192]


def test_saved_policy_evaluates_under_transforms(trained_run):
    root_dir, _ = trained_run
    policy = evaluate.load_policy(os.path.join(root_dir, "policies", "greedy_policy"))
    results = evaluate.evaluate(policy, "minigrid:LavaGapS5", [None, "rot90"], num_episodes=6, num_envs=3)
    assert set(results) == {"none", "rot90"}
    for summary in results.values():
        assert summary["num_episodes"] == 6
        assert 0.0 <= summary["success_rate"] <= 1.0


def test_run_episodes_keeps_a_quota_per_environment():
    from tf_agents.policies import random_py_policy

    from sit_keras.agents.environments import load

    env = load("minigrid:LavaGapS5", num_envs=3, seed=5)
    policy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), outer_dims=(3,))
    episodes = evaluate.run_episodes(policy, env, 7)
    assert len(episodes) == 7
    assert sorted(np.bincount([e["env"] for e in episodes]).tolist()) == [2, 2, 3]
    # LavaGap rewards are 0 (lava, time-out) or 1 - 0.9 t / T (goal).
    for e in episodes:
        assert e["success"] == (e["return"] > 0)


@pytest.mark.large  # test_harness kills and resumes PPO (and every agent) through the same console script
def test_kill_mid_run_then_resume(tmp_path):
    """A run killed after its first checkpoint resumes from it, counters included."""
    root_dir = str(tmp_path / "killed")
    args = [
        # The console script, as a user runs it.
        os.path.join(os.path.dirname(sys.executable), "sit-train"),
        "--root_dir",
        root_dir,
        "--gin_bindings",
        "train_eval.env_name = 'minigrid:LavaGapS5'",
        "--gin_bindings",
        "train_eval.num_envs = 2",
        "--gin_bindings",
        "train_eval.encoder = 'cnn'",
        "--gin_bindings",
        "train_eval.encoder_kwargs = {'filters': (4,), 'strides': 1, 'output_dim': 8}",
        "--gin_bindings",
        "ppo.collect_steps_per_env = 8",
        "--gin_bindings",
        "ppo.num_minibatches = 2",
        "--gin_bindings",
        "ppo.drac_coef = 0.0",
        "--gin_bindings",
        "train_eval.checkpoint_interval = 16",
        "--gin_bindings",
        "train_eval.policy_save_interval = 100000",
        "--gin_bindings",
        "train_eval.num_eval_episodes = 2",
        "--gin_bindings",
        "train_eval.progress = False",
    ]
    process = subprocess.Popen(
        [*args, "--gin_bindings", "train_eval.total_env_steps = 100000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 240
        while (
            time.time() < deadline
            and len(glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index"))) < 2
        ):
            time.sleep(0.5)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    checkpoint = tf.train.latest_checkpoint(os.path.join(root_dir, "checkpoints"))
    assert checkpoint, "no checkpoint written before the kill"
    saved_steps = int(tf.train.load_variable(checkpoint, "env_steps/.ATTRIBUTES/VARIABLE_VALUE"))
    assert saved_steps >= 32

    resumed = subprocess.run(
        [*args, "--gin_bindings", f"train_eval.total_env_steps = {saved_steps + 16}"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"at {saved_steps} environment steps" in resumed.stdout
    assert f"'env_steps': {saved_steps + 16}" in resumed.stdout


@pytest.mark.parametrize(
    "bindings, match",
    [
        (["train_eval.not_an_argument = 1"], "Bad gin configuration"),
        (["ppo.not_an_argument = 1"], "Bad gin configuration"),
        (["train_eval.num_envs = = 3"], "Bad gin configuration"),
    ],
)
def test_bad_gin_bindings_are_clear(bindings, match):
    gin.clear_config()
    with pytest.raises(ValueError, match=match):
        train.parse_gin([], bindings)
    gin.clear_config()


def test_missing_gin_file_is_clear():
    with pytest.raises(ValueError, match="Gin file not found"):
        train.parse_gin(["configs/no_such.gin"], [])


@pytest.mark.parametrize(
    "bindings, match",
    [
        # A SAC hyper-parameter in a PPO run.
        (["sac.batch_size = 8"], r"a 'ppo' run does not read: sac\.batch_size"),
        # DQN's settings without train_eval.agent = 'dqn'.
        (["dqn.n_step = 3", "dqn.batch_size = 8"], r"does not read: dqn\.batch_size, dqn\.n_step"),
    ],
)
def test_bindings_that_the_run_does_not_read_are_errors(tmp_path, bindings, match):
    """A binding that the selected agent does not read fails before anything is written."""
    root_dir = tmp_path / "run"
    gin.clear_config()
    train.parse_gin([], bindings)
    try:
        with pytest.raises(harness.SettingsError, match=match):
            train.train_eval(str(root_dir), **SHORT_RUN)
    finally:
        gin.clear_config()
    assert not root_dir.exists()


def _ppo_defaults() -> dict[str, Any]:
    return {field.name: field.default for field in dataclasses.fields(ppo.PPO)}


def test_rl_configs_parse_and_their_rollouts_split_into_minibatches():
    configs = sorted(
        glob.glob("configs/procgen/**/*.gin", recursive=True) + glob.glob("configs/minigrid/*.gin")
    )
    assert len(configs) >= 30
    defaults = _ppo_defaults()

    def setting(name: str) -> Any:
        try:
            return gin.query_parameter(f"ppo.{name}")
        except ValueError:  # not bound: ppo.PPO's default
            return defaults[name]

    for path in configs:
        gin.clear_config()
        train.parse_gin([path], [])
        # PPO configs: nothing bound that a PPO run would not read.
        check_bindings("ppo")
        try:
            num_envs = gin.query_parameter("train_eval.num_envs")
        except ValueError:  # not bound: PPO's run default
            num_envs = ppo.defaults(RunSettings(), ppo.PPO())["num_envs"]
        steps = num_envs * setting("collect_steps_per_env")
        assert steps % setting("num_minibatches") == 0, f"{path}: {steps} steps per iteration"
    gin.clear_config()


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"env_name": "minigrid:NoSuchTask"}, "NoSuchTask"),
        ({"encoder": "resnet"}, "Unknown encoder 'resnet'"),
        ({"num_minibatches": 3}, "must be a multiple of num_minibatches"),
        ({"augmentation": "cutout"}, "Unknown augmentation 'cutout'"),
        ({"collect_steps_per_env": 0}, "ppo.collect_steps_per_env must be >= 1"),
        ({"total_env_steps": 0}, "train_eval.total_env_steps must be >= 1"),
        ({"clip_range": 0.1}, r"Unknown settings \['clip_range'\]"),
    ],
)
def test_bad_settings_are_clear(tmp_path, overrides, match):
    gin.clear_config()
    root_dir = tmp_path / "run"
    with pytest.raises(harness.SettingsError, match=match):
        train.train_eval(str(root_dir), **{**SHORT_RUN, **overrides})
    # Found while the run is set up: nothing stays behind.
    assert not root_dir.exists()


def test_random_crop_is_a_clamped_shift():
    images = tf.constant(np.random.default_rng(0).integers(0, 256, (16, 9, 7, 3), dtype=np.uint8))
    cropped = random_crop(images, padding=2, seed=3).numpy()
    assert cropped.dtype == np.uint8 and cropped.shape == images.shape
    source = images.numpy()
    for image, out in zip(source, cropped, strict=True):
        matches = [
            (dy, dx)
            for dy in range(-2, 3)
            for dx in range(-2, 3)
            if np.array_equal(
                out,
                image[np.clip(np.arange(9) + dy, 0, 8)][:, np.clip(np.arange(7) + dx, 0, 6)],
            )
        ]
        assert matches, "crop is not a replicate-padded shift"
    assert np.array_equal(random_crop(images, 0).numpy(), source)


def test_augmentation_padding_follows_the_image_size():
    images = tf.zeros((2, 14, 14, 3), tf.uint8)
    assert make_augmentation("crop", 14)(images).shape == images.shape
    with pytest.raises(ValueError, match="Unknown augmentation"):
        make_augmentation("rotate", 14)
    with pytest.raises(ValueError, match="padding must be >= 0"):
        random_crop(images, -1)


def test_explained_variance():
    targets = tf.constant([1.0, 2.0, 3.0, 4.0])
    weights = tf.ones(4)
    assert float(explained_variance(targets, targets, weights)) == pytest.approx(1.0)
    assert float(explained_variance(tf.fill([4], 2.5), targets, weights)) == pytest.approx(0.0)
    # Masked samples do not count.
    noisy = tf.constant([1.0, 2.0, 3.0, 100.0])
    assert float(explained_variance(noisy, targets, tf.constant([1.0, 1.0, 1.0, 0.0]))) == pytest.approx(1.0)


def test_sit_eval_cli_writes_json_and_gif(trained_run, tmp_path):
    root_dir, _ = trained_run
    output, gif = tmp_path / "eval.json", tmp_path / "episode.gif"
    run = run_in_process(
        "sit-eval", "--policy_dir", os.path.join(root_dir, "policies", "greedy_policy"),
        "--env", "minigrid:LavaGapS5", "--transform", "none", "--transform", "flip_h",
        "--num_episodes", "3", "--num_envs", "3", "--output", str(output), "--gif", str(gif),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(output.read_text())
    assert set(report["results"]) == {"none", "flip_h"}
    assert report["results"]["none"]["num_episodes"] == 3
    assert gif.stat().st_size > 0


def test_sit_eval_names_a_missing_policy(tmp_path):
    with pytest.raises(FileNotFoundError, match="No saved policy"):
        evaluate.load_policy(str(tmp_path))


def _drac_agent(augmentation, drac_coef: float = 0.1, shared_torso: bool = False, **agent_kwargs):
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import time_step as ts

    from sit_keras.agents.algorithms.ppo_agent import DrACPPOAgent
    from sit_keras.agents.networks import actor_critic, encoders

    observation_spec = tensor_spec.BoundedTensorSpec((14, 14, 3), tf.uint8, 0, 255)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
    kwargs = {"filters": (4,), "strides": 1, "output_dim": 8}
    actor_net = actor_critic.EncoderActorNetwork(observation_spec, action_spec, "cnn", kwargs)
    if shared_torso:
        value_net = encoders.shared_value_network(actor_net)
    else:
        value_net = actor_critic.EncoderValueNetwork(observation_spec, "cnn", kwargs)
    return DrACPPOAgent(
        ts.time_step_spec(observation_spec),
        action_spec,
        optimizer=tf.keras.optimizers.Adam(1e-3),
        actor_net=actor_net,
        value_net=value_net,
        augmentation=augmentation,
        drac_coef=drac_coef,
        **agent_kwargs,
    )


@pytest.mark.parametrize("augmentation, positive", [(tf.identity, False), (lambda x: 255 - x, True)])
def test_drac_regularisers_vanish_exactly_without_augmentation(augmentation, positive):
    from tf_agents.trajectories import time_step as ts

    agent = _drac_agent(augmentation)
    images = tf.constant(np.random.default_rng(0).integers(0, 256, (6, 1, 14, 14, 3), dtype=np.uint8))
    time_steps = ts.TimeStep(
        step_type=tf.ones((6, 1), tf.int32),
        reward=tf.zeros((6, 1)),
        discount=tf.ones((6, 1)),
        observation=images,
    )
    current, _ = agent._actor_net(images, time_steps.step_type, (), training=False)
    policy_reg, value_reg = agent._drac_regularisers(time_steps, current, tf.ones((6, 1)), training=False)
    if positive:
        assert float(policy_reg) > 0 and float(value_reg) > 0
    else:
        assert float(policy_reg) == pytest.approx(0.0, abs=1e-7) and float(value_reg) == 0.0


def test_drac_needs_a_valid_setting():
    with pytest.raises(ValueError, match="drac_coef must be >= 0"):
        from sit_keras.agents.algorithms.ppo_agent import DrACPPOAgent

        DrACPPOAgent(None, None, drac_coef=-1.0)
    with pytest.raises(ValueError, match="needs an augmentation"):
        _drac_agent(None)


@pytest.mark.parametrize("shared_torso", [False, True])
def test_a_shared_torso_is_trained_by_the_value_loss_too(shared_torso):
    """``ppo.shared_torso``: one encoder under both heads, so V's loss has gradients in the actor's torso."""
    from tf_agents.trajectories import time_step as ts

    agent = _drac_agent(None, drac_coef=0.0, shared_torso=shared_torso)
    rng = np.random.default_rng(0)
    observations = tf.constant(rng.integers(0, 256, (8, 1, 14, 14, 3), dtype=np.uint8))
    time_steps = ts.TimeStep(tf.ones((8, 1), tf.int32), tf.zeros((8, 1)), tf.ones((8, 1)), observations)
    returns = tf.constant(rng.normal(size=(8, 1)), tf.float32)
    torso = agent._actor_net.torso.trainable_variables
    with tf.GradientTape() as tape:
        loss = agent.value_estimation_loss(time_steps, returns, tf.ones((8, 1)), training=True)
    gradients = tape.gradient(loss, torso)
    assert all((g is not None) == shared_torso for g in gradients)
    if shared_torso:
        assert all(float(tf.reduce_max(tf.abs(g))) > 0 for g in gradients)
        # The agent trains each variable once: the actor's and the value head's.
        value_only = {id(v) for v in agent._value_net.trainable_variables} - {id(v) for v in torso}
        assert len(value_only) == 2  # the value head's kernel and bias
        assert agent._value_net._torso is agent._actor_net.torso


def _loss_with_torso_passes(agent, seed: int, monkeypatch):
    """A function of the agent's trainable variables (or some of them) giving the loss of a random (8, 1)
    minibatch, its gradients and the torso passes it ran (``actor_critic.call_torso``)."""
    from tf_agents.trajectories import time_step as ts

    from sit_keras.agents.networks import actor_critic

    rng = np.random.default_rng(seed)
    batch = (8, 1)
    time_steps = ts.TimeStep(
        tf.ones(batch, tf.int32), tf.zeros(batch), tf.ones(batch),
        tf.constant(rng.integers(0, 256, (*batch, 14, 14, 3), dtype=np.uint8)),
    )  # fmt: skip
    actions = tf.constant(rng.integers(0, 4, batch), tf.int64)
    returns = tf.constant(rng.normal(size=batch), tf.float32)
    old_values = tf.constant(rng.normal(size=batch), tf.float32)
    log_probs = tf.constant(np.log(rng.uniform(0.1, 0.4, batch)), tf.float32)
    calls = []
    call_torso = actor_critic.call_torso
    monkeypatch.setattr(actor_critic, "call_torso", lambda *a: calls.append(1) or call_torso(*a))

    def loss_and_gradients(variables):
        calls.clear()
        with tf.GradientTape() as tape:
            loss = agent.get_loss(
                time_steps, actions, log_probs, returns, returns - old_values, {}, tf.ones(batch),
                agent.train_step_counter, False, old_value_predictions=old_values, training=True,
            ).loss  # fmt: skip
        return float(loss), tape.gradient(loss, variables), len(calls)

    return loss_and_gradients


def test_a_shared_torso_runs_once_per_loss_with_the_two_pass_loss_and_gradients(monkeypatch):
    from sit_keras.agents.networks import actor_critic

    # As ppo.py builds it: no observation normaliser (with one, the two heads are called apart).
    agent = _drac_agent(None, drac_coef=0.0, shared_torso=True, normalize_observations=False)
    variables = agent._actor_net.trainable_variables + agent._value_net.trainable_variables[-2:]
    loss_and_gradients = functools.partial(_loss_with_torso_passes(agent, 1, monkeypatch), variables)
    one_pass = loss_and_gradients()
    monkeypatch.setattr(actor_critic, "shares_torso", lambda *_: False)
    two_passes = loss_and_gradients()
    assert (one_pass[2], two_passes[2]) == (1, 2)
    assert one_pass[0] == pytest.approx(two_passes[0], rel=1e-6)
    # The same sums in another order: float32 rounding is relative to each gradient's largest entry,
    # so entries near zero need an absolute bound on that scale (a wrong gradient is off by far more).
    for a, b in zip(one_pass[1], two_passes[1], strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))


def test_a_shared_torso_needs_the_actors_own_feed_forward_encoder():
    run = RunSettings(encoder="cnn", num_envs=4)
    with pytest.raises(ValueError, match="ppo.value_encoder must be None"):
        ppo.check(run, ppo.PPO(shared_torso=True, value_encoder="cnn"))
    with pytest.raises(ValueError, match="needs a feed-forward encoder"):
        ppo.check(dataclasses.replace(run, encoder="attention_neuron"), ppo.PPO(shared_torso=True))
    from sit_keras.agents.networks import encoders

    with pytest.raises(ValueError, match="EncoderActorNetwork"):
        encoders.shared_value_network(object())


def test_a_shared_torso_run_trains_and_resumes(tmp_path):
    gin.clear_config()
    settings = {**SHORT_RUN, "shared_torso": True, "drac_coef": 0.0, "num_eval_episodes": 0}
    first = train.train_eval(str(tmp_path), **{**settings, "total_env_steps": 64})
    gin.clear_config()
    second = train.train_eval(str(tmp_path), **settings)
    assert (first["env_steps"], second["env_steps"]) == (64, 128)
    assert np.isfinite(second["loss"])
    # Only the actor is exported: its torso comes out of the checkpoint as a plain actor's.
    from sit_keras.export.exporter import export_policy

    report = export_policy(
        str(tmp_path), str(tmp_path / "export"), formats=["tflite"], quantizations=["float32"]
    )
    assert report["models"]["tflite_float32"]["path"]


def test_unnormalised_advantages_are_the_returns_minus_the_old_values():
    """``normalize_advantages=False``: the surrogate reads ``A = R^lambda - V_old``, not the argument."""
    from tf_agents.trajectories import time_step as ts

    rng = np.random.default_rng(0)
    batch = (8, 1)
    time_steps = ts.TimeStep(
        step_type=tf.ones(batch, tf.int32),
        reward=tf.zeros(batch),
        discount=tf.ones(batch),
        observation=tf.constant(rng.integers(0, 256, (*batch, 14, 14, 3), dtype=np.uint8)),
    )
    actions = tf.constant(rng.integers(0, 4, batch), tf.int64)
    returns = tf.constant(rng.normal(size=batch), tf.float32)
    old_values = tf.constant(rng.normal(size=batch), tf.float32)
    gae = dict(use_gae=True, use_td_lambda_return=True, entropy_regularization=0.0)

    def policy_loss(agent, advantages_argument) -> float:
        logits = agent._actor_net(time_steps.observation, time_steps.step_type, (), training=False)[0].logits
        # Log-probabilities 0.3 below the current ones: the ratio is exp(0.3), clipped in one direction.
        log_probs = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=2) - 0.3
        loss = agent.get_loss(
            time_steps, actions, log_probs, returns, advantages_argument, {"logits": logits},
            tf.ones(batch), agent.train_step_counter, False, old_value_predictions=old_values,
        )  # fmt: skip
        return float(loss.extra.policy_gradient_loss)

    raw = _drac_agent(None, drac_coef=0.0, normalize_advantages=False, **gae)
    normalised = _drac_agent(None, drac_coef=0.0, **gae)
    normalised._actor_net.set_weights(raw._actor_net.get_weights())
    noise = tf.constant(rng.normal(size=batch), tf.float32)
    assert policy_loss(raw, noise) == pytest.approx(policy_loss(normalised, returns - old_values), rel=1e-6)
    assert policy_loss(raw, noise) == pytest.approx(policy_loss(raw, 100 * noise), rel=1e-6)
    assert policy_loss(normalised, noise) != pytest.approx(policy_loss(normalised, 100 * noise), rel=1e-3)
    with pytest.raises(ValueError, match="use_td_lambda_return"):
        _drac_agent(None, drac_coef=0.0, normalize_advantages=False)


def test_annealed_learning_rate_decays_to_zero(tmp_path):
    root_dir = str(tmp_path / "anneal")
    gin.clear_config()
    train.train_eval(root_dir, **{**SHORT_RUN, "drac_coef": 0.0, "anneal_learning_rate": True})
    rates = scalar_series(os.path.join(root_dir, "train"), "LearningRate/learning_rate")
    steps = sorted(rates)
    # 16 gradient steps from 5e-4 down to 0 (the rate is logged before each step).
    assert rates[steps[0]] == pytest.approx(5e-4)
    assert all(rates[a] > rates[b] for a, b in zip(steps[:-1], steps[1:], strict=True))
    assert rates[steps[-1]] == pytest.approx(5e-4 / 16, rel=1e-5)


# A SAC and a DQN config shortened to a few steps, with the bindings of their agents.
DISPATCH_RUNS = {
    "sac": ("configs/dmc/cartpole_swingup_state.gin", [
        "train_eval.total_env_steps = 40", "sac.initial_collect_steps = 20", "sac.batch_size = 8",
        "train_eval.eval_interval = 0", "train_eval.num_eval_episodes = 1",
        "sac.actor_fc_layer_params = (8,)", "sac.critic_fc_layer_params = (8,)",
        "train_eval.policy_save_interval = 0",
    ]),
    "dqn": ("configs/atari/pong_cnn.gin", [
        "train_eval.env_name = 'gymnasium:CartPole-v1'", "train_eval.env_kwargs = {}",
        "train_eval.encoder = 'mlp'", "train_eval.encoder_kwargs = {'units': (8,)}",
        "train_eval.total_env_steps = 40", "dqn.min_replay_size = 20", "dqn.n_step = 2",
        "dqn.replay_capacity = 100", "train_eval.eval_interval = 0", "train_eval.num_eval_episodes = 1",
        "train_eval.eval_num_envs = 1", "train_eval.policy_save_interval = 0",
        "train_eval.eval_env_kwargs = {}",
    ]),
}  # fmt: skip


@pytest.mark.parametrize("agent", list(DISPATCH_RUNS))
def test_train_eval_agent_dispatches(agent, tmp_path, monkeypatch):
    """``train_eval.agent`` picks the algorithm: a SAC config runs SharedEncoderSacAgent, a DQN config a
    DQN agent (C51 here), each with its own settings (``sac.*``, ``dqn.*``) and outputs."""
    from tf_agents.agents.dqn import dqn_agent

    from sit_keras.agents.algorithms.sac_agent import SharedEncoderSacAgent

    module = algorithm_module(agent)
    built = []
    build = module.build

    def spying_build(run, settings):
        built.append((settings, build(run, settings)))
        return built[-1][1]

    monkeypatch.setattr(module, "build", spying_build)
    config, bindings = DISPATCH_RUNS[agent]
    root_dir = str(tmp_path / agent)
    gin.clear_config()
    try:
        train.parse_gin([config], [*bindings, "train_eval.progress = False"])
        results = train.train_eval(root_dir)
    finally:
        gin.clear_config()
    ((settings, algorithm),) = built
    assert isinstance(settings, module.SETTINGS)
    expected_class = {"sac": SharedEncoderSacAgent, "dqn": dqn_agent.DqnAgent}[agent]
    assert isinstance(algorithm.agent, expected_class), type(algorithm.agent)
    assert results["env_steps"] >= 40 and results["train_step"] > 0
    # The agent's own logged value: SAC's temperature, DQN's exploration rate.
    assert {"sac": "alpha", "dqn": "epsilon"}[agent] in results
    assert [e["env_steps"] for e in results["evaluations"]] == [results["env_steps"]]
    with open(os.path.join(root_dir, "policy_network.json")) as f:
        assert json.load(f)["agent"] in {agent, "c51"}
    with open(os.path.join(root_dir, "config.gin")) as f:
        assert f"train_eval.agent = '{agent}'" in f.read()


@pytest.mark.parametrize("shared_torso, passes", [(False, (2, 4)), (True, (1, 3))])
def test_drac_runs_s_and_fs_through_each_network_at_once_with_the_same_loss_and_gradients(
    shared_torso, passes, monkeypatch
):
    """With DrAC each network takes [s; f(s)] in one pass (one torso pass in all with a shared torso): the
    loss and gradients of the passes over s and f(s) apart."""
    from sit_keras.agents.algorithms.ppo_agent import DrACPPOAgent

    agent = _drac_agent(lambda x: 255 - x, shared_torso=shared_torso, normalize_observations=False)
    loss_and_gradients = _loss_with_torso_passes(agent, 2, monkeypatch)
    loss_and_gradients([])  # builds the networks
    variables = agent._actor_net.trainable_variables + agent._value_net.trainable_variables
    together = loss_and_gradients(variables)
    monkeypatch.setattr(DrACPPOAgent, "_passes_s_and_fs_together", lambda *_: False)
    apart = loss_and_gradients(variables)
    assert (together[2], apart[2]) == passes
    # float32: the two orders round apart by ulps of the loss's terms (about 1), not of their sum, which can
    # be a few hundredths (1.9e-6 apart relative to it once, on an AMD host).
    assert together[0] == pytest.approx(apart[0], rel=1e-6, abs=1e-6)
    for a, b in zip(together[1], apart[1], strict=True):
        if b is None:  # a shared torso's variables appear twice; the value net's copy has no gradient
            assert a is None
            continue
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))
