"""Smoke runs of the RL benchmarks (benchmarks/ppo_throughput.py, benchmarks/minigrid_rotation.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_minigrid_rotation_quick(tmp_path):
    out = tmp_path / "table4.json"
    module = _load("minigrid_rotation")
    assert module.main(["--quick", "--root", str(tmp_path / "runs"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert set(run["rows"]) == set(module.ROWS)
    for row in run["rows"].values():
        assert 0.0 <= row["success_rate"] <= 1.0
    assert "| rotations average |" in report["table"]
