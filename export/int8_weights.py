"""Float32 constants of a ``.tflite`` model stored as int8, each with a DEQUANTIZE op in front.

The ``int8`` export keeps some ops in float32 (``tflite.FLOAT_OPS_IN_INT8``);
the converter then keeps their constant operands in float32 too (the SiT
graph-mixing tables are most of the model's bytes). ``store_weights_as_int8``
stores every such constant of at least ``min_elements`` values as int8,
symmetric per slice of its first axis (one scale per output row or per
matrix of a batch), and feeds the op through a ``DEQUANTIZE``: the runtime
dequantizes a constant once, when the model is loaded (XNNPACK unpacks
static weights; TFLite's built-in kernel caches a constant's result), so
the file shrinks ~4x on those weights and a call costs the same.
"""

from __future__ import annotations

import copy

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.tools import flatbuffer_utils

# Smaller constants are not worth a DEQUANTIZE op and two tensors.
MIN_ELEMENTS = 1024
# DEQUANTIZE's op version for an int8 input quantised per axis (TFLite's op_version.cc).
_DEQUANTIZE_PER_AXIS_VERSION = 5


def _constant_data(model: schema.ModelT, tensor: schema.TensorT) -> bytes | None:
    data = model.buffers[tensor.buffer].data if 0 < tensor.buffer < len(model.buffers) else None
    return None if data is None or len(data) == 0 else bytes(data)


def _name(tensor: schema.TensorT) -> str:
    name = tensor.name or ""
    return name.decode() if isinstance(name, bytes) else name


def _dequantize_opcode(model: schema.ModelT) -> int:
    """The index of DEQUANTIZE (per-axis int8 version) among the model's operator codes, added if missing."""
    for index, code in enumerate(model.operatorCodes):
        builtin = flatbuffer_utils.get_builtin_code_from_operator_code(code)
        if builtin == schema.BuiltinOperator.DEQUANTIZE and code.version == _DEQUANTIZE_PER_AXIS_VERSION:
            return index
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.DEQUANTIZE
    code.version = _DEQUANTIZE_PER_AXIS_VERSION
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def quantize_per_axis(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 values and float32 scales (one per slice of axis 0) of ``weights``.

    >>> values, scales = quantize_per_axis(np.array([[1.0, -0.5], [0.0, 0.25]], np.float32))
    >>> values.tolist(), [round(float(scale), 5) for scale in scales]
    ([[127, -64], [0, 127]], [0.00787, 0.00197])
    """
    rows = weights.reshape(weights.shape[0], -1).astype(np.float64)
    scales = np.maximum(np.abs(rows).max(axis=1), np.finfo(np.float32).tiny) / 127.0
    values = np.clip(np.round(rows / scales[:, None]), -127, 127).astype(np.int8)
    return values.reshape(weights.shape), scales.astype(np.float32)


def store_weights_as_int8(content: bytes, min_elements: int = MIN_ELEMENTS) -> bytes:
    """``content`` with its float32 op constants of ``min_elements`` values or more stored as int8.

    Only single-subgraph models are changed (a constant of a control-flow
    model may be shared between subgraphs); others are returned as they are.
    """
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    if len(model.subgraphs) != 1:
        return content
    subgraph = model.subgraphs[0]
    outputs = set(subgraph.outputs)
    dequantized: dict[int, int] = {}  # float constant -> the DEQUANTIZE output that replaces it
    dequantize_ops: list[schema.OperatorT] = []
    for op in subgraph.operators:
        for position, index in enumerate(op.inputs):
            if index < 0 or index in outputs:
                continue
            tensor = subgraph.tensors[index]
            data = _constant_data(model, tensor)
            if tensor.type != schema.TensorType.FLOAT32 or data is None or not tensor.shape:
                continue
            weights = np.frombuffer(data, np.float32).reshape(tensor.shape)
            if weights.size < min_elements:
                continue
            if index not in dequantized:
                dequantized[index] = _add_dequantized(model, subgraph, tensor, weights, dequantize_ops)
            op.inputs[position] = dequantized[index]
    if not dequantized:
        return content
    for index in dequantized:  # the float32 values are no longer read: drop them from the file
        model.buffers[subgraph.tensors[index].buffer] = schema.BufferT()
    subgraph.operators = dequantize_ops + subgraph.operators
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _add_dequantized(
    model: schema.ModelT,
    subgraph: schema.SubGraphT,
    tensor: schema.TensorT,
    weights: np.ndarray,
    dequantize_ops: list[schema.OperatorT],
) -> int:
    """Adds ``int8 constant -> DEQUANTIZE -> float32`` for ``tensor``; returns the float tensor's index."""
    values, scales = quantize_per_axis(weights)
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(values.tobytes(), np.uint8)
    model.buffers.append(buffer)
    quantization = schema.QuantizationParametersT()
    quantization.scale, quantization.zeroPoint = scales.tolist(), [0] * len(scales)
    quantization.quantizedDimension = 0
    stored = copy.copy(tensor)
    stored.type, stored.buffer, stored.quantization = (
        schema.TensorType.INT8,
        len(model.buffers) - 1,
        quantization,
    )
    stored.name = _name(tensor) + "/int8"
    model.buffers.append(schema.BufferT())  # the float result's (empty) buffer
    result = copy.copy(tensor)
    result.buffer, result.name = len(model.buffers) - 1, _name(tensor) + "/dequantized"
    subgraph.tensors += [stored, result]
    op = schema.OperatorT()
    op.opcodeIndex = _dequantize_opcode(model)
    op.inputs, op.outputs = [len(subgraph.tensors) - 2], [len(subgraph.tensors) - 1]
    dequantize_ops.append(op)
    return len(subgraph.tensors) - 1
