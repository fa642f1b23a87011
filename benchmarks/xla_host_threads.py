"""XLA train steps with the native kernels' custom calls on TensorFlow's threads and on a pool of their own,
beside the graph step, in one run.

XLA's CPU runtime gives a custom call no threads; the XLA launch gives the compiled program TensorFlow's
intra-op threads for its own parallel loops and oneDNN calls. The native kernels' host functions run on those
threads too, or, as before, on a pool of their own (``sit_keras.native.xla_host_threads``). This script builds
each model's float32 train step (forward + backward + Adam) compiled by XLA and in graph mode, and times the
graph step and the XLA step with the host functions on each pool (chosen before each call: one compiled
program serves both) in interleaved rounds, medians. In a round each way's step runs ``--turn`` times in a
row and its first call is not timed: a pool's threads spin for work for a while after their last task, which
would fall on whatever runs next. It prints own pool / TensorFlow's threads and each XLA step over the graph
step. The defaults are the LavaCrossing configs at the MiniGrid size, where the steps' ops are shortest.

    python benchmarks/xla_host_threads.py [--models sit,configs/minigrid/lavacrossing_cnn.gin]
        [--image_size 14] [--repeats 15] [--turn 6] [--out runs/threads.json]
    python benchmarks/xla_host_threads.py --quick      # a smoke run, seconds
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import projection_gradients  # noqa: E402

CONFIGS = ("sit_small", "siet_rotation_pooled", "vit", "cnn")
MODELS = ",".join(f"configs/minigrid/lavacrossing_{name}.gin" for name in CONFIGS)
# Calls of a way's step in a row a round under --quick.
QUICK_TURN = 2
# Each way: whether the step is compiled by XLA, and whether the host functions run on TensorFlow's threads.
WAYS = {"graph": (False, True), "xla_tensorflow_threads": (True, True), "xla_own_pool": (True, False)}


def measure(
    models: list[str], image_size: int, batch: int, repeats: int, turn: int
) -> dict[str, dict[str, float]]:
    """Per model, the median train-step time (ms) each way (``WAYS``, ``turn`` calls in a row a round, the
    first untimed) and their ratios."""
    functions: dict[tuple[str, str], Callable[[], Any]] = {}
    for model in models:
        steps = {}
        for jit_compile in (False, True):
            traced, images = projection_gradients.train_steps(
                model, image_size, batch, jit_compile=jit_compile, ways={"default": contextlib.nullcontext}
            )
            steps[jit_compile] = traced["default"]
        for way, (jit_compile, device) in WAYS.items():
            # Every way chooses the pool before its step (in the graph step it changes nothing), so each
            # call includes that eager op alike.
            def call(step=steps[jit_compile], images=images, device=device) -> Any:
                native.xla_host_threads(device=device)
                return step(images)

            functions[model, way] = call
    medians = interleaved_medians(functions, repeats, turn)
    native.xla_host_threads(device=True)
    ratios = {
        "own_pool_over_tensorflow_threads": ("xla_own_pool", "xla_tensorflow_threads"),
        "xla_tensorflow_threads_over_graph": ("xla_tensorflow_threads", "graph"),
        "xla_own_pool_over_graph": ("xla_own_pool", "graph"),
    }
    return projection_gradients.way_results(medians, models, WAYS, ratios)


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    projection_gradients.add_step_arguments(parser, repeats=15)
    parser.add_argument(
        "--turn", type=int, default=6, help="calls of a way's step in a row a round, the first untimed"
    )
    parser.set_defaults(models=MODELS, image_size=14)
    args = parser.parse_args(argv)
    projection_gradients.check_step_arguments(args)
    if args.turn < 2:
        raise UsageError(f"--turn must be at least 2 (its first call is not timed); received {args.turn}.")
    if native.xla_load_problem() is not None:
        raise UsageError(f"the native kernels' XLA kernels do not load here ({native.xla_load_problem()}).")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    settings = {**projection_gradients.step_settings(args), "turn": QUICK_TURN if args.quick else args.turn}
    start = time.perf_counter()
    results = measure(args.models, *(settings[key] for key in ("image_size", "batch", "repeats", "turn")))
    for model, r in results.items():
        print(
            f"{model} train step: graph {r['graph_ms']:7.1f} ms, XLA on TensorFlow's threads "
            f"{r['xla_tensorflow_threads_ms']:7.1f} ms, on a pool of its own {r['xla_own_pool_ms']:7.1f} ms; "
            f"own / TensorFlow's {r['own_pool_over_tensorflow_threads']:.3f}, XLA / graph "
            f"{r['xla_tensorflow_threads_over_graph']:.3f} (own pool: {r['xla_own_pool_over_graph']:.3f})"
        )
    report = {
        "what": "float32 train steps: graph, XLA with the native kernels' custom calls on TensorFlow's "
        "intra-op threads, XLA with them on a pool of their own; interleaved rounds, medians",
        "command": command_line("xla_host_threads.py", argv),
        "commit": current_commit(),
        "settings": {"models": args.models, **settings, "quick": args.quick},
        "environment": environment(),
        "results": results,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
