"""What kind of run a folder holds, so that no command mixes its files with another kind's.

``sit-train`` (and ``sit-distill``) write reinforcement-learning runs,
``sit-train-supervised`` supervised ones; both keep ``checkpoints/``, so a
folder of one kind given to the other would mix their checkpoints (or fail
deep inside TensorFlow). ``claim(folder, kind, command)`` records the kind in
``run_kind.json`` at a run's first start and refuses, in one sentence, a
folder that holds the other kind. Folders from before the record are
recognised by their files (``policy_network.json``: an RL run;
``result.json`` or ``logs/``: a supervised one).
"""

from __future__ import annotations

import json
import os

KIND_FILE = "run_kind.json"
RL, SUPERVISED = "reinforcement learning", "supervised"
# Who writes each kind, for the messages.
COMMANDS = {RL: "sit-train or sit-distill", SUPERVISED: "sit-train-supervised"}
# Files that only one kind writes, for folders from before KIND_FILE.
_SIGNS = {RL: ("policy_network.json", "run_settings.json"), SUPERVISED: ("result.json", "logs")}


def kind_of(folder: str) -> str | None:
    """The kind of run in ``folder`` (``RL`` or ``SUPERVISED``), or ``None`` for a new or empty folder.

    Raises:
      ValueError: the record is damaged (named with its path).
    """
    path = os.path.join(folder, KIND_FILE)
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                kind = json.load(f)["kind"]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{path} is damaged ({error!r}); it should say which kind of run the folder holds."
            ) from None
        if kind not in COMMANDS:
            raise ValueError(
                f"{path} names an unknown kind of run {kind!r}; expected one of {sorted(COMMANDS)}."
            )
        return kind
    for kind, files in _SIGNS.items():
        if any(os.path.exists(os.path.join(folder, name)) for name in files):
            return kind
    return None


def check(folder: str, kind: str, command: str) -> None:
    """Raises ``ValueError`` if ``folder`` holds a run of another kind than ``kind``; writes nothing."""
    found = kind_of(folder) if os.path.isdir(folder) else None
    if found is not None and found != kind:
        raise ValueError(
            f"{folder} holds a {found} run (written by {COMMANDS[found]}); {command} writes {kind} runs: "
            "use another folder."
        )


def claim(folder: str, kind: str, command: str) -> None:
    """``check``, then records ``kind`` in ``folder`` (which must exist)."""
    check(folder, kind, command)
    path = os.path.join(folder, KIND_FILE)
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"kind": kind}, f)
