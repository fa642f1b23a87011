"""A long training run's resume point: its newest checkpoint and logs in one archive, and back.

A working session lasts a few hours and the next one may start on a fresh
machine without ``runs/``, while a Table 4 part trains for longer than a
session. ``save`` packs what the run needs to go on where it stopped into
``<store>/<name>.tar.xz``: the newest checkpoint of ``checkpoints/`` (with a
``checkpoint`` index naming only it), the ``collect/`` logs that
``training_curve.py`` reads, and the run's records (``config.gin``,
``run_settings.json``, ...), but not ``train/``, whose learner diagnostics
grow to tens of MB, and with ``--log`` the log the run's sessions appended to
(``benchmarks/run_log.py`` reads each process's time from it). It records the
archive in ``<store>/index.json`` with the command that goes on with it.
``restore`` unpacks an archive into the folder it came from (or ``--run_dir``)
and its log to where it was, never over a folder or log that exists, and prints
that command.

Usage::

    python benchmarks/resume_point.py save --run_dir runs/table4_lavacrossing/sit_small_seed0 \\
        --log runs/sit_small_seed0.log \\
        --command "python benchmarks/minigrid_rotation.py --models sit_small --seeds 0 ..."
    python benchmarks/resume_point.py restore --name table4_lavacrossing__sit_small_seed0
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import datetime
import json
import lzma
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tensorflow as tf

from sit_keras.benchmarking import SentenceParser, UsageError, current_commit, parse_or_say_why

STORE = Path(__file__).resolve().parent / "resume"
INDEX = "index.json"
CHECKPOINTS = "checkpoints"
LOGS = "collect"
RUN_LOG = "run.log"  # the archive's copy of the sessions' log, restored to the record's "log" path
SKIPPED_FILES = (".lock",)  # a running trainer's lock: the restored folder is not in use


def archive_name(run_dir: str) -> str:
    """``runs/table4_lavacrossing/sit_small_seed0`` -> ``table4_lavacrossing__sit_small_seed0``.

    The folders after the last ``runs`` in the path, or else its last two.
    """
    parts = Path(os.path.abspath(run_dir)).parts
    below_runs = len(parts) - parts[::-1].index("runs") if "runs" in parts[:-1] else len(parts) - 2
    return "__".join(parts[below_runs:])


def newest_checkpoint(run_dir: str) -> tuple[str, int]:
    """The newest checkpoint's prefix in ``<run_dir>/checkpoints`` and its ``env_steps``."""
    prefix = tf.train.latest_checkpoint(os.path.join(run_dir, CHECKPOINTS))
    if prefix is None:
        raise UsageError(f"--run_dir {run_dir!r} holds no checkpoint in {CHECKPOINTS}/.")
    try:
        steps = int(tf.train.load_checkpoint(prefix).get_tensor("env_steps/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.OpError, ValueError) as error:
        raise UsageError(f"The checkpoint {prefix} cannot be read ({error}).") from None
    return prefix, steps


def read_index(store: Path) -> dict[str, Any]:
    path = store / INDEX
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"The resume index {path} cannot be read ({error}).") from None


def save(run_dir: str, command: str, store: Path, log: str | None = None) -> dict[str, Any]:
    """Packs ``run_dir``'s resume point (and ``log``) into ``store`` and records it in the index; returns
    the record."""
    if log is not None and not os.path.isfile(log):
        raise UsageError(f"--log {log!r} is not a file.")
    prefix, steps = newest_checkpoint(run_dir)
    index = read_index(store)  # before anything is written: a damaged index stops the save
    name = archive_name(run_dir)
    store.mkdir(parents=True, exist_ok=True)
    checkpoint = os.path.basename(prefix)
    with tempfile.TemporaryDirectory() as scratch:
        state = Path(scratch) / "checkpoint"  # the index of checkpoints/, naming only the one packed
        state.write_text(
            f'model_checkpoint_path: "{checkpoint}"\nall_model_checkpoint_paths: "{checkpoint}"\n'
        )
        partial = store / f".{name}.tar.xz.partial"
        with tarfile.open(partial, "w:xz") as archive:
            for entry in sorted(os.listdir(run_dir)):
                path = os.path.join(run_dir, entry)
                if os.path.isfile(path) and entry not in SKIPPED_FILES:
                    archive.add(path, arcname=entry)
            if os.path.isdir(os.path.join(run_dir, LOGS)):
                archive.add(os.path.join(run_dir, LOGS), arcname=LOGS)
            if log is not None:
                archive.add(log, arcname=RUN_LOG)
            archive.add(state, arcname=f"{CHECKPOINTS}/checkpoint")
            folder = os.path.dirname(prefix)
            for entry in sorted(os.listdir(folder)):
                if entry.startswith(f"{checkpoint}."):
                    archive.add(os.path.join(folder, entry), arcname=f"{CHECKPOINTS}/{entry}")
        os.replace(partial, store / f"{name}.tar.xz")
    record = {
        "run_dir": os.path.normpath(run_dir),
        "command": command,
        "commit": current_commit(),
        "checkpoint": checkpoint,
        "env_steps": steps,
        "saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if log is not None:
        record["log"] = os.path.normpath(log)
    index[name] = record
    (store / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return record


def _members(archive: tarfile.TarFile, path: Path) -> list[tarfile.TarInfo]:
    """The archive's members, if every one is a file or folder inside the run folder."""
    members = archive.getmembers()
    for member in members:
        name = os.path.normpath(member.name)
        if os.path.isabs(name) or name.startswith("..") or not (member.isfile() or member.isdir()):
            raise UsageError(f"The archive {path} holds {member.name!r}, which is not a run folder's file.")
    return members


def restore(name: str, store: Path, run_dir: str | None) -> tuple[dict[str, Any], str, int]:
    """Unpacks the archive ``name`` into ``run_dir`` (default: its own): its record, the folder, the steps."""
    index = read_index(store)
    if name not in index:
        known = ", ".join(sorted(index)) or "none"
        raise UsageError(f"--name {name!r} is not in {store / INDEX} (it holds: {known}).")
    record = index[name]
    target = run_dir or record["run_dir"]
    if os.path.exists(target):
        raise UsageError(f"{target!r} exists; remove it or give --run_dir a new folder.")
    log = record.get("log")
    if log is not None and os.path.exists(log):
        raise UsageError(f"The run's log {log!r} exists; move it away first.")
    path = store / f"{name}.tar.xz"
    partial = f"{target}.partial"
    try:
        with tarfile.open(path, "r:xz") as archive:
            archive.extractall(partial, members=_members(archive, path), filter="data")
    except (OSError, EOFError, lzma.LZMAError, tarfile.TarError, UsageError) as error:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(error, UsageError):
            raise
        raise UsageError(f"The archive {path} cannot be unpacked ({error}).") from None
    if log is not None and os.path.isfile(os.path.join(partial, RUN_LOG)):
        os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
        shutil.move(os.path.join(partial, RUN_LOG), log)
    os.replace(partial, target)
    _, steps = newest_checkpoint(target)
    return record, target, steps


def main(argv: Sequence[str] | None = None) -> int:
    def parse(argv: Sequence[str] | None):
        parser = SentenceParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("action", choices=("save", "restore"))
        parser.add_argument(
            "--run_dir", help="save: the run folder; restore: where to unpack (default: its own)"
        )
        parser.add_argument("--command", help="save: the command that goes on with the run")
        parser.add_argument("--log", help="save: the log the run's sessions appended to (optional)")
        parser.add_argument("--name", help="restore: the archive's name in the index")
        parser.add_argument("--store", default=str(STORE), help="the folder of archives and index.json")
        args = parser.parse_args(argv)
        needs = {"save": ("run_dir", "command"), "restore": ("name",)}[args.action]
        missing = [f"--{flag}" for flag in needs if not getattr(args, flag)]
        if missing:
            raise UsageError(f"{args.action} needs {' and '.join(missing)}.")
        if args.action == "save" and not os.path.isdir(args.run_dir):
            raise UsageError(f"--run_dir {args.run_dir!r} is not a folder.")
        return args

    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    try:
        if args.action == "save":
            record = save(args.run_dir, args.command, Path(args.store), args.log)
            archive = Path(args.store) / f"{archive_name(args.run_dir)}.tar.xz"
            print(f"Wrote {archive}: {record['checkpoint']} at {record['env_steps']} env steps.")
        else:
            record, target, steps = restore(args.name, Path(args.store), args.run_dir)
            log = f" and its log {record['log']}" if record.get("log") else ""
            print(f"Restored {target}{log} at {steps} env steps; go on with:\n{record['command']}")
    except UsageError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
