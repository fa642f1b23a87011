"""XLA on request (``jit_compile``) in every learner: the setting, the compiled step, and matching runs.

What this file proves:

- ``xla.resolve_jit_compile`` leaves ``auto`` to the trainer's measurement,
  maps ``true``/``on`` and ``false``/``off`` (any case) and bools to
  themselves, and rejects anything else with a ``ValueError`` that names it;
  under a ``tf.distribute`` strategy, ``auto`` is off and ``on`` an error;
- ``auto`` trains as measured: ``sit-train`` and ``sit-train-supervised``
  time the run's model with and without XLA (and in float32 and bfloat16 for
  ``precision="auto"``), say which they chose and why in one line, train
  with it, and read it from the cache the next time;
  each entry point rejects a bad ``--jit_compile`` before doing anything,
  with one line and no traceback;
- ``xla.compile_with_xla`` really compiles with XLA (an op without an XLA
  kernel fails), and writes the summaries of the compiled function outside
  it with the tags, steps, values and recording decisions of the uncompiled
  function, in a loop body too;
- PPO, SAC, DQN / C51, behaviour cloning (``sit-distill``; all four
  through the harness's ``train_eval``) and ``sit-train-supervised``
  trained a few steps on the CPU with XLA give the losses of the graph-mode
  run with the same seed, log the same TensorBoard scalars, and record that
  XLA was on (the ``train_eval.jit_compile`` hyper-parameter).

Tolerance: the XLA runs are not bit-identical to graph mode. XLA fuses ops
and reorders float32 sums (eps 1.2e-7), so each loss moves by a few 1e-7
relative, and the Adam steps carry that over into the weights. Measured
here: at most 3e-7 relative for losses away from 0 (PPO's value loss: 5e-4
at 3000), and at most 3.2e-7 absolute for losses near 0 (PPO's
policy-gradient loss, whose normalised advantages have mean 0, and its
approximate KL, ~1e-3). ``RTOL = 1e-4`` and ``ATOL = 1e-5`` leave a margin
of 30x or more, while a step trained on other data, a missing or shifted
summary, or a step not taken moves the losses by 1e-2 or more.

What is not compared, and why: XLA's random ops (stateful and stateless)
give other numbers than TensorFlow's kernels for the same seeds, so a train
step that samples inside the compiled function cannot match. PPO is run
without DrAC (its random crop is in the train step); SAC samples its actions
in the train step, so both SAC runs act and learn with the tanh-squashed
Normal's mode (``SquashToSpecNormal.sample`` patched to ``mode``), which
makes the whole step deterministic; DQN collects with epsilon 1 throughout
(``epsilon_final = 1``), so that both runs learn from the same data however
their weights differ in the last bits. Random ops outside the train step
(collection, replay sampling, shuffles) are not compiled and match; SAC's
and DQN's replay batches are sampled synchronously
(``synchronous_replay_sampling``), as their prefetching makes them depend on
thread timing even in graph mode.
"""

from __future__ import annotations

import collections
import doctest
import glob
import json
import os
import re
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf
from run_folders import run_in_process
from tensorboard.plugins.hparams import plugin_data_pb2
from tf_agents.distributions import utils as distribution_utils

from sit_keras import measured_choice, xla
from sit_keras.agents import train
from sit_keras.agents.algorithms import ppo
from sit_keras.agents.training import harness
from sit_keras.agents.training.run_settings import split_overrides
from sit_keras.supervised import train as supervised_train

RTOL, ATOL = 1e-4, 1e-5
ENV = "gymnasium:Pendulum-v1"  # PPO, SAC and behaviour cloning

# PPO on Pendulum with the MLP of test_distill's teacher: 2 iterations of 2 x 16 steps, 2 epochs of
# 2 minibatches: 8 train steps. DrAC off (see the module docstring).
PPO_RUN = {
    "env_name": ENV,
    "num_envs": 2,
    "encoder": "mlp",
    "encoder_kwargs": {"units": (16,)},
    "total_env_steps": 64,
    "collect_steps_per_env": 16,
    "num_minibatches": 2,
    "num_epochs": 2,
    "drac_coef": 0.0,
    "checkpoint_interval": 64,
    "num_eval_episodes": 0,
    "progress": False,
}
# test_sac_training's state run, shortened: 40 random steps, then 10 iterations of 4 environment
# steps and 4 gradient steps; the losses logged every 8 gradient steps (summary_interval), the
# collect metrics every 8 environment steps (log_interval).
SAC_RUN = {
    "env_name": ENV,
    "env_kwargs": {"max_episode_steps": 50},
    "encoder": "mlp",
    "encoder_kwargs": {"units": (16,)},
    "actor_fc_layer_params": (32,),
    "critic_fc_layer_params": (32,),
    "total_env_steps": 80,
    "initial_collect_steps": 40,
    "collect_steps_per_env": 4,
    "train_steps_per_iteration": 4,
    "replay_capacity": 1000,
    "batch_size": 32,
    "log_interval": 8,
    "summary_interval": 8,
    "checkpoint_interval": 80,
    "policy_save_interval": 0,
    "num_eval_episodes": 0,
    "checkpoint_replay_buffer": False,
    "progress": False,
}
# test_dqn_training's CartPole run, shortened: 61 gradient steps from agent step 40 on, acting
# uniformly at random throughout (epsilon 1, see the module docstring).
DQN_RUN = {
    "env_name": "gymnasium:CartPole-v1",
    "num_envs": 2,
    "encoder": "mlp",
    "encoder_kwargs": {"units": (16,)},
    "total_env_steps": 100,
    "replay_capacity": 1000,
    "min_replay_size": 40,
    "batch_size": 8,
    "n_step": 3,
    "target_update_period": 10,
    "learning_rate": 1e-3,
    "reward_clip": None,
    "epsilon_final": 1.0,
    "eval_interval": 0,
    "num_eval_episodes": 1,
    "log_interval": 50,
    "checkpoint_interval": 100,
    "policy_save_interval": 0,
    "summary_interval": 5,
    "progress": False,
}
# A small AttentionNeuron student; 2 streams of 40 teacher steps, 2 chunks, 2 epochs: 4 train steps.
DISTILL_RUN = {
    "env_name": ENV,
    "num_envs": 2,
    "total_env_steps": 80,
    "sequence_length": 20,
    "num_epochs": 2,
    "encoder_kwargs": {"output_dim": 8, "num_queries": 4},
    "fc_layer_params": (8,),
    "num_eval_episodes": 0,
    "progress": False,
}


def _bind_ppo(run: dict) -> None:
    """Binds ``run`` in gin as train_eval's keywords are split: ``train_eval.<name>`` and ``ppo.<name>``."""
    run_settings, ppo_settings = split_overrides(ppo.PPO, run)
    for configurable, values in (("train_eval", run_settings), ("ppo", ppo_settings)):
        for name, value in values.items():
            gin.bind_parameter(f"{configurable}.{name}", value)


def _scalars(log_dir: str) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the scalar summaries in ``log_dir``."""
    scalars: dict[str, dict[int, float]] = collections.defaultdict(dict)
    for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    scalars[value.tag][event.step] = float(tf.make_ndarray(value.tensor))
    return dict(scalars)


def _assert_same_scalars(graph_dir: str, xla_dir: str, min_steps: int) -> None:
    """The same tags at the same steps, with values within the tolerance (module docstring)."""
    graph, compiled = _scalars(graph_dir), _scalars(xla_dir)
    assert graph, f"no scalars in {graph_dir}"
    assert sorted(compiled) == sorted(graph)
    for tag, values in graph.items():
        assert sorted(compiled[tag]) == sorted(values), tag
        steps = sorted(values)
        np.testing.assert_allclose(
            [compiled[tag][s] for s in steps], [values[s] for s in steps], rtol=RTOL, atol=ATOL, err_msg=tag
        )
    assert max(len(values) for values in graph.values()) >= min_steps


def _hyperparameter(log_dir: str, name: str):
    """A hyper-parameter of the TensorBoard HParams tab written to ``log_dir``."""
    for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "_hparams_/session_start_info":
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    hparam = data.session_start_info.hparams[name]
                    return getattr(hparam, hparam.WhichOneof("kind"))
    raise AssertionError(f"no hyper-parameters in {log_dir}")


@pytest.fixture
def xla_traces(monkeypatch):
    """Counts, per wrapped function, the traces of the trainers' ``xla.compile_with_xla`` functions.

    A count > 0 means the learner's graph calls the XLA-compiled step (each
    trace puts one compiled call in the graph that runs).
    """
    traces: collections.Counter[str] = collections.Counter()
    compile_with_xla = xla.compile_with_xla

    def counting_compile_with_xla(fn):
        compiled = compile_with_xla(fn)

        def call(*args, **kwargs):
            traces[fn.__name__] += 1
            return compiled(*args, **kwargs)

        return call

    monkeypatch.setattr(xla, "compile_with_xla", counting_compile_with_xla)
    return traces


@pytest.fixture
def synchronous_replay_sampling(monkeypatch):
    """Replay batches sampled when the learner asks for them, not ahead of it.

    The SAC and DQN trainers prefetch replay batches (and tf.data injects a
    prefetch of its own into pipelines without one): the next batches are
    sampled in a background thread while the driver adds steps to the
    buffer, so which steps a batch can hold depends on thread timing, and two
    graph-mode runs with the same seed can train on different batches. With
    ``prefetch`` replaced by options that turn both off, the batches follow
    the seed.
    """
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.autotune.enabled = False
    monkeypatch.setattr(tf.data.Dataset, "prefetch", lambda self, *args, **kwargs: self.with_options(options))


@pytest.fixture
def clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


# -- the setting -------------------------------------------------------------------
@pytest.mark.parametrize(
    "setting, expected",
    [("true", True), ("on", True), (" ON ", True), ("True", True), (True, True),
     ("false", False), ("off", False), ("Off", False), (False, False), ("auto", "auto"), (" AUTO", "auto")],
)  # fmt: skip
def test_settings_resolve_to_on_off_or_measured(setting, expected):
    resolved = xla.resolve_jit_compile(setting)
    assert resolved == expected and type(resolved) is type(expected)


def test_xla_module_doctests():
    result = doctest.testmod(xla)
    assert result.attempted > 0 and result.failed == 0


def test_xla_needs_the_default_strategy():
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    assert xla.resolve_jit_compile("auto", tf.distribute.get_strategy()) == xla.AUTO
    assert xla.resolve_jit_compile("auto", mirrored) is False  # nothing to measure: XLA cannot run there
    assert xla.resolve_jit_compile("off", mirrored) is False
    for setting in ("on", True):
        assert xla.resolve_jit_compile(setting, tf.distribute.get_strategy()) is True
        with pytest.raises(ValueError, match="needs the default tf.distribute strategy.*MirroredStrategy"):
            xla.resolve_jit_compile(setting, mirrored)


@pytest.mark.parametrize("setting", ["maybe", "", "yes", 1, 0, None, 1.0])
def test_unknown_settings_are_rejected_by_name(setting):
    expected = r"Unknown jit_compile setting .*Expected one of: auto, true, on, false, off"
    with pytest.raises(ValueError, match=expected):
        xla.resolve_jit_compile(setting)
    with pytest.raises(ValueError, match=re.escape(f"Unknown jit_compile setting {setting!r}.")):
        xla.resolve_jit_compile(setting)


def test_trainers_reject_an_unknown_setting_before_building_anything(ppo_graph_run, tmp_path, clean_gin):
    teacher, _ = ppo_graph_run
    for agent, settings in [("ppo", {}), ("sac", {}), ("dqn", {}), ("bc", {"teacher_dir": teacher})]:
        with pytest.raises(harness.SettingsError, match="Unknown jit_compile setting 'fast'"):
            train.train_eval(str(tmp_path / "run"), agent=agent, jit_compile="fast", **settings)
    with pytest.raises(ValueError, match="Unknown jit_compile setting 'fast'"):
        supervised_train.train_supervised(str(tmp_path / "run"), jit_compile="fast")
    assert not (tmp_path / "run").exists()


def test_entry_points_reject_a_bad_flag_in_one_line(tmp_path, capsys):
    root_dir = tmp_path / "run"
    unknown = "flag --jit_compile=maybe: Unknown jit_compile setting 'maybe'. Expected one of: auto, true, on"
    mirrored = "--jit_compile=On needs --strategy default"
    sit_distill = ["sit-distill", f"--root_dir={root_dir}", "--teacher_dir=runs/t"]
    runs = [
        (["sit-train", f"--root_dir={root_dir}", "--jit_compile=maybe"], unknown),
        (["sit-train", f"--root_dir={root_dir}", "--strategy=mirrored", "--jit_compile=On"], mirrored),
        ([*sit_distill, "--jit_compile=maybe"], unknown),
    ]
    for command, message in runs:
        run = run_in_process(*command)
        assert run.returncode != 0
        assert message in run.stderr, run.stderr
        assert "Traceback" not in run.stderr, run.stderr

    assert supervised_train.main([f"--root_dir={root_dir}", "--jit_compile=maybe"]) == 2
    err = capsys.readouterr().err
    assert "flag --jit_compile=maybe: Unknown jit_compile setting 'maybe'" in err and "Traceback" not in err
    assert not root_dir.exists()


# -- the compiled step -------------------------------------------------------------
def test_compile_with_xla_compiles_with_xla():
    def step(x):
        return tf.strings.as_string(x)  # no XLA kernel

    assert tf.function(step)(tf.constant(1.5)).dtype == tf.string
    with pytest.raises(tf.errors.InvalidArgumentError, match="(?s)XLA.*AsString"):
        tf.function(xla.compile_with_xla(step))(tf.constant(1.5))


def test_summaries_of_the_compiled_step_are_written_outside_it_as_without_xla(tmp_path):
    """A step that writes before updating its counter, called in a loop with ``record_if`` every 2nd step."""
    step = tf.Variable(0, dtype=tf.int64)
    weight = tf.Variable(1.0)

    def train_step(x):
        with tf.name_scope("Losses"):
            tf.summary.scalar("loss", tf.reduce_sum(x) * weight, step=step)
        tf.summary.histogram("inputs", x * weight, step=step)
        weight.assign_add(1.0)
        step.assign_add(1)
        return tf.reduce_sum(x) * weight

    logged, outputs = {}, {}
    for name, fn in (("graph", train_step), ("xla", xla.compile_with_xla(train_step))):
        step.assign(0)
        weight.assign(1.0)

        @tf.function
        def run(x, fn=fn):
            out = fn(x)
            for _ in tf.range(2):  # a while loop: its body's summaries are tagged "while/..."
                out = fn(x)
            return out

        writer = tf.summary.create_file_writer(str(tmp_path / name))
        with writer.as_default(), tf.summary.record_if(lambda: step % 2 == 0):
            outputs[name] = [float(run(tf.ones(3))), float(run(tf.ones(3)))]
        writer.close()
        logged[name] = sorted(
            (event.step, value.tag, tf.make_ndarray(value.tensor).tolist())
            for path in glob.glob(str(tmp_path / name / "events.out.tfevents.*"))
            for event in tf.compat.v1.train.summary_iterator(path)
            for value in event.summary.value
        )
    assert outputs["xla"] == outputs["graph"] == [12.0, 21.0]
    assert logged["xla"] == logged["graph"]
    assert [(s, tag) for s, tag, _ in logged["graph"] if "loss" in tag] == [
        (0, "Losses/loss"), (2, "while/Losses/loss"), (4, "while/Losses/loss"),
    ]  # fmt: skip


# -- the learners: graph mode against XLA ------------------------------------------
@pytest.fixture(scope="module")
def ppo_graph_run(tmp_path_factory):
    """PPO in graph mode from gin bindings alone (as sit-train runs it), ``jit_compile = False`` bound."""
    root_dir = str(tmp_path_factory.mktemp("ppo_graph"))
    gin.clear_config()
    gin.bind_parameter("train_eval.jit_compile", False)
    _bind_ppo(PPO_RUN)
    # Exported at the end: the teacher of the behaviour-cloning test.
    gin.bind_parameter("train_eval.policy_save_interval", 64)
    results = train.train_eval(root_dir)
    gin.clear_config()
    return root_dir, results


def test_ppo_with_xla_matches_graph_mode(ppo_graph_run, tmp_path, xla_traces, clean_gin):
    graph_dir, graph = ppo_graph_run
    # The explicit setting (sit-train's --jit_compile) wins over the gin binding.
    gin.bind_parameter("train_eval.jit_compile", False)
    _bind_ppo(PPO_RUN)
    compiled = train.train_eval(str(tmp_path), jit_compile="on")
    assert xla_traces["train"] > 0
    assert compiled["train_step"] == graph["train_step"] == 8
    _assert_same_scalars(os.path.join(graph_dir, "train"), str(tmp_path / "train"), min_steps=8)
    assert "losses/approx_kl" in _scalars(str(tmp_path / "train"))
    assert _hyperparameter(os.path.join(graph_dir, "collect"), "train_eval.jit_compile") is False
    assert _hyperparameter(str(tmp_path / "collect"), "train_eval.jit_compile") is True


# The default run keeps PPO's XLA = graph check (test_ppo_with_xla_matches_graph_mode); the other
# agents' compiled float32 steps are also run by test_precision_networks' XLA tests.
@pytest.mark.large
@pytest.mark.usefixtures("synchronous_replay_sampling", "clean_gin")
def test_sac_with_xla_matches_graph_mode(tmp_path, xla_traces, monkeypatch):
    # Sampling replaced by the mode in both runs: see the module docstring.
    monkeypatch.setattr(
        distribution_utils.SquashToSpecNormal, "sample", lambda self, *args, **kwargs: self.mode()
    )
    graph = train.train_eval(str(tmp_path / "graph"), agent="sac", jit_compile="off", **SAC_RUN)
    assert not xla_traces
    compiled = train.train_eval(str(tmp_path / "xla"), agent="sac", jit_compile=True, **SAC_RUN)
    assert xla_traces["train"] > 0
    assert compiled["train_step"] == graph["train_step"] == 40
    # Losses at gradient steps 0, 8, ..., 32.
    _assert_same_scalars(str(tmp_path / "graph" / "train"), str(tmp_path / "xla" / "train"), min_steps=5)
    assert compiled["alpha"] == pytest.approx(graph["alpha"], rel=RTOL)
    assert _hyperparameter(str(tmp_path / "xla" / "collect"), "train_eval.jit_compile") is True


@pytest.mark.large  # as test_sac_with_xla_matches_graph_mode
@pytest.mark.usefixtures("synchronous_replay_sampling", "clean_gin")
@pytest.mark.parametrize("algorithm", ["dqn", "c51"])
def test_dqn_and_c51_with_xla_match_graph_mode(algorithm, tmp_path, xla_traces):
    run = {**DQN_RUN, "agent": "dqn", "algorithm": algorithm}
    graph = train.train_eval(str(tmp_path / "graph"), jit_compile=False, **run)
    compiled = train.train_eval(str(tmp_path / "xla"), jit_compile="true", **run)
    assert xla_traces["train"] > 0
    assert compiled["train_step"] == graph["train_step"] == 61
    # Losses at gradient steps 0, 5, ..., 60.
    _assert_same_scalars(str(tmp_path / "graph" / "train"), str(tmp_path / "xla" / "train"), min_steps=13)
    assert compiled["loss"] == pytest.approx(graph["loss"], rel=RTOL, abs=ATOL)
    assert _hyperparameter(str(tmp_path / "xla" / "collect"), "train_eval.jit_compile") is True


@pytest.mark.large  # as test_sac_with_xla_matches_graph_mode
def test_behaviour_cloning_with_xla_matches_graph_mode(ppo_graph_run, tmp_path, xla_traces, clean_gin):
    teacher, _ = ppo_graph_run
    run = {**DISTILL_RUN, "agent": "bc", "teacher_dir": teacher}
    graph = train.train_eval(str(tmp_path / "graph"), jit_compile="false", **run)
    compiled = train.train_eval(str(tmp_path / "xla"), jit_compile="on", **run)
    assert xla_traces["train_chunk"] > 0
    assert compiled["train_step"] == graph["train_step"] == 4
    np.testing.assert_allclose(
        [h["loss"] for h in compiled["history"]], [h["loss"] for h in graph["history"]], rtol=RTOL, atol=ATOL
    )
    _assert_same_scalars(str(tmp_path / "graph" / "train"), str(tmp_path / "xla" / "train"), min_steps=4)
    assert _hyperparameter(str(tmp_path / "graph" / "collect"), "train_eval.jit_compile") is False
    assert _hyperparameter(str(tmp_path / "xla" / "collect"), "train_eval.jit_compile") is True


def test_supervised_training_with_xla_matches_graph_mode(tmp_path, clean_gin):
    bindings = ["model = 'cnn'", "epochs = 1", "eval_interval = 0", "verbose = 0", "jit_compile = False"]
    graph = supervised_train.train_supervised(
        str(tmp_path / "graph"), model="cnn", epochs=1, eval_interval=0, verbose=0, jit_compile="off"
    )
    # The command line: --jit_compile wins over the gin binding.
    status = supervised_train.main(
        [f"--root_dir={tmp_path / 'xla'}", "--jit_compile=on"]
        + [f"--gin_bindings=train_supervised.{binding}" for binding in bindings]
    )
    assert status == 0
    compiled = json.loads((tmp_path / "xla" / "result.json").read_text())
    assert (graph["jit_compile"], compiled["jit_compile"]) == (False, True)
    assert compiled["config"]["jit_compile"] == "on"
    # 45 Adam steps (one epoch of 1437 digits in batches of 32), then the test split.
    np.testing.assert_allclose(compiled["history"]["loss"], graph["history"]["loss"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(compiled["test_loss"], graph["test_loss"], rtol=RTOL, atol=ATOL)


# -- auto: measured on this host -------------------------------------------------------------
def _measure_into(cache: os.PathLike, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache of the test's own, and measurement on (the suite turns it off elsewhere: conftest.py)."""
    monkeypatch.setenv(measured_choice.CACHE_DIR_VARIABLE, str(cache))
    monkeypatch.delenv(measured_choice.NO_MEASURE_VARIABLE, raising=False)


def _times_favouring(winner: str, ratio: float = 0.5):
    """A stand-in for ``measured_choice.time_candidates``: ``winner`` runs at ``ratio`` of the others.

    The candidates are still built and called once, so that each one is shown to work.
    """

    def time_candidates(candidates, rounds=3, calls=1, default=None):
        for build in candidates.values():
            build()()
        return {name: [0.01 * (ratio if name == winner else 1.0)] * rounds for name in candidates}

    return time_candidates


# The "on" case trains with XLA, slow to compile on CPUs: make test-large; "off" runs the same logic.
@pytest.mark.parametrize("winner", [pytest.param("on", marks=pytest.mark.large), "off"])
def test_auto_trains_with_what_is_measured_faster_and_says_which(
    winner, tmp_path, monkeypatch, capsys, xla_traces, clean_gin
):
    _measure_into(tmp_path / "cache", monkeypatch)
    monkeypatch.setattr(measured_choice, "time_candidates", _times_favouring(winner))
    _bind_ppo(PPO_RUN)
    train.train_eval(str(tmp_path / "run"))  # jit_compile="auto", the default
    said = capsys.readouterr().out
    ratio = "on 0.50x" if winner == "on" else "on 2.00x"
    said_first = f"jit_compile auto: {winner} (train step time: off 1.00x, {ratio}; measured now on this host"
    assert said_first in said
    assert (xla_traces["train"] > 0) is (winner == "on")
    assert _hyperparameter(str(tmp_path / "run" / "collect"), "train_eval.jit_compile") is (winner == "on")
    # The record keeps the request: a resume with "auto" is the same run, on any host.
    with open(tmp_path / "run" / "run_settings.json") as f:
        assert json.load(f)["train_eval.jit_compile"] == "auto"
    (entry,) = json.loads((tmp_path / "cache" / measured_choice.CACHE_FILE).read_text()).values()
    assert entry["question"] == "jit_compile" and entry["value"] == winner
    assert entry["model"] == {
        "encoder": "mlp", "encoder_kwargs": {"units": [16]}, "minibatch_size": 16,
        "observation_spec": [[3], "float32"], "precision": "float32",
    }  # fmt: skip

    # The next run of this model on this host reads the choice.
    monkeypatch.setattr(measured_choice, "time_candidates", _never_timed)
    _bind_ppo(PPO_RUN)
    train.train_eval(str(tmp_path / "again"))
    assert f"jit_compile auto: {winner} (" in capsys.readouterr().out
    assert _hyperparameter(str(tmp_path / "again" / "collect"), "train_eval.jit_compile") is (winner == "on")


def _never_timed(*args, **kwargs):
    raise AssertionError("a cached choice must not be measured again")


# Several runs; the measured choice and its cache:
# test_auto_trains_with_what_is_measured_faster_and_says_which.
@pytest.mark.large
def test_an_explicit_setting_or_a_strategy_is_never_measured(tmp_path, monkeypatch, capsys, clean_gin):
    _measure_into(tmp_path / "cache", monkeypatch)
    monkeypatch.setattr(measured_choice, "time_candidates", _never_timed)
    _bind_ppo(PPO_RUN)
    train.train_eval(str(tmp_path / "off"), jit_compile="off")
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0"])
    _bind_ppo(PPO_RUN)
    harness.train_eval(str(tmp_path / "mirrored"), strategy=mirrored)
    assert "jit_compile auto" not in capsys.readouterr().out
    assert not (tmp_path / "cache").exists()


def test_the_measurement_times_both_real_train_steps(tmp_path, monkeypatch):
    """Unpatched: the graph and the XLA step of a model are built, timed and compared."""
    from sit_keras.agents.training import auto_settings
    from sit_keras.agents.training.run_settings import RunSettings

    _measure_into(tmp_path / "cache", monkeypatch)
    run_settings = RunSettings(env_name=ENV, encoder="mlp", encoder_kwargs={"units": (16,)})
    spec = tf.TensorSpec((3,), tf.float32)
    choice = auto_settings.choose_jit_compile(run_settings, "float32", spec, 32)
    assert choice.value in ("on", "off") and choice.measured_now
    assert set(choice.seconds) == {"on", "off"} and all(t > 0 for t in choice.seconds.values())
    assert choice.ratio_to_default["off"] == 1.0
    assert (choice.value == "on") is (choice.ratio_to_default["on"] < measured_choice.MARGIN)


def test_supervised_auto_settings_are_measured_and_recorded(tmp_path, monkeypatch, capsys, clean_gin):
    _measure_into(tmp_path / "cache", monkeypatch)
    # bfloat16 and XLA both measured faster: the run trains in both, and says so.
    measured = []

    def time_candidates(candidates, rounds=3, calls=1, default=None):
        measured.append(sorted(candidates))
        winner = "mixed_bfloat16" if "mixed_bfloat16" in candidates else "on"
        return _times_favouring(winner)(candidates, rounds, calls)

    monkeypatch.setattr(measured_choice, "time_candidates", time_candidates)
    status = supervised_train.main(
        [f"--root_dir={tmp_path / 'run'}", "--precision=auto"]
        + [f"--gin_bindings=train_supervised.{binding}"
           for binding in ("model = 'cnn'", "epochs = 1", "eval_interval = 0", "verbose = 0")]
    )  # fmt: skip
    assert status == 0
    said = capsys.readouterr().out
    assert "sit-train-supervised: precision auto: mixed_bfloat16 (train step time: float32 1.00x" in said
    assert "sit-train-supervised: jit_compile auto: on (train step time: off 1.00x, on 0.50x" in said
    assert measured == [["float32", "mixed_bfloat16"], ["off", "on"]]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert (result["precision"], result["jit_compile"]) == ("mixed_bfloat16", True)
    assert (result["config"]["precision"], result["config"]["jit_compile"]) == ("auto", "auto")
    entries = json.loads((tmp_path / "cache" / measured_choice.CACHE_FILE).read_text()).values()
    models = {entry["question"]: entry["model"] for entry in entries}
    assert models["jit_compile"]["precision"] == "mixed_bfloat16"
    assert models["precision"]["model"] == "cnn" and models["precision"]["batch_size"] == 32


def test_xla_starts_without_a_line_on_the_console():
    program = (
        "import sit_keras.quiet_start\n"
        "import tensorflow as tf\n"
        "from sit_keras import xla\n"
        "xla.start_quietly()\n"
        "print(tf.function(lambda: tf.constant(2.0) * 3.0, jit_compile=True)().numpy())\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "SIT_KERAS_VERBOSE"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0 and done.stdout == "6.0\n"
    assert done.stderr == ""


def test_deterministic_runs_train_without_xla_and_refuse_it(tmp_path, monkeypatch, clean_gin):
    """XLA's random ops are not seeded by TensorFlow's seeds: a deterministic run cannot use them.

    Only the settings are resolved: a deterministic run turns op determinism on for the whole process,
    under which XLA cannot compile a max-pool gradient, so the other tests of this worker would fail.
    """
    _measure_into(tmp_path / "cache", monkeypatch)
    monkeypatch.setattr(measured_choice, "time_candidates", _never_timed)
    for setting in ("auto", "off"):
        _, run_settings, _ = harness._settings({"deterministic": True, "jit_compile": setting}, None)
        assert run_settings.jit_compile is False  # nothing is left to measure
    _, run_settings, _ = harness._settings({"jit_compile": "auto"}, None)
    assert run_settings.jit_compile == xla.AUTO
    _bind_ppo(PPO_RUN)
    with pytest.raises(
        harness.SettingsError, match=r"^train_eval.deterministic repeats a run bit for bit only"
    ):
        train.train_eval(str(tmp_path / "on"), deterministic=True, jit_compile="on")
    assert not (tmp_path / "on").exists()
