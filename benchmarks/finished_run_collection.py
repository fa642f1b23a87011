"""How long collecting a finished PPO run's garbage takes, with TF-Agents' pipelines and with the learner's.

A PPO run trains through ``PPOLearner``'s two input pipelines. With tf.data's
autotuning on (TF-Agents' pipelines), each iterator has a model thread that
sleeps between optimisations, for up to 60 s once the run has gone on for a
while; when the run's garbage is collected, deleting the iterator waits for
that sleep to end. ``ppo.WorkerPPOLearner`` builds the same pipelines without
autotuning. In the test suite, which runs many trainers in one process, the
next test's collection waited for it (tens of seconds per finished run).

Each measurement is a fresh process: a 128-step PPO run on LavaGapS5 (tiny CNN),
automatic collections off (as in the suite, the garbage waits for a later
collection), ``--idle`` seconds of waiting, then one timed ``gc.collect()``.
The two pipelines alternate; medians over ``--repeats``.

    python benchmarks/finished_run_collection.py [--idle 90] [--repeats 3] [--out runs/collection.json]
    python benchmarks/finished_run_collection.py --quick      # 5 s idle, one round
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import concurrent.futures
import gc
import multiprocessing
import resource
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

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

PIPELINES = ("tf_agents", "learner")
RUN = {
    "env_name": "minigrid:LavaGapS5",
    "num_envs": 4,
    "encoder": "cnn",
    "encoder_kwargs": {"filters": (8,), "strides": 1, "output_dim": 16},
    "total_env_steps": 128,
    "collect_steps_per_env": 16,
    "num_minibatches": 4,
    "num_epochs": 2,
    "eval_interval": 0,
    "num_eval_episodes": 1,
    "progress": False,
}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def collect_after_a_run(pipelines: str, idle: float) -> dict[str, float]:
    """In a fresh process: one run with ``pipelines``, ``idle`` seconds, one timed collection."""
    import gin
    from tf_agents.train import ppo_learner

    from sit_keras.agents import train
    from sit_keras.agents.algorithms import ppo

    if pipelines == "tf_agents":  # the learner with TF-Agents' own (autotuned) pipelines
        ppo.WorkerPPOLearner._create_datasets = ppo_learner.PPOLearner._create_datasets
    gc.disable()
    gin.clear_config()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root_dir:
        train.train_eval(root_dir, **RUN)
    run_s = time.perf_counter() - start
    time.sleep(idle)
    start, cpu = time.perf_counter(), _cpu_seconds()
    collected = gc.collect()
    return {
        "run_s": run_s,
        "collect_s": time.perf_counter() - start,
        "collect_cpu_s": _cpu_seconds() - cpu,
        "collected_objects": collected,
    }


def measure(idle: float, repeats: int) -> dict[str, Any]:
    """Every round runs each pipeline once, each in a process of its own; medians per pipeline."""
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in PIPELINES}
    spawn = multiprocessing.get_context("spawn")
    for _ in range(repeats):
        for name in PIPELINES:
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
                samples[name].append(pool.submit(collect_after_a_run, name, idle).result())
    results: dict[str, Any] = {}
    for name, runs in samples.items():
        results[name] = {
            "collect_s_median": statistics.median(r["collect_s"] for r in runs),
            "collect_cpu_s_median": statistics.median(r["collect_cpu_s"] for r in runs),
            "runs": runs,
        }
    tf_agents, learner = (results[name]["collect_s_median"] for name in PIPELINES)
    results["tf_agents_over_learner"] = tf_agents / learner
    return results


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=90.0, help="seconds between the run and the collection")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (medians are reported)")
    parser.add_argument("--quick", action="store_true", help="5 s idle, one round")
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1; received {args.repeats}.")
    if args.idle < 0:
        raise UsageError(f"--idle must be at least 0 seconds; received {args.idle}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit = current_commit()
    idle, repeats = (5.0, 1) if args.quick else (args.idle, args.repeats)
    start = time.perf_counter()
    results = measure(idle, repeats)
    for name in PIPELINES:
        r = results[name]
        print(
            f"{name:<9} pipelines: collection after {idle:.0f} s idle {r['collect_s_median']:6.2f} s "
            f"({r['collect_cpu_s_median']:.2f} s of CPU)"
        )
    print(f"TF-Agents' pipelines / the learner's: {results['tf_agents_over_learner']:.1f}x")
    report = {
        "what": "gc.collect() of a finished 128-step PPO run after an idle wait: autotuned pipelines or not",
        "command": command_line("finished_run_collection.py", argv),
        "commit": commit,
        "idle_s": idle,
        "repeats": repeats,
        "run": RUN,
        "results": results,
        "wall_time_s": time.perf_counter() - start,
        "environment": environment(),
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
