"""benchmarks/eval_policy_speed.py: the evaluation policy with the native kernels and with builtin ops."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf
from run_folders import load_benchmark
from tf_agents.trajectories import time_step as ts
from traced_ops import op_types

from sit_keras import native


def test_a_quick_run_times_both_forms_of_the_greedy_policy_in_alternating_rounds(tmp_path, capsys):
    out = tmp_path / "eval.json"
    module = load_benchmark("eval_policy_speed")
    assert module.main(["--quick", "--batch", "4", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == f"python benchmarks/eval_policy_speed.py --quick --batch 4 --out {out}"
    [result] = report["models"]
    assert (result["model"], result["image_size"], result["batch"]) == ("sit", 16, 4)
    assert all(len(runs) == 3 and min(runs) > 0 for runs in result["runs_ms"].values())
    native_ms, builtin_ms = (result["median_ms"][form] for form in ("native", "builtin"))
    assert result["native_over_builtin"] == pytest.approx(native_ms / builtin_ms)
    assert result["same_actions"] == 4  # the same function: the same greedy actions
    assert report["native_kernels"] == (native.load_problem() or "loaded")
    assert f"{result['native_over_builtin']:6.3f}" in capsys.readouterr().out


def test_each_form_traces_the_policy_with_its_ops():
    """Traced inside ``forward_passes()`` the greedy policy's encoder runs the native kernels where they
    load; inside ``builtin_only()``, never."""
    module = load_benchmark("eval_policy_speed")
    policy = module.greedy_policy_of("sit", 16, num_actions=5)
    time_step = ts.restart(tf.zeros((2, 16, 16, 3), tf.uint8), batch_size=2)
    ops = {}
    for form, context in module.FORMS.items():
        with context():
            ops[form] = op_types(tf.function(policy.action), time_step)
    kernels = {op for op in ops["native"] if op.startswith("Sit")}
    assert bool(kernels) == native.available()
    assert not any(op.startswith("Sit") for op in ops["builtin"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "sit"], "--models takes MODEL@IMAGE_SIZE items"),
        (["--models", "nope@14"], "unknown encoder 'nope'"),
        (["--models", ","], "--models names no model"),
        (["--batch", "0"], "--batch and --rounds must be positive"),
        (["--out", "."], "--out"),
    ],
)
def test_bad_arguments_are_refused_in_one_sentence(argv, message, tmp_path, capsys):
    out = [] if "--out" in argv else ["--out", str(tmp_path / "eval.json")]
    assert load_benchmark("eval_policy_speed").main([*argv, *out]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "eval.json").exists()
