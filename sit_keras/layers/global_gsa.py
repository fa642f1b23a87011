"""Global GSA: graph symmetric attention over the patch grid with a class token (SiT paper Fig. 3)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.layers.gsa_block import GraphSymmetricAttentionBlock
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.symmetry import EQUIVARIANT, INVARIANT, Symmetry, graph_symmetry


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GlobalGSA(tf_keras.layers.Layer):
    """GSA blocks over all patches of a ``(h, w)`` grid plus a class token.

    Symmetry: for a grid permutation ``g`` kept by the blocks (D4 elements of
    ``symmetry`` on a square grid; rotations only with ``triangles > 0``) the
    class token is invariant and the patches are equivariant:
    ``token(g x) = token(x)``, ``patches(g x) = g patches(x)``
    (Proposition 3.1).

    Precision: as its blocks (``GraphSymmetricAttentionBlock``); the final
    LayerNorm is Keras', whose statistics run in float32 under a mixed policy.

    Args:
      grid_shape: ``(h, w)`` of the patch grid.
      num_heads: attention heads.
      num_layers: number of GSA blocks.
      output_patches: return the patch grid too. Without it only the class
        token's row of the last block is computed; that row is untouched by
        triangle sums and ``G`` (Listing 3), so the last block has none.
      **kwargs: further ``GraphSymmetricAttentionBlock`` arguments
        (``symmetry``, ``triangles``, ``graph_qkv``, ``graph_kernel_size``,
        ``graph_dropout``, ``mlp_dim``, ...) and ``name`` / ``dtype``.

    Call arguments:
      patches: ``(B, h, w, D)``.
      training: Python boolean.

    Returns:
      ``(token, patches)``: ``(B, D)`` and ``(B, h, w, D)`` after a final
      LayerNorm; with ``output_patches=False``, the token alone (one tensor,
      as ``MultiHeadAttention``'s return changes with
      ``return_attention_scores``), so the layer fits a functional model.
    """

    def __init__(
        self,
        grid_shape: tuple[int, int],
        num_heads: int = 4,
        num_layers: int = 2,
        output_patches: bool = True,
        **kwargs: Any,
    ):
        layer_kwargs = {k: kwargs.pop(k) for k in ("name", "dtype", "trainable") if k in kwargs}
        super().__init__(**layer_kwargs)
        self.grid_shape = tuple(int(d) for d in grid_shape)
        self.num_heads = int(num_heads)
        self.num_layers = int(num_layers)
        if self.num_layers < 1:
            raise ValueError(f"GlobalGSA needs num_layers >= 1. Received: num_layers={num_layers}")
        self.output_patches = bool(output_patches)
        self.block_kwargs = dict(kwargs)
        self.blocks = []
        for i in range(self.num_layers):
            block_kwargs = dict(kwargs)
            if i == self.num_layers - 1 and not self.output_patches:
                block_kwargs.update(triangles=0, score_graph=False)  # dead on the token's row
            self.blocks.append(
                GraphSymmetricAttentionBlock(
                    grid_shape=self.grid_shape,
                    num_heads=self.num_heads,
                    class_token=True,
                    dtype=self.dtype_policy,
                    name=f"block_{i}",
                    **block_kwargs,
                )
            )
        self.norm = tf_keras.layers.LayerNormalization(epsilon=1e-6, dtype=self.dtype_policy, name="norm")

    def _check_patches(self, shape: tf.TensorShape) -> None:
        h, w = self.grid_shape
        dim = getattr(self, "dim", None)
        expected = (h, w, dim) if dim else (h, w)
        if shape.rank != 4 or shape[-1] is None or tuple(shape[1 : 1 + len(expected)]) != expected:
            raise ValueError(
                f"GlobalGSA expects patches (B, {h}, {w}, {dim or 'D'}). Received: shape={shape}"
            )

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        self._check_patches(input_shape)
        h, w = self.grid_shape
        self.dim = int(input_shape[-1])
        self.class_token = self.add_weight(
            "class_token", (self.dim,), initializer=tf_keras.initializers.RandomNormal(stddev=0.02)
        )
        tokens = tf.TensorShape([None, 1 + h * w, self.dim])
        for block in self.blocks:
            build_sublayer(block, tokens)
        build_sublayer(self.norm, tokens)
        super().build(input_shape)

    def call(
        self, patches: tf.Tensor, training: bool | None = None
    ) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
        self._check_patches(patches.shape)
        h, w = self.grid_shape
        flat = tf.reshape(patches, [-1, h * w, self.dim])
        token = tf.tile(tf.cast(self.class_token, flat.dtype)[None, None, :], [tf.shape(flat)[0], 1, 1])
        tokens = tf.concat([token, flat], axis=1)
        for block in self.blocks[:-1]:
            tokens = block(tokens, training=training)
        last = self.blocks[-1]
        token_only = not self.output_patches and not last.attention.score_mixing
        tokens = self.norm(last(tokens, training=training, token_only=token_only))
        if not self.output_patches:
            return tokens[:, 0]
        # One split, not two slices: the gradient is then one concat, where the slices' were two
        # zero-padded copies of the tokens (StridedSliceGrad) and their sum.
        token, patches = tf.split(tokens, [1, h * w], axis=1)
        return token[:, 0], tf.reshape(patches, [-1, h, w, self.dim])

    @property
    def declared_symmetry(self) -> Symmetry:
        """Class token invariant, patches equivariant (Prop. 3.1).

        The last block's class-token row has no triangle sum (Listing 3), so the
        flips are broken only when an earlier block's, or the returned patches',
        triangle sums reach the output.
        """
        triangles = self.block_kwargs.get("triangles", 0)
        reaches = self.num_layers >= 2 or self.output_patches
        parts = (("token", INVARIANT), ("patches", EQUIVARIANT)) if self.output_patches else ()
        return graph_symmetry(
            self.block_kwargs.get("symmetry", "rotation"),
            triangles if reaches else 0,
            square=self.grid_shape[0] == self.grid_shape[1],
            acts_on="image",
            output="the class token is invariant; the patch grid transforms with the input",
            parts=parts or (("output", INVARIANT),),
            reference="SiT Fig. 3, Prop. 3.1",
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            grid_shape=list(self.grid_shape),
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            output_patches=self.output_patches,
            **self.block_kwargs,
        )
        return config
