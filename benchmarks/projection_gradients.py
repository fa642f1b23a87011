"""The SiT family's train steps with the projection's gradients by the native ops and by TensorFlow's matmuls.

The GSA layers' channels-first projection (``sit_keras.layers.channels_first``)
runs forward as a native op; its gradients are the native ops
(``SitChannelsFirstProjectionKernelGrad`` and the projection by the transposed
kernel) or, where TensorFlow runs oneDNN's kernels, TensorFlow's matmuls
(``native.projection_gradients_by_matmul``; XLA's dots under XLA). This script
builds each model's float32 train step (graph mode, or compiled by XLA with
``--jit_compile``; forward + backward + Adam) both ways and times them in
interleaved rounds, each round calling every step once (medians), so both ways
see the same load; it prints matmuls / ops per model and which way this host's
default takes.

    python benchmarks/projection_gradients.py [--models sit,siet] [--jit_compile] [--repeats 15]
        [--out runs/pg.json]
    python benchmarks/projection_gradients.py --quick      # a smoke run, seconds
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras import native
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    interleaved_medians,
    parse_or_say_why,
    write_report,
)
from sit_keras.encoder_check import make_train_step
from sit_keras.models import build_encoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encoders import check_image_size, parse_model  # noqa: E402

WAYS = {"ops": native.projection_gradients_by_the_ops, "matmuls": native.projection_gradients_by_matmuls}
QUICK = {"image_size": 16, "batch": 2, "repeats": 3}


def train_steps(
    model: str,
    image_size: int,
    batch: int,
    jit_compile: bool = False,
    ways: Mapping[str, Callable[[], AbstractContextManager]] = WAYS,
) -> tuple[dict[str, Callable], tf.Tensor]:
    """``model``'s train step traced inside each way's context (``WAYS`` unless given), and its batch."""
    images = tf.constant(
        np.random.default_rng(0).integers(0, 256, size=(batch, image_size, image_size, 3), dtype=np.uint8)
    )
    name, overrides = parse_model(model)
    steps = {}
    for way, context in ways.items():
        tf_keras.utils.set_random_seed(0)
        step = make_train_step(
            build_encoder(name, (image_size, image_size, 3), **overrides), jit_compile=jit_compile
        )
        with context():
            step.get_concrete_function(images)  # traced with this way's gradients
        steps[way] = step
    return steps, images


def xla_and_graph_steps(
    models: Sequence[str],
    image_size: int,
    batch: int,
    xla_ways: Mapping[str, Callable[[], AbstractContextManager]],
    graph_ways: Mapping[str, Callable[[], AbstractContextManager]],
) -> dict[tuple[str, str], Callable[[], Any]]:
    """Per model and way, its train step traced inside the way's context, compiled by XLA (``xla_ways``) or
    in graph mode (``graph_ways``), as a function of no argument on the model's batch."""
    functions: dict[tuple[str, str], Callable[[], Any]] = {}
    for model in models:
        xla, images = train_steps(model, image_size, batch, jit_compile=True, ways=xla_ways)
        graph, _ = train_steps(model, image_size, batch, ways=graph_ways)
        for way, step in {**xla, **graph}.items():
            functions[model, way] = lambda step=step, images=images: step(images)
    return functions


def measure(
    models: list[str], image_size: int, batch: int, repeats: int, jit_compile: bool = False
) -> dict[str, dict[str, float]]:
    """Per model, the median train-step time (ms) each way and matmuls / ops."""
    functions: dict[tuple[str, str], Callable[[], Any]] = {}
    for model in models:
        steps, images = train_steps(model, image_size, batch, jit_compile)
        for way, step in steps.items():
            functions[model, way] = lambda step=step, images=images: step(images)
    medians = interleaved_medians(functions, repeats)
    return way_results(medians, models, WAYS, {"matmuls_over_ops": ("matmuls", "ops")})


def way_results(
    medians: Mapping[tuple[str, str], float],
    models: Sequence[str],
    ways: Iterable[str],
    ratios: Mapping[str, tuple[str, str]],
) -> dict[str, dict[str, float]]:
    """Per model, each way's median step in ms (``<way>_ms``, from ``medians`` in seconds keyed by model
    and way), then each ratio named in ``ratios`` (``name: (numerator way, denominator way)``)."""
    results = {}
    for model in models:
        result = {f"{way}_ms": 1000 * medians[model, way] for way in ways}
        result.update({name: result[f"{a}_ms"] / result[f"{b}_ms"] for name, (a, b) in ratios.items()})
        results[model] = result
    return results


def add_step_arguments(parser: SentenceParser, repeats: int) -> None:
    """The arguments of the steps this script and ``native_ab.py`` time (``check_step_arguments``)."""
    parser.add_argument("--models", default="sit,siet", help="SiT-family encoder names, comma-separated")
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=repeats, help="timed rounds (medians are reported)")
    parser.add_argument("--quick", action="store_true", help="16x16 images, batch 2, 3 rounds: a smoke run")
    parser.add_argument("--out", default=None, help="write the report as JSON here")


def check_step_arguments(args: Any) -> None:
    """The checks of ``--models``, ``--image_size``, ``--batch``, ``--repeats`` and ``--quick`` that this
    script and ``native_ab.py`` share, and that the native kernels load (else a ``UsageError`` says why)."""
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for flag in ("image_size", "batch", "repeats"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    image_size = min(args.image_size, QUICK["image_size"]) if args.quick else args.image_size
    for model in args.models:
        try:
            parse_model(model)
        except ValueError as error:
            raise UsageError(f"--models: {error}.") from None
        check_image_size(model, image_size)
    if not native.available():
        raise UsageError(
            f"the native kernels do not load here ({native.load_problem()}): nothing to compare."
        )


def step_settings(args: Any) -> dict[str, int]:
    """The image size, batch and rounds of the steps this script, ``native_ab.py`` and
    ``kernel_gradient_transpose.py`` time: the arguments', each capped by ``QUICK`` under ``--quick``."""
    settings = {"image_size": args.image_size, "batch": args.batch, "repeats": args.repeats}
    if args.quick:
        settings = {key: min(settings[key], value) for key, value in QUICK.items()}
    return settings


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    add_step_arguments(parser, repeats=15)
    parser.add_argument("--jit_compile", action="store_true", help="the train steps compiled by XLA")
    args = parser.parse_args(argv)
    check_step_arguments(args)
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    settings = step_settings(args)
    start = time.perf_counter()
    results = measure(
        args.models, settings["image_size"], settings["batch"], settings["repeats"], args.jit_compile
    )
    default = "matmuls" if native.projection_gradients_by_matmul() else "ops"
    mode = "XLA" if args.jit_compile else "graph"
    for model, r in results.items():
        print(
            f"{model} {mode} train step: gradients by the ops {r['ops_ms']:7.1f} ms, by TensorFlow's matmuls "
            f"{r['matmuls_ms']:7.1f} ms, matmuls / ops {r['matmuls_over_ops']:.3f}"
        )
    print(f"This host's default: the {default} (TensorFlow runs oneDNN: {default == 'matmuls'}).")
    report = {
        "what": f"SiT-family train steps (float32, {mode}) with the projection's gradients by the native ops "
        "and by TensorFlow's matmuls, interleaved rounds, medians",
        "command": command_line("projection_gradients.py", argv),
        "commit": current_commit(),
        "settings": {"models": args.models, **settings, "jit_compile": args.jit_compile, "quick": args.quick},
        "default_here": default,
        "environment": environment(),
        "results": results,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
