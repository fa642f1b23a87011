"""``sit-check-encoders``: builds every encoder and checks the symmetries it promises.

For each encoder (SiT paper, section 4 and Table 1) the check

1. builds it for ``(size, size, 3)`` images (the IMPALA CNN in the paper's
   reduced form, ``channels=(4, 8, 16)``, ``output_dim=64``; the others with
   their Table 2 defaults),
2. adds Gaussian noise to every weight, so that a symmetry that holds is a
   property of the architecture and not of a symmetric initialisation,
3. measures, for the symmetry the encoder declares (its registry entry,
   ``sit_keras.symmetry``), on a random ``uint8`` batch the relative invariance error
   (``sit_keras.testing.invariance_error``) under the 3 rotations and the
   4 reflections of the square, and the equivariance error of the equivariant
   part (``symmetry_parts``) under the rotations (inference mode, compiled
   with ``tf.function`` without XLA),
4. times a forward pass and a training step, both compiled with XLA,
5. prints a table and marks ``FAIL`` every encoder whose promised symmetry
   does not hold within the tolerance; the exit status is 1 if any does.

Usage::

    sit-check-encoders [--models sit,vit] [--image_size 64] [--batch 8] [--json out.json]
             [--train-models sit] [--repeats 3] [--noise 0.05] [--tolerance 1e-4]

On 2 CPU cores the default run (all encoders, 64x64, batch 8) took 63-83 s in
November 2026; most of it is XLA compilation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

import sit_keras
from sit_keras import testing
from sit_keras.command_line import ONE_LINE_HELP, ArgumentParser, add_verbose_flag
from sit_keras.models import ENCODER_NAMES, Encoder, build_encoder
from sit_keras.models.registry import ENCODERS
from sit_keras.symmetry import INVARIANT, Symmetry

# Constructor overrides; the others use the registry's defaults (Table 2).
OVERRIDES: dict[str, dict[str, Any]] = {
    # The SiT paper's CNN baseline: IMPALA ResNet with reduced channels (Table 2).
    "impala_cnn": {"channels": (4, 8, 16), "output_dim": 64},
}

GROUPS: dict[str, dict[str, testing.Transform]] = {
    "rotations": testing.ROTATIONS,
    "reflections": testing.REFLECTIONS,
}


def promise(symmetry: Symmetry) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``(summary, checks)`` of a declared symmetry (``sit_keras.symmetry``; SiT paper, Table 1).

    A check is ``(part, group)``: part ``"output"`` (the features),
    ``"invariant"`` or ``"equivariant"`` (``Encoder.symmetry_parts``); group
    ``"rotations"`` or ``"reflections"`` when the declaration keeps all of
    them. The invariant parts are checked for invariance under each kept
    group, the equivariant part (a patch grid) for equivariance under the
    rotations.
    """
    kept = set(symmetry.elements)
    kept_groups = [name for name, g in GROUPS.items() if set(g) <= kept]
    checks: list[tuple[str, str]] = []
    for part, kind in symmetry.parts:
        if kind == INVARIANT:
            checks += [(part, group) for group in kept_groups]
        elif "rotations" in kept_groups:
            checks.append((part, "rotations"))
    return symmetry.summary, tuple(checks)


# What each encoder promises, from its declaration in the registry.
PROMISES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    name: promise(ENCODERS[name].symmetry) for name in ENCODER_NAMES
}

# Relative error allowed for an exact symmetry in float32. The 90-degree
# rotations and flips permute pixels exactly, so only rounding differs;
# measured errors are ~1e-6.
DEFAULT_TOLERANCE = 1e-4


# -- compiled functions, shared with benchmarks/encoders.py ---------------------
def make_forward(encoder: Encoder, jit_compile: bool) -> Callable[[tf.Tensor], tf.Tensor]:
    """``images -> features`` in inference mode, as a ``tf.function``."""

    @tf.function(jit_compile=jit_compile)
    def forward(images: tf.Tensor) -> tf.Tensor:
        return encoder(images, training=False)

    return forward


def make_train_step(
    encoder: Encoder, jit_compile: bool, learning_rate: float = 1e-4
) -> Callable[[tf.Tensor], tf.Tensor]:
    """One Adam step on the scalar loss ``mean(features ** 2)``, as a ``tf.function``.

    Forward, backward and the ``tf_keras`` Adam update run in one compiled
    function; it returns the loss. The optimizer is built here, so that its
    slot variables are not created inside the traced function.
    """
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    variables = encoder.trainable_variables
    optimizer.build(variables)

    @tf.function(jit_compile=jit_compile)
    def train_step(images: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(encoder(images, training=True)))
        gradients = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(gradients, variables, strict=True))
        return loss

    return train_step


def time_calls(fn: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor, repeats: int, warmup: int = 0) -> dict:
    """Times ``fn(x)``: the first call (tracing + compilation + one run) and ``repeats`` later calls.

    Returns ``{"first_call_s", "runs_ms", "median_ms", "min_ms"}``; ``warmup``
    untimed calls run between the first call and the timed ones.
    """
    start = time.perf_counter()
    _ = fn(x).numpy()  # .numpy() waits for the result.
    first_call_s = time.perf_counter() - start
    for _ in range(warmup):
        fn(x).numpy()
    runs_ms = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x).numpy()
        runs_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "first_call_s": first_call_s,
        "runs_ms": runs_ms,
        "median_ms": statistics.median(runs_ms),
        "min_ms": min(runs_ms),
    }


# -- the check ------------------------------------------------------------------
def perturb_weights(encoder: Encoder, stddev: float, seed: int) -> None:
    """Adds ``N(0, stddev^2)`` noise to every trainable weight, in place (``testing.perturb_weights``)."""
    testing.perturb_weights(encoder, stddev, seed, trainable_only=True)


def symmetry_errors(encoder: Encoder, images: tf.Tensor) -> dict[str, dict[str, float]]:
    """Relative errors of the output and of each symmetry part, per group and transform.

    Returns ``{"<part>/<group>": {transform: error}}`` for part in
    ``output``, ``invariant``, ``equivariant`` (those the encoder has): the
    equivariant part (a patch grid) is checked for equivariance under the
    rotations only, the others for invariance under rotations and reflections.
    """
    forward = make_forward(encoder, jit_compile=False)
    parts_fn = tf.function(lambda x: encoder.symmetry_parts(x, training=False))
    parts = encoder.symmetry_parts(images[:1], training=False)  # eagerly: only the keys are needed
    errors: dict[str, dict[str, float]] = {}
    for group, transforms in GROUPS.items():
        errors[f"output/{group}"] = {
            name: testing.invariance_error(forward, images, g) for name, g in transforms.items()
        }
        if "invariant" in parts:
            invariant = lambda x: parts_fn(x)["invariant"]  # noqa: E731
            errors[f"invariant/{group}"] = {
                name: testing.invariance_error(invariant, images, g) for name, g in transforms.items()
            }
    if "equivariant" in parts:
        equivariant = lambda x: parts_fn(x)["equivariant"]  # noqa: E731
        errors["equivariant/rotations"] = {
            name: testing.equivariance_error(equivariant, images, g) for name, g in testing.ROTATIONS.items()
        }
    return errors


def _max(errors: dict[str, dict[str, float]], key: str) -> float | None:
    return max(errors[key].values()) if key in errors else None


def build_checked_encoder(name: str, image_size: int) -> Encoder:
    """``name`` for ``image_size`` square RGB images, with this check's ``OVERRIDES``."""
    return build_encoder(name, (image_size, image_size, 3), **OVERRIDES.get(name, {}))


def run_encoder(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Builds, perturbs, checks and times one encoder; returns its JSON record."""
    tf_keras.utils.set_random_seed(args.seed)
    size = args.image_size
    encoder = build_checked_encoder(name, size)
    perturb_weights(encoder, args.noise, args.seed)
    rng = np.random.default_rng(args.seed)
    images = tf.constant(rng.integers(0, 256, size=(args.batch, size, size, 3), dtype=np.uint8))

    checks_start = time.perf_counter()
    errors = symmetry_errors(encoder, images)
    checks_s = time.perf_counter() - checks_start
    promised, checks = PROMISES.get(name, ("none", ()))
    results = {}
    for part, group in checks:
        error = _max(errors, f"{part}/{group}")
        if error is None:
            raise RuntimeError(f"{name} promises {part}/{group} but has no {part!r} symmetry part")
        results[f"{part}/{group}"] = {"error": error, "holds": error <= args.tolerance}
    ok = all(r["holds"] for r in results.values())

    # Timed after the checks: the train step changes the weights.
    forward = time_calls(make_forward(encoder, jit_compile=True), images, args.repeats)
    train_step = None
    if name in args.train_models:
        train_step = time_calls(make_train_step(encoder, jit_compile=True), images, args.repeats)

    # The columns of the table: the invariant part where the encoder has one
    # (it is what carries the promise), else the output features.
    shown = "invariant" if "invariant/rotations" in errors else "output"
    return {
        "params": int(encoder.count_params()),
        "promised": promised,
        "checks": results,
        "status": "ok" if ok else "FAIL",
        "shown_part": shown,
        "rotation_error": _max(errors, f"{shown}/rotations"),
        "reflection_error": _max(errors, f"{shown}/reflections"),
        "equivariance_error": _max(errors, "equivariant/rotations"),
        "errors": errors,
        "checks_s": checks_s,
        "forward_xla": forward,
        "train_step_xla": train_step,
    }


def _fmt_error(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def _fmt_ms(timing: dict | None) -> str:
    return "-" if timing is None else f"{timing['median_ms']:.1f}"


def format_table(records: dict[str, dict[str, Any]]) -> str:
    """The results as a Markdown table."""
    header = (
        "encoder",
        "params",
        "promised symmetry",
        "rot err",
        "flip err",
        "rot equiv err",
        "forward ms",
        "train step ms",
        "check",
    )
    rows = [header]
    for name, r in records.items():
        shown = "" if r["shown_part"] == "output" else " (inv)"
        rows.append(
            (
                name,
                f"{r['params']:,}",
                r["promised"],
                _fmt_error(r["rotation_error"]) + shown,
                _fmt_error(r["reflection_error"]) + shown,
                _fmt_error(r["equivariance_error"]),
                _fmt_ms(r["forward_xla"]),
                _fmt_ms(r["train_step_xla"]),
                r["status"],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |" for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _names(text: str) -> list[str]:
    if text.strip() == "all":
        return list(ENCODER_NAMES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENCODER_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown encoder(s) {', '.join(unknown)}; expected some of: {', '.join(ENCODER_NAMES)}"
        )
    return names


# Dashed spellings of the flags before they took underscores like every other command's; still accepted.
_OLD_SPELLINGS = {"--image-size": "--image_size", "--train-models": "--train_models"}


def _respell(argv: Sequence[str]) -> list[str]:
    """``argv`` with old flag spellings replaced, each replacement announced on stderr."""
    respelled = []
    for arg in argv:
        name, equals, value = arg.partition("=")
        if name in _OLD_SPELLINGS:
            print(f"sit-check-encoders: {name} is deprecated; use {_OLD_SPELLINGS[name]}.", file=sys.stderr)
            arg = _OLD_SPELLINGS[name] + equals + value
        respelled.append(arg)
    return respelled


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="sit-check-encoders",
        description="Build every encoder, perturb its weights, check its promised symmetries and time it.",
        formatter_class=ONE_LINE_HELP,
    )
    common = parser.add_argument_group("common flags")
    common.add_argument(
        "--models", type=_names, default=list(ENCODER_NAMES), help="comma-separated encoders (default: all)"
    )
    common.add_argument("--image_size", type=int, default=64, help="side of the square RGB images")
    common.add_argument("--batch", type=int, default=8, help="images per batch (checks and timings)")
    common.add_argument("--json", default=None, help="also write the results to this JSON file")
    advanced = parser.add_argument_group("advanced flags")
    advanced.add_argument("--repeats", type=int, default=3, help="timed calls per measurement (median)")
    advanced.add_argument(
        "--train_models",
        type=_names,
        default=None,
        help="encoders whose XLA train step is timed, or 'all' (default: all of --models); "
        "leave out slow ones to save their compilation time",
    )
    advanced.add_argument(
        "--noise", type=float, default=0.05, help="stddev of the noise added to every weight"
    )
    advanced.add_argument(
        "--tolerance", type=float, default=DEFAULT_TOLERANCE, help="relative error allowed for a symmetry"
    )
    advanced.add_argument("--seed", type=int, default=0, help="seed of the weight noise and the images")
    add_verbose_flag(parser)
    args = parser.parse_args(_respell(sys.argv[1:] if argv is None else argv))
    if args.train_models is None:
        args.train_models = list(args.models)
    for flag in ("image_size", "batch", "repeats"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be positive, got {getattr(args, flag)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the check; returns 0 if every promised symmetry holds, else 1."""
    args = parse_args(argv)
    for name in args.models:  # a size that an encoder cannot take fails before any check runs
        try:
            build_checked_encoder(name, args.image_size)
        except ValueError as error:
            print(
                f"sit-check-encoders: --image_size {args.image_size} does not fit {name}: {error}",
                file=sys.stderr,
            )
            return 2
    start = time.perf_counter()
    print(
        f"sit-keras {sit_keras.__version__}, TensorFlow {tf.__version__}: "
        f"{args.image_size}x{args.image_size}x3 uint8 images, batch {args.batch}."
    )
    print(
        f"Every weight is perturbed with N(0, {args.noise:g}^2) noise first, so symmetries that hold "
        "come from the architecture, not from a symmetric initialisation."
    )
    print(f"A promised symmetry holds if its relative error is <= {args.tolerance:g} (float32).\n")
    records = {}
    for name in args.models:
        model_start = time.perf_counter()
        records[name] = run_encoder(name, args)
        records[name]["wall_time_s"] = time.perf_counter() - model_start
        r = records[name]
        parts = [
            f"checks {r['checks_s']:.1f} s",
            f"forward first call {r['forward_xla']['first_call_s']:.1f} s",
        ]
        if r["train_step_xla"] is not None:
            parts.append(f"train step first call {r['train_step_xla']['first_call_s']:.1f} s")
        print(f"  {name}: {r['status']} ({r['wall_time_s']:.1f} s; {', '.join(parts)})", flush=True)
    wall_time_s = time.perf_counter() - start

    print()
    print(format_table(records))
    print(
        "\nrot err / flip err: max relative invariance error under the 3 rotations / 4 reflections, "
        "of the invariant part (inv) where the encoder has one, else of the output features. "
        "rot equiv err: equivariance error of the equivariant patch grid under the rotations. "
        "forward / train step: median of "
        f"{args.repeats} XLA-compiled calls at batch {args.batch} (compilation excluded); "
        "train step = forward + backward + Adam on mean(features^2); '-' = not timed (--train-models)."
    )
    failed = [name for name, r in records.items() if r["status"] != "ok"]
    for name in failed:
        broken = {k: v["error"] for k, v in records[name]["checks"].items() if not v["holds"]}
        print(f"FAIL {name}: promised {records[name]['promised']!r}, but errors {broken}")
    print(f"\nTotal wall time: {wall_time_s:.1f} s.")

    if args.json:
        report = {
            "settings": {k: v for k, v in vars(args).items() if k != "json"},
            "environment": {
                "sit_keras": sit_keras.__version__,
                "tensorflow": tf.__version__,
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            "encoders": records,
            "all_ok": not failed,
            "wall_time_s": wall_time_s,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
