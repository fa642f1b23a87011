"""Learning curves (training success vs environment steps) of committed reports, as one PNG.

Every report's ``training_curves`` (written with ``benchmarks/training_curve.py``) holds,
per run ``<model>_seed<seed>``, the training success rate at regular steps
(``success_every_<n>``). Each run is one line, one colour per model, so seeds of a model
can be told apart only by their shape; the legend names the models and how many seeds
each has. Drawn with Pillow (no plotting library), so the picture is a function of the
reports alone: ``tests/test_reference_results.py`` redraws it and compares the pixels.

    cd benchmarks/reference && python ../plot_curves.py --reports table4_lavacrossing_3m.json,\\
        lavacrossing_cnn_seed2_3m.json,lavacrossing_chiral_1m.json,lavacrossing_chiral_seed1_3m.json,\\
        lavacrossing_chiral_seed0_3m.json --out ../../docs/lavacrossing_curves.png
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from sit_keras.benchmarking import SentenceParser, UsageError, parse_or_say_why

WIDTH, HEIGHT = 800, 480
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 40, 60  # margins around the plot area
COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189), (140, 86, 75)]


def curves(reports: Sequence[Path]) -> dict[str, list[list[tuple[float, float]]]]:
    """``{model: [one (env_steps, success) list per seed]}`` from the reports' ``training_curves``.

    Runs are named ``<model>_seed<seed>``; a run in several reports is drawn from the last.
    A one-run part of a table (``minigrid_rotation.py --out`` with its ``training_curve``
    added) counts as a report of that run.
    """
    by_run: dict[str, list[tuple[float, float]]] = {}
    for path in reports:
        report = json.loads(path.read_text())
        runs = training_curves(report)
        if not runs:
            raise UsageError(f"{path} has no training_curves (written with benchmarks/training_curve.py).")
        for run, curve in runs.items():
            series = next(v for k, v in curve.items() if k.startswith("success_every"))
            # A later report of the same run (resumed to a larger budget) replaces the earlier one.
            by_run[run] = [(0.0, 0.0), *((float(s), float(v)) for s, v in series)]
    by_model: dict[str, list[list[tuple[float, float]]]] = {}
    for run, points in by_run.items():
        by_model.setdefault(run.rsplit("_seed", 1)[0], []).append(points)
    return by_model


def training_curves(report: dict) -> dict[str, dict]:
    """``{<model>_seed<seed>: curve}`` of a report (``training_curves``) and of a one-run part
    (``training_curve``); empty when it has neither."""
    by_run = dict(report.get("training_curves", {}))
    if "training_curve" in report and len(report.get("runs", [])) == 1:
        (run,) = report["runs"]
        by_run[f"{run['model']}_seed{run['seed']}"] = report["training_curve"]
    return by_run


def draw(
    by_model: dict[str, list[list[tuple[float, float]]]],
    max_steps: float,
    title: str,
    y_max: float = 1.0,
    y_label: str = "training success",
    x_label: str = "environment steps",
    x_tick: float | None = None,
    x_tick_label: Callable[[float], str] = lambda steps: f"{steps / 1e6:g}M",
    y_tick_label: Callable[[float], str] = lambda value: f"{value:.1f}",
) -> Image.Image:
    """The picture: one line per run, values in [0, ``y_max``] against steps in [0, ``max_steps``].

    The defaults draw training success against environment steps, with a tick
    every 500k steps (250k up to 1.5M); the other arguments name and scale
    other curves (``pi_cartpole_data_curve.py``).
    """
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    pen = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP

    def at(steps: float, value: float) -> tuple[float, float]:
        return x0 + (x1 - x0) * min(steps, max_steps) / max_steps, y0 + (y1 - y0) * value / y_max

    for tick in range(6):  # 0, 0.2, ..., 1 of y_max
        y = at(0, tick / 5 * y_max)[1]
        pen.line([(x0, y), (x1, y)], fill=(225, 225, 225))
        pen.text((x0 - 30, y - 6), y_tick_label(tick / 5 * y_max), fill="black", font=font)
    step = x_tick or (500_000 if max_steps > 1_500_000 else 250_000)
    for n in range(int(max_steps // step) + 1):
        x = at(n * step, 0)[0]
        pen.line([(x, y0), (x, y0 + 5)], fill="black")
        pen.text((x - 12, y0 + 10), x_tick_label(n * step), fill="black", font=font)
    pen.rectangle([x0, y1, x1, y0], outline="black")
    pen.text((x0 + 120, 10), title, fill="black", font=font)
    pen.text(((x0 + x1) / 2 - 70, HEIGHT - 25), x_label, fill="black", font=font)
    pen.text((8, y1 - 25), y_label, fill="black", font=font)
    for n, (model, runs) in enumerate(sorted(by_model.items())):
        colour = COLOURS[n % len(COLOURS)]
        for run in runs:
            points = [at(s, v) for s, v in run if s <= 1.01 * max_steps]  # a log just past the budget
            pen.line(points, fill=colour, width=2)
        y = TOP + 20 * n
        pen.line([(x1 + 15, y + 6), (x1 + 40, y + 6)], fill=colour, width=3)
        pen.text((x1 + 48, y), f"{model} ({len(runs)} seed{'s' * (len(runs) > 1)})", fill="black", font=font)
    return image


def main(argv: Sequence[str] | None = None) -> int:
    """Draws the PNG; returns the exit code (2 on a bad argument)."""

    def parse(argv: Sequence[str] | None):
        parser = SentenceParser(description=__doc__.split("\n\n")[0])
        parser.add_argument(
            "--reports", required=True, help="comma-separated report JSONs, or folders: every JSON in each"
        )
        parser.add_argument("--out", required=True, help="PNG file")
        parser.add_argument("--max_steps", type=float, default=3_000_000)
        parser.add_argument("--title", default="MiniGrid LavaCrossing, PPO: training success per run")
        args = parser.parse_args(argv)
        named = [Path(p) for p in args.reports.split(",") if p]
        missing = [str(p) for p in named if not p.exists()]
        if missing:
            raise UsageError(f"No such report: {', '.join(missing)}.")
        args.reports = [report for p in named for report in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
        if not args.reports:
            raise UsageError(f"No report JSON in {', '.join(map(str, named))}.")
        if args.max_steps <= 0:
            raise UsageError(f"--max_steps must be positive, got {args.max_steps:g}.")
        args.curves = curves(args.reports)
        return args

    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    draw(args.curves, args.max_steps, args.title).save(args.out)
    print(f"Wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
