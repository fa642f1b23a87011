"""The SiT paper's Table 4 at a CPU budget: MiniGrid LavaCrossing (or LavaGap), greedy and sampling.

For each model config and seed, PPO trains for ``--env_steps`` environment
steps on two levels (half of the environments each), then both the
sampling and the greedy policy are evaluated on the rows of Table 4:

    train: easy, train: medium, hard                (upright)
    rotations average                               (easy, observations rotated 90/180/270)
    goal top-right, goal bottom-left, random goal   (easy, goal moved)

``--family lavacrossing`` (the paper's): ``configs/minigrid/lavacrossing_<model>.gin``,
trained on LavaCrossing S9N1 + S9N2, hard = S9N3. ``--family lavagap``: the
demo's configs (``configs/demo/<model>.gin``, PPO settings tuned on LavaGap),
trained on LavaGapS5 + LavaGapS6, hard = LavaGapS7, rotations and goals on
S5: the same protocol on a task small enough for a CPU budget.

Every model gets the same CNN critic (``ppo.value_encoder``): only the policy's
encoder differs; a model whose value head shares its actor's torso
(``ppo.shared_torso``, one network as IMPALA's in the paper) keeps it there.
The tables give the success rate, mean +- std over seeds.
``--tflite`` also exports each SiT-family policy to float32 TFLite and runs
its greedy policy on the upright and rotated rows (the deployed model must
keep the rotation columns). The paper trains for 20M steps (its Table 4:
SiT 0.94 on N1 and 0.91 rotated, CNN 0.96 and 0.00); a CPU budget is far
smaller, so say which budget a table is for.

Usage (slow: about ``env_steps / 250`` seconds per SiT run on 2 cores)::

    python benchmarks/minigrid_rotation.py --models sit_small,cnn --seeds 0,1 \\
        --env_steps 1500000 --out benchmarks/results/minigrid_rotation.json
    python benchmarks/minigrid_rotation.py --family lavagap --models sit,cnn --seeds 0,1 \\
        --env_steps 200000 --tflite --out benchmarks/reference/table4_lavagap.json
    python benchmarks/minigrid_rotation.py --quick     # smoke run, a minute

A protocol too long for one session runs in parts (a model or a seed per process,
each with its own ``--out``); ``--merge a.json,b.json --out table.json`` then
checks that the parts share the family, budget, episodes and bindings and writes
one report with the tables over every run.
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
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin

from sit_keras.agents import evaluate, train
from sit_keras.agents.training import run_record, stops
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_gin_bindings,
    check_out_file,
    command_line,
    environment,
    parse_or_say_why,
    seed_list,
    write_report,
)
from sit_keras.command_line import INTERRUPTED
from sit_keras.export.exporter import export_policy
from sit_keras.export.tflite_py_policy import TFLitePyPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot_curves import training_curves  # noqa: E402  (a part's training curve, as the plot reads it)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "minigrid_rotation.json"
CONFIG_ROOT = Path(__file__).resolve().parent.parent / "configs"
CRITIC = [
    "ppo.value_encoder = 'cnn'",
    "ppo.value_encoder_kwargs = {'filters': (16, 32), 'strides': 1}",
]
# The rows below are the evaluation: the trainer's own (eval/) is off, so that train_wall_s is
# training alone (--gin_bindings 'train_eval.num_eval_episodes = 10' turns it back on).
NO_TRAINER_EVALUATION = ["train_eval.num_eval_episodes = 0"]
POLICIES = {"sampling": "policy", "greedy": "greedy_policy"}
ROTATION_ROWS = ("train: easy", "rotations average")


def _rows(easy: str, medium: str, hard: str) -> dict[str, tuple[str, tuple[str | None, ...], dict[str, Any]]]:
    """Table 4 row -> (environment, transforms, load keyword arguments)."""
    return {
        "train: easy": (easy, (None,), {}),
        "train: medium": (medium, (None,), {}),
        "hard": (hard, (None,), {}),
        "rotations average": (easy, ("rot90", "rot180", "rot270"), {}),
        "goal top-right": (easy, (None,), {"goal": "top_right"}),
        "goal bottom-left": (easy, (None,), {"goal": "bottom_left"}),
        "random goal": (easy, (None,), {"goal": "random"}),
    }


# family -> (config of a model, bindings, rows)
FAMILIES: dict[str, tuple[str, list[str], dict[str, tuple[str, tuple[str | None, ...], dict[str, Any]]]]] = {
    "lavacrossing": (
        "minigrid/lavacrossing_{model}.gin",
        CRITIC,
        _rows("minigrid:LavaCrossingS9N1", "minigrid:LavaCrossingS9N2", "minigrid:LavaCrossingS9N3"),
    ),
    "lavagap": (
        "demo/{model}.gin",
        ["train_eval.env_name = 'minigrid:LavaGapS5,LavaGapS6'"],
        _rows("minigrid:LavaGapS5", "minigrid:LavaGapS6", "minigrid:LavaGapS7"),
    ),
}
ROWS = FAMILIES["lavacrossing"][2]
# The paper's Table 4 (IMPALA, 20M steps on LavaCrossing; benchmarks/papers.json): row -> (CNN, SiT).
_PAPER = json.loads((Path(__file__).resolve().parent / "papers.json").read_text())["sit_icml2024"]
_TABLE4 = _PAPER["table_4"]
PAPER_TABLE4 = {
    row: (_TABLE4["columns"]["CNN"][row]["mean"], _TABLE4["columns"]["SiT"][row]["mean"]) for row in ROWS
}


def paper_column(model: str) -> tuple[str, str] | None:
    """(table, column) of the paper that a LavaCrossing config matches (``our_configs`` in papers.json):
    its Table 4 column, or for a model only Table 5 has (the SiT without its local layer) its Table 5
    column; None for a config the paper has no column for."""
    columns = _PAPER["our_configs"].get(model, {})
    for table in ("table_4", "table_5"):
        if table in columns:
            return table, columns[table]
    return None


def model_bindings(family: str, config: str, bindings: Sequence[str]) -> list[str]:
    """The family's bindings for one model: all of them, but the CNN critic for a shared torso.

    A model whose value head sits on its actor's torso (``ppo.shared_torso``, in its
    config or in ``bindings``) has no critic of its own to replace.
    """
    gin.clear_config()
    train.parse_gin([config], list(bindings))
    try:
        shared = bool(gin.query_parameter("ppo.shared_torso"))
    except ValueError:  # not bound: PPO's default, a critic of its own
        shared = False
    finally:
        gin.clear_config()
    return [b for b in FAMILIES[family][1] if not (shared and b in CRITIC)]


def train_one(
    family: str, model: str, seed: int, env_steps: int, root: Path, bindings: Sequence[str]
) -> tuple[str, float]:
    """Trains ``model`` of ``family`` with ``seed``; returns the run folder and the wall time."""
    config = str(CONFIG_ROOT / FAMILIES[family][0].format(model=model))
    root_dir = root / f"{model}_seed{seed}"
    family_bindings = model_bindings(family, config, bindings)
    gin.clear_config()
    train.parse_gin(
        [config],
        [
            *family_bindings,
            *NO_TRAINER_EVALUATION,
            f"train_eval.total_env_steps = {env_steps}",
            f"train_eval.seed = {seed}",
            *bindings,
        ],
    )
    start = time.perf_counter()
    try:
        train.train_eval(str(root_dir))
    finally:
        gin.clear_config()
    return str(root_dir), time.perf_counter() - start


def evaluate_rows(policy, rows, num_episodes: int) -> dict[str, dict[str, float]]:
    """Success rate and mean return of a py policy on each of ``rows``."""
    results_by_row = {}
    for row, (env_name, transforms, kwargs) in rows.items():
        results = evaluate.evaluate(
            policy, env_name, transforms, num_episodes=num_episodes, env_kwargs=kwargs
        )
        results_by_row[row] = {
            "success_rate": statistics.mean(r["success_rate"] for r in results.values()),
            "mean_return": statistics.mean(r["mean_return"] for r in results.values()),
        }
    return results_by_row


def tflite_rotation_rows(root_dir: str, rows, num_episodes: int) -> dict[str, dict[str, float]]:
    """The float32 TFLite export's greedy policy on the upright and rotated rows."""
    export_dir = os.path.join(root_dir, "export")
    report = export_policy(
        root_dir, export_dir, "policy", formats=["tflite"], quantizations=["float32"], num_examples=32
    )
    policy = TFLitePyPolicy(report["models"]["tflite_float32"]["path"])
    return evaluate_rows(policy, {row: rows[row] for row in ROTATION_ROWS}, num_episodes)


PLUS_MINUS = (
    "mean ± population standard deviation (statistics.pstdev) over the seeds of a model; "
    "a model with one seed shows its value alone"
)


def _mean_std(values: Sequence[float]) -> str:
    # One seed has no spread to show: "± 0.00" would claim one.
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.pstdev(values):.2f}"


def format_table(
    per_model: dict[str, list[dict[str, dict[str, float]]]], rows, metric: str = "success_rate"
) -> str:
    """Mean ± population std over seeds of ``metric`` per row (rows) and model (columns)."""
    models = list(per_model)
    lines = ["| test task | " + " | ".join(models) + " |", "| --- |" + " ---: |" * len(models)]
    for row in rows:
        cells = [_mean_std([run[row][metric] for run in per_model[m]]) for m in models]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables_of(runs: Sequence[dict[str, Any]], rows) -> dict[str, str]:
    """Each policy kind's markdown table over ``runs``, models in the order they first appear."""
    tables = {}
    for kind in (*POLICIES, "tflite greedy"):
        per_model: dict[str, list] = {}
        for run in runs:
            if kind in run:
                per_model.setdefault(run["model"], []).append(run[kind])
        if per_model:
            shown = rows if kind in POLICIES else {row: rows[row] for row in ROTATION_ROWS}
            tables[kind] = format_table(per_model, shown)
    return tables


def mean_return_tables_of(runs: Sequence[dict[str, Any]], rows) -> dict[str, str]:
    """The paper's metric (Appendix G.2: mean reward over the test episodes) per policy kind."""
    tables = {}
    for kind in POLICIES:
        per_model: dict[str, list] = {}
        for run in runs:
            per_model.setdefault(run["model"], []).append(run[kind])
        tables[kind] = format_table(per_model, rows, metric="mean_return")
    return tables


def paper_tables_of(runs: Sequence[dict[str, Any]], rows) -> dict[str, str]:
    """Mean return (the paper's metric) per policy kind, each model beside the paper column of its
    architecture (``paper_column``), printed as the paper prints it (its ± is not defined there)."""
    tables = {}
    for kind in POLICIES:
        per_model: dict[str, list] = {}
        for run in runs:
            per_model.setdefault(run["model"], []).append(run[kind])
        header, cells_by_row = ["test task"], {row: [row] for row in rows}
        for model, model_runs in per_model.items():
            header.append(f"{model} ({len(model_runs)} seed{'s' * (len(model_runs) > 1)})")
            for row in rows:
                cells_by_row[row].append(_mean_std([run[row]["mean_return"] for run in model_runs]))
            matched = paper_column(model)
            if matched is not None:
                table, column = matched
                header.append(f"paper {table.replace('_', ' ').capitalize()} {column}")
                for row in rows:
                    cell = _PAPER[table]["columns"][column][row]
                    cells_by_row[row].append(f"{cell['mean']:.2f} ± {cell['plus_minus']:.2f}")
        lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
        lines += ["| " + " | ".join(cells) + " |" for cells in cells_by_row.values()]
        tables[kind] = "\n".join(lines)
    return tables


def _protocol(settings: dict[str, Any], key: str) -> Any:
    """A part's setting as the protocol sees it: the bindings without their spaces and without those
    that a resumed run may change (``run_record.RESUMABLE``: how often it saves or logs, e.g.
    ``train_eval.checkpoint_interval``), which do not change what it learns."""
    if key != "gin_bindings":
        return settings[key]
    bindings = ["".join(binding.split()) for binding in settings[key]]
    return [binding for binding in bindings if binding.split("=")[0] not in run_record.RESUMABLE]


def merge_reports(paths: Sequence[str]) -> dict[str, Any]:
    """One report from reports of the same protocol run in parts (e.g. a model or a seed per process).

    The parts must agree on the family, budget, episodes and bindings (but for those that only
    say how often a run saves or logs, see ``_protocol``), no (model, seed) may appear twice, and
    the parts that state how their curves count the first step at a success level
    (``first_step_rule``) must state the same rule, which the merge keeps; each part's settings,
    machine, command and commit are kept in ``parts``, and a one-run part's wall time per process
    (``train_wall_s``, from ``table4_part.py``) under ``train_wall_s_by_process``.
    """
    reports = []
    for path in paths:
        try:
            reports.append((path, json.loads(Path(path).read_text())))
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"Cannot read the report {path}: {error}") from error
    same = ("family", "env_steps", "num_episodes", "gin_bindings")
    first_path, first = reports[0]
    for path, report in reports[1:]:
        for key in same:
            if _protocol(report["settings"], key) != _protocol(first["settings"], key):
                raise ValueError(
                    f"{path} has {key} = {report['settings'][key]!r} but {first_path} has "
                    f"{first['settings'][key]!r}: only parts of one protocol can be merged."
                )
    runs = [run for _, report in reports for run in report["runs"]]
    keys = [(run["model"], run["seed"]) for run in runs]
    duplicated = sorted({key for key in keys if keys.count(key) > 1})
    if duplicated:
        raise ValueError(f"The reports repeat (model, seed) {duplicated}.")
    rules = {report["first_step_rule"] for _, report in reports if "first_step_rule" in report}
    if len(rules) > 1:
        raise ValueError(f"The reports count a curve's first step at a threshold in different ways: {rules}.")
    settings = {key: _protocol(first["settings"], key) for key in same}
    rows = FAMILIES[settings["family"]][2]
    merged = {
        "benchmark": "minigrid_rotation",
        "settings": settings,
        "rows": first["rows"],
        "runs": runs,
        "plus_minus": PLUS_MINUS,
        "tables": tables_of(runs, rows),
        "mean_return_tables": mean_return_tables_of(runs, rows),
        "paper_tables": paper_tables_of(runs, rows),
        "training_curves": {
            run: curve for _, report in reports for run, curve in training_curves(report).items()
        },
        "paper_table4_cnn_sit_20M_steps": PAPER_TABLE4,
        "parts": [
            {"file": path, **{k: report.get(k) for k in ("command", "commit", "machine", "settings")}}
            for path, report in reports
        ],
    }
    if rules:  # how the parts' curves count their first step at 0.5 / 0.8 / 0.9
        merged["first_step_rule"] = rules.pop()
    # A resumed run's runs[].train_wall_s is its last process's; a part built by table4_part.py
    # keeps the time of each of its processes and their total.
    walls = {
        f"{report['runs'][0]['model']}_seed{report['runs'][0]['seed']}": report["train_wall_s"]
        for _, report in reports
        if isinstance(report.get("train_wall_s"), dict) and len(report["runs"]) == 1
    }
    if walls:
        merged["train_wall_s_by_process"] = walls
    return merged


def _print_tables(tables: dict[str, str], seeds: str, env_steps: int, family: str) -> None:
    for kind, table in tables.items():
        print(f"\nSuccess rate ({kind} policy), mean ± std over seeds {seeds}, after {env_steps} "
              f"steps, {family}:\n\n{table}")  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", choices=list(FAMILIES), default="lavacrossing")
    parser.add_argument("--models", default="sit_small,cnn", help="the family's config names")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--env_steps", type=int, default=300_000)
    parser.add_argument("--num_episodes", type=int, default=100, help="per row (and per rotation)")
    parser.add_argument("--tflite", action="store_true", help="also the float32 TFLite of SiT-family models")
    parser.add_argument("--root", default="runs/minigrid_rotation", help="training runs go here (resumable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="extra bindings for every run")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="smoke run: cnn, 1 seed, 2048 steps, 4 episodes")
    parser.add_argument(
        "--merge", default="", help="comma-separated reports of parts of one protocol: merge them into --out"
    )
    args = parser.parse_args(argv)
    check_out_file(args.out)
    if args.merge:
        if not any(args.merge.split(",")):
            raise UsageError(f"--merge names no report; received {args.merge!r}.")
        for path in args.merge.split(","):
            if path and not os.path.isfile(path):
                raise UsageError(f"--merge: the report {path!r} does not exist.")
        return args
    if args.quick:
        args.models, args.seeds, args.env_steps, args.num_episodes = "cnn", "0", 2048, 4
    seed_list(args.seeds)
    for flag in ("env_steps", "num_episodes"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    config = FAMILIES[args.family][0]
    for model in args.models.split(","):
        if not (CONFIG_ROOT / config.format(model=model)).exists():
            raise UsageError(
                f"--models: no config {config.format(model=model)!r} under configs/ for {model!r}."
            )
    if Path(args.root).exists() and not Path(args.root).is_dir():
        raise UsageError(f"--root must be a folder; received {args.root!r}, a file.")
    for model in args.models.split(","):  # --gin_bindings, before anything trains
        path = str(CONFIG_ROOT / config.format(model=model))

        def parse(path: str = path) -> None:
            family_bindings = model_bindings(args.family, path, args.gin_bindings)
            train.parse_gin([path], [*family_bindings, *args.gin_bindings])

        check_gin_bindings(parse, config.format(model=model))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    if args.merge:
        try:
            report = merge_reports([p for p in args.merge.split(",") if p])
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
        except (KeyError, TypeError, IndexError) as error:
            print(f"--merge: not every report is a minigrid_rotation.py report ({error!r}).", file=sys.stderr)
            return 2
        seeds_of: dict[str, list[int]] = {}
        for run in report["runs"]:
            seeds_of.setdefault(run["model"], []).append(run["seed"])
        seeds = "; ".join(f"{model} {sorted(model_seeds)}" for model, model_seeds in seeds_of.items())
        _print_tables(report["tables"], seeds, report["settings"]["env_steps"], report["settings"]["family"])
        for kind, table in report["mean_return_tables"].items():
            print(f"\nMean return ({kind} policy; the paper's metric), {PLUS_MINUS}:\n\n{table}")
        for kind, table in report["paper_tables"].items():
            print(f"\nMean return ({kind} policy) beside the paper's column of each model:\n\n{table}")
        report["command"] = command_line("minigrid_rotation.py", argv)  # how to merge the same parts again
        write_report(report, args.out)
        return 0
    seeds = seed_list(args.seeds)
    _, _, rows = FAMILIES[args.family]
    models = args.models.split(",")

    # The command and the commit the runs start from (HEAD may move while they run).
    command = command_line("minigrid_rotation.py", argv)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=CONFIG_ROOT.parent
    ).stdout.strip()
    machine = environment()
    runs = []
    for model in models:
        for seed in seeds:
            print(f"== {model}, seed {seed}: {args.env_steps} steps", flush=True)
            try:
                root_dir, seconds = train_one(
                    args.family, model, seed, args.env_steps, Path(args.root), args.gin_bindings
                )
            except stops.Interrupted as stop:  # SIGTERM or Ctrl-C: the run saved a checkpoint
                print(f"minigrid_rotation.py: {stop}", file=sys.stderr)
                return INTERRUPTED
            run: dict[str, Any] = {
                "model": model,
                "seed": seed,
                "root_dir": root_dir,
                "train_wall_s": seconds,
            }
            for kind, saved in POLICIES.items():
                policy = evaluate.load_policy(os.path.join(root_dir, "policies", saved))
                run[kind] = evaluate_rows(policy, rows, args.num_episodes)
            if args.tflite and model.startswith("sit"):
                run["tflite greedy"] = tflite_rotation_rows(root_dir, rows, args.num_episodes)
            runs.append(run)
    tables = tables_of(runs, rows)
    _print_tables(tables, str(seeds), args.env_steps, args.family)
    report = {
        "benchmark": "minigrid_rotation",
        "command": command,
        "commit": commit,
        "machine": machine,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "merge")},
        "rows": {
            row: {"env": env, "transforms": list(t), "env_kwargs": kw} for row, (env, t, kw) in rows.items()
        },
        "runs": runs,
        "tables": tables,
        "paper_table4_cnn_sit_20M_steps": PAPER_TABLE4,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
