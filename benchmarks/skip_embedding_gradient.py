"""The skip embedding's input gradient under XLA as a summed product and as XLA's matmul, in one run.

The first local block embeds every pixel of every window as ``[x, 1, 0] [E; e; c]``, a ``(N, 5) x (5, D)``
product (``sit_keras.layers.skip_embedding``). Under XLA the layer forms the input's gradient as a broadcast
product summed over ``D`` (``summed_embedding_gradients()``; an AMD host's default) or as XLA's matmul, a
oneDNN call on x86 (``matmul_embedding_gradients()``; an Intel host's default). This script times, in
interleaved rounds (medians), the product alone with both gradients (``--rows`` rows; the SiT's at batch 96
and 64x64 by default) under XLA each way and in a graph, and each model's float32 train step (forward +
backward + Adam) under XLA each way and in a graph; it prints summed / matmul and each XLA step over the graph
step, and which form this host's steps take.

    python benchmarks/skip_embedding_gradient.py [--models sit,siet] [--repeats 21] [--out runs/se.json]
    python benchmarks/skip_embedding_gradient.py --quick      # a smoke run, seconds
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
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
from sit_keras.layers.skip_embedding import (
    embed_few_channels,
    matmul_embedding_gradients,
    summed_embedding_gradients,
    sums_gradient_by_default,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import projection_gradients  # noqa: E402

WAYS = ("xla_summed", "xla_matmul", "graph")
CONTEXTS = {"xla_summed": summed_embedding_gradients, "xla_matmul": matmul_embedding_gradients}
RATIOS = {
    "summed_over_matmul": ("xla_summed", "xla_matmul"),
    "xla_summed_over_graph": ("xla_summed", "graph"),
    "xla_matmul_over_graph": ("xla_matmul", "graph"),
}
PRODUCT = "product"  # the results' key of the product alone
SIT_ROWS = 96 * 64 * 17  # batch 96 at 64x64: 64 windows of 16 pixels and a class token an image
QUICK_ROWS = 2 * 4 * 17


def _product_steps(rows: int, channels: int = 5, dim: int = 64) -> dict[str, Callable[[], Any]]:
    """The product and both its gradients, each way, on fixed random inputs."""
    rng = np.random.default_rng(0)
    inputs = [
        tf.constant(rng.normal(size=shape), tf.float32) for shape in [(rows, channels), (channels, dim)]
    ]
    upstream = tf.constant(rng.normal(size=(rows, dim)), tf.float32)

    def both(x: tf.Tensor, table: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch([x, table])
            out = embed_few_channels(x, table)
        return [out, *tape.gradient(out, [x, table], output_gradients=upstream)]

    steps = {}
    for way in WAYS:
        function = tf.function(both, jit_compile=way != "graph")
        with CONTEXTS.get(way, contextlib.nullcontext)():
            function.get_concrete_function(*inputs)  # traced with this way's gradient
        steps[way] = lambda function=function: function(*inputs)
    return steps


def measure(models: list[str], image_size: int, batch: int, rows: int, repeats: int) -> dict[str, dict]:
    """The product's and each model's train step's median time (ms) each way (``WAYS``) and their ratios."""
    graph = {"graph": contextlib.nullcontext}
    functions = projection_gradients.xla_and_graph_steps(models, image_size, batch, CONTEXTS, graph)
    functions.update({(PRODUCT, way): step for way, step in _product_steps(rows).items()})
    medians = interleaved_medians(functions, repeats)
    return projection_gradients.way_results(medians, [PRODUCT, *models], WAYS, RATIOS)


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    projection_gradients.add_step_arguments(parser, repeats=21)
    parser.add_argument("--rows", type=int, default=SIT_ROWS, help="the product's rows (default: the SiT's)")
    args = parser.parse_args(argv)
    projection_gradients.check_step_arguments(args)
    if args.rows < 1:
        raise UsageError(f"--rows must be at least 1; received {args.rows}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    settings = projection_gradients.step_settings(args)
    settings["rows"] = min(args.rows, QUICK_ROWS) if args.quick else args.rows
    start = time.perf_counter()
    results = measure(
        args.models, settings["image_size"], settings["batch"], settings["rows"], settings["repeats"]
    )
    for name, r in results.items():
        what = f"the product ({settings['rows']} x 5 x 64) with its gradients" if name == PRODUCT else name
        print(
            f"{what}: XLA summed {r['xla_summed_ms']:7.2f} ms, XLA matmul {r['xla_matmul_ms']:7.2f} ms, "
            f"graph {r['graph_ms']:7.2f} ms; summed / matmul {r['summed_over_matmul']:.3f}, XLA / graph "
            f"{r['xla_summed_over_graph']:.3f} (matmul: {r['xla_matmul_over_graph']:.3f})"
        )
    default = "summed" if sums_gradient_by_default() else "matmul"
    print(f"This host's XLA steps take the {default} input gradient.")
    report = {
        "what": "The skip embedding's product with its gradients, and SiT-family float32 train steps: "
        "XLA with the input's gradient as a summed product, XLA with its matmul, graph; interleaved rounds, "
        "medians",
        "command": command_line("skip_embedding_gradient.py", argv),
        "commit": current_commit(),
        "settings": {"models": args.models, **settings, "quick": args.quick},
        "environment": environment(),
        "results": results,
        "default": default,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
