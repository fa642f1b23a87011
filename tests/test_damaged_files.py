"""Damaged files are reported with their path, never silently used or replaced.

Checkpoints (truncated or missing data, a garbled or missing index), an
exported TFLite file changed after export, the staging copy of an export that
was killed, and an export stopped by SIGTERM.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from run_folders import TINY_PPO, file_hashes, run_in_process

from sit_keras.agents.training import checkpoints
from sit_keras.export import cli, exporter, interruption, runtime, serving_client
from sit_keras.export.random_policy import write_example_policy_folder
from sit_keras.export.rollouts import Example, representative_data

BIN = os.path.dirname(sys.executable)


def _run(*command: str) -> subprocess.CompletedProcess:
    """A console script in this process (``run_folders.run_in_process``): the damage is the subject here."""
    return run_in_process(*command)


def _train(root_dir: str, total_env_steps: int, *more: str) -> subprocess.CompletedProcess:
    bindings = [
        *TINY_PPO,
        "train_eval.progress = False",
        f"train_eval.total_env_steps = {total_env_steps}",
        *more,
    ]
    return _run("sit-train", "--root_dir", root_dir, *[a for b in bindings for a in ("--gin_bindings", b)])


def _one_sentence(result: subprocess.CompletedProcess, program: str) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{program}: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    """A run of 32 steps with checkpoints at 16 and 32 (the newest two are kept)."""
    root_dir = str(tmp_path_factory.mktemp("trained") / "run")
    result = _train(root_dir, 32, "train_eval.checkpoint_interval = 16")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(_checkpoints(root_dir)) == 2
    return root_dir


def _checkpoints(root_dir: str) -> list[str]:
    """The training checkpoints' prefixes, newest first."""
    prefixes = [p[: -len(".index")] for p in glob.glob(os.path.join(root_dir, "checkpoints", "ckpt-*.index"))]
    return sorted(prefixes, key=lambda p: int(p.rsplit("-", 1)[1]), reverse=True)


def _data_file(prefix: str) -> str:
    (path,) = glob.glob(prefix + ".data-*")
    return path


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(100)


NEWEST_DAMAGED = {
    "truncated data": lambda newest: _truncate(_data_file(newest)),
    "missing data": lambda newest: os.remove(_data_file(newest)),
    "missing index file": lambda newest: os.remove(newest + ".index"),
}


@pytest.mark.parametrize("damage", NEWEST_DAMAGED)
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before(
    trained, tmp_path, damage
):
    root_dir = str(tmp_path / "run")
    shutil.copytree(trained, root_dir)
    newest, older = _checkpoints(trained)
    newest, older = (os.path.join(root_dir, "checkpoints", os.path.basename(p)) for p in (newest, older))
    NEWEST_DAMAGED[damage](newest)
    kept = {p: file_hashes(os.path.dirname(p))[os.path.basename(p)] for p in glob.glob(newest + ".*")}
    result = _train(root_dir, 48)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    aside = os.path.join(root_dir, "checkpoints", "damaged")
    if damage != "missing index file":  # nothing of it is left to move
        assert (
            f"The checkpoint {newest} cannot be read (" in result.stdout
            and f"moved to {aside}." in result.stdout
        )
    assert f"Resuming from {older}, the newest checkpoint that can be read." in result.stdout
    assert "at 16 environment steps." in result.stdout  # the older checkpoint's step, not 0
    for path, digest in kept.items():  # the damaged files are kept as they were, beside
        assert file_hashes(aside)[os.path.basename(path)] == digest


def test_a_damaged_index_is_set_aside_and_the_run_resumes_from_its_newest_checkpoint(trained, tmp_path):
    for damage in ("garbled", "missing"):
        root_dir = str(tmp_path / damage)
        shutil.copytree(trained, root_dir)
        index = os.path.join(root_dir, "checkpoints", "checkpoint")
        if damage == "garbled":
            _write(index, "garbage{{")
        else:
            os.remove(index)
        result = _train(root_dir, 48)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
        newest = os.path.join(root_dir, "checkpoints", os.path.basename(_checkpoints(trained)[0]))
        assert f"Resuming from {newest}, the newest checkpoint that can be read." in result.stdout
        assert "at 32 environment steps." in result.stdout
        if damage == "garbled":
            with open(os.path.join(root_dir, "checkpoints", "damaged", "checkpoint")) as f:
                assert f.read() == "garbage{{"


def test_a_run_whose_checkpoints_are_all_damaged_is_refused_and_nothing_changes(trained, tmp_path):
    root_dir = str(tmp_path / "run")
    shutil.copytree(trained, root_dir)
    newest, older = _checkpoints(root_dir)
    _truncate(_data_file(newest))
    os.remove(_data_file(older))
    before = file_hashes(root_dir)
    message = _one_sentence(_train(root_dir, 48), "sit-train")
    assert f"The checkpoint {newest} cannot be read (" in message and "nor can the older ones" in message
    assert "nothing was changed" in message
    assert file_hashes(root_dir) == before  # no new checkpoint, config or events: not restarted from step 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("policy"))
    write_example_policy_folder(root, "cnn")
    exporter.export_policy(
        root, os.path.join(root, "export"), formats=["tflite"], quantizations=["float32"], num_examples=8
    )
    return os.path.join(root, "export", "tflite", "policy_float32.tflite")


def test_a_changed_tflite_file_is_refused_by_the_runtime_and_sit_eval(exported, tmp_path):
    runtime.TFLitePolicy(exported)  # as exported: loads
    flipped = str(tmp_path / "policy_float32.tflite")
    shutil.copy(exported, flipped)
    shutil.copy(runtime.metadata_path(exported), runtime.metadata_path(flipped))
    with open(flipped, "r+b") as f:  # one bit of a weight, far from the header: still a valid model
        f.seek(os.path.getsize(flipped) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))
    with pytest.raises(runtime.ModelFileError, match="does not match the SHA-256 recorded in"):
        runtime.TFLitePolicy(flipped)
    message = _one_sentence(_run("sit-eval", f"--tflite={flipped}", "--num_episodes=1"), "sit-eval")
    assert flipped in message and "SHA-256" in message


def test_a_killed_exports_staging_copy_is_refused_and_cleared_by_the_next_export(exported, tmp_path):
    output = tmp_path / "export"
    staged = output / f"{runtime.STAGING_PREFIX}killed" / "tflite"
    staged.mkdir(parents=True)
    shutil.copy(exported, staged / "policy_float32.tflite")
    shutil.copy(runtime.metadata_path(exported), staged / "policy_float32.json")
    with pytest.raises(runtime.ModelFileError, match="staging folder of an export that did not finish"):
        runtime.TFLitePolicy(str(staged / "policy_float32.tflite"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(exported)))
    result = _run(
        "sit-export", f"--root_dir={root}", f"--output_dir={output}", "--formats=tflite",
        "--quantizations=float32", "--num_examples=4",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"removed {output}/{runtime.STAGING_PREFIX}killed, the staging folder" in result.stderr
    assert not glob.glob(str(output / f"{runtime.STAGING_PREFIX}*"))


def test_sigterm_during_an_export_leaves_nothing(exported, tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(exported)))
    output = tmp_path / "export"
    command = [
        os.path.join(BIN, "sit-export"), f"--root_dir={root}", f"--output_dir={output}", "--formats=tflite",
        "--quantizations=float32,float16,int8", "--num_examples=64", "--allow_parity_failure",
    ]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as export:
        deadline = time.time() + 300
        while time.time() < deadline and export.poll() is None:
            if glob.glob(str(output / f"{runtime.STAGING_PREFIX}*" / "tflite" / "*.tflite")):
                break
            time.sleep(0.05)
        assert export.poll() is None, "the export ended before a model was staged"
        export.send_signal(signal.SIGTERM)
        try:
            _, stderr = export.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            export.kill()
            pytest.fail("sit-export did not stop within 120 s of its SIGTERM")
    assert export.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == f"sit-export: interrupted; nothing was exported to {output}."
    assert not output.exists()  # the folder, its staging copy and its lock: this export created them all


def test_an_export_asked_to_stop_stops_at_its_next_safe_point_and_leaves_nothing(exported, tmp_path):
    """The signal handler only sets the flag (interruption): the export stops at its first check, and
    nothing is left behind."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(exported)))
    output = tmp_path / "export"
    interruption.INTERRUPTED.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            exporter.export_policy(
                root, str(output), formats=["tflite"], quantizations=["float32"], num_examples=8
            )
    finally:
        interruption.INTERRUPTED.clear()
    assert not output.exists()


def test_the_first_signal_asks_the_export_to_stop_and_a_second_stops_it_at_once():
    """Raising KeyboardInterrupt from the handler once left TensorFlow's GroupLock taken and the export
    hung; the first signal only sets the flag, which the calibration data checks between examples."""
    examples = [Example({"observation": np.zeros((1, 2))}, {}, "none", step) for step in range(3)]
    inputs = representative_data(examples)()
    try:
        assert next(inputs)["observation"].shape == (1, 2)
        cli._interrupt(signal.SIGTERM, None)  # returns: no exception inside whatever code runs
        assert interruption.INTERRUPTED.is_set()
        with pytest.raises(KeyboardInterrupt):
            next(inputs)
        with pytest.raises(KeyboardInterrupt):
            cli._interrupt(signal.SIGINT, None)
    finally:
        interruption.INTERRUPTED.clear()


def test_a_flipped_bit_runs_only_when_the_check_is_skipped_explicitly(exported, tmp_path):
    flipped = str(tmp_path / "policy_float32.tflite")
    shutil.copy(exported, flipped)
    shutil.copy(runtime.metadata_path(exported), runtime.metadata_path(flipped))
    with open(flipped, "r+b") as f:
        f.seek(os.path.getsize(flipped) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))
    runtime.TFLitePolicy(flipped, verify_checksum=False)  # loads: the user asked for it
    result = _run("sit-eval", f"--tflite={flipped}", "--num_episodes=1", "--num_envs=1", "--skip_checksum")
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_changed_saved_model_is_refused_by_the_serving_client(tmp_path):
    root = str(tmp_path / "policy")
    write_example_policy_folder(root, "cnn")
    report = exporter.export_policy(root, os.path.join(root, "export"), "cnn", ["saved_model"])
    version_dir = report["models"]["saved_model"]["path"]
    recorded = serving_client.read_metadata(version_dir)["export"]["files_sha256"]
    assert "saved_model.pb" in recorded and any(name.startswith("variables") for name in recorded)
    (data,) = glob.glob(os.path.join(version_dir, "variables", "variables.data-*"))
    with open(data, "r+b") as f:
        f.seek(os.path.getsize(data) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))
    changed = rf"'{data}' changed since the export recorded its files"
    with pytest.raises(runtime.ModelFileError, match=changed):
        serving_client.read_metadata(version_dir)
    with pytest.raises(runtime.ModelFileError, match="changed since the export"):
        image = np.zeros((1, 14, 14, 3), np.uint8)
        serving_client.rest_predict_body({"observation": image}, metadata=version_dir)
    serving_client.read_metadata(version_dir, verify_checksums=False)  # skipped explicitly
    os.remove(os.path.join(version_dir, "fingerprint.pb"))
    with pytest.raises(runtime.ModelFileError, match="fingerprint.pb' is missing since"):
        serving_client.read_metadata(version_dir)


# An export killed (SIGKILL) just before it moves its models into place.
KILLED_BEFORE_COMMIT = r"""
import os, signal, sys
from sit_keras.export import exporter

exporter._Transaction.commit = lambda self: os.kill(os.getpid(), signal.SIGKILL)
exporter.export_policy(sys.argv[1], sys.argv[2], "policy", ["tflite", "saved_model"],
                       quantizations=["float32"], num_examples=4)
"""


def test_models_of_an_export_that_did_not_finish_are_refused_wherever_they_are_moved(exported, tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(exported)))
    output = tmp_path / "export"
    killed = subprocess.run([sys.executable, "-c", KILLED_BEFORE_COMMIT, root, str(output)], timeout=600)
    assert killed.returncode == -signal.SIGKILL
    (staging,) = glob.glob(str(output / f"{runtime.STAGING_PREFIX}*"))
    moved = tmp_path / "copied"  # out of the staging folder: its name no longer gives it away
    shutil.move(staging, moved)
    model = moved / "tflite" / "policy_float32.tflite"
    unfinished = r"\.json\.staged' was never given its name: the export that wrote it did not finish"
    with pytest.raises(runtime.ModelFileError, match="policy_float32" + unfinished):
        runtime.TFLitePolicy(str(model))
    (version_dir,) = glob.glob(str(moved / "saved_model" / "policy" / "*"))
    with pytest.raises(runtime.ModelFileError, match="sit_metadata" + unfinished):
        serving_client.read_metadata(version_dir)
    message = _one_sentence(_run("sit-eval", f"--tflite={model}", "--num_episodes=1"), "sit-eval")
    assert "the export that wrote it did not finish" in message


def test_an_index_naming_a_missing_checkpoint_at_restore_time_names_the_folder(tmp_path):
    """Another process rewrote the index after ``check_readable``: the sentence names the folder, not None."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    tf.compat.v1.train.update_checkpoint_state(str(folder), "ckpt-7")  # no ckpt-7 files
    with pytest.raises(ValueError) as info:
        checkpoints._restore(str(folder), "env steps", counter=tf.Variable(0))
    message = str(info.value)
    assert message.startswith(f"The checkpoint index of {folder} cannot be read (") and "None" not in message


def test_a_run_folder_named_relative_to_the_working_directory_keeps_its_index(trained, tmp_path, monkeypatch):
    # TensorFlow joins the index's names to a relative folder; joining them again named checkpoints
    # that do not exist, set them "aside" and rewrote the index relative to the working directory.
    shutil.copytree(trained, tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    folder = os.path.join("run", "checkpoints")
    saved, _ = checkpoints._saved(folder)
    assert saved == [os.path.abspath(p) for p in _checkpoints("run")]
    index = os.path.join(folder, "checkpoint")
    with open(index) as f:
        before = f.read()
    checkpoints.check_readable("run")
    with open(index) as f:
        assert f.read() == before
    assert not os.path.exists(os.path.join(folder, "damaged"))


def test_a_damaged_checkpoint_in_a_relative_run_folder_leaves_an_index_that_resolves(
    trained, tmp_path, monkeypatch
):
    shutil.copytree(trained, tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    newest, older = _checkpoints("run")
    _truncate(_data_file(newest))
    checkpoints.check_readable("run")
    assert tf.train.latest_checkpoint(os.path.join("run", "checkpoints")) == older
    tf.train.load_checkpoint(older)  # the index names a checkpoint that is there
