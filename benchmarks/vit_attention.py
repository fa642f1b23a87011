"""The ViT baseline's attention layer: Keras' ``MultiHeadAttention`` against the ViT's own.

``sit_keras.models.vit`` attends with a subclass of Keras' ``MultiHeadAttention``
whose kernel puts the heads first once and forms the scores and the weighted values
as batched matmuls, where Keras forms them with einsums (``aecd,abcd->acbe``). Both
compute the same function with the same weights (``tests/test_baselines.py``). This
script times one forward and backward pass of the whole layer (projections included)
both ways, in interleaved rounds (each round calls each form once; medians), at the
sizes of the two ViTs that the benchmarks train:

- ``lavacrossing``: ``configs/minigrid/lavacrossing_vit.gin`` in PPO's minibatch,
  256 images of 7x7 patches and a class token (50 tokens), width 64, 8 heads;
- ``procgen``: ``build_encoder("vit", (64, 64, 3))`` in ``benchmarks/encoders.py``'s
  train step, batch 96 of 8x8 patches and a class token (65 tokens), width 64, 4 heads.

    python benchmarks/vit_attention.py [--repeats 9] [--out runs/vit_attention.json]
    python benchmarks/vit_attention.py --quick      # a smoke run, seconds
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

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
from sit_keras.models.vit import _Float32SoftmaxAttention

# name -> (batch, tokens, width, heads)
SHAPES = {"lavacrossing": (256, 50, 64, 8), "procgen": (96, 65, 64, 4)}
QUICK_BATCH = 8


def _train_steps(batch: int, tokens: int, width: int, heads: int) -> tuple[Callable[[], Any], ...]:
    """(Keras' layer, the ViT's layer): a forward and backward pass each, as ``tf.function``s of no
    argument, with the same weights and inputs."""
    generator = tf.random.Generator.from_seed(0)
    x = generator.normal([batch, tokens, width])
    upstream = generator.normal([batch, tokens, width])
    keras = tf_keras.layers.MultiHeadAttention(num_heads=heads, key_dim=width // heads)
    ours = _Float32SoftmaxAttention(num_heads=heads, key_dim=width // heads)
    keras(x, x)
    ours(x, x)
    ours.set_weights(keras.get_weights())

    def train_step(layer: tf_keras.layers.Layer) -> Callable[[], Any]:
        def run() -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, x)
            return tape.gradient(y, [x, *layer.trainable_variables], output_gradients=upstream)

        return tf.function(run)

    return train_step(keras), train_step(ours)


def measure(shapes: dict[str, tuple[int, int, int, int]], repeats: int) -> dict[str, Any]:
    """Medians (ms) of both layers' train steps per shape, and Keras' over the ViT's."""
    steps = {
        (name, form): fn for name, shape in shapes.items() for form, fn in enumerate(_train_steps(*shape))
    }
    medians = interleaved_medians(steps, repeats)
    results: dict[str, Any] = {}
    for name, (batch, tokens, width, heads) in shapes.items():
        keras, ours = (1000 * medians[name, form] for form in (0, 1))
        results[name] = {
            "batch": batch,
            "tokens": tokens,
            "width": width,
            "heads": heads,
            "keras_ms": keras,
            "vit_ms": ours,
            "keras_over_vit": keras / ours,
        }
    return results


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds (medians are reported)")
    parser.add_argument("--quick", action="store_true", help=f"batch {QUICK_BATCH}, 3 rounds")
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1; received {args.repeats}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit = current_commit()
    shapes, repeats = SHAPES, args.repeats
    if args.quick:
        shapes = {name: (QUICK_BATCH, *rest) for name, (_, *rest) in SHAPES.items()}
        repeats = min(repeats, 3)
    start = time.perf_counter()
    results = measure(shapes, repeats)
    for name, r in results.items():
        print(
            f"{name:<13} (batch {r['batch']}, {r['tokens']} tokens, width {r['width']}, {r['heads']} heads): "
            f"Keras' MultiHeadAttention {r['keras_ms']:7.1f} ms, the ViT's {r['vit_ms']:7.1f} ms, "
            f"ratio {r['keras_over_vit']:.2f}"
        )
    report = {
        "what": "Forward and backward pass of the ViT's attention layer: Keras' MultiHeadAttention (einsums) "
        "against sit_keras.models.vit's (head-major batched matmuls), same weights",
        "command": command_line("vit_attention.py", argv),
        "commit": commit,
        "repeats": repeats,
        "environment": environment(),
        "results": results,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
