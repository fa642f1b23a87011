"""What XLA does badly on this CPU: each building block's train step with and without XLA.

The speed issue asks that ``jit_compile=True`` never makes a model slower,
and that the learners' default be whichever is faster. On a CPU, XLA makes
every encoder's train step slower here, the plain CNN's too
(``docs/speed.md``, "XLA"). This benchmark takes the blocks those encoders
are made of, at the shapes of a LavaCrossing PPO minibatch (256 observations
of 14x14x3; a SiT's 8x8 pooled tokens of width 32, 4 heads, 3x3 windows), and
times one train step of each (forward, backward and Adam for blocks with
weights; forward and the input's gradient for the others) as a graph
(``tf.function``) and compiled by XLA (``tf.function(jit_compile=True)``):

- ``conv2d_3x3``: the CNN's convolutions (16 then 32 filters, 3x3, stride 1);
- ``depthwise_5x5``: a 5x5 depth-wise convolution, 4 maps per channel (the
  chiral stem's size), as Keras' ``DepthwiseConv2D`` computes it;
- ``graph_conv_stem``: the chiral stem itself (``GraphConv2D``, 5x5, 4 maps
  per channel), which runs that convolution in its dense form;
- ``graph_conv_map``: the GSA's graph convolution on the token map (``GraphConv2D``,
  5x5, one map per channel, over the 8x8 grid's ``3D`` channels of Q, K and V),
  what ``local_graph_kernel_size=5`` runs in the first local block;
- ``dense``: a token projection to ``3D`` (Q, K and V);
- ``window_attention``: scores ``Q K^T`` of each 3x3 window, softmax, and
  the weighted sum of values (batched matmuls on 9x9 matrices);
- ``layer_norm``: over each token's features;
- ``window_gather``: each token's 3x3 window of tokens by a constant-index
  gather (its default gradient is a scatter);
- ``segment_sum``: the windows summed back onto their tokens;
- and whole encoders with a value head: ``cnn``, ``sit_chiral``, ``sit_small``,
  ``vit_small`` and ``siet_readout`` (``configs/minigrid/lavacrossing_cnn.gin``,
  ``lavacrossing_sit_chiral.gin``, ``lavacrossing_sit_small.gin``, ``lavacrossing_vit.gin``,
  ``lavacrossing_siet_rotation_pooled.gin``).

Each pair is timed in interleaved rounds in one process
(``measured_choice.time_candidates``: warm-up, then every round calls each
step ``--calls`` times, in a new order); a block's ratio is the median of
its per-round ratios XLA / graph, so a noisy host moves both sides alike.

Usage::

    python benchmarks/xla_cpu_ops.py [--rounds 5] [--calls 5] [--batch 256]
        [--out benchmarks/results/xla_cpu_ops.json]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.specs import tensor_spec

from sit_keras import measured_choice
from sit_keras.agents.networks import encoders
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
from sit_keras.layers import GraphConv2D

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "xla_cpu_ops.json"
IMAGE = (14, 14, 3)
GRID = 8  # the chiral SiT's pooled tokens: an 8x8 grid
TOKENS, DIM, HEADS, WINDOW = GRID * GRID, 32, 4, 9  # 3x3 windows
ENCODERS = {
    "cnn": ("cnn", {"filters": (16, 32), "strides": 1}),
    "sit_chiral": (
        "sit",
        {
            "preset": "minigrid", "dim": 32, "num_heads": 4, "stem_kernel_size": 5,
            "stem_symmetry": "chiral", "stem_depth_multiplier": 4, "pool_size": 2, "pool_padding": 1,
            "window": 3, "local_layers": 1, "global_layers": 1, "output_dim": 32,
        },
    ),
    # configs/minigrid/lavacrossing_sit_small.gin and lavacrossing_vit.gin
    "sit_small": (
        "sit",
        {
            "preset": "minigrid", "dim": 32, "num_heads": 4, "stem_kernel_size": 3, "pool_size": 2,
            "window": 3, "local_layers": 1, "global_layers": 1, "output_dim": 32,
        },
    ),
    "vit_small": ("vit", {"patch_size": 2, "embed_dim": 64, "num_heads": 8, "num_layers": 2, "mlp_dim": 0}),
    "siet_readout": (
        "siet",
        {
            "preset": "minigrid", "dim": 32, "num_heads": 4, "stem_kernel_size": 5,
            "stem_symmetry": "chiral", "stem_depth_multiplier": 4, "pool_size": 2, "pool_padding": 1,
            "window": 3, "local_layers": 1, "global_layers": 1, "output_dim": 32,
            "query_key_init_scale": 4.0, "head_standardization": True, "patch_readout": "rotation_pooled",
            "equivariant_dim": 8,
        },
    ),
}  # fmt: skip


def _windows() -> np.ndarray:
    """``(TOKENS, WINDOW)``: the token indices of each token's 3x3 window on the 8x8 grid (clamped)."""
    side = GRID
    rows, cols = np.divmod(np.arange(TOKENS), side)
    offsets = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)]
    return np.stack(
        [np.clip(rows + dr, 0, side - 1) * side + np.clip(cols + dc, 0, side - 1) for dr, dc in offsets], 1
    )


def _blocks(batch: int) -> dict[str, tuple[Callable[[], tf_keras.layers.Layer | None], Callable, tuple]]:
    """Block name -> (its layer's maker or None, the function of (layer, x), the input's shape)."""
    windows = tf.constant(_windows(), tf.int32)
    segment_ids = tf.reshape(windows, [-1])

    def attention(_, x):  # x: (B * T, WINDOW, 3 D) -> (B * T, WINDOW, D)
        q, k, v = (tf.reshape(t, [-1, WINDOW, HEADS, DIM // HEADS]) for t in tf.split(x, 3, axis=-1))
        q, k, v = (tf.transpose(t, [0, 2, 1, 3]) for t in (q, k, v))
        weights = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / (DIM // HEADS) ** 0.5)
        return tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]), [-1, WINDOW, DIM])

    def segment_sum(_, x):  # x: (TOKENS * WINDOW, B, D): every window entry back onto its token
        return tf.math.unsorted_segment_sum(x, segment_ids, TOKENS)

    return {
        "conv2d_3x3": (
            lambda: tf_keras.Sequential([tf_keras.layers.Conv2D(16, 3), tf_keras.layers.Conv2D(32, 3)]),
            lambda layer, x: layer(x),
            (batch, *IMAGE),
        ),
        "depthwise_5x5": (
            lambda: tf_keras.layers.DepthwiseConv2D(5, depth_multiplier=4, padding="same"),
            lambda layer, x: layer(x),
            (batch, *IMAGE),
        ),
        "graph_conv_stem": (
            lambda: GraphConv2D(5, "chiral", depth_multiplier=4),
            lambda layer, x: layer(x),
            (batch, *IMAGE),
        ),
        "graph_conv_map": (
            lambda: GraphConv2D(5, "rotation"),
            lambda layer, x: layer(x),
            (batch, GRID, GRID, 3 * DIM),
        ),
        "dense": (lambda: tf_keras.layers.Dense(3 * DIM), lambda layer, x: layer(x), (batch * TOKENS, DIM)),
        "window_attention": (None, attention, (batch * TOKENS, WINDOW, 3 * DIM)),
        "layer_norm": (tf_keras.layers.LayerNormalization, lambda layer, x: layer(x), (batch * TOKENS, DIM)),
        "window_gather": (None, lambda _, x: tf.gather(x, windows, axis=1), (batch, TOKENS, DIM)),
        "segment_sum": (None, segment_sum, (TOKENS * WINDOW, batch, DIM)),
    }


def block_names() -> list[str]:
    """The blocks' names, in the report's order."""
    return list(_blocks(1))


def _block_step(make_layer, function, shape: tuple, jit_compile: bool) -> Callable[[], tf.Tensor]:
    """One train step of a block: the loss ``mean(f(x)^2)``, its gradients, and Adam on its weights."""
    layer = make_layer() if make_layer else None
    x = tf.Variable(tf.random.stateless_normal(shape, seed=(0, 1)))
    if layer is not None:
        layer(x)  # builds the weights
    optimizer = tf_keras.optimizers.Adam(1e-4)

    @tf.function(jit_compile=jit_compile, autograph=False)
    def step() -> tf.Tensor:
        variables = [x, *(layer.trainable_variables if layer is not None else [])]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(function(layer, x)))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    return step


def _encoder_step(encoder: str, kwargs: dict[str, Any], batch: int, jit_compile: bool) -> Callable:
    """One train step of an encoder with a value head (as ``--precision auto`` times it)."""
    spec = tensor_spec.BoundedTensorSpec(IMAGE, tf.uint8, 0, 255)
    network = encoders.value_network(spec, encoder, kwargs)
    observations = tensor_spec.sample_spec_nest(spec, tf.random.Generator.from_seed(0), (batch,))
    network.create_variables()
    optimizer = tf_keras.optimizers.Adam(1e-4)

    @tf.function(jit_compile=jit_compile, autograph=False)
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            values, _ = network(observations, training=True)
            loss = tf.reduce_mean(tf.square(values))
        variables = network.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    return step


def measure(names: Sequence[str], batch: int, rounds: int, calls: int) -> dict[str, dict[str, float]]:
    """Per block or encoder: graph and XLA milliseconds per step (medians) and the median ratio."""
    blocks = _blocks(batch)
    results = {}
    for name in names:
        if name in blocks:
            make = functools.partial(_block_step, *blocks[name])
        else:
            make = functools.partial(_encoder_step, *ENCODERS[name], batch)
        times = measured_choice.time_candidates(
            {"graph": functools.partial(make, False), "xla": functools.partial(make, True)}, rounds, calls
        )
        ratios = [x / g for x, g in zip(times["xla"], times["graph"], strict=True)]
        results[name] = {
            "graph_ms": 1000 * statistics.median(times["graph"]),
            "xla_ms": 1000 * statistics.median(times["xla"]),
            "xla_over_graph": statistics.median(ratios),
            "xla_over_graph_per_round": ratios,
        }
        print(f"{name:>16}: XLA / graph {results[name]['xla_over_graph']:.2f}", flush=True)
    return results


def table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| block | graph (ms) | XLA (ms) | XLA / graph |", "| --- | ---: | ---: | ---: |"]
    for name, r in results.items():
        lines.append(f"| `{name}` | {r['graph_ms']:.2f} | {r['xla_ms']:.2f} | {r['xla_over_graph']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    names = [*block_names(), *ENCODERS]

    def parse(argv: Sequence[str] | None):
        parser = SentenceParser(description=__doc__.split("\n")[0])
        parser.add_argument("--names", default=",".join(names), help="blocks and encoders, comma-separated")
        parser.add_argument("--batch", type=int, default=256, help="observations per step (PPO's minibatch)")
        parser.add_argument("--rounds", type=int, default=5)
        parser.add_argument("--calls", type=int, default=5, help="calls per round")
        parser.add_argument("--out", default=str(DEFAULT_OUT))
        args = parser.parse_args(argv)
        args.chosen = [n.strip() for n in args.names.split(",") if n.strip()]
        unknown = sorted(set(args.chosen) - set(names))
        if unknown or not args.chosen:
            raise UsageError(f"unknown names {unknown}; choose from {', '.join(names)}.")
        if min(args.batch, args.rounds, args.calls) < 1:
            raise UsageError("--batch, --rounds and --calls must be >= 1.")
        check_out_file(args.out)
        return args

    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    chosen = args.chosen
    start = time.perf_counter()
    report = {
        "what": "Train step (forward, backward, Adam) of each block and encoder, graph vs XLA (tf.function "
        "jit_compile=True), at a LavaCrossing PPO minibatch; medians of interleaved rounds",
        "command": command_line("xla_cpu_ops.py", argv),
        "commit": current_commit(),
        "environment": environment(),
        "batch": args.batch,
        "rounds": args.rounds,
        "calls_per_round": args.calls,
        "results": measure(chosen, args.batch, args.rounds, args.calls),
    }
    report["table"] = table(report["results"])
    report["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(report["table"])
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
