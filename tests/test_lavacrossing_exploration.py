"""``benchmarks/lavacrossing_exploration.py``: the successes of actors that have learned nothing.

What this file proves: a random walk's policy is the stated one (forward with its
probability, the rest shared); the counts add up (every finished episode ended in
the goal, in lava or at the time limit; the steps are all played, half on each
level); an agent that always moves forward never reaches the goal on these levels
within the time limit, so the count can be zero; a network actor reports its
probabilities, entropy and P(forward); bad arguments are one sentence.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from run_folders import load_benchmark


def test_a_walk_moves_forward_with_its_probability_and_shares_the_rest():
    explore = load_benchmark("lavacrossing_exploration")
    probabilities, measured = explore.walk_policy(0.55)(np.zeros((3, 14, 14, 3), np.uint8))
    np.testing.assert_allclose(probabilities, [[0.55, 0.15, 0.15, 0.15]] * 3)
    assert measured == {}


def test_the_counts_of_a_walk_add_up_level_by_level():
    explore = load_benchmark("lavacrossing_exploration")
    levels = explore.explore(explore.walk_policy(0.25), 16 * 40, np.random.default_rng(0))
    assert list(levels) == list(explore.LEVELS)
    for result in levels.values():
        assert result["steps"] == 8 * 40  # half of the environments on each level
        ended = result["success_per_episode"] + result["lava_share"] + result["truncated_share"]
        assert result["episodes"] > 0 and ended == pytest.approx(1.0)
        assert result["successes_per_100k_steps"] == pytest.approx(
            1e5 * result["successes"] / result["steps"]
        )
    # Uniform moves on these levels end most episodes in lava within a few dozen steps.
    assert all(r["lava_share"] > 0.5 for r in levels.values())


def test_an_agent_that_only_moves_forward_never_succeeds():
    explore = load_benchmark("lavacrossing_exploration")
    levels = explore.explore(explore.walk_policy(1.0), 16 * 30, np.random.default_rng(0))
    # It starts in the top-left corner facing east: it walks into lava or against a wall and stays there.
    assert sum(r["successes"] for r in levels.values()) == 0
    assert all(
        r["lava_share"] + r["truncated_share"] == pytest.approx(1.0) for r in levels.values() if r["episodes"]
    )


def test_a_network_actor_reports_its_policy(tmp_path):
    explore = load_benchmark("lavacrossing_exploration")
    out = tmp_path / "report.json"
    assert explore.main(["--walks", "", "--models", "cnn", "--steps", "64", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert run["actor"] == "cnn" and run["seed"] == 0
    for result in run["levels"].values():
        assert 0 < result["mean_entropy"] <= math.log(4) + 1e-9
        assert 0 < result["mean_forward_probability"] < 1
    assert report["command"].startswith("python benchmarks/lavacrossing_exploration.py")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--walks", "0.5,1.5"], "--walks must be probabilities in [0, 1]"),
        (["--walks", "x"], "--walks must be comma-separated numbers"),
        (["--steps", "8"], "--steps must be at least 16"),
        (["--walks", ""], "Give at least one actor"),
        (["--seeds", "-1", "--models", "cnn"], "--seeds must be distinct non-negative integers"),
    ],
)
def test_lavacrossing_exploration_refuses_bad_arguments_in_one_sentence(argv, message, tmp_path, capsys):
    explore = load_benchmark("lavacrossing_exploration")
    out = tmp_path / "report.json"
    assert explore.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
    assert not out.exists()
