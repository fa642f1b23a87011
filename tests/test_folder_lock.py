"""Two writers on one folder: a second sit-train or sit-export is refused in one sentence, nothing is lost.

The first writer runs in its own process (a lock holder that sleeps, as a
long run would); the second is the real console script, as a user runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from run_folders import TINY_PPO, file_hashes, run_in_process

from sit_keras import folder_lock
from sit_keras.export import exporter
from sit_keras.export.random_policy import write_example_policy_folder

HOLDER = """
import sys, time
from sit_keras import folder_lock
with folder_lock.exclusive(sys.argv[1], sys.argv[2]):
    print("holding", flush=True)
    time.sleep(600)
"""


@contextlib.contextmanager
def _holding(folder: str, command: str) -> Iterator[subprocess.Popen]:
    """A process that holds ``folder``'s lock until the block ends (then it is killed)."""
    command_line = [sys.executable, "-c", HOLDER, folder, command]
    with subprocess.Popen(command_line, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout.readline().strip() == "holding"
            yield holder
        finally:
            holder.kill()


def _run(*command: str) -> subprocess.CompletedProcess:
    """A console script in this process (``run_folders.run_in_process``); the lock's holder is another."""
    return run_in_process(*command)


def test_the_lock_records_its_holder_and_a_clean_end_clears_it(tmp_path):
    with folder_lock.exclusive(str(tmp_path), "sit-train"):
        with open(tmp_path / folder_lock.LOCK_FILE) as f:
            record = json.load(f)
        assert record["command"] == "sit-train" and record["pid"] == os.getpid()
        assert {"host", "started"} <= set(record)
    assert (tmp_path / folder_lock.LOCK_FILE).read_text() == ""
    said = []
    with folder_lock.exclusive(str(tmp_path), "sit-train", took_over=said.append):
        assert said == []  # a clean end left nothing to take over
        assert json.loads((tmp_path / folder_lock.LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_second_writer_in_this_process_or_another_is_refused(tmp_path):
    with _holding(str(tmp_path), "sit-train") as holder:
        with pytest.raises(folder_lock.FolderInUse) as refused, contextlib.ExitStack() as stack:
            stack.enter_context(folder_lock.exclusive(str(tmp_path), "sit-export"))
    message = str(refused.value)
    assert message.startswith(f"{tmp_path} is in use by sit-train (pid {holder.pid}, host ")
    assert message.endswith("use another folder.") and "\n" not in message


def test_a_killed_holder_is_taken_over_with_a_message(tmp_path):
    with _holding(str(tmp_path), "sit-train") as holder:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    said = []
    with folder_lock.exclusive(str(tmp_path), "sit-train", took_over=said.append):
        assert json.loads((tmp_path / folder_lock.LOCK_FILE).read_text())["pid"] == os.getpid()
    assert len(said) == 1 and f"pid {holder.pid}" in said[0] and said[0].startswith(f"took over {tmp_path}")


def test_sit_train_refuses_a_run_folder_in_use_and_changes_nothing(tmp_path):
    root_dir = str(tmp_path / "run")
    flags = [arg for binding in TINY_PPO for arg in ("--gin_bindings", binding)]
    first = _run("sit-train", "--root_dir", root_dir, *flags)
    assert first.returncode == 0, first.stderr[-2000:]
    before = file_hashes(root_dir)
    with _holding(root_dir, "sit-train"):
        again = _run(
            "sit-train", "--root_dir", root_dir, *flags, "--gin_bindings", "train_eval.total_env_steps = 64"
        )
    assert again.returncode != 0 and "Traceback" not in again.stderr
    assert (
        again.stderr.strip()
        .splitlines()[-1]
        .startswith(f"sit-train: {root_dir} is in use by sit-train (pid ")
    )
    assert file_hashes(root_dir) == before


@pytest.fixture(scope="module")
def cnn_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("cnn"))
    write_example_policy_folder(root, "cnn")
    return root


def test_sit_export_refuses_an_output_folder_in_use(cnn_root, tmp_path):
    output = tmp_path / "export"
    output.mkdir()
    with _holding(str(output), "sit-export") as holder:
        result = _run(
            "sit-export", f"--root_dir={cnn_root}", f"--output_dir={output}", "--formats=saved_model",
            "--num_examples=4",
        )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"sit-export: {output} is in use by sit-export (pid {holder.pid}")
    assert sorted(os.listdir(output)) == [folder_lock.LOCK_FILE]


def test_an_existing_version_is_replaced_only_with_overwrite(cnn_root, tmp_path):
    output = str(tmp_path / "export")
    first = exporter.export_policy(cnn_root, output, formats=["saved_model"], num_examples=4)
    assert first["models"]["saved_model"]["path"].endswith(os.path.join("policy", "1"))
    second = exporter.export_policy(cnn_root, output, formats=["saved_model"], num_examples=4)
    assert second["models"]["saved_model"]["path"].endswith(os.path.join("policy", "2"))  # the next one
    version_1 = os.path.join(output, "saved_model", "policy", "1")
    stamp = os.path.getmtime(os.path.join(version_1, "saved_model.pb"))
    with pytest.raises(ValueError, match="exists; TF Serving versions are immutable.*--overwrite"):
        exporter.export_policy(cnn_root, output, formats=["saved_model"], num_examples=4, version=1)
    assert os.path.getmtime(os.path.join(version_1, "saved_model.pb")) == stamp
    time.sleep(0.01)
    exporter.export_policy(
        cnn_root, output, formats=["saved_model"], num_examples=4, version=1, overwrite=True
    )
    assert os.path.getmtime(os.path.join(version_1, "saved_model.pb")) != stamp
    assert sorted(os.listdir(os.path.join(output, "saved_model", "policy"))) == ["1", "2"]
