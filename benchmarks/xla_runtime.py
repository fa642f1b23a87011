"""XLA's two CPU runtimes: each block's and encoder's XLA / graph train-step ratio under both.

TensorFlow 2.19's XLA compiles a CPU program in one of two ways, chosen by
``--xla_cpu_use_thunk_runtime`` in ``XLA_FLAGS``:

- the *thunk* runtime (the default): the program is a sequence of thunks
  (a kernel per fusion, library calls for convolutions and dots), run one
  after the other;
- the *legacy* runtime (``--xla_cpu_use_thunk_runtime=false``): the whole
  program is emitted as one LLVM function.

XLA reads ``XLA_FLAGS`` once per process, at its first compilation, so each
measurement runs in a fresh process: ``benchmarks/xla_cpu_ops.py`` (every
block's and encoder's train step, graph and XLA interleaved in the process,
at a LavaCrossing PPO minibatch) under one runtime, the two runtimes
alternating within each round so that a slow spell of a noisy host hits
both. The runtime flag is added to the caller's ``XLA_FLAGS``.

The report gives per name and runtime the median over the rounds of the
process's XLA / graph ratio, and the legacy runtime's XLA time over the
thunk runtime's, all measured in this run.

Usage::

    python benchmarks/xla_runtime.py [--names cnn,sit_small,...] [--rounds 3]
        [--batch 256] [--calls 3] [--in_process_rounds 3] [--quick]
        [--out benchmarks/results/xla_runtime.json]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from xla_cpu_ops import ENCODERS, block_names  # noqa: E402  (the measuring process's names)

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "xla_runtime.json"
RUNTIMES = {"thunk": "--xla_cpu_use_thunk_runtime=true", "legacy": "--xla_cpu_use_thunk_runtime=false"}
DEFAULT_NAMES = ("conv2d_3x3", "window_attention", "cnn", "vit_small", "sit_small", "sit_chiral")


def child_environment(runtime: str, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``runtime``'s flag appended to its ``XLA_FLAGS`` (a later flag wins in XLA)."""
    flags = f"{base.get('XLA_FLAGS', '')} {RUNTIMES[runtime]}".strip()
    return {**base, "XLA_FLAGS": flags}


def measure(
    runtime: str, names: Sequence[str], batch: int, calls: int, in_process_rounds: int
) -> dict[str, dict[str, Any]]:
    """One ``xla_cpu_ops.py`` process under ``runtime``: its results per name."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "ops.json"
        command = [
            sys.executable, str(ROOT / "benchmarks" / "xla_cpu_ops.py"), "--names", ",".join(names),
            "--batch", str(batch), "--rounds", str(in_process_rounds), "--calls", str(calls),
            "--out", str(out),
        ]  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=ROOT, env=child_environment(runtime, os.environ)
        )
        if done.returncode != 0:
            raise RuntimeError(f"xla_cpu_ops.py under the {runtime} runtime failed: {done.stderr[-2000:]}")
        return json.loads(out.read_text())["results"]


def summarise(measured: dict[str, list[dict[str, dict[str, Any]]]]) -> dict[str, dict[str, float]]:
    """Per name: each runtime's median XLA / graph and graph and XLA ms, and legacy XLA over thunk XLA."""
    names = measured["thunk"][0]
    table: dict[str, dict[str, float]] = {}
    for name in names:
        row: dict[str, float] = {}
        for runtime, processes in measured.items():
            for key in ("xla_over_graph", "graph_ms", "xla_ms"):
                row[f"{runtime}_{key}"] = statistics.median(p[name][key] for p in processes)
        row["legacy_over_thunk_xla_time"] = row["legacy_xla_ms"] / row["thunk_xla_ms"]
        table[name] = row
    return table


def run(names: Sequence[str], rounds: int, batch: int, calls: int, in_process_rounds: int) -> dict[str, Any]:
    started, commit = time.time(), current_commit()
    measured: dict[str, list[dict[str, dict[str, Any]]]] = {r: [] for r in RUNTIMES}
    for round_ in range(rounds):
        order = list(RUNTIMES) if round_ % 2 == 0 else list(reversed(RUNTIMES))
        for runtime in order:
            measured[runtime].append(measure(runtime, names, batch, calls, in_process_rounds))
            ratios = ", ".join(f"{n} {r['xla_over_graph']:.2f}" for n, r in measured[runtime][-1].items())
            print(f"round {round_ + 1}/{rounds} {runtime:6s} XLA / graph: {ratios}", flush=True)
    return {
        "what": "XLA / graph train-step time (forward, backward, Adam) of blocks and encoders at a "
        "LavaCrossing PPO minibatch under XLA's two CPU runtimes (XLA_FLAGS --xla_cpu_use_thunk_runtime), "
        "one fresh xla_cpu_ops.py process per runtime and round, the runtimes alternating; medians over "
        "the rounds",
        "command": command_line("xla_runtime.py", None),
        "commit": commit,
        "xla_flags": {r: child_environment(r, os.environ)["XLA_FLAGS"] for r in RUNTIMES},
        "rounds": rounds,
        "batch": batch,
        "calls_per_round": calls,
        "rounds_in_a_process": in_process_rounds,
        "table": summarise(measured),
        "runs": measured,
        "wall_seconds": round(time.time() - started, 1),
        "environment": environment(),
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        "| block or encoder | graph (ms) | XLA / graph, thunk runtime | XLA / graph, legacy runtime |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, row in report["table"].items():
        graph_ms = statistics.median([row["thunk_graph_ms"], row["legacy_graph_ms"]])
        thunk, legacy = row["thunk_xla_over_graph"], row["legacy_xla_over_graph"]
        lines.append(f"| `{name}` | {graph_ms:.1f} | {thunk:.2f} | {legacy:.2f} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses and validates the arguments; raises ``UsageError`` with one sentence on a bad one."""
    valid = [*block_names(), *ENCODERS]
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--names", default=",".join(DEFAULT_NAMES), help="blocks and encoders, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=3, help="processes per runtime")
    parser.add_argument("--batch", type=int, default=256, help="observations per step (PPO's minibatch)")
    parser.add_argument("--calls", type=int, default=3, help="calls per interleaved round in a process")
    parser.add_argument("--in_process_rounds", type=int, default=3, help="interleaved rounds in a process")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="one round of one call, batch 8, two names")
    args = parser.parse_args(argv)
    args.chosen = [n.strip() for n in args.names.split(",") if n.strip()]
    unknown = sorted(set(args.chosen) - set(valid))
    if unknown or not args.chosen:
        raise UsageError(f"unknown names {unknown}; choose from {', '.join(valid)}.")
    for flag in ("rounds", "batch", "calls", "in_process_rounds"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be >= 1, got {getattr(args, flag)}.")
    check_out_file(args.out)
    if args.quick:
        args.rounds, args.in_process_rounds, args.batch, args.calls = 1, 1, 8, 1
        args.chosen = args.chosen[:2]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the measurements; returns the exit code (2 on a bad argument)."""
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    report = run(args.chosen, args.rounds, args.batch, args.calls, args.in_process_rounds)
    report["markdown"] = format_report(report)
    print(report["markdown"])
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
