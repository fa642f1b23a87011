"""Exported policies: file size and single-step latency of TFLite vs the SavedModel vs the Keras model.

For each policy (trained folders given with ``--root_dirs``, and untrained
example policies of each encoder family, ``--models``), in one process::

    sit-export           SavedModel + TFLite float32 / float16 / dynamic_int8 / int8
    keras                the restored tf_keras network, called eagerly from Python (batch 1)
    saved_model          the SavedModel's serving_default signature, from Python (batch 1)
    tflite_<q>           ai_edge_litert, 1 thread, batch 1

Everything runs with one thread (TensorFlow's intra/inter-op pools too).
Each round times ``--calls`` calls of every variant in turn on real
observations from the policy's environment; a variant's latency is the
median over ``--rounds`` rounds of the mean call time, and every ratio is
the median of the per-round ratios (so a noisy moment hits both sides).
Targets (issue 6): TFLite float32 at least 3x faster than the SavedModel
per step; int8 files at most 30% of float32.

``--profile_ops`` adds, per policy, ``tflite_int8_all_ops``: the int8 model
with every op in int8 (``float_ops=()``, ``float_normalisations=False``; the
export's int8 keeps ``tflite.FLOAT_OPS_IN_INT8`` and the normalisations in
float32), timed with the others, and the time
per op type of TFLite float32, int8 and int8_all_ops (``export.op_profile``:
each op cut out and timed with the kernel it gets in the whole model,
XNNPACK or built-in), as JSON (``op_profile``) and as a table.

Usage::

    python benchmarks/export.py [--root_dirs runs/demo/sit,runs/demo/cnn] [--models sit,cnn,mlp]
        [--rounds 7] [--calls 50] [--profile_ops] [--out benchmarks/results/export.json]
"""

from __future__ import annotations

import sit_keras.quiet_start_one_thread  # noqa: F401  (first: one thread, no start-up chatter)

# isort: split

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

import sit_keras  # noqa: F401  (sets up Keras 2 before TensorFlow)
from sit_keras.benchmarking import (  # noqa: E402
    SentenceParser,
    UsageError,
    check_out_file,
    environment,
    folder_list,
    name_list,
    parse_or_say_why,
    write_report,
)
from sit_keras.export.exporter import NUM_EXAMPLES, export_policy  # noqa: E402
from sit_keras.export.op_profile import profile_ops  # noqa: E402
from sit_keras.export.policy_model import load_trained_policy  # noqa: E402
from sit_keras.export.random_policy import EXAMPLE_POLICIES, write_example_policy_folder  # noqa: E402
from sit_keras.export.rollouts import collect_examples, representative_data, split_steps  # noqa: E402
from sit_keras.export.runtime import make_interpreter  # noqa: E402
from sit_keras.export.tflite import QUANTIZATIONS, convert_function  # noqa: E402

DEFAULT_MODELS = ("sit", "siet", "vit", "impala_cnn", "cnn", "mlp")
# The exporter's seed (export_policy's default), with its num_examples: the same calibration set.
EXPORT_SEED = 20_000
ALL_OPS_INT8 = "tflite_int8_all_ops"
PROFILED = ("tflite_float32", "tflite_int8", ALL_OPS_INT8)


def _variants(root_dir: str, report: dict[str, Any]) -> dict[str, Callable[[dict], Any]]:
    """Callables of one input dict (batch 1) per variant."""
    policy = load_trained_policy(root_dir)
    network = policy.network
    variants: dict[str, Callable[[dict], Any]] = {
        "keras": lambda inputs: network(tf.constant(inputs["observation"])),
    }
    signature = tf.saved_model.load(report["models"]["saved_model"]["path"]).signatures["serving_default"]
    variants["saved_model"] = lambda inputs: signature(**{k: tf.constant(v) for k, v in inputs.items()})
    for variant in [f"tflite_{q}" for q in QUANTIZATIONS] + [ALL_OPS_INT8]:
        if variant in report["models"]:
            runner = make_interpreter(report["models"][variant]["path"], 1).get_signature_runner()
            variants[variant] = lambda inputs, runner=runner: runner(**inputs)
    return variants


def _time(function: Callable[[dict], Any], inputs: list[dict], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        function(inputs[i % len(inputs)])
    return (time.perf_counter() - start) / calls


def _export_all_ops_int8(root_dir: str, path: str) -> int:
    """Writes the int8 model with every op in int8 (the exporter's calibration data); returns its size."""
    policy = load_trained_policy(root_dir)
    views = policy.invariant_transforms
    calibration, _ = split_steps(collect_examples(policy, NUM_EXAMPLES, seed=EXPORT_SEED, transforms=views))
    function = policy.serving_function(batch_size=1)
    flatbuffer = convert_function(
        function,
        policy.network,
        "int8",
        representative_data(calibration),
        float_ops=(),
        float_normalisations=False,
    )
    with open(path, "wb") as f:
        f.write(flatbuffer)
    return len(flatbuffer)


def benchmark_policy(
    name: str, root_dir: str, rounds: int, calls: int, out_dir: str, profile: bool = False
) -> dict[str, Any]:
    """Exports ``root_dir`` and measures it; returns sizes, parity, latencies and ratios.

    ``profile``: also the all-ops int8 model and the per-op profiles (module docstring).
    """
    export_dir = os.path.join(out_dir, name)
    os.makedirs(export_dir, exist_ok=True)
    # Random-weight policies: their int8 models may fail the parity gate, and the benchmark reports it.
    report = export_policy(
        root_dir, export_dir, model_name=name, num_examples=NUM_EXAMPLES, seed=EXPORT_SEED,
        allow_parity_failure=True,
    )  # fmt: skip
    if profile:
        path = os.path.join(export_dir, "tflite", f"{name}_int8_all_ops.tflite")
        report["models"][ALL_OPS_INT8] = {"path": path, "bytes": _export_all_ops_int8(root_dir, path)}
    policy = load_trained_policy(root_dir)
    inputs = [e.inputs for e in collect_examples(policy, 32, seed=30_000)]
    variants = _variants(root_dir, report)
    for function in variants.values():  # first calls: tracing, allocation
        function(inputs[0])
    per_round: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for variant, function in variants.items():
            per_round[variant].append(_time(function, inputs, calls))
    latency_ms = {k: 1e3 * statistics.median(v) for k, v in per_round.items()}

    def ratio(slow: str, fast: str) -> float:
        return statistics.median(s / f for s, f in zip(per_round[slow], per_round[fast], strict=True))

    models = report["models"]
    sizes = {k: v["bytes"] for k, v in models.items()}
    result = {
        "root_dir": root_dir,
        "bytes": sizes,
        "int8_size_vs_float32": sizes["tflite_int8"] / sizes["tflite_float32"],
        "dynamic_int8_size_vs_float32": sizes["tflite_dynamic_int8"] / sizes["tflite_float32"],
        "parity": {k: v["parity"] for k, v in models.items() if "parity" in v},
        "latency_ms": latency_ms,
        "saved_model_vs_tflite_float32": ratio("saved_model", "tflite_float32"),
        "keras_vs_tflite_float32": ratio("keras", "tflite_float32"),
        "tflite_float32_vs_int8": ratio("tflite_float32", "tflite_int8"),
    }
    if profile:
        result["tflite_float32_vs_int8_all_ops"] = ratio("tflite_float32", ALL_OPS_INT8)
        result["op_profile"] = {
            variant: profile_ops(models[variant]["path"], inputs[0], rounds=rounds, calls=calls)
            for variant in PROFILED
        }
    return result


def format_op_table(name: str, profiles: dict[str, dict[str, Any]]) -> str:
    """Per op type (all output dtypes together): ms per call, count, dtypes and kernels of each model."""
    cells: dict[str, dict[str, list[Any]]] = {}
    for variant, profile in profiles.items():
        for op_type, entry in profile["by_type"].items():
            op, dtype = op_type.split(" ", 1)
            cell = cells.setdefault(op, {}).setdefault(variant, [0.0, 0, set(), set()])
            cell[0] += entry["ms"]
            cell[1] += entry["count"]
            cell[2].add(dtype)
            cell[3].update(entry["kernels"])
    variants = list(profiles)

    def text(cell: list[Any] | None) -> str:
        if cell is None:
            return ""
        return f"{cell[0]:.4f} ({cell[1]}x {'/'.join(sorted(cell[2]))}, {'+'.join(sorted(cell[3]))})"

    order = sorted(cells, key=lambda op: -max(c[0] for c in cells[op].values()))
    lines = [
        f"{name}: ms per call by op type (ops, output dtypes, kernels)",
        "| op | " + " | ".join(variants) + " |",
        "|" + " --- |" * (len(variants) + 1),
    ]
    lines += ["| " + " | ".join([op] + [text(cells[op].get(v)) for v in variants]) + " |" for op in order]
    for label, key in (("sum of ops", "sum_of_ops_ms"), ("whole model", "whole_model_ms")):
        lines.append("| " + " | ".join([label] + [f"{profiles[v][key]:.4f}" for v in variants]) + " |")
    lines.append(
        "| XNNPACK partitions | "
        + " | ".join(str(profiles[v]["delegate_partitions"]) for v in variants)
        + " |"
    )
    return "\n".join(lines)


def format_table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| policy | float32 kB | int8 kB (vs float32) | TFLite f32 ms | SavedModel ms (x TFLite) "
        "| Keras ms (x TFLite) | int8 ms (f32 / int8) | int8 agreement (unexplained) | f32 max logit diff |",
        "|" + " --- |" * 9,
    ]
    for name, r in results.items():
        ms, parity = r["latency_ms"], r["parity"]
        f32, int8 = parity["tflite_float32"], parity["tflite_int8"]
        diff = max((v for k, v in f32.items() if k.startswith("max_abs_diff/")), default=float("nan"))
        kb = {k: v / 1e3 for k, v in r["bytes"].items()}
        cells = [
            name,
            f"{kb['tflite_float32']:.0f}",
            f"{kb['tflite_int8']:.0f} ({r['int8_size_vs_float32']:.0%})",
            f"{ms['tflite_float32']:.3f}",
            f"{ms['saved_model']:.3f} ({r['saved_model_vs_tflite_float32']:.1f}x)",
            f"{ms['keras']:.3f} ({r['keras_vs_tflite_float32']:.1f}x)",
            f"{ms['tflite_int8']:.3f} ({r['tflite_float32_vs_int8']:.2f})",
            f"{int8['action_agreement']:.3f} ({int8['unexplained_disagreements']})",
            f"{diff:.1e}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root_dirs", default="", help="trained folders, comma-separated")
    parser.add_argument(
        "--models", type=name_list(tuple(EXAMPLE_POLICIES), "model"), default=list(DEFAULT_MODELS)
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument(
        "--profile_ops",
        action="store_true",
        help="also time every op of TFLite float32, int8 and int8 with every op in int8",
    )
    parser.add_argument("--out", default="benchmarks/results/export.json")
    args = parser.parse_args(argv)
    for root_dir in filter(None, args.root_dirs.split(",")):
        if not os.path.exists(root_dir):
            raise UsageError(
                f"--root_dirs: {root_dir!r} does not exist "
                "(train it first, e.g. `make demo` for runs/demo/sit)."
            )
    if any(args.root_dirs.split(",")):
        folder_list(args.root_dirs, "root_dirs", "policy_network.json", "trained policy")
    for flag in ("rounds", "calls"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    check_out_file(args.out)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as work:
        for root_dir in filter(None, args.root_dirs.split(",")):
            name = "trained_" + os.path.basename(os.path.normpath(root_dir))
            print(f"== {name} ({root_dir})", flush=True)
            results[name] = benchmark_policy(name, root_dir, args.rounds, args.calls, work, args.profile_ops)
        for model in args.models:
            print(f"== {model} (untrained example policy)", flush=True)
            root_dir = os.path.join(work, f"train_{model}")
            write_example_policy_folder(root_dir, model)
            results[model] = benchmark_policy(
                model, root_dir, args.rounds, args.calls, work, args.profile_ops
            )
    table = format_table(results)
    op_tables = {
        name: format_op_table(name, r["op_profile"]) for name, r in results.items() if "op_profile" in r
    }
    print("\n" + "\n\n".join([table, *op_tables.values()]) + "\n")
    write_report(
        {"environment": environment(), "args": vars(args), "results": results, "table": table,
         "op_tables": op_tables},
        args.out,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
