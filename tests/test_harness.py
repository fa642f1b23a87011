"""The one training harness: every agent runs, is killed, resumes and leaves the same output layout.

Also its behaviour under bad input: bindings that no selected configurable
reads, settings out of range and unknown names are one sentence from
``sit-train`` (exit status 2, no traceback), before anything is written.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import time
import typing

import gin
import numpy as np
import pytest
import tensorflow as tf
from run_folders import run_in_process
from summaries import summary_tags

from sit_keras.agents import train
from sit_keras.agents.algorithms import bc, dqn, ppo, sac
from sit_keras.agents.training import checkpoints, harness
from sit_keras.agents.training.algorithm import Algorithm
from sit_keras.agents.training.evaluation import EVALUATIONS_FILE
from sit_keras.agents.training.run_settings import RunSettings, algorithm_module, hyperparameters

SIT_TRAIN = os.path.join(os.path.dirname(sys.executable), "sit-train")
TINY_CNN = "{'filters': (4,), 'strides': 1, 'output_dim': 8}"
COMMON = ["train_eval.progress = False", "train_eval.num_eval_episodes = 2"]
# Each agent's smallest real run; the budget is set per phase.
AGENT_BINDINGS = {
    "ppo": [
        "train_eval.env_name = 'minigrid:LavaGapS5'", "train_eval.num_envs = 2", "train_eval.encoder = 'cnn'",
        f"train_eval.encoder_kwargs = {TINY_CNN}", "ppo.collect_steps_per_env = 8", "ppo.num_minibatches = 2",
        "ppo.drac_coef = 0.0", "train_eval.checkpoint_interval = 16", "train_eval.policy_save_interval = 32",
        "train_eval.eval_interval = 32",
    ],
    "sac": [
        "train_eval.agent = 'sac'", "train_eval.env_name = 'gymnasium:Pendulum-v1'",
        "train_eval.encoder = 'mlp'", "sac.actor_fc_layer_params = (8,)", "sac.critic_fc_layer_params = (8,)",
        "sac.initial_collect_steps = 20", "sac.batch_size = 8", "sac.replay_capacity = 1000",
        "train_eval.checkpoint_interval = 10", "train_eval.policy_save_interval = 40",
        "train_eval.eval_interval = 40", "train_eval.log_interval = 10", "train_eval.num_eval_episodes = 1",
    ],
    "dqn": [
        "train_eval.agent = 'dqn'", "train_eval.env_name = 'gymnasium:CartPole-v1'",
        "train_eval.encoder = 'mlp'", "train_eval.encoder_kwargs = {'units': (8,)}", "dqn.algorithm = 'dqn'",
        "dqn.min_replay_size = 20",
        "dqn.n_step = 2", "dqn.replay_capacity = 1000", "dqn.batch_size = 8", "dqn.target_update_period = 10",
        "train_eval.checkpoint_interval = 10", "train_eval.policy_save_interval = 40",
        "train_eval.eval_interval = 40", "train_eval.log_interval = 10",
    ],
    "bc": [
        "train_eval.agent = 'bc'", "train_eval.num_envs = 2", "train_eval.total_env_steps = 40",
        "train_eval.encoder = 'cnn'", f"train_eval.encoder_kwargs = {TINY_CNN}", "bc.sequence_length = 10",
        "bc.fc_layer_params = (8,)",
    ],
}  # fmt: skip
# Environment steps added by the resumed run (BC: one more epoch of its 4 chunks).
RESUME_STEPS = {"ppo": 16, "sac": 10, "dqn": 10}
BC_CHUNKS = 2  # 40 steps over 2 environments, in chunks of 10


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> str:
    """A tiny trained PPO folder on LavaGapS5: BC's teacher."""
    root_dir = str(tmp_path_factory.mktemp("teacher"))
    gin.clear_config()
    train.parse_gin([], AGENT_BINDINGS["ppo"])
    try:
        harness.train_eval(root_dir, total_env_steps=32, progress=False, num_eval_episodes=0)
    finally:
        gin.clear_config()
    return root_dir


def _bindings(agent: str, teacher: str) -> list[str]:
    extra = [f"bc.teacher_dir = '{teacher}'"] if agent == "bc" else []
    return [*COMMON, *AGENT_BINDINGS[agent], *extra]


def _command(root_dir: str, bindings: list[str]) -> list[str]:
    return [SIT_TRAIN, "--root_dir", root_dir, *(arg for b in bindings for arg in ("--gin_bindings", b))]


def _checkpoint_value(root_dir: str, name: str) -> int:
    """``name`` in the checkpoint a run resumes from: the newest intact one, which a kill may have left
    newer than the one the folder's index names (written after the checkpoint's files)."""
    checkpoints.check_readable(root_dir)
    checkpoint = tf.train.latest_checkpoint(os.path.join(root_dir, "checkpoints"))
    assert checkpoint, "no checkpoint written before the kill"
    return int(tf.train.load_variable(checkpoint, f"{name}/.ATTRIBUTES/VARIABLE_VALUE"))


def _run_until_two_checkpoints_then_kill(command: list[str], root_dir: str, log_path: str) -> None:
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.time() + 240
            while time.time() < deadline and process.poll() is None:
                if len(glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index"))) >= 2:
                    break
                time.sleep(0.3)
            ended = process.poll() is not None
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
    if ended:
        with open(log_path) as log:
            pytest.fail(f"the run ended before it was killed: {log.read()[-2000:]}")


@pytest.mark.parametrize(
    "agent",
    # The kill and the layout are the harness's, the same for every agent: PPO's in the default run.
    # SAC's and DQN's resume (counters, replay buffer, target schedule) are checked by
    # test_sac_training::test_rerun_resumes_counters_and_replay_buffer and
    # test_dqn_training::test_rerun_resumes_counters_target_schedule_and_replay, BC's (its
    # checkpointed schedule step) in test_distill; their whole runs are in make test-large.
    ["ppo", *(pytest.param(agent, marks=pytest.mark.large) for agent in ("sac", "dqn", "bc"))],
)
def test_every_agent_runs_is_killed_resumes_and_writes_the_same_layout(agent, teacher, tmp_path):
    root_dir = str(tmp_path / agent)
    bindings = _bindings(agent, teacher)
    # Phase 1: a long run, killed once it has written two checkpoints.
    long_run = ["bc.num_epochs = 100000"] if agent == "bc" else ["train_eval.total_env_steps = 100000000"]
    _run_until_two_checkpoints_then_kill(
        _command(root_dir, [*bindings, *long_run]), root_dir, str(tmp_path / "killed.log")
    )
    saved_steps = _checkpoint_value(root_dir, "env_steps")
    saved_train_step = _checkpoint_value(root_dir, "train_step")
    assert saved_steps > 0 and saved_train_step > 0

    # Phase 2: the same folder resumes from the newest checkpoint, a little further.
    gin.clear_config()
    train.parse_gin([], bindings)
    try:
        if agent == "bc":
            epochs = saved_train_step // BC_CHUNKS
            results = harness.train_eval(root_dir, num_epochs=epochs + 1)
            assert results["train_step"] == (epochs + 1) * BC_CHUNKS
            assert results["env_steps"] == 40
        else:
            results = harness.train_eval(root_dir, total_env_steps=saved_steps + RESUME_STEPS[agent])
            assert results["env_steps"] == saved_steps + RESUME_STEPS[agent]
            assert results["train_step"] > saved_train_step
    finally:
        gin.clear_config()

    # The same output layout for every agent.
    for path in ("config.gin", "policy_network.json", EVALUATIONS_FILE, "checkpoints/checkpoint",
                 "policies/greedy_policy/saved_model.pb", "policies/policy/saved_model.pb"):  # fmt: skip
        assert os.path.exists(os.path.join(root_dir, path)), path
    assert os.path.isdir(os.path.join(root_dir, "replay_buffer")) == (agent in ("sac", "dqn"))
    with open(os.path.join(root_dir, "policy_network.json")) as f:
        assert json.load(f)["agent"] == {"dqn": "dqn"}.get(agent, agent)
    assert {"Metrics/AverageReturn", "Metrics/loss", "charts/SPS", "config/operative_gin"} <= summary_tags(
        os.path.join(root_dir, "collect")
    )
    assert {
        "Eval/AverageReturn",
        "Eval/StdReturn",
        "Eval/AverageEpisodeLength",
        "Eval/SuccessRate",
    } <= summary_tags(os.path.join(root_dir, "eval"))
    assert any(tag.startswith("Losses/") for tag in summary_tags(os.path.join(root_dir, "train")))
    for key in ("AverageReturn", "SuccessRate", "env_steps", "train_step", "SPS", "evaluations", "history"):
        assert key in results, key
    with open(os.path.join(root_dir, EVALUATIONS_FILE)) as f:
        evaluations = json.load(f)
    assert evaluations == results["evaluations"] and evaluations[-1]["env_steps"] == results["env_steps"]
    # config.gin holds every setting the run was built from: parsed alone, it gives the same settings.
    gin.clear_config()
    train.parse_gin([os.path.join(root_dir, "config.gin")], [])
    try:
        settings = RunSettings()
        module = algorithm_module(settings.agent)
        assert settings.agent == agent
        rebuilt = hyperparameters(settings, module.SETTINGS())
    finally:
        gin.clear_config()
    assert rebuilt["train_eval.total_env_steps"] == (40 if agent == "bc" else results["env_steps"])
    assert rebuilt["train_eval.num_envs"] is not None and rebuilt["train_eval.encoder"] in ("cnn", "mlp")
    # Evaluations keep their schedule across the kill: multiples of the interval, then the last step.
    interval = {"ppo": 32, "sac": 40, "dqn": 40}.get(agent)
    if interval:
        assert all(e["env_steps"] % interval == 0 for e in evaluations[:-1])


def test_a_run_resumed_at_its_budget_writes_the_policy_export_its_stopped_run_had_not(tmp_path, capsys):
    """A run stopped after its last checkpoint but before its policy export (here: the export removed) is
    rerun: nothing is left to train, and it writes the final policy; rerun again, it writes nothing."""
    root_dir = str(tmp_path / "run")
    gin.clear_config()
    train.parse_gin([], [*COMMON, *AGENT_BINDINGS["ppo"]])
    try:
        first = harness.train_eval(root_dir, total_env_steps=32, num_eval_episodes=0)
        policies = os.path.join(root_dir, "policies")
        os.rename(policies, str(tmp_path / "exported"))
        capsys.readouterr()
        again = harness.train_eval(root_dir, total_env_steps=32, num_eval_episodes=0)
        assert again["train_step"] == first["train_step"] and again["env_steps"] == 32
        step = first["train_step"]
        assert (
            f"Exporting the policy of train step {step}: the stopped run had not." in capsys.readouterr().out
        )
        for path in ("policy/saved_model.pb", "greedy_policy/saved_model.pb",
                     f"checkpoints/policy_checkpoint_{step:010d}/variables/variables.index"):  # fmt: skip
            assert os.path.exists(os.path.join(policies, path)), path
        written = os.path.getmtime(os.path.join(policies, "policy", "saved_model.pb"))
        harness.train_eval(root_dir, total_env_steps=32, num_eval_episodes=0)
        assert "Exporting the policy" not in capsys.readouterr().out
        assert os.path.getmtime(os.path.join(policies, "policy", "saved_model.pb")) == written
    finally:
        gin.clear_config()


def test_bindings_that_the_run_does_not_read_are_an_error_naming_them(tmp_path):
    gin.clear_config()
    train.parse_gin(["configs/dmc/cartpole_swingup_state.gin"], ["ppo.learning_rate = 1e-3"])
    try:
        with pytest.raises(harness.SettingsError, match=r"a 'sac' run does not read: ppo\.learning_rate"):
            harness.train_eval(str(tmp_path / "run"))
    finally:
        gin.clear_config()
    assert not os.path.exists(tmp_path / "run")


def test_the_shared_budget_binds_every_agent(tmp_path):
    """``train_eval.total_env_steps`` is the budget of a SAC config too (it was silently ignored)."""
    gin.clear_config()
    train.parse_gin(["configs/dmc/cartpole_swingup_state.gin"], [
        "train_eval.total_env_steps = 24", "sac.initial_collect_steps = 16", "sac.batch_size = 4",
        "sac.actor_fc_layer_params = (8,)", "sac.critic_fc_layer_params = (8,)",
        "train_eval.num_eval_episodes = 0", "train_eval.policy_save_interval = 0",
        "train_eval.progress = False",
    ])  # fmt: skip
    try:
        results = harness.train_eval(str(tmp_path / "run"))
    finally:
        gin.clear_config()
    assert results["env_steps"] == 24


@pytest.mark.parametrize(
    "bindings, message",
    [
        (["ppo.learning_rate = 1e-3", "train_eval.agent = 'sac'"], "does not read: ppo.learning_rate"),
        (["train_eval.agent = 'a3c'"], "Unknown agent 'a3c'"),
        (["train_eval.num_envs = 0"], "train_eval.num_envs must be >= 1"),
        (["ppo.num_epochs = 0"], "ppo.num_epochs must be >= 1"),
        (["train_eval.encoder = 'resnet'"], "Unknown encoder 'resnet'"),
        (["train_eval.agent = 'dqn'", "train_eval.encoder = 'attention_neuron'"], "is recurrent"),
        (["train_eval.env_name = 'minigrid:NoSuchEnv'"], "NoSuchEnv"),
        (["train_eval.precision = 'float8'"], "Unknown precision 'float8'"),
        (["train_eval.no_such_setting = 1"], "Bad gin configuration"),
    ],
)
def test_sit_train_mistakes_are_one_sentence_before_anything_is_written(bindings, message, tmp_path):
    root_dir = str(tmp_path / "run")
    run = run_in_process("sit-train", *_command(root_dir, bindings)[1:])
    assert run.returncode == 2, run.stderr[-2000:]
    assert message in run.stderr
    assert "Traceback" not in run.stderr
    assert not os.path.exists(root_dir)


@pytest.mark.parametrize("module", [ppo, sac, dqn, bc])
def test_agent_settings_share_no_name_with_the_run_settings(module):
    """A keyword of ``train_eval`` goes to exactly one of the two settings objects."""
    run_fields = {f.name for f in dataclasses.fields(RunSettings)}
    assert not run_fields & {f.name for f in dataclasses.fields(module.SETTINGS)}


def test_one_name_for_each_shared_setting():
    """One budget, one clipping and one collection-length name in every agent."""
    for module in (ppo, sac, dqn):
        names = {f.name for f in dataclasses.fields(module.SETTINGS)}
        assert "max_grad_norm" in names and "collect_steps_per_env" in names, module.__name__
        assert not names & {"gradient_clipping", "total_agent_steps", "collect_steps_per_iteration"}
    assert "max_grad_norm" in {f.name for f in dataclasses.fields(bc.BC)}


@pytest.mark.parametrize("module", [ppo, sac, dqn, bc])
def test_every_algorithm_module_has_the_contract_s_functions(module):
    """``SETTINGS``, ``RANGES``, ``defaults``, ``check``, ``stored_observations``, ``minibatch_size`` and
    one ``build`` returning an ``Algorithm`` (``agents/training/algorithm.py``); no algorithm subclasses
    anything."""
    for name in ("SETTINGS", "RANGES", "defaults", "check", "stored_observations", "minibatch_size", "build"):
        assert hasattr(module, name), f"{module.__name__} has no {name}"
    assert typing.get_type_hints(module.build)["return"] is Algorithm
    assert not [
        c
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, Algorithm) and c is not Algorithm
    ]


def test_an_algorithm_collects_and_learns_or_trains_on_its_own_schedule():
    """The contract refuses an algorithm with both ways to train, or neither, or no collection length."""
    parts = dict(agent=None, eval_policy=None, checkpoint_objects={}, description={})
    online = dict(
        collect_policy=object(), learn=lambda env_steps: {}, batched_steps=2, env_steps_per_iteration=4
    )
    Algorithm(**parts, **online)
    Algorithm(**parts, train=lambda loop: {})
    with pytest.raises(ValueError, match="either collects and learns in turns"):
        Algorithm(**parts, **online, train=lambda loop: {})
    with pytest.raises(ValueError, match="either collects and learns in turns"):
        Algorithm(**parts)
    with pytest.raises(ValueError, match="needs batched_steps and env_steps_per_iteration >= 1"):
        Algorithm(**parts, **{**online, "batched_steps": 0})


def test_crosses_fires_on_multiples_of_the_interval():
    assert harness.crosses(900, 1100, 1000)
    assert not harness.crosses(1000, 1900, 1000)
    assert harness.crosses(1999, 2000, 1000)
    assert not harness.crosses(0, 10**9, 0)


# PPO in float16 (emulated on CPUs, the slowest case): make test-large; PPO's bfloat16 case and the other
# agents' float16 cases run the same code by default.
@pytest.mark.parametrize(
    ("agent", "precision"),
    [
        pytest.param(agent, precision, marks=pytest.mark.large)
        if (agent, precision) == ("ppo", "mixed_float16")
        else (agent, precision)
        for agent in ("ppo", "sac", "dqn", "bc")
        for precision in ("mixed_bfloat16", "mixed_float16")
    ],
)
def test_every_agent_trains_in_mixed_precision(agent, precision, teacher, tmp_path):
    """A few train steps under each mixed policy: finite losses, float32 variables and outputs."""
    gin.clear_config()
    train.parse_gin([], _bindings(agent, teacher))
    budget = {"bc": {"num_epochs": 1}}.get(agent, {"total_env_steps": 40 if agent != "ppo" else 32})
    try:
        results = harness.train_eval(
            str(tmp_path / "run"), precision=precision, num_eval_episodes=1, policy_save_interval=0, **budget
        )
    finally:
        gin.clear_config()
    assert results["train_step"] > 0
    # DQN logs a NaN loss before its first update (min_replay_size): no loss yet.
    assert all(np.isfinite(entry["loss"]) for entry in results["history"] if entry["train_step"] > 0)
    with open(tmp_path / "run" / "config.gin") as f:
        assert f"train_eval.precision = '{precision}'" in f.read()
    # The checkpoint holds float32 variables only: it restores into the float32 network that export builds.
    checkpoint = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    names = [name for name, _ in tf.train.list_variables(checkpoint)]
    dtypes = {np.asarray(tf.train.load_variable(checkpoint, name)).dtype for name in names}
    assert not dtypes & {np.dtype("float16"), tf.bfloat16.as_numpy_dtype}


# Two runs of each agent in one process: enable_op_determinism cannot be undone, so not in pytest's.
RERUN_SCRIPT = r"""
import json, sys
import gin
from sit_keras.agents import train
from sit_keras.agents.training import checkpoints, harness

root, runs = sys.argv[1], json.loads(sys.argv[2])
losses = {}
for agent, (bindings, budget) in runs.items():
    losses[agent] = []
    for attempt in range(2):
        gin.clear_config()
        train.parse_gin([], bindings)
        results = harness.train_eval(
            f"{root}/{agent}{attempt}", deterministic=True, total_env_steps=budget, policy_save_interval=0
        )
        losses[agent].append([entry["loss"] for entry in results["history"] if entry["train_step"] > 0])
# sit-train's flag, on the last agent's settings.
gin.clear_config()
argv = ["sit-train", "--root_dir", f"{root}/cli", "--deterministic"]
argv += [arg for binding in bindings for arg in ("--gin_bindings", binding)]
argv += ["--gin_bindings", f"train_eval.total_env_steps = {budget}"]
assert train.main(argv) == 0
print(json.dumps(losses))
"""


def test_deterministic_runs_repeat_every_loss(tmp_path):
    """``train_eval.deterministic``: two runs with one seed give the same losses, bit for bit.

    SAC and DQN sample their replay buffers (prefetched outside this mode), PPO shuffles minibatches.
    """
    runs = {
        "ppo": (AGENT_BINDINGS["ppo"] + COMMON, 48),
        "sac": (AGENT_BINDINGS["sac"] + COMMON, 60),
        "dqn": (AGENT_BINDINGS["dqn"] + COMMON, 60),
    }
    done = subprocess.run(
        [sys.executable, "-c", RERUN_SCRIPT, str(tmp_path), json.dumps(runs)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    losses = json.loads(done.stdout.strip().splitlines()[-1])
    for agent, (first, second) in losses.items():
        assert len(first) >= 2 and np.all(np.isfinite(first)), (agent, first)
        assert first == second, agent  # exact: the same floats, not close ones
    # `sit-train --deterministic` reaches the run, and the run records it.
    with open(tmp_path / "cli" / "config.gin") as f:
        assert "train_eval.deterministic = True" in f.read()


def test_a_policy_trained_in_mixed_bfloat16_exports_with_parity(tmp_path):
    from sit_keras.export.exporter import export_policy

    gin.clear_config()
    train.parse_gin([], _bindings("ppo", ""))
    try:
        harness.train_eval(
            str(tmp_path / "run"), precision="mixed_bfloat16", total_env_steps=32, num_eval_episodes=0
        )
    finally:
        gin.clear_config()
    run_dir, export_dir = str(tmp_path / "run"), str(tmp_path / "export")
    report = export_policy(run_dir, export_dir, "ppo_bf16", num_examples=32, allow_parity_failure=True)
    assert os.path.exists(tmp_path / "export" / "saved_model" / "ppo_bf16" / "1" / "saved_model.pb")
    float32 = report["models"]["tflite_float32"]["parity"]
    assert float32["passed"] and float32["action_agreement"] == 1.0
    # Every quantisation is exported and gated (a failure is recorded, not hidden).
    for quantization in ("float16", "dynamic_int8", "int8"):
        parity = report["models"][f"tflite_{quantization}"]["parity"]
        assert parity["passed"] or f"tflite_{quantization}" in report["parity_failures"]
