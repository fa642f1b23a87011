"""The training time of a run that took several processes, from its log, as JSON.

    python benchmarks/run_log.py --log runs/sit_grid_fwd_seed0_3m.log

A long run outlives its session: each session appends a line ``<UTC time> start at <commit>`` to the run's
log and starts the same command again, which goes on from the newest checkpoint it finds (see
``benchmarks/README.md``, "Runs longer than a session"). The progress bar (tqdm) then prints
``<steps>/<budget> [<elapsed><...`` after every collect-and-train iteration. So the log splits into one
segment per process, and the time a process contributed is its bar's elapsed time at the step the next
process started from (its last checkpoint that was used; work after it was lost with the session). The
last process's time is its bar's at its last step, or, when the run finished, the ``train_wall_s`` its
command wrote.

Prints each process (start time, commit, first and last step, the step it contributed up to and the bar's
time there) and ``train_wall_s``: ``process_<i>_to_<step>`` -> seconds, and ``total``.
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import datetime
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sit_keras.benchmarking import SentenceParser, UsageError, parse_or_say_why

_START = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) start at (\w+)")
# One tqdm refresh: "  18%|###   | 550912/3000000 [32:13<2:40:36, 254.14step/s, ret=0.73]"; a process's first
# refresh shows "[00:00<?".
_BAR = re.compile(r"(\d+)/(\d+) \[((?:\d+:)?\d+:\d\d)<(\?)?")


@dataclass
class Process:
    """One process of a run: where its bar started and ended, and its bars' (steps, elapsed seconds)."""

    started: str | None
    commit: str | None
    bars: list[tuple[int, float]] = field(default_factory=list)
    source: str = "log"

    @property
    def first_step(self) -> int | None:
        return self.bars[0][0] if self.bars else None

    @property
    def last_step(self) -> int | None:
        return self.bars[-1][0] if self.bars else None

    def elapsed_at(self, step: int) -> tuple[int, float]:
        """The bar's elapsed seconds at its last refresh at or below ``step``, and that refresh's step."""
        below = [(s, t) for s, t in self.bars if s <= step]
        if not below:
            raise ValueError(f"the process started at {self.started} never printed a step <= {step}")
        return below[-1]


def _seconds(elapsed: str) -> float:
    seconds = 0.0
    for part in elapsed.split(":"):
        seconds = 60 * seconds + int(part)
    return seconds


def parse(text: str) -> list[Process]:
    """The log's training processes in order.

    A process begins at each bar's first refresh (``[00:00<?``), so logs written before the ``start at``
    lines are split too; a process takes the time and commit of the last ``start at`` line before its first
    refresh and after the previous process's.
    """
    bars = list(_BAR.finditer(text))
    if not bars:
        return []
    # Evaluation or other progress bars may share the log: keep the training bars, which count to the budget.
    budget = max(int(m.group(2)) for m in bars)
    marks = list(_START.finditer(text))
    processes: list[Process] = []
    previous_start = -1
    for bar in bars:
        if int(bar.group(2)) != budget:
            continue
        if bar.group(4) or not processes:
            own = [m for m in marks if previous_start < m.start() < bar.start()]
            processes.append(Process(own[-1].group(1) if own else None, own[-1].group(2) if own else None))
            previous_start = bar.start()
        processes[-1].bars.append((int(bar.group(1)), _seconds(bar.group(3))))
    return processes


def from_writers(writers: list[tuple[float, list[tuple[int, float]]]]) -> list[Process]:
    """Processes from a run's event files when its log is lost (a session's machine went with it).

    ``writers``: per event file, the Unix time its writer was created and its logs' (step, wall time), as
    ``training_curve.writers``. A process's elapsed time at a step is the wall time there less the creation
    time (its bar started within seconds of it); its commit is unknown.
    """
    processes = []
    for created, logged in writers:
        if logged:
            started = datetime.datetime.fromtimestamp(created, datetime.timezone.utc)
            bars = [(step, round(wall - created, 1)) for step, wall in logged]
            processes.append(Process(started.strftime("%Y-%m-%dT%H:%M:%SZ"), None, bars, "event files"))
    return processes


def before_the_log(log: list[Process], writers: list[Process]) -> list[Process]:
    """``log``'s processes after those of ``writers`` that trained before the log's first one started.

    A log that begins with a resumed process (its first step above 0) lost its earlier processes; the event
    files that logged steps below that first step stand in for them.
    """
    if not log or not log[0].first_step:
        return log
    earlier = [p for p in writers if p.first_step is not None and p.first_step < log[0].first_step]
    return earlier + log


def train_walls(processes: list[Process], final_wall_s: float | None = None) -> dict[str, Any]:
    """Per-process contributed steps and times; ``final_wall_s`` replaces the last process's bar time."""
    rows, walls = [], {}
    for i, process in enumerate(processes):
        if i == len(processes) - 1:
            to_step, seconds = process.bars[-1]
            seconds = seconds if final_wall_s is None else final_wall_s
        else:
            to_step, seconds = process.elapsed_at(processes[i + 1].first_step)
        walls[f"process_{i + 1}_to_{to_step}"] = round(seconds, 1)
        rows.append(
            {
                "started": process.started,
                "commit": process.commit,
                "first_step": process.first_step,
                "last_step": process.last_step,
                "contributed_to_step": to_step,
                "contributed_s": round(seconds, 1),
                "source": process.source,
            }
        )
    walls["total"] = round(sum(walls.values()), 1)
    return {"processes": rows, "train_wall_s": walls}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", required=True, help="the run's log (its sessions' output appended)")
    parser.add_argument(
        "--final_wall_s", type=float, help="the finished run's train_wall_s, for its last process"
    )
    args = parser.parse_args(argv)
    if args.final_wall_s is not None and not (args.final_wall_s >= 0 and math.isfinite(args.final_wall_s)):
        raise UsageError(f"--final_wall_s must be a finite number >= 0; received {args.final_wall_s}.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    try:
        with open(args.log, errors="replace") as f:
            text = f.read()
    except OSError as error:
        print(f"run_log.py: cannot read the log {args.log}: {error.strerror}.", file=sys.stderr)
        return 2
    processes = parse(text)
    if not processes:
        print(f"run_log.py: {args.log} holds no progress bar of a training run.", file=sys.stderr)
        return 2
    print(json.dumps(train_walls(processes, args.final_wall_s), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
