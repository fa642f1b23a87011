"""sit-eval checks every argument before the first episode, defaults to the training environment,
names result files by policy, environment and keywords, prints before it writes, and writes atomically."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from sit_keras.agents import evaluate
from sit_keras.agents.training.run_settings import RunSettings
from sit_keras.commands import evaluate as sit_eval
from sit_keras.export.exporter import export_policy
from sit_keras.export.random_policy import write_example_policy_folder

ENV = "minigrid:LavaGapS5"


# ---------------------------------------------------------------------------------------------------------
# --env_kwarg values


def test_env_kwargs_parse_booleans_numbers_none_and_strings():
    parsed = evaluate.parse_env_kwargs(
        ["pixels=TRUE", "crop_border=false", "num_levels=0", "noise_std=0.05", "start_level=-3",
         "camera_id=None", "split=test", "sensor_permutation=every:10", "goal=top_right", "lr=1e-3"]
    )  # fmt: skip
    assert parsed == {
        "pixels": True, "crop_border": False, "num_levels": 0, "noise_std": 0.05, "start_level": -3,
        "camera_id": None, "split": "test", "sensor_permutation": "every:10", "goal": "top_right",
        "lr": 0.001,
    }  # fmt: skip
    assert isinstance(parsed["num_levels"], int) and isinstance(parsed["lr"], float)


@pytest.mark.parametrize(
    "item, match",
    [
        ("pixels=no", "ambiguous: write pixels=true or pixels=false"),
        ("duplicate_sensors=Yes", "ambiguous"),
        ("full_action_space=off", "ambiguous"),
        ("pixels=1", "pixels takes true or false"),
        ("pixels=ture", "pixels takes true or false"),
        ("noise_std=nan", "finite numbers"),
        ("split=", "has no value"),
        ("split", "key=value"),
        ("=test", "key=value"),
    ],
)
def test_env_kwargs_refuse_ambiguous_values(item, match):
    with pytest.raises(ValueError, match=match):
        evaluate.parse_env_kwargs([item])
    with pytest.raises(ValueError, match="given twice"):
        evaluate.parse_env_kwargs(["split=test", "split=train"])


def test_boolean_env_kwargs_are_the_environments_boolean_parameters():
    from sit_keras.agents.environments import atari_env, dmc_env, minigrid_env, procgen_env
    from sit_keras.agents.environments.sensor_permutation import SensorPermutation

    constructors = [dmc_env.DMCEnvironment, atari_env.AtariEnvironment, minigrid_env.SiTMiniGrid,
                    procgen_env.ProcgenEnvironment, SensorPermutation]  # fmt: skip
    booleans = {
        name
        for constructor in constructors
        for name, parameter in inspect.signature(constructor.__init__).parameters.items()
        if isinstance(parameter.default, bool)
    }
    assert booleans == evaluate.BOOLEAN_ENV_KWARGS


# ---------------------------------------------------------------------------------------------------------
# Result files


def test_default_output_is_named_by_policy_env_and_keywords(tmp_path):
    root = str(tmp_path)
    greedy = sit_eval.default_output(os.path.join(root, "policies", "greedy_policy"), ENV, {})
    sampling = sit_eval.default_output(os.path.join(root, "policies", "policy/"), ENV, {})
    assert greedy == os.path.join(root, "eval_greedy_policy_minigrid_LavaGapS5.json")
    assert sampling == os.path.join(root, "eval_policy_minigrid_LavaGapS5.json")
    test_split = sit_eval.default_output(
        os.path.join(root, "policies", "policy"), "procgen:coinrun", {"split": "test", "num_levels": 0}
    )
    assert test_split == os.path.join(root, "eval_policy_procgen_coinrun_num_levels=0,split=test.json")
    model = os.path.join(root, "tflite", "cnn_int8.tflite")
    assert sit_eval.default_output(model, ENV, {}, tflite=True) == model[:-7] + "_minigrid_LavaGapS5.json"
    assert sit_eval.default_output(
        model, "dmc:walker-walk", {"sensor_permutation": "every:5"}, True
    ).endswith("cnn_int8_dmc_walker-walk_sensor_permutation=every-5.json")
    long = sit_eval.default_output(model, ENV, {f"k{i}": "v" * 20 for i in range(10)}, tflite=True)
    other = sit_eval.default_output(model, ENV, {f"k{i}": "w" * 20 for i in range(10)}, tflite=True)
    assert len(os.path.basename(long)) <= 210 and long != other


def test_results_are_written_atomically(tmp_path):
    path = str(tmp_path / "results.json")
    evaluate.write_json_atomically(path, {"a": 1})
    evaluate.write_json_atomically(path, {"a": 2})
    with open(path) as f:
        assert json.load(f) == {"a": 2}
    with pytest.raises(TypeError):
        evaluate.write_json_atomically(path, {"a": object()})  # fails half-way through the dump
    with open(path) as f:
        assert json.load(f) == {"a": 2}
    assert os.listdir(tmp_path) == ["results.json"]


# ---------------------------------------------------------------------------------------------------------
# The command, in process


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, str]:
    """A CNN policy folder as training leaves it (policies/greedy_policy, policies/policy) and its TFLite."""
    root = str(tmp_path_factory.mktemp("train"))
    write_example_policy_folder(root, "cnn")
    report = export_policy(
        root, os.path.join(root, "export"), "cnn", quantizations=["float32"], num_examples=4
    )
    for name in ("greedy_policy", "policy"):
        shutil.copytree(report["models"]["saved_model"]["path"], os.path.join(root, "policies", name))
    return {"root": root, "tflite": report["models"]["tflite_float32"]["path"]}


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = sit_eval.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def no_episodes(monkeypatch):
    """Fails the test if any episode starts: mistakes must be found before the first one."""

    def refuse(*args, **kwargs):
        raise AssertionError("an episode ran before the arguments were checked")

    monkeypatch.setattr(evaluate, "run_episodes", refuse)


def test_mistakes_are_found_before_the_first_episode(trained, tmp_path, capsys, no_episodes):
    model = trained["tflite"]
    cases = [
        (["--output", str(tmp_path / "missing" / "r.json")], "does not exist; create it first"),
        (["--transform", "none", "--transform", "rot9O"], "unknown --transform 'rot9O'"),
        (["--transform", "rot90", "--transform", "shuffle_patches:5"], "patch size must divide"),
        (["--env_kwarg", "pixels=no"], "ambiguous"),
        (["--env_kwarg", "goal=center"], "Unknown goal 'center'"),
        (["--env_kwarg", "colour=red"], "does not take the keyword 'colour'"),
        (["--num_episodes", "0"], "--num_episodes must be at least 1"),
        (["--gif", str(tmp_path / "episode.png")], "must end in .gif"),
        (["--env", "minigrid:NoSuchTask"], "NoSuchTask"),
        (["--bogus"], "bogus"),
    ]
    for extra, match in cases:
        status, out, err = _run(capsys, "--tflite", model, *extra)
        assert status == sit_eval.USAGE_ERROR and match in err, (extra, err)
        assert err.startswith("sit-eval: ") and err.count("\n") == 1 and "Traceback" not in err
        assert "return" not in out
    status, _, err = _run(capsys, "--tflite", str(tmp_path / "missing.tflite"))
    assert status == sit_eval.USAGE_ERROR and "missing.tflite' does not exist" in err
    status, _, err = _run(capsys, "--num_episodes", "1")
    assert status == sit_eval.USAGE_ERROR and "policy_dir" in err and "tflite" in err
    assert os.listdir(tmp_path) == []


def test_a_wrong_environment_is_one_sentence_naming_both_specs(trained, capsys, no_episodes):
    status, _, err = _run(capsys, "--tflite", trained["tflite"], "--env", "gymnasium:CartPole-v1")
    assert status == sit_eval.USAGE_ERROR and err.count("\n") == 1
    assert "trained on minigrid:LavaGapS5 and takes observations (14, 14, 3) uint8 in [0, 255] with 4 " in err
    assert "gymnasium:CartPole-v1 gives observations (4,) float32 in per-element bounds with 2 actions" in err
    assert "4 actions (int64 0..3)" in err and "2 actions (int64 0..1)" in err
    assert "ConcreteFunction" not in err and "Traceback" not in err


def test_results_are_printed_then_written_under_their_own_name(trained, capsys, monkeypatch):
    root = trained["root"]
    argv = ["--num_episodes", "2", "--num_envs", "2", "--transform", "none", "--transform", "rot90"]
    names = {}
    for policy in ("greedy_policy", "policy"):  # no --env: the training environment
        status, out, err = _run(capsys, "--policy_dir", os.path.join(root, "policies", policy), *argv)
        assert status == 0, err
        names[policy] = os.path.join(root, f"eval_{policy}_minigrid_LavaGapS5.json")
        lines = out.splitlines()
        assert lines[-1] == f"wrote {names[policy]}"
        assert [line.split(":")[0].strip() for line in lines[1:3]] == ["none", "rot90"]
        with open(names[policy]) as f:
            report = json.load(f)
        assert report["env"] == ENV and report["results"]["rot90"]["num_episodes"] == 2
    assert not [name for name in os.listdir(root) if name.endswith(".tmp")]

    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(evaluate, "write_json_atomically", full_disk)
    status, out, err = _run(capsys, "--tflite", trained["tflite"], *argv[:4])
    assert status == sit_eval.EVALUATION_FAILED and "the results are printed above" in err
    assert "none: return" in out


def test_policy_outside_a_training_folder_needs_env(trained, tmp_path, capsys, no_episodes):
    policy_dir = tmp_path / "elsewhere" / "policies" / "greedy_policy"
    shutil.copytree(os.path.join(trained["root"], "policies", "greedy_policy"), policy_dir)
    status, _, err = _run(capsys, "--policy_dir", str(policy_dir))
    assert status == sit_eval.USAGE_ERROR and "--env is required" in err


def test_gif_shows_the_newest_colour_frame_at_a_readable_size(tmp_path):
    import imageio.v2 as imageio

    minigrid = np.random.default_rng(0).integers(0, 256, (3, 14, 14, 3)).astype(np.uint8)
    evaluate.save_gif(list(minigrid), str(tmp_path / "minigrid.gif"))
    frames = imageio.mimread(str(tmp_path / "minigrid.gif"))
    assert len(frames) == 3 and frames[0].shape[:2] == (266, 266)
    atari = np.zeros((84, 84, 4), np.uint8)
    atari[..., -1] = 200  # the newest of four grey frames
    assert np.all(evaluate.gif_frame(atari) == 200) and evaluate.gif_frame(atari).shape == (84, 84, 3)
    dmc = np.zeros((64, 64, 9), np.uint8)
    dmc[..., 6:] = [10, 20, 30]  # the newest of three RGB frames
    np.testing.assert_array_equal(evaluate.gif_frame(dmc)[0, 0], [10, 20, 30])
    evaluate.save_gif([dmc, dmc], str(tmp_path / "dmc.gif"))


def test_sit_eval_process_prints_one_sentence(tmp_path):
    sit_eval = os.path.join(os.path.dirname(sys.executable), "sit-eval")
    result = subprocess.run(
        [sit_eval, "--tflite", str(tmp_path / "model.tflite"), "--env_kwarg", "pixels=no"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "sit-eval: --env_kwarg pixels=no is ambiguous: write pixels=true or pixels=false for a boolean."
    )


def test_a_model_exported_despite_failed_parity_is_evaluated_with_a_warning(trained, tmp_path, capsys):
    model = str(tmp_path / "cnn_float32.tflite")
    shutil.copy(trained["tflite"], model)
    with open(trained["tflite"][: -len(".tflite")] + ".json") as f:
        metadata = json.load(f)
    metadata["export"]["parity"].update(passed=False, failed_checks=["action agreement 0.50 < 0.90"])
    with open(model[: -len(".tflite")] + ".json", "w") as f:
        json.dump(metadata, f)
    status, out, err = _run(
        capsys, "--tflite", model, "--num_episodes", "1", "--output", str(tmp_path / "e.json")
    )
    assert status == 0, err
    (warning,) = err.splitlines()
    assert warning.startswith(f"WARNING: {model} failed its parity check at export (action agreement 0.50")
    status, out, err = _run(capsys, "--tflite", trained["tflite"], "--num_episodes", "1", "--output",
                            str(tmp_path / "f.json"))  # fmt: skip
    assert status == 0 and "WARNING" not in err


def test_a_gif_of_vector_observations_is_refused_before_the_first_episode(tmp_path, capsys, no_episodes):
    root = str(tmp_path / "mlp")
    write_example_policy_folder(root, "mlp")  # CartPole: observations of shape (4,)
    policy_dir = os.path.join(root, "policies", "greedy_policy")
    if not os.path.exists(os.path.join(policy_dir, "saved_model.pb")):
        report = export_policy(
            root, os.path.join(root, "export"), "mlp", formats=["saved_model"], num_examples=4
        )
        shutil.copytree(report["models"]["saved_model"]["path"], policy_dir)
    status, out, err = _run(capsys, "--policy_dir", policy_dir, "--gif", str(tmp_path / "cartpole.gif"))
    assert status == sit_eval.USAGE_ERROR and out == "", err
    assert err.strip() == (
        "sit-eval: --gif needs image observations, and gymnasium:CartPole-v1 gives observations of shape "
        "(4,): leave --gif out."
    )
    assert not (tmp_path / "cartpole.gif").exists()


def test_the_runs_evaluation_settings_are_used_not_its_training_ones(tmp_path):
    policy_dir = tmp_path / "policies" / "greedy_policy"
    policy_dir.mkdir(parents=True)
    description = {"env_name": "atari:Pong", "env_kwargs": {"terminal_on_life_loss": True, "frame_skip": 4}}
    (tmp_path / "policy_network.json").write_text(json.dumps(description))
    # A folder from before the evaluation settings were recorded: its training settings.
    assert sit_eval._trained_environment(str(policy_dir)) == ("atari:Pong", description["env_kwargs"])
    recorded = {"terminal_on_life_loss": False, "frame_skip": 4}
    (tmp_path / "policy_network.json").write_text(json.dumps({**description, "eval_env_kwargs": recorded}))
    assert sit_eval._trained_environment(str(policy_dir)) == ("atari:Pong", recorded)
    settings = RunSettings(env_name="atari:Pong", env_kwargs={"terminal_on_life_loss": True})
    assert settings.eval_kwargs == {"terminal_on_life_loss": False}  # what the harness records


def test_a_sensor_set_policy_is_evaluated_with_another_number_of_readings(tmp_path, capsys):
    """AttentionNeuron (Table 2's "10 obs", "5 obs + 5 noise"): the training folder's greedy policy and a
    TFLite model exported for 10 readings both run; duplicated readings act as the originals."""
    root = str(tmp_path / "pi")
    write_example_policy_folder(root, "attention_neuron")  # dmc:cartpole-swingup, 5 readings
    report = export_policy(
        root, os.path.join(root, "export"), "pi", quantizations=["float32"], num_examples=4, max_sensors=10
    )
    greedy = os.path.join(root, "policies", "greedy_policy")
    shutil.copytree(report["models"]["saved_model"]["path"], greedy)
    shutil.copytree(greedy, os.path.join(root, "policies", "policy"))
    model = report["models"]["tflite_float32"]["path"]
    episodes = ["--num_episodes", "2", "--num_envs", "2", "--env_kwarg", "episode_length=12"]

    def returns(source: list[str], *kwargs: str) -> float:
        output = str(tmp_path / f"eval_{len(os.listdir(tmp_path))}.json")
        options = [a for kwarg in kwargs for a in ("--env_kwarg", kwarg)]
        status, _, err = _run(capsys, *source, *episodes, *options, "--output", output)
        assert status == 0, err
        with open(output) as f:
            return json.load(f)["results"]["none"]["mean_return"]

    upright = returns(["--policy_dir", greedy])
    assert returns(["--policy_dir", greedy], "duplicate_sensors=true") == pytest.approx(upright, rel=1e-4)
    assert returns(["--tflite", model], "duplicate_sensors=true") == pytest.approx(upright, rel=1e-4)
    returns(["--tflite", model], "noise_sensors=5")
    returns(["--policy_dir", greedy], "noise_sensors=5")
    status, out, err = _run(capsys, "--tflite", model, *episodes, "--env_kwarg", "noise_sensors=6")
    assert status == sit_eval.USAGE_ERROR and out == ""
    assert "gives 11 sensor readings" in err and "sit-export --max_sensors 11" in err, err
    sampling = os.path.join(root, "policies", "policy")
    status, out, err = _run(capsys, "--policy_dir", sampling, *episodes, "--env_kwarg", "noise_sensors=1")
    assert status == sit_eval.USAGE_ERROR and f"with --policy_dir {greedy}" in err, err
