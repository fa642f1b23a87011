"""Where XLA loses the IMPALA-CNN's train step: each convolution's three products and the pooling, apart.

On a host whose TensorFlow runs its own oneDNN ops (an Intel CPU: ``IsMklEnabled()``), the
IMPALA-CNN's train step took 2.4x as long with ``jit_compile=True`` as without it
(``docs/speed.md``, "The targets on an Intel host with AMX"). This benchmark splits that step into
the ops its gradient runs, at the encoder table's shapes (batch 96, 64x64x3, the
SiT paper's channels 4, 8 and 16), and times each as a graph (``tf.function``) and
compiled by XLA, in interleaved rounds (``measured_choice.time_candidates``):

- per 3x3 "same" convolution of the stack (its input's channels, output channels
  and side): the forward product, the input's gradient (``Conv2DBackpropInput``)
  and the kernel's gradient (``Conv2DBackpropFilter``);
- per max pooling (3x3, stride 2, "same"): the forward pass and its gradient
  (``MaxPoolGrad``; XLA's select-and-scatter).

Where the native kernels' XLA library loads, each of them is also timed as the
CNN layers compute it under XLA since (``sit_keras.layers.native_gradients``),
in the same rounds: the forward product and the input's gradient as the native
op ``SitConv2D`` (the latter with the kernel turned by 180 degrees and its
channel axes swapped), the kernel gradient as ``SitConv2DKernelGrad``, and the
pooling with ``SitStridedMaxPoolGrad``.
Each op's ratio is the median of its per-round ratios over the graph's time.

Usage::

    python benchmarks/xla_conv_gradients.py [--rounds 7] [--calls 3] [--batch 96]
        [--out benchmarks/results/xla_conv_gradients.json]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import tensorflow as tf

from sit_keras import measured_choice, native
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

DEFAULT_OUT = "benchmarks/results/xla_conv_gradients.json"
# The IMPALA-CNN of the encoder table (channels 4, 8, 16 on 64x64x3): each distinct convolution
# (input channels, output channels, side) and each pooling's (channels, side).
CONVOLUTIONS = ((3, 4, 64), (4, 4, 32), (4, 8, 32), (8, 8, 16), (8, 16, 16), (16, 16, 8))
POOLINGS = ((4, 64), (8, 32), (16, 16))
STRIDES = [1, 1, 1, 1]


def _random(shape: Sequence[int], seed: int) -> tf.Tensor:
    return tf.random.stateless_normal(shape, seed=(0, seed))


def _operations(
    batch: int,
) -> dict[str, tuple[Callable[..., tf.Tensor], Callable | None, tuple[tf.Tensor, ...]]]:
    """Op name -> (TensorFlow's function, the native form or None, their inputs)."""
    ops = {}
    for c_in, c_out, side in CONVOLUTIONS:
        x, dy = _random((batch, side, side, c_in), 1), _random((batch, side, side, c_out), 2)
        w = _random((3, 3, c_in, c_out), 3)
        name = f"conv {c_in}->{c_out} at {side}x{side}"
        ops[f"{name}: forward"] = (
            lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"),
            lambda x, w: native.library().sit_conv2d(x, w, tf.zeros([w.shape[-1]])),
            (x, w),
        )
        ops[f"{name}: input gradient"] = (
            lambda dy, w, shape=x.shape: tf.raw_ops.Conv2DBackpropInput(
                input_sizes=shape, filter=w, out_backprop=dy, strides=STRIDES, padding="SAME"
            ),
            lambda dy, w: native.library().sit_conv2d(
                dy, tf.transpose(tf.reverse(w, [0, 1]), [0, 1, 3, 2]), tf.zeros([w.shape[2]])
            ),
            (dy, w),
        )
        ops[f"{name}: kernel gradient"] = (
            lambda x, dy, shape=w.shape: tf.raw_ops.Conv2DBackpropFilter(
                input=x, filter_sizes=shape, out_backprop=dy, strides=STRIDES, padding="SAME"
            ),
            lambda x, dy: native.library().sit_conv2d_kernel_grad(dy, x, size=3),
            (x, dy),
        )
    for channels, side in POOLINGS:
        x = _random((batch, side, side, channels), 4)
        name = f"max pool 3x3/2, {channels} channels at {side}x{side}"
        ops[f"{name}: forward"] = (lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME"), None, (x,))
        ops[f"{name}: gradient"] = (
            functools.partial(_pool_gradient, lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME")),
            functools.partial(_pool_gradient, lambda x: native.strided_max_pool(x, 3, 2)),
            (x,),
        )
    return ops


def _pool_gradient(pool: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """The pooling's forward pass and its gradient, with the pooled values as the upstream gradient."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = pool(x)
    return tape.gradient(y, x, output_gradients=y)


def _onednn_enabled() -> bool:
    """Whether this TensorFlow runs its own oneDNN ops in graphs here (off on AMD CPUs)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def _compiled(function: Callable, inputs: tuple, jit_compile: bool) -> Callable[[], tf.Tensor]:
    compiled = tf.function(function, jit_compile=jit_compile, autograph=False)
    return lambda: compiled(*inputs)


def measure(batch: int, rounds: int, calls: int) -> dict[str, dict[str, float]]:
    """Per op: graph and XLA milliseconds per call (medians) and the median per-round ratios; with the
    native form where it has one and the XLA kernels load (``native_xla_ms``, ``native_xla_over_graph``)."""
    with_native = native.available() and native.xla_load_problem() is None
    results = {}
    for name, (function, native_function, inputs) in _operations(batch).items():
        candidates = {
            "graph": functools.partial(_compiled, function, inputs, False),
            "xla": functools.partial(_compiled, function, inputs, True),
        }
        if native_function is not None and with_native:
            candidates["native_xla"] = functools.partial(_compiled, native_function, inputs, True)
        times = measured_choice.time_candidates(candidates, rounds, calls)
        results[name] = {"graph_ms": 1000 * statistics.median(times["graph"])}
        for candidate in list(candidates)[1:]:
            ratios = [t / g for t, g in zip(times[candidate], times["graph"], strict=True)]
            results[name][f"{candidate}_ms"] = 1000 * statistics.median(times[candidate])
            results[name][f"{candidate}_over_graph"] = statistics.median(ratios)
        native_note = (
            f", native op under XLA / graph {results[name]['native_xla_over_graph']:.2f}"
            if "native_xla" in candidates
            else ""
        )
        print(f"{name:>48}: XLA / graph {results[name]['xla_over_graph']:.2f}{native_note}", flush=True)
    return results


def table(results: dict[str, dict[str, float]]) -> str:
    """The results as a Markdown table; the native columns where any op has them."""
    with_native = any("native_xla_ms" in r for r in results.values())
    header = "| op | graph (ms) | XLA (ms) | XLA / graph |"
    header += " native op, XLA (ms) | native op, XLA / graph |" if with_native else ""
    lines = [header, "| --- | ---: | ---: | ---: |" + (" ---: | ---: |" if with_native else "")]
    for name, r in results.items():
        line = f"| {name} | {r['graph_ms']:.2f} | {r['xla_ms']:.2f} | {r['xla_over_graph']:.2f} |"
        if with_native:
            native_ms = f"{r['native_xla_ms']:.2f}" if "native_xla_ms" in r else ""
            native_ratio = f"{r['native_xla_over_graph']:.2f}" if "native_xla_ms" in r else ""
            line += f" {native_ms} | {native_ratio} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    def parse(argv: Sequence[str] | None):
        parser = SentenceParser(description=__doc__.split("\n")[0])
        parser.add_argument("--batch", type=int, default=96, help="images per call (the encoder table's)")
        parser.add_argument("--rounds", type=int, default=7)
        parser.add_argument("--calls", type=int, default=3, help="calls per round")
        parser.add_argument("--out", default=DEFAULT_OUT)
        args = parser.parse_args(argv)
        if min(args.batch, args.rounds, args.calls) < 1:
            raise UsageError("--batch, --rounds and --calls must be >= 1.")
        check_out_file(args.out)
        return args

    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    start = time.perf_counter()
    report = {
        "what": "The IMPALA-CNN's convolutions (forward, input gradient, kernel gradient) and max poolings "
        "(forward, gradient), each alone, graph vs XLA (tf.function jit_compile=True), the gradients also "
        "in their native forms under XLA; medians of interleaved rounds",
        "command": command_line("xla_conv_gradients.py", argv),
        "commit": current_commit(),
        "environment": environment(),
        "onednn_in_graphs": _onednn_enabled(),
        "batch": args.batch,
        "rounds": args.rounds,
        "calls_per_round": args.calls,
        "results": measure(args.batch, args.rounds, args.calls),
    }
    report["table"] = table(report["results"])
    report["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(report["table"])
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
