"""A training run's learning curve from its ``collect/`` TensorBoard logs, as JSON.

    python benchmarks/training_curve.py --root_dir runs/lava_cnn --every 100000 \\
        --out benchmarks/reference/lavacrossing_cnn_curve.json

Reads ``Metrics/SuccessRate`` and ``Metrics/AverageReturn`` (the harness's
training metrics over the last 100 episodes, against environment steps) and
``charts/SPS``, and reports the first log at or after every ``--every`` steps,
the first step at which the success rate reached each of ``--thresholds``,
the last log, and the median steps/s.
"""

from __future__ import annotations

import sit_keras  # noqa: F401  (selects Keras 2 before TensorFlow is imported)

# isort: split

import argparse
import glob
import json
import os
import statistics
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

TAGS = {"Metrics/SuccessRate": "success", "Metrics/AverageReturn": "return", "charts/SPS": "sps"}


def read_logs(root_dir: str) -> list[dict[str, float]]:
    """One entry per logged environment step of ``<root_dir>/collect``: ``env_steps`` and ``TAGS`` values."""
    paths = sorted(glob.glob(os.path.join(root_dir, "collect", "events.out.tfevents.*")))
    if not paths:
        raise FileNotFoundError(f"No TensorBoard logs in {os.path.join(root_dir, 'collect')!r}.")
    by_step: dict[int, dict[str, float]] = {}
    for path in paths:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag in TAGS:
                    number = (
                        float(tf.make_ndarray(value.tensor))
                        if value.HasField("tensor")
                        else value.simple_value
                    )
                    by_step.setdefault(int(event.step), {})[TAGS[value.tag]] = number
    return [{"env_steps": step, **values} for step, values in sorted(by_step.items())]


def summarize(logs: Sequence[dict[str, float]], every: int, thresholds: Sequence[float]) -> dict[str, Any]:
    """The sampled curve, the steps to each success threshold, the last log and the median steps/s."""
    curve, next_mark = [], every
    for entry in logs:
        if entry["env_steps"] >= next_mark:
            curve.append(entry)
            next_mark = (entry["env_steps"] // every + 1) * every
    reached = {}
    for threshold in thresholds:
        first = next((e["env_steps"] for e in logs if e.get("success", 0.0) >= threshold), None)
        reached[f"{threshold:g}"] = first
    speeds = [e["sps"] for e in logs if "sps" in e]
    return {
        "curve": curve,
        "first_step_with_success_at_least": reached,
        "last": logs[-1],
        "median_env_steps_per_second": statistics.median(speeds) if speeds else None,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--every", type=int, default=100_000, help="curve points every this many steps")
    parser.add_argument(
        "--thresholds", default="0.5,0.8,0.9", help="success rates to report the first step of"
    )
    parser.add_argument("--out", default=None, help="JSON file (default: print only)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be >= 1. Received: {args.every}")
    try:
        thresholds = [float(t) for t in args.thresholds.split(",") if t]
        report = summarize(read_logs(args.root_dir), args.every, thresholds)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    text = json.dumps({"root_dir": args.root_dir, **report}, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
