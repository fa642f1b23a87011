"""Memory that one more sub-environment takes, per environment family (for ``train_eval.num_envs``).

``sit-train`` refuses a ``num_envs`` whose environments and stored
observations cannot fit in the machine's memory (``agents/training/
memory_check.py``), before it creates anything. Its per-environment sizes
are the ones this script measures: for each family, in a fresh process that
has loaded, reset and closed one sub-environment (imports, ROMs, caches),
the resident memory that ``load(name, num_envs=n)`` and one ``reset()`` add,
divided by ``n`` (``--num_envs``), is the memory of one sub-environment. ``--repeats`` processes per family;
the table gives the median and the smallest slope (the check uses a lower
bound, so that it never refuses a run that would fit).

Usage::

    python benchmarks/env_memory.py [--families procgen,minigrid,gymnasium,dmc,atari]
        [--num_envs 32] [--repeats 3] [--out benchmarks/results/env_memory.json]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import statistics
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from sit_keras.benchmarking import (
    SentenceParser,
    command_line,
    current_commit,
    environment,
    name_list,
    parse_or_say_why,
    write_report,
)

# One environment per family, as the shipped configs use them.
ENVIRONMENTS = {
    "procgen": "procgen:coinrun",
    "minigrid": "minigrid:LavaCrossingS9N1",
    "gymnasium": "gymnasium:CartPole-v1",
    "dmc": "dmc:cartpole-swingup",
    "atari": "atari:Pong",
}

# Resident memory (bytes) after loading and resetting n sub-environments, in a fresh process.
_MEASURE = r"""
import os, sys
import sit_keras.quiet_start
from sit_keras.agents.environments import load

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

name, n = sys.argv[1], int(sys.argv[2])
env = load(name, num_envs=1)
env.reset()
env.close()
before = rss()
env = load(name, num_envs=n)
env.reset()
print(rss() - before)
"""


def measure(name: str, num_envs: int) -> int:
    """The memory (bytes) that ``num_envs`` sub-environments of ``name`` add, after one warm-up env."""
    command = [sys.executable, "-c", _MEASURE, name, str(num_envs)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: {done.stderr.strip().splitlines()[-1]}")
    return int(done.stdout.strip().splitlines()[-1])


def parse(argv: Sequence[str] | None) -> Any:
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    families = name_list(tuple(ENVIRONMENTS), "family")
    parser.add_argument("--families", type=families, default=list(ENVIRONMENTS))
    parser.add_argument("--num_envs", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/env_memory.json")
    args = parser.parse_args(argv)
    if args.num_envs < 2 or args.repeats < 1:
        parser.error("--num_envs must be at least 2 and --repeats at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    report: dict[str, Any] = {
        "benchmark": "env_memory",
        "command": command_line("env_memory.py", argv),
        "commit": current_commit(),
        "machine": environment(),
        "settings": {"num_envs": args.num_envs, "repeats": args.repeats},
        "families": {},
    }
    for family in args.families:
        name = ENVIRONMENTS[family]
        slopes = [measure(name, args.num_envs) / args.num_envs for _ in range(args.repeats)]
        report["families"][family] = {
            "env": name,
            "bytes_per_env_median": statistics.median(slopes),
            "bytes_per_env_min": min(slopes),
            "bytes_per_env": slopes,
        }
        print(
            f"{family:10s} {name:28s} median {statistics.median(slopes) / 1024:9.1f} KiB per environment "
            f"(min {min(slopes) / 1024:.1f})"
        )
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
