"""How much of a SiT's representation varies between LavaCrossing states, stage by stage (issue 24).

A LavaCrossing level is mostly floor and wall; what tells two states apart
(the agent, its heading, the lava gap, the goal) is a few cells. An
encoder whose class token averages its tokens keeps mainly what all states
share, and PPO's first, reward-free updates then turn such an actor blind
(``ppo_noise_phase.py``, ``ppo_trace.py``). This script measures, for fresh
encoders of several seeds on the same held-out states, the **state signal**
after each stage of Fig. 3 (``SiTEncoder.stages``): the features' standard
deviation across states (mean over features) divided by the root mean square
of their mean over states. 1 means the part that changes with the state is
as large as the part every state shares; 0, a constant.

It also counts the units of the ReLU head that are off on every state
(dead) or on for every state (linear): a head whose units are all one or the
other cannot separate states.

Usage::

    python benchmarks/sit_state_signal.py \\
        --models sit_small_chiral_m4_corners,sit_small_chiral_m4_corners_sharp --seeds 0,1,2,3 \\
        --out benchmarks/reference/lavacrossing_state_signal.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    name_list,
    parse_or_say_why,
    seed_list,
    write_report,
)
from sit_keras.models import build_encoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lavacrossing_probe import HELDOUT_SEED_OFFSET, IMAGE_SHAPE, MODELS, collect  # noqa: E402

SIT_MODELS = [name for name, spec in MODELS.items() if spec["encoder"] == "sit"]


def state_signal(features: np.ndarray) -> float:
    """Spread across states (axis 0) over the size of the shared part: mean std / RMS of the mean."""
    flat = features.reshape(len(features), -1).astype(np.float64)
    shared = float(np.sqrt(np.mean(flat.mean(axis=0) ** 2)))
    return float(flat.std(axis=0).mean() / shared) if shared > 0 else float("inf")


def measure(model: str, seed: int, images: tf.Tensor) -> dict[str, Any]:
    """The state signal after every stage of a fresh ``model`` encoder (``seed``) and its head's unit use."""
    spec = MODELS[model]
    tf_keras.utils.set_random_seed(seed)
    encoder = build_encoder(spec["encoder"], IMAGE_SHAPE, **spec["kwargs"])
    stages = encoder.stages(images)
    active = encoder.head(stages["token"]).numpy() > 0
    return {
        "seed": seed,
        "state_signal": {name: state_signal(value.numpy()) for name, value in stages.items()},
        "head_units_dead": float(np.mean(~active.any(axis=0))),
        "head_units_always_on": float(np.mean(active.all(axis=0))),
    }


def mean_over_seeds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-seed measurements averaged over seeds."""
    return {
        "state_signal": {
            stage: float(np.mean([r["state_signal"][stage] for r in runs]))
            for stage in runs[0]["state_signal"]
        },
        "head_units_dead": float(np.mean([r["head_units_dead"] for r in runs])),
        "head_units_always_on": float(np.mean([r["head_units_always_on"] for r in runs])),
    }


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=name_list(SIT_MODELS, "--models"),
                        default=["sit_small_chiral_m4_corners", "sit_small_chiral_m4_corners_sharp"],
                        help=f"comma-separated, some of {', '.join(SIT_MODELS)}")  # fmt: skip
    parser.add_argument("--seeds", default="0,1,2,3", help="comma-separated initialisation seeds")
    parser.add_argument("--num_states", type=int, default=500, help="held-out states measured")
    parser.add_argument("--out", default=None, help="JSON report")
    args = parser.parse_args(argv)
    args.seeds = seed_list(args.seeds)
    if args.num_states < 2:
        raise UsageError(f"--num_states must be >= 2; received {args.num_states}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    start = time.perf_counter()
    # Epsilon-expert states on held-out levels, as ppo_noise_phase.py and ppo_trace.py measure on.
    images = tf.constant(collect(args.num_states, HELDOUT_SEED_OFFSET, 0.3, np.random.default_rng(1))["obs"])
    results = {}
    for model in args.models:
        runs = [measure(model, seed, images) for seed in args.seeds]
        results[model] = {"mean": mean_over_seeds(runs), "seeds": runs}
        mean = results[model]["mean"]
        signal = ", ".join(f"{k} {v:.3f}" for k, v in mean["state_signal"].items())
        print(f"{model}: state signal {signal}; head units dead {mean['head_units_dead']:.2f}")
    report = {
        "what": "state signal (std across states / RMS of the shared part) after each stage, fresh SiTs",
        "command": command_line("sit_state_signal.py", argv),
        "commit": current_commit(),
        "measured_states": int(images.shape[0]),
        "models": {m: MODELS[m] for m in args.models},
        "results": results,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
