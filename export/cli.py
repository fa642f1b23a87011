"""``sit-export``: a trained policy to a TF Serving SavedModel and TFLite models.

    sit-export --root_dir runs/demo/sit --output_dir runs/demo/sit/export --model_name sit_policy

See ``export.exporter`` for the layout and docs/export.md for serving them.

Every argument is checked before TensorFlow builds the policy or a folder is
created. A mistake (an unknown flag, ``--num_examples 0``, ``--version -3``,
a folder that is not a training folder, an existing SavedModel version)
prints one sentence to stderr, no traceback, and exits with status 2; an
export that fails once started (a TFLite model that needs Flex ops, a failed
parity check, a full disk, another export writing into the same folder)
exits with status 1; Ctrl-C or SIGTERM stops it with status 130. Either way
nothing is left behind (``export.exporter``). One export at a time writes
into an output folder (``sit_keras.folder_lock``). A TFLite model that does
not act like the TensorFlow policy on held-out rollout steps
(``export.parity``) fails the export, naming the model and the failed check,
unless ``--allow_parity_failure`` is given: then it is exported, marked as
failed in its report, with a warning on stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence

from absl import flags

from sit_keras.command_line import parse_flags, quiet_library_logs
from sit_keras.export import interruption, tflite
from sit_keras.export.exporter import FORMATS, NUM_EXAMPLES, check_export_arguments, export_policy

PROGRAM = "sit-export"
USAGE_ERROR, EXPORT_FAILED = 2, 1
INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C

# Flags live in their own FlagValues, not absl's global FLAGS: sit-eval and sit-train define flags of
# the same names, and main() can run more than once in one process (tests).
FLAGS = flags.FlagValues()
flags.DEFINE_string("root_dir", None, "Training folder (sit-train / sit-distill output).", flag_values=FLAGS)
flags.DEFINE_string(
    "output_dir", None, "Where to write the models (default: <root_dir>/export).", flag_values=FLAGS
)
flags.DEFINE_string(
    "model_name", "policy", "TF Serving model name and TFLite file prefix.", flag_values=FLAGS
)
flags.DEFINE_list("formats", list(FORMATS), "Formats to export.", flag_values=FLAGS)
flags.DEFINE_list(
    "quantizations",
    list(tflite.DEFAULT_QUANTIZATIONS),
    f"TFLite quantisations, some of {', '.join(tflite.QUANTIZATIONS)} (int16x8: for policies on observation "
    "vectors).",
    flag_values=FLAGS,
)
flags.DEFINE_integer(
    "max_sensors", None, "Rows of a sensor set TFLite model (default: as trained).", flag_values=FLAGS
)
flags.DEFINE_integer(
    "num_examples",
    NUM_EXAMPLES,
    "Rollout steps for int8 calibration and parity checks (at least 2).",
    flag_values=FLAGS,
)
flags.DEFINE_list(
    "int8_float_ops",
    list(tflite.FLOAT_OPS_IN_INT8),
    "The int8 recipe: TFLite op types kept in float32 (empty: none).",
    flag_values=FLAGS,
)
flags.DEFINE_bool(
    "int8_float_normalisations",
    True,
    "The int8 recipe: keep LayerNorm and the other 1/sqrt normalisations in float32.",
    flag_values=FLAGS,
)
flags.DEFINE_bool("allow_flex_ops", False, "Allow TensorFlow (Flex) ops in TFLite models.", flag_values=FLAGS)
flags.DEFINE_bool(
    "allow_parity_failure",
    False,
    "Export TFLite models that fail the parity check (marked as failed in their report) "
    "instead of failing the export.",
    flag_values=FLAGS,
)
flags.DEFINE_integer(
    "version", None, "SavedModel version, at least 1 (default: the next free one).", flag_values=FLAGS
)
flags.DEFINE_bool(
    "overwrite", False, "Replace the SavedModel --version if it exists (default: refuse).", flag_values=FLAGS
)
flags.DEFINE_string(
    "serving_base_path",
    "/models",
    "Path of <output_dir>/saved_model in the model server.",
    flag_values=FLAGS,
)
flags.mark_flag_as_required("root_dir", flag_values=FLAGS)


def _interrupt(signum: int, frame: object) -> None:
    """The first signal asks the export to stop at its next safe point (``interruption``); a second stops
    it at once."""
    if interruption.INTERRUPTED.is_set():
        raise KeyboardInterrupt
    interruption.INTERRUPTED.set()


def _error(message: str, status: int) -> int:
    """One sentence on stderr, for a command that cannot do what was asked; returns the exit status."""
    print(f"{PROGRAM}: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sit-export``.

    Args:
      argv: command-line arguments without the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
      The exit status: 0 after the export, 2 for a mistake in the arguments,
      1 for an export that failed (nothing written either way).
    """
    advanced = (
        "max_sensors", "num_examples", "allow_flex_ops", "allow_parity_failure", "overwrite",
        "serving_base_path", "int8_float_ops", "int8_float_normalisations",
    )  # fmt: skip
    extra = parse_flags(FLAGS, PROGRAM, argv, __doc__, required=("root_dir",), advanced=advanced)
    if isinstance(extra, int):
        return extra
    if extra:
        return _error(f"unexpected arguments {' '.join(extra)!r}; every option is a --flag.", USAGE_ERROR)
    output_dir = FLAGS.output_dir or os.path.join(FLAGS.root_dir, "export")
    try:
        check_export_arguments(
            output_dir, FLAGS.model_name, FLAGS.formats, FLAGS.quantizations, FLAGS.max_sensors,
            FLAGS.num_examples, FLAGS.version, FLAGS.overwrite, FLAGS.int8_float_ops,
        )  # fmt: skip
    except ValueError as error:
        return _error(str(error), USAGE_ERROR)
    if not os.path.isfile(os.path.join(FLAGS.root_dir, "policy_network.json")):
        return _error(
            f"{FLAGS.root_dir!r} is not a training folder written by sit-train or sit-distill "
            "(no policy_network.json).",
            USAGE_ERROR,
        )
    quiet_library_logs()
    # SIGTERM (a scheduler, `kill`) stops the export like Ctrl-C, which removes what it staged.
    interruption.INTERRUPTED.clear()
    previous = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        report = export_policy(
            FLAGS.root_dir, output_dir, FLAGS.model_name, FLAGS.formats, FLAGS.quantizations,
            FLAGS.max_sensors, FLAGS.num_examples, FLAGS.allow_flex_ops, FLAGS.version,
            FLAGS.serving_base_path, allow_parity_failure=FLAGS.allow_parity_failure,
            overwrite=FLAGS.overwrite, int8_float_ops=FLAGS.int8_float_ops,
            int8_float_normalisations=FLAGS.int8_float_normalisations,
        )  # fmt: skip
    except (Exception, KeyboardInterrupt) as error:
        # A library can catch the KeyboardInterrupt of a stop inside its call (the calibration data's) and
        # raise an error of its own instead: the flag says the export was interrupted all the same.
        if interruption.INTERRUPTED.is_set() or isinstance(error, KeyboardInterrupt):
            return _error(f"interrupted; nothing was exported to {output_dir}.", INTERRUPTED)
        if isinstance(error, (OSError, ValueError)):  # FileNotFoundError, ParityError, UnsupportedOpsError
            return _error(str(error), EXPORT_FAILED)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(json.dumps(report["models"], indent=2))
    for name in report.get("parity_failures", []):
        model = report["models"][name]
        checks = "; ".join(model["parity"]["failed_checks"])
        print(
            f"WARNING: {name} ({model['path']}) failed parity ({checks}) and was exported only because "
            "of --allow_parity_failure; do not deploy it.",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
