"""One finished run of a Table 4 protocol as a part of the table, ready for ``minigrid_rotation.py --merge``.

    python benchmarks/table4_part.py --report runs/table4_cnn_forward/cnn_forward_seed0_3m.json \\
        --log runs/cnn_fwd_seed0_3m.log \\
        --out benchmarks/reference/table4_lavacrossing_prior_parts/cnn_seed0.json

A run of ``minigrid_rotation.py`` (one model, one seed) writes its evaluation to ``--out``; a long run is
trained in several processes, one per session (``benchmarks/README.md``, "Runs longer than a session").
This adds to that report what the docs quote beside the run and what the run folder alone holds, so that
the part outlives the folder: its training curve (``training_curve``: the success rate every ``--every``
steps and the first steps at 0.5 / 0.8 / 0.9, from the folder's event files, as
``benchmarks/training_curve.py``), the processes that trained it and the time each contributed
(``train_wall_s``, from the log, as ``benchmarks/run_log.py``; the last process counts the
``train_wall_s`` its command wrote; processes before the log's first, lost with an earlier machine, from
the run's event files, each row saying its ``source``), and the commands that give both again. The
report's own keys are kept, so the parts of one protocol still merge.
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_log  # noqa: E402  (a sibling script)
import training_curve  # noqa: E402

from sit_keras.benchmarking import SentenceParser, UsageError, check_out_file, parse_or_say_why  # noqa: E402

THRESHOLDS = (0.5, 0.8, 0.9)


def part_of(report: dict[str, Any], log_text: str, log: str, every: int) -> dict[str, Any]:
    """``report`` (one run's ``minigrid_rotation.py --out``) with its curve and its processes' times."""
    if len(report.get("runs", [])) != 1:
        raise ValueError(f"A part holds one run (one model, one seed); the report has {len(report['runs'])}.")
    (run,) = report["runs"]
    processes = run_log.parse(log_text)
    if not processes:
        raise ValueError(f"{log} holds no progress bar of a training run.")
    # A log that starts with a resumed process lost the earlier ones with their machine: the run's event
    # files, one per process, stand in for them.
    processes = run_log.before_the_log(
        processes, run_log.from_writers(training_curve.writers(run["root_dir"]))
    )
    summary = training_curve.summarize(training_curve.read_logs(run["root_dir"]), every, THRESHOLDS)
    logged, budget = summary["last"]["env_steps"], report["settings"]["env_steps"]
    if logged < budget:
        raise ValueError(
            f"{run['root_dir']} logged {logged:,} steps, fewer than the report's budget {budget:,}: "
            "the run is not finished."
        )
    final_wall_s = run["train_wall_s"]
    walls = run_log.train_walls(processes, final_wall_s=final_wall_s)
    return {
        **report,
        "training_curve": {
            f"success_every_{every // 1000}k": [
                [p["env_steps"], round(p["success"], 4)] for p in summary["curve"]
            ],
            "first_step_with_success_at_least": summary["first_step_with_success_at_least"],
            "last": summary["last"],
            "median_env_steps_per_second": summary["median_env_steps_per_second"],
        },
        "first_step_rule": training_curve.FIRST_STEP_RULE,
        "training_curve_command": (
            f"python benchmarks/training_curve.py --root_dir {run['root_dir']} --every {every}"
        ),
        "processes": walls["processes"],
        "train_wall_s": walls["train_wall_s"],
        "train_wall_command": f"python benchmarks/run_log.py --log {log} --final_wall_s {final_wall_s:.1f}",
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--report", required=True, help="the run's minigrid_rotation.py --out (one model, one seed)"
    )
    parser.add_argument("--log", required=True, help="the run's log, every session's output appended")
    parser.add_argument("--every", type=int, default=50_000, help="curve points every this many steps")
    parser.add_argument("--out", required=True, help="the part (JSON) to write")
    args = parser.parse_args(argv)
    if args.every < 1000:
        raise UsageError(f"--every must be at least 1000 steps. Received: {args.every}.")
    check_out_file(args.out, folder_must_exist=True)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    try:
        report = json.loads(Path(args.report).read_text())
        log_text = Path(args.log).read_text(errors="replace")
        part = part_of(report, log_text, args.log, args.every)
    except OSError as error:
        why = f"cannot read {error.filename}: {error.strerror}." if error.filename else str(error)
        print(f"table4_part.py: {why}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as error:
        print(f"table4_part.py: {args.report} is not JSON ({error}).", file=sys.stderr)
        return 2
    except KeyError as error:
        print(
            f"table4_part.py: {args.report} is not a minigrid_rotation.py report: it has no {error}.",
            file=sys.stderr,
        )
        return 2
    except ValueError as error:
        print(f"table4_part.py: {error}", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(part, indent=1) + "\n")
    print(f"Wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
