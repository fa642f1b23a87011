"""Steerable relative positional encodings on a plane group (GSA-Nets section 5.1; GE-ViT eq. 24-25)."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.groups import Group, get_group, relative_group_indices
from sit_keras.layers.indexing import row_gather
from sit_keras.layers.precision import stable_dtype
from sit_keras.symmetry import EQUIVARIANT, Symmetry, plane_group_symmetry

POSITIONAL_ENCODINGS = ("ge_vit", "gsa_nets")


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GroupPositionalEncoding(tf_keras.layers.Layer):
    """``L_h[rho]``: the relative positional encoding seen from each group element ``h``.

    The encoding is ``rho^P(x(j) - x(i), r) = MLP(x(j) - x(i)) + E[r]``: a small
    MLP of the 2-D relative position (Dense, LayerNorm, Swish, Dense, as
    GSA-Nets' row and column embeddings; section 5.1: it lives on a
    continuous space, so rotations finer than 90 degrees need no
    interpolation) plus a learned vector per relative group element ``r``.
    The action of ``h`` (GSA-Nets eq. 14 / 16) turns the position,
    ``MLP(h^-1 (x(j) - x(i)))``, and conjugates ``r`` (see
    ``sit_keras.groups.relative_group_indices``):

    - ``"ge_vit"`` (default): ``r = h~ h^^-1``, GE-ViT eq. 24-25, invariant
      under the group for every ``H``;
    - ``"gsa_nets"``: ``r = h~^-1 h^``, the original GSA-Nets encoding (GE-ViT
      eq. 21), invariant only for abelian ``H``: kept for comparison.

    The lifting layer (eq. 14) has no group argument: ``lifting=True`` leaves
    ``E`` out, and both options coincide.

    Symmetry: for ``g`` in ``H``, ``L_{g h}[rho](g a, g b) = L_h[rho](a, b)``
    (exactly, for grid-exact groups, whose matrices are integers).

    Precision: under a mixed policy (``mixed_float16`` / ``mixed_bfloat16``)
    every variable is float32. The offsets, their turn by ``h^-1``, the
    MLP's first Dense, its LayerNorm (statistics, ``rsqrt``, scale and
    shift) and the Swish run in float32 (``precision.stable_dtype``) with
    float32 weights: offsets are not rounded to 8 bits and the statistics
    keep their digits. The last Dense and ``E`` run in the compute dtype,
    which the encoding and ``group_encoding()`` are returned in. The
    offsets are not autocast on input. Under float32 / float64 everything
    runs in that dtype.

    Args:
      group: a name from ``sit_keras.groups.GROUP_NAMES`` or a ``Group``.
      num_heads: attention heads; each gets its own encoding.
      key_dim: size of each head's encoding (the key size).
      hidden_dim: hidden width of the MLP (GSA-Nets' code uses 16).
      positional_encoding: ``"ge_vit"`` or ``"gsa_nets"``.
      lifting: no group argument (the lifting layer, eq. 14).
      kernel_initializer: initialiser of the MLP and of ``E``.
      **kwargs: ``tf_keras.layers.Layer`` arguments.

    Call arguments:
      offsets: ``(K, 2)`` relative ``(row, col)`` positions, already scaled.

    Returns:
      ``(|H|, K, num_heads, key_dim)``: ``MLP(h^-1 offset)`` for each ``h``.
      ``group_encoding()`` gives the group part, ``(|H|, |H|, |H|, num_heads,
      key_dim)`` indexed by output ``h``, query ``h~`` and key ``h^``.

    >>> import sit_keras
    >>> encoding = GroupPositionalEncoding("p4", num_heads=2, key_dim=3)
    >>> encoding(tf.zeros((5, 2))).shape
    TensorShape([4, 5, 2, 3])
    >>> encoding.group_encoding().shape
    TensorShape([4, 4, 4, 2, 3])
    """

    def __init__(
        self,
        group: str | Group,
        num_heads: int,
        key_dim: int,
        hidden_dim: int = 16,
        positional_encoding: str = "ge_vit",
        lifting: bool = False,
        kernel_initializer: Any = "glorot_uniform",
        **kwargs: Any,
    ):
        # The offsets stay in the dtype they come in until `call` casts them to float32: an autocast to
        # bfloat16 would round the positions the MLP sees.
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        self.group = get_group(group)
        for arg, value in (("num_heads", num_heads), ("key_dim", key_dim), ("hidden_dim", hidden_dim)):
            if int(value) < 1:
                raise ValueError(f"{arg} must be positive. Received: {arg}={value}")
        if positional_encoding not in POSITIONAL_ENCODINGS:
            raise ValueError(
                f"positional_encoding must be one of {POSITIONAL_ENCODINGS}. "
                f"Received: positional_encoding={positional_encoding!r}"
            )
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.hidden_dim = int(hidden_dim)
        self.positional_encoding = positional_encoding
        self.lifting = bool(lifting)
        self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)
        # Constants: h^-1 as a matrix, and the relative group element of each (h, h~, h^).
        self._inverse_matrices = self.group.matrices[self.group.inverse]
        self._group_index = None if self.lifting else relative_group_indices(self.group, positional_encoding)

    def _initializer(self) -> tf_keras.initializers.Initializer:
        # A fresh clone per weight: a seeded initialiser reused would give equal tables.
        return self.kernel_initializer.__class__.from_config(self.kernel_initializer.get_config())

    def build(self, input_shape: tf.TensorShape | None = None) -> None:
        hidden, width = self.hidden_dim, self.num_heads * self.key_dim
        # Under a mixed policy the first Dense and the LayerNorm run in float32: their weights read as such.
        self.hidden_kernel = self.add_weight(
            "hidden_kernel", (2, hidden), initializer=self._initializer(), experimental_autocast=False
        )
        # A random bias: with zeros the offset (0, 0) would be a constant (degenerate) input to the LayerNorm.
        self.hidden_bias = self.add_weight(
            "hidden_bias",
            (hidden,),
            initializer=tf_keras.initializers.RandomUniform(-1.0, 1.0),
            experimental_autocast=False,
        )
        self.norm_gamma = self.add_weight(
            "norm_gamma", (hidden,), initializer="ones", experimental_autocast=False
        )
        self.norm_beta = self.add_weight(
            "norm_beta", (hidden,), initializer="zeros", experimental_autocast=False
        )
        self.output_kernel = self.add_weight(
            "output_kernel", (hidden, width), initializer=self._initializer()
        )
        self.output_bias = self.add_weight("output_bias", (width,), initializer="zeros")
        if not self.lifting:
            self.group_embedding = self.add_weight(
                "group_embedding", (self.group.order, width), initializer=self._initializer()
            )
        super().build(input_shape)

    def call(self, offsets: tf.Tensor) -> tf.Tensor:
        stable = stable_dtype(self.compute_dtype)
        offsets = tf.cast(offsets, stable)
        if offsets.shape.rank != 2 or offsets.shape[-1] != 2:
            raise ValueError(f"{self.name} expects (K, 2) offsets. Received: shape={offsets.shape}")
        inverse = tf.constant(self._inverse_matrices, dtype=stable)
        # h: group element, k: offset, i / j: coordinates.
        turned = tf.einsum("hij,kj->hki", inverse, offsets)  # h^-1 (x(j) - x(i))
        hidden = tf.einsum("hki,ie->hke", turned, self.hidden_kernel) + self.hidden_bias
        mean, variance = tf.nn.moments(hidden, axes=[-1], keepdims=True)
        hidden = (hidden - mean) * tf.math.rsqrt(variance + 1e-5) * self.norm_gamma + self.norm_beta
        features = tf.cast(tf.nn.silu(hidden), self.compute_dtype)
        encoding = tf.einsum("hke,ef->hkf", features, self.output_kernel) + self.output_bias
        return tf.reshape(encoding, [self.group.order, -1, self.num_heads, self.key_dim])

    def group_encoding(self) -> tf.Tensor:
        """``E[r(h, h~, h^)]``, ``(|H|, |H|, |H|, num_heads, key_dim)``; lifting layers have none."""
        if self.lifting:
            raise ValueError("A lifting encoding (lifting=True) has no group part.")
        embedding = tf.cast(self.group_embedding, self.compute_dtype)
        table = row_gather(embedding, np.reshape(self._group_index, -1))  # dense gradient, for the optimizer
        n = self.group.order
        return tf.reshape(table, [n, n, n, self.num_heads, self.key_dim])

    @property
    def declared_symmetry(self) -> Symmetry:
        """``L_{g h}[rho](g a) = L_h[rho](a)``: turning the offsets by ``g`` moves the group axis by ``g``."""
        return plane_group_symmetry(
            self.group.name,
            EQUIVARIANT,
            acts_on="offsets",
            output="offsets turned by g give the encoding of g h where the original gave that of h",
        )

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape([self.group.order, input_shape[0], self.num_heads, self.key_dim])

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            group=self.group.name,
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            hidden_dim=self.hidden_dim,
            positional_encoding=self.positional_encoding,
            lifting=self.lifting,
            kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
        )
        return config
