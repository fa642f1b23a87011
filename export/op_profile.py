"""Time per op of a ``.tflite`` model, as it runs in ``ai_edge_litert`` (one thread, batch 1).

The Python interpreter has no op profiler, so each op is cut out of the
model into a model of its own and timed with the kernel it gets in the
whole model: XNNPACK (the default delegate) when the whole model's XNNPACK
partitions contain it, else TFLite's built-in kernel. The cut model keeps
the op's constant inputs as constants (stored weights, and the results of
ops of constants only, such as a weight's DEQUANTIZE, which the runtime
computes once at load); its other inputs are fed with the values they have
when the whole model runs on the given inputs. An op's time is the median
over rounds of its mean invoke time, less the invoke time of a model
without ops (Python and interpreter overhead, ``invoke_overhead_ms``).

What this misses: XNNPACK runs each partition as one graph (its copies
of reshapes and transposes can be cheaper there), and a delegate's
partition boundaries cost a little; compare ``sum_of_ops_ms`` with
``whole_model_ms`` to see how much.

    profile = profile_ops("sit_int8.tflite", {"observation": image[None]})
    profile["by_type"]["BATCH_MATMUL float32"]  # {"count": 11, "ms": ..., "kernels": ["xnnpack"]}
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from ai_edge_litert.tools import flatbuffer_utils

XNNPACK, BUILTIN = "xnnpack", "builtin"
# An op of constants only (timed with the built-in kernel, which caches its result).
CONSTANT = "constant"
# Ops that call other subgraphs cannot be cut out alone.
_CONTROL_FLOW = {"WHILE", "IF", "CALL_ONCE", "CALL"}
_OPCODE_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _opcode_name(model: schema.ModelT, opcode_index: int) -> str:
    code = flatbuffer_utils.get_builtin_code_from_operator_code(model.operatorCodes[opcode_index])
    return _OPCODE_NAMES.get(code, f"CUSTOM_{code}")


def _is_constant(model: schema.ModelT, tensor: schema.TensorT) -> bool:
    data = model.buffers[tensor.buffer].data if tensor.buffer < len(model.buffers) else None
    return data is not None and len(data) > 0 and not tensor.isVariable


def _constants(
    model: schema.ModelT, subgraph: schema.SubGraphT, values: Interpreter
) -> dict[int, schema.BufferT]:
    """The buffer of every constant tensor: stored ones, and the outputs of ops of constants only.

    Such an op (a weight's DEQUANTIZE) runs once, when the model is loaded;
    its output, taken from ``values`` (an interpreter that ran the model with
    all tensors preserved), is a constant for the ops that read it.
    """
    constants = {
        index: model.buffers[tensor.buffer]
        for index, tensor in enumerate(subgraph.tensors)
        if _is_constant(model, tensor)
    }
    for op in subgraph.operators:
        if op.inputs and all(i < 0 or i in constants for i in op.inputs):
            for index in op.outputs:
                buffer = schema.BufferT()
                buffer.data = np.frombuffer(values.get_tensor(index).tobytes(), np.uint8)
                constants[index] = buffer
    return constants


def _single_op_model(
    model: schema.ModelT,
    subgraph: schema.SubGraphT,
    op: schema.OperatorT,
    constants: dict[int, schema.BufferT],
) -> bytes:
    """A model of ``op`` alone: its constant inputs as buffers, its other inputs as the model's inputs."""
    tensors: list[schema.TensorT] = []
    buffers: list[schema.BufferT] = [schema.BufferT()]  # buffer 0: the empty one
    new_index: dict[int, int] = {}

    def remap(index: int, constant: bool) -> int:
        if index < 0:  # an omitted optional input
            return index
        if index not in new_index:
            tensor = copy.copy(subgraph.tensors[index])
            tensor.buffer = 0
            if constant:
                buffers.append(constants[index])
                tensor.buffer = len(buffers) - 1
            new_index[index] = len(tensors)
            tensors.append(tensor)
        return new_index[index]

    single = copy.copy(op)
    single.inputs = [remap(i, i in constants) for i in op.inputs]
    inputs = [new_index[i] for i in _variable_inputs(op, constants)]
    single.outputs = [remap(i, False) for i in op.outputs]
    single.intermediates = [remap(i, False) for i in (op.intermediates or [])]
    cut = schema.SubGraphT()
    cut.tensors, cut.operators = tensors, [single]
    cut.inputs, cut.outputs = inputs, [i for i in single.outputs if i >= 0]
    return _pack(model, cut, buffers)


def _empty_model(model: schema.ModelT) -> bytes:
    """A model without ops whose one tensor is input and output: what every invoke costs anyway."""
    tensor = schema.TensorT()
    tensor.shape, tensor.type, tensor.buffer, tensor.name = [1], schema.TensorType.FLOAT32, 0, "x"
    empty = schema.SubGraphT()
    empty.tensors, empty.operators, empty.inputs, empty.outputs = [tensor], [], [0], [0]
    return _pack(model, empty, [schema.BufferT()])


def _pack(model: schema.ModelT, subgraph: schema.SubGraphT, buffers: list[schema.BufferT]) -> bytes:
    cut = schema.ModelT()
    cut.version, cut.operatorCodes, cut.description = model.version, model.operatorCodes, "op_profile"
    cut.subgraphs, cut.buffers = [subgraph], buffers
    return bytes(flatbuffer_utils.convert_object_to_bytearray(cut))


def _interpreter(content: bytes, delegate: bool) -> Interpreter:
    resolver = OpResolverType.AUTO if delegate else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = Interpreter(model_content=content, num_threads=1, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    return interpreter


def delegated_ops(interpreter: Interpreter, num_ops: int) -> set[int]:
    """Indices of the ops that the default delegate (XNNPACK) took, in an allocated interpreter.

    A delegate appends one node per partition after the model's ``num_ops``
    ops, with the partition's inputs and outputs: the ops between them are
    the partition's.
    """
    nodes = interpreter._get_ops_details()  # the public API does not show delegate partitions
    ops, partitions = nodes[:num_ops], nodes[num_ops:]
    producer = {int(t): op["index"] for op in ops for t in op["outputs"]}
    taken: set[int] = set()
    for partition in partitions:
        boundary = {int(t) for t in partition["inputs"]}
        stack = [int(t) for t in partition["outputs"]]
        while stack:
            tensor = stack.pop()
            if tensor in boundary or tensor not in producer or producer[tensor] in taken:
                continue
            taken.add(producer[tensor])
            stack.extend(int(t) for t in ops[producer[tensor]]["inputs"] if t >= 0)
    return taken


def _mean_invoke_seconds(interpreter: Interpreter, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        interpreter.invoke()
    return (time.perf_counter() - start) / calls


def profile_ops(
    model_path: str, inputs: Mapping[str, np.ndarray], rounds: int = 5, calls: int = 100
) -> dict[str, Any]:
    """Per-op and per-op-type times (ms) of a single-subgraph ``.tflite`` model on ``inputs``.

    Args:
      model_path: the model.
      inputs: one call's inputs by signature name (batch axis included).
      rounds: each round times ``calls`` invokes of every op model in turn;
        times are medians over rounds.
      calls: invokes per model and round.

    Returns:
      ``whole_model_ms`` (XNNPACK as the runtime applies it) and
      ``whole_model_no_delegate_ms`` (built-in kernels only),
      ``invoke_overhead_ms``, ``sum_of_ops_ms``, ``num_ops``,
      ``delegate_partitions``; ``ops``: per op its ``index``, ``type``
      (``"<OP> <output dtype>"``), ``kernel`` (``"xnnpack"``,
      ``"builtin"`` or ``"constant"``: constant inputs only, computed at
      load and timed with the built-in kernel, which caches it), ``output_shape``
      and ``ms``; ``by_type``: per type
      its ``count``, summed ``ms`` and ``kernels``, slowest first.

    Raises:
      ValueError: a model with more than one subgraph (control flow).
    """
    with open(model_path, "rb") as f:
        content = f.read()
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    if len(model.subgraphs) != 1:
        raise ValueError(
            f"profile_ops takes single-subgraph models; {model_path!r} has {len(model.subgraphs)}."
        )
    subgraph = model.subgraphs[0]
    num_ops = len(subgraph.operators)

    # The values every tensor has on these inputs (built-in kernels: XNNPACK would not keep them).
    recorder = Interpreter(
        model_content=content,
        num_threads=1,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        experimental_preserve_all_tensors=True,
    )
    recorder.get_signature_runner()(**inputs)
    whole = _interpreter(content, delegate=True)
    whole.get_signature_runner()(**inputs)
    taken = delegated_ops(whole, num_ops)
    partitions = len(whole._get_ops_details()) - num_ops
    bare = _interpreter(content, delegate=False)
    bare.get_signature_runner()(**inputs)

    constants = _constants(model, subgraph, recorder)
    timed: dict[str, Interpreter] = {
        "whole": whole,
        "bare": bare,
        "empty": _interpreter(_empty_model(model), False),
    }
    rows: list[dict[str, Any]] = []
    for index, op in enumerate(subgraph.operators):
        name = _opcode_name(model, op.opcodeIndex)
        output = subgraph.tensors[op.outputs[0]]
        dtype = flatbuffer_utils.type_to_name(output.type).lower()
        row = {"index": index, "type": f"{name} {dtype}", "kernel": XNNPACK if index in taken else BUILTIN,
               "output_shape": [int(d) for d in output.shape]}  # fmt: skip
        rows.append(row)
        if name in _CONTROL_FLOW:
            row["ms"] = None
            continue
        variable_inputs = _variable_inputs(op, constants)
        if not variable_inputs:  # a weight's DEQUANTIZE: computed once, at load (XNNPACK fails on it alone)
            row["kernel"] = CONSTANT
        interpreter = _interpreter(_single_op_model(model, subgraph, op, constants), row["kernel"] == XNNPACK)
        for detail, original in zip(interpreter.get_input_details(), variable_inputs, strict=True):
            interpreter.set_tensor(detail["index"], recorder.get_tensor(original))
        timed[str(index)] = interpreter

    seconds: dict[str, list[float]] = {key: [] for key in timed}
    for interpreter in timed.values():  # first calls: allocation, XNNPACK's packing of weights
        interpreter.invoke()
    for _ in range(rounds):
        for key, interpreter in timed.items():
            seconds[key].append(_mean_invoke_seconds(interpreter, calls))
    ms = {key: 1e3 * statistics.median(values) for key, values in seconds.items()}
    overhead = ms["empty"]
    by_type: dict[str, dict[str, Any]] = {}
    for row in rows:
        if str(row["index"]) not in ms:
            continue
        row["ms"] = max(0.0, ms[str(row["index"])] - overhead)
        entry = by_type.setdefault(row["type"], {"count": 0, "ms": 0.0, "kernels": []})
        entry["count"] += 1
        entry["ms"] += row["ms"]
        if row["kernel"] not in entry["kernels"]:
            entry["kernels"].append(row["kernel"])
    return {
        "model": model_path,
        "num_ops": num_ops,
        "delegate_partitions": partitions,
        "whole_model_ms": ms["whole"] - overhead,
        "whole_model_no_delegate_ms": ms["bare"] - overhead,
        "invoke_overhead_ms": overhead,
        "sum_of_ops_ms": sum(row["ms"] or 0.0 for row in rows),
        "ops": rows,
        "by_type": dict(sorted(by_type.items(), key=lambda item: -item[1]["ms"])),
    }


def _variable_inputs(op: schema.OperatorT, constants: Mapping[int, schema.BufferT]) -> list[int]:
    """The op's non-constant inputs (original tensor indices), in the order of the cut model's inputs."""
    return list(dict.fromkeys(i for i in op.inputs if i >= 0 and i not in constants))
