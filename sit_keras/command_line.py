"""What the command-line tools share: flag parsing and a console without library chatter.

Tools that return an exit status (``main(argv) -> int``) parse their flags here.

absl's ``app.run`` exits the process and cannot run twice in one process;
these tools parse their own ``FlagValues`` so that tests can call ``main``
repeatedly and a mistake is one line on stderr.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

import tensorflow as tf
from absl import flags, logging

USAGE_ERROR = 2
"""The exit status of a mistake in the arguments."""


def parse_flags(
    flag_values: flags.FlagValues, program: str, argv: Sequence[str] | None, doc: str
) -> list[str] | int:
    """Parses ``argv`` (``sys.argv[1:]`` when ``None``) into ``flag_values``, from their defaults.

    Returns:
      The arguments left after the flags, or an exit status once the call is
      answered: 0 after printing ``doc`` and the flags for ``--help``,
      ``USAGE_ERROR`` after printing one line for a bad flag.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if {"-h", "--help", "--helpshort"} & set(argv):
        print(f"{doc}\nFlags:\n{flag_values.get_help()}")
        return 0
    flag_values.unparse_flags()  # a second main() in one process starts from the defaults
    try:
        return flag_values([program, *argv])[1:]
    except flags.Error as error:
        print(f"{program}: {str(error).rstrip('.')}. See {program} --help.", file=sys.stderr)
        return USAGE_ERROR


def quiet_library_logs() -> None:
    """Errors only from absl and TensorFlow's Python loggers: the progress bar and results, not chatter.

    TF-Agents logs each SavedModel file at INFO, and warns that its learner
    does not checkpoint (``sit-train`` checkpoints instead); TensorFlow warns
    about deprecated calls inside TF-Agents; saving a policy warns that its
    distribution spec needs tensorflow-probability to load (it is imported).
    """
    logging.set_verbosity(logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    for package in ("tfp", "tf_agents"):
        warnings.filterwarnings("ignore", message=f"Encoding a StructuredValue with type {package}.distrib")
