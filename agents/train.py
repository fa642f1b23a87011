"""``sit-train``: parse the gin configuration, pick the strategy, run ``harness.train_eval``.

    sit-train --root_dir runs/caveflyer_sit \\
        --gin_file configs/procgen/caveflyer_sit.gin \\
        --gin_bindings 'train_eval.total_env_steps = 1_000_000'

``train_eval.agent`` selects the agent (``ppo``, ``sac``, ``dqn``, ``bc``;
``run_settings.ALGORITHMS``); ``train_eval.*`` binds what every agent shares and
``<agent>.*`` its hyper-parameters. A mistake (an unknown flag, a missing
file, a bad or unread binding, a setting out of range) prints one sentence
and exits with status 2 before anything is written. Ctrl-C (or SIGTERM)
stops the run after the iteration it is in, with a checkpoint, and exits
with status 130; rerunning the same command resumes it.
"""

from __future__ import annotations

import io
import logging as std_logging
import os
import sys
import tokenize
from collections.abc import Mapping, Sequence
from typing import Any

import gin
import tensorflow as tf
from absl import flags

from sit_keras import mixed_precision, quiet, xla
from sit_keras.agents.training import harness, run_settings, stops
from sit_keras.agents.training.harness import train_eval
from sit_keras.command_line import INTERRUPTED, USAGE_ERROR, parse_flags, quiet_library_logs

__all__ = ["STRATEGIES", "define_flags", "fail", "main", "make_strategy", "parse_gin", "run", "train_eval"]

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The learner's ``tf.distribute`` strategy by name.

    ``"default"``: one device. ``"mirrored"``: ``MirroredStrategy`` over every
    GPU, or else every logical CPU. ``"multi_worker"``:
    ``MultiWorkerMirroredStrategy``, which reads the cluster from the
    ``TF_CONFIG`` environment variable (docs/training.md, "More than one device"); without it, the one
    local worker.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        # MirroredStrategy() alone would take CPU:0 only on a machine without GPUs.
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if name == "multi_worker":
        with quiet.filtered_stderr():  # the worker's server and the cluster's start-up lines
            return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"Unknown strategy {name!r}. Expected one of: {', '.join(STRATEGIES)}.")


class _DropGinSearchMisses(std_logging.Filter):
    """Gin logs an error for each search path that does not hold an included file, found or not."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        return record.msg != "Path not found: %s"


def _check_gin_text(path: str) -> None:
    """A gin file that is not UTF-8 text, or whose brackets or strings do not close, named with its line.

    gin reports both with a Python traceback (a ``UnicodeDecodeError`` or a
    ``tokenize.TokenError``) that names neither the file nor the line.
    """
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")  # decoded whole, so an error's position is the file's
    except UnicodeDecodeError as error:
        line = 1 + error.object[: error.start].count(b"\n")
        byte = error.object[error.start]
        raise ValueError(f"{path}, line {line}: not UTF-8 text (byte {byte:#04x}).") from None
    except OSError as error:
        raise ValueError(f"Cannot read the gin file {path!r}: {error.strerror}.") from None
    try:
        list(tokenize.generate_tokens(io.StringIO(text).readline))  # tokenizing all of it is the check
    except tokenize.TokenError as error:
        message, (line, _) = error.args
        raise ValueError(f"{path}, line {line}: {message.lower()} (a bracket or string left open).") from None
    except (SyntaxError, IndentationError) as error:  # e.g. an unterminated string on one line
        text = (error.text or "").strip()
        raise ValueError(f"{path}, line {error.lineno}: {error.msg}: {text!r}.") from None


def parse_gin(gin_files: Sequence[str], gin_bindings: Sequence[str]) -> None:
    """Parses gin files and bindings; a bad binding or file raises ``ValueError`` naming it."""
    run_settings.import_algorithms()
    for path in gin_files:
        if not os.path.exists(path):
            raise ValueError(f"Gin file not found: {path!r}")
        _check_gin_text(path)
        # `include 'x.gin'` inside a config is relative to that config's
        # folder or its parent (configs/procgen/models/*.gin include ppo_drac.gin).
        folder = os.path.dirname(os.path.abspath(path))
        gin.add_config_file_search_path(folder)
        gin.add_config_file_search_path(os.path.dirname(folder))
    search_misses = _DropGinSearchMisses()
    std_logging.getLogger().addFilter(search_misses)
    try:
        gin.parse_config_files_and_bindings(gin_files, gin_bindings)
    except (ValueError, KeyError, TypeError, SyntaxError, NameError, tokenize.TokenError) as error:
        raise ValueError(
            f"Bad gin configuration ({error}). Files: {list(gin_files)}, bindings: {list(gin_bindings)}"
        ) from error
    finally:
        std_logging.getLogger().removeFilter(search_misses)


PROGRAM = "sit-train"


def define_flags(flag_values: flags.FlagValues) -> None:
    """sit-train's flags (also sit-distill's, ``agents/distill.py``); ``--root_dir`` is required."""
    flags.DEFINE_string(
        "root_dir", None, "Output folder; rerun with the same one to resume.", flag_values=flag_values
    )
    flags.DEFINE_multi_string("gin_file", [], "Gin config files (configs/...).", flag_values=flag_values)
    flags.DEFINE_multi_string(
        "gin_bindings", [], "Gin bindings, e.g. 'train_eval.num_envs = 8'.", flag_values=flag_values
    )
    flags.DEFINE_enum(
        "strategy",
        "default",
        list(STRATEGIES),
        "tf.distribute strategy of the learner.",
        flag_values=flag_values,
    )
    # Passed to the trainer only when given: otherwise the config's binding (or the default) holds.
    xla.define_jit_compile_flag(flag_values)
    mixed_precision.define_precision_flag(flag_values, allow_auto=True)
    flags.DEFINE_bool(
        "deterministic", None,
        "Rerun-exact training: deterministic kernels, replay read after collection (slower); "
        "default: train_eval.deterministic.",
        flag_values=flag_values,
    )  # fmt: skip
    flags.register_multi_flags_validator(
        ["strategy", "jit_compile"], _check_jit_compile_strategy, flag_values=flag_values
    )
    flags.mark_flag_as_required("root_dir", flag_values=flag_values)


def _check_jit_compile_strategy(values: Mapping[str, Any]) -> bool:
    """``--jit_compile on`` needs ``--strategy default`` (see ``xla.resolve_jit_compile``)."""
    if values["strategy"] != "default" and str(values["jit_compile"]).strip().lower() in ("true", "on"):
        raise flags.ValidationError(
            f"--jit_compile={values['jit_compile']} needs --strategy default: XLA cannot compile the "
            f"gradient aggregation of --strategy {values['strategy']}."
        )
    return True


# --help: the flags that change how, not what, the run trains.
ADVANCED_FLAGS = ("strategy", "jit_compile", "precision", "deterministic")
# Given on the command line, these flags override the gin configuration's binding.
_OVERRIDING_FLAGS = ("jit_compile", "precision", "deterministic")
FLAGS = flags.FlagValues()  # sit-train's own, apart from absl's global flags
define_flags(FLAGS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sit-train`` (``argv[0]`` is the program); returns the exit status."""
    argv = sys.argv if argv is None else argv
    extra = parse_flags(FLAGS, PROGRAM, argv[1:], __doc__, required=("root_dir",), advanced=ADVANCED_FLAGS)
    if isinstance(extra, int):
        return extra
    if extra:
        return fail(PROGRAM, f"unexpected arguments {' '.join(extra)!r}; every option is a --flag.")
    return run(PROGRAM, FLAGS.gin_bindings, FLAGS)


def run(program: str, gin_bindings: Sequence[str], flag_values: flags.FlagValues) -> int:
    """Trains as the parsed ``define_flags`` flags say, with ``gin_bindings`` for ``--gin_bindings``.

    Returns:
      The exit status: 0 after training, ``USAGE_ERROR`` after one sentence
      for a mistake, 1 for a loss that is not finite or a lost worker, ``INTERRUPTED`` after
      Ctrl-C or SIGTERM.
    """
    quiet_library_logs()
    given = [name for name in _OVERRIDING_FLAGS if flag_values[name].present]
    overrides = {name: flag_values[name].value for name in given}
    try:
        # First: MultiWorkerMirroredStrategy configures TensorFlow's collective ops, which must
        # happen before anything (the gin files' imports) starts TensorFlow's runtime.
        strategy = make_strategy(flag_values.strategy)
        parse_gin(flag_values.gin_file, gin_bindings)
    except ValueError as error:
        return fail(program, error)
    try:
        results = train_eval(flag_values.root_dir, strategy=strategy, **overrides)
    except harness.SettingsError as error:
        return fail(program, error)
    except (stops.TrainingDiverged, stops.WorkerLost) as stopped:
        print(f"{program}: {stopped}", file=sys.stderr)
        return 1
    except stops.Interrupted as stop:
        print(f"{program}: {stop}", file=sys.stderr)
        return INTERRUPTED
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the training loop
        print(
            f"{program}: interrupted; rerun the same command to resume from the last checkpoint in "
            f"{os.path.join(flag_values.root_dir, 'checkpoints')}.",
            file=sys.stderr,
        )
        return INTERRUPTED
    print(harness.summary_line(results))
    return 0


def fail(program: str, error: Exception | str) -> int:
    """A user's mistake: one sentence on stderr; returns ``USAGE_ERROR``."""
    print(f"{program}: {error}", file=sys.stderr)
    return USAGE_ERROR
