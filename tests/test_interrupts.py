"""Ctrl-C or SIGTERM in training: a checkpoint after the iteration, one sentence, status 130, a resume."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from run_folders import TINY_PPO

from sit_keras import command_line

SIT_TRAIN = os.path.join(os.path.dirname(sys.executable), "sit-train")


def _command(root_dir: str, total_env_steps: int) -> list[str]:
    bindings = [
        *TINY_PPO,
        "train_eval.checkpoint_interval = 16",
        f"train_eval.total_env_steps = {total_env_steps}",
    ]
    return [SIT_TRAIN, "--root_dir", root_dir, *[a for b in bindings for a in ("--gin_bindings", b)]]


def _saved_env_steps(root_dir: str) -> int:
    checkpoint = tf.train.latest_checkpoint(os.path.join(root_dir, "checkpoints"))
    return int(tf.train.load_variable(checkpoint, "env_steps/.ATTRIBUTES/VARIABLE_VALUE"))


# One handler (agents/training/stops.py) serves both signals; SIGTERM's whole run is in make test-large.
@pytest.mark.parametrize(
    "stop", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.large)], ids=["ctrl-c", "sigterm"]
)
def test_a_stopped_run_saves_a_checkpoint_and_resumes_from_it(tmp_path, stop):
    root_dir = str(tmp_path / "run")
    with subprocess.Popen(
        _command(root_dir, 10**8), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as run:
        deadline = time.time() + 240
        while time.time() < deadline and run.poll() is None:
            if glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index")):
                break
            time.sleep(0.1)
        assert run.poll() is None, "the run ended before its first checkpoint"
        run.send_signal(stop)
        _, stderr = run.communicate(timeout=240)
    assert run.returncode == command_line.INTERRUPTED and "Traceback" not in stderr, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("sit-train: stopped at ") and last.endswith(
        "; rerun the same command to resume."
    ), last
    steps = _saved_env_steps(root_dir)
    assert f"stopped at {steps} environment steps" in last and steps > 0

    resumed = subprocess.run(_command(root_dir, steps + 16), capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"at {steps} environment steps" in resumed.stdout  # "Resumed from ... at N environment steps."
    assert f"'env_steps': {steps + 16}" in resumed.stdout.strip().splitlines()[-1]
