"""Graph Symmetric Attention (GSA), SiT paper eq. 3-8 and 11-15, Listings 1-4."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras import graphs, native
from sit_keras.layers.channels_first import project_channels_first
from sit_keras.layers.graph_weights import NearIdentity, graph_symmetric_dropout
from sit_keras.layers.indexing import expand_shared
from sit_keras.layers.normalization import standardize
from sit_keras.layers.precision import score_map_dtype, stable_dtype
from sit_keras.layers.triangle_sums import TRIANGLE_FORMS, TriangleSums, theta_table
from sit_keras.layers.xla_context import in_compiled_function
from sit_keras.symmetry import EQUIVARIANT, Symmetry, graph_symmetry

GRAPH_FORMS = ("auto", "dense", "conv")
IMPLEMENTATIONS = ("fast", "reference")
# Keeps query_key_norm finite for an all-zero query or key (e.g. a zero class token).
_QUERY_KEY_NORM_EPSILON = 1e-6
# The op of ``attend_constant_class_token``'s values, and its gradient.
CLASS_TOKEN_VALUES_OPS = frozenset({"SitClassTokenValues", "SitClassTokenValuesGrad"})


def _as_grid(grid_shape: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(grid_shape, (int, np.integer)):
        return (1, int(grid_shape))  # a sequence (appendix A.1)
    h, w = graphs._check_grid(tuple(grid_shape))
    return h, w


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GraphSymmetricAttention(tf_keras.layers.Layer):
    """Multi-head attention whose graph matrices keep a chosen grid symmetry.

    Implements the GSA module of the SiT paper (Weissenbacher et al., ICML
    2024) over ``P = H * W`` grid tokens, optionally preceded by one class
    token that belongs to no grid vertex:

    - eq. 3 / eq. 11: ``softmax(Gamma / sqrt(d)) (G_v V)`` with
      ``Gamma = symmetric((G_q Q [G_k K]^T) (.) G)``; ``G_q, G_k, G_v`` act per
      feature (``graph_qkv``), ``G`` per head by Hadamard product
      (``score_graph``), ``symmetric(M) = M + M^T`` (``symmetrize``);
    - eq. 5 / eq. 12: ``sigma(G_qk (Q K^T) + G_b)`` replaces ``Q K^T``
      (``score_mixing``, ``score_activation`` is sigma);
    - eq. 6: a second softmax of the anti-symmetrised scores is added to the
      attention weights (``antisymmetric``);
    - eq. 4 / 7 / 8: ``triangles`` consecutive sums over directed triangles
      (``sit_keras.graphs.triangle_indices``), which keep rotations and break
      flips (1 for SiT, 2 for SiT*).

    Every graph matrix draws its entries from a table of shared weights
    indexed by ``sit_keras.graphs`` (Listing 2); the class token's row and
    column are left out of ``G_q, G_k, G_v`` (Listing 1) and of ``G``,
    ``G_qk``, ``G_b`` and the triangle sums (Listing 3).

    Symmetry: for every permutation ``g`` of the grid that keeps the graph
    classes of ``symmetry`` (see ``sit_keras.graphs``) and, with
    ``triangles > 0``, is a rotation, the layer is equivariant on the grid
    tokens, ``f(g x) = g f(x)``, and the class token's output is invariant.
    With ``triangles > 0`` reflections are *not* symmetries.

    ``G_q, G_k, G_v`` have a dense form (a ``P x P`` matrix per feature, Listing 1) and
    a depth-wise convolution form (Listing 4, appendix F.5); both use the
    same weights and compute the same function. ``graph_kernel_size`` limits
    the reach of these graphs (``None``: every vertex reaches every other).

    Two implementations compute the same function with the same weights:
    ``"reference"`` follows the equations literally (batch-major scores, the
    triangle sums as gathers on the last axis); ``"fast"`` keeps the scores
    head-major and applies symmetrisation, ``G``, the triangle sums and the
    ``1 / sqrt(d)`` scale as one linear map (``sit_keras.layers.triangle_sums``:
    a ``T^2 x T^2`` matrix per head for small windows, pair-major row gathers
    for large grids). The tests hold them equal to 1e-12 in float64.

    Precision: under a mixed policy (``mixed_float16`` / ``mixed_bfloat16``)
    the variables are float32; the projection, graph mixing ``G_q, G_k, G_v``
    and the score and value matmuls run in the compute dtype; the score path
    after ``Q K^T`` (``G``, ``G_qk``, ``G_b``, symmetrisation, triangle sums,
    scale, softmax) runs in float32 on float32 weights (``precision.stable_dtype``),
    except the triangle sums' ``matrix`` form, a matmul, which runs in bfloat16
    under ``mixed_bfloat16`` (``precision.score_map_dtype``).

    Args:
      grid_shape: ``(H, W)`` of the grid, or an int ``L`` for a sequence (a
        ``(1, L)`` grid; use ``symmetry="shift"`` or ``"shift_flip"``).
      num_heads: number of heads; must divide the feature size ``D``.
      symmetry: graph symmetry, see ``sit_keras.graphs.SYMMETRIES``.
      graph_qkv: which of ``"q"``, ``"k"``, ``"v"`` get a per-feature graph
        matrix, e.g. ``"qkv"`` (default, the paper's main variant), ``"v"``
        or ``""``.
      graph_kernel_size: odd reach of ``G_q, G_k, G_v``; ``None`` for full.
      graph_form: ``"dense"``, ``"conv"`` or ``"auto"`` (the cheaper one).
      score_graph: multiply the scores by a per-head graph matrix ``G`` (eq. 3).
      score_mixing: eq. 5 / 12 ``sigma(G_qk S + G_b)`` on the scores.
      score_activation: sigma of eq. 12, any Keras activation name.
      symmetrize: add the transpose to the scores (eq. 3, footnote 1).
      antisymmetric: add the softmax of the anti-symmetrised scores (eq. 6).
      triangles: number of consecutive triangle sums (eq. 4 / 8), 0, 1 or 2.
      class_token: the first token is a class token outside the grid.
      graph_dropout: rate of graph-symmetric dropout (section 4).
      graph_init_stddev: noise added to the near-identity graph initialisation.
      kernel_initializer: initialiser of the query / key / value projection.
      query_key_init_scale: factor on the initial query and key projection
        weights (values untouched), so the initial scores ``Q K^T`` grow by
        its square. Above 1, attention starts selective instead of nearly
        uniform: a class token that averages its tokens at initialisation
        reads mostly what every state shares (docs/lavacrossing.md).
      query_key_norm: divide each token's query and key, per head, by their
        root mean square over the head's ``d`` features before the scores
        (QK normalisation, Dehghani et al. 2023, "Scaling Vision
        Transformers to 22 Billion Parameters", sec. 3.1; without a learned
        gain). Then ``|q_i . k_j| <= d``: no score grows without bound,
        though at a small ``d`` a softmax can still settle on one key (a
        symmetrised logit reaches ``2 sqrt(d)``). Screened against the blind
        SiT actors of docs/lavacrossing.md, where it did not help. Not in the
        SiT paper; off by default. A per-token map, so every symmetry above
        is kept.
      seed: seed of the graph weight initialisers.
      implementation: ``"fast"`` (default) or ``"reference"``, see above.
      triangle_form: form of the fast triangle sums, ``"matrix"``,
        ``"pairs"``, ``"gather"`` or ``"auto"`` (the matrix up to ``T^2 =
        1024``, above it the gathers under XLA and the pairs otherwise;
        ``sit_keras.layers.triangle_sums``).
      **kwargs: ``tf_keras.layers.Layer`` arguments (``name``, ``dtype``).

    Call arguments:
      tokens: ``(B, T, D)`` with ``T = P + 1`` (class token first) or ``T = P``.
      training: Python boolean; enables graph-symmetric dropout.
      token_only: compute the class token's row alone, ``(B, 1, D)``.
      input_scale, input_offset: ``(D,)``, the affine part of a LayerNorm
        that produced ``tokens`` without it; folded into the projection:
        ``(x * scale + offset) W + b = x (scale W) + (offset W + b)``.
      add_tokens: return the tokens (their class token with ``token_only``)
        plus the attention's update: a block's skip connection.

    Returns:
      ``(B, T, D)``.

    >>> import sit_keras
    >>> from sit_keras.layers import GraphSymmetricAttention
    >>> layer = GraphSymmetricAttention((3, 3), num_heads=2, triangles=1)
    >>> layer(tf.zeros((4, 10, 8))).shape
    TensorShape([4, 10, 8])
    """

    def __init__(
        self,
        grid_shape: int | Sequence[int],
        num_heads: int,
        symmetry: str = "rotation",
        graph_qkv: str = "qkv",
        graph_kernel_size: int | None = None,
        graph_form: str = "auto",
        score_graph: bool = False,
        score_mixing: bool = False,
        score_activation: str = "linear",
        symmetrize: bool = True,
        antisymmetric: bool = False,
        triangles: int = 0,
        class_token: bool = True,
        graph_dropout: float = 0.0,
        graph_init_stddev: float = 0.1,
        kernel_initializer: Any = "glorot_uniform",
        query_key_init_scale: float = 1.0,
        query_key_norm: bool = False,
        seed: int | None = None,
        implementation: str = "fast",
        triangle_form: str = "auto",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}. Received: {implementation!r}")
        if triangle_form not in TRIANGLE_FORMS:
            raise ValueError(f"triangle_form must be one of {TRIANGLE_FORMS}. Received: {triangle_form!r}")
        self.implementation = implementation
        self.triangle_form = triangle_form
        self.grid_shape = _as_grid(grid_shape)
        self.symmetry = graphs.resolve_symmetry(symmetry)
        self.num_heads = int(num_heads)
        if self.num_heads < 1:
            raise ValueError(f"num_heads must be positive. Received: num_heads={num_heads}")
        if set(graph_qkv) - set("qkv") or len(set(graph_qkv)) != len(graph_qkv):
            raise ValueError(
                f"graph_qkv must use each of 'q', 'k', 'v' at most once. Received: {graph_qkv!r}"
            )
        self.graph_qkv = "".join(c for c in "qkv" if c in graph_qkv)
        if graph_form not in GRAPH_FORMS:
            raise ValueError(f"graph_form must be one of {GRAPH_FORMS}. Received: {graph_form!r}")
        if triangles not in (0, 1, 2):
            raise ValueError(f"triangles must be 0, 1 or 2. Received: triangles={triangles}")
        if not 0.0 <= graph_dropout < 1.0:
            raise ValueError(f"graph_dropout must be in [0, 1). Received: graph_dropout={graph_dropout}")
        self.graph_kernel_size = None if graph_kernel_size is None else int(graph_kernel_size)
        # The kernel actually used: as given, or the full reach of the grid.
        self._kernel_size = self.graph_kernel_size or graphs.full_kernel_size(self.grid_shape)
        # Validates the kernel size against the grid and the symmetry.
        grid_index, num_classes = graphs.grid_indices(self.grid_shape, self.symmetry, self._kernel_size)
        kernel_index, _ = graphs.kernel_indices(self._kernel_size, self.symmetry)
        if self.graph_kernel_size is None:
            grid_index, kernel_index, num_classes = graphs.compact_classes(
                grid_index, kernel_index, num_classes
            )
        self._graph_index, self._kernel_index, self._num_graph_classes = grid_index, kernel_index, num_classes
        self.class_token = bool(class_token)
        # The graph over all T tokens, for `_mix_all_tokens`: index n is a
        # fixed 1 (the class token's self-loop), index n + 1 reads 0.
        zero = num_classes + 1
        grid_part = np.where(grid_index == num_classes, zero, grid_index)
        offset = int(self.class_token)
        full = np.full((grid_index.shape[0] + offset,) * 2, zero, dtype=np.int32)
        full[offset:, offset:] = grid_part
        if self.class_token:
            full[0, 0] = num_classes
        self._token_graph_index = full
        # Where the graphs are C4-invariant, the native kernels mix them in the quarter turn's orbits.
        self._quarter_turn_orbits = graphs.quarter_turn_orbits(self.grid_shape, full, offset)
        self.graph_form = graph_form
        self.score_graph = bool(score_graph)
        self.score_mixing = bool(score_mixing)
        self.score_activation = score_activation
        self._sigma = tf_keras.activations.get(score_activation)
        self.symmetrize = bool(symmetrize)
        self.antisymmetric = bool(antisymmetric)
        self.triangles = int(triangles)
        self.graph_dropout = float(graph_dropout)
        self.graph_init_stddev = float(graph_init_stddev)
        self.kernel_initializer = tf_keras.initializers.get(kernel_initializer)
        self.query_key_init_scale = float(query_key_init_scale)
        if not self.query_key_init_scale > 0:
            raise ValueError(
                "query_key_init_scale must be positive. "
                f"Received: query_key_init_scale={query_key_init_scale}"
            )
        self.query_key_norm = bool(query_key_norm)
        self.seed = seed

    # -- construction ---------------------------------------------------------
    @property
    def num_grid_tokens(self) -> int:
        return self.grid_shape[0] * self.grid_shape[1]

    @property
    def num_tokens(self) -> int:
        return self.num_grid_tokens + int(self.class_token)

    def _self_class(self) -> int:
        centre = self._kernel_size // 2
        return int(self._kernel_index[centre, centre])

    def _qkv_initializer(self, dim: int) -> Any:
        """``kernel_initializer`` with the query and key columns times ``query_key_init_scale``."""
        if self.query_key_init_scale == 1.0:
            return self.kernel_initializer
        scale = np.concatenate([np.full(2 * dim, self.query_key_init_scale), np.ones(dim)])

        def initializer(shape: Sequence[int], dtype: Any = None) -> tf.Tensor:
            values = self.kernel_initializer(shape, dtype=dtype)
            return values * tf.constant(scale, values.dtype)

        return initializer

    def _graph_initializer(self, base_rows: Sequence[int], base_value: float, offset: int) -> NearIdentity:
        # Each table gets its own seed so that no two start with the same noise.
        seed = None if self.seed is None else self.seed + offset
        return NearIdentity(base_rows, base_value, self.graph_init_stddev, seed)

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 3 or input_shape[-1] is None:
            raise ValueError(
                f"GraphSymmetricAttention expects tokens (B, T, D). Received: shape={input_shape}"
            )
        self._check_tokens(input_shape)
        dim = int(input_shape[-1])
        if dim % self.num_heads:
            raise ValueError(
                "The feature size D must be a multiple of num_heads. "
                f"Received: D={dim}, num_heads={self.num_heads}"
            )
        self.dim = dim
        self.head_dim = dim // self.num_heads
        self.qkv_kernel = self.add_weight(
            "qkv_kernel", (dim, 3 * dim), initializer=self._qkv_initializer(dim)
        )
        self.qkv_bias = self.add_weight("qkv_bias", (3 * dim,), initializer="zeros")
        n, heads = self._num_graph_classes, self.num_heads
        if self.graph_qkv:
            channels = dim * len(self.graph_qkv)
            self.qkv_graph = self.add_weight(
                "qkv_graph",
                (n, channels),
                initializer=self._graph_initializer([self._self_class()], 1.0, 0),
                # Read in float32 by the native ops, which compute in it; the builtin paths cast.
                experimental_autocast=False,
            )
        if self.score_graph:
            self.score_graph_weights = self.add_weight(
                "score_graph",
                (n, heads),
                initializer=self._graph_initializer(range(n), 1.0, 1),
                experimental_autocast=False,  # the score path runs in float32 (see `_scores`)
            )
        if self.score_mixing:
            self.score_mixing_weights = self.add_weight(
                "score_mixing",
                (n, heads),
                initializer=self._graph_initializer([self._self_class()], 1.0, 2),
                experimental_autocast=False,
            )
            self.score_bias_weights = self.add_weight(
                "score_bias",
                (n, heads),
                initializer=self._graph_initializer([], 0.0, 3),
                experimental_autocast=False,
            )
        self.triangle_weights = []
        if self.triangles:
            self._triangle_sums = TriangleSums(self.grid_shape, self.class_token)
            self._num_angle_classes = self._triangle_sums.num_angle_classes
            primary = [graphs.TRIANGLE_SELF, graphs.TRIANGLE_OPEN, graphs.TRIANGLE_RIGHT]
            for t in range(self.triangles):
                self.triangle_weights.append(
                    self.add_weight(
                        f"triangle_{t}",
                        (self._num_angle_classes, heads),
                        initializer=self._graph_initializer(primary, 1.0, 4 + t),
                        experimental_autocast=False,
                    )
                )
        super().build(input_shape)

    def _check_tokens(self, shape: tf.TensorShape) -> None:
        tokens = shape[1] if shape.rank == 3 else None
        dim = getattr(self, "dim", None)
        wrong_dim = dim is not None and shape.rank == 3 and shape[-1] != dim
        if shape.rank != 3 or wrong_dim or (tokens is not None and tokens != self.num_tokens):
            h, w = self.grid_shape
            token = " + 1 class token" if self.class_token else ""
            raise ValueError(
                f"{self.name} expects (B, {self.num_tokens}, {dim or 'D'}) tokens: "
                f"{h}x{w} grid tokens{token}. Received: shape={shape}"
            )

    # -- the attention of eq. 3 ------------------------------------------------
    # Projections are kept channels-first, (3 D, B, T): the per-feature graph
    # matrices are then one batched matmul over the channels, and the heads
    # need a single transpose. On CPU this is several times faster than
    # token-major einsums.
    def call(
        self,
        tokens: tf.Tensor,
        training: bool | None = None,
        token_only: bool = False,
        input_scale: tf.Tensor | None = None,
        input_offset: tf.Tensor | None = None,
        standardize_epsilon: float | None = None,
        add_tokens: bool = False,
    ) -> tf.Tensor:
        """See the class docstring.

        ``standardize_epsilon``: standardise the tokens first (a block's
        LayerNorm without its ``gamma`` and ``beta``, which ``input_scale`` and
        ``input_offset`` fold into the projection; ``normalization.standardize``).
        ``add_tokens``: return ``tokens`` (their class token with ``token_only``)
        plus the update, a block's skip connection (Fig. 9); with the native
        LayerNorm its gradient joins the LayerNorm's in one op.
        """
        self._check_tokens(tokens.shape)
        skip_tokens = (1 if token_only else self.num_tokens) if add_tokens else 0
        if self.native_applies(tokens.dtype, token_only):
            kernel, bias = self.folded_projection(input_scale, input_offset)
            if standardize_epsilon is None:
                blocks = native.lane_blocks_of_tokens(tokens)  # (D, B / LANES, T, LANES)
                skip = tokens if skip_tokens == self.num_tokens else tokens[:, :skip_tokens]
            else:
                blocks, skip = native.standardized_lane_blocks(tokens, standardize_epsilon, skip_tokens)
            qkv = project_channels_first(kernel, tf.reshape(blocks, [self.dim, -1]))
            qkv = tf.reshape(qkv, [3 * self.dim, -1, self.num_tokens, native.LANES])
            if add_tokens and not token_only:  # the window op adds the skip connection itself
                update = self.mix_and_attend_native(qkv, bias, training, token_only, skip=skip)
                return native.first_windows(update, tokens, axis=0)
            update = self.mix_and_attend_native(qkv, bias, training, token_only)
            update = native.first_windows(update, tokens, axis=0)
            return skip + update if add_tokens else update
        skip = tokens if skip_tokens == self.num_tokens else tokens[:, :skip_tokens]
        if standardize_epsilon is not None:
            tokens = standardize(tokens, standardize_epsilon)
        qkv = self.project_qkv(tokens, input_scale, input_offset)
        update = self.mix_and_attend(qkv, training=training, token_only=token_only)
        return skip + update if add_tokens else update

    def mix_and_attend(
        self, qkv: tf.Tensor, training: bool | None = None, token_only: bool = False
    ) -> tf.Tensor:
        """``G_q, G_k, G_v`` (eq. 11), then ``attend``: ``(3 D, B, T)`` projections -> ``(B, T, D)``."""
        if self.graph_qkv and self._use_conv_form():
            qkv = self._split_grid_apply(qkv, lambda grid: self.mix_qkv_grid(grid, training))
        elif self.graph_qkv:
            qkv = self._mix_all_tokens(qkv, training)
        return self.attend(qkv, training=training, token_only=token_only)

    def _mix_all_tokens(self, qkv: tf.Tensor, training: bool | None) -> tf.Tensor:
        """The dense ``G_q, G_k, G_v`` as one ``(3 D, B, T) @ (3 D, T, T)`` matmul.

        Same function as ``mix_qkv_grid`` on the grid tokens, but the class
        token (an identity row and column) and any channel without a graph
        (an identity matrix) ride along, which saves slicing and re-joining
        the largest tensor of the layer.
        """
        return tf.matmul(qkv, self.token_graphs_transposed(training))

    def token_graphs_transposed(
        self, training: bool | None = None, dtype: tf.DType | None = None
    ) -> tf.Tensor:
        """``G_q, G_k, G_v`` over all ``T`` tokens, transposed: ``(3 D, T, T)``, ``[f, t, j] = G_f[j, t]``.

        The class token's row and column are the identity's (Listing 1), as is
        every channel without a graph; one graph-symmetric dropout mask is drawn.
        Built in ``dtype`` (the compute dtype if ``None``) from the float32
        weights: the native ops take float32 graphs under ``mixed_bfloat16``.
        """
        dtype = tf.as_dtype(dtype or self.compute_dtype)
        if not self.graph_qkv:
            return tf.eye(self.num_tokens, batch_shape=[3 * self.dim], dtype=dtype)
        weights = graph_symmetric_dropout(tf.cast(self.qkv_graph, dtype), self.graph_dropout, training)
        # Columns for all 3 D channels; a channel without a graph reads the
        # self-loop class only, i.e. the identity.
        identity = tf.one_hot(
            tf.fill([self.dim], self._self_class()), self._num_graph_classes, axis=0, dtype=weights.dtype
        )
        parts = tf.split(weights, len(self.graph_qkv), axis=1)
        columns = [parts[self.graph_qkv.index(c)] if c in self.graph_qkv else identity for c in "qkv"]
        table = tf.concat(columns, axis=1)
        table = tf.concat([table, tf.ones_like(table[:1])], axis=0)
        matrix_t = expand_shared(table, self._token_graph_index.T)  # (T, T, 3 D): G transposed
        return tf.transpose(matrix_t, [2, 0, 1])

    def attend_constant_class_token(
        self,
        inputs: tf.Tensor,
        projection: tf.Tensor,
        class_qkv: tf.Tensor,
        training: bool | None = None,
    ) -> tf.Tensor:
        """The class token's row of eq. 3 / 11 when every token's ``q, k, v`` is linear in its input.

        For tokens whose projections are ``[Q, K, V] = projection^T y`` (an
        input ``y`` of ``R`` channels per token) and a class token whose
        ``q_0, k_0`` are the constant ``class_qkv`` (the first block of local
        GSA, which starts from the pixels), the class token's scores are
        linear in ``y``: ``q_0 . (G_k K)_j = sum_{c, t} y[c, t] W[c, t, j]``
        with ``W[c, t, j] = sum_f q_0[f] M_k[c, f] G_f[j, t]``, and likewise
        ``(G_q Q)_j . k_0``. So only the values are projected and mixed per
        token; the queries and keys never are, which saves two thirds of the
        layer's largest tensors. Same function as ``mix_and_attend(...,
        token_only=True)`` on ``projection^T y``, same weights. Where the
        native kernels run (``native.usable``), the values, their mixing and
        their attention-weighted sum are one op, ``native.class_token_values``,
        which never writes the ``(D, B, T)`` values to memory.

        Args:
          inputs: ``(R, B, T)`` channels-first; the class token's column must
            project to ``class_qkv``.
          projection: ``(R, 3 D)``.
          class_qkv: ``(3 D,)``, the class token's ``[q, k, v]``.
          training: enables graph-symmetric dropout.

        Returns:
          ``(B, 1, D)``.
        """
        if not self.class_token or self.score_mixing or self.query_key_norm:
            raise ValueError(
                "attend_constant_class_token needs class_token=True, score_mixing=False and "
                "query_key_norm=False (the scores must be linear in the inputs)."
            )
        heads, head_dim, t = self.num_heads, self.head_dim, self.num_tokens
        stable = stable_dtype(self.compute_dtype)
        rows = inputs.shape[0]
        graphs_t = self.token_graphs_transposed(training, stable)  # (3 D, T, T): [f, t, j]
        g_q, g_k, g_v = tf.split(graphs_t, 3, axis=0)
        m_q, m_k, m_v = tf.split(tf.cast(projection, stable), 3, axis=1)  # (R, D) each
        u_q, u_k, _ = tf.split(tf.cast(class_qkv, stable), 3)

        def kernel(u: tf.Tensor, m: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
            # W[c, t, h, j] = sum_d u[h, d] m[c, h, d] g[h, d, t, j]
            return tf.einsum(
                "hd,chd,hdtj->cthj",
                tf.reshape(u, [heads, head_dim]),
                tf.reshape(m, [rows, heads, head_dim]),
                tf.reshape(g, [heads, head_dim, t, t]),
            )

        # Row q_0 . k_j and column q_j . k_0 of every head, from one matmul of the (c, t) inputs.
        kernels = tf.stack([kernel(u_q, m_k, g_k), kernel(u_k, m_q, g_q)], axis=2)  # (R, T, 2, H, T)
        compute = self.compute_dtype
        kernels = tf.cast(tf.reshape(kernels, [rows * t, 2 * heads * t]), compute)
        if native.usable(compute, CLASS_TOKEN_VALUES_OPS):
            # The values in one op, on the inputs in lane blocks; the padded windows' scores come from their
            # zero inputs, and their outputs are cut off.
            blocks = native.lane_blocks(tf.cast(inputs, compute))  # (R, B / LANES, T, LANES)
            flat = tf.reshape(tf.transpose(blocks, [1, 3, 0, 2]), [-1, rows * t])  # (B', R T)
            scores = tf.reshape(tf.cast(tf.matmul(flat, kernels), stable), [-1, 2, heads, t])
            coefficients = self._class_token_coefficients(stable)
            out = native.class_token_values(
                blocks, scores, tf.cast(m_v, stable), tf.cast(g_v, stable), coefficients, heads
            )
            return native.first_windows(out, inputs, axis=1)
        flat = tf.cast(tf.reshape(tf.transpose(inputs, [1, 0, 2]), [-1, rows * t]), compute)  # (B, R T)
        scores = tf.matmul(flat, kernels)
        scores = tf.transpose(tf.reshape(tf.cast(scores, stable), [-1, 2, heads, t]), [1, 2, 0, 3])
        row, column = tf.unstack(scores)  # (H, B, T) each, as `_attend_token_channels_first`'s
        scale = tf.constant(1.0 / math.sqrt(head_dim), stable)
        symmetric = row + column if self.symmetrize else row
        attention = tf.nn.softmax(symmetric * scale, axis=-1)  # (H, B, T)
        if self.antisymmetric:
            attention += tf.nn.softmax((row - column) * scale, axis=-1)
        # The values as in `_mix_all_tokens`: V = M_v^T y, then G_v per channel.
        values = project_channels_first(
            tf.cast(m_v, compute), tf.reshape(tf.cast(inputs, compute), [rows, -1])
        )
        values = tf.matmul(tf.reshape(values, [self.dim, -1, t]), tf.cast(g_v, compute))  # (D, B, T)
        values = tf.reshape(values, [heads, head_dim, -1, t])
        out = tf.reduce_sum(tf.cast(attention, compute)[:, None] * values, axis=-1)  # (H, d, B)
        return tf.transpose(tf.reshape(out, [self.dim, -1]))[:, None, :]

    def project_qkv(
        self,
        tokens: tf.Tensor,
        input_scale: tf.Tensor | None = None,
        input_offset: tf.Tensor | None = None,
    ) -> tf.Tensor:
        """``[Q, K, V] = X [W_q, W_k, W_v] + b`` channels-first: ``(B, T, D)`` -> ``(3 D, B, T)``.

        With ``input_scale`` / ``input_offset`` the tokens are
        ``X * scale + offset``, folded into the weights (``folded_projection``).
        """
        kernel, bias = self.folded_projection(input_scale, input_offset)
        channels_first = tf.transpose(tokens, [2, 0, 1])  # (D, B, T)
        flat = tf.reshape(channels_first, [self.dim, -1])
        qkv = tf.reshape(project_channels_first(kernel, flat), [3 * self.dim, -1, tf.shape(tokens)[1]])
        # The bias after the reshape: XLA's legacy CPU runtime fuses a per-row bias of the 2-D product
        # into a oneDNN matmul that ran far slower than the two ops apart (docs/speed.md, "XLA's two
        # CPU runtimes").
        return qkv + bias[:, None, None]

    def folded_projection(
        self, input_scale: tf.Tensor | None = None, input_offset: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """``(scale W, offset W + b)``: the projection of ``x * scale + offset`` as one of ``x``."""
        kernel, bias = self.qkv_kernel, self.qkv_bias
        # Under a mixed policy a LayerNorm keeps float32 weights while the kernel reads in the compute dtype.
        if input_offset is not None:
            bias = bias + tf.linalg.matvec(kernel, tf.cast(input_offset, kernel.dtype), transpose_a=True)
        if input_scale is not None:
            kernel = tf.cast(input_scale, kernel.dtype)[:, None] * kernel
        return kernel, bias

    def mix_qkv_grid(
        self, qkv_grid: tf.Tensor, training: bool | None = None, map_shape: tuple[int, int] | None = None
    ) -> tf.Tensor:
        """Applies ``G_q, G_k, G_v`` to the grid tokens' ``(3 D, B, P)`` projections by convolution (eq. 11).

        ``map_shape``: convolve a map of this ``(H, W)`` instead of the
        layer's grid (local GSA: the graph reaches past the attention window).
        The dense form is ``_mix_all_tokens``; both compute the same function.
        """
        parts = tf.split(qkv_grid, 3, axis=0)
        chosen = [parts["qkv".index(c)] for c in self.graph_qkv]
        mixed = self.graph_convolve(tf.concat(chosen, axis=0), training=training, map_shape=map_shape)
        mixed_parts = tf.split(mixed, len(self.graph_qkv), axis=0)
        for c, part in zip(self.graph_qkv, mixed_parts, strict=True):
            parts["qkv".index(c)] = part
        return tf.concat(parts, axis=0)

    def graph_convolve(
        self, x: tf.Tensor, training: bool | None = None, map_shape: tuple[int, int] | None = None
    ) -> tf.Tensor:
        """``y[f, b, p] = sum_q G[p, q, f] x[f, b, q]`` as a depth-wise convolution (Listing 4).

        Args:
          x: ``(F, B, P)`` channels-first grid features, ``F`` the channels of ``qkv_graph``.
          training: enables graph-symmetric dropout.
          map_shape: ``(H, W)`` of a map to convolve instead of the layer's grid.
        """
        weights = graph_symmetric_dropout(tf.cast(self.qkv_graph, x.dtype), self.graph_dropout, training)
        channels = x.shape[0]
        h, w = map_shape or self.grid_shape
        kernel = expand_shared(weights, self._kernel_index)  # (k, k, F)
        grid = tf.reshape(tf.transpose(x, [1, 2, 0]), [-1, h, w, channels])
        y = tf.nn.depthwise_conv2d(grid, kernel[..., None], strides=[1, 1, 1, 1], padding="SAME")
        return tf.transpose(tf.reshape(y, [-1, h * w, channels]), [2, 0, 1])

    def _use_conv_form(self) -> bool:
        if self.graph_form == "auto":
            # Per channel the dense form costs P^2 and the convolution P k^2.
            return self._kernel_size**2 < self.num_grid_tokens
        return self.graph_form == "conv"

    def _split_grid_apply(self, x: tf.Tensor, fn) -> tf.Tensor:
        if not self.class_token:
            return fn(x)
        return tf.concat([x[..., :1], fn(x[..., 1:])], axis=-1)

    def attend(self, qkv: tf.Tensor, training: bool | None = None, token_only: bool = False) -> tf.Tensor:
        """Scores, symmetrisation, triangles, softmax and values: ``(3 D, B, T)`` -> ``(B, T, D)``.

        ``token_only``: compute only the class token's row, ``(B, 1, D)``;
        the triangle sums and ``G`` leave that row alone, so it is exact.
        """
        heads, head_dim, t = self.num_heads, self.head_dim, self.num_tokens
        if self.query_key_norm:
            qkv = self._with_normalised_queries_and_keys(qkv)
        if self.implementation == "fast":
            if token_only:
                return self._attend_token_channels_first(qkv)
            return self._attend_head_major(qkv, training)
        # (3, H, d, B, T) -> (3, B, H, d, T); b = batch, h = head, d = feature, i / j = tokens.
        q, k, v = tf.unstack(tf.transpose(tf.reshape(qkv, [3, heads, head_dim, -1, t]), [0, 3, 1, 2, 4]))
        if token_only:
            return self._attend_token(q, k, v)
        scores = self._scores(q, k)  # (B, H, T, T): q_i . k_j
        if self.score_mixing:
            scores = self._mix_scores(scores, training, "hik,bhkj->bhij", head_axis=1)
        if self.score_graph:
            scores = scores * self._score_matrix(self.score_graph_weights, 1.0, training)
        attention = self._normalised(self._symmetrised(scores, +1.0), training)
        if self.antisymmetric:
            attention += self._normalised(self._symmetrised(scores, -1.0), training)
        out = tf.matmul(tf.cast(attention, v.dtype), v, transpose_b=True)  # (B, H, T, d)
        return tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [-1, t, self.dim])

    def _with_normalised_queries_and_keys(self, qkv: tf.Tensor) -> tf.Tensor:
        """``query_key_norm``: ``q / rms(q)`` and ``k / rms(k)`` per token and head; values unchanged.

        ``qkv`` is ``(3 D, B, T)``, feature-major as ``(3, H, d, B, T)``; the
        root mean square runs over ``d`` in ``stable_dtype`` (float32 under a
        mixed policy).
        """
        heads, head_dim = self.num_heads, self.head_dim
        split = tf.reshape(qkv, [3, heads, head_dim, -1, self.num_tokens])
        query_key = tf.cast(split[:2], stable_dtype(self.compute_dtype))
        mean_square = tf.reduce_mean(tf.square(query_key), axis=2, keepdims=True)
        query_key = tf.cast(query_key * tf.math.rsqrt(mean_square + _QUERY_KEY_NORM_EPSILON), qkv.dtype)
        return tf.reshape(tf.concat([query_key, split[2:]], axis=0), tf.shape(qkv))

    def _attend_head_major(self, qkv: tf.Tensor, training: bool | None) -> tf.Tensor:
        """``attend`` with head-major scores ``(H, B, T, T)`` and one linear map before the softmax.

        The score pipeline of eq. 3 / 8 (``G``, ``S + sign S^T``, the triangle
        sums, ``1 / sqrt(d)``) is linear, so it runs as one map
        (``_score_logits``); the head-major layout lets the matrix form be a
        single batched matmul and costs no transpose more than the reference.
        """
        heads, head_dim, t = self.num_heads, self.head_dim, self.num_tokens
        # (3, H, d, B, T) -> (3, H, B, d, T)
        q, k, v = tf.unstack(tf.transpose(tf.reshape(qkv, [3, heads, head_dim, -1, t]), [0, 1, 3, 2, 4]))
        if not (self.score_mixing or self.score_graph or self.triangle_weights):
            attention = tf.nn.softmax(self._plain_logits(q, k, 1.0 if self.symmetrize else 0.0))
            if self.antisymmetric:
                attention += tf.nn.softmax(self._plain_logits(q, k, -1.0))
            out = tf.matmul(tf.cast(attention, v.dtype), v, transpose_b=True)  # (H, B, T, d)
            return tf.reshape(tf.transpose(out, [1, 2, 0, 3]), [-1, t, self.dim])
        scores = self._scores(q, k)  # (H, B, T, T): q_i . k_j
        if self.score_mixing:
            scores = self._mix_scores(scores, training, "hik,hbkj->hbij", head_axis=0)
        graph = None
        if self.score_graph:
            graph = self._score_matrix(self.score_graph_weights, 1.0, training)  # (H, T, T)
        attention = tf.nn.softmax(
            self._score_logits(scores, graph, 1.0 if self.symmetrize else 0.0, training)
        )
        if self.antisymmetric:
            attention += tf.nn.softmax(self._score_logits(scores, graph, -1.0, training))
        out = tf.matmul(tf.cast(attention, v.dtype), v, transpose_b=True)  # (H, B, T, d)
        return tf.reshape(tf.transpose(out, [1, 2, 0, 3]), [-1, t, self.dim])

    # -- the native kernels (sit_keras.native) ---------------------------------
    def native_applies(self, dtype: tf.DType, token_only: bool) -> bool:
        """Whether ``call`` runs ``mix_and_attend_native``: one native op after the projection.

        For token sets of up to ``native.MAX_TOKEN_PAIRS`` pairs (local windows
        and the Procgen global grid) with dense ``G_q, G_k, G_v`` and plain
        scores (no score mixing or query and key normalisation): a block's
        class-token row, or every row when the triangle sums take their
        matrix or pairs form; and where ``native.usable``.
        """
        if (
            self.implementation != "fast"
            or self.num_tokens**2 > native.MAX_TOKEN_PAIRS
            or not self.graph_qkv
            or self._use_conv_form()
            or self.score_mixing
            or self.query_key_norm
        ):
            return False
        if not native.usable(dtype, native.ATTENTION_OPS):
            return False
        if token_only:
            return self.class_token
        if not self.triangle_weights:
            return False
        # The op's form of the triangle sums, under XLA too (``mix_and_attend_native``).
        return self._triangle_sums.resolve_form(self.triangle_form, compiled=False) in ("matrix", "pairs")

    def mix_and_attend_native(
        self,
        qkv: tf.Tensor,
        bias: tf.Tensor,
        training: bool | None,
        token_only: bool,
        kernel: tf.Tensor | None = None,
        skip: tf.Tensor | None = None,
    ) -> tf.Tensor:
        """``mix_and_attend`` as ``native.class_token_attention`` or ``native.window_attention``.

        ``qkv``: the projections in ``native.lane_blocks`` layout, without
        their ``bias (3 D,)``; returns ``(B, 1, D)`` with ``token_only``, else
        ``(B, T, D)``, ``B`` the padded number of windows. ``kernel (R, 3 D)``
        (every row, not ``token_only``): ``qkv`` holds the ``R`` channels the
        op projects by it (``native.window_attention``). ``skip (W, T, D)``
        (every row): a skip connection the op adds to the first ``W`` windows'
        outputs (``native.window_attention``). The same function
        and, in training, the same graph-symmetric dropout masks drawn in the
        same order: ``G_q, G_k, G_v`` first, then the score graph, then the
        triangle weights once per sign.
        For every row, the score map of each sign (``+1`` for eq. 3, ``-1`` for
        eq. 6's anti-symmetrised scores) is the triangle sums' linear map:
        with the matrix form, that matrix read at its non-zero entries; with
        the pairs form (large grids, where the matrix would not pay), its
        terms one by one (``TriangleSums.terms_values``). The score graph
        ``G`` scales the map's columns, since ``map(S (.) G) = map diag(G) S``.
        """
        heads = self.num_heads
        graphs = self.token_graphs_transposed(training, native.op_dtype(qkv.dtype))
        scale, signs = 1.0 / math.sqrt(self.head_dim), self._score_signs()
        if token_only:
            coefficients = self._class_token_coefficients(native.op_dtype(qkv.dtype))
            return native.class_token_attention(
                qkv, tf.cast(bias, qkv.dtype), graphs, coefficients, heads, **self._native_orbits()
            )
        graph = self._score_matrix(self.score_graph_weights, 1.0, training) if self.score_graph else None
        sums, count, symmetrised = self._triangle_sums, len(self.triangle_weights), any(signs)
        as_matrix = sums.resolve_form(self.triangle_form, compiled=False) == "matrix"
        pattern = sums.pattern(count, symmetrised) if as_matrix else sums.terms_pattern(count, symmetrised)
        maps = []
        for sign in signs:
            tables = [
                theta_table(graph_symmetric_dropout(w, self.graph_dropout, training))
                for w in self.triangle_weights
            ]
            if as_matrix:
                maps.append(pattern.values_of(sums.matrix(tables, sign, scale)))
            else:
                maps.append(sums.terms_values(tables, sign, scale, symmetrised))
        values = tf.cast(tf.stack(maps), native.op_dtype(qkv.dtype))  # (M, H, P, K)
        if graph is not None:
            columns = tf.gather(tf.reshape(graph, [heads, -1]), pattern.indices, axis=1)  # (H, P, K)
            values = values * tf.cast(columns, values.dtype)
        bias, orbits = tf.cast(bias, qkv.dtype), self._native_orbits()
        return native.window_attention(qkv, bias, graphs, values, pattern, heads, kernel, **orbits, skip=skip)

    def _score_signs(self) -> list[float]:
        """The sign of each linear score map: ``+1`` for eq. 3's ``S + S^T`` (``0``, only ``S``, without
        symmetrisation), then ``-1`` for eq. 6's anti-symmetrised scores."""
        return [1.0 if self.symmetrize else 0.0] + ([-1.0] if self.antisymmetric else [])

    def _class_token_coefficients(self, dtype: tf.DType) -> tf.Tensor:
        """The class-token ops' ``coefficients (M, 2)``: map ``m``'s logits are ``(q_0 . k_j + sign_m
        q_j . k_0) / sqrt(d)``, the class token's row of ``(S + sign_m S^T) / sqrt(d)``."""
        scale = 1.0 / math.sqrt(self.head_dim)
        return tf.constant([[scale, sign * scale] for sign in self._score_signs()], dtype)

    def _native_orbits(self) -> dict[str, Any]:
        """The ops' quarter-turn orbits, given only where this layer's graph classes keep the turn
        (``graphs.quarter_turn_orbits``): the graphs are then functions of those classes, which need only
        the orbit sums of the graphs' gradient (``orbit_gradients``)."""
        orbits = self._quarter_turn_orbits
        return {"orbits": orbits, "orbit_gradients": len(orbits) > 0}

    def _scores(self, q: tf.Tensor, k: tf.Tensor) -> tf.Tensor:
        """``q_i . k_j`` over the last two axes, in the compute dtype, returned in ``stable_dtype``.

        Under a mixed-precision policy the matmul runs in float16 / bfloat16
        and everything after it up to the softmax (score graphs, symmetrisation,
        triangle sums, scale, softmax) in float32, with float32 weights; the
        attention weights go back to the compute dtype for the values.
        """
        return tf.cast(tf.matmul(q, k, transpose_a=True), stable_dtype(self.compute_dtype))

    def _plain_logits(self, q: tf.Tensor, k: tf.Tensor, sign: float) -> tf.Tensor:
        """``(S + sign S^T) / sqrt(d)`` with ``S = q^T k`` (eq. 3 without ``G`` and triangles), in one matmul.

        ``q^T k + sign k^T q = [q; k]^T [k; sign q]``: stacking the features
        forms the symmetrised scores directly, without a transpose and a sum
        of the ``(H, B, T, T)`` scores; the scale goes on the smaller ``q``.
        """
        q = q * tf.constant(1.0 / math.sqrt(self.head_dim), q.dtype)
        if sign:
            return self._scores(tf.concat([q, k], axis=-2), tf.concat([k, sign * q], axis=-2))
        return self._scores(q, k)

    def _score_logits(
        self, scores: tf.Tensor, graph: tf.Tensor | None, sign: float, training: bool | None
    ) -> tf.Tensor:
        """``scale * tri_n(...tri_1(X + sign X^T))``, ``X = scores (.) G``, head-major ``(H, B, T, T)``."""
        heads, t = self.num_heads, self.num_tokens
        scale = 1.0 / math.sqrt(self.head_dim)
        if graph is not None:
            scores = scores * graph[:, None]
        tables = [
            theta_table(graph_symmetric_dropout(w, self.graph_dropout, training))
            for w in self.triangle_weights
        ]
        # Without triangle sums (form None), or in the gather form, the scores stay head-major.
        form = None
        if tables:
            form = self._triangle_sums.resolve_form(self.triangle_form, compiled=in_compiled_function())
        if form == "matrix":
            matrix = self._triangle_sums.matrix(tables, sign, scale)  # (H, T^2, T^2)
            flat = tf.reshape(scores, [heads, -1, t * t])
            product = score_map_dtype(self.compute_dtype)  # bfloat16 under mixed_bfloat16
            mapped = tf.matmul(tf.cast(flat, product), tf.cast(matrix, product), transpose_b=True)
            return tf.reshape(tf.cast(mapped, scores.dtype), tf.shape(scores))
        if form in ("gather", None):
            if sign:
                scores = scores + sign * tf.transpose(scores, [0, 1, 3, 2])
            for table in tables:
                scores = self._triangle_sums.gather_sum(scores, table, head_axis=0)
            return scores * tf.constant(scale, scores.dtype)
        pairs = tf.reshape(tf.transpose(scores, [2, 3, 0, 1]), [t * t, heads, -1])  # (T^2, H, B)
        pairs = self._triangle_sums.pairs_sum(pairs, tables, sign, scale)
        return tf.transpose(tf.reshape(pairs, [t, t, heads, -1]), [2, 3, 0, 1])

    def _attend_token_channels_first(self, qkv: tf.Tensor) -> tf.Tensor:
        """``_attend_token`` on the ``(3 D, B, T)`` projections as they are, without a head transpose.

        Each row of the class token is a matrix-vector product per window and
        head; written as products and sums over the feature axis they are
        single passes over ``K`` and ``V`` instead of batched matmuls of
        ``(1 x d) @ (d x T)`` matrices.
        """
        if not self.class_token or self.score_mixing:
            raise ValueError("token_only needs class_token=True and score_mixing=False.")
        heads, head_dim, t = self.num_heads, self.head_dim, self.num_tokens
        q, k, v = tf.unstack(tf.reshape(qkv, [3, heads, head_dim, -1, t]))  # (H, d, B, T) each
        stable = stable_dtype(self.compute_dtype)
        row = tf.cast(tf.reduce_sum(q[..., :1] * k, axis=1), stable)  # (H, B, T): q_0 . k_j
        column = tf.cast(tf.reduce_sum(q * k[..., :1], axis=1), stable)  # q_j . k_0
        scale = tf.constant(1.0 / math.sqrt(head_dim), stable)
        symmetric = row + column if self.symmetrize else row
        attention = tf.nn.softmax(symmetric * scale, axis=-1)
        if self.antisymmetric:
            attention += tf.nn.softmax((row - column) * scale, axis=-1)
        out = tf.reduce_sum(tf.cast(attention, v.dtype)[:, None] * v, axis=-1)  # (H, d, B)
        return tf.transpose(tf.reshape(out, [self.dim, -1]))[:, None, :]  # (B, 1, D)

    def _attend_token(self, q: tf.Tensor, k: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
        if not self.class_token or self.score_mixing:
            raise ValueError("token_only needs class_token=True and score_mixing=False.")
        row = self._scores(q[..., :1], k)  # (B, H, 1, T): q_0 . k_j
        column = tf.transpose(self._scores(q, k[..., :1]), [0, 1, 3, 2])  # q_j . k_0
        scale = tf.constant(1.0 / math.sqrt(self.head_dim), row.dtype)
        symmetric = row + column if self.symmetrize else row
        attention = tf.nn.softmax(symmetric * scale, axis=-1)
        if self.antisymmetric:
            attention += tf.nn.softmax((row - column) * scale, axis=-1)
        out = tf.matmul(tf.cast(attention, v.dtype), v, transpose_b=True)  # (B, H, 1, d)
        return tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [-1, 1, self.dim])

    def _symmetrised(self, scores: tf.Tensor, sign: float) -> tf.Tensor:
        if sign > 0 and not self.symmetrize:
            return scores
        return scores + sign * tf.transpose(scores, [0, 1, 3, 2])

    def _normalised(self, scores: tf.Tensor, training: bool | None) -> tf.Tensor:
        for weights in self.triangle_weights:
            scores = self._triangle_sum(scores, weights, training)
        scale = tf.constant(1.0 / math.sqrt(self.head_dim), scores.dtype)
        return tf.nn.softmax(scores * scale, axis=-1)

    def _score_matrix(self, weights: tf.Tensor, token_value: float, training: bool | None) -> tf.Tensor:
        """A per-head ``(H, T, T)`` graph matrix; the class token's row and column hold ``token_value``."""
        weights = graph_symmetric_dropout(weights, self.graph_dropout, training)
        matrix = tf.transpose(expand_shared(weights, self._graph_index), [2, 0, 1])
        if not self.class_token:
            return matrix
        return tf.pad(matrix, [[0, 0], [1, 0], [1, 0]], constant_values=token_value)

    def _mix_scores(
        self, scores: tf.Tensor, training: bool | None, equation: str, head_axis: int
    ) -> tf.Tensor:
        """eq. 12: ``sigma(sum_j G_qk[i, j] S[j, :] + G_b[i, :])`` on the grid rows.

        ``equation`` / ``head_axis``: the einsum and the head axis of the
        scores' layout, ``(B, H, T, T)`` or ``(H, B, T, T)``.
        """
        mixing = self._score_matrix(self.score_mixing_weights, 0.0, training)
        if self.class_token:
            # The class token's row passes unchanged: identity on it.
            eye = tf.one_hot(0, self.num_tokens, dtype=mixing.dtype)
            mixing = mixing + eye[:, None] * eye[None, :]
        bias = self._score_matrix(self.score_bias_weights, 0.0, training)
        if head_axis == 0:
            bias = bias[:, None]
        return self._sigma(tf.einsum(equation, mixing, scores) + bias)

    def _triangle_sum(self, scores: tf.Tensor, weights: tf.Tensor, training: bool | None) -> tf.Tensor:
        """eq. 8: ``Theta_j S[i, j] + Theta_k S[j, k] + Theta_i S[k, i]`` with ``k = T(i, j)``."""
        weights = graph_symmetric_dropout(weights, self.graph_dropout, training)
        return self._triangle_sums.gather_sum(scores, theta_table(weights))

    @property
    def declared_symmetry(self) -> Symmetry:
        """Grid tokens permute with the grid, the class token is invariant (eq. 3, 11; eq. 4 breaks flips)."""
        return graph_symmetry(
            self.symmetry,
            self.triangles,
            square=self.grid_shape[0] == self.grid_shape[1],
            acts_on="grid_tokens",
            output="grid tokens permute with the input grid, f(g x) = g f(x); the class token is invariant",
            parts=(("output", EQUIVARIANT),),
            reference="SiT eq. 3, 5-8, 11-15; Listings 1-4",
        )

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            grid_shape=list(self.grid_shape),
            num_heads=self.num_heads,
            symmetry=self.symmetry,
            graph_qkv=self.graph_qkv,
            graph_kernel_size=self.graph_kernel_size,
            graph_form=self.graph_form,
            score_graph=self.score_graph,
            score_mixing=self.score_mixing,
            score_activation=self.score_activation,
            symmetrize=self.symmetrize,
            antisymmetric=self.antisymmetric,
            triangles=self.triangles,
            class_token=self.class_token,
            graph_dropout=self.graph_dropout,
            graph_init_stddev=self.graph_init_stddev,
            kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
            query_key_init_scale=self.query_key_init_scale,
            query_key_norm=self.query_key_norm,
            seed=self.seed,
            implementation=self.implementation,
            triangle_form=self.triangle_form,
        )
        return config
