"""benchmarks/pi_cartpole_es.py: its batched cart-pole against the package's, and a tiny ES run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from run_folders import load_benchmark

from sit_keras.agents.environments import cartpole_swingup
from sit_keras.agents.networks import policy_network

TEACHER = str(Path(__file__).resolve().parent.parent / "benchmarks/teachers/cartpole_swingup_harder_sac")


def _load_es():
    return load_benchmark("pi_cartpole_es")


def test_the_batched_cart_pole_follows_the_packages_step_by_step():
    es = _load_es()
    rng = np.random.default_rng(3)
    starts = es.initial_states(rng, 6)
    low, high = (
        np.array([0, 0, np.pi, 0]) - cartpole_swingup.INITIAL_RANGES,
        np.array([0, 0, np.pi, 0]) + (cartpole_swingup.INITIAL_RANGES),
    )
    assert np.all((starts >= low) & (starts <= high))
    env = cartpole_swingup.make()
    env.reset(seed=0)
    steps = 0
    for start in starts:
        # The package's own reset with an exact start (the Harder class draws its own).
        type(env).__mro__[1].reset(env, options={"initial_state": start})
        state = tf.constant(start[None])
        observation = cartpole_swingup.observation(env.state)
        for _ in range(400):
            # Towards the track's centre, with noise; beyond +-1 it is clipped by both.
            push = -observation[0] - 0.3 * observation[1] + rng.normal(0.0, 0.5)
            action = np.array([push], np.float32)
            observation, reward, terminated, _, _ = env.step(action)
            state, batched_reward, off_track = es.batched_step(state, tf.constant(action[None]))
            np.testing.assert_allclose(state.numpy()[0], np.array(env.state), atol=1e-6)
            np.testing.assert_allclose(es.observations(state).numpy()[0], observation, atol=1e-6)
            assert abs(batched_reward.numpy()[0] - reward) < 1e-6
            assert bool(off_track.numpy()[0]) == terminated
            steps += 1
            if terminated:
                break
    assert steps > 1000  # the starts were followed far, not only to an early fall


def test_an_episode_cut_at_a_horizon_is_the_start_of_the_whole_one():
    es = _load_es()
    net = load_benchmark("pi_cartpole_batched_eval").load_policy(TEACHER)
    starts = tf.constant(es.initial_states(np.random.default_rng(11), 24))
    whole_run = es.episode_outcomes(net)(starts, tf.constant([0, 0]))
    returns, lengths = whole_run.returns.numpy(), whole_run.lengths.numpy()
    cut_run = es.episode_outcomes(net, steps=40)(starts, tf.constant([0, 0]))
    cut, cut_lengths = cut_run.returns.numpy(), cut_run.lengths.numpy()
    before, after = lengths <= 40, lengths > 40
    assert before.any() and (lengths == 1000).any() and (after & (lengths < 1000)).any()  # every kind
    np.testing.assert_array_equal(cut_lengths, np.minimum(lengths, 40))
    np.testing.assert_allclose(cut[before], returns[before])  # ended before the cut: all of it
    assert np.all(cut[after] <= returns[after]) and np.all(cut[lengths == 1000] < returns[lengths == 1000])
    assert np.all(cut <= 40)  # at most a reward of 1 a step
    # The second half's return is part of the whole; the pole of a kept episode is up at some step.
    second_half, first_upright = whole_run.second_half_returns.numpy(), whole_run.first_upright.numpy()
    assert np.all(second_half <= returns + 1e-9) and np.all(second_half[lengths < 500] == 0)
    assert np.all(second_half[lengths == 1000] > 400) and np.all(first_upright[lengths == 1000] < 1000)
    np.testing.assert_array_equal(cut_run.first_upright.numpy() < 40, first_upright < 40)
    # Braking and force (windows of steps 0-10, 10-30, 30-60): |braking| <= force <= 1, the same in
    # the windows before the cut, and the teacher pushes a fast cart at nearly full force at once.
    braking, force = whole_run.braking.numpy(), whole_run.force.numpy()
    assert np.all(np.abs(braking) <= force + 1e-12) and np.all(force <= 1.0)
    np.testing.assert_allclose(cut_run.braking.numpy()[:, :2], braking[:, :2])
    np.testing.assert_allclose(cut_run.force.numpy()[:, :2], force[:, :2])
    # The teacher holds the pole it swung up: up through the second half of every whole episode,
    # with no fall there; labelled by itself, its actions where the pole is up agree exactly.
    kept = lengths == 1000
    np.testing.assert_array_equal(whole_run.second_half_upright.numpy()[kept], 500)
    np.testing.assert_array_equal(whole_run.second_half_drops.numpy(), 0)
    assert np.all(whole_run.second_half_upright.numpy()[lengths < 500] == 0)
    labelled = es.episode_outcomes(net, labeller=net)(starts, tf.constant([0, 0])).upright_actions.numpy()
    assert np.all(labelled[kept, 0] >= 500) and np.all(labelled[:, 0] <= lengths)
    np.testing.assert_allclose(labelled[:, 1], labelled[:, 2])
    np.testing.assert_array_equal(labelled[:, 3], 0)
    np.testing.assert_array_equal(whole_run.upright_actions.numpy()[:, 2:], 0)  # no labeller: no labels
    np.testing.assert_allclose(whole_run.upright_actions.numpy()[:, :2], labelled[:, :2])
    fast = np.abs(starts.numpy()[:, 1]) >= 5.0
    assert fast.sum() >= 5 and force[fast, 0].mean() > 0.8


def test_a_cut_episode_still_on_the_track_counts_its_survival_value():
    es = _load_es()
    returns, lengths = np.array([10.0, 3.0, 40.0]), np.array([200, 7, 200])
    assert es.valued_mean(returns, lengths, 200, 0.0) == pytest.approx(53 / 3)
    assert es.valued_mean(returns, lengths, 200, 700.0) == pytest.approx((710 + 3 + 740) / 3)


def test_centred_ranks_ignore_the_scale_of_the_returns():
    es = _load_es()
    ranks = es.centred_ranks(np.array([5.0, 1000.0, -3.0, 7.0]))
    np.testing.assert_allclose(ranks, [-1 / 6, 0.5, -0.5, 1 / 6])


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--population", "3"], "--population must be even"),
        (["--sigma", "0"], "--sigma and --learning_rate must be positive"),
        (["--generations", "0"], "--generations must be at least 1"),
        (["--horizon", "1001"], "--horizon must be between 1 and 1000 steps"),
        (["--survival_value", "700"], "--survival_value needs a --horizon shorter than a whole episode."),
    ],
)
def test_pi_cartpole_es_refuses_bad_arguments_in_one_sentence(extra, message, tmp_path, capsys):
    es = _load_es()
    argv = ["--pi_dir", str(tmp_path / "none"), "--out_dir", str(tmp_path / "out"), *extra]
    assert es.main(argv) == 2
    assert capsys.readouterr().err.strip().startswith(message)
    assert not (tmp_path / "out").exists()


@pytest.mark.large
def test_pi_cartpole_es_writes_its_best_weights_as_a_folder_that_plays_its_recorded_mean(tmp_path, capsys):
    from run_folders import tiny_pi_cartpole_run

    es = _load_es()
    student = str(tmp_path / "student")
    assert es.main(["--pi_dir", student, "--out_dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("--pi_dir: ")
    tiny_pi_cartpole_run(student)
    checkpoints = Path(student) / "checkpoints"
    checkpoints.rename(checkpoints.with_name("moved"))
    assert es.main(["--pi_dir", student, "--out_dir", str(tmp_path / "out")]) == 2
    assert "has no checkpoint; train it first." in capsys.readouterr().err
    checkpoints.with_name("moved").rename(checkpoints)
    out_dir, out = tmp_path / "es", tmp_path / "es.json"
    argv = ["--pi_dir", student, "--out_dir", str(out_dir), "--generations", "2", "--population", "2",
            "--episodes", "2", "--eval_every", "1", "--validation_episodes", "3", "--sigma", "0.5",
            "--noise_channels", "2", "--out", str(out)]  # fmt: skip
    assert es.main(argv) == 0
    report = json.loads(out.read_text())
    history = report["history"]
    assert report["finished"] is True
    assert [h["generation"] for h in history] == [0, 1, 2]
    assert all("population_mean" in h for h in history[:2]) and "population_mean" not in history[2]
    best = report["best"]
    assert best["validation"] == max((h["validation"] for h in history), key=np.mean)
    assert len(best["validation"]) == 2  # clean, and with the noise channels
    # The folder holds the best weights: they play the validation starts to the recorded mean.
    description = policy_network.read_description(str(out_dir))
    net = policy_network.build_network(description)
    policy_network.restore_network(net, str(out_dir), description.checkpoint_attribute)
    seed = report["settings"]["validation_seed"]
    starts = tf.constant(es.initial_states(np.random.default_rng(seed), 3))
    played = [np.mean(es.episode_outcomes(net, n)(starts, tf.constant([seed, 0])).returns) for n in (0, 2)]
    assert played == pytest.approx(best["validation"])
    # The folder's own copy of the report, which pi_cartpole_distill.py --pi_dir quotes.
    assert json.loads((out_dir / "es_run.json").read_text()) == report
    distill = load_benchmark("pi_cartpole_distill")
    assert distill.pi_dir_record(str(out_dir))["es_run"] == report
    assert es.main(argv) == 2 and "exists" in capsys.readouterr().err  # never writes over a folder


def test_a_memory_reset_restarts_only_a_recurrent_policys_state():
    """``reset_at``: the policy is told an episode starts there; the cart plays on."""
    from tf_agents.specs import tensor_spec

    from sit_keras.agents.networks.sensor_networks import SensorActorNetwork

    es = _load_es()
    starts = tf.constant(es.initial_states(np.random.default_rng(5), 8))
    seed = tf.constant([0, 0])
    teacher = load_benchmark("pi_cartpole_batched_eval").load_policy(TEACHER)
    # A feed-forward policy has no memory to lose: the same episodes.
    plain, reset = (es.episode_outcomes(teacher, steps=60, reset_at=r)(starts, seed) for r in (None, 30))
    np.testing.assert_array_equal(plain.returns.numpy(), reset.returns.numpy())
    student = SensorActorNetwork(
        tf.TensorSpec((5,), tf.float32),
        tensor_spec.BoundedTensorSpec((1,), tf.float32, -1.0, 1.0),
        {"hidden_size": 4, "num_queries": 4},
        (8,),
    )
    student.create_variables()
    rng = np.random.default_rng(0)
    for v in student.trainable_variables:  # away from the initialisation, so that the memory matters
        v.assign(v + rng.normal(0.0, 0.2, v.shape).astype(np.float32))
    play = {r: es.episode_outcomes(student, steps=60, reset_at=r)(starts, seed) for r in (None, 0, 30, 50)}
    # A reset at the first step is the episode's own start; later ones change what follows them.
    np.testing.assert_array_equal(play[0].returns.numpy(), play[None].returns.numpy())
    for r in (30, 50):  # (an action moves the cart from the next step on: Euler steps)
        assert not np.array_equal(play[r].returns.numpy(), play[None].returns.numpy())
    # Up to the reset the steps are the same: the first 30 steps' braking and force windows agree.
    np.testing.assert_array_equal(play[30].force.numpy()[:, :2], play[None].force.numpy()[:, :2])
