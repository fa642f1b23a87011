"""``sit-export``: a trained policy to a TF Serving SavedModel and TFLite models.

    sit-export --root_dir runs/demo/sit --output_dir runs/demo/sit/export --model_name sit_policy

See ``export.exporter`` for the layout and ``README.md`` (Export) for serving them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from absl import app, flags

from sit_keras.agents.console import quiet_library_logs
from sit_keras.export import tflite
from sit_keras.export.exporter import FORMATS, export_policy

_FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_string("root_dir", None, "Training folder (sit-train / sit-distill output).")
    flags.DEFINE_string("output_dir", None, "Where to write the models (default: <root_dir>/export).")
    flags.DEFINE_string("model_name", "policy", "TF Serving model name and TFLite file prefix.")
    flags.DEFINE_list("formats", list(FORMATS), "Formats to export.")
    flags.DEFINE_list("quantizations", list(tflite.QUANTIZATIONS), "TFLite quantisations.")
    flags.DEFINE_integer("max_sensors", None, "Rows of a sensor set TFLite model (default: as trained).")
    flags.DEFINE_integer("num_examples", 256, "Rollout steps for int8 calibration and parity checks.")
    flags.DEFINE_bool("allow_flex_ops", False, "Allow TensorFlow (Flex) ops in TFLite models.")
    flags.DEFINE_integer("version", None, "SavedModel version (default: the next free one).")
    flags.DEFINE_string(
        "serving_base_path", "/models", "Path of <output_dir>/saved_model in the model server."
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``sit-export``."""
    _define_flags()
    flags.mark_flag_as_required("root_dir")
    app.run(_main, argv=argv)


def _main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    quiet_library_logs()
    output_dir = _FLAGS.output_dir or os.path.join(_FLAGS.root_dir, "export")
    os.makedirs(output_dir, exist_ok=True)
    try:
        report = export_policy(
            _FLAGS.root_dir, output_dir, _FLAGS.model_name, _FLAGS.formats, _FLAGS.quantizations,
            _FLAGS.max_sensors, _FLAGS.num_examples, _FLAGS.allow_flex_ops, _FLAGS.version,
            _FLAGS.serving_base_path,
        )  # fmt: skip
    except (FileNotFoundError, ValueError) as error:
        raise app.UsageError(str(error)) from error
    print(json.dumps(report["models"], indent=2))
    failed = [
        name for name, model in report["models"].items() if not model.get("parity", {}).get("passed", True)
    ]
    for name in failed:
        print(f"WARNING: {name} does not act like the TensorFlow policy on held-out rollout steps: "
              f"{report['models'][name]['parity']}; do not deploy it.")  # fmt: skip


if __name__ == "__main__":
    main()
