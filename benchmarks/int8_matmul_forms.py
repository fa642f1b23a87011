"""Can int8 make the SiT's matmuls faster on this CPU? Every exact TFLite form of each, float32 vs int8.

Issue 29 asks for int8 SiT at <= 0.7x float32's latency at batch 1. The
SiT's float32 TFLite model spends most of its time in ``BATCH_MATMUL`` ops
with one constant operand (the projections and the graph mixing of eq. 11),
which XNNPACK has no int8 kernel for. This benchmark takes each such op of
the demo-size SiT's float32 model (shapes and constants read from the
model), writes it in every form TFLite's built-in ops allow that computes
the same function, and times each form alone in float32 and in int8 (every
op in int8, calibrated on normal inputs), with XNNPACK and one thread:

- ``batch_matmul``: the op as exported;
- ``fully_connected`` (constant left operand ``W (O, K) @ X (K, N)``): the
  token-major ``X^T W^T``, one ``FULLY_CONNECTED``;
- ``grouped_conv`` (per-channel constant ``X (C, N, K) @ M (C, K, J)``): a
  1x1 ``CONV_2D`` with ``C`` groups on ``(1, N, 1, C K)``;
- ``depthwise_conv``: the same as a ``DEPTHWISE_CONV_2D`` with a ``1 x K``
  kernel and depth multiplier ``J`` on ``(1, N, K, C)``.

Each form is checked against the op in TensorFlow (float32, largest
difference relative to the output's scale) before it is timed. A latency is
the median over ``--rounds`` of the mean call time; ratios are medians of
per-round ratios, each to the op's fastest float32 form (the models of a
round are timed in a new order). The whole model is timed the same way in
float32 and as the exporter's int8 (``tflite_int8``) for scale.

The report's ``bound`` answers the issue: ``int8_estimate_x_float32`` is
int8's latency over float32's with both models rewritten so that each of
these ops takes its fastest form (int8's and float32's), and every other op
type (``export.op_profile`` on the float32 model and on the int8 model with
every op in int8) in the faster of float32 and int8, with no QUANTIZE /
DEQUANTIZE at the borders: an estimate that favours int8. Op times, forms
included, are mean invoke times less the interpreter's call overhead.

Usage::

    python benchmarks/int8_matmul_forms.py [--rounds 9] [--calls 200]
        [--out benchmarks/results/int8_matmul_forms.json]
"""

from __future__ import annotations

import sit_keras.quiet_start_one_thread  # noqa: F401  (first: one thread, no start-up chatter)

# isort: split

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter
from ai_edge_litert.tools import flatbuffer_utils

from sit_keras import measured_choice
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
    write_report,
)
from sit_keras.export import tflite
from sit_keras.export.exporter import export_policy
from sit_keras.export.op_profile import profile_ops
from sit_keras.export.random_policy import write_example_policy_folder

WARM_CALLS = 20
CALIBRATION_EXAMPLES = 32
# A form counts as the same function when it is this close, relative to the output's largest value.
SAME_FUNCTION_TOLERANCE = 1e-5

Form = Callable[[tf.Tensor], tf.Tensor]
# The op types this benchmark rewrites, and the borders a mixed float / int8 model adds.
NOT_OTHER_OPS = ("BATCH_MATMUL", "QUANTIZE", "DEQUANTIZE")
_OPCODE_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def constant_matmuls(model_path: str) -> list[dict[str, Any]]:
    """The ``BATCH_MATMUL`` ops of a float32 model with one stored constant operand: shapes and constant."""
    model = flatbuffer_utils.read_model(model_path)
    subgraph = model.subgraphs[0]
    found = []
    for op in subgraph.operators:
        if (
            _OPCODE_NAMES.get(
                flatbuffer_utils.get_builtin_code_from_operator_code(model.operatorCodes[op.opcodeIndex])
            )
            != "BATCH_MATMUL"
        ):
            continue
        left, right = (subgraph.tensors[i] for i in op.inputs)
        stored = [model.buffers[t.buffer].data for t in (left, right)]
        if sum(data is not None and len(data) > 0 for data in stored) != 1:
            continue
        side = "left" if stored[0] is not None and len(stored[0]) > 0 else "right"
        constant, other = (left, right) if side == "left" else (right, left)
        if not _has_known_form(side, tuple(constant.shape), tuple(other.shape)):
            continue
        values = np.frombuffer(bytes(model.buffers[constant.buffer].data), np.float32)
        found.append(
            {
                "constant_side": side,
                "constant": values.reshape([int(d) for d in constant.shape]),
                "input_shape": tuple(int(d) for d in other.shape),
            }
        )
    return found


def _has_known_form(side: str, constant: tuple[int, ...], other: tuple[int, ...]) -> bool:
    """Whether the op is one of the two patterns ``forms_of`` rewrites.

    ``W (O, K) @ X (K, N)`` or ``X (C, N, K) @ M (C, K, J)``; other constant
    matmuls (e.g. a product of weights the converter did not fold) are left out.
    """
    if side == "left":
        return len(constant) == len(other) == 2 and constant[1] == other[0]
    return len(constant) == len(other) == 3 and constant[0] == other[0] and constant[1] == other[2]


def forms_of(op: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], Form, Form]]:
    """Each exact form of ``op``: its input shape, the form, and the map of the op's input to the form's.

    The op computes ``W @ X`` (constant left, 2-D) or ``X @ M`` (constant
    right, batched over the channels). The last two items of each entry turn
    the op's input into the form's and the form's output back, so each form
    is checked against the op; the timed model is the form alone.
    """
    constant = tf.constant(op["constant"], tf.float32)
    shape = op["input_shape"]
    if op["constant_side"] == "left":  # W (O, K) @ X (K, N)
        forms = {
            "batch_matmul": (shape, lambda x: tf.matmul(constant, x), lambda x: x, lambda y: y),
            "fully_connected": (
                shape[::-1],
                lambda x: tf.matmul(x, constant, transpose_b=True),
                tf.transpose,
                tf.transpose,
            ),
        }
        return forms
    channels, tokens, k = shape  # X (C, N, K) @ M (C, K, J)
    j = constant.shape[-1]
    grouped = tf.reshape(tf.transpose(constant, [1, 0, 2]), [1, 1, k, channels * j])
    depthwise = tf.transpose(constant, [1, 0, 2])[None]  # (1, K, C, J)
    return {
        "batch_matmul": (shape, lambda x: tf.matmul(x, constant), lambda x: x, lambda y: y),
        "grouped_conv": (
            (1, tokens, 1, channels * k),
            lambda x: tf.nn.conv2d(x, grouped, 1, "VALID"),
            lambda x: tf.reshape(tf.transpose(x, [1, 0, 2]), [1, tokens, 1, channels * k]),
            lambda y: tf.transpose(tf.reshape(y, [tokens, channels, j]), [1, 0, 2]),
        ),
        "depthwise_conv": (
            (1, tokens, k, channels),
            lambda x: tf.nn.depthwise_conv2d(x, depthwise, [1, 1, 1, 1], "VALID"),
            lambda x: tf.transpose(x, [1, 2, 0])[None],
            lambda y: tf.transpose(tf.reshape(y, [tokens, channels, j]), [1, 0, 2]),
        ),
    }


def largest_difference(
    op_form: Form, form: Form, to_form: Form, from_form: Form, shape: tuple[int, ...]
) -> float:
    """``max |form(x) - op(x)| / max |op(x)|`` on a normal ``x`` (float32, TensorFlow)."""
    x = tf.constant(np.random.default_rng(0).normal(size=shape), tf.float32)
    expected = op_form(x)
    got = from_form(form(to_form(x)))
    return float(tf.reduce_max(tf.abs(got - expected)) / tf.reduce_max(tf.abs(expected)))


def convert(form: Form, shape: tuple[int, ...], int8: bool) -> bytes:
    """The form as a TFLite model of one input ``x``: float32, or every op in int8."""
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": form(x)})
    function = module.f.get_concrete_function(tf.TensorSpec(shape, tf.float32, name="x"))
    rng = np.random.default_rng(1)
    data = lambda: ({"x": rng.normal(size=shape).astype(np.float32)} for _ in range(CALIBRATION_EXAMPLES))  # noqa: E731
    if not int8:
        return tflite.convert_function(function, module, "float32")
    return tflite.convert_function(function, module, "int8", data, float_ops=(), float_normalisations=False)


def interpreter_for(content: bytes) -> Interpreter:
    """An XNNPACK interpreter (one thread) fed a normal input."""
    interpreter = Interpreter(model_content=content, num_threads=1)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        value = np.random.default_rng(2).normal(size=detail["shape"]).astype(np.float32)
        if detail["dtype"] == np.uint8:
            value = np.random.default_rng(2).integers(0, 256, size=detail["shape"], dtype=np.uint8)
        interpreter.set_tensor(detail["index"], value)
    for _ in range(WARM_CALLS):
        interpreter.invoke()
    return interpreter


def time_rounds(models: dict[str, Interpreter], rounds: int, calls: int) -> dict[str, list[float]]:
    """Per model, the mean call time (ms) of each round; each round times the models in a new order."""
    invokes = {
        name: (lambda interpreter=interpreter: interpreter.invoke) for name, interpreter in models.items()
    }
    seconds = measured_choice.time_candidates(invokes, rounds, calls)
    return {name: [1e3 * t for t in per_round] for name, per_round in seconds.items()}


def median_ratio(times: dict[str, list[float]], name: str, reference: str) -> float:
    return statistics.median(a / b for a, b in zip(times[name], times[reference], strict=True))


def exported_sit(folder: str) -> dict[str, str]:
    """The demo-size SiT (untrained: speed needs no training) in float32, int8, and int8 with all ops int8."""
    write_example_policy_folder(folder, "sit")
    options = {"formats": ["tflite"], "num_examples": 32}
    recipe = export_policy(folder, f"{folder}/export", "sit", quantizations=["float32", "int8"], **options)
    every_op = export_policy(
        folder,
        f"{folder}/export_all_ops",
        "sit",
        quantizations=["int8"],
        int8_float_ops=(),
        int8_float_normalisations=False,
        allow_parity_failure=True,
        **options,
    )
    paths = {q: recipe["models"][f"tflite_{q}"]["path"] for q in ("float32", "int8")}
    paths["int8_all_ops"] = every_op["models"]["tflite_int8"]["path"]
    return paths


def other_ops(paths: dict[str, str], rounds: int, calls: int) -> dict[str, Any]:
    """Per op type other than the matmuls and the (de)quantisations: its time in float32 and in int8.

    From ``export.op_profile`` on the float32 model and on the int8 model
    with every op in int8; ``best_ms`` takes the faster of the two per type,
    which favours int8 (it ignores the QUANTIZE / DEQUANTIZE a mixed model needs).
    """
    observation = np.random.default_rng(3).integers(0, 256, size=(1, 14, 14, 3), dtype=np.uint8)
    profiles = {
        q: profile_ops(paths[q], {"observation": observation}, rounds=rounds, calls=calls)
        for q in ("float32", "int8_all_ops")
    }
    by_op: dict[str, dict[str, float]] = {}
    for q, profile in profiles.items():
        for op in profile["ops"]:
            name = op["type"].split()[0]
            if name not in NOT_OTHER_OPS:
                by_op.setdefault(name, {"float32": 0.0, "int8_all_ops": 0.0})[q] += op["ms"]
    return {
        "by_type_ms": by_op,
        "float32_ms": sum(t["float32"] for t in by_op.values()),
        "best_ms": sum(min(t.values()) for t in by_op.values()),
        "invoke_overhead_ms": profiles["float32"]["invoke_overhead_ms"],
        "whole_model_ms": {q: p["whole_model_ms"] for q, p in profiles.items()},
    }


def run(rounds: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        paths = exported_sit(folder)
        ops = constant_matmuls(paths["float32"])
        rest = other_ops(paths, rounds, calls)
        models = {f"model_{q}": interpreter_for(Path(paths[q]).read_bytes()) for q in ("float32", "int8")}
    rows = []
    for index, op in enumerate(ops):
        forms = forms_of(op)
        op_form = forms["batch_matmul"][1]
        row = {
            "op": index,
            "constant_side": op["constant_side"],
            "input_shape": list(op["input_shape"]),
            "constant_shape": list(op["constant"].shape),
            "forms": {},
        }
        for name, (shape, form, to_form, from_form) in forms.items():
            row["forms"][name] = {"input_shape": list(shape)}
            row["forms"][name]["largest_difference"] = largest_difference(
                op_form, form, to_form, from_form, op["input_shape"]
            )
            for q in ("float32", "int8"):
                models[f"op{index}_{name}_{q}"] = interpreter_for(convert(form, shape, q == "int8"))
        rows.append(row)
    times = time_rounds(models, rounds, calls)
    overhead = rest["invoke_overhead_ms"]
    for row in rows:
        index = row["op"]
        names = [f"op{index}_{form}_float32" for form in row["forms"]]
        fastest_float = min(names, key=lambda n: statistics.median(times[n]))
        row["fastest_float32_form"] = fastest_float.split("_", 1)[1].rsplit("_", 1)[0]
        for form, entry in row["forms"].items():
            for q in ("float32", "int8"):
                name = f"op{index}_{form}_{q}"
                # Less the interpreter's own call time, as export.op_profile times an op.
                entry[f"{q}_ms"] = max(statistics.median(times[name]) - overhead, 0.0)
                entry[f"{q}_vs_fastest_float32"] = median_ratio(times, name, fastest_float)
        int8_forms = {form: entry["int8_ms"] for form, entry in row["forms"].items()}
        row["fastest_int8_form"] = min(int8_forms, key=int8_forms.get)
        row["fastest_int8_ms"] = int8_forms[row["fastest_int8_form"]]
        row["fastest_float32_ms"] = row["forms"][row["fastest_float32_form"]]["float32_ms"]
    int8_sum = sum(row["fastest_int8_ms"] for row in rows)
    float32_sum = sum(row["fastest_float32_ms"] for row in rows)
    exported_sum = sum(row["forms"]["batch_matmul"]["float32_ms"] for row in rows)
    return {
        "ops": rows,
        "other_ops": rest,
        "model_float32_ms": statistics.median(times["model_float32"]),
        "model_int8_ms": statistics.median(times["model_int8"]),
        "model_int8_vs_float32": median_ratio(times, "model_int8", "model_float32"),
        "bound": {
            "matmuls_as_exported_float32_ms": exported_sum,
            "fastest_float32_forms_sum_ms": float32_sum,
            "fastest_int8_forms_sum_ms": int8_sum,
            "matmuls_share_of_float32_ops": exported_sum / (exported_sum + rest["float32_ms"]),
            "int8_estimate_x_float32": (rest["best_ms"] + int8_sum) / (rest["float32_ms"] + float32_sum),
        },
    }


def print_table(results: dict[str, Any]) -> None:
    print("| op | form | float32 ms | int8 ms | int8 vs fastest float32 | largest difference |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for row in results["ops"]:
        shapes = f"{tuple(row['input_shape'])} @ {tuple(row['constant_shape'])}"
        if row["constant_side"] == "left":
            shapes = f"{tuple(row['constant_shape'])} @ {tuple(row['input_shape'])}"
        for form, entry in row["forms"].items():
            print(
                f"| {shapes} | {form} | {entry['float32_ms']:.4f} | {entry['int8_ms']:.4f} | "
                f"{entry['int8_vs_fastest_float32']:.2f} | {entry['largest_difference']:.1e} |"
            )
    bound, rest = results["bound"], results["other_ops"]
    print(
        f"Whole model: float32 {results['model_float32_ms']:.3f} ms, "
        f"exported int8 {results['model_int8_ms']:.3f} ms ({results['model_int8_vs_float32']:.2f}x). "
        f"These matmuls: {bound['matmuls_share_of_float32_ops']:.0%} of the float32 ops' time. "
        f"Other ops: {rest['float32_ms']:.3f} ms in float32, {rest['best_ms']:.3f} ms each type in the "
        f"faster of float32 and int8. Every matmul in its fastest form: int8 "
        f"{bound['int8_estimate_x_float32']:.2f}x float32 at best."
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", default="benchmarks/results/int8_matmul_forms.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        raise UsageError(f"--rounds and --calls must be at least 1; received {args.rounds} and {args.calls}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit, started = current_commit(), time.time()
    results = run(args.rounds, args.calls)
    print_table(results)
    report = {
        "what": "The demo-size SiT's BATCH_MATMULs with a constant operand, in every exact TFLite form, "
        "float32 vs int8 (every op in int8), XNNPACK, one thread, batch 1; and the bound they put on int8 "
        "SiT's latency",
        "command": command_line("int8_matmul_forms.py", argv),
        "commit": commit,
        "budget": f"{args.rounds} rounds of {args.calls} calls per model, after {WARM_CALLS} untimed calls",
        "wall_minutes": (time.time() - started) / 60,
        "environment": environment(),
        "results": results,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
