"""Sums up a test run's ``--resource-report``: per xdist worker, where its wall time went.

``make test PYTEST_ARGS="--resource-report FILE"`` writes one JSON line per test
(``tests/conftest.py``: wall, CPU, children's CPU and garbage-collection seconds;
gzipped if its name ends in ``.gz``).
This script reports, per worker: the tests it ran, their wall, CPU and
garbage-collection seconds, the seconds in tests whose collections took more
than ``--slow`` seconds, and the tests that spent the most in collections.

    python benchmarks/suite_resources.py FILE [--slow 5] [--top 5] [--commit REV] [--note TEXT] [--out F]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import gzip
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    parse_or_say_why,
    write_report,
)

FIELDS = ("test", "worker", "wall_s", "cpu_s", "children_cpu_s", "gc_s")


def read_report(path: Path) -> list[dict[str, Any]]:
    """The report's records; a line that is not a test's record is an error naming the file and line."""
    records = []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            record = json.loads(line)
            missing = [field for field in FIELDS if field not in record]
        except (json.JSONDecodeError, TypeError):
            missing = list(FIELDS)
        if missing:
            raise UsageError(
                f"{path}:{number} is not a --resource-report line (missing {', '.join(missing)})."
            )
        records.append(record)
    if not records:
        raise UsageError(f"{path} holds no test records.")
    return records


def summarise(records: list[dict[str, Any]], slow: float, top: int) -> dict[str, Any]:
    """Per worker: totals (seconds) and the ``top`` tests by collection time."""
    workers: dict[str, Any] = {}
    for worker in sorted({r["worker"] for r in records}):
        mine = [r for r in records if r["worker"] == worker]
        worst = sorted(mine, key=lambda r: -r["gc_s"])[:top]
        workers[worker] = {
            "tests": len(mine),
            "wall_s": sum(r["wall_s"] for r in mine),
            "cpu_s": sum(r["cpu_s"] for r in mine),
            "children_cpu_s": sum(r["children_cpu_s"] for r in mine),
            "gc_s": sum(r["gc_s"] for r in mine),
            "gc_in_slow_collections_s": sum(r["gc_s"] for r in mine if r["gc_s"] > slow),
            "most_gc": [{field: r[field] for field in FIELDS if field != "worker"} for r in worst],
        }
    wall = sum(w["wall_s"] for w in workers.values())
    return {
        "workers": workers,
        "gc_fraction_of_wall": sum(w["gc_s"] for w in workers.values()) / wall,
    }


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="the JSON-lines file that --resource-report wrote")
    parser.add_argument(
        "--slow", type=float, default=5.0, help="a test's collections above this are slow (s)"
    )
    parser.add_argument(
        "--top", type=int, default=5, help="tests listed per worker, most collection time first"
    )
    parser.add_argument("--commit", default=None, help="the commit the tests ran at (default: this clone's)")
    parser.add_argument("--note", default="", help="how the tests ran (command, what else ran on the host)")
    parser.add_argument("--out", default=None, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    if not Path(args.report).is_file():
        raise UsageError(f"{args.report} is not a file: give the file that --resource-report wrote.")
    if args.slow < 0 or args.top < 0:
        raise UsageError(f"--slow and --top must be at least 0; received {args.slow} and {args.top}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    try:
        records = read_report(Path(args.report))
    except UsageError as error:
        print(f"suite_resources.py: {error}", file=sys.stderr)
        return 2
    commit = current_commit()
    summary = summarise(records, args.slow, args.top)
    for worker, w in summary["workers"].items():
        print(
            f"{worker}: {w['tests']} tests, {w['wall_s']:.0f} s wall, {w['gc_s']:.0f} s in collections "
            f"({w['gc_in_slow_collections_s']:.0f} s in tests whose collections took over {args.slow:g} s)"
        )
    print(f"collections: {100 * summary['gc_fraction_of_wall']:.1f}% of the workers' wall time")
    report = {
        "what": "Where the test workers' wall time went, from a --resource-report file",
        "command": command_line("suite_resources.py", argv),
        "commit": commit,
        "tests_commit": args.commit or commit,
        "note": args.note,
        "slow_s": args.slow,
        **summary,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
