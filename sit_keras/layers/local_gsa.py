"""Local GSA: graph symmetric attention inside windows of pixels (SiT paper Fig. 3, app. B, F.1, F.5)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras import graphs, native
from sit_keras.layers.channels_first import project_channels_first
from sit_keras.layers.gsa_block import GraphSymmetricAttentionBlock
from sit_keras.layers.indexing import ConstantGather
from sit_keras.layers.precision import stable_dtype
from sit_keras.layers.skip_embedding import embed_few_channels
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.symmetry import EQUIVARIANT, Symmetry, graph_symmetry


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class LocalGSA(tf_keras.layers.Layer):
    """Attention among the pixels of each window; each window's class token is its output.

    Pixels are embedded by a shared dense layer, grouped into square windows
    (``sit_keras.graphs.window_indices``: tiling windows, or one window
    centred on every pixel for ``stride=1``), and each window with its own
    copy of a learned class token passes through ``num_layers`` GSA blocks
    over the window's ``window x window`` grid. Only the class tokens move on
    (appendix B), forming a ``(H / stride, W / stride)`` map.

    The graphs ``G_q, G_k, G_v`` act inside each window by default. With
    ``graph_kernel_size`` set, the first block's graphs act on the whole
    pixel map instead, as a depth-wise convolution of that size, before the
    windows are cut: the graph reaches past the window while attention stays
    inside it (the "extended local attention window" of section 4.1 and
    appendix F.5). It is exact too, but XLA compiles depth-wise
    convolutions poorly on CPU (see ``benchmarks/encoders.py``).

    With the fast implementation (the default), the first block starts from
    the pixels: embedding, LayerNorm and projection
    compose into ``r(x) (x A + a) + c`` for each ``C``-channel pixel ``x``
    (``_first_block_from_pixels``), so no ``D -> 3 D`` projection of a window
    token is computed. A single block, whose class token's row alone is read,
    does not form the window tokens' queries and keys either: its scores are
    composed from the pixels (``GraphSymmetricAttention.attend_constant_class_token``;
    its values in one native op where the kernels run).
    Same function, same weights as the reference path.

    Precision: under a mixed policy the embedding and the one large
    projection matmul run in the compute dtype; the LayerNorm variance and
    ``r(x)`` of the composed first block run in float32; the blocks as in
    ``GraphSymmetricAttentionBlock``.

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
      graph_kernel_size: odd reach of the first block's graphs on the whole
        pixel map; ``None`` keeps every graph inside its window.
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
        self.graph_kernel_size = None if graph_kernel_size is None else int(graph_kernel_size)
        self.block_kwargs = dict(kwargs)
        self.embed = tf_keras.layers.Dense(self.dim, dtype=self.dtype_policy, name="embed")
        self.blocks = [self._make_block(i, kwargs) for i in range(self.num_layers)]

    def _make_block(self, i: int, kwargs: dict[str, Any]) -> GraphSymmetricAttentionBlock:
        block_kwargs = dict(kwargs)
        if i == self.num_layers - 1:
            # Only the class token's row of the last block is read; triangle
            # sums and G leave that row unchanged (Listing 3), so they would
            # be dead weights here.
            block_kwargs.update(triangles=0, score_graph=False)
        return GraphSymmetricAttentionBlock(
            grid_shape=(self.window, self.window),
            num_heads=self.num_heads,
            graph_kernel_size=self.graph_kernel_size if i == 0 else None,
            class_token=True,
            dtype=self.dtype_policy,
            name=f"block_{i}",
            **block_kwargs,
        )

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 4 or None in input_shape[1:]:
            raise ValueError(f"LocalGSA expects pixel maps (B, H, W, C). Received: shape={input_shape}")
        _, h, w, _ = input_shape
        self.map_shape = (int(h), int(w))
        # Raises a ValueError naming the valid sizes when the windows do not fit.
        self._windows = graphs.window_indices(self.map_shape, self.window, self.stride)
        if self.stride == 1:
            self._gather_windows = ConstantGather(self._windows, h * w + 1, axis=1, zero_input=h * w)
        build_sublayer(self.embed, input_shape)
        self.class_token = self.add_weight(
            "class_token", (self.dim,), initializer=tf_keras.initializers.RandomNormal(stddev=0.02)
        )
        tokens = tf.TensorShape([None, 1 + self.window**2, self.dim])
        for block in self.blocks:
            build_sublayer(block, tokens)
        super().build(input_shape)

    @property
    def output_grid(self) -> tuple[int, int]:
        return self._windows.shape[:2]

    def _cut_windows(self, pixel_map: tf.Tensor) -> tf.Tensor:
        """``(B, H, W, F)`` -> ``(B * N, window^2, F)``, zero outside the map."""
        h, w = self.map_shape
        n_h, n_w = self.output_grid
        size, channels = self.window, pixel_map.shape[-1]
        if self.stride == size:  # tiling windows: a reshape, cheaper than a gather
            blocks = tf.reshape(pixel_map, [-1, n_h, size, n_w, size, channels])
            return tf.reshape(tf.transpose(blocks, [0, 1, 3, 2, 4, 5]), [-1, size * size, channels])
        flat = tf.reshape(pixel_map, [-1, h * w, channels])
        flat = tf.concat([flat, tf.zeros_like(flat[:, :1])], axis=1)
        return tf.reshape(self._gather_windows(flat), [-1, size * size, channels])

    def call(self, pixels: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        expected = (*self.map_shape, self.embed.kernel.shape[0])
        if tuple(pixels.shape[1:]) != expected:
            raise ValueError(
                f"{self.name} expects pixel maps (B, {', '.join(map(str, expected))}). "
                f"Received: {pixels.shape}"
            )
        if self.graph_kernel_size is not None:
            tokens = self._first_block_on_map(self.embed(pixels), training)
            blocks = self.blocks[1:]
        elif self.blocks[0].attention.implementation == "fast":
            tokens = self._first_block_from_pixels(pixels, training)
            blocks = self.blocks[1:]
        else:
            x = self.embed(pixels)  # (B, H, W, D)
            tokens = self._with_class_tokens(self._cut_windows(x), x.dtype)
            blocks = self.blocks
        for block in blocks[:-1]:
            tokens = block(tokens, training=training)
        if blocks:
            # Only the class token moves on: the last block computes its row alone.
            tokens = blocks[-1](tokens, training=training, token_only=not blocks[-1].attention.score_mixing)
        n_h, n_w = self.output_grid
        return tf.reshape(tokens[:, 0], [-1, n_h, n_w, self.dim])

    def _with_class_tokens(self, windows: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        token = tf.cast(self.class_token, dtype)[None, None, :]
        return tf.concat([tf.tile(token, [tf.shape(windows)[0], 1, 1]), windows], axis=1)

    def _first_block_from_pixels(self, pixels: tf.Tensor, training: bool | None) -> tf.Tensor:
        """The first block with embedding, LayerNorm and projection composed per pixel.

        For a pixel ``x`` (``C`` channels) the token is ``x E + e``; its
        LayerNorm mean is linear in ``x``, so the centred token is ``[x, 1] Z``
        with ``Z`` the centred ``[E; e]``, its variance the quadratic form
        ``[x, 1] Z Z^T [x, 1]^T / D`` (clamped at 0 against rounding), and the
        projection of the normalised token ``r(x) [x, 1] Z W' + b'`` with
        ``r = 1 / sqrt(var + eps)`` and ``(W', b')`` the projection with the
        LayerNorm's ``gamma`` and ``beta`` folded in.

        The windows are cut from the ``r [x, 1]`` map (``C + 1`` channels rather
        than ``D``; ``r`` computed once per pixel), and the whole ``(3 D, B N, T)`` projection, window class
        tokens included, is one matmul ``M^T y`` with ``M = [Z W'; u - b'; b']``
        and per token ``y = [r x, r, 0, 1]`` (pixels) or ``[0, 0, 1, 1]``
        (class token, whose projection is the constant ``u``). Outside the
        map (sliding windows) ``[x, 1]`` is zero-padded, so ``y = [0, 0, 0, 1]``:
        the projection ``b'`` of the reference's zero token. The skip
        connection is the embedded window (``x E + e``), or only the class
        token when the block is the last one.
        """
        block = self.blocks[0]
        gsa = block.attention
        token_only = self.num_layers == 1 and not gsa.score_mixing
        # Under a mixed policy the statistics and the small matrices are float32
        # (`stable`); the one large matmul runs in the compute dtype.
        stable = stable_dtype(self.compute_dtype)
        kernel, bias = gsa.folded_projection(block.norm.gamma, block.norm.beta)  # (D, 3 D), (3 D,)
        affine = tf.concat([self.embed.kernel, self.embed.bias[None]], axis=0)  # (C + 1, D)
        affine = tf.cast(affine, stable)
        centred = affine - tf.reduce_mean(affine, axis=1, keepdims=True)
        gram = tf.matmul(centred, centred, transpose_b=True) / self.dim  # (C + 1, C + 1)
        token = block.standardize(tf.cast(self.class_token, kernel.dtype)[None, None, :])
        token_qkv = gsa.project_qkv(token, block.norm.gamma, block.norm.beta)[:, 0, 0]  # (3 D,): u
        mixing = tf.concat(
            [
                tf.matmul(centred, tf.cast(kernel, stable)),
                tf.cast(token_qkv - bias, stable)[None],
                tf.cast(bias, stable)[None],
            ],
            axis=0,
        )  # (C + 3, 3 D)
        # r [x, 1] per pixel, before the windows are cut: each pixel lies in up to window^2
        # windows, and its statistics do not depend on which. Outside the map the cut pads
        # zeros, as the reference's zero token gives ([x, 1] = 0, so r [x, 1] = 0).
        x = tf.cast(pixels, stable)
        x = tf.concat([x, tf.ones_like(x[..., :1])], axis=-1)  # (B, H, W, C + 1)
        variance = tf.reduce_sum(x * tf.einsum("cf,bhwf->bhwc", gram, x), axis=-1, keepdims=True)
        x = tf.math.rsqrt(tf.maximum(variance, 0.0) + tf.cast(block.norm_epsilon, stable)) * x
        x = tf.transpose(self._cut_windows(x), [2, 0, 1])  # (C + 1, B N, window^2)
        pixel_part = tf.concat([x, tf.zeros_like(x[:1]), tf.ones_like(x[:1])], axis=0)
        rows = pixel_part.shape[0]  # C + 3
        class_part = tf.constant([0.0] * (rows - 2) + [1.0, 1.0], stable)[:, None, None]
        y = tf.concat([tf.tile(class_part, [1, tf.shape(x)[1], 1]), pixel_part], axis=2)  # (C + 3, B N, T)
        if not token_only and gsa.native_applies(kernel.dtype, token_only=False):
            blocks = native.lane_blocks(tf.cast(y, kernel.dtype))  # (C + 3, B N / LANES, T, LANES)
            # The op projects the C + 3 rows itself (the bias is in them: it adds zeros).
            zeros, projection = tf.zeros([3 * self.dim], kernel.dtype), tf.cast(mixing, kernel.dtype)
            skip = self._skip(pixels, token_only, kernel.dtype)  # added by the op
            tokens = gsa.mix_and_attend_native(blocks, zeros, training, False, kernel=projection, skip=skip)
            return block.feed_forward(native.first_windows(tokens, y, axis=1))
        if token_only and not gsa.query_key_norm:
            # The class token's q and k are the constant u: its scores are linear in y,
            # so the queries and keys of the window tokens are never formed.
            update = gsa.attend_constant_class_token(y, mixing, token_qkv, training=training)
        else:
            compute = kernel.dtype
            qkv = project_channels_first(
                tf.cast(mixing, compute), tf.cast(tf.reshape(y, [rows, -1]), compute)
            )
            qkv = tf.reshape(qkv, [3 * self.dim, -1, y.shape[2]])
            update = gsa.mix_and_attend(qkv, training=training, token_only=token_only)
        return block.feed_forward(self._skip(pixels, token_only, update.dtype) + update)

    def _skip(self, pixels: tf.Tensor, token_only: bool, dtype: tf.DType) -> tf.Tensor:
        """The first block's skip connection: the embedded windows, or for a last block the class token.

        The windows are cut from ``[x, 1, 0]`` per pixel (``C + 2`` channels
        rather than ``D``) and embedded after, their class tokens with them:
        ``[x, 1, 0] [E; e; c] = x E + e`` and the class token's ``[0, 0, 1]``
        gives ``c``, in one matmul. Outside the map the cut pads zeros, the
        reference's zero token. Cutting ``D`` channels and joining the class
        tokens to them moved the largest tensor of the block twice, and a
        gradient of the join slices it once more.
        """
        if token_only:
            return tf.cast(self.class_token, dtype)[None, None, :]
        x = tf.cast(pixels, dtype)
        ones = tf.ones_like(x[..., :1])
        windows = self._cut_windows(tf.concat([x, ones, tf.zeros_like(ones)], axis=-1))  # (B N, T - 1, C + 2)
        rows = windows.shape[-1]
        class_rows = tf.one_hot([[rows - 1]], rows, dtype=dtype)
        rows_and_class = tf.concat([tf.tile(class_rows, [tf.shape(windows)[0], 1, 1]), windows], axis=1)
        table = tf.concat([self.embed.kernel, self.embed.bias[None], self.class_token[None]], axis=0)
        embedded = embed_few_channels(tf.reshape(rows_and_class, [-1, rows]), tf.cast(table, dtype))
        return tf.reshape(embedded, [-1, rows_and_class.shape[1], self.dim])

    def _first_block_on_map(self, x: tf.Tensor, training: bool | None) -> tf.Tensor:
        """The first block with its graphs applied to the whole map (extended window)."""
        h, w = self.map_shape
        first = self.blocks[0]
        gsa = first.attention
        # First block: the graphs act on the whole map (a convolution), then
        # the windows are cut; the class token has no graph (Listing 1).
        qkv = gsa.project_qkv(first.norm(tf.reshape(x, [-1, h * w, self.dim])))  # (3 D, B, H W)
        if gsa.graph_qkv:
            qkv = gsa.mix_qkv_grid(qkv, training=training, map_shape=(h, w))
        qkv_map = tf.reshape(tf.transpose(qkv, [1, 2, 0]), [-1, h, w, 3 * self.dim])
        token = tf.cast(self.class_token, x.dtype)
        token_qkv = tf.transpose(gsa.project_qkv(first.norm(token[None, None, :])), [1, 2, 0])  # (1, 1, 3 D)
        windows = self._cut_windows(qkv_map)
        windows = tf.concat([tf.tile(token_qkv, [tf.shape(windows)[0], 1, 1]), windows], axis=1)
        tokens = self._with_class_tokens(self._cut_windows(x), x.dtype)
        tokens = tokens + gsa.attend(tf.transpose(windows, [2, 0, 1]), training=training)
        return first.feed_forward(tokens)

    @property
    def declared_symmetry(self) -> Symmetry:
        """The output map transforms with the input (Fig. 10).

        Only each window's class token moves on, and its row is untouched by the
        last block's triangle sums (Listing 3): one block keeps the flips too.
        """
        triangles = self.block_kwargs.get("triangles", 0) if self.num_layers >= 2 else 0
        return graph_symmetry(
            self.block_kwargs.get("symmetry", "rotation"),
            triangles,
            square=True,
            acts_on="image",
            output="the output map transforms with the input: f(g x) = g f(x)",
            parts=(("output", EQUIVARIANT),),
            reference="SiT Fig. 3, 10; appendix B",
        )

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
