"""A resumed run is the same run: a changed seed, environment or model is refused; more steps are logged."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from run_folders import TINY_PPO, file_hashes, run_in_process

from sit_keras.agents.training import run_record


def _train(root_dir: str, *extra: str) -> subprocess.CompletedProcess:
    bindings = [
        arg
        for binding in [*TINY_PPO, "train_eval.progress = False", *extra]
        for arg in ("--gin_bindings", binding)
    ]
    return run_in_process("sit-train", "--root_dir", root_dir, *bindings)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> str:
    root_dir = str(tmp_path_factory.mktemp("resume") / "run")
    result = _train(root_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    return root_dir


def test_the_first_start_records_every_setting(first_run):
    recorded = run_record.read(first_run)
    assert recorded["train_eval.seed"] == 0 and recorded["train_eval.num_envs"] == 2
    assert recorded["train_eval.encoder"] == "cnn" and recorded["ppo.num_minibatches"] == 2
    assert recorded["train_eval.total_env_steps"] == 32
    assert not os.path.exists(os.path.join(first_run, run_record.RESUME_LOG))


@pytest.mark.parametrize(
    "change, listed",
    [
        (["train_eval.seed = 1"], "train_eval.seed: 0 -> 1"),
        (["train_eval.num_envs = 4", "train_eval.precision = 'mixed_bfloat16'"],
         "train_eval.num_envs: 2 -> 4, train_eval.precision: 'float32' -> 'mixed_bfloat16'"),
        (["train_eval.env_name = 'minigrid:LavaGapS6'"],
         "train_eval.env_name: 'minigrid:LavaGapS5' -> 'minigrid:LavaGapS6'"),
    ],
)  # fmt: skip
def test_a_resume_that_changes_the_run_is_refused_in_one_sentence(first_run, change, listed):
    before = file_hashes(first_run)
    result = _train(first_run, *change, "train_eval.total_env_steps = 64")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(
        f"sit-train: {first_run} holds a ppo run with encoder cnn, and this start changes"
    )
    assert listed in message and "total_env_steps" not in message, message
    assert file_hashes(first_run) == before  # nothing rewritten: config.gin, record, checkpoints, events


def test_a_longer_budget_resumes_from_the_checkpoint_and_is_logged(tmp_path):
    root_dir = str(tmp_path / "run")
    assert _train(root_dir).returncode == 0
    result = _train(root_dir, "train_eval.total_env_steps = 48")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert "'env_steps': 48" in summary, summary
    with open(os.path.join(root_dir, run_record.RESUME_LOG)) as f:
        (entry,) = [json.loads(line) for line in f]
    assert entry["env_steps"] == 32
    assert entry["changes"] == {"train_eval.total_env_steps": {"from": 32, "to": 48}}
    assert run_record.read(root_dir)["train_eval.total_env_steps"] == 48
    with open(os.path.join(root_dir, "config.gin")) as f:
        assert "train_eval.total_env_steps = 48" in f.read()


def test_a_damaged_record_is_named_and_kept(tmp_path):
    root_dir = tmp_path / "run"
    root_dir.mkdir()
    (root_dir / run_record.RECORD_FILE).write_text('{"train_eval.seed": ')
    result = _train(str(root_dir))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{root_dir / run_record.RECORD_FILE} is damaged" in result.stderr
    assert (root_dir / run_record.RECORD_FILE).read_text() == '{"train_eval.seed": '


def test_only_budget_interval_and_evaluation_settings_may_change():
    assert {
        "train_eval.total_env_steps",
        "train_eval.num_eval_episodes",
        "bc.num_epochs",
    } <= run_record.RESUMABLE
    kept = [
        f"train_eval.{name}" for name in ("seed", "env_name", "num_envs", "precision", "encoder", "agent")
    ]
    assert not {*kept, "train_eval.encoder_kwargs", "ppo.learning_rate"} & run_record.RESUMABLE
    assert run_record.changes({"a": (1, 2)}, {"a": [1, 2]}) == {}  # a tuple and its JSON list are one value
