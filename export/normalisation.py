"""The ops of a ``.tflite`` model that compute and apply a ``1 / sqrt(...)`` normalisation.

The ``int8`` export keeps them in float32 (``tflite.convert_function``).
A LayerNorm multiplies each token by ``1 / sqrt(variance + epsilon)``, and
the SiT local GSA's attention by ``1 / sqrt`` of a sum of squared weights.
In int8 that factor is one tensor with one scale: a nearly constant token
(a uniform region of a grid world) has a factor of ~100 or more, the scale
stretches to cover it, and every other token's factor (about 1) rounds to
one or two steps. Measured with ``tf.lite.experimental.QuantizationDebugger``
on the demo's SiT (real observations): the global block's LayerNorm output
had an RMS error of 150 of its quantisation steps (largest error 64, where
the values are about 1) and the local GSA's normalised weights 2.9, every
other op at most 2; the int8 model chose TensorFlow's greedy action on 0.86
of held-out steps. With these ops in float32 (same file size): 1.00.
``tests/test_quantisation.py`` shows the mechanism on one LayerNorm.

A normalisation is found from its ``RSQRT``: the ops that feed it, walked
back through element-wise ops (``ADD`` of epsilon, ``MAXIMUM`` / ``RELU``)
to the reduction that made the variance (``MEAN`` or ``SUM``), inclusive;
the products that reduction sums (``MUL``, ``SQUARED_DIFFERENCE``); the ops
that multiply by its result; and, for those products and multiplications,
the ops that only move their inputs (reshapes, transposes, gathers,
concatenations) back to the op that computed them. Such a move in int8
would round the small values whose square sum is the variance. Measured on
the demo's SiT trained under ``mixed_bfloat16``, whose local GSA forms
``x / sqrt(relu(x^T M x) + epsilon)`` (``M`` need not be positive, so the
denominator can be near 0): without the products and the moves in float32,
0.66 and 0.89 of greedy actions agreed; with them, 1.00. They are named by
their output tensors, as the converter's selective quantisation takes them.
"""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.tools import flatbuffer_utils

_OP = schema.BuiltinOperator
# Ops between a variance and its RSQRT (epsilon, a clamp at zero), walked through.
_ELEMENTWISE = {_OP.ADD, _OP.MAXIMUM, _OP.RELU}
# The reductions that end the walk: the variance (LayerNorm) or a sum of squares.
_REDUCTIONS = {_OP.MEAN, _OP.SUM}
# What a reduction sums: products of the normalised values.
_PRODUCTS = {_OP.MUL, _OP.SQUARED_DIFFERENCE, _OP.SQUARE}
# Ops that only move or select values.
_MOVES = {
    _OP.RESHAPE, _OP.TRANSPOSE, _OP.GATHER, _OP.CONCATENATION, _OP.STRIDED_SLICE, _OP.SLICE,
    _OP.SQUEEZE, _OP.EXPAND_DIMS, _OP.PACK, _OP.UNPACK,
}  # fmt: skip
# Longest walk from a RSQRT back to its reduction (epsilon and a clamp: 2 ops, with room), and
# back through moves.
_MAX_WALK = 4
_MAX_MOVES = 16


def normalisation_nodes(float_model: bytes) -> list[str]:
    """Output tensor names of the ops that compute or apply each ``RSQRT`` of ``float_model``.

    Args:
      float_model: a float32 ``.tflite`` flatbuffer (the ``float32`` export
        of the same function: the int8 converter keeps its tensor names).

    Returns:
      The names, sorted; empty for a model without ``RSQRT``.
    """
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(float_model))
    names: set[str] = set()
    for subgraph in model.subgraphs:
        names.update(_subgraph_normalisations(model, subgraph))
    return sorted(names)


def _subgraph_normalisations(model: schema.ModelT, subgraph: schema.SubGraphT) -> set[str]:
    producers = {output: op for op in subgraph.operators for output in op.outputs}

    def code(op: schema.OperatorT) -> int:
        return flatbuffer_utils.get_builtin_code_from_operator_code(model.operatorCodes[op.opcodeIndex])

    def name(op: schema.OperatorT) -> str:
        return subgraph.tensors[op.outputs[0]].name.decode()

    def computed_inputs(op: schema.OperatorT) -> list[schema.OperatorT]:
        """The producers of ``op``'s inputs (constants have none)."""
        return [producers[i] for i in op.inputs if i in producers]

    def moves_into(op: schema.OperatorT) -> set[str]:
        """The moves between ``op`` and the ops that computed its inputs."""
        found, stack = set(), computed_inputs(op)
        while stack and len(found) < _MAX_MOVES:
            producer = stack.pop()
            if code(producer) in _MOVES and name(producer) not in found:
                found.add(name(producer))
                stack += computed_inputs(producer)
        return found

    names: set[str] = set()
    for rsqrt in (op for op in subgraph.operators if code(op) == _OP.RSQRT):
        applied = [op for op in subgraph.operators if rsqrt.outputs[0] in op.inputs and code(op) == _OP.MUL]
        for op in applied:
            names |= {name(op)} | moves_into(op)
        producer = producers.get(rsqrt.inputs[0])
        for _ in range(_MAX_WALK):
            if producer is None or code(producer) not in _ELEMENTWISE | _REDUCTIONS:
                break
            names.add(name(producer))
            if code(producer) in _REDUCTIONS:
                for summed in computed_inputs(producer):
                    if code(summed) in _PRODUCTS:
                        names |= {name(summed)} | moves_into(summed)
                break
            # The computed operand (epsilon and the clamp's zero are constants: no producer).
            producer = next(iter(computed_inputs(producer)), None)
    return names
