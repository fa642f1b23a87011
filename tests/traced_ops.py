"""A shared look into a traced function: the op types its graph runs, the custom calls XLA compiles it to."""

from __future__ import annotations

import pytest
import tensorflow as tf

from sit_keras import native

needs_xla_kernels = pytest.mark.skipif(
    native.xla_load_problem() is not None,
    reason=f"the XLA kernels are not usable: {native.xla_load_problem()}",
)


def op_types(function: tf.types.experimental.GenericFunction, *args) -> set[str]:
    """The op types of ``function`` traced on ``args``, those inside nested functions included (custom
    gradients, XLA clusters)."""
    graph = function.get_concrete_function(*args).graph
    types = {op.type for op in graph.get_operations()}
    for f in graph.as_graph_def().library.function:
        types |= {node.op for node in f.node_def}
    return types


def custom_calls(function: tf.types.experimental.GenericFunction, *args) -> set[str]:
    """The targets of the custom calls in the HLO that XLA compiles ``function`` on ``args`` to."""
    hlo = function.experimental_get_compiler_ir(*args)(stage="hlo")
    return {
        line.split('custom_call_target="')[1].split('"')[0]
        for line in hlo.splitlines()
        if "custom_call" in line
    }
