"""The GSA block of the SiT paper's Fig. 9: LayerNorm, GSA, additive skip."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.layers.graph_symmetric_attention import GraphSymmetricAttention


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GraphSymmetricAttentionBlock(tf_keras.layers.Layer):
    """``x + GSA(LayerNorm(x))``, and optionally ``x + MLP(LayerNorm(x))`` after it.

    The SiT paper's block (Fig. 9, appendix F.1) has no MLP; ``mlp_dim > 0``
    adds the ViT one. LayerNorm and the MLP act on each token alone, so the
    block keeps exactly the symmetry of its ``GraphSymmetricAttention``.

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
        self.norm = tf_keras.layers.LayerNormalization(epsilon=norm_epsilon, dtype=self.dtype_policy, name="norm")
        # The MLP's output size is the token size, known in build().
        self.mlp = None

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        self.norm.build(input_shape)
        self.attention.build(input_shape)
        if self.mlp_dim:
            dim = int(input_shape[-1])
            self.mlp_norm = tf_keras.layers.LayerNormalization(
                epsilon=self.norm_epsilon, dtype=self.dtype_policy, name="mlp_norm"
            )
            self.mlp = tf_keras.Sequential(
                [
                    tf_keras.layers.Dense(self.mlp_dim, activation="gelu", dtype=self.dtype_policy),
                    tf_keras.layers.Dense(dim, dtype=self.dtype_policy),
                ],
                name="mlp",
            )
            self.mlp_norm.build(input_shape)
            self.mlp.build(input_shape)
        super().build(input_shape)

    def call(self, tokens: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        tokens = tokens + self.attention(self.norm(tokens), training=training)
        if self.mlp is not None:
            tokens = tokens + self.mlp(self.mlp_norm(tokens), training=training)
        return tokens

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        attention = self.attention.get_config()
        for key in ("name", "dtype", "trainable"):
            attention.pop(key, None)
        config.update(attention, mlp_dim=self.mlp_dim, norm_epsilon=self.norm_epsilon)
        return config
