"""benchmarks/resume_point.py: a run's newest checkpoint and logs survive a fresh machine, and only those."""

from __future__ import annotations

import importlib.util
import json
import os
import tarfile
from pathlib import Path

import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("resume_point", ROOT / "benchmarks" / "resume_point.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_folder(path: Path, saves: int = 3) -> Path:
    """A training folder as the trainers leave it: 3 kept checkpoints, logs, records, a lock."""
    env_steps, weights = tf.Variable(0, dtype=tf.int64), tf.Variable(tf.zeros(4))
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(env_steps=env_steps, weights=weights), str(path / "checkpoints"), max_to_keep=3
    )
    for save in range(1, saves + 1):
        env_steps.assign(1000 * save)
        weights.assign(tf.fill([4], float(save)))
        manager.save(checkpoint_number=16 * save)
    for folder, name, text in [
        ("collect", "events.out.tfevents.1.vm", "curve"),
        ("train", "events.out.tfevents.2.vm", "diagnostics"),
        (".", "config.gin", "ppo.num_epochs = 4"),
        (".", "run_settings.json", "{}"),
        (".", ".lock", "1234"),
    ]:
        (path / folder).mkdir(parents=True, exist_ok=True)
        (path / folder / name).write_text(text)
    return path


def test_a_saved_run_restores_on_a_fresh_folder_at_its_newest_checkpoint(tmp_path, capsys):
    bench = _load()
    run = _run_folder(tmp_path / "runs" / "table4" / "sit_seed0")
    store = tmp_path / "store"
    command = "python benchmarks/minigrid_rotation.py --seeds 0 --root 'runs/table4'"
    assert bench.main(["save", "--run_dir", str(run), "--command", command, "--store", str(store)]) == 0
    name = bench.archive_name(str(run))
    assert capsys.readouterr().out.strip().endswith(f"{name}.tar.xz: ckpt-48 at 3000 env steps.")
    with tarfile.open(store / f"{name}.tar.xz") as archive:
        names = set(archive.getnames())
    assert {"config.gin", "run_settings.json", "collect/events.out.tfevents.1.vm", "checkpoints/checkpoint",
            "checkpoints/ckpt-48.index"} <= names  # fmt: skip
    assert not any(n.startswith(("train", "checkpoints/ckpt-16", "checkpoints/ckpt-32")) for n in names)
    assert ".lock" not in names
    record = json.loads((store / "index.json").read_text())[name]
    assert record["command"] == command and (record["env_steps"], record["checkpoint"]) == (3000, "ckpt-48")

    fresh = tmp_path / "fresh" / "sit_seed0"
    argv = ["restore", "--name", name, "--store", str(store), "--run_dir", str(fresh)]
    assert bench.main(argv) == 0
    assert capsys.readouterr().out == f"Restored {fresh} at 3000 env steps; go on with:\n{command}\n"
    weights = tf.Variable(tf.zeros(4))
    tf.train.Checkpoint(weights=weights).restore(tf.train.latest_checkpoint(str(fresh / "checkpoints")))
    assert weights.numpy().tolist() == [3.0] * 4  # the newest weights, named by the restored index
    assert (fresh / "collect" / "events.out.tfevents.1.vm").read_text() == "curve"
    assert not (fresh / ".lock").exists() and not os.path.exists(f"{fresh}.partial")


def test_restore_never_writes_over_a_folder_and_names_a_damaged_archive(tmp_path, capsys):
    bench = _load()
    run = _run_folder(tmp_path / "runs" / "part")
    store = tmp_path / "store"
    assert bench.main(["save", "--run_dir", str(run), "--command", "go on", "--store", str(store)]) == 0
    capsys.readouterr()
    assert bench.main(["restore", "--name", "part", "--store", str(store)]) == 1  # its own folder exists
    assert capsys.readouterr().err == f"{str(run)!r} exists; remove it or give --run_dir a new folder.\n"
    archive = store / "part.tar.xz"
    archive.write_bytes(archive.read_bytes()[:200])
    target = tmp_path / "fresh"
    assert bench.main(["restore", "--name", "part", "--store", str(store), "--run_dir", str(target)]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"The archive {archive} cannot be unpacked (") and len(error.splitlines()) == 1
    assert not target.exists() and not os.path.exists(f"{target}.partial")


def test_the_log_travels_with_its_run_and_is_never_written_over(tmp_path, capsys, monkeypatch):
    bench = _load()
    monkeypatch.chdir(tmp_path)
    run = _run_folder(Path("runs") / "part")
    log = Path("runs") / "part.log"
    log.write_text("2026-12-01T10:00:00Z start at abc1234\n 10%| 1000/3000 [00:09<00:18]")
    store = tmp_path / "store"
    argv = ["save", "--run_dir", str(run), "--log", str(log), "--command", "go on", "--store", str(store)]
    assert bench.main(argv) == 0
    assert json.loads((store / "index.json").read_text())["part"]["log"] == "runs/part.log"
    text = log.read_text()
    capsys.readouterr()
    assert bench.main(["restore", "--name", "part", "--store", str(store), "--run_dir", "fresh"]) == 1
    assert capsys.readouterr().err == "The run's log 'runs/part.log' exists; move it away first.\n"
    assert not Path("fresh").exists()
    log.unlink()
    assert bench.main(["restore", "--name", "part", "--store", str(store), "--run_dir", "fresh"]) == 0
    assert capsys.readouterr().out.startswith("Restored fresh and its log runs/part.log at 3000 env steps;")
    assert log.read_text() == text and not (Path("fresh") / bench.RUN_LOG).exists()
    argv = ["save", "--run_dir", "fresh", "--log", "no.log", "--command", "x", "--store", str(store)]
    assert bench.main(argv) == 1
    assert capsys.readouterr().err == "--log 'no.log' is not a file.\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["save", "--command", "x"], "save needs --run_dir."),
        (["restore"], "restore needs --name."),
        (["save", "--run_dir", "no/such", "--command", "x"], "--run_dir 'no/such' is not a folder."),
        (["restore", "--name", "nothing"], "--name 'nothing' is not in {store}/index.json (it holds: none)."),
    ],
)
def test_a_mistake_is_one_sentence(argv, message, tmp_path, capsys):
    status = _load().main([*argv, "--store", str(tmp_path)])
    assert status in (1, 2)
    assert capsys.readouterr().err == message.format(store=tmp_path) + "\n"


def test_a_folder_without_a_checkpoint_is_not_saved(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    argv = ["save", "--run_dir", str(tmp_path / "run"), "--command", "x", "--store", str(tmp_path / "store")]
    assert _load().main(argv) == 1
    assert (
        capsys.readouterr().err
        == f"--run_dir {str(tmp_path / 'run')!r} holds no checkpoint in checkpoints/.\n"
    )
    assert not (tmp_path / "store").exists()


def test_the_committed_resume_points_hold_the_checkpoint_their_index_names():
    store = ROOT / "benchmarks" / "resume"
    index = json.loads((store / "index.json").read_text()) if (store / "index.json").exists() else {}
    for name, record in index.items():
        assert record["command"].startswith("python benchmarks/") and record["env_steps"] > 0, name
        assert _load().archive_name(record["run_dir"]) == name
        with tarfile.open(store / f"{name}.tar.xz") as archive:
            names = set(archive.getnames())
        assert {f"checkpoints/{record['checkpoint']}.index", "checkpoints/checkpoint", "config.gin"} <= names
