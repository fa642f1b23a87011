"""benchmarks/xla_runtime.py: its arguments, the children's XLA_FLAGS, its summary, and a smoke run."""

from __future__ import annotations

import json

import pytest
from run_folders import load_benchmark


@pytest.mark.parametrize(
    "argv", [["--rounds", "0"], ["--calls", "0"], ["--in_process_rounds", "0"], ["--names", "nope"], ["--x"]]
)
def test_xla_runtime_refuses_bad_arguments_in_one_sentence(argv, capsys, tmp_path):
    out = tmp_path / "report.json"
    assert load_benchmark("xla_runtime").main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err
    assert not out.exists()


def test_each_child_gets_the_callers_xla_flags_and_its_runtime_last():
    module = load_benchmark("xla_runtime")
    assert module.child_environment("legacy", {"HOME": "/h"}) == {
        "HOME": "/h",
        "XLA_FLAGS": "--xla_cpu_use_thunk_runtime=false",
    }
    # XLA takes the last value of a flag given twice, so the runtime's flag goes after the caller's.
    caller = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_cpu_use_thunk_runtime=false"}
    assert module.child_environment("thunk", caller)["XLA_FLAGS"] == (
        "--xla_cpu_enable_fast_math=false --xla_cpu_use_thunk_runtime=false --xla_cpu_use_thunk_runtime=true"
    )


def _process(xla_over_graph: dict[str, float]) -> dict[str, dict[str, float]]:
    return {n: {"xla_over_graph": r, "graph_ms": 10.0, "xla_ms": 10.0 * r} for n, r in xla_over_graph.items()}


def test_the_summary_takes_each_runtimes_median_over_its_processes():
    module = load_benchmark("xla_runtime")
    measured = {
        "thunk": [_process({"cnn": 2.0, "sit_small": 1.2}), _process({"cnn": 2.2, "sit_small": 1.4})],
        "legacy": [_process({"cnn": 0.6, "sit_small": 4.0}), _process({"cnn": 0.8, "sit_small": 3.0})],
    }
    table = module.summarise(measured)
    assert table["cnn"]["thunk_xla_over_graph"] == pytest.approx(2.1)
    assert table["cnn"]["legacy_xla_over_graph"] == pytest.approx(0.7)
    assert table["cnn"]["legacy_over_thunk_xla_time"] == pytest.approx(7.0 / 21.0)
    assert table["sit_small"]["legacy_xla_ms"] == pytest.approx(35.0)
    markdown = module.format_report({"table": table})
    assert "| `cnn` | 10.0 | 2.10 | 0.70 |" in markdown


@pytest.mark.large  # two benchmark processes, about a minute; the summary is tested above
def test_xla_runtime_quick(tmp_path):
    out = tmp_path / "runtime.json"
    argv = ["--quick", "--names", "dense,layer_norm", "--out", str(out)]
    assert load_benchmark("xla_runtime").main(argv) == 0
    report = json.loads(out.read_text())
    assert set(report["table"]) == {"dense", "layer_norm"}
    for runtime in ("thunk", "legacy"):
        assert report["table"]["dense"][f"{runtime}_xla_over_graph"] > 0
        flag = "--xla_cpu_use_thunk_runtime=" + ("true" if runtime == "thunk" else "false")
        assert report["xla_flags"][runtime].endswith(flag)
    assert {"command", "commit", "runs", "environment", "wall_seconds", "markdown"} <= set(report)
