"""Local GSA: graph symmetric attention inside windows of pixels (SiT paper Fig. 3, appendices B, F.1, F.5)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras import graphs
from sit_keras.layers.gsa_block import GraphSymmetricAttentionBlock


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class LocalGSA(tf_keras.layers.Layer):
    """Attention among the pixels of each window; each window's class token is its output.

    Pixels are embedded by a shared dense layer, grouped into square windows
    (``sit_keras.graphs.window_indices``: tiling windows, or one window
    centred on every pixel for ``stride=1``), and each window with its own
    copy of a learned class token passes through ``num_layers`` GSA blocks
    over the window's ``window x window`` grid. Only the class tokens move on
    (appendix B), forming a ``(H / stride, W / stride)`` map.

    The first block's ``G_q, G_k, G_v`` are applied to the whole pixel map by
    a depth-wise convolution of size ``graph_kernel_size`` before the
    windows are cut, so the graph reaches past the window while attention
    stays inside it (the "extended local attention window" of section 4.1
    and appendix F.5).

    Symmetry: for a square map, any D4 element kept by ``symmetry`` (only
    rotations when ``triangles > 0``) maps windows to windows and transforms
    each window's content the same way, so the output map is equivariant:
    ``f(g x) = g f(x)`` (Fig. 10).

    Args:
      window: side of a window in pixels.
      stride: ``window`` (tiling windows, default) or ``1`` (sliding windows,
        odd ``window``, zero padding).
      dim: token size ``D``.
      num_heads: attention heads.
      num_layers: GSA blocks applied inside the windows.
      graph_kernel_size: odd reach of the first block's graphs on the pixel
        map; ``None`` for the smallest odd size covering the window.
      **kwargs: further ``GraphSymmetricAttentionBlock`` arguments shared by
        all blocks (``symmetry``, ``triangles``, ``graph_qkv``,
        ``graph_dropout``, ``mlp_dim``, ...), and ``name`` / ``dtype``.

    Call arguments:
      pixels: ``(B, H, W, C)``.
      training: Python boolean.

    Returns:
      ``(B, H / stride, W / stride, dim)``.
    """

    def __init__(
        self,
        window: int,
        stride: int | None = None,
        dim: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        graph_kernel_size: int | None = None,
        **kwargs: Any,
    ):
        layer_kwargs = {k: kwargs.pop(k) for k in ("name", "dtype", "trainable") if k in kwargs}
        super().__init__(**layer_kwargs)
        self.window = int(window)
        self.stride = self.window if stride is None else int(stride)
        self.dim = int(dim)
        self.num_heads = int(num_heads)
        self.num_layers = int(num_layers)
        if self.num_layers < 1:
            raise ValueError(f"LocalGSA needs num_layers >= 1. Received: num_layers={num_layers}")
        self.graph_kernel_size = self.window + 1 - self.window % 2 if graph_kernel_size is None else int(
            graph_kernel_size
        )
        self.block_kwargs = dict(kwargs)
        grid = (self.window, self.window)
        self.embed = tf_keras.layers.Dense(self.dim, dtype=self.dtype_policy, name="embed")
        self.blocks = [
            GraphSymmetricAttentionBlock(
                grid_shape=grid,
                num_heads=self.num_heads,
                graph_kernel_size=self.graph_kernel_size if i == 0 else None,
                class_token=True,
                dtype=self.dtype_policy,
                name=f"block_{i}",
                **kwargs,
            )
            for i in range(self.num_layers)
        ]

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 4 or None in input_shape[1:]:
            raise ValueError(f"LocalGSA expects pixel maps (B, H, W, C). Received: shape={input_shape}")
        _, h, w, _ = input_shape
        self.map_shape = (int(h), int(w))
        # Raises a ValueError naming the valid sizes when the windows do not fit.
        self._windows = graphs.window_indices(self.map_shape, self.window, self.stride)
        self.embed.build(input_shape)
        self.class_token = self.add_weight(
            "class_token", (self.dim,), initializer=tf_keras.initializers.RandomNormal(stddev=0.02)
        )
        tokens = tf.TensorShape([None, 1 + self.window**2, self.dim])
        for block in self.blocks:
            block.build(tokens)
        super().build(input_shape)

    @property
    def output_grid(self) -> tuple[int, int]:
        return self._windows.shape[:2]

    def _cut_windows(self, pixel_map: tf.Tensor) -> tf.Tensor:
        """``(B, H, W, F)`` -> ``(B * N, window^2, F)``, zero outside the map."""
        h, w = self.map_shape
        channels = pixel_map.shape[-1]
        flat = tf.reshape(pixel_map, [-1, h * w, channels])
        flat = tf.concat([flat, tf.zeros_like(flat[:, :1])], axis=1)
        windows = tf.gather(flat, self._windows.reshape(-1), axis=1)
        return tf.reshape(windows, [-1, self.window**2, channels])

    def call(self, pixels: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        h, w = self.map_shape
        x = self.embed(pixels)  # (B, H, W, D)
        first = self.blocks[0]
        gsa = first.attention
        # First block: the graphs act on the whole map (a convolution), then
        # the windows are cut; the class token has no graph (Listing 1).
        qkv = gsa.project_qkv(first.norm(tf.reshape(x, [-1, h * w, self.dim])))
        if gsa.graph_qkv:
            qkv = gsa.mix_qkv_grid(qkv, training=training, map_shape=(h, w))
        qkv = self._cut_windows(tf.reshape(qkv, [-1, h, w, 3 * self.dim]))
        token = tf.cast(self.class_token, x.dtype)
        token_qkv = gsa.project_qkv(first.norm(token[None, None, :]))
        num_windows = tf.shape(qkv)[0]
        qkv = tf.concat([tf.tile(token_qkv, [num_windows, 1, 1]), qkv], axis=1)
        tokens = tf.concat([tf.tile(token[None, None, :], [num_windows, 1, 1]), self._cut_windows(x)], axis=1)
        tokens = tokens + gsa.attend(qkv, training=training)
        if first.mlp is not None:
            tokens = tokens + first.mlp(first.mlp_norm(tokens), training=training)
        for block in self.blocks[1:]:
            tokens = block(tokens, training=training)
        n_h, n_w = self.output_grid
        return tf.reshape(tokens[:, 0], [-1, n_h, n_w, self.dim])

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        input_shape = tf.TensorShape(input_shape)
        windows = graphs.window_indices((input_shape[1], input_shape[2]), self.window, self.stride)
        return tf.TensorShape([input_shape[0], *windows.shape[:2], self.dim])

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            window=self.window,
            stride=self.stride,
            dim=self.dim,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            graph_kernel_size=self.graph_kernel_size,
            **self.block_kwargs,
        )
        return config

