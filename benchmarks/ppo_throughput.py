"""PPO training throughput on Procgen: environment steps/s per model, their ratios, and where the time goes.

For each encoder (default: SiT and the IMPALA-CNN of the SiT paper), one
process runs ``sit_keras.agents.train.train_eval`` (PPO) on ``procgen:<game>`` with
64 environments and the paper's PPO + DrAC settings (``configs/procgen``),
except a short rollout (``--steps_per_env``, default 16 instead of 256) so
that an iteration takes seconds, for ``--iterations`` iterations, without
the trainer's evaluation (``train_eval.num_eval_episodes = 0``). The
minibatches keep the config's *size* (SiT family: 128 steps; IMPALA-CNN:
2048, i.e. the whole shortened rollout), so each train step does the work
it does in a full run. The first iteration (tracing) is dropped; the table
shows medians over the others of:

- env steps/s: environment steps (Procgen: frames) per second of wall time,
  collection + learning, as the trainer's timers measure it (``SPS``);
- train: share of the wall time in the learner (the model's train steps);
- policy: share in the policy's forward passes during collection;
- env: share in the Procgen environments;
- overhead: the rest (replay buffer, metrics, Python).

"Model time" = train + policy; the target of issue 4 is at least 80%.
Every pair of models gets the ratio of their env steps/s, measured in the
same run: ``ratios["<later>_over_<earlier>_env_steps_per_second"]`` (order
of ``--models``; by default IMPALA-CNN over SiT), also shown in the table as
"x <first model>".

Usage::

    python benchmarks/ppo_throughput.py [--models sit,impala_cnn] [--game caveflyer]
        [--iterations 4] [--steps_per_env 16] [--out benchmarks/results/ppo_throughput.json] [--quick]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin

from sit_keras.agents import train
from sit_keras.agents.algorithms import ppo
from sit_keras.agents.environments.procgen_env import PROCGEN_GAMES
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
from sit_keras.mixed_precision import PRECISIONS

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "ppo_throughput.json"
CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "procgen" / "models"
FRACTIONS = ("train_fraction", "policy_fraction", "env_fraction", "overhead_fraction")


def measure(
    model: str, game: str, num_envs: int, steps_per_env: int, iterations: int, precision: str = "float32"
) -> dict[str, Any]:
    """Runs ``iterations`` PPO iterations of ``configs/procgen/models/<model>.gin``; medians after the 1st.

    ``precision``: ``train_eval.precision``; the report names the run ``<model>:<precision>``
    unless it is float32.
    """
    gin.clear_config()
    train.parse_gin([str(CONFIGS / f"{model}.gin")], [])
    config_steps = gin.query_parameter("train_eval.num_envs") * _ppo_setting("collect_steps_per_env")
    minibatch_size = config_steps // _ppo_setting("num_minibatches")
    steps_per_iteration = num_envs * steps_per_env
    # The config's minibatch size (not their number) on the shorter rollout, at most all of it.
    num_minibatches = max(1, steps_per_iteration // minibatch_size)
    while steps_per_iteration % num_minibatches:
        num_minibatches -= 1
    with tempfile.TemporaryDirectory() as root_dir:
        start = time.perf_counter()
        results = train.train_eval(
            root_dir,
            env_name=f"procgen:{game}",
            num_envs=num_envs,
            collect_steps_per_env=steps_per_env,
            num_minibatches=num_minibatches,
            total_env_steps=iterations * steps_per_iteration,
            checkpoint_interval=10**12,
            policy_save_interval=0,
            num_eval_episodes=0,
            precision=precision,
            progress=False,
        )
        wall = time.perf_counter() - start
    gin.clear_config()
    timed = results["history"][1:] or results["history"]
    summary = {
        "env_steps_per_second": statistics.median(h["SPS"] for h in timed),
        "timed_iterations": len(timed),
    }
    for name in FRACTIONS:
        summary[name] = statistics.median(h[name] for h in timed)
    summary["model_fraction"] = summary["train_fraction"] + summary["policy_fraction"]
    last = {k: v for k, v in results.items() if k not in ("history", "evaluations")}
    return {
        "model": model if precision == "float32" else f"{model}:{precision}",
        "precision": precision,
        "num_minibatches": num_minibatches,
        "minibatch_size": steps_per_iteration // num_minibatches,
        "summary": summary,
        "iterations": results["history"],
        "last": last,
        "total_wall_s": wall,
    }


def _ppo_setting(name: str) -> Any:
    """``ppo.<name>`` as the parsed config binds it, else ``ppo.PPO``'s default."""
    try:
        return gin.query_parameter(f"ppo.{name}")
    except ValueError:
        return next(field.default for field in dataclasses.fields(ppo.PPO) if field.name == name)


def speed_ratios(speeds: dict[str, float]) -> dict[str, float]:
    """``"<b>_over_<a>_env_steps_per_second"``: ``speeds[b] / speeds[a]`` for every pair, ``a`` listed first.

    >>> speed_ratios({"sit": 10.0, "impala_cnn": 170.0})
    {'impala_cnn_over_sit_env_steps_per_second': 17.0}
    """
    models = list(speeds)
    return {
        f"{b}_over_{a}_env_steps_per_second": speeds[b] / speeds[a]
        for i, a in enumerate(models)
        for b in models[i + 1 :]
    }


def format_table(runs: Sequence[dict[str, Any]]) -> str:
    """One row per model; "x <first>" is its env steps/s over the first model's."""
    first = runs[0]["summary"]["env_steps_per_second"] if runs else 1.0
    lines = [
        f"| model | env steps/s | x {runs[0]['model'] if runs else ''} | train | policy | env | overhead "
        "| model time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        s = run["summary"]
        lines.append(
            f"| {run['model']} | {s['env_steps_per_second']:.0f} | {s['env_steps_per_second'] / first:.2f} | "
            f"{s['train_fraction']:.0%} | "
            f"{s['policy_fraction']:.0%} | {s['env_fraction']:.0%} | {s['overhead_fraction']:.0%} | "
            f"{s['model_fraction']:.0%} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="sit,impala_cnn", help="configs/procgen/models/<name>.gin")
    parser.add_argument("--game", default="caveflyer")
    parser.add_argument("--num_envs", type=int, default=64)
    parser.add_argument("--steps_per_env", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument(
        "--precisions", default="float32", help="train_eval.precision values, e.g. float32,mixed_bfloat16"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 envs x 4 steps, 2 iterations")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_envs, args.steps_per_env, args.iterations = 4, 4, 2
    models = sorted(path.stem for path in CONFIGS.glob("*.gin"))
    for model in args.models.split(","):
        if model not in models:
            raise UsageError(f"--models: unknown model {model!r}; expected some of: {', '.join(models)}.")
    if args.game not in PROCGEN_GAMES:
        raise UsageError(f"--game: unknown game {args.game!r}; expected one of: {', '.join(PROCGEN_GAMES)}.")
    for flag in ("num_envs", "steps_per_env", "iterations"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    precisions = [p for p in args.precisions.split(",") if p]
    if not precisions:
        raise UsageError(f"--precisions names no precision; expected some of: {', '.join(PRECISIONS)}.")
    for precision in precisions:
        if precision not in PRECISIONS:
            raise UsageError(
                f"--precisions: unknown {precision!r}. Expected some of: {', '.join(PRECISIONS)}."
            )
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    precisions = [p for p in args.precisions.split(",") if p]

    started, commit = time.time(), current_commit()
    runs = []
    for model in args.models.split(","):
        for precision in precisions:
            print(f"== {model} ({precision})", flush=True)
            runs.append(
                measure(model, args.game, args.num_envs, args.steps_per_env, args.iterations, precision)
            )
    table = format_table(runs)
    print(table)
    speeds = {run["model"]: run["summary"]["env_steps_per_second"] for run in runs}
    ratios = speed_ratios(speeds)
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")
    report = {
        "benchmark": "ppo_throughput",
        "command": command_line("ppo_throughput.py", argv),
        "commit": commit,
        "wall_seconds": round(time.time() - started, 1),
        "machine": environment(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "runs": runs,
        "env_steps_per_second": speeds,
        "ratios": ratios,
        "table": table,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
