"""``benchmarks/pi_cartpole_replay_fit.py``: a student's fit on recorded steps and in its own episodes.

What this file proves: replaying a policy's own episodes reproduces its actions
exactly (so the two fits measure the same policy the same way); the fit's
numbers are the stated means over the counted steps, with the pole up and
over all; bad arguments are one sentence; end to end (``large``) the report
holds one fit per recorded round and one for the student's own episodes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from run_folders import load_benchmark
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras.agents.algorithms import bc
from sit_keras.agents.networks.sensor_networks import SensorActorNetwork

TEACHER = "benchmarks/teachers/cartpole_swingup_harder_sac"
SMALL = {"output_dim": 8, "num_queries": 4, "hidden_size": 4, "projection_dim": 8}


def _student(seed: int) -> SensorActorNetwork:
    tf.keras.utils.set_random_seed(seed)
    net = SensorActorNetwork(
        tf.TensorSpec((5,), tf.float32), tensor_spec.BoundedTensorSpec((1,), tf.float32, -1.0, 1.0), SMALL
    )
    net.create_variables()
    return net


def test_replaying_a_policys_own_episodes_reproduces_its_actions():
    fit, es = load_benchmark("pi_cartpole_replay_fit"), load_benchmark("pi_cartpole_es")
    student, labeller = _student(0), _student(1)
    starts = tf.constant(es.initial_states(np.random.default_rng(0), 3))
    own = fit.own_episodes(student, labeller, starts, steps=40)
    assert own.observations.shape == (3, 40, 5) and own.actions.shape == own.labels.shape == (3, 40)
    assert own.running[:, 0].all() and np.abs(own.actions).max() <= 1.0
    step_types = np.full((3, 40), ts.StepType.MID, np.int32)
    step_types[:, 0] = ts.StepType.FIRST
    np.testing.assert_array_equal(fit.replay_actions(student, own.observations, step_types), own.actions)
    # The labeller is another policy: its labels are not the student's actions.
    assert not np.allclose(own.labels, own.actions)
    # A FIRST step in the middle restarts the state: the replay from there is a new episode's.
    step_types[1, 20] = ts.StepType.FIRST
    restarted = fit.replay_actions(student, own.observations, step_types)
    alone = fit.replay_actions(student, own.observations[1:2, 20:], step_types[1:2, 20:])
    np.testing.assert_allclose(restarted[1:2, 20:], alone, rtol=1e-5, atol=1e-6)  # another batch size


def test_own_episodes_with_noise_channels_replay_with_the_same_noise_after_the_readings():
    fit, es = load_benchmark("pi_cartpole_replay_fit"), load_benchmark("pi_cartpole_es")
    student, labeller = _student(0), _student(1)
    starts = tf.constant(es.initial_states(np.random.default_rng(0), 3))
    own = fit.own_episodes(student, labeller, starts, steps=30, noise_channels=2, seed=5)
    assert own.observations.shape == (3, 30, 5)  # the records hold the 5 readings, the labels their own
    noise = np.stack(
        [fit.NOISE_STD * tf.random.stateless_normal([3, 2], tf.constant([5, t])).numpy() for t in range(30)],
        1,
    )
    step_types = np.full((3, 30), ts.StepType.MID, np.int32)
    step_types[:, 0] = ts.StepType.FIRST
    replayed = fit.replay_actions(student, own.observations, step_types, noise=noise)
    np.testing.assert_allclose(replayed, own.actions, rtol=1e-5, atol=1e-6)
    # The noise is read: without it, or with another seed's, the student acts otherwise.
    assert not np.allclose(fit.replay_actions(student, own.observations, step_types), own.actions, atol=1e-4)
    other = fit.own_episodes(student, labeller, starts, steps=30, noise_channels=2, seed=6)
    assert not np.allclose(other.actions, own.actions, atol=1e-4)


def test_a_replay_with_recorded_previous_actions_feeds_them_as_training_does():
    fit, es = load_benchmark("pi_cartpole_replay_fit"), load_benchmark("pi_cartpole_es")
    student, rng = _student(0), np.random.default_rng(2)
    readings = es.observations(tf.constant(es.initial_states(rng, 2))).numpy()
    observations = (readings[:, None] + rng.normal(0, 0.1, (2, 12, 5))).astype(np.float32)
    step_types = np.full((2, 12), ts.StepType.MID, np.int32)
    step_types[:, 0] = ts.StepType.FIRST
    executed = np.linspace(-1, 1, 24).reshape(2, 12, 1)
    data = bc.TeacherData(observations, step_types, np.zeros((2, 12, 1)), [], executed)
    previous = data.previous_actions(fit.ACTION_SPEC)
    replayed = fit.replay_actions(student, observations, step_types, previous)
    distribution, _ = student.call(
        tf.constant(observations), tf.constant(step_types), (), previous_actions=tf.constant(previous)
    )
    expected = np.clip(distribution.mode().numpy()[..., 0], -1, 1)
    np.testing.assert_allclose(replayed, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(replayed, fit.replay_actions(student, observations, step_types))


def test_the_fit_is_the_mean_over_counted_steps_with_the_pole_up_and_over_all():
    fit = load_benchmark("pi_cartpole_replay_fit")
    observations = np.zeros((1, 4, 5), np.float32)
    observations[0, :, 2] = [1.0, 0.99, 0.0, 1.0]  # cos: up, up, down, up (not counted)
    actions = np.array([[0.5, -0.2, 1.0, 0.9]])
    labels = np.array([[1.0, 0.2, -1.0, 0.9]])
    counted = np.array([[True, True, True, False]])
    parts = fit.fit(actions, labels, observations, counted)
    assert parts["upright"] == {
        "steps": 2,
        "mean_abs_action": pytest.approx(0.35),
        "teacher_mean_abs_action": pytest.approx(0.6),
        "mean_abs_error": pytest.approx(0.45),
        "same_sign": 0.5,
    }
    assert parts["all"]["steps"] == 3 and parts["all"]["mean_abs_error"] == pytest.approx(2.9 / 3)
    assert parts["all"]["same_sign"] == pytest.approx(1 / 3)
    nothing = fit.fit(actions, labels, observations, np.zeros_like(counted))
    assert nothing["upright"] == {"steps": 0, **dict.fromkeys(list(parts["upright"])[1:])}


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--pi_dirs", TEACHER], "--pi_dirs must hold sensory-neuron students;"),
        (["--pi_dirs", "x", "--episodes", "0"], "--episodes must be at least 1"),
        (["--pi_dirs", "x", "--noise_channels", "-1"], "--noise_channels must be at least 0"),
        (["--pi_dirs", ","], "--pi_dirs must name at least one"),
        (["--pi_dirs", "no/such/folder"], "--pi_dirs: "),
    ],
)
def test_pi_cartpole_replay_fit_refuses_bad_arguments_in_one_sentence(extra, message, tmp_path, capsys):
    fit = load_benchmark("pi_cartpole_replay_fit")
    out = tmp_path / "report.json"
    assert fit.main(["--teacher_dir", TEACHER, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
    assert not out.exists()


@pytest.mark.large
def test_pi_cartpole_replay_fit_reports_each_recorded_round_and_the_own_episodes(tmp_path, capsys):
    from run_folders import tiny_pi_cartpole_run

    fit = load_benchmark("pi_cartpole_replay_fit")
    student, out = str(tmp_path / "student"), tmp_path / "report.json"
    tiny_pi_cartpole_run(student)
    argv = ["--teacher_dir", TEACHER, "--pi_dirs", student, "--episodes", "2", "--out", str(out)]
    assert fit.main(argv) == 2  # a PPO run has no recorded rounds
    assert "has no bc_data.npz" in capsys.readouterr().err
    rng = np.random.default_rng(0)
    step_types = np.ones((2, 30), np.int32)
    step_types[:, 0] = ts.StepType.FIRST
    rounds = [
        bc.TeacherData(
            rng.normal(size=(2, 30, 5)).astype(np.float32),
            step_types,
            rng.normal(size=(2, 30, 1)),
            [],
            rng.normal(size=(2, 30, 1)),
        )  # fmt: skip
        for _ in range(2)
    ]
    bc.save_rounds(f"{student}/{bc.DATA_FILE}", rounds)
    assert fit.main(argv) == 0
    report = json.loads(out.read_text())
    result = report["results"][student]
    assert len(result["recorded_rounds"]) == 2 and result["recorded_rounds"][0]["all"]["steps"] == 60
    # The rounds keep executed actions: they are replayed with them as well.
    assert len(result["recorded_rounds_executed"]) == 2
    assert set(result["own_episodes"]) == {"upright", "all"}
    assert 2 <= result["own_episodes"]["all"]["steps"] <= 2000
    assert report["commit"] and report["command"].startswith("python benchmarks/pi_cartpole_replay_fit.py")
    # With noise channels the same report holds the fits of the student reading them.
    assert fit.main([*argv, "--noise_channels", "3"]) == 0
    noisy = json.loads(out.read_text())["results"][student]
    assert noisy["recorded_rounds"][0]["all"]["steps"] == 60
    assert (
        noisy["recorded_rounds"][0]["all"]["mean_abs_error"]
        != result["recorded_rounds"][0]["all"]["mean_abs_error"]
    )
