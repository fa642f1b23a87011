"""The GSA block of the SiT paper's Fig. 9: LayerNorm, GSA, additive skip."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.layers.graph_symmetric_attention import GraphSymmetricAttention
from sit_keras.layers.normalization import standardize
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.symmetry import Symmetry


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GraphSymmetricAttentionBlock(tf_keras.layers.Layer):
    """``x + GSA(LayerNorm(x))``, and optionally ``x + MLP(LayerNorm(x))`` after it.

    The SiT paper's block (Fig. 9, appendix F.1) has no MLP; ``mlp_dim > 0``
    adds the ViT one. LayerNorm and the MLP act on each token alone, so the
    block keeps exactly the symmetry of its ``GraphSymmetricAttention``.

    With ``implementation="fast"`` (the default) the LayerNorm before the
    attention is a standardisation with a hand-written gradient
    (``sit_keras.layers.normalization``) and its ``gamma`` / ``beta`` fold into
    the query/key/value projection; the weights stay where Keras' LayerNorm
    keeps them, so checkpoints of both implementations are interchangeable.

    Precision: the LayerNorm statistics run in float32 under a mixed policy
    (Keras' LayerNorm in the reference, ``normalization.standardize`` in the
    fast path); the rest as in ``GraphSymmetricAttention``.

    Args:
      mlp_dim: hidden size of the MLP, 0 for none (the paper's choice).
      norm_epsilon: LayerNorm epsilon.
      **kwargs: ``GraphSymmetricAttention`` arguments (``grid_shape``,
        ``num_heads``, ``symmetry``, ...) and ``name`` / ``dtype``.

    Call arguments:
      tokens: ``(B, T, D)``.
      training: Python boolean.

    Returns:
      ``(B, T, D)``.
    """

    def __init__(self, mlp_dim: int = 0, norm_epsilon: float = 1e-6, **kwargs: Any):
        layer_kwargs = {k: kwargs.pop(k) for k in ("name", "dtype", "trainable") if k in kwargs}
        super().__init__(**layer_kwargs)
        self.mlp_dim = int(mlp_dim)
        self.norm_epsilon = float(norm_epsilon)
        self.attention = GraphSymmetricAttention(dtype=self.dtype_policy, name="gsa", **kwargs)
        self.norm = tf_keras.layers.LayerNormalization(
            epsilon=norm_epsilon, dtype=self.dtype_policy, name="norm"
        )
        # The MLP's output size is the token size, known in build().
        self.mlp_layers: list[tf_keras.layers.Layer] = []

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        build_sublayer(self.norm, input_shape)
        build_sublayer(self.attention, input_shape)
        if self.mlp_dim:
            dim = int(input_shape[-1])
            self.mlp_layers = [
                tf_keras.layers.LayerNormalization(
                    epsilon=self.norm_epsilon, dtype=self.dtype_policy, name="mlp_norm"
                ),
                tf_keras.layers.Dense(
                    self.mlp_dim, activation="gelu", dtype=self.dtype_policy, name="mlp_hidden"
                ),
                tf_keras.layers.Dense(dim, dtype=self.dtype_policy, name="mlp_output"),
            ]
            shape = input_shape
            for layer in self.mlp_layers:
                build_sublayer(layer, shape)
                shape = layer.compute_output_shape(shape)
        super().build(input_shape)

    def call(self, tokens: tf.Tensor, training: bool | None = None, token_only: bool = False) -> tf.Tensor:
        """``token_only=True``: update and return only the class token, ``(B, 1, D)``."""
        if self.attention.implementation == "reference":
            update = self.attention(self.norm(tokens), training=training, token_only=token_only)
            return self.feed_forward((tokens[:, :1] if token_only else tokens) + update)
        skipped_and_updated = self.attention(
            tokens,
            training=training,
            token_only=token_only,
            input_scale=self.norm.gamma,
            input_offset=self.norm.beta,
            standardize_epsilon=self.norm_epsilon,
            add_tokens=True,
        )
        return self.feed_forward(skipped_and_updated)

    def standardize(self, tokens: tf.Tensor) -> tf.Tensor:
        """The LayerNorm before the attention without its ``gamma`` and ``beta``."""
        return standardize(tokens, self.norm_epsilon)

    def feed_forward(self, tokens: tf.Tensor) -> tf.Tensor:
        """``x + MLP(LayerNorm(x))`` when the block has an MLP, else ``x``."""
        update = tokens
        for layer in self.mlp_layers:
            update = layer(update)
        return tokens + update if self.mlp_layers else tokens

    @property
    def declared_symmetry(self) -> Symmetry:
        """That of its ``GraphSymmetricAttention``: LayerNorm, skip and MLP act per token (Fig. 9)."""
        return self.attention.declared_symmetry

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        attention = self.attention.get_config()
        for key in ("name", "dtype", "trainable"):
            attention.pop(key, None)
        config.update(attention, mlp_dim=self.mlp_dim, norm_epsilon=self.norm_epsilon)
        return config
