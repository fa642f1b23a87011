"""``sit-distill``: ``sit-train`` with the behaviour-cloning agent (``agents/algorithms/bc.py``).
Its ``--teacher_dir T`` binds ``train_eval.agent = 'bc'`` and ``bc.teacher_dir = 'T'``; every
sit-train flag works, and the student's settings are ``--gin_bindings``.

    sit-distill --root_dir runs/cartpole_bc --teacher_dir runs/cartpole_mlp \\
        --gin_bindings 'bc.num_epochs = 20'

runs what this runs:

    sit-train --root_dir runs/cartpole_bc --gin_bindings "train_eval.agent = 'bc'" \\
        --gin_bindings "bc.teacher_dir = 'runs/cartpole_mlp'" --gin_bindings 'bc.num_epochs = 20'

The flags sit-distill had before it was an alias (``--num_epochs 20``,
``--env``, ``--encoder_kwargs '{...}'``, ...) still work: each becomes the
binding of ``OLD_FLAGS`` (after ``--gin_file``'s, before ``--gin_bindings``)
and is announced once on stderr, with that binding. A value that does not
parse is one sentence and exit status 2, as every mistake of sit-train.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from absl import flags

from sit_keras.agents import evaluate, train
from sit_keras.agents.algorithms import bc
from sit_keras.agents.training.run_settings import RUN_CONFIGURABLE, RunSettings, hyperparameters
from sit_keras.command_line import parse_flags

PROGRAM = "sit-distill"


class OldFlag(NamedTuple):
    """A flag of the old sit-distill: the gin binding it sets, the kind of its value, what it sets."""

    binding: str
    kind: str  # a KINDS key
    help: str


def _integers(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(",") if n.strip())


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(text)
    return value


# Kind -> (parser of the flag's text, what the text must be). Booleans and key=value lists are absl's.
KINDS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "int": (int, "an integer"),
    "float": (float, "a number"),
    "text": (str, "text"),
    "bool": (bool, "true or false"),
    "ints": (_integers, "comma-separated integers"),
    "json": (_json_object, "a JSON object"),
    "key=value": (evaluate.parse_env_kwargs, "key=value"),
}

OLD_FLAGS: dict[str, OldFlag] = {
    "env": OldFlag("train_eval.env_name", "text", "the environment"),
    "env_kwarg": OldFlag("train_eval.env_kwargs", "key=value", "the environments' keywords"),
    "num_envs": OldFlag("train_eval.num_envs", "int", "environments (streams of teacher data)"),
    "total_env_steps": OldFlag("train_eval.total_env_steps", "int", "teacher steps recorded, all rounds"),
    "encoder": OldFlag("train_eval.encoder", "text", "the student's encoder"),
    "encoder_kwargs": OldFlag("train_eval.encoder_kwargs", "json", "the encoder's arguments"),
    "fc_layer_params": OldFlag("bc.fc_layer_params", "ints", "the student's dense layers after the encoder"),
    "sequence_length": OldFlag(
        "bc.sequence_length", "int", "steps per chunk of back-propagation through time"
    ),
    "num_epochs": OldFlag("bc.num_epochs", "int", "passes over the teacher data, each round"),
    "learning_rate": OldFlag("bc.learning_rate", "float", "Adam's learning rate"),
    "anneal_learning_rate": OldFlag("bc.anneal_learning_rate", "bool", "decay it linearly to 0 each round"),
    "max_grad_norm": OldFlag("bc.max_grad_norm", "float", "gradient clipping norm"),
    "dagger_rounds": OldFlag("bc.dagger_rounds", "int", "DAgger rounds after the teacher's (0: plain BC)"),
    "dagger_teacher_probability": OldFlag(
        "bc.dagger_teacher_probability", "float", "in DAgger rounds, the chance the teacher acts"
    ),
    "previous_action_noise": OldFlag(
        "bc.previous_action_noise", "float", "std of noise on the student's previous action (paper: 0.03)"
    ),
    "num_eval_episodes": OldFlag("train_eval.num_eval_episodes", "int", "evaluation episodes at the end"),
    "seed": OldFlag("train_eval.seed", "int", "the seed"),
}
"""The old sit-distill's flags (``--jit_compile`` is sit-train's own), by name."""


def define_flags(flag_values: flags.FlagValues) -> None:
    """sit-train's flags, ``--teacher_dir`` and the old flags (left out of ``--help``)."""
    train.define_flags(flag_values)
    flags.DEFINE_string(
        "teacher_dir", None, "The teacher: a sit-train folder or a saved policy folder (bc.teacher_dir).",
        flag_values=flag_values,
    )  # fmt: skip
    for name, old in OLD_FLAGS.items():
        text = f"Deprecated: --gin_bindings '{old.binding} = ...' ({old.help})."
        # Values are parsed in gin_bindings, where a mistake is one sentence (absl's would be two lines).
        define = {"bool": flags.DEFINE_bool, "key=value": flags.DEFINE_multi_string}.get(old.kind)
        (define or flags.DEFINE_string)(name, None, text, flag_values=flag_values)
    flags.mark_flag_as_required("teacher_dir", flag_values=flag_values)


def gin_bindings(flag_values: flags.FlagValues) -> tuple[list[str], list[str]]:
    """The gin bindings sit-distill's parsed flags give sit-train, and a notice per old flag given.

    Raises:
      ValueError: an old flag's value that does not parse, in one sentence.
    """
    bindings = [f"{RUN_CONFIGURABLE}.agent = {bc.AGENT!r}", f"bc.teacher_dir = {flag_values.teacher_dir!r}"]
    notices = []
    for name, old in OLD_FLAGS.items():
        if not flag_values[name].present:
            continue
        parse, expected = KINDS[old.kind]
        text = flag_values[name].value
        try:
            value = parse(text)
        except ValueError as error:
            if old.kind == "key=value":  # parse_env_kwargs says what is wrong, naming --env_kwarg
                raise
            detail = f"; {error}" if isinstance(error, json.JSONDecodeError) else ""  # where it breaks
            raise ValueError(f"--{name} {text!r} is not {expected} ({old.binding}{detail}).") from error
        binding = f"{old.binding} = {value!r}"
        bindings.append(binding)
        notices.append(f"--{name} is deprecated; use --gin_bindings {_shell_quoted(binding)}.")
    return [*bindings, *flag_values.gin_bindings], notices


def _shell_quoted(text: str) -> str:
    """``text`` as one shell word, in single quotes or else double quotes when it holds single quotes."""
    if "'" in text and not any(c in text for c in '"$`\\!'):
        return f'"{text}"'
    return shlex.quote(text) if "'" in text or not text else f"'{text}'"


# The defaults a BC run fills in, read without a teacher: these placeholders are never opened.
_TEACHERS_ENVIRONMENT = ("train_eval.env_name", "train_eval.env_kwargs")


def bindings_help() -> list[str]:
    """``--help``'s section: each old flag's binding with its default in a BC run, and what it sets."""
    settings, run = bc.BC(teacher_dir="teacher"), RunSettings(agent=bc.AGENT, env_name="env")
    defaults = hyperparameters(run.with_defaults(bc.defaults(run, settings)), settings)
    shown = {
        old.binding: "the teacher's" if old.binding in _TEACHERS_ENVIRONMENT else repr(defaults[old.binding])
        for old in OLD_FLAGS.values()
    }
    width = max(len(f"{binding} = {value}") for binding, value in shown.items()) + 2
    lines = [
        "Gin bindings of a BC run with their defaults; the old flag in brackets still works, deprecated:"
    ]
    for name, old in OLD_FLAGS.items():
        lines.append(f"  {f'{old.binding} = {shown[old.binding]}':<{width}}{old.help} [--{name}]")
    return lines


FLAGS = flags.FlagValues()  # sit-distill's own, apart from absl's global flags
define_flags(FLAGS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sit-distill`` (``argv[0]`` is the program); returns the exit status."""
    argv = sys.argv if argv is None else argv
    extra = parse_flags(
        FLAGS, PROGRAM, argv[1:], __doc__, required=("root_dir", "teacher_dir"),
        advanced=train.ADVANCED_FLAGS, hidden=OLD_FLAGS, sections=bindings_help(),
    )  # fmt: skip
    if isinstance(extra, int):
        return extra
    if extra:
        return train.fail(PROGRAM, f"unexpected arguments {' '.join(extra)!r}; every option is a --flag.")
    try:
        bindings, notices = gin_bindings(FLAGS)
    except ValueError as error:
        return train.fail(PROGRAM, error)
    for notice in notices:
        print(f"{PROGRAM}: {notice}", file=sys.stderr)
    return train.run(PROGRAM, bindings, FLAGS)


if __name__ == "__main__":
    sys.exit(main())
