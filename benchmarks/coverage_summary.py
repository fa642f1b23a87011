"""Line coverage of the test suite per package folder, from coverage.py's JSON report.

``make coverage`` runs the default suite with ``--cov`` and then this script::

    .venv/bin/python benchmarks/coverage_summary.py coverage.json \\
        --out benchmarks/results/coverage_summary.json

The folders are the ones the design names: the core ``sit_keras/`` (layers,
models and their tools), ``agents/``, ``export/`` and ``commands/`` (installed
as ``sit_keras.agents``, ``.export`` and ``.commands``). A line is a statement
as coverage.py counts it; code that only a console script in a subprocess
runs is not seen.
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sit_keras.benchmarking import SentenceParser, parse_or_say_why, write_report

FOLDERS = ("sit_keras", "agents", "export", "commands")


def folder_of(path: str) -> str | None:
    """The package folder of a measured file's repository-relative path, or ``None`` outside them."""
    first = Path(path).parts[0] if Path(path).parts else ""
    return first if first in FOLDERS else None


def summarise(files: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{folder: {"statements", "covered", "percent"}}`` and a ``"total"`` row, from coverage's ``files``."""
    rows = {folder: {"statements": 0, "covered": 0} for folder in (*FOLDERS, "total")}
    for path, data in files.items():
        folder = folder_of(path)
        if folder is None:
            continue
        statements = data["summary"]["num_statements"]
        covered = data["summary"]["covered_lines"]
        for key in (folder, "total"):
            rows[key]["statements"] += statements
            rows[key]["covered"] += covered
    for row in rows.values():
        row["percent"] = round(100.0 * row["covered"] / row["statements"], 1) if row["statements"] else 0.0
    return rows


def format_table(rows: Mapping[str, Mapping[str, float]]) -> str:
    lines = ["| folder | statements | covered | line coverage |", "| --- | ---: | ---: | ---: |"]
    for folder, row in rows.items():
        name = "total" if folder == "total" else f"`{folder}/`"
        lines.append(f"| {name} | {row['statements']} | {row['covered']} | {row['percent']:.1f}% |")
    return "\n".join(lines)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="coverage.py JSON report (make coverage writes coverage.json)")
    parser.add_argument("--out", default=None, help="also write the summary as JSON here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(_parse, argv)
    if args is None:
        return 2
    try:
        with open(args.report, encoding="utf-8") as f:
            report = json.load(f)
        files = report["files"]
    except FileNotFoundError:
        print(f"No coverage report at {args.report}: run `make coverage` first.", file=sys.stderr)
        return 2
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        print(f"{args.report} is not a coverage.py JSON report ({error}).", file=sys.stderr)
        return 2
    rows = summarise(files)
    print(format_table(rows))
    if args.out:
        write_report({"what": "line coverage of the default test suite", "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
