"""The PPO actor diagnostics of issue 24: benchmarks/ppo_trace.py, ppo_noise_phase.py, sit_state_signal.py,
lavacrossing_failures.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import each other, as when run from the shell
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_effective_rank_counts_equal_directions_and_is_zero_for_constant_features():
    trace = _load("ppo_trace")
    rng = np.random.default_rng(0)
    # Three orthonormal directions with equal spread: exactly three; a constant: none.
    basis = np.linalg.qr(rng.standard_normal((8, 3)))[0].T  # (3, 8)
    signs = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], np.float64)
    assert trace.effective_rank(signs @ basis) == pytest.approx(3.0)
    assert trace.effective_rank(np.ones((10, 8))) == 0.0
    # One dominant direction pulls the count towards one.
    assert 1.0 < trace.effective_rank(signs @ (basis * [[10.0], [1.0], [1.0]])) < 2.0


def test_measure_reports_a_blind_actor_as_dead_and_state_independent():
    """An actor whose last ReLU layer is pushed below zero everywhere: every unit dead, no spread."""
    noise = _load("ppo_noise_phase")
    trace = _load("ppo_trace")
    probe = noise.collect(40, noise.HELDOUT_SEED_OFFSET, 0.3, np.random.default_rng(0))
    net = noise.actor_for("cnn")
    recorder = trace.ReluRecorder(net)
    alive = trace.measure(net, recorder, probe)
    assert set(alive["relu"]) == {layer.name for layer in recorder.layers} and len(recorder.layers) == 2
    assert all(r["dead_fraction"] < 1 for r in alive["relu"].values())
    assert alive["policy"]["logit_std_across_states"] > 0 and alive["features"]["effective_rank"] > 1
    last = recorder.layers[-1]
    last.bias.assign(np.full(last.bias.shape, -1e3, np.float32))
    blind = trace.measure(net, recorder, probe)
    assert blind["relu"][last.name] == {"units": 64, "dead_fraction": 1.0, "active_per_state": 0.0}
    assert blind["features"]["std_across_states"] == 0.0 and blind["features"]["effective_rank"] == 0.0
    assert blind["policy"]["logit_std_across_states"] == 0.0
    # No gradient reaches the layers below a dead layer.
    assert blind["gradients"]["conv_0"]["norm"] == 0.0 and alive["gradients"]["conv_0"]["norm"] > 0


@pytest.mark.large  # a benchmark smoke run; its measurements are tested above on tiny networks
def test_noise_phase_quick_trains_on_noise_and_measures_every_iteration(tmp_path):
    out = tmp_path / "noise.json"
    assert _load("ppo_noise_phase").main(["--quick", "--models", "cnn", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert run["model"] == "cnn" and [r["iteration"] for r in run["trace"]] == [0, 1, 2]
    assert [r["env_steps"] for r in run["trace"]] == [0, 2048, 4096]
    # The actor moved: its logits changed between the measurements.
    spreads = [r["policy"]["logit_std_across_states"] for r in run["trace"]]
    assert len(set(spreads)) == 3
    assert report["settings"]["measured_states"] == 100


@pytest.mark.parametrize(
    "script, argv, message",
    [
        ("ppo_noise_phase", ["--models", "resnet"], "unknown --models(s) resnet"),
        ("ppo_noise_phase", ["--iterations", "0"], "--iterations must be >= 1"),
        ("ppo_noise_phase", ["--seeds", "a"], "--seeds must be comma-separated integers"),
        ("sit_state_signal", ["--models", "cnn"], "unknown --models(s) cnn"),  # not a SiT: no stages
        ("sit_state_signal", ["--num_states", "1"], "--num_states must be >= 2"),
        ("sit_state_signal", ["--seeds", "1,-1"], "--seeds must be distinct non-negative integers"),
        ("ppo_noise_phase", ["--out", str(BENCHMARKS)], "--out must be a file path, not a folder"),
        ("lavacrossing_failures", ["--root_dir", ".", "--num_episodes", "0"], "--num_episodes must be >= 1"),
        ("lavacrossing_failures", ["--root_dir", ".", "--rows", "easy"], "Unknown --rows easy"),
        ("lavacrossing_failures", ["--root_dir", str(BENCHMARKS)], "holds no policies/greedy_policy"),
    ],
)
def test_diagnostics_refuse_bad_arguments_in_one_sentence(script, argv, message, capsys):
    module = _load(script)
    capsys.readouterr()  # a first import's library notices (gym's) are not the script's answer
    assert module.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_failures_name_a_policy_folder_without_a_saved_model(tmp_path, capsys):
    for saved in ("greedy_policy", "policy"):
        (tmp_path / "policies" / saved).mkdir(parents=True)
    assert _load("lavacrossing_failures").main(["--root_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot load {tmp_path}/policies/greedy_policy" in err and "Traceback" not in err


def test_failures_count_each_way_an_episode_ends():
    failures = _load("lavacrossing_failures")
    episodes = [
        {"success": True, "length": 20},
        {"success": False, "length": 3},  # lava at once
        {"success": False, "length": 40},  # lava later
        {"success": False, "length": 324},  # the time limit of LavaCrossingS9
    ]
    states = [np.full((14, 14, 3), v, np.uint8) for v in range(3)]
    traces = [[states[0]] * 21, [states[0]] * 4, [states[0]] * 41, [states[1], states[2]] * 162 + [states[1]]]
    summary = failures.summarize_outcomes(episodes, max_steps=324, traces=traces)
    assert (summary["success"], summary["lava"], summary["time_limit"]) == (0.25, 0.5, 0.25)
    assert summary["lava_within_early_steps"] == 0.25 and summary["lava_steps"] == [3, 40]
    assert summary["lava_median_step"] == 21.5
    assert summary["time_limit_loops"] == {
        "time_limit_episodes": 1, "cycle_periods": {"2": 1}, "cycles_facing_the_edge": {}
    }  # fmt: skip
    assert failures.max_steps_of("minigrid:LavaCrossingS9N2") == 4 * 9 * 9


def test_failures_find_the_cycle_a_looping_episode_ends_in():
    period = _load("lavacrossing_failures").cycle_period
    a, b, c = (np.full((2, 2, 3), v, np.uint8) for v in range(3))
    assert period([c] * 5 + [a] * 40) == 1
    assert period([c] * 5 + [a, b, c] * 14) == 3
    assert period([a, b] * 5 + [c] * 35) is None  # the last 40 do not repeat: the cycle starts too late
    assert period([a, b, b, a, b, c] * 7) == 6


def test_failures_read_the_agents_cell_and_heading_off_the_observation():
    """Every state of a few random LavaCrossing walks: the decoded pose is MiniGrid's (inner cells)."""
    from minigrid.core.constants import DIR_TO_VEC

    from sit_keras.agents.environments.minigrid_env import SiTMiniGrid

    failures = _load("lavacrossing_failures")
    env = SiTMiniGrid("MiniGrid-LavaCrossingS9N2-v0")
    rng = np.random.default_rng(0)
    facing, seen, at_edge = 0, set(), None
    for episode in range(8):
        observation, _ = env.reset(seed=episode)
        for _ in range(60):
            x, y = (int(v) for v in env.minigrid.agent_pos)
            heading = int(env.minigrid.agent_dir)
            assert failures.agent_pose(observation) == (x - 1, y - 1, heading)
            dx, dy = DIR_TO_VEC[heading]
            out = not (1 <= x + dx <= 7 and 1 <= y + dy <= 7)
            assert failures.faces_the_edge(observation) == out
            facing += out
            seen.add(heading)
            at_edge = observation if out else at_edge
            observation, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
            if terminated or truncated:
                break
    assert facing > 0 and seen == {0, 1, 2, 3}
    # Pressing into the wall (period 1) and a 3-cycle through the same state: both loops face the edge.
    inside = np.zeros_like(at_edge)
    loops = failures.summarize_loops([[inside] * 3 + [at_edge] * 40, [at_edge, inside, inside] * 14])
    assert loops["cycle_periods"] == loops["cycles_facing_the_edge"] == {"1": 1, "3": 1}


def test_state_signal_is_spread_over_the_shared_part():
    signal = _load("sit_state_signal").state_signal
    shared = np.array([3.0, 4.0])  # RMS 3.5355
    assert signal(np.tile(shared, (5, 1))) == 0.0  # every state the same
    spread = np.array([[1.0, -1.0], [-1.0, 1.0]])  # std 1 in each feature
    assert signal(shared + spread) == pytest.approx(1.0 / np.sqrt(12.5))
    assert signal(np.zeros((3, 2, 2))) == float("inf")  # nothing shared, images flattened


def test_state_signal_measures_every_stage_and_the_head(tmp_path):
    module = _load("sit_state_signal")
    out = tmp_path / "signal.json"
    argv = ["--models", "sit_small_chiral_m4_corners,sit_small_chiral_m4_corners_sharp", "--seeds", "0",
            "--num_states", "30", "--out", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    report = json.loads(out.read_text())
    plain, sharp = (report["results"][m]["seeds"][0] for m in argv[1].split(","))
    assert list(plain["state_signal"]) == ["stem", "pooled", "local", "token"]
    # Same stem and pooling weights; the scaled queries and keys change only the attention.
    assert sharp["state_signal"]["pooled"] == pytest.approx(plain["state_signal"]["pooled"])
    assert sharp["state_signal"]["token"] != pytest.approx(plain["state_signal"]["token"])
    assert 0 <= plain["head_units_dead"] + plain["head_units_always_on"] <= 1
    assert report["measured_states"] == 30
    assert report["command"].startswith("python benchmarks/sit_state_signal.py --models")


# A benchmark run on a sit-train folder; what it measures at each checkpoint:
# test_measure_reports_a_blind_actor_as_dead_and_state_independent and the effective-rank test.
@pytest.mark.large
def test_ppo_trace_reads_every_checkpoint_of_a_run_trained_with_sit_train(tmp_path):
    from run_folders import tiny_lavacrossing_run

    root = tmp_path / "run"
    longer = ("train_eval.total_env_steps = 64", "train_eval.checkpoint_interval = 16")
    tiny_lavacrossing_run(str(root), longer)
    out = tmp_path / "trace.json"
    command = [sys.executable, str(BENCHMARKS / "ppo_trace.py"), "--root_dir", str(root),
               "--num_states", "30", "--out", str(out)]  # fmt: skip
    traced = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert traced.returncode == 0, traced.stderr[-2000:]
    report = json.loads(out.read_text())
    # The run keeps its 3 newest checkpoints (16 steps apart, the last at the end): all read, in order.
    steps = [r["env_steps"] for r in report["trace"]]
    assert steps == sorted(steps) and len(steps) == 3 and steps[-1] == 64
    assert report["states"]["count"] == 30 and report["network"]["encoder"] == "cnn"
    for record in report["trace"]:
        assert 0 <= record["policy"]["expert_accuracy"] <= 1
    missing = subprocess.run([*command[:2], "--root_dir", str(tmp_path)], capture_output=True, text=True)
    assert missing.returncode == 2 and "holds no policy_network.json" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.large
def test_failures_replay_the_evaluations_episodes(tmp_path):
    """The failure counts come from agents.evaluate's episodes: the greedy success rates agree exactly."""
    from run_folders import tiny_lavacrossing_run

    from sit_keras.agents import evaluate

    root = tmp_path / "run"
    tiny_lavacrossing_run(str(root))
    out = tmp_path / "failures.json"
    argv = ["--root_dir", str(root), "--rows", "train: easy", "--num_episodes", "16", "--out", str(out)]
    assert _load("lavacrossing_failures").main(argv) == 0
    report = json.loads(out.read_text())
    for kind in ("greedy", "sampling"):
        counts = report["results"][kind]["train: easy"]
        assert counts["success"] + counts["lava"] + counts["time_limit"] == pytest.approx(1.0)
        assert counts["episodes"] == 16 and counts["max_steps"] == 4 * 9 * 9
    policy = evaluate.load_policy(str(root / "policies" / "greedy_policy"))  # sampling draws differ per run
    expected = evaluate.evaluate(policy, "minigrid:LavaCrossingS9N1", num_episodes=16)["none"]
    assert report["results"]["greedy"]["train: easy"]["success"] == expected["success_rate"]
    assert report["command"].startswith("python benchmarks/lavacrossing_failures.py --root_dir")


def test_a_reports_command_reruns_as_written():
    """Bindings with spaces and quotes stay one argument each when the recorded command is pasted."""
    import shlex

    from sit_keras.benchmarking import command_line, seed_list

    argv = ["--gin_bindings", "train_eval.checkpoint_interval = 100000", "--gin_bindings", "a.b = 'c'"]
    command = command_line("minigrid_rotation.py", argv)
    assert shlex.split(command) == ["python", "benchmarks/minigrid_rotation.py", *argv]
    assert seed_list("0, 2,3") == [0, 2, 3]


def test_class_token_attention_summarises_self_attending_and_uniform_rows():
    attention = _load("class_token_attention")
    keys = 10
    on_itself = np.zeros((4, 3, 2, keys))
    on_itself[..., 0] = 1.0
    summary = attention.summarise(on_itself)
    assert summary["weight_on_itself"] == 1.0 and summary["largest_weight"] == 1.0
    assert summary["entropy"] == pytest.approx(0.0, abs=1e-9) and summary["weight_std_across_states"] == 0.0
    uniform = attention.summarise(np.full((4, 3, 2, keys), 1 / keys))
    assert uniform["weight_on_itself"] == pytest.approx(0.1)
    assert uniform["entropy"] == pytest.approx(np.log(10))
    assert uniform["uniform_entropy"] == pytest.approx(np.log(10)) and uniform["rows_per_state"] == 2


def test_class_token_attention_reads_a_sit_actors_local_and_global_class_tokens():
    import tensorflow as tf

    attention = _load("class_token_attention")
    noise = _load("ppo_noise_phase")
    probe = noise.collect(6, noise.HELDOUT_SEED_OFFSET, 0.3, np.random.default_rng(0))
    softmax = tf.nn.softmax
    local, grid = attention.measure(noise.actor_for("sit_small_chiral_m4_corners"), probe["obs"])
    assert tf.nn.softmax is softmax  # put back
    assert local["keys"] == 10 and local["rows_per_state"] > 1  # one class token per window
    assert grid["keys"] > 10 and grid["rows_per_state"] == 1
    for summary in (local, grid):
        assert 0 < summary["weight_on_itself"] < summary["largest_weight"] <= 1
        assert 0 < summary["entropy"] <= summary["uniform_entropy"] + 1e-6
    assert attention.measure(noise.actor_for("cnn"), probe["obs"]) == []  # no class tokens


def test_class_token_attention_refuses_a_folder_without_a_run_in_one_sentence(tmp_path, capsys):
    attention = _load("class_token_attention")
    assert attention.main(["--root_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds no policy_network.json; train with sit-train first." in err and "Traceback" not in err
