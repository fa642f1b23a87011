"""The main job, ``sit-demo`` (``make demo``): train, evaluate upright and rotated, save.

1. Trains two PPO policies on the same MiniGrid task with the same settings
   (``configs/demo/*.gin``): an SiT (rotation-invariant GSA, appendix F.1 in
   small) and the CNN baseline.
2. Evaluates each policy (greedy and sampling), and a random policy, on upright observations
   and on observations rotated by 90, 180 and 270 degrees (Table 4's
   "rotations"). Actions are relative to the agent's heading, so the right
   action for a rotated view is the upright one: a rotation-invariant policy
   keeps its score, a CNN need not.
3. Exports the SiT policy (``sit-export``) to a TF Serving SavedModel and to
   TFLite (float32 and int8, ``export.tflite``) under ``<root_dir>/sit/export``,
   and runs the TFLite models in the environment with ``export.runtime``,
   upright and rotated, as a robot would.
4. Prints the table, and each model's training speed: env steps/s (collect +
   train wall time per env step, as the trainer times each iteration: its
   ``SPS``; median over the iterations after the first) and its ratio to the
   SiT's, from this run. Writes ``<root_dir>/results.json`` (speeds under
   ``"speed"``, each training's results, with the trainer's own final
   evaluation, under ``"training"``); TensorBoard logs (``eval/`` included),
   ``evaluations.json`` and TF-Agents SavedModel policies stay under
   ``<root_dir>/<model>/``.

A rerun with the same ``--root_dir`` resumes (or skips) the training.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gin
from tf_agents.policies import random_py_policy

from sit_keras.agents import evaluate, train
from sit_keras.agents.environments import load
from sit_keras.command_line import ONE_LINE_HELP, ArgumentParser, add_verbose_flag, quiet_library_logs
from sit_keras.export.exporter import export_policy
from sit_keras.export.tflite_py_policy import TFLitePyPolicy
from sit_keras.mixed_precision import PRECISIONS

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "demo")
MODELS = ("sit", "cnn")
ROTATIONS = (None, "rot90", "rot180", "rot270")
# The trained policy samples its actions; its greedy version takes the most likely one.
POLICIES = {"greedy": "greedy_policy", "sampling": "policy"}
EXPORTED_MODEL = "sit"
TFLITE_QUANTIZATIONS = ("float32", "int8")


def train_model(model: str, root_dir: str, config_dir: str, bindings: Sequence[str] = ()) -> dict[str, float]:
    """Trains ``configs/demo/<model>.gin`` into ``root_dir/<model>``; returns ``train_eval``'s results
    (the last collect metrics, ``history`` and ``evaluations``)."""
    config = os.path.join(config_dir, f"{model}.gin")
    gin.clear_config()
    train.parse_gin([config], bindings)
    try:
        return train.train_eval(os.path.join(root_dir, model))
    finally:
        gin.clear_config()


def _env_name(config_dir: str) -> str:
    gin.clear_config()
    train.parse_gin([os.path.join(config_dir, "sit.gin")], [])
    try:
        return gin.query_parameter("train_eval.env_name")
    finally:
        gin.clear_config()


def evaluate_models(
    root_dir: str, env_name: str, num_episodes: int
) -> dict[str, dict[str, dict[str, float]]]:
    """``{policy: {transform: summary}}``: each model's greedy and sampling policy, and a random policy."""
    results = {}
    for model in MODELS:
        for kind, saved in POLICIES.items():
            policy = evaluate.load_policy(os.path.join(root_dir, model, "policies", saved))
            results[f"{model} ({kind})"] = evaluate.evaluate(
                policy, env_name, ROTATIONS, num_episodes=num_episodes
            )
    env = load(env_name, num_envs=8)
    random_policy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), outer_dims=(8,))
    env.close()
    results["random"] = evaluate.evaluate(random_policy, env_name, ROTATIONS, num_episodes=num_episodes)
    return results


def export_and_run(root_dir: str, env_name: str, num_episodes: int) -> tuple[dict, dict]:
    """Exports the SiT policy (SavedModel + TFLite), evaluates the TFLite models; returns (report, results).

    A rerun adds a SavedModel version (TF Serving versions are immutable) and replaces the TFLite files.
    Every TFLite model is checked against TensorFlow on held-out rollout steps, upright, rotated and
    flipped (``export.parity``); one that fails is still exported and evaluated, and listed under
    ``"parity_failures"`` in the report: the demo shows what quantization does rather than stopping
    before its table.
    """
    model_dir = os.path.join(root_dir, EXPORTED_MODEL)
    output_dir = os.path.join(model_dir, "export")
    os.makedirs(output_dir, exist_ok=True)
    report = export_policy(
        model_dir, output_dir, model_name="sit_policy", quantizations=TFLITE_QUANTIZATIONS,
        allow_parity_failure=True,
    )  # fmt: skip
    results = {}
    for quantization in TFLITE_QUANTIZATIONS:
        policy = TFLitePyPolicy(report["models"][f"tflite_{quantization}"]["path"])
        results[f"{EXPORTED_MODEL} (TFLite {quantization})"] = evaluate.evaluate(
            policy, env_name, ROTATIONS, num_episodes=num_episodes
        )
    return report, results


def training_speed(training: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Env steps/s of each model's training in this run, and each model's ratio to the first model's.

    ``env_steps_per_second[model]``: the median of the trainer's per-iteration
    ``SPS`` (env steps over collect + train wall time), the first iteration
    (tracing) left out when there are others; ``None`` when no iteration ran
    (a resumed, finished run). ``iterations[model]``: how many were used.
    ``ratios["<model> / <first>"]``: ``env_steps_per_second`` over the first's.

    >>> speed = training_speed({"sit": {"history": [{"SPS": 9.0}, {"SPS": 50.0}, {"SPS": 60.0}]},
    ...                         "cnn": {"history": [{"SPS": 100.0}, {"SPS": 600.0}]}})
    >>> speed["env_steps_per_second"], speed["ratios"]
    ({'sit': 55.0, 'cnn': 600.0}, {'cnn / sit': 10.909090909090908})
    """
    speeds: dict[str, float | None] = {}
    iterations: dict[str, int] = {}
    for model, results in training.items():
        history = list(results.get("history", []))
        timed = history[1:] or history
        speeds[model] = statistics.median(h["SPS"] for h in timed) if timed else None
        iterations[model] = len(timed)
    first, *others = list(speeds) or [None]
    ratios = {
        f"{model} / {first}": speeds[model] / speeds[first]
        for model in others
        if speeds[model] is not None and speeds[first]
    }
    return {"env_steps_per_second": speeds, "iterations": iterations, "ratios": ratios}


def format_speed_table(speed: Mapping[str, Any]) -> str:
    """A markdown table of env steps/s per model and the ratio to the first model."""
    speeds = speed["env_steps_per_second"]
    first = next(iter(speeds), "")
    lines = [f"| model | env steps/s | x {first} | iterations |", "| --- | ---: | ---: | ---: |"]
    for model, value in speeds.items():
        ratio = 1.0 if model == first and value else speed["ratios"].get(f"{model} / {first}")
        cells = [
            "n/a (no iteration ran)" if value is None else f"{value:.1f}",
            "" if ratio is None else f"{ratio:.2f}",
            str(speed["iterations"][model]),
        ]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    """A markdown table of success rates (and mean returns) per model and rotation."""
    header = "| policy | upright | rot90 | rot180 | rot270 | rotations avg |"
    lines = [header, "|" + " --- |" * 6]
    for model, by_transform in results.items():
        cells = [by_transform[t or "none"] for t in ROTATIONS]
        rotated = [c["success_rate"] for c in cells[1:]]
        row = [f"{c['success_rate']:.2f} ({c['mean_return']:.2f})" for c in cells]
        lines.append(f"| {model} | " + " | ".join(row) + f" | {sum(rotated) / len(rotated):.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sit-demo``."""
    parser = ArgumentParser(description=__doc__.split("\n")[0], formatter_class=ONE_LINE_HELP)
    common = parser.add_argument_group("common flags")
    common.add_argument("--root_dir", default="runs/demo", help="output folder (resumes if it exists)")
    common.add_argument("--num_episodes", type=int, default=200, help="evaluation episodes per rotation")
    advanced = parser.add_argument_group("advanced flags")
    advanced.add_argument("--config_dir", default=CONFIG_DIR, help="folder with sit.gin and cnn.gin")
    advanced.add_argument(
        "--gin_bindings", action="append", default=[], help="extra bindings for both runs (repeatable)"
    )
    advanced.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="float32",
        metavar="POLICY",
        help=f"train_eval.precision of both runs: {', '.join(PRECISIONS)}",
    )
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    if args.num_episodes < 1:
        parser.error(f"--num_episodes must be >= 1. Received: {args.num_episodes}")
    quiet_library_logs()
    bindings = [*args.gin_bindings, f"train_eval.precision = '{args.precision}'"]

    start = time.perf_counter()
    training = {}
    for model in MODELS:
        print(f"== training {model} ({os.path.join(args.config_dir, model + '.gin')})", flush=True)
        training[model] = train_model(model, args.root_dir, args.config_dir, bindings)
    env_name = _env_name(args.config_dir)
    print(f"== evaluating on {env_name}: {args.num_episodes} episodes per rotation", flush=True)
    results = evaluate_models(args.root_dir, env_name, args.num_episodes)
    print(f"== exporting {EXPORTED_MODEL} to SavedModel and TFLite, and running TFLite", flush=True)
    export_report, tflite_results = export_and_run(args.root_dir, env_name, args.num_episodes)
    results.update(tflite_results)
    table = format_table(results)
    speed = training_speed(training)
    minutes = (time.perf_counter() - start) / 60
    print(f"\nSuccess rate (mean return) on {env_name}, {args.num_episodes} episodes each:\n\n{table}\n")
    print(
        "Training speed, env steps/s (collect + train wall time; median over the iterations after "
        f"the first), this run:\n\n{format_speed_table(speed)}\n"
    )
    with open(os.path.join(args.root_dir, "results.json"), "w") as f:
        json.dump(
            {"env": env_name, "precision": args.precision, "training": training, "speed": speed,
             "evaluation": results, "export": export_report, "minutes": minutes},
            f, indent=2,
        )  # fmt: skip
    print(f"{minutes:.1f} min. Results: {os.path.join(args.root_dir, 'results.json')}")
    print(f"TensorBoard: tensorboard --logdir {args.root_dir}")
    print(f"Saved policies: {os.path.join(args.root_dir, '<model>', 'policies', 'greedy_policy')}")
    for name, model in export_report["models"].items():
        parity = model.get("parity")
        agreement = f", TF vs TFLite action agreement {parity['action_agreement']:.3f}" if parity else ""
        verdict = ""
        if parity:
            passed = name not in export_report.get("parity_failures", [])
            verdict = " PASSED parity" if passed else " FAILED parity: do not deploy it"
        print(f"Exported {name}: {model['path']} ({model['bytes'] / 1e3:.0f} kB{agreement}){verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
