"""Smoke runs of the RL benchmarks (benchmarks/ppo_throughput.py, benchmarks/minigrid_rotation.py,
benchmarks/atari100k.py, benchmarks/dmc_walker.py, benchmarks/lavacrossing_probe.py, the pi_cartpole
scripts)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
from pathlib import Path

import gin
import numpy as np
import pytest
from run_folders import load_benchmark

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    return load_benchmark(name)


@pytest.fixture(autouse=True)
def _no_gin_bindings_left_behind():
    """The benchmarks' ``main`` runs in this process and binds gin: cleared after each test, so that no
    binding reaches another module's tests on the same worker."""
    yield
    gin.clear_config()


# A benchmark run; PPO on Procgen: test_ppo_training; ratios: test_speed_ratios_cover_every_pair_in_order.
@pytest.mark.large
def test_ppo_throughput_quick_on_procgen(tmp_path, capsys):
    out = tmp_path / "ppo.json"
    module = _load("ppo_throughput")
    assert module.main(["--quick", "--models", "impala_cnn,vit", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    runs = {run["model"]: run for run in report["runs"]}
    assert list(runs) == ["impala_cnn", "vit"]
    for run in runs.values():
        summary = run["summary"]
        # Env steps/s: the median of the trainer's SPS over the iterations after the first (tracing).
        assert summary["timed_iterations"] == len(run["iterations"]) - 1 == 1
        # The quick rollout (4 envs x 4 steps) is smaller than the configs' minibatch (2048): one.
        assert run["num_minibatches"] == 1 and run["minibatch_size"] == 16
        assert summary["env_steps_per_second"] == run["iterations"][1]["SPS"] > 0
        parts = [summary[k] for k in module.FRACTIONS]
        assert abs(sum(parts) - 1.0) < 1e-9 and all(p > -1e-3 for p in parts)
    # Procgen runs report the normalised score of Cobbe et al.
    assert "NormalizedReturn" in runs["impala_cnn"]["last"]
    speeds = report["env_steps_per_second"]
    assert speeds == {model: run["summary"]["env_steps_per_second"] for model, run in runs.items()}
    ratio = speeds["vit"] / speeds["impala_cnn"]
    assert report["ratios"] == {"vit_over_impala_cnn_env_steps_per_second": pytest.approx(ratio)}
    printed = capsys.readouterr().out
    assert "| model | env steps/s | x impala_cnn |" in printed
    assert f"| impala_cnn | {speeds['impala_cnn']:.0f} | 1.00 |" in printed
    assert f"| vit | {speeds['vit']:.0f} | {ratio:.2f} |" in printed
    assert f"vit_over_impala_cnn_env_steps_per_second: {ratio:.2f}" in printed


def test_speed_ratios_cover_every_pair_in_order():
    ratios = _load("ppo_throughput").speed_ratios({"sit": 10.0, "impala_cnn": 170.0, "vit": 40.0})
    assert ratios == {
        "impala_cnn_over_sit_env_steps_per_second": 17.0,
        "vit_over_sit_env_steps_per_second": 4.0,
        "vit_over_impala_cnn_env_steps_per_second": pytest.approx(40.0 / 170.0),
    }


@pytest.mark.parametrize(
    "family",
    # Benchmark smoke runs (a minute each): make test-large. The default run tests the script's
    # refusals, its stopped run and its critics below, the training it calls in test_harness and the
    # rotated environments it evaluates on in test_environments.
    [pytest.param(family, marks=pytest.mark.large) for family in ("lavacrossing", "lavagap")],
)
def test_minigrid_rotation_quick(family, tmp_path):
    out = tmp_path / "table4.json"
    module = _load("minigrid_rotation")
    args = ["--quick", "--family", family, "--root", str(tmp_path / "runs"), "--out", str(out)]
    assert module.main(args) == 0
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert set(report["rows"]) == set(module.FAMILIES[family][2])
    for kind in ("sampling", "greedy"):
        assert set(run[kind]) == set(report["rows"])
        for row in run[kind].values():
            assert 0.0 <= row["success_rate"] <= 1.0
        assert "| rotations average |" in report["tables"][kind]
    hard = "LavaCrossingS9N3" if family == "lavacrossing" else "LavaGapS7"
    assert report["rows"]["hard"]["env"] == f"minigrid:{hard}"
    assert report["command"].startswith("python benchmarks/minigrid_rotation.py --quick")
    assert report["commit"]


def test_minigrid_rotation_reports_a_stopped_run_in_one_line(tmp_path, capsys, monkeypatch):
    """SIGTERM stops a run with a checkpoint (stops.Interrupted): one sentence, no traceback, no report."""
    from sit_keras.agents.training import stops
    from sit_keras.command_line import INTERRUPTED

    module = _load("minigrid_rotation")
    message = (
        "stopped at 2048 environment steps, saved in r/checkpoints/ckpt-8; rerun the same command to resume."
    )

    def stopped(*args, **kwargs):
        raise stops.Interrupted(message)

    monkeypatch.setattr(module, "train_one", stopped)
    out = tmp_path / "report.json"
    assert module.main(["--quick", "--root", str(tmp_path / "runs"), "--out", str(out)]) == INTERRUPTED
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"minigrid_rotation.py: {message}" and "Traceback" not in err
    assert not out.exists()


def test_minigrid_rotation_keeps_a_shared_torso_and_gives_other_models_the_cnn_critic():
    module = _load("minigrid_rotation")
    config = str(module.CONFIG_ROOT / "minigrid" / "lavacrossing_{}.gin")
    assert module.model_bindings("lavacrossing", config.format("sit_chiral"), []) == module.CRITIC
    assert module.model_bindings("lavacrossing", config.format("sit_chiral_shared"), []) == []
    assert module.model_bindings("lavacrossing", config.format("cnn_shared"), []) == []
    shared = ["ppo.value_encoder = None", "ppo.shared_torso = True"]
    assert module.model_bindings("lavacrossing", config.format("sit_chiral"), shared) == []
    # The shared configs then parse into a run that PPO accepts.
    module.train.parse_gin([config.format("sit_chiral_shared")], [])
    try:
        assert gin.query_parameter("ppo.shared_torso") is True
        assert gin.query_parameter("ppo.value_encoder") is None
    finally:
        gin.clear_config()


def _table4_part(
    path: Path,
    runs: list[tuple[str, int, float]],
    curve: dict | None = None,
    first_step_rule: str | None = None,
    **settings,
) -> str:
    """A minigrid_rotation report with one greedy and sampling success rate per (model, seed), and a
    mean return of 0.9 times it; with ``curve``, a one-run part's ``training_curve`` (counted by
    ``first_step_rule``, where given)."""
    module = _load("minigrid_rotation")
    rows = list(module.ROWS)
    report = {
        "command": f"python benchmarks/minigrid_rotation.py --out {path}",
        "commit": "abc1234",
        "settings": {"family": "lavacrossing", "env_steps": 100, "num_episodes": 4, "gin_bindings": []}
        | settings,
        "rows": {row: {} for row in rows},
        "runs": [
            {
                "model": model,
                "seed": seed,
                **{
                    kind: {row: {"success_rate": success, "mean_return": 0.9 * success} for row in rows}
                    for kind in ("sampling", "greedy")
                },
            }
            for model, seed, success in runs
        ],
    }
    if curve is not None:
        report["training_curve"] = curve
    if first_step_rule is not None:
        report["first_step_rule"] = first_step_rule
    path.write_text(json.dumps(report))
    return str(path)


def test_minigrid_rotation_merges_parts_of_one_protocol(tmp_path, capsys):
    module = _load("minigrid_rotation")
    parts = [
        _table4_part(tmp_path / "sit0.json", [("sit_small", 0, 1.0)]),
        _table4_part(
            tmp_path / "sit1.json", [("sit_small", 1, 0.5)], curve={"success_every_250k": [[250, 0.5]]}
        ),
        _table4_part(tmp_path / "cnn.json", [("cnn", 0, 0.25), ("cnn", 1, 0.75)]),
    ]
    out = tmp_path / "table4.json"
    assert module.main(["--merge", ",".join(parts), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [(run["model"], run["seed"]) for run in report["runs"]] == [
        ("sit_small", 0), ("sit_small", 1), ("cnn", 0), ("cnn", 1)
    ]  # fmt: skip
    assert "| train: easy | 0.75 ± 0.25 | 0.50 ± 0.25 |" in report["tables"]["greedy"]
    # The paper's metric, mean return, with the same ± (population std over seeds).
    assert "| train: easy | 0.68 ± 0.23 | 0.45 ± 0.23 |" in report["mean_return_tables"]["greedy"]
    assert "population standard deviation" in report["plus_minus"]
    # Beside the paper's column of each model's architecture (benchmarks/papers.json), as printed there.
    assert report["paper_tables"]["greedy"].splitlines()[:3] == [
        "| test task | sit_small (2 seeds) | paper Table 4 SiT-1 | cnn (2 seeds) | paper Table 4 CNN |",
        "| --- | ---: | ---: | ---: | ---: |",
        "| train: easy | 0.68 ± 0.23 | 0.90 ± 0.23 | 0.45 ± 0.23 | 0.96 ± 0.01 |",
    ]
    # A one-run part's training curve is kept under its run's name.
    assert report["training_curves"] == {"sit_small_seed1": {"success_every_250k": [[250, 0.5]]}}
    assert [part["commit"] for part in report["parts"]] == ["abc1234"] * 3
    merge = f"--merge {','.join(parts)} --out {out}"
    assert report["command"] == f"python benchmarks/minigrid_rotation.py {merge}"
    assert report["paper_table4_cnn_sit_20M_steps"]["rotations average"] == [0.0, 0.91]
    printed = capsys.readouterr().out
    assert "| test task | sit_small | cnn |" in printed
    assert "mean ± std over seeds sit_small [0, 1]; cnn [0, 1]," in printed


def test_minigrid_rotation_shows_a_one_seed_model_without_a_spread(tmp_path):
    """A model with one seed has no standard deviation: its cells hold the value alone."""
    module = _load("minigrid_rotation")
    parts = [
        _table4_part(tmp_path / "sit0.json", [("sit_small", 0, 1.0)]),
        _table4_part(tmp_path / "cnn.json", [("cnn", 0, 0.25), ("cnn", 1, 0.75)]),
    ]
    report = module.merge_reports(parts)
    assert "| train: easy | 1.00 | 0.50 ± 0.25 |" in report["tables"]["greedy"]
    assert report["paper_tables"]["greedy"].splitlines()[0].startswith("| test task | sit_small (1 seed) |")
    assert "one seed shows its value alone" in report["plus_minus"]


def test_minigrid_rotation_names_the_paper_column_of_each_architecture():
    """Table 4's column where the paper has one; the SiT without its local layer only in Table 5."""
    module = _load("minigrid_rotation")
    assert module.paper_column("sit_grid_readout") == ("table_4", "SiT-1")
    assert module.paper_column("sit_grid_readout_global") == ("table_5", "SiT 2 global")
    assert module.paper_column("vit") == ("table_4", "ViT")
    assert module.paper_column("not_a_config") is None


def test_minigrid_rotation_merges_parts_that_differ_only_in_how_often_they_save(tmp_path):
    """A checkpoint interval (a binding a resumed run may change) is not part of the protocol."""
    module = _load("minigrid_rotation")
    first = _table4_part(tmp_path / "a.json", [("cnn", 0, 1.0)], gin_bindings=["ppo.num_minibatches=8"])
    other = _table4_part(
        tmp_path / "b.json",
        [("siet", 0, 0.5)],
        gin_bindings=["ppo.num_minibatches = 8", "train_eval.checkpoint_interval = 50000"],
    )
    out = tmp_path / "out.json"
    assert module.main(["--merge", f"{first},{other}", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["gin_bindings"] == ["ppo.num_minibatches=8"]
    assert report["parts"][1]["settings"]["gin_bindings"][1] == "train_eval.checkpoint_interval = 50000"


def test_minigrid_rotation_keeps_the_rule_its_parts_count_first_steps_by(tmp_path):
    """The parts' curves count their first step at 0.9 one way: the merged report says which."""
    module = _load("minigrid_rotation")
    parts = [
        _table4_part(tmp_path / "a.json", [("cnn", 0, 1.0)], first_step_rule="float32: as logged"),
        _table4_part(tmp_path / "b.json", [("cnn", 1, 1.0)], first_step_rule="float32: as logged"),
    ]
    assert module.merge_reports(parts)["first_step_rule"] == "float32: as logged"
    assert "first_step_rule" not in module.merge_reports(
        [_table4_part(tmp_path / "c.json", [("cnn", 2, 1.0)])]
    )


def test_minigrid_rotation_keeps_the_wall_time_of_every_process_of_a_resumed_part(tmp_path):
    """A part resumed over several processes says how long each trained: the merge keeps it by run."""
    module = _load("minigrid_rotation")
    part = tmp_path / "a.json"
    report = json.loads(Path(_table4_part(part, [("cnn", 0, 1.0)])).read_text())
    walls = {"process_1_to_1000": 60.0, "process_2_to_2000": 40.0, "total": 100.0}
    part.write_text(json.dumps({**report, "train_wall_s": walls}))
    merged = module.merge_reports([str(part), _table4_part(tmp_path / "b.json", [("cnn", 1, 1.0)])])
    assert merged["train_wall_s_by_process"] == {"cnn_seed0": walls}


@pytest.mark.parametrize(
    "second, message",
    [
        ({"runs": [("sit_small", 0, 0.5)]}, r"repeat \(model, seed\) \[\('sit_small', 0\)\]"),
        (
            {"runs": [("cnn", 0, 0.5)], "first_step_rule": "strict: above it"},
            "count a curve's first step at a threshold in different ways",
        ),
        ({"runs": [("cnn", 0, 0.5)], "env_steps": 200}, "has env_steps = 200 but"),
        ({"runs": [("cnn", 0, 0.5)], "gin_bindings": ["ppo.num_minibatches=4"]}, "has gin_bindings = "),
    ],
)
def test_minigrid_rotation_refuses_to_merge_different_protocols(tmp_path, capsys, second, message):
    module = _load("minigrid_rotation")
    first = _table4_part(tmp_path / "a.json", [("sit_small", 0, 1.0)], first_step_rule="float32: as logged")
    second_runs = second.pop("runs")
    other = _table4_part(tmp_path / "b.json", second_runs, **second)
    assert module.main(["--merge", f"{first},{other}", "--out", str(tmp_path / "out.json")]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.large  # a benchmark smoke run; Atari training: test_dqn_training
def test_atari100k_tiny_run(tmp_path):
    """benchmarks/atari100k.py through sit-train's parser and train_eval: Pong, a tiny CNN, 40 agent steps."""
    out = tmp_path / "atari100k.json"
    module = _load("atari100k")
    bindings = [
        "train_eval.encoder_kwargs = {'filters': (4, 8), 'output_dim': 16}",
        "train_eval.eval_env_kwargs = {'max_episode_frames': 200}",  # 50-step evaluation games
        "dqn.min_replay_size = 20",
        "dqn.n_step = 3",
        "dqn.batch_size = 4",
        "dqn.target_update_period = 10",
    ]
    argv = "--games pong --models cnn --seeds 0 --agent_steps 40 --eval_episodes 1 --log_interval 20".split()
    argv += ["--no_progress", "--root", str(tmp_path / "runs"), "--out", str(out)]
    assert module.main([*argv, *(f"--gin_bindings={b}" for b in bindings)]) == 0
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert (run["game"], run["model"], run["seed"]) == ("pong", "cnn", 0)
    # Ten evaluations (every tenth of the budget, keyed by env_steps = agent steps); the score is the
    # mean of the last three (80%, 90%, 100%).
    assert [e["env_steps"] for e in run["evaluations"]] == list(range(4, 41, 4))
    assert run["scored_evaluations"] == [32, 36, 40]
    assert run["score"] == pytest.approx(sum(e["mean_return"] for e in run["evaluations"][-3:]) / 3)
    assert all(e["frames"] == 4 * e["env_steps"] and e["num_episodes"] == 1 for e in run["evaluations"])
    assert run["learning_sps"] > 0 and 0 < run["train_fraction"] < 1
    root_dir = Path(run["root_dir"])
    assert len(json.loads((root_dir / "evaluations.json").read_text())) == 10
    assert json.loads((root_dir / "policy_network.json").read_text())["agent"] == "c51"
    assert "| Pong | cnn |" in report["table"]


@pytest.mark.large  # a benchmark run; SAC on DMC pixels: test_sac_training::test_pixel_config_trains_on_dmc
def test_dmc_walker_tiny_run(tmp_path):
    """benchmarks/dmc_walker.py: a speed run and a training run (with its final evaluation) of the CNN."""
    out = tmp_path / "dmc_walker.json"
    module = _load("dmc_walker")
    argv = "--encoders cnn --seeds 0 --env_steps 8 --num_eval_episodes 1 --speed_encoders cnn".split()
    argv += "--speed_steps 4 --speed_iterations 2 --speed_blocks 2".split()
    argv += ["--root", str(tmp_path / "runs"), "--out", str(out)]
    bindings = ["sac.actor_fc_layer_params = (16,)", "sac.critic_fc_layer_params = (16,)"]
    bindings.append("sac.batch_size = 4")
    assert module.main([*argv, *(f"--gin_bindings={b}" for b in bindings)]) == 0
    report = json.loads(out.read_text())
    # 4 random steps, then 2 blocks of 2 SAC iterations; the first block (tracing) is not timed.
    (block,) = report["speed"]["cnn"]["blocks"]
    assert block["env_steps"] == 2 and block["train_steps"] == 2
    assert report["speed"]["cnn"]["steps_per_second"] == block["steps_per_second"] > 0
    (run,) = report["runs"]
    assert run["env_steps"] == 8 and [h["env_steps"] for h in run["history"]] == [5, 6, 7, 8]
    evaluations = json.loads((Path(run["root_dir"]) / "evaluations.json").read_text())
    assert [e["env_steps"] for e in evaluations] == [8]
    assert run["eval_mean_return"] == evaluations[0]["mean_return"] and run["eval_std_return"] == 0.0
    assert "| cnn | 8 | 1 |" in report["tables"]


@pytest.mark.parametrize("rate", ["0", "-1", "inf", "nan"])
def test_pi_cartpole_distill_refuses_a_bad_learning_rate_before_training(rate, tmp_path, capsys):
    distill = _load("pi_cartpole_distill")
    root = tmp_path / "students"
    assert distill.main(["--teacher_dir", str(tmp_path), "--root", str(root), f"--learning_rate={rate}"]) == 2
    assert "--learning_rate must be a positive number" in capsys.readouterr().err
    assert not root.exists()


@pytest.mark.parametrize("noise", ["-0.03", "inf", "nan"])
def test_pi_cartpole_distill_refuses_a_bad_previous_action_noise_before_training(noise, tmp_path, capsys):
    distill = _load("pi_cartpole_distill")
    root = tmp_path / "students"
    argv = ["--teacher_dir", str(tmp_path), "--root", str(root), f"--previous_action_noise={noise}"]
    assert distill.main(argv) == 2
    assert "--previous_action_noise must be a finite number >= 0" in capsys.readouterr().err
    assert not root.exists()


@pytest.mark.parametrize("flag", ["noise_sensors", "streams_per_epoch", "record_time_limit"])
def test_pi_cartpole_distill_refuses_a_negative_count_before_training(flag, tmp_path, capsys):
    distill = _load("pi_cartpole_distill")
    root = tmp_path / "students"
    assert distill.main(["--teacher_dir", str(tmp_path), "--root", str(root), f"--{flag}=-1"]) == 2
    assert f"--{flag} must be >= 0. Received: -1" in capsys.readouterr().err
    assert not root.exists()


@pytest.mark.large  # a benchmark run; distillation itself: test_distill
def test_pi_cartpole_distill_records_episodes_cut_at_the_time_limit_and_tests_whole_ones(tmp_path):
    """--record_time_limit: every recorded episode ends after that many steps; the tests' do not. The teacher
    is its small folder, as committed under benchmarks/teachers/."""
    from sit_keras.agents import train
    from sit_keras.agents.algorithms import bc
    from sit_keras.agents.networks import policy_network

    distill = _load("pi_cartpole_distill")
    teacher = str(tmp_path / "teacher")
    train.train_eval(
        teacher, agent="ppo", env_name="gymnasium:CartPoleSwingUpHarder-v0", num_envs=2, encoder="mlp",
        encoder_kwargs={"units": (8,)}, total_env_steps=32, collect_steps_per_env=16, num_minibatches=1,
        num_epochs=1, drac_coef=0.0, policy_save_interval=32, checkpoint_interval=32, num_eval_episodes=0,
        progress=False,
    )  # fmt: skip
    gin.clear_config()
    # The teacher's small folder (benchmarks/teacher_folder.py) teaches and is tested as the training folder.
    small = str(tmp_path / "small_teacher")
    assert _load("teacher_folder").main(["--root_dir", teacher, "--out", small]) == 0
    assert not os.path.exists(os.path.join(small, "replay_buffer"))
    weights = []
    for folder in (teacher, small):
        description = policy_network.read_description(folder)
        net = policy_network.build_network(description)
        policy_network.restore_network(net, folder, description.checkpoint_attribute)
        weights.append([v.numpy() for v in net.variables])
    assert all(np.array_equal(a, b) for a, b in zip(*weights, strict=True))
    assert _greedy_actions(small) == _greedy_actions(teacher)  # the labels: its newest saved weights
    out = tmp_path / "report.json"
    argv = [
        "--teacher_dir", small, "--root", str(tmp_path / "students"), "--students", "mlp",
        "--num_envs", "2", "--total_env_steps", "60", "--sequence_length", "10", "--num_epochs", "1",
        "--record_time_limit", "7", "--num_episodes", "1", "--num_eval_envs", "1", "--reshuffles", "",
        "--out", str(out),
    ]  # fmt: skip
    assert distill.main(argv) == 0
    (data,) = bc.load_rounds(str(tmp_path / "students" / "mlp" / bc.DATA_FILE))
    for step_types in data.step_types:
        starts = np.flatnonzero(step_types == 0)  # StepType.FIRST
        assert len(starts) >= 3 and set(np.diff(starts)) == {8}  # the first observation and 7 steps
    report = json.loads(out.read_text())
    assert report["students"]["mlp"]["settings"]["env_kwargs"] == {"time_limit": 7}
    # sit-eval reads the student's description: it evaluates whole episodes, as the tests here do.
    description = policy_network.read_description(str(tmp_path / "students" / "mlp"))
    assert description.eval_env_kwargs == {"time_limit": 1000}


def test_lavacrossing_probe_expert_reaches_the_goal_in_its_own_number_of_moves():
    """benchmarks/lavacrossing_probe.py: following any optimal move never lengthens the way to the goal."""
    from sit_keras.agents.environments.minigrid_env import SiTMiniGrid

    probe = _load("lavacrossing_probe")
    env = SiTMiniGrid("MiniGrid-LavaCrossingS9N2-v0")
    for seed in range(3):
        env.reset(seed=seed)
        masks = probe.optimal_actions(env)
        minigrid = env.minigrid
        start = (*(int(v) for v in minigrid.agent_pos), int(minigrid.agent_dir))
        assert start in masks
        rng = np.random.default_rng(seed)
        for _ in range(100):  # a shortest way on a 9x9 level is far shorter
            state = (*(int(v) for v in minigrid.agent_pos), int(minigrid.agent_dir))
            action = int(rng.choice(np.flatnonzero(masks[state])))
            _, reward, terminated, _, info = env.step(action)
            if terminated:
                break
        assert info["is_success"] and reward > 0, seed


@pytest.mark.parametrize("argv", [["--models", "cnn,nope"], ["--steps", "0"], ["--seeds", "a"]])
def test_lavacrossing_probe_refuses_bad_arguments_in_one_sentence(argv, capsys):
    assert _load("lavacrossing_probe").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


@pytest.mark.large  # a benchmark run (about 20 s); its parts are tested above
def test_lavacrossing_probe_quick(tmp_path):
    out = tmp_path / "probe.json"
    assert _load("lavacrossing_probe").main(["--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["results"] and {"command", "commit", "settings"} <= set(report)


@pytest.mark.parametrize("argv", [["--workloads", "ppo_lavacrossing_sit,nope"], ["--repeats", "0"]])
def test_deterministic_cost_refuses_bad_arguments_in_one_sentence(argv, capsys):
    assert _load("deterministic_cost").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


@pytest.mark.large  # a benchmark run (six training processes); deterministic mode: test_harness
def test_deterministic_cost_quick(tmp_path):
    out = tmp_path / "cost.json"
    assert _load("deterministic_cost").main(["--quick", "--workloads", "sac_dmc_state,dqn_cartpole",
                                             "--out", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    for row in report["table"].values():
        assert all(speed > 0 for speed in row["env_steps_per_second"].values())
        assert row["deterministic_over_default"] > 0
    assert {"command", "commit", "runs", "environment"} <= set(report)


@pytest.mark.parametrize("argv", [["--models", "sit_small,nope"], ["--repeats", "0"], ["--env_steps", "100"]])
def test_lavacrossing_cost_refuses_bad_arguments_in_one_sentence(argv, capsys):
    assert _load("lavacrossing_cost").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


def test_lavacrossing_cost_knows_every_lavacrossing_config():
    cost = _load("lavacrossing_cost")
    assert {"cnn", "sit_small", "sit_chiral", "sit_corners"} <= set(cost.MODELS)
    assert cost.parse_args(["--quick"]).env_steps == 2 * cost.ITERATION


def test_lavacrossing_cost_gives_every_model_the_critic_of_table_4s_runs():
    """The cost of a policy encoder is measured as it trains: with the CNN critic every Table 4 run has,
    unless the value head shares the actor's torso (then there is no critic to replace)."""
    cost, rotation = _load("lavacrossing_cost"), _load("minigrid_rotation")
    for model in ("sit_small", "siet_rotation_pooled"):
        assert set(rotation.CRITIC) <= set(cost.protocol(model))
        assert set(cost.PROTOCOL) <= set(cost.protocol(model))
    assert not set(rotation.CRITIC) & set(cost.protocol("sit_chiral_shared"))


@pytest.mark.large  # a benchmark run (two PPO processes); PPO on LavaCrossing: test_minigrid_rotation_quick
def test_lavacrossing_cost_quick(tmp_path):
    out = tmp_path / "cost.json"
    assert _load("lavacrossing_cost").main(["--quick", "--models", "cnn,sit_small", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["relative_to"] == "cnn" and report["table"]["cnn"]["cost_per_env_step"] == 1.0
    assert report["table"]["sit_small"]["env_steps_per_second"] > 0
    assert {"command", "commit", "runs", "environment"} <= set(report)


def _curve_report(path, runs: dict[str, list[list[float]]]) -> str:
    curves = {name: {"success_every_100k": points} for name, points in runs.items()}
    path.write_text(json.dumps({"training_curves": curves}))
    return str(path)


def test_plot_curves_draws_one_colour_per_model(tmp_path):
    plot = _load("plot_curves")
    report = _curve_report(tmp_path / "r.json", {
        "cnn_seed0": [[100000, 0.5], [200000, 1.0]], "cnn_seed1": [[100000, 0.2], [200000, 0.9]],
        "sit_seed0": [[100000, 0.0], [200000, 0.1]],
    })  # fmt: skip
    out = tmp_path / "curves.png"
    assert plot.main(["--reports", report, "--out", str(out), "--max_steps", "200000"]) == 0
    from PIL import Image

    image = Image.open(out).convert("RGB")
    pixels = {image.getpixel((x, y)) for x in range(image.width) for y in range(image.height)}
    assert {plot.COLOURS[0], plot.COLOURS[1]} <= pixels and plot.COLOURS[2] not in pixels
    by_model = plot.curves([tmp_path / "r.json"])
    assert sorted(by_model) == ["cnn", "sit"] and len(by_model["cnn"]) == 2
    assert by_model["sit"][0] == [(0.0, 0.0), (100000.0, 0.0), (200000.0, 0.1)]


def test_plot_curves_reads_a_folder_of_one_run_parts(tmp_path):
    """A Table 4 part (one run, its ``training_curve``) is a report of that run; a folder is its JSONs."""
    plot = _load("plot_curves")
    folder = tmp_path / "parts"
    folder.mkdir()
    for model, seed, success in (("cnn", 0, 0.9), ("cnn", 1, 0.8), ("sit_small", 0, 0.1)):
        part = {
            "runs": [{"model": model, "seed": seed}],
            "training_curve": {"success_every_250k": [[250000, success]]},
        }
        (folder / f"{model}_seed{seed}.json").write_text(json.dumps(part))
    out = tmp_path / "curves.png"
    assert plot.main(["--reports", str(folder), "--out", str(out), "--max_steps", "250000"]) == 0
    by_model = plot.curves(sorted(folder.glob("*.json")))
    assert by_model == {
        "cnn": [[(0.0, 0.0), (250000.0, 0.9)], [(0.0, 0.0), (250000.0, 0.8)]],
        "sit_small": [[(0.0, 0.0), (250000.0, 0.1)]],
    }


@pytest.mark.parametrize("bad", ["missing", "no_curves", "max_steps", "empty_folder"])
def test_plot_curves_refuses_bad_arguments_in_one_sentence(bad, tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"training_curves": {}} if bad != "no_curves" else {"runs": []}))
    named = {"missing": str(tmp_path / "nope.json"), "empty_folder": str(tmp_path / "empty")}.get(
        bad, str(report)
    )
    (tmp_path / "empty").mkdir()
    argv = ["--reports", named, "--out", "x.png"]
    if bad == "max_steps":
        argv += ["--max_steps", "0"]
    assert _load("plot_curves").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


# A benchmark run on a sit-train folder; the probe itself: the lavacrossing_probe tests above.
@pytest.mark.large
def test_lavacrossing_probe_scores_a_policy_trained_with_sit_train(tmp_path):
    """``--policy_dirs``: a trained policy's greedy actions against the expert, on the probe's states."""
    import subprocess
    import sys

    from run_folders import tiny_lavacrossing_run

    root = tmp_path / "run"
    tiny_lavacrossing_run(str(root))
    policy_dir = str(root / "policies" / "greedy_policy")
    out = tmp_path / "probe.json"
    command = [sys.executable, str(BENCHMARKS / "lavacrossing_probe.py"), "--quick", "--models", "",
               "--policy_dirs", policy_dir, "--out", str(out)]  # fmt: skip
    probed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert probed.returncode == 0, probed.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["results"] == [] and report["settings"]["policy_dirs"] == [policy_dir]
    (policy,) = report["policies"]
    for split, data in (("train_greedy_accuracy", "train"), ("heldout_greedy_accuracy", "heldout")):
        accuracy = policy[split]
        assert accuracy["n_all"] == report["data"][data]["states"] and 0 <= accuracy["all"] <= 1
        assert accuracy["n_n1"] + accuracy["n_n2"] == accuracy["n_all"]
    assert "--models '' --policy_dirs" in report["command"]  # reruns as written
    missing = subprocess.run([*command[:-4], "--policy_dirs", str(tmp_path)], capture_output=True, text=True)
    assert missing.returncode == 2 and "holds no saved policy" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_every_lavacrossing_model_of_minigrid_rotation_trains_with_the_cnn_critic():
    """docs/lavacrossing.md: the 'CNN critic' config adds nothing there; every model has that critic."""
    module = _load("minigrid_rotation")
    _, bindings, _ = module.FAMILIES["lavacrossing"]
    assert bindings == module.CRITIC
    config = BENCHMARKS.parent / "configs" / "minigrid" / "lavacrossing_sit_chiral_cnn_critic.gin"
    own = [line for line in config.read_text().splitlines() if line.startswith("ppo.value_encoder")]
    assert own == module.CRITIC


class _StepTypeRecorder:
    """A recurrent stand-in for an actor network: acts 0 and records every step type it is given."""

    def __init__(self):
        import tensorflow as tf

        self.seen: list[int] = []
        self.state_spec = (tf.TensorSpec((1,), tf.float32),)

    def initial_state(self, batch_size: int, num_inputs: int):
        import tensorflow as tf

        return tf.zeros([batch_size, 1])

    def call(self, observation, step_type, state):
        import tensorflow as tf
        import tensorflow_probability as tfp

        record = tf.py_function(lambda s: self.seen.extend(s.numpy().tolist()) or 0, [step_type], tf.int32)
        with tf.control_dependencies([record]):
            action = tf.zeros([tf.shape(observation)[0], 1])
        return tfp.distributions.Deterministic(action), state


@pytest.mark.parametrize("carry_state", [False, True])
def test_pi_cartpole_runs_warm_starts_on_the_same_episodes(carry_state):
    """pi_cartpole.run_test: carry_state passes later FIRST steps as MID; first episodes run uncounted."""
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        pi_cartpole = importlib.import_module("pi_cartpole")  # a module of its own: it holds dataclasses
    finally:
        sys.path.remove(str(BENCHMARKS))
    from tf_agents.trajectories.time_step import StepType

    net = _StepTypeRecorder()
    test, env = pi_cartpole.SensorTest("5 obs"), "gymnasium:Pendulum-v1"  # 200-step episodes
    counted = pi_cartpole.run_test(net, test, 2, 1, 7, env, carry_state=carry_state, skip_first_episode=True)
    firsts = [i for i, s in enumerate(net.seen) if s == StepType.FIRST]
    assert firsts == ([0] if carry_state else [0, 201, 402]), firsts[:5]
    every = pi_cartpole.run_test(_StepTypeRecorder(), test, 3, 1, 7, env)
    assert len(counted) == 2 and counted == every[1:]  # the same episodes: a zero action, the same starts


def test_pi_cartpole_warm_start_refuses_bad_arguments_in_one_sentence(tmp_path, capsys):
    module = _load("pi_cartpole_warm_start")
    assert module.main(["--policy_dirs", str(tmp_path)]) == 2
    assert "holds no trained policy description (policy_network.json)" in capsys.readouterr().err
    assert module.main(["--policy_dirs", str(tmp_path), "--num_episodes", "0"]) == 2
    assert "--num_episodes and --num_envs must be at least 1" in capsys.readouterr().err


def test_pi_cartpole_action_errors_split_by_the_teachers_saturation(tmp_path, capsys):
    module = _load("pi_cartpole_action_errors")
    teacher = np.array([[[1.0], [-0.99], [0.2], [0.0]]])
    student = np.array([[[0.9], [-0.99], [0.6], [0.0]]])
    split = module.split_errors(student, teacher)
    assert split["teacher_saturated"] == 0.5 and split["student_saturated"] == 0.25
    assert split["squared_error_saturated"] == pytest.approx(0.01 / 2)
    assert split["squared_error_rest"] == pytest.approx(0.16 / 2)
    assert split["share_of_error_saturated"] == pytest.approx(0.01 / 0.17)
    assert module.main(["--policy_dirs", str(tmp_path)]) == 2
    assert "holds no recorded teacher data (bc_data.npz)" in capsys.readouterr().err


def test_pi_cartpole_action_errors_split_by_the_steps_since_the_episodes_start():
    module = _load("pi_cartpole_action_errors")
    first, mid, last = 0, 1, 2  # TF-Agents' StepType values
    # Stream 0 starts mid-episode (ages unknown) and then starts an episode; stream 1 runs 12 steps of one.
    step_types = np.array([[mid, last, first, *[mid] * 9], [first, *[mid] * 10, last]])
    ages = module.episode_ages(step_types)
    assert ages[0].tolist() == [-1, -1, *range(10)]
    assert ages[1].tolist() == list(range(12))
    teacher = np.zeros((2, 12, 1))
    student = np.ones((2, 12, 1)) * np.arange(12)[None, :, None]  # the error grows with the time step
    bins = module.split_by_age(student, teacher, step_types)
    # Stream 0: ages 0-9 at time steps 2-11; stream 1: ages 0-10 at steps 0-10 (its LAST step left out).
    assert bins["0-10"]["steps"] == 20
    assert bins["0-10"]["squared_error"] == pytest.approx(np.mean(np.square([*range(2, 12), *range(10)])))
    assert bins["10-25"] == {"squared_error": pytest.approx(100.0), "steps": 1}
    assert bins["400-1000"] == {"squared_error": None, "steps": 0}
    assert list(bins) == [f"{a}-{b}" for a, b in itertools.pairwise(module.AGE_BINS)]


def _dagger_record(folder: Path, returns: list[list[float]], streams: int = 2, steps: int = 5) -> Path:
    """A bc_data.npz of ``len(returns)`` rounds (round 0 the teacher's) of ``streams x steps`` each."""
    folder.mkdir(parents=True)
    arrays = {}
    for k, r in enumerate(returns):
        arrays[f"actions_{k}"] = np.zeros((streams, steps, 1), np.float32)
        arrays[f"returns_{k}"] = np.array(r, np.float32)
    np.savez(folder / "bc_data.npz", **arrays)
    return folder


def test_pi_cartpole_data_curve_scores_each_round_by_the_steps_before_it(tmp_path):
    module = _load("pi_cartpole_data_curve")
    folder = _dagger_record(tmp_path / "pi", [[800.0, 400.0], [10.0, 20.0, 30.0], [700.0], []])
    rounds = module.rounds(folder)
    assert [r["recorded_steps_trained_on"] for r in rounds] == [0, 10, 20, 30]
    assert [r["actor"] for r in rounds] == ["teacher", "student", "student", "student"]
    assert rounds[0]["mean_return"] == 600.0 and rounds[0]["share_above_600"] == 0.5
    assert rounds[1]["median_return"] == 20.0 and rounds[2]["share_above_600"] == 1.0
    assert rounds[3]["episodes"] == 0 and rounds[3]["mean_return"] is None
    other = _dagger_record(tmp_path / "mlp", [[800.0, 400.0], [100.0]])
    students = {"pi": [rounds], "mlp": [module.rounds(other)]}
    assert module.teacher_level(students) == 600.0  # one teacher record, counted once
    lines = module.curves(students)
    assert lines["pi"] == [[(10, 20.0), (20, 700.0)]]  # the round without a finished episode is left out
    assert lines[module.TEACHER] == [[(0.0, 600.0), (30.0, 600.0)]]


def test_pi_cartpole_data_curve_refuses_bad_arguments_in_one_sentence(tmp_path, capsys):
    module = _load("pi_cartpole_data_curve")
    out = str(tmp_path / "curve.json")
    _dagger_record(tmp_path / "plain", [[800.0]])
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "bc_data.npz").write_text("not a zip")
    for students, message in [
        (f"pi={tmp_path / 'none'}", "does not exist"),
        (f"pi={tmp_path / 'plain'}", "holds no DAgger round"),
        (f"pi={tmp_path / 'damaged'}", "is not a readable DAgger record"),
        ("pi", "takes label=folder pairs"),
    ]:
        assert module.main(["--students", students, "--out", out]) == 2
        assert message in capsys.readouterr().err
    record = _dagger_record(tmp_path / "record", [[800.0], [10.0]])
    for flag in ("--out", "--png"):
        arguments = {"--out": out, "--png": str(tmp_path / "curve.png"), flag: str(tmp_path)}
        assert module.main(["--students", f"pi={record}", *(a for kv in arguments.items() for a in kv)]) == 2
        assert f"{flag} must be a file path, not a folder" in capsys.readouterr().err
    assert not Path(out).exists() and not (tmp_path / "curve.png").exists()


def _seed_report(path: Path, seed: int, upright: float, teacher: float = 600.0, **changes) -> str:
    """A pi_cartpole_distill report of one seed: the teacher and a PI student, two columns."""
    report = {
        "command": f"pi_cartpole_distill.py --teacher_dir t --root r{seed} --seed {seed} --out o{seed}",
        "env_name": "gymnasium:CartPoleSwingUpHarder-v0", "teacher_dir": "t", "machine_cores": 2, "paper": {},
        "test_settings": {"num_episodes": 2, "eval_seed": 1},
        "results": {
            "teacher": {"5 obs": {"mean": teacher, "returns": [teacher, teacher]}},
            "pi": {"5 obs": {"mean": upright}, "5 obs + 5 noise": {"mean": upright / 2}},
        },
    }  # fmt: skip
    report.update(changes)
    path.write_text(json.dumps(report))
    return str(path)


def test_pi_cartpole_seeds_puts_the_seeds_of_one_setting_side_by_side(tmp_path):
    seeds = _load("pi_cartpole_seeds")
    reports = [_seed_report(tmp_path / f"s{s}.json", s, upright) for s, upright in ((1, 540.0), (0, 480.0))]
    out = tmp_path / "seeds.json"
    argv = ["--reports", ",".join(reports), "--what", "w", "--budget", "b", "--out", str(out)]
    assert seeds.main(argv) == 0
    report = json.loads(out.read_text())
    assert [run["seed"] for run in report["runs"]] == [0, 1]  # in seed order
    summary = report["summary"]
    assert summary["pi_per_seed"] == {"5 obs": [480.0, 540.0], "5 obs + 5 noise": [240.0, 270.0]}
    assert summary["student_over_teacher"] == pytest.approx(0.85)
    assert summary["student_over_teacher_per_seed"] == pytest.approx([0.8, 0.9])
    assert summary["pi_5_obs_std_over_seeds_sample"] == pytest.approx(42.426, abs=1e-3)
    assert summary["column_over_5_obs_per_seed"] == {"5 obs + 5 noise": [0.5, 0.5]}


@pytest.mark.parametrize(
    "second, message",
    [
        ({"seed": 0}, "--reports holds seed 0 twice."),
        ({"teacher": 601.0}, "tested another teacher than"),
        ({"test_settings": {"num_episodes": 3, "eval_seed": 1}}, "ran other test episodes than"),
        ({"command": "pi_cartpole_distill.py --teacher_dir t --seed 1 --num_epochs 3"},
         "ran another setting than"),
        ({"results": {}}, "tested no AttentionNeuron student"),
    ],
)  # fmt: skip
def test_pi_cartpole_seeds_refuses_reports_that_are_not_seeds_of_one_setting(
    second, message, tmp_path, capsys
):
    seeds = _load("pi_cartpole_seeds")
    first = _seed_report(tmp_path / "a.json", 0, 500.0)
    seed = second.pop("seed", 1)
    teacher = second.pop("teacher", 600.0)
    other = _seed_report(tmp_path / "b.json", seed, 500.0, teacher, **second)
    out = tmp_path / "seeds.json"
    argv = ["--reports", f"{first},{other}", "--what", "w", "--budget", "b", "--out", str(out)]
    assert seeds.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_pi_cartpole_seeds_names_a_missing_report(tmp_path, capsys):
    seeds = _load("pi_cartpole_seeds")
    missing = tmp_path / "none.json"
    argv = ["--reports", str(missing), "--what", "w", "--budget", "b", "--out", str(tmp_path / "o.json")]
    assert seeds.main(argv) == 2
    assert f"--reports: {str(missing)!r} does not exist." in capsys.readouterr().err


def test_teacher_folder_refuses_a_folder_without_a_teacher_or_an_existing_out(tmp_path, capsys):
    folder = _load("teacher_folder")
    assert folder.main(["--root_dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "holds no policy_network.json (not a sit-train folder)." in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    teacher = "benchmarks/teachers/cartpole_swingup_harder_sac"
    root = str(BENCHMARKS.parent / teacher)
    assert folder.main(["--root_dir", root, "--out", str(tmp_path)]) == 2
    assert f"--out {str(tmp_path)!r} exists; give a new folder." in capsys.readouterr().err


def _greedy_actions(folder: str) -> list[float]:
    """The actions of a teacher folder's greedy SavedModel (with its newest weights) on 4 seeded readings."""
    from tf_agents.trajectories import time_step as ts

    from sit_keras.agents import evaluate
    from sit_keras.agents.algorithms import bc

    readings = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    policy = evaluate.load_policy(bc.teacher_policy_dir(folder))
    return np.asarray(policy.action(ts.restart(readings, batch_size=4)).action).ravel().tolist()


def test_the_committed_cartpole_teacher_labels_as_its_acting_network():
    """benchmarks/teachers/cartpole_swingup_harder_sac: its greedy SavedModel (the labels the students
    learn) and its acting network's checkpoint (the one its tests run) are the same policy, every variable
    restored."""
    import tensorflow as tf

    from sit_keras.agents.networks import policy_network

    folder = str(BENCHMARKS / "teachers" / "cartpole_swingup_harder_sac")
    description = policy_network.read_description(folder)
    assert description.env_name == "gymnasium:CartPoleSwingUpHarder-v0" and description.agent == "sac"
    net = policy_network.build_network(description)
    policy_network.restore_network(net, folder, description.checkpoint_attribute)
    readings = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    distribution, _ = net(tf.constant(readings), step_type=tf.zeros(4, tf.int32), training=False)
    np.testing.assert_allclose(_greedy_actions(folder), distribution.mode().numpy().ravel(), atol=1e-6)


# A benchmark run (a PPO run, then the tests); the script's runs and records:
# test_pi_cartpole_distill_records_episodes_cut_at_the_time_limit_and_tests_whole_ones.
@pytest.mark.large
def test_pi_cartpole_distill_tests_another_folders_policy_as_the_pi_student(tmp_path, capsys):
    """--pi_dir: the Table 2 / 6 tests of a folder that no cloning wrote (here a tiny PPO run)."""
    from run_folders import tiny_pi_cartpole_run

    distill = _load("pi_cartpole_distill")
    teacher = str(BENCHMARKS.parent / "benchmarks/teachers/cartpole_swingup_harder_sac")
    policy = str(tmp_path / "ppo")
    base = [
        "--teacher_dir",
        teacher,
        "--root",
        str(tmp_path / "none"),
        "--students",
        "pi",
        "--pi_dir",
        policy,
    ]
    assert distill.main(base) == 2  # without --skip_training
    assert "add --skip_training" in capsys.readouterr().err
    assert distill.main([*base, "--skip_training"]) == 2  # not yet a training folder
    assert "--pi_dir: " in capsys.readouterr().err
    tiny_pi_cartpole_run(policy)
    out = tmp_path / "report.json"
    argv = [*base, "--skip_training", "--num_episodes", "1", "--num_eval_envs", "1", "--reshuffles", "",
            "--seed", "3", "--out", str(out)]  # fmt: skip
    assert distill.main(argv) == 0
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"teacher", "pi"} and report["results"]["pi"]["10 obs"]["returns"]
    # The tested run's own record: where it started from is in its settings.
    assert report["pi_dir"]["path"] == policy and report["pi_dir"]["run_settings"]["train_eval.num_envs"] == 2
    # The seeds of one setting differ in --pi_dir as in --root: pi_cartpole_seeds compares the rest.
    seeds = _load("pi_cartpole_seeds")
    assert seeds._setting(report["command"]) == seeds._setting(
        report["command"].replace(policy, "elsewhere").replace("--seed 3", "--seed 4")
    )
