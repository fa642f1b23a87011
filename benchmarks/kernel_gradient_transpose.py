"""The SiT family's XLA train steps with the projection's kernel gradient transposed by a gather and by
XLA's fold, beside the graph step, in one run.

Where TensorFlow runs oneDNN the projection's kernel gradient is the batched matmul ``dy x^T`` and a small
transpose (``sit_keras.layers.channels_first.kernel_gradient_by_matmul``). XLA folds such a transpose into
the dot and forms ``x dy^T`` instead; under XLA the layer transposes by a gather, which XLA does not fold
(``folded_kernel_gradients()`` brings the fold back). This script builds each model's float32 train step
(forward + backward + Adam) three ways, all with the matmuls' gradients: compiled by XLA with the gather,
compiled by XLA with the fold, and in graph mode; it times them in interleaved rounds (medians) and prints
gathered / folded and each XLA step over the graph step.

    python benchmarks/kernel_gradient_transpose.py [--models sit,siet] [--repeats 15] [--out runs/kt.json]
    python benchmarks/kernel_gradient_transpose.py --quick      # a smoke run, seconds
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from sit_keras import native
from sit_keras.benchmarking import (
    SentenceParser,
    check_out_file,
    command_line,
    current_commit,
    environment,
    interleaved_medians,
    parse_or_say_why,
    write_report,
)
from sit_keras.layers.channels_first import folded_kernel_gradients

sys.path.insert(0, str(Path(__file__).resolve().parent))
import projection_gradients  # noqa: E402

WAYS = ("xla_gathered", "xla_folded", "graph")


@contextlib.contextmanager
def _folded_matmul_gradients() -> Iterator[None]:
    with native.projection_gradients_by_matmuls(), folded_kernel_gradients():
        yield


XLA_WAYS = {"xla_gathered": native.projection_gradients_by_matmuls, "xla_folded": _folded_matmul_gradients}


def measure(models: list[str], image_size: int, batch: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per model, the median train-step time (ms) each way (``WAYS``) and their ratios."""
    graph = {"graph": native.projection_gradients_by_matmuls}
    functions = projection_gradients.xla_and_graph_steps(models, image_size, batch, XLA_WAYS, graph)
    medians = interleaved_medians(functions, repeats)
    ratios = {
        "gathered_over_folded": ("xla_gathered", "xla_folded"),
        "xla_gathered_over_graph": ("xla_gathered", "graph"),
        "xla_folded_over_graph": ("xla_folded", "graph"),
    }
    return projection_gradients.way_results(medians, models, WAYS, ratios)


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    projection_gradients.add_step_arguments(parser, repeats=15)
    args = parser.parse_args(argv)
    projection_gradients.check_step_arguments(args)
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    settings = projection_gradients.step_settings(args)
    start = time.perf_counter()
    results = measure(args.models, settings["image_size"], settings["batch"], settings["repeats"])
    for model, r in results.items():
        print(
            f"{model} train step: XLA with the gather {r['xla_gathered_ms']:7.1f} ms, with XLA's fold "
            f"{r['xla_folded_ms']:7.1f} ms, graph {r['graph_ms']:7.1f} ms; gathered / folded "
            f"{r['gathered_over_folded']:.3f}, XLA / graph {r['xla_gathered_over_graph']:.3f} "
            f"(folded: {r['xla_folded_over_graph']:.3f})"
        )
    used = "used" if native.projection_gradients_by_matmul() else "not used (the native ops' gradients)"
    print(f"This host's default steps take the matmuls' gradients: {used}.")
    report = {
        "what": "SiT-family float32 train steps with the projection's gradients by the matmuls: XLA with "
        "the kernel gradient transposed by a gather, XLA with XLA's fold, graph; interleaved rounds, medians",
        "command": command_line("kernel_gradient_transpose.py", argv),
        "commit": current_commit(),
        "settings": {"models": args.models, **settings, "quick": args.quick},
        "matmul_gradients_by_default_here": native.projection_gradients_by_matmul(),
        "environment": environment(),
        "results": results,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
