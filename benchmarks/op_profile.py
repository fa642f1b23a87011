"""Where a SiT encoder's train step spends its time, op by op (TensorFlow's profiler).

``benchmarks/encoders.py`` splits the train step into stages (stem, local GSA,
global GSA); this script looks inside one of them, or the whole step. It builds
the encoder as ``encoders.py`` does (a name, or a training config's encoder),
warms the function up, and records ``--calls`` graph-mode calls with
``tf.profiler``, under the Keras dtype policy ``--precision``. The recorded op
executions are summed per op type and per graph node (with the node's input and
output shapes), in ms per call and as shares of the summed op time. On two
cores the executor runs independent ops side by side, so the summed op time can
exceed the wall time, and an op that runs beside another one is timed as long
as it waits for the shared threads. ``--one_op_at_a_time`` gives TensorFlow one
inter-op thread, so each op runs alone on both cores and its time is its own.

With ``--jit_compile`` it profiles the train step compiled by XLA instead: XLA's
legacy CPU runtime records each HLO instruction it runs
(``--xla_cpu_enable_xprof_traceme``), one after the other, and the optimised
HLO, dumped beside, names each: its custom call's target (a oneDNN or native
kernel) or the TensorFlow op of its fused loop, with the op's name and shape.
XLA reads its flags at its first compilation, so this mode needs a fresh
process.

    python benchmarks/op_profile.py [--model sit] [--stage local_gsa|global_gsa|stem_pool|train]
        [--image_size 64] [--batch 96] [--calls 3] [--top 25] [--precision float32]
        [--jit_compile] [--one_op_at_a_time] [--out runs/op_profile.json]
    python benchmarks/op_profile.py --quick      # a smoke run, seconds
"""

from __future__ import annotations

import sys

if "--one_op_at_a_time" in sys.argv:  # one inter-op thread, set before TensorFlow starts its runtime
    from sit_keras import quiet

    quiet.import_tensorflow(inter_op_threads=1)
import sit_keras.quiet_start  # noqa: F401, E402  (drops TensorFlow's start-up chatter)

# isort: split

import collections
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
    write_report,
)
from sit_keras.encoder_check import make_train_step
from sit_keras.models import build_encoder
from sit_keras.models.sit import VARIANTS, SiTEncoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encoders import _stage_functions, parse_model  # noqa: E402
from hlo_events import describe, instruction_events, line_events, trace_flags  # noqa: E402

STAGES = ("train", "stem_pool", "local_gsa", "global_gsa")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
SETTINGS = (
    "model",
    "stage",
    "image_size",
    "batch",
    "calls",
    "top",
    "precision",
    "jit_compile",
    "one_op_at_a_time",
)


def profiled_function(
    model: str, stage: str, image_size: int, batch: int, precision: str = "float32", jit_compile: bool = False
) -> tuple[Callable, tf.Tensor]:
    """The function of ``stage`` (the train step, compiled by XLA with ``jit_compile``, or a stage's forward +
    backward in graph mode), its input; the encoder built under the Keras dtype policy ``precision``."""
    tf_keras.utils.set_random_seed(0)
    name, overrides = parse_model(model)
    tf_keras.mixed_precision.set_global_policy(precision)
    try:
        encoder = build_encoder(name, (image_size, image_size, 3), **overrides)
    finally:
        tf_keras.mixed_precision.set_global_policy(None)  # back to the floatx default
    images = np.random.default_rng(0).integers(
        0, 256, size=(batch, image_size, image_size, 3), dtype=np.uint8
    )
    images = tf.constant(images)
    if stage == "train":
        return make_train_step(encoder, jit_compile=jit_compile), images
    if not isinstance(encoder, SiTEncoder):
        raise UsageError(f"--stage {stage} needs a SiT-family model; {model!r} has no stages.")
    return _stage_functions(encoder, images)[stage]


def op_events(logdir: str) -> list[tuple[str, float]]:
    """``(node:op type, microseconds)`` of every TensorFlow op execution in a profile folder."""
    return [
        (name, micros)
        for name, micros in line_events(logdir, "tf_Compute")
        if ":" in name and "::" not in name  # "scope/node:OpType", not "ExecutorState::Process"
    ]


def node_shapes(fn: Callable, x: tf.Tensor) -> dict[str, tuple[str, str]]:
    """``node name -> ("in shapes -> out shapes", "out dtypes")`` from the traced graph."""
    graph = fn.get_concrete_function(x).graph
    shapes = {}
    for op in graph.get_operations():
        inputs = ", ".join(str(tuple(t.shape)) for t in op.inputs if t.dtype != tf.resource)
        outputs = ", ".join(str(tuple(t.shape)) for t in op.outputs)
        shapes[op.name] = (f"{inputs} -> {outputs}", ", ".join(t.dtype.name for t in op.outputs))
    return shapes


def profile(fn: Callable, x: tf.Tensor, calls: int, top: int, hlo_dump: str | None = None) -> dict[str, Any]:
    """Per op type and per node: ms per call and share of the summed op time. With ``hlo_dump`` (XLA's
    dump folder, ``fn`` compiled by XLA with its instructions traced): per HLO instruction instead."""
    for _ in range(3):
        fn(x)  # trace, then warm up
    wall = []
    for _ in range(calls):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), fn(x))
        wall.append(1000 * (time.perf_counter() - start))
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(calls):
            tf.nest.map_structure(lambda t: t.numpy(), fn(x))
        tf.profiler.experimental.stop()
        if hlo_dump is None:
            events, shapes = op_events(logdir), node_shapes(fn, x)
        else:
            events, shapes = _instruction_ops(logdir, hlo_dump)
    if not events:
        raise RuntimeError(
            "the profiler recorded no TensorFlow op: is this TensorFlow's CPU build?"
            if hlo_dump is None
            else "XLA recorded no instruction: it reads its flags at its first compilation, so profile the "
            "XLA step in a fresh process"
        )
    by_type: collections.Counter = collections.Counter()
    by_node: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for name, micros in events:
        node, op_type = name.rsplit(":", 1)
        by_type[op_type] += micros
        by_node[node, op_type] += micros
        counts[op_type] += 1
    total = sum(by_type.values())
    return {
        "wall_ms_median": statistics.median(wall),
        "summed_op_ms_per_call": total / calls / 1000,
        "op_types": [
            {
                "op": op,
                "ms_per_call": t / calls / 1000,
                "share": t / total,
                "executions_per_call": counts[op] / calls,
            }
            for op, t in by_type.most_common()
        ],
        "nodes": [
            {
                "node": node,
                "op": op,
                "ms_per_call": t / calls / 1000,
                "share": t / total,
                "shapes": shapes.get(node, ("", ""))[0],
                "dtypes": shapes.get(node, ("", ""))[1],
            }
            for (node, op), t in by_node.most_common(top)
        ],
    }


def _instruction_ops(
    logdir: str, hlo_dump: str
) -> tuple[list[tuple[str, float]], dict[str, tuple[str, str]]]:
    """``("TensorFlow op name [HLO instruction]:what it computes", microseconds)`` per instruction run, and
    each such node's result shape (as ``node_shapes``' pairs, without dtypes)."""
    described = describe(hlo_dump, "train_step")
    events, shapes = [], {}
    for name, micros in instruction_events(logdir):
        if name in described:
            instruction = described[name]
            node = f"{instruction.node} [{name}]"
            shapes[node] = (instruction.shape, "")
            events.append((f"{node}:{instruction.op}", micros))
    return events, shapes


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="sit",
        help=f"an encoder name or a training config (.gin); stages need one of {', '.join(VARIANTS)}",
    )
    parser.add_argument("--stage", default="local_gsa", choices=STAGES, help="what to profile")
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=96)
    parser.add_argument("--calls", type=int, default=3, help="profiled calls (and timed calls before them)")
    parser.add_argument("--top", type=int, default=25, help="nodes listed")
    parser.add_argument("--precision", default="float32", choices=PRECISIONS, help="Keras dtype policy")
    parser.add_argument(
        "--jit_compile", action="store_true", help="the train step compiled by XLA, per HLO instruction"
    )
    parser.add_argument(
        "--one_op_at_a_time",
        action="store_true",
        help="graph mode with one inter-op thread: no op's time includes waiting for another's threads",
    )
    parser.add_argument("--quick", action="store_true", help="16x16 images, batch 2")
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    for flag in ("image_size", "batch", "calls", "top"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    if args.jit_compile and args.stage != "train":
        raise UsageError(f"--jit_compile profiles the train step; give --stage train, not {args.stage}.")
    if args.jit_compile and args.one_op_at_a_time:
        raise UsageError("--one_op_at_a_time is for graph mode; XLA already runs one instruction at a time.")
    if args.quick:
        args.image_size, args.batch = 16, 2
    check_out_file(args.out)
    return args


def _print(result: dict[str, Any], top_types: int = 12) -> None:
    print(
        f"wall {result['wall_ms_median']:.1f} ms per call (median); "
        f"summed op time {result['summed_op_ms_per_call']:.1f} ms per call"
    )
    for row in result["op_types"][:top_types]:
        print(f"  {row['ms_per_call']:9.2f} ms {row['share']:6.1%}  {row['op']}")
    print("Nodes:")
    for row in result["nodes"]:
        where = f"{row['node']} ({row['op']}): {row['shapes']} {row['dtypes']}"
        print(f"  {row['ms_per_call']:9.2f} ms {row['share']:6.1%}  {where}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit = current_commit()
    if args.one_op_at_a_time and tf.config.threading.get_inter_op_parallelism_threads() != 1:
        # Called in a process whose runtime started with more (the script sets it at its import).
        print("--one_op_at_a_time needs a fresh process: TensorFlow's threads are set.", file=sys.stderr)
        return 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as hlo_dump:
        if args.jit_compile:  # before XLA's first compilation, which reads them
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {trace_flags(hlo_dump)}".strip()
        try:
            fn, x = profiled_function(
                args.model, args.stage, args.image_size, args.batch, args.precision, args.jit_compile
            )
        except (UsageError, ValueError) as error:
            print(error, file=sys.stderr)
            return 2
        result = profile(fn, x, args.calls, args.top, hlo_dump if args.jit_compile else None)
    _print(result)
    mode = "XLA, per HLO instruction" if args.jit_compile else "graph mode"
    if args.one_op_at_a_time:
        mode += ", one op at a time"
    report = {
        "what": f"TensorFlow op times of {args.model}'s {args.stage} ({mode}, {args.precision}) by type and "
        "node",
        "command": command_line("op_profile.py", argv),
        "commit": commit,
        "settings": {k: getattr(args, k) for k in SETTINGS},
        "environment": environment(),
        **result,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
