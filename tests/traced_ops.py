"""A shared look into a traced function: the op types its graph runs."""

from __future__ import annotations

import tensorflow as tf


def op_types(function: tf.types.experimental.GenericFunction, *args) -> set[str]:
    """The op types of ``function`` traced on ``args``, those inside nested functions included (custom
    gradients, XLA clusters)."""
    graph = function.get_concrete_function(*args).graph
    types = {op.type for op in graph.get_operations()}
    for f in graph.as_graph_def().library.function:
        types |= {node.op for node in f.node_def}
    return types
