"""benchmarks/pi_cartpole_batched_eval.py: Table 2's columns over many starts at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from run_folders import load_benchmark

TEACHER = str(Path(__file__).resolve().parent.parent / "benchmarks/teachers/cartpole_swingup_harder_sac")


def test_a_paired_share_cancels_the_spread_the_starts_share():
    batched = load_benchmark("pi_cartpole_batched_eval")
    reference = np.array([0.0, 900.0, 20.0, 700.0])
    same_starts = batched.paired_share(reference * 0.5, reference)
    assert same_starts["share"] == pytest.approx(0.5)
    # The differences (-0, -450, -10, -350) have std 223.2: the error is that, not the returns' 443.
    assert same_starts["standard_error"] == pytest.approx(np.std([0, 450, 10, 350], ddof=1) / 2 / 405)
    shifted = batched.paired_share(reference + 81.0, reference)
    assert shifted == {"share": pytest.approx(1.2), "standard_error": 0.0}
    es = load_benchmark("pi_cartpole_es")
    lengths, second_half = np.array([3, 1000, 40, 1000]), np.array([0.0, 450.0, 0.0, 350.0])
    braking = np.array([[1.0, 1.0, 0.5], [0.2, 0.4, 0.0], [0.6, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # Upright steps: 2 of episode 0 (actions 0.5 and 0.3, the teacher's -0.6 and 0.5), none of episode 2.
    upright_actions = np.array([[2, 0.8, 1.1, 1.3], [400, 40, 44, 20], [0, 0, 0, 0], [98, 9.2, 4.9, 8.7]])
    outcomes = es.Outcomes(
        reference, lengths, second_half, np.array([1000, 90, 1000, 130]), braking, braking + 0.5,
        np.array([0.0, 500.0, 0.0, 300.0]), np.array([0.0, 0.0, 0.0, 3.0]), upright_actions,
    )  # fmt: skip
    summary = batched.summary(outcomes, fast=np.array([True, False, True, False]))
    assert summary["braking_on_fast_starts"] == {"steps 0-10": 0.8, "steps 10-30": 0.5, "steps 30-60": 0.25}
    assert summary["force_on_fast_starts"] == {"steps 0-10": 1.3, "steps 10-30": 1.0, "steps 30-60": 0.75}
    assert "braking_on_fast_starts" not in batched.summary(outcomes)
    assert summary["kept_share"] == 0.5 and summary["mean"] == 405.0
    assert summary["ended_early_share"] == 0.5 and summary["ended_at_step_quartiles"][1] == 21.5
    assert summary["whole_episode_mean"] == 800.0
    assert summary["second_half_reward_per_step"] == 0.8 and summary["first_upright_median"] == 110.0
    # Of the whole episodes' second halves (500 steps each): up 500 and 300 steps, 0 and 3 falls.
    assert summary["second_half_upright_share"] == 0.8 and summary["second_half_drops_mean"] == 1.5
    # Pooled over the 500 upright steps of every episode, the teacher's columns only when labelled.
    assert summary["from_upright"] == {"steps": 500, "mean_abs_action": 0.1}
    labelled = batched.summary(outcomes, labelled=True)["from_upright"]
    assert labelled == pytest.approx(
        {"steps": 500, "mean_abs_action": 0.1, "teacher_mean_abs_action": 0.1, "mean_abs_error": 0.06}
    )
    no_upright = es.Outcomes(*outcomes[:-1], np.zeros((4, 4)))
    assert batched.summary(no_upright)["from_upright"] is None


def test_a_student_is_compared_with_its_teacher_start_by_start():
    batched = load_benchmark("pi_cartpole_batched_eval")
    teacher = np.array([1000, 1000, 1000, 12, 30])
    student = np.array([1000, 50, 70, 1000, 9])
    assert batched.against_teacher(student, teacher) == {
        "lost_where_teacher_kept": 2,
        "lost_at_step_quartiles": [55.0, 60.0, 65.0],
        "kept_where_teacher_lost": 1,
    }
    assert batched.against_teacher(teacher, teacher)["lost_at_step_quartiles"] is None


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--pi_dirs", TEACHER], "--pi_dirs must hold sensory-neuron students;"),
        (["--pi_dirs", "x", "--episodes", "1"], "--episodes must be at least 2"),
        (["--pi_dirs", ","], "--pi_dirs must name at least one"),
        (["--pi_dirs", "no/such/folder"], "--pi_dirs: "),
        (["--pi_dirs", "x", "--reshuffles", "25,0"], "--reshuffles must be at least 1 step each"),
        (["--pi_dirs", "x", "--reshuffles", "25,a"], "--reshuffles must be whole numbers of steps"),
    ],
)
def test_pi_cartpole_batched_eval_refuses_bad_arguments_in_one_sentence(extra, message, tmp_path, capsys):
    batched = load_benchmark("pi_cartpole_batched_eval")
    out = tmp_path / "report.json"
    assert batched.main(["--teacher_dir", TEACHER, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
    assert not out.exists()


@pytest.mark.large
def test_pi_cartpole_batched_eval_plays_every_column_on_the_same_starts(tmp_path):
    from run_folders import tiny_pi_cartpole_run

    batched, es = load_benchmark("pi_cartpole_batched_eval"), load_benchmark("pi_cartpole_es")
    student, out = str(tmp_path / "student"), tmp_path / "report.json"
    tiny_pi_cartpole_run(student)
    argv = ["--teacher_dir", TEACHER, "--pi_dirs", student, "--episodes", "4", "--test_seed", "3",
            "--out", str(out)]  # fmt: skip
    assert batched.main(argv) == 0
    report = json.loads(out.read_text())
    teacher, pupil = report["results"]["teacher"], report["results"][student]
    assert set(teacher) == {"5 obs", "5 obs (shuffled)"}
    reshuffles = {f"reshuffle every {t}" for t in (25, 50, 100, 200, 500)}  # Table 6's, by default
    assert set(pupil) == {
        "5 obs",
        "5 obs (shuffled)",
        "10 obs",
        "5 obs + 5 noise",
        batched.MEMORY_RESET,
        *reshuffles,
    }
    # The teacher labels the student's upright states in its "5 obs" column only (None: never up).
    labelled, unlabelled = pupil["5 obs"]["from_upright"], pupil["10 obs"]["from_upright"]
    assert labelled is None or {"teacher_mean_abs_action", "mean_abs_error"} <= set(labelled)
    assert unlabelled is None or set(unlabelled) == {"steps", "mean_abs_action"}
    permutation = report["settings"]["permutation"]
    assert sorted(permutation) == list(range(5)) and permutation != list(range(5))
    # The teacher's cells are its returns on the starts the test seed draws, first of all.
    starts = tf.constant(es.initial_states(np.random.default_rng(3), 4))
    net = batched.load_policy(TEACHER)
    upright = es.episode_outcomes(net)(starts, tf.constant([0, 0])).returns.numpy()
    assert teacher["5 obs"]["mean"] == pytest.approx(upright.mean())
    assert teacher["5 obs"]["mean"] > 100  # the committed teacher swings up from some of them
    shuffled = es.episode_outcomes(net, sensor_order=permutation)(starts, tf.constant([0, 0])).returns.numpy()
    assert teacher["5 obs (shuffled)"]["mean"] == pytest.approx(shuffled.mean())
    assert pupil["5 obs"]["over_teacher"]["share"] == pytest.approx(pupil["5 obs"]["mean"] / upright.mean())
    assert pupil["5 obs"]["over_own_upright"] == {"share": pytest.approx(1.0), "standard_error": 0.0}
    lengths = es.episode_outcomes(net)(starts, tf.constant([0, 0])).lengths.numpy()
    assert teacher["5 obs"]["ended_early_share"] == np.mean(lengths < 1000)
    assert set(pupil["5 obs"]["against_teacher"]) == {
        "lost_where_teacher_kept",
        "lost_at_step_quartiles",
        "kept_where_teacher_lost",
    }


@pytest.mark.large  # the Table 6 benchmark's column with a trained student (about a minute)
def test_a_reshuffle_gives_each_episode_an_order_of_its_own(tmp_path):
    """Table 6's column: each episode's readings permuted, again every ``reshuffle_every`` steps."""
    from run_folders import tiny_pi_cartpole_run

    batched, es = load_benchmark("pi_cartpole_batched_eval"), load_benchmark("pi_cartpole_es")
    starts = tf.constant(es.initial_states(np.random.default_rng(5), 6))
    seed = tf.constant([4, 9])
    teacher = batched.load_policy(TEACHER)
    steps = 200

    def returns(net, **options):
        return es.episode_outcomes(net, steps=steps, **options)(starts, seed).returns.numpy()

    # The MLP teacher reads its readings in place: one order for the whole episode changes its returns.
    upright = returns(teacher)
    whole_episode = returns(teacher, reshuffle_every=steps)
    assert not np.allclose(whole_episode, upright)
    # Each episode draws its own order: replayed with one fixed order, not every episode matches.
    fixed = [returns(teacher, sensor_order=order) for order in ([1, 0, 2, 3, 4], [4, 3, 2, 1, 0])]
    assert not any(np.allclose(whole_episode, f) for f in fixed)
    # A sensory-neuron student is exactly invariant to one order per episode, not to a new one each step.
    tiny_pi_cartpole_run(str(tmp_path / "student"))
    student = batched.load_policy(str(tmp_path / "student"))
    np.testing.assert_allclose(
        returns(student, reshuffle_every=steps), returns(student), rtol=1e-6
    )  # float32
    assert not np.allclose(returns(student, reshuffle_every=1), returns(student), rtol=1e-3)
    with pytest.raises(ValueError, match="reshuffle_every must be >= 1, without sensor_order"):
        es.episode_outcomes(student, sensor_order=[0, 1, 2, 3, 4], reshuffle_every=25)
