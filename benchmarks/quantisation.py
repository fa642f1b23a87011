"""Quantised policies side by side: size, latency, agreement, behaviour and symmetry per quantisation.

For each trained policy folder (``--policies name=root_dir,...``), in one process:

- **export**: ``sit-export`` to TFLite in every quantisation
  (``export.tflite``: float32, float16, dynamic_int8, int8 and int16x8; the
  exporter's recipes and its parity gate, on its default 2048 rollout
  steps: the even steps calibrate int8 and int16x8, the odd ones check;
  rotated and flipped views too where the encoder is invariant). A model
  the runtime cannot run (the SiT family's int16x8, ``export.tflite``) is
  reported as such and not measured further;
- **agreement**: the parity report's greedy-action agreement with
  TensorFlow, overall and per view;
- **behaviour**: success rate and mean return of each TFLite model (greedy,
  ``ai_edge_litert``, one model per environment) over ``--num_episodes``
  episodes per view: upright and each transform the encoder promises
  invariance to (``TrainedPolicy.invariant_transforms``);
- **symmetry**: the largest change of the model's output (logits, Q-values
  or action) when held-out observations are transformed by each such
  transform (0 for an exactly invariant model); for a sensor-set policy
  (AttentionNeuron), the largest action change when one environment's
  held-out readings are replayed with the sensors in another order, and
  its behaviour with the sensors shuffled every episode (``"shuffled"``);
- **latency**: ms per call at batch 1 (what a robot runs) and batch 16,
  with XNNPACK (the default delegate), with TFLite's built-in kernels
  (XNNPACK off) and with its reference kernels (``BUILTIN_REF``: plain C++,
  what a port to a new processor starts from), one thread, on held-out
  observations. A latency is the median over ``--rounds`` of the mean call
  time; a ratio to float32 is the median of the per-round ratios (these
  machines are noisy). Each round times the models in a new order, each
  after ``WARM_CALLS`` untimed calls.

Usage::

    python benchmarks/quantisation.py --policies sit=runs/demo/sit,cnn=runs/demo/cnn \\
        [--num_episodes 200] [--rounds 7] [--calls 100] [--out benchmarks/results/quantisation.json]
"""

from __future__ import annotations

import sit_keras.quiet_start_one_thread  # noqa: F401  (first: one thread, no start-up chatter)

# isort: split

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from sit_keras import quiet
from sit_keras.agents import evaluate
from sit_keras.agents.environments.transforms import parse_transform
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    environment,
    parse_or_say_why,
    write_report,
)
from sit_keras.export.exporter import NUM_EXAMPLES, export_policy
from sit_keras.export.policy_model import TrainedPolicy, load_trained_policy
from sit_keras.export.rollouts import Example, collect_examples, split_steps
from sit_keras.export.runtime import TFLitePolicy
from sit_keras.export.tflite import QUANTIZATIONS, convert_function
from sit_keras.export.tflite_py_policy import TFLitePyPolicy

BATCH_SIZES = (1, 16)
KERNELS = {
    "xnnpack": OpResolverType.AUTO,
    "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    "reference": OpResolverType.BUILTIN_REF,
}
# The exporter's rollout seed: the same held-out steps as its parity report.
EXPORT_SEED = 20_000
# Untimed calls before each timed block of a round (module docstring).
WARM_CALLS = 10
# Held-out upright observations transformed for the symmetry error.
SYMMETRY_OBSERVATIONS = 64
# collect_examples' default number of environments: its examples cycle through them step by step.
ROLLOUT_ENVS = 4


def _interpreter(path: str, kernels: str) -> Any:
    return Interpreter(model_path=path, num_threads=1, experimental_op_resolver_type=KERNELS[kernels])


def _batched(examples: list[Example], batch_size: int) -> list[dict[str, np.ndarray]]:
    """The examples' inputs stacked into batches of ``batch_size`` (the remainder left out)."""
    count = len(examples) // batch_size
    return [
        {k: np.concatenate([e.inputs[k] for e in examples[i * batch_size : (i + 1) * batch_size]]) for k in
         examples[0].inputs}
        for i in range(count)
    ]  # fmt: skip


def _write_batch_models(
    policy: TrainedPolicy, examples: list[Example], batch_size: int, folder: str, quantizations: list[str]
) -> dict[str, str]:
    """The quantisations at ``batch_size``, with the export's recipes and calibration steps; their paths."""
    function = policy.serving_function(batch_size=batch_size)
    calibration = _batched(split_steps(examples)[0], batch_size)
    paths = {}
    for quantization in quantizations:
        flatbuffer = convert_function(
            function, policy.network, quantization, lambda: iter(calibration), allow_flex_ops=False
        )
        paths[quantization] = os.path.join(folder, f"batch{batch_size}_{quantization}.tflite")
        with open(paths[quantization], "wb") as f:
            f.write(flatbuffer)
    return paths


def measure_latency(
    paths: dict[int, dict[str, str]], inputs: dict[int, list[dict]], rounds: int, calls: int
) -> dict[str, Any]:
    """``ms[batch][kernels][quantisation]`` and ``vs_float32`` (per-round ratio medians) of every model."""
    runners = {}
    for batch_size, by_quantization in paths.items():
        for kernels in KERNELS:
            for quantization, path in by_quantization.items():
                runner = _interpreter(path, kernels).get_signature_runner()
                runner(**inputs[batch_size][0])  # first call: allocation
                runners[(batch_size, kernels, quantization)] = runner
    per_round: dict[tuple, list[float]] = {key: [] for key in runners}
    keys = list(runners)
    for round_index in range(rounds):
        # A new order each round, and warm calls before the timed ones: the model timed first after
        # another one runs with a cold cache (float32, always first, once measured 0.6-0.8x float16,
        # which runs the same float32 kernels).
        for position in np.random.default_rng(round_index).permutation(len(keys)):
            key = keys[position]
            runner, batch = runners[key], inputs[key[0]]
            for i in range(WARM_CALLS):
                runner(**batch[i % len(batch)])
            start = time.perf_counter()
            for i in range(calls):
                runner(**batch[i % len(batch)])
            per_round[key].append(1e3 * (time.perf_counter() - start) / calls)
    ms: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    for (batch_size, kernels, quantization), times in per_round.items():
        float32 = per_round[(batch_size, kernels, "float32")]
        batch = f"batch{batch_size}"
        ms.setdefault(batch, {}).setdefault(kernels, {})[quantization] = statistics.median(times)
        ratios.setdefault(batch, {}).setdefault(kernels, {})[quantization] = statistics.median(
            t / f for t, f in zip(times, float32, strict=True)
        )
    return {"ms": ms, "vs_float32": ratios}


def sensor_shuffle_error(path: str, examples: list[Example], num_envs: int) -> dict[str, float]:
    """Largest action change when every reading of one environment's held-out steps is shuffled.

    The steps of the first environment, in order, run through ``TFLitePolicy`` (which carries the
    recurrent state) twice: as recorded, and with one fixed random order of the sensors.
    """
    readings = [e.inputs["observation"][0] for e in examples if e.view == "none"][::num_envs]
    order = np.random.default_rng(0).permutation(readings[0].shape[0])
    actions = []
    for permutation in (np.arange(order.size), order):
        policy = TFLitePolicy(path)
        actions.append(np.stack([policy.step(r[permutation])["action"] for r in readings]))
    return {"shuffled": float(np.max(np.abs(actions[0].astype(np.float64) - actions[1])))}


def symmetry_error(path: str, examples: list[Example], transforms: tuple[str, ...]) -> dict[str, float]:
    """Largest output change per transform, over held-out upright observations (batch-1 model)."""
    upright = [e.inputs for e in examples if e.view == "none"][:SYMMETRY_OBSERVATIONS]
    runner = _interpreter(path, "xnnpack").get_signature_runner()
    errors = {}
    for name in transforms:
        image_fn, _ = parse_transform(name, upright[0]["observation"].shape[1:])
        worst = 0.0
        for inputs in upright:
            moved = {**inputs, "observation": np.ascontiguousarray(image_fn(inputs["observation"]))}
            a, b = runner(**inputs), runner(**moved)
            key = next(k for k in ("logits", "q_values", "action") if k in a)
            worst = max(worst, float(np.max(np.abs(a[key].astype(np.float64) - b[key]))))
        errors[name] = worst
    return errors


def benchmark_policy(name: str, root_dir: str, args: argparse.Namespace, work: str) -> dict[str, Any]:
    """Exports ``root_dir`` in every quantisation and measures each model (module docstring)."""
    policy = load_trained_policy(root_dir)
    views = policy.invariant_transforms
    report = export_policy(
        root_dir, os.path.join(work, name), model_name=name, formats=["tflite"], quantizations=QUANTIZATIONS,
        seed=EXPORT_SEED, allow_parity_failure=True,
    )  # fmt: skip
    exported = {q: report["models"][f"tflite_{q}"] for q in QUANTIZATIONS}
    result: dict[str, Any] = {
        "root_dir": root_dir,
        "env": policy.description.env_name,
        "views": ["none", *views],
        "bytes": {q: m["bytes"] for q, m in exported.items()},
        "parity": {q: m["parity"] for q, m in exported.items()},
    }
    print(f"   exported: {result['bytes']}", flush=True)
    # What the runtime refused to run (parity says why) is not measured further.
    models = {q: m for q, m in exported.items() if "runtime_error" not in m["parity"]}
    result["cannot_run"] = {q: m["parity"]["runtime_error"] for q, m in exported.items() if q not in models}
    # The export's rollout steps again (greedy policy, same seeds: the same steps).
    examples = collect_examples(policy, NUM_EXAMPLES, seed=EXPORT_SEED, transforms=views)
    held_out = split_steps(examples)[1]
    if views:
        result["symmetry_error"] = {q: symmetry_error(m["path"], held_out, views) for q, m in models.items()}
    elif policy.takes_sensor_set:
        result["symmetry_error"] = {
            q: sensor_shuffle_error(m["path"], examples, ROLLOUT_ENVS) for q, m in models.items()
        }
    paths = {1: {q: m["path"] for q, m in models.items()}}
    inputs = {1: [e.inputs for e in held_out]}
    for batch_size in BATCH_SIZES[1:]:
        folder = os.path.join(work, name)
        paths[batch_size] = _write_batch_models(policy, examples, batch_size, folder, [*models])
        inputs[batch_size] = _batched(held_out, batch_size)
    result["latency"] = measure_latency(paths, inputs, args.rounds, args.calls)
    print(f"   latency: {result['latency']['vs_float32']}", flush=True)
    env_kwargs = dict(policy.description.env_kwargs)
    behaviour = {}
    for quantization, model in models.items():
        tflite_policy = TFLitePyPolicy(model["path"])
        behaviour[quantization] = evaluate.evaluate(
            tflite_policy, policy.description.env_name, [None, *views], num_episodes=args.num_episodes,
            env_kwargs=env_kwargs,
        )  # fmt: skip
        if policy.takes_sensor_set:  # AttentionNeuron Table 2's "shuffled": a new order every episode
            behaviour[quantization]["shuffled"] = evaluate.evaluate(
                tflite_policy, policy.description.env_name, num_episodes=args.num_episodes,
                env_kwargs={**env_kwargs, "sensor_permutation": "once"},
            )["none"]  # fmt: skip
        print(f"   {quantization}: {_behaviour_text(behaviour[quantization])}", flush=True)
    result["behaviour"] = behaviour
    return result


def _behaviour_text(by_view: dict[str, dict[str, float]]) -> str:
    return ", ".join(
        f"{view} {s['success_rate']:.2f} ({s['mean_return']:.1f})" for view, s in by_view.items()
    )


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """The deployment table: one row per policy and quantisation."""
    lines = [
        "| policy | quantisation | kB | b1 ms XNNPACK (x f32) | b16 ms XNNPACK (x f32) "
        "| b1 ms built-in (x f32) | b1 ms reference (x f32) | agreement (worst view) "
        "| success, views avg (return) | symmetry error |",
        "|" + " --- |" * 10,
    ]
    for name, r in results.items():
        ms, ratio = r["latency"]["ms"], r["latency"]["vs_float32"]
        for q in QUANTIZATIONS:
            if q in r["cannot_run"]:
                size = f"{r['bytes'][q] / 1e3:.0f}"
                lines.append(f"| {name} | {q} | {size} | the runtime cannot run it |" + " |" * 6)
                continue
            parity = r["parity"][q]
            worst = min(parity.get("action_agreement_by_view", {"": parity["action_agreement"]}).values())
            runs = r["behaviour"][q].values()
            success = statistics.mean(s["success_rate"] for s in runs)
            returns = statistics.mean(s["mean_return"] for s in runs)
            symmetry = max(r.get("symmetry_error", {}).get(q, {}).values(), default=None)
            cells = [
                name, q, f"{r['bytes'][q] / 1e3:.0f}",
                f"{ms['batch1']['xnnpack'][q]:.3f} ({ratio['batch1']['xnnpack'][q]:.2f})",
                f"{ms['batch16']['xnnpack'][q]:.3f} ({ratio['batch16']['xnnpack'][q]:.2f})",
                f"{ms['batch1']['builtin'][q]:.3f} ({ratio['batch1']['builtin'][q]:.2f})",
                f"{ms['batch1']['reference'][q]:.3f} ({ratio['batch1']['reference'][q]:.2f})",
                f"{parity['action_agreement']:.3f} ({worst:.3f})",
                f"{success:.3f} ({returns:.2f})",
                "-" if symmetry is None else f"{symmetry:.1e}",
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _policies(text: str) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in filter(None, text.split(","))]
    if not pairs or any(len(p) != 2 or not p[0] or not p[1] for p in pairs):
        raise argparse.ArgumentTypeError(f"expected name=root_dir[,name=root_dir...]; received {text!r}")
    return dict(pairs)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", type=_policies, required=True, help="name=root_dir,... (trained)")
    parser.add_argument("--num_episodes", type=int, default=200, help="episodes per model and view")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--out", default="benchmarks/results/quantisation.json")
    args = parser.parse_args(argv)
    for name, root_dir in args.policies.items():
        if not os.path.isdir(root_dir):
            raise UsageError(
                f"--policies: {root_dir!r} ({name}) is not a folder; train it first (e.g. `make demo`)."
            )
        if not os.path.isfile(os.path.join(root_dir, "policy_network.json")):
            raise UsageError(
                f"--policies: {root_dir!r} ({name}) holds no trained policy (policy_network.json)."
            )
    for value, flag in ((args.num_episodes, "num_episodes"), (args.rounds, "rounds"), (args.calls, "calls")):
        if value < 1:
            raise UsageError(f"--{flag} must be at least 1; received {value}.")
    check_out_file(args.out)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2

    start = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory() as work, quiet.filtered_stderr():
        for name, root_dir in args.policies.items():
            print(f"== {name} ({root_dir})", flush=True)
            results[name] = benchmark_policy(name, root_dir, args, work)
    table = format_table(results)
    print("\n" + table + "\n")
    write_report(
        {"command": shlex.join(["python", "benchmarks/quantisation.py", *(argv or sys.argv[1:])]),
         "environment": environment(), "args": {**vars(args), "policies": args.policies},
         "wall_seconds": time.perf_counter() - start, "results": results, "table": table},
        args.out,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
