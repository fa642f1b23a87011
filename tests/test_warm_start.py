"""PPO started from another run's actor (``ppo.initial_actor_dir``), its std and its frozen first steps."""

from __future__ import annotations

import dataclasses
import os
import shutil

import gin
import numpy as np
import pytest
import tensorflow as tf
from run_folders import run_in_process, sit_train
from summaries import scalar_series
from tf_agents.specs import tensor_spec

from sit_keras.agents import train
from sit_keras.agents.algorithms import ppo, warm_start
from sit_keras.agents.networks import encoders, policy_network
from sit_keras.agents.training import harness

# A tiny AttentionNeuron PPO run on the paper's cart-pole: 4 environments x 16 steps an iteration,
# recurrent (2 minibatches of 2 whole sequences), 2 epochs; seconds on a CPU.
ENCODER_KWARGS = {"hidden_size": 4, "num_queries": 4, "query_dim": 4, "projection_dim": 4, "output_dim": 8}
TINY_SENSOR_PPO = {
    "env_name": "gymnasium:CartPoleSwingUpHarder-v0",
    "num_envs": 4,
    "encoder": "attention_neuron",
    "encoder_kwargs": ENCODER_KWARGS,
    "fc_layer_params": (8,),
    "collect_steps_per_env": 16,
    "num_minibatches": 2,
    "num_epochs": 2,
    "drac_coef": 0.0,
    "total_env_steps": 64,
    "checkpoint_interval": 64,
    "policy_save_interval": 0,
    "num_eval_episodes": 0,
    "progress": False,
}
GRADIENT_STEPS_PER_ITERATION = 2 * 2  # epochs x minibatches
# The train_eval.* names of TINY_SENSOR_PPO (the others are ppo.*), for sit-train's bindings.
RUN_KEYS = {
    "env_name", "num_envs", "encoder", "encoder_kwargs", "total_env_steps", "checkpoint_interval",
    "policy_save_interval", "num_eval_episodes", "progress",
}  # fmt: skip


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory) -> str:
    """A trained actor to start from: a short run of its own (any training folder would do)."""
    root_dir = str(tmp_path_factory.mktemp("source"))
    gin.clear_config()
    train.train_eval(root_dir, **TINY_SENSOR_PPO)
    return root_dir


def _actor_weights(root_dir: str, checkpoint: str | None = None) -> list[np.ndarray]:
    description = policy_network.read_description(root_dir)
    net = policy_network.build_network(description)
    policy_network.restore_network(net, root_dir, description.checkpoint_attribute, checkpoint)
    return [v.numpy() for v in net.variables]


def _checkpoints(root_dir: str) -> dict[int, str]:
    state = tf.train.get_checkpoint_state(os.path.join(root_dir, policy_network.CHECKPOINT_DIR))
    return {int(path.rsplit("-", 1)[1]): path for path in state.all_model_checkpoint_paths}


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# Two training runs; starting from a folder: test_sit_train_starts_from_a_folder_silently_with_any_seed.
@pytest.mark.large
def test_a_started_run_begins_with_the_folders_actor_and_trains_it_after_the_frozen_steps(
    source_dir, tmp_path
):
    root_dir = str(tmp_path / "started")
    gin.clear_config()
    results = train.train_eval(
        root_dir, **{**TINY_SENSOR_PPO, "seed": 1, "total_env_steps": 128, "checkpoint_interval": 64},
        initial_actor_dir=source_dir, actor_frozen_env_steps=64,
    )  # fmt: skip
    assert results["train_step"] == 2 * GRADIENT_STEPS_PER_ITERATION and np.isfinite(results["loss"])
    source = _actor_weights(source_dir)
    checkpoints = _checkpoints(root_dir)
    # The first iteration (64 steps) trains the critic alone: the actor is the source's, bit for bit.
    assert _same(_actor_weights(root_dir, checkpoints[GRADIENT_STEPS_PER_ITERATION]), source)
    # The second trains it: every weight that the loss reaches has moved.
    trained = _actor_weights(root_dir, checkpoints[2 * GRADIENT_STEPS_PER_ITERATION])
    assert not _same(trained, source)
    # A run of another seed without a start is another actor altogether.
    gin.clear_config()
    train.train_eval(str(tmp_path / "cold"), **{**TINY_SENSOR_PPO, "seed": 1, "actor_frozen_env_steps": 64})
    cold = _actor_weights(str(tmp_path / "cold"))
    assert not any(np.array_equal(x, y) for x, y in zip(cold, source, strict=True) if x.size > 1)


# Three training runs; resuming:
# test_harness::test_every_agent_runs_is_killed_resumes_and_writes_the_same_layout.
@pytest.mark.large
def test_a_resumed_run_reads_its_own_checkpoint_and_no_longer_needs_the_start(source_dir, tmp_path):
    start = tmp_path / "start"
    shutil.copytree(source_dir, start)
    root_dir = str(tmp_path / "resumed")
    settings = {**TINY_SENSOR_PPO, "initial_actor_dir": str(start)}
    gin.clear_config()
    train.train_eval(root_dir, **settings)
    after_first = _actor_weights(root_dir)
    assert not _same(after_first, _actor_weights(source_dir))  # trained from the first step
    shutil.rmtree(start)
    gin.clear_config()
    results = train.train_eval(root_dir, **{**settings, "total_env_steps": 128})
    assert results["env_steps"] == 128 and results["train_step"] == 2 * GRADIENT_STEPS_PER_ITERATION


def test_the_initial_action_std_is_the_sampling_std():
    spec = tensor_spec.BoundedTensorSpec((2,), tf.float32, -1.0, 1.0)
    observation_spec = tf.TensorSpec((5,), tf.float32)
    kwargs = encoders.actor_network_kwargs("attention_neuron", ENCODER_KWARGS, (8,))
    net = encoders.actor_network(observation_spec, spec, **kwargs)
    for std in (0.1, 1e-3, 2.0):
        warm_start.set_action_std(net, std)
        distribution, _ = net(tf.random.normal((3, 5)), network_state=net.get_initial_state(3))
        np.testing.assert_allclose(distribution.stddev().numpy(), np.full((3, 2), std), rtol=1e-5)
    discrete = encoders.actor_network(
        observation_spec, tensor_spec.BoundedTensorSpec((), tf.int32, 0, 2), **kwargs
    )
    with pytest.raises(ValueError, match="continuous actor"):
        warm_start.set_action_std(discrete, 0.1)


@pytest.mark.usefixtures("fixed_seed")  # random initial weights: seeded, whatever ran before in this worker
def test_initial_action_probabilities_are_the_policy_at_the_start_in_every_state():
    observation_spec = tensor_spec.BoundedTensorSpec((14, 14, 3), tf.uint8, 0, 255)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 3)
    kwargs = encoders.actor_network_kwargs("cnn", {"filters": (4, 8), "strides": 1}, (16,))
    net = encoders.actor_network(observation_spec, action_spec, **kwargs)
    images = tf.random.uniform((64, 14, 14, 3), 0, 256, tf.int32, seed=0)
    images = tf.cast(images, tf.uint8)
    before = tf.nn.softmax(net(images)[0].logits).numpy()
    wanted = np.array([0.7, 0.1, 0.1, 0.1])
    warm_start.set_action_probabilities(net, wanted)
    after = tf.nn.softmax(net(images)[0].logits).numpy()
    # Near the given policy in every state, where the random start was near uniform.
    assert np.abs(before - 0.25).max() < 0.1 and np.abs(after - wanted).max() < 0.1
    np.testing.assert_allclose(after.mean(axis=0), wanted, atol=0.03)
    with pytest.raises(ValueError, match="gives 3 probabilities for an actor of 4 actions"):
        warm_start.set_action_probabilities(net, [0.5, 0.25, 0.25])
    continuous = encoders.actor_network(
        tf.TensorSpec((5,), tf.float32),
        tensor_spec.BoundedTensorSpec((1,), tf.float32, -1.0, 1.0),
        **encoders.actor_network_kwargs("mlp", {"units": (8,)}, ()),
    )
    with pytest.raises(ValueError, match="need a discrete actor"):
        warm_start.set_action_probabilities(continuous, [0.5, 0.5])


def test_frozen_steps_are_whole_iterations():
    settings = ppo.PPO(actor_frozen_env_steps=1, num_epochs=3, num_minibatches=4)
    assert ppo._frozen_train_steps(settings, steps_per_iteration=100) == 12
    assert ppo._frozen_train_steps(dataclasses.replace(settings, actor_frozen_env_steps=201), 100) == 36
    assert ppo._frozen_train_steps(dataclasses.replace(settings, actor_frozen_env_steps=0), 100) == 0


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"initial_actor_dir": "no/such"}, r"ppo.initial_actor_dir = 'no/such' is not a training folder"),
        ({"fc_layer_params": (16,)}, r"SensorActorNetwork with .*'fc_layer_params': \[8\].* set the"),
        ({"encoder": "mlp", "encoder_kwargs": {"units": (8,)}}, r"actor is a EncoderActorNetwork"),
        ({"env_name": "gymnasium:Pendulum-v1"}, r"was trained on observations \(5,\) float32, but this"),
        ({"initial_action_std": -0.1}, r"ppo.initial_action_std must be > 0"),
        ({"initial_action_probabilities": (0.5, 0.6)}, r"must be positive numbers that sum to 1"),
        ({"initial_action_probabilities": (1.0, 0.0)}, r"must be positive numbers that sum to 1"),
        ({"initial_action_probabilities": (0.5, 0.5)}, r"Initial action probabilities need a discrete actor"),
        ({"actor_frozen_env_steps": -1}, r"ppo.actor_frozen_env_steps must be >= 0"),
    ],
)  # fmt: skip
def test_a_start_that_does_not_fit_is_one_sentence_before_anything_is_written(
    source_dir, tmp_path, changes, match
):
    root_dir = tmp_path / "refused"
    settings = {**TINY_SENSOR_PPO, "initial_actor_dir": source_dir, **changes}
    gin.clear_config()
    with pytest.raises(harness.SettingsError, match=match) as error:
        train.train_eval(str(root_dir), **settings)
    assert "\n" not in str(error.value)
    assert not root_dir.exists()


def test_a_folder_without_checkpoints_is_refused(source_dir, tmp_path):
    empty = tmp_path / "no_checkpoints"
    empty.mkdir()
    shutil.copy(os.path.join(source_dir, policy_network.DESCRIPTION_FILE), empty)
    with pytest.raises(ValueError, match="has no checkpoint in checkpoints/"):
        warm_start.read_folder(str(empty), "ppo.initial_actor_dir")


def test_sit_train_starts_from_a_folder_silently_with_any_seed(source_dir, tmp_path):
    bindings = [f"train_eval.{k} = {v!r}" for k, v in TINY_SENSOR_PPO.items() if k in RUN_KEYS]
    bindings += [f"ppo.{k} = {v!r}" for k, v in TINY_SENSOR_PPO.items() if k not in RUN_KEYS]
    bindings += [
        f"ppo.initial_actor_dir = {source_dir!r}",
        "ppo.initial_action_std = 0.1",
        "train_eval.seed = 3",
    ]
    result = sit_train(str(tmp_path / "cli"), bindings)
    assert result.returncode == 0, result.stderr[-2000:]
    # The seeded shuffle of whole sequences would warn on stderr; the console stays quiet.
    assert "Warning" not in result.stderr, result.stderr
    flags = [a for b in [*bindings, "ppo.fc_layer_params = (16,)"] for a in ("--gin_bindings", b)]
    refused = run_in_process("sit-train", "--root_dir", str(tmp_path / "cli_refused"), *flags)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (tmp_path / "cli_refused").exists()


# Only the collection differs between the two; the default run keeps True.
@pytest.mark.parametrize("reset_each_iteration", [pytest.param(False, marks=pytest.mark.large), True])
def test_a_recurrent_actor_trains_from_the_state_it_collected_with_only_from_a_reset(
    tmp_path, reset_each_iteration
):
    """With the actor frozen, the importance ratios of an unchanged policy must be 1 (KL 0). Iterations of
    16 steps cut the 1000-step episodes: the second iteration's sequences begin mid-episode, which the
    learner replays from the initial state, unless every iteration starts from a reset."""
    root_dir = str(tmp_path / "run")
    gin.clear_config()
    train.train_eval(
        root_dir, **{**TINY_SENSOR_PPO, "total_env_steps": 128}, summary_interval=1,
        actor_frozen_env_steps=128, reset_each_iteration=reset_each_iteration,
    )  # fmt: skip
    kl = scalar_series(os.path.join(root_dir, "train"), "losses/approx_kl")
    first, second = sorted(kl)[:GRADIENT_STEPS_PER_ITERATION], sorted(kl)[GRADIENT_STEPS_PER_ITERATION:]
    assert len(second) == GRADIENT_STEPS_PER_ITERATION
    assert max(abs(kl[s]) for s in first) < 1e-10  # both start from a reset: rounding alone
    if reset_each_iteration:
        assert max(abs(kl[s]) for s in second) < 1e-10
    else:
        assert min(kl[s] for s in second) > 1e-6
