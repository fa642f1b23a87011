"""A silent console: every command's ``--help`` and a tiny run print no library noise (``sit_keras.quiet``).

The commands run as a user runs them: the installed console scripts, in a
subprocess whose environment has none of the variables that quiet
TensorFlow (the Makefile exports ``TF_CPP_MIN_LOG_LEVEL``). A mistake in the
arguments is answered after that start, which ``--help`` shows silent, so those
tests run each command's ``main`` in this process (``run_folders.run_in_process``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from run_folders import TINY_PPO, run_in_process

from sit_keras import command_line, quiet
from sit_keras.commands import entry_points

BIN = os.path.dirname(sys.executable)
# Library chatter of any kind, listed or not: TensorFlow / absl C++ log lines, absl and
# TensorFlow Python logging, warnings, CUDA, oneDNN, gym, TFLite and ALE banners.
LIBRARY_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |[IWEF]\d{4} \d\d:\d\d:[\d.]+ +\d+ [\w.]+:\d+\] |"
    r"^(WARNING|INFO|ERROR):(absl|tensorflow|root)|Warning: |cuda|cuDNN|oneDNN|absl::|"
    r"Gym has been unmaintained|Gymnasium|XNNPACK|Powered by Stella|TensorFlow binary",
    re.IGNORECASE,
)


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS")}


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [os.path.join(BIN, command[0]), *command[1:]],
        capture_output=True,
        text=True,
        env=_clean_environment(),
        timeout=600,
    )


def _noise(result: subprocess.CompletedProcess) -> list[str]:
    lines = (result.stdout + "\n" + result.stderr).replace("\r", "\n").splitlines()
    return [line for line in lines if LIBRARY_LINE.search(line)]


@pytest.mark.parametrize("program", sorted(entry_points.COMMANDS))
def test_help_is_silent_and_lists_the_flags(program):
    result = _run(program, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and not _noise(result), result.stderr
    assert "--verbose" in result.stdout
    # The command's own flags, each with its help on its own line (the common ones at least).
    flag_lines = [line for line in result.stdout.splitlines() if line.lstrip().startswith("--")]
    assert len(flag_lines) >= 4, result.stdout
    for line in flag_lines:
        assert re.match(r"^  --\S+( [A-Z_]+)?  +\S", line), line
    assert "common flags" in result.stdout.lower(), result.stdout


@pytest.mark.parametrize("program", sorted(entry_points.COMMANDS))
def test_a_mistake_is_one_sentence_and_exit_status_2(program):
    result = run_in_process(program, "--no_such_flag")
    assert result.returncode == command_line.USAGE_ERROR and result.stdout == "", result.stderr
    (line,) = result.stderr.splitlines()
    assert (
        line.startswith(f"{program}: ") and "no_such_flag" in line and line.endswith(f"See {program} --help.")
    )


def test_a_tiny_run_evaluation_and_export_are_silent(tmp_path):
    root_dir = str(tmp_path / "run")
    bindings = [arg for binding in TINY_PPO for arg in ("--gin_bindings", binding)]
    runs = {
        "sit-train": _run("sit-train", "--root_dir", root_dir, *bindings),
        "sit-eval": _run(
            "sit-eval", f"--policy_dir={root_dir}/policies/greedy_policy", "--num_episodes=2", "--num_envs=2",
            f"--output={tmp_path}/eval.json",
        ),
        "sit-export": _run(
            "sit-export", f"--root_dir={root_dir}", "--formats=tflite", "--quantizations=float32",
            "--num_examples=4",
        ),
    }  # fmt: skip
    runs["sit-eval --tflite"] = _run(
        "sit-eval", f"--tflite={root_dir}/export/tflite/policy_float32.tflite", "--num_episodes=2",
        f"--output={tmp_path}/eval_tflite.json",
    )  # fmt: skip
    for program, result in runs.items():
        assert result.returncode == 0, (program, result.stderr[-2000:])
        assert not _noise(result), (program, _noise(result))
    assert json.loads((tmp_path / "eval.json").read_text())


def test_an_impala_cnn_training_is_silent(tmp_path):
    # Grappler's C++ log is not TensorFlow's: its "remapper failed" line on the residual
    # sums would pass TF_CPP_MIN_LOG_LEVEL, so the model must not provoke it.
    bindings = [*TINY_PPO, "train_eval.encoder = 'impala_cnn'",
                "train_eval.encoder_kwargs = {'channels': (4,), 'output_dim': 8}"]  # fmt: skip
    flags = [arg for binding in bindings for arg in ("--gin_bindings", binding)]
    result = _run("sit-train", "--root_dir", str(tmp_path / "run"), *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not _noise(result), _noise(result)


def test_verbose_shows_the_library_messages():
    result = _run("sit-train", "--help", "--verbose")
    assert result.returncode == 0
    assert _noise(result), "--verbose dropped TensorFlow's start-up lines"


def test_a_real_warning_still_reaches_the_user():
    # An old flag spelling is announced; the mistake after it is one sentence; nothing else.
    result = _run("sit-check-encoders", "--models", "sit", "--image-size", "3")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "sit-check-encoders: --image-size is deprecated; use --image_size.", lines
    assert lines[1].startswith("sit-check-encoders: --image_size 3 does not fit sit"), lines
    assert len(lines) == 2 and result.stdout == "", result.stderr


def test_only_listed_lines_are_dropped(capfd):
    listed = "W0000 00:00:1.5 1 computation_placer.cc:177] computation placer already registered. " + (
        "Please check linkage and avoid linking the same target more than once."
    )
    with quiet.filtered_stderr():
        os.write(2, f"{listed}\nsomething a user must see\n{listed}\n".encode())
    assert capfd.readouterr().err == "something a user must see\n"
    assert quiet.is_noise(listed) and not quiet.is_noise("computation placer failed")
