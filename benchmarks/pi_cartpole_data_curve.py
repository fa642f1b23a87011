"""Student return against recorded steps, read from the DAgger rounds of cart-pole students.

Issue 25 asks for a plot of the student's score against the number of
recorded steps. A DAgger student (``sit-train`` with ``train_eval.agent =
'bc'``, ``bc.dagger_rounds = R``) records ``R + 1`` rounds of equal size in
its ``bc_data.npz``: round 0 is the teacher's own roll-outs, and in round
``k >= 1`` the student acts after training on the ``k`` rounds before it,
while the teacher labels the states it visits (``dagger_teacher_probability
= 0``: the student alone acts). Each round stores the returns of the episodes
that ended in it (``returns_<k>``), so round ``k`` scores the student trained
on ``k`` rounds of recorded steps, with no new run.

Caveat, written into the report: a round keeps only the episodes that ended
within it. An episode still running when the round ends is dropped (one per
stream at most), and long episodes are more often the dropped ones, so these
means lean low against a test over whole episodes; the students' 200-episode
tests after their last round are in their own reports
(``pi_cartpole_harder_dagger_seeds.json``, ``pi_cartpole_harder_dagger_e100.json``).

Usage::

    python benchmarks/pi_cartpole_data_curve.py \\
        --students 'PI, 20 epochs=runs/harder/students/seed0/pi,...,MLP, 20 epochs=...' \\
        --out benchmarks/reference/pi_cartpole_data_curve.json --png docs/pi_cartpole_data_curve.png
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import statistics
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    parse_or_say_why,
    write_report,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plot_curves  # noqa: E402

DATA_FILE = "bc_data.npz"
TEACHER = "teacher"
UPRIGHT = 600  # a return above this holds the pole up for most of the 1000 steps


def rounds(folder: Path) -> list[dict[str, Any]]:
    """Per recorded round: its recorded steps so far, and the returns of the episodes that ended in it.

    Raises:
      UsageError: no readable ``bc_data.npz`` in ``folder``, named with its path.
    """
    path = folder / DATA_FILE
    if not path.is_file():
        raise UsageError(f"{path} does not exist: --students takes sit-train folders of DAgger students.")
    try:
        with np.load(path) as data:
            count = sum(name.startswith("returns_") for name in data.files)
            steps = [int(np.prod(data[f"actions_{k}"].shape[:2])) for k in range(count)]
            returns = [data[f"returns_{k}"].astype(float) for k in range(count)]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise UsageError(f"{path} is not a readable DAgger record ({error}).") from error
    if count < 2:
        raise UsageError(f"{path} holds no DAgger round (bc.dagger_rounds was 0).")
    result = []
    for k in range(count):
        r = returns[k]
        result.append(
            {
                "round": k,
                "actor": "teacher" if k == 0 else "student",
                # The student of round k trained on the k rounds recorded before it.
                "recorded_steps_trained_on": sum(steps[:k]),
                "episodes": len(r),
                "mean_return": float(r.mean()) if len(r) else None,
                "median_return": float(np.median(r)) if len(r) else None,
                "share_above_600": float((r > UPRIGHT).mean()) if len(r) else None,
            }
        )
    return result


def teacher_level(students: dict[str, list[list[dict[str, Any]]]]) -> float:
    """The teacher's mean return in round 0, each distinct record once.

    Students of one seed clone the same teacher roll-outs (the same round 0),
    which would otherwise count once per student.
    """
    records = {(run[0]["episodes"], run[0]["mean_return"]) for runs in students.values() for run in runs}
    return statistics.mean(mean for _, mean in records)


def curves(students: dict[str, list[list[dict[str, Any]]]]) -> dict[str, list[list[tuple[float, float]]]]:
    """Lines for ``plot_curves.draw``: each student's mean return per round, and the teacher's level."""
    by_label: dict[str, list[list[tuple[float, float]]]] = {}
    for label, runs in students.items():
        for run in runs:
            points = [(r["recorded_steps_trained_on"], r["mean_return"]) for r in run[1:] if r["episodes"]]
            by_label.setdefault(label, []).append(points)
    last = max(r[-1]["recorded_steps_trained_on"] for runs in students.values() for r in runs)
    level = teacher_level(students)
    by_label[TEACHER] = [[(0.0, level), (float(last), level)]]
    return by_label


def main(argv: Sequence[str] | None = None) -> int:
    def parse(argv: Sequence[str] | None):
        parser = SentenceParser(description=__doc__.split("\n\n")[0])
        parser.add_argument(
            "--students", required=True, help="comma-separated label=folder pairs (a label per student kind)"
        )
        parser.add_argument("--out", required=True, help="report JSON")
        parser.add_argument("--png", default="", help="the plot (PNG); none when empty")
        parser.add_argument("--title", default="CartPoleSwingUpHarder: student return by recorded steps")
        args = parser.parse_args(argv)
        args.runs = {}
        for item in (i for i in args.students.split(",") if i.strip()):
            label, sep, folder = item.partition("=")
            if not sep or not label.strip() or not folder.strip():
                raise UsageError(f"--students takes label=folder pairs; {item!r} is not one.")
            args.runs.setdefault(label.strip(), []).append(folder.strip())
        if not args.runs:
            raise UsageError("--students names no student.")
        check_out_file(args.out)
        if args.png and Path(args.png).is_dir():
            raise UsageError(f"--png must be a file path, not a folder; received {args.png!r}.")
        args.rounds = {
            label: [rounds(Path(folder)) for folder in folders] for label, folders in args.runs.items()
        }
        return args

    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    report = {
        "what": "Issue 25: the cart-pole students' return against the recorded steps they trained on, read "
        "from their DAgger rounds (round k: the student trained on k rounds acts; completed episodes only)",
        "command": command_line("pi_cartpole_data_curve.py", argv),
        "commit": current_commit(),
        "caveat": "a round keeps only the episodes that ended within it (at most one running episode per "
        "stream is dropped, more often a long one), so the means lean low against whole-episode tests",
        "students": {
            label: [{"folder": folder, "rounds": r} for folder, r in zip(args.runs[label], runs, strict=True)]
            for label, runs in args.rounds.items()
        },
    }
    write_report(report, args.out)
    if args.png:
        last = max(r[-1]["recorded_steps_trained_on"] for runs in args.rounds.values() for r in runs)
        image = draw(args.rounds, last, args.title)
        image.save(args.png)
        print(f"Wrote {args.png}")
    return 0


def draw(students: dict[str, list[list[dict[str, Any]]]], max_steps: float, title: str):
    """The PNG of ``curves(students)``: return in [0, 1000] against recorded steps, a tick per round."""
    step = students[next(iter(students))][0][1]["recorded_steps_trained_on"]
    return plot_curves.draw(
        curves(students), max_steps, title, y_max=1000, y_label="mean return", x_label="recorded steps",
        x_tick=step, x_tick_label=lambda s: f"{s / 1000:g}k", y_tick_label=lambda v: f"{v:.0f}",
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
