"""Smoke test of benchmarks/supervised.py in its --quick mode (a few seconds)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_benchmark() -> ModuleType:
    # benchmarks/ is not a package: load the script as a module by its path.
    spec = importlib.util.spec_from_file_location(
        "supervised_benchmark", REPO / "benchmarks" / "supervised.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_reports_accuracy_train_time_and_layer_ratios(tmp_path, capsys):
    bench = _load_benchmark()
    out = tmp_path / "supervised.json"
    assert bench.main(["--quick", "--models", "cnn", "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    report = json.loads(out.read_text())
    assert set(report) >= {"settings", "environment", "models", "matmul", "layers", "wall_time_s", "commit"}
    assert report["command"] == "python benchmarks/supervised.py --quick --models cnn --out " + str(out)
    # The README's table, computed from the per-seed runs (one seed: std 0).
    rotated = [
        report["models"]["cnn"]["runs"][s][0]["accuracy"]["rotated"]
        for s in ("upright_to_rotated", "rotated")
    ]
    params = report["models"]["cnn"]["params"]
    assert (
        f"| `cnn` | {params:,} | {rotated[0]:.2f} ± 0.00 | {rotated[1]:.2f} ± 0.00 |"
        in report["readme_table"]
    )
    settings = report["settings"]
    assert settings["quick"] and settings["train_examples"] == 128 and settings["test_examples"] == 360
    assert settings["settings"]["upright_to_rotated"] == {
        "train": "digits",
        "test": {"rotated": "rotated_digits", "upright": "digits"},
    }

    cnn = report["models"]["cnn"]
    assert cnn["params"] > 0 and cnn["xla"] is False and cnn["first_epoch_s"] > 0
    for setting in ("upright_to_rotated", "rotated"):
        (run,) = cnn["runs"][setting]
        assert run["seed"] == 0 and len(run["epoch_s"]) == 1 and run["train_s"] > 0
        for accuracy in run["accuracy"].values():
            assert 0.0 <= accuracy <= 1.0
        summary = cnn["summary"][setting]
        assert summary["rotated_accuracy"] == {"mean": run["accuracy"]["rotated"], "std": 0.0, "n": 1}

    p4 = report["layers"]["p4"]
    assert p4["tokens"] == {"lifting": 64, "group": 256}
    assert set(p4["timings"]) == {"lifting", "group", "mha_lifting", "mha_group"}
    for by_mode in p4["timings"].values():
        assert set(by_mode) == {"graph"}
        assert by_mode["graph"]["median_ms"] > 0 and by_mode["graph"]["matmul_times"] > 0
    ratios = p4["ratios"]["graph"]
    timings = {key: p4["timings"][key]["graph"]["median_ms"] for key in p4["timings"]}
    assert ratios["group_over_mha"] == pytest.approx(timings["group"] / timings["mha_group"])
    assert "| cnn " in printed and "upright -> rotated" in printed and "| p4 " in printed


def test_bad_arguments_are_rejected():
    bench = _load_benchmark()
    for argv in (["--models", "resnet"], ["--layer-groups", "p5"], ["--seeds", "a"], ["--epochs", "0"]):
        assert bench.main(argv) == 2
    args = bench.parse_args(["--models", "group_transformer:p4m,sit"])
    assert args.models == ["group_transformer:p4m", "sit"] and args.seeds == [0, 1, 2]
    assert bench.uses_xla("group_transformer:p4m") and not bench.uses_xla("sit")
