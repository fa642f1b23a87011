"""Tests of the baseline encoders: ViT, IMPALA ResNet and the small CNN."""

from __future__ import annotations

import doctest
import re
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from train_step_checks import assert_jit_train_step_updates_every_weight

from sit_keras.models import Encoder, build_encoder, cnn, impala_cnn, vit

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

# name -> (small image shape, constructor overrides) used wherever the exact
# size does not matter, to keep the tests fast. The CNN case is the MiniGrid
# setting of the SiT paper's F.1 (14x14 images, two stride-1 convolutions).
SMALL: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {
    "vit": ((16, 16, 3), {}),
    "impala_cnn": ((16, 16, 3), {"channels": (4, 8, 16), "output_dim": 64}),
    "cnn": ((14, 14, 3), {"filters": (16, 32), "strides": 1}),
}
NAMES = tuple(SMALL)


pytestmark = pytest.mark.usefixtures("fixed_seed")  # tests/conftest.py


def _build_small(name: str, **extra: Any) -> Encoder:
    shape, overrides = SMALL[name]
    return build_encoder(name, shape, **{**overrides, **extra})


def _images(batch: int, shape: tuple[int, int, int], dtype: tf.DType = tf.float32) -> tf.Tensor:
    pixels = np.random.default_rng(batch).integers(0, 256, size=(batch, *shape), dtype=np.uint8)
    if dtype == tf.uint8:
        return tf.constant(pixels)
    return tf.constant(pixels / 255.0, dtype=dtype)


# -- exact weight counts, written out layer by layer ----------------------------
def _conv_weights(kernel: int, c_in: int, c_out: int) -> int:
    return kernel * kernel * c_in * c_out + c_out


def _vit_weights(h: int, w: int, c: int, patch: int, dim: int, layers: int, mlp: int, out: int) -> int:
    tokens = (h // patch) * (w // patch) + 1
    norm = 2 * dim
    attention = 4 * (dim * dim + dim)  # query, key, value, output projections
    mlp_weights = norm + (dim * mlp + mlp) + (mlp * dim + dim) if mlp else 0
    block = norm + attention + mlp_weights
    embedding = _conv_weights(patch, c, dim) + dim + tokens * dim  # + class token + positions
    return embedding + layers * block + norm + (dim * out + out)


def _impala_weights(h: int, w: int, c: int, channels: tuple[int, ...], out: int) -> int:
    total, c_in = 0, c
    for c_out in channels:
        total += _conv_weights(3, c_in, c_out) + 4 * _conv_weights(3, c_out, c_out)
        h, w, c_in = -(-h // 2), -(-w // 2), c_out
    return total + h * w * c_in * out + out


def _cnn_weights(h: int, w: int, c: int, filters: tuple[int, ...], kernel: int, stride: int, out: int) -> int:
    total, c_in = 0, c
    for c_out in filters:
        total += _conv_weights(kernel, c_in, c_out)
        h, w, c_in = -(-h // stride), -(-w // stride), c_out
    return total + h * w * c_in * out + out


# name, overrides, exact count, the SiT paper's count (None: not in the paper)
PARAMETER_CASES = [
    ("vit", {}, _vit_weights(64, 64, 3, 8, 64, 4, 256, 64), 216_000),  # Table 1 caption, F.2
    ("vit", {"mlp_dim": 0}, _vit_weights(64, 64, 3, 8, 64, 4, 0, 64), None),  # F.1 variant
    (  # Table 1 caption
        "impala_cnn",
        {"channels": (4, 8, 16), "output_dim": 64},
        _impala_weights(64, 64, 3, (4, 8, 16), 64),
        79_400,
    ),
    ("impala_cnn", {}, _impala_weights(64, 64, 3, (16, 32, 32), 256), 620_000),  # UCB-DrAC, Table 1
    ("cnn", {}, _cnn_weights(64, 64, 3, (4, 8, 16, 32), 3, 2, 64), 40_000),  # Figure 8 caption
]


@pytest.mark.parametrize("name, overrides, exact, paper", PARAMETER_CASES)
def test_parameter_count_at_64x64(
    name: str, overrides: dict[str, Any], exact: int, paper: int | None
) -> None:
    encoder = build_encoder(name, (64, 64, 3), **overrides)
    assert encoder.count_params() == exact
    if paper is not None:
        assert abs(exact - paper) <= 0.03 * paper, f"{name}: {exact} weights vs the paper's {paper}"


def test_documented_parameter_counts() -> None:
    # The numbers quoted in the docstrings.
    assert [case[2] for case in PARAMETER_CASES] == [220_800, 87_936, 79_384, 622_144, 39_048]


# -- calls ------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("dtype", [tf.uint8, tf.float32], ids=["uint8", "float32"])
def test_output_shape(name: str, batch: int, dtype: tf.DType) -> None:
    encoder = _build_small(name)
    features = encoder(_images(batch, encoder.image_shape, dtype))
    assert features.shape == (batch, encoder.output_dim)
    assert features.dtype == tf.float32


@pytest.mark.parametrize("name", NAMES)
def test_uint8_is_scaled_to_unit_interval(name: str) -> None:
    encoder = _build_small(name)
    pixels = _images(2, encoder.image_shape, tf.uint8)
    np.testing.assert_allclose(
        encoder(pixels).numpy(), encoder(tf.cast(pixels, tf.float32) / 255.0).numpy(), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("name", NAMES)
def test_no_promised_symmetry(name: str) -> None:
    encoder = _build_small(name)
    assert encoder.symmetry_parts(_images(1, encoder.image_shape)) == {}


@pytest.mark.parametrize("name", NAMES)
def test_jit_compiled_train_step(name: str) -> None:
    encoder = _build_small(name)
    assert_jit_train_step_updates_every_weight(encoder, _images(3, encoder.image_shape))


@pytest.mark.parametrize("name", NAMES)
def test_jit_compiled_call_accepts_any_batch_size(name: str) -> None:
    encoder = _build_small(name)
    spec = tf.TensorSpec((None, *encoder.image_shape), tf.uint8)
    forward = tf.function(lambda images: encoder(images), jit_compile=True, input_signature=[spec])
    for batch in (1, 3):
        images = _images(batch, encoder.image_shape, tf.uint8)
        np.testing.assert_allclose(forward(images).numpy(), encoder(images).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_float64(name: str) -> None:
    encoder = _build_small(name, dtype="float64")
    assert {v.dtype for v in encoder.variables} == {tf.float64}
    for dtype in (tf.uint8, tf.float32, tf.float64):
        assert encoder(_images(2, encoder.image_shape, dtype)).dtype == tf.float64


@pytest.mark.parametrize("masked", [False, True])
def test_vit_attention_is_keras_multi_head_attention(masked: bool) -> None:
    """The ViT's attention (head-major matmuls, float32-safe softmax) computes Keras' own
    ``MultiHeadAttention`` with the same weights: outputs and input gradients, in float64."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(3, 7, 16)))
    mask = tf.constant(rng.random((3, 7, 7)) > 0.3) if masked else None
    ours = vit._Float32SoftmaxAttention(num_heads=4, key_dim=4, dtype="float64")
    keras = tf_keras.layers.MultiHeadAttention(num_heads=4, key_dim=4, dtype="float64")
    ours(x, x)
    keras(x, x)
    keras.set_weights([rng.normal(size=w.shape) for w in ours.get_weights()])
    ours.set_weights(keras.get_weights())

    def value_and_gradient(layer: tf_keras.layers.Layer) -> tuple[np.ndarray, np.ndarray]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, x, attention_mask=mask)
            loss = tf.reduce_sum(tf.sin(y))
        return y.numpy(), tape.gradient(loss, x).numpy()

    for got, expected in zip(value_and_gradient(ours), value_and_gradient(keras), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


# -- errors -----------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_wrong_image_shape(name: str) -> None:
    encoder = _build_small(name)
    h, w, c = encoder.image_shape
    expected = re.escape(f"expects images of shape (B, {h}, {w}, {c})")
    with pytest.raises(ValueError, match=expected):
        encoder(tf.zeros((2, h + 2, w, c)))
    with pytest.raises(ValueError, match=expected):
        encoder(tf.zeros((2, h, w, c + 1)))
    with pytest.raises(ValueError, match=expected):
        encoder(tf.zeros((h, w, c)))


INVALID_OPTIONS = [
    ("vit", (30, 30, 3), {}, "multiples of patch_size=8; received 30x30"),
    ("vit", (16, 20, 3), {"patch_size": 8}, "multiples of patch_size=8; received 16x20"),
    ("vit", (16, 16, 3), {"patch_size": 0}, "patch_size must be a positive integer"),
    ("vit", (16, 16, 3), {"embed_dim": 60, "num_heads": 8}, "embed_dim must be a multiple of num_heads"),
    ("vit", (16, 16, 3), {"num_layers": 0}, "num_layers must be a positive integer"),
    ("vit", (16, 16, 3), {"num_heads": 2.0}, "num_heads must be a positive integer"),
    ("vit", (16, 16, 3), {"mlp_dim": -1}, "mlp_dim must be an integer >= 0"),
    ("vit", (16, 16, 3), {"output_dim": 0}, "output_dim must be positive"),
    ("impala_cnn", (16, 16, 3), {"channels": ()}, "channels must be a non-empty sequence"),
    ("impala_cnn", (16, 16, 3), {"channels": (4, 0)}, "channels must be a non-empty sequence"),
    ("impala_cnn", (16, 16, 3), {"channels": 16}, "channels must be a non-empty sequence"),
    ("impala_cnn", (16, 16, 3), {"channels": "48"}, "channels must be a non-empty sequence"),
    ("impala_cnn", (16, 16, 3), {"channels": (4, 2.5)}, "channels must be a non-empty sequence"),
    ("impala_cnn", (16, 16), {}, "image_shape must be"),
    ("cnn", (16, 16, 3), {"filters": ()}, "filters must be a non-empty sequence"),
    ("cnn", (16, 16, 3), {"filters": (4, -8)}, "filters must be a non-empty sequence"),
    ("cnn", (16, 16, 3), {"kernel_size": 0}, "kernel_size must be a positive integer"),
    ("cnn", (16, 16, 3), {"strides": (2, 2)}, "strides must be a positive integer"),
]


@pytest.mark.parametrize("name, shape, overrides, message", INVALID_OPTIONS)
def test_invalid_options(name: str, shape: tuple[int, ...], overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build_encoder(name, shape, **overrides)


# -- docstring examples ------------------------------------------------------------
@pytest.mark.parametrize("module", [vit, impala_cnn, cnn], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_docstring_examples(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
