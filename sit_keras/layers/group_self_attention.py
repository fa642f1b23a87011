"""Lifting and group self-attention, GSA-Nets eq. 14 and 16 with GE-ViT's positional encoding (eq. 24-25).

Both layers share one kernel. Letters of the einsum equations: ``b``
batch, ``i`` / ``j`` query / key pixel (flattened), ``n`` a (batch, query
pixel) pair, ``k`` offset in the key window of local attention, ``q`` the
query's group element ``h~``, ``p`` the key's group element ``h^``, ``o``
the output's group element ``h``, ``m`` head, ``d`` feature of a head.
The lifting layer is the case ``|q| = |p| = 1`` without the group part of
the encoding.

Precision under a mixed policy (``mixed_float16`` / ``mixed_bfloat16``):
variables are float32; the projections, the query-key and query-encoding
products and the weighted sum of the values run in the compute dtype; from
the logits on, the sum of the three score terms, the border mask, the
softmax, the attention dropout and the sum of the weights over the query's
group element run in float32 (``precision.stable_dtype``), and the weights
go back to the compute dtype for the values.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.groups import Group, all_offsets, get_group, window_offsets
from sit_keras.layers.group_positional_encoding import POSITIONAL_ENCODINGS, GroupPositionalEncoding
from sit_keras.layers.precision import stable_dtype
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.symmetry import EQUIVARIANT, Symmetry, plane_group_symmetry


@functools.lru_cache(maxsize=64)
def _grid_constants(height: int, width: int, neighbourhood: int | None) -> dict[str, Any]:
    """Offsets (scaled for the MLP) and the key windows or pair index of an ``H x W`` image.

    Module-level and cached: a dict on the layer would be tracked (and
    refused) by SavedModel.
    """
    if neighbourhood is None:
        offsets = all_offsets(height, width)
        rows, cols = np.divmod(np.arange(height * width), width)
        # Index of x(j) - x(i) in `offsets` for every pair (i, j).
        d_row = rows[None, :] - rows[:, None] + height - 1
        d_col = cols[None, :] - cols[:, None] + width - 1
        extra = {"pair_index": d_row * (2 * width - 1) + d_col}
        scale = max(height, width) - 1
    else:
        offsets = window_offsets(neighbourhood)
        radius = neighbourhood // 2
        rows, cols = np.divmod(np.arange(height * width), width)
        key_rows = rows[:, None] + offsets[:, 0]  # (P, K)
        key_cols = cols[:, None] + offsets[:, 1]
        extra = {
            # Pixel of each key in the image zero-padded by `radius`.
            "window_index": (key_rows + radius) * (width + 2 * radius) + key_cols + radius,
            # Keys outside the image take no part in the softmax.
            "inside": (key_rows >= 0) & (key_rows < height) & (key_cols >= 0) & (key_cols < width),
        }
        scale = radius
    # Any scale commutes with the rotations; it keeps the MLP's input in [-1, 1].
    return {"offsets": offsets / max(scale, 1), "grid_shape": (height, width), **extra}


class _GroupAttention(tf_keras.layers.Layer):
    """The shared kernel of eq. 14 and eq. 16; subclasses fix the input's group axis."""

    _lifting = False

    def __init__(
        self,
        group: str | Group,
        output_dim: int,
        num_heads: int = 1,
        key_dim: int | None = None,
        neighbourhood: int | None = None,
        positional_encoding: str = "ge_vit",
        positional_hidden_dim: int = 16,
        attention_dropout: float = 0.0,
        kernel_initializer: Any = "glorot_uniform",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.group = get_group(group)
        self.output_dim = int(output_dim)
        self.num_heads = int(num_heads)
        if self.output_dim < 1 or self.num_heads < 1:
            raise ValueError(
                f"output_dim and num_heads must be positive. Received: output_dim={output_dim}, "
                f"num_heads={num_heads}"
            )
        # GSA-Nets' code gives every head output_dim // 2 features.
        self.key_dim = max(1, self.output_dim // 2) if key_dim is None else int(key_dim)
        if self.key_dim < 1:
            raise ValueError(f"key_dim must be positive. Received: key_dim={key_dim}")
        if neighbourhood is not None:
            window_offsets(int(neighbourhood))  # validates: a positive odd size
        self.neighbourhood = None if neighbourhood is None else int(neighbourhood)
        if positional_encoding not in POSITIONAL_ENCODINGS:
            raise ValueError(
                f"positional_encoding must be one of {POSITIONAL_ENCODINGS}. "
                f"Received: positional_encoding={positional_encoding!r}"
            )
        self.positional_encoding = positional_encoding
        self.positional_hidden_dim = int(positional_hidden_dim)
        if not 0.0 <= attention_dropout < 1.0:
            raise ValueError(f"attention_dropout must be in [0, 1). Received: {attention_dropout}")
        self.attention_dropout = float(attention_dropout)
        self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)
        self.encoding = GroupPositionalEncoding(
            self.group,
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            hidden_dim=self.positional_hidden_dim,
            positional_encoding=positional_encoding,
            lifting=self._lifting,
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
            name="positional_encoding",
        )
        # Not autocast: the attention weights it drops stay float32 under a mixed policy.
        self.dropout = tf_keras.layers.Dropout(
            self.attention_dropout, dtype=self.dtype_policy, autocast=False, name="dropout"
        )

    def _initializer(self) -> tf_keras.initializers.Initializer:
        # Each projection gets its own clone: a seeded initialiser reused would repeat its values.
        return self.kernel_initializer.__class__.from_config(self.kernel_initializer.get_config())

    # -- shapes ------------------------------------------------------------------------
    @property
    def _input_group_size(self) -> int:
        return 1 if self._lifting else self.group.order

    def _expected(self, channels: Any = "C") -> str:
        if self._lifting:
            return f"images (B, H, W, {channels})"
        return f"signals on {self.group.name!r} (B, H, W, {self.group.order}, {channels})"

    def _check_shape(self, shape: tf.TensorShape) -> None:
        rank = 4 if self._lifting else 5
        channels = getattr(self, "input_dim", None)
        bad = shape.rank != rank or any(d is None for d in shape[1:])
        if not bad and not self._lifting:
            bad = shape[3] != self.group.order
        if not bad and channels is not None:
            bad = shape[-1] != channels
        if bad:
            raise ValueError(
                f"{type(self).__name__} expects {self._expected(channels or 'C')} with known H, W"
                f"{'' if self._lifting else ', |H|'} and channels. Received: shape={tuple(shape)}"
            )

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        self._check_shape(input_shape)
        self.input_dim = int(input_shape[-1])
        width = self.num_heads * self.key_dim

        def kernel(name: str, shape: tuple[int, int]) -> tf.Variable:
            return self.add_weight(name, shape, initializer=self._initializer())

        self.query_kernel = kernel("query_kernel", (self.input_dim, width))
        self.key_kernel = kernel("key_kernel", (self.input_dim, width))
        self.value_kernel = kernel("value_kernel", (self.input_dim, width))
        # No key bias: q . b_k is the same for every key, and the softmax cancels it.
        self.query_bias = self.add_weight("query_bias", (width,), initializer="zeros")
        self.value_bias = self.add_weight("value_bias", (width,), initializer="zeros")
        self.output_kernel = kernel("output_kernel", (width, self.output_dim))
        self.output_bias = self.add_weight("output_bias", (self.output_dim,), initializer="zeros")
        build_sublayer(self.encoding, tf.TensorShape([None, 2]))
        super().build(input_shape)

    # -- eq. 14 / 16 ---------------------------------------------------------------------
    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        self._check_shape(inputs.shape)
        height, width = int(inputs.shape[1]), int(inputs.shape[2])
        pixels, n_in, heads, dim = height * width, self._input_group_size, self.num_heads, self.key_dim
        constants = _grid_constants(height, width, self.neighbourhood)
        rows = tf.reshape(inputs, [-1, self.input_dim])  # one row per pixel and group element

        def project(kernel: tf.Variable, bias: tf.Variable | None = None) -> tf.Tensor:
            projected = tf.matmul(rows, kernel) if bias is None else tf.matmul(rows, kernel) + bias
            return tf.reshape(projected, [-1, pixels, n_in, heads, dim])  # (B, P, q, m, d)

        # 1 / sqrt(d) on the query scales content and position scores alike.
        scale = tf.constant(1.0 / math.sqrt(dim), self.compute_dtype)
        query = project(self.query_kernel, self.query_bias) * scale
        key, value = project(self.key_kernel), project(self.value_kernel, self.value_bias)
        # rho^P(h^-1 offset), (o, K, m, d): every window offset (local) or pixel offset (global).
        position = self.encoding(tf.constant(constants["offsets"], stable_dtype(self.compute_dtype)))
        group = None if self._lifting else self.encoding.group_encoding()  # (o, q, p, m, d)
        if self.neighbourhood is None:
            out = self._global(query, key, value, position, group, constants, training)
        else:
            out = self._local(query, key, value, position, group, constants, training)
        out = tf.matmul(tf.reshape(out, [-1, heads * dim]), self.output_kernel) + self.output_bias
        return tf.reshape(out, [-1, height, width, self.group.order, self.output_dim])

    def _attend(self, content, spatial, group, training) -> tf.Tensor:
        """Softmax over the keys ``(j, h^)``, then the sum over the query's element ``h~`` (eq. 15-16).

        ``content``: ``(n, m, q, K, p)``, ``spatial``: ``(n, m, o, q, K)``,
        ``group``: ``(n, m, o, q, p)`` or ``None``; returns ``(n, m, o, K * p)``
        in ``stable_dtype(compute dtype)``: the terms are cast there before
        they are added, so that under a mixed policy the softmax and the sum
        over ``h~`` run in float32. Kept at low rank: TensorFlow's CPU kernels
        are slow (and its softmax refuses) beyond rank 5.
        """
        stable = stable_dtype(self.compute_dtype)
        content, spatial = tf.cast(content, stable), tf.cast(spatial, stable)
        group = None if group is None else tf.cast(group, stable)
        _, heads, n_q, keys, n_k = content.shape
        logits = content[:, :, None] + spatial[..., None]  # (n, m, o, q, K, p)
        if group is not None:
            logits += group[:, :, :, :, None, :]
        weights = tf.nn.softmax(tf.reshape(logits, [-1, keys * n_k]), axis=-1)
        weights = self.dropout(weights, training=training)
        summed = tf.reduce_sum(tf.reshape(weights, [-1, n_q, keys * n_k]), axis=1)
        return tf.reshape(summed, [-1, heads, self.group.order, keys * n_k])

    def _local(self, query, key, value, position, group, constants, training) -> tf.Tensor:
        _, pixels, n_in, heads, dim = query.shape
        height, width = constants["grid_shape"]
        radius = self.neighbourhood // 2
        index, inside = constants["window_index"], constants["inside"]
        size = index.shape[1]

        def windows(t: tf.Tensor) -> tf.Tensor:
            # (B, P, p, m, d) -> (n, K, p, m, d): each pixel's window, one gather on the zero-padded image.
            grid = tf.reshape(t, [-1, height, width, n_in * heads * dim])
            padded = tf.pad(grid, [[0, 0], [radius, radius], [radius, radius], [0, 0]])
            flat = tf.reshape(padded, [-1, (height + 2 * radius) * (width + 2 * radius), n_in * heads * dim])
            return tf.reshape(tf.gather(flat, index, axis=1), [-1, size, n_in, heads, dim])

        query = tf.reshape(query, [-1, n_in, heads, dim])  # (n, q, m, d), n = B * P
        content = tf.einsum("nqmd,nkpmd->nmqkp", query, windows(key))
        # The logits are summed in float32 under a mixed policy (see `_attend`), the border mask too.
        stable = stable_dtype(self.compute_dtype)
        spatial = tf.cast(tf.einsum("nqmd,okmd->nmoqk", query, position), stable)
        # Keys outside the image get -inf (almost): zero-padding them would change the softmax.
        lowest = -0.5 * stable.max
        bias = tf.constant(np.where(inside, 0.0, lowest), stable)
        batch = tf.shape(query)[0] // pixels
        spatial += tf.reshape(tf.tile(bias, [batch, 1]), [-1, 1, 1, 1, size])
        if group is not None:
            group = tf.einsum("nqmd,oqpmd->nmoqp", query, group)
        weights = tf.cast(self._attend(content, spatial, group, training), value.dtype)  # (n, m, o, K * p)
        values = tf.reshape(windows(value), [-1, size * n_in, heads, dim])
        return tf.einsum("nmoj,njmd->nomd", weights, values)

    def _global(self, query, key, value, position, group, constants, training) -> tf.Tensor:
        _, pixels, n_in, heads, dim = query.shape
        pairs = tf.gather(position, constants["pair_index"], axis=1)  # (o, i, j, m, d)
        content = tf.einsum("biqmd,bjpmd->bimqjp", query, key)
        spatial = tf.einsum("biqmd,oijmd->bimoqj", query, pairs)
        flat_query = tf.reshape(query, [-1, n_in, heads, dim])  # (n, q, m, d), n = B * P
        if group is not None:
            group = tf.einsum("nqmd,oqpmd->nmoqp", flat_query, group)
        weights = self._attend(
            tf.reshape(content, [-1, heads, n_in, pixels, n_in]),
            tf.reshape(spatial, [-1, heads, self.group.order, n_in, pixels]),
            group,
            training,
        )
        weights = tf.cast(weights, value.dtype)  # the values are summed in the compute dtype
        weights = tf.reshape(weights, [-1, pixels, heads, self.group.order, pixels * n_in])
        values = tf.reshape(value, [-1, pixels * n_in, heads, dim])
        return tf.einsum("bimoj,bjmd->biomd", weights, values)

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        input_shape = tf.TensorShape(input_shape)
        return tf.TensorShape(
            [input_shape[0], input_shape[1], input_shape[2], self.group.order, self.output_dim]
        )

    @property
    def declared_symmetry(self) -> Symmetry:
        """Equivariant with the regular representation on the plane group (GSA-Nets Prop. 5.1-5.2)."""
        return plane_group_symmetry(
            self.group.name,
            EQUIVARIANT,
            acts_on="group_signal",
            output="f(L_g x) = L_g f(x): the output's image transforms and its group axis is permuted "
            "by the regular representation",
            positional_encoding="ge_vit" if self._lifting else self.positional_encoding,
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            group=self.group.name,
            output_dim=self.output_dim,
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            neighbourhood=self.neighbourhood,
            positional_encoding=self.positional_encoding,
            positional_hidden_dim=self.positional_hidden_dim,
            attention_dropout=self.attention_dropout,
            kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
        )
        return config


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class LiftingSelfAttention(_GroupAttention):
    """Lifting self-attention (GSA-Nets eq. 13-14): images on ``Z^2`` to signals on ``p = Z^2 x| H``.

    For each ``h`` in ``H`` one multi-head self-attention with the relative
    positional encoding seen from ``h``, ``L_h[rho](i, j) = rho^P(h^-1 (x(j) -
    x(i)))`` (Fig. B.1); the outputs are stacked along a new group axis:

    ``out(i, h) = W_out concat_m sum_j softmax_j(q_m(i) . (k_m(j) + rho^P_m(h^-1 (x(j) - x(i))))) v_m(j)``

    with queries scaled by ``1 / sqrt(key_dim)``. The encoding is added in key
    space (its MLP's last layer plays the role of ``phi_key``); ``rho^P`` is a
    small MLP (``GroupPositionalEncoding``), so elements finer than 90 degrees
    turn positions without interpolation (section 5.1).

    Symmetry (Proposition 5.1): for ``g`` in ``H`` of a grid-exact group
    (``z2``, ``p4``, ``mz2``, ``p4m``) and square images, ``f(L_g x) = L_g f(x)``
    where on the output ``(L_g y)(x, h) = y(g^-1 x, g^-1 h)``: the image turns
    and the group axis is permuted by the regular representation (see
    ``sit_keras.groups.transform_group_signal``). Local attention masks keys
    outside the image, so this holds at the borders and for any image size;
    translations hold exactly away from the borders. Finer rotations
    (``p8``, ...) are equivariant only up to the pixel grid
    (``sit_keras.groups.rotation_equivariance_error``).

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32; the projections, the score products and the sum of the values
    run in the compute dtype, the logits, softmax and attention dropout in
    float32, and the positional MLP as ``GroupPositionalEncoding`` says
    (its LayerNorm in float32). The output is in the compute dtype. The
    symmetry is structural: under a mixed policy it holds up to rounding
    (``sit_keras.testing.tolerance`` of the compute dtype).

    Args:
      group: a name from ``sit_keras.groups.GROUP_NAMES`` or a ``Group``.
      output_dim: output channels ``D``.
      num_heads: attention heads (GSA-Nets uses 9).
      key_dim: features per head; default ``output_dim // 2`` (GSA-Nets' code).
      neighbourhood: odd ``N`` for local ``N x N`` attention; ``None`` for
        global attention (every pixel attends to every pixel).
      positional_encoding: ``"ge_vit"`` or ``"gsa_nets"``; the same here, as
        eq. 14 has no group argument.
      positional_hidden_dim: hidden width of the positional MLP.
      attention_dropout: dropout on the attention weights (training only).
      kernel_initializer: initialiser of every projection.
      **kwargs: ``tf_keras.layers.Layer`` arguments (``name``, ``dtype``).

    Call arguments:
      inputs: ``(B, H, W, C)`` images with known ``H, W, C``.
      training: Python boolean; enables attention dropout.

    Returns:
      ``(B, H, W, |H|, D)``.

    >>> import sit_keras
    >>> from sit_keras.layers.group_self_attention import LiftingSelfAttention
    >>> layer = LiftingSelfAttention("p4", output_dim=6, num_heads=2, neighbourhood=3)
    >>> layer(tf.zeros((2, 5, 5, 3))).shape
    TensorShape([2, 5, 5, 4, 6])
    """

    _lifting = True


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GroupSelfAttention(_GroupAttention):
    """Group self-attention (GSA-Nets eq. 15-16) with GE-ViT's group positional encoding (eq. 24-25).

    Signals on ``p = Z^2 x| H`` to signals on ``p``: for each output element
    ``h``, every query ``(i, h~)`` attends over all keys ``(j, h^)`` (its
    neighbourhood on the group) with the encoding seen from ``h``, and the
    results are summed over ``h~`` (Fig. B.2):

    ``out(i, h) = W_out concat_m sum_h~ sum_(j, h^) softmax_(j, h^)(q_m(i, h~) .
    (k_m(j, h^) + rho^P_m(h^-1 (x(j) - x(i))) + E_m[r])) v_m(j, h^)``

    where the relative group element is ``r = h^-1 (h~ h^^-1) h`` for
    ``"ge_vit"`` (GE-ViT eq. 25) or ``h^-1 (h~^-1 h^) h`` for ``"gsa_nets"``
    (GE-ViT eq. 21, the original GSA-Nets encoding).

    Symmetry (Proposition 5.2 as corrected by GE-ViT): with ``"ge_vit"``,
    ``f(L_g y) = L_g f(y)`` for ``g`` in ``H`` of a grid-exact group on square
    images, with the regular representation on input and output (see
    ``LiftingSelfAttention``), for every ``H``. With ``"gsa_nets"`` this holds
    only when ``H`` is abelian (``z2``, ``p4``, ``mz2``); for ``p4m`` the
    encoding is not invariant and the layer is not equivariant.

    Precision: as ``LiftingSelfAttention``: float32 variables, projections,
    score products and the sum of the values in the compute dtype; logits,
    softmax, attention dropout and the sum over ``h~`` of the attention
    weights in float32; the output in the compute dtype.

    Args:
      group: a name from ``sit_keras.groups.GROUP_NAMES`` or a ``Group``.
      output_dim: output channels ``D``.
      num_heads: attention heads.
      key_dim: features per head; default ``output_dim // 2``.
      neighbourhood: odd ``N`` for local attention over ``N x N`` pixels
        (times all of ``H``); ``None`` for global attention.
      positional_encoding: ``"ge_vit"`` (default) or ``"gsa_nets"``.
      positional_hidden_dim: hidden width of the positional MLP.
      attention_dropout: dropout on the attention weights (training only).
      kernel_initializer: initialiser of every projection.
      **kwargs: ``tf_keras.layers.Layer`` arguments (``name``, ``dtype``).

    Call arguments:
      inputs: ``(B, H, W, |H|, C)`` with known ``H, W, C``.
      training: Python boolean; enables attention dropout.

    Returns:
      ``(B, H, W, |H|, D)``.

    >>> import sit_keras
    >>> from sit_keras.layers.group_self_attention import GroupSelfAttention
    >>> layer = GroupSelfAttention("p4m", output_dim=6, num_heads=2)
    >>> layer(tf.zeros((2, 4, 4, 8, 5))).shape
    TensorShape([2, 4, 4, 8, 6])
    """
