"""Smoke runs of the RL benchmarks (benchmarks/ppo_throughput.py, benchmarks/minigrid_rotation.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ppo_throughput_quick_on_procgen(tmp_path, capsys):
    out = tmp_path / "ppo.json"
    assert _load("ppo_throughput").main(["--quick", "--models", "impala_cnn", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    summary = run["summary"]
    assert summary["frames_per_second"] > 0
    parts = [summary[k] for k in ("train_fraction", "policy_fraction", "env_fraction", "overhead_fraction")]
    assert abs(sum(parts) - 1.0) < 1e-9 and all(p > -1e-3 for p in parts)
    # Procgen runs report the normalised score of Cobbe et al.
    assert "NormalizedReturn" in run["last"]
    assert "| impala_cnn |" in capsys.readouterr().out


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
