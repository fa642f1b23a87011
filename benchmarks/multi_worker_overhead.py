"""What a second worker costs: PPO's train step on one worker against two, on this host.

Each run is a cluster on loopback (``TF_CONFIG``, ``MultiWorkerMirroredStrategy``;
docs/training.md, "More than one device"): one worker, then two, every worker a
process of this script with one TensorFlow thread, so that two workers on a
2-core host do not take each other's core. Each worker runs PPO
(``sit_keras.agents.train.train_eval``, ``--gin_file`` and its bindings, no
evaluation) for ``--iterations`` iterations of ``num_envs * collect_steps_per_env``
steps of its own environments. Every worker does the same train steps per
iteration, so two workers differ from one only by the gradients' all-reduce
(and the reward normaliser's broadcast) between the processes.

From the chief's log of each iteration (the first, which traces, is dropped):

- learner seconds per train step (the learner's share of the wall time x the
  iteration's time, over its train steps), median over iterations;
- the cluster's environment steps per second (both workers' steps), median.

``ratios``: two workers over one for each, measured in the same run; repeated
``--rounds`` times (one worker, then two, per round), and the report gives the
median of the rounds' ratios.

    python benchmarks/multi_worker_overhead.py --out benchmarks/results/multi_worker_overhead.json
"""

from __future__ import annotations

import sys

if "--worker" in sys.argv:  # a worker process: one TensorFlow thread, before TensorFlow starts
    from sit_keras import quiet

    quiet.import_tensorflow(threads=1)
import sit_keras.quiet_start  # noqa: F401, E402  (drops TensorFlow's start-up chatter)

# isort: split

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from sit_keras.agents.training.workers import free_loopback_ports, num_workers  # noqa: E402
from sit_keras.benchmarking import (  # noqa: E402
    SentenceParser,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
    write_report,
)

REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_GIN = "configs/minigrid/lavacrossing_sit_chiral.gin"
DEFAULT_BINDINGS = (
    "train_eval.num_envs = 8",
    "ppo.collect_steps_per_env = 64",
    "ppo.num_minibatches = 4",
    "train_eval.num_eval_episodes = 0",
    "train_eval.progress = False",
    "train_eval.checkpoint_interval = 1000000",
    "train_eval.policy_save_interval = 0",
)


def worker(root_dir: str, gin_file: str, bindings: Sequence[str], iterations: int) -> dict[str, Any]:
    """One worker's run (``TF_CONFIG`` says which): its per-iteration log, as the chief sees it."""
    import gin

    from sit_keras.agents import train

    strategy = train.make_strategy("multi_worker")
    train.parse_gin([gin_file], list(bindings))
    steps = gin.query_parameter("train_eval.num_envs") * gin.query_parameter("ppo.collect_steps_per_env")
    workers = num_workers(strategy)
    results = train.train_eval(
        root_dir, strategy=strategy, total_env_steps=steps * workers * iterations,
        log_interval=steps * workers,
    )  # fmt: skip
    history = results["history"]
    return {
        "workers": workers,
        "iterations": [
            {
                "env_steps": log["env_steps"],
                "train_steps": log["train_step"] - (history[i - 1]["train_step"] if i else 0),
                "seconds": steps * workers / log["SPS"],
                "train_fraction": log["train_fraction"],
                "SPS": log["SPS"],
            }
            for i, log in enumerate(history)
        ],
    }


def run_cluster(workers: int, gin_file: str, bindings: Sequence[str], iterations: int) -> dict[str, Any]:
    """``workers`` processes of this script on loopback; the chief's summary of its iterations."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_loopback_ports(workers)]}
    argv = [sys.executable, __file__, "--worker", "--gin_file", gin_file, "--iterations", str(iterations)]
    argv += [f"--gin_bindings={binding}" for binding in bindings]
    with tempfile.TemporaryDirectory() as root_dir:
        processes = []
        for index in range(workers):
            task = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            env = {**os.environ, "TF_CONFIG": json.dumps(task)}
            command = [*argv, "--root_dir", os.path.join(root_dir, "run")]
            processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True))
        outputs = [process.communicate()[0] for process in processes]
    if any(process.returncode for process in processes):
        raise SystemExit(f"a worker of the {workers}-worker cluster failed; see its output above.")
    chief = json.loads(outputs[0].strip().splitlines()[-1])
    measured = chief["iterations"][1:]  # the first iteration traces the train step
    return {
        "workers": workers,
        "iterations": chief["iterations"],
        "learner_seconds_per_train_step": statistics.median(
            it["train_fraction"] * it["seconds"] / it["train_steps"] for it in measured
        ),
        "cluster_env_steps_per_second": statistics.median(it["SPS"] for it in measured),
    }


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gin_file", default=DEFAULT_GIN)
    parser.add_argument("--gin_bindings", action="append", default=None)
    parser.add_argument("--iterations", type=int, default=6, help="PPO iterations per run (the first traces)")
    parser.add_argument("--rounds", type=int, default=3, help="one worker, then two, this many times")
    parser.add_argument("--out", default=None, help="JSON report")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root_dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.iterations < 2 or args.rounds < 1:
        parser.error("--iterations must be at least 2 (the first traces) and --rounds at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(_parse, argv)
    if args is None:
        return 2
    bindings = list(DEFAULT_BINDINGS) + list(args.gin_bindings or [])
    if args.worker:
        print(json.dumps(worker(args.root_dir, args.gin_file, bindings, args.iterations)))
        return 0
    rounds = []
    for round_index in range(args.rounds):
        one, two = (run_cluster(n, args.gin_file, bindings, args.iterations) for n in (1, 2))
        ratios = {
            "learner_seconds_per_train_step": two["learner_seconds_per_train_step"]
            / one["learner_seconds_per_train_step"],
            "cluster_env_steps_per_second": two["cluster_env_steps_per_second"]
            / one["cluster_env_steps_per_second"],
        }
        rounds.append({"one_worker": one, "two_workers": two, "ratios_two_over_one": ratios})
        print(
            f"round {round_index + 1}: learner s per train step {one['learner_seconds_per_train_step']:.4f} "
            f"(1 worker) vs {two['learner_seconds_per_train_step']:.4f} (2 workers), "
            f"x{ratios['learner_seconds_per_train_step']:.2f}; cluster env steps/s x"
            f"{ratios['cluster_env_steps_per_second']:.2f}"
        )
    medians = {
        name: statistics.median(r["ratios_two_over_one"][name] for r in rounds)
        for name in ("learner_seconds_per_train_step", "cluster_env_steps_per_second")
    }
    print(
        f"Two workers over one (median of {args.rounds} rounds): learner time per train step "
        f"x{medians['learner_seconds_per_train_step']:.2f}, cluster env steps/s "
        f"x{medians['cluster_env_steps_per_second']:.2f}."
    )
    if args.out:
        write_report(
            {
                "what": __doc__.split("\n")[0],
                "command": command_line("multi_worker_overhead.py", argv),
                "commit": current_commit(),
                "environment": environment(),
                "gin_file": args.gin_file,
                "gin_bindings": bindings,
                "threads_per_worker": 1,
                "rounds": rounds,
                "median_ratios_two_over_one": medians,
            },
            args.out,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
