"""The kernel gradient of a channels-first projection, as TensorFlow forms it and as the GSA layers do.

The fast GSA path projects channels-first tokens, ``qkv = W^T x`` with a small
``(R, N)`` kernel and ``(R, L)`` inputs, ``L`` = batch x tokens (about 10^5).
TensorFlow's MatMul gradient forms the kernel's gradient as ``x dy^T``
(``tf.matmul(x, dy, transpose_b=True)``); ``sit_keras.layers.channels_first``
forms the same product as ``(dy x^T)^T``, a batched matmul of one matrix
(earlier as a 2-D one, the ``transposed`` form below). This script times, per
shape, in interleaved rounds (each round calls every function once; medians):

- ``kernel_grad``: the kernel's gradient alone, the three ways;
- ``both_gradients``: the kernel's and the input's gradients of
  ``tf.matmul(W, x, transpose_a=True)`` against those of ``project_channels_first(W, x)``
  (the forward product is not computed: neither gradient needs it).

The default shapes are the SiT train step's at 64x64, batch 96 (``benchmarks/encoders.py``):
the first local block's composed projection (``R = C + 3 = 6``) and the second block's
(``R = D = 64``), both to ``N = 3 D = 192`` over ``L = 6144`` windows x 17 tokens.

    python benchmarks/channels_first_grad.py [--repeats 9] [--out runs/channels_first_grad.json]
    python benchmarks/channels_first_grad.py --quick      # a smoke run, seconds
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

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
from sit_keras.layers.channels_first import project_channels_first

SHAPES = {"first_block": (6, 192, 104448), "second_block": (64, 192, 104448)}
QUICK_COLUMNS = 4096
# TensorFlow's gradient, the layers', and (the kernel's gradient only) the layers' earlier 2-D form.
FORMS = ("tensorflow", "channels_first", "transposed")


def _functions(rows: int, outputs: int, columns: int) -> dict[str, tuple[Callable[[], Any], ...]]:
    """Per measurement, its forms (``FORMS``), each a ``tf.function`` of no argument."""
    generator = tf.random.Generator.from_seed(0)
    kernel = generator.normal([rows, outputs])
    x = generator.normal([rows, columns])
    upstream = generator.normal([outputs, columns])

    def gradients(project: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]) -> Callable[[], Any]:
        def run() -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                tape.watch([kernel, x])
                y = project(kernel, x)
            return tape.gradient(y, [kernel, x], output_gradients=upstream)

        return tf.function(run)

    return {
        "kernel_grad": (
            tf.function(lambda: tf.matmul(x, upstream, transpose_b=True)),
            tf.function(lambda: tf.transpose(tf.matmul(upstream[None], x[None], transpose_b=True)[0])),
            tf.function(lambda: tf.transpose(tf.matmul(upstream, x, transpose_b=True))),
        ),
        "both_gradients": (
            gradients(lambda w, v: tf.matmul(w, v, transpose_a=True)),
            gradients(project_channels_first),
        ),
    }


def measure(shapes: dict[str, tuple[int, int, int]], repeats: int) -> dict[str, Any]:
    """Medians (ms) of both forms of every measurement of every shape, and their ratios."""
    functions = {name: _functions(*shape) for name, shape in shapes.items()}
    medians = interleaved_medians(
        {
            (name, measurement, form): fn
            for name, measurements in functions.items()
            for measurement, forms in measurements.items()
            for form, fn in enumerate(forms)
        },
        repeats,
    )
    results: dict[str, Any] = {}
    for name, (rows, outputs, columns) in shapes.items():
        results[name] = {"rows": rows, "outputs": outputs, "columns": columns}
        for measurement, forms in functions[name].items():
            times = {form: 1000 * medians[name, measurement, f] for f, form in enumerate(FORMS[: len(forms)])}
            results[name][measurement] = {f"{form}_ms": ms for form, ms in times.items()}
            for form, ms in times.items():
                if form != "channels_first":
                    results[name][measurement][f"{form}_over_channels_first"] = ms / times["channels_first"]
    return results


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds (medians are reported)")
    parser.add_argument("--quick", action="store_true", help=f"L = {QUICK_COLUMNS} columns, 3 rounds")
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
    shapes = SHAPES
    repeats = args.repeats
    if args.quick:
        shapes = {name: (rows, outputs, QUICK_COLUMNS) for name, (rows, outputs, _) in SHAPES.items()}
        repeats = min(repeats, 3)
    start = time.perf_counter()
    results = measure(shapes, repeats)
    for name, result in results.items():
        for measurement in ("kernel_grad", "both_gradients"):
            r = result[measurement]
            earlier = (
                f", 2-D (dy x^T)^T {r['transposed_ms']:7.1f} ms"
                f" (ratio {r['transposed_over_channels_first']:.2f})"
                if "transposed_ms" in r
                else ""
            )
            print(
                f"{name:<13} {measurement:<14} (R={result['rows']}, N={result['outputs']}, "
                f"L={result['columns']}): TensorFlow's form {r['tensorflow_ms']:7.1f} ms, "
                f"channels-first {r['channels_first_ms']:7.1f} ms, "
                f"ratio {r['tensorflow_over_channels_first']:.2f}{earlier}"
            )
    report = {
        "what": "Kernel gradient of W^T x: TensorFlow's MatMul gradient against project_channels_first",
        "command": command_line("channels_first_grad.py", argv),
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
