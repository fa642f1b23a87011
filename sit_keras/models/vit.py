"""The ViT baseline: a pre-norm Vision Transformer read out from its class token.

The layer stack (``h = H / patch_size``, ``w = W / patch_size``, ``D = embed_dim``)::

    images                                             (B, H, W, C)
      -> Conv2D(D, kernel = stride = patch_size)       (B, h, w, D)
      -> flatten the grid, prepend the class token     (B, 1 + h * w, D)
      -> + learned position embedding
      -> num_layers x [x + MHA(LN(x)); x + MLP(LN(x))]
      -> LN, keep the class token                      (B, D)
      -> Dense(output_dim, relu)                       (B, output_dim)

Under a mixed policy (``mixed_float16`` / ``mixed_bfloat16``) the variables
are float32 and everything runs in the compute dtype except the LayerNorm
statistics (Keras' LayerNorm computes them in float32) and the attention
softmax (``_Float32SoftmaxAttention``), which run in float32.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.layers.precision import stable_dtype
from sit_keras.models.base import Encoder

# Dosovitskiy et al. (2020) use this epsilon in every LayerNorm.
_LAYER_NORM_EPSILON = 1e-6


def _build(layer: tf_keras.layers.Layer, input_shape: tf.TensorShape) -> None:
    # Built from a parent's `build`, a sublayer is outside its own name scope;
    # entering it keeps variable names unique (as tf_keras' Bidirectional does).
    with tf.name_scope(layer.name):
        layer.build(input_shape)


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {kind}. Received: {name}={value!r}")
    return int(value)


class _ClassTokenAndPosition(tf_keras.layers.Layer):
    """Prepends a learned class token and adds a learned position embedding.

    Call arguments:
      tokens: ``(B, N, D)`` patch tokens.

    Returns:
      ``(B, 1 + N, D)``; index 0 is the class token.
    """

    def build(self, input_shape: tf.TensorShape) -> None:
        num_tokens, dim = int(input_shape[1]) + 1, int(input_shape[2])
        # Zero class token as in the reference ViT; the position embedding
        # alone already makes the tokens distinct.
        self.class_token = self.add_weight(
            name="class_token", shape=(1, 1, dim), initializer=tf_keras.initializers.Zeros()
        )
        self.position_embedding = self.add_weight(
            name="position_embedding",
            shape=(1, num_tokens, dim),
            initializer=tf_keras.initializers.TruncatedNormal(stddev=0.02),
        )
        super().build(input_shape)

    def call(self, tokens: tf.Tensor) -> tf.Tensor:
        batch = tf.shape(tokens)[0]
        class_tokens = tf.broadcast_to(self.class_token, [batch, 1, tokens.shape[-1]])
        return tf.concat([class_tokens, tokens], axis=1) + self.position_embedding


class _Float32SoftmaxAttention(tf_keras.layers.MultiHeadAttention):
    """Keras' ``MultiHeadAttention`` with its softmax in float32 under a mixed policy.

    Keras 2 takes the softmax of the scores in the compute dtype. This
    override of its attention kernel (``_compute_attention``, the documented
    hook) casts the scores to ``precision.stable_dtype`` (float32 for
    float16 / bfloat16, the compute dtype otherwise), masks and normalises
    them there, and casts the weights back to the compute dtype for dropout
    and the values. Same weights and config as the base layer; written for
    the default ``attention_axes`` (the softmax over the last axis).

    The heads go first once, ``(B, T, N, H) -> (B, N, T, H)``, so that the
    scores and the weighted values are plain batched matmuls: with Keras'
    einsums (``aecd,abcd->acbe``) the layer's forward and backward pass takes
    about 1.3x as long on a CPU for the ViT's small heads
    (``benchmarks/vit_attention.py``; ``tests/test_baselines.py`` checks the
    same function as Keras').
    """

    def _compute_attention(
        self,
        query: tf.Tensor,
        key: tf.Tensor,
        value: tf.Tensor,
        attention_mask: tf.Tensor | None = None,
        training: bool | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        query = tf.multiply(query, 1.0 / math.sqrt(float(self._key_dim)))
        # (B, T, N, H) -> (B, N, T, H): b = batch, n = head, t / s = query / key tokens.
        query, key, value = (tf.transpose(x, [0, 2, 1, 3]) for x in (query, key, value))
        scores = tf.matmul(query, key, transpose_b=True)  # (B, N, T, S)
        scores = tf.cast(scores, stable_dtype(scores.dtype))
        if attention_mask is not None:
            # (B, T, S) -> (B, 1, T, S): one mask for every head; masked keys get a weight of 0.
            mask = tf.expand_dims(tf.cast(attention_mask, tf.bool), axis=-3)
            scores = tf.where(mask, scores, tf.constant(-0.5 * scores.dtype.max, scores.dtype))
        weights = tf.nn.softmax(scores, axis=-1)
        dropped = self._dropout_layer(tf.cast(weights, value.dtype), training=training)
        return tf.transpose(tf.matmul(dropped, value), [0, 2, 1, 3]), weights


class _TransformerBlock(tf_keras.layers.Layer):
    """Pre-norm block: ``x + MHA(LN(x))``, then ``x + MLP(LN(x))`` if ``mlp_dim > 0``.

    Args:
      embed_dim: token size ``D``.
      num_heads: attention heads; each has ``key_dim = D // num_heads``.
      mlp_dim: hidden size of the GELU MLP; 0 leaves the MLP out.

    Call arguments:
      tokens: ``(B, N, D)``.
      training: Python or tensor boolean.

    Returns:
      ``(B, N, D)``.
    """

    def __init__(self, embed_dim: int, num_heads: int, mlp_dim: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        policy = self.dtype_policy
        self.attention_norm = tf_keras.layers.LayerNormalization(
            epsilon=_LAYER_NORM_EPSILON, dtype=policy, name="attention_norm"
        )
        self.attention = _Float32SoftmaxAttention(
            num_heads=num_heads, key_dim=embed_dim // num_heads, dtype=policy, name="attention"
        )
        if mlp_dim:
            self.mlp_norm = tf_keras.layers.LayerNormalization(
                epsilon=_LAYER_NORM_EPSILON, dtype=policy, name="mlp_norm"
            )
            self.mlp_hidden = tf_keras.layers.Dense(
                mlp_dim, activation="gelu", dtype=policy, name="mlp_hidden"
            )
            self.mlp_output = tf_keras.layers.Dense(embed_dim, dtype=policy, name="mlp_output")

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        _build(self.attention_norm, input_shape)
        # tf_keras' MultiHeadAttention has no public `build`; this is the hook
        # its own `from_config` uses to create the weights.
        self.attention._build_from_signature(query=input_shape, value=input_shape)
        if self.mlp_dim:
            _build(self.mlp_norm, input_shape)
            _build(self.mlp_hidden, input_shape)
            _build(self.mlp_output, input_shape[:-1].concatenate([self.mlp_dim]))
        super().build(input_shape)

    def call(self, tokens: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        normed = self.attention_norm(tokens)
        tokens = tokens + self.attention(normed, normed, training=training)
        if self.mlp_dim:
            tokens = tokens + self.mlp_output(self.mlp_hidden(self.mlp_norm(tokens)))
        return tokens

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(embed_dim=self.embed_dim, num_heads=self.num_heads, mlp_dim=self.mlp_dim)
        return config


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class ViTEncoder(Encoder):
    """Vision Transformer baseline: patch embedding, class token, pre-norm blocks.

    The standard ViT of Dosovitskiy et al. (2020), sized as the SiT paper's
    Procgen baseline "4 Attn. Layers, 64 channels, hidden dim. 64" (Table 2;
    216k weights per the Table 1 caption and F.2). With the defaults at
    ``image_shape=(64, 64, 3)`` this encoder has 220,800 weights (2% more).
    ``mlp_dim=0`` gives the MiniGrid variant of F.1, which has no MLP after
    each attention layer.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32; the LayerNorm statistics and the attention softmax run in
    float32, everything else (convolution, projections, GELU MLP, residual
    sums) in the compute dtype, which the features are returned in.

    Args:
      image_shape: ``(H, W, C)``; ``H`` and ``W`` must be multiples of
        ``patch_size``.
      output_dim: size ``D_out`` of the final ReLU Dense layer (hidden size).
      patch_size: side of the square, non-overlapping patches.
      embed_dim: token size ``D``; must be a multiple of ``num_heads``.
      num_layers: number of attention blocks.
      num_heads: attention heads per block; each has ``key_dim = D // num_heads``.
      mlp_dim: hidden size of the GELU MLP in each block; 0 for no MLP.
      **kwargs: passed to ``Encoder`` (``name``, ``dtype``).

    Call arguments:
      images: ``(B, H, W, C)``, ``uint8`` (scaled by 1/255) or float.
      training: Python or tensor boolean.

    Returns:
      ``(B, D_out)`` features in the compute dtype.

    Raises:
      ValueError: invalid sizes, or (on call) images not of shape ``(B, H, W, C)``.

    >>> encoder = ViTEncoder(image_shape=(16, 16, 3), patch_size=8)
    >>> encoder(tf.zeros((2, 16, 16, 3), tf.uint8)).shape
    TensorShape([2, 64])
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_dim: int = 64,
        patch_size: int = 8,
        embed_dim: int = 64,
        num_layers: int = 4,
        num_heads: int = 4,
        mlp_dim: int = 256,
        **kwargs: Any,
    ):
        super().__init__(image_shape=image_shape, output_dim=output_dim, **kwargs)
        self.patch_size = _check_int("patch_size", patch_size, 1)
        self.embed_dim = _check_int("embed_dim", embed_dim, 1)
        self.num_layers = _check_int("num_layers", num_layers, 1)
        self.num_heads = _check_int("num_heads", num_heads, 1)
        self.mlp_dim = _check_int("mlp_dim", mlp_dim, 0)
        height, width, _ = self.image_shape
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(
                f"image height and width must be multiples of patch_size={self.patch_size}; "
                f"received {height}x{width}"
            )
        if self.embed_dim % self.num_heads:
            raise ValueError(
                "embed_dim must be a multiple of num_heads. "
                f"Received: embed_dim={self.embed_dim}, num_heads={self.num_heads}"
            )
        self.num_patches = (height // self.patch_size) * (width // self.patch_size)

        policy = self.dtype_policy
        self.patch_embedding = tf_keras.layers.Conv2D(
            self.embed_dim,
            kernel_size=self.patch_size,
            strides=self.patch_size,
            padding="valid",
            dtype=policy,
            name="patch_embedding",
        )
        self.token_embedding = _ClassTokenAndPosition(dtype=policy, name="token_embedding")
        self.blocks = [
            _TransformerBlock(self.embed_dim, self.num_heads, self.mlp_dim, dtype=policy, name=f"block_{i}")
            for i in range(self.num_layers)
        ]
        self.final_norm = tf_keras.layers.LayerNormalization(
            epsilon=_LAYER_NORM_EPSILON, dtype=policy, name="final_norm"
        )
        self.hidden = tf_keras.layers.Dense(self.output_dim, activation="relu", dtype=policy, name="hidden")

    def encode(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        patches = self.patch_embedding(images)  # (B, h, w, D)
        tokens = self.token_embedding(tf.reshape(patches, [-1, self.num_patches, self.embed_dim]))
        for block in self.blocks:
            tokens = block(tokens, training=training)  # (B, 1 + h * w, D)
        return self.hidden(self.final_norm(tokens[:, 0]))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            patch_size=self.patch_size,
            embed_dim=self.embed_dim,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
        )
        return config
