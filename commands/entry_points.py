"""The console scripts (setup.py): each starts TensorFlow quietly, then runs its command's ``main``.

A command's module imports TensorFlow at its top, and the known start-up
noise (``sit_keras.quiet``) is printed during that import: so the scripts
point here, and this module imports ``sit_keras.quiet_start`` before the command.
``--verbose``, anywhere in the arguments, is taken out of them and shows
every library message instead.
"""

from __future__ import annotations

import importlib
import os
import sys

VERBOSE_FLAG = "--verbose"
VERBOSE_VARIABLE = "SIT_KERAS_VERBOSE"  # read by sit_keras.quiet

COMMANDS: dict[str, str] = {
    "sit-demo": "sit_keras.commands.demo",
    "sit-check-encoders": "sit_keras.encoder_check",
    "sit-train": "sit_keras.agents.train",
    "sit-eval": "sit_keras.commands.evaluate",
    "sit-train-supervised": "sit_keras.supervised.train",
    "sit-export": "sit_keras.export.cli",
    "sit-distill": "sit_keras.agents.algorithms.bc",
}
"""Console script -> the module whose ``main()`` it runs."""


def run(program: str) -> int | None:
    """Runs ``COMMANDS[program]``'s ``main()`` after a quiet start (``--verbose``: a loud one)."""
    if VERBOSE_FLAG in sys.argv[1:]:
        sys.argv = [arg for arg in sys.argv if arg != VERBOSE_FLAG]
        os.environ[VERBOSE_VARIABLE] = "1"
    importlib.import_module("sit_keras.quiet_start")
    return importlib.import_module(COMMANDS[program]).main()


def sit_demo() -> int | None:
    return run("sit-demo")


def sit_check_encoders() -> int | None:
    return run("sit-check-encoders")


def sit_train() -> int | None:
    return run("sit-train")


def sit_eval() -> int | None:
    return run("sit-eval")


def sit_train_supervised() -> int | None:
    return run("sit-train-supervised")


def sit_export() -> int | None:
    return run("sit-export")


def sit_distill() -> int | None:
    return run("sit-distill")
