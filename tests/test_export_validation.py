"""sit-export checks every argument before it writes, leaves nothing behind on failure, and fails a
TFLite model that does not act like the policy (parity: agreement, relative tolerance, spread)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from run_folders import file_hashes

from sit_keras.export import cli, exporter, interruption, parity
from sit_keras.export.exporter import ParityError, check_export_arguments, export_policy
from sit_keras.export.random_policy import write_example_policy_folder
from sit_keras.export.rollouts import Example

# ---------------------------------------------------------------------------------------------------------
# Parity on given outputs (the interpreter replaced by the outputs a model would give).


def _compare(monkeypatch, expected: list[dict], received: list[dict], action_range=2.0) -> dict:
    outputs = iter(received)

    class _Interpreter:
        def get_signature_runner(self):
            return lambda **_: next(outputs)

    monkeypatch.setattr(parity, "make_interpreter", lambda *args, **kwargs: _Interpreter())
    return parity.compare("model.tflite", [Example({}, e) for e in expected], action_range)


def _continuous(actions) -> list[dict]:
    return [{"action": np.array([[a]], np.float32)} for a in actions]


def _discrete(logits) -> list[dict]:
    return [{"action": np.array([int(np.argmax(s))]), "logits": np.array([s], np.float32)} for s in logits]


def test_parity_fails_a_continuous_model_that_collapses_to_a_constant(monkeypatch):
    """The issue's case: 200 distinct states, TensorFlow's actions within +-0.05, TFLite always 0.0.
    A tolerance of 0.1 absolute passed it; agreement relative to the actions' span and the spread fail it."""
    actions = np.random.default_rng(0).uniform(-0.05, 0.05, 200)
    report = _compare(monkeypatch, _continuous(actions), _continuous(np.zeros(200)))
    assert not report["passed"] and report["spread_ratio"] == 0.0
    assert report["action_agreement"] < parity.MIN_ACTION_AGREEMENT
    assert any("collapse" in check for check in report["failed_checks"])
    # Variation below the actuator resolution (1% of [-1, 1]): every action is "close"; the spread fails.
    small = actions / 10
    report = _compare(monkeypatch, _continuous(small), _continuous(np.zeros(200)))
    assert report["action_agreement"] == 1.0 and not report["passed"]
    assert len(report["failed_checks"]) == 1 and "collapse" in report["failed_checks"][0]


def test_parity_continuous_tolerance_is_relative_to_the_actions_span(monkeypatch):
    actions = np.linspace(-1.0, 1.0, 50)  # a trained actor: spans the whole range
    close = _compare(monkeypatch, _continuous(actions), _continuous(actions + 0.08))
    assert close["passed"] and close["action_tolerance"] == [pytest.approx(0.1)]
    far = _compare(monkeypatch, _continuous(actions), _continuous(actions + 0.12))
    assert not far["passed"] and far["action_agreement"] == 0.0
    # An actor that uses a tenth of the range: the same 0.08 error is most of what it does.
    narrow = actions / 10
    assert not _compare(monkeypatch, _continuous(narrow), _continuous(narrow + 0.08))["passed"]
    constant = _compare(monkeypatch, _continuous(np.full(10, 0.3)), _continuous(np.full(10, 0.3)))
    assert constant["passed"] and constant["spread_ratio"] is None  # nothing varies: nothing to compare


def test_parity_discrete_agreement_is_a_gate_even_for_near_ties(monkeypatch):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(40, 4)) * 3
    flipped = logits.copy()
    flipped[:6] = -flipped[:6]  # 6 of 40 (85% agreement) with clear margins
    report = _compare(monkeypatch, _discrete(logits), _discrete(flipped))
    assert not report["passed"] and report["action_agreement"] == 0.85
    assert "agreement 0.850 is below 0.9" in report["failed_checks"][0]
    # Near-ties flipped by a large error (an int8 model) are explained, but 85% agreement still fails.
    tied = np.tile([1.0, 1.05, -2.0, -3.0], (40, 1)) + rng.normal(size=(40, 1))
    tied[:, 1] += np.linspace(0, 0.05, 40)
    noisy = tied.copy()
    noisy[:6, 0] += 0.5
    report = _compare(monkeypatch, _discrete(tied), _discrete(noisy))
    assert report["unexplained_disagreements"] == 0 and report["action_agreement"] == 0.85
    assert not report["passed"] and "agreement 0.850 is below 0.9" in report["failed_checks"][0]


def test_parity_discrete_collapse_and_non_finite_outputs_fail(monkeypatch):
    logits = np.random.default_rng(2).normal(size=(30, 3)) * 0.1 + [5.0, 0.0, 0.0]  # always action 0
    constant = np.tile([[5.0, 0.0, 0.0]], (30, 1))
    report = _compare(monkeypatch, _discrete(logits), _discrete(constant))
    assert report["action_agreement"] == 1.0 and report["spread_ratio"] < 1e-6 and not report["passed"]
    nan = logits.copy()
    nan[3, 1] = np.nan
    report = _compare(monkeypatch, _discrete(logits), _discrete(nan))
    assert not report["passed"] and report["failed_checks"][0] == "non-finite logits"
    assert _compare(monkeypatch, _discrete(logits), _discrete(logits))["passed"]
    with pytest.raises(ValueError, match="at least one"):
        parity.compare("model.tflite", [])


# ---------------------------------------------------------------------------------------------------------
# Arguments, checked before anything is read or written.


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_examples": 0}, "num_examples must be an integer of at least 2"),
        ({"num_examples": 1}, "num_examples must be an integer of at least 2"),
        ({"version": -3}, "version must be a positive integer"),
        ({"version": 0}, "version must be a positive integer"),
        ({"model_name": "a/b"}, "model_name must be a plain folder name"),
        ({"model_name": ""}, "model_name must be a plain folder name"),
        ({"formats": []}, "No format to export"),
        ({"formats": ["onnx"]}, "Unknown format 'onnx'"),
        ({"quantizations": ["int4"]}, "Unknown quantization 'int4'"),
        ({"formats": ["tflite"], "quantizations": []}, "needs at least one quantization"),
        ({"max_sensors": 0}, "max_sensors must be a positive integer"),
        ({"int8_float_ops": ["BATCH_MATMUL", "matmul"]}, "int8_float_ops names TFLite op types"),
    ],
)
def test_invalid_arguments_create_nothing(tmp_path, kwargs, match):
    output = tmp_path / "new" / "export"
    with pytest.raises(ValueError, match=match):
        export_policy(str(tmp_path / "no_training_folder"), str(output), **kwargs)
    assert not (tmp_path / "new").exists()


def test_output_dir_and_existing_version_are_checked(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        check_export_arguments(str(tmp_path / "file"))
    (tmp_path / "out" / "saved_model" / "policy" / "2").mkdir(parents=True)
    with pytest.raises(ValueError, match="immutable"):
        check_export_arguments(str(tmp_path / "out"), version=2)
    check_export_arguments(str(tmp_path / "out"), version=3)  # free
    check_export_arguments(str(tmp_path / "out"), formats=["tflite"], version=2)  # no SavedModel written


@pytest.fixture(scope="module")
def cnn_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("cnn"))
    write_example_policy_folder(root, "cnn")
    return root


def test_a_failed_export_leaves_nothing_and_restores_what_it_replaced(cnn_root, tmp_path, monkeypatch):
    fresh = tmp_path / "a" / "b" / "export"

    def broken_converter(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(exporter.tflite, "convert_function", broken_converter)
    with pytest.raises(OSError, match="No space"):
        export_policy(cnn_root, str(fresh), quantizations=["float32"], num_examples=4)
    assert not (tmp_path / "a").exists()  # the folders it created are gone too
    monkeypatch.undo()

    output = tmp_path / "existing"
    export_policy(cnn_root, str(output), quantizations=["float32"], num_examples=4)
    before = file_hashes(output)
    assert "saved_model/policy/1/saved_model.pb" in before and "tflite/policy_float32.tflite" in before

    write_models_config = exporter.saved_model.write_models_config

    def broken_config(serving_dir, *args, **kwargs):  # fails after the new files were moved into place
        if ".sit-export-" in serving_dir:  # the staged SavedModel's own config: fine
            return write_models_config(serving_dir, *args, **kwargs)
        raise OSError("Input/output error")

    monkeypatch.setattr(exporter.saved_model, "write_models_config", broken_config)
    with pytest.raises(OSError, match="Input/output"):
        export_policy(cnn_root, str(output), quantizations=["float32"], num_examples=6)
    assert file_hashes(output) == before  # version 2 removed, the replaced TFLite files and report restored
    assert sorted(os.listdir(output)) == [".lock", "export_report.json", "saved_model", "tflite"]


def _run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_an_interrupt_that_a_library_turned_into_another_error_is_still_reported_as_interrupted(
    cnn_root, tmp_path, monkeypatch, capsys
):
    """The TFLite converter can catch the KeyboardInterrupt of an interrupted calibration (the representative
    data stops between two examples) and raise a ValueError of its own: the export must still say it was
    interrupted, with the Ctrl-C status."""

    def interrupted_inside_the_converter(*args, **kwargs):
        interruption.INTERRUPTED.set()  # what the SIGTERM handler does
        raise ValueError("SignatureDef signature_key is None and model has 0 Signatures.")

    monkeypatch.setattr(cli, "export_policy", interrupted_inside_the_converter)
    output = str(tmp_path / "out")
    status, _, err = _run_cli(capsys, "--root_dir", cnn_root, "--output_dir", output)
    assert status == cli.INTERRUPTED
    assert err.strip() == f"sit-export: interrupted; nothing was exported to {output}."
    monkeypatch.setattr(cli, "export_policy", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad input")))
    status, _, err = _run_cli(capsys, "--root_dir", cnn_root, "--output_dir", output)
    assert (status, err.strip()) == (cli.EXPORT_FAILED, "sit-export: bad input")  # the flag was cleared


def test_cli_refuses_mistakes_in_one_sentence_before_writing(cnn_root, tmp_path, capsys):
    output = str(tmp_path / "out")
    cases = [
        (["--num_examples", "0"], "num_examples must be an integer of at least 2"),
        (["--version", "-3"], "version must be a positive integer"),
        (["--quantizations", "float32,int4"], "Unknown quantization 'int4'"),
        (["--num_examples", "many"], "num_examples"),
        (["--int8_float_ops", "SOFTMAX,Softmax"], "'Softmax' is not one"),
        (["--no_such_flag"], "no_such_flag"),
        (["extra_argument"], "unexpected arguments 'extra_argument'"),
    ]
    for extra, match in cases:
        status, _, err = _run_cli(capsys, "--root_dir", cnn_root, "--output_dir", output, *extra)
        assert status == cli.USAGE_ERROR and match in err, (extra, err)
        assert err.startswith("sit-export: ") and err.count("\n") == 1 and "Traceback" not in err
        assert not os.path.exists(output)
    status, _, err = _run_cli(capsys, "--root_dir", str(tmp_path / "nothing"))
    assert status == cli.USAGE_ERROR and "no policy_network.json" in err
    assert not (tmp_path / "nothing").exists()
    status, _, err = _run_cli(capsys)
    assert status == cli.USAGE_ERROR and "--root_dir" in err


def test_cli_fails_on_parity_unless_allowed(tmp_path, capsys):
    """The untrained SAC actor's int8 model returns a constant action: the export fails, naming it."""
    root = str(tmp_path / "sac")
    write_example_policy_folder(root, "sac_state")
    argv = ["--root_dir", root, "--formats", "tflite", "--quantizations", "float32,int8"]
    argv += ["--num_examples", "16"]
    status, out, err = _run_cli(capsys, *argv)
    assert status == cli.EXPORT_FAILED and "Traceback" not in err and err.count("\n") == 1
    assert "tflite_int8 (policy_int8.tflite)" in err and "collapse" in err and "tflite_float32" not in err
    assert not os.path.exists(os.path.join(root, "export")) and out == ""
    with pytest.raises(ParityError) as raised:
        export_policy(
            root, str(tmp_path / "lib"), formats=["tflite"], quantizations=["int8"], num_examples=16
        )
    assert list(raised.value.failures) == ["tflite_int8"] and not (tmp_path / "lib").exists()

    status, out, err = _run_cli(capsys, *argv, "--allow_parity_failure")
    assert status == 0 and err.startswith("WARNING: tflite_int8") and "do not deploy it" in err
    with open(os.path.join(root, "export", "export_report.json")) as f:
        report = json.load(f)
    assert report["parity_failures"] == ["tflite_int8"]
    assert report["models"]["tflite_float32"]["parity"]["passed"]
    with open(os.path.join(root, "export", "tflite", "policy_int8.json")) as f:
        recorded = json.load(f)["export"]["parity"]
    assert recorded["passed"] is False and recorded["failure_allowed"] is True


def test_sit_export_process_prints_one_sentence(tmp_path):
    """The installed command: a user's mistake is one line on stderr, status 2, no traceback."""
    sit_export = os.path.join(os.path.dirname(sys.executable), "sit-export")
    result = subprocess.run(
        [sit_export, "--root_dir", str(tmp_path), "--num_examples", "0"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("sit-export: num_examples must be an integer")
    assert os.listdir(tmp_path) == []


def test_damaged_training_files_are_named(cnn_root, tmp_path, capsys):
    root = tmp_path / "damaged"
    shutil.copytree(cnn_root, root)
    description = root / "policy_network.json"
    text = description.read_text()
    description.write_text(text[: len(text) // 2])
    status, _, err = _run_cli(capsys, "--root_dir", str(root))
    assert status == cli.EXPORT_FAILED and f"{str(description)!r} is damaged" in err and err.count("\n") == 1
    description.write_text(text)
    for index in (root / "checkpoints").glob("*.index"):
        index.write_bytes(b"truncated")
    status, _, err = _run_cli(capsys, "--root_dir", str(root))
    assert status == cli.EXPORT_FAILED and f"{str(root / 'checkpoints')!r} cannot be read" in err
    assert not (root / "export").exists()
