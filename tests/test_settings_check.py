"""Every setting's type and range is checked before a run folder exists; a NaN loss never becomes a policy."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path

import gin
import pytest
import tensorflow as tf
from run_folders import TINY_PPO, run_in_process

from sit_keras.agents import train
from sit_keras.agents.algorithms import bc, dqn, ppo, sac
from sit_keras.agents.training import harness, memory_check, run_settings, settings_check
from sit_keras.agents.training.stops import TrainingDiverged

REFERENCE = Path(__file__).resolve().parent.parent / "benchmarks" / "reference"


def _refusal(root_dir, bindings: list[str], *arguments: str) -> str:
    """The one line ``sit-train`` prints when it refuses ``bindings`` (exit 2, no traceback).

    In this process: a refusal comes before anything is built, and the command's start is
    ``tests/test_console.py``'s subject.
    """
    flags = [a for b in bindings for a in ("--gin_bindings", b)]
    run = run_in_process("sit-train", "--root_dir", str(root_dir), *flags, *arguments)
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr, run.stderr[-2000:]
    (line,) = run.stderr.splitlines()
    return line


@pytest.mark.parametrize(
    "binding, sentence",
    [
        ("train_eval.num_envs = True", "train_eval.num_envs must be an integer. Received: num_envs=True"),
        ("train_eval.total_env_steps = 64.5", "train_eval.total_env_steps must be an integer."),
        ("ppo.learning_rate = -1.0", "ppo.learning_rate must be > 0. Received: learning_rate=-1.0"),
        ("ppo.clip_ratio = 0", "ppo.clip_ratio must be > 0."),
        ("ppo.discount = 1.5", "ppo.discount must be in [0, 1]."),
        ("ppo.entropy_coef = 'a lot'", "ppo.entropy_coef must be a number."),
        ("ppo.normalize_rewards = 1", "ppo.normalize_rewards must be true or false."),
    ],
)
def test_a_bad_setting_is_one_sentence_and_no_folder(tmp_path, binding, sentence):
    root_dir = tmp_path / "run"
    line = _refusal(root_dir, [*TINY_PPO, binding])
    assert line.startswith("sit-train: ") and sentence in line and not root_dir.exists()


def test_types_follow_the_annotations():
    @dataclasses.dataclass(frozen=True)
    class Settings:
        count: int = 1
        rate: float = 0.5
        flag: bool = False
        name: str = "x"
        limit: int | None = None

    settings_check.check(Settings(rate=1), "s")  # an integer is a float
    settings_check.check(Settings(limit=3), "s")
    for field, value in [("count", 2.0), ("count", False), ("rate", math.inf), ("rate", "1"), ("flag", 0),
                         ("name", 3), ("limit", 2.5)]:  # fmt: skip
        with pytest.raises(ValueError, match=f"^s.{field} must be "):
            settings_check.check(Settings(**{field: value}), "s")
    with pytest.raises(ValueError, match=r"^s.rate must be in \(0, 1\]. Received: rate=0"):
        settings_check.check(Settings(rate=0), "s", {"rate": settings_check.Range(0, 1, low_inclusive=False)})


def test_a_non_finite_loss_stops_the_run_before_it_saves_a_policy(tmp_path, monkeypatch):
    root_dir = str(tmp_path / "run")

    build = ppo.build

    def diverging_build(run, settings):
        algorithm = build(run, settings)

        def diverged(env_steps):  # one update, whose loss is not a number
            algorithm.agent.train_step_counter.assign_add(1)
            return {"loss": math.nan}

        return dataclasses.replace(algorithm, learn=diverged)

    monkeypatch.setattr(ppo, "build", diverging_build)
    gin.clear_config()
    train.parse_gin([], [*TINY_PPO, "train_eval.progress = False", "train_eval.checkpoint_interval = 16"])
    try:
        diverged_at = r"the loss became nan at 16 environment steps \(train step 1\)"
        with pytest.raises(TrainingDiverged, match=diverged_at):
            harness.train_eval(root_dir)
    finally:
        gin.clear_config()
    assert not os.path.exists(os.path.join(root_dir, "checkpoints", "checkpoint"))
    assert not os.path.exists(os.path.join(root_dir, "policies"))


@pytest.mark.parametrize(
    "given, sentence",
    [
        ("", "sit-train: root_dir is empty: give the folder to write to."),
        ("/proc/sit_run", "sit-train: root_dir '/proc/sit_run' lies in /proc, a virtual file system"),
        ("{file}", "sit-train: root_dir '{file}' is a file, not a folder."),
        (
            "{file}/run",
            "sit-train: root_dir '{file}/run' lies under '{file}', which is a file, not a folder.",
        ),
    ],
    ids=["empty", "proc", "a file", "under a file"],
)
def test_a_root_dir_that_cannot_hold_a_run_is_one_sentence(tmp_path, given, sentence):
    file = tmp_path / "notes.txt"
    file.write_text("not a folder")
    root_dir = given.format(file=file)
    line = _refusal(root_dir, TINY_PPO)
    assert line.startswith(sentence.format(file=file)), line
    assert file.read_text() == "not a folder"


def test_a_misspelt_encoder_keyword_is_one_sentence_with_a_guess_and_no_folder(tmp_path):
    root_dir = tmp_path / "run"
    bindings = [*TINY_PPO, "train_eval.encoder_kwargs = {'filters': (4,), 'strides': 1, 'output_dimm': 8}"]
    line = _refusal(root_dir, bindings)
    assert line.startswith(
        "sit-train: train_eval.encoder_kwargs has the key 'output_dimm', which encoder 'cnn' does not take: "
        "did you mean 'output_dim'? it takes "
    ), line
    assert not root_dir.exists()


@pytest.mark.parametrize("binding", ["env_kwargs", "eval_env_kwargs"])
def test_an_environment_keyword_it_does_not_take_is_refused_before_training(tmp_path, binding):
    root_dir = tmp_path / "run"
    bindings = [*TINY_PPO, "train_eval.num_eval_episodes = 2", f"train_eval.{binding} = {{'colour': 'red'}}"]
    assert _refusal(root_dir, bindings) == (
        f"sit-train: train_eval.{binding} has the key 'colour', which environment 'minigrid:LavaGapS5' "
        "does not take."
    )
    assert not root_dir.exists()  # found at set-up, not after the budget has trained


@pytest.mark.parametrize(
    "content, sentence",
    [
        (b"train_eval.num_envs = 2\ntrain_eval.seed = (1,\n", "line 3: eof in multi-line statement"),
        (b"train_eval.num_envs = 2\n\xff\xfe\n", "line 2: not UTF-8 text (byte 0xff)"),
    ],
    ids=["open bracket", "not utf-8"],
)
def test_a_broken_gin_file_is_named_with_its_line(tmp_path, content, sentence):
    config = tmp_path / "broken.gin"
    config.write_bytes(content)
    line = _refusal(tmp_path / "run", [], "--gin_file", str(config))
    assert line.startswith(f"sit-train: {config}, {sentence}"), line
    assert not (tmp_path / "run").exists()


def test_a_run_that_cannot_fit_in_memory_is_refused_with_the_estimate(tmp_path):
    root_dir = tmp_path / "run"
    line = _refusal(root_dir, [*TINY_PPO, "train_eval.num_envs = 10_000_000"])
    assert line.startswith("sit-train: train_eval.num_envs = 10000000 needs at least ")
    assert re.search(r"\(10000000 environments of 14.0 kB and \d+ stored observations of 588 bytes\)", line)
    assert line.endswith("lower train_eval.num_envs or ppo.collect_steps_per_env.")
    assert not root_dir.exists()


def test_the_memory_estimate_is_a_lower_bound_of_what_was_measured():
    # The per-environment sizes are at most the smallest measured (benchmarks/env_memory.py).
    measured = json.loads((REFERENCE / "env_memory.json").read_text())["families"]
    assert set(measured) == set(memory_check.ENV_BYTES)
    for family, size in memory_check.ENV_BYTES.items():
        assert 0.9 * measured[family]["bytes_per_env_min"] <= size <= measured[family]["bytes_per_env_min"]
    assert 0 < memory_check.available_bytes() < 2**50  # this Linux machine's MemAvailable (or cgroup limit)
    image = {"pixels": tf.TensorSpec((84, 84, 9), tf.uint8), "state": tf.TensorSpec((5,), tf.float32)}
    assert memory_check.observation_bytes(image) == 84 * 84 * 9 + 20
    fits = memory_check.check("atari:Pong", 8, 1000, "dqn.replay_capacity", lambda: image, available=10**9)
    assert fits.total == 8 * memory_check.ENV_BYTES["atari"] + 1000 * (84 * 84 * 9 + 20)
    with pytest.raises(ValueError, match=r"more than the 1.0 MB available: lower train_eval.num_envs or dqn"):
        memory_check.check("atari:Pong", 8, 1000, "dqn.replay_capacity", lambda: image, available=10**6)
    # Every algorithm says what it stores: PPO a rollout of T + 1 steps, SAC and DQN their buffers.
    run = run_settings.RunSettings(num_envs=4, total_env_steps=64)
    rollout = ppo.stored_observations(run, ppo.PPO(collect_steps_per_env=16))
    assert rollout == (68, "ppo.collect_steps_per_env")
    assert sac.stored_observations(run, sac.SAC(replay_capacity=1000)) == (1000, "sac.replay_capacity")
    assert dqn.stored_observations(run, dqn.DQN(replay_capacity=10, n_step=3)) == (20, "dqn.replay_capacity")
    # ... and how many observations one gradient step reads (precision="auto" times the model there).
    assert ppo.minibatch_size(run, ppo.PPO(collect_steps_per_env=16, num_minibatches=4)) == 16
    assert sac.minibatch_size(run, sac.SAC(batch_size=32)) == 32
    assert dqn.minibatch_size(run, dqn.DQN(batch_size=32)) == 32
    assert bc.minibatch_size(run, bc.BC(teacher_dir="t", sequence_length=10)) == 40
