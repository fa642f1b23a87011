"""The native attention and standardisation ops under ``mixed_bfloat16``: bfloat16 in, bfloat16 out.

What this file proves:

- the window op (with and without a kernel, with a skip connection), the
  class-token op, the standardising op and the stem's convolution take their
  large tensors (``qkv``, the tokens, the skip connection, the maps, their
  gradients) in bfloat16 and write their large results in bfloat16 (attribute
  ``S``), with the same bits, values and every gradient, as the same op in
  float32 between casts (what ran before): the ops read bfloat16 exactly and
  round as TensorFlow's Cast rounds (ties to even, a NaN quiet); the stem's
  max-pooling runs in bfloat16 itself, where it is exact;
- under XLA the ops keep one dtype (their XLA kernels take float32), with the
  casts around them, and give the same bits;
- a mixed_bfloat16 SiT's train step runs those ops with bfloat16 storage, and
  no cast feeds them their large tensors; the attention ops' graphs are built
  in float32 from the float32 weights, with no cast on the way;
- under XLA, an op whose storage dtype is not its arithmetic's refuses in one sentence.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tensorflow.python.framework import op_def_registry
from traced_ops import needs_xla_kernels

from sit_keras import native
from sit_keras.encoder_check import make_train_step
from sit_keras.layers.triangle_sums import TriangleSums
from sit_keras.models import build_encoder

pytestmark = pytest.mark.skipif(
    not native.available(), reason="needs the native kernels: `make install` builds them"
)

# The ops with a storage dtype S, and their gradients'.
STORING_OPS = (
    "SitWindowAttention",
    "SitWindowAttentionGrad",
    "SitClassTokenAttention",
    "SitClassTokenAttentionGrad",
    "SitStandardizedLanes",
    "SitStandardizedLanesGrad",
    "SitDepthwiseConv",
    "SitDepthwiseConvKernelGrad",
)


def _bits(x: tf.Tensor) -> np.ndarray:
    """A tensor's bits (bfloat16 as uint16), so that NaNs compare too."""
    kinds = {tf.bfloat16: tf.uint16, tf.float32: tf.uint32}
    return tf.bitcast(x, kinds[x.dtype]).numpy()


def _bfloat16(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> tf.Tensor:
    return tf.cast(tf.constant(rng.normal(size=shape) * scale, tf.float32), tf.bfloat16)


def _results(op, inputs: list[tf.Tensor], upstream: list[tf.Tensor], jit_compile: bool | None) -> list:
    """``op(*inputs)``'s outputs and the gradients of ``sum(output * upstream)`` for every input."""

    def run(*x: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs = tf.nest.flatten(op(*x))
            pairs = zip(outputs, upstream, strict=True)
            loss = sum(tf.reduce_sum(tf.cast(o * tf.cast(u, o.dtype), tf.float32)) for o, u in pairs)
        return [*outputs, *tape.gradient(loss, x)]

    if jit_compile is not None:
        run = tf.function(run, jit_compile=jit_compile)
    return run(*inputs)


def _assert_as_between_casts(op, inputs: list[tf.Tensor], upstream: list[tf.Tensor]) -> None:
    """``op`` on bfloat16 inputs gives the bits of ``op`` on their float32 casts, its results cast back."""
    stored = _results(op, inputs, upstream, jit_compile=None)
    up = [tf.cast(x, tf.float32) for x in inputs]
    between_casts = [tf.cast(r, tf.bfloat16) for r in _results(op, up, upstream, jit_compile=None)]
    for a, b in zip(stored, between_casts, strict=True):
        assert a.dtype == tf.bfloat16
        np.testing.assert_array_equal(_bits(a), _bits(b))


def _window_case(windows: int, seed: int) -> tuple[list[tf.Tensor], tf.Tensor, TriangleSums]:
    rng = np.random.default_rng(seed)
    sums = TriangleSums((3, 3), class_token=True)  # 10 tokens: whole lane tiles and a remainder
    heads, head_dim, t = 2, 17, sums.num_tokens
    channels = 3 * heads * head_dim
    qkv = native.lane_blocks(_bfloat16(rng, (channels, windows, t)))
    bias, graphs = _bfloat16(rng, (channels,)), _bfloat16(rng, (channels, t, t), 0.3)
    upstream = _bfloat16(rng, (qkv.shape[1] * native.LANES, t, heads * head_dim))
    return [qkv, bias, graphs], upstream, sums


@pytest.mark.parametrize("windows", [5, 37])
def test_the_window_op_stores_bfloat16_as_it_computes_float32_between_casts(windows: int) -> None:
    inputs, upstream, sums = _window_case(windows, seed=windows)
    pattern = sums.pattern(1, True)
    weights = np.random.default_rng(1).normal(size=(1, 2, 100, 100))  # (M, H, T^2, T^2)
    values = pattern.values_of(tf.constant(weights, tf.float32))

    skip = _bfloat16(np.random.default_rng(2), (windows - 1, 10, 34))

    def op(qkv, bias, graphs, skip):
        return native.window_attention(qkv, bias, graphs, values, pattern, 2, skip=skip)

    _assert_as_between_casts(op, [*inputs, skip], [upstream])


def test_the_window_op_with_a_kernel_stores_bfloat16_as_it_computes_float32_between_casts() -> None:
    rng = np.random.default_rng(3)
    sums = TriangleSums((2, 2), class_token=True)
    pattern, t, rows, channels = sums.pattern(1, True), sums.num_tokens, 6, 3 * 2 * 4
    values = pattern.values_of(tf.constant(rng.normal(size=(1, 2, t * t, t * t)), tf.float32))
    x = native.lane_blocks(_bfloat16(rng, (rows, 21, t)))
    kernel, bias = _bfloat16(rng, (rows, channels)), _bfloat16(rng, (channels,))
    graphs = _bfloat16(rng, (channels, t, t))
    upstream = _bfloat16(rng, (x.shape[1] * native.LANES, t, channels // 3))

    def op(x, kernel, bias, graphs):
        return native.window_attention(x, bias, graphs, values, pattern, 2, kernel)

    _assert_as_between_casts(op, [x, kernel, bias, graphs], [upstream])


def test_the_class_token_op_stores_bfloat16_as_it_computes_float32_between_casts() -> None:
    inputs, upstream, _ = _window_case(29, seed=7)
    coefficients = tf.constant([[0.25, 0.25], [0.25, -0.25]], tf.float32)

    def op(qkv, bias, graphs):
        return native.class_token_attention(qkv, bias, graphs, coefficients, 2)

    _assert_as_between_casts(op, inputs, [upstream[:, :1]])


def test_the_class_token_values_op_stores_bfloat16_as_it_computes_float32_between_casts() -> None:
    rng = np.random.default_rng(11)
    rows, t, heads, dim = 6, 10, 4, 32
    x = native.lane_blocks(_bfloat16(rng, (rows, 29, t)))
    scores = _bfloat16(rng, (x.shape[1] * native.LANES, 2, heads, t))
    kernel, graphs = _bfloat16(rng, (rows, dim)), _bfloat16(rng, (dim, t, t), 0.3)
    coefficients = tf.constant([[0.35, 0.35], [0.35, -0.35]], tf.float32)
    upstream = _bfloat16(rng, (scores.shape[0], 1, dim))

    def op(x, scores, kernel, graphs):
        return native.class_token_values(x, scores, kernel, graphs, coefficients, heads)

    _assert_as_between_casts(op, [x, scores, kernel, graphs], [upstream])


def test_a_nan_is_stored_as_the_quiet_nan_a_cast_gives() -> None:
    inputs, upstream, _ = _window_case(16, seed=2)
    qkv = inputs[0].numpy()
    qkv[-1, 0, 3, 5] = np.nan  # one value of v: window 5's output features of the last head turn NaN
    coefficients = tf.constant([[0.25, 0.25]], tf.float32)

    def op(qkv, bias, graphs):
        return native.class_token_attention(qkv, bias, graphs, coefficients, 2)

    out = op(tf.constant(qkv), *inputs[1:])
    assert np.isnan(tf.cast(out, tf.float32).numpy()).any()
    _assert_as_between_casts(op, [tf.constant(qkv), *inputs[1:]], [upstream[:, :1]])


@pytest.mark.parametrize("skip_tokens", [0, 1, 10])
def test_the_standardizing_op_stores_bfloat16_as_it_computes_float32_between_casts(skip_tokens: int) -> None:
    rng = np.random.default_rng(skip_tokens)
    x = _bfloat16(rng, (23, 10, 40), 3.0) + tf.constant(1.0, tf.bfloat16)
    lanes = _bfloat16(rng, (40, math.ceil(23 / native.LANES), 10, native.LANES))
    upstream = [lanes, _bfloat16(rng, (23, skip_tokens, 40))]
    _assert_as_between_casts(lambda x: native.standardized_lane_blocks(x, 1e-6, skip_tokens), [x], upstream)


@pytest.mark.parametrize("side", [3, 5])
def test_the_stems_convolution_stores_bfloat16_as_it_computes_float32_between_casts(side: int) -> None:
    """Values, the kernel's gradient and the input's (the op on the upstream gradient), on an odd image."""
    rng = np.random.default_rng(side)
    maps, kernel = _bfloat16(rng, (3, 11, 13, 5)), _bfloat16(rng, (side, side, 5))
    _assert_as_between_casts(native.depthwise_conv, [maps, kernel], [_bfloat16(rng, (3, 11, 13, 5))])


def test_the_stems_pooling_runs_in_bfloat16_as_in_float32_between_casts() -> None:
    rng = np.random.default_rng(5)
    maps = tf.round(_bfloat16(rng, (3, 13, 10, 3), 2.0))  # ties: the gradient goes to each window's first
    _assert_as_between_casts(lambda x: native.max_pool(x, 2), [maps], [_bfloat16(rng, (3, 6, 5, 3))])


@needs_xla_kernels
def test_under_xla_the_ops_keep_one_dtype_between_casts_and_give_the_same_bits() -> None:
    inputs, upstream, _ = _window_case(21, seed=4)
    coefficients = tf.constant([[0.25, 0.25]], tf.float32)

    def op(qkv, bias, graphs):
        return native.class_token_attention(qkv, bias, graphs, coefficients, 2)

    compiled = tf.function(lambda *x: _results(op, list(x), [upstream[:, :1]], None), jit_compile=True)
    graph_mode = _results(op, inputs, [upstream[:, :1]], jit_compile=False)
    for a, b in zip(compiled(*inputs), graph_mode, strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@needs_xla_kernels
def test_under_xla_an_op_whose_storage_is_not_its_arithmetic_refuses_in_one_sentence() -> None:
    inputs, _, _ = _window_case(16, seed=5)
    dtypes = (tf.float64, tf.float32, tf.float32)
    qkv, bias, graphs = (tf.cast(x, dtype) for x, dtype in zip(inputs, dtypes, strict=True))
    coefficients = tf.constant([[0.25, 0.25]], tf.float32)
    attend = native.library().sit_class_token_attention
    call = tf.function(lambda: attend(qkv, bias, graphs, coefficients, num_heads=2), jit_compile=True)
    message = "under XLA needs S = T; got S = double, T = float"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call()


def _storage_of(function, *args, ops: tuple[str, ...] = STORING_OPS) -> dict[str, set[tuple[tf.DType, str]]]:
    """Each storing op type's storage dtype (attribute S) in ``function`` traced on ``args``, with the type of
    the op that feeds its first input (its large tensor: qkv, the tokens, or their output's gradient)."""
    definition = function.get_concrete_function(*args).graph.as_graph_def()
    found: dict[str, set] = {}
    for nodes in [definition.node, *(f.node_def for f in definition.library.function)]:
        producers = {node.name: node.op for node in nodes}
        for node in nodes:
            if node.op in ops:
                first = node.input[0].split(":")[0]
                found.setdefault(node.op, set()).add((tf.as_dtype(node.attr["S"].type), producers.get(first)))
    return found


def _dtypes_of(function, args, ops: tuple[str, ...]) -> set[tf.DType]:
    """The dtypes (attribute T) of the ``ops`` in ``function`` traced on ``args``."""
    definition = function.get_concrete_function(args).graph.as_graph_def()
    nodes = [*definition.node, *(node for f in definition.library.function for node in f.node_def)]
    return {tf.as_dtype(node.attr["T"].type) for node in nodes if node.op in ops}


def _mixed_bfloat16_sit(**overrides: Any) -> tuple[tf_keras.Model, tf.Tensor]:
    """A SiT built under mixed_bfloat16 (the policy reset after), and images for it."""
    images = tf.constant(np.random.default_rng(0).integers(0, 256, size=(2, 16, 16, 3)), tf.uint8)
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        sit = build_encoder("sit", (16, 16, 3), seed=0, **overrides)
        sit(images)
    finally:
        tf_keras.mixed_precision.set_global_policy(None)
    return sit, images


def test_a_mixed_bfloat16_sits_train_step_runs_the_ops_storing_bfloat16() -> None:
    sit, images = _mixed_bfloat16_sit()
    storage = _storage_of(make_train_step(sit, jit_compile=False), images)
    assert set(storage) == set(STORING_OPS)
    for kinds in storage.values():
        assert {dtype for dtype, _ in kinds} == {tf.bfloat16}
        assert "Cast" not in {producer for _, producer in kinds}
    pooling = _dtypes_of(make_train_step(sit, jit_compile=False), images, ("SitMaxPool", "SitMaxPoolGrad"))
    assert pooling == {tf.bfloat16}


def test_a_mixed_bfloat16_sit_with_one_local_block_stores_its_class_token_values_in_bfloat16() -> None:
    """The demo's and the LavaCrossing SiT-small's shape: the single local block's values op."""
    sit, images = _mixed_bfloat16_sit(local_layers=1, global_layers=1)
    values_ops = ("SitClassTokenValues", "SitClassTokenValuesGrad")
    storage = _storage_of(make_train_step(sit, jit_compile=False), images, ops=values_ops)
    for op in values_ops:
        assert {dtype for dtype, _ in storage[op]} == {tf.bfloat16}
        assert "Cast" not in {producer for _, producer in storage[op]}


def _graphs_inputs_of(function, *args) -> set[tuple[tf.DType, str]]:
    """The dtype (attribute T) of every attention op's ``graphs`` input in ``function`` traced on ``args``,
    with the type of the op that feeds it, looked through Identity ops."""
    definition = function.get_concrete_function(*args).graph.as_graph_def()
    found = set()
    for nodes in [definition.node, *(f.node_def for f in definition.library.function)]:
        by_name = {node.name: node for node in nodes}
        for node in nodes:
            if node.op in STORING_OPS[:4]:
                names = [arg.name for arg in op_def_registry.get(node.op).input_arg]
                graphs = node.input[names.index("graphs")]
                found.add((tf.as_dtype(node.attr["T"].type), _producer(by_name, graphs)))
    return found


def _producer(by_name: dict, name: str) -> str | None:
    """The type of the op whose output ``name`` is, looked through Identity ops (None: a function's input)."""
    node = by_name.get(name.split(":")[0])
    while node is not None and node.op == "Identity":
        node = by_name.get(node.input[0].split(":")[0])
    return None if node is None else node.op


def test_a_mixed_bfloat16_sits_attention_ops_take_graphs_built_in_float32_with_no_cast() -> None:
    sit, images = _mixed_bfloat16_sit()
    graph_weights = [w for w in sit.trainable_weights if "qkv_graph" in w.name]
    assert graph_weights and {w.dtype for w in graph_weights} == {tf.float32}
    found = _graphs_inputs_of(make_train_step(sit, jit_compile=False), images)
    assert {dtype for dtype, _ in found} == {tf.float32}
    assert "Cast" not in {producer for _, producer in found}, found
