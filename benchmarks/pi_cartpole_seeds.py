"""One report of a cart-pole student setting over its seeds, from each seed's pi_cartpole_distill report.

Issue 25 asks for the student/teacher ratio of every setting and seed, with
Table 2 and Table 6's columns over seeds. ``pi_cartpole_distill.py --out``
writes one seed's report (its command, commit, wall time, the students'
settings and losses, every test return); this script puts the seeds of one
setting side by side, checks that they are comparable (the same teacher and
test episodes, distinct seeds, the same command but for the seed and the
folders), and adds the summary the docs quote: each column's mean per seed,
the upright mean and sample std over the seeds, the student/teacher ratio
overall and per seed, and each column over the upright return per seed.

Usage::

    python benchmarks/pi_cartpole_seeds.py --reports runs/x/seed0.json,runs/x/seed1.json,runs/x/seed2.json \\
        --what 'the 10-round students with ...' --budget '640,000 recorded steps ...' \\
        --out benchmarks/reference/pi_cartpole_harder_dagger_x.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import json
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    parse_or_say_why,
    write_report,
)

STUDENT = "pi"
UPRIGHT = "5 obs"


def read_seed_report(path: str) -> dict[str, Any]:
    """A pi_cartpole_distill report with its ``seed`` (read from its command).

    Raises:
      UsageError: the file is missing, is not such a report, or tested no PI student.
    """
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"--reports: {path!r} does not exist.") from None
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"--reports: {path!r} is not a readable JSON report ({error}).") from None
    if not isinstance(report, dict) or not {"command", "results", "test_settings"} <= set(report):
        raise UsageError(f"--reports: {path!r} is not a pi_cartpole_distill.py report.")
    if STUDENT not in report["results"] or "teacher" not in report["results"]:
        raise UsageError(f"--reports: {path!r} tested no AttentionNeuron student beside its teacher.")
    seed = re.search(r"--seed[ =](\d+)", report["command"])
    return {"seed": int(seed.group(1)) if seed else 0, **report}


def _setting(command: str) -> str:
    """The command without its seed and folders: equal for the seeds of one setting."""
    return " ".join(re.sub(r"--(seed|root|out|pi_dir)[ =]\S+", "", command).split())


def check_comparable(reports: Sequence[dict[str, Any]], paths: Sequence[str]) -> None:
    """Raises ``UsageError`` unless the reports are distinct seeds of one setting, teacher and test."""
    seeds = [r["seed"] for r in reports]
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--reports holds seed {max(seeds, key=seeds.count)} twice.")
    first = reports[0]
    for report, path in zip(reports[1:], paths[1:], strict=True):
        if _setting(report["command"]) != _setting(first["command"]):
            raise UsageError(f"--reports: {path!r} ran another setting than {paths[0]!r}.")
        if report["test_settings"] != first["test_settings"]:
            raise UsageError(f"--reports: {path!r} ran other test episodes than {paths[0]!r}.")
        if (
            report["results"]["teacher"][UPRIGHT]["returns"]
            != first["results"]["teacher"][UPRIGHT]["returns"]
        ):
            raise UsageError(f"--reports: {path!r} tested another teacher than {paths[0]!r}.")


def summary(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each column's mean per seed, and the student/teacher ratios the docs quote."""
    teacher = reports[0]["results"]["teacher"]
    columns = list(reports[0]["results"][STUDENT])
    per_seed = {c: [r["results"][STUDENT][c]["mean"] for r in reports] for c in columns}
    upright = per_seed[UPRIGHT]
    return {
        "teacher_5_obs": teacher[UPRIGHT]["mean"],
        "teacher_shuffled": teacher.get("5 obs (shuffled)", {}).get("mean"),
        "pi_per_seed": per_seed,
        "pi_5_obs_mean": statistics.mean(upright),
        "pi_5_obs_std_over_seeds_sample": statistics.stdev(upright) if len(upright) > 1 else None,
        "student_over_teacher": statistics.mean(upright) / teacher[UPRIGHT]["mean"],
        "student_over_teacher_per_seed": [v / teacher[UPRIGHT]["mean"] for v in upright],
        "column_over_5_obs_per_seed": {
            c: [v / u for v, u in zip(per_seed[c], upright, strict=True)] for c in columns if c != UPRIGHT
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    def parse(argv: Sequence[str] | None):
        parser = SentenceParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--reports", required=True, help="comma-separated pi_cartpole_distill reports")
        parser.add_argument("--what", required=True, help="the setting, in a sentence")
        parser.add_argument("--budget", required=True, help="recorded steps, rounds, epochs; test episodes")
        parser.add_argument("--wall_note", default="", help="what else ran on the machine")
        parser.add_argument("--out", required=True, help="report JSON")
        args = parser.parse_args(argv)
        check_out_file(args.out)
        paths = [p for p in args.reports.split(",") if p.strip()]
        if not paths:
            raise UsageError("--reports names no report.")
        by_seed = sorted(((read_seed_report(p), p) for p in paths), key=lambda pair: pair[0]["seed"])
        args.seed_reports = [report for report, _ in by_seed]
        check_comparable(args.seed_reports, [path for _, path in by_seed])
        return args

    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    first = args.seed_reports[0]
    report = {
        "what": args.what,
        "command": command_line("pi_cartpole_seeds.py", argv),
        "env_name": first["env_name"],
        "teacher_dir": first["teacher_dir"],
        "machine_cores": first["machine_cores"],
        "budget": args.budget,
        "wall_note": args.wall_note,
        "runs": args.seed_reports,
        "summary": summary(args.seed_reports),
        "paper": first["paper"],
    }
    write_report(report, args.out)
    s = report["summary"]
    print(
        f"upright {s['pi_5_obs_mean']:.0f} over seeds {[r['seed'] for r in args.seed_reports]}: "
        f"{s['student_over_teacher']:.1%} of the teacher's {s['teacher_5_obs']:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
