"""benchmarks/cpu_allocator.py: its arguments, its summary of the measurements, and a smoke run."""

from __future__ import annotations

import json

import pytest
from run_folders import load_benchmark


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--steps", "0"], ["--env_steps", "100"], ["--nope"]])
def test_cpu_allocator_refuses_bad_arguments_in_one_sentence(argv, capsys):
    assert load_benchmark("cpu_allocator").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


def _measurements(step_ms: dict[str, float], sps: dict[str, float]) -> dict[str, list[dict[str, float]]]:
    """Two rounds of one setting: each value, and the same plus one (so the median is value + 0.5)."""
    runs: dict[str, list[dict[str, float]]] = {}
    for name, ms in step_ms.items():
        runs[f"{name}_train_step"] = [
            {"step_ms": ms + d, "page_faults_per_step": 10.0 * ms + d, "max_rss_mib": 800.0 + d}
            for d in (0.0, 1.0)
        ]
    for model, speed in sps.items():
        runs[f"ppo_{model}"] = [
            {"sps": speed + d, "page_faults_per_env_step": 2.0 + d, "max_rss_mib": 900.0 + d}
            for d in (0.0, 1.0)
        ]
    return runs


def test_the_summary_takes_medians_per_setting_and_the_ratios_of_them():
    module = load_benchmark("cpu_allocator")
    measured = {
        "malloc": _measurements({"sit": 299.5, "vit": 99.5}, {"sit_small": 99.5, "cnn": 199.5}),
        "bfc": _measurements({"sit": 149.5, "vit": 99.5}, {"sit_small": 124.5, "cnn": 199.5}),
    }
    summary = module.summarise(measured)
    assert summary["table"]["malloc"]["sit_train_step"] == {
        "step_ms": 300.0,
        "page_faults_per_step": 2995.5,
        "max_rss_mib": 800.5,
    }
    assert summary["table"]["bfc"]["ppo_sit_small"] == {
        "env_steps_per_second": 125.0,
        "page_faults_per_env_step": 2.5,
        "max_rss_mib": 900.5,
    }
    ratios = summary["ratios"]
    assert ratios["bfc_over_malloc_sit_step_time"] == pytest.approx(0.5)
    assert ratios["bfc_over_malloc_vit_step_time"] == pytest.approx(1.0)
    assert ratios["bfc_over_malloc_ppo_sit_small_time_per_env_step"] == pytest.approx(100 / 125)
    assert ratios["sit_over_vit_step_time_malloc"] == pytest.approx(3.0)
    assert ratios["sit_over_vit_step_time_bfc"] == pytest.approx(1.5)
    assert ratios["sit_small_over_cnn_ppo_speed_bfc"] == pytest.approx(125 / 200)
    assert "bfc/malloc" in module.format_report({**summary})


@pytest.mark.large  # a benchmark run (six processes, about 6 minutes); its summary is tested above
def test_cpu_allocator_quick(tmp_path):
    out = tmp_path / "allocator.json"
    assert load_benchmark("cpu_allocator").main(["--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    for setting in ("malloc", "bfc"):
        rows = report["table"][setting]
        assert rows["sit_train_step"]["step_ms"] > 0 and rows["ppo_cnn"]["env_steps_per_second"] > 0
    # The children ran under the two settings, and the report says which variable each set.
    assert report["settings"]["bfc"] == {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
    assert {"command", "commit", "runs", "environment", "ratios"} <= set(report)
