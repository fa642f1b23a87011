"""Every ratio of the speed issue, measured in one run, each against its target.

The speed issue (SiT at 2x, then 1.5x, a ViT's cost; XLA that never slows a model
down; bfloat16 that pays; PPO throughput against the CNNs; a second worker) is
measured by several benchmarks, each in its own processes. This script runs them
one after the other with the settings the docs' tables use, keeps each one's
report in ``--work_dir``, and reads the issue's ratios out of them:

- ``encoders_64.json`` (``encoders.py``; SiT, SieT, ViT and the IMPALA-CNN at
  64x64, batch 96, float32 and ``mixed_bfloat16``): the SiT's and SieT's train
  step over the ViT's (graph mode), every model's XLA / graph train step, and the
  SiT's bfloat16 / float32 step;
- ``encoders_14.json`` (``encoders.py --image_size 14``; the LavaCrossing configs
  of SiT-small, the SieT readout, the ViT and the CNN): the same at the MiniGrid size;
- ``demo_ppo.json`` (the demo's PPO, ``configs/demo/sit.gin`` against ``cnn.gin``,
  processes alternating): the demo SiT's env steps/s over the CNN's;
- ``lavacrossing_ppo.json`` (``lavacrossing_cost.py``): SiT-small's over the CNN's;
- ``procgen_ppo.json`` (``ppo_throughput.py``): the Procgen SiT's over the IMPALA-CNN's;
- ``two_workers.json`` (``multi_worker_overhead.py``): two workers' learner time
  per train step over one worker's (measured; the issue sets no limit).

Each ratio is measured within its own benchmark's run (side by side, medians of
interleaved repeats), never across two. A target on bfloat16 holds only on a
host with bfloat16 instructions (AVX512_BF16 or AMX); elsewhere its row says so
and counts as neither met nor missed. The table and ``--out`` (JSON) give each
row's value, limit, whether it is met, and the report and key it comes from.

A target's value is the ratio of the two medians. For the encoders' ratios,
whose two sides are timed in the same rounds, the table also gives the median
of the ratios within each round ("per round"; ``per_round_medians`` in
``--out``): a round in which the host slowed down both sides cancels out there,
so where the two differ the host's noise is at least that large. The verdict
stays on the ratio of the medians.

Usage::

    python benchmarks/speed_targets.py [--work_dir runs/speed_targets]
        [--out benchmarks/results/speed_targets.json] [--only encoders_64,demo_ppo,...]
    python benchmarks/speed_targets.py --reports_only --work_dir runs/speed_targets   # re-read the reports
    python benchmarks/speed_targets.py --quick        # a smoke run of every benchmark, minutes
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
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
    training_speed,
    write_report,
)
from sit_keras.native.cpu import cpu_flags

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
DEFAULT_OUT = BENCHMARKS / "results" / "speed_targets.json"
DEFAULT_WORK_DIR = ROOT / "runs" / "speed_targets"
MINIGRID = "configs/minigrid/lavacrossing_{}.gin"
MINIGRID_MODELS = ("sit_small", "siet_rotation_pooled", "vit", "cnn")
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
# The demo's PPO: 16 environments x 64 steps an iteration; 8 iterations a process, the first traces.
DEMO_CONFIGS = {"sit": ROOT / "configs" / "demo" / "sit.gin", "cnn": ROOT / "configs" / "demo" / "cnn.gin"}
DEMO_ITERATION = 16 * 64
DEMO_BINDINGS = ["train_eval.progress = False", "train_eval.num_eval_episodes = 0"]


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One benchmark of the run: its report's file name and its command (full or ``--quick``)."""

    report: str
    arguments: Callable[[bool], list[str]]


def _encoders_64(quick: bool) -> list[str]:
    models = "sit,siet,vit,impala_cnn"
    # XLA / graph sits near 1 for some models: 7 rounds left it +-10% on this noisy host, so more here.
    extra = ["--quick"] if quick else ["--repeats", "15", "--warmup", "3"]
    precisions = ["--precisions", "float32,mixed_bfloat16"]
    return ["encoders.py", "--models", models, *precisions, "--no_profile", *extra]


def _encoders_14(quick: bool) -> list[str]:
    models = ",".join(MINIGRID.format(m) for m in MINIGRID_MODELS)
    extra = ["--quick"] if quick else ["--repeats", "21", "--warmup", "3"]  # steps of 10-60 ms
    return ["encoders.py", "--image_size", "14", "--models", models, "--no_profile", *extra]


BENCHMARK_RUNS = {
    "encoders_64": Benchmark("encoders_64.json", _encoders_64),
    "encoders_14": Benchmark("encoders_14.json", _encoders_14),
    "demo_ppo": Benchmark(
        "demo_ppo.json", lambda quick: ["speed_targets.py", "--demo_ppo"] + ["--quick"] * quick
    ),
    "lavacrossing_ppo": Benchmark(
        "lavacrossing_ppo.json",
        lambda quick: ["lavacrossing_cost.py", "--models", "sit_small,cnn"] + (["--quick"] if quick else []),
    ),
    "procgen_ppo": Benchmark(
        "procgen_ppo.json",
        lambda quick: ["ppo_throughput.py", "--models", "sit,impala_cnn"] + ["--quick"] * quick,
    ),
    "two_workers": Benchmark(
        "two_workers.json",
        lambda quick: ["multi_worker_overhead.py"] + ["--iterations", "2", "--rounds", "1"] * quick,
    ),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """A ratio of the issue: where it is read (report, key path) and its limit (``None``: measured only)."""

    what: str
    report: str
    key: tuple[str, ...]
    limit: float | None = None
    at_most: bool = True  # the ratio must stay at or below the limit (else at or above)
    invert: bool = False  # the report holds the inverse ratio
    needs_bfloat16: bool = False
    # The two sides' times in the report, one a round (numerator, denominator); None: not timed in rounds.
    rounds: tuple[tuple[str, ...], tuple[str, ...]] | None = None


def _train_step_runs(model: str, mode: str = "graph") -> tuple[str, ...]:
    """Where ``encoders.py`` keeps a model's train-step times, one a round."""
    return ("models", model, "timings", "train_step", mode, "runs_ms")


def targets() -> list[Target]:
    """The issue's targets, in its order."""
    rows = []
    sizes = (  # report, image size, its models' specs in encoders.py and the issue's names for them
        ("encoders_64", "64x64", {m: m for m in ("sit", "siet", "vit", "impala_cnn")}),
        ("encoders_14", "14x14", {m: MINIGRID.format(m) for m in MINIGRID_MODELS}),
    )
    against_vit = {"encoders_64": (("sit", "SiT"), ("siet", "SieT"))}
    against_vit["encoders_14"] = (("sit_small", "SiT-small"), ("siet_rotation_pooled", "SieT readout"))
    for report, size, specs in sizes:
        for model, name in against_vit[report]:
            key = ("ratios", "train_step_over_vit", specs[model], "graph")
            rounds = (_train_step_runs(specs[model]), _train_step_runs(specs["vit"]))
            what = f"{name} / ViT train step, {size} (graph)"
            rows += [Target(what, report, key, limit, rounds=rounds) for limit in (2.0, 1.5)]
    for report, size, specs in sizes:
        for model, spec in specs.items():
            key = ("ratios", "xla_over_graph", spec, "train_step")
            rounds = (_train_step_runs(spec, "xla"), _train_step_runs(spec))
            rows.append(Target(f"{model}: XLA / graph train step, {size}", report, key, 1.0, rounds=rounds))
    key = ("models", "sit", "precision", "mixed_bfloat16", "over_float32")
    rounds = (("models", "sit", "precision", "mixed_bfloat16", "runs_ms"), _train_step_runs("sit"))
    what = "SiT bfloat16 / float32 train step"
    rows.append(Target(what, "encoders_64", key, 0.7, needs_bfloat16=True, rounds=rounds))
    rows.append(Target("demo SiT / CNN env steps/s (PPO)", "demo_ppo", ("sit_over_cnn",), 0.6, at_most=False))
    key = ("table", "cnn", "cost_per_env_step")  # SiT-small's env steps/s over the CNN's
    rows.append(Target("LavaCrossing SiT-small / CNN env steps/s (PPO)", "lavacrossing_ppo", key, 0.6, False))
    key = ("ratios", "impala_cnn_over_sit_env_steps_per_second")
    for limit in (1 / 6, 1 / 4):
        what = "Procgen SiT / IMPALA-CNN env steps/s (PPO)"
        rows.append(Target(what, "procgen_ppo", key, limit, at_most=False, invert=True))
    key = ("median_ratios_two_over_one", "learner_seconds_per_train_step")
    rows.append(Target("two workers / one: learner seconds per train step", "two_workers", key))
    return rows


def _lookup(report: dict[str, Any], key: Sequence[str]) -> Any:
    value: Any = report
    for part in key:
        value = value[part]
    return value


def _read(report: dict[str, Any], key: Sequence[str]) -> float:
    return float(_lookup(report, key))


def _no_number(target: Target, key: Sequence[str]) -> UsageError:
    name = BENCHMARK_RUNS[target.report].report
    return UsageError(f"{name} holds no number at {'/'.join(key)}: is it that benchmark's report?")


def summarise(reports: dict[str, dict[str, Any]], flags: Sequence[str]) -> list[dict[str, Any]]:
    """One row a target: its value in ``reports`` (by benchmark name), its limit, and whether it is met.

    ``met`` is ``None`` where the target does not apply here (bfloat16 on a host without
    bfloat16 instructions) or sets no limit. A report without the target's number raises
    ``UsageError`` naming the report and the key.
    """
    has_bfloat16 = any(flag in flags for flag in BFLOAT16_FLAGS)
    rows = []
    for target in targets():
        report = reports[target.report]
        try:
            value = _read(report, target.key)
        except (KeyError, TypeError, ValueError):
            raise _no_number(target, target.key) from None
        if target.invert:
            value = 1 / value
        row = {
            "what": target.what,
            "value": value,
            "limit": target.limit,
            "at_most": target.at_most,
            "report": BENCHMARK_RUNS[target.report].report,
            "key": "/".join(target.key) + (" (inverted)" if target.invert else ""),
            "commit": report.get("commit", ""),
        }
        if target.limit is None or (target.needs_bfloat16 and not has_bfloat16):
            row["met"] = None
            if target.needs_bfloat16 and not has_bfloat16:
                row["note"] = "no bfloat16 instructions (AVX512_BF16, AMX) here: emulated, not applicable"
        else:
            row["met"] = value <= target.limit if target.at_most else value >= target.limit
        rows.append(row)
    return rows


def per_round_medians(reports: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """For each ratio timed in rounds: the median of its per-round ratios beside the ratio of its medians.

    Each round of ``encoders.py`` times every function once, so the two sides of
    such a ratio are paired by round. A report without the times, or with
    different numbers of rounds on the two sides, raises ``UsageError``.
    """
    medians, seen = [], set()
    for target in targets():
        if target.rounds is None or target.what in seen:  # a ratio with two limits is listed once
            continue
        seen.add(target.what)
        report = reports[target.report]
        sides = []
        for key in target.rounds:
            try:
                sides.append([float(ms) for ms in _lookup(report, key)])
            except (KeyError, TypeError, ValueError):
                raise _no_number(target, key) from None
        numerators, denominators = sides
        if not numerators or len(numerators) != len(denominators):
            name = BENCHMARK_RUNS[target.report].report
            raise UsageError(
                f"{name} times {target.what!r} in {len(numerators)} and {len(denominators)} rounds; "
                "a per-round ratio needs the same number of rounds on both sides, at least one."
            )
        medians.append(
            {
                "what": target.what,
                "per_round_median": statistics.median(
                    n / d for n, d in zip(numerators, denominators, strict=True)
                ),
                "ratio_of_medians": statistics.median(numerators) / statistics.median(denominators),
                "rounds": len(numerators),
                "report": BENCHMARK_RUNS[target.report].report,
                "keys": ["/".join(key) for key in target.rounds],
            }
        )
    return medians


def format_table(rows: Sequence[dict[str, Any]], per_round: Sequence[dict[str, Any]] = ()) -> str:
    """The targets' table; with ``per_round`` (``per_round_medians``), a column of per-round medians."""
    by_what = {entry["what"]: entry["per_round_median"] for entry in per_round}
    lines = [f"{'ratio':56s} {'value':>7s} {'per round':>9s} {'target':>9s}  met"]
    for row in rows:
        limit = "-" if row["limit"] is None else f"{'<=' if row['at_most'] else '>='} {row['limit']:.3g}"
        met = {True: "yes", False: "NO", None: "n/a"}[row["met"]]
        paired = f"{by_what[row['what']]:.3f}" if row["what"] in by_what else "-"
        lines.append(f"{row['what']:56s} {row['value']:7.3f} {paired:>9s} {limit:>9s}  {met}")
    return "\n".join(lines)


def demo_ppo(repeats: int, iterations: int) -> dict[str, Any]:
    """The demo's PPO env steps/s, SiT and CNN processes alternating: medians and their ratio."""
    started, commit = time.time(), current_commit()
    env_steps = iterations * DEMO_ITERATION
    bindings = [*DEMO_BINDINGS, f"train_eval.total_env_steps = {env_steps}"]
    runs: dict[str, list[dict[str, Any]]] = {model: [] for model in DEMO_CONFIGS}
    for repeat in range(repeats):
        for model, config in DEMO_CONFIGS.items():
            result = training_speed([config], bindings, cwd=ROOT)
            runs[model].append(result)
            print(f"demo {model} #{repeat + 1}: {result['sps']:.1f} env steps/s", flush=True)
    medians = {model: statistics.median(r["sps"] for r in results) for model, results in runs.items()}
    return {
        "what": "PPO env steps/s of the demo's SiT and CNN (configs/demo), medians of alternating processes",
        "command": command_line("speed_targets.py", None),
        "commit": commit,
        "env_steps_per_process": env_steps,
        "bindings": bindings,
        "env_steps_per_second": medians,
        "sit_over_cnn": medians["sit"] / medians["cnn"],
        "runs": runs,
        "wall_seconds": round(time.time() - started, 1),
        "environment": environment(),
    }


def run_benchmark(name: str, work_dir: Path, quick: bool) -> None:
    """Runs benchmark ``name`` in its own process, its report into ``work_dir``; raises on failure."""
    benchmark = BENCHMARK_RUNS[name]
    script, *arguments = benchmark.arguments(quick)
    out = (work_dir / benchmark.report).resolve()  # the benchmark runs in the repository's root
    command = [sys.executable, str(BENCHMARKS / script), *arguments, "--out", str(out)]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, text=True, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
    print(f"   {time.time() - started:.0f} s", flush=True)


def read_reports(work_dir: Path) -> dict[str, dict[str, Any]]:
    """Every benchmark's report in ``work_dir``; raises ``UsageError`` naming a missing or damaged one."""
    reports = {}
    for name, benchmark in BENCHMARK_RUNS.items():
        path = work_dir / benchmark.report
        try:
            reports[name] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"{path} is missing: run without --reports_only to measure it.") from None
        except json.JSONDecodeError as error:
            raise UsageError(f"{path} is not a JSON report ({error.msg}, line {error.lineno}).") from None
    return reports


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses and validates the arguments; raises ``UsageError`` with one sentence on a bad one."""
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    names = ", ".join(BENCHMARK_RUNS)
    parser.add_argument("--work_dir", type=Path, default=DEFAULT_WORK_DIR, help="each benchmark's report")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON of every target")
    parser.add_argument("--reports_only", action="store_true", help="read --work_dir's reports, run nothing")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run of each benchmark (ratios meaningless)"
    )
    parser.add_argument("--only", default=None, help=f"comma-separated benchmarks to run: {names}")
    parser.add_argument("--demo_ppo", action="store_true", help=argparse.SUPPRESS)  # one of the benchmarks
    args = parser.parse_args(argv)
    check_out_file(args.out)
    if args.work_dir.exists() and not args.work_dir.is_dir():
        raise UsageError(f"--work_dir must be a folder; {str(args.work_dir)!r} is a file.")
    args.only = list(BENCHMARK_RUNS) if args.only is None else [n for n in args.only.split(",") if n]
    unknown = [n for n in args.only if n not in BENCHMARK_RUNS]
    if unknown or not args.only:
        raise UsageError(f"--only names {', '.join(unknown) or 'nothing'}; expected some of: {names}.")
    if args.reports_only and not args.work_dir.is_dir():
        raise UsageError(f"--reports_only reads --work_dir, and {str(args.work_dir)!r} is not a folder.")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    if args.demo_ppo:
        write_report(demo_ppo(repeats=1 if args.quick else 3, iterations=2 if args.quick else 8), args.out)
        return 0
    started, commit = time.time(), current_commit()
    if not args.reports_only:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        for name in args.only:
            run_benchmark(name, args.work_dir, args.quick)
    try:
        reports = read_reports(args.work_dir)
        rows, per_round = summarise(reports, cpu_flags()), per_round_medians(reports)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 1
    print(format_table(rows, per_round))
    report = {
        "what": "the speed issue's ratios, each measured within one benchmark's run, against its targets",
        "command": command_line("speed_targets.py", argv),
        "commit": commit,
        "quick": args.quick,
        "cpu_flags": [f for f in cpu_flags() if f.startswith(("avx", "amx", "fma"))],
        "targets": rows,
        "met": sum(row["met"] is True for row in rows),
        "missed": sum(row["met"] is False for row in rows),
        "per_round_medians": per_round,
        "wall_seconds": round(time.time() - started, 1),
        "environment": environment(),
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
