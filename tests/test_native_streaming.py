"""Outputs past the caches: float32 and bfloat16 outputs of at least 32 MiB (``kStreamingBytes`` in
``sit_keras/native/kernels.h``) are written with non-temporal stores by the projection op and the
class-token gradient op. Each output value is the same sum either way, so a large call's values are the
bits of a small call (stored normally) on a slice of its columns or windows. (With each streaming store
adding one to what it stored, every test here failed.)"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from sit_keras import native

pytestmark = pytest.mark.skipif(
    not native.available(), reason="needs the native kernels: `make install` builds them"
)

STREAMING_BYTES = 32 << 20  # kStreamingBytes
FLOAT32_BYTES = 4


def test_a_projection_past_the_caches_is_the_bits_of_projections_in_them() -> None:
    rng = np.random.default_rng(0)
    rows, outputs, columns = 3, 128, 65_536 + 4 * native.LANES
    assert outputs * columns * FLOAT32_BYTES >= STREAMING_BYTES  # the large call streams
    kernel = tf.constant(rng.normal(size=(rows, outputs)), tf.float32)
    x = tf.constant(rng.normal(size=(rows, columns)), tf.float32)
    streamed = native.project_channels_first(kernel, x).numpy()
    for first, width in [(0, 1024), (columns - 2048, 2048)]:
        cached = native.project_channels_first(kernel, x[:, first : first + width]).numpy()
        np.testing.assert_array_equal(streamed[:, first : first + width], cached)
    np.testing.assert_allclose(streamed, tf.matmul(kernel, x, transpose_a=True).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_a_class_token_gradient_past_the_caches_is_the_bits_of_gradients_in_them(dtype: tf.DType) -> None:
    """The gradient of qkv (3 H d, B / LANES, T, LANES) of B windows, stored as ``dtype``: window b's depends
    on window b alone."""
    rng = np.random.default_rng(1)
    heads, head_dim, tokens = 4, 16, 17
    channels, dim = 3 * heads * head_dim, heads * head_dim
    windows = 2 * 2592 if dtype == tf.bfloat16 else 2592
    assert channels * windows * tokens * dtype.size >= STREAMING_BYTES  # the large call streams
    qkv = native.lane_blocks(tf.constant(rng.normal(size=(channels, windows, tokens)), dtype))
    bias = tf.constant(rng.normal(size=channels), tf.float32)
    graphs = tf.constant(rng.normal(size=(channels, tokens, tokens)) / tokens, tf.float32)
    coefficients = tf.constant(rng.normal(size=(1, 2)), tf.float32)
    upstream = tf.constant(rng.normal(size=(windows, 1, dim)), dtype)

    def qkv_gradient(blocks: int) -> np.ndarray:
        part = qkv[:, :blocks]
        with tf.GradientTape() as tape:
            tape.watch(part)
            out = native.class_token_attention(part, bias, graphs, coefficients, heads)
            part_upstream = upstream[: blocks * native.LANES]
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.cast(part_upstream, tf.float32))
        return tf.cast(tape.gradient(loss, part), tf.float32).numpy()

    streamed = qkv_gradient(qkv.shape[1])
    cached_blocks = 1024 // native.LANES
    np.testing.assert_array_equal(streamed[:, :cached_blocks], qkv_gradient(cached_blocks))
    assert np.all(np.isfinite(streamed)) and np.any(streamed[:, -1])
