"""A resumed run is the same run: the settings a run folder was started with, and what a resume may change.

The first start of a run writes every setting it runs with
(``run_settings.hyperparameters``: ``train_eval.*`` and ``<agent>.*``, after gin,
keyword overrides and the agent's defaults) to ``run_settings.json``. Each
later start in the folder compares its own settings with that record before
anything is built or written:

- a difference in any setting outside ``RESUMABLE`` (the environment, the
  number of environments, the seed, the precision, the encoder, the agent and
  its hyper-parameters...) is refused in one sentence listing every change
  (``train_eval.seed: 0 -> 1``): the folder would otherwise describe a run
  that never happened;
- the settings in ``RESUMABLE`` (the budget, the intervals, evaluation and
  display) may change; each start that changes them appends a line to
  ``resume_log.jsonl`` and updates the record.

A folder from before this record (no ``run_settings.json``) gets one at its
next start.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping
from typing import Any

RECORD_FILE = "run_settings.json"
RESUME_LOG = "resume_log.jsonl"

# What a user legitimately changes when resuming: how long, how often, how it is evaluated and shown.
RESUMABLE = frozenset(
    [
        *(
            f"train_eval.{name}"
            for name in (
                "total_env_steps", "log_interval", "summary_interval", "eval_interval", "num_eval_episodes",
                "eval_num_envs", "eval_env_kwargs", "checkpoint_interval", "policy_save_interval",
                "checkpoint_replay_buffer", "jit_compile", "progress",
            )
        ),
        "bc.num_epochs",  # behaviour cloning's budget: passes over the recorded teacher data
    ]
)  # fmt: skip


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON's form of the settings (tuples as lists, other objects by ``repr``), so records compare."""
    return json.loads(json.dumps(dict(values), sort_keys=True, default=repr))


def read(root_dir: str) -> dict[str, Any] | None:
    """The recorded settings, or ``None`` for a folder without a record.

    Raises:
      ValueError: the record is damaged (named with its path).
    """
    path = os.path.join(root_dir, RECORD_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is damaged ({error}); the run's settings cannot be checked.") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} is damaged (not a JSON object); the run's settings cannot be checked.")
    return record


def changes(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{name: (recorded, current)}`` for every setting that differs (missing on one side: ``None``)."""
    recorded, current = _plain(recorded), _plain(current)
    names = sorted(set(recorded) | set(current))
    return {n: (recorded.get(n), current.get(n)) for n in names if recorded.get(n) != current.get(n)}


def _listed(found: Mapping[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{name}: {old!r} -> {new!r}" for name, (old, new) in found.items())


def check_resume(root_dir: str, values: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Raises ``ValueError`` if ``values`` change a setting a resume must keep; returns the allowed changes.

    Nothing is written: ``record`` writes once the run is set up.
    """
    recorded = read(root_dir)
    if recorded is None:
        return {}
    found = changes(recorded, values)
    refused = {name: change for name, change in found.items() if name not in RESUMABLE}
    if refused:
        agent = recorded.get("train_eval.agent")
        encoder = recorded.get("train_eval.encoder")
        raise ValueError(
            f"{root_dir} holds a {agent} run with encoder {encoder}, and this start changes what a resume "
            f"must keep ({_listed(refused)}): resume with the recorded settings ({RECORD_FILE}) or use a "
            "new folder."
        )
    return found


def record(root_dir: str, values: Mapping[str, Any], env_steps: int, resumed: Mapping[str, Any]) -> None:
    """Writes the record (atomically); on a resume with changes, appends them to the resume log."""
    path = os.path.join(root_dir, RECORD_FILE)
    staged = path + ".tmp"
    with open(staged, "w", encoding="utf-8") as f:
        json.dump(_plain(values), f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(staged, path)
    if resumed:
        entry = {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "env_steps": env_steps,
            "changes": {name: {"from": old, "to": new} for name, (old, new) in resumed.items()},
        }
        with open(os.path.join(root_dir, RESUME_LOG), "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
