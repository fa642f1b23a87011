"""The native kernels alone, at the SiT train step's shapes: each op's forward and forward + backward.

``benchmarks/encoders.py`` times whole encoders; this script times the uses
of ``sit_keras.native`` in the Procgen SiT's train step (64x64 images,
``--batch`` of them: a 32x32 grid of 8 x 8 windows of 4 x 4 tokens and a class
token each, then the 8 x 8 global grid and its class token; D = 64, 4 heads),
with random inputs through the public wrappers, the triangle sums' own
score-map patterns, and graphs ``G_q, G_k, G_v`` of a GSA layer with the SiT's
rotation symmetry (its weights perturbed), mixed as the layers mix them: in
the quarter turn's orbits (``native/rotation_spectra.h``); and the stem, its
pooling and the projection:

- ``first_block``: ``window_attention`` given the projection's kernel, from the
  ``C + 3 = 6`` values a pixel (the first local block);
- ``class_token``: ``class_token_attention`` (the second local block);
- ``global_grid``: ``window_attention`` on the 8 x 8 grid's 65 tokens (its first block);
- ``layer_norm``: ``standardized_lane_blocks`` of the windows' tokens;
- ``class_token_values``: ``class_token_values``, the values half of a single
  local block's class-token row (the demo's SiT and SiT-small on LavaCrossing
  have one local block), here at the first block's shapes: the ``C + 3 = 6``
  values a pixel, the class token's given scores, the projection's kernel and
  ``G_v``;
- ``first_block_dense``, ``class_token_dense``, ``global_grid_dense``: the
  same three with every graph mixed densely (no orbits given), so that the
  ``spectral_speedup`` (dense / spectral time) is measured in one run;
- ``stem``: ``depthwise_conv``, the 3 x 3 stem on the ``--batch`` 64x64x3
  images, and ``stem_builtin``: ``tf.nn.depthwise_conv2d`` on the same, whose
  backward passes take the kernel's gradient only (a train step's: the image
  needs none) and return the output as well (whose op the kernel's gradient
  does not need); ``stem_speedup`` is builtin / native time;
- ``projection``: ``project_channels_first``, the second local block's
  ``(D, 3 D)`` projection of the windows' tokens kept channels first, and
  ``projection_builtin``: the same through TensorFlow's matmuls (the layers'
  form under ``native.builtin_only()``), whose backward passes return the
  output as well (neither gradient reads it); ``projection_speedup`` is
  builtin / native time;
- ``projection_bfloat16``: the same projection on bfloat16 kernel and tokens,
  as the layers run it under ``mixed_bfloat16`` (``native.project_bfloat16``
  for the values and the input's gradient where the CPU has AMX, else
  TensorFlow's matmuls), and ``projection_bfloat16_builtin``: TensorFlow's
  bfloat16 matmuls; ``projection_bfloat16_speedup`` is builtin / native time
  and ``projects_bfloat16_on_amx`` says whether the op ran;
- ``pool``: ``max_pool``, the 2 x 2 max-pooling of the stem's ``--batch``
  64x64x3 maps, and ``pool_builtin``: ``tf.nn.max_pool2d`` on the same, whose
  backward passes return the output as well; ``pool_speedup`` is builtin /
  native time;
- ``stem_xla``, ``stem_builtin_xla``, ``projection_xla``,
  ``projection_builtin_xla``, ``pool_xla``, ``pool_builtin_xla``, and
  ``first_block_xla``, ``class_token_xla``, ``global_grid_xla``,
  ``layer_norm_xla``: those compiled by XLA (``jit_compile=True``), the native
  ones through their XLA kernels (``native/xla/xla_kernels.cc``), where that
  library loads (else they are left out and the report says why);
  ``xla_speedup`` is builtin / native time under XLA, ``xla_over_graph`` the
  attention ops' time under XLA over their time in a graph (the same kernels:
  what the custom calls cost or save);
- ``first_block_bfloat16``, ``class_token_bfloat16``, ``global_grid_bfloat16``,
  ``layer_norm_bfloat16``: the attention cases with their large tensors in
  bfloat16 as ``mixed_bfloat16`` passes them (the first block's pixel values,
  ``qkv`` or the tokens, and the upstream gradient; the parameters float32),
  which the ops store as bfloat16; ``bfloat16_over_float32`` is their time
  over the float32 case's.

Each function, its forward pass and its forward + backward pass (the gradients
of every input), is called once per round, in interleaved rounds with one
1024^3 float32 matmul; medians, in ms and in matmul-times. Compare builds by
running it at each commit: it measures the library this process loads.

    python benchmarks/native_ops.py [--batch 96] [--repeats 15] [--out runs/native_ops.json]
    python benchmarks/native_ops.py --quick      # batch 16, 3 rounds: a smoke run
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import functools
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

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
from sit_keras.layers.channels_first import project_channels_first
from sit_keras.layers.graph_symmetric_attention import GraphSymmetricAttention
from sit_keras.layers.triangle_sums import TriangleSums
from sit_keras.testing import perturb_weights

DIM, HEADS, PIXEL_VALUES = 64, 4, 6
WINDOWS_PER_IMAGE = 64  # 4x4 windows of the 32x32 pooled grid
WINDOW_TOKENS = 4 * 4 + 1  # a window's pixels and its class token
SPECTRAL_CASES = ("first_block", "class_token", "global_grid")
STEM_CASES = ("stem", "stem_builtin")
PROJECTION_CASES = ("projection", "projection_builtin")
BFLOAT16_PROJECTION_CASES = ("projection_bfloat16", "projection_bfloat16_builtin")
POOL_CASES = ("pool", "pool_builtin")
# The cases compiled by XLA too (as f"{case}_xla"), where the ops' XLA kernels load.
ATTENTION_CASES = (*SPECTRAL_CASES, "layer_norm", "class_token_values")
XLA_CASES = (*STEM_CASES, *PROJECTION_CASES, *POOL_CASES, *ATTENTION_CASES)
CASES = (
    *SPECTRAL_CASES,
    "layer_norm",
    "class_token_values",
    *(f"{case}_bfloat16" for case in ATTENTION_CASES),
    *(f"{case}_dense" for case in SPECTRAL_CASES),
    *STEM_CASES,
    *PROJECTION_CASES,
    *BFLOAT16_PROJECTION_CASES,
    *POOL_CASES,
)


def cases() -> tuple[str, ...]:
    """The cases measured here: ``CASES``, and the ``XLA_CASES`` under XLA where the XLA kernels load."""
    with_xla = native.xla_load_problem() is None
    return CASES + tuple(f"{case}_xla" for case in XLA_CASES if with_xla)


MATMUL_SIZE = 1024
IMAGE_SIDE, IMAGE_CHANNELS, STEM_KERNEL, POOL_SIZE = 64, 3, 3, 2
# Cases whose backward pass differentiates the listed inputs (the stem's kernel, not its image) and returns
# the output too: their gradients do not read it, and TensorFlow would prune the forward op.
DIFFERENTIATED = {
    **{case: (1,) for case in STEM_CASES},
    **{case: (0, 1) for case in PROJECTION_CASES + BFLOAT16_PROJECTION_CASES},
    **{case: (0,) for case in POOL_CASES},
}


def _layer_graphs(grid: int) -> tuple[tf.Tensor, np.ndarray]:
    """``G_q, G_k, G_v`` transposed ``(3 D, T, T)`` of a GSA layer on a ``grid x grid`` window and its class
    token (the SiT's rotation symmetry, weights perturbed), and the quarter turn's orbits of its tokens."""
    layer = GraphSymmetricAttention((grid, grid), num_heads=HEADS, class_token=True, seed=0)
    layer.build((None, grid * grid + 1, DIM))
    perturb_weights(layer, 0.2)
    return tf.convert_to_tensor(layer.token_graphs_transposed()), layer._quarter_turn_orbits


def _inputs(batch: int, seed: int = 0) -> dict[str, tuple[Callable[..., tf.Tensor], list[tf.Tensor]]]:
    """Per case, ``(op, inputs)``: ``op(*inputs)`` is the case's output, differentiable in every input."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, scale: float = 1.0) -> tf.Tensor:
        return tf.constant(rng.normal(scale=scale, size=shape), tf.float32)

    windows = batch * WINDOWS_PER_IMAGE
    local, grid = TriangleSums((4, 4), class_token=True), TriangleSums((8, 8), class_token=True)
    t_local, t_grid = local.num_tokens, grid.num_tokens
    local_pattern = local.pattern(1, True)
    grid_pattern = grid.terms_pattern(1, True)

    def values(pattern: native.ScoreMapPattern) -> tf.Tensor:
        return normal(1, HEADS, *pattern.indices.shape, scale=0.2) * tf.constant(pattern.mask)

    (local_graphs, local_orbits), (grid_graphs, grid_orbits) = _layer_graphs(4), _layer_graphs(8)

    def first_block(x, kernel, bias, graphs, map_values, orbits=local_orbits):
        options = {"kernel": kernel, "orbits": orbits, "orbit_gradients": True}
        return native.window_attention(x, bias, graphs, map_values, local_pattern, HEADS, **options)

    def global_grid(qkv, bias, graphs, map_values, orbits=grid_orbits):
        return native.window_attention(
            qkv, bias, graphs, map_values, grid_pattern, HEADS, orbits=orbits, orbit_gradients=True
        )

    def class_token(qkv, bias, graphs, orbits=local_orbits):
        coefficients = tf.constant([[0.25, 0.25]])
        return native.class_token_attention(
            qkv, bias, graphs, coefficients, HEADS, orbits=orbits, orbit_gradients=True
        )

    def layer_norm(tokens):
        return native.standardized_lane_blocks(tokens, 1e-6)[0]

    def class_token_values(x, scores, kernel, graphs):
        return native.class_token_values(x, scores, kernel, graphs, tf.constant([[0.25, 0.25]]), HEADS)

    def stem_builtin(images, kernel):
        return tf.nn.depthwise_conv2d(images, kernel[..., None], [1, 1, 1, 1], "SAME")

    def projection_builtin(kernel, x):
        with native.builtin_only():
            return project_channels_first(kernel, x)

    def projection_as_in_training(kernel, x):  # the forward pass too: the layers' native ops need a tape
        with native.forward_passes():
            return project_channels_first(kernel, x)

    graphs = {t_local: local_graphs, t_grid: grid_graphs}
    cases = {
        "first_block": (
            first_block,
            [
                native.lane_blocks(normal(PIXEL_VALUES, windows, t_local)),
                normal(PIXEL_VALUES, 3 * DIM, scale=0.3),
                normal(3 * DIM),
                graphs[t_local],
                values(local_pattern),
            ],
        ),
        "class_token": (
            class_token,
            [native.lane_blocks(normal(3 * DIM, windows, t_local)), normal(3 * DIM), graphs[t_local]],
        ),
        "global_grid": (
            global_grid,
            [
                native.lane_blocks(normal(3 * DIM, batch, t_grid)),
                normal(3 * DIM),
                graphs[t_grid],
                values(grid_pattern),
            ],
        ),
        "layer_norm": (layer_norm, [normal(windows, t_local, DIM)]),
        "class_token_values": (
            class_token_values,
            [
                native.lane_blocks(normal(PIXEL_VALUES, windows, t_local)),
                normal(windows, 2, HEADS, t_local),
                normal(PIXEL_VALUES, DIM, scale=0.3),
                graphs[t_local][2 * DIM :],  # G_v
            ],
        ),
    }
    images = tf.constant(rng.uniform(size=(batch, IMAGE_SIDE, IMAGE_SIDE, IMAGE_CHANNELS)), tf.float32)
    stem_kernel = normal(STEM_KERNEL, STEM_KERNEL, IMAGE_CHANNELS, scale=0.3)
    cases["stem"] = (native.depthwise_conv, [images, stem_kernel])
    cases["stem_builtin"] = (stem_builtin, [images, stem_kernel])
    tokens = [normal(DIM, 3 * DIM, scale=0.1), normal(DIM, windows * WINDOW_TOKENS)]
    cases["projection"] = (native.project_channels_first, tokens)
    cases["projection_builtin"] = (projection_builtin, tokens)
    tokens_bfloat16 = [tf.cast(t, tf.bfloat16) for t in tokens]
    cases["projection_bfloat16"] = (projection_as_in_training, tokens_bfloat16)
    cases["projection_bfloat16_builtin"] = (projection_builtin, tokens_bfloat16)
    stem_maps = [normal(batch, IMAGE_SIDE, IMAGE_SIDE, IMAGE_CHANNELS)]
    cases["pool"] = (functools.partial(native.max_pool, size=POOL_SIZE), stem_maps)
    cases["pool_builtin"] = (lambda maps: tf.nn.max_pool2d(maps, POOL_SIZE, POOL_SIZE, "VALID"), stem_maps)
    for case in SPECTRAL_CASES:
        op, inputs = cases[case]
        cases[f"{case}_dense"] = (functools.partial(op, orbits=None), inputs)
    for case in ATTENTION_CASES:  # the first input is the one the ops store as bfloat16
        op, inputs = cases[case]
        cases[f"{case}_bfloat16"] = (op, [tf.cast(inputs[0], tf.bfloat16), *inputs[1:]])
    for case in XLA_CASES:
        cases[f"{case}_xla"] = cases[case]
    return cases


def case_functions(batch: int, only: Sequence[str] | None = None) -> dict[tuple[str, str], Callable[[], Any]]:
    """``(case, "forward" | "backward")`` -> a ``tf.function`` of no argument ("backward": both passes), for
    every measured case or those named in ``only``; each traces the ops on its first call."""
    functions: dict[tuple[str, str], Callable[[], Any]] = {}
    measured = cases() if only is None else tuple(only)
    for case, (op, inputs) in _inputs(batch).items():
        if case not in measured:
            continue
        out = op(*inputs)
        upstream = tf.cast(tf.random.stateless_normal(out.shape, seed=[1, 2]), out.dtype)
        case, jit_compile = case.removesuffix("_xla"), case.endswith("_xla")
        differentiated = tuple(DIFFERENTIATED.get(case, range(len(inputs))))

        def backward(
            op=op, inputs=inputs, upstream=upstream, which=differentiated, case=case
        ) -> list[tf.Tensor]:
            wrt = [inputs[i] for i in which]  # the same placeholders as op's inputs
            with tf.GradientTape() as tape:
                tape.watch(wrt)
                out = op(*inputs)
            gradients = tape.gradient(out, wrt, output_gradients=upstream)
            return [out, *gradients] if case in DIFFERENTIATED else gradients

        name = f"{case}_xla" if jit_compile else case
        functions[name, "forward"] = tf.function(
            lambda op=op, inputs=inputs: op(*inputs), jit_compile=jit_compile
        )
        functions[name, "backward"] = tf.function(backward, jit_compile=jit_compile)
    return functions


def measure(batch: int, repeats: int) -> dict[str, Any]:
    """Medians (ms and matmul-times) of every case's forward and forward + backward."""
    a, b = (tf.random.stateless_normal([MATMUL_SIZE, MATMUL_SIZE], seed=[s, 0]) for s in (3, 4))
    functions: dict[Any, Callable[[], Any]] = {"matmul": tf.function(lambda: tf.matmul(a, b))}
    functions.update(case_functions(batch))
    medians = interleaved_medians(functions, repeats)
    matmul_ms = 1000 * medians.pop("matmul")
    results: dict[str, Any] = {"matmul_ms": matmul_ms}
    for case in cases():
        results[case] = {}
        for stage in ("forward", "backward"):
            ms = 1000 * medians[case, stage]
            results[case][stage] = {"median_ms": ms, "matmul_times": ms / matmul_ms}
    stages = ("forward", "backward")
    results["spectral_speedup"] = {
        case: {stage: medians[f"{case}_dense", stage] / medians[case, stage] for stage in stages}
        for case in SPECTRAL_CASES
    }
    results["bfloat16_over_float32"] = {
        case: {stage: medians[f"{case}_bfloat16", stage] / medians[case, stage] for stage in stages}
        for case in ATTENTION_CASES
    }
    results["projects_bfloat16_on_amx"] = native.projects_bfloat16_on_amx()
    for case in ("stem", "projection", "projection_bfloat16", "pool"):
        results[f"{case}_speedup"] = {
            stage: medians[f"{case}_builtin", stage] / medians[case, stage] for stage in stages
        }
    if "pool_xla" in results:
        results["xla_speedup"] = {
            case: {
                stage: medians[f"{case}_builtin_xla", stage] / medians[f"{case}_xla", stage]
                for stage in stages
            }
            for case in ("stem", "projection", "pool")
        }
        results["xla_over_graph"] = {
            case: {stage: medians[f"{case}_xla", stage] / medians[case, stage] for stage in stages}
            for case in ATTENTION_CASES
        }
    else:
        results["xla_problem"] = native.xla_load_problem()
    return results


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=96, help="images a step (default 96, quick 16)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds, medians reported (quick 3)")
    parser.add_argument("--quick", action="store_true", help="batch 16 and 3 rounds: a smoke run")
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.repeats < 1:
        received = f"received {args.batch} and {args.repeats}"
        raise UsageError(f"--batch and --repeats must be at least 1; {received}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    if not native.available():
        problem = native.load_problem()
        print(f"native_ops.py: the native kernels are not usable here: {problem}.", file=sys.stderr)
        return 1
    batch, repeats = (16, min(args.repeats, 3)) if args.quick else (args.batch, args.repeats)
    start = time.perf_counter()
    results = measure(batch, repeats)
    print(f"batch {batch}, {repeats} rounds; one 1024^3 matmul: {results['matmul_ms']:.2f} ms")
    print("| op | forward, ms | forward + backward, ms | forward | forward + backward (matmul-times) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for case in cases():
        f, b = results[case]["forward"], results[case]["backward"]
        print(
            f"| {case} | {f['median_ms']:.2f} | {b['median_ms']:.2f} | "
            f"{f['matmul_times']:.2f} | {b['matmul_times']:.2f} |"
        )
    print("Graphs mixed in the quarter turn's orbits, speed-up over dense mixing (dense / spectral time):")
    for case, speedup in results["spectral_speedup"].items():
        print(f"  {case}: forward {speedup['forward']:.2f}x, forward + backward {speedup['backward']:.2f}x")
    print("With bfloat16 storage, time over float32's (bfloat16 / float32 time):")
    for case, ratio in results["bfloat16_over_float32"].items():
        print(f"  {case}: forward {ratio['forward']:.2f}x, forward + backward {ratio['backward']:.2f}x")
    stem = results["stem_speedup"]
    print(
        "The stem's native depth-wise convolution, speed-up over tf.nn.depthwise_conv2d (builtin / native "
        f"time): forward {stem['forward']:.2f}x, forward + kernel gradient {stem['backward']:.2f}x"
    )
    projection = results["projection_speedup"]
    print(
        "The native channels-first projection, speed-up over TensorFlow's matmuls (builtin / native time): "
        f"forward {projection['forward']:.2f}x, forward + backward {projection['backward']:.2f}x"
    )
    projection = results["projection_bfloat16_speedup"]
    kind = (
        "on AMX tiles"
        if results["projects_bfloat16_on_amx"]
        else "through TensorFlow's matmuls (no AMX here)"
    )
    print(
        f"The channels-first projection in bfloat16, {kind}, speed-up over TensorFlow's bfloat16 matmuls "
        f"(builtin / native time): forward {projection['forward']:.2f}x, "
        f"forward + backward {projection['backward']:.2f}x"
    )
    pool = results["pool_speedup"]
    print(
        "The native max-pooling, speed-up over tf.nn.max_pool2d (builtin / native time): "
        f"forward {pool['forward']:.2f}x, forward + backward {pool['backward']:.2f}x"
    )
    if "xla_speedup" in results:
        for case, speedup in results["xla_speedup"].items():
            print(
                f"Under XLA, the native {case} through its XLA kernels, speed-up over TensorFlow's ops "
                f"under XLA (builtin / native time): forward {speedup['forward']:.2f}x, "
                f"forward + backward {speedup['backward']:.2f}x"
            )
        for case, ratio in results["xla_over_graph"].items():
            print(
                f"Under XLA, the native {case} through its XLA kernels over the same kernels in a graph "
                f"(XLA / graph time): forward {ratio['forward']:.2f}x, "
                f"forward + backward {ratio['backward']:.2f}x"
            )
    else:
        print(f"Not measured under XLA: the XLA kernels are not usable here: {results['xla_problem']}.")
    report = {
        "what": "The native kernels alone at the SiT train step's shapes, forward and forward + backward",
        "command": command_line("native_ops.py", argv),
        "commit": current_commit(),
        "settings": {
            "batch": batch,
            "repeats": repeats,
            "dim": DIM,
            "heads": HEADS,
            "stem": {"image": [IMAGE_SIDE, IMAGE_SIDE, IMAGE_CHANNELS], "kernel_size": STEM_KERNEL},
            "projection": {"kernel": [DIM, 3 * DIM], "columns": batch * WINDOWS_PER_IMAGE * WINDOW_TOKENS},
            "pool": {"maps": [IMAGE_SIDE, IMAGE_SIDE, IMAGE_CHANNELS], "size": POOL_SIZE},
        },
        "environment": environment(),
        "results": results,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
