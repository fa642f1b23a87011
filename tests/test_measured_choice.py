"""``precision="auto"``: measured once per host and model, cached; what the trainer does with it."""

from __future__ import annotations

import json
import time

import gin
import numpy as np
import pytest
import tensorflow as tf
from run_folders import TINY_PPO

from sit_keras import measured_choice, mixed_precision, native
from sit_keras.agents import train
from sit_keras.agents.training import harness

TINY = [*TINY_PPO, "train_eval.progress = False"]


def _sleeper(seconds: float):
    def build():
        return lambda: time.sleep(seconds)

    return build


def _never_built():
    raise AssertionError("a cached choice must not build its candidates")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A cache of this test's own, and measurement on (the suite turns it off elsewhere: conftest.py)."""
    monkeypatch.setenv(measured_choice.CACHE_DIR_VARIABLE, str(tmp_path / "cache"))
    monkeypatch.delenv(measured_choice.NO_MEASURE_VARIABLE, raising=False)
    return tmp_path / "cache"


def test_no_measure_keeps_the_default_without_timing_reading_or_caching(cache_dir, monkeypatch, capsys):
    monkeypatch.setenv(measured_choice.NO_MEASURE_VARIABLE, "1")
    cache_dir.mkdir()
    (cache_dir / measured_choice.CACHE_FILE).write_text("damaged")  # not even read
    choice = measured_choice.fastest(
        "speed", {}, {"slow": _never_built, "fast": _never_built}, default="slow"
    )
    assert (choice.value, choice.measured_now, choice.cache_file) == ("slow", False, None)
    assert choice.sentence("speed") == "speed auto: slow (not measured: SIT_KERAS_NO_MEASURE is set)."
    gin.clear_config()
    train.parse_gin([], TINY)
    try:
        harness.train_eval(str(cache_dir.parent / "run"), precision="auto")
    finally:
        gin.clear_config()
    assert " auto: " not in capsys.readouterr().out  # nothing measured, nothing to say
    assert (cache_dir / measured_choice.CACHE_FILE).read_text() == "damaged"


def test_the_faster_candidate_wins_and_is_cached_for_this_host_and_model(cache_dir):
    candidates = {"slow": _sleeper(0.004), "fast": _sleeper(0.001)}
    choice = measured_choice.fastest("speed", {"model": "m"}, candidates, default="slow")
    assert choice.value == "fast" and choice.measured_now
    assert choice.ratio_to_default["slow"] == 1.0 and choice.ratio_to_default["fast"] < measured_choice.MARGIN
    assert "speed auto: fast (train step time: slow 1.00x, fast 0." in choice.sentence("speed")
    entries = json.loads((cache_dir / measured_choice.CACHE_FILE).read_text())
    (entry,) = entries.values()
    assert (
        entry["value"] == "fast"
        and entry["host"] == measured_choice.host()
        and entry["model"] == {"model": "m"}
    )
    # The same question and model on this host: read back, nothing built or timed.
    again = measured_choice.fastest(
        "speed", {"model": "m"}, {"slow": _never_built, "fast": _never_built}, "slow"
    )
    assert again.value == "fast" and not again.measured_now and again.seconds == choice.seconds
    # Another model is measured on its own.
    other = measured_choice.fastest(
        "speed", {"model": "n"}, {"slow": _sleeper(0.001), "fast": _sleeper(0.004)}, "slow"
    )
    assert other.value == "slow" and other.measured_now
    assert len(json.loads((cache_dir / measured_choice.CACHE_FILE).read_text())) == 2


def test_a_choice_measured_on_other_code_is_measured_again(cache_dir, monkeypatch):
    """A change to the layers can make a path faster: its old timing must not decide for the new code."""
    version = measured_choice.code_version()
    assert len(version) == 16 and version == measured_choice.code_version()
    first = measured_choice.fastest(
        "speed", {"model": "m"}, {"a": _sleeper(0.004), "b": _sleeper(0.001)}, "a"
    )
    assert first.value == "b" and first.measured_now
    (entry,) = json.loads((cache_dir / measured_choice.CACHE_FILE).read_text()).values()
    assert entry["code"] == version
    monkeypatch.setattr(measured_choice, "code_version", lambda: "another-version")
    again = measured_choice.fastest(
        "speed", {"model": "m"}, {"a": _sleeper(0.001), "b": _sleeper(0.004)}, "a"
    )
    assert again.value == "a" and again.measured_now
    assert len(json.loads((cache_dir / measured_choice.CACHE_FILE).read_text())) == 2


def test_a_clearly_slower_candidate_is_not_timed_past_its_warm_up_and_a_long_step_once_a_round(cache_dir):
    calls = {"slow": 0, "fast": 0}

    def counted(name: str, seconds: float):
        def step():
            calls[name] += 1
            time.sleep(seconds)

        return lambda: step

    candidates = {"fast": counted("fast", 0.001), "slow": counted("slow", 0.01)}
    choice = measured_choice.fastest("speed", {"model": "m"}, candidates, default="fast", cache=False)
    assert choice.value == "fast" and choice.ratio_to_default["slow"] > measured_choice.CLEARLY_SLOWER
    assert calls["slow"] == measured_choice.WARM_UP_CALLS
    assert (
        calls["fast"]
        == measured_choice.WARM_UP_CALLS + measured_choice.ROUNDS * measured_choice.CALLS_PER_ROUND
    )
    # A long default: one call per round.
    calls.update(fast=0, slow=0)
    candidates = {"long": counted("fast", measured_choice.LONG_CALL_S * 1.1), "slow": counted("slow", 0.3)}
    measured_choice.time_candidates(candidates, default="long")
    assert calls == {"fast": measured_choice.WARM_UP_CALLS + measured_choice.ROUNDS,
                     "slow": measured_choice.WARM_UP_CALLS + measured_choice.ROUNDS}  # fmt: skip
    # Without a default to compare with, every candidate is timed in every round.
    calls.update(fast=0, slow=0)
    candidates = {"fast": counted("fast", 0.001), "slow": counted("slow", 0.01)}
    times = measured_choice.time_candidates(candidates, rounds=2, calls=1)
    assert calls["slow"] == measured_choice.WARM_UP_CALLS + 2 and len(times["slow"]) == 2


def test_a_tie_keeps_the_default(cache_dir):
    """A candidate must be faster by the margin: noise never moves a run off the default."""
    choice = measured_choice.fastest("tie", {}, {"a": _sleeper(0.002), "b": _sleeper(0.002)}, default="a")
    assert choice.value == "a" and choice.ratio_to_default["b"] > measured_choice.MARGIN


def test_a_damaged_cache_is_named_and_left_alone(cache_dir):
    path = cache_dir / measured_choice.CACHE_FILE
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(ValueError, match=f"{path} is damaged .*delete it to measure again"):
        measured_choice.fastest("speed", {}, {"a": _sleeper(0.0)}, default="a")
    assert path.read_text() == "{not json"
    with pytest.raises(ValueError, match="The default 'b' is not a candidate"):
        measured_choice.fastest("speed", {}, {"a": _sleeper(0.0)}, default="b", cache=False)


def test_the_host_names_the_instruction_sets_that_pick_the_kernels():
    described = measured_choice.host()
    assert set(described["instruction_sets"]) <= set(measured_choice._KERNEL_FLAGS)
    assert described["tensorflow"] == tf.__version__ and described["cpus"] >= 1


def test_precision_auto_trains_in_the_measured_policy_and_says_which(cache_dir, tmp_path, capsys):
    gin.clear_config()
    train.parse_gin([], TINY)
    try:
        harness.train_eval(str(tmp_path / "run"), precision="auto")
        first = capsys.readouterr().out
        harness.train_eval(str(tmp_path / "again"), precision="auto")
        second = capsys.readouterr().out
    finally:
        gin.clear_config()
    entries = json.loads((cache_dir / measured_choice.CACHE_FILE).read_text()).values()
    (entry,) = [entry for entry in entries if entry["question"] == "precision"]
    assert entry["value"] in mixed_precision.AUTO_CANDIDATES
    assert (
        entry["model"]["encoder"] == "cnn" and entry["model"]["minibatch_size"] == 8
    )  # 2 envs x 8 steps / 2
    assert f"precision auto: {entry['value']} (train step time: float32 1.00x, mixed_bfloat16 " in first
    assert "measured now on this host" in first and "measured before on this host" in second
    # The run records the setting as given: a resume with "auto" is the same run.
    with open(tmp_path / "run" / "run_settings.json") as f:
        assert json.load(f)["train_eval.precision"] == "auto"


def test_the_measurement_leaves_the_run_seeded_as_without_it(cache_dir, monkeypatch):
    from sit_keras.agents.algorithms import ppo
    from sit_keras.agents.training.run_settings import RunSettings

    run_settings = RunSettings(
        env_name="minigrid:LavaGapS5", num_envs=2, encoder="mlp", encoder_kwargs={}, precision="auto", seed=3
    )
    spec = tf.TensorSpec((4,), tf.float32)
    settings = ppo.PPO(collect_steps_per_env=4, num_minibatches=2)
    precision = harness._resolve_precision(ppo, run_settings, settings, spec, tf.distribute.get_strategy())
    assert precision in mixed_precision.AUTO_CANDIDATES
    after = (np.random.rand(), tf.random.uniform(()).numpy())
    harness._seed(run_settings, tf.distribute.get_strategy())
    assert after == (np.random.rand(), tf.random.uniform(()).numpy())


def test_precision_auto_is_refused_on_a_cluster_in_one_sentence(monkeypatch, tmp_path):
    from sit_keras.agents.training import workers

    monkeypatch.setattr(workers, "num_workers", lambda strategy=None: 2)
    gin.clear_config()
    train.parse_gin([], TINY)
    try:
        with pytest.raises(harness.SettingsError, match="precision = 'auto' measures one host"):
            harness.train_eval(str(tmp_path / "run"), precision="auto")
    finally:
        gin.clear_config()
    assert not (tmp_path / "run").exists()


def test_every_trainer_offers_auto_and_the_check_refuses_it_where_it_is_not_offered():
    from sit_keras.supervised import train as supervised

    assert mixed_precision.check_precision("auto", allow_auto=True) == "auto"
    with pytest.raises(ValueError, match="Unknown precision 'auto'"):
        mixed_precision.check_precision("auto")
    assert "auto" in train.FLAGS["precision"].parser.enum_values
    assert "auto" in supervised.FLAGS["precision"].parser.enum_values


def test_a_cache_that_cannot_be_written_leaves_the_choice_measured_and_uncached(
    cache_dir, monkeypatch, tmp_path
):
    def refuse(path, entries):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(measured_choice, "_write_cache", refuse)
    choice = measured_choice.fastest("speed", {}, {"a": _sleeper(0.0)}, default="a")
    assert choice.value == "a" and choice.measured_now and choice.cache_file is None
    assert "cached in" not in choice.sentence("speed")
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setenv(measured_choice.CACHE_DIR_VARIABLE, str(blocked))
    with pytest.raises(
        ValueError, match=f"{blocked}/measured_choices.json cannot be read .*SIT_KERAS_CACHE_DIR"
    ):
        measured_choice.fastest("speed", {}, {"a": _sleeper(0.0)}, default="a")


def test_the_cpu_allocator_is_part_of_the_host(monkeypatch):
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "true")
    arena = measured_choice._entry_key("jit_compile", {"model": "x"})
    assert measured_choice.host()["cpu_allocator_use_bfc"] == "true"
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "false")
    assert measured_choice._entry_key("jit_compile", {"model": "x"}) != arena


def test_xlas_flags_are_part_of_the_host(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    default = measured_choice._entry_key("jit_compile", {"model": "x"})
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
    assert measured_choice.host()["xla_flags"] == "--xla_cpu_use_thunk_runtime=false"
    assert measured_choice._entry_key("jit_compile", {"model": "x"}) != default


def test_whether_the_native_kernels_load_is_part_of_the_host(monkeypatch):
    """A choice measured with the native kernels (faster float32 SiT steps) is not reused without them."""
    monkeypatch.setattr(native, "_loaded", {"ops": object(), "problem": None})
    with_kernels = measured_choice._entry_key("precision", {"model": "x"})
    assert measured_choice.host()["native_kernels"] is True
    monkeypatch.setattr(native, "_loaded", {"ops": None, "problem": "not built"})
    assert measured_choice._entry_key("precision", {"model": "x"}) != with_kernels


def test_whether_tensorflow_runs_onednn_is_part_of_the_host(monkeypatch):
    """oneDNN (TF_ENABLE_ONEDNN_OPTS) changes TensorFlow's kernels and the projection's gradients."""
    monkeypatch.setattr(native, "tensorflow_runs_onednn", lambda: True)
    with_onednn = measured_choice._entry_key("precision", {"model": "x"})
    assert measured_choice.host()["tensorflow_onednn"] is True
    monkeypatch.setattr(native, "tensorflow_runs_onednn", lambda: False)
    assert measured_choice._entry_key("precision", {"model": "x"}) != with_onednn


def test_a_host_without_cpuinfo_is_known_by_its_counts(monkeypatch):
    monkeypatch.setattr(measured_choice, "_cpuinfo", lambda: "")
    described = measured_choice.host()
    assert described["processor"] == "" and described["instruction_sets"] == [] and described["cpus"] >= 1
