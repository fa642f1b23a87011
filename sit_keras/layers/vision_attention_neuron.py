"""The AttentionNeuron for stacked grey frames (Tang & Ha, NeurIPS 2021, eq. 1-2, section 4 vision set-up)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import tensorflow as tf
import tf_keras

from sit_keras.layers.attention_neuron import (
    ATTENTIONS,
    apply_kernel,
    check_mask,
    masked_attention,
    shape_list,
    sinusoidal_queries,
)
from sit_keras.layers.precision import stable_dtype
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.symmetry import PATCHES, Symmetry


def extract_patches(images: tf.Tensor, patch_size: int) -> tf.Tensor:
    """Cuts ``(B, H, W, k)`` frames into non-overlapping patches ``(B, N, P, P, k)``, row by row.

    ``N = (H / P) (W / P)``; ``H`` and ``W`` must be multiples of ``P``.
    """
    _, h, w, k = images.shape
    rows, cols = h // patch_size, w // patch_size
    grid = tf.reshape(images, [-1, rows, patch_size, cols, patch_size, k])
    grid = tf.transpose(grid, [0, 1, 3, 2, 4, 5])  # (B, rows, cols, P, P, k)
    return tf.reshape(grid, [-1, rows * cols, patch_size, patch_size, k])


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class VisionAttentionNeuron(tf_keras.layers.Layer):
    """AttentionNeuron over the patches of a stack of grey frames (Pong / CarRacing set-up).

    Tang & Ha, "The Sensory Neuron as a Transformer", NeurIPS 2021, eq. 1-2
    with the vision choices of section 4 and Table 1: each sensory neuron
    sees one ``P x P x k`` patch (``P = 6``, ``k = 4`` frames) and

    - eq. 1, keys: ``f_k(o_t[i], a_{t-1})`` flattens the differences of
      consecutive frames of the patch (``P * P * (k - 1)`` values) and appends
      ``a_{t-1}``; no recurrence, as in the paper's vision tasks;
    - eq. 1, values: ``f_v(o_t[i])`` flattens the patch (``P * P * k``
      values), which is layer-normalised before ``W_v``;
    - eq. 2: ``m_t = LayerNorm(softmax([Q W_q][K W_k]^T / sqrt(d_q)) [V W_v])``
      with ``Q`` the fixed sinusoidal bank (``sinusoidal_queries``) and the
      softmax over the patches.

    Symmetry: the output is invariant under every permutation of the patches
    (the symmetric group ``S_N`` for any number ``N`` of patches): shuffling
    the screen's patches, or the order of a list of patches, leaves ``m_t``
    unchanged. No weight depends on ``N``, so any subset of the patches can
    be given (occlusion), either as a list of patches, as ``patch_indices``
    or as a ``mask``; masked patches get attention weights of exactly 0.

    Note on the action: ``K W_k`` is linear, so ``a_{t-1}`` adds the same
    term ``[Q W_q]_j . (a_{t-1} W_ka)`` (``W_ka``: the rows of ``W_k`` that
    read the action) to every patch's score for query ``j``, and the softmax
    over the patches cancels it. With the paper's softmax the previous action
    therefore has no effect on ``m_t``; with ``attention="tanh"`` it has.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32; the patches, frame differences and the matmuls (``W_k``,
    ``W_q``, ``W_v``, the sum over the patches) run in the compute dtype.
    Both layer normalisations compute their statistics and affine part in
    float32 (Keras' ``LayerNormalization`` does), and the logits' scale and
    the softmax (or tanh) over the patches run in float32
    (``precision.stable_dtype``); the weights return to the compute dtype
    for the values. The code is in the compute dtype.

    Args:
      action_dim: size ``|A|`` of the previous action (6, one-hot, for Pong;
        3 for CarRacing).
      num_queries: ``M`` (400 Pong, 1024 CarRacing).
      query_dim: columns of the positional encoding ``Q`` (8 in Table 1).
      projection_dim: ``d_q`` (32 Pong, 16 CarRacing).
      value_dim: columns of ``W_v`` and of the output (32 Pong, 16 CarRacing).
      patch_size: ``P`` (6).
      num_frames: ``k``, the stacked frames (4); at least 2 for differences.
      attention: ``"softmax"`` (default, as in the paper's vision tasks) or ``"tanh"``.
      epsilon: of both layer normalisations.
      kernel_initializer: initialiser of ``W_q``, ``W_k`` and ``W_v``.
      **kwargs: ``tf_keras.layers.Layer`` arguments (``name``, ``dtype``).

    Call arguments:
      inputs: frames ``(B, H, W, k)`` with ``H``, ``W`` multiples of ``P``, or
        a list of patches ``(B, N, P, P, k)`` in any order. ``uint8`` is
        scaled by 1/255; floats are used as given.
      previous_action: ``(B, action_dim)``.
      patch_indices: optional ``(K,)`` or ``(B, K)`` integers, the patches
        to keep (row-major patch numbers for frames).
      mask: optional ``(B, N)`` bool over the patches (after
        ``patch_indices``), ``True`` for visible patches.
      training: unused; accepted for the Keras convention.

    Returns:
      ``(B, M, value_dim)``, the code ``m_t``, in the compute dtype.

    >>> import sit_keras
    >>> from sit_keras.layers.vision_attention_neuron import VisionAttentionNeuron
    >>> layer = VisionAttentionNeuron(action_dim=6, num_queries=20, value_dim=8)
    >>> layer(tf.zeros((2, 84, 84, 4)), tf.zeros((2, 6))).shape
    TensorShape([2, 20, 8])
    """

    SYMMETRY: ClassVar[Symmetry] = PATCHES
    """The same for every configuration: no weight depends on the number or order of the patches."""

    def __init__(
        self,
        action_dim: int,
        num_queries: int = 400,
        query_dim: int = 8,
        projection_dim: int = 32,
        value_dim: int = 32,
        patch_size: int = 6,
        num_frames: int = 4,
        attention: str = "softmax",
        epsilon: float = 1e-5,
        kernel_initializer: Any = "glorot_uniform",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        sizes = dict(
            action_dim=action_dim,
            num_queries=num_queries,
            query_dim=query_dim,
            projection_dim=projection_dim,
            value_dim=value_dim,
            patch_size=patch_size,
        )
        for key, value in sizes.items():
            if int(value) != value or value < 1:
                raise ValueError(f"{key} must be a positive integer. Received: {key}={value!r}")
        if int(num_frames) != num_frames or num_frames < 2:
            raise ValueError(
                f"num_frames must be an integer >= 2 (keys are frame differences). Received: {num_frames!r}"
            )
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}. Received: attention={attention!r}")
        self.action_dim = int(action_dim)
        self.num_queries = int(num_queries)
        self.query_dim = int(query_dim)
        self.projection_dim = int(projection_dim)
        self.value_dim = int(value_dim)
        self.patch_size = int(patch_size)
        self.num_frames = int(num_frames)
        self.attention = attention
        self.epsilon = float(epsilon)
        self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)
        self.queries = sinusoidal_queries(self.num_queries, self.query_dim)
        # Section 4: layer normalisation of the input patches and of the output code.
        self.patch_norm = tf_keras.layers.LayerNormalization(
            epsilon=self.epsilon, dtype=self.dtype_policy, name="patch_norm"
        )
        self.output_norm = tf_keras.layers.LayerNormalization(
            epsilon=self.epsilon, dtype=self.dtype_policy, name="output_norm"
        )

    @property
    def key_dim(self) -> int:
        """``d_fk`` without the action: ``P * P * (k - 1)`` frame differences (108 for 6 x 6 x 4)."""
        return self.patch_size**2 * (self.num_frames - 1)

    @property
    def patch_dim(self) -> int:
        """``d_fv = P * P * k`` (144 for 6 x 6 x 4)."""
        return self.patch_size**2 * self.num_frames

    def _kernel(self, name: str, shape: tuple[int, int]) -> tf.Variable:
        # A fresh initializer per weight: tf_keras gives one reused instance's weights equal values.
        initializer = self.kernel_initializer.__class__.from_config(self.kernel_initializer.get_config())
        return self.add_weight(name, shape, initializer=initializer)

    def build(self, input_shape: tf.TensorShape) -> None:
        self._check_inputs_shape(tf.TensorShape(input_shape))
        d_q = self.projection_dim
        self.query_kernel = self._kernel("query_kernel", (self.query_dim, d_q))
        # W_k of eq. 2 on [frame differences, a_{t-1}], split in its two row blocks.
        self.key_kernel = self._kernel("key_kernel", (self.key_dim, d_q))
        self.action_kernel = self._kernel("action_kernel", (self.action_dim, d_q))
        self.value_kernel = self._kernel("value_kernel", (self.patch_dim, self.value_dim))
        build_sublayer(self.patch_norm, (None, None, self.patch_dim))
        build_sublayer(self.output_norm, (None, self.num_queries, self.value_dim))
        super().build(input_shape)

    # -- input checks -----------------------------------------------------------
    def _check_inputs_shape(self, shape: tf.TensorShape) -> None:
        p, k = self.patch_size, self.num_frames
        if shape.rank == 4:
            h, w = shape[1], shape[2]
            divisible = all(d is not None and d % p == 0 and d > 0 for d in (h, w))
            if divisible and shape[3] == k:
                return
        elif shape.rank == 5 and tuple(shape[2:]) == (p, p, k) and shape[1] != 0:
            return
        raise ValueError(
            f"{self.name} expects frames (B, H, W, {k}) with H and W multiples of {p}, or patches "
            f"(B, N, {p}, {p}, {k}). Received: inputs.shape={shape}"
        )

    def _patches(self, inputs: tf.Tensor, patch_indices: tf.Tensor | None) -> tf.Tensor:
        if inputs.dtype == tf.uint8:
            inputs = tf.cast(inputs, self.compute_dtype) / 255.0
        inputs = tf.cast(inputs, self.compute_dtype)
        patches = extract_patches(inputs, self.patch_size) if inputs.shape.rank == 4 else inputs
        if patch_indices is None:
            return patches
        patch_indices = tf.convert_to_tensor(patch_indices)
        if patch_indices.shape.rank not in (1, 2) or not patch_indices.dtype.is_integer:
            raise ValueError(
                f"{self.name} expects integer patch_indices of shape (K,) or (B, K). "
                f"Received: patch_indices.shape={patch_indices.shape}, dtype={patch_indices.dtype.name}"
            )
        return tf.gather(patches, patch_indices, axis=1, batch_dims=patch_indices.shape.rank - 1)

    # -- eq. 1 and 2 ------------------------------------------------------------
    def call(
        self,
        inputs: tf.Tensor,
        previous_action: tf.Tensor,
        patch_indices: tf.Tensor | None = None,
        mask: tf.Tensor | None = None,
        training: bool | None = None,
    ) -> tf.Tensor:
        del training  # no dropout or batch statistics
        self._check_inputs_shape(inputs.shape)
        patches = self._patches(inputs, patch_indices)  # (B, N, P, P, k)
        action = tf.cast(previous_action, self.compute_dtype)
        if action.shape.rank != 2 or action.shape[-1] != self.action_dim:
            raise ValueError(
                f"{self.name} expects previous_action of shape (B, {self.action_dim}). "
                f"Received: previous_action.shape={action.shape}"
            )
        mask = check_mask(mask, patches.shape[:2], self.name)
        if mask is not None:
            # tf.where, not a product: hidden patches may hold anything, even NaN.
            visible = mask[:, :, None, None, None]
            patches = tf.where(visible, patches, tf.zeros_like(patches))
        batch, count = shape_list(patches)[:2]
        differences = tf.reshape(patches[..., 1:] - patches[..., :-1], [batch, count, self.key_dim])
        flat = tf.reshape(patches, [batch, count, self.patch_dim])
        keys = apply_kernel(differences, self.key_kernel) + tf.matmul(action, self.action_kernel)[:, None, :]
        values = apply_kernel(self.patch_norm(flat), self.value_kernel)  # (B, N, d_v)
        queries = tf.matmul(tf.constant(self.queries, self.compute_dtype), self.query_kernel)  # (M, d_q)
        # The scale and sigma in float32 under a mixed policy, the sum over the patches in the compute dtype.
        stable = stable_dtype(self.compute_dtype)
        scale = tf.constant(1.0 / math.sqrt(self.projection_dim), stable)
        logits = tf.cast(apply_kernel(keys, tf.transpose(queries)), stable) * scale
        weights = tf.cast(masked_attention(logits, mask, self.attention), values.dtype)
        return self.output_norm(tf.matmul(weights, values, transpose_a=True))  # (B, M, d_v)

    def compute_mask(self, inputs: tf.Tensor, mask: tf.Tensor | None = None) -> None:
        # The mask marks hidden *patches*; the fixed-size code has no padding.
        del inputs, mask
        return None

    @property
    def declared_symmetry(self) -> Symmetry:
        """``S_N`` over the patches: the code is invariant (Tang & Ha eq. 1-2, section 4)."""
        return self.SYMMETRY

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            action_dim=self.action_dim,
            num_queries=self.num_queries,
            query_dim=self.query_dim,
            projection_dim=self.projection_dim,
            value_dim=self.value_dim,
            patch_size=self.patch_size,
            num_frames=self.num_frames,
            attention=self.attention,
            epsilon=self.epsilon,
            kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
        )
        return config
