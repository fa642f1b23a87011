"""A training run's learning curve from its ``collect/`` TensorBoard logs, as JSON.

    python benchmarks/training_curve.py --root_dir runs/lava_cnn --every 100000 \\
        --out benchmarks/reference/lavacrossing_cnn_curve.json

Reads ``Metrics/SuccessRate`` and ``Metrics/AverageReturn`` (the harness's
training metrics over the last 100 episodes, against environment steps) and
``charts/SPS``, and reports the first log at or after every ``--every`` steps,
the first step at which the success rate reached each of ``--thresholds``
(the logs hold float32, so a logged 0.90 reads 0.8999999762 and counts as
0.9 within ``FLOAT32_TOLERANCE``; committed reports computed before that rule
say so in their ``first_step_rule``: their 0.9 is the first step at 0.91 or
more),
the last log, and the median steps/s.

``--diagnostics_every N`` (PPO runs) adds the learner's diagnostics from
``train/``: the mean of each of ``DIAGNOSTICS`` over the train steps of every
``N`` environment steps. A train step is one minibatch, so it stands for
``num_envs * collect_steps_per_env / (num_epochs * num_minibatches)``
environment steps (read from the run's ``config.gin``).
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from sit_keras.benchmarking import SentenceParser, UsageError, check_out_file, parse_or_say_why

TAGS = {"Metrics/SuccessRate": "success", "Metrics/AverageReturn": "return", "charts/SPS": "sps"}
DIAGNOSTICS = {
    "Losses/entropy": "entropy",
    "losses/approx_kl": "approx_kl",
    "losses/clipfrac": "clipfrac",
    "Losses/value_estimation_loss": "value_loss",
    "losses/explained_variance": "explained_variance",
}
# Below float32's spacing near 1 (6e-8 x 2) times a few, far below one episode in 100 (0.01).
FLOAT32_TOLERANCE = 1e-6
FIRST_STEP_RULE = (
    "float32: a logged success rate counts as reaching a threshold within benchmarks/training_curve.py's "
    "FLOAT32_TOLERANCE (a logged 0.90 is 0.9)"
)
_PPO_SHAPE = ("train_eval.num_envs", "ppo.collect_steps_per_env", "ppo.num_epochs", "ppo.num_minibatches")


def read_logs(root_dir: str, folder: str = "collect", tags: dict[str, str] = TAGS) -> list[dict[str, float]]:
    """One entry per logged step of ``<root_dir>/<folder>``: ``step`` -> the ``tags`` values (renamed)."""
    paths = sorted(glob.glob(os.path.join(root_dir, folder, "events.out.tfevents.*")))
    if not paths:
        raise FileNotFoundError(f"No TensorBoard logs in {os.path.join(root_dir, folder)!r}.")
    by_step: dict[int, dict[str, float]] = {}
    for path in paths:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag in tags:
                    number = (
                        float(tf.make_ndarray(value.tensor))
                        if value.HasField("tensor")
                        else value.simple_value
                    )
                    by_step.setdefault(int(event.step), {})[tags[value.tag]] = number
    key = "env_steps" if folder == "collect" else "train_step"
    return [{key: step, **values} for step, values in sorted(by_step.items())]


def writers(root_dir: str, folder: str = "collect") -> list[tuple[float, list[tuple[int, float]]]]:
    """Each event file of ``<root_dir>/<folder>`` (one per process that trained the run), oldest first: the
    Unix time its writer was created (from its name, ``events.out.tfevents.<time>.<host>...``) and the
    (step, wall time) of each logged ``charts/SPS``."""
    paths = glob.glob(os.path.join(root_dir, folder, "events.out.tfevents.*"))
    files = []
    for path in paths:
        created = re.match(r"events\.out\.tfevents\.(\d+)\.", os.path.basename(path))
        if created is None:
            continue
        logged = [
            (int(event.step), event.wall_time)
            for event in tf.compat.v1.train.summary_iterator(path)
            if any(value.tag == "charts/SPS" for value in event.summary.value)
        ]
        files.append((float(created.group(1)), logged))
    return sorted(files)


def env_steps_per_train_step(root_dir: str) -> float:
    """Environment steps per PPO minibatch step, from the run's ``config.gin``."""
    path = os.path.join(root_dir, "config.gin")
    try:
        with open(path) as f:
            text = f.read()
    except OSError as error:
        raise FileNotFoundError(f"No run configuration at {path!r} ({error.strerror}).") from None
    values = {}
    for name in _PPO_SHAPE:
        match = re.search(rf"^{re.escape(name)} = (\d+)$", text, re.MULTILINE)
        if match is None:
            raise ValueError(f"{path!r} has no {name} binding: --diagnostics_every needs a PPO run.")
        values[name] = int(match.group(1))
    num_envs, steps, epochs, minibatches = (values[name] for name in _PPO_SHAPE)
    return num_envs * steps / (epochs * minibatches)


def diagnostics(train_logs: Sequence[dict[str, float]], per_train_step: float, every: int) -> list[dict]:
    """The mean of each ``DIAGNOSTICS`` value over the train steps of every ``every`` env steps.

    A run ends on a whole iteration, a little past its budget: a last window
    with less than half the train steps of the one before joins that one.
    """
    windows: dict[int, list[dict[str, float]]] = {}
    for entry in train_logs:
        env_steps = entry["train_step"] * per_train_step
        windows.setdefault(int(env_steps // every), []).append(entry)
    keys = sorted(windows)
    if len(keys) > 1 and 2 * len(windows[keys[-1]]) < len(windows[keys[-2]]):
        windows[keys[-2]] += windows.pop(keys[-1])
    rows = []
    for window, entries in sorted(windows.items()):
        row: dict[str, Any] = {"env_steps": (window + 1) * every, "train_steps": len(entries)}
        for name in DIAGNOSTICS.values():
            numbers = [e[name] for e in entries if name in e]
            if numbers:
                row[name] = round(statistics.fmean(numbers), 5)
        rows.append(row)
    return rows


def summarize(logs: Sequence[dict[str, float]], every: int, thresholds: Sequence[float]) -> dict[str, Any]:
    """The sampled curve, the steps to each success threshold, the last log and the median steps/s."""
    curve, next_mark = [], every
    for entry in logs:
        if entry["env_steps"] >= next_mark:
            curve.append(entry)
            next_mark = (entry["env_steps"] // every + 1) * every
    reached = {}
    for threshold in thresholds:
        # The logs hold float32: a success rate of 0.90 reads back as 0.8999999762, below the float64 0.9.
        at_least = threshold - FLOAT32_TOLERANCE
        first = next((e["env_steps"] for e in logs if e.get("success", 0.0) >= at_least), None)
        reached[f"{threshold:g}"] = first
    speeds = [e["sps"] for e in logs if "sps" in e]
    return {
        "curve": curve,
        "first_step_with_success_at_least": reached,
        "last": logs[-1],
        "median_env_steps_per_second": statistics.median(speeds) if speeds else None,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--every", type=int, default=100_000, help="curve points every this many steps")
    parser.add_argument(
        "--thresholds", default="0.5,0.8,0.9", help="success rates to report the first step of"
    )
    parser.add_argument(
        "--diagnostics_every", type=int, default=0, help="PPO learner diagnostics every this many steps"
    )
    parser.add_argument("--out", default=None, help="JSON file (default: print only)")
    args = parser.parse_args(argv)
    if args.every < 1:
        raise UsageError(f"--every must be at least 1; received {args.every}.")
    if args.diagnostics_every < 0:
        raise UsageError(f"--diagnostics_every must be at least 0; received {args.diagnostics_every}.")
    try:
        thresholds = [float(t) for t in args.thresholds.split(",") if t]
    except ValueError:
        thresholds = [float("nan")]
    if not all(math.isfinite(t) for t in thresholds):
        raise UsageError(f"--thresholds must be comma-separated numbers; received {args.thresholds!r}.")
    if not os.path.isdir(args.root_dir):
        raise UsageError(f"--root_dir: {args.root_dir!r} is not a folder.")
    folders = ("collect", "train") if args.diagnostics_every else ("collect",)
    for folder in folders:
        if not glob.glob(os.path.join(args.root_dir, folder, "events.out.tfevents.*")):
            raise UsageError(f"--root_dir: no TensorBoard logs in {os.path.join(args.root_dir, folder)!r}.")
    if args.diagnostics_every:
        try:
            env_steps_per_train_step(args.root_dir)
        except (ValueError, FileNotFoundError) as error:
            raise UsageError(f"--diagnostics_every: {error}") from None
    check_out_file(args.out, folder_must_exist=True)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    try:
        thresholds = [float(t) for t in args.thresholds.split(",") if t]
        report = summarize(read_logs(args.root_dir), args.every, thresholds)
        if args.diagnostics_every:
            train_logs = read_logs(args.root_dir, "train", DIAGNOSTICS)
            per_train_step = env_steps_per_train_step(args.root_dir)
            report["learner_diagnostics"] = diagnostics(train_logs, per_train_step, args.diagnostics_every)
    except (ValueError, FileNotFoundError) as error:
        print(f"training_curve.py: {error}", file=sys.stderr)
        return 2
    text = json.dumps({"root_dir": args.root_dir, **report}, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
