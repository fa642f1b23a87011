"""The console scripts (setup.py): each starts TensorFlow quietly, then runs its command's ``main``.

A command's module imports TensorFlow at its top, and the known start-up
noise (``sit_keras.quiet``) is printed during that import: so the scripts
point here, and this module imports ``sit_keras.quiet_start`` before the command.
``--verbose``, anywhere in the arguments, is taken out of them and shows
every library message instead.
"""

from __future__ import annotations

import functools
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
    "sit-distill": "sit_keras.agents.distill",
}
"""Console script -> the module whose ``main()`` it runs."""


def run(program: str) -> int | None:
    """Runs ``COMMANDS[program]``'s ``main()`` after a quiet start (``--verbose``: a loud one)."""
    if VERBOSE_FLAG in sys.argv[1:]:
        sys.argv = [arg for arg in sys.argv if arg != VERBOSE_FLAG]
        os.environ[VERBOSE_VARIABLE] = "1"
    importlib.import_module("sit_keras.quiet_start")
    return importlib.import_module(COMMANDS[program]).main()


# The console scripts of setup.py, one per command.
sit_demo = functools.partial(run, "sit-demo")
sit_check_encoders = functools.partial(run, "sit-check-encoders")
sit_train = functools.partial(run, "sit-train")
sit_eval = functools.partial(run, "sit-eval")
sit_train_supervised = functools.partial(run, "sit-train-supervised")
sit_export = functools.partial(run, "sit-export")
sit_distill = functools.partial(run, "sit-distill")
