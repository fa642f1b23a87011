"""Fast, exact indexing with constant index tables.

TensorFlow differentiates ``tf.gather`` by a scatter-add, which XLA runs
slowly on CPU. The index tables of this package are constants, so both
directions can be written as gathers or as small matmuls instead.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def expand_shared(weights: tf.Tensor, index: np.ndarray) -> tf.Tensor:
    """``weights[index]`` for a table of shared weights, with index ``n`` reading zero.

    Args:
      weights: ``(n, C)``, one row per weight class.
      index: integer array of any shape ``S`` with values in ``[0, n]``.

    Returns:
      ``S + (C,)``: a gather of the rows (with a zero row ``n`` appended);
      its gradient is the matmul ``one_hot(index)^T @ dy``, not a
      scatter-add. The forward graph holds only the int32 index, so an
      exported model does not carry the ``(|S|, n)`` one-hot table.
    """
    flat = np.asarray(index, np.int32).reshape(-1)
    # A tensor, not a variable: under a mixed-precision policy this reads the
    # (float32) variable in the compute dtype, and the custom gradient below
    # then differentiates a tensor, whose gradient reaches the variable
    # through that cast.
    weights = tf.convert_to_tensor(weights)
    n = weights.shape[0]

    @tf.custom_gradient
    def gather_rows(table: tf.Tensor) -> tf.Tensor:
        padded = tf.concat([table, tf.zeros_like(table[:1])], axis=0)

        def grad(upstream: tf.Tensor) -> tf.Tensor:
            one_hot = tf.one_hot(flat, n, dtype=upstream.dtype)
            return tf.matmul(one_hot, upstream, transpose_a=True)

        return tf.gather(padded, flat), grad

    return tf.reshape(gather_rows(weights), [*np.shape(index), weights.shape[-1]])


def row_gather(x: tf.Tensor, indices: np.ndarray | tf.Tensor) -> tf.Tensor:
    """``tf.gather(x, indices)`` on axis 0 (``indices`` of any shape), with a dense gradient.

    The gradient is a segment sum, ``(x.shape[0], ...)``; ``x.shape[0]`` must
    be known. ``tf.gather``'s would be ``tf.IndexedSlices``: one row per
    index, which for a small table of weights read many times reaches the
    optimizer as thousands of rows that Adam deduplicates (``tf.unique``, a
    sort under XLA). ``indices`` may be a constant table or a tensor of ids.
    """
    num_rows = x.shape[0]

    @tf.custom_gradient
    def gather(x: tf.Tensor) -> tf.Tensor:
        def grad(dy: tf.Tensor) -> tf.Tensor:
            return tf.math.unsorted_segment_sum(dy, indices, num_rows)

        return tf.gather(x, indices), grad

    return gather(x)


def preimage_table(indices: np.ndarray, num_inputs: int, ignore: int | None = None) -> np.ndarray:
    """For each input position, the output positions that read it, padded with ``len(indices)``.

    ``ignore``: an input whose gradient is never used (an appended zero that
    many outputs read); it gets no preimages, which keeps the table narrow.
    """
    indices = np.asarray(indices).reshape(-1)
    counts = np.bincount(indices, minlength=num_inputs)
    if ignore is not None:
        counts[ignore] = 0
    width = max(int(counts.max(initial=0)), 1)
    table = np.full((num_inputs, width), len(indices), dtype=np.int32)
    # Rank of each output among the outputs reading the same input.
    order = np.argsort(indices, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    order = order[indices[order] != ignore] if ignore is not None else order
    ranks = np.arange(len(order)) - np.repeat(starts, counts)
    table[indices[order], ranks] = order
    return table


class ConstantGather:
    """``tf.gather(x, indices, axis)`` for constant ``indices``, differentiated by another gather.

    The gradient of a gather sums the output gradients over each input's
    preimages; with a constant index table those preimages are known in
    advance, so the sum is a gather of the (zero-padded) output gradient.
    """

    def __init__(self, indices: np.ndarray, num_inputs: int, axis: int, zero_input: int | None = None):
        """``zero_input``: an input position known to hold zero (padding); its gradient is dropped."""
        self.indices = np.asarray(indices, dtype=np.int32).reshape(-1)
        self.axis = axis
        self.preimages = preimage_table(self.indices, num_inputs, ignore=zero_input)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        axis = self.axis

        @tf.custom_gradient
        def gather(x):
            def grad(dy):
                zero = tf.zeros_like(tf.gather(dy, [0], axis=axis))
                padded = tf.concat([dy, zero], axis=axis)
                picked = tf.gather(padded, self.preimages, axis=axis)  # (..., N_in, width, ...)
                return tf.reduce_sum(picked, axis=axis + 1 if axis >= 0 else axis)

            return tf.gather(x, self.indices, axis=axis), grad

        return gather(x)
