"""Behaviour cloning into a permutation-invariant student (``sit-distill``).

What this file proves:

- the teacher's data are recorded as consecutive streams, the LAST steps
  (whose actions the environment ignores) carry no weight, and the episode
  returns in the data are the environment's;
- the loss is the mode's squared error (continuous) or the cross-entropy
  (discrete), weighted per step;
- end to end on a tiny PPO teacher trained here: the student's loss falls,
  its folder is a training folder (checkpoints that
  ``policy_network.restore_network`` reads, ``policy_network.json``, saved
  greedy policy) on which ``sit-eval`` runs and which a rerun resumes; the
  rebuilt network acts as the saved policy; the CLI runs (``large``);
- bad settings raise a ``ValueError`` that says what to change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.policies import random_py_policy
from tf_agents.trajectories import time_step as ts

from sit_keras.agents import distill, evaluate, policy_network, train
from sit_keras.agents.environments import load

ENV = "gymnasium:Pendulum-v1"  # 3 sensors, continuous action, 200-step episodes
STUDENT = {"encoder_kwargs": {"output_dim": 16, "num_queries": 8}, "fc_layer_params": (16,)}


def test_teacher_data_are_consecutive_streams_without_last_step_weights():
    env = load("gymnasium:CartPole-v1", num_envs=3, seed=1)
    policy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), outer_dims=(3,))
    data = distill.collect_teacher_data(policy, env, 120)
    env.close()
    assert data.observations.shape == (3, 120, 4) and data.actions.shape == (3, 120)
    assert data.step_types[:, 0].tolist() == [ts.StepType.FIRST] * 3
    last = data.step_types == ts.StepType.LAST
    assert last.any(), "random CartPole episodes end within 120 steps"
    np.testing.assert_array_equal(data.weights, (~last).astype(np.float32))
    # Auto-reset: every LAST step is followed by a FIRST step.
    following = data.step_types[:, 1:][last[:, :-1]]
    assert np.all(following == ts.StepType.FIRST)
    # CartPole pays 1 per step: an episode's return is its number of actions.
    first_episode_length = int(np.argmax(last[0]))
    assert data.episode_returns and first_episode_length in [int(r) for r in data.episode_returns]


def test_bc_loss_is_the_weighted_squared_error_or_cross_entropy():
    weights = tf.constant([[1.0, 1.0, 0.0]])
    normal = tfp.distributions.MultivariateNormalDiag(
        loc=tf.constant([[[0.5, 0.0], [0.0, 0.0], [9.0, 9.0]]]), scale_diag=tf.ones((1, 3, 2))
    )
    actions = tf.zeros((1, 3, 2))
    # Per step: mean over action dims of (mode - a)^2 = 0.125, 0; the third step has no weight.
    assert float(distill.bc_loss(normal, actions, weights, discrete=False)) == pytest.approx(0.0625)
    logits = tf.constant([[[2.0, 0.0], [0.0, 1.0], [5.0, -5.0]]])
    categorical = tfp.distributions.Categorical(logits=logits)
    labels = tf.constant([[0, 1, 1]], tf.int64)
    expected = -np.mean([np.log(np.exp(2) / (np.exp(2) + 1)), np.log(np.e / (np.e + 1))])
    assert float(distill.bc_loss(categorical, labels, weights, discrete=True)) == pytest.approx(expected)


def test_settings_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="must be a positive multiple of sequence_length = 7"):
        distill.distill(str(tmp_path / "s"), str(tmp_path), ENV, collect_steps_per_env=20, sequence_length=7)
    with pytest.raises(ValueError, match=r"no policy_network.json.*pass env_name \(--env\)"):
        distill.distill(str(tmp_path / "s"), str(tmp_path), collect_steps_per_env=20, sequence_length=10)
    with pytest.raises(FileNotFoundError, match="No saved policy"):
        distill.distill(str(tmp_path / "s"), str(tmp_path), ENV, collect_steps_per_env=20, sequence_length=10)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny PPO MLP teacher on Pendulum: 2 iterations of 2 x 16 steps."""
    root_dir = str(tmp_path_factory.mktemp("teacher"))
    gin.clear_config()
    train.train_eval(
        root_dir, env_name=ENV, num_envs=2, encoder="mlp", encoder_kwargs={"units": (16,)},
        total_env_steps=64, collect_steps_per_env=16, num_minibatches=2, num_epochs=1, drac_coef=0.0,
        policy_save_interval=64, checkpoint_interval=64, progress=False,
    )  # fmt: skip
    return root_dir


def test_distill_a_tiny_teacher_into_a_pi_student_end_to_end(teacher, tmp_path):
    root_dir = str(tmp_path / "student")
    settings = dict(num_envs=2, collect_steps_per_env=60, sequence_length=20, num_epochs=6, **STUDENT)
    results = distill.distill(root_dir, teacher, progress=False, **settings)
    losses = [h["loss"] for h in results["history"]]
    assert results["train_step"] == 6 * 3 and len(losses) == 6
    assert losses[-1] < 0.95 * losses[0], losses

    description = policy_network.read_description(root_dir)
    assert (description.agent, description.network_class) == ("bc", "SensorActorNetwork")
    assert description.env_name == ENV  # read from the teacher's folder
    assert description.network_kwargs == {
        "encoder_kwargs": STUDENT["encoder_kwargs"],
        "fc_layer_params": [16],
    }
    net = policy_network.build_network(description)
    policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    policy = evaluate.load_policy(os.path.join(root_dir, "policies", "greedy_policy"))
    env = load(ENV, num_envs=2, seed=3)
    time_step, policy_state, net_state = env.reset(), policy.get_initial_state(2), ()
    for _ in range(4):
        action_step = policy.action(time_step, policy_state)
        distribution, net_state = net.call(time_step.observation, time_step.step_type, net_state)
        np.testing.assert_allclose(action_step.action, distribution.mode().numpy(), rtol=1e-5, atol=1e-6)
        time_step, policy_state = env.step(action_step.action), action_step.state
    env.close()
    summary = evaluate.evaluate(policy, ENV, num_episodes=2, num_envs=2)["none"]
    assert summary["num_episodes"] == 2 and summary["mean_length"] == 200
    report = json.loads((tmp_path / "student" / "distill.json").read_text())
    assert report["settings"]["teacher_dir"] == teacher and len(report["history"]) == 6

    # A rerun resumes after the last epoch.
    resumed = distill.distill(root_dir, teacher, progress=False, **{**settings, "num_epochs": 7})
    assert resumed["train_step"] == 7 * 3 and [h["epoch"] for h in resumed["history"]] == [7]


@pytest.mark.large
def test_sit_distill_cli(teacher, tmp_path):
    root_dir = tmp_path / "cli"
    run = subprocess.run(
        [
            sys.executable, "-m", "sit_keras.agents.distill", "--root_dir", str(root_dir),
            "--teacher_dir", teacher, "--num_envs", "2", "--collect_steps_per_env", "20",
            "--sequence_length", "10", "--num_epochs", "1", "--fc_layer_params", "8",
            "--encoder_kwargs", '{"output_dim": 8}', "--eval_episodes", "2",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "'train_step': 2" in run.stdout and "'student'" in run.stdout
    assert (root_dir / "policies" / "greedy_policy" / "saved_model.pb").exists()
