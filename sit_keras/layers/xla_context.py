"""Whether a layer is being traced into a function that XLA compiles."""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import control_flow_util


def in_compiled_function() -> bool:
    """True while tracing inside ``tf.function(jit_compile=True)``, or a function it calls.

    A layer whose fastest form differs between XLA and TensorFlow's graph
    executor asks this while it is traced (both forms compute the same
    function). TensorFlow has no public call for it; tf_keras asks the same.
    """
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
