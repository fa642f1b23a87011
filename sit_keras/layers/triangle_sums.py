"""The triangle sums of the SiT paper (eq. 4 / eq. 8) over ``T x T`` scores, in four exact forms.

One triangle sum maps the scores ``X`` of a head to

    ``Y[i, j] = Theta_j X[i, j] + Theta_k X[j, k] + Theta_i X[k, i]``,  ``k = T(i, j)``

with the weights ``Theta`` shared by angle class (``sit_keras.graphs.triangle_indices``).
The class token's entries pass unchanged (Listing 3). Every term is linear in
``X``, so a GSA layer's whole score pipeline before the softmax, ``scale *
tri_n(...tri_1(S + sign S^T))``, is one linear map of the ``T^2`` scores:

- ``gather`` (the reference): two constant gathers on the last axis of
  ``(B, H, T^2)`` and three products with ``Theta``;
- ``matrix``: the map as one ``(T^2, T^2)`` matrix per head, built from the
  weights and applied as a single batched matmul (cheap for the small
  windows of local GSA, where ``T^2`` is a few hundred);
- ``pairs``: the scores laid out pair-major, ``(T^2, H, B)``, so that each
  constant gather copies whole contiguous rows, with an
  ``unsorted_segment_sum`` as its gradient (global GSA, ``T^2`` in the
  thousands, where the matrix would not pay);
- ``gather``: the reference's gathers on the scores' last axis, in their
  head-major layout ``(H, B, T^2)``. Under XLA on a CPU the pairs form's two
  layout changes, which XLA fuses into the element-wise loops around them,
  cost more than the gathers (``benchmarks/xla_cpu_ops.py``, ``siet_readout``),
  so ``auto`` takes this form there.

All four compute the same function with the same weights; the tests compare
them on perturbed weights in float64.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from sit_keras import graphs
from sit_keras.layers.indexing import ConstantGather, expand_shared, row_gather
from sit_keras.native import ScoreMapPattern

TRIANGLE_FORMS = ("auto", "matrix", "pairs", "gather")

# `auto` builds the per-head matrix up to this many scores per head (T^2):
# 4x4 windows with a class token have 289, the Procgen global grid 4225.
MAX_MATRIX_SCORES = 1024


def theta_table(weights: tf.Tensor) -> tf.Tensor:
    """``(A, H)`` angle weights -> ``(A + 1, H)`` with the class token's fixed weight 1 as row ``A``.

    ``expand_shared`` reads index ``A + 1`` as 0: the weight of a missing term.
    """
    return tf.concat([weights, tf.ones_like(weights[:1])], axis=0)


def _with_zero_row(table: tf.Tensor) -> tf.Tensor:
    """``(A + 1, H)`` -> ``(A + 2, H)``: class ``A + 1`` (a missing term) reads 0."""
    return tf.concat([table, tf.zeros_like(table[:1])], axis=0)


def _class_weights(table: tf.Tensor, classes: np.ndarray) -> tf.Tensor:
    """``Theta`` of each class in ``classes`` (eq. 8's angle weights), ``classes.shape + (H,)``.

    A gather with a dense gradient (``row_gather``), for the optimizer.
    """
    return row_gather(_with_zero_row(table), classes)


class TriangleSums:
    """Index tables of eq. 8 over the full ``T x T`` score matrix, class token included.

    Args:
      grid_shape: ``(H, W)`` of the grid tokens.
      class_token: whether token 0 is a class token outside the grid.
    """

    def __init__(self, grid_shape: tuple[int, int], class_token: bool):
        p = grid_shape[0] * grid_shape[1]
        c = int(class_token)
        t = p + c
        jk, ki = graphs.triangle_gather_indices(grid_shape)
        _, angles, num_angles = graphs.triangle_indices(grid_shape)
        missing_flat = t * t  # marks a missing term while the tables are built

        def to_full(grid_flat: np.ndarray) -> np.ndarray:
            # Grid indices r * P + s into the T x T matrix, where grid token r is token r + c.
            r, s = np.divmod(grid_flat, p)
            return np.where(grid_flat == p * p, missing_flat, (r + c) * t + (s + c))

        full_jk = np.full((t, t), missing_flat, dtype=np.int32)
        full_ki = np.full((t, t), missing_flat, dtype=np.int32)
        # The class token's scores pass unchanged: weight 1 on S[i, j], nothing else.
        one_class, zero_class = num_angles, num_angles + 1
        full_angles = np.empty((t, t, 3), dtype=np.int32)
        full_angles[...] = [one_class, zero_class, zero_class]
        full_jk[c:, c:] = to_full(jk)
        full_ki[c:, c:] = to_full(ki)
        full_angles[c:, c:] = angles
        # A missing term reads the entry's own score with weight 0: exact, and
        # no zero needs appending to the (large) score tensor.
        own = np.arange(t * t, dtype=np.int32).reshape(t, t)
        for term, index in ((1, full_jk), (2, full_ki)):
            missing = index == missing_flat
            full_angles[..., term][missing] = zero_class
            index[missing] = own[missing]

        self.num_tokens = t
        self.num_angle_classes = num_angles
        # (T^2, 3): for each score r, the score read by each of the three terms
        # and the angle class weighting it.
        self.sources = np.stack([own.reshape(-1), full_jk.reshape(-1), full_ki.reshape(-1)], axis=-1)
        self.classes = full_angles.reshape(-1, 3)
        # S^T as a gather of the flat scores.
        self.transpose = own.T.reshape(-1).copy()
        self._gather_jk = ConstantGather(full_jk, t * t, axis=-1)
        self._gather_ki = ConstantGather(full_ki, t * t, axis=-1)
        self._patterns: dict[tuple[str, int, bool], ScoreMapPattern] = {}

    def resolve_form(self, form: str, compiled: bool) -> str:
        """The form ``form`` (one of ``TRIANGLE_FORMS``) means for these sizes; ``compiled``: under XLA.

        ``auto``: the matrix up to ``MAX_MATRIX_SCORES`` scores per head, above
        it the gathers under XLA and the pairs in a TensorFlow graph.
        """
        if form != "auto":
            return form
        if self.num_tokens**2 <= MAX_MATRIX_SCORES:
            return "matrix"
        return "gather" if compiled else "pairs"

    # -- the reference: gathers on the last axis ---------------------------------
    def gather_sum(self, scores: tf.Tensor, table: tf.Tensor, head_axis: int = 1) -> tf.Tensor:
        """One triangle sum of ``(B, H, T, T)`` scores; ``table`` from ``theta_table``.

        ``head_axis=0``: of head-major ``(H, B, T, T)`` scores.
        """
        t = self.num_tokens
        theta = tf.transpose(
            expand_shared(table, self.classes.reshape(t, t, 3)), [3, 2, 0, 1]
        )  # (H, 3, T, T)
        if head_axis == 0:
            theta = theta[:, :, None]  # (H, 3, 1, T, T): the same weights for every example
        flat = tf.reshape(scores, [-1, t * t])
        s_jk = tf.reshape(self._gather_jk(flat), tf.shape(scores))
        s_ki = tf.reshape(self._gather_ki(flat), tf.shape(scores))
        return theta[:, 0] * scores + theta[:, 1] * s_jk + theta[:, 2] * s_ki

    # -- one (T^2 x T^2) matrix per head ----------------------------------------
    def matrix(self, tables: list[tf.Tensor], sign: float, scale: float) -> tf.Tensor:
        """``scale * L_n ... L_1 (I + sign P)`` as ``(H, T^2, T^2)``, ``P`` the transpose permutation.

        ``sign = 0`` leaves out the symmetrisation. Row ``r`` of ``L`` holds
        the three ``Theta`` of score ``r`` in the columns its terms read; the
        matrix is a segment sum of gathered weights, so its gradient is a
        gather and no ``window^4`` basis is stored.
        """
        n = self.num_tokens**2
        rows = np.repeat(np.arange(n, dtype=np.int64), 3)
        matrix = None
        for i, table in enumerate(tables):
            values = _class_weights(table, self.classes.reshape(-1))  # (3 T^2, H)
            columns = self.sources.reshape(-1).astype(np.int64)
            if i == 0 and sign:
                # (I + sign P) folded in: each term also reads the transposed score.
                rows_i = np.concatenate([rows, rows])
                columns = np.concatenate([columns, self.transpose[columns]])
                values = tf.concat([values, sign * values], axis=0)
            else:
                rows_i = rows
            segments = rows_i * n + columns
            step = tf.math.unsorted_segment_sum(values, segments, n * n)  # (T^4, H)
            step = tf.transpose(tf.reshape(step, [n, n, -1]), [2, 0, 1])
            matrix = step if matrix is None else tf.matmul(step, matrix)
        return matrix * tf.constant(scale, matrix.dtype)

    def pattern(self, num_tables: int, symmetrised: bool) -> ScoreMapPattern:
        """Where ``matrix`` (``num_tables`` sums, with or without ``S +- S^T``) can be non-zero.

        For the native op (``sit_keras.native.window_attention``).

        The boolean product of the sums' patterns: about 6 columns per row for
        one symmetrised sum, against the ``T^2`` of the dense matrix.
        """
        key = ("matrix", num_tables, symmetrised)
        if key not in self._patterns:
            reach = np.eye(self.num_tokens**2, dtype=bool)
            for i in range(num_tables):
                reads = self.sources  # (T^2, 3): the scores row p of this sum reads
                if i == 0 and symmetrised:
                    reads = np.concatenate([reads, self.transpose[reads]], axis=1)
                # Row p of (this sum) @ reach: the union of the rows of reach it reads, gathered a term at
                # a time (the dense (T^2)^3 integer product took 10 s at 37 tokens).
                step = np.zeros_like(reach)
                for column in reads.T:
                    step |= reach[column]
                reach = step
            self._patterns[key] = ScoreMapPattern.of_nonzero(reach)
        return self._patterns[key]

    # -- the map's terms, one by one (the native op on large grids) ---------------
    def terms_pattern(self, num_tables: int, symmetrised: bool) -> ScoreMapPattern:
        """The columns ``terms_values`` weights, without building the ``(T^2, T^2)`` matrix.

        Row ``p`` lists every term of ``L_n ... L_1 (I + sign P)`` as it is
        formed: the three scores each sum reads, the first sum's also
        transposed when ``symmetrised``; ``3^n`` or ``2 3^n`` terms a row, a
        column possibly twice. For the native op on grids whose matrix would
        not pay (``sit_keras.native.window_attention``).
        """
        key = ("terms", num_tables, symmetrised)
        if key not in self._patterns:
            indices = self.sources  # (T^2, 3)
            if symmetrised:
                indices = np.concatenate([indices, self.transpose[indices]], axis=1)
            for _ in range(num_tables - 1):
                # Term k of a later sum reads row sources[p, k] of the map so far.
                indices = indices[self.sources].reshape(self.num_tokens**2, -1)
            self._patterns[key] = ScoreMapPattern(indices)
        return self._patterns[key]

    def terms_values(
        self, tables: list[tf.Tensor], sign: float, scale: float, symmetrised: bool
    ) -> tf.Tensor:
        """``matrix(tables, sign, scale)`` at ``terms_pattern(len(tables), symmetrised)``: ``(H, T^2, K)``.

        ``symmetrised`` must be true when ``sign`` is not 0 (the transposed
        terms then carry ``sign`` times the first sum's weights).
        """
        if sign and not symmetrised:
            raise ValueError(f"terms_values needs symmetrised=True for sign={sign}.")
        theta = _class_weights(tables[0], self.classes)  # (T^2, 3, H)
        values = tf.concat([theta, sign * theta], axis=1) if symmetrised else theta
        for table in tables[1:]:
            theta = _class_weights(table, self.classes)  # (T^2, 3, H)
            earlier = row_gather(values, self.sources)  # (T^2, 3, K, H): the rows each term reads
            values = tf.reshape(theta[:, :, None] * earlier, [self.num_tokens**2, -1, theta.shape[-1]])
        return tf.transpose(values, [2, 0, 1]) * tf.constant(scale, values.dtype)

    # -- pair-major gathers ------------------------------------------------------
    def pairs_sum(self, pairs: tf.Tensor, tables: list[tf.Tensor], sign: float, scale: float) -> tf.Tensor:
        """The same map on pair-major scores ``(T^2, H, B)``: gathers copy whole rows."""
        if sign:
            pairs = pairs + sign * row_gather(pairs, self.transpose)
        for table in tables:
            theta = _class_weights(table, self.classes)[..., None]  # (T^2, 3, H, 1)
            pairs = (
                theta[:, 0] * pairs
                + theta[:, 1] * row_gather(pairs, self.sources[:, 1])
                + theta[:, 2] * row_gather(pairs, self.sources[:, 2])
            )
        return pairs * tf.constant(scale, pairs.dtype)
