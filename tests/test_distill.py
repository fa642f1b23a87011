"""Behaviour cloning into a permutation-invariant student (``train_eval.agent = 'bc'``, ``sit-distill``).

What this file proves:

- the teacher's data are recorded as consecutive streams, the LAST steps
  (whose actions the environment ignores) carry no weight, and the episode
  returns in the data are the environment's;
- the loss is the mode's squared error (continuous) or the cross-entropy
  (discrete), weighted per step;
- end to end on a tiny PPO teacher trained here: the student's loss falls,
  its folder is a training folder (checkpoints that
  ``policy_network.restore_network`` reads, ``policy_network.json``, saved
  greedy policy, ``evaluations.json`` with the student's evaluation beside
  the teacher's in the results) on which ``sit-eval`` runs and which a rerun
  resumes; the rebuilt network acts as the saved policy;
- ``sit-distill`` is ``sit-train`` with the BC agent: its run folder is the
  one ``harness.train_eval`` writes with the same settings as keywords (what
  the old command ran), the old flags give the same ``config.gin`` and name
  the binding that replaces each (``large``); every old flag is the binding it
  announces; a bad old value or a bad setting is one sentence and exit status 2;
- ``previous_action_noise`` (A.4.2) is recorded with the student, which acts
  without it, and is refused for students without a previous action;
- the recorded rounds keep the executed actions beside the teacher's labels, and
  ``previous_action = "executed"`` feeds them, a step late, as the student's
  previous action in training;
- bad settings raise a ``harness.SettingsError`` (a ``ValueError``) that says
  what to change, before the student's folder is made.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
from typing import Any

import gin
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from absl import flags
from run_folders import run_in_process
from summaries import hyperparameters, summary_tags
from tf_agents.policies import random_py_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras.agents import distill, evaluate, train
from sit_keras.agents.algorithms import bc
from sit_keras.agents.environments import load
from sit_keras.agents.networks import policy_network
from sit_keras.agents.training import harness
from sit_keras.agents.training.evaluation import EVALUATIONS_FILE
from sit_keras.agents.training.run_settings import RunSettings, run_config

ENV = "gymnasium:Pendulum-v1"  # 3 sensors, continuous action, 200-step episodes
STUDENT = {"encoder_kwargs": {"output_dim": 16, "num_queries": 8}, "fc_layer_params": (16,)}


def _random_cartpole_data() -> bc.TeacherData:
    env = load("gymnasium:CartPole-v1", num_envs=3, seed=1)
    policy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), outer_dims=(3,), seed=1)
    try:
        return bc.collect_teacher_data(policy, env, 120)
    finally:
        env.close()


def test_teacher_data_are_consecutive_streams_without_last_step_weights():
    data = _random_cartpole_data()
    assert data.observations.shape == (3, 120, 4) and data.actions.shape == (3, 120)
    assert data.step_types[:, 0].tolist() == [ts.StepType.FIRST] * 3
    last = data.step_types == ts.StepType.LAST
    assert last.any(), "random CartPole episodes end within 120 steps"
    np.testing.assert_array_equal(data.weights, (~last).astype(np.float32))
    # Auto-reset: every LAST step is followed by a FIRST step.
    following = data.step_types[:, 1:][last[:, :-1]]
    assert np.all(following == ts.StepType.FIRST)
    # One return per episode that ended in the data.
    assert len(data.episode_returns) == int(last.sum())


def test_teacher_data_episode_returns_are_the_environments():
    data = _random_cartpole_data()
    # CartPole pays 1 per step: an episode from FIRST at f to LAST at l returns l - f.
    lengths = []
    for step_types in data.step_types:
        firsts = np.flatnonzero(step_types == ts.StepType.FIRST)
        for end in np.flatnonzero(step_types == ts.StepType.LAST):
            lengths.append(int(end - firsts[firsts < end][-1]))
    assert sorted(int(r) for r in data.episode_returns) == sorted(lengths)


def test_bc_loss_is_the_weighted_squared_error_or_cross_entropy():
    weights = tf.constant([[1.0, 1.0, 0.0]])
    normal = tfp.distributions.MultivariateNormalDiag(
        loc=tf.constant([[[0.5, 0.0], [0.0, 0.0], [9.0, 9.0]]]), scale_diag=tf.ones((1, 3, 2))
    )
    actions = tf.zeros((1, 3, 2))
    # Per step: mean over action dims of (mode - a)^2 = 0.125, 0; the third step has no weight.
    assert float(bc.bc_loss(normal, actions, weights, discrete=False)) == pytest.approx(0.0625)
    # bc.action_loss = "absolute": per step the mean of |mode - a| = 0.25, 0.
    assert float(bc.bc_loss(normal, actions, weights, False, "absolute")) == pytest.approx(0.125)
    logits = tf.constant([[[2.0, 0.0], [0.0, 1.0], [5.0, -5.0]]])
    categorical = tfp.distributions.Categorical(logits=logits)
    labels = tf.constant([[0, 1, 1]], tf.int64)
    expected = -np.mean([np.log(np.exp(2) / (np.exp(2) + 1)), np.log(np.e / (np.e + 1))])
    assert float(bc.bc_loss(categorical, labels, weights, discrete=True)) == pytest.approx(expected)


def test_settings_errors_are_clear(tmp_path):
    root_dir = tmp_path / "student"

    def run(**settings):
        gin.clear_config()
        harness.train_eval(str(root_dir), agent="bc", teacher_dir=str(tmp_path), progress=False, **settings)

    # The budget is num_envs streams of whole sequences.
    with pytest.raises(
        harness.SettingsError,
        match=r"total_env_steps = 40 must be num_envs = 2 streams of a multiple of sequence_length = 7",
    ):
        run(env_name=ENV, num_envs=2, total_env_steps=40, sequence_length=7)
    with pytest.raises(harness.SettingsError, match="total_env_steps = 41 must be num_envs = 2 streams"):
        run(env_name=ENV, num_envs=2, total_env_steps=41, sequence_length=10)
    # No environment, and a teacher folder without policy_network.json to read it from.
    with pytest.raises(
        harness.SettingsError,
        match=r"No environment given.*no policy_network.json.*set train_eval.env_name\.",
    ):
        run(num_envs=2, total_env_steps=40, sequence_length=10)
    # No teacher policy (policies/greedy_policy/saved_model.pb) in the teacher's folder.
    with pytest.raises(harness.SettingsError, match=r"No teacher policy at .*policies/greedy_policy"):
        run(env_name=ENV, num_envs=2, total_env_steps=40, sequence_length=10)
    with pytest.raises(harness.SettingsError, match=r"bc.action_loss must be one of squared, absolute"):
        run(env_name=ENV, action_loss="median")
    with pytest.raises(harness.SettingsError, match=r"bc.previous_action must be one of own, executed"):
        run(env_name=ENV, previous_action="recorded")
    # Old sit-distill names are refused by name.
    with pytest.raises(harness.SettingsError, match=r"Unknown settings \['collect_steps_per_env'\]"):
        run(env_name=ENV, collect_steps_per_env=20)
    assert not root_dir.exists()


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny PPO MLP teacher on Pendulum: 2 iterations of 2 x 16 steps."""
    root_dir = str(tmp_path_factory.mktemp("teacher"))
    gin.clear_config()
    train.train_eval(
        root_dir, agent="ppo", env_name=ENV, num_envs=2, encoder="mlp", encoder_kwargs={"units": (16,)},
        total_env_steps=64, collect_steps_per_env=16, num_minibatches=2, num_epochs=1, drac_coef=0.0,
        policy_save_interval=64, checkpoint_interval=64, num_eval_episodes=0, progress=False,
    )  # fmt: skip
    return root_dir


# sit-distill end to end; BC through sit-train is test_harness' (its DAgger rounds: test_dagger_rounds_*).
@pytest.mark.large
def test_distill_a_tiny_teacher_into_a_pi_student_end_to_end(teacher, tmp_path):
    root_dir = str(tmp_path / "student")
    # 2 streams of 60 teacher steps (120 in all) in chunks of 20: 3 gradient steps per epoch.
    settings = dict(
        agent="bc", teacher_dir=teacher, num_envs=2, total_env_steps=120, sequence_length=20, num_epochs=6,
        num_eval_episodes=2, progress=False, **STUDENT,
    )  # fmt: skip
    gin.clear_config()
    results = harness.train_eval(root_dir, **settings)
    losses = [h["loss"] for h in results["history"]]
    assert results["train_step"] == 6 * 3 and len(losses) == 6
    assert [h["epoch"] for h in results["history"]] == [1, 2, 3, 4, 5, 6]
    assert losses[-1] < 0.95 * losses[0], losses
    assert results["loss"] == losses[-1] and results["env_steps"] == 120
    # The teacher's Pendulum episodes are 200 steps: none ends within 60 steps of each stream.
    assert results["teacher_data_episodes"] == 0
    assert results["collect_seconds"] > 0 and results["train_seconds"] > 0

    description = policy_network.read_description(root_dir)
    assert (description.agent, description.network_class) == ("bc", "SensorActorNetwork")
    assert description.env_name == ENV  # read from the teacher's folder
    assert description.extra["teacher"] == os.path.join(teacher, "policies", "greedy_policy")
    assert description.network_kwargs == {
        "encoder_kwargs": STUDENT["encoder_kwargs"],
        "fc_layer_params": [16],
    }
    net = policy_network.build_network(description)
    policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    policy = evaluate.load_policy(os.path.join(root_dir, "policies", "greedy_policy"))
    env = load(ENV, num_envs=2, seed=3)
    time_step, policy_state, net_state = env.reset(), policy.get_initial_state(2), ()
    for _ in range(4):
        action_step = policy.action(time_step, policy_state)
        distribution, net_state = net.call(time_step.observation, time_step.step_type, net_state)
        np.testing.assert_allclose(action_step.action, distribution.mode().numpy(), rtol=1e-5, atol=1e-6)
        time_step, policy_state = env.step(action_step.action), action_step.state
    env.close()
    summary = evaluate.evaluate(policy, ENV, num_episodes=2, num_envs=2)["none"]
    assert summary["num_episodes"] == 2 and summary["mean_length"] == 200

    # What distill.json held: the teacher's evaluation in the results, the student's in
    # evaluations.json (and the results), the settings in the hyper-parameters and config.gin.
    assert results["teacher"]["num_episodes"] == 2 and results["teacher"]["mean_length"] == 200
    (evaluation,) = results["evaluations"]
    assert evaluation["env_steps"] == 120 and evaluation["train_step"] == 18
    assert evaluation["num_episodes"] == 2 and evaluation["mean_length"] == 200
    assert results["EvalAverageReturn"] == evaluation["mean_return"]
    assert json.loads((tmp_path / "student" / EVALUATIONS_FILE).read_text()) == [evaluation]
    assert (tmp_path / "student" / harness.CONFIG_FILE).exists()
    assert {"Eval/AverageReturn", "Eval/AverageEpisodeLength"} <= summary_tags(os.path.join(root_dir, "eval"))
    assert "Losses/bc_loss" in summary_tags(os.path.join(root_dir, "train"))
    hparams = hyperparameters(os.path.join(root_dir, "collect"))
    assert hparams["bc.teacher_dir"] == teacher and hparams["bc.num_epochs"] == 6
    assert hparams["train_eval.agent"] == "bc" and hparams["train_eval.encoder"] == "attention_neuron"

    # A rerun resumes after the last epoch.
    gin.clear_config()
    resumed = harness.train_eval(root_dir, **{**settings, "num_epochs": 7})
    assert resumed["train_step"] == 7 * 3 and [h["epoch"] for h in resumed["history"]] == [7]
    assert [e["train_step"] for e in resumed["evaluations"]] == [21]


# sit-distill is sit-train with the BC agent (agents/distill.py). A tiny student: 2 streams of 20
# teacher steps in chunks of 10, 1 epoch: 2 gradient steps; 2 evaluation episodes.
TINY_STUDENT = {
    "train_eval.num_envs": 2, "train_eval.total_env_steps": 40, "bc.sequence_length": 10, "bc.num_epochs": 1,
    "bc.fc_layer_params": (8,), "train_eval.encoder_kwargs": {"output_dim": 8},
    "train_eval.num_eval_episodes": 2,
}  # fmt: skip
# The same student with the old sit-distill's flags.
TINY_STUDENT_OLD_FLAGS = [
    "--num_envs", "2", "--total_env_steps", "40", "--sequence_length", "10", "--num_epochs", "1",
    "--fc_layer_params", "8", "--encoder_kwargs", '{"output_dim": 8}', "--num_eval_episodes", "2",
]  # fmt: skip


def _sit_distill(*args: str) -> subprocess.CompletedProcess:
    """``sit-distill`` with ``args``, as its console script runs it (in this process)."""
    return run_in_process("sit-distill", *args)


@pytest.fixture(scope="module")
def new_form_run(teacher, tmp_path_factory):
    """``sit-distill --root_dir R --teacher_dir T --gin_bindings ...``, the tiny student: (R, the process)."""
    root_dir = tmp_path_factory.mktemp("new_form") / "student"
    bindings = [
        arg for name, value in TINY_STUDENT.items() for arg in ("--gin_bindings", f"{name} = {value!r}")
    ]
    return root_dir, _sit_distill("--root_dir", str(root_dir), "--teacher_dir", teacher, *bindings)


def _layout(root_dir) -> list[str]:
    """The files of a run folder; event files, whose names hold a time and a host, by their folder."""
    paths = (os.path.relpath(path, root_dir) for path in glob.glob(f"{root_dir}/**", recursive=True))
    return sorted({path.partition("events.out.tfevents.")[0] for path in paths})


@pytest.mark.large
def test_sit_distill_trains_a_student_as_the_old_command_did(teacher, new_form_run, tmp_path):
    root_dir, run = new_form_run
    assert run.returncode == 0, run.stderr[-3000:]
    assert "deprecated" not in run.stderr
    # 2 gradient steps; the teacher's and the student's returns.
    assert "'train_step': 2" in run.stdout and "'teacher'" in run.stdout
    assert "'EvalAverageReturn'" in run.stdout
    # The old sit-distill called harness.train_eval with its settings as keywords: the same folder.
    before = tmp_path / "before"
    gin.clear_config()
    settings = {name.partition(".")[2]: value for name, value in TINY_STUDENT.items()}
    harness.train_eval(str(before), agent="bc", teacher_dir=teacher, **settings)
    assert _layout(root_dir) == _layout(before)
    assert {"policies/greedy_policy/saved_model.pb", bc.DATA_FILE, "checkpoints", "train/"} <= set(
        _layout(root_dir)
    )
    assert (root_dir / harness.CONFIG_FILE).read_text() == (before / harness.CONFIG_FILE).read_text()
    assert policy_network.read_description(str(root_dir)) == policy_network.read_description(str(before))
    assert len(json.loads((root_dir / EVALUATIONS_FILE).read_text())) == 1


@pytest.mark.large
def test_the_old_flags_run_the_same_student_and_name_their_bindings(teacher, new_form_run, tmp_path):
    new_root_dir, _ = new_form_run
    root_dir = tmp_path / "old_form"
    run = _sit_distill("--root_dir", str(root_dir), "--teacher_dir", teacher, *TINY_STUDENT_OLD_FLAGS)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stderr.splitlines()[:8] == [
        "sit-distill: --num_envs is deprecated; use --gin_bindings 'train_eval.num_envs = 2'.",
        "sit-distill: --total_env_steps is deprecated; use --gin_bindings 'train_eval.total_env_steps = 40'.",
        "sit-distill: --encoder_kwargs is deprecated; use --gin_bindings "
        "\"train_eval.encoder_kwargs = {'output_dim': 8}\".",
        "sit-distill: --fc_layer_params is deprecated; use --gin_bindings 'bc.fc_layer_params = (8,)'.",
        "sit-distill: --sequence_length is deprecated; use --gin_bindings 'bc.sequence_length = 10'.",
        "sit-distill: --num_epochs is deprecated; use --gin_bindings 'bc.num_epochs = 1'.",
        "sit-distill: --num_eval_episodes is deprecated; use --gin_bindings "
        "'train_eval.num_eval_episodes = 2'.",
        run.stderr.splitlines()[7],  # the progress bar
    ]
    assert "deprecated" not in run.stderr.splitlines()[7]
    assert (root_dir / harness.CONFIG_FILE).read_text() == (new_root_dir / harness.CONFIG_FILE).read_text()


# Every old flag, none at its default, and the binding each one stands for.
EVERY_OLD_FLAG = {
    "env": (ENV, "train_eval.env_name = 'gymnasium:Pendulum-v1'"),
    "env_kwarg": ("g=9.5", "train_eval.env_kwargs = {'g': 9.5}"),
    "num_envs": ("4", "train_eval.num_envs = 4"),
    "total_env_steps": ("800", "train_eval.total_env_steps = 800"),
    "encoder": ("attention_neuron", "train_eval.encoder = 'attention_neuron'"),
    "encoder_kwargs": ('{"output_dim": 8, "num_queries": 4}',
                       "train_eval.encoder_kwargs = {'output_dim': 8, 'num_queries': 4}"),
    "fc_layer_params": ("8,4", "bc.fc_layer_params = (8, 4)"),
    "sequence_length": ("20", "bc.sequence_length = 20"),
    "num_epochs": ("3", "bc.num_epochs = 3"),
    "learning_rate": ("0.002", "bc.learning_rate = 0.002"),
    "anneal_learning_rate": (None, "bc.anneal_learning_rate = True"),
    "max_grad_norm": ("1.5", "bc.max_grad_norm = 1.5"),
    "dagger_rounds": ("1", "bc.dagger_rounds = 1"),
    "dagger_teacher_probability": ("0.25", "bc.dagger_teacher_probability = 0.25"),
    "previous_action_noise": ("0.03", "bc.previous_action_noise = 0.03"),
    "num_eval_episodes": ("0", "train_eval.num_eval_episodes = 0"),
    "seed": ("7", "train_eval.seed = 7"),
}  # fmt: skip


def _parsed(*args: str) -> flags.FlagValues:
    """sit-distill's flags parsed from ``args``, on their own ``FlagValues``."""
    flag_values = flags.FlagValues()
    distill.define_flags(flag_values)
    flag_values(["sit-distill", *args])
    return flag_values


def _run_config(bindings: list[str]) -> str:
    """The ``config.gin`` a run with ``bindings`` would write (the run's checks, nothing built)."""
    gin.clear_config()
    try:
        train.parse_gin([], bindings)
        _, run_settings, settings = harness._settings({}, None)
        return run_config(run_settings, settings)
    finally:
        gin.clear_config()


def test_every_old_flag_is_the_gin_binding_it_announces(teacher):
    assert set(EVERY_OLD_FLAG) == set(distill.OLD_FLAGS)
    old_args = [arg for name, (value, _) in EVERY_OLD_FLAG.items() for arg in (f"--{name}", value) if arg]
    bindings, notices = distill.gin_bindings(_parsed("--root_dir", "r", "--teacher_dir", teacher, *old_args))
    expected = [binding for _, binding in EVERY_OLD_FLAG.values()]
    assert bindings == ["train_eval.agent = 'bc'", f"bc.teacher_dir = {teacher!r}", *expected]
    assert len(notices) == len(EVERY_OLD_FLAG)
    assert notices[-1] == "--seed is deprecated; use --gin_bindings 'train_eval.seed = 7'."
    assert notices[1] == (
        "--env_kwarg is deprecated; use --gin_bindings \"train_eval.env_kwargs = {'g': 9.5}\"."
    )
    # The settings of the run are those of the new form, sit-train's bindings.
    new_args = [arg for binding in expected for arg in ("--gin_bindings", binding)]
    new_bindings, new_notices = distill.gin_bindings(
        _parsed("--root_dir", "r", "--teacher_dir", teacher, *new_args)
    )
    assert new_notices == [] and new_bindings == bindings
    config = _run_config(bindings)
    assert "bc.dagger_rounds = 1" in config and "train_eval.env_kwargs = {'g': 9.5}" in config
    assert config == _run_config(["train_eval.agent = 'bc'", f"bc.teacher_dir = {teacher!r}", *expected])
    # Explicit bindings come after the old flags' and win.
    bindings, _ = distill.gin_bindings(
        _parsed(
            "--root_dir",
            "r",
            "--teacher_dir",
            teacher,
            "--num_epochs",
            "3",
            "--gin_bindings",
            "bc.num_epochs = 5",
        )
    )
    assert "bc.num_epochs = 5" in _run_config(bindings)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--num_epochs", "many"), "--num_epochs 'many' is not an integer (bc.num_epochs)."),
        (("--learning_rate", "fast"), "--learning_rate 'fast' is not a number (bc.learning_rate)."),
        (("--fc_layer_params", "8,x"),
         "--fc_layer_params '8,x' is not comma-separated integers (bc.fc_layer_params)."),
        (("--encoder_kwargs", "[8]"),
         "--encoder_kwargs '[8]' is not a JSON object (train_eval.encoder_kwargs)."),
        (("--encoder_kwargs", "{8}"),
         "--encoder_kwargs '{8}' is not a JSON object (train_eval.encoder_kwargs; Expecting property name "
         "enclosed in double quotes: line 1 column 2 (char 1))."),
        (("--env_kwarg", "g"), "--env_kwarg must be key=value with a keyword name as key; received 'g'."),
    ],
)  # fmt: skip
def test_a_bad_old_flag_value_is_one_sentence(args, message):
    with pytest.raises(ValueError) as raised:
        distill.gin_bindings(_parsed("--root_dir", "r", "--teacher_dir", "t", *args))
    assert str(raised.value) == message


def test_sit_distill_help_says_it_is_sit_train_and_lists_the_bindings():
    run = _sit_distill("--help")
    assert run.returncode == 0 and run.stderr == ""
    assert "``sit-train`` with the behaviour-cloning agent" in run.stdout
    # sit-train's flags and --teacher_dir; the old flags as the bindings that replace them.
    flag_lines = [line.split()[0] for line in run.stdout.splitlines() if line.lstrip().startswith("--")]
    assert {
        "--root_dir",
        "--teacher_dir",
        "--gin_file",
        "--gin_bindings",
        "--strategy",
        "--jit_compile",
    } <= set(flag_lines)
    assert not {f"--{name}" for name in distill.OLD_FLAGS} & set(flag_lines)
    for name, old in distill.OLD_FLAGS.items():
        assert re.search(rf"^  {re.escape(old.binding)} = .*\[--{name}\]$", run.stdout, re.MULTILINE), name
    assert "  bc.num_epochs = 10 " in run.stdout and "  train_eval.num_envs = 16 " in run.stdout


def test_sit_distill_refuses_a_bad_old_flag_value_in_one_line(tmp_path):
    root_dir = tmp_path / "bad"
    run = _sit_distill("--root_dir", str(root_dir), "--teacher_dir", "runs/t", "--num_epochs", "many")
    assert run.returncode == 2
    assert run.stderr.splitlines() == ["sit-distill: --num_epochs 'many' is not an integer (bc.num_epochs)."]
    assert run.stdout == "" and not root_dir.exists()


def test_sit_distill_refuses_bad_settings_as_sit_train_does(teacher, tmp_path):
    root_dir = tmp_path / "bad"
    run = _sit_distill(
        "--root_dir", str(root_dir), "--teacher_dir", teacher, "--gin_bindings", "train_eval.num_envs = 2",
        "--gin_bindings", "train_eval.total_env_steps = 40", "--gin_bindings", "bc.sequence_length = 7",
    )  # fmt: skip
    assert run.returncode == 2
    (line,) = run.stderr.splitlines()
    assert line.startswith("sit-distill: total_env_steps = 40 must be") and "sequence_length = 7" in line
    assert not root_dir.exists()


def test_dagger_rounds_record_the_students_states_with_the_teachers_labels(teacher, tmp_path):
    """Round 0: the teacher's own steps; round 1: the student acts, the teacher labels what it saw."""
    root_dir = str(tmp_path / "dagger")
    settings = dict(
        agent="bc", teacher_dir=teacher, num_envs=2, total_env_steps=80, sequence_length=20, num_epochs=2,
        dagger_rounds=1, num_eval_episodes=0, policy_save_interval=0, progress=False, **STUDENT,
    )  # fmt: skip
    gin.clear_config()
    results = harness.train_eval(root_dir, **settings)
    # 2 rounds of 2 streams x 20 steps: 1 chunk per epoch, 2 epochs per round.
    assert results["train_step"] == 4 and results["env_steps"] == 80
    assert [h["round"] for h in results["history"]] == [0, 0, 1, 1]
    rounds = bc.load_rounds(os.path.join(root_dir, bc.DATA_FILE))
    assert len(rounds) == 2 and rounds[1].observations.shape == (2, 20, 3)
    # Every recorded action is the teacher's greedy action on the recorded observation.
    teacher_policy = evaluate.load_policy(bc.teacher_policy_dir(teacher))
    for data in rounds:
        for t in range(data.observations.shape[1]):
            time_step = ts.TimeStep(
                step_type=data.step_types[:, t], reward=np.zeros(2, np.float32),
                discount=np.ones(2, np.float32), observation=data.observations[:, t],
            )  # fmt: skip
            expected = teacher_policy.action(time_step, ()).action
            np.testing.assert_allclose(data.actions[:, t], expected, rtol=1e-5, atol=1e-6)
    # Round 1 is new data (new episodes, the student acting), not a copy of round 0.
    assert not np.allclose(rounds[0].observations[:, 1:], rounds[1].observations[:, 1:])
    # The executed actions are kept beside the labels: the teacher's in round 0, the student's in round 1.
    np.testing.assert_array_equal(rounds[0].executed, rounds[0].actions)
    assert rounds[1].executed.shape == rounds[1].actions.shape
    assert not np.allclose(rounds[1].executed, rounds[1].actions)
    # A rerun resumes from the checkpoint and the saved rounds: nothing left to train.
    gin.clear_config()
    assert harness.train_eval(root_dir, **settings)["train_step"] == 4


def test_dagger_settings_are_checked():
    with pytest.raises(ValueError, match="dagger_rounds must be >= 0"):
        bc.BC(teacher_dir="t", dagger_rounds=-1)
    with pytest.raises(ValueError, match=r"dagger_teacher_probability must be in \[0, 1\]"):
        bc.BC(teacher_dir="t", dagger_teacher_probability=1.5)
    with pytest.raises(ValueError, match="learning_rate must be a positive number"):
        bc.BC(teacher_dir="t", learning_rate=0.0)
    with pytest.raises(ValueError, match="previous_action_noise must be a finite number >= 0"):
        bc.BC(teacher_dir="t", previous_action_noise=-0.03)
    with pytest.raises(ValueError, match="bc.noise_sensors must be >= 0"):
        bc.BC(teacher_dir="t", noise_sensors=-1)
    with pytest.raises(ValueError, match="bc.streams_per_epoch must be >= 0"):
        bc.BC(teacher_dir="t", streams_per_epoch=-1)


@pytest.mark.parametrize(
    "setting", [{"previous_action_noise": 0.03}, {"noise_sensors": 2}, {"previous_action": "executed"}]
)
def test_sensor_noises_need_an_attention_neuron_student(setting, teacher, tmp_path):
    root_dir = tmp_path / "mlp_student"
    gin.clear_config()
    (name,) = setting
    with pytest.raises(harness.SettingsError, match=rf"bc.{name} needs the 'attention_neuron' student"):
        harness.train_eval(
            str(root_dir), agent="bc", teacher_dir=teacher, encoder="mlp", num_envs=2, total_env_steps=40,
            sequence_length=20, progress=False, **setting,
        )  # fmt: skip
    assert not root_dir.exists()


def test_a_noisy_student_records_its_noise_and_acts_without_it(teacher, tmp_path):
    """The paper's N(0, 0.03) on a_{t-1} while cloning (A.4.2): kept in the description, inert when acting."""
    root_dir = str(tmp_path / "noisy")
    gin.clear_config()
    results = harness.train_eval(
        root_dir, agent="bc", teacher_dir=teacher, num_envs=2, total_env_steps=40, sequence_length=20,
        num_epochs=2, previous_action_noise=0.03, num_eval_episodes=0, policy_save_interval=0,
        progress=False, **STUDENT,
    )  # fmt: skip
    assert results["train_step"] == 2 and all(np.isfinite(h["loss"]) for h in results["history"])
    description = policy_network.read_description(root_dir)
    assert description.network_kwargs["previous_action_noise"] == 0.03
    net = policy_network.build_network(description)
    policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    observations = tf.constant(np.random.default_rng(0).normal(size=(2, 5, 3)), tf.float32)
    acted = [net(observations, training=False)[0].mode().numpy() for _ in range(2)]
    np.testing.assert_array_equal(acted[0], acted[1])


def test_noise_sensors_are_masked_white_noise_channels_after_the_clean_readings():
    observations = np.random.default_rng(0).normal(size=(200, 30, 3)).astype(np.float32)
    same, no_mask = bc.with_noise_sensors(observations, 0, np.random.default_rng(1))
    assert same is observations and no_mask is None
    extended, mask = bc.with_noise_sensors(observations, 4, np.random.default_rng(1))
    assert extended.shape == mask.shape == (200, 30, 7) and extended.dtype == np.float32
    np.testing.assert_array_equal(extended[..., :3], observations)
    assert mask[..., :3].all()
    # One count of present noise channels per stream, the first ones, for every step.
    assert (mask == mask[:, :1]).all()
    counts = mask[:, 0, 3:].sum(-1)
    np.testing.assert_array_equal(mask[:, 0, 3:], np.arange(4) < counts[:, None])
    assert set(counts) == {0, 1, 2, 3, 4}
    # The paper's noise, N(0, 0.1^2), fresh at every step.
    assert np.std(extended[..., 3:]) == pytest.approx(0.1, rel=0.05)
    assert abs(np.mean(extended[..., 3:])) < 0.005
    assert not np.allclose(extended[:, 0, 3:], extended[:, 1, 3:])
    # The same generator state gives the same channels (a resumed epoch draws them again).
    again, _ = bc.with_noise_sensors(observations, 4, np.random.default_rng(1))
    np.testing.assert_array_equal(again, extended)


def _tiny_dagger(root_dir, teacher: str, **settings: Any) -> dict:
    """A DAgger student on 2 streams, 20-step chunks, 2 epochs a round, seed 3; ``settings`` over these."""
    gin.clear_config()
    defaults = dict(
        agent="bc", teacher_dir=teacher, num_envs=2, sequence_length=20, num_epochs=2, seed=3,
        num_eval_episodes=0, policy_save_interval=0, progress=False, **STUDENT,
    )  # fmt: skip
    return harness.train_eval(str(root_dir), **{**defaults, **settings})


def test_a_student_trained_beside_noise_channels_learns_from_them_and_acts_on_its_sensors(teacher, tmp_path):
    """``bc.noise_sensors``: the training steps see extra channels (seeded), the student acts on 3."""

    def distil(name: str, noise_sensors: int) -> dict:
        return _tiny_dagger(
            tmp_path / name, teacher, total_env_steps=80, dagger_rounds=1, noise_sensors=noise_sensors
        )

    noisy, again, clean = distil("noisy", 3), distil("again", 3), distil("clean", 0)
    losses = [[h["loss"] for h in r["history"]] for r in (noisy, again, clean)]
    assert noisy["train_step"] == 4 and all(np.isfinite(losses[0]))
    assert losses[0] == losses[1]  # the same seed draws the same channels
    assert losses[0] != losses[2]  # and they change what the student is trained on
    # Saved and restored, the student acts on the environment's 3 readings, and on 3 + 2.
    description = policy_network.read_description(str(tmp_path / "noisy"))
    net = policy_network.build_network(description)
    policy_network.restore_network(net, str(tmp_path / "noisy"), description.checkpoint_attribute)
    assert net.input_tensor_spec.shape == (3,)
    readings = tf.constant(np.random.default_rng(0).normal(size=(2, 5)), tf.float32)
    assert net.call(readings)[0].mode().shape == (2, 1)


def test_a_student_with_the_codes_memory_distils_resumes_and_rebuilds(teacher, tmp_path):
    """``encoder_kwargs["memory_units"]``: the student's memory is trained, saved and rebuilt with it."""
    memory = {**STUDENT, "encoder_kwargs": {**STUDENT["encoder_kwargs"], "memory_units": 6}}
    settings = {"total_env_steps": 80, "dagger_rounds": 1, "noise_sensors": 2, **memory}
    result = _tiny_dagger(tmp_path / "memory", teacher, **settings)
    assert result["train_step"] == 4 and all(np.isfinite([h["loss"] for h in result["history"]]))
    resumed = _tiny_dagger(tmp_path / "memory", teacher, **{**settings, "num_epochs": 3})
    assert resumed["train_step"] == 6  # one more epoch a round, from the checkpoint
    description = policy_network.read_description(str(tmp_path / "memory"))
    assert description.network_kwargs["encoder_kwargs"]["memory_units"] == 6
    net = policy_network.build_network(description)
    policy_network.restore_network(net, str(tmp_path / "memory"), description.checkpoint_attribute)
    assert net.state_spec["memory_hidden"].shape == (6,)
    readings = tf.constant(np.random.default_rng(0).normal(size=(2, 5)), tf.float32)
    distribution, state = net.call(readings)
    assert distribution.mode().shape == (2, 1) and state["memory_cell"].shape == (2, 6)


def test_a_stream_sample_is_drawn_without_replacement_in_recorded_order_and_all_streams_draw_nothing():
    rng = np.random.default_rng(0)
    data = bc.TeacherData(
        rng.normal(size=(6, 4, 3)), np.ones((6, 4), np.int32), rng.normal(size=(6, 4, 1)), [1.0, 2.0]
    )
    for count in (0, 6, 9):  # every stream: the same data, and the generator untouched
        before = np.random.default_rng(5)
        assert bc.sample_streams(data, count, before) is data
        assert before.random() == np.random.default_rng(5).random()
    sample = bc.sample_streams(data, 4, np.random.default_rng(5))
    rows = [int(np.flatnonzero((data.observations == o).all(axis=(1, 2)))[0]) for o in sample.observations]
    assert len(set(rows)) == 4 and rows == sorted(rows)
    np.testing.assert_array_equal(sample.actions, data.actions[rows])
    np.testing.assert_array_equal(sample.step_types, data.step_types[rows])
    again = bc.sample_streams(data, 4, np.random.default_rng(5))
    np.testing.assert_array_equal(again.observations, sample.observations)


def test_a_stream_sample_per_epoch_trains_the_same_steps_on_fewer_streams(teacher, tmp_path):
    """``bc.streams_per_epoch``: the same gradient steps, each on the sample (seeded), not every stream."""

    def distil(name: str, sample: int) -> dict:
        settings = {"total_env_steps": 120, "dagger_rounds": 2, "streams_per_epoch": sample}
        return _tiny_dagger(tmp_path / name, teacher, **settings)

    sampled, again, every = distil("sampled", 3), distil("again", 3), distil("every", 0)
    losses = [[h["loss"] for h in r["history"]] for r in (sampled, again, every)]
    assert sampled["train_step"] == every["train_step"] == 6  # 3 rounds x 2 epochs x 1 chunk
    assert losses[0] == losses[1]  # the same seed draws the same streams
    # Round 0 has 2 streams (fewer than 3: all of them); rounds 1 and 2 have 4 and 6 and train on 3.
    assert losses[0][:2] == losses[2][:2]
    assert all(a != b for a, b in zip(losses[0][2:], losses[2][2:], strict=True))


def test_previous_actions_are_the_executed_ones_shifted_by_a_step_and_zero_where_episodes_start(tmp_path):
    step_types = np.array([[0, 1, 1, 2, 0, 1], [0, 1, 1, 1, 1, 1]], np.int32)
    executed = np.arange(12, dtype=np.float32).reshape(2, 6, 1) + 1.0
    data = bc.TeacherData(np.zeros((2, 6, 3)), step_types, -executed, [0.0], executed)
    continuous = tensor_spec.BoundedTensorSpec((1,), tf.float32, -1.0, 1.0)
    np.testing.assert_array_equal(
        data.previous_actions(continuous)[..., 0], [[0, 1, 2, 3, 0, 5], [0, 7, 8, 9, 10, 11]]
    )
    # Discrete actions are one-hot, as the network feeds its own; the spec's minimum is action 0.
    discrete = bc.TeacherData(
        data.observations, step_types, np.zeros((2, 6)), [], np.array([[1, 3, 2] * 2] * 2)
    )
    one_hot = discrete.previous_actions(tensor_spec.BoundedTensorSpec((), tf.int64, 1, 3))
    assert one_hot.shape == (2, 6, 3)
    np.testing.assert_array_equal(one_hot[1, 1:3], [[1, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(one_hot[0, 4], [0, 0, 0])
    # Kept through sampling, concatenation and the data file; old files have none, and say so when needed.
    assert bc.sample_streams(data, 1, np.random.default_rng(0)).executed.shape == (1, 6, 1)
    path = str(tmp_path / bc.DATA_FILE)
    old = bc.TeacherData(data.observations, step_types, data.actions, [0.0])
    bc.save_rounds(path, [data, old])
    loaded = bc.load_rounds(path)
    np.testing.assert_array_equal(loaded[0].executed, executed)
    assert loaded[1].executed is None and bc.concatenate(loaded).executed is None
    assert bc.concatenate([data, data]).executed.shape == (4, 6, 1)
    with pytest.raises(ValueError, match="hold no executed actions.*a run recorded anew"):
        loaded[1].previous_actions(continuous)


def test_a_student_fed_the_executed_previous_actions_trains_on_other_inputs_and_resumes(teacher, tmp_path):
    """``bc.previous_action = "executed"``: the same data and seed, another input, so other losses."""
    settings = {"total_env_steps": 80, "dagger_rounds": 1}
    executed = _tiny_dagger(tmp_path / "executed", teacher, previous_action="executed", **settings)
    # Its teacher's round alone: the same 2 streams of 20 steps as the first round above.
    own = _tiny_dagger(tmp_path / "own", teacher, total_env_steps=40)
    losses = [[h["loss"] for h in r["history"]] for r in (executed, own)]
    assert executed["train_step"] == 4 and all(np.isfinite(losses[0]))
    recorded = [bc.load_rounds(str(tmp_path / name / bc.DATA_FILE))[0] for name in ("executed", "own")]
    np.testing.assert_array_equal(recorded[0].observations, recorded[1].observations)
    assert losses[0][0] != losses[1][0]
    resumed = _tiny_dagger(
        tmp_path / "executed", teacher, previous_action="executed", num_epochs=3, **settings
    )
    assert resumed["train_step"] == 6


def test_annealed_learning_rate_falls_linearly_and_restarts_each_round():
    schedule = bc.RoundLinearDecay(1e-3, steps_per_round=4)
    rates = [float(schedule(tf.constant(step, tf.int64))) for step in range(9)]
    one_round = [1e-3, 7.5e-4, 5e-4, 2.5e-4]
    np.testing.assert_allclose(rates, [*one_round, *one_round, 1e-3], rtol=1e-6)
    clone = bc.RoundLinearDecay.from_config(schedule.get_config())
    assert float(clone(tf.constant(6, tf.int64))) == pytest.approx(5e-4)
    # Rounds of num_epochs passes over (total / num_envs / rounds) / sequence_length chunks.
    run = RunSettings(agent="bc", num_envs=2, total_env_steps=160)
    two_rounds = bc.BC(teacher_dir="t", sequence_length=20, num_epochs=3, dagger_rounds=1)
    assert bc.steps_per_round(run, two_rounds) == 6
    assert bc.steps_per_round(run, bc.BC(teacher_dir="t", sequence_length=10, num_epochs=1)) == 8


def test_annealed_distillation_checkpoints_the_step_its_schedule_reads(teacher, tmp_path):
    """The optimizer's step count, which the schedule reads, is checkpointed with the student."""
    root_dir = str(tmp_path / "annealed")
    settings = dict(
        agent="bc", teacher_dir=teacher, num_envs=2, total_env_steps=80, sequence_length=20, num_epochs=3,
        dagger_rounds=1, anneal_learning_rate=True, num_eval_episodes=0, policy_save_interval=0,
        progress=False, **STUDENT,
    )  # fmt: skip
    gin.clear_config()
    results = harness.train_eval(root_dir, **settings)
    assert results["train_step"] == 6 and all(np.isfinite(h["loss"]) for h in results["history"])
    reader = tf.train.load_checkpoint(os.path.join(root_dir, "checkpoints"))
    names = reader.get_variable_to_shape_map()
    iterations = [name for name in names if name.startswith("optimizer/_iterations")]
    assert iterations and reader.get_tensor(iterations[0]) == 6
