"""A folder holds one kind of run: sit-train and sit-train-supervised refuse each other's in one sentence."""

from __future__ import annotations

import json
import os
import subprocess

import gin
import pytest
from run_folders import TINY_PPO, file_hashes, run_in_process

from sit_keras import run_kind
from sit_keras.supervised import train as supervised_train


@pytest.fixture(autouse=True)
def _no_gin_bindings_left_behind():
    """The in-process command-line tests bind gin (e.g. ``train_supervised.dataset``): cleared after each."""
    yield
    gin.clear_config()


def _sit_train(root_dir: str) -> subprocess.CompletedProcess:
    bindings = [a for b in TINY_PPO for a in ("--gin_bindings", b)]
    return run_in_process("sit-train", "--root_dir", root_dir, *bindings)


@pytest.mark.parametrize("marker", ["record", "files of an older folder"])
def test_sit_train_refuses_a_supervised_folder(tmp_path, marker):
    root_dir = tmp_path / "supervised"
    (root_dir / "checkpoints").mkdir(parents=True)
    if marker == "record":
        (root_dir / run_kind.KIND_FILE).write_text(json.dumps({"kind": run_kind.SUPERVISED}))
    else:
        (root_dir / "result.json").write_text("{}")
    before = file_hashes(str(root_dir))
    run = _sit_train(str(root_dir))
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr.splitlines() == [
        f"sit-train: {root_dir} holds a supervised run (written by sit-train-supervised); sit-train writes "
        "reinforcement learning runs: use another folder."
    ]
    assert file_hashes(str(root_dir)) == before


def test_an_rl_run_records_its_kind_and_supervised_training_refuses_it(tmp_path, capsys):
    root_dir = str(tmp_path / "rl")
    assert _sit_train(root_dir).returncode == 0
    assert run_kind.kind_of(root_dir) == run_kind.RL
    with open(os.path.join(root_dir, run_kind.KIND_FILE)) as f:
        assert json.load(f) == {"kind": run_kind.RL}
    before = file_hashes(root_dir)
    assert supervised_train.main([f"--root_dir={root_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sit-train-supervised: {root_dir} holds a reinforcement learning run (written by ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert file_hashes(root_dir) == before


def test_a_missing_data_set_is_one_sentence(tmp_path, capsys):
    argv = [f"--root_dir={tmp_path / 'run'}", f"--data_dir={tmp_path / 'no_data'}",
            "--gin_bindings=train_supervised.dataset = 'mnist'"]  # fmt: skip
    assert supervised_train.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sit-train-supervised: ") and "mnist" in err and "Traceback" not in err
