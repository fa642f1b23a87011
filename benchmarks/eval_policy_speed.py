"""The evaluation policy's action with the native kernels and with builtin ops only, side by side.

The trainers' evaluations (``Evaluator``) trace their in-process policy inside
``native.forward_passes()``, as the collection driver does, so its encoder may
run the native kernels; a SavedModel's signatures keep the builtin ops. For
each model (a training config's actor encoder, or an encoder name, as
``encoders.py`` takes them, at its image size) this script builds the actor
network the trainers build (``EncoderActorNetwork``; ``--num_actions``
discrete actions, 15 as Procgen's) and TF-Agents' greedy policy on it, and
wraps it as the Evaluator does (``PyTFEagerPolicy``) twice: traced inside
``forward_passes()`` ("native") and inside ``builtin_only()`` ("builtin").
Each round calls both once on the same ``--batch`` observations (uniform
random images; ``--batch`` 10 is the Evaluator's default number of
environments), after ``--warmup`` calls each. It prints, per model, the
medians in ms per batched step, their ratio (native over builtin) and the
median of the per-round ratios, and writes them as JSON.

Usage::

    python benchmarks/eval_policy_speed.py
        [--models configs/procgen/caveflyer_sit.gin@64,configs/demo/sit.gin@14] [--batch 10]
        [--rounds 15] [--warmup 3] [--out benchmarks/results/eval_policy_speed.json]
    python benchmarks/eval_policy_speed.py --quick      # a smoke run, seconds
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.policies import actor_policy, greedy_policy, py_tf_eager_policy
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from sit_keras import native
from sit_keras.agents.networks.actor_critic import EncoderActorNetwork
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encoders import parse_model  # noqa: E402

DEFAULT_MODELS = "configs/procgen/caveflyer_sit.gin@64,configs/demo/sit.gin@14"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "eval_policy_speed.json"
FORMS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "native": native.forward_passes,
    "builtin": native.builtin_only,
}


def parse_spec(text: str) -> tuple[str, int]:
    """``"configs/demo/sit.gin@14"`` -> ``("configs/demo/sit.gin", 14)``; a bad item raises ``UsageError``."""
    model, at, size = text.rpartition("@")
    if not at or not model or not size.isdigit() or int(size) < 1:
        raise UsageError(f"--models takes MODEL@IMAGE_SIZE items, e.g. sit@64. Received: {text!r}.")
    try:
        parse_model(model)
    except ValueError as error:
        raise UsageError(f"--models: {error}.") from None
    return model, int(size)


def greedy_policy_of(model: str, size: int, num_actions: int) -> greedy_policy.GreedyPolicy:
    """TF-Agents' greedy policy on the actor network the trainers build for ``model`` (not traced)."""
    name, overrides = parse_model(model)
    tf_keras.utils.set_random_seed(0)
    observation_spec = tensor_spec.BoundedTensorSpec((size, size, 3), tf.uint8, 0, 255)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, num_actions - 1)
    actor = EncoderActorNetwork(observation_spec, action_spec, encoder=name, encoder_kwargs=overrides)
    return greedy_policy.GreedyPolicy(
        actor_policy.ActorPolicy(ts.time_step_spec(observation_spec), action_spec, actor, training=False)
    )


def time_model(model: str, size: int, args: Any) -> dict[str, Any]:
    """Alternating rounds of both forms' actions on one batch: their times, medians and ratios."""
    policy = greedy_policy_of(model, size, args.num_actions)
    # One wrapper per form, as the Evaluator wraps it: each keeps its own tf.function, traced where it is
    # first called (below, inside the form's context).
    policies = {form: py_tf_eager_policy.PyTFEagerPolicy(policy, use_tf_function=True) for form in FORMS}
    rng = np.random.default_rng(0)
    observations = rng.integers(0, 256, size=(args.batch, size, size, 3), dtype=np.uint8)
    time_step = ts.restart(observations, batch_size=args.batch)
    actions = {}
    for form, wrapped in policies.items():
        with FORMS[form]():
            for _ in range(1 + args.warmup):  # the first call traces, inside the form's context
                actions[form] = wrapped.action(time_step).action
    runs: dict[str, list[float]] = {form: [] for form in FORMS}
    for _ in range(args.rounds):
        for form, wrapped in policies.items():
            start = time.perf_counter()
            wrapped.action(time_step)
            runs[form].append((time.perf_counter() - start) * 1000.0)
    medians = {form: statistics.median(ms) for form, ms in runs.items()}
    per_round = [n / b for n, b in zip(runs["native"], runs["builtin"], strict=True)]
    return {
        "model": model,
        "image_size": size,
        "batch": args.batch,
        "runs_ms": runs,
        "median_ms": medians,
        "native_over_builtin": medians["native"] / medians["builtin"],
        "native_over_builtin_per_round_median": statistics.median(per_round),
        # Both forms compute the same function: the greedy actions agree but for near-ties.
        "same_actions": int(np.sum(actions["native"] == actions["builtin"])),
    }


def format_table(results: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'model':44s} {'size':>4s} {'native ms':>9s} {'builtin ms':>10s} {'ratio':>6s}  per round"]
    for r in results:
        lines.append(
            f"{r['model']:44s} {r['image_size']:4d} {r['median_ms']['native']:9.2f} "
            f"{r['median_ms']['builtin']:10.2f} {r['native_over_builtin']:6.3f} "
            f"{r['native_over_builtin_per_round_median']:9.3f}"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> Any:
    """Parses and validates the arguments; raises ``UsageError`` with one sentence on a bad one."""
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated MODEL@IMAGE_SIZE items")
    parser.add_argument("--batch", type=int, default=10, help="observations a step (the Evaluator's envs)")
    parser.add_argument("--num_actions", type=int, default=15, help="discrete actions (Procgen: 15)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 15, quick 3)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls of each form after its tracing")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON report")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16x16 SiT, 3 rounds")
    args = parser.parse_args(argv)
    check_out_file(args.out)
    if args.rounds is None:
        args.rounds = 3 if args.quick else 15
    if args.batch < 1 or args.num_actions < 2 or args.rounds < 1 or args.warmup < 0:
        raise UsageError(
            "--batch and --rounds must be positive, --num_actions at least 2 and --warmup non-negative."
        )
    if args.quick and args.models == DEFAULT_MODELS:
        args.models = "sit@16"
    args.specs = [parse_spec(item) for item in args.models.split(",") if item]
    if not args.specs:
        raise UsageError("--models names no model; expected MODEL@IMAGE_SIZE items, e.g. sit@64.")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit, started = current_commit(), time.perf_counter()
    if native.load_problem():
        print(f"The native kernels do not load here ({native.load_problem()}): both forms are builtin.")
    results = [time_model(model, size, args) for model, size in args.specs]
    print(format_table(results))
    report = {
        "what": "the greedy evaluation policy's action, traced with the native kernels and with builtin ops",
        "command": command_line("eval_policy_speed.py", argv),
        "commit": commit,
        "settings": {"batch": args.batch, "rounds": args.rounds, "warmup": args.warmup, "quick": args.quick},
        "native_kernels": native.load_problem() or "loaded",
        "models": results,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "environment": environment(),
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
