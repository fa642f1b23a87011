"""The documentation's result tables come from the committed reports in benchmarks/reference/.

Each test reads one report and checks that the page quoting it (README.md or a page of
docs/) quotes it: the markdown table the benchmark wrote, verbatim, or the numbers
formatted as the page prints them. A quoted number cannot drift from its file.
"""

from __future__ import annotations

import ast
import collections
import functools
import itertools
import json
import math
import shlex
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from run_folders import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "benchmarks" / "reference"
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
RESULTS = (DOCS / "results.md").read_text()  # results beside the papers
TRAINING = (DOCS / "training.md").read_text()  # deterministic mode's cost, the demo under both precisions
SPEED = (DOCS / "speed.md").read_text()
EXPORT = (DOCS / "export.md").read_text()
# docs/lavacrossing.md's "In short" list: what the README's LavaCrossing bullet points to.
LAVACROSSING_SHORT = " ".join(
    (DOCS / "lavacrossing.md").read_text().split("## In short")[1].split("\n## ")[0].split()
)


# The papers' numbers, with their table, row and column: the one place they are written down.
PAPERS = json.loads((ROOT / "benchmarks" / "papers.json").read_text())
TABLE4 = PAPERS["sit_icml2024"]["table_4"]["columns"]


@functools.cache
def _flat_page(name: str) -> str:
    """A page of docs/ with its whitespace flattened: a quoted sentence may wrap anywhere."""
    return " ".join((DOCS / name).read_text().split())


def _report(name: str) -> dict:
    return json.loads((REFERENCE / name).read_text())


def _paper(column: str, row: str, table: str = "table_4") -> float:
    return PAPERS["sit_icml2024"][table]["columns"][column][row]["mean"]


def _paper_column(model: str) -> tuple[str, str, str]:
    """(table, column, how the docs name it) of a LavaCrossing config: its Table 4 column, or for a model
    that only Table 5 has (the SiT without its local layer) its Table 5 column."""
    columns = PAPERS["sit_icml2024"]["our_configs"][model]
    table = "table_4" if "table_4" in columns else "table_5"
    name = columns[table] if table == "table_4" else f"Table 5 {columns[table]}"
    return table, columns[table], name


@pytest.mark.parametrize("name", ["table4_lavacrossing_1.5m.json", "table4_lavacrossing_3m.json"])
def test_the_reports_quote_the_papers_numbers(name):
    quoted = _report(name)["paper_table4_cnn_sit_20M_steps"]
    assert quoted == {row: [_paper("CNN", row), _paper("SiT", row)] for row in quoted}
    assert set(quoted) == set(TABLE4["CNN"])


def test_every_lavacrossing_config_has_its_paper_column():
    tables = PAPERS["sit_icml2024"]
    configs = {
        p.stem.removeprefix("lavacrossing_")
        for p in (ROOT / "configs" / "minigrid").glob("lavacrossing_*.gin")
    }
    assert configs == set(tables["our_configs"]), "each LavaCrossing config needs its paper column"
    for model, columns in tables["our_configs"].items():
        assert (ROOT / "configs" / "minigrid" / f"lavacrossing_{model}.gin").exists(), model
        for table, column in columns.items():
            assert column in tables[table]["columns"], (model, table, column)


@pytest.mark.parametrize(
    "name",
    [
        "pi_cartpole_distill.json",
        "pi_cartpole_dagger.json",
        "pi_cartpole_dagger_pi128.json",
        "pi_cartpole_dagger_h32.json",
        "pi_cartpole_dagger_h32_anneal.json",
    ],
)
def test_cartpole_distillation_tables_are_the_reports(name):
    report = _report(name)
    # Every row of the benchmark's table (the teacher's is printed once, above the first table).
    for line in report["markdown"].splitlines():
        assert line in RESULTS, line
    assert f"`benchmarks/reference/{name}`" in RESULTS
    assert report["commit"] and report["command"].startswith("benchmarks/pi_cartpole_distill.py")
    # Every cell of the table is a measured mean over the stated number of episodes.
    for per_test in report["results"].values():
        for summary in per_test.values():
            assert len(summary["returns"]) == report["test_settings"]["num_episodes"]


def test_lavacrossing_learnability_numbers_are_the_report():
    run = _report("lavacrossing_learnability.json")["runs"][-1]
    first = run["first_step_with_success_at_least"]
    last = run["last_log"]
    quoted = (
        f"reached 0.5 at {first['0.5'] / 1e6:.2f}M steps, 0.8 at {first['0.8'] / 1e6:.2f}M and "
        f"{last['success']:.2f} at {last['env_steps'] / 1e6:.2f}M"
    )
    assert " ".join(quoted.split()) in " ".join(RESULTS.split())
    assert f"({run['wall_time_minutes']:.0f} min on the shared machine" in RESULTS


def test_demo_precision_table_is_the_report():
    report = _report("demo_precision.json")
    for policy, per_precision in _demo_rows(report).items():
        cells = " | ".join(f"{v:.2f}" for pair in per_precision for v in pair)
        assert f"| {policy} | {cells} |" in TRAINING, policy
    assert "`benchmarks/reference/demo_precision.json`" in TRAINING


def _demo_rows(report: dict) -> dict[str, list[tuple[float, float]]]:
    """Upright and rotation-average success per policy and precision, as docs/training.md's table."""
    rows = {}
    for policy in ("sit (greedy)", "sit (sampling)", "cnn (greedy)", "cnn (sampling)", "sit (TFLite float32)",
                   "sit (TFLite int8)"):  # fmt: skip
        rows[policy] = []
        for precision in ("float32", "mixed_bfloat16"):
            success = report["runs"][precision]["success"][policy]
            rotated = sum(success[t] for t in ("rot90", "rot180", "rot270")) / 3
            rows[policy].append((success["none"], rotated))
    return rows


def test_table4_lavagap_tables_are_the_report():
    report = _report("table4_lavagap.json")
    for kind in ("sampling", "greedy", "tflite greedy"):
        assert report["tables"][kind] in RESULTS, kind
    assert "`benchmarks/reference/table4_lavagap.json`" in RESULTS
    # The per-seed rotation figures, quoted in docs/results.md and in the README's summary.
    for page in (RESULTS, README):
        flat = " ".join(page.split())
        for run in report["runs"]:
            if run["model"] == "sit":
                rows = run["sampling"]
                upright, rotated = (
                    rows["train: easy"]["success_rate"],
                    rows["rotations average"]["success_rate"],
                )
                assert f"seed {run['seed']}: {upright:.2f} upright and {rotated:.2f} rotated" in flat
    # The README's summary: the CNN's rotated score, sampling and greedy alike.
    cnn = [
        statistics.mean(
            run[kind]["rotations average"]["success_rate"] for run in report["runs"] if run["model"] == "cnn"
        )
        for kind in ("sampling", "greedy")
    ]
    assert f"{cnn[0]:.2f}" == f"{cnn[1]:.2f}"
    assert f"the CNN scores {cnn[0]:.2f} rotated" in " ".join(README.split())


def _check_lavacrossing_report(report: dict, name: str, budget: int) -> None:
    """docs/results.md quotes the report's tables and names it; 2 seeds of each model at ``budget`` steps."""
    for kind in ("sampling", "greedy", "tflite greedy"):
        assert report["tables"][kind] in RESULTS, kind
    assert f"`benchmarks/reference/{name}`" in RESULTS
    assert {(run["model"], run["seed"]) for run in report["runs"]} == {
        (model, seed) for model in ("cnn", "sit_small") for seed in (0, 1)
    }
    assert report["settings"]["env_steps"] == report["budget_env_steps_per_run"] == budget


def test_table4_lavacrossing_tables_are_the_report():
    report = _report("table4_lavacrossing_1.5m.json")
    _check_lavacrossing_report(report, "table4_lavacrossing_1.5m.json", 1_500_000)
    flat = " ".join(RESULTS.split())
    # The CNN's greedy column quoted beside the paper's.
    greedy = {row: [run["greedy"][row]["success_rate"] for run in report["runs"] if run["model"] == "cnn"]
              for row in report["rows"]}  # fmt: skip
    mean = {row: sum(values) / len(values) for row, values in greedy.items()}
    paper_cnn = {row: cnn for row, (cnn, _) in report["paper_table4_cnn_sit_20M_steps"].items()}
    assert f"train N1 {mean['train: easy']:.2f} (paper {paper_cnn['train: easy']:.2f})" in flat
    assert f"N2 {mean['train: medium']:.2f} ({paper_cnn['train: medium']:.2f})" in flat
    assert f"hard N3 {mean['hard']:.2f} ({paper_cnn['hard']:.2f})" in flat
    assert f"rotations {mean['rotations average']:.2f} ({paper_cnn['rotations average']:.2f})" in flat
    # The training curves quoted: the CNN's steps to 0.5, the SiT's peak and last success.
    curves = report["training_curves"]
    firsts = [curves[f"cnn_seed{s}"]["first_step_with_success_at_least"]["0.5"] / 1e6 for s in (0, 1)]
    assert f"reached 0.5 at {firsts[0]:.2f}M and {firsts[1]:.2f}M" in flat
    peaks = [curves[f"sit_small_seed{s}"]["max_success"] for s in (0, 1)]
    lasts = [curves[f"sit_small_seed{s}"]["last"]["success"] for s in (0, 1)]
    assert f"peaked at {peaks[0]:.2f} (seed 0) and {peaks[1]:.2f} (seed 1)" in flat
    assert f"ended at {lasts[0]:.2f} and {lasts[1]:.2f}" in flat


def _lavacrossing_3m_quoted() -> dict[str, str]:
    """The sentences docs/results.md quotes from table4_lavacrossing_3m.json, beside the paper's numbers."""
    report = _report("table4_lavacrossing_3m.json")
    by_run = {(run["model"], run["seed"]): run for run in report["runs"]}
    cnn = {row: sum(by_run["cnn", s]["greedy"][row]["success_rate"] for s in (0, 1)) / 2
           for row in report["rows"]}  # fmt: skip
    paper = {row: _paper("CNN", row) for row in report["rows"]}
    # SiT seed 0, quoted beside the paper's SiT-1 column (one local, one global layer).
    sit = {row: value["success_rate"] for row, value in by_run["sit_small", 0]["sampling"].items()}
    sit_paper = {row: _paper("SiT-1", row) for row in report["rows"]}
    curves = report["training_curves"]
    first = curves["sit_small_seed0"]["first_step_with_success_at_least"]["0.5"] / 1e6
    return {
        "cnn_n1_n2": (
            f"N1 {cnn['train: easy']:.2f} (paper {paper['train: easy']:.2f}), "
            f"N2 {cnn['train: medium']:.2f} ({paper['train: medium']:.2f})"
        ),
        "cnn_n3": f"hard N3 {cnn['hard']:.2f} ({paper['hard']:.2f})",
        "cnn_rotation": f"under rotation, {cnn['rotations average']:.2f} ({paper['rotations average']:.2f})",
        "sit_upright_rotated": (
            f"upright N1 {sit['train: easy']:.2f} ({sit_paper['train: easy']:.2f}) and rotated "
            f"{sit['rotations average']:.2f} ({sit_paper['rotations average']:.2f})"
        ),
        "sit_goals": (
            f"goal top-right {sit['goal top-right']:.2f} ({sit_paper['goal top-right']:.2f}), "
            f"bottom-left {sit['goal bottom-left']:.2f} ({sit_paper['goal bottom-left']:.2f}), "
            f"random goal {sit['random goal']:.2f} ({sit_paper['random goal']:.2f})"
        ),
        "sit_harder": (
            f"N2 {sit['train: medium']:.2f} ({sit_paper['train: medium']:.2f}), N3 {sit['hard']:.2f} "
            f"({sit_paper['hard']:.2f})"
        ),
        "sit_curve": (
            f"reached 0.5 at {first:.2f}M steps and ended at "
            f"{curves['sit_small_seed0']['last']['success']:.2f}"
        ),
        "sit_seed1": f"Seed 1 ended at {curves['sit_small_seed1']['last']['success']:.2f}",
    }


def test_table4_lavacrossing_3m_tables_are_the_report():
    report = _report("table4_lavacrossing_3m.json")
    _check_lavacrossing_report(report, "table4_lavacrossing_3m.json", 3_000_000)
    # Every run resumed the 1.5M-step run of the same model and seed: both halves' times are kept.
    for key, wall in report["train_wall_minutes"].items():
        first = _report("table4_lavacrossing_1.5m.json")["train_wall_minutes"][key]
        assert wall["first_1.5M_steps"] == first and wall["total"] > first
    quoted = _lavacrossing_3m_quoted()
    flat = " ".join(RESULTS.split())
    for name, sentence in quoted.items():
        assert sentence in flat, name
    by_run = {(run["model"], run["seed"]): run for run in report["runs"]}
    greedy = by_run["sit_small", 0]["greedy"]
    tflite = by_run["sit_small", 0]["tflite greedy"]
    assert greedy["train: easy"] == greedy["rotations average"] == tflite["rotations average"]


def test_cartpole_teacher_is_the_report():
    final = _report("cartpole_sac_teacher.json")["final"]
    flat = " ".join(RESULTS.split())
    assert f"{final['mean_return']:.0f} ± {final['std_return']:.0f} greedy over its last 5 evaluation" in flat
    assert len(final["returns"]) == 5


def test_ppo_precision_table_is_the_report():
    report = _report("ppo_precision.json")
    assert report["table"] in SPEED
    ratio = report["ratios"]["sit:mixed_bfloat16_over_sit_env_steps_per_second"]
    assert f"{ratio:.2f}x as many env steps/s" in " ".join(SPEED.split())


def test_cartpole_student_seed_study_is_the_report():
    report = _report("pi_cartpole_dagger_h32_seeds.json")
    for line in report["markdown"].splitlines():
        assert line in RESULTS, line
    assert "`benchmarks/reference/pi_cartpole_dagger_h32_seeds.json`" in RESULTS
    for run in report["runs"]:
        assert run["commit"] and run["command"].startswith("benchmarks/pi_cartpole_distill.py")
        assert f"--seed {run['seed']}" in run["command"] or run["seed"] == 0
        assert run["settings"]["total_env_steps"] == 320_000 and run["settings"]["dagger_rounds"] == 4
        for cell in run["results"].values():
            assert cell["episodes"] == report["test_settings"]["num_episodes"]
        # Seed 0's runs are the committed single-run reports: the same numbers.
        if run["report"]:
            single = _report(Path(run["report"]).name)["results"]["pi"]
            assert {t: c["mean"] for t, c in run["results"].items()} == {
                t: single[t]["mean"] for t in run["results"]
            }
    seeds = {}
    for run in report["runs"]:
        seeds.setdefault(run["variant"], set()).add(run["seed"])
    assert seeds["no decay"] == seeds["decay"] == {0, 1, 2}


def test_cartpole_direct_ppo_route_is_the_report():
    report = _report("pi_cartpole_ppo.json")
    for table in report["markdown"].values():
        for line in table.splitlines():
            assert line in RESULTS, line
    assert "`benchmarks/reference/pi_cartpole_ppo.json`" in RESULTS
    for budget, per_policy in report["budgets"].items():
        steps = {"1.5M": 1_500_000, "3M": 3_000_000}[budget]
        for name, run in per_policy.items():
            assert run["commit"] and f"--env_steps {steps}" in run["commands"][0]
            assert f"--policies {name}" in run["commands"][0]
            for cell in run["results"].values():
                assert len(cell["returns"]) == cell["episodes"] == report["test_settings"]["num_episodes"]
    for name in ("pi", "mlp"):
        assert (
            report["budgets"]["3M"][name]["train_seconds"] > report["budgets"]["1.5M"][name]["train_seconds"]
        )
        assert report["training_curves"][name]["last"]["env_steps"] == 3_000_000


def test_export_latency_table_is_the_report():
    report = _report("export_latency.json")
    assert report["table"] in EXPORT
    assert "`benchmarks/reference/export_latency.json`" in EXPORT
    assert report["commit"] and report["command"].startswith(
        "TF_USE_LEGACY_KERAS=1 python benchmarks/export.py"
    )
    assert report["wall_seconds"] > 0 and report["budget"]
    ratios = [r["saved_model_vs_tflite_float32"] for r in report["results"].values()]
    assert f"Met for every policy: {min(ratios):.1f}x (IMPALA-CNN) to {max(ratios):.0f}x" in " ".join(
        EXPORT.split()
    )
    # The README's summary.
    assert f"{min(ratios):.1f}x (IMPALA-CNN) to {max(ratios):.0f}x faster than the SavedModel" in " ".join(
        README.split()
    )


def test_the_papers_table4_in_the_results_page_is_the_papers_file():
    columns = ["CNN", "ViT", "SiT-1", "SiT"]
    lines = ["| row | " + " | ".join(columns) + " |", "| --- | " + " | ".join("---:" for _ in columns) + " |"]
    for row in TABLE4["CNN"]:
        lines.append(f"| {row} | " + " | ".join(f"{_paper(c, row):.2f}" for c in columns) + " |")
    assert "\n".join(lines) in RESULTS


def test_every_learnability_run_has_its_provenance():
    for run in _report("lavacrossing_learnability.json")["runs"]:
        assert run["commit"] and run["command"].startswith("sit-train "), run["run"]
        assert run["wall_time_minutes"] > 0 and "shared/" not in run["source"], run["run"]


def test_deterministic_cost_is_the_report():
    report = _report("deterministic_cost.json")
    flat = " ".join(TRAINING.split())
    assert "`benchmarks/reference/deterministic_cost.json`" in TRAINING
    assert report["commit"] and report["command"].startswith("python benchmarks/deterministic_cost.py")
    for workload, row in report["table"].items():
        runs = report["runs"][workload]
        medians = {mode: statistics.median(r["sps"] for r in runs[mode]) for mode in runs}
        assert medians == row["env_steps_per_second"]  # recomputed from the per-process runs
        ratio = medians["deterministic"] / medians["default"]
        assert f"{workload} {ratio:.2f}x" in flat, workload


def test_supervised_digits_table_is_computed_from_the_report():
    bench = load_benchmark("supervised")
    report = _report("supervised_digits.json")
    assert bench.readme_table(report) == report["readme_table"]  # recomputed from the per-seed runs
    for line in report["readme_table"].splitlines():
        assert line in RESULTS, line
    assert "`benchmarks/reference/supervised_digits.json`" in RESULTS
    assert report["commit"] and report["command"].startswith("python benchmarks/supervised.py")
    for record in report["models"].values():
        assert all(len(runs) == len(report["settings"]["seeds"]) for runs in record["runs"].values())
    ratios = report["layers"]["p4"]["ratios"]["graph"]
    flat = " ".join(RESULTS.split())
    assert (
        f"costs {ratios['lifting_over_mha']:.1f}x (lifting) and {ratios['group_over_mha']:.2f}x (group layer)"
        in flat
    )


# docs/lavacrossing.md's probe table: column -> (split, key) of a probe result; loss is the last window's.
PROBE_COLUMNS = {
    "all": ("heldout_greedy_accuracy", "all"),
    "open floor": ("heldout_greedy_accuracy", "open_floor"),
    "left/right only": ("heldout_greedy_accuracy", "turn_only"),
    "training states": ("train_greedy_accuracy", "all"),
    "final loss": ("loss_last", None),
}


def _probe_results(learning_rate: float = 1e-3) -> dict[tuple[str, int], dict]:
    """Every 3,000-step probe run on the 20,000-state data at ``learning_rate``, by (model, seed)."""
    results = {}
    for path in sorted(REFERENCE.glob("lavacrossing_probe*.json")):
        report = json.loads(path.read_text())
        settings = report["settings"]
        run_settings = (settings["steps"], settings["num_states"], settings["learning_rate"])
        if run_settings == (3000, 20000, learning_rate):
            for run in report["results"]:
                assert (run["model"], run["seed"]) not in results, path.name  # one report per cell
                results[run["model"], run["seed"]] = run
    return results


def _agrees(cell: str, value: float) -> bool:
    """The cell is ``value`` rounded to the cell's own number of decimals."""
    decimals = len(cell.split(".")[1]) if "." in cell else 0
    return abs(float(cell) - value) <= 0.5 * 10**-decimals + 1e-9


def test_lavacrossing_probe_table_is_the_reports():
    page = (ROOT / "docs" / "lavacrossing.md").read_text()
    lines = page[page.index("| model | all |") :].split("\n\n")[0].splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[1:] == list(PROBE_COLUMNS)
    results = _probe_results()
    rows = 0
    for line in lines[1:]:
        cells = [c.strip().replace("*", "") for c in line.strip("|").split("|")]
        if cells[0].startswith("---"):
            continue
        model = cells[0].split("`")[1]
        for column, cell in zip(PROBE_COLUMNS, cells[1:], strict=True):
            split, key = PROBE_COLUMNS[column]
            for seed, part in enumerate(cell.split(" / ")):
                measured = results[model, seed][split]
                value = measured if key is None else measured[key]
                assert _agrees(part, value), (model, seed, column, part, value)
        rows += 1
    assert rows >= 7


def test_lavacrossing_probe_step_time_ratios_are_the_reports():
    """docs/lavacrossing.md's cost table: each model's median train step over SiT-small's, per host."""
    hosts = [_report(f"lavacrossing_probe_timing{suffix}.json") for suffix in ("", "_chiral")]
    steps = [{r["model"]: r["seconds_per_step_median"] for r in report["results"]} for report in hosts]
    page = (ROOT / "docs" / "lavacrossing.md").read_text()
    table = page[page.index("| model | first host | second host |") :].split("\n\n")[0].splitlines()[2:]
    assert len(table) >= 5
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        model = cells[0].split("`")[1]
        for host, cell in zip(steps, cells[1:], strict=True):
            assert (model in host) == bool(cell), (model, cell)
            if cell:
                assert _agrees(cell.removesuffix("x"), host[model] / host["sit_small"]), (model, cell)


def test_the_results_page_quotes_the_chiral_probe():
    results = _probe_results()
    held_out = " / ".join(
        f"{results['sit_small_chiral_m4_corners', seed]['heldout_greedy_accuracy']['all']:.2f}"
        for seed in (0, 1)
    )
    timing = {
        r["model"]: r["seconds_per_step_median"]
        for r in _report("lavacrossing_probe_timing_chiral.json")["results"]
    }
    ratio = timing["sit_small_chiral_m4_corners"] / timing["sit_small"]
    assert f"brings it to {held_out}, at {ratio:.2f}x" in " ".join(RESULTS.split())


def _loss_below(run: dict, level: float) -> int:
    """The first logged step at which a probe run's training loss is below ``level``."""
    return next(step for step, loss in run["loss_curve"] if loss < level)


def _seed_pair(results: dict, model: str, quantity: Callable[[dict], str]) -> str:
    """``"<seed 0> / <seed 1>"``: a probe quantity of one model as the docs quote it."""
    return " / ".join(quantity(results[model, seed]) for seed in (0, 1))


def _steps_to_08(run: dict) -> str:
    return f"{_loss_below(run, 0.8):,}"


def _loss_at_600(run: dict) -> str:
    return f"{dict(run['loss_curve'])[600]:.2f}"


def _held_out(key: str = "all") -> Callable[[dict], str]:
    return lambda run: f"{run['heldout_greedy_accuracy'][key]:.2f}"


def test_what_the_symmetry_costs_the_optimisation_is_quoted_as_measured():
    """docs/lavacrossing.md: the chiral SiT against the same encoder with translation-only graphs."""
    results = _probe_results()
    chiral = "sit_small_chiral_m4_corners"
    pair = functools.partial(_seed_pair, results)
    below, loss_at_600, held_out = _steps_to_08, _loss_at_600, _held_out()
    page = _flat_page("lavacrossing.md")
    for text in (
        f"its imitation loss is below 0.8 by step {pair(chiral + '_translation', below)} (seeds 0 / 1), "
        f"where the chiral SiT's stays above 0.8 for the first {pair(chiral, below)} steps and the CNN's "
        f"is below it by step {pair('cnn', below)}",
        f"its loss is {pair(chiral + '_translation', loss_at_600)} against the chiral SiT's "
        f"{pair(chiral, loss_at_600)}",
        f"only in the stem gives {pair(chiral + '_translation_stem', below)} steps, only in the GSA layers "
        f"{pair(chiral + '_translation_gsa', below)}",
        f"({pair(chiral + '_translation', held_out)} against {pair(chiral, held_out)})",
    ):
        assert text in page, text


def test_the_rotation_pooled_stem_probe_is_quoted_as_measured():
    """docs/lavacrossing.md: the chiral SiT with a rotation-pooled stem against its chiral graph stem."""
    results = _probe_results()
    chiral, pooled = "sit_small_chiral_m4_corners", "sit_small_rotation_pooled_m4_corners"
    report = _report("lavacrossing_probe_rotation_pooled.json")
    assert report["command"].startswith("python benchmarks/lavacrossing_probe.py --models " + pooled)
    pair = functools.partial(_seed_pair, results)
    below, loss_at_600, held_out = _steps_to_08, _loss_at_600, _held_out()
    page = _flat_page("lavacrossing.md")
    for text in (
        f"stays above 0.8 for the first {pair(pooled, below)} steps "
        f"(the chiral SiT's: {pair(chiral, below)})",
        f"it is {pair(pooled, loss_at_600)} at step 600 ({pair(chiral, loss_at_600)})",
        f"held-out accuracy ends at {pair(pooled, held_out)} ({pair(chiral, held_out)})",
        f"(their translation-only graphs alone give {pair(chiral + '_translation_gsa', below)} steps)",
    ):
        assert text in page, text


def test_the_rotation_pooled_patch_readout_probe_is_quoted_as_measured():
    """docs/lavacrossing.md, "Reading the patch grid": the SieT readout against the chiral SiT and the CNN."""
    results = _probe_results()
    chiral, pooled = "sit_small_chiral_m4_corners", "siet_rotation_pooled_m4_corners"
    report = _report("lavacrossing_probe_siet_rotation_pooled.json")
    assert report["command"].startswith("python benchmarks/lavacrossing_probe.py --models " + pooled)
    pair = functools.partial(_seed_pair, results)
    below, loss_at_600, accuracy = _steps_to_08, _loss_at_600, _held_out
    page = _flat_page("lavacrossing.md")
    for text in (
        f"the loss is below 0.8 by step {pair(pooled, below)} (the chiral SiT's: {pair(chiral, below)})",
        f"and {pair(pooled, loss_at_600)} at step 600 ({pair(chiral, loss_at_600)})",
        f"Held-out accuracy ends at {pair(pooled, accuracy('all'))}, against the chiral SiT's "
        f"{pair(chiral, accuracy('all'))} and the CNN's {pair('cnn', accuracy('all'))}",
        f"and {pair(pooled, accuracy('turn_only'))} on the left/right-only states "
        f"({pair(chiral, accuracy('turn_only'))}; the CNN's {pair('cnn', accuracy('turn_only'))})",
    ):
        assert text in page, text


def test_the_cost_under_table_4s_protocol_is_quoted_as_measured():
    """docs/lavacrossing.md: the SieT readout's cost per env step with the CNN critic of every Table 4 run."""
    cost = _report("lavacrossing_cost_protocol.json")
    assert cost["command"].startswith("python benchmarks/lavacrossing_cost.py --models sit_small,")
    assert len(cost["commit"]) == 40 and cost["repeats"] == 3
    critic = "ppo.value_encoder = 'cnn'"
    assert all(critic in bindings for bindings in cost["bindings"].values())
    table = cost["table"]
    for model, runs in cost["runs"].items():
        assert len(runs) == cost["repeats"]
        assert table[model]["env_steps_per_second"] == statistics.median(r["sps"] for r in runs)
    sps = {m: v["env_steps_per_second"] for m, v in table.items()}
    ratio = {m: sps["sit_small"] / v for m, v in sps.items()}
    page = _flat_page("lavacrossing.md")
    for text in (
        f"the SieT readout costs **{ratio['siet_rotation_pooled']:.2f}x** SiT-small "
        f"({sps['siet_rotation_pooled']:.1f} against {sps['sit_small']:.1f} env steps/s) and the CNN "
        f"{ratio['cnn']:.2f}x ({sps['cnn']:.1f}); medians of {cost['repeats']} repeats of "
        f"{cost['env_steps_per_process']:,} steps",
        f"it costs {ratio['siet_rotation_pooled']:.2f}x SiT-small per environment step "
        "(`benchmarks/reference/lavacrossing_cost_protocol.json`)",
    ):
        assert text in page, text


def _cost_medians(report: dict) -> dict[str, float]:
    """A ``lavacrossing_cost.py`` report's env steps/s per model: its repeats' medians, as its table says."""
    sps = {m: statistics.median(r["sps"] for r in runs) for m, runs in report["runs"].items()}
    assert sps == {m: row["env_steps_per_second"] for m, row in report["table"].items()}
    return sps


def _avx512_cost_medians(name: str, models: str, out: str) -> dict[str, float]:
    """A ``lavacrossing_cost.py`` report from the AVX-512 host (3 repeats of 10,240 steps): its medians."""
    cost = _report(name)
    assert cost["command"] == (
        f"python benchmarks/lavacrossing_cost.py --models {models} --repeats 3 --env_steps 10240 --out {out}"
    )
    assert "avx512f" in cost["cpu_flags"] and "no amx" in cost["cpu_flags"] and cost["wall_note"]
    return _cost_medians(cost)


def test_the_lavacrossing_throughput_before_and_after_the_composed_token_row_is_quoted_as_measured():
    """docs/speed.md's LavaCrossing table and docs/lavacrossing.md's 2.09x come from the two cost reports."""
    speed = _flat_page("speed.md")
    lava = _flat_page("lavacrossing.md")
    for name, commit in (
        ("lavacrossing_cost_protocol.json", "519bf1f"),
        ("lavacrossing_cost_composed_token.json", "e1b0537"),
    ):
        report = _report(name)
        assert report["commit"].startswith(commit)
        sps = _cost_medians(report)
        row = (
            f"| `{name}` | {commit} | {sps['sit_small']:.1f} | {sps['cnn']:.1f} | "
            f"{sps['sit_small'] / sps['cnn']:.2f}x | {sps['siet_rotation_pooled']:.1f} |"
        )
        assert row in speed, row
    assert sps["sit_small"] / sps["cnn"] >= 0.6  # the speed issue's LavaCrossing target, after
    assert (
        f"SiT-small most: {sps['sit_small']:.1f} env steps/s against the SieT readout's "
        f"{sps['siet_rotation_pooled']:.1f}, **{sps['sit_small'] / sps['siet_rotation_pooled']:.2f}x**"
    ) in lava


def test_the_lavacrossing_throughput_on_a_host_without_avx512_is_quoted_as_measured():
    """docs/speed.md: SiT-small and the CNN in one run of lavacrossing_cost.py on an AVX2-only host."""
    report = _report("lavacrossing_cost_avx2.json")
    assert report["command"].startswith("python benchmarks/lavacrossing_cost.py --models sit_small,cnn ")
    assert report["commit"].startswith("9a5a828") and "avx512" not in report["cpu_flags"].split(";")[0]
    sps = _cost_medians(report)
    speed = _flat_page("speed.md")
    assert (
        f"at 9a5a828, {report['repeats']} repeats with nothing else running "
        "(`benchmarks/reference/lavacrossing_cost_avx2.json`), measured SiT-small at "
        f"{sps['sit_small']:.1f} env steps/s and the CNN at {sps['cnn']:.1f}: "
        f"**{sps['sit_small'] / sps['cnn']:.2f}x**"
    ) in speed
    assert sps["sit_small"] / sps["cnn"] >= 0.6  # the speed issue's LavaCrossing target


def test_the_lavacrossing_cost_with_auto_xla_on_the_avx2_host_is_quoted_as_measured():
    """docs/speed.md, docs/lavacrossing.md: SiT-small, the SieT readout and the CNN with auto's XLA."""
    report = _report("lavacrossing_cost_xla_auto_avx2.json")
    assert report["command"] == (
        "python benchmarks/lavacrossing_cost.py --models sit_small,siet_rotation_pooled,cnn --repeats 3 "
        "--env_steps 10240 --out runs/cost_xla_defaults.json"
    )
    assert report["commit"].startswith("b9e1e89") and report["wall_note"] and report["wall_seconds"] > 0
    assert "avx512" not in report["cpu_flags"].split(";")[0]
    sps = _cost_medians(report)
    assert all(len(runs) == report["repeats"] == 3 for runs in report["runs"].values())
    siet = sps["sit_small"] / sps["siet_rotation_pooled"]
    speed = _flat_page("speed.md")
    assert (
        f"at b9e1e89, 3 repeats beside the two Table 4 runs at nice 10 "
        "(`benchmarks/reference/lavacrossing_cost_xla_auto_avx2.json`): SiT-small "
        f"{sps['sit_small']:.1f} env steps/s, the CNN {sps['cnn']:.1f} (SiT-small / CNN "
        f"**{sps['sit_small'] / sps['cnn']:.2f}x**) and the SieT readout {sps['siet_rotation_pooled']:.1f}, "
        f"**{siet:.2f}x** SiT-small's cost per environment step: still past issue 24's 1.5x."
    ) in speed
    assert siet > 1.5
    assert (
        f"On the AVX2 host, each model with XLA where `--jit_compile auto` takes it, the SieT readout costs "
        f"{siet:.2f}x SiT-small (`benchmarks/reference/lavacrossing_cost_xla_auto_avx2.json`)."
    ) in LAVACROSSING_SHORT


def test_the_siet_readout_cuts_one_at_a_time_are_quoted_as_measured():
    """docs/lavacrossing.md, "The SieT readout with one cut at a time": the table is the cost report."""
    report = _report("lavacrossing_cost_siet_cuts.json")
    assert report["command"] == (
        "python benchmarks/lavacrossing_cost.py --models sit_small,siet_rotation_pooled_2heads,"
        "siet_rotation_pooled_no_triangles,siet_rotation_pooled_one_map --repeats 2 --env_steps 10240 "
        "--out runs/cost_siet_cuts.json"
    )
    assert report["commit"].startswith("3d19f01") and report["wall_note"] and report["repeats"] == 2
    sps = _cost_medians(report)
    page = (DOCS / "lavacrossing.md").read_text()
    names = {
        "sit_small": "SiT-small",
        "siet_rotation_pooled_2heads": "SieT readout, 2 heads",
        "siet_rotation_pooled_no_triangles": "SieT readout, no triangle sums",
        "siet_rotation_pooled_one_map": "SieT readout, one stem map per channel",
    }
    within = []
    for model, name in names.items():
        cost = sps["sit_small"] / sps[model]
        assert f"| {name} | {sps[model]:.1f} | {cost:.2f} |" in page
        if cost <= 1.5:
            within.append(model)
    assert within == ["sit_small", "siet_rotation_pooled_no_triangles"]
    assert "Only the readout without triangle sums comes within issue 24's 1.5x" in page


def test_the_readout_without_triangle_sums_costs_more_on_the_avx512_host_as_measured():
    """docs/lavacrossing.md: the AVX-512 cost of the readout without triangle sums, against the AVX2 run."""
    report = _report("lavacrossing_cost_siet_no_triangles_avx512.json")
    assert report["command"] == (
        "python benchmarks/lavacrossing_cost.py --models sit_small,siet_rotation_pooled_no_triangles "
        "--repeats 3 --env_steps 10240 --out runs/cost_siet_nt_avx512.json"
    )
    assert report["commit"].startswith("a00e92d") and report["repeats"] == 3 and report["wall_note"]
    assert "avx512f" in report["cpu_flags"] and "no amx" in report["cpu_flags"]
    sps = _cost_medians(report)
    avx2 = _cost_medians(_report("lavacrossing_cost_siet_cuts.json"))
    nt = "siet_rotation_pooled_no_triangles"
    cost = sps["sit_small"] / sps[nt]
    assert cost > 1.5
    page = _flat_page("lavacrossing.md")
    assert (
        f"SiT-small {sps['sit_small']:.1f} and the readout without triangle sums {sps[nt]:.1f} env steps/s, "
        f"**{cost:.2f}x**. Against the AVX2 run above, SiT-small runs "
        f"{sps['sit_small'] / avx2['sit_small']:.2f}x as fast here and the readout "
        f"{sps[nt] / avx2[nt]:.2f}x as fast"
    ) in page
    assert f"(1.49x SiT-small on the AVX2 host, {cost:.2f}x on the AVX-512 host)" in LAVACROSSING_SHORT
    after = _report("lavacrossing_cost_siet_no_triangles_avx512_after.json")
    assert after["command"] == report["command"].replace(".json", "_after.json")
    assert after["commit"].startswith("2ee3c23") and after["repeats"] == 3 and after["wall_note"]
    sps = _cost_medians(after)
    runs = {m: sorted(r["sps"] for r in rs) for m, rs in after["runs"].items()}
    cost = sps["sit_small"] / sps[nt]
    assert cost > 1.5
    assert (
        f"SiT-small {sps['sit_small']:.1f} env steps/s (repeats {runs['sit_small'][0]:.1f} to "
        f"{runs['sit_small'][-1]:.1f}), the readout {sps[nt]:.1f} ({runs[nt][0]:.1f} to {runs[nt][-1]:.1f}), "
        f"**{cost:.2f}x**. Past the limit in both runs"
    ) in page


def _evaluated_1m_run(name: str, seed: int) -> tuple[dict, dict]:
    """A 1M-step run of the SieT readout without triangle sums: its command, provenance and evaluation."""
    report = _report(name)
    run = report["runs"][f"seed {seed}"]
    assert run["command"].startswith(
        f"python benchmarks/minigrid_rotation.py --models siet_rotation_pooled_no_triangles --seeds {seed} "
        "--env_steps 1000000 --num_episodes 200 "
    )
    assert len(run["commit"]) >= 7 and run["train_wall_s"] > 0 and report["wall_note"] and run["evaluated"]
    assert run["num_episodes"] == 200 and run["curve"]["last"]["env_steps"] >= 1_000_000
    return report, run


def test_the_siet_readout_without_triangle_sums_in_ppo_is_quoted_as_measured():
    """docs/lavacrossing.md: the one cut within the cost limit, seed 0 to 1M steps, beside the full one."""
    report, run = _evaluated_1m_run("lavacrossing_siet_no_triangles_1m.json", 0)
    curve = {p["env_steps"]: p["success"] for p in run["curve"]["curve"]}
    full_report = _report("lavacrossing_siet_readout_seed0_1m.json")
    full = {p["env_steps"]: p["success"] for p in full_report["curve"]["curve"]}
    assert report["siet_readout_for_comparison"]["seed0_success_every_50k"] == list(full.values())

    def at(steps: int, points: dict) -> float:
        return points[min(points, key=lambda s: abs(s - steps))]

    greedy, sampling = run["greedy"], run["sampling"]
    page = _flat_page("lavacrossing.md")
    assert (
        f"training success {at(500_000, curve):.2f} at 0.5M steps, {at(800_000, curve):.2f} at 0.8M and "
        f"{at(1_000_000, curve):.2f} at 1M, where the full SieT readout's seed 0 had "
        f"{at(500_000, full):.2f}, "
        f"{at(800_000, full):.2f} and {at(1_000_000, full):.2f}"
    ) in page
    assert max(curve.values()) < 0.5 and run["curve"]["first_step_with_success_at_least"]["0.5"] is None
    full_greedy = full_report["greedy"]["train: easy"]["success_rate"]
    assert (
        f"Greedy at 1M, 200 episodes a row: N1 {greedy['train: easy']['success_rate']:.2f} (the full "
        f"readout's {full_greedy:.2f}), rotated {greedy['rotations average']['success_rate']:.2f}, N2 "
        f"{greedy['train: medium']['success_rate']:.2f}, N3 {greedy['hard']['success_rate']:.2f}; "
        f"sampling N1 {sampling['train: easy']['success_rate']:.2f}."
    ) in page
    assert (
        f"training success {at(1_000_000, curve):.2f} at 1M steps (the full readout's "
        f"{at(1_000_000, full):.2f}), "
        f"greedy N1 and rotated {greedy['train: easy']['success_rate']:.2f}"
    ) in LAVACROSSING_SHORT
    assert greedy["train: easy"] == greedy["rotations average"]  # invariant to the quarter turns


def test_the_sit_grid_readout_cost_and_probe_are_quoted_as_measured():
    """docs/lavacrossing.md, "A SiT that reads its local grid": its cost per env step and its probe."""
    cost = _report("lavacrossing_cost_readout.json")
    assert (
        cost["command"].startswith("python benchmarks/lavacrossing_cost.py --models sit_small,")
        and cost["commit"]
    )
    table = cost["table"]
    for model, runs in cost["runs"].items():  # the table is the median of the repeats, relative to SiT-small
        assert table[model]["env_steps_per_second"] == statistics.median(r["sps"] for r in runs)
    ratio = {
        m: table["sit_small"]["env_steps_per_second"] / v["env_steps_per_second"] for m, v in table.items()
    }
    sps = {m: f"{v['env_steps_per_second']:.1f}" for m, v in table.items()}
    results = _probe_results()
    pair = functools.partial(_seed_pair, results)
    grid, siet, chiral = (
        "sit_grid_readout_m4_corners",
        "siet_rotation_pooled_m4_corners",
        "sit_small_chiral_m4_corners",
    )
    report = _report("lavacrossing_probe_sit_grid_readout.json")
    assert report["command"].startswith("python benchmarks/lavacrossing_probe.py --models " + grid)
    below, accuracy = _steps_to_08, _held_out
    page = _flat_page("lavacrossing.md")
    for text in (
        f"The SieT readout costs {ratio['siet_rotation_pooled']:.2f}x SiT-small per environment step in PPO "
        f"({sps['siet_rotation_pooled']} against {sps['sit_small']} env steps/s), past the 1.5x",
        f"It costs {ratio['sit_grid_readout']:.2f}x SiT-small per environment step "
        f"({sps['sit_grid_readout']} env steps/s; medians of {cost['repeats']} repeats of "
        f"{cost['env_steps_per_process']:,} steps",
        f"its loss is below 0.8 by step {pair(grid, below)} (the SieT readout's {pair(siet, below)}, the "
        f"chiral SiT's {pair(chiral, below)}, the CNN's {pair('cnn', below)}) and "
        f"{pair(grid, _loss_at_600)} at step 600.",
        f"Held-out accuracy ends at {pair(grid, accuracy('all'))}, and {pair(grid, accuracy('turn_only'))} "
        f"on the left/right-only states: between the chiral SiT ({pair(chiral, accuracy('all'))} and "
        f"{pair(chiral, accuracy('turn_only'))}) and the SieT readout ({pair(siet, accuracy('all'))} and "
        f"{pair(siet, accuracy('turn_only'))})",
    ):
        assert text in page, text
    assert ratio["sit_grid_readout"] <= 1.5 < ratio["siet_rotation_pooled"]  # issue 24's limit
    assert (
        f"with each model's own critic, {ratio['siet_rotation_pooled']:.2f}x, and the same readout of a "
        f"SiT's local grid {ratio['sit_grid_readout']:.2f}x" in LAVACROSSING_SHORT
    )


def test_the_sit_grid_readout_in_ppo_is_quoted_as_measured():
    """docs/lavacrossing.md, "A SiT that reads its local grid": its two PPO seeds and seed 0's actor trace."""
    report = _report("lavacrossing_sit_grid_readout_partial.json")
    seed0, seed1 = (report["runs"][f"seed {s}"] for s in (0, 1))
    for seed, run in enumerate((seed0, seed1)):
        assert f"--models sit_grid_readout --seeds {seed} " in run["command"] and run["commit"]
    assert seed0["curve"]["last"]["env_steps"] >= 1_000_000
    assert seed1["curve"]["last"]["env_steps"] == seed1["stopped_at_env_steps"] == 512_000
    siet = _report("lavacrossing_siet_readout_seed0_1m.json")["curve"]
    trace = _report("lavacrossing_ppo_trace_grid_readout.json")
    assert "--root_dir runs/table4_gr/sit_grid_readout_seed0" in trace["command"] and trace["commit"]
    at_06m = next(t for t in trace["trace"] if t["env_steps"] >= 600_000)["policy"]
    cnn = next(r for r in _report("lavacrossing_ppo_trace.json")["runs"] if r["model"] == "cnn")["trace"]
    cnn_04m = next(t for t in cnn if t["env_steps"] >= 400_000)["policy"]

    def most(run: dict) -> str:
        return f"{max(p['success'] for p in run['curve']['curve']):.2f}"

    page = _flat_page("lavacrossing.md")
    for text in (
        f"success at most {most(seed0)} at any 50k mark to 1M steps on seed 0, and at most {most(seed1)} to "
        f"{seed1['stopped_at_env_steps']:,} steps on seed 1",
        f"where the SieT readout's seed 0 had {_success_at(siet, 400_000):.2f} at 0.4M and 0.5 at 0.85M",
        f"the logits' standard deviation across states is {at_06m['logit_std_across_states']:.2f} (the CNN's "
        f"{cnn_04m['logit_std_across_states']:.2f} at 0.4M), but the greedy move agrees with the expert's on "
        f"{at_06m['expert_accuracy']:.2f} of the states (the CNN's {cnn_04m['expert_accuracy']:.2f}) and the "
        f"entropy has fallen to {at_06m['entropy']:.2f}",
    ):
        assert text in page, text
    assert siet["first_step_with_success_at_least"]["0.5"] < 860_000  # "0.5 at 0.85M"
    assert (
        f"did not learn in PPO (training success at most {most(seed0)} to 1M steps and {most(seed1)} to "
        f"{seed1['stopped_at_env_steps'] / 1e6:.2f}M, two seeds;" in LAVACROSSING_SHORT
    )


def test_the_translation_control_in_ppo_is_quoted_as_measured():
    report = _report("lavacrossing_control_translation_1m.json")
    assert report["budget_env_steps"] == 1_000_000 and report["command"] and report["commit"]
    assert report["settings"]["num_episodes"] == 200
    curve = report["training_curves"]["sit_chiral_translation_seed0"]["success_every_50k"]
    greedy = {row: f"{v['success_rate']:.2f}" for row, v in report["greedy"].items()}
    sampling = {row: f"{v['success_rate']:.2f}" for row, v in report["sampling"].items()}
    entropy = [f"{d['entropy']:.2f}" for d in report["learner_diagnostics_per_100k_env_steps"]]
    page = _flat_page("lavacrossing.md")
    text = (
        f"{report['train_wall_minutes']:.0f} minutes of training on one core; 5% of the paper's 20M IMPALA "
        f"steps), did not learn either: its training success was at most {max(s for _, s in curve):.2f} "
        f"at any 50k mark, and greedy evaluation over 200 episodes gave N1 {greedy['train: easy']} and "
        f"rotated {greedy['rotations average']} (sampling {sampling['train: easy']} and "
        f"{sampling['rotations average']})"
    )
    assert text in page, text
    assert f"went from {entropy[0]} in the first 100k steps to {entropy[-1]}" in page
    assert f"training success at most {max(s for _, s in curve):.2f}; " in LAVACROSSING_SHORT
    for name in ("lavacrossing_control_translation_1m.json", "lavacrossing_probe_translation.json"):
        assert f"`benchmarks/reference/{name}`" in LAVACROSSING_SHORT


def test_a_larger_learning_rate_is_quoted_as_measured():
    usual, larger = _probe_results(), _probe_results(3e-3)
    chiral, cnn = "sit_small_chiral_m4_corners", "cnn"

    def pair(results, model, quantity):
        return " / ".join(quantity(results[model, seed]) for seed in (0, 1))

    def steps(run):
        return f"{_loss_below(run, 0.8):,}"

    def accuracy(run):
        return f"{run['heldout_greedy_accuracy']['all']:.2f}"

    page = _flat_page("lavacrossing.md")
    for text in (
        f"stays above 0.8 for the first {pair(larger, chiral, steps)} steps (seeds 0 / 1; "
        f"{pair(usual, chiral, steps)} at 1e-3)",
        f"its held-out accuracy falls to {pair(larger, chiral, accuracy)} "
        f"(from {pair(usual, chiral, accuracy)})",
        f"The CNN's loss is below 0.8 by step {pair(larger, cnn, steps)} ({pair(usual, cnn, steps)} at 1e-3)",
        f"its accuracy goes to {pair(larger, cnn, accuracy)} (from {pair(usual, cnn, accuracy)})",
    ):
        assert text in page, text


def test_the_ppo_policy_probe_is_quoted_as_measured():
    report = _report("lavacrossing_probe_ppo_chiral.json")
    (policy,) = report["policies"]
    assert policy["policy_dir"] == "runs/chiral_1m/sit_chiral_seed1/policies/greedy_policy"
    train, held_out = policy["train_greedy_accuracy"], policy["heldout_greedy_accuracy"]
    constant = report["data"]["heldout"]["best_constant_action_accuracy"]
    page = _flat_page("lavacrossing.md")
    for text in (
        f"optimal move in {train['n1']:.2f} of the N1 and {train['n2']:.2f} of the N2 states",
        f"in {held_out['all']:.2f} of the held-out states (N1 {held_out['n1']:.2f}, N2 {held_out['n2']:.2f})",
        f"Always taking the most common optimal move scores {constant:.2f} there",
    ):
        assert text in page, text
    diagnostics = _report("lavacrossing_chiral_seed1_3m.json")["learner_diagnostics_per_100k_env_steps"]
    entropy = {entry["env_steps"]: entry["entropy"] for entry in diagnostics}
    assert f"fell from {entropy[100000]:.2f} in the first 100k steps" in page
    assert f"to {entropy[2800000]:.2f} at 2.8M" in page


def _chiral_runs_quoted() -> dict[str, str]:
    """The sentences docs/lavacrossing.md quotes from lavacrossing_chiral_1m.json and the 3M runs."""
    report = _report("lavacrossing_chiral_1m.json")
    curves = report["training_curves"]
    old = _report("table4_lavacrossing_3m.json")["training_curves"]

    def at(curve: list, steps: int) -> float:
        return next(success for step, success in curve if step >= steps)

    def pair(values) -> str:
        return " / ".join(f"{v:.2f}" for v in values)

    chiral = [curves[f"sit_chiral_seed{s}"] for s in (0, 1)]
    grid = "success_every_250k"
    rows = {(run["seed"]): run["greedy"] for run in report["runs"]}
    diagnostics = [report["learner_diagnostics_per_100k_env_steps"][f"sit_chiral_seed{s}"] for s in (0, 1)]
    return {
        "last": f"training success over the last episodes {pair(c['last']['success'] for c in chiral)}",
        "max": f"at most {pair(c['max_success'] for c in chiral)}",
        "old": (
            f"SiT-small {pair(at(old[f'sit_small_seed{s}'][grid], 1_000_000) for s in (0, 1))}, "
            f"the CNN {pair(at(old[f'cnn_seed{s}'][grid], 1_000_000) for s in (0, 1))}"
        ),
        "greedy": (
            f"greedy N1 {pair(rows[s]['train: easy']['success_rate'] for s in (0, 1))}, rotated "
            f"{pair(rows[s]['rotations average']['success_rate'] for s in (0, 1))}"
        ),
        "entropy": (
            f"entropy {pair(d[0]['entropy'] for d in diagnostics)} in the first 100k steps and "
            f"{pair(d[-1]['entropy'] for d in diagnostics)} in the last"
        ),
        "clipfrac": f"clip fraction {pair(d[-1]['clipfrac'] for d in diagnostics)}",
        "lowest": f"seed 0 went down to {min(row['entropy'] for row in diagnostics[0]):.2f}",
    }


def test_lavacrossing_chiral_runs_are_the_report():
    report = _report("lavacrossing_chiral_1m.json")
    assert {(run["model"], run["seed"]) for run in report["runs"]} == {("sit_chiral", 0), ("sit_chiral", 1)}
    assert report["settings"]["env_steps"] == report["budget_env_steps_per_run"] == 1_000_000
    assert all(part["commit"] and part["command"] for part in report["parts"])
    assert "`benchmarks/reference/lavacrossing_chiral_1m.json`" in RESULTS
    page = " ".join((ROOT / "docs" / "lavacrossing.md").read_text().split())
    for name, sentence in _chiral_runs_quoted().items():
        assert sentence in page, name
    quoted = _chiral_runs_quoted()
    last, cnn = quoted["last"].split()[-3:], quoted["old"].split("the CNN ")[1]
    assert f"(training success {' '.join(last)}; the CNN had {cnn} at 1M;" in " ".join(RESULTS.split())


def test_lavacrossing_curves_png_is_drawn_from_the_reports(tmp_path):
    plot = load_benchmark("plot_curves")
    from PIL import Image, ImageChops

    names = (
        "table4_lavacrossing_3m",
        "lavacrossing_cnn_seed2_3m",
        "lavacrossing_chiral_1m",
        "lavacrossing_chiral_seed1_3m",
        "lavacrossing_chiral_seed0_3m",
    )
    reports = [REFERENCE / f"{name}.json" for name in names]
    drawn = plot.draw(plot.curves(reports), 3_000_000, "MiniGrid LavaCrossing, PPO: training success per run")
    committed = Image.open(ROOT / "docs" / "lavacrossing_curves.png").convert("RGB")
    assert ImageChops.difference(drawn, committed).getbbox() is None


@pytest.mark.parametrize(
    ("folder", "png", "title"),
    [
        (
            "table4_lavacrossing_parts",
            "table4_parts_curves.png",
            "MiniGrid LavaCrossing, PPO, Table 4 parts: training success per run",
        ),
        (
            "table4_lavacrossing_prior_parts",
            "table4_prior_curves.png",
            "MiniGrid LavaCrossing, PPO with the forward prior, Table 4 parts: training success per run",
        ),
    ],
)
def test_table4_parts_curves_png_is_drawn_from_every_committed_part(folder: str, png: str, title: str):
    """docs/<png>: one line per committed Table 4 part of the folder, redrawn as docs/results.md says."""

    plot = load_benchmark("plot_curves")
    from PIL import Image, ImageChops

    parts = sorted((REFERENCE / folder).glob("*.json"))
    page = " ".join(RESULTS.split())
    assert (
        f'python benchmarks/plot_curves.py --reports benchmarks/reference/{folder} --title "{title}" '
        f"--out docs/{png}"
    ) in page.replace("\\ ", "")
    drawn = plot.draw(plot.curves(parts), 3_000_000, title)
    committed = Image.open(ROOT / "docs" / png).convert("RGB")
    assert ImageChops.difference(drawn, committed).getbbox() is None


# The views of a SiT policy's parity check and evaluation: upright, its rotations and flips.
SIT_VIEWS = {"none", "rot90", "rot180", "rot270", "flip_h", "flip_v"}

# The README's demo table: row -> the policy's name in demo.json.
DEMO_ROWS = {
    "SiT, greedy": "sit (greedy)",
    "SiT, sampling": "sit (sampling)",
    "SiT, TFLite float32 (greedy)": "sit (TFLite float32)",
    "SiT, TFLite int8 (greedy)": "sit (TFLite int8)",
    "CNN, greedy": "cnn (greedy)",
    "CNN, sampling": "cnn (sampling)",
    "random": "random",
}


def test_demo_table_is_the_report():
    report = _report("demo.json")
    evaluation = report["success"]["evaluation"]
    for row, policy in DEMO_ROWS.items():
        cells = " | ".join(
            f"{evaluation[policy][t]['success_rate']:.2f}" for t in ("none", "rot90", "rot180", "rot270")
        )
        assert f"| {row} | {cells} |" in README, row
    assert all(cell["num_episodes"] == 200 for per in evaluation.values() for cell in per.values())
    flat = " ".join(README.split())
    minutes = report["wall_time_s"] / 60
    assert f"({minutes:.1f} minutes, the code of commit {report['commit']}, with two PPO runs" in flat
    steps = {model: run["env_steps"] for model, run in report["success"]["training"].items()}
    assert steps["sit"] == steps["cnn"] and f"after {steps['sit']:,} environment steps per model" in flat
    # The exported models: TF vs TFLite parity and file sizes.
    models = report["success"]["export"]["models"]
    f32, int8 = models["tflite_float32"], models["tflite_int8"]
    assert f32["parity"]["num_examples"] == int8["parity"]["num_examples"]
    difference = f"{f32['parity']['max_abs_diff/logits']:.1e}".replace("e-0", "e-")
    assert f32["parity"]["action_agreement"] == 1.0
    steps = f32["parity"]["num_examples"]
    assert f"on all {steps} held-out rollout steps (largest logit difference {difference})" in flat
    assert set(f32["parity"]["action_agreement_by_view"]) == SIT_VIEWS
    assert f"int8 agreed on {int8['parity']['action_agreement']:.0%} of them (largest logit" in flat
    assert f"difference {int8['parity']['max_abs_diff/logits']:.2f})" in flat
    assert (
        f32["parity"]["passed"]
        and int8["parity"]["passed"]
        and "parity_failures" not in report["success"]["export"]
    )
    assert (
        f"Their files are {f32['bytes'] / 1e3:.0f} kB (float32) and {int8['bytes'] / 1e3:.0f} kB (int8)"
        in flat
    )
    # Training speed, in the README and in docs/speed.md.
    speed = report["speed"]["env_steps_per_second"]
    ratio = report["sit_over_cnn_env_steps_per_second"]
    assert ratio == speed["sit"] / speed["cnn"]
    assert (
        f"the SiT trained at {speed['sit']:.0f} env steps/s and the CNN at {speed['cnn']:.0f} "
        f"(the SiT at {ratio:.2f}x the CNN" in flat
    )
    assert (
        f"trained at {speed['sit']:.0f} env steps/s against the CNN's {speed['cnn']:.0f} ({ratio:.2f}x;"
        in " ".join(SPEED.split())
    )


def test_readme_summary_of_the_cartpole_students_is_the_reports():
    dagger = _report("pi_cartpole_dagger.json")
    pi, mlp, teacher = (dagger["results"][name] for name in ("pi", "mlp", "teacher"))
    readings = {f"{pi[t]['mean']:.0f} ± {pi[t]['std']:.0f}" for t in ("5 obs", "5 obs (shuffled)", "10 obs")}
    assert len(readings) == 1  # in order, shuffled or duplicated: the same
    paper = dagger["paper"]["mlp"]
    flat = " ".join(README.split())
    assert f"scores {readings.pop()} with its readings in order, shuffled or duplicated" in flat
    assert (
        f"falls from {mlp['5 obs']['mean']:.0f} to {mlp['5 obs (shuffled)']['mean']:.0f} when they are "
        f"shuffled (the paper's FNN: {paper['5 obs'][0]} to {paper['5 obs (shuffled)'][0]})" in flat
    )
    # The best PI student of every committed distillation report, against the teacher.
    students = [
        _report(name)["results"]["pi"]["5 obs"]["mean"]
        for name in ("pi_cartpole_distill.json", "pi_cartpole_dagger.json", "pi_cartpole_dagger_pi128.json",
                     "pi_cartpole_dagger_h32.json", "pi_cartpole_dagger_h32_anneal.json")
    ]  # fmt: skip
    students += [
        run["results"]["5 obs"]["mean"] for run in _report("pi_cartpole_dagger_h32_seeds.json")["runs"]
    ]
    assert f"reach at most {max(students):.0f} of the teacher's {teacher['5 obs']['mean']:.0f}" in flat


def test_readme_summary_of_the_rotated_digits_is_the_report():
    table = _report("supervised_digits.json")["readme_table"]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in table.splitlines()[2:]
    }
    flat = " ".join(README.split())
    for model in ("`sit`", "`group_transformer:p4m`", "`vit`"):
        assert f"{model} {rows[model][2]}" in flat, model  # rotated -> rotated


def test_encoder_speed_table_is_the_report():
    report = _report("speed_encoders.json")
    ratios = report["ratios"]["train_step_over_vit"]
    rows = 0
    for line in SPEED[SPEED.index("| model (64x64x3) |") :].split("\n\n")[0].splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        model = cells[0].split("`")[1]
        assert cells[2] == f"{report['train_step_ms'][model]['graph']:.0f} ms", model
        assert cells[3] == f"{report['train_step_matmul_times'][model]['graph']:.1f}", model
        for cell, mode in ((cells[4], "graph"), (cells[5], "xla")):
            expected = "1" if model == "vit" else f"{ratios[model][mode]:.2f}"
            assert cell.strip("*") == expected, (model, mode, cell)
        # The report keeps these ratios to 3 decimals (0.865); the table rounds them half up (0.87).
        assert _agrees(cells[6], report["precision_over_float32"][model]["mixed_bfloat16"]), model
        rows += 1
    assert rows == len(report["train_step_ms"])
    assert "`benchmarks/reference/speed_encoders.json`" in SPEED


def _assert_native_table_is_the_report(section: str, report: dict) -> None:
    """The first "| model (64x64x3) |" table of ``section``: a row a model of the kernels' encoder report."""
    assert report["native_kernels"] == "loaded"
    ratios, models = report["ratios"], report["models"]
    rows = 0
    for line in section[section.index("| model (64x64x3) |") :].split("\n\n")[0].splitlines()[2:]:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        model = cells[0].strip("`")
        assert cells[1] == f"{models[model]['timings']['train_step']['graph']['median_ms']:.0f} ms", model
        assert _agrees(cells[2], ratios["train_step_over_vit"][model]["graph"]), model
        native_ratio = ratios["train_step_native_over_builtin"].get(model, {}).get("graph")
        without = "1" if model.endswith(":builtin") else ""  # the baseline, or the ViT (no kernels)
        assert cells[3] == without or _agrees(cells[3], native_ratio), model
        assert _agrees(cells[4], models[model]["precision"]["mixed_bfloat16"]["over_float32"]), model
        rows += 1
    assert rows == len(models) == 5


def test_native_kernels_table_and_readme_speed_are_the_report():
    """docs/speed.md's "Native kernels" table and the README's speed sentence, from one run."""
    report = _report("speed_encoders_native_amx.json")
    ratios, models = report["ratios"], report["models"]
    section = SPEED[SPEED.index("### Native kernels") :]
    _assert_native_table_is_the_report(section, report)
    assert "`benchmarks/reference/speed_encoders_native_amx.json`" in SPEED
    stages = {name: models[name]["stage_profile"] for name in ("sit", "sit:builtin", "siet")}
    flat = " ".join(section.split())
    assert (
        f"costs {stages['siet']['global_gsa']['median_ms']:.0f} ms of its step "
        f"(the SiT's {stages['sit']['global_gsa']['median_ms']:.0f} ms)"
    ) in flat
    assert (
        f"The local GSA stage went from {stages['sit:builtin']['local_gsa']['median_ms']:.0f} to "
        f"{stages['sit']['local_gsa']['median_ms']:.0f} ms"
    ) in flat
    assert f"({ratios['train_step_over_vit']['sit']['xla']:.1f}x the ViT's XLA step)" in flat


def test_more_of_the_step_in_the_kernels_is_the_report():
    """docs/speed.md's "More of the step in the kernels": its table, stages and op shares, the ViT
    section's and the README's SiT / ViT ratio, from one run and its op profile."""
    report = _report("speed_encoders_native_fused_amx.json")
    ratios, models = report["ratios"], report["models"]
    section = SPEED[SPEED.index("### More of the step in the kernels") :]
    section = section[: section.index("\n### ")]
    _assert_native_table_is_the_report(section, report)
    over_vit = ratios["train_step_over_vit"]
    assert max(over_vit["sit"]["graph"], over_vit["siet"]["graph"]) <= 2.0 < over_vit["sit:builtin"]["graph"]
    flat = " ".join(section.split())
    stage = {name: models[name]["stage_profile"] for name in models if name != "vit"}
    assert (
        f"local GSA {stage['sit']['local_gsa']['median_ms']:.0f} ms "
        f"({stage['sit:builtin']['local_gsa']['median_ms']:.0f} without the kernels), global GSA "
        f"{stage['sit']['global_gsa']['median_ms']:.0f} ms for the SiT and "
        f"{stage['siet']['global_gsa']['median_ms']:.0f} ms for the SieT "
        f"({stage['sit:builtin']['global_gsa']['median_ms']:.0f} and "
        f"{stage['siet:builtin']['global_gsa']['median_ms']:.0f} without)"
    ) in flat
    precision = {name: models[name]["precision"]["mixed_bfloat16"]["over_float32"] for name in models}
    assert (
        f"the bfloat16 step is {precision['sit']:.2f}x the float32 one" in flat
        and f"without the kernels bfloat16 gains {precision['sit:builtin']:.2f}x" in flat
        and f"the float32 step with them is {ratios['train_step_native_over_builtin']['sit']['graph']:.2f}x"
        in flat
    )
    profile = _report("op_profile_train_amx_fused.json")
    assert profile["commit"] == report["commit"] and profile["settings"]["model"] == "sit"
    share = {row["op"]: row["share"] for row in profile["op_types"]}
    native_ops = [op for op in share if op.startswith("Sit")]
    assert len(native_ops) == 6
    assert (
        f"an op profile at {profile['commit'][:7]} (`benchmarks/reference/op_profile_train_amx_fused.json`) "
        f"gives the six native ops {sum(share[op] for op in native_ops):.1%} of the summed op time, the "
        f"remaining 2-D matmuls {share['_MklMatMul']:.1%}"
    ) in flat.replace("An op profile", "an op profile")
    assert f"transposes {share['_MklTranspose']:.1%}" in flat
    sit_over_vit = over_vit["sit"]["graph"]
    assert f"with which the SiT's step measures {sit_over_vit:.2f}x on this host" in " ".join(SPEED.split())
    assert (
        f"a SiT train step costs {sit_over_vit:.2f}x the ViT's with the native "
        f"kernels, {over_vit['sit:builtin']['graph']:.2f}x without "
        "(one run on an Intel AMX host: `speed_encoders_native_fused_amx.json`)"
    ) in " ".join(README.split())


def _section(title: str) -> str:
    """docs/speed.md from ``title`` to the next heading of any level below it."""
    section = SPEED[SPEED.index(title) :]
    return section[: section.index("\n### ", len(title))]


def test_the_kernels_on_an_amd_bf16_host_are_the_reports():
    """docs/speed.md's "With the kernels on an AMD host with AVX512_BF16": the first run's table, the op
    profile's slow kernel gradient, its three forms and the six runs before and after the change."""
    section = _section("### With the kernels on an AMD host with AVX512_BF16")
    flat = " ".join(section.split())
    first = _report("speed_encoders_native_fused_amd_bf16.json")
    _assert_native_table_is_the_report(section, first)
    assert "no AMX" in first["machine"] and first["commit"].startswith("6584f5a")
    profile = _report("op_profile_train_amd_bf16.json")
    assert profile["commit"] == first["commit"] and profile["machine"] == first["machine"]
    matmuls = [row for row in profile["nodes"] if row["op"] == "_MklMatMul"]
    slowest = max(matmuls, key=lambda row: row["ms_per_call"])
    assert slowest["shapes"] == "(192, 104448), (64, 104448) -> (192, 64)"
    assert f"{slowest['ms_per_call']:.1f} ms of the summed op time ({slowest['share']:.1%})" in flat
    forms = _report("channels_first_grad_amd_bf16.json")
    assert forms["machine"] == first["machine"] and forms["repeats"] == 9
    for label, name in (("first block, `R = 6`", "first_block"), ("second block, `R = 64`", "second_block")):
        measured = forms["results"][name]["kernel_grad"]
        row = (
            f"| {label} | "
            + " | ".join(f"{measured[form]:.1f} ms" for form in ("tensorflow_ms", "transposed_ms"))
            + f" | **{measured['channels_first_ms']:.1f} ms** |"
        )
        assert row in section, row
        assert measured["channels_first_ms"] < measured["transposed_ms"] < measured["tensorflow_ms"]
    second = forms["results"]["second_block"]["kernel_grad"]
    again = f"{second['transposed_over_channels_first']:.1f}x faster again for `R = 64`"
    assert again in " ".join(SPEED.split())
    tails, sits = ("", "_run2", "_run3"), ("sit", "siet")
    runs = {
        commit: [_report(f"speed_encoders_native_{name}_amd_bf16{tail}.json") for tail in tails]
        for commit, name in (("6584f5a", "fused"), ("e9bf873", "batched_grad"))
    }
    vit_ms, bfloat16 = [], []
    for commit, reports in runs.items():
        for model, label in (("sit", "SiT"), ("siet", "SieT")):
            ratios = [r["ratios"]["train_step_over_vit"][model]["graph"] for r in reports]
            median = f"**{np.median(ratios):.2f}**" if commit == "e9bf873" else f"{np.median(ratios):.2f}"
            row = f"| {label}, {commit} | " + " | ".join(f"{x:.2f}" for x in ratios) + f" | {median} |"
            assert row in section, row
        for r in reports:
            assert r["commit"].startswith(commit) and r["machine"] == first["machine"]
            vit_ms.append(r["models"]["vit"]["timings"]["train_step"]["graph"]["median_ms"])
            bfloat16 += [r["models"][m]["precision"]["mixed_bfloat16"]["over_float32"] for m in sits]
    after = [r["ratios"]["train_step_over_vit"][m]["graph"] for r in runs["e9bf873"] for m in ("sit", "siet")]
    assert max(after) <= 2.0 and min(after) > 1.5
    assert f"between {min(vit_ms):.0f} and {max(vit_ms):.0f} ms in these six processes" in flat
    bfloat16_range = f"{min(bfloat16):.2f}-{max(bfloat16):.2f}x"
    assert f"bfloat16 step is {bfloat16_range} the float32 one in these six runs" in flat
    builtin = [
        runs[commit][0]["models"][f"{m}:builtin"]["precision"]["mixed_bfloat16"]["over_float32"]
        for commit in runs
        for m in ("sit", "siet")
    ]
    assert f"without the kernels bfloat16 gains {min(builtin):.2f}-{max(builtin):.2f}x" in flat


SITS = ("sit", "siet")


def test_the_kernels_own_changes_on_the_amd_bf16_host_are_the_reports():
    """docs/speed.md's "Then the kernels themselves": the ops alone before and after (two runs each) and
    three encoder runs after, each number its report."""
    section = _section("### With the kernels on an AMD host with AVX512_BF16")
    section = section[section.index("**Then the kernels themselves.**") :]
    flat = " ".join(section.split())
    before = [_report(f"native_ops_amd_bf16_before{tail}.json") for tail in ("", "_run2")]
    after = [_report(f"native_ops_amd_bf16_after{tail}.json") for tail in ("", "_run2")]
    assert {r["commit"][:7] for r in before} == {"e9bf873"} and len({r["commit"] for r in after}) == 1
    for report in before + after:
        assert report["settings"]["batch"] == 96 and "no AMX" in report["machine"]
        assert report["command"].startswith("python benchmarks/native_ops.py --out ")
    rows = section[section.index("| op (batch 96) |") :].split("\n\n")[0].splitlines()[2:]
    cases = ("first_block", "class_token", "global_grid", "layer_norm")
    assert len(rows) == len(cases)
    for line, case in zip(rows, cases, strict=True):
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        assert cells[0].startswith(f"`{case}`")
        for cell, runs in ((cells[1], before), (cells[2], after)):
            times = [r["results"][case]["backward"]["matmul_times"] for r in runs]
            assert cell == ", ".join(f"{x:.2f}" for x in times), case
        assert max(r["results"][case]["backward"]["matmul_times"] for r in after) < min(
            r["results"][case]["backward"]["matmul_times"] for r in before
        )
    runs = [_report(f"speed_encoders_native_tiles_amd_bf16{tail}.json") for tail in ("", "_run2", "_run3")]
    for model, label in (("sit", "SiT"), ("siet", "SieT")):
        ratios = [r["ratios"]["train_step_over_vit"][model]["graph"] for r in runs]
        cells = " | ".join(f"{x:.2f}" for x in ratios)
        row = f"| {label}, 0b6c267 | {cells} | **{np.median(ratios):.2f}** |"
        assert row in section, row
    ops_reports = [f"native_ops_amd_bf16_{w}{tail}" for w in ("before", "after") for tail in ("", "_run2")]
    encoder_reports = [
        f"speed_encoders_native_{kind}_amd_bf16{tail}"
        for kind in ("fused", "batched_grad", "tiles")
        for tail in ("", "_run2", "_run3")
    ]
    for name in ops_reports + encoder_reports:
        assert f"`benchmarks/reference/{name}.json`" in SPEED, name  # the page names every report it quotes
    closest = min(r["ratios"]["train_step_over_vit"]["sit"]["graph"] for r in runs)
    assert closest > 1.5 and f"one run of three came to {closest:.4f}." in flat
    sit_ms = [r["models"]["sit"]["timings"]["train_step"]["graph"]["median_ms"] for r in runs]
    vit_ms = [r["models"]["vit"]["timings"]["train_step"]["graph"]["median_ms"] for r in runs]
    assert f"took {min(sit_ms):.0f}-{max(sit_ms):.0f} ms in these runs" in flat
    assert f"between {min(vit_ms):.0f} and {max(vit_ms):.0f} ms" in flat
    native_over_builtin = runs[0]["ratios"]["train_step_native_over_builtin"]["sit"]["graph"]
    earlier = _report("speed_encoders_native_batched_grad_amd_bf16.json")
    earlier_ratio = earlier["ratios"]["train_step_native_over_builtin"]["sit"]["graph"]
    assert f"{native_over_builtin:.2f}x its step without the kernels ({earlier_ratio:.2f}x" in flat
    bfloat16 = [r["models"][m]["precision"]["mixed_bfloat16"]["over_float32"] for r in runs for m in SITS]
    assert f"now {min(bfloat16):.2f}-{max(bfloat16):.2f}x the float32 one" in flat


def test_the_skip_connections_and_bfloat16_through_the_kernels_are_the_reports():
    """docs/speed.md's "Then the skip connections" and "And bfloat16 through the kernels": three encoder runs
    before and after, each ratio its report, and the bfloat16 table of the runs after."""
    section = _section("### With the kernels on an AMD host with AVX512_BF16")
    section = section[section.index("**Then the skip connections.**") :]
    flat = " ".join(section.split())
    tails = ("", "_run2", "_run3")
    runs = {
        commit: [_report(f"speed_encoders_skip_amd_bf16_{when}{tail}.json") for tail in tails]
        for commit, when in (("0fd9ab1", "before"), ("bd94168", "after"))
    }
    for commit, reports in runs.items():
        assert {r["commit"][:7] for r in reports} == {commit}
        assert all("no AMX" in r["machine"] and r["settings"]["repeats"] == 9 for r in reports)
        for model, label in (("sit", "SiT"), ("siet", "SieT")):
            ratios = [r["ratios"]["train_step_over_vit"][model]["graph"] for r in reports]
            median = f"{np.median(ratios):.2f}"
            median = f"**{median}**" if commit == "bd94168" else median
            row = f"| {label}, {commit} | " + " | ".join(f"{x:.2f}" for x in ratios) + f" | {median} |"
            assert row in section, row
    for when in ("before", "after"):
        for tail in tails:
            assert f"`benchmarks/reference/speed_encoders_skip_amd_bf16_{when}{tail}.json`" in SPEED
    after = runs["bd94168"]
    sit = [r["ratios"]["train_step_over_vit"]["sit"]["graph"] for r in after]
    assert np.median(sit) > 1.5 >= min(sit)
    assert f"The SiT's median ratio is {np.median(sit):.3f}" in flat
    assert f"which one run of three met ({min(sit):.3f})" in flat
    vit_ms = [r["models"]["vit"]["timings"]["train_step"]["graph"]["median_ms"] for r in after]
    others = f"{min(vit_ms[1:]):.0f}-{max(vit_ms[1:]):.0f} ms in the others"
    assert f"(the ViT's step {vit_ms[0]:.0f} ms against {others})" in flat
    for model, label in (("sit", "SiT"), ("siet", "SieT"), ("vit", "ViT")):
        cells = " | ".join(
            f"{r['models'][model]['precision']['mixed_bfloat16']['over_float32']:.2f}" for r in after
        )
        assert f"| {label} | {cells} |" in section, label
    matmul = [r["matmul"]["by_precision"]["mixed_bfloat16"]["over_float32"] for r in after]
    assert f"| 1024^3 matmul | {' | '.join(f'{x:.2f}' for x in matmul)} |" in section
    assert f"a 1024^3 matmul takes {min(matmul):.2f}-{max(matmul):.2f}x its float32 time" in flat
    vit = [r["models"]["vit"]["precision"]["mixed_bfloat16"]["over_float32"] for r in after]
    assert min(vit) >= 1.0 and "gains nothing from bfloat16 at these sizes in these runs" in flat
    tiles = [_report(f"speed_encoders_native_tiles_amd_bf16{tail}.json") for tail in tails]
    builtin = [
        r["models"][m]["precision"]["mixed_bfloat16"]["over_float32"] for r in tiles for m in ("sit", "siet")
    ]
    assert f"its step was {min(builtin):.2f}-{max(builtin):.2f}x its float32 step" in flat


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("| config (14x14x3) |", "speed_encoders_minigrid.json"),
        ("| config (14x14x3), AMD host |", "speed_encoders_minigrid_amd_bf16.json"),
    ],
)
def test_minigrid_encoder_speed_table_is_the_report(header: str, name: str):
    report = _report(name)
    assert report["settings"]["image_shape"] == [14, 14, 3]
    models, ratios = report["models"], report["ratios"]
    table = SPEED[SPEED.index(header) :].split("\n\n")[0].splitlines()[2:]
    assert len(table) == len(models)
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        config = "configs/minigrid/" + cells[0].strip("`")
        model = models[config]
        step = model["timings"]["train_step"]
        expected = [
            f"{model['params']:,}",
            f"{step['graph']['median_ms']:.0f} ms",
            "1" if model["encoder"] == "vit" else f"**{ratios['train_step_over_vit'][config]['graph']:.2f}**",
            f"{ratios['xla_over_graph'][config]['train_step']:.2f}",
            f"{model['precision']['mixed_bfloat16']['over_float32']:.2f}",
        ]
        if model["encoder"] == "cnn":
            expected[2] = expected[2].strip("*")
        assert cells[1:] == expected, config


def _advantage_scale_table() -> list[str]:
    """docs/lavacrossing.md's advantage table, recomputed from lavacrossing_advantage_scale.json."""
    runs = {run["name"]: run for run in _report("lavacrossing_advantage_scale.json")["runs"]}

    def cells(*names: str) -> list[str]:
        chosen = [runs[name] for name in names]
        diagnostics = [run["learner_diagnostics_per_100k"] for run in chosen]

        def pair(values) -> str:
            return " / ".join(f"{v:.2f}" for v in values)

        steps = " / ".join(dict.fromkeys(f"{round(run['env_steps_reached'], -4) / 1e6:g}M" for run in chosen))
        return [
            steps,
            f"{pair(d[0]['entropy'] for d in diagnostics)} → {pair(d[-1]['entropy'] for d in diagnostics)}",
            pair(d[-1]["clipfrac"] for d in diagnostics),
            pair(run["max_success_at_the_50k_marks"] for run in chosen),
        ]

    rows = {
        "CNN, normalised": cells("cnn_normalised_seed0"),
        "chiral SiT, normalised (the 1M runs above, 2 seeds)": cells(
            "sit_chiral_normalised_seed0", "sit_chiral_normalised_seed1"
        ),
        "chiral SiT, not normalised (2 seeds)": cells(
            "sit_chiral_unnormalised_seed0", "sit_chiral_unnormalised_seed1"
        ),
        "chiral SiT, not normalised, rewards scaled": cells("sit_chiral_reward_scaled_seed0"),
        "CNN, not normalised, rewards scaled": cells("cnn_reward_scaled_seed0"),
    }
    return ["| " + " | ".join([label, *values]) + " |" for label, values in rows.items()]


def test_the_advantage_scale_table_is_the_report():
    page = (ROOT / "docs" / "lavacrossing.md").read_text()
    for row in _advantage_scale_table():
        assert row in page, row
    report = _report("lavacrossing_advantage_scale.json")
    assert all(run["command"] and run["curve_command"] for run in report["runs"]) and report["commit"]
    cnn = {run["name"]: run for run in report["runs"]}["cnn_reward_scaled_seed0"]
    greedy = report["cnn_reward_scaled_seed0_evaluation"]["rows"]["greedy"]
    sentence = (
        f"{cnn['success_every_50k'][-1][1]:.2f} training success at 1M, greedy N1 "
        f"{greedy['train: easy']['success_rate']:.2f} and N2 {greedy['train: medium']['success_rate']:.2f} "
        "over 200 episodes"
    )
    assert sentence in " ".join(page.split())


def test_the_summary_of_the_chiral_sit_is_its_two_seeds():
    """docs/lavacrossing.md's In short: the chiral SiT's greedy N1 success at 3M steps on the seed that
    learned and the other."""
    learned, failed = (_report(f"lavacrossing_chiral_seed{s}_3m.json") for s in (1, 0))
    assert learned["budget_env_steps"] == failed["budget_env_steps"] == 3_000_000
    rates = [r["greedy"]["train: easy"]["success_rate"] for r in (learned, failed)]
    assert f"success {rates[0]:.2f}, " in LAVACROSSING_SHORT
    assert (
        f"Its other seed did not learn by 3M steps (greedy N1 success {rates[1]:.2f}; "
        "`benchmarks/reference/lavacrossing_chiral_seed0_3m.json`)"
    ) in LAVACROSSING_SHORT
    assert "`benchmarks/reference/lavacrossing_advantage_scale.json`" in LAVACROSSING_SHORT


def test_the_chiral_run_is_quoted_as_measured():
    """docs/lavacrossing.md's curve, table and summary sentence, recomputed from the run's report."""
    report = json.loads((REFERENCE / "lavacrossing_chiral_seed1_3m.json").read_text())
    assert {"command", "commit", "budget_env_steps", "parts", "status"} <= set(report)
    assert report["status"] == "finished" and len(report["parts"]) == 3
    total = report["train_wall_minutes_total"]
    assert round(sum(p["train_wall_minutes"] for p in report["parts"]), 1) == total
    success = dict(report["training_curves"]["sit_chiral_seed1"]["success_every_50k"])
    first, last = report["first_step_with_success_at_least"], report["last"]
    latest = f"{last['success']:.2f} at {last['env_steps'] / 1e6:.2f}M"
    quoted = [f"{success[steps]:.2f} at {label}" for steps, label in
              ((1001472, "1.0M"), (1501184, "1.5M"), (1900544, "1.9M"))]  # fmt: skip
    page = _flat_page("lavacrossing.md")
    thresholds = [f"first {t} at {first[t] / 1e6:.2f}M" for t in ("0.5", "0.8")]
    for text in [*quoted, *thresholds, latest, f"{total:.0f} minutes of training"]:
        assert text in page, text
    assert first["0.9"] is None and "it never reached 0.9" in page
    paper = PAPERS["sit_icml2024"]["table_4"]["columns"]["SiT-1"]
    labels = {"train: easy": "train: easy (N1)", "train: medium": "train: medium (N2)", "hard": "hard (N3)",
              "rotations average": "rotations average (N1)"}  # fmt: skip
    for row, greedy in report["greedy"].items():
        sampling = report["sampling"][row]
        cells = (
            f"| {labels.get(row, row)} | {greedy['success_rate']:.2f} ({sampling['success_rate']:.2f}) | "
            f"{greedy['mean_return']:.2f} ({sampling['mean_return']:.2f}) | {paper[row]['mean']:.2f} |"
        )
        assert cells in page, cells
    greedy = report["greedy"]
    rates = [greedy[row]["success_rate"] for row in ("train: easy", "rotations average", "train: medium")]
    sentence = (
        f"mean return N1 {greedy['train: easy']['mean_return']:.2f} (SiT-1's mean reward "
        f"{paper['train: easy']['mean']:.2f}) and rotated {greedy['rotations average']['mean_return']:.2f} "
        f"({paper['rotations average']['mean']:.2f}), but N2 {greedy['train: medium']['mean_return']:.2f} "
        f"({paper['train: medium']['mean']:.2f}); success {rates[0]:.2f}, {rates[1]:.2f} and {rates[2]:.2f}; "
        f"training success first 0.5 at {first['0.5'] / 1e6:.2f}M steps and {last['success']:.2f} at 3M"
    )
    assert sentence in LAVACROSSING_SHORT, sentence


def test_the_cnn_policy_probe_is_quoted_as_measured():
    cnn = _report("lavacrossing_probe_ppo_cnn.json")["policies"][0]
    sit = _report("lavacrossing_probe_ppo_chiral.json")["policies"][0]["heldout_greedy_accuracy"]
    assert cnn["policy_dir"] == "runs/table4_lavacrossing/cnn_seed2/policies/greedy_policy"
    assert cnn["weights"].endswith("policy_checkpoint_0000046880")  # 3M steps: its final weights
    held_out = cnn["heldout_greedy_accuracy"]
    page = _flat_page("lavacrossing.md")
    text = (
        f"optimal move in {held_out['all']:.2f} of the held-out states (N1 {held_out['n1']:.2f}, "
        f"N2 {held_out['n2']:.2f}), against the chiral SiT's {sit['all']:.2f} (N1 {sit['n1']:.2f}, "
        f"N2 {sit['n2']:.2f})"
    )
    assert text in page, text


def test_the_third_cnn_seed_is_quoted_as_measured():
    report = _report("lavacrossing_cnn_seed2_3m.json")
    assert {"command", "commit", "budget_env_steps", "train_wall_minutes_total", "status"} <= set(report)
    first, greedy = report["first_step_with_success_at_least"], report["greedy"]
    rows = ("train: easy", "train: medium", "hard", "rotations average")
    text = (
        f"training success first 0.5 at {first['0.5'] / 1e6:.2f}M steps, 0.9 at {first['0.9'] / 1e6:.2f}M, "
        f"{report['last']['success']:.2f} at 3M; greedy over 200 episodes "
        + "N1 {:.2f}, N2 {:.2f}, N3 {:.2f}, rotated {:.2f}".format(*(greedy[r]["success_rate"] for r in rows))
    )
    assert text in _flat_page("lavacrossing.md"), text


def test_deployment_table_is_the_report():
    """docs/export.md's deployment table is the benchmark's, and the prose quotes its numbers."""
    report = _report("export_quantisation.json")
    assert report["table"] in EXPORT and "`benchmarks/reference/export_quantisation.json`" in EXPORT
    assert "`benchmarks/reference/export_quantisation.json`" in README
    results = report["results"]
    for name in ("sit", "sit_bf16"):  # the demo's SiT, trained in float32 and under mixed_bfloat16
        result = results[name]
        assert set(result["views"]) == SIT_VIEWS
        for quantization in ("float16", "int8"):
            parity = result["parity"][quantization]
            assert parity["passed"] and set(parity["action_agreement_by_view"]) == SIT_VIEWS
            for view, summary in result["behaviour"][quantization].items():
                assert summary["num_episodes"] == 200
                float32 = result["behaviour"]["float32"][view]["success_rate"]
                assert abs(summary["success_rate"] - float32) <= 0.02, (name, quantization, view)
        assert max(result["symmetry_error"]["int8"].values()) == 0.0
    flat = " ".join(EXPORT.split())
    int8 = {name: results[name]["parity"]["int8"] for name in ("sit", "sit_bf16")}
    largest = max(p["max_abs_diff/logits"] for p in int8.values())
    assert all(p["action_agreement"] == 1.0 for p in int8.values())
    assert f"The largest logit difference is {largest:.2f}" in flat
    sizes = results["sit"]["bytes"]
    assert f"({sizes['int8'] / 1e3:.0f} kB, {sizes['int8'] / sizes['float32']:.0%} of float32)" in flat
    ratio = results["sit"]["latency"]["vs_float32"]["batch1"]["xnnpack"]["int8"]
    assert f"int8 SiT at batch 1 takes {ratio:.2f}x float32's time" in flat
    # Observation-vector policies: int8 fails the gate, int16x8 passes and keeps the return.
    for name in ("sac", "pi"):
        result = results[name]
        assert not result["parity"]["int8"]["passed"] and result["parity"]["int16x8"]["passed"]
        returns = {q: result["behaviour"][q]["none"]["mean_return"] for q in ("float32", "int16x8")}
        assert abs(returns["int16x8"] - returns["float32"]) <= 0.03 * returns["float32"], (name, returns)
    mean = {(n, q): f"{results[n]['behaviour'][q]['none']['mean_return']:.0f}" for n in ("sac", "pi")
            for q in ("float32", "int16x8")}  # fmt: skip
    assert (
        f"return {mean['sac', 'int16x8']} (SAC) and {mean['pi', 'int16x8']} (student) against float32's "
        f"{mean['sac', 'float32']} and {mean['pi', 'float32']}"
    ) in flat
    assert (
        set(results["sit"]["cannot_run"]) == {"int16x8"}
        and max(results["pi"]["symmetry_error"]["int16x8"].values()) == 0
    )


def test_the_chiral_seed0_run_to_3m_is_quoted_as_measured():
    report = _report("lavacrossing_chiral_seed0_3m.json")
    assert report["seed"] == 0 and report["budget_env_steps"] == 3_000_000
    assert [part["env_steps"] for part in report["parts"]] == [
        [0, 1001472],
        [1001472, 1400832],
        [1400832, 3000000],
    ]
    assert all(part["command"] and part["commit"] for part in report["parts"])
    page = _flat_page("lavacrossing.md")
    curve = report["training_curves"]["sit_chiral_seed0"]["success_every_50k"]
    assert curve[-1][0] == 3_000_320 and f"was at most {max(s for _, s in curve):.2f}" in page
    greedy, sampling = report["greedy"], report["sampling"]
    for row in report["rows"]:
        cells = (
            f"| {row} | {greedy[row]['success_rate']:.2f} ({sampling[row]['success_rate']:.2f}) | "
            f"{greedy[row]['mean_return']:.2f} ({sampling[row]['mean_return']:.2f}) |"
        )
        assert cells in page, row
    easy = f"easy levels {greedy['train: easy']['success_rate']:.2f} greedy, "
    easy += f"{sampling['train: easy']['success_rate']:.2f} sampling"
    assert (
        easy in " ".join(RESULTS.split())
        and "`benchmarks/reference/lavacrossing_chiral_seed0_3m.json`" in RESULTS
    )


CONTROLS_1M = ("lavacrossing_control_vit_1m.json", "lavacrossing_control_cnn_critic_1m.json")


@pytest.mark.parametrize("name", CONTROLS_1M)
def test_the_attention_and_critic_controls_are_quoted_as_measured(name):
    """docs/lavacrossing.md and its summary: the ViT-small and CNN-critic controls, from their reports."""
    report = _report(name)
    assert report["budget_env_steps"] == 1_000_000 and report["command"] and report["commit"]
    assert report["settings"]["num_episodes"] == 200
    (curve,) = report["training_curves"].values()
    best = f"{max(s for _, s in curve['success_every_50k']):.2f}"

    def rate(kind: str, row: str) -> str:
        return f"{report[kind][row]['success_rate']:.2f}"

    page = _flat_page("lavacrossing.md")
    text = (
        f"{report['train_wall_minutes']:.0f} minutes of training on one core): training success at most "
        f"{best}"
    )
    assert text in page, text
    text = (
        f"greedy N1 {rate('greedy', 'train: easy')} and rotated {rate('greedy', 'rotations average')} "
        f"(sampling {rate('sampling', 'train: easy')} and {rate('sampling', 'rotations average')})"
    )
    assert text in page, text
    assert f"`benchmarks/reference/{name}`" in LAVACROSSING_SHORT


def test_the_few_states_probe_is_quoted_as_measured():
    """docs/lavacrossing.md: held-out accuracy with 500 training states, from the two runs' reports."""
    report = _report("lavacrossing_few_states_probe.json")
    accuracy = {
        (r["model"], r["seed"]): f"{r['heldout_greedy_accuracy']['all']:.2f}"
        for part in report["parts"]
        for r in part["results"]
    }
    assert {part["data"]["train"]["states"] for part in report["parts"]} == {500}
    constant = report["parts"][0]["data"]["heldout"]["best_constant_action_accuracy"]

    def pair(model: str) -> str:
        return f"{accuracy[model, 0]} / {accuracy[model, 1]}"

    chiral = "sit_small_chiral_m4_corners"
    text = (
        f"CNN {pair('cnn')}, ViT-small {pair('vit_small')}, the translation-only control "
        f"{pair(chiral + '_translation')}, the chiral SiT {pair(chiral)}."
    )
    page = _flat_page("lavacrossing.md")
    assert text in page, text
    assert f"most common optimal move scores {constant:.2f} there" in page


def test_the_ppo_traces_are_quoted_as_measured():
    """docs/lavacrossing.md: the real runs' logit spread per checkpoint and the ViT's dead units."""
    report = _report("lavacrossing_ppo_trace.json")
    runs = {run["model"]: {r["env_steps"] // 1000: r for r in run["trace"]} for run in report["runs"]}
    page = _flat_page("lavacrossing.md")

    def spread(model: str, k: int) -> str:
        if k not in runs[model]:
            return "(stopped)"
        return f"{runs[model][k]['policy']['logit_std_across_states']:.4f}"

    for k in (51, 200, 301, 401):
        shown = 201 if k == 200 else k  # 200,704 env steps
        row = f"| {shown}k | {spread('cnn', k)} | {spread('sit_chiral', k)} | {spread('vit', k)} |"
        assert row in page, row
    vit = [r for _, r in sorted(runs["vit"].items())]
    dead = [f"{r['relu']['hidden']['dead_fraction']:.2f}" for r in vit]
    assert f"{dead[0]} of its units dead (zero on every state) at 51k steps and {dead[-1]} at 301k" in page
    assert f"effective rank of {vit[-1]['features']['effective_rank']:.1f}" in page
    sit = [r for _, r in sorted(runs["sit_chiral"].items())]
    head = [r["relu"]["head"]["dead_fraction"] for r in sit]
    assert f"{min(head):.2f}-{max(head):.2f} of its units dead" in page
    top = max(r["policy"]["logit_std_across_states"] for r in sit)
    assert f"never spread beyond {top:.4f} in 400k steps" in page
    assert all(run["train_command"] and run["train_commit"] for run in report["runs"])


def test_the_noise_phase_is_quoted_as_measured():
    """docs/lavacrossing.md: logit spread at iterations 0 and 25 of the simulated reward-free phase."""
    report = _report("lavacrossing_noise_phase.json")
    assert report["settings"]["iterations"] == 25 and report["command"] and report["commit"]
    runs = {(r["model"], r["seed"]): r["trace"] for r in report["runs"]}
    page = _flat_page("lavacrossing.md")

    def cell(model: str, seed: int) -> str:
        first, last = runs[model, seed][0], runs[model, seed][-1]
        assert first["iteration"] == 0 and last["iteration"] == 25
        spread = "policy", "logit_std_across_states"
        return f"{first[spread[0]][spread[1]]:.3f} → {last[spread[0]][spread[1]]:.3f}"

    names = {
        "cnn": "CNN", "vit_small": "ViT-small", "sit_small_chiral_m4_corners": "chiral SiT",
        "sit_small_chiral_m4_corners_translation": "chiral SiT, graphs shared by translations only",
    }  # fmt: skip
    for model, label in names.items():
        row = f"| {label} | {cell(model, 0)} | {cell(model, 1)} |"
        assert row in page, row
    vit = [f"{runs['vit_small', s][-1]['relu']['hidden']['dead_fraction']:.2f}" for s in (0, 1)]
    assert f"0.89 dead in the real run at 51k steps, {vit[0]} / {vit[1]} here" in page


def test_the_harder_cartpole_students_are_quoted_as_measured():
    """docs/results.md and the README: CartPoleSwingUpHarder's teacher and DAgger students, 3 seeds."""
    report = _report("pi_cartpole_harder_dagger_seeds.json")
    runs = report["runs"]
    assert [r["seed"] for r in runs] == [0, 1, 2]
    assert all(r["test_settings"]["num_episodes"] == 200 and r["command"] for r in runs)

    def cells(policy: str, column: str) -> str:
        return " / ".join(f"{r['results'][policy][column]['mean']:.0f}" for r in runs)

    teacher = runs[0]["results"]["teacher"]
    assert all(r["results"]["teacher"]["5 obs"]["mean"] == teacher["5 obs"]["mean"] for r in runs)
    pi = [r["results"]["pi"]["5 obs"]["mean"] for r in runs]
    summary = report["summary"]
    assert summary["pi_5_obs_mean"] == pytest.approx(statistics.mean(pi))
    assert summary["pi_5_obs_std_over_seeds_sample"] == pytest.approx(statistics.stdev(pi))
    assert summary["student_over_teacher"] == pytest.approx(statistics.mean(pi) / teacher["5 obs"]["mean"])
    page = _flat_page("results.md")
    rows = [
        f"| teacher (SAC) | {teacher['5 obs']['mean']:.0f} (FNN 593) | "
        f"{teacher['5 obs (shuffled)']['mean']:.0f} (FNN 38) |",
        f"| MLP student, seeds 0 / 1 / 2 | {cells('mlp', '5 obs')} | {cells('mlp', '5 obs (shuffled)')} |",
        f"| AttentionNeuron student, seeds 0 / 1 / 2 | {cells('pi', '5 obs')} (472) | "
        f"{cells('pi', '5 obs (shuffled)')} (471) | {cells('pi', '10 obs')} (471) | "
        f"{cells('pi', '5 obs + 5 noise')} (461) |",
    ]
    for row in rows:
        assert row in page, row
    mean_std = f"{statistics.mean(pi):.0f} +- {statistics.stdev(pi):.0f}"
    ratio = f"{100 * summary['student_over_teacher']:.0f}% of its teacher"
    assert f"scores {mean_std} over the 3 seeds" in page and ratio in page
    readme = " ".join(README.split())
    assert f"DAgger PI student {mean_std} (paper 472), {ratio}" in readme
    assert "`benchmarks/reference/pi_cartpole_harder_dagger_seeds.json`" in readme


def test_the_blind_actors_are_quoted_as_measured():
    """docs/lavacrossing.md's summary: the largest attention logit spread in 400k steps, the CNN's last."""
    report = _report("lavacrossing_ppo_trace.json")
    runs = {run["model"]: run["trace"] for run in report["runs"]}
    attention = max(r["policy"]["logit_std_across_states"] for m in ("vit", "sit_chiral") for r in runs[m])
    cnn = runs["cnn"][-1]["policy"]["logit_std_across_states"]
    text = f"at most {attention:.4f} in 400k steps, the CNN's {cnn:.2f}"
    assert text in LAVACROSSING_SHORT, text


def test_the_state_signal_table_is_the_report():
    """docs/lavacrossing.md: the state signal after each stage of fresh encoders, mean over seeds."""
    report = _report("lavacrossing_state_signal.json")
    assert report["command"].startswith("python benchmarks/sit_state_signal.py") and report["commit"]
    page = _flat_page("lavacrossing.md")
    names = {
        "sit_small_chiral_m4_corners": "chiral SiT",
        "sit_small_chiral_m4_corners_sharp": "chiral SiT, query/key init x4",
        "sit_small_chiral_m4_corners_translation": "chiral SiT, translation graphs",
    }
    for model, label in names.items():
        mean = report["results"][model]["mean"]
        assert len(report["results"][model]["seeds"]) == 4
        signal = " | ".join(f"{mean['state_signal'][s]:.3f}" for s in ("stem", "pooled", "local", "token"))
        row = f"| {label} | {signal} | {mean['head_units_dead']:.2f} |"
        assert row in page, row
    always_on = report["results"]["sit_small_chiral_m4_corners"]["mean"]["head_units_always_on"]
    assert f"Half of the ReLU head's 32 units are off on every state and {always_on:.2f} on" in page


def test_the_harder_cartpole_students_fitting_is_quoted_as_measured():
    """docs/results.md: each student's last-epoch imitation loss in DAgger round 0 and in the last round."""
    report = _report("pi_cartpole_harder_dagger_seeds.json")
    page = " ".join(RESULTS.split())

    def last_epoch_losses(student: str, last_round: bool) -> str:
        losses = []
        for run in sorted(report["runs"], key=lambda r: r["seed"]):
            trained = run["students"][student]
            epochs = trained["settings"]["num_epochs"]
            per_epoch = trained["loss_per_epoch"]
            assert len(per_epoch) == epochs * (trained["settings"]["dagger_rounds"] + 1)
            losses.append(per_epoch[-1] if last_round else per_epoch[epochs - 1])
        return " / ".join(f"{x:.3f}" for x in losses)

    assert f"(round 0) the PI student's last-epoch loss is {last_epoch_losses('pi', False)} (seeds" in page
    assert f"against the MLP's {last_epoch_losses('mlp', False)}; on the states" in page
    pi_last, mlp_last = last_epoch_losses("pi", True), last_epoch_losses("mlp", True)
    assert f"(the last DAgger round) it is {pi_last} against {mlp_last}, " in page
    ratios = [
        run["students"]["pi"]["loss_per_epoch"][-1] / run["students"]["mlp"]["loss_per_epoch"][-1]
        for run in report["runs"]
    ]
    assert f"{min(ratios):.1f} to {max(ratios):.1f} times the MLP's" in page
    for run in report["runs"]:  # the end of the last DAgger round over the end of the first
        change = {}
        for student in ("pi", "mlp"):
            epochs = run["students"][student]["settings"]["num_epochs"]
            losses = run["students"][student]["loss_per_epoch"]
            change[student] = losses[-1] / losses[2 * epochs - 1]
        assert change["pi"] >= (0.99 if run["seed"] == 0 else 1.0) and change["mlp"] <= 0.9, change


def _evaluation_text(runs: list[dict], rows: dict[str, str]) -> str:
    """E.g. ``"greedy N1 0.12 / 0.14 and rotated 0.12 / 0.14 (sampling 0.14 / 0.18 and 0.15 / 0.20)"``.

    ``rows`` maps the page's label to the report's row; each cell is the runs' success rates, seed by seed.
    """

    def listed(cells: list[str]) -> str:
        return ", ".join(cells[:-1]) + " and " + cells[-1]

    def cell(kind: str, row: str) -> str:
        return " / ".join(f"{r[kind][row]['success_rate']:.2f}" for r in runs)

    greedy = listed([f"{label} {cell('greedy', row)}" for label, row in rows.items()])
    sampling = listed([cell("sampling", row) for row in rows.values()])
    return f"greedy {greedy} (sampling {sampling})"


def test_the_sharp_chiral_sit_in_ppo_is_quoted_as_measured():
    """docs/lavacrossing.md and its summary: the chiral SiT, query_key_init_scale 4, 1M PPO steps, 2 seeds."""
    report = _report("lavacrossing_chiral_sharp_1m.json")
    assert report["budget_env_steps"] == 1_000_000 and report["settings"]["num_episodes"] == 100
    runs = sorted(report["runs"], key=lambda r: r["seed"])
    assert [r["seed"] for r in runs] == [0, 1] and all(r["command"] and r["commit"] for r in runs)
    page = _flat_page("lavacrossing.md")
    curves = [dict(r["success_every_50k"]) for r in runs]
    best = [max(c.values()) for c in curves]
    last = [c[max(c)] for c in curves]
    minutes = {f"{r['train_wall_minutes']:.0f}" for r in runs}
    assert len(minutes) == 1 and f"({minutes.pop()} minutes of training each;" in page
    assert f"seed 0 reached {curves[0][200704]:.2f} at 200k steps and at most {best[0]:.2f}" in page
    assert f"seed 1 at most {best[1]:.2f}, where" in page
    assert f"their training success was {last[0]:.2f} and {last[1]:.2f}" in page

    text = _evaluation_text(runs, {"N1": "train: easy", "rotated": "rotations average"})
    assert text in page, text
    entropy = [[d["entropy"] for d in r["learner_diagnostics_per_100k_env_steps"]] for r in runs]
    assert f"fell to {entropy[0][2]:.2f} in the third 100k steps" in page and min(entropy[0]) == entropy[0][2]
    assert f"was {entropy[0][-1]:.2f} in the last" in page
    assert f"between {min(entropy[1][1:]):.2f} and {max(entropy[1][1:]):.2f} after its first 100k" in page
    signal = _report("lavacrossing_state_signal.json")["results"]
    token = [
        signal[m]["mean"]["state_signal"]["token"]
        for m in ("sit_small_chiral_m4_corners", "sit_small_chiral_m4_corners_sharp")
    ]
    assert f"class token keeps {token[0]:.3f} of what varies between states" in LAVACROSSING_SHORT
    assert f"between states, {token[1]:.3f} with selective attention" in LAVACROSSING_SHORT


def test_the_noise_phase_with_selective_attention_is_quoted_as_measured():
    """docs/lavacrossing.md: logit spread at iterations 0 and 25, chiral SiT with and without it, 4 seeds."""
    report = _report("lavacrossing_noise_phase_sharp.json")
    assert report["settings"]["iterations"] == 25 and report["commit"]
    runs = {(r["model"], r["seed"]): r["trace"] for r in report["runs"]}
    page = _flat_page("lavacrossing.md")
    spread = {}
    for (model, label) in (("sit_small_chiral_m4_corners", "default initialisation"),
                           ("sit_small_chiral_m4_corners_sharp", "query/key init x4")):  # fmt: skip
        cells = []
        for seed in range(4):
            trace = runs[model, seed]
            assert trace[0]["iteration"] == 0 and trace[-1]["iteration"] == 25
            first, last = (t["policy"]["logit_std_across_states"] for t in (trace[0], trace[-1]))
            spread[model, seed] = last
            cells.append(f"{first:.3f} → {last:.3f}")
        row = f"| {label} | {' | '.join(cells)} |"
        assert row in page, row
    plain, sharp = "sit_small_chiral_m4_corners", "sit_small_chiral_m4_corners_sharp"
    assert [sum(spread[m, s] > 0.1 for s in range(4)) for m in (plain, sharp)] == [1, 3]
    head = runs[sharp, 3][-1]["relu"]["head"]["dead_fraction"]
    assert f"Seed 3 still loses most of it ({spread[sharp, 3]:.3f}, the head {head:.2f} dead)" in page
    assert "keeps 3 of 4 seeds state-dependent there" in LAVACROSSING_SHORT


def test_the_noise_phase_with_a_standardised_head_is_quoted_as_measured():
    """docs/lavacrossing.md: logit spread at iterations 0 and 25 and dead head units, chiral SiT with
    head_standardization on 4 seeds, beside the default start's."""
    report = _report("lavacrossing_noise_phase_standardized.json")
    model = "sit_small_chiral_m4_corners_standardized"
    assert report["settings"]["iterations"] == 25 and report["commit"]
    assert report["command"] == (
        f"python benchmarks/ppo_noise_phase.py --models {model} --seeds 0,1,2,3 "
        "--out benchmarks/reference/lavacrossing_noise_phase_standardized.json"
    )
    assert report["models"][model]["kwargs"]["head_standardization"] is True
    runs = {r["seed"]: r["trace"] for r in report["runs"]}
    default = {r["seed"]: r["trace"] for r in _report("lavacrossing_noise_phase_sharp.json")["runs"]
               if r["model"] == "sit_small_chiral_m4_corners"}  # fmt: skip
    sharp = {r["seed"]: r["trace"] for r in _report("lavacrossing_noise_phase_sharp.json")["runs"]
             if r["model"] == "sit_small_chiral_m4_corners_sharp"}  # fmt: skip
    page = _flat_page("lavacrossing.md")

    def spread(trace: list, at: int) -> float:
        return trace[at]["policy"]["logit_std_across_states"]

    def dead(trace: list) -> float:
        return trace[-1]["relu"]["head"]["dead_fraction"]

    assert all(runs[s][0]["iteration"] == 0 and runs[s][-1]["iteration"] == 25 for s in range(4))
    cells = [f"{spread(runs[s], 0):.3f} → {spread(runs[s], -1):.3f}" for s in range(4)]
    assert f"| default initialisation, head's input standardised | {' | '.join(cells)} |" in page
    assert [spread(runs[s], -1) > 0.1 for s in range(4)] == [True, True, True, False]
    lost = ", ".join(f"{spread(default[s], -1):.3f}" for s in (0, 2)) + f" and {spread(default[3], -1):.3f}"
    kept = ", ".join(f"{spread(runs[s], -1):.3f}" for s in (0, 2)) + f" and {spread(runs[3], -1):.3f}"
    assert f"({lost} for seeds 0, 2 and 3) keep {kept}" in page
    assert f"{spread(runs[3], -1):.3f} with the standardised head, {spread(sharp[3], -1):.3f} with" in page
    low, high = min(dead(runs[s]) for s in range(3)), max(dead(runs[s]) for s in range(3))
    plain = [dead(default[s]) for s in (0, 2, 3)]
    assert f"its head has {dead(runs[3]):.2f} of its units dead (seeds 0-2: {low:.2f}-{high:.2f}" in page
    assert f"seeds 0, 2 and 3: {min(plain):.2f}-{max(plain):.2f})" in page
    both = _report("lavacrossing_noise_phase_sharp_standardized.json")
    assert both["command"] == (
        "python benchmarks/ppo_noise_phase.py --models sit_small_chiral_m4_corners_sharp_standardized "
        "--seeds 0,1,2,3 --out benchmarks/reference/lavacrossing_noise_phase_sharp_standardized.json"
    )
    kwargs = both["models"]["sit_small_chiral_m4_corners_sharp_standardized"]["kwargs"]
    assert kwargs["head_standardization"] is True and kwargs["query_key_init_scale"] == 4.0
    traces = {r["seed"]: r["trace"] for r in both["runs"]}
    cells = [f"{spread(traces[s], 0):.3f} → {spread(traces[s], -1):.3f}" for s in range(4)]
    assert f"| query/key init x4, head's input standardised | {' | '.join(cells)} |" in page
    ends = [spread(traces[s], -1) for s in range(4)]
    assert f"{min(ends):.3f} to {max(ends):.3f} at iteration 25 on all four seeds" in page
    assert (
        max(dead(traces[s]) for s in range(4)) <= 0.0625 and "at most 0.06 of the head's units dead" in page
    )
    cnn_runs = [r for r in _report("lavacrossing_noise_phase.json")["runs"] if r["model"] == "cnn"]
    cnn = sorted(spread(r["trace"], -1) for r in cnn_runs)
    assert f"CNN's {cnn[0]:.3f} and {cnn[1]:.3f}" in page and max(cnn) / min(ends) < 3


def test_the_standardised_ppo_run_so_far_is_quoted_as_measured():
    """docs/lavacrossing.md: the partial PPO run of the sharp chiral SiT with a standardised head."""
    report = _report("lavacrossing_standardized_seed0_partial.json")
    assert report["status"] == "partial" and report["run"]["commit"] and report["trace_commit"]
    assert "--models sit_chiral_sharp_standardized --seeds 0" in report["run"]["command"]
    page = _flat_page("lavacrossing.md")
    trace = report["trace"]["trace"]
    spread = [t["policy"]["logit_std_across_states"] for t in trace]
    dead = [t["relu"]["head"]["dead_fraction"] for t in trace]
    entropy = [t["policy"]["entropy"] for t in trace]
    assert trace[0]["env_steps"] == 51200 and trace[-1]["env_steps"] == 450560
    assert (
        f"logit spread across states {spread[0]:.2f} at 51k steps and {min(spread):.2f}-{max(spread):.2f} to "
        f"451k, no dead head unit after 100k" in page
    )
    assert all(d == 0 for d in dead[2:]) and dead[1] > 0
    assert f"entropy {min(entropy):.2f}-{max(entropy):.2f}." in page
    curve = report["curve"]
    assert all(point["success"] == 0 for point in curve["curve"]) and curve["last"]["success"] == 0
    assert curve["last"]["env_steps"] == 491520 and "0.00 at every 50k mark to 0.49M steps" in page


def test_the_noise_phase_with_qk_normalisation_is_quoted_as_measured():
    """docs/lavacrossing.md: logit spread at iterations 0 and 25 and dead head units, chiral SiT with
    query_key_norm on the default start's two most collapsing seeds, beside the default start's."""
    report = _report("lavacrossing_noise_phase_qknorm.json")
    assert report["settings"]["iterations"] == 25 and report["commit"]
    assert report["command"] == (
        "python benchmarks/ppo_noise_phase.py --models sit_small_chiral_m4_corners_qknorm --seeds 0,3 "
        "--out benchmarks/reference/lavacrossing_noise_phase_qknorm.json"
    )
    assert {r["model"] for r in report["runs"]} == {"sit_small_chiral_m4_corners_qknorm"}
    assert report["models"]["sit_small_chiral_m4_corners_qknorm"]["kwargs"]["query_key_norm"] is True
    default = {r["seed"]: r["trace"] for r in _report("lavacrossing_noise_phase_sharp.json")["runs"]
               if r["model"] == "sit_small_chiral_m4_corners"}  # fmt: skip
    normed = {r["seed"]: r["trace"] for r in report["runs"]}
    page = _flat_page("lavacrossing.md")

    def spread(trace: list, at: int) -> float:
        return trace[at]["policy"]["logit_std_across_states"]

    cells = [f"{spread(default[s], 0):.3f} → {spread(default[s], -1):.3f}" for s in (0, 3)]
    assert f"| default initialisation | {' | '.join(cells)} |" in page
    cells = [
        f"{spread(normed[s], 0):.3f} → {spread(normed[s], -1):.3f} "
        f"({normed[s][-1]['relu']['head']['dead_fraction']:.2f} dead)"
        for s in (0, 3)
    ]
    assert f"| QK normalisation | {' | '.join(cells)} |" in page
    assert all(normed[s][-1]["iteration"] == 25 for s in (0, 3))
    assert f"Seed 3 goes as blind as without it ({spread(normed[3], -1):.4f})" in page
    sharp = next(r["trace"] for r in _report("lavacrossing_noise_phase_sharp.json")["runs"]
                 if r["model"] == "sit_small_chiral_m4_corners_sharp" and r["seed"] == 0)  # fmt: skip
    assert spread(normed[0], -1) < spread(sharp, -1) / 4
    fifth = f"a fifth of the selective start's {spread(sharp, -1):.3f}"
    assert f"seed 0 ends at {spread(normed[0], -1):.3f}, {fifth}" in page
    assert spread(normed[3], -1) <= spread(default[3], -1)  # "as blind as without it"
    assert "`benchmarks/reference/lavacrossing_noise_phase_qknorm.json`" in LAVACROSSING_SHORT


def test_the_sharp_runs_traces_are_quoted_as_measured():
    """docs/lavacrossing.md: logit spread, dead head units, expert accuracy at the sharp runs' checkpoints."""
    report = _report("lavacrossing_ppo_trace_sharp.json")
    traces = {part["seed"]: part["trace"] for part in report["parts"]}
    assert sorted(traces) == [0, 1] and all(part["command"] and part["commit"] for part in report["parts"])
    page = _flat_page("lavacrossing.md")
    spread = {s: [t["policy"]["logit_std_across_states"] for t in trace] for s, trace in traces.items()}
    text = (
        f"by {min(spread[0]):.2f} to {max(spread[0]):.2f} (seed 0) and {min(spread[1]):.2f} to "
        f"{max(spread[1]):.2f} (seed 1)"
    )
    assert text in page, text
    dead = [t["relu"]["head"]["dead_fraction"] for trace in traces.values() for t in trace]
    assert f"at most {max(dead):.2f} of its units dead" in page
    assert all(
        trace[-1]["relu"]["head"]["dead_fraction"] == 0 and trace[-1]["env_steps"] > 1e6
        for trace in traces.values()
    )
    accuracy = [t["policy"]["expert_accuracy"] for trace in traces.values() for t in trace]
    assert f"optimal move in {min(accuracy):.2f}-{max(accuracy):.2f} of the held-out states" in page
    assert {trace[0]["env_steps"] // 100_000 for trace in traces.values()} == {4, 5}
    counts = {part["states"]["count"] for part in report["parts"]}
    assert len(counts) == 1 and f"to 1M, {counts.pop()} held-out states;" in page
    assert (
        "though their actors no longer go blind (`benchmarks/reference/lavacrossing_ppo_trace_sharp.json`)"
        in LAVACROSSING_SHORT
    )


def test_the_harder_cartpole_fitting_screen_is_quoted_as_measured():
    """docs/results.md: plain cloning with more epochs, a wider student, a larger step (issue 25)."""
    report = _report("pi_cartpole_harder_fit_screen.json")
    page = " ".join(RESULTS.split())
    runs = {run["name"]: run for run in report["runs"]}
    labels = {
        "e100_h32": "the same student, 100 epochs",
        "e20_h64q64_fc256": "wider: hidden 64, 64 queries, dense 256, 256",
        "e20_lr3e-3": "learning rate 3e-3 instead of 1e-3",
    }
    teacher = {round(run["teacher"]["5 obs"]["mean"]) for run in runs.values()}
    assert teacher == {633} and "on which the teacher scores 633" in page
    for name, label in labels.items():
        run = runs[name]
        losses, epochs = run["loss_per_epoch"], run["settings"]["num_epochs"]
        assert len(losses) == epochs and len(run["results"]["5 obs"]["returns"]) == 50
        score = run["results"]["5 obs"]["mean"]
        row = f"| {label} | {epochs} | {losses[19]:.3f} | {losses[-1]:.3f} | {score:.0f} |"
        assert row in page, row
    longest = runs["e100_h32"]
    assert f"keeps falling, to {longest['loss_per_epoch'][-1]:.3f}" in page
    share = longest["results"]["5 obs"]["mean"] / longest["teacher"]["5 obs"]["mean"]
    assert f"returns {longest['results']['5 obs']['mean']:.0f}, {share:.0%} of its teacher" in page


def test_the_sharp_chiral_sit_to_2m_steps_is_quoted_as_measured():
    """docs/lavacrossing.md and its summary: the two sharp runs resumed from 1M to 2M PPO steps."""
    report = _report("lavacrossing_chiral_sharp_2m.json")
    assert report["budget_env_steps"] == 2_000_000
    runs = sorted(report["runs"], key=lambda r: r["seed"])
    assert [r["seed"] for r in runs] == [0, 1]
    for run in runs:
        assert [p["env_steps"] for p in run["parts"]] == [[0, 1_000_000], [1_000_000, 2_000_000]]
        assert all(p["command"] and p["commit"] for p in run["parts"])
        assert f"--seeds {run['seed']} --env_steps 2000000 --num_episodes 200" in run["parts"][1]["command"]
    page = _flat_page("lavacrossing.md")
    minutes = [f"{r['parts'][1]['train_wall_minutes']:.0f}" for r in runs]
    assert f"({minutes[0]} and {minutes[1]} minutes of training for the second million" in page
    second = [[s for steps, s in r["success_every_50k"] if steps >= 1_000_000] for r in runs]
    spans = [f"{min(s):.2f} and {max(s):.2f} (seed {seed})" for seed, s in enumerate(second)]
    assert f"stayed between {spans[0]} and {spans[1]} at every 50k mark" in page
    last = [r["success_every_50k"][-1] for r in runs]
    assert all(steps >= 2_000_000 for steps, _ in last)
    assert f"{last[0][1]:.2f} and {last[1][1]:.2f} at 2M" in page

    text = _evaluation_text(
        runs, {"N1": "train: easy", "N2": "train: medium", "rotated": "rotations average"}
    )
    assert text in page, text
    diagnostics = [d for r in runs for d in r["learner_diagnostics_per_100k_env_steps"]]
    late = [d for d in diagnostics if d["env_steps"] > 1_000_000]
    cnn = [
        d
        for d in _report("lavacrossing_cnn_seed2_3m.json")["learner_diagnostics_per_100k_env_steps"]
        if 500_000 <= d["env_steps"] <= 1_200_000
    ]

    def span(rows: list[dict], key: str, digits: int) -> str:
        values = [d[key] for d in rows]
        return f"{min(values):.{digits}f}-{max(values):.{digits}f}"

    kl, clip, entropy = (span(late, key, d) for key, d in (("approx_kl", 3), ("clipfrac", 2), ("entropy", 2)))
    cnn_kl, cnn_clip, cnn_entropy = (
        span(cnn, key, d) for key, d in (("approx_kl", 3), ("clipfrac", 2), ("entropy", 2))
    )
    assert f"approximate KL per update was {kl} and the clip fraction {clip} per 100k" in page
    explained = [d["explained_variance"] for d in late]
    usual = [v for v in explained if v >= 0.69]
    low = [f"{d['explained_variance']:.2f}" for d in late if d["explained_variance"] < 0.69]
    assert [d["env_steps"] for d in late if d["explained_variance"] < 0.69] == [1_100_000, 1_200_000]
    assert (
        f"explained variance was {min(usual):.2f}-{max(usual):.2f} in {len(usual)} of its {len(explained)} "
        f"readings ({low[0]} and {low[1]} on seed 0 at 1.1M and 1.2M)"
    ) in page
    assert f"(the CNN's: {cnn_kl} and {cnn_clip}, from 0.5M to 1.2M" in page
    assert f"entropy stayed at {entropy} where the CNN's fell to {cnn_entropy}" in page
    greedy = [f"{r['greedy']['train: easy']['success_rate']:.2f}" for r in runs]
    assert (
        "neither of 2 seeds learned by 2M PPO steps "
        f"(training success {last[0][1]:.2f} and {last[1][1]:.2f}; greedy N1 {greedy[0]} and {greedy[1]}; "
        "`benchmarks/reference/lavacrossing_chiral_sharp_2m.json`)"
    ) in LAVACROSSING_SHORT


def test_the_cost_of_a_second_worker_is_quoted_as_measured():
    """docs/training.md: two workers against one, the medians of the rounds' ratios, recomputed."""
    report = _report("multi_worker_overhead.json")
    assert report["command"].startswith("python benchmarks/multi_worker_overhead.py") and report["commit"]
    rounds = report["rounds"]
    names = ("learner_seconds_per_train_step", "cluster_env_steps_per_second")
    for r in rounds:
        assert (r["one_worker"]["workers"], r["two_workers"]["workers"]) == (1, 2)
        for name in names:
            ratio = r["two_workers"][name] / r["one_worker"][name]
            assert r["ratios_two_over_one"][name] == pytest.approx(ratio)
    medians = {name: statistics.median(r["ratios_two_over_one"][name] for r in rounds) for name in names}
    assert medians == pytest.approx(report["median_ratios_two_over_one"])
    page = " ".join(TRAINING.split())
    assert f"a train step takes {medians[names[0]]:.2f}x as long on two workers as on one" in page
    assert f"{medians[names[1]]:.2f}x as many environment steps per second" in page
    assert f"on loopback, {len(rounds)} rounds)" in page
    readme = " ".join(README.split())
    assert (
        f"a train step takes {medians[names[0]]:.2f}x as long and the pair trains "
        f"{medians[names[1]]:.2f}x the environment steps per second "
        "(`benchmarks/reference/multi_worker_overhead.json`)"
    ) in readme


def _sharp_screen_tables() -> tuple[str, str]:
    """docs/lavacrossing.md's two tables of the sharp SiT's PPO screens, from their report."""
    report = _report("lavacrossing_sharp_screens.json")
    epochs, entropy = report["runs"]
    base = report["baseline"]
    columns = [base["success_every_50k_seed0"], base["success_every_50k_seed1"]]
    columns += [run["success_every_50k"] for run in (epochs, entropy)]
    steps = [step for step, _ in columns[0]]
    assert all([step for step, _ in column] == steps for column in columns)
    header = "| env steps | unchanged, seed 0 | unchanged, seed 1 | 8 epochs | entropy bonus 0.001 |"
    lines = [header, "| ---: | ---: | ---: | ---: | ---: |"]
    for i, step in enumerate(steps):
        lines.append(f"| {step / 1000:.0f}k | " + " | ".join(f"{c[i][1]:.2f}" for c in columns) + " |")
    key = "learner_diagnostics_per_100k_env_steps"
    unchanged = _report("lavacrossing_chiral_sharp_1m.json")["runs"][0][key]
    diagnostics = [unchanged[: len(epochs[key])], epochs[key], entropy[key]]
    rows = ["| env steps | unchanged, seed 0 | 8 epochs | entropy bonus 0.001 |"]
    rows.append("| ---: | --- | --- | --- |")
    for readings in zip(*diagnostics, strict=True):
        assert len({d["env_steps"] for d in readings}) == 1
        cells = [f"{d['entropy']:.2f}, {d['approx_kl']:.3f}, {d['explained_variance']:.2f}" for d in readings]
        rows.append(f"| {readings[0]['env_steps'] / 1000:.0f}k | " + " | ".join(cells) + " |")
    return "\n".join(lines), "\n".join(rows)


def test_the_sharp_sit_ppo_screens_are_quoted_as_measured():
    """docs/lavacrossing.md: 8 PPO epochs and a tenth of the entropy bonus, stopped at 0.49M steps."""
    report = _report("lavacrossing_sharp_screens.json")
    page = (DOCS / "lavacrossing.md").read_text()
    for table in _sharp_screen_tables():
        assert table in page, table
    assert "`benchmarks/reference/lavacrossing_sharp_screens.json`)." in LAVACROSSING_SHORT
    epochs, entropy = report["runs"]
    assert [run["binding"] for run in report["runs"]] == ["ppo.num_epochs = 8", "ppo.entropy_coef = 0.001"]
    stop = epochs["stopped_at_env_steps"]
    assert stop == entropy["stopped_at_env_steps"] and f"Both were stopped at {stop:,} of the 1M" in page
    for run in report["runs"]:
        assert f"'{run['binding']}'" in run["command"] and run["commit"]
        assert max(s for _, s in run["success_every_50k"]) <= 0.02
    flat = " ".join(page.split())
    e8 = epochs["learner_diagnostics_per_100k_env_steps"]
    kl = [d["approx_kl"] for d in e8]
    entropies = [d["entropy"] for d in e8]
    assert f"entropy stayed at {min(entropies):.2f}-{max(entropies):.2f}" in flat
    assert all(d["explained_variance"] < 0 for d in e8)
    assert f"(KL {min(kl):.3f}-{max(kl):.3f} per 100k" in flat
    low = {d["env_steps"]: d for d in entropy["learner_diagnostics_per_100k_env_steps"]}[300_000]
    assert f"(entropy {low['entropy']:.2f} at 300k steps, KL {low['approx_kl']:.3f})" in flat


def test_the_redesign_before_and_after_is_quoted_as_measured():
    """docs/architecture.md: PPO's executed lines and the suite's line coverage, before and after."""
    report = _report("redesign_before_after.json")
    before, after = report["before"], report["after"]
    assert before["commit"] == "712873b" and after["commit"]
    page = _flat_page("architecture.md")
    for run in (before, after):
        path = run["ppo_code_path"]
        assert (
            sum(path["by_file"].values()) - path["executed_lines_of_the_encoder"]
            == (path["executed_lines_without_the_encoder"])
        )
    lines = [run["ppo_code_path"]["executed_lines_without_the_encoder"] for run in (before, after)]
    assert f"{lines[0]} lines before, {lines[1]} now" in page
    assert "`benchmarks/reference/redesign_before_after.json`" in README
    assert lines[1] > lines[0] / 2 and "is not met" in page
    features = report["modules_of_features_added_since"]
    assert all(m["executed_lines"] == after["ppo_code_path"]["by_file"][path] for path, m in features.items())
    assert not set(features) & set(before["ppo_code_path"]["by_file"])
    total = sum(m["executed_lines"] for m in features.values())
    listing = ", ".join(f"`{path}` ({m['executed_lines']})" for path, m in features.items())
    assert f"execute {total} of them: {listing}" in page
    for folder in ("sit_keras", "agents", "export"):
        old, new = (run["coverage"]["rows"][folder] for run in (before, after))
        assert f"`{folder}/` {old['percent']:.1f}% before, {new['percent']:.1f}% now" in page


def test_the_100_epoch_dagger_student_and_its_lost_return_are_quoted_as_measured():
    """docs/results.md and the README: the e100 student's return, its loss, and where its return goes."""
    report = _report("pi_cartpole_harder_dagger_e100.json")
    assert report["command"].startswith("benchmarks/pi_cartpole_distill.py") and report["commit"]
    assert "--num_epochs 100" in report["command"] and report["test_settings"]["num_episodes"] == 200
    teacher = np.array(report["results"]["teacher"]["5 obs"]["returns"])
    student = np.array(report["results"]["pi"]["5 obs"]["returns"])
    assert len(teacher) == len(student) == 200
    wins, swung = teacher > 600, student > 600
    lost = {
        "failed": (teacher - student)[wins & ~swung].sum() / 200,
        "held": (teacher - student)[wins & swung].sum() / 200,
        "won_back": -(teacher - student)[~wins].sum() / 200,
    }
    analysis = report["analysis"]
    assert analysis["student_over_teacher"] == pytest.approx(student.mean() / teacher.mean())
    last_round = report["students"]["pi"]["loss_per_epoch"][-100:]
    twenty = _report("pi_cartpole_harder_dagger_seeds.json")["runs"][0]
    assert twenty["seed"] == 0 and twenty["students"]["pi"]["settings"]["num_epochs"] == 20
    page = " ".join(RESULTS.split())
    assert (
        f"the last round's last-epoch loss falls to {last_round[-1]:.3f} "
        f"({twenty['students']['pi']['loss_per_epoch'][-1]:.3f} with 20 epochs), and the student returns "
        f"{student.mean():.0f} against {twenty['results']['pi']['5 obs']['mean']:.0f} with 20 epochs: "
        f"{100 * student.mean() / teacher.mean():.0f}% of its teacher"
    ) in page
    assert (
        f"teacher scores above 600 in {wins.mean():.2f} of them (median {np.median(teacher):.0f}) "
        f"and below 10 in {(teacher < 10).mean():.2f}"
    ) in page
    assert (
        f"The student scores above 600 in {swung.mean():.2f} and never above {student.max():.0f}. "
        f"On the episodes the teacher wins, the student swings up (above 600) in {swung[wins].mean():.2f} "
        f"of them, and where both do it scores {student[wins & swung].mean():.0f} against "
        f"{teacher[wins & swung].mean():.0f}"
    ) in page
    assert (
        f"of the {(teacher - student).mean():.0f} points between them, {lost['failed']:.0f} are lost "
        f"where the teacher swings up and the student does not, {lost['held']:.0f} where both do"
    ) in page and f"the student wins back {lost['won_back']:.0f} where the teacher fails" in page
    added = student.mean() - twenty["results"]["pi"]["5 obs"]["mean"]
    assert f"halving that loss added {added:.0f} points" in page
    readme = " ".join(README.split())
    assert (
        f"with 5x the epochs it returns {student.mean():.0f} ({100 * student.mean() / teacher.mean():.0f}%): "
        "it fails half the teacher's swing-ups (`benchmarks/reference/pi_cartpole_harder_dagger_e100.json`)"
    ) in readme


def test_the_wide_sits_cost_is_quoted_as_measured():
    """docs/lavacrossing.md: appendix F.1's width on pooled tokens, per env step, against the sharp SiT."""
    report = _report("lavacrossing_cost_wide.json")
    assert report["command"].startswith("python benchmarks/lavacrossing_cost.py") and report["commit"]
    table = report["table"]
    base, wide = table["sit_chiral_sharp"], table["sit_chiral_sharp_wide"]
    ratio = base["env_steps_per_second"] / wide["env_steps_per_second"]
    assert wide["cost_per_env_step"] == pytest.approx(ratio)
    page = _flat_page("lavacrossing.md")
    assert (
        f"costs {wide['cost_per_env_step']:.2f}x the sharp chiral SiT per environment step: "
        f"{wide['env_steps_per_second']:.1f} against {base['env_steps_per_second']:.1f} env steps/s, "
        f"medians of {report['repeats']} repeats of {report['env_steps_per_process']:,} steps"
    ) in page


def _int8_matmul_forms_table(report: dict) -> str:
    """docs/export.md's table of the SiT's constant-operand matmuls in every form, from its report."""
    lines = [
        "| op (shapes) | form | float32 ms | int8 ms | int8 / fastest float32 |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for row in report["results"]["ops"]:
        op, constant = tuple(row["input_shape"]), tuple(row["constant_shape"])
        shapes = f"{constant} @ {op}" if row["constant_side"] == "left" else f"{op} @ {constant}"
        for form, entry in row["forms"].items():
            lines.append(
                f"| {shapes} | {form.replace('_', ' ')} | {entry['float32_ms']:.4f} | "
                f"{entry['int8_ms']:.4f} | {entry['int8_vs_fastest_float32']:.2f} |"
            )
    return "\n".join(lines)


def test_the_int8_bound_of_the_sits_matmuls_is_quoted_as_measured():
    """docs/export.md: each form of the SiT's matmuls, and the bound they put on int8's speed, recomputed."""
    report = _report("int8_matmul_forms.json")
    assert report["command"].startswith("python benchmarks/int8_matmul_forms.py") and report["commit"]
    results = report["results"]
    page = EXPORT
    assert _int8_matmul_forms_table(report) in page
    rows = results["ops"]
    assert all(e["largest_difference"] == 0.0 for row in rows for e in row["forms"].values())
    bound, rest = results["bound"], results["other_ops"]
    int8_sum = sum(min(e["int8_ms"] for e in row["forms"].values()) for row in rows)
    float32_sum = sum(min(e["float32_ms"] for e in row["forms"].values()) for row in rows)
    assert bound["fastest_int8_forms_sum_ms"] == pytest.approx(int8_sum)
    best = sum(min(t.values()) for t in rest["by_type_ms"].values())
    estimate = (best + int8_sum) / (rest["float32_ms"] + float32_sum)
    assert bound["int8_estimate_x_float32"] == pytest.approx(estimate) and estimate > 0.7
    exported = sum(row["forms"]["batch_matmul"]["float32_ms"] for row in rows)
    text = " ".join(page.split())
    assert f"which are half of its float32 op time ({exported / (exported + rest['float32_ms']):.0%})" in text
    assert f"int8 would take {estimate:.2f}x float32's time" in text
    assert f"The other op types take {rest['float32_ms']:.3f} ms of float32's op time" in text
    mul, add = rest["by_type_ms"]["MUL"], rest["by_type_ms"]["SUM"]
    ratios = (mul["int8_all_ops"] / mul["float32"], add["int8_all_ops"] / add["float32"])
    assert f"int8 MUL at {ratios[0]:.2f}x and SUM at {ratios[1]:.2f}x float32's time" in text
    assert f"take {float32_sum:.3f} ms against {exported:.3f} ms as exported" in text
    # The window mixing: twice as fast in float32 as a grouped convolution, no faster in int8.
    (mixing,) = [row for row in rows if row["input_shape"][1:] == [49, 10]]
    forms = mixing["forms"]
    assert forms["batch_matmul"]["float32_ms"] / forms["grouped_conv"]["float32_ms"] > 1.8
    assert forms["grouped_conv"]["int8_vs_fastest_float32"] > 0.95
    readme = " ".join(README.split())
    assert (
        f"even its matmuls rewritten in their fastest forms would leave it at {estimate:.2f}x "
        "(`benchmarks/reference/int8_matmul_forms.json`)"
    ) in readme


def test_the_students_warm_starts_are_quoted_as_measured():
    """docs/results.md: each AttentionNeuron student cold and warm on the same episodes, from the report."""
    report = _report("pi_cartpole_warm_start.json")
    assert report["command"].startswith("python benchmarks/pi_cartpole_warm_start.py") and report["commit"]
    labels = {
        "runs/pi_fit/dagger_e100_seed0/pi": "100 epochs per round, seed 0",
        **{f"runs/harder/students/seed{s}/pi": f"20 epochs per round, seed {s}" for s in (0, 1, 2)},
    }
    page = " ".join(RESULTS.split())
    assert set(report["policies"]) == set(labels)
    for folder, measured in report["policies"].items():
        cells = []
        for start in ("cold", "warm"):
            cell = measured["results"][start]
            returns = np.array(cell["returns"])
            assert len(returns) == 200 and cell["mean"] == pytest.approx(returns.mean())
            assert cell["above_600"] == pytest.approx(np.mean(returns > 600))
            cells.append(f"{cell['mean']:.0f} ({cell['above_600']:.2f})")
        assert f"| {labels[folder]} | {cells[0]} | {cells[1]} |" in page, folder
        assert measured["results"]["warm"]["mean"] < measured["results"]["cold"]["mean"]  # "lower for every"
    assert "Warm starts score lower for every student" in page


def test_the_students_action_errors_are_quoted_as_measured():
    """docs/results.md: each student's error on saturated and other teacher actions, first and last round."""
    report = _report("pi_cartpole_action_errors.json")
    assert report["command"].startswith("python benchmarks/pi_cartpole_action_errors.py") and report["commit"]
    page = " ".join(RESULTS.split())
    pi, mlp = {}, {}
    for folder, rounds in report["policies"].items():
        kind = "AttentionNeuron" if folder.endswith("/pi") else "MLP"
        epochs = "100" if "e100" in folder else "20"
        label = f"{kind}, {epochs} epochs per round, seed {folder.split('seed')[1][0]}"
        first, last = rounds[0], rounds[-1]
        row = (
            f"| {label} | {first['teacher_saturated']:.2f} | {first['squared_error_saturated']:.3f} / "
            f"{first['squared_error_rest']:.3f} | {last['teacher_saturated']:.2f} | "
            f"{last['squared_error_saturated']:.3f} / {last['squared_error_rest']:.3f} |"
        )
        assert row in page, row
        (pi if kind == "AttentionNeuron" else mlp)[folder] = last
    assert len(pi) == 4 and len(mlp) == 3
    assert all(r["squared_error_saturated"] < r["squared_error_rest"] for r in pi.values())
    share = [r["teacher_saturated"] for r in pi.values()]
    mlp_share = [r["teacher_saturated"] for r in mlp.values()]
    shares = (
        f"{min(share):.2f}-{max(share):.2f} of the steps, against {min(mlp_share):.2f}-{max(mlp_share):.2f}"
    )
    assert f"in {shares}" in page
    rest = [r["squared_error_rest"] for r in pi.values()]
    assert f"wrong there by {min(rest):.2f}-{max(rest):.2f} in squared error" in page
    ratios = []
    for folder, r in pi.items():
        seed = folder.split("seed")[1][0]
        ratios.append(
            r["squared_error_rest"] / mlp[f"runs/harder/students/seed{seed}/mlp"]["squared_error_rest"]
        )
    assert f"{int(min(ratios))} to {round(max(ratios))} times the MLP's" in page


def test_the_students_error_by_episode_age_and_their_all_or_nothing_returns_are_quoted_as_measured():
    """docs/results.md: where the 15-round students lose their return (the swing-up), from two reports."""
    report = _report("pi_cartpole_error_by_episode_age.json")
    assert report["command"].startswith("python benchmarks/pi_cartpole_action_errors.py") and report["commit"]
    page = " ".join(RESULTS.split())
    first_rounds = {}
    for kind, label in (("pi", "AttentionNeuron, 15 rounds"), ("mlp", "MLP, 5 rounds")):
        folders = [f for f in report["policies"] if f.endswith(f"/{kind}")]
        assert [f.split("seed")[1][0] for f in folders] == ["0", "1", "2"]
        rows = [report["policies"][f][0]["by_episode_age"] for f in folders]  # round 0: the teacher's states
        assert all(len(report["policies"][f]) == (15 if kind == "pi" else 5) for f in folders)
        cells = [" / ".join(f"{row[age]['squared_error']:.3f}" for row in rows) for age in rows[0]]
        assert f"| {label} | {' | '.join(cells)} |" in page, label
        first_rounds[kind] = rows
    pi, mlp = first_rounds["pi"], first_rounds["mlp"]
    balancing = [row["400-1000"]["squared_error"] for row in pi]
    swing_up = ("0-10", "10-25", "25-50", "50-100", "100-200")
    swing = [row[age]["squared_error"] for row in pi for age in swing_up]
    ratios = [
        p[age]["squared_error"] / m[age]["squared_error"] for p, m in zip(pi, mlp, strict=True)
        for age in ("50-100", "100-200")
    ]  # fmt: skip
    quoted = (
        f"error is {min(balancing):.3f}-{max(balancing):.3f}; over the whole swing-up, the first 200 steps, "
        f"it stays between {min(swing):.2f} and {max(swing):.2f}, {min(ratios):.1f} to {max(ratios):.1f} "
        "times the MLP students' in steps 50-200"
    )
    assert quoted in page
    # The all-or-nothing returns, from the 15-round report's test episodes (the same 200 for every policy).
    runs = _report("pi_cartpole_harder_dagger_r15.json")["runs"]
    teacher = np.array(runs[0]["results"]["teacher"]["5 obs"]["returns"])
    students = [np.array(r["results"]["pi"]["5 obs"]["returns"]) for r in runs]
    assert len(teacher) == 200 and not np.any((teacher >= 50) & (teacher < 600))
    assert (
        f"the teacher scores below 50 in {np.mean(teacher < 50):.2f} and at least 600 in the other "
        f"{np.mean(teacher >= 600):.2f} ({teacher[teacher >= 600].mean():.0f} on average there)"
    ) in page

    def per_seed(values, form):
        return " / ".join(form.format(v) for v in values)

    assert (
        f"score below 50 in {per_seed([np.mean(r < 50) for r in students], '{:.2f}')} (seeds 0 / 1 / 2) and "
        f"at least 600 in {per_seed([np.mean(r >= 600) for r in students], '{:.2f}')} "
        f"({per_seed([r[r >= 600].mean() for r in students], '{:.0f}')} there)"
    ) in page
    lost = [int(np.sum((teacher >= 600) & (r < 50))) for r in students]
    won = [int(np.sum((teacher < 50) & (r >= 600))) for r in students]
    quoted = (
        f"each student fails {per_seed(lost, '{}')} episodes that the teacher wins and wins "
        f"{per_seed(won, '{}')}"
    )
    assert quoted in page


def test_the_sharp_sits_smaller_learning_rate_is_quoted_as_measured():
    """docs/lavacrossing.md: learning rate 3e-4 against 1e-3 on the sharp chiral SiT, seed 0, to 1M steps."""
    report = _report("lavacrossing_sharp_lr3e-4_1m.json")
    assert "'ppo.learning_rate = 3e-4'" in report["command"] and report["commit"]
    assert report["baseline"]["report"] == "lavacrossing_chiral_sharp_1m.json"
    baseline = _report("lavacrossing_chiral_sharp_1m.json")["runs"][0]
    assert report["baseline"]["success_every_50k"] == baseline["success_every_50k"]
    lr, unchanged = dict(report["success_every_50k"]), dict(baseline["success_every_50k"])
    steps = [s for s, _ in report["success_every_50k"]][1::2]
    lines = ["| env steps | learning rate 1e-3 (unchanged) | learning rate 3e-4 |", "| ---: | ---: | ---: |"]
    lines += [f"| {s / 1000:.0f}k | {unchanged[s]:.2f} | {lr[s]:.2f} |" for s in steps]
    page = (DOCS / "lavacrossing.md").read_text()
    assert "\n".join(lines) in page
    late = [statistics.mean(v for s, v in curve.items() if s >= 500_000) for curve in (lr, unchanged)]
    last = report["success_every_50k"][-1][1]
    text = " ".join(page.split())
    assert (
        f"averaged {late[0]:.2f} against the unchanged run's {late[1]:.2f}, and it ended at {last:.2f}"
        in text
    )
    assert (
        f"({late[0]:.2f} against {late[1]:.2f} on average from 0.5M steps, {last:.2f} at 1M"
        in LAVACROSSING_SHORT
    )
    diagnostics = report["learner_diagnostics_per_100k_env_steps"]
    entropy = {d["env_steps"]: d["entropy"] for d in diagnostics}
    assert f"entropy {entropy[100_000]:.2f} and {entropy[200_000]:.2f} at 100k and 200k steps" in text
    assert f"{entropy[400_000]:.2f} at 400k" in text
    kl = [d["approx_kl"] for d in diagnostics if d["env_steps"] >= 600_000]
    assert f"approximate KL of {min(kl):.3f}-{max(kl):.3f} per update" in text


def test_the_xla_block_table_is_the_report():
    report = _report("xla_cpu_ops.json")
    assert report["table"] in SPEED
    assert "`benchmarks/reference/xla_cpu_ops.json`" in SPEED
    results = report["results"]
    for name, result in results.items():
        per_round = result["xla_over_graph_per_round"]
        assert result["xla_over_graph"] == pytest.approx(statistics.median(per_round))
        assert f"| `{name}` | {result['graph_ms']:.2f} | {result['xla_ms']:.2f} |" in report["table"]
    flat = " ".join(SPEED.split())
    assert f"load average {report['environment']['load_average_start'][0]:.1f}" in flat
    assert f"runs {results['depthwise_5x5']['xla_over_graph']:.0f}x slower compiled" in flat
    assert f"3x3 convolutions {results['conv2d_3x3']['xla_over_graph']:.1f}x" in flat
    assert f"their softmax {results['window_attention']['xla_over_graph']:.1f}x" in flat
    cnn, sit = results["cnn"]["xla_over_graph"], results["sit_chiral"]["xla_over_graph"]
    assert f"({cnn:.2f}x and {sit:.2f}x for the CNN and the chiral SiT)" in flat
    vit = _report("speed_encoders.json")["train_step_ms"]["vit"]
    assert f"batch 96 (the encoder table above) measured {vit['xla'] / vit['graph']:.2f}x its graph" in flat
    assert (
        results["layer_norm"]["xla_over_graph"]
        < 1
        < min(r["xla_over_graph"] for n, r in results.items() if n not in ("layer_norm", "segment_sum"))
    )


def test_the_dense_stem_table_is_the_report():
    """docs/speed.md, "The chiral stem in its dense form": the table and every ratio quoted beside it."""
    report = _report("xla_cpu_ops_dense_stem.json")
    assert report["load_note"] and report["commit"].startswith("6b185d2")
    assert report["command"] == (
        "python benchmarks/xla_cpu_ops.py --names depthwise_5x5,graph_conv_stem,sit_chiral,sit_small,"
        "siet_readout --rounds 5 --calls 5 --out runs/xla_cpu_ops_dense_stem.json"
    )
    assert report["table"] in SPEED and "`benchmarks/reference/xla_cpu_ops_dense_stem.json`" in SPEED
    results = report["results"]
    for name, result in results.items():
        per_round = result["xla_over_graph_per_round"]
        assert result["xla_over_graph"] == pytest.approx(statistics.median(per_round))
        assert f"| `{name}` | {result['graph_ms']:.2f} | {result['xla_ms']:.2f} |" in report["table"]
    ratio = {name: result["xla_over_graph"] for name, result in results.items()}
    before = _report("xla_runtime_avx2.json")["table"]["sit_chiral"]["legacy_xla_over_graph"]
    flat = " ".join(SPEED.split())
    assert f"The stem's XLA step is {ratio['graph_conv_stem']:.2f}x its graph step" in flat
    assert f"`DepthwiseConv2D` of the same size is {ratio['depthwise_5x5']:.2f}x" in flat
    assert f"XLA step is {ratio['sit_chiral']:.2f}x its graph step ({before:.2f}x in `xla_runtime_" in flat
    assert f"is still {ratio['siet_readout']:.2f}x slower with XLA" in flat
    assert ratio["sit_chiral"] < 0.9 < 1 < ratio["depthwise_5x5"]  # auto's margin: XLA must be 10% faster


def test_the_triangle_sums_under_xla_table_is_the_report():
    """docs/speed.md, "Triangle sums under XLA": the table and the SieT readout's ratio before and after."""
    report = _report("xla_cpu_ops_gather.json")
    assert report["load_note"] and report["commit"].startswith("7e1f9f5")
    assert report["table"] in SPEED and "`benchmarks/reference/xla_cpu_ops_gather.json`" in SPEED
    ratio = {name: result["xla_over_graph"] for name, result in report["results"].items()}
    for name, result in report["results"].items():
        assert ratio[name] == pytest.approx(statistics.median(result["xla_over_graph_per_round"]))
    before = _report("xla_cpu_ops_dense_stem.json")["results"]["siet_readout"]["xla_over_graph"]
    flat = " ".join(SPEED.split())
    assert (
        f"The SieT readout's XLA step went from {before:.2f}x its graph step to "
        f"{ratio['siet_readout']:.2f}x; SiT-small, which runs no triangle sum, is unchanged "
        f"({ratio['sit_small']:.2f}x)." in flat
    )
    assert ratio["siet_readout"] < 0.9 < 1 < before  # now within auto's margin


def test_the_encoder_speed_on_a_host_without_avx512_is_the_report():
    """docs/speed.md: the 64x64 train steps on an AVX2-only host, against the ViT and in matmul-times."""
    report = _report("speed_encoders_avx2.json")
    assert report["command"].startswith("python benchmarks/encoders.py --models sit,siet,vit,impala_cnn ")
    assert len(report["commit"]) == 40 and report["wall_time_s"] > 0 and "no AVX-512" in report["machine"]
    assert "`benchmarks/reference/speed_encoders_avx2.json`" in SPEED
    ratios = report["ratios"]
    for name, model in report["models"].items():
        step = model["timings"]["train_step"]
        over_vit = ratios["train_step_over_vit"][name]["graph"]
        cell = "1" if name == "vit" else f"{over_vit:.2f}"
        cell = f"**{cell}**" if name in ("sit", "siet") else cell
        assert (
            f"| `{name}` | {model['params']:,} | {step['graph']['median_ms']:.0f} ms | "
            f"{step['graph']['matmul_times']:.1f} | {cell} | "
            f"{ratios['xla_over_graph'][name]['train_step']:.2f} | "
            f"{model['precision']['mixed_bfloat16']['over_float32']:.2f} |"
        ) in SPEED, name
    flat = " ".join(SPEED.split())
    assert f"one 1024^3 matmul takes {report['matmul']['median_ms']:.1f} ms here" in flat
    stages = report["models"]["sit"]["stage_profile"]
    avx512 = _report("speed_encoders.json")
    before = avx512["stage_profile_matmul_times"]["sit"]
    vit_here = report["models"]["vit"]["timings"]["train_step"]["graph"]["matmul_times"]
    sit_here = report["models"]["sit"]["timings"]["train_step"]["graph"]["matmul_times"]
    assert (round(vit_here, 1), round(sit_here, 1)) == (12.3, 52.1)
    assert (
        f"(12.3 against {avx512['train_step_matmul_times']['vit']['graph']:.1f})" in flat
        and f"(52.1 against {avx512['train_step_matmul_times']['sit']['graph']:.1f})" in flat
    )
    assert (
        f"its local GSA blocks take {stages['local_gsa']['matmul_times']:.1f} matmul-times "
        f"({stages['local_gsa']['share_of_step']:.0%} of the step; "
        f"{before['local_gsa']:.1f} there), the global block {stages['global_gsa']['matmul_times']:.1f} "
        f"({before['global_gsa']:.1f}), the stem and pooling {stages['stem_pool']['matmul_times']:.1f} "
        f"({before['stem_pool']:.1f})"
    ) in flat
    assert all(ratios["train_step_over_vit"][name]["graph"] > 4 for name in ("sit", "siet"))
    sit, siet = (ratios["train_step_over_vit"][name]["graph"] for name in ("sit", "siet"))
    after = _report("speed_encoders_avx2_channels_first.json")["ratios"]["train_step_over_vit"]
    assert (
        f"not on a host without AVX-512 ({after['sit']['graph']:.2f}x and {after['siet']['graph']:.2f}x "
        f"since the projections' kernel gradient changed, {sit:.2f}x and {siet:.2f}x before;"
    ) in flat
    rerun = _report("speed_encoders_avx2_no_pageout.json")
    assert rerun["command"].split(" --out ")[0] == report["command"].split(" --out ")[0]
    assert "echo off > /sys/kernel/mm/damon" in rerun["host_setting"] and len(rerun["commit"]) == 40
    sit, siet = (rerun["ratios"]["train_step_over_vit"][name]["graph"] for name in ("sit", "siet"))
    assert f"measured the SiT and SieT steps at {sit:.2f}x and {siet:.2f}x the ViT's" in flat


def test_the_local_gsa_op_profile_and_the_channels_first_kernel_gradient_are_the_reports():
    """docs/speed.md: the local GSA op by op, and the kernel-gradient change before and after."""
    flat = " ".join(SPEED.split())
    profile = _report("op_profile_local_avx2.json")
    assert profile["command"].startswith("python benchmarks/op_profile.py ") and len(profile["commit"]) == 40
    assert profile["settings"] == {**profile["settings"], "model": "sit", "stage": "local_gsa", "batch": 96}
    assert "no AVX-512" in profile["machine"] and "`benchmarks/reference/op_profile_local_avx2.json`" in flat
    types = {row["op"]: row for row in profile["op_types"]}
    assert sum(row["share"] for row in profile["op_types"]) == pytest.approx(1.0)

    def share(op: str, shape: str) -> float:
        rows = [r for r in profile["nodes"] if r["op"] == op and shape in r["shapes"]]
        assert len(rows) in (3, 6)  # forward and both gradients, in one block or both
        return sum(r["share"] for r in rows)

    assert (
        f"summed op time {profile['summed_op_ms_per_call']:.0f} ms per call against "
        f"{profile['wall_ms_median']:.0f} ms of wall time"
    ) in flat
    assert (
        f"Batched matmuls take {types['BatchMatMulV2']['share']:.0%} of it: the per-feature graph matrices "
        f"`G_q, G_k, G_v` (192 products of `6144 x 17` by `17 x 17` per application, forward and both "
        f"gradients, in both blocks) {share('BatchMatMulV2', '(192, 17, 17)'):.0%}, the triangle matrix "
        f"(`6144 x 289` by `289 x 289` per head) {share('BatchMatMulV2', '(4, 289, 289)'):.0%}; the 2-D "
        f"projection matmuls {types['MatMul']['share']:.0%}, transposes {types['Transpose']['share']:.0%}."
    ) in flat
    gradient = _report("channels_first_grad_avx2.json")
    assert (
        gradient["command"]
        == "python benchmarks/channels_first_grad.py --out runs/channels_first_grad_avx2.json"
    )
    assert gradient["repeats"] == 9 and len(gradient["commit"]) == 40 and "no AVX-512" in gradient["machine"]
    first, second = (gradient["results"][name]["kernel_grad"] for name in ("first_block", "second_block"))
    for measured in (first, second):
        ratio = measured["tensorflow_ms"] / measured["channels_first_ms"]
        assert measured["tensorflow_over_channels_first"] == pytest.approx(ratio) and ratio > 2
    assert (
        f"the same sums run {first['tensorflow_over_channels_first']:.2f}x faster for the first block's "
        f"`R = 6` and {second['tensorflow_over_channels_first']:.2f}x for the second block's `R = 64`"
    ) in flat
    assert (
        f"the same sums, {first['tensorflow_over_channels_first']:.1f}x faster for `R = 6` and "
        f"{second['tensorflow_over_channels_first']:.1f}x for `R = 64` on an AVX2 host"
    ) in flat
    runs = [_report(f"speed_encoders_avx2{tail}.json") for tail in ("", "_channels_first", "_bfc")]
    for later in runs[1:]:
        assert later["command"].split(" --out ")[0] == runs[0]["command"].split(" --out ")[0]
        assert len(later["commit"]) == 40 and "no AVX-512" in later["machine"]
    assert runs[2]["environment"]["env"]["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
    rows = {
        "SiT / ViT": [r["ratios"]["train_step_over_vit"]["sit"]["graph"] for r in runs],
        "SieT / ViT": [r["ratios"]["train_step_over_vit"]["siet"]["graph"] for r in runs],
    }
    for label, (was, now, arena) in rows.items():
        assert f"| {label} | {was:.2f} | **{now:.2f}** | **{arena:.2f}** |" in SPEED
    local = [r["models"]["sit"]["stage_profile"]["local_gsa"]["matmul_times"] for r in runs]
    assert "| SiT's local GSA, matmul-times | {:.1f} | {:.1f} | {:.1f} |".format(*local) in SPEED
    assert f"Still {rows['SiT / ViT'][2]:.1f}x, not the speed issue's 2.0x" in flat


def _check_precision_auto_rows(report: dict, all_float32: bool = True) -> list[float]:
    """Each config's row of docs/speed.md is the report's, its choice follows the margin, and (unless
    ``all_float32`` is False) it is float32.

    Returns the bfloat16 / float32 ratios.
    """
    ratios = []
    for row in report["configs"]:
        measured = row["precision"]
        float32, bfloat16 = (measured["seconds"][name] * 1e3 for name in ("float32", "mixed_bfloat16"))
        ratio = measured["bfloat16_over_float32"]
        assert measured["choice"] == ("mixed_bfloat16" if ratio < report["margin"] else "float32")
        assert (
            f"| `{row['gin_file']}` | `{row['encoder']}` | {row['minibatch_size']} | {float32:.1f} | "
            f"{bfloat16:.1f} | {ratio:.2f} | {measured['choice']} |"
        ) in SPEED
        ratios.append(ratio)
    if all_float32:
        assert {row["precision"]["choice"] for row in report["configs"]} == {"float32"}
    return ratios


def test_what_precision_auto_chooses_without_bfloat16_instructions_is_the_report():
    """docs/speed.md: on an AVX2-only host bfloat16 is slower for every main config and auto keeps float32."""
    report = _report("auto_precision_avx2.json")
    assert report["command"].startswith("python benchmarks/jit_compile_auto.py --questions precision --out ")
    assert report["questions"] == ["precision"] and len(report["commit"]) == 40 and report["wall_time_s"] > 0
    assert "no AVX-512" in report["machine"] and "`benchmarks/reference/auto_precision_avx2.json`" in SPEED
    ratios = _check_precision_auto_rows(report)
    flat = " ".join(SPEED.split())
    assert f"bfloat16 is slower for every config here ({min(ratios):.2f}-{max(ratios):.2f}x float32)" in flat
    training = _flat_page("training.md")
    assert f"where bfloat16 took {min(ratios):.2f}-{max(ratios):.2f}x the float32 step" in training


def test_bfloat16_on_a_host_with_avx512_bf16_and_no_amx_is_the_reports():
    """docs/speed.md: there bfloat16 matmuls are slower than float32's, no model gains, auto keeps float32."""
    encoders = _report("speed_encoders_avx512bf16.json")
    auto = _report("auto_precision_avx512bf16.json")
    for report in (encoders, auto):
        assert "AVX512_BF16" in report["machine"] and "no AMX" in report["machine"]
        assert len(report["commit"]) == 40 and report["wall_time_s"] > 0 and report["load_note"]
    assert encoders["command"].startswith("python benchmarks/encoders.py --precisions float32,mixed_bfloat16")
    assert auto["command"].startswith("python benchmarks/jit_compile_auto.py --questions precision --out ")
    flat = " ".join(SPEED.split())
    for name in ("speed_encoders_avx512bf16.json", "auto_precision_avx512bf16.json"):
        assert f"`benchmarks/reference/{name}`" in flat
    matmul = encoders["matmul"]["by_precision"]["mixed_bfloat16"]
    assert matmul["over_float32"] == pytest.approx(matmul["median_ms"] / encoders["matmul"]["median_ms"])
    assert f"**{matmul['over_float32']:.2f}x** the float32 matmul (medians of 7 and 20 runs)" in flat
    assert (len(matmul["runs_ms"]), len(encoders["matmul"]["runs_ms"])) == (7, 20)
    over_vit = encoders["ratios"]["train_step_over_vit"]
    for name, model in encoders["models"].items():
        step = model["timings"]["train_step"]["graph"]["median_ms"]
        ratio = over_vit[name]["graph"]
        assert (
            f"| `{name}` | {step:.0f} ms | {model['precision']['mixed_bfloat16']['over_float32']:.2f} | "
            f"{'1' if name == 'vit' else f'{ratio:.2f}'} |"
        ) in SPEED, name
    assert matmul["over_float32"] > 1  # why the 0.7x target fails
    shares = {row["op"]: row["share"] for row in _report("op_profile_train_avx512.json")["op_types"]}
    matmuls = shares["_MklBatchMatMulV2"] + shares["_MklMatMul"]
    bound = matmuls * matmul["over_float32"]
    assert (
        f"alone would take about {bound:.2f}x the float32 step ({100 * matmuls:.1f}% x "
        f"{matmul['over_float32']:.2f}), before any of the rest."
    ) in flat
    assert bound > 0.7
    quiet = _report("speed_encoders_avx512_quiet.json")
    assert quiet["machine"] == encoders["machine"] and "paused" in quiet["load_note"]
    assert quiet["command"].startswith(
        "python benchmarks/encoders.py --models sit,siet,vit --precisions float32 "
    )
    steps = {
        name: model["timings"]["train_step"]["graph"]["median_ms"] for name, model in quiet["models"].items()
    }
    quiet_over_vit = {name: quiet["ratios"]["train_step_over_vit"][name]["graph"] for name in ("sit", "siet")}
    assert (
        f"at {steps['sit']:.0f} ms for `sit`, {steps['siet']:.0f} ms for `siet` and "
        f"{steps['vit']:.0f} ms for `vit`: **{quiet_over_vit['sit']:.2f}x** and "
        f"**{quiet_over_vit['siet']:.2f}x** the ViT"
    ) in flat
    assert min(quiet_over_vit.values()) > 2  # the 2.0x target is missed
    ratios = _check_precision_auto_rows(auto)
    span = f"{min(ratios):.2f}-{max(ratios):.2f}x"
    assert f"bfloat16 takes {span} the float32 step here; no config is below `auto`'s margin of 0.9" in flat
    training = _flat_page("training.md")
    assert f"it kept float32 too, where bfloat16 took {span}" in training


def _triangle_matrix_nodes(profile: dict) -> tuple[float, float, set[str]]:
    """ms per call, share and output dtypes of the local GSA's triangle matrix product and its gradient."""
    nodes = [n for n in profile["nodes"] if "MatMul" in n["op"] and "289, 289)" in n["shapes"]]
    assert len(nodes) == 3  # the forward product and the two of its gradient
    return sum(n["ms_per_call"] for n in nodes), sum(n["share"] for n in nodes), {n["dtypes"] for n in nodes}


def test_the_sit_over_the_faster_vit_on_one_core_is_the_report():
    """docs/speed.md, "The ViT baseline's attention": the SiT and SieT steps over the faster ViT, on one core
    of the AMX host and on both."""
    report = _report("speed_encoders_amx_one_core.json")
    both = _report("speed_encoders_amx.json")
    assert report["environment"]["cpus_available"] == 1 and "AMX" in report["machine"]
    assert "taskset -c 0" in report["load_note"]
    assert report["command"] == (
        "python benchmarks/encoders.py --models sit,siet,vit --repeats 15 --precisions "
        "float32,mixed_bfloat16 --no_profile --out benchmarks/reference/speed_encoders_amx_one_core.json"
    )
    # Both measured after the ViT's faster attention (d53681d, 2026-12-01) landed.
    assert both["commit"].startswith("31a40d0") and report["environment"]["date"] >= "2026-12-02"
    over_vit = report["ratios"]["train_step_over_vit"]
    vit_xla = report["ratios"]["xla_over_graph"]["vit"]["train_step"]
    bf16 = report["models"]["sit"]["precision"]["mixed_bfloat16"]["over_float32"]
    section = " ".join(SPEED.split()).split("### The ViT baseline's attention", 1)[1].split(" ### ", 1)[0]
    both_cores = both["ratios"]["train_step_over_vit"]["sit"]["graph"]
    assert (
        f"the SiT's step measures {both_cores:.2f}x the ViT's with both cores "
        f"([below](#on-an-intel-host-with-amx)) and **{over_vit['sit']['graph']:.2f}x** (SieT "
        f"**{over_vit['siet']['graph']:.2f}x**) pinned to one of them"
    ) in section
    assert min(over_vit["sit"]["graph"], over_vit["siet"]["graph"]) > 2.0  # "not met on either"
    assert (
        f"Under XLA the ViT's step is {vit_xla:.2f}x its graph step there, so against the ViT's faster mode "
        f"the SiT's faster (graph) step is {over_vit['sit']['graph'] / vit_xla:.2f}x; under `mixed_bfloat16` "
        f"the SiT's step is {bf16:.2f}x its float32 step on one core."
    ) in section
    assert over_vit["sit"]["xla"] > over_vit["sit"]["graph"]  # graph is the SiT's faster mode


def test_bfloat16_on_an_intel_host_with_amx_is_the_reports():
    """docs/speed.md, "On an Intel host with AMX": the fastest bfloat16 matmuls, and the step's ratio."""
    speed = _report("speed_encoders_amx.json")
    profiles = {p: _report(f"op_profile_train_amx_{p}.json") for p in ("float32", "mixed_bfloat16")}
    for report in (speed, *profiles.values()):
        assert "AMX" in report["machine"] and report["load_note"] and report["commit"].startswith("31a40d0")
    assert speed["command"].startswith(
        "python benchmarks/encoders.py --models sit,siet,vit --precisions float32,mixed_bfloat16 --no_profile"
    )
    for precision, profile in profiles.items():
        assert profile["settings"]["precision"] == precision
        assert profile["command"].startswith("python benchmarks/op_profile.py --model sit --stage train")
    flat = " ".join(SPEED.split())
    section = flat.split("### On an Intel host with AMX", 1)[1].split(" ## ", 1)[0]
    for name in ("speed_encoders_amx.json", "op_profile_train_amx_float32.json"):
        assert f"`benchmarks/reference/{name}`" in section
    assert "`op_profile_train_amx_mixed_bfloat16.json`" in section
    matmul = speed["matmul"]["by_precision"]["mixed_bfloat16"]["over_float32"]
    assert f"the 1024^3 matmul in bfloat16 takes **{matmul:.2f}x** its float32 time" in section
    over = {m: v["precision"]["mixed_bfloat16"]["over_float32"] for m, v in speed["models"].items()}
    assert (
        f"measures {over['sit']:.2f} for `sit`, {over['siet']:.2f} for `siet` and {over['vit']:.2f} for `vit`"
    ) in section
    assert over["sit"] > 0.7 and over["vit"] > 1  # "not met on this host kind either"; "slower in bfloat16"
    graph = speed["ratios"]["train_step_over_vit"]
    assert (
        f"the SiT's step is {graph['sit']['graph']:.2f}x the ViT's here and the SieT's "
        f"{graph['siet']['graph']:.2f}x"
    ) in section
    ops = {p: {o["op"]: o for o in profile["op_types"]} for p, profile in profiles.items()}
    f32, bf16 = ops["float32"], ops["mixed_bfloat16"]
    assert (
        f"the batched matmuls go from {f32['_MklBatchMatMulV2']['ms_per_call']:.1f} to "
        f"{bf16['_MklBatchMatMulV2']['ms_per_call']:.1f} ms and the 2-D ones from "
        f"{f32['_MklMatMul']['ms_per_call']:.1f} to {bf16['_MklMatMul']['ms_per_call']:.1f} ms"
    ) in section
    assert f"(`Mul` {f32['Mul']['ms_per_call']:.1f} and {bf16['Mul']['ms_per_call']:.1f} ms)" in section
    cast = bf16["Cast"]
    assert (
        f"the casts take {cast['ms_per_call']:.1f} ms ({100 * cast['share']:.1f}% of the bfloat16 step; "
        f"{f32['Cast']['ms_per_call']:.1f} ms in float32)"
    ) in section


def test_bfloat16_on_an_amd_host_with_avx512_bf16_is_the_reports():
    """docs/speed.md: the triangle matrix in bfloat16 takes the SiT's bfloat16 step from 0.81x to 0.72x."""
    before, after = (
        _report("speed_encoders_amd_bf16_before.json"),
        _report("speed_encoders_amd_bf16_after.json"),
    )
    profiles = {
        (when, precision): _report(f"op_profile_train_amd_bf16_{when}_{precision}.json")
        for when in ("before", "after")
        for precision in ("float32", "mixed_bfloat16")
    }
    auto = _report("auto_precision_amd_bf16.json")
    for report in (before, after, auto, *profiles.values()):
        assert "AMD EPYC" in report["machine"] and "AVX512_BF16, no AMX" in report["machine"]
        assert report["load_note"] and report["wall_time_s"] > 0
    for when, report in (("before", before), ("after", after)):
        commit = "bd4044b" if when == "before" else "755626a"
        assert report["commit"].startswith(commit) and report["command"].startswith(
            "python benchmarks/encoders.py --models sit,siet,vit --precisions float32,mixed_bfloat16 "
            "--no_profile"
        )
        for precision in ("float32", "mixed_bfloat16"):
            profile = profiles[when, precision]
            assert profile["commit"].startswith(commit) and profile["settings"]["precision"] == precision
            assert profile["command"].startswith("python benchmarks/op_profile.py --model sit --stage train")
    flat = " ".join(SPEED.split())
    named = ["speed_encoders_amd_bf16_before.json", "speed_encoders_amd_bf16_after.json"]
    named += [f"op_profile_train_amd_bf16_{when}_float32.json" for when in ("before", "after")]
    for name in [*named, "auto_precision_amd_bf16.json"]:
        assert f"`benchmarks/reference/{name}`" in flat, name
    matmul = [r["matmul"]["by_precision"]["mixed_bfloat16"]["over_float32"] for r in (before, after)]
    assert f"**{matmul[0]:.2f}x** and **{matmul[1]:.2f}x** its float32 time in two runs" in flat
    assert max(matmul) < 0.7  # a host whose bfloat16 matmuls pay

    def over(report: dict, model: str) -> float:
        return report["models"][model]["precision"]["mixed_bfloat16"]["over_float32"]

    assert (
        f"`mixed_bfloat16` took {over(before, 'sit'):.2f}x its float32 step and the SieT's "
        f"{over(before, 'siet'):.2f}x"
    ) in flat
    ms, share, dtypes = _triangle_matrix_nodes(profiles["before", "mixed_bfloat16"])
    ms32, share32, dtypes32 = _triangle_matrix_nodes(profiles["before", "float32"])
    assert dtypes == dtypes32 == {"float32"}  # before: float32 under both policies
    assert f"took {ms:.1f} ms a call, {100 * share:.1f}% of the bfloat16 step's summed op time" in flat
    assert f"({ms32:.1f} ms, {100 * share32:.1f}%, in float32)" in flat
    ms_after, share_after, dtypes_after = _triangle_matrix_nodes(profiles["after", "mixed_bfloat16"])
    assert dtypes_after == {"bfloat16"} and ms_after < ms
    assert (
        f"Its three nodes now take {ms_after:.1f} ms a call ({100 * share_after:.1f}% of the bfloat16 step"
        in flat
    )
    over_vit = after["ratios"]["train_step_over_vit"]
    for model in ("sit", "siet"):
        assert (
            f"| `{model}` | {over(before, model):.2f} | **{over(after, model):.2f}** | "
            f"{over_vit[model]['graph']:.2f} |"
        ) in SPEED
        assert over(after, model) < over(before, model)
    assert f"| `vit` | {over(before, 'vit'):.2f} | {over(after, 'vit'):.2f} | 1 |" in SPEED
    assert min(over(after, m) for m in ("sit", "siet")) > 0.7  # the issue's 0.7x: close, not met
    assert f"the SiT's bfloat16 step measures {over(after, 'sit'):.2f}x since its triangle matrix" in flat
    types = {w: {r["op"]: r for r in profiles["after", w]["op_types"]} for w in ("float32", "mixed_bfloat16")}
    mul = types["mixed_bfloat16"]["Mul"]["ms_per_call"] / types["float32"]["Mul"]["ms_per_call"]
    cast = types["mixed_bfloat16"]["Cast"]["share"]
    assert (
        f"`Mul` takes {mul:.2f}x its float32 time in bfloat16, and the casts between the two dtypes take"
        in flat
    )
    assert (
        f"{100 * cast:.1f}% of the bfloat16 step. The SiT's float32 step is {over_vit['sit']['graph']:.2f}x"
        in flat
    )
    assert auto["commit"].startswith("755626a")
    _check_precision_auto_rows(auto, all_float32=False)
    chosen = sum(r["precision"]["choice"] == "mixed_bfloat16" for r in auto["configs"])
    assert f"Here `auto` trains {chosen} of the {len(auto['configs'])} configs in bfloat16" in flat
    assert f"is below its margin of {auto['margin']}." in flat
    training = _flat_page("training.md")
    assert f"it chose bfloat16 for {chosen} of the {len(auto['configs'])} main configs" in training


def _check_jit_compile_auto_rows(report: dict) -> None:
    """Each config's row of docs/speed.md is the report's, and its choice follows the margin."""
    for row in report["configs"]:
        graph, compiled = row["seconds"]["off"] * 1e3, row["seconds"]["on"] * 1e3
        assert row["choice"] == ("on" if row["xla_over_graph"] < report["margin"] else "off")
        assert (
            f"| `{row['gin_file']}` | `{row['encoder']}` | {row['minibatch_size']} | {graph:.1f} | "
            f"{compiled:.1f} | {row['xla_over_graph']:.2f} | {row['choice']} |"
        ) in SPEED


def test_what_jit_compile_auto_chooses_is_the_report():
    """docs/speed.md: XLA against the graph per config, and auto's choice by the margin."""
    report = _report("jit_compile_auto.json")
    assert (
        report["command"]
        == "python benchmarks/jit_compile_auto.py --out benchmarks/reference/jit_compile_auto.json"
    )
    assert len(report["commit"]) == 40 and report["wall_time_s"] > 0
    assert "`benchmarks/reference/jit_compile_auto.json`" in SPEED
    _check_jit_compile_auto_rows(report)
    images = [
        r["xla_over_graph"] for r in report["configs"] if r["encoder"] not in ("mlp", "attention_neuron")
    ]
    vectors = [r["xla_over_graph"] for r in report["configs"] if r["encoder"] in ("mlp", "attention_neuron")]
    flat = " ".join(SPEED.split())
    assert f"slower for every image model here ({min(images):.2f}-{max(images):.1f}x)" in flat
    assert max(abs(ratio - 1) for ratio in vectors) < 0.05
    images_cost = [
        r["measurement_s"] for r in report["configs"] if not r["gin_file"].startswith("configs/procgen")
    ]
    procgen_cost = [
        r["measurement_s"] for r in report["configs"] if r["gin_file"].startswith("configs/procgen")
    ]
    assert 1 <= min(images_cost) and max(images_cost) <= 20
    assert f"{min(procgen_cost):.0f}-{max(procgen_cost):.0f} s for the Procgen models" in flat
    training = _flat_page("training.md")
    assert {r["choice"] for r in report["configs"]} == {"off"}
    assert "`auto` chose it for none of the main configs" in training


def test_the_students_return_by_recorded_steps_is_the_report():
    """docs/results.md: the DAgger rounds' returns per recorded steps, and the PNG drawn from them."""
    import importlib.util

    from PIL import Image, ImageChops

    path = ROOT / "benchmarks" / "pi_cartpole_data_curve.py"
    spec = importlib.util.spec_from_file_location("data_curve", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report = _report("pi_cartpole_data_curve.json")
    assert report["command"].startswith("python benchmarks/pi_cartpole_data_curve.py") and report["commit"]
    students = {label: [run["rounds"] for run in runs] for label, runs in report["students"].items()}
    last = max(r[-1]["recorded_steps_trained_on"] for runs in students.values() for r in runs)
    drawn = module.draw(students, last, "CartPoleSwingUpHarder: student return by recorded steps")
    committed = Image.open(ROOT / "docs" / "pi_cartpole_data_curve.png").convert("RGB")
    assert ImageChops.difference(drawn, committed).getbbox() is None

    def means(label: str) -> list[float]:
        return [statistics.mean(run[k]["mean_return"] for run in students[label]) for k in range(1, 5)]

    pi20, pi100, mlp = means("PI 20 epochs"), means("PI 100 epochs"), means("MLP 20 epochs")
    text = " ".join(RESULTS.split())
    teacher_test = _report("pi_cartpole_harder_dagger_seeds.json")["summary"]["teacher_5_obs"]
    assert f"averages {module.teacher_level(students):.0f} against its {teacher_test:.0f} in the test" in text
    for label, values in (("3 seeds)", pi20), ("(seed 0)", pi100), ("MLP students (3 seeds)", mlp)):
        assert f"{label} {' / '.join(f'{v:.0f}' for v in values)}" in text, label
    assert f"gain {pi20[1] - pi20[0]:.0f} and {pi20[2] - pi20[1]:.0f} in the rounds up to 192k" in text
    mlp_gains = f"{mlp[1] - mlp[0]:.0f} and {mlp[2] - mlp[1]:.0f}"
    assert f"(the MLP's {mlp_gains}), then {pi20[3] - pi20[2]:.0f}" in text
    assert f"100-epoch one gains {pi100[3] - pi100[2]:.0f} in the last" in text
    assert max(pi20[3], pi100[3]) / module.teacher_level(students) < 0.6  # "about half"
    assert "`benchmarks/reference/pi_cartpole_data_curve.json`" in RESULTS
    longer = students["PI 20 epochs 10 rounds"]
    assert all(a[:5] == b for a, b in zip(longer, students["PI 20 epochs"], strict=True))  # same first rounds
    later = [statistics.mean(run[k]["mean_return"] for run in longer) for k in range(5, 10)]
    steps = [longer[0][k]["recorded_steps_trained_on"] // 1000 for k in range(5, 10)]
    assert (
        f"{' / '.join(f'{v:.0f}' for v in later)} after {' / '.join(f'{k}k' for k in steps)} recorded steps"
        in text
    )
    fifteen = students["PI 10 epochs 15 rounds"]
    last_five = [statistics.mean(run[k]["mean_return"] for run in fifteen) for k in range(10, 15)]
    steps = [fifteen[0][k]["recorded_steps_trained_on"] // 1000 for k in range(10, 15)]
    assert (
        f"level off instead: {' / '.join(f'{v:.0f}' for v in last_five)} after "
        f"{' / '.join(f'{k}k' for k in steps)} recorded steps" in text
    )
    assert max(last_five) < later[-1]  # below the 10-round students' last round


def _assert_order_and_count_free(per_seed: dict[str, list[float]], tolerance: float) -> None:
    """A PI student's shuffled and 10-reading columns are its upright return within ``tolerance``."""
    for column in ("5 obs (shuffled)", "10 obs"):
        ratios = zip(per_seed[column], per_seed["5 obs"], strict=True)
        assert max(abs(a / b - 1) for a, b in ratios) < tolerance, column


def _minute_span(runs: list[dict]) -> str:
    """``"min-max"`` of the runs' wall times in whole minutes (one number if they round alike), as quoted."""
    minutes = [run["wall_seconds"] / 60 for run in runs]
    low, high = f"{min(minutes):.0f}", f"{max(minutes):.0f}"
    return low if low == high else f"{low}-{high}"


def _checked_pi_seeds(
    runs: list[dict], summary: dict, flags: tuple[str, ...], seeds: tuple[int, ...] = (0, 1, 2)
) -> dict[str, list[float]]:
    """Checks ``seeds`` (``flags`` and the seed in each command, commit, wall time, the one teacher,
    200 test episodes); returns each of the 9 columns' mean per seed, as the summary holds them."""
    assert [run["seed"] for run in runs] == list(seeds)
    for run in runs:
        for flag in flags:
            assert flag in run["command"], flag
        assert f"--seed {run['seed']}" in run["command"] and run["commit"] and run["wall_seconds"] > 0
        assert run["results"]["teacher"]["5 obs"]["mean"] == summary["teacher_5_obs"]
        assert run["test_settings"]["num_episodes"] == 200
    columns = list(runs[0]["results"]["pi"])
    per_seed = {c: [run["results"]["pi"][c]["mean"] for run in runs] for c in columns}
    assert len(columns) == 9 and per_seed == summary["pi_per_seed"]
    return per_seed


def _assert_reshuffles_runs_and_readme(
    per_seed: dict[str, list[float]],
    runs: list[dict],
    text: str,
    tolerance: float,
    report: str,
    in_readme: bool = True,
) -> None:
    """The reshuffle columns' means over the seeds, the shuffled and 10-reading columns within
    ``tolerance``, the runs' wall minutes as quoted in ``text``, and ``report`` named in the README
    (where ``in_readme``; the README's summary leaves some settings to docs/results.md)."""
    means = " / ".join(f"{statistics.mean(v):.0f}" for c, v in per_seed.items() if c.startswith("reshuffle"))
    assert f"{means} (mean over the seeds) for reshuffles" in text
    _assert_order_and_count_free(per_seed, tolerance)
    assert f"wall time, {_minute_span(runs)} minutes each" in text
    assert (f"`benchmarks/reference/{report}`" in README) == in_readme


def _quoted_upright(summary: dict, upright: list[float], text: str) -> tuple[float, str]:
    """Checks the students' upright "mean +- sample std, share of the teacher" in ``text``; returns the
    share and the per-seed shares as quoted ("73% / 81% / 66%")."""
    teacher = summary["teacher_5_obs"]
    mean, std = statistics.mean(upright), statistics.stdev(upright)
    assert mean / teacher == pytest.approx(summary["student_over_teacher"])
    assert (
        f"score {mean:.0f} +- {std:.0f} (mean +- sample std over the seeds), **{mean / teacher:.0%} of"
        in text
    )
    return mean / teacher, " / ".join(f"{v / teacher:.0%}" for v in upright)


def test_the_students_with_twice_the_dagger_rounds_are_quoted_as_measured():
    report = _report("pi_cartpole_harder_dagger_rounds10.json")
    summary, runs = report["summary"], report["runs"]
    assert [run["seed"] for run in runs] == [0, 1, 2]
    for run in runs:
        assert "--dagger_rounds 9" in run["command"] and "--total_env_steps 640000" in run["command"]
        assert run["commit"] and run["wall_seconds"] > 0
        assert run["results"]["teacher"]["5 obs"]["mean"] == summary["teacher_5_obs"]
    columns = ("5 obs", "5 obs (shuffled)", "10 obs", "5 obs + 5 noise")
    per_seed = {c: [run["results"]["pi"][c]["mean"] for run in runs] for c in columns}
    assert per_seed["5 obs"] == summary["pi_5_obs_per_seed"]
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in columns]
    assert f"| AttentionNeuron, 10 rounds, seeds 0 / 1 / 2 | {' | '.join(cells)} |" in RESULTS
    mean, std = statistics.mean(per_seed["5 obs"]), statistics.stdev(per_seed["5 obs"])
    teacher = summary["teacher_5_obs"]
    assert mean / teacher == pytest.approx(summary["student_over_teacher"])
    text = " ".join(RESULTS.split())
    ratios = " / ".join(f"{v / teacher:.0%}" for v in per_seed["5 obs"])
    share = f"{mean / teacher:.0%}"
    assert f"{mean:.0f} +- {std:.0f} over the seeds (mean +- sample std): **{share} of the teacher's" in text
    assert f"({ratios} by seed;" in text
    before = _report("pi_cartpole_harder_dagger_seeds.json")["summary"]["student_over_teacher"]
    assert f"against {before:.0%} with half the rounds" in text
    _assert_order_and_count_free(per_seed, 0.01)
    noise = [a / b for a, b in zip(per_seed["5 obs + 5 noise"], per_seed["5 obs"], strict=True)]
    assert 0.4 < min(noise) and max(noise) < 0.6  # "about half"
    assert f"and wall time, {_minute_span(runs)} minutes each on a shared core" in text
    readme = " ".join(README.split())
    assert f"it scores {mean:.0f} +- {std:.0f}, **{mean / teacher:.0%} of its teacher**" in readme
    assert "`benchmarks/reference/pi_cartpole_harder_dagger_rounds10.json`" in readme


def test_the_student_with_noise_channels_only_is_quoted_as_measured():
    """docs/results.md: seed 0 with bc.noise_sensors alone, against no noises and both noises."""
    report = _report("pi_cartpole_harder_dagger_noise_only.json")
    (run,) = report["runs"]
    assert "--noise_sensors 5" in run["command"] and "--previous_action_noise" not in run["command"]
    assert run["students"]["pi"]["settings"]["previous_action_noise"] == 0.0 and run["seed"] == 0
    pi = {c: v["mean"] for c, v in run["results"]["pi"].items()}
    assert pi == report["summary"]["pi"]
    teacher = run["results"]["teacher"]["5 obs"]["mean"]
    clean = _report("pi_cartpole_harder_dagger_rounds10.json")["runs"][0]["results"]["pi"]["5 obs"]["mean"]
    both = _report("pi_cartpole_harder_dagger_noise.json")["runs"][0]["results"]["pi"]["5 obs"]["mean"]
    text = " ".join(RESULTS.split())
    upright, noise = pi["5 obs"], pi["5 obs + 5 noise"]
    assert (
        f"scores {upright:.0f} upright ({upright / teacher:.0%} of the teacher; {clean:.0f} without noise "
        f"channels, {both:.0f} with both noises) and {noise:.0f} with 5 noise channels: "
        f"{1 - noise / upright:.1%} below upright, inside the issue's 5%."
    ) in text
    assert (
        "`benchmarks/reference/pi_cartpole_harder_dagger_noise_only.json`, "
        f"{run['wall_seconds'] / 60:.0f} minutes" in text
    )


def test_the_students_trained_beside_noise_channels_are_quoted_as_measured():
    """docs/results.md: bc.noise_sensors with the paper's previous-action noise, 3 seeds, Tables 2 and 6."""
    report = _report("pi_cartpole_harder_dagger_noise.json")
    summary, runs = report["summary"], report["runs"]
    assert [run["seed"] for run in runs] == [0, 1, 2]
    for run in runs:
        for flag in ("--noise_sensors 5", "--previous_action_noise 0.03", "--dagger_rounds 9"):
            assert flag in run["command"]
        assert f"--seed {run['seed']}" in run["command"] and run["commit"] and run["wall_seconds"] > 0
        assert run["students"]["pi"]["settings"]["noise_sensors"] == 5
        assert run["results"]["teacher"]["5 obs"]["mean"] == summary["teacher_5_obs"]
        assert run["test_settings"]["num_episodes"] == 200
    baseline = _report("pi_cartpole_harder_dagger_rounds10.json")
    columns = list(runs[0]["results"]["pi"])
    assert len(columns) == 9  # Table 2's four columns and Table 6's five
    per_seed = {c: [run["results"]["pi"][c]["mean"] for run in runs] for c in columns}
    assert per_seed == summary["pi_per_seed"]
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in columns]
    assert f"| AttentionNeuron, noise channels in training | {' | '.join(cells)} |" in RESULTS
    teacher_results = runs[0]["results"]["teacher"]
    reshuffles = [c for c in columns if c.startswith("reshuffle")]
    teacher_cells = " | ".join(f"{teacher_results[c]['mean']:.0f}" for c in reshuffles)
    assert f"| N/A | N/A | {teacher_cells} |" in RESULTS
    text = " ".join(RESULTS.split())
    upright, noise = per_seed["5 obs"], per_seed["5 obs + 5 noise"]
    costs = [1 - n / u for n, u in zip(noise, upright, strict=True)]
    assert f"cost {' / '.join(f'{c:.1%}' for c in costs)} of the upright return" in text
    span = f"{100 * min(costs):.1f}-{max(costs):.1%}"
    assert f"within {span}, upright" in text
    assert [c > 0.05 for c in costs] == [False, True, False]  # "Seed 1 is just outside the issue's 5%"
    teacher = summary["teacher_5_obs"]
    mean, std = statistics.mean(upright), statistics.stdev(upright)
    assert mean / teacher == pytest.approx(summary["student_over_teacher"])
    ratios = " / ".join(f"{v / teacher:.0%}" for v in upright)
    share = f"**{mean / teacher:.0%} of the"
    assert f"score {mean:.0f} +- {std:.0f} (mean +- sample std over the seeds), {share}" in text
    assert f"({ratios} by seed), against {baseline['summary']['student_over_teacher']:.0%}" in text
    losses = " / ".join(f"{run['students']['pi']['loss_per_epoch'][-1]:.3f}" for run in runs)
    before = " / ".join(f"{run['students']['pi']['loss_per_epoch'][-1]:.3f}" for run in baseline["runs"])
    assert f"last-round loss is {losses} against {before}" in text
    means = " / ".join(f"{statistics.mean(per_seed[c]):.0f}" for c in reshuffles)
    assert f"{means} (mean over the seeds)" in text
    assert f"paper's {' / '.join(str(paper[c][0]) for c in reshuffles)}." in text
    teacher_reshuffled = [teacher_results[c]["mean"] for c in reshuffles]
    assert f"teacher scores {min(teacher_reshuffled):.0f}-{max(teacher_reshuffled):.0f} under every" in text
    _assert_order_and_count_free(per_seed, 0.001)
    assert f"wall time, {_minute_span(runs)} minutes each" in text
    readme = " ".join(README.split())
    assert f"it loses {span} with them" in readme
    assert f"upright it keeps {mean / teacher:.0%} of its teacher" in readme
    assert "`benchmarks/reference/pi_cartpole_harder_dagger_noise.json`" in readme


def test_the_students_with_15_rounds_of_10_epochs_are_quoted_as_measured():
    """docs/results.md: noise channels alone, 15 DAgger rounds of 10 epochs, 3 seeds, Tables 2 and 6."""
    report = _report("pi_cartpole_harder_dagger_r15.json")
    summary, runs = report["summary"], report["runs"]
    flags = ("--noise_sensors 5", "--dagger_rounds 14", "--num_epochs 10", "--total_env_steps 960000")
    per_seed = _checked_pi_seeds(runs, summary, flags)
    for run in runs:
        assert "--previous_action_noise" not in run["command"] and '\'{"hidden_size": 32' in run["command"]
        settings = run["students"]["pi"]["settings"]
        assert settings["noise_sensors"] == 5 and settings["previous_action_noise"] == 0.0
    columns = list(per_seed)
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in columns]
    assert (
        f"| AttentionNeuron, 15 rounds of 10 epochs, noise channels in training | {' | '.join(cells)} |"
        in RESULTS
    )
    text = " ".join(RESULTS.split())
    upright, noise = per_seed["5 obs"], per_seed["5 obs + 5 noise"]
    costs = [1 - n / u for n, u in zip(noise, upright, strict=True)]
    assert f"Five noise channels cost {' / '.join(f'{c:.1%}' for c in costs)} of the upright return" in text
    assert max(costs) < 0.05 and f"less than 5% with them ({max(costs):.1%} at most)" in " ".join(
        README.split()
    )
    teacher = summary["teacher_5_obs"]
    share, ratios = _quoted_upright(summary, upright, text)
    assert f"({ratios} by seed)" in text
    assert sum(v / teacher >= 0.8 for v in upright) == 1  # "met by one seed of three"
    # The 10-round, 20-epoch student with the same noise channels (seed 0), and its last-round loss.
    (single,) = _report("pi_cartpole_harder_dagger_noise_only.json")["runs"]
    single_share = single["results"]["pi"]["5 obs"]["mean"] / teacher
    assert f"against {single_share:.0%} for seed 0 with 10 rounds of 20 epochs" in text
    losses = " / ".join(f"{run['students']['pi']['loss_per_epoch'][-1]:.3f}" for run in runs)
    single_loss = single["students"]["pi"]["loss_per_epoch"][-1]
    assert f"last-round loss is {losses} ({single_loss:.3f} for that seed 0)" in text
    _assert_reshuffles_runs_and_readme(per_seed, runs, text, 0.002, "pi_cartpole_harder_dagger_r15.json")
    assert f"upright the students keep {share:.0%} of their teacher" in " ".join(README.split())


def test_the_students_with_the_codes_memory_are_quoted_as_measured():
    """docs/results.md: the code's memory (memory_units 128), 10 DAgger rounds, noise channels, 3 seeds."""
    report = _report("pi_cartpole_harder_dagger_memory.json")
    summary, runs = report["summary"], report["runs"]
    flags = ("--noise_sensors 5", "--dagger_rounds 9", "--num_epochs 20", "--streams_per_epoch 64",
             "--total_env_steps 640000", '"memory_units": 128', "--pi_fc_layer_params 128 ")  # fmt: skip
    per_seed = _checked_pi_seeds(runs, summary, flags)
    for run in runs:
        settings = run["students"]["pi"]["settings"]
        assert settings["noise_sensors"] == 5 and settings["streams_per_epoch"] == 64
    columns = list(per_seed)
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in columns]
    label = "AttentionNeuron with the code's memory, 10 rounds, noise channels in training"
    assert f"| {label} | {' | '.join(cells)} |" in RESULTS
    text = " ".join(RESULTS.split())
    teacher, upright = summary["teacher_5_obs"], per_seed["5 obs"]
    share, ratios = _quoted_upright(summary, upright, text)
    assert f"({ratios} by seed): no more than without the memory" in text
    r15 = _report("pi_cartpole_harder_dagger_r15.json")["summary"]
    (single,) = _report("pi_cartpole_harder_dagger_noise_only.json")["runs"]
    without = (r15["student_over_teacher"], single["results"]["pi"]["5 obs"]["mean"] / teacher)
    assert f"({without[0]:.0%} with 15 rounds; {without[1]:.0%} for seed 0" in text
    costs = [1 - n / u for n, u in zip(per_seed["5 obs + 5 noise"], upright, strict=True)]
    assert f"Five noise channels cost {' / '.join(f'{c:.1%}' for c in costs)} of the upright return" in text
    assert costs[0] > 0.05 and max(costs[1:]) < 0.05  # "seed 0 is outside the issue's 5%"
    losses = " / ".join(f"{run['students']['pi']['loss_per_epoch'][-1]:.3f}" for run in runs)
    assert f"last-round loss {losses} ({single['students']['pi']['loss_per_epoch'][-1]:.3f} for" in text
    # The error by the steps since the episode's start, with the memory and without (the 15-round students).
    swing = ("50-100", "100-200")
    memory = _report("pi_cartpole_error_by_episode_age_memory.json")
    assert memory["command"].startswith("python benchmarks/pi_cartpole_action_errors.py")
    assert sorted(memory["policies"]) == [f"runs/pi_mem/seed{s}/pi" for s in (0, 1, 2)]
    without_memory = {
        k: v
        for k, v in _report("pi_cartpole_error_by_episode_age.json")["policies"].items()
        if k.endswith("/pi")
    }

    def span(policies, which: int) -> str:
        values = [r[which]["by_episode_age"][a]["squared_error"] for r in policies.values() for a in swing]
        return f"{min(values):.2f}-{max(values):.2f}"

    assert (
        f"their error in steps 50-200 is {span(memory['policies'], 0)}, about half of the 15-round "
        f"students' {span(without_memory, 0)}"
    ) in text
    quoted = f"(their last round) it is still {span(memory['policies'], -1)} there (the 15-round students on"
    assert f"{quoted} theirs: {span(without_memory, -1)})" in text
    reshuffles = [c for c in columns if c.startswith("reshuffle")]
    r15_means = " / ".join(f"{statistics.mean(r15['pi_per_seed'][c]):.0f}" for c in reshuffles)
    assert f"and the 15-round students' {r15_means}" in text
    _assert_reshuffles_runs_and_readme(per_seed, runs, text, 0.004, "pi_cartpole_harder_dagger_memory.json")
    assert f"With the code's memory they keep {share:.0%} of their teacher" in " ".join(README.split())


def test_the_shared_torso_screen_with_a_smaller_learning_rate_is_quoted_as_measured():
    """docs/lavacrossing.md: ppo.learning_rate = 3e-4 on the shared torso, seeds 0 and 1, to ~600k steps."""
    report = _report("lavacrossing_shared_lr3e-4.json")
    page = (DOCS / "lavacrossing.md").read_text()
    text = " ".join(page.split())
    r0, r1 = report["runs"]
    for seed, run in enumerate(report["runs"]):
        assert run["seed"] == seed and run["stopped_before_budget"] and run["commit"]
        assert "'ppo.learning_rate = 3e-4'" in run["command"] and f"--seeds {seed} " in run["command"]
        assert run["trace"]["command"].startswith("python benchmarks/ppo_trace.py")

    def near(run, k):
        success = {round(e, -4): v for e, v in run["success_every_50k"]}
        trace = {round(x["env_steps"], -5): x for x in run["trace"]["per_checkpoint"]}
        return success.get(k * 100_000), trace[k * 100_000]

    for k in range(1, 7):
        cells = []
        for run in (r0, r1):
            success, trace = near(run, k)
            cells += ["-" if success is None else f"{success:.2f}"]
            cells += [f"{trace['logit_std_across_states']:.4f}", f"{trace['entropy']:.3f}"]
        assert f"| {k}00k | {' | '.join(cells)} |" in page
    t0, t1 = r0["trace"]["per_checkpoint"], r1["trace"]["per_checkpoint"]
    assert (
        f"fell from {t0[0]['logit_std_across_states']:.3f} at 100k to {t0[2]['logit_std_across_states']:.4f}"
        in text
    )
    assert f"entropy then fell to {t0[-1]['entropy']:.3f}: the same move in every state" in text
    assert (
        f"(expert accuracy {t0[-1]['expert_accuracy']:.3f}), with no success in {r0['env_steps_reached']:,}"
        in text
    )
    assert not any(v for _, v in r0["success_every_50k"])
    successes = [v for _, v in r1["success_every_50k"]]
    assert f"moved between {min(successes[2:]):.2f} and {max(successes):.2f} from 150k steps" in text
    entropies = [x["entropy"] for x in t1]
    assert f"entropy rose from {min(entropies):.2f} to {t1[-1]['entropy']:.2f}" in text
    assert (
        f"expert accuracy fell from {t1[0]['expert_accuracy']:.2f} to {t1[-1]['expert_accuracy']:.2f}" in text
    )
    assert f"Its logits spread to {t1[-1]['logit_std_across_states']:.2f}," in text
    shared = {(r["model"], r["seed"]): r for r in _report("lavacrossing_shared_1m.json")["runs"]}
    before = shared[("sit_chiral_shared", 0)]["trace"]["per_checkpoint"][1]
    assert round(before["env_steps"], -5) == 200_000
    assert (
        f"(spread {t0[1]['logit_std_across_states']:.3f} at 200k against "
        f"{before['logit_std_across_states']:.4f}" in text
    )
    seen = shared[("sit_chiral_shared", 1)]["learner_diagnostics_per_100k_env_steps"]
    kls = [d["approx_kl"] for d in seen if 300_000 <= d["env_steps"] <= 900_000]
    assert (
        f"KL per update {seen[0]['approx_kl']:.3f} at 100k steps, {min(kls):.3f}-{max(kls):.3f} from 300k"
        in text
    )
    late = [d["entropy"] for d in seen if d["env_steps"] >= 400_000]
    assert (
        f"entropy rose from {seen[0]['entropy']:.2f} at 100k steps to {min(late):.2f}-{max(late):.2f}" in text
    )
    assert "`benchmarks/reference/lavacrossing_shared_lr3e-4.json`" in page
    minutes = {f"{run['train_wall_minutes']:.0f}" for run in report["runs"]}
    assert len(minutes) == 1 and f"after {minutes.pop()} minutes of training each" in text
    short = f"stalled at {min(successes[2:]):.2f}-{max(successes):.2f} training success to 600k steps"
    assert short in LAVACROSSING_SHORT and round(r1["env_steps_reached"], -5) == 600_000
    assert "`benchmarks/reference/lavacrossing_shared_lr3e-4.json`" in LAVACROSSING_SHORT


def test_the_class_tokens_attention_is_quoted_as_measured():
    """docs/lavacrossing.md: blind actors' window class tokens attend to themselves, seeing ones do not."""
    report = _report("lavacrossing_class_token_attention.json")
    page = (DOCS / "lavacrossing.md").read_text()
    blind, seeing = [], []
    for run in report["runs"]:
        assert run["command"].startswith("python benchmarks/class_token_attention.py --root_dir")
        assert run["commit"] and run["trace"]
        for record in run["trace"]:
            local, grid = record["attentions"]
            assert (local["keys"], grid["keys"]) == (10, 65)
        first = run["trace"][:3]
        assert [round(r["env_steps"], -5) for r in first] == [100_000, 200_000, 300_000]
        itself = [[a["weight_on_itself"] for a in r["attentions"]] for r in first]
        cells = " | ".join(f"{local:.3f} / {grid:.3f}" for local, grid in itself)
        assert f"| {run['run']} | {cells} |" in page
        local_weights = [r["attentions"][0]["weight_on_itself"] for r in run["trace"]]
        (seeing if "sees" in run["actor"] else blind).append(local_weights)
    assert len(blind) == 3 and len(seeing) == 2
    low, high = min(map(min, blind)), max(map(max, blind))
    text = " ".join(page.split())
    assert f"put {low:.2f}-{high:.2f} of their attention on themselves, at every checkpoint" in text
    top = max(map(max, seeing))
    assert f"every seeing actor's at most {top:.3f}, falling as it learns" in text
    assert all(w[-1] < w[0] for w in seeing)
    sharp = next(r for r in report["runs"] if "x4" in r["run"])
    saturated = {tuple(round(a["weight_on_itself"], 3) for a in r["attentions"]) for r in sharp["trace"]}
    assert saturated == {(0.75, 0.5)}
    entropies = [r["attentions"][0]["entropy"] for r in sharp["trace"]]
    assert f"their entropy {min(entropies):.2f}-{max(entropies):.2f} of the uniform 2.30" in text
    short = f"their attention, in every blind run measured), where the seeing actors' put at most {top:.3f}"
    assert short in LAVACROSSING_SHORT
    assert "`benchmarks/reference/lavacrossing_class_token_attention.json`" in LAVACROSSING_SHORT


def test_the_cnn_with_a_shared_torso_is_quoted_as_measured():
    """docs/lavacrossing.md: the CNN control of the shared chiral SiT, seeds 0 and 1, 1M steps."""
    report = _report("lavacrossing_cnn_shared_1m.json")
    runs = report["runs"]
    for seed, run in enumerate(runs):
        assert run["seed"] == seed and run["commit"] and run["evaluation_episodes_per_row"] == 100
        prefix = (
            f"python benchmarks/minigrid_rotation.py --models cnn_shared --seeds {seed} --env_steps 1000000"
        )
        assert run["command"].startswith(prefix)
    gin = (ROOT / "configs" / "minigrid" / "lavacrossing_cnn_shared.gin").read_text()
    assert "ppo.shared_torso = True" in gin and "include 'lavacrossing_cnn.gin'" in gin
    c0, c1 = (dict(run["success_every_50k"]) for run in runs)
    own = dict(_report("lavacrossing_cnn_seed2_3m.json")["training_curves"]["cnn_seed2"]["success_every_50k"])
    lines = [
        "| env steps | CNN, shared torso, seed 0 / 1 | CNN, own critic, seed 2 |",
        "| ---: | ---: | ---: |",
    ]
    lines += [f"| {s / 1000:.0f}k | {c0[s]:.2f} / {c1[s]:.2f} | {own[s]:.2f} |" for s in sorted(c0)[1::2]]
    page = (DOCS / "lavacrossing.md").read_text()
    assert "\n".join(lines) in page
    text = " ".join(page.split())
    top = max(max(c0.values()), max(c1.values()))
    assert f"in either seed: its training success stayed at or below {top:.2f} to 1M steps" in text
    assert f"(training success at most {top:.2f}, two seeds;" in " ".join(LAVACROSSING_SHORT.split())
    old = _report("table4_lavacrossing_3m.json")["training_curves"]
    at_1m = [dict(old[f"cnn_seed{s}"]["success_every_250k"])[1001472] for s in (0, 1)] + [own[1001472]]
    assert f"had {' / '.join(f'{v:.2f}' for v in at_1m)} at 1M (seeds 0 / 1 / 2)" in text
    diagnostics = [d for run in runs for d in run["learner_diagnostics_per_100k_env_steps"]]
    variance = [d["explained_variance"] for d in diagnostics]
    entropy = [d["entropy"] for d in diagnostics]
    assert f"explained variance was {min(variance):.2f} to {max(variance):.2f} per 100k steps" in text
    assert f"entropy stayed at {min(entropy):.2f}-{max(entropy):.2f}" in text

    def pair(mode: str, row: str) -> str:
        return " / ".join(f"{run[mode][row]['success_rate']:.2f}" for run in runs)

    assert (
        f"greedy: N1 success {pair('greedy', 'train: easy')}, rotated {pair('greedy', 'rotations average')} "
        f"(sampling {pair('sampling', 'train: easy')} and {pair('sampling', 'rotations average')})" in text
    )
    shared = next(r for r in _report("lavacrossing_shared_1m.json")["runs"] if r["seed"] == 1)
    assert f"shared SiT's seed 1 ({dict(shared['success_every_50k'])[1001472]:.2f} at 1M)" in text
    minutes = " and ".join(f"{run['train_wall_minutes_total']:.0f}" for run in runs)
    assert f"{minutes} minutes of training" in text
    assert "`benchmarks/reference/lavacrossing_cnn_shared_1m.json`" in LAVACROSSING_SHORT
    assert max(max(c0.values()), max(c1.values())) < 0.1  # "did not learn"


def test_the_shared_torso_runs_are_quoted_as_measured():
    """docs/lavacrossing.md: the chiral SiT as one actor-critic network, against its own-critic runs."""
    report = _report("lavacrossing_shared_1m.json")
    runs = {(r["model"], r["seed"]): r for r in report["runs"]}
    s0, s1 = runs[("sit_chiral_shared", 0)], runs[("sit_chiral_shared", 1)]
    sharp = runs[("sit_chiral_sharp_shared", 0)]
    for run in report["runs"]:
        assert run["command"].startswith("python benchmarks/minigrid_rotation.py") and run["commit"]
    assert "'ppo.shared_torso = True'" in s1["command"]  # the plain chiral config, shared by binding
    own = _report("lavacrossing_chiral_1m.json")["training_curves"]
    cnn = _report("lavacrossing_cnn_seed2_3m.json")["training_curves"]["cnn_seed2"]["success_every_50k"]
    c0, c1 = (dict(own[f"sit_chiral_seed{s}"]["success_every_50k"]) for s in (0, 1))

    def cell(run, step):
        curve = dict(run["success_every_50k"])
        return f"{curve[step]:.2f}" if step in curve else "-"

    columns = ["own CNN critic, seed 0 / 1", "shared, seed 0", "shared, seed 1", "sharp + shared, seed 0"]
    lines = ["| env steps | " + " | ".join(columns) + " | CNN, seed 2 |", "| ---: |" + " ---: |" * 5]
    for step in [s for s, _ in s1["success_every_50k"]][1::2]:
        lines.append(
            f"| {step / 1000:.0f}k | {c0[step]:.2f} / {c1[step]:.2f} | {cell(s0, step)} | {cell(s1, step)} | "
            f"{cell(sharp, step)} | {dict(cnn)[step]:.2f} |"
        )
    page = (DOCS / "lavacrossing.md").read_text()
    assert "\n".join(lines) in page
    text = " ".join(page.split())
    t0 = {c["env_steps"]: c for c in s0["trace"]["per_checkpoint"]}
    t1 = {c["env_steps"]: c for c in s1["trace"]["per_checkpoint"]}
    own_trace = next(r for r in _report("lavacrossing_ppo_trace.json")["runs"] if r["model"] == "sit_chiral")
    cnn_trace = next(r for r in _report("lavacrossing_ppo_trace.json")["runs"] if r["model"] == "cnn")
    cnn_spread = {c["env_steps"]: c["policy"]["logit_std_across_states"] for c in cnn_trace["trace"]}
    own_spread = [c["policy"]["logit_std_across_states"] for c in own_trace["trace"]]
    spread1 = {step: c["logit_std_across_states"] for step, c in t1.items()}
    assert (
        f"{spread1[100352]:.2f} at 100k steps and {spread1[301056]:.2f} "
        f"at 300k (the CNN's {cnn_spread[100352]:.2f} and {cnn_spread[301056]:.2f}" in text
    )
    assert f"with its own critic {min(own_spread):.4f}-{max(own_spread):.4f})" in text
    curve1 = dict(s1["success_every_50k"])
    late = [v for s, v in s1["success_every_50k"] if s >= 350_000]
    assert (
        f"rose to {curve1[301056]:.2f} by 300k steps, when the CNN's third seed had {dict(cnn)[301056]:.2f}"
        in text
    )
    assert f"stayed between {min(late):.2f} and {max(late):.2f} to 1M" in text
    diagnostics = {d["env_steps"]: d for d in s1["learner_diagnostics_per_100k_env_steps"]}
    assert (
        f"explained variance {diagnostics[400_000]['explained_variance']:.2f} at 400k, "
        f"{diagnostics[1_000_000]['explained_variance']:.2f} at 1M" in text
    )
    entropy = [d["entropy"] for s, d in diagnostics.items() if s >= 400_000]
    assert f"entropy stayed at {min(entropy):.2f}-{max(entropy):.2f} from 400k steps" in text
    greedy = {row: v["success_rate"] for row, v in s1["greedy"].items()}
    sampling = {row: v["success_rate"] for row, v in s1["sampling"].items()}
    n1_return = s1["greedy"]["train: easy"]["mean_return"]
    assert (
        f"greedy: N1 success {greedy['train: easy']:.2f} (mean return "
        f"{n1_return:.2f}; the paper's SiT-1 {_paper('SiT-1', 'train: easy'):.2f}), "
        f"N2 {greedy['train: medium']:.2f}, N3 {greedy['hard']:.2f}, rotated "
        f"{greedy['rotations average']:.2f}; sampling N1 {sampling['train: easy']:.2f}, "
        f"rotated {sampling['rotations average']:.2f}" in text
    )
    blind = t0[200704]
    assert (
        f"its logits' spread was {blind['logit_std_across_states']:.4f} and {blind['dead_relu_head']:.2f}"
        in text
    )
    value_loss = {d["env_steps"]: d["value_loss"] for d in s0["learner_diagnostics_per_100k_env_steps"]}
    assert f"nothing to learn ({value_loss[200_000]:.0e} at 200k steps)" in text
    assert f"stopped at {s0['last']['env_steps'] / 1000:.0f}k steps" in text
    spread = [c["logit_std_across_states"] for c in sharp["trace"]["per_checkpoint"]]
    assert f"spread stayed at {min(spread):.3f}-{max(spread):.2f} and it had no success by" in text
    assert max(v for _, v in sharp["success_every_50k"]) <= 0.01
    assert f"by {sharp['last']['env_steps'] / 1000:.0f}k steps" in text
    assert f"a median {s1['median_env_steps_per_second']:.0f} env steps/s" in text
    assert f"stalled at {min(late):.2f}-{max(late):.2f} to 1M (greedy N1 {greedy['train: easy']:.2f}" in (
        LAVACROSSING_SHORT
    )


# docs/results.md's table of the share of test starts each cart-pole student keeps: (label, report).
KEPT_STARTS = (
    ("5 rounds, 100 epochs a round, seed 0", "pi_cartpole_harder_dagger_e100.json"),
    ("10 rounds", "pi_cartpole_harder_dagger_rounds10.json"),
    ("10 rounds, noise channels and previous-action noise", "pi_cartpole_harder_dagger_noise.json"),
    ("10 rounds, noise channels, seed 0", "pi_cartpole_harder_dagger_noise_only.json"),
    ("15 rounds of 10 epochs, noise channels", "pi_cartpole_harder_dagger_r15.json"),
    ("10 rounds, the code's memory, noise channels", "pi_cartpole_harder_dagger_memory.json"),
)
KEPT = 50  # a return below this: the episode ended early, the cart off the track


def _upright_returns(report: dict, policy: str) -> list[list[float]]:
    """Each run's 200 upright test returns of ``policy`` (a report of one run or of seeds)."""
    return [run["results"][policy]["5 obs"]["returns"] for run in report.get("runs") or [report]]


def _kept_starts(returns: list[float]) -> tuple[float, float]:
    """The share of episodes scoring at least ``KEPT`` and their mean return."""
    kept = [r for r in returns if r >= KEPT]
    return len(kept) / len(returns), statistics.mean(kept)


def test_every_students_share_of_kept_starts_is_quoted_as_measured():
    text = " ".join(RESULTS.split())
    teacher_returns = _upright_returns(_report(KEPT_STARTS[0][1]), "teacher")[0]
    teacher = _kept_starts(teacher_returns)
    assert (
        f"the teacher scores at least 50 in {teacher[0]:.3f} of them and {teacher[1]:.0f} on average there"
        in text
    )
    shares, means = [], []
    for label, name in KEPT_STARTS:
        report = _report(name)
        assert (
            _upright_returns(report, "teacher")[0]
            == _upright_returns(_report(KEPT_STARTS[0][1]), "teacher")[0]
        )
        cells = [_kept_starts(returns) for returns in _upright_returns(report, "pi")]
        shares += [s for s, _ in cells]
        means += [m for _, m in cells]
        row = f"| {label} (`{name}`) | {' / '.join(f'{s:.3f}' for s, _ in cells)} | "
        assert row + f"{' / '.join(f'{m:.0f}' for _, m in cells)} |" in RESULTS
    assert (
        f"keeps {min(shares):.3f}-{max(shares):.3f} of the starts against the teacher's {teacher[0]:.3f}"
        in text
    )
    assert f"in the episodes it keeps ({min(means):.0f}-{max(means):.0f} against {teacher[1]:.0f})" in text
    # Which starts are lost: the 12 students of four 3-seed reports, and the teacher.
    failed = np.array(
        [np.array(r) < KEPT for _, name in KEPT_STARTS[1:] if len(_report(name)["runs"]) == 3
         for r in _upright_returns(_report(name), "pi")]
    )  # fmt: skip
    teacher_failed = np.array(teacher_returns) < KEPT
    phi = np.corrcoef(np.vstack([failed, teacher_failed]).astype(float))
    count = len(failed)
    between = phi[:count, :count][np.triu_indices(count, 1)].mean()
    by_all = failed.all(axis=0)
    assert count == 12
    assert (
        f"agree with a correlation (phi) of {between:.2f} on average, a student's with the teacher's "
        f"{phi[count, :count].mean():.2f}, and {by_all.sum()} of the 200 starts are lost by all 12 "
        f"({teacher_failed[by_all].sum()} of them by the teacher too)"
    ) in text


def test_the_students_of_rounds_with_more_starts_are_quoted_as_measured():
    """docs/results.md: 10 DAgger rounds of episodes cut at 500 steps, noise channels, a new teacher."""
    report = _report("pi_cartpole_harder_dagger_time_limit.json")
    summary, runs = report["summary"], report["runs"]
    flags = (
        "--record_time_limit 500",
        "--noise_sensors 5",
        "--dagger_rounds 9",
        "--num_epochs 20",
        "--streams_per_epoch 64",
        "--total_env_steps 640000",
        "--pi_fc_layer_params 128,128",
    )
    per_seed = _checked_pi_seeds(runs, summary, flags)
    for run in runs:
        assert run["students"]["pi"]["settings"]["env_kwargs"] == {"time_limit": 500}
        assert run["students"]["pi"]["settings"]["eval_env_kwargs"] == {"time_limit": 1000}
    assert "pi_cartpole_seeds.py" in report["command"]
    # The teacher: trained again with the first one's command, committed, its record beside it.
    teacher = _report("cartpole_harder_sac_teacher.json")
    committed = ROOT / "benchmarks" / "teachers" / "cartpole_swingup_harder_sac"
    assert teacher["evaluations_greedy_20_episodes"] == [
        {"env_steps": e["env_steps"], "mean_return": e["mean_return"]}
        for e in json.loads((committed / "evaluations.json").read_text())
    ]
    assert teacher["command"] == _report("pi_cartpole_harder_dagger_seeds.json")["teacher"]["command"]
    text = " ".join(RESULTS.split())
    assert f"the same command trained it again in {teacher['wall_time_minutes']:.0f} minutes" in text
    kept = _kept_starts(_upright_returns(report, "teacher")[0])
    assert f"it scores {summary['teacher_5_obs']:.0f} (the first teacher: 621)" in text
    assert f"keeps {kept[0]:.3f} of the starts and {kept[1]:.0f} there" in text
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in per_seed]
    label = "AttentionNeuron, 10 rounds of episodes cut at 500 steps, noise channels in training"
    assert f"| {label} | {' | '.join(cells)} |" in RESULTS
    share, ratios = _quoted_upright(summary, per_seed["5 obs"], text)
    assert f"({ratios} by seed)" in text
    students = [_kept_starts(returns) for returns in _upright_returns(report, "pi")]
    assert (
        f"they keep {' / '.join(f'{s:.3f}' for s, _ in students)} of the starts and score "
        f"{' / '.join(f'{m:.0f}' for _, m in students)} there"
    ) in text
    costs = [1 - n / u for n, u in zip(per_seed["5 obs + 5 noise"], per_seed["5 obs"], strict=True)]
    assert f"Five noise channels cost {' / '.join(f'{c:.1%}' for c in costs)} of the upright return" in text
    _assert_reshuffles_runs_and_readme(
        per_seed, runs, text, 0.01, "pi_cartpole_harder_dagger_time_limit.json", in_readme=False
    )
    readme = " ".join(README.split())
    teacher_json = "`benchmarks/reference/cartpole_harder_sac_teacher.json`"
    assert f"the committed teacher ({summary['teacher_5_obs']:.0f}; {teacher_json})" in readme


def _ppo_runs_from_the_time_limit_students(name: str, frozen_steps: int) -> list[dict]:
    """The runs of a report of PPO from the three time-limit students: each seed from its own student, one
    commit, a wall time, and ``frozen_steps`` gradient steps logged while the actor was frozen."""
    report = _report(name)
    runs = report["runs"]
    assert [run["seed"] for run in runs] == [0, 1, 2]
    for run in runs:
        assert f"ppo.initial_actor_dir = 'runs/pi_tl/tl500/seed{run['seed']}/pi'" in run["command"]
        assert run["commit"] == report["commit"] and run["wall_minutes_until_stopped"] > 0
        assert run["approx_kl_actor_frozen_logged_steps"] == frozen_steps
    return runs


def test_the_ppo_control_that_replayed_mid_episode_sequences_is_quoted_as_measured():
    """docs/results.md: PPO from the time-limit students without resets: the frozen actor's KL, the fall."""
    # 25 iterations of the frozen actor x 4 epochs x 4 minibatches.
    runs = _ppo_runs_from_the_time_limit_students("pi_cartpole_harder_ppo_control.json", frozen_steps=400)
    text = " ".join(RESULTS.split())
    kl = " / ".join(f"{run['approx_kl_actor_frozen_median']:.1f}" for run in runs)
    assert f"a median approximate KL of {kl} (seeds 0 / 1 / 2)" in text
    last = [run["evaluations_stochastic_20_episodes"][-1] for run in runs]
    steps = sorted({e["env_steps"] // 1000 for e in last})
    returns = " / ".join(f"{e['mean_return']:.0f}" for e in last)
    assert f"to {returns} (stochastic, 20 episodes) by {steps[0]}k-{steps[-1]}k steps" in text
    assert "`benchmarks/reference/pi_cartpole_harder_ppo_control.json`" in text


def test_the_ppo_students_at_a_constant_rate_are_quoted_as_measured():
    """docs/results.md: PPO from the time-limit students with resets, 1e-4 throughout: the frozen actor's KL,
    the evaluations' rise and fall, the updates' KL."""
    # 7 iterations of the frozen actor x 8 epochs x 8 minibatches.
    runs = _ppo_runs_from_the_time_limit_students(
        "pi_cartpole_harder_ppo_constant_rate.json", frozen_steps=448
    )
    text = " ".join(RESULTS.split())
    frozen = " / ".join(f"{run['approx_kl_actor_frozen_max_abs']:.1g}" for run in runs)
    assert f"the frozen actor's KL is at most {frozen} over its 448 gradient steps" in text
    evaluations = [[e["mean_return"] for e in run["evaluations_stochastic_20_episodes"]] for run in runs]
    quoted = {
        "from": " / ".join(f"{e[0]:.0f}" for e in evaluations),
        "to at most": " / ".join(f"{max(e):.0f}" for e in evaluations),
        "then fell to": " / ".join(f"{e[-1]:.0f}" for e in evaluations),
    }
    assert (
        f"rose from {quoted['from']} when the actor started to train to at most {quoted['to at most']}, then "
        f"fell to {quoted['then fell to']} by 704k steps" in text
    )
    assert {run["evaluations_stochastic_20_episodes"][-1]["env_steps"] for run in runs} == {704_000}
    medians = " / ".join(f"{run['approx_kl_actor_trained_median']:.3f}" for run in runs)
    maxima = " / ".join(f"{run['approx_kl_actor_trained_max']:.1f}" for run in runs)
    assert f"has a median of {medians} but reaches {maxima}" in text


def test_ppo_from_scratch_on_the_papers_cart_pole_is_quoted_as_measured():
    """docs/results.md and the README: the direct route on CartPoleSwingUpHarder, episodes from a reset."""
    report = _report("pi_cartpole_harder_ppo_direct.json")
    summary, runs = report["summary"], report["runs"]
    per_seed = _checked_pi_seeds(runs, summary, ("--skip_training", "--students pi"), seeds=(0,))
    (run,) = runs
    assert run["pi_dir"]["path"] == "runs/pi_direct/seed0"
    settings = run["pi_dir"]["run_settings"]
    assert settings["ppo.reset_each_iteration"] and settings["train_eval.total_env_steps"] == 3_000_000
    assert "ppo.initial_actor_dir" not in settings or not settings["ppo.initial_actor_dir"]
    assert "--gin_file configs/cartpole/swingup_harder_pi.gin" in report["budget"]
    students = _report("pi_cartpole_harder_dagger_time_limit.json")
    # The same 200 test episodes as the students'.
    assert _upright_returns(students, "teacher")[:1] == _upright_returns(report, "teacher")
    evaluations = {e["env_steps"]: e for e in run["pi_dir"]["evaluations"]}
    text = " ".join(RESULTS.split())
    mean = {steps: f"{e['mean_return']:.0f}" for steps, e in evaluations.items()}
    above_400 = {steps: sum(r > 400 for r in e["returns"]) for steps, e in evaluations.items()}
    quoted = (
        f"went from {mean[256_000]} at 256k steps to {mean[1_008_000]} at 1M and {mean[2_256_000]} at 2.26M, "
        f"where {above_400[2_256_000]} of the 20 episodes scored above 400 for the first time, and ended at "
        f"{mean[3_008_000]} at 3M ({above_400[3_008_000]} above 400)"
    )
    assert quoted in text
    minutes = round(int(report["wall_note"].split("(")[1].split(" s)")[0]) / 60)
    assert (
        f"PPO {minutes} minutes" in report["wall_note"] and f"3M steps, {minutes} minutes on one core" in text
    )
    assert all(above_400[steps] == 0 for steps in evaluations if steps < 1_760_000)
    paper = report["paper"]["pi"]
    cells = [f"{v[0]:.0f} ({paper[c][0]})" for c, v in per_seed.items()]
    assert f"| AttentionNeuron, PPO from scratch, 3M steps, seed 0 | {' | '.join(cells)} |" in RESULTS
    upright = per_seed["5 obs"][0]
    share = summary["student_over_teacher"]
    assert f"{upright:.0f} upright is **{share:.0%} of the teacher's 627**" in text
    _assert_order_and_count_free(per_seed, 1e-6)
    assert f"3M PPO steps from scratch reach {share:.0%}" in " ".join(README.split())
    assert "`benchmarks/reference/pi_cartpole_harder_ppo_direct.json`" in README


def test_the_ppo_students_with_an_annealed_rate_are_quoted_as_measured():
    """docs/results.md and the README: the time-limit students after 512k PPO steps, tested as they were."""
    report = _report("pi_cartpole_harder_ppo_finetune.json")
    summary, runs = report["summary"], report["runs"]
    per_seed = _checked_pi_seeds(runs, summary, ("--skip_training", "--students pi"))
    for run in runs:
        assert run["pi_dir"]["path"] == f"runs/pi_ft/fta/seed{run['seed']}"
        settings = run["pi_dir"]["run_settings"]
        assert settings["ppo.initial_actor_dir"] == f"runs/pi_tl/tl500/seed{run['seed']}/pi"
        assert settings["ppo.anneal_learning_rate"] and settings["ppo.reset_each_iteration"]
        assert settings["train_eval.seed"] == run["seed"]
    # The same 200 test episodes as the students they started from, whose upright returns are quoted beside.
    students = _report("pi_cartpole_harder_dagger_time_limit.json")
    assert _upright_returns(students, "teacher") == _upright_returns(report, "teacher")
    text = " ".join(RESULTS.split())
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in per_seed]
    label = "AttentionNeuron, the time-limit students after 512k PPO steps"
    assert f"| {label} | {' | '.join(cells)} |" in RESULTS
    share, ratios = _quoted_upright(summary, per_seed["5 obs"], text)
    started = " / ".join(f"{v:.0f}" for v in students["summary"]["pi_per_seed"]["5 obs"])
    assert f"({ratios} by seed), against {started} for the students they started from" in text
    kept = [_kept_starts(returns) for returns in _upright_returns(report, "pi")]
    before = [_kept_starts(returns)[0] for returns in _upright_returns(students, "pi")]
    assert (
        f"They keep {' / '.join(f'{k:.3f}' for k, _ in kept)} of the starts and score "
        f"{' / '.join(f'{m:.0f}' for _, m in kept)} there, where the students kept "
        f"{' / '.join(f'{k:.3f}' for k in before)}"
    ) in text
    costs = [1 - n / u for n, u in zip(per_seed["5 obs + 5 noise"], per_seed["5 obs"], strict=True)]
    assert f"Five noise channels cost {' / '.join(f'{c:.1%}' for c in costs)} of the upright return" in text
    means = " / ".join(f"{statistics.mean(v):.0f}" for c, v in per_seed.items() if c.startswith("reshuffle"))
    assert f"reshuffling: {means} (mean over the seeds)" in text
    _assert_order_and_count_free(per_seed, 0.001)
    assert f"After 512k PPO steps on their own return they keep {share:.0%}" in " ".join(README.split())
    assert "`benchmarks/reference/pi_cartpole_harder_ppo_finetune.json`" in README


def test_the_noise_channel_students_of_the_committed_teacher_are_quoted_as_measured():
    """docs/results.md: noise channels alone, 10 DAgger rounds, 3 seeds, from the committed teacher."""
    report = _report("pi_cartpole_harder_dagger_noise_only_seeds.json")
    summary, runs = report["summary"], report["runs"]
    flags = ("--noise_sensors 5", "--dagger_rounds 9", "--num_epochs 20", "--total_env_steps 640000",
             "--teacher_dir benchmarks/teachers/cartpole_swingup_harder_sac")  # fmt: skip
    per_seed = _checked_pi_seeds(runs, summary, flags)
    assert all("--previous_action_noise" not in run["command"] for run in runs)
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in per_seed]
    label = "AttentionNeuron, 10 rounds, noise channels in training, the committed teacher"
    assert f"| {label} | {' | '.join(cells)} |" in RESULTS
    text = " ".join(RESULTS.split())
    share, ratios = _quoted_upright(summary, per_seed["5 obs"], text)
    assert f"({ratios} by seed)" in text
    kept = [_kept_starts(returns) for returns in _upright_returns(report, "pi")]
    teacher = _kept_starts(_upright_returns(report, "teacher")[0])
    assert f"They keep {' / '.join(f'{k:.3f}' for k, _ in kept)} of the starts and score" in text
    assert f"{' / '.join(f'{m:.0f}' for _, m in kept)} there (the teacher: {teacher[0]:.3f} and" in text
    upright, noise = per_seed["5 obs"], per_seed["5 obs + 5 noise"]
    assert abs(noise[0] / upright[0] - 1) < 0.0005 and f"({noise[0]:.0f} against {upright[0]:.0f})" in text
    assert f"{1 - noise[2] / upright[2]:.1%} on seed 2" in text
    assert f"scores {noise[1] / upright[1] - 1:.0%} more with them ({noise[1]:.0f} against" in text
    errors = [statistics.stdev(r) / len(r) ** 0.5 for r in _upright_returns(report, "pi")]
    assert 25 < min(errors) and max(errors) < 31  # "moves by about 28"
    _assert_reshuffles_runs_and_readme(
        per_seed, runs, text, 0.002, "pi_cartpole_harder_dagger_noise_only_seeds.json"
    )
    costs = [1 - n / u for n, u in zip(noise, upright, strict=True)]
    readme = " ".join(README.split())
    assert f"sac_teacher.json`) keep {share:.0%} upright, within {max(costs):.1%} with them" in readme


def test_the_students_after_es_are_quoted_as_measured():
    """docs/results.md: the committed teacher's noise-channel students after 25 generations of ES."""
    report = _report("pi_cartpole_harder_es.json")
    summary, runs = report["summary"], report["runs"]
    per_seed = _checked_pi_seeds(runs, summary, ("--skip_training", "--students pi"))
    students = _report("pi_cartpole_harder_dagger_noise_only_seeds.json")["summary"]["pi_per_seed"]["5 obs"]
    for run, before in zip(runs, students, strict=True):
        seed = run["seed"]
        assert f"--pi_dir runs/pi_es/seed{seed}" in run["command"]
        es = run["pi_dir"]["es_run"]
        assert es["finished"] and es["commit"] and es["settings"]["generations"] == 25
        assert (
            f"--pi_dir runs/pi_noise_only/seed{seed}/pi " in es["command"]
            and "--noise_channels 5" in es["command"]
        )
        validations = [h["validation"] for h in es["history"] if "validation" in h]
        assert es["best"]["validation"] == max(validations, key=np.mean) and len(validations) == 6
        assert per_seed["5 obs"][runs.index(run)] > before  # ES raised every seed
    paper = report["paper"]["pi"]
    cells = [f"{' / '.join(f'{v:.0f}' for v in per_seed[c])} ({paper[c][0]})" for c in per_seed]
    assert f"| AttentionNeuron, those students after 25 generations of ES | {' | '.join(cells)} |" in RESULTS
    text = " ".join(RESULTS.split())
    upright = per_seed["5 obs"]
    share, ratios = _quoted_upright(summary, upright, text)
    assert f"({ratios} by seed), against {' / '.join(f'{v:.0f}' for v in students)} for the students" in text
    gains = " / ".join(f"{a - b:.0f}" for a, b in zip(upright, students, strict=True))
    assert f"ES raised every seed, by {gains}" in text
    assert f"That is {statistics.mean(upright) / paper['5 obs'][0]:.0%} of the paper's PI agent" in text
    kept = " / ".join(f"{_kept_starts(r)[0]:.3f}" for r in _upright_returns(report, "pi"))
    assert f"the students now keep {kept} of the starts" in text
    assert share < 0.8 and "The issue's 80% of the teacher" in text
    costs = [1 - n / u for n, u in zip(per_seed["5 obs + 5 noise"], upright, strict=True)]
    assert max(costs) < 0.05 and f"Five noise channels cost {' / '.join(f'{c:.1%}' for c in costs)}" in text
    minutes = {round(run["pi_dir"]["es_run"]["wall_seconds"] / 60) for run in runs}
    assert f"wall time, {minutes.pop()} minutes each" in text and not minutes
    means = " / ".join(f"{statistics.mean(v):.0f}" for c, v in per_seed.items() if c.startswith("reshuffle"))
    assert f"Reshuffling: {means} (mean over the seeds)" in text
    _assert_order_and_count_free(per_seed, 0.002)
    readme = " ".join(README.split())
    mean, std = statistics.mean(upright), statistics.stdev(upright)
    assert f"ES on their own return {share:.0%} (the paper's route; the paper's PI agent: 472, ours" in readme
    assert f"ours {mean:.0f} +- {std:.0f}), within {max(costs):.1%} with them" in readme
    assert "`benchmarks/reference/pi_cartpole_harder_es.json`" in readme


def _batched_rows(report: dict) -> list[dict]:
    """The students' results of a ``pi_cartpole_batched_eval.py`` report, in the order of ``--pi_dirs``."""
    return [report["results"][folder] for folder in report["settings"]["pi_dirs"]]


def test_the_students_over_1000_test_episodes_are_quoted_as_measured():
    """docs/results.md: the noise-channel students and the same after ES, on the same 1000 starts."""
    before, after = (
        _report("pi_cartpole_harder_dagger_noise_only_1000.json"),
        _report("pi_cartpole_harder_es_1000.json"),
    )
    folders = {"before": "runs/pi_noise_only/seed{}/pi", "after": "runs/pi_es/seed{}"}
    for (name, report), out in zip(
        {"before": before, "after": after}.items(),
        ("pi_cartpole_harder_dagger_noise_only_1000.json", "pi_cartpole_harder_es_1000.json"),
        strict=True,
    ):
        pi_dirs = ",".join(folders[name].format(seed) for seed in (0, 1, 2))
        assert report["command"] == (
            "python benchmarks/pi_cartpole_batched_eval.py --teacher_dir "
            f"benchmarks/teachers/cartpole_swingup_harder_sac --pi_dirs {pi_dirs} "
            f"--out benchmarks/reference/{out}"
        )
        assert len(report["commit"]) == 40 and report["wall_seconds"] > 0
        assert report["settings"]["episodes"] == 1000 and report["settings"]["test_seed"] == 1000
    teacher = before["results"]["teacher"]
    assert teacher == after["results"]["teacher"]  # the same starts, the same teacher
    text = " ".join(RESULTS.split())
    shuffled = teacher["5 obs (shuffled)"]["mean"]
    assert f"| teacher (SAC) | {teacher['5 obs']['mean']:.0f} | {shuffled:.0f} | N/A | N/A | 1 |" in RESULTS
    assert (
        f"The teacher scores {teacher['5 obs']['mean']:.0f} on these starts (627 on the 200 test episodes) "
        f"and keeps {teacher['5 obs']['kept_share']:.3f} of them; with its readings shuffled it scores "
        f"{shuffled:.0f}." in text
    )
    columns = ("5 obs", "5 obs (shuffled)", "10 obs", "5 obs + 5 noise")
    labels = (
        "AttentionNeuron, noise channels in training (10 rounds)",
        "the same students after 25 generations of ES",
    )
    errors = []
    for label, report in zip(labels, (before, after), strict=True):
        rows = _batched_rows(report)
        cells = [" / ".join(f"{row[c]['mean']:.0f}" for row in rows) for c in columns]
        shares = " / ".join(f"{row['5 obs']['over_teacher']['share']:.1%}" for row in rows)
        assert f"| {label} | {' | '.join(cells)} | {shares} |" in RESULTS
        for row in rows:
            errors.append(row["5 obs"]["over_teacher"]["standard_error"])
            for column in ("5 obs (shuffled)", "10 obs"):
                assert abs(1 - row[column]["over_own_upright"]["share"]) < 0.001
        costs = " / ".join(f"{1 - row['5 obs + 5 noise']['over_own_upright']['share']:.1%}" for row in rows)
        assert costs in text
        assert all(1 - row["5 obs + 5 noise"]["over_own_upright"]["share"] < 0.05 for row in rows)
    assert f"{min(errors) * 100:.1f}-{max(errors) * 100:.1f} points here" in text
    gains = [
        b["5 obs"]["mean"] - a["5 obs"]["mean"]
        for a, b in zip(_batched_rows(before), _batched_rows(after), strict=True)
    ]
    assert f"On the same starts ES raised the students by {' / '.join(f'{g:.0f}' for g in gains)}" in text
    mean_share = [
        statistics.mean(row["5 obs"]["over_teacher"]["share"] for row in _batched_rows(r))
        for r in (before, after)
    ]
    assert (
        f"Over the paper's 1000 test episodes: {mean_share[0]:.0%} before ES, {mean_share[1]:.0%} after."
        in text
    )


def test_where_the_students_lose_is_quoted_as_measured():
    """docs/results.md: the episodes that left the track, over the 1000 starts, after ES."""
    report = _report("pi_cartpole_harder_es_1000.json")
    teacher = report["results"]["teacher"]["5 obs"]
    rows = [row["5 obs"] for row in _batched_rows(report)]
    text = " ".join(RESULTS.split())
    quartiles = " / ".join(f"{q:.0f}" for q in teacher["ended_at_step_quartiles"])
    assert (
        f"the teacher leaves the track in {teacher['ended_early_share']:.3f} of them, always early "
        f"(quartiles at step {quartiles}), and holds the others to a mean return of "
        f"{teacher['whole_episode_mean']:.0f}." in text
    )
    assert teacher["ended_at_step_quartiles"][2] < 100

    def per_seed(values: list[float], form: str = "{:.0f}") -> str:
        return " / ".join(form.format(v) for v in values)

    ended = per_seed([r["ended_early_share"] for r in rows], "{:.3f}")
    held = per_seed([r["whole_episode_mean"] for r in rows])
    assert (
        f"After ES the students leave it in {ended} (seeds 0 / 1 / 2) and hold the others to {held}." in text
    )
    against = [r["against_teacher"] for r in rows]
    won, lost = (
        per_seed([a[key] for a in against]) for key in ("kept_where_teacher_lost", "lost_where_teacher_kept")
    )
    assert (
        f"They keep no start that the teacher loses ({won} of them) and lose {lost} that it keeps, at a "
        f"median step of {per_seed([a['lost_at_step_quartiles'][1] for a in against])}:" in text
    )
    up = per_seed([r["first_upright_median"] for r in rows])
    late = per_seed([r["second_half_reward_per_step"] for r in rows], "{:.2f}")
    assert (
        f"at a median step of {up} against the teacher's {teacher['first_upright_median']:.0f}, and in the "
        f"second half of them they earn {late} reward a step against its "
        f"{teacher['second_half_reward_per_step']:.3f}:" in text
    )
    kept, whole = 1 - teacher["ended_early_share"], teacher["whole_episode_mean"]
    mean = teacher["mean"]
    as_kept = per_seed([kept * r["whole_episode_mean"] / mean for r in rows], "{:.0%}")
    as_held = per_seed([(1 - r["ended_early_share"]) * whole / mean for r in rows], "{:.0%}")
    assert f"their own mean return there, the students would score {as_kept} of the teacher" in text
    assert f"at their own share and the teacher's mean there, {as_held}." in text


def test_the_students_force_on_fast_starts_is_quoted_as_measured():
    """docs/results.md: force and braking on the fast starts, in three windows, teacher and students."""
    after, before = (
        _report(name)
        for name in ("pi_cartpole_harder_es_1000.json", "pi_cartpole_harder_dagger_noise_only_1000.json")
    )
    text = " ".join(RESULTS.split())
    settings = after["settings"]
    # The starts' cart velocities, drawn as pi_cartpole_es.initial_states draws them (range +-10 m/s).
    velocities = (
        np.random.default_rng(settings["test_seed"]).uniform(-1, 1, (settings["episodes"], 4))[:, 1] * 10
    )
    fast = int(np.sum(np.abs(velocities) >= 5.0))
    assert f"on the {fast} of the 1000 starts whose cart moves at 5 m/s or more" in text

    def windows(column: dict, key: str) -> str:
        return " / ".join(f"{v:.2f}" for v in column[f"{key}_on_fast_starts"].values())

    teacher = after["results"]["teacher"]["5 obs"]
    assert (
        f"The teacher pushes at {windows(teacher, 'force')} and brakes at {windows(teacher, 'braking')}."
        in text
    )
    rows = [row["5 obs"] for row in _batched_rows(after)]
    pushes = ", ".join(windows(r, "force") for r in rows[:2]) + " and " + windows(rows[2], "force")
    brakes = ", ".join(windows(r, "braking") for r in rows[:2]) + " and " + windows(rows[2], "braking")
    assert f"The students after ES push at {pushes} (seeds 0 / 1 / 2) and brake at {brakes};" in text
    gap = max(
        abs(a[f"{key}_on_fast_starts"][w] - b[f"{key}_on_fast_starts"][w])
        for a, b in zip(rows, (row["5 obs"] for row in _batched_rows(before)), strict=True)
        for key in ("force", "braking")
        for w in a["force_on_fast_starts"]
    )
    assert f"before ES the same within {math.ceil(gap * 100) / 100:.2f}." in text


def test_the_absolute_error_student_is_quoted_as_measured():
    """docs/results.md and the README: the seed-0 student trained on the absolute error, 1000 starts."""
    report = _report("pi_cartpole_harder_dagger_absolute_1000.json")
    folders = [f"runs/pi_l1/seed{seed}/pi" for seed in range(3)]
    assert report["settings"]["pi_dirs"] == folders and report["settings"]["test_seed"] == 1000
    column = report["results"]["runs/pi_l1/seed0/pi"]
    upright, noise = column["5 obs"], column["5 obs + 5 noise"]
    squared = _report("pi_cartpole_harder_dagger_noise_only_1000.json")["results"][
        "runs/pi_noise_only/seed0/pi"
    ]
    after_es = _report("pi_cartpole_harder_es_1000.json")["results"]["runs/pi_es/seed0"]["5 obs"]
    teacher = report["results"]["teacher"]["5 obs"]
    text = " ".join(RESULTS.split())
    share = upright["over_teacher"]
    assert (
        f"Upright it scores {upright['mean']:.0f}, **{share['share']:.1%} +- "
        f"{share['standard_error']:.1%} of the teacher**, where the same seed with the squared error "
        f"scores {squared['5 obs']['mean']:.0f} "
        f"({squared['5 obs']['over_teacher']['share']:.1%}) and after 25 generations of ES "
        f"{after_es['mean']:.0f} ({after_es['over_teacher']['share']:.1%})." in text
    )

    def windows(c: dict, key: str) -> str:
        return " / ".join(f"{v:.2f}" for v in c[f"{key}_on_fast_starts"].values())

    assert (
        f"as hard as the teacher ({windows(upright, 'force')} against {windows(teacher, 'force')}) and "
        f"brakes it harder ({windows(upright, 'braking')} against {windows(teacher, 'braking')})" in text
    )
    assert (
        f"keeps {upright['kept_share']:.3f} of the starts (the squared-error student "
        f"{squared['5 obs']['kept_share']:.3f}, the teacher {teacher['kept_share']:.3f}) and loses "
        f"{upright['against_teacher']['lost_where_teacher_kept']} that the teacher keeps "
        f"({squared['5 obs']['against_teacher']['lost_where_teacher_kept']})." in text
    )
    for name in ("5 obs (shuffled)", "10 obs"):
        assert abs(column[name]["over_own_upright"]["share"] - 1) < 0.001
    cost = noise["over_own_upright"]
    assert (
        f"five noise channels cost it {1 - cost['share']:.1%} +- {cost['standard_error']:.1%} "
        f"({noise['mean']:.0f}), just outside the issue's 5%." in text
    )
    seeds = _report("pi_cartpole_harder_dagger_absolute_seeds.json")
    run = seeds["runs"][0]
    assert "--action_loss absolute" in run["command"] and "--seed 0" in run["command"] and run["commit"]
    summary = seeds["summary"]
    cells = summary["pi_per_seed"]
    noise_cost = 1 - summary["column_over_5_obs_per_seed"]["5 obs + 5 noise"][0]
    assert (
        f"it scores {cells['5 obs'][0]:.0f}, {summary['student_over_teacher_per_seed'][0]:.1%} of the "
        "teacher's "
        f"{summary['teacher_5_obs']:.0f}, and {cells['5 obs + 5 noise'][0]:.0f} with five noise channels "
        f"({noise_cost:.1%} below)" in text
    )
    reshuffles = " / ".join(f"{cells[f'reshuffle every {t}'][0]:.0f}" for t in (25, 50, 100, 200, 500))
    assert f"every 25 / 50 / 100 / 200 / 500 steps: {reshuffles} (the paper's" in text
    # Seeds 1 and 2: the same 1000 starts and the same 200 test episodes, beside their squared-error twins.
    assert [run["command"].count(f"--seed {n}") for n, run in enumerate(seeds["runs"])] == [1, 1, 1]
    rows = [report["results"][folder] for folder in folders]

    def joined(values, form: str = "{:.1%}") -> str:
        return " / ".join(form.format(v) for v in values)

    shares = [r["5 obs"]["over_teacher"]["share"] for r in rows]
    assert (
        f"they score {joined([r['5 obs']['mean'] for r in rows], '{:.0f}')} upright, **{joined(shares)} of "
        f"the teacher**, keep {joined([r['5 obs']['kept_share'] for r in rows], '{:.3f}')} of the starts, "
        "and "
        f"five noise channels cost them "
        f"{joined([1 - r['5 obs + 5 noise']['over_own_upright']['share'] for r in rows])}." in text
    )
    assert (
        f"On the 200 test episodes the three keep {joined(summary['student_over_teacher_per_seed'])} of the "
        f"teacher's {summary['teacher_5_obs']:.0f} ({summary['student_over_teacher']:.1%} over the seeds; "
        f"{summary['pi_5_obs_mean']:.0f} +- {summary['pi_5_obs_std_over_seeds_sample']:.0f}, the paper's PI "
        f"agent 472), and the noise channels cost "
        f"{joined(1 - v for v in summary['column_over_5_obs_per_seed']['5 obs + 5 noise'])}." in text
    )
    twins = _report("pi_cartpole_harder_dagger_noise_only_1000.json")["results"]
    twin_shares = [
        twins[f"runs/pi_noise_only/seed{seed}/pi"]["5 obs"]["over_teacher"]["share"] for seed in range(3)
    ]
    moves = " / ".join(f"{100 * (a - b):+.1f}" for a, b in zip(shares, twin_shares, strict=True))
    assert (
        f"1000 starts ({joined(twin_shares)}) the absolute error moves seeds 0 / 1 / 2 by {moves} points, "
        f"{sum(shares) / 3:.1%} against {sum(twin_shares) / 3:.1%} on average" in text
    )
    assert max(shares) < 0.8 and "no seed reaches the issue's 80%." in text
    readme = " ".join(README.split())
    assert (
        f"3 seeds keep {joined(shares, '{:.0%}')} before any ES "
        "(`benchmarks/reference/pi_cartpole_harder_dagger_absolute_1000.json`)." in readme
    )


def test_the_longer_chunks_screen_is_quoted_as_measured():
    """docs/results.md: the seed-0 absolute-error student trained with 200-step chunks, 1000 starts."""
    report = _report("pi_cartpole_harder_dagger_seq200_1000.json")
    assert report["settings"]["pi_dirs"] == ["runs/pi_seq200/seed0/pi"]
    column = report["results"]["runs/pi_seq200/seed0/pi"]
    upright, reset = column["5 obs"], column["5 obs, memory reset at step 500"]
    text = " ".join(RESULTS.split())
    assert (
        f"the same 1000 starts) scores {upright['mean']:.0f}, {upright['over_teacher']['share']:.1%} of the "
        f"teacher, against 465 (76.7%) with 50-step chunks; it has the pole up in "
        f"{upright['second_half_upright_share']:.2f} of the second half (0.70) with "
        f"{upright['second_half_drops_mean']:.2f} falls there (1.45), and the memory reset costs it "
        f"{1 - reset['over_own_upright']['share']:.1%} (9.1%)." in text
    )
    run = _report("pi_cartpole_harder_dagger_seq200_seeds.json")
    assert (
        "--sequence_length 200" in run["runs"][0]["command"]
        and "--action_loss absolute" in run["runs"][0]["command"]
    )
    summary = run["summary"]
    assert (
        f"it scores {summary['pi_per_seed']['5 obs'][0]:.0f}, "
        f"{summary['student_over_teacher_per_seed'][0]:.1%} of the teacher's "
        f"{summary['teacher_5_obs']:.0f} (its run's command" in text
    )
    base = _report("pi_cartpole_harder_dagger_absolute_1000.json")["results"]["runs/pi_l1/seed0/pi"]
    base_upright, base_reset = base["5 obs"], base["5 obs, memory reset at step 500"]
    assert f"{base_upright['mean']:.0f} ({base_upright['over_teacher']['share']:.1%})" == "465 (76.7%)"
    assert f"{base_upright['second_half_upright_share']:.2f}" == "0.70"
    assert (
        f"{base_upright['second_half_drops_mean']:.2f} / {1 - base_reset['over_own_upright']['share']:.1%}"
        == ("1.45 / 9.1%")
    )


def test_how_long_the_students_hold_the_pole_is_quoted_as_measured():
    """docs/results.md: the second half of whole episodes and the teacher's labels of upright states."""
    text = " ".join(RESULTS.split())
    reports = [
        _report(name)
        for name in (
            "pi_cartpole_harder_dagger_noise_only_1000.json",
            "pi_cartpole_harder_es_1000.json",
            "pi_cartpole_harder_dagger_absolute_1000.json",
        )
    ]
    teacher = reports[0]["results"]["teacher"]["5 obs"]
    assert all(r["results"]["teacher"]["5 obs"] == teacher for r in reports)  # the same starts and teacher
    assert teacher["second_half_upright_share"] == 1.0 and teacher["second_half_drops_mean"] == 0.0
    assert (
        f"| teacher | {teacher['mean']:.0f} | {teacher['kept_share']:.3f} "
        f"| {teacher['whole_episode_mean']:.0f} "
        f"| 1.000 | 0.00 | {teacher['from_upright']['mean_abs_action']:.3f} (its own states) |" in text
    )
    names = ("squared error, seeds 0 / 1 / 2", "the same after ES", "absolute error, seeds 0 / 1 / 2")
    shares, gaps, all_rows = [], [], []
    for name, report in zip(names, reports, strict=True):
        rows = [row["5 obs"] for row in _batched_rows(report)]

        def cells(key: str, form: str, rows=rows) -> str:
            return " / ".join(form.format(r[key]) for r in rows)

        labels = ", ".join(
            " / ".join(
                f"{r['from_upright'][k]:.2f}"
                for k in ("mean_abs_action", "teacher_mean_abs_action", "mean_abs_error")
            )
            for r in rows
        )
        assert (
            f"| {name} | {cells('mean', '{:.0f}')} | {cells('kept_share', '{:.3f}')} | "
            f"{cells('whole_episode_mean', '{:.0f}')} | {cells('second_half_upright_share', '{:.2f}')} | "
            f"{cells('second_half_drops_mean', '{:.2f}')} | {labels} |" in text
        )
        shares += [r["second_half_upright_share"] for r in rows]
        all_rows += rows
        gaps += [r["from_upright"] for r in rows]
    drops = [r["second_half_drops_mean"] for r in all_rows]
    assert f"drops it {min(drops):.1f} to {max(drops):.1f} times in those" in text
    assert f"has it up for only {100 * min(shares):.0f}-{max(shares):.0%} of them" in text
    low, high = (f(g["teacher_mean_abs_action"] for g in gaps) for f in (min, max))
    assert f"the teacher would push at {low:.2f}-{high:.2f}" in text
    low, high = (f(g["mean_abs_action"] for g in gaps) for f in (min, max))
    assert f"the student pushes at {low:.2f}-{high:.2f}" in text
    low, high = (f(g["mean_abs_error"] for g in gaps) for f in (min, max))
    assert f"the two differ by {low:.2f}-{high:.2f} on average" in text
    # The memory reset as the second half starts, against each student's own "5 obs".
    pairs = [
        (report["results"][folder]["5 obs"], report["results"][folder]["5 obs, memory reset at step 500"])
        for report in reports
        for folder in report["settings"]["pi_dirs"]
    ]
    costs = [1 - reset["over_own_upright"]["share"] for _, reset in pairs]
    lost_up = [a["second_half_upright_share"] - b["second_half_upright_share"] for a, b in pairs]
    falls = [b["second_half_drops_mean"] - a["second_half_drops_mean"] for a, b in pairs]
    assert (
        len(pairs) == 9
        and f"It costs the nine students {min(costs):.1%} to {max(costs):.1%} of their return" in text
    )
    assert (
        f"takes {min(lost_up):.2f}-{max(lost_up):.2f} off the share of the second half with the pole up and "
        f"changes the falls there by {min(falls):.2f} to {max(falls):+.2f}" in text
    )
    student = reports[2]["results"]["runs/pi_l1/seed0/pi"]["5 obs"]
    on_kept = [r["mean"] / r["kept_share"] for r in (student, teacher)]
    assert (
        f"seed 0 it is {student['kept_share']:.3f} x {on_kept[0]:.0f} against the teacher's "
        f"{teacher['kept_share']:.3f} x "
        f"{on_kept[1]:.0f}, so it keeps {student['kept_share'] / teacher['kept_share']:.0%} of the teacher's "
        f"share of starts and scores {on_kept[0] / on_kept[1]:.0%} of its return on them" in text
    )


def test_the_stopped_es_runs_are_quoted_as_measured():
    """docs/results.md: four more ES runs from the ES students, each stopped by hand."""
    text = " ".join(RESULTS.split())
    start = None
    for name, flags, generations in (
        ("pi_cartpole_harder_es_round2.json", ("--population 48", "--learning_rate 0.001"), 15),
        ("pi_cartpole_harder_es_horizon200.json", ("--horizon 200",), 10),
        ("pi_cartpole_harder_es_survival_value.json", ("--horizon 200", "--survival_value 750"), 5),
        ("pi_cartpole_harder_es_sigma002.json", ("--sigma 0.02",), 10),
    ):
        report = _report(name)
        assert report["stopped_early"] and f"`benchmarks/reference/{name}`" in text
        clean = []
        for seed, run in enumerate(report["runs"]):
            assert not run["finished"] and run["commit"] and run["wall_seconds"] > 0
            assert (
                f"--pi_dir runs/pi_es/seed{seed} " in run["command"]
                and "--validation_episodes 400" in run["command"]
            )
            assert all(flag in run["command"] for flag in flags)
            validations = [h for h in run["history"] if "validation" in h]
            assert validations[-1]["generation"] == generations
            clean.append([h["validation"][0] for h in validations])
        assert start in (None, [c[0] for c in clean])  # every run starts from the same students
        start = [c[0] for c in clean]
        after = " / ".join(f"{c[-1]:.0f}" for c in clean)
        assert f"{after} after {generations} generations" in text
        if name.endswith("round2.json"):
            assert f"at best {' / '.join(f'{max(c):.0f}' for c in clean)}" in text
        else:
            assert all(c[-1] < c[0] for c in clean)  # every seed fell
    assert f"seeds 0 / 1 / 2, from {' / '.join(f'{v:.0f}' for v in start)} at the start" in text


def test_the_readme_quotes_the_students_over_1000_test_episodes():
    readme = " ".join(README.split())
    shares = [
        statistics.mean(row["5 obs"]["over_teacher"]["share"] for row in _batched_rows(_report(name)))
        for name in ("pi_cartpole_harder_dagger_noise_only_1000.json", "pi_cartpole_harder_es_1000.json")
    ]
    assert (
        f"Over the paper's 1000 test episodes they keep {shares[0]:.0%} before ES and {shares[1]:.0%} after "
        "(`benchmarks/reference/pi_cartpole_harder_es_1000.json`)" in readme
    )


def test_the_students_fit_on_recorded_rounds_and_own_episodes_is_quoted_as_measured():
    """docs/results.md: the replayed recorded rounds against the students' own episodes, pole up."""
    report = _report("pi_cartpole_replay_fit.json")
    assert report["commit"] and "pi_cartpole_replay_fit.py" in report["command"]
    text = " ".join(RESULTS.split())
    earlier = []
    for seed in range(3):
        result = report["results"][f"runs/pi_l1/seed{seed}/pi"]
        assert len(result["recorded_rounds"]) == 10
        cells = [
            " / ".join(
                f"{part['upright'][name]:.2f}"
                for name in ("mean_abs_action", "teacher_mean_abs_action", "mean_abs_error", "same_sign")
            )
            for part in (result["recorded_rounds"][-1], result["own_episodes"])
        ]
        assert f"| {seed} | {cells[0]} | {cells[1]} |" in text
        earlier += [r["upright"]["mean_abs_error"] for r in result["recorded_rounds"][:-1]]
    assert f"the error with the pole up is {min(earlier):.2f}-{max(earlier):.2f}." in text


def test_the_executed_previous_action_student_is_quoted_as_measured():
    """docs/results.md and the README: the seed-0 student fed the executed previous action."""
    report = _report("pi_cartpole_harder_dagger_executed_1000.json")
    column = report["results"]["runs/pi_exec/seed0/pi"]
    upright, teacher = column["5 obs"], report["results"]["teacher"]["5 obs"]
    text = " ".join(RESULTS.split())
    share = upright["over_teacher"]
    assert (
        f"scores {upright['mean']:.0f}, **{share['share']:.1%} +- {share['standard_error']:.1%}** of the "
        f"teacher's {teacher['mean']:.0f}" in text
    )
    costs = {name: 1 - column[name]["over_own_upright"]["share"] for name in column}
    assert f"(+{-costs['5 obs (shuffled)']:.2%} and +{-costs['10 obs']:.2%})" in text
    assert (
        f"the pole is up for {upright['second_half_upright_share']:.3f} of the second half with "
        f"{upright['second_half_drops_mean']:.2f} falls there" in text
    )
    assert f"its kept share is {upright['kept_share']:.3f}" in text
    assert (
        f"Five noise channels cost it {costs['5 obs + 5 noise']:.1%} (the issue asks for at most 5%), the "
        f"memory reset at step 500 {costs['5 obs, memory reset at step 500']:.1%}" in text
    )
    fit = _report("pi_cartpole_replay_fit_executed.json")["results"]["runs/pi_exec/seed0/pi"]
    executed = [r["upright"]["mean_abs_error"] for r in fit["recorded_rounds_executed"]]
    own = [r["upright"]["mean_abs_error"] for r in fit["recorded_rounds"]]
    assert (
        f"fit to {min(executed):.2f}-{max(executed):.2f} with the pole up, and to "
        f"{min(own):.2f}-{max(own):.2f} with its own mode instead" in text
    )
    seeds = _report("pi_cartpole_harder_dagger_executed_seeds.json")
    assert "--previous_action executed" in seeds["runs"][0]["command"] and seeds["runs"][0]["commit"]
    summary = seeds["summary"]
    reshuffles = " / ".join(
        f"{summary['pi_per_seed'][f'reshuffle every {n}'][0]:.0f}" for n in (25, 50, 100, 200, 500)
    )
    noise = 1 - summary["column_over_5_obs_per_seed"]["5 obs + 5 noise"][0]
    assert (
        f"it scores {summary['pi_per_seed']['5 obs'][0]:.0f}, "
        f"{summary['student_over_teacher_per_seed'][0]:.1%} of the teacher's {summary['teacher_5_obs']:.0f}"
        in text
    )
    assert f"{noise:.1%} less with the noise channels, and {reshuffles} reshuffled" in text


def _three_seed_columns(seed0_report: str, seeds12_report: str, folder: str) -> list[dict]:
    """Seeds 0-2's batched-evaluation columns, checked to share the starts and the teacher."""
    seed0, seeds12 = _report(seed0_report), _report(seeds12_report)
    teacher = seed0["results"]["teacher"]["5 obs"]["mean"]
    assert seeds12["results"]["teacher"]["5 obs"]["mean"] == pytest.approx(teacher, rel=1e-9)
    assert seeds12["settings"]["test_seed"] == seed0["settings"]["test_seed"]
    return [seed0["results"][f"{folder}/seed0/pi"]] + [
        seeds12["results"][f"{folder}/seed{s}/pi"] for s in (1, 2)
    ]


def _table2_row(columns: list[dict]) -> str:
    """The per-seed returns of Table 2's four columns, the paper's PI agent in brackets."""
    return " | ".join(
        " / ".join(f"{c[name]['mean']:.0f}" for c in columns) + f" ({paper})"
        for name, paper in (
            ("5 obs", 472),
            ("5 obs (shuffled)", 471),
            ("10 obs", 471),
            ("5 obs + 5 noise", 461),
        )
    )


def test_three_seeds_fed_the_executed_previous_action_are_quoted_as_measured():
    """docs/results.md and the README: seeds 0-2 fed the executed previous action, 1000 and 200 episodes."""
    columns = _three_seed_columns(
        "pi_cartpole_harder_dagger_executed_1000.json",
        "pi_cartpole_harder_dagger_executed_seeds12_1000.json",
        "runs/pi_exec",
    )
    shares = [c["5 obs"]["over_teacher"]["share"] for c in columns]
    noise = [1 - c["5 obs + 5 noise"]["over_own_upright"]["share"] for c in columns]
    pooled = 1 - sum(c["5 obs + 5 noise"]["mean"] for c in columns) / sum(c["5 obs"]["mean"] for c in columns)
    text = " ".join(RESULTS.split())
    assert f"keep {shares[1]:.1%} and {shares[2]:.1%} of the teacher" in text
    assert f"the mean over the three seeds is {statistics.mean(shares):.1%}" in text
    assert f"{statistics.mean(shares):.1%} of the teacher over the paper's 1000 test episodes" in text
    for c in columns[1:]:
        for name in ("5 obs (shuffled)", "10 obs"):
            assert abs(1 - c[name]["over_own_upright"]["share"]) < 0.002
    ups = " and ".join(f"{c['5 obs']['second_half_upright_share']:.3f}" for c in columns[1:])
    falls = " and ".join(f"{c['5 obs']['second_half_drops_mean']:.2f}" for c in columns[1:])
    assert f"the pole is up for {ups} of the second half with {falls} falls there" in text
    assert (
        f"Five noise channels cost them {noise[1]:.1%} and {noise[2]:.1%} (seed 0: {noise[0]:.1%}; "
        f"{pooled:.1%} of the three seeds' return together)" in text
    )
    assert sum(n <= 0.05 for n in noise) == 1
    # The summary at the head of the cart-pole section: the returns and the targets.
    row = _table2_row(columns)
    assert f"| AttentionNeuron student, 32 units | {row} |" in RESULTS
    assert (
        f"With 32 units the seeds kept {' / '.join(f'{x:.1%}' for x in shares)}, "
        f"{statistics.mean(shares):.1%} on average, and five noise channels cost "
        f"{' / '.join(f'{x:.1%}' for x in noise)} (target: 5%), which is not met" in text
    )
    summary = _report("pi_cartpole_harder_dagger_executed_seeds.json")["summary"]
    per_seed = " / ".join(f"{r:.1%}" for r in summary["student_over_teacher_per_seed"])
    assert f"they keep {per_seed}, {summary['student_over_teacher']:.1%} together" in text
    assert (
        f"({summary['pi_5_obs_mean']:.0f} +- {summary['pi_5_obs_std_over_seeds_sample']:.0f} over seeds"
        in text
    )
    noise200 = " / ".join(f"{1 - r:.1%}" for r in summary["column_over_5_obs_per_seed"]["5 obs + 5 noise"])
    assert f"{noise200} less with the noise channels" in text
    for name in ("5 obs (shuffled)", "10 obs"):
        assert all(abs(1 - r) <= 0.005 for r in summary["column_over_5_obs_per_seed"][name])
    reshuffles = " / ".join(
        f"{statistics.mean(summary['pi_per_seed'][f'reshuffle every {n}']):.0f}"
        for n in (25, 50, 100, 200, 500)
    )
    assert f"steps {reshuffles} on average" in text
    readme = " ".join(README.split())
    assert (
        f"3 seeds keep {' / '.join(f'{x:.0%}' for x in shares)} and hold the pole, "
        f"{min(noise) * 100:.0f}-{max(noise):.0%} less with the noise channels" in readme
    )
    # The replay with noise channels: the fit moves little, on the rounds and in the own episodes.
    fits = [_report(f"pi_cartpole_replay_fit_executed_noise{k}.json")["results"] for k in (0, 5)]
    rounds, own = [], []
    for seed in (1, 2):
        folder = f"runs/pi_exec/seed{seed}/pi"
        errors = [
            statistics.mean(r["upright"]["mean_abs_error"] for r in fit[folder]["recorded_rounds_executed"])
            for fit in fits
        ]
        assert errors[1] - errors[0] < 0.02
        rounds.append(f"{errors[0]:.3f} to {errors[1]:.3f} (seed {seed})")
        own.append(
            " to ".join(f"{fit[folder]['own_episodes']['upright']['mean_abs_error']:.2f}" for fit in fits)
        )
    assert (
        f"goes from {rounds[0]} and {rounds[1]}, and in their own episodes from {own[0]} and {own[1]}."
        in text
    )


def test_the_standardised_ppo_run_to_1m_steps_is_quoted_as_measured():
    """docs/lavacrossing.md: the sharp chiral SiT with a standardised head, seed 0, to 1M steps."""
    report = _report("lavacrossing_standardized_seed0_1m.json")
    assert report["status"] == "complete" and report["run"]["commit"]
    assert "--models sit_chiral_sharp_standardized --seeds 0 --env_steps 1000000" in report["run"]["command"]
    curve = report["curve"]
    successes = [point["success"] for point in curve["curve"]]
    assert curve["last"]["env_steps"] >= 1_000_000 and len(successes) == 20
    assert max(successes) == pytest.approx(0.01) and min(successes) == 0
    page = _flat_page("lavacrossing.md")
    assert "its training success stayed at 0.00-0.01 at every 50k mark to 1M steps" in page
    greedy, sampling = report["greedy"], report["sampling"]
    rows = ("train: easy", "train: medium", "hard", "rotations average")
    assert all(greedy[row]["success_rate"] == 0 for row in rows)
    assert f"in {greedy['random goal']['success_rate']:.2f} of the random-goal ones" in page
    assert all(sampling[row]["success_rate"] == 0 for row in rows[:3])
    assert f"{sampling['rotations average']['success_rate']:.2f} rotated." in page
    cnn = _report("table4_lavacrossing_3m.json")["training_curves"]
    at = {seed: dict(map(tuple, cnn[f"cnn_seed{seed}"]["success_every_250k"])) for seed in (0, 1)}
    assert "0.62 and 0.20 at 1M" in page and (at[0][1001472], at[1][1001472]) == (0.62, 0.2)
    assert (at[0][501760], at[1][501760]) == (0.07, 0.06) and "0.07 and 0.06 at 0.5M" in page


def test_the_wider_student_screen_is_quoted_as_measured():
    """docs/results.md: the seed-0 absolute-error student with 64 LSTM units, 1000 starts."""
    report = _report("pi_cartpole_harder_dagger_h64_1000.json")
    assert report["settings"]["pi_dirs"] == ["runs/pi_h64/seed0/pi"] and report["commit"]
    column = report["results"]["runs/pi_h64/seed0/pi"]
    upright = column["5 obs"]
    costs = {name: 1 - column[name]["over_own_upright"]["share"] for name in column}
    text = " ".join(RESULTS.split())
    assert (
        f"scores {upright['mean']:.0f}, {upright['over_teacher']['share']:.1%} of the teacher (h32: 76.7%), "
        f"with the pole up for {upright['second_half_upright_share']:.2f} of the second half and "
        f"{upright['second_half_drops_mean']:.2f} falls there; five noise channels cost it "
        f"{costs['5 obs + 5 noise']:.1%}, but the memory reset at step 500 costs it "
        f"{costs['5 obs, memory reset at step 500']:.1%}" in text
    )


def test_the_exploration_of_actors_that_learned_nothing_is_quoted_as_measured():
    """docs/lavacrossing.md: successes per 100k steps of random walks and of actors at initialisation."""
    report = _report("lavacrossing_exploration.json")
    assert report["commit"] and report["command"].startswith("python benchmarks/lavacrossing_exploration.py")
    page = (DOCS / "lavacrossing.md").read_text()
    walks = {run["forward_probability"]: run for run in report["runs"] if run["actor"] == "walk"}
    networks = [run for run in report["runs"] if run["actor"] != "walk"]
    assert {run["actor"] for run in networks} == {
        "cnn",
        "vit_small",
        "sit_small_chiral_m4_corners_sharp_standardized",
    }
    for run in report["runs"]:
        n1, n2 = run["levels"].values()
        assert n1["steps"] == n2["steps"] == report["settings"]["steps"] // 2
        cells = (
            f"| {n1['successes_per_100k_steps']:.0f} | {n1['success_per_episode']:.4f} | "
            f"{n2['successes_per_100k_steps']:.0f} | {n2['success_per_episode']:.4f} | "
            f"{n1['mean_episode_length']:.1f} |"
        )
        assert cells in page
    # The claims of the text: every network at initialisation within the uniform walk's range, a
    # straight walk 8x (N1) and 32x (N2) as lucky.
    uniform = [
        walks[0.25]["levels"][level]["successes_per_100k_steps"] for level in report["settings"]["levels"]
    ]
    rates = [
        [run["levels"][lvl]["successes_per_100k_steps"] for lvl in report["settings"]["levels"]]
        for run in networks
    ]
    assert all(r[0] <= uniform[0] and r[1] <= uniform[1] for r in rates)
    assert (
        f"{min(r[0] for r in rates):.0f}-{max(r[0] for r in rates):.0f} times per 100k steps on N1"
        in " ".join(page.split())
    )
    straight = [walks[0.7]["levels"][lvl]["successes_per_100k_steps"] for lvl in report["settings"]["levels"]]
    assert [round(s / u) for s, u in zip(straight, uniform, strict=True)] == [8, 32]
    entropies = [level["mean_entropy"] for run in networks for level in run["levels"].values()]
    assert 1.355 <= min(entropies) and max(entropies) <= math.log(4) + 1e-9


def test_the_forward_prior_screen_is_quoted_as_measured():
    """docs/lavacrossing.md: the standardised sharp chiral SiT started near forward 0.7, to 0.5M steps."""
    report = _report("lavacrossing_forward_prior_seed0_05m.json")
    assert "ppo.initial_action_probabilities = (0.7, 0.1, 0.1, 0.1)" in report["run"]["command"]
    assert report["run"]["commit"] and report["budget_env_steps"] == 500_000
    page = _flat_page("lavacrossing.md")
    successes = [point["success"] for point in report["curve"]["curve"]]
    assert len(successes) == 10 and report["curve"]["last"]["env_steps"] >= 500_000
    assert f"Training success at every 50k mark: {' / '.join(f'{s:.2f}' for s in successes)}." in page
    assert (
        report["curve"]["last"]["success"] == pytest.approx(0.04) and "(0.04 against 0.07 and 0.06)" in page
    )
    assert set(report["without_the_prior_for_comparison"]["training_success_to_0.5M"]) == {0.0}
    greedy, sampling = report["greedy"], report["sampling"]
    assert all(
        greedy[row]["success_rate"] == 0
        for row in ("train: easy", "train: medium", "hard", "rotations average")
    )
    assert (
        f"{greedy['goal top-right']['success_rate']:.2f} with the goal at the top right" in page
        and f"{greedy['random goal']['success_rate']:.2f} with a random goal" in page
    )
    rows = " / ".join(
        f"{sampling[row]['success_rate']:.2f}" for row in ("train: easy", "train: medium", "hard")
    )
    assert f"{rows} on N1 / N2 / N3 and {sampling['rotations average']['success_rate']:.2f} rotated" in page
    walk = next(
        run
        for run in _report("lavacrossing_exploration.json")["runs"]
        if run.get("forward_probability") == 0.7
    )
    rate = sum(level["successes"] for level in walk["levels"].values()) / sum(
        level["episodes"] for level in walk["levels"].values()
    )
    assert f"({rate:.1%} of its episodes, N1 and N2 together" in page
    assert f"success rate at 0.5M: {successes[-1]:.2f}, {successes[-1] / rate:.1f}x the rate of" in page


def test_the_forward_prior_run_to_1m_is_quoted_as_measured():
    """docs/lavacrossing.md: the forward-prior screen resumed to 1M steps."""
    report = _report("lavacrossing_forward_prior_seed0_1m.json")
    screen = _report("lavacrossing_forward_prior_seed0_05m.json")
    assert "--env_steps 1000000" in report["run"]["command"] and report["run"]["commit"]
    assert (
        report["run"]["command"].replace("1000000", "500000").split(" --out ")[0]
        == (screen["run"]["command"].split(" --out ")[0])
    )
    page = _flat_page("lavacrossing.md")
    points = report["curve"]["curve"]
    # The first half of the curve is the screen's: the same checkpoints, read again.
    assert [p["success"] for p in points[:10]] == [p["success"] for p in screen["curve"]["curve"]]
    second = [p["success"] for p in points[10:]]
    assert len(second) == 10 and report["curve"]["last"]["env_steps"] >= 1_000_000
    assert f"Training success at every 50k mark from 0.55M: {' / '.join(f'{s:.2f}' for s in second)}." in page
    span = f"{min(second):.2f}-{max(second):.2f}"
    assert f"{span} from 0.55M to 1M ({second[-1]:.2f} at 1M)" in page
    assert f"({min(second) * 100:.0f}-{max(second):.0%} of its episodes against the walk's 1.7%)" in page
    assert max(second) > max(p["success"] for p in points[:10])  # more than in the first half
    peak = points[10 + second.index(max(second))]["env_steps"]
    assert f"it peaks at {peak / 1e6:.2f}M and ends at {second[-1]:.2f}" in page
    greedy, sampling = report["greedy"], report["sampling"]
    rows = " / ".join(f"{greedy[r]['success_rate']:.2f}" for r in ("train: easy", "train: medium", "hard"))
    rotated = greedy["rotations average"]["success_rate"]
    assert f"Greedy success at 1M: {rows} on N1 / N2 / N3 and {rotated:.2f} rotated" in page
    assert (
        f"{greedy['goal top-right']['success_rate']:.2f} with the goal at the top right, "
        f"{greedy['random goal']['success_rate']:.2f} with a random goal" in page
    )
    assert (
        f"Sampling: {sampling['train: easy']['success_rate']:.2f} on N1 and "
        f"{sampling['rotations average']['success_rate']:.2f} rotated" in page
    )
    assert f"N1 is 0.00 at 0.5M and {greedy['train: easy']['success_rate']:.2f} at 1M" in page


def test_the_cnn_with_the_forward_prior_is_quoted_as_measured():
    """docs/lavacrossing.md: the control of the forward-prior SiT, the CNN with the same prior to 1M."""
    report = _report("lavacrossing_forward_prior_cnn_seed0_1m.json")
    assert "--models cnn" in report["run"]["command"] and report["run"]["commit"]
    assert "ppo.initial_action_probabilities = (0.7, 0.1, 0.1, 0.1)" in report["run"]["command"]
    page = _flat_page("lavacrossing.md")
    half = next(p for p in report["curve"]["curve"] if p["env_steps"] >= 500_000)
    last = report["curve"]["last"]
    assert last["env_steps"] >= 1_000_000
    greedy = report["greedy"]
    assert (
        f"training success {half['success']:.2f} at 0.5M and {last['success']:.2f} at 1M (without the prior"
        in page
    )
    assert (
        f"success {greedy['train: easy']['success_rate']:.2f} on N1 and "
        f"{greedy['rotations average']['success_rate']:.2f} rotated" in page
    )


def _success_at(curve: dict, steps: int) -> float:
    """Training success at the first curve point at or past ``steps``."""
    return next(p["success"] for p in curve["curve"] if p["env_steps"] >= steps)


def test_the_rotation_pooled_readout_in_ppo_is_quoted_as_measured():
    """docs/lavacrossing.md: the SieT readout with the forward prior (to 0.76M) and without it (to 1M)."""
    report = _report("lavacrossing_siet_readout_forward_seed0.json")
    partial = _report("lavacrossing_siet_readout_seed0_1m.json")
    cnn = _report("lavacrossing_forward_prior_cnn_seed0_1m.json")["curve"]
    sit = _report("lavacrossing_forward_prior_seed0_1m.json")["curve"]
    for run in (report["run"], partial["run"]):
        assert "--models siet_rotation_pooled --seeds 0" in run["command"] and run["commit"]
    assert "ppo.initial_action_probabilities = (0.7, 0.1, 0.1, 0.1)" in report["run"]["command"]
    assert "initial_action_probabilities" not in partial["run"]["command"]
    assert report["budget_env_steps"] == report["curve"]["last"]["env_steps"] == 757_760
    assert partial["budget_env_steps"] == partial["curve"]["last"]["env_steps"] == 1_001_472
    assert partial["num_episodes"] == 200 and "--num_episodes 200" in partial["run"]["evaluation_command"]
    marks = (300_000, 500_000, 750_000)

    def at(curve: dict) -> str:
        return " / ".join(f"{_success_at(curve, m):.2f}" for m in marks)

    page = _flat_page("lavacrossing.md")
    greedy = {row: f"{v['success_rate']:.2f}" for row, v in report["greedy"].items()}
    sampling = {row: f"{v['success_rate']:.2f}" for row, v in report["sampling"].items()}
    table4 = _report("table4_lavacrossing_3m.json")["training_curves"]
    cnn_05 = [dict(table4[f"cnn_seed{s}"]["success_every_250k"])[501_760] for s in (0, 1)]
    cnn_1m = [dict(table4[f"cnn_seed{s}"]["success_every_250k"])[1_001_472] for s in (0, 1)]
    cnn_half = [table4[f"cnn_seed{s}"]["first_step_with_success_at_least"]["0.5"] for s in (0, 1)]
    assert partial["curve"]["first_step_with_success_at_least"]["0.5"] < min(cnn_half)
    peak = max(partial["curve"]["curve"], key=lambda p: p["success"])
    half = partial["curve"]["first_step_with_success_at_least"]["0.5"]
    greedy_1m = {row: f"{v['success_rate']:.2f}" for row, v in partial["greedy"].items()}
    sampling_1m = {row: f"{v['success_rate']:.2f}" for row, v in partial["sampling"].items()}
    standardized = _report("lavacrossing_standardized_seed0_1m.json")["curve"]["curve"]
    for text in (
        f"Training success at 0.3M / 0.5M / 0.75M: {at(report['curve'])}. With the same prior and seed the "
        f"class-token SiT had {at(sit)} and the CNN {at(cnn)}.",
        f"it has not reached the CNN's {cnn['last']['success']:.2f} at 1M",
        f"Greedy success at 757,760 steps: N1 {greedy['train: easy']}, N2 {greedy['train: medium']}, "
        f"N3 {greedy['hard']}, rotated {greedy['rotations average']}",
        f"goal top-right {greedy['goal top-right']}, bottom-left {greedy['goal bottom-left']}, random goal "
        f"{greedy['random goal']}. Sampling: N1 {sampling['train: easy']}, "
        f"rotated {sampling['rotations average']}.",
        f"training success {_success_at(partial['curve'], 500_000):.2f} at 0.5M, where the CNN's two seeds "
        f"had {cnn_05[0]:.2f} and {cnn_05[1]:.2f} at 0.5M and the standardised class-token SiT at most "
        f"{max(p['success'] for p in standardized):.2f} in 1M steps",
        f"It first reached 0.5 at {partial['curve']['first_step_with_success_at_least']['0.5']:,} steps, "
        f"before either CNN seed ({cnn_half[0]:,} and {cnn_half[1]:,}), peaked at {peak['success']:.2f} at "
        f"{peak['env_steps'] / 1e6:.1f}M and was {partial['curve']['last']['success']:.2f} at 1M (the CNN's "
        f"{cnn_1m[0]:.2f} and {cnn_1m[1]:.2f}).",
        f"Greedy success at 1M: N1 {greedy_1m['train: easy']}, N2 {greedy_1m['train: medium']}, N3 "
        f"{greedy_1m['hard']}, rotated {greedy_1m['rotations average']}; sampling: N1 "
        f"{sampling_1m['train: easy']}, rotated {sampling_1m['rotations average']}",
    ):
        assert text in page, text
    assert (
        f"0.26 at 0.5M and 0.32 at 0.75M steps, where the class-token SiT had "
        f"{_success_at(sit, 500_000):.2f} and {_success_at(sit, 750_000):.2f} and the CNN "
        f"{_success_at(cnn, 500_000):.2f} and {_success_at(cnn, 750_000):.2f}" in LAVACROSSING_SHORT
    )
    assert f"{_success_at(report['curve'], 500_000):.2f} at 0.5M" in LAVACROSSING_SHORT
    assert (
        f"Without the prior it first reached 0.5 training success at {half:,} steps, before either CNN seed, "
        f"and its greedy N1 success at 1M is {greedy_1m['train: easy']}" in LAVACROSSING_SHORT
    )
    seed2 = _report("lavacrossing_siet_readout_seed2_1m.json")
    half2 = seed2["curve"]["first_step_with_success_at_least"]["0.5"]
    greedy2 = {row: v["success_rate"] for row, v in seed2["greedy"].items()}
    assert greedy2["rotations average"] == greedy2["train: easy"]  # the exact invariance, as for seed 0
    assert greedy_1m["rotations average"] == greedy_1m["train: easy"]
    assert (
        f"its seed 2 first reached 0.5 at {half2:,} steps, and its greedy N1 and rotated success at 1M are "
        f"{greedy2['train: easy']:.2f}" in LAVACROSSING_SHORT
    )


def test_the_siet_readouts_second_seed_is_quoted_as_measured():
    """docs/lavacrossing.md and the README: the SieT readout's seed 1, trained to 1M steps, did not learn."""
    report = _report("lavacrossing_siet_readout_seed1_1m.json")
    assert report["run"]["command"].startswith(
        "python benchmarks/minigrid_rotation.py --models siet_rotation_pooled --seeds 1 --env_steps 1000000"
    )
    curve = report["curve"]
    assert curve["last"]["env_steps"] == report["budget_env_steps"] >= 1_000_000
    best = max(point["success"] for point in curve["curve"])
    assert curve["first_step_with_success_at_least"]["0.5"] is None
    greedy = {row: v["success_rate"] for row, v in report["greedy"].items()}
    sampling = {row: v["success_rate"] for row, v in report["sampling"].items()}
    page = _flat_page("lavacrossing.md")
    for text in (
        f"its training success was at most {best:.2f} at every 50k mark to 1M steps "
        f"({curve['last']['success']:.2f} at 1M)",
        f"over {report['num_episodes']} episodes a row",
        f"sampling, N1 {sampling['train: easy']:.2f} and rotated {sampling['rotations average']:.2f}",
    ):
        assert text in page, text
    assert all(greedy[row] == 0 for row in ("train: easy", "train: medium", "hard", "rotations average"))
    assert f"did not learn, at most {best:.2f} training success to 1M steps" in LAVACROSSING_SHORT


TABLE4_PARTS = sorted((REFERENCE / "table4_lavacrossing_parts").glob("*.json"))


def _greedy_cells(greedy: dict, column: str, table: str = "table_4") -> str:
    """Table 4's rows as the docs quote them: greedy success (mean return; the paper column's reward)."""
    names = {
        "train: easy": "N1",
        "train: medium": "N2",
        "hard": "N3",
        "rotations average": "rotations",
        "goal top-right": "goal top-right",
        "goal bottom-left": "bottom-left",
        "random goal": "random goal",
    }
    return ", ".join(
        f"{name} {greedy[row]['success_rate']:.2f} ({greedy[row]['mean_return']:.2f}"
        + ("; paper " if row == "train: easy" else "; ")
        + f"{_paper(column, row, table):.2f})"
        for row, name in names.items()
    )


@pytest.mark.parametrize("path", TABLE4_PARTS, ids=[p.stem for p in TABLE4_PARTS])
def test_table4_parts_are_quoted_as_measured(path):
    """docs/results.md: each committed part of the 3-seed, 200-episode Table 4, beside the paper's column."""
    part = json.loads(path.read_text())
    assert part["settings"]["num_episodes"] == 200 and part["settings"]["env_steps"] == 3_000_000
    (run,) = part["runs"]
    model, seed = run["model"], run["seed"]
    assert path.stem == f"{model}_seed{seed}"
    assert part["command"].startswith(
        f"python benchmarks/minigrid_rotation.py --models {model} --seeds {seed} "
    )
    assert f"--out runs/table4_lavacrossing/{model}_seed{seed}_3m.json" in part["command"]
    curve = part["training_curve"]
    column = PAPERS["sit_icml2024"]["our_configs"][model]["table_4"]
    greedy = run["greedy"]
    cells = _greedy_cells(greedy, column)
    page = _flat_page("results.md")
    assert f"(`table4_lavacrossing_parts/{path.name}`, 3M steps, 15% of the paper's 20M IMPALA steps)" in page

    half, ninety = (curve["first_step_with_success_at_least"][level] for level in ("0.5", "0.9"))
    if ninety is not None:
        reached = f"first 0.5 at {half:,} steps and 0.9 at {ninety:,}"
    elif half is not None:
        reached = f"first 0.5 at {half:,} steps, never 0.9"
    else:
        reached = "never 0.5"
    assert (
        f"training success {reached}, {curve['last']['success']:.2f} at 3M. Greedy success (mean return) "
        f"beside the paper's {column} column (mean rewards): {cells}." in page
    )


TABLE4_PRIOR_PARTS = sorted((REFERENCE / "table4_lavacrossing_prior_parts").glob("*.json"))
TABLE4_PRIOR_LABELS = {
    "cnn": "The CNN",
    "vit": "ViT-small",
    "sit_grid_readout": "The SiT that reads its local grid",
    "sit_grid_readout_global": "The same SiT without its local layer",
}


def test_the_table4_summary_says_where_the_prior_parts_stand():
    """docs/results.md, "Where it stands": every SiT part under the prior passes the greedy bar, and how many
    seeds of each model reached 0.9 training success."""
    greedy = [
        json.loads(path.read_text())["runs"][0]["greedy"]
        for path in TABLE4_PRIOR_PARTS
        if path.stem.startswith("sit_grid_readout_seed")
    ]
    assert greedy and all(
        g["train: easy"]["success_rate"] >= 0.9 and g["rotations average"]["success_rate"] >= 0.85
        for g in greedy
    )
    page = _flat_page("results.md")
    assert (
        "reached 0.9 training success within 3M steps on all 3 of its seeds and passes issue 24's greedy bar "
        "on each (N1 at least 0.9, the rotations at least 0.85);"
    ) in page
    assert len(greedy) == 3
    first_09 = [
        json.loads(path.read_text())["training_curve"]["first_step_with_success_at_least"]["0.9"]
        for path in TABLE4_PRIOR_PARTS
        if path.stem.startswith("sit_grid_readout_seed")
    ]
    assert max(first_09) <= 3_000_000
    assert (
        "So the SiT that reads its local grid has its 3 seeds: each reached 0.9 training success within 3M "
        f"steps ({min(first_09):,} to {max(first_09):,}) and passes issue 24's greedy bar;"
    ) in page
    cnn_09 = [
        json.loads(path.read_text())["training_curve"]["first_step_with_success_at_least"]["0.9"]
        for path in TABLE4_PRIOR_PARTS
        if path.stem.startswith("cnn_seed")
    ]
    assert len(cnn_09) == 3 and max(cnn_09) <= 3_000_000  # "the CNN reached it on its 3 seeds too"
    assert f"the CNN's 3 seeds reached it at {min(cnn_09):,} to {max(cnn_09):,}." in page
    for seed in (0, 1, 2):
        vit = _report(f"table4_lavacrossing_prior_parts/vit_seed{seed}.json")["training_curve"]
        assert vit["first_step_with_success_at_least"]["0.5"] is None  # "did not learn within 3M steps"
    assert "ViT-small's 3 seeds did not learn within 3M steps." in page
    global_09 = [
        json.loads(path.read_text())["training_curve"]["first_step_with_success_at_least"]["0.9"]
        for path in TABLE4_PRIOR_PARTS
        if path.stem.startswith("sit_grid_readout_global")
    ]
    assert len(global_09) == 3
    learned = sum(step is not None and step <= 3_000_000 for step in global_09)
    assert (
        "the CNN reached it on its 3 seeds too, ViT-small on none of its 3, and the same SiT without its "
        f"local layer on {learned or 'none'} of its 3."
    ) in page


def test_the_readmes_training_example_is_table4s_sit_for_as_long_as_its_seeds_took():
    """README, "Training": the SiT and bindings of Table 4's parts under the prior, for 1.5M steps, by which
    each seed of that SiT had first reached 0.9 training success."""
    parts = [
        json.loads(p.read_text()) for p in TABLE4_PRIOR_PARTS if p.stem.startswith("sit_grid_readout_seed")
    ]
    first = [part["training_curve"]["first_step_with_success_at_least"]["0.9"] for part in parts]
    assert len(first) == 3 and max(first) <= 1_500_000
    assert "for 1.5M steps (each of those seeds first reached 0.9 training success by then)." in " ".join(
        README.split()
    )
    block = README.split("sit-train --root_dir runs/lava_sit", 1)[1].split("\ntensorboard", 1)[0]
    words = shlex.split(block.replace("\\\n", " "))

    def bindings(words: list[str]) -> list[str]:
        return [
            "".join(words[i + 1].split())
            for i, word in enumerate(words)
            if word == "--gin_bindings" and "checkpoint_interval" not in words[i + 1]
        ]

    assert words[words.index("--gin_file") + 1] == "configs/minigrid/lavacrossing_sit_grid_readout.gin"
    for part in parts:
        assert "--models sit_grid_readout " in part["command"]
        assert sorted(bindings(words)) == sorted(
            [*bindings(shlex.split(part["command"])), "train_eval.total_env_steps=1500000"]
        )


def test_vit_smalls_seed2_entropy_came_back_and_fell_again():
    """docs/results.md: ViT-small seed 2's entropy from the learner logs of its whole run."""
    report = _report("lavacrossing_vit_forward_seed2_diagnostics.json")
    assert report["command"].startswith(
        "python benchmarks/training_curve.py --root_dir runs/table4_vit_forward/vit_seed2 "
    )
    entropy = {row["env_steps"]: row["entropy"] for row in report["learner_diagnostics"]}
    assert min(entropy) == 100_000 and max(entropy) == 3_000_000  # "cover its whole run"
    peaks = (900_000, 2_500_000)
    assert all(entropy[p] > 0.5 for p in peaks) and entropy[300_000] < 0.05
    best = max(point["success"] for point in report["curve"])
    assert best < 0.5
    part = _report("table4_lavacrossing_prior_parts/vit_seed2.json")["training_curve"]
    assert part["last"]["success"] == pytest.approx(report["last"]["success"])
    page = _flat_page("results.md")
    assert (
        "Seed 2's learner logs cover its whole run "
        "(`benchmarks/reference/lavacrossing_vit_forward_seed2_diagnostics.json`): its policy's entropy was "
        f"{entropy[300_000]:.2f} at 300k steps, came back twice ({entropy[900_000]:.2f} at 900k, "
        f"{entropy[2_500_000]:.2f} at 2.5M) and fell again each time ({entropy[1_200_000]:.2f} at 1.2M, "
        f"{entropy[3_000_000]:.2f} at 3M), while its training success stayed at or below {best:.2f}."
    ) in page


def _sit_without_its_local_layer(seed: int) -> tuple[dict, dict, dict]:
    """Its Table 4 part's training curve and greedy N1 and rotations rows."""
    part = _report(f"table4_lavacrossing_prior_parts/sit_grid_readout_global_seed{seed}.json")
    (run,) = part["runs"]
    return part["training_curve"], run["greedy"]["train: easy"], run["greedy"]["rotations average"]


def test_the_sit_without_its_local_layer_is_quoted_from_its_seeds():
    """docs/results.md: the summary's sentences on the SiT without its local layer, from its three parts."""
    curve, easy, rotated = _sit_without_its_local_layer(0)
    table, column, _ = _paper_column("sit_grid_readout_global")
    first_05 = curve["first_step_with_success_at_least"]["0.5"]
    assert curve["last"]["success"] < 0.5 and first_05 is not None
    assert easy["success_rate"] == rotated["success_rate"]  # "its rotations row equals its N1 row"
    page = _flat_page("results.md")
    assert (
        "On its first seed, the same SiT without its local layer learned far more slowly than with it: "
        f"training success {curve['last']['success']:.2f} at 3M steps (first 0.5 at {first_05:,}), "
        f"greedy success {easy['success_rate']:.2f} on N1 and "
        f"{rotated['success_rate']:.2f} under rotations (mean return {easy['mean_return']:.2f} against "
        f"Table 5's {_paper(column, 'train: easy', table):.2f} for its architecture);"
    ) in page
    curve1, easy1, rotated1 = _sit_without_its_local_layer(1)
    assert curve1["first_step_with_success_at_least"]["0.5"] is None  # "never 0.5"
    assert easy1["success_rate"] <= easy["success_rate"]  # "did no better"
    assert easy1["success_rate"] == rotated1["success_rate"]  # "its rotations row again its N1 row"
    assert (
        f"Its second seed did no better: training success never 0.5 ({curve1['last']['success']:.2f} at 3M "
        f"steps), greedy success {easy1['success_rate']:.2f} on N1 and {rotated1['success_rate']:.2f} under "
        f"rotations (mean return {easy1['mean_return']:.2f}), its rotations row again its N1 row."
    ) in page
    curve2, easy2, rotated2 = _sit_without_its_local_layer(2)
    assert curve2["first_step_with_success_at_least"]["0.5"] is None  # "did not reach 0.5 either"
    assert (
        f"Its third seed did not reach 0.5 either ({curve2['last']['success']:.2f} at 3M steps; greedy "
        f"success {easy2['success_rate']:.2f} on N1 and {rotated2['success_rate']:.2f} under rotations, mean "
        f"return {easy2['mean_return']:.2f}): without its local layer the SiT reached 0.9 training success "
        "on none of its 3 seeds within 3M steps."
    ) in page
    assert all(c["first_step_with_success_at_least"]["0.9"] is None for c in (curve, curve1, curve2))


def test_vit_smalls_policy_collapsed_to_a_deterministic_one():
    """docs/results.md: ViT-small seed 1's entropy and KL from its learner logs, and its success at 3M."""
    report = _report("lavacrossing_vit_forward_seed1_diagnostics.json")
    assert report["command"].startswith(
        "python benchmarks/training_curve.py --root_dir runs/table4_vit_forward/"
    )
    diagnostics = {row["env_steps"]: row for row in report["learner_diagnostics"]}
    assert min(diagnostics) == 1_000_000  # from the last process on (901,120 steps)
    late = [row for steps, row in diagnostics.items() if steps >= 1_500_000]
    assert late and all(row["entropy"] < 0.005 and row["approx_kl"] < 0.005 for row in late)
    part = _report("table4_lavacrossing_prior_parts/vit_seed1.json")
    assert part["training_curve"]["last"]["success"] < 0.005
    page = _flat_page("results.md")
    assert (
        "Seed 1's learner logs from 901,120 steps on "
        "(`benchmarks/reference/lavacrossing_vit_forward_seed1_diagnostics.json`;"
    ) in page
    assert (
        f"its policy's entropy, {math.log(4):.2f} nats for a uniform choice of the 4 actions, was "
        f"already {diagnostics[1_000_000]['entropy']:.2f} at 1M steps and 0.00 from 1.5M on, where the "
        "approximate KL of every update is 0.00 too"
    ) in page
    assert "and its training success fell to 0.00." in page


def test_table4s_section_counts_the_seeds_that_learned_and_what_rotation_keeps():
    """docs/results.md, "Table 4 complete": its sentences beside the tables (which
    test_table4_lavacrossing_is_the_merge_of_every_prior_part checks)."""
    merged = _report("table4_lavacrossing.json")
    page = _flat_page("results.md")
    section = page.split("#### Table 4 complete: the means over 3 seeds a model", 1)[1].split(" ### ", 1)[0]
    learned = {}
    for path in TABLE4_PRIOR_PARTS:
        part = json.loads(path.read_text())
        reached = part["training_curve"]["first_step_with_success_at_least"]["0.9"]
        counts = learned.setdefault(part["runs"][0]["model"], [0, 0])
        counts[0] += reached is not None and reached <= 3_000_000
        counts[1] += 1
    said = ", ".join(
        f"{TABLE4_PRIOR_LABELS[model].replace('The ', 'the ')} {hit} of {total}"
        for model, (hit, total) in learned.items()
    )
    assert f"Seeds that reached 0.9 training success within 3M steps: {said}." in section
    rotated = {
        model: statistics.mean(
            run["greedy"]["rotations average"]["mean_return"]
            for run in merged["runs"]
            if run["model"] == model
        )
        for model in ("sit_grid_readout", "cnn")
    }
    assert (
        f"keeps it under rotation ({rotated['sit_grid_readout']:.2f} against the CNN's {rotated['cnn']:.2f})"
    ) in section


def _greedy_mean(runs: list[dict], model: str, row: str) -> str:
    """A model's greedy mean return on ``row``: mean ± population std over its seeds, as tables print it."""
    values = [run["greedy"][row]["mean_return"] for run in runs if run["model"] == model]
    return f"{statistics.mean(values):.2f} ± {statistics.pstdev(values):.2f}"


def test_table4_lavacrossing_is_the_merge_of_every_prior_part():
    """benchmarks/reference/table4_lavacrossing.json: the merge of every part under the forward prior, 3 seeds
    a model, as its command reruns it; its tables in docs/results.md and its summary in the README."""
    report = _report("table4_lavacrossing.json")
    names = [path.relative_to(ROOT).as_posix() for path in TABLE4_PRIOR_PARTS]
    words = shlex.split(report["command"])
    assert words[:2] == ["python", "benchmarks/minigrid_rotation.py"]
    assert words[words.index("--merge") + 1].split(",") == names
    assert words[words.index("--out") + 1] == "benchmarks/reference/table4_lavacrossing.json"
    merged = load_benchmark("minigrid_rotation").merge_reports([str(path) for path in TABLE4_PRIOR_PARTS])
    for part, name in zip(merged["parts"], names, strict=True):
        part["file"] = name
    assert {key: value for key, value in report.items() if key != "command"} == json.loads(json.dumps(merged))
    seeds = collections.Counter(run["model"] for run in report["runs"])
    assert seeds == {"cnn": 3, "vit": 3, "sit_grid_readout": 3, "sit_grid_readout_global": 3}
    section = _flat_page("results.md").split("#### Table 4 complete: the means over 3 seeds a model", 1)[1]
    section = section.split(" ### ", 1)[0]
    assert "`benchmarks/reference/table4_lavacrossing.json`" in section
    for table in (*report["paper_tables"].values(), report["tables"]["greedy"]):
        assert " ".join(table.split()) in section
    reached = {model: [] for model in seeds}  # first steps at 0.9 training success within 3M steps
    for path in TABLE4_PRIOR_PARTS:
        part = json.loads(path.read_text())
        step = part["training_curve"]["first_step_with_success_at_least"]["0.9"]
        if step is not None and step <= 3_000_000:
            reached[part["runs"][0]["model"]].append(step)
    sit, cnn, vit, bare = "sit_grid_readout", "cnn", "vit", "sit_grid_readout_global"
    runs = report["runs"]

    def ours(model: str, row: str) -> str:
        return _greedy_mean(runs, model, row)

    def paper(model: str, row: str) -> str:
        table, column, _ = _paper_column(model)
        return f"{_paper(column, row, table):.2f}"

    def value(model: str, row: str) -> float:
        return float(ours(model, row).split(" ± ")[0])

    assert value(sit, "rotations average") >= value(sit, "train: easy") - 0.01  # "keeps it under rotation"
    assert value(cnn, "train: medium") > value(sit, "train: medium") + 0.2  # "far ahead on N2"
    easy, rotated, medium = "train: easy", "rotations average", "train: medium"
    assert (
        "- **SiT Table 4 on LavaCrossing** (`benchmarks/reference/table4_lavacrossing.json`; PPO for 3M "
        "steps a run, 15% of the paper's 20M IMPALA steps, 3 seeds a model; greedy mean return over 200 "
        "episodes, mean ± population standard deviation over the seeds, beside the paper's column of each "
        "model's architecture): the SiT that reads its local grid (one local and one global layer: the "
        f"paper's SiT-1) scores N1 {ours(sit, easy)} (paper {paper(sit, easy)}) and keeps it under rotation, "
        f"{ours(sit, rotated)} ({paper(sit, rotated)}); the CNN scores N1 {ours(cnn, easy)} "
        f"({paper(cnn, easy)}) and {ours(cnn, rotated)} ({paper(cnn, rotated)}) rotated, but is far ahead on "
        f"N2: {ours(cnn, medium)} ({paper(cnn, medium)}) against the SiT's {ours(sit, medium)} "
        f"({paper(sit, medium)}). Seeds that reached 0.9 training success within 3M steps: the SiT "
        f"{len(reached[sit])} of 3 ({min(reached[sit]):,} to {max(reached[sit]):,} steps), the CNN "
        f"{len(reached[cnn])} of 3 ({min(reached[cnn]):,} to {max(reached[cnn]):,}), ViT-small "
        f"{len(reached[vit])} of 3 (N1 {ours(vit, easy)}; paper {paper(vit, easy)}), the same SiT without "
        f"its local layer {len(reached[bare])} of 3 (N1 {ours(bare, easy)}; Table 5's {paper(bare, easy)})."
    ) in " ".join(README.split())


def _table4_prior_protocol(words: list[str]) -> list[str]:
    """A prior part's command words without what differs between parts (model, seed, root, out)."""
    drop = {"--models", "--seeds", "--root", "--out"}
    return [w for i, w in enumerate(words) if w not in drop and (i == 0 or words[i - 1] not in drop)]


def _first_levels(reached: dict) -> str:
    """ "first 0.5 at 239,616 steps, 0.8 at 366,592 and 0.9 at 481,280", as far as the run got."""
    words = [
        f"{level} at {reached[level]:,}" for level in ("0.5", "0.8", "0.9") if reached[level] is not None
    ]
    if not words:
        return "never 0.5"
    words[0] += " steps"
    return "first " + (", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0])


@pytest.mark.parametrize("path", TABLE4_PRIOR_PARTS, ids=[p.stem for p in TABLE4_PRIOR_PARTS])
def test_table4_prior_parts_are_quoted_as_measured(path):
    """docs/results.md, "Table 4 under the forward prior": each part of one protocol, beside its column."""
    part = json.loads(path.read_text())
    (run,) = part["runs"]
    model, seed = run["model"], run["seed"]
    assert path.stem == f"{model}_seed{seed}" and part["settings"]["num_episodes"] == 200
    page = _flat_page("results.md")
    block = page.split("### Table 4 under the forward prior", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    documented = shlex.split(block.replace("\\", " "))
    assert _table4_prior_protocol(shlex.split(part["command"])) == _table4_prior_protocol(documented)
    assert "ppo.initial_action_probabilities = (0.7, 0.1, 0.1, 0.1)" in part["settings"]["gin_bindings"]
    walls = part["train_wall_s"]
    assert walls["total"] == pytest.approx(sum(walls.values()) - walls["total"], abs=0.2)
    assert part["first_step_rule"].startswith("float32: ")
    curve = part["training_curve"]
    assert curve["last"]["env_steps"] >= part["settings"]["env_steps"] == 3_000_000
    table, column, column_name = _paper_column(model)
    sampling = run["sampling"]
    assert (
        f"- **{TABLE4_PRIOR_LABELS[model]}, seed {seed}** (`table4_lavacrossing_prior_parts/{path.name}`, "
        f"3M steps, 15% of the paper's 20M IMPALA steps, {walls['total'] / 3600:.1f} hours of training): "
        f"training success {_first_levels(curve['first_step_with_success_at_least'])}, "
        f"{curve['last']['success']:.2f} at 3M. Greedy success (mean return) beside the paper's "
        f"{column_name} column (mean rewards): {_greedy_cells(run['greedy'], column, table)}. Sampling: N1 "
        f"{sampling['train: easy']['success_rate']:.2f}, rotations "
        f"{sampling['rotations average']['success_rate']:.2f}."
    ) in page


def test_the_small_sits_table4_part_quotes_its_sampling_and_tflite_scores():
    """docs/results.md: SiT-small seed 2's sampling scores and its TFLite greedy N1."""
    (run,) = json.loads((REFERENCE / "table4_lavacrossing_parts" / "sit_small_seed2.json").read_text())[
        "runs"
    ]
    sampling = {row: v["success_rate"] for row, v in run["sampling"].items()}
    page = _flat_page("results.md")
    assert (
        f"Sampling, it succeeds far more often: N1 {sampling['train: easy']:.2f}, rotations "
        f"{sampling['rotations average']:.2f}, N2 {sampling['train: medium']:.2f}." in page
    )
    tflite = run["tflite greedy"]["train: easy"]["success_rate"]
    assert tflite == run["greedy"]["train: easy"]["success_rate"]
    assert f"its TFLite float32 policy scores the same greedy N1 ({tflite:.2f})" in page


def test_the_siet_readout_trace_table_is_the_report():
    """docs/lavacrossing.md: dead head units, feature rank and logit spread of the SieT readout's seeds."""
    report = _report("lavacrossing_siet_readout_trace_1m.json")
    page = (DOCS / "lavacrossing.md").read_text()

    for seed, run in report["runs"].items():
        trace = run["trace"]
        assert len(trace) == 3 and trace[-1]["env_steps"] >= 1_000_000
        assert run["command"].startswith("python benchmarks/ppo_trace.py --root_dir runs/table4_ro/")
        cells = [
            seed.split()[1],
            "yes" if run["learned"] else "no",
            _span([c["relu"]["head"]["dead_fraction"] for c in trace], 2),
            _span([c["features"]["effective_rank"] for c in trace], 1),
            _span([c["policy"]["logit_std_across_states"] for c in trace], 2),
            _span([c["policy"]["entropy"] for c in trace], 2),
            _span([c["policy"]["expert_accuracy"] for c in trace], 2),
        ]
        assert "| " + " | ".join(cells) + " |" in page, cells
        first = _report(run["train_report"])["curve"]["first_step_with_success_at_least"]["0.5"]
        assert run["learned"] == (first is not None), seed


def test_the_cheaper_siet_readouts_cost_is_quoted_as_measured():
    """docs/lavacrossing.md: the lite SieT readout's cost per environment step, with 2 heads and with 4."""
    page = _flat_page("lavacrossing.md")
    two, four = _report("lavacrossing_cost_lite_2heads.json"), _report("lavacrossing_cost_lite.json")
    assert four["encoder_kwargs_at_commit"]["num_heads"] == 4
    config = (ROOT / "configs" / "minigrid" / "lavacrossing_siet_rotation_pooled_lite.gin").read_text()
    assert (
        "'num_heads': 2" in config and "'triangles': 0" in config and "'stem_depth_multiplier': 1" in config
    )
    for report in (two, four):
        assert report["command"].startswith("python benchmarks/lavacrossing_cost.py --models sit_small,")
        assert report["repeats"] == 3 and report["env_steps_per_process"] == 10240
    lite, small = (two["table"][m] for m in ("siet_rotation_pooled_lite", "sit_small"))
    assert lite["cost_per_env_step"] <= 1.5
    assert (
        f"**{lite['cost_per_env_step']:.2f}x** SiT-small ({lite['env_steps_per_second']:.1f} against "
        f"{small['env_steps_per_second']:.1f} env steps/s;" in page
    )
    lite4, small4, siet = (
        four["table"][m] for m in ("siet_rotation_pooled_lite", "sit_small", "siet_rotation_pooled")
    )
    quoted = (
        f"With four heads it was {lite4['cost_per_env_step']:.2f}x ({lite4['env_steps_per_second']:.1f} "
        f"against {small4['env_steps_per_second']:.1f}), and the SieT readout "
        f"{siet['cost_per_env_step']:.2f}x in that run"
    )
    assert quoted in page


def test_the_cheaper_siet_readouts_ppo_runs_are_quoted_as_measured():
    """docs/lavacrossing.md: the lite SieT readout on seeds 0 and 1 to 1M steps."""
    report = _report("lavacrossing_siet_readout_lite_1m.json")
    page = _flat_page("lavacrossing.md")
    best = []
    for seed in (0, 1):
        run = report["runs"][f"seed {seed}"]
        assert run["command"].startswith(
            f"python benchmarks/minigrid_rotation.py --models siet_rotation_pooled_lite --seeds {seed} "
            "--env_steps 1000000 --num_episodes 200"
        )
        curve = run["curve"]["curve"]
        assert curve[-1]["env_steps"] >= 1_000_000
        best.append(max(p["success"] for p in curve))
    assert f"training success at most {best[0]:.2f} and {best[1]:.2f} at any 50k mark" in page
    greedy = report["runs"]["seed 1"]["greedy"]
    assert greedy["train: easy"]["success_rate"] == greedy["rotations average"]["success_rate"] == 0
    assert report["runs"]["seed 1"]["num_episodes"] == 200
    full = dict(
        (p["env_steps"], p["success"])
        for p in _report("lavacrossing_siet_readout_seed0_1m.json")["curve"]["curve"]
    )
    half = full[min(full, key=lambda step: abs(step - 500_000))]
    last = full[max(full)]
    assert f"seed 0 had {half:.2f} at 0.5M and {last:.2f} at 1M" in page


def test_the_cheaper_siet_readouts_third_seed_and_traces_are_quoted_as_measured():
    """docs/lavacrossing.md: the lite SieT readout's seed 2 (stopped early) and its actors' traces."""
    report = _report("lavacrossing_siet_readout_lite_1m.json")
    page = " ".join((DOCS / "lavacrossing.md").read_text().split("## A cheaper SieT readout")[1].split())
    seed2 = report["runs"]["seed 2"]
    assert seed2["command"].startswith(
        "python benchmarks/minigrid_rotation.py --models siet_rotation_pooled_lite --seeds 2 "
    )
    last = seed2["curve"]["last"]["env_steps"]
    best = max(p["success"] for p in seed2["curve"]["curve"])
    full = _report("lavacrossing_siet_readout_seed2_1m.json")["curve"]["curve"]
    near = min(full, key=lambda p: abs(p["env_steps"] - 450_000))
    assert (
        f"was stopped at {last:,} steps to give its core to the runs of the next section: training success "
        f"{best:.2f} at every 50k mark, where the SieT readout's seed 2 had {near['success']:.2f} at 0.45M"
        in page
    )

    def span(trace: list, read, digits: int = 2) -> str:
        return _span([read(cell) for cell in trace], digits)

    def rank(cell: dict) -> float:
        return cell["features"]["effective_rank"]

    def dead(cell: dict) -> float:
        return cell["relu"]["head"]["dead_fraction"]

    def spread(cell: dict) -> float:
        return cell["policy"]["logit_std_across_states"]

    lite = [report["runs"][f"seed {seed}"]["trace"]["trace"] for seed in (0, 1)]
    assert (
        f"effective rank is {span(lite[0], rank, 1)} (seed 0) and {span(lite[1], rank, 1)} (seed 1), with "
        f"{span(lite[0], dead)} and {span(lite[1], dead)} of the head's ReLUs dead and the logits spread "
        f"{span(lite[0], spread)} and {span(lite[1], spread)}" in page
    )
    learned = _report("lavacrossing_siet_readout_trace_1m.json")["runs"]
    both = [cell for seed in ("seed 0", "seed 2") for cell in learned[seed]["trace"]]
    assert f"seeds that learned: rank {span(both, rank, 1)})" in page


def test_the_cheaper_siet_readout_with_a_third_of_the_learning_rate_is_quoted_as_measured():
    """docs/lavacrossing.md: the lite SieT readout with ppo.learning_rate = 3e-4 (seeds 0 and 1)."""
    report = _report("lavacrossing_siet_readout_lite_lr3e-4_1m.json")
    page = " ".join(
        (DOCS / "lavacrossing.md").read_text().split("## The cheaper SieT readout with")[1].split()
    )
    seed0, seed1 = report["runs"]["seed 0"], report["runs"]["seed 1"]
    for seed, run in enumerate((seed0, seed1)):
        assert run["command"].startswith(
            f"python benchmarks/minigrid_rotation.py --models siet_rotation_pooled_lite --seeds {seed} "
        )
        assert "--gin_bindings ppo.learning_rate=3e-4" in run["command"]
    curve = {p["env_steps"]: p["success"] for p in seed0["curve"]["curve"]}
    assert max(curve) >= 1_000_000 and seed0["curve"]["first_step_with_success_at_least"]["0.5"] is None
    early = min(curve, key=lambda step: abs(step - 350_000))
    later = [success for step, success in curve.items() if step >= early]
    protocol = _report("lavacrossing_siet_readout_lite_1m.json")["runs"]["seed 0"]["curve"]["curve"]
    assert (
        f"training success {curve[early]:.2f} at 0.35M steps, where at 1e-3 this seed had at most "
        f"{max(p['success'] for p in protocol):.2f} at every 50k mark, then "
        f"{min(later):.2f}-{max(later):.2f} to 1M ({curve[max(curve)]:.2f} at 1M)" in page
    )
    greedy = {row: v["success_rate"] for row, v in seed0["greedy"].items()}
    assert seed0["num_episodes"] == 200
    assert (
        f"Greedy at 1M: N1 {greedy['train: easy']:.2f}, rotated {greedy['rotations average']:.2f} "
        "(200 episodes a row)" in page
    )
    best1 = max(p["success"] for p in seed1["curve"]["curve"])
    assert not seed1["evaluated"]
    assert f"Seed 1 reached at most {best1:.2f} by {seed1['curve']['last']['env_steps']:,} steps" in page


def _span(values, digits: int) -> str:
    """``min-max`` of ``values``, as the docs quote a range over checkpoints."""
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def _assert_a_1m_run_of(report: dict, model: str, seed: int) -> None:
    """A one-seed report's command trains ``model`` on ``seed`` to 1M steps, evaluated over 200 episodes."""
    assert report["run"]["command"].startswith(
        f"python benchmarks/minigrid_rotation.py --models {model} --seeds {seed} --env_steps 1000000 "
        "--num_episodes 200"
    )
    assert report["num_episodes"] == 200


def test_the_elu_head_on_the_seed_that_did_not_learn_is_quoted_as_measured():
    """docs/lavacrossing.md: the SieT readout with an ELU head on seed 1 to 1M steps, and its trace."""
    report = _report("lavacrossing_siet_readout_elu_seed1_1m.json")
    _assert_a_1m_run_of(report, "siet_rotation_pooled_elu", seed=1)
    assert report["budget_env_steps"] >= 1_000_000
    curve = report["curve"]["curve"]
    assert curve[-1]["env_steps"] == report["budget_env_steps"]
    relu = _report("lavacrossing_siet_readout_seed1_1m.json")
    greedy = {row: v["success_rate"] for row, v in report["greedy"].items()}
    trace = report["trace"]["trace"]
    assert len(trace) == 3 and trace[-1]["env_steps"] >= 1_000_000
    assert all(not cell["relu"] for cell in trace)  # an ELU head: no ReLU to die
    assert report["trace"]["command"].startswith(
        "python benchmarks/ppo_trace.py --root_dir runs/table4_elu/siet_rotation_pooled_elu_seed1"
    )

    relu_trace = _report("lavacrossing_siet_readout_trace_1m.json")["runs"]["seed 1"]["trace"]
    page = _flat_page("lavacrossing.md")
    best = max(p["success"] for p in curve)
    relu_best = max(p["success"] for p in relu["curve"]["curve"])
    assert (
        f"Training success at most {best:.2f} at any 50k mark to 1M steps (the ReLU head's {relu_best:.2f})"
        in page
    )
    assert (
        f"greedy success {greedy['train: easy']:.2f} on N1, N2, N3 and the rotated N1 (sampling "
        f"{report['sampling']['train: easy']['success_rate']:.2f} on N1), 200 episodes a row" in page
    )
    assert (
        max(greedy["train: medium"], greedy["hard"], greedy["rotations average"])
        == greedy["train: easy"]
        == 0
    )
    rank = _span([c["features"]["effective_rank"] for c in trace], 1)
    relu_rank = _span([c["features"]["effective_rank"] for c in relu_trace], 1)
    spread = _span([c["policy"]["logit_std_across_states"] for c in trace], 2)
    entropy = _span([c["policy"]["entropy"] for c in trace], 2)
    accuracy = _span([c["policy"]["expert_accuracy"] for c in trace], 2)
    assert (
        f"effective rank is {rank}, no higher than the ReLU head's {relu_rank}, the logits spread {spread} "
        f"across states and the entropy is {entropy} (expert accuracy {accuracy})" in page
    )
    assert f"training success at most {best:.2f} to 1M steps, features' rank as low" in page


def test_the_elu_head_noise_phase_table_is_the_report():
    """docs/lavacrossing.md: the SieT readout's ReLU and ELU heads in the simulated reward-free phase."""
    report = _report("lavacrossing_noise_phase_siet_elu.json")
    page = (DOCS / "lavacrossing.md").read_text()
    runs = {(run["model"], run["seed"]): run["trace"] for run in report["runs"]}
    relu = "siet_rotation_pooled_m4_corners_sharp_standardized"
    for head, model in (("ReLU", relu), ("ELU", relu + "_elu")):
        last = [runs[model, seed][-1] for seed in range(4)]
        assert all(t["iteration"] == 25 for t in last)
        rank = " / ".join(f"{t['features']['effective_rank']:.1f}" for t in last)
        spread = " / ".join(f"{t['policy']['logit_std_across_states']:.3f}" for t in last)
        assert f"| {head} | {rank} | {spread} |" in page, head
    dead = [[runs[relu, seed][i]["relu"]["head"]["dead_fraction"] for seed in range(4)] for i in (0, -1)]
    flat = " ".join(page.split())
    assert f"starts with {min(dead[0]):.2f}-{max(dead[0]):.2f} of its units dead and has" in flat
    assert f"{min(dead[1]):.2f}-{max(dead[1]):.2f} dead at iteration 25" in flat


def test_the_siet_readouts_third_seed_is_quoted_as_measured():
    """docs/lavacrossing.md: the SieT readout's seed 2, trained to 1M steps, learned."""
    report = _report("lavacrossing_siet_readout_seed2_1m.json")
    _assert_a_1m_run_of(report, "siet_rotation_pooled", seed=2)
    curve = report["curve"]
    assert curve["last"]["env_steps"] == report["budget_env_steps"] >= 1_000_000
    half = curve["first_step_with_success_at_least"]["0.5"]
    greedy = {row: v["success_rate"] for row, v in report["greedy"].items()}
    sampling = {row: v["success_rate"] for row, v in report["sampling"].items()}
    page = _flat_page("lavacrossing.md")
    seed0 = _report("lavacrossing_siet_readout_seed0_1m.json")["curve"]["first_step_with_success_at_least"][
        "0.5"
    ]
    for text in (
        f"success {_success_at(curve, 800_000):.2f} at 0.8M, first 0.5 at {half:,} steps, "
        f"{curve['last']['success']:.2f} at 1M.",
        f"Greedy at 1M: N1 {greedy['train: easy']:.2f}, N2 {greedy['train: medium']:.2f}, "
        f"N3 {greedy['hard']:.2f}, rotated {greedy['rotations average']:.2f}",
        f"sampling: N1 {sampling['train: easy']:.2f}, rotated {sampling['rotations average']:.2f}.",
        f"two seeds of three learn (first 0.5 at {seed0:,} and {half:,} steps)",
    ):
        assert text in page, text
    assert (
        f"its seed 2 first reached 0.5 at {half:,} steps, and its greedy N1 and rotated success at 1M are "
        f"{greedy['train: easy']:.2f}" in LAVACROSSING_SHORT
    )


def test_what_the_seeds_share_is_quoted_as_measured():
    """docs/lavacrossing.md, "What the seeds share": which seeds learned, from their reports."""
    page = " ".join((DOCS / "lavacrossing.md").read_text().split("## What the seeds share")[1].split())
    cnn = _report("table4_lavacrossing_3m.json")["training_curves"]
    first_09 = [cnn[f"cnn_seed{seed}"]["first_step_with_success_at_least"]["0.9"] for seed in (0, 1)]
    assert f"first 0.9 training success at {first_09[0]:,} and {first_09[1]:,} steps" in page
    chiral1, chiral0 = (
        _report("lavacrossing_chiral_seed1_3m.json"),
        _report("lavacrossing_chiral_seed0_3m.json"),
    )
    assert chiral1["seed"] == 1 and chiral0["seed"] == 0
    assert f"first 0.5 at {chiral1['first_step_with_success_at_least']['0.5']:,} steps" in page
    assert chiral0["first_step_with_success_at_least"]["0.5"] is None
    assert f"greedy N1 success {chiral0['greedy']['train: easy']['success_rate']:.2f} at 3M" in page
    learned = {
        seed: _report(f"lavacrossing_siet_readout_seed{seed}_1m.json")["curve"][
            "first_step_with_success_at_least"
        ]["0.5"]
        is not None
        for seed in range(3)
    }
    assert learned == {0: True, 1: False, 2: True}
    assert "the SieT readout learned on seeds 0 and 2 and not on seed 1" in page


def test_the_executed_previous_action_student_with_64_units_is_quoted_as_measured():
    """docs/results.md and the README: 64 LSTM units, the executed previous action, seed 0."""
    report = _report("pi_cartpole_harder_dagger_executed_h64_1000.json")
    column = report["results"]["runs/pi_exec_h64/seed0/pi"]
    upright, teacher = column["5 obs"], report["results"]["teacher"]["5 obs"]
    seed0 = _report("pi_cartpole_harder_dagger_executed_1000.json")["results"]["teacher"]["5 obs"]["mean"]
    assert teacher["mean"] == pytest.approx(seed0, rel=1e-9)  # the same starts and teacher
    costs = {name: 1 - column[name]["over_own_upright"]["share"] for name in column}
    share = upright["over_teacher"]
    text = " ".join(RESULTS.split())
    assert (
        f"scores {upright['mean']:.0f}, **{share['share']:.1%} +- {share['standard_error']:.1%}** of the "
        f"teacher's {teacher['mean']:.0f} (32 units: 86.3%)" in text
    )
    assert f"and {costs['5 obs + 5 noise']:.2%} less with five noise channels (32 units: 9.4%)" in text
    assert abs(costs["5 obs (shuffled)"]) < 0.001 and abs(costs["10 obs"]) < 0.001
    noisy = column["5 obs + 5 noise"]
    assert (
        f"the pole for {upright['second_half_upright_share']:.3f} of the second half with "
        f"{upright['second_half_drops_mean']:.2f} falls there, {noisy['second_half_upright_share']:.3f} and "
        f"{noisy['second_half_drops_mean']:.2f} with the noise channels" in text
    )
    assert f"The memory reset at step 500 costs it {costs['5 obs, memory reset at step 500']:.1%}." in text
    seeds = _report("pi_cartpole_harder_dagger_executed_h64_seeds.json")
    run = seeds["runs"][0]
    assert (
        '"hidden_size": 64' in run["command"]
        and "--previous_action executed" in run["command"]
        and run["commit"]
    )
    summary = seeds["summary"]
    reshuffles = " / ".join(
        f"{summary['pi_per_seed'][f'reshuffle every {n}'][0]:.0f}" for n in (25, 50, 100, 200, 500)
    )
    noise = summary["column_over_5_obs_per_seed"]["5 obs + 5 noise"][0] - 1
    per_seed = summary["pi_per_seed"]
    assert (
        f"it scores {per_seed['5 obs'][0]:.0f}, {summary['student_over_teacher_per_seed'][0]:.1%} of the "
        f"teacher's {summary['teacher_5_obs']:.0f}, {per_seed['5 obs + 5 noise'][0]:.0f} with the "
        f"noise channels ({noise:+.1%}), and {reshuffles} reshuffled" in text
    )


def test_three_seeds_with_64_units_meet_every_target_and_are_quoted_as_measured():
    """docs/results.md and the README: seeds 0-2, 64 LSTM units, the executed previous action."""
    columns = _three_seed_columns(
        "pi_cartpole_harder_dagger_executed_h64_1000.json",
        "pi_cartpole_harder_dagger_executed_h64_seeds12_1000.json",
        "runs/pi_exec_h64",
    )
    shares = [c["5 obs"]["over_teacher"]["share"] for c in columns]
    noise = [1 - c["5 obs + 5 noise"]["over_own_upright"]["share"] for c in columns]
    # The issue's targets, on every seed: 80% of the teacher, 2% shuffled and with 10 readings, 5% noise.
    assert min(shares) >= 0.8 and max(noise) <= 0.05
    for c in columns:
        for name in ("5 obs (shuffled)", "10 obs"):
            assert abs(1 - c[name]["over_own_upright"]["share"]) <= 0.001
    text = " ".join(RESULTS.split())
    row = _table2_row(columns)
    assert f"| AttentionNeuron student, 64 units | {row} |" in RESULTS
    assert (
        f"upright the seeds keep {' / '.join(f'{x:.1%}' for x in shares)} of the teacher, "
        f"{statistics.mean(shares):.1%} on average" in text
    )
    assert (
        f"five noise channels cost {' / '.join(f'{x:.1%}' for x in noise)} (target: 5%): every target" in text
    )
    one, two = columns[1:]
    assert (
        f"{shares[1]:.1%} and {shares[2]:.1%}, {noise[1]:.1%} and {noise[2]:.1%} less with the noise channels"
        in text
    )
    assert f"score {one['5 obs']['mean']:.0f} and {two['5 obs']['mean']:.0f}" in text
    up = {
        f"{c['5 obs']['second_half_upright_share']:.3f} {c['5 obs']['second_half_drops_mean']:.2f}"
        for c in (one, two)
    }
    assert (
        len(up) == 1
        and "Each holds the pole for {} of the second half with {} falls there".format(*up.pop().split())
        in text
    )
    noisy = [
        (c["5 obs + 5 noise"]["second_half_upright_share"], c["5 obs + 5 noise"]["second_half_drops_mean"])
        for c in (one, two)
    ]
    assert (
        f"with the noise channels {noisy[0][0]:.3f} and {noisy[0][1]:.2f} falls (seed 1), "
        f"{noisy[1][0]:.3f} and {noisy[1][1]:.2f} (seed 2)" in text
    )
    resets = [1 - c["5 obs, memory reset at step 500"]["over_own_upright"]["share"] for c in columns]
    assert f"costs them {resets[1]:.1%} and {resets[2]:.1%} (seed 0: {resets[0]:.1%})" in text
    seeds = _report("pi_cartpole_harder_dagger_executed_h64_seeds.json")
    assert [run["seed"] for run in seeds["runs"]] == [0, 1, 2]
    assert all('"hidden_size": 64' in run["command"] and run["commit"] for run in seeds["runs"])
    summary = seeds["summary"]
    per_seed = " / ".join(f"{r:.1%}" for r in summary["student_over_teacher_per_seed"])
    assert f"the 64-unit seeds keep {per_seed} of the teacher, {summary['student_over_teacher']:.1%}" in text
    reshuffles = " / ".join(
        f"{statistics.mean(summary['pi_per_seed'][f'reshuffle every {n}']):.0f}"
        for n in (25, 50, 100, 200, 500)
    )
    assert f"they score {reshuffles} on average (the paper's 107 / 163 / 242 / 318 / 407" in text
    assert (
        f"score {summary['pi_5_obs_mean']:.0f} +- {summary['pi_5_obs_std_over_seeds_sample']:.0f} over seeds "
        f"(sample std), {summary['student_over_teacher']:.1%} of the teacher's {summary['teacher_5_obs']:.0f}"
        in text
    )
    # Table 6 over the same 1000 starts: the Table 2 columns replayed exactly, the reshuffles beside them.
    table6 = _report("pi_cartpole_harder_dagger_executed_h64_table6_1000.json")
    assert table6["commit"] and "--out benchmarks/reference/" in table6["command"]
    replayed = [table6["results"][f"runs/pi_exec_h64/seed{s}/pi"] for s in range(3)]
    for again, column in zip(replayed, columns, strict=True):
        assert again["5 obs"]["mean"] == pytest.approx(column["5 obs"]["mean"], rel=1e-9)
    reshuffles1000 = " / ".join(
        f"{statistics.mean(c[f'reshuffle every {n}']['mean'] for c in replayed):.0f}"
        for n in (25, 50, 100, 200, 500)
    )
    assert (
        "`benchmarks/reference/pi_cartpole_harder_dagger_executed_h64_table6_1000.json`) they score "
        f"{reshuffles1000} on average" in text
    )
    paper_steps = 14_000 * 4_096 * 1_000
    assert f"{(200_000 + 640_000) / paper_steps:.4%} of the paper's CMA-ES budget" in text
    readme = " ".join(README.split())
    assert (
        f"with 64 LSTM units 3 seeds keep {' / '.join(f'{x:.0%}' for x in shares)}, "
        f"{min(noise) * 100:.1f}-{max(noise):.1%} less with them" in readme
    )


def test_the_suites_collections_and_the_learner_pipelines_are_the_reports():
    bench = load_benchmark("suite_resources")
    flat = _flat_page("testing.md")
    summaries = {}
    for when in ("before", "after"):
        summary = _report(f"suite_resources_avx2_{when}.json")
        records = bench.read_report(REFERENCE / f"suite_resources_avx2_{when}.jsonl.gz")
        assert bench.summarise(records, summary["slow_s"], 5) == {  # recomputed from the per-test lines
            "workers": summary["workers"],
            "gc_fraction_of_wall": summary["gc_fraction_of_wall"],
        }
        assert summary["command"].endswith(f"suite_resources_avx2_{when}.json") and summary["tests_commit"]
        assert f"suite_resources_avx2_{when}.json" in flat
        assert f"{100 * summary['gc_fraction_of_wall']:.1f}% of their wall time" in flat
        summaries[when] = [summary["workers"][w] for w in ("gw0", "gw1")]
    gw0, gw1 = summaries["before"]
    assert f"spent {gw0['gc_s']:.0f} s and {gw1['gc_s']:.0f} s of their {gw0['wall_s']:.0f} s and" in flat
    assert f"{gw1['wall_s']:.0f} s in garbage collections" in flat
    after = summaries["after"]
    assert f"workers spent {after[0]['gc_s']:.0f} s and {after[1]['gc_s']:.0f} s in collections" in flat
    assert all(w["gc_in_slow_collections_s"] == 0 for w in after)
    assert f"({sum(w['tests'] for w in after)} tests)" in flat
    cpu = [f"{w['cpu_s']:.0f} s" for w in (*summaries["before"], *after)]
    assert f"rose from {cpu[0]} and {cpu[1]} to {cpu[2]} and {cpu[3]}" in flat
    collection = _report("finished_run_collection.json")
    assert collection["commit"] and collection["command"].startswith(
        "python benchmarks/finished_run_collection.py"
    )
    medians = {}
    for name in ("tf_agents", "learner"):
        result = collection["results"][name]
        assert len(result["runs"]) == collection["repeats"]
        medians[name] = statistics.median(run["collect_s"] for run in result["runs"])
        assert medians[name] == result["collect_s_median"]
    assert (
        f"after {collection['idle_s']:.0f} s took {medians['tf_agents']:.2f} s (median of "
        f"{collection['repeats']}) with TF-Agents' pipelines and {medians['learner']:.2f} s" in flat
    )


_ALLOCATOR_ROWS = {
    "sit_train_step": "SiT train step",
    "vit_train_step": "ViT train step",
    "ppo_sit_small": "PPO, SiT-small",
    "ppo_cnn": "PPO, CNN",
}


def _allocator_rows(report: dict) -> list[str]:
    """docs/speed.md's CPU-allocator table, row by row, from the report's per-setting medians."""
    malloc, bfc = report["table"]["malloc"], report["table"]["bfc"]
    rows = []
    for key, label in _ALLOCATOR_ROWS.items():
        if key.endswith("train_step"):
            a, b = malloc[key]["step_ms"], bfc[key]["step_ms"]
            times, ratio = (f"{a:.0f} ms", f"{b:.0f} ms"), b / a
            faults = (malloc[key]["page_faults_per_step"], bfc[key]["page_faults_per_step"])
        else:
            a, b = malloc[key]["env_steps_per_second"], bfc[key]["env_steps_per_second"]
            times, ratio = (f"{a:.1f} env steps/s", f"{b:.1f} env steps/s"), a / b
            faults = (malloc[key]["page_faults_per_env_step"], bfc[key]["page_faults_per_env_step"])
        memory = (f"{malloc[key]['max_rss_mib']:.0f} MiB", f"{bfc[key]['max_rss_mib']:.0f} MiB")
        cells = [label, *times, f"{ratio:.2f}", *(f"{f:,.0f}" for f in faults), *memory]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _spread(runs: list[dict], key: str) -> str:
    values = [run[key] for run in runs]
    return f"{min(values):.0f}-{max(values):.0f} ms"


def test_the_cpu_allocator_table_is_the_report():
    bench = load_benchmark("cpu_allocator")
    report = _report("cpu_allocator_avx2.json")
    assert report["commit"] and report["command"] == (
        "python benchmarks/cpu_allocator.py --out benchmarks/reference/cpu_allocator_avx2.json"
    )
    assert all(len(runs) == report["rounds"] for s in report["runs"].values() for runs in s.values())
    assert bench.summarise(report["runs"]) == {"table": report["table"], "ratios": report["ratios"]}
    flat = " ".join(SPEED.split())
    for row in _allocator_rows(report):
        assert row in SPEED
    ratios = report["ratios"]
    assert (
        f"the SiT step was **{ratios['sit_over_vit_step_time_malloc']:.2f}x** the ViT's under malloc and "
        f"**{ratios['sit_over_vit_step_time_bfc']:.2f}x** under the arena" in flat
    )
    vit = {s: _spread(report["runs"][s]["vit_train_step"], "step_ms") for s in ("malloc", "bfc")}
    assert f"(ViT under malloc {vit['malloc']}, under the arena {vit['bfc']})" in flat


def test_the_procgen_throughput_under_each_cpu_allocator_is_the_reports():
    flat = " ".join(SPEED.split())
    earlier = _report("speed_ppo_procgen.json")
    sit, cnn = (earlier["runs"][m]["env_steps_per_second"] for m in ("sit", "impala_cnn"))
    ratio = earlier["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert ratio == pytest.approx(cnn / sit, rel=0.01)
    assert f"SiT {sit:.0f} env steps/s against IMPALA-CNN's {cnn:.0f}, 1/{ratio:.1f}" in flat
    assert f"than in `speed_ppo_procgen.json` ({sit:.0f} and {cnn:.0f})" in flat
    assert f"and not on that one (1/{ratio:.1f})" in flat
    for name, label in (("malloc", "glibc `malloc`"), ("bfc", "BFC arena (the default)")):
        report = _report(f"speed_ppo_procgen_avx2_{name}.json")
        setting = report["machine"]["env"]["TF_CPU_ALLOCATOR_USE_BFC"]
        assert setting == ("false" if name == "malloc" else "true")
        assert report["command"].startswith(
            f"TF_CPU_ALLOCATOR_USE_BFC={setting} python benchmarks/ppo_throughput.py"
        )
        speeds = report["env_steps_per_second"]
        assert speeds == {run["model"]: run["summary"]["env_steps_per_second"] for run in report["runs"]}
        slower = speeds["impala_cnn"] / speeds["sit"]
        assert slower < 6  # the speed issue's 1/6, as the page says
        assert f"| {label} | {speeds['sit']:.1f} | {speeds['impala_cnn']:.1f} | 1/{slower:.2f} |" in SPEED
    intel = _report("speed_ppo_procgen_avx512bf16.json")
    assert (
        intel["command"].startswith("python benchmarks/ppo_throughput.py --out ")
        and "no AMX" in intel["machine_note"]
    )
    speeds = intel["env_steps_per_second"]
    assert speeds == {run["model"]: run["summary"]["env_steps_per_second"] for run in intel["runs"]}
    slower = intel["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert slower == pytest.approx(speeds["impala_cnn"] / speeds["sit"]) and slower > 6  # the 1/6 is missed
    assert (
        f"command at {intel['commit'][:7]}, beside two PPO runs at nice 10 "
        "(`benchmarks/reference/speed_ppo_procgen_avx512bf16.json`): "
        f"SiT {speeds['sit']:.1f} env steps/s, IMPALA-CNN {speeds['impala_cnn']:.1f}, **1/{slower:.2f}**, "
        f"with {intel['runs'][0]['summary']['train_fraction']:.0%} and "
        f"{intel['runs'][1]['summary']['train_fraction']:.0%} of the wall time in the train steps"
    ) in flat
    assert [run["model"] for run in intel["runs"]] == ["sit", "impala_cnn"]


def test_the_op_profile_with_the_native_kernels_is_the_report():
    report = _report("op_profile_train_amx_native.json")
    assert report["settings"]["stage"] == "train" and report["settings"]["model"] == "sit"
    share = {row["op"]: row["share"] for row in report["op_types"]}
    gradients = share["SitWindowAttentionGrad"] + share["SitClassTokenAttentionGrad"]
    ops = share["SitWindowAttention"] + share["SitClassTokenAttention"] + gradients
    assert (
        f"an op profile at {report['commit'][:7]} (`benchmarks/reference/op_profile_train_amx_native.json`; "
        "summed op time per call, which exceeds the wall time because two ops run side by side) gives the "
        f"four native ops {ops:.1%} (their two gradients {gradients:.1%}), the 2-D "
        f"matmuls of the projections {share['_MklMatMul']:.1%}, transposes {share['_MklTranspose']:.1%} and "
        f"element-wise products {share['Mul']:.1%}"
    ) in _flat_page("speed.md")


def test_procgen_throughput_with_the_native_kernels_is_the_report():
    report = _report("speed_ppo_procgen_native_amx.json")
    assert report["command"] == (
        "python benchmarks/ppo_throughput.py --out benchmarks/reference/speed_ppo_procgen_native_amx.json"
    )
    sit, cnn = report["runs"]
    assert (sit["model"], cnn["model"]) == ("sit", "impala_cnn")
    speeds = report["env_steps_per_second"]
    slower = report["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert slower == pytest.approx(speeds["impala_cnn"] / speeds["sit"]) and slower > 6  # the 1/6 is missed
    assert (
        f"the same command at {report['commit'][:7]} with nothing else running "
        "(`benchmarks/reference/speed_ppo_procgen_native_amx.json`): "
        f"SiT {speeds['sit']:.1f} env steps/s, IMPALA-CNN {speeds['impala_cnn']:.1f}, **1/{slower:.2f}**, "
        f"with {sit['summary']['train_fraction']:.0%} and {cnn['summary']['train_fraction']:.0%} of the wall "
        f"time in the train steps and {sit['summary']['policy_fraction']:.0%} of the SiT's in its policy's "
        "forward passes"
    ) in _flat_page("speed.md")
    assert f"it needs the SiT's run about {slower / 6 - 1:.0%} faster again" in _flat_page("speed.md")
    drivers = _report("speed_ppo_procgen_native_drivers_amx.json")
    speeds_after = drivers["env_steps_per_second"]
    ratio = drivers["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert drivers["runs"][0]["model"] == "sit" and ratio > 6  # still short of the 1/6
    assert (
        f"The same command at {drivers['commit'][:7]} "
        "(`benchmarks/reference/speed_ppo_procgen_native_drivers_amx.json`): "
        f"SiT {speeds_after['sit']:.1f} env steps/s, IMPALA-CNN {speeds_after['impala_cnn']:.1f}, "
        f"**1/{ratio:.2f}**, the SiT's policy share down to "
        f"{drivers['runs'][0]['summary']['policy_fraction']:.0%}. One run each: the IMPALA-CNN's "
        f"{speeds['impala_cnn']:.0f} and {speeds_after['impala_cnn']:.0f} env steps/s"
    ) in _flat_page("speed.md")


def test_procgen_throughput_with_more_of_the_step_native_is_the_report():
    report = _report("speed_ppo_procgen_native_fused_amx.json")
    out = "benchmarks/reference/speed_ppo_procgen_native_fused_amx.json"
    assert report["command"] == f"python benchmarks/ppo_throughput.py --out {out}"
    assert report["commit"] == _report("speed_encoders_native_fused_amx.json")["commit"]
    sit, cnn = report["runs"]
    assert (sit["model"], cnn["model"]) == ("sit", "impala_cnn")
    speeds = report["env_steps_per_second"]
    slower = report["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert slower == pytest.approx(speeds["impala_cnn"] / speeds["sit"]) and slower < 6  # the 1/6 is met
    assert (
        f"the same command at {report['commit'][:7]} "
        "(`benchmarks/reference/speed_ppo_procgen_native_fused_amx.json`): "
        f"SiT {speeds['sit']:.1f} env steps/s, IMPALA-CNN {speeds['impala_cnn']:.1f}, **1/{slower:.2f}**, "
        f"with {sit['summary']['train_fraction']:.0%} of the SiT's wall time in its train steps and "
        f"{sit['summary']['policy_fraction']:.0%} in its policy's forward passes. So the speed issue's "
        f"1/6 is met in this run, by a margin ({6 / slower - 1:.0%})"
    ) in _flat_page("speed.md")
    repeat = _report("speed_ppo_procgen_native_fused_amx_repeat.json")
    again = repeat["env_steps_per_second"]
    ratio = repeat["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert (
        repeat["command"]
        == f"python benchmarks/ppo_throughput.py --out {out.replace('.json', '_repeat.json')}"
    )
    assert ratio == pytest.approx(again["impala_cnn"] / again["sit"]) and ratio < 6
    assert (
        f"A second run of the same command at {repeat['commit'][:7]} (the same kernels; "
        "`benchmarks/reference/speed_ppo_procgen_native_fused_amx_repeat.json`) measured SiT "
        f"{again['sit']:.1f} and IMPALA-CNN {again['impala_cnn']:.1f} env steps/s, **1/{ratio:.2f}**."
    ) in _flat_page("speed.md")


def _suite_report(name: str):
    """``benchmarks/suite_resources.py``, the summary ``suite_resources_avx2_<name>.json`` and its records,
    after checking that the summary is the one the script makes from the records."""
    bench = load_benchmark("suite_resources")
    summary = _report(f"suite_resources_avx2_{name}.json")
    records = bench.read_report(REFERENCE / f"suite_resources_avx2_{name}.jsonl.gz")
    assert bench.summarise(records, summary["slow_s"], 5) == {
        "workers": summary["workers"],
        "gc_fraction_of_wall": summary["gc_fraction_of_wall"],
    }
    return bench, summary, records


def test_the_suite_after_the_float16_moves_and_the_allocator_is_the_report():
    bench, summary, records = _suite_report("bfc")
    flat = _flat_page("testing.md")
    tests = sum(w["tests"] for w in summary["workers"].values())
    assert summary["note"].endswith(f"{tests} passed in 30:59") and summary["tests_commit"] == "7f7f5f1"
    assert f"passed {tests} tests in 30 min 59 s" in flat
    gw0, gw1 = (summary["workers"][w] for w in ("gw0", "gw1"))
    assert f"summed to {gw0['wall_s']:.0f} s and {gw1['wall_s']:.0f} s" in flat
    assert f"CPU time to {gw0['cpu_s']:.0f} s and {gw1['cpu_s']:.0f} s" in flat
    # The moved cases' times in the run before, and that they left the default suite.
    before = {r["test"].split("@")[0]: r["wall_s"] for r in bench.read_report(
        REFERENCE / "suite_resources_avx2_after.jsonl.gz"
    )}  # fmt: skip
    moved = {
        "tests/test_supervised.py::test_mixed_precision_training_keeps_float32_variables_and_logits"
        "[sit-mixed_float16]": "supervised epoch, {:.0f} s,",
        "tests/test_mixed_precision_groups_neurons.py::test_saved_model_and_h5_weights_round_trips_keep_the_"
        "outputs[mixed_float16-vit]": "round trips, {:.0f} s and",
        "tests/test_mixed_precision_groups_neurons.py::test_saved_model_and_h5_weights_round_trips_keep_the_"
        "outputs[mixed_float16-group_transformer]": "and {:.0f} s) now run with `make test-large`",
    }
    now = {r["test"].split("@")[0] for r in records}
    for test, quoted in moved.items():
        assert quoted.format(before[test]) in flat and test not in now


def test_the_xla_runtime_table_is_the_two_reports():
    bench = load_benchmark("xla_runtime")
    first, second = _report("xla_runtime_avx2_before_bias.json"), _report("xla_runtime_avx2.json")
    flat = " ".join(SPEED.split())
    assert f"the first at {first['commit'][:7]}" in flat
    for report in (first, second):
        assert report["command"].startswith("python benchmarks/xla_runtime.py --out runs/")
        assert report["load_note"] and report["rounds"] == 3
        assert all(len(runs) == 3 for runs in report["runs"].values())
        assert bench.summarise(report["runs"]) == report["table"]
        assert 9 * 60 < report["wall_seconds"] < 13 * 60  # "about 11 minutes"
    for name in first["table"]:
        cells = [
            f"{report['table'][name][f'{runtime}_xla_over_graph']:.2f}"
            for report in (first, second)
            for runtime in ("thunk", "legacy")
        ]
        row = f"| `{name}` | " + " | ".join(cells) + " |"
        assert row.replace("| 0.73 |", "| **0.73** |") in SPEED, row
    blocks = [r["table"][n] for r in (first, second) for n in ("conv2d_3x3", "window_attention")]
    assert max(b["legacy_xla_over_graph"] for b in blocks) < 1.3  # "within 1.3x of the graph's speed"
    assert all(1.8 < b["thunk_xla_over_graph"] < 2.2 for b in blocks)  # "about 2x"
    sit = second["table"]["sit_small"]
    assert f"SiT-small's XLA step is {sit['legacy_xla_over_graph']:.2f}x its graph step" in flat
    assert f"{sit['thunk_xla_over_graph']:.2f}x under the thunk runtime" in flat
    chiral = second["table"]["sit_chiral"]
    both = f"({chiral['legacy_xla_over_graph']:.2f}x and {chiral['thunk_xla_over_graph']:.2f}x)"
    assert f"under both {both}" in flat
    before = [first["table"][n]["legacy_xla_over_graph"] for n in ("sit_small", "sit_chiral")]
    assert f"{min(before):.1f}-{max(before):.1f}x their graph steps under the legacy runtime" in flat


def test_the_encoder_xla_ratios_under_each_runtime_are_the_reports():
    thunk, legacy = _report("speed_encoders_avx2_bfc.json"), _report("speed_encoders_avx2_legacy_xla.json")
    assert legacy["environment"]["env"]["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false"
    assert "XLA_FLAGS" not in thunk["environment"]["env"] and legacy["load_note"]
    assert legacy["command"] == (
        "python benchmarks/encoders.py --models sit,siet,vit,impala_cnn --precisions float32 --no_profile "
        "--out runs/speed_encoders_avx2_legacy_xla.json"
    )
    flat = " ".join(SPEED.split())
    assert f"at {legacy['commit'][:7]} beside a training run" in flat
    ratio = {
        name: report["ratios"]["xla_over_graph"] for name, report in (("thunk", thunk), ("legacy", legacy))
    }
    for model in ("sit", "siet", "vit", "impala_cnn"):
        cells = [f"{ratio[r][model]['train_step']:.2f}" for r in ("thunk", "legacy")]
        assert f"| `{model}` | {cells[0]} | {cells[1]} |" in SPEED
    cnn = [f"{ratio[r]['impala_cnn']['train_step']:.2f}x" for r in ("thunk", "legacy")]
    assert f"The IMPALA-CNN's XLA step went from {cnn[0]} its graph step to {cnn[1]}" in flat
    forward = [f"{ratio['legacy'][m]['forward_batch']:.2f}x" for m in ("sit", "siet")]
    assert f"faster with XLA ({forward[0]} and {forward[1]})" in flat


def test_the_encoder_xla_ratios_with_the_gather_form_are_the_report():
    """docs/speed.md, "Triangle sums under XLA": the 64x64 train steps before and after the gather form."""
    before, after = _report("speed_encoders_avx2_legacy_xla.json"), _report("speed_encoders_avx2_gather.json")
    assert after["command"] == before["command"].replace("legacy_xla", "gather")
    assert after["commit"].startswith("7e1f9f5") and after["load_note"]
    assert after["environment"]["env"]["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false"
    assert "`benchmarks/reference/speed_encoders_avx2_gather.json`" in SPEED
    ratio = [report["ratios"]["xla_over_graph"] for report in (before, after)]
    for model in ("sit", "siet", "vit", "impala_cnn"):
        cells = " | ".join(f"{r[model]['train_step']:.2f}" for r in ratio)
        assert f"| `{model}` | {cells} |" in SPEED
    sits = [f"{r['sit']['train_step']:.2f}x and {r['siet']['train_step']:.2f}x" for r in ratio]
    flat = " ".join(SPEED.split())
    assert f"The SiT's and the SieT's XLA steps, {sits[0]} their graph steps before, are now {sits[1]}" in (
        flat
    )
    assert max(r["train_step"] for r in ratio[1].values()) < 1  # every encoder faster with XLA


def test_what_jit_compile_auto_chooses_after_the_dense_stem_and_the_gathers_is_the_report():
    """docs/speed.md, "Triangle sums under XLA": auto's choices at 797a097 against the legacy-runtime run."""
    before, after = _report("jit_compile_auto_legacy.json"), _report("jit_compile_auto_gather.json")
    assert after["command"] == "python benchmarks/jit_compile_auto.py --out runs/jit_compile_auto_gather.json"
    assert (
        after["commit"].startswith("797a097") and after["load_note"] and after["margin"] == before["margin"]
    )
    assert "`benchmarks/reference/jit_compile_auto_gather.json`" in SPEED
    _check_jit_compile_auto_rows(after)
    old = {r["gin_file"]: r for r in before["configs"]}
    new = {r["gin_file"]: r for r in after["configs"]}
    flat = " ".join(SPEED.split())
    chiral, procgen = "configs/minigrid/lavacrossing_sit_chiral.gin", "configs/procgen/caveflyer_sit.gin"
    assert (
        f"The chiral SiT's XLA step is {new[chiral]['xla_over_graph']:.2f}x its graph step "
        f"({old[chiral]['xla_over_graph']:.2f}x in `jit_compile_auto_legacy.json`), "
        "so `auto` trains it with XLA; "
        f"the Procgen SiT's is {new[procgen]['xla_over_graph']:.2f}x ({old[procgen]['xla_over_graph']:.2f}x)"
    ) in flat
    assert (new[chiral]["choice"], old[chiral]["choice"], new[procgen]["choice"]) == ("on", "off", "off")
    others = [g for g in new if new[g]["choice"] != old[g]["choice"] and new[g]["encoder"] != "sit"]
    gaps = [abs(new[g]["xla_over_graph"] - old[g]["xla_over_graph"]) for g in others]
    assert f"The choice also changed for {len(others)} configs whose code did not change" in flat
    assert f"ratios {min(gaps):.2f}-{max(gaps):.2f} apart between the two runs" in flat


def test_where_the_sit_train_step_goes_on_the_avx2_host_is_the_profile():
    """docs/speed.md, "Where the SiT's train step goes now": op-type and stage shares of op_profile.py."""
    report = _report("op_profile_train_avx2.json")
    assert report["command"] == (
        "python benchmarks/op_profile.py --model sit --stage train --batch 96 --calls 3 --top 30 "
        "--out runs/op_profile_train_avx2.json"
    )
    assert report["commit"].startswith("1a035c5") and report["load_note"]
    assert "avx512" not in report["cpu_flags"].split(";")[0]
    types = {row["op"]: 100 * row["share"] for row in report["op_types"]}
    nodes = report["nodes"]
    mixing = [
        n for n in nodes if "local_gsa/MatMul_4" in n["node"] or "local_gsa/block_1/gsa/MatMul_1" in n["node"]
    ]
    triangle = [n for n in nodes if "local_gsa/MatMul_6" in n["node"]]
    assert len(mixing) == 6 and len(triangle) == 3  # forward and both gradients of each product
    assert all(n["shapes"].startswith("(192, 6144, 17)") for n in mixing)
    assert all(n["shapes"].startswith("(4, 6144, 289)") for n in triangle)
    mixing_share, triangle_share = (100 * sum(n["share"] for n in group) for group in (mixing, triangle))
    (matrix_gradient,) = [n for n in triangle if n["shapes"].endswith("-> (4, 289, 289)")]
    flat = " ".join(SPEED.split())
    assert (
        f"batched matmuls take {types['BatchMatMulV2']:.1f}% of the summed op time, 2-D matmuls "
        f"{types['MatMul']:.1f}%, transposes {types['Transpose']:.1f}%. Two stages of the local GSA hold "
        f"{mixing_share + triangle_share:.1f}% of it"
    ) in flat
    assert f"in both blocks) {mixing_share:.1f}%, and the triangle matrix" in flat
    assert f"per head) {triangle_share:.1f}%, of which its gradient for the matrix" in flat
    assert f"matrix per head, is {100 * matrix_gradient['share']:.1f}%." in flat


def test_where_the_sit_train_step_goes_on_the_avx512_host_is_the_profile():
    """docs/speed.md: the same profile on the Intel AVX-512 host, where TensorFlow runs oneDNN's kernels."""
    report = _report("op_profile_train_avx512.json")
    assert report["command"] == (
        "python benchmarks/op_profile.py --model sit --stage train --out runs/op_profile_train_avx512.json"
    )
    assert (report["settings"]["batch"], report["settings"]["image_size"]) == (96, 64) and report["load_note"]
    assert "avx512f" in report["cpu_flags"] and "TF_ENABLE_ONEDNN_OPTS" not in report["environment"]["env"]
    eigen = {row["op"] for row in _report("op_profile_train_avx2.json")["op_types"]}
    assert "TF_ENABLE_ONEDNN_OPTS" not in _report("op_profile_train_avx2.json")["environment"]["env"]
    assert not any(op.startswith("_Mkl") for op in eigen) and "BatchMatMulV2" in eigen
    types = {row["op"]: 100 * row["share"] for row in report["op_types"]}
    nodes = report["nodes"]
    mixing = [
        n for n in nodes if "local_gsa/MatMul_4" in n["node"] or "local_gsa/block_1/gsa/MatMul_1" in n["node"]
    ]
    triangle = [n for n in nodes if "local_gsa/MatMul_6" in n["node"]]
    assert len(mixing) == 6 and len(triangle) == 3
    (matrix_gradient,) = [n for n in triangle if n["shapes"].endswith("-> (4, 289, 289)")]
    mixing_share, triangle_share = (100 * sum(n["share"] for n in group) for group in (mixing, triangle))
    flat = " ".join(SPEED.split())
    assert (
        f"Batched matmuls take {types['_MklBatchMatMulV2']:.1f}% of the summed op time there, 2-D matmuls "
        f"{types['_MklMatMul']:.1f}%, `Mul` {types['Mul']:.1f}%, transposes "
        f"{types['_MklTranspose']:.1f}%; the per-feature graph mixing {mixing_share:.1f}% and the "
        f"triangle matrix {triangle_share:.1f}% (its gradient for the matrix "
        f"{100 * matrix_gradient['share']:.1f}%)."
    ) in flat


def test_onednn_against_eigen_on_the_avx512_host_is_the_reports():
    """docs/speed.md, "oneDNN or Eigen": the SiT and ViT train steps with oneDNN kernels on and off."""
    runs = {name: _report(f"speed_encoders_avx512_{name}.json") for name in ("onednn", "eigen")}
    for name, setting in (("onednn", "1"), ("eigen", "0")):
        assert runs[name]["command"].startswith(
            f"TF_ENABLE_ONEDNN_OPTS={setting} python benchmarks/encoders.py "
        )
        assert runs[name]["environment"]["env"]["TF_ENABLE_ONEDNN_OPTS"] == setting
    step = {
        (name, model): report["models"][model]["timings"]["train_step"]["graph"]["median_ms"]
        for name, report in runs.items()
        for model in ("sit", "vit")
    }
    over_vit = {
        name: report["ratios"]["train_step_over_vit"]["sit"]["graph"] for name, report in runs.items()
    }
    flat = " ".join(SPEED.split())
    assert (
        f"took {step['onednn', 'sit']:.0f} ms with oneDNN and {step['eigen', 'sit']:.0f} ms with Eigen "
        f"({step['eigen', 'sit'] / step['onednn', 'sit']:.2f}x), the ViT's {step['onednn', 'vit']:.0f} and "
        f"{step['eigen', 'vit']:.0f} ms ({step['eigen', 'vit'] / step['onednn', 'vit']:.2f}x): SiT / ViT "
        f"**{over_vit['onednn']:.2f}x** with oneDNN, **{over_vit['eigen']:.2f}x** with Eigen."
    ) in flat
    assert over_vit["onednn"] < over_vit["eigen"]
    capped, rerun = (
        _report(f"speed_encoders_avx512_{name}.json") for name in ("onednn_isa_avx2", "eigen_rerun")
    )
    assert capped["command"].startswith("ONEDNN_MAX_CPU_ISA=AVX2 TF_ENABLE_ONEDNN_OPTS=1 python benchmarks/")
    assert rerun["command"].startswith(
        "TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/encoders.py --models sit,vit "
    )
    sit, vit = (
        [r["models"][m]["timings"]["train_step"]["graph"]["median_ms"] for r in (capped, rerun)]
        for m in ("sit", "vit")
    )
    ratios = [r["ratios"]["train_step_over_vit"]["sit"]["graph"] for r in (capped, rerun)]
    assert (
        f"SiT {sit[0]:.0f} against {sit[1]:.0f} ms, ViT {vit[0]:.0f} against {vit[1]:.0f} ms, SiT / ViT "
        f"**{ratios[0]:.2f}x** against **{ratios[1]:.2f}x**: with AVX2 instructions alone" in flat
    )
    assert sit[0] < sit[1] and vit[0] > vit[1]


def test_the_map_level_graph_convolution_under_xla_is_the_report():
    """docs/speed.md, "Map-level graph is opt-in": xla_cpu_ops.py's graph_conv_map, legacy runtime."""
    report = _report("xla_cpu_ops_graph_conv_map.json")
    assert report["command"] == (
        "python benchmarks/xla_cpu_ops.py --names graph_conv_map,graph_conv_stem "
        "--out runs/xla_cpu_ops_graph_conv_map.json"
    )
    assert report["commit"].startswith("c2eefbf") and report["load_note"] and report["batch"] == 256
    assert report["environment"]["env"]["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false"
    conv_map, stem = (report["results"][n]["xla_over_graph"] for n in ("graph_conv_map", "graph_conv_stem"))
    flat = " ".join(SPEED.split())
    assert f"takes {conv_map:.2f}x its graph step, where the chiral stem's dense form takes {stem:.2f}x" in (
        flat
    )
    assert conv_map > 1 and stem < 0.9  # auto's 10% margin: the map keeps graph mode, the stem compiles


def test_the_attention_neurons_lstm_gates_under_xla_are_the_reports():
    """docs/speed.md, "The AttentionNeuron's LSTM under XLA": the two configs before and after lstm_gates."""
    before = _report("jit_compile_auto_lstm_gates_before.json")
    after = _report("jit_compile_auto_lstm_gates.json")
    for name, report, commit in [("_before", before, "6340093"), ("", after, "632ff7b")]:
        assert report["command"] == (
            "python benchmarks/jit_compile_auto.py --gin_files "
            "configs/cartpole/swingup_harder_pi.gin,configs/dmc/cartpole_swingup_pi.gin "
            f"--out benchmarks/reference/jit_compile_auto_lstm_gates{name}.json"
        )
        assert report["commit"].startswith(commit) and report["load_note"] and report["wall_time_s"] > 0
        assert f"`benchmarks/reference/jit_compile_auto_lstm_gates{name}.json`" in SPEED
        assert {r["encoder"] for r in report["configs"]} == {"attention_neuron"}
        _check_jit_compile_auto_rows(report)
    old = [r["xla_over_graph"] for r in before["configs"]]
    new = [r["xla_over_graph"] for r in after["configs"]]
    assert min(old) > 1 and max(new) < 1
    flat = " ".join(SPEED.split())
    assert f"their ratios after the change, {new[0]:.2f} and {new[1]:.2f}, differ" in flat
    assert f"where it was {old[0]:.2f}x and {old[1]:.2f}x slower" in flat
    near_margin = after["configs"][1]["choice"] == "off"
    assert ("the second sits just short of `auto`'s 10% margin" in flat) == near_margin


def test_what_jit_compile_auto_chooses_under_the_legacy_runtime_is_the_report():
    thunk, legacy = _report("jit_compile_auto.json"), _report("jit_compile_auto_legacy.json")
    assert legacy["environment"]["env"]["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false"
    assert (
        legacy["command"] == "python benchmarks/jit_compile_auto.py --out runs/jit_compile_auto_legacy.json"
    )
    assert legacy["load_note"] and legacy["margin"] == thunk["margin"]
    flat = " ".join(SPEED.split())
    assert f"at {legacy['commit'][:7]}, beside a training run" in flat
    _check_jit_compile_auto_rows(legacy)
    chosen = {r["gin_file"] for r in legacy["configs"] if r["choice"] == "on"}
    assert chosen == {
        "configs/demo/sit.gin",
        "configs/minigrid/lavacrossing_sit_small.gin",
        "configs/minigrid/lavacrossing_vit.gin",
        "configs/dmc/cartpole_swingup_mlp.gin",
    }
    before = {r["gin_file"]: r["xla_over_graph"] for r in thunk["configs"]}
    after = {r["gin_file"]: r["xla_over_graph"] for r in legacy["configs"]}
    images = [f for f in after if before[f] and not f.startswith(("configs/dmc", "configs/cartpole"))]
    assert all(after[f] < before[f] for f in images) and len(images) == 9
    chiral = after["configs/minigrid/lavacrossing_sit_chiral.gin"]
    assert f"the chiral SiT's XLA step is still {chiral:.2f}x its graph step" in flat
    procgen, pi = "configs/procgen/caveflyer_impala_cnn.gin", "configs/cartpole/swingup_harder_pi.gin"
    assert f"(the Procgen IMPALA-CNN's from {before[procgen]:.2f} to {after[procgen]:.2f})" in flat
    assert f"The AttentionNeuron's rose, from {before[pi]:.2f} to {after[pi]:.2f}" in flat


def test_the_suite_before_and_after_the_pattern_and_the_moves_is_the_reports():
    """docs/testing.md's "A pattern built in milliseconds": the runs at 8803740 and fcc84f0, the orbit test's
    time before, the seven moved tests' summed time before and their absence after, and the table's row."""
    _, before, before_records = _suite_report("8803740")
    bench, after, records = _suite_report("fcc84f0")
    flat = _flat_page("testing.md")
    for summary, commit in ((before, "8803740"), (after, "fcc84f0")):
        assert summary["tests_commit"] == commit
        walls = [summary["workers"][w]["wall_s"] for w in ("gw0", "gw1")]
        assert f"the workers' wall time {walls[0]:.0f} s and {walls[1]:.0f} s" in flat
    tests = sum(w["tests"] for w in before["workers"].values())
    assert before["note"].endswith(f"{tests} passed in 29:04")
    assert f"passed {tests} tests in 29 min 4 s (`suite_resources_avx2_8803740.json`)" in flat
    drac = "drac_runs_s_and_fs_through_each_network_at_once_with_the_same_loss_and_gradients[True-passes1]"
    failed = [r for r in records if r["test"].split("@")[0].endswith(drac)]
    tests = sum(w["tests"] for w in after["workers"].values())
    assert len(failed) == 1 and after["note"].endswith(f"1 failed, {tests - 1} passed in 27:54")
    assert "took 27 min 54 s (`suite_resources_avx2_fcc84f0.json`, commit fcc84f0)" in flat
    assert f"{tests - 1} tests passed and one failed" in flat
    slowest = [r["wall_s"] for r in before_records if r["wall_s"] >= 20]
    summed = sum(r["wall_s"] for r in before_records)
    assert f"the {len(slowest)} tests of 20 s or more held {sum(slowest):.0f} s of the {summed:.0f} s" in flat
    rows = {r["test"].split("@")[0]: r["wall_s"] for r in before_records}
    orbit = "tests/test_native.py::test_given_orbit_gradients_the_ops_average_the_graphs_gradient_over_the_"
    assert f"(`tests/test_native.py`, {rows[orbit + 'turns_orbits_of_pairs']:.0f} s)" in flat
    bench_tests = "tests/test_encoder_check_and_bench.py::test_"
    moved = [
        bench_tests + "projection_gradients_times_both_ways_of_each_model",
        bench_tests + "kernel_gradient_transpose_times_the_gather_the_fold_and_the_graph",
        bench_tests + "skip_embedding_gradient_times_the_summed_product_the_matmul_and_the_graph",
        bench_tests + "native_ops_times_each_kernel_forward_and_backward",
        bench_tests + "op_profile_under_xla_times_each_hlo_instruction_and_names_its_op",
        bench_tests + "op_profile_one_op_at_a_time_gives_tensorflow_one_inter_op_thread",
        "tests/test_xla_host_threads.py::test_the_benchmark_times_the_graph_step_and_the_xla_step_on_both_pools",
    ]
    now = {r["test"].split("@")[0] for r in records}
    assert all(test in rows and test not in now for test in moved)
    assert bench_tests + "skip_embedding_gradient_traces_both_forms" in now
    assert f"which took {sum(rows[t] for t in moved):.0f} s summed in that run" in flat
    tests = sum(w["tests"] for w in after["workers"].values())
    assert f"{tests} tests, a 2-core AMD EPYC" in flat  # the table's row


def test_the_suite_after_the_benchmark_moves_is_the_report():
    bench, summary, records = _suite_report("benchmark_moves")
    flat = _flat_page("testing.md")
    tests = sum(w["tests"] for w in summary["workers"].values())
    assert summary["note"].endswith(f"{tests} passed in 30:34") and summary["tests_commit"] == "40a41ba"
    gw0, gw1 = (summary["workers"][w] for w in ("gw0", "gw1"))
    assert (
        f"passed {tests} tests in 30 min 34 s (`suite_resources_avx2_benchmark_moves.json`, commit 40a41ba), "
        f"the workers' wall time {gw0['wall_s']:.0f} s and {gw1['wall_s']:.0f} s, "
        f"{100 * summary['gc_fraction_of_wall']:.1f}% of it in garbage collections"
    ) in flat
    moved = [
        "tests/test_rl_benchmarks.py::test_minigrid_rotation_quick[lavagap]",
        "tests/test_rl_benchmarks.py::test_atari100k_tiny_run",
        "tests/test_rl_benchmarks.py::test_pi_cartpole_distill_records_episodes_cut_at_the_time_limit_and_tests_"
        "whole_ones",
        "tests/test_ppo_diagnostics.py::test_noise_phase_quick_trains_on_noise_and_measures_every_iteration",
        "tests/test_pi_cartpole_batched_eval.py::test_a_reshuffle_gives_each_episode_an_order_of_its_own",
        "tests/test_dqn_training.py::test_atari_dqn_short_run",
    ]
    before = {r["test"].split("@")[0]: r["wall_s"] for r in bench.read_report(
        REFERENCE / "suite_resources_avx2_legacy_xla.jsonl.gz"
    )}  # fmt: skip
    now = {r["test"].split("@")[0] for r in records}
    assert all(test in before and test not in now for test in moved)
    assert f"in the run above the six took {sum(before[t] for t in moved):.0f} s summed" in flat


def test_the_suite_under_the_legacy_xla_runtime_is_the_report():
    bench, summary, records = _suite_report("legacy_xla")
    flat = _flat_page("testing.md")
    tests = sum(w["tests"] for w in summary["workers"].values())
    assert summary["note"].endswith(f"{tests} passed in 33:19") and summary["tests_commit"] == "be7d356"
    assert (
        f"passed {tests} tests in 33 min 19 s (`suite_resources_avx2_legacy_xla.json`, commit be7d356)"
        in flat
    )
    before = {r["test"]: r for r in bench.read_report(REFERENCE / "suite_resources_avx2_bfc.jsonl.gz")}
    now = {r["test"]: r for r in records}

    def compiles(test: str) -> bool:
        name = test.split("::", 1)[1].lower()
        return (
            "xla" in name
            or "jit" in name
            or "compiled" in name
            or test.startswith("tests/test_jit_compile.py")
        )

    xla = [t for t in set(before) & set(now) if compiles(t)]
    summed = [sum(run[t]["wall_s"] for t in xla) for run in (now, before)]
    assert (
        f"the {len(xla)} tests that compile with XLA took {summed[0]:.0f} s summed against {summed[1]:.0f} s"
        in flat
    )
    annealed = now["tests/test_ppo_training.py::test_annealed_learning_rate_decays_to_zero"]
    assert f"(99 s, {annealed['gc_s']:.0f} s of it in one garbage collection" in flat
    assert (
        round(annealed["wall_s"]) == 99
        and annealed["gc_s"] == summary["workers"]["gw1"]["gc_in_slow_collections_s"]
    )
    bf16 = now[
        "tests/test_supervised.py::test_mixed_precision_training_keeps_float32_variables_and_logits[sit-mixed_bfloat16]"
    ]
    assert round(bf16["wall_s"]) == 75 and bf16["cpu_s"] > 0.85 * bf16["wall_s"]  # "busy on the CPU"


def test_the_small_sits_seed0_part_is_quoted_as_a_run_that_did_not_learn():
    """docs/results.md: SiT-small seed 0's best training success at the 250k marks and its sampling N1."""
    part = json.loads((REFERENCE / "table4_lavacrossing_parts" / "sit_small_seed0.json").read_text())
    (run,) = part["runs"]
    best = max(success for _, success in part["training_curve"]["success_every_250k"])
    assert part["training_curve"]["first_step_with_success_at_least"]["0.5"] is None
    page = _flat_page("results.md")
    assert f"It did not learn: training success at most {best:.2f} at any 250k mark" in page
    sampling = run["sampling"]["train: easy"]["success_rate"]
    assert f"sampling succeeds on {sampling:.2f} of the N1 episodes." in page


def test_the_forward_prior_on_the_siet_readouts_hard_seed_is_quoted_as_measured():
    """docs/lavacrossing.md: the readout without triangle sums with the forward prior, seed 1 to 1M steps."""
    report, run = _evaluated_1m_run("lavacrossing_siet_no_triangles_forward_seed1_1m.json", 1)
    assert "--gin_bindings 'ppo.initial_action_probabilities = (0.7, 0.1, 0.1, 0.1)'" in run["command"]
    points = {p["env_steps"]: p["success"] for p in run["curve"]["curve"]}

    def at(steps: int) -> float:
        return points[min(points, key=lambda s: abs(s - steps))]

    half = run["curve"]["first_step_with_success_at_least"]["0.5"]
    assert half <= min(s for s, v in points.items() if v >= 0.5)  # found among every log, not only the marks
    cnn = [
        json.loads((REFERENCE / "table4_lavacrossing_parts" / f"cnn_seed{seed}.json").read_text())[
            "training_curve"
        ]["first_step_with_success_at_least"]["0.5"]
        for seed in (0, 1, 2)
    ]
    assert min(cnn) <= half <= max(cnn)  # "within the range of the CNN's seeds"
    unprimed = _report("lavacrossing_siet_readout_seed1_1m.json")
    assert max(p["success"] for p in unprimed["curve"]["curve"]) <= 0.02
    greedy, sampling = run["greedy"], run["sampling"]
    page = _flat_page("lavacrossing.md")
    assert (
        f"training success {at(300_000):.2f} at 0.3M steps, {at(500_000):.2f} at 0.5M and {at(800_000):.2f} "
        f"at 0.8M; **first 0.5 at {half:,} steps** (the CNN's three Table 4 parts, without a prior: "
        f"{min(cnn):,} to {max(cnn):,}), {at(1_000_000):.2f} at 1M."
    ) in page
    assert (
        f"Greedy at 1M, 200 episodes a row: N1 {greedy['train: easy']['success_rate']:.2f}, rotated "
        f"{greedy['rotations average']['success_rate']:.2f}, "
        f"N2 {greedy['train: medium']['success_rate']:.2f}, N3 {greedy['hard']['success_rate']:.2f}; "
        f"sampling N1 {sampling['train: easy']['success_rate']:.2f}."
    ) in page
    assert (
        f"first 0.5 training success at {half:,} steps, {at(1_000_000):.2f} at 1M, greedy N1 and rotated "
        f"{greedy['train: easy']['success_rate']:.2f}"
    ) in LAVACROSSING_SHORT
    assert greedy["train: easy"] == greedy["rotations average"]  # invariant to the quarter turns


def _continued_3m_run(name: str, seed: int) -> tuple[dict, dict]:
    """A 1M-step run continued to 3M: its command and wall times agree with the 1M report's; evaluated."""
    run = _report(name)["runs"][f"seed {seed}"]
    first = _report(name.replace("_3m.json", "_1m.json"))["runs"][f"seed {seed}"]
    assert run["command"] == first["command"].replace("1000000", "3000000").replace("_1m.json", "_3m.json")
    walls = _report(name)["train_wall_s"]
    assert walls["first_process_to_1m"] == first["train_wall_s"]
    assert walls["total"] == pytest.approx(sum(v for k, v in walls.items() if k != "total"), abs=0.2)
    assert run["evaluated"] and run["num_episodes"] == 200 and run["curve"]["last"]["env_steps"] >= 3_000_000
    return run, first


def test_the_siet_readout_without_triangle_sums_to_3m_steps_is_quoted_as_measured():
    """docs/lavacrossing.md: seed 0 without a prior, continued to 3M steps, beside SiT-1 and the CNN."""
    run, _ = _continued_3m_run("lavacrossing_siet_no_triangles_3m.json", 0)
    points = {p["env_steps"]: p["success"] for p in run["curve"]["curve"]}
    late = [v for s, v in points.items() if s >= 2_000_000]
    reached = run["curve"]["first_step_with_success_at_least"]
    column = PAPERS["sit_icml2024"]["our_configs"]["siet_rotation_pooled_no_triangles"]["table_4"]
    greedy, sampling = run["greedy"], run["sampling"]
    cells = _greedy_cells(greedy, column)
    cnn = [
        json.loads((REFERENCE / "table4_lavacrossing_parts" / f"cnn_seed{seed}.json").read_text())["runs"][0][
            "greedy"
        ]
        for seed in (0, 1, 2)
    ]
    n2, n3 = ([part[row]["success_rate"] for part in cnn] for row in ("train: medium", "hard"))
    page = _flat_page("lavacrossing.md")
    last = run["curve"]["last"]["success"]
    assert (
        f"training success first 0.5 at {reached['0.5']:,} steps, 0.8 at {reached['0.8']:,} and 0.9 at "
        f"{reached['0.9']:,}, but {min(late):.2f}-{max(late):.2f} at the 50k marks from 2M steps "
        f"({last:.2f} at 3M): "
        "it learns the training levels and does not hold 0.9."
    ) in page
    assert max(late) < 0.9
    assert f"beside the paper's {column} column (mean rewards): {cells}." in page
    assert (
        f"Sampling: N1 {sampling['train: easy']['success_rate']:.2f}, rotations "
        f"{sampling['rotations average']['success_rate']:.2f}."
    ) in page
    assert (
        greedy["train: easy"]["success_rate"] >= 0.9 and greedy["rotations average"]["success_rate"] >= 0.85
    )
    assert f"(the CNN's parts: N2 {min(n2):.2f}-{max(n2):.2f}, N3 {min(n3):.2f}-{max(n3):.2f} greedy)" in page
    assert (
        f"training success first 0.9 at {reached['0.9']:,} steps and {last:.2f} at 3M; greedy N1 "
        f"{greedy['train: easy']['success_rate']:.2f} and rotated "
        f"{greedy['rotations average']['success_rate']:.2f}, "
        f"N2 {greedy['train: medium']['success_rate']:.2f}"
    ) in LAVACROSSING_SHORT


def _quoted_3m_prior_run(
    run: dict, page: str, config: str = "siet_rotation_pooled_no_triangles"
) -> tuple[dict, list[float], float]:
    """A 3M-step run of ``configs/minigrid/lavacrossing_<config>.gin``: its greedy cells, sampling sentence
    and In-short line as the docs quote them; returns its first steps at 0.5 / 0.8 / 0.9, its marks from 2M,
    its last."""
    reached = run["curve"]["first_step_with_success_at_least"]
    late = [p["success"] for p in run["curve"]["curve"] if p["env_steps"] >= 2_000_000]
    last = run["curve"]["last"]["success"]
    column = PAPERS["sit_icml2024"]["our_configs"][config]["table_4"]
    greedy, sampling = run["greedy"], run["sampling"]
    assert f"beside the paper's {column} column (mean rewards): {_greedy_cells(greedy, column)}." in page
    assert (
        f"Sampling: N1 {sampling['train: easy']['success_rate']:.2f}, rotations "
        f"{sampling['rotations average']['success_rate']:.2f}."
    ) in page
    assert (
        f"training success first 0.9 at {reached['0.9']:,} steps and {last:.2f} at 3M; greedy N1 "
        f"{greedy['train: easy']['success_rate']:.2f} and rotated "
        f"{greedy['rotations average']['success_rate']:.2f}, "
        f"N2 {greedy['train: medium']['success_rate']:.2f}"
    ) in LAVACROSSING_SHORT
    return reached, late, last


def test_the_forward_prior_on_seed_1_to_3m_steps_is_quoted_as_measured():
    """docs/lavacrossing.md: seed 1 with the forward prior continued to 3M steps."""
    run, first = _continued_3m_run("lavacrossing_siet_no_triangles_forward_seed1_3m.json", 1)
    page = _flat_page("lavacrossing.md")
    reached, late, last = _quoted_3m_prior_run(run, page)
    assert reached["0.5"] == first["curve"]["first_step_with_success_at_least"]["0.5"]  # one run, continued
    unprimed = _report("lavacrossing_siet_no_triangles_3m.json")["runs"]["seed 0"]["curve"]
    before = unprimed["first_step_with_success_at_least"]
    assert (
        f"training success first 0.5 at {reached['0.5']:,} steps, 0.8 at {reached['0.8']:,} and 0.9 at "
        f"{reached['0.9']:,} (seed 0 without the prior, above: {before['0.5']:,}, {before['0.8']:,} and "
        f"{before['0.9']:,}), {min(late):.2f}-{max(late):.2f} at the 50k marks from 2M steps "
        f"({last:.2f} at 3M)."
    ) in page


FAILURE_RUNS = {
    # failure report -> (3M report, seed, the docs' row label, the command's --out)
    "lavacrossing_failures_siet_no_triangles_seed0_3m.json": (
        "lavacrossing_siet_no_triangles_3m.json",
        0,
        "seed 0, no prior",
        "runs/failures_nt_seed0_3m.json",
    ),
    "lavacrossing_failures_siet_no_triangles_forward_seed0_3m.json": (
        "lavacrossing_siet_no_triangles_forward_seed0_3m.json",
        0,
        "seed 0, forward prior",
        "runs/failures_nt_fwd_seed0_3m.json",
    ),
    "lavacrossing_failures_siet_no_triangles_forward_seed1_3m.json": (
        "lavacrossing_siet_no_triangles_forward_seed1_3m.json",
        1,
        "seed 1, forward prior",
        "runs/failures_nt_fwd_seed1_3m.json",
    ),
}


def _failure_cells(rows: dict) -> str:
    """A failure table's cells: goal, lava (within the first 10 steps) and time limit on N2, then N3."""
    cells = []
    for row in ("train: medium", "hard"):
        s = rows[row]
        cells += [
            f"{s['success']:.2f}",
            f"{s['lava']:.2f} ({s['lava_within_early_steps']:.2f})",
            f"{s['time_limit']:.2f}",
        ]
    return " | ".join(cells)


def _loop_cells(summary: dict) -> str:
    """A loop table's cells: time-limit episodes, cycle periods 1, 2, longer and none, and at the edge."""
    loops = summary["time_limit_loops"]
    periods, at_edge = loops["cycle_periods"], loops["cycles_facing_the_edge"]
    assert loops["time_limit_episodes"] == round(200 * summary["time_limit"]) == sum(periods.values())
    longer = sum(count for period, count in periods.items() if period not in ("1", "2", "none"))
    cells = [loops["time_limit_episodes"], periods.get("1", 0), periods.get("2", 0), longer]
    cells += [periods.get("none", 0), sum(at_edge.values())]
    return " | ".join(str(c) for c in cells)


def test_how_the_readout_without_triangle_sums_fails_on_n2_is_quoted_as_measured():
    """docs/lavacrossing.md, "How the readout without triangle sums fails on N2": the table and its ranges."""
    page = _flat_page("lavacrossing.md")
    counts = {}
    for name, (evaluated, seed, label, out) in FAILURE_RUNS.items():
        report = _report(name)
        run = _report(evaluated)["runs"][f"seed {seed}"]
        root = (
            run["command"].split("--root ")[1].split()[0] + f"/siet_rotation_pooled_no_triangles_seed{seed}"
        )
        assert report["command"] == (
            f"python benchmarks/lavacrossing_failures.py --root_dir {root} --num_episodes 200 --out {out}"
        )
        assert report["commit"] and report["num_episodes"] == 200 and report["early_steps"] == 10
        for kind in ("greedy", "sampling"):
            rows = report["results"][kind]
            for row, summary in rows.items():
                assert summary["episodes"] == 200 and summary["max_steps"] == 324
                assert summary["success"] + summary["lava"] + summary["time_limit"] == pytest.approx(1.0)
                assert len(summary["lava_steps"]) == round(200 * summary["lava"])
                if kind == "greedy":  # the evaluation's episodes: the same success rates
                    assert summary["success"] == run["greedy"][row]["success_rate"]
            assert f"| {label} | {kind} | {_failure_cells(rows)} |" in page
            counts[label, kind] = rows
    assert "MiniGrid's time limit of 324 steps" in page

    def span(kinds: tuple[str, ...], row: str, key: str) -> str:
        values = [rows[row][key] for (_, kind), rows in counts.items() if kind in kinds]
        return f"{min(values):.2f}-{max(values):.2f}"

    both, greedy, sampling, n2 = ("greedy", "sampling"), ("greedy",), ("sampling",), "train: medium"
    for text in (
        f"On N1 the six policies reach the goal in {span(both, 'train: easy', 'success')} of the episodes.",
        f"more often they go round until the time limit ({span(greedy, n2, 'time_limit')})",
        f"less often they walk into lava ({span(greedy, n2, 'lava')}), most of it within the first 10 steps",
        f"The sampling policies rarely reach the time limit ({span(sampling, n2, 'time_limit')})",
        f"end in lava instead ({span(sampling, n2, 'lava')})",
    ):
        assert text in page, text
    assert len(counts) == 6
    for (_, kind), rows in counts.items():
        if kind == "greedy":  # "most of it within the first 10 steps"; "more often ... less often"
            assert rows[n2]["lava_within_early_steps"] > rows[n2]["lava"] / 2
            assert rows[n2]["time_limit"] > rows[n2]["lava"]


def test_how_the_grid_readout_fails_on_n2_is_quoted_as_measured():
    """docs/lavacrossing.md, "How the SiT that reads its local grid fails on N2": the tables, the reading."""
    page = _flat_page("lavacrossing.md")
    greedy = {}
    for seed in (0, 1, 2):
        report = _report(f"lavacrossing_failures_sit_grid_readout_forward_seed{seed}_3m.json")
        run = _report(f"lavacrossing_sit_grid_readout_forward_seed{seed}_3m.json")["runs"][f"seed {seed}"]
        assert report["command"] == (
            "python benchmarks/lavacrossing_failures.py --root_dir "
            f"runs/table4_ro_forward/sit_grid_readout_seed{seed} --num_episodes 200 "
            f"--out runs/failures_grid_fwd_seed{seed}_3m.json"
        )
        for kind in ("greedy", "sampling"):
            rows = report["results"][kind]
            if kind == "greedy":  # the evaluation's episodes: the same success rates
                assert all(s["success"] == run["greedy"][row]["success_rate"] for row, s in rows.items())
            assert f"| seed {seed} | {kind} | {_failure_cells(rows)} |" in page
        greedy[seed] = report["results"]["greedy"]
        for row, short in (("train: medium", "N2"), ("hard", "N3")):
            assert f"| seed {seed} | {short} | {_loop_cells(greedy[seed][row])} |" in page
    n2 = {seed: rows["train: medium"] for seed, rows in greedy.items()}
    assert n2[0]["lava"] > n2[0]["time_limit"] and n2[0]["lava_within_early_steps"] > n2[0]["lava"] / 2
    assert n2[1]["time_limit"] >= 3 * n2[1]["lava"]  # "three times as often"
    assert n2[2]["time_limit"] >= 2 * n2[2]["lava"]  # seed 2: "twice as often"
    for seed in (1, 2):
        loops = n2[seed]["time_limit_loops"]
        short = loops["cycle_periods"].get("1", 0) + loops["cycle_periods"].get("2", 0)
        assert short > loops["time_limit_episodes"] / 2  # "most of its loops are of period 1 or 2"
        assert sum(loops["cycles_facing_the_edge"].values()) > loops["time_limit_episodes"] / 2
    report = [_report(f"lavacrossing_failures_sit_grid_readout_forward_seed{s}_3m.json") for s in (0, 1, 2)]
    limits = [r["results"]["sampling"]["train: medium"]["time_limit"] for r in report]
    assert f"Sampling breaks the loops on every seed (time limit {min(limits):.2f}-{max(limits):.2f})" in page


def test_the_loops_at_the_edge_of_the_map_are_quoted_as_measured():
    """docs/lavacrossing.md, "The edge of the map": the loop table, its shares, the probe of the padding."""
    page = _flat_page("lavacrossing.md")
    shares = []
    for name, (_, _, label, _) in FAILURE_RUNS.items():
        report = _report(name)
        assert (
            report["commit"].startswith("8638d37")
            and "identical to the first run's" in report["provenance_note"]
        )
        for row, short in (("train: medium", "N2"), ("hard", "N3")):
            summary = report["results"]["greedy"][row]
            loops = summary["time_limit_loops"]
            periods, at_edge = loops["cycle_periods"], loops["cycles_facing_the_edge"]
            assert f"| {label} | {short} | {_loop_cells(summary)} |" in page
            assert at_edge["1"] == periods["1"]  # "every loop of period 1 is one"
            shares.append(sum(at_edge.values()) / loops["time_limit_episodes"])
    share_range = f"{100 * min(shares):.0f}-{max(shares):.0%}"
    assert f"So {share_range} of the loops pass through a state" in page
    assert f"{share_range} pass through a state in which the agent faces the edge" in LAVACROSSING_SHORT
    # The base rate: inner cells of the 7x7 grid and headings whose cell ahead lies outside.
    out = [
        (x + dx, y + dy) for x in range(7) for y in range(7) for dx, dy in ((1, 0), (0, 1), (-1, 0), (0, -1))
    ]
    facing = sum(not (0 <= a < 7 and 0 <= b < 7) for a, b in out)
    assert f"the agent faces the edge {facing} times in {len(out)} ({facing / len(out):.0%};" in page

    results = _probe_results()
    pair = functools.partial(_seed_pair, results)
    wall, zeros = ((pair(m, _held_out()), pair(m, _held_out("n2"))) for m in ("siet_nt_wall", "siet_nt"))
    assert (
        f"it scores {wall[0]} held-out and {wall[1]} on N2, against {zeros[0]} and {zeros[1]} "
        "with zero padding"
    ) in page
    assert results["siet_nt_wall", 0]["encoder_kwargs"]["border_value"] == 100 / 255
    starts = [results[model, 0] for model in ("siet_nt_2h_wall", "siet_nt_2h_elu", "siet_nt_2h_qk8")]
    assert {_held_out()(run) for run in starts} == {"0.33"}
    losses = " / ".join(f"{run['loss_last']:.2f}" for run in starts)
    assert f"(held-out 0.33 each, loss {losses} over the last 50 steps)" in page

    def last_loss(run: dict) -> str:
        return f"{run['loss_last']:.2f}"

    two, four = "siet_nt_2h_wall_centred", "siet_nt_wall_centred"
    assert (
        f"the 2-head readout scores {pair(two, _held_out())} held-out (loss {pair(two, last_loss)}; "
        f"`{two}`), against {pair('siet_nt_2h', _held_out())} without it, and the 4-head readout "
        f"{pair(four, _held_out())} (loss {pair(four, last_loss)}; `{four}`), against "
        f"{pair('siet_nt_wall', _held_out())}"
    ) in page
    assert all(results[four, seed]["encoder_kwargs"]["input_offset"] == 100 / 255 for seed in (0, 1))
    plain, walled = "sit_grid_readout_ppo", "sit_grid_readout_ppo_wall"
    assert (
        f"scores {pair(plain, _held_out())} held-out in the probe, and {pair(walled, _held_out())} with the "
        "wall padding"
    ) in page
    for model, config in ((plain, "sit_grid_readout"), (walled, "sit_grid_readout_wall")):
        for seed in (0, 1):  # the probe's encoder is the one the PPO config trains
            assert results[model, seed]["encoder_kwargs"] == _gin_encoder_kwargs(f"lavacrossing_{config}.gin")
    accuracy = {model: results[model, 0]["heldout_greedy_accuracy"]["all"] for model in (plain, walled)}
    assert accuracy[walled] < accuracy[plain]  # "the padding costs seed 0 some accuracy"
    longer = _report("lavacrossing_probe_sit_grid_readout_wall_9k.json")
    assert longer["command"] == (
        f"python benchmarks/lavacrossing_probe.py --models {plain},{walled} --seeds 0 --num_states 20000 "
        "--num_heldout 2000 --steps 9000 --out runs/probe_sit_grid_readout_wall_9k.json"
    )
    runs = {run["model"]: run for run in longer["results"]}
    fits = " / ".join(f"{runs[m]['train_greedy_accuracy']['all']:.2f}" for m in (plain, walled))
    held = [_held_out()(runs[m]) for m in (plain, walled)]
    assert (
        f"both fit their training states (greedy {fits}) and the gap on the held-out states stays "
        f"({held[0]} without the padding, {held[1]} with it)"
    ) in page
    for name in (
        "siet_wall_seed0",
        "siet_wall_seed1",
        "siet_2h_starts",
        "siet_wall_centred",
        "sit_grid_readout_wall",
    ):
        report = _report(f"lavacrossing_probe_{name}.json")
        assert report["command"].startswith("python benchmarks/lavacrossing_probe.py --models ")
        assert report["provenance_note"]


def test_the_wall_padded_grid_readouts_cost_is_quoted_as_measured():
    """docs/lavacrossing.md, "The edge of the map" and In short: 1.34x, beside the 2-head readout's rerun."""
    page = _flat_page("lavacrossing.md")
    models = "sit_small,sit_grid_readout_wall,siet_rotation_pooled_no_triangles_2heads"
    sps = _avx512_cost_medians(
        "lavacrossing_cost_grid_readout_wall_avx512.json", models, "runs/cost_grid_wall_2h_avx512.json"
    )
    grid, two_heads = (sps["sit_small"] / sps[m] for m in models.split(",")[1:])
    own = _cost_medians(_report("lavacrossing_cost_no_triangles_2heads_avx512.json"))
    own_ratio = own["sit_small"] / own["siet_rotation_pooled_no_triangles_2heads"]
    assert grid <= 1.5
    for text in (
        f"costs **{grid:.2f}x** SiT-small per environment step on the AVX-512 host "
        f"({sps['sit_grid_readout_wall']:.1f} against {sps['sit_small']:.1f} env steps/s;",
        f"In the same run the 2-head readout measures {two_heads:.2f}x, against {own_ratio:.2f}x in its own "
        "run",
    ):
        assert text in page, text
    assert abs(two_heads - own_ratio) <= 0.2  # "move by about 0.2 from run to run"
    short = f"The SiT that reads its local grid, which costs {grid:.2f}x SiT-small on the AVX-512 host"
    assert short in LAVACROSSING_SHORT


PROBE_CUTS = {
    "siet_rotation_pooled_m4_corners_sharp_standardized": "SieT readout",
    "siet_nt": "without triangle sums",
    "siet_nt_m1": "without triangle sums, one stem map per channel",
    "siet_nt_2h": "without triangle sums, 2 heads",
    "siet_lite": "all three cuts (the cheaper readout)",
    "siet_lite_fc64": "all three cuts, and a dense layer of 64",
}


def test_the_cheaper_readouts_cuts_in_the_probe_are_quoted_as_measured():
    """docs/lavacrossing.md, "The cheaper readout's cuts in the imitation probe": table, prose and cost."""
    results = _probe_results()
    pair = functools.partial(_seed_pair, results)
    page = _flat_page("lavacrossing.md")
    reports = ("siet_ppo_config", "siet_cuts", "siet_lite")
    for name in reports:
        report = _report(f"lavacrossing_probe_{name}.json")
        assert report["command"].startswith("python benchmarks/lavacrossing_probe.py --models ")
        assert report["command"].endswith(
            "--seeds 0,1 --num_states 20000 --num_heldout 2000 --steps 3000 "
            f"--out runs/probe_{name.replace('siet_lite', 'siet_lite_fc64')}.json"
        )
        assert report["commit"].startswith("48e5456") and report["provenance_note"]

    def last_loss(run: dict) -> str:
        return f"{run['loss_last']:.2f}"

    for model, label in PROBE_CUTS.items():
        cells = (pair(model, _held_out()), pair(model, _held_out("n2")), pair(model, last_loss))
        row = f"| {label} | " + " | ".join(cells) + " |"
        assert row in page, row
        assert all(results[model, seed]["loss_window_steps"] == 50 for seed in (0, 1))
    assert (
        f"(The CNN: {pair('cnn', _held_out())} held-out, `benchmarks/reference/lavacrossing_probe.json`.)"
        in page
    )
    stuck = [run for (model, _), run in results.items() if model in PROBE_CUTS and run["loss_last"] > 0.9]
    assert len(stuck) == 3 and {(_held_out()(r), _held_out("turn_only")(r)) for r in stuck} == {
        ("0.33", "0.00")
    }
    assert (
        f"its loss is still {last_loss(results['siet_nt_2h', 0])} over the last 50 of 3,000 steps, and it "
        "scores 0.33 held-out and 0.00 on the left/right-only states, the same as every run here that stayed "
        "on the plateau"
    ) in page
    full, cuts = "siet_rotation_pooled_m4_corners_sharp_standardized", ("siet_nt", "siet_nt_m1", "siet_nt_2h")
    nt, m1, two_heads = (pair(model, _held_out()) for model in cuts)
    assert (
        f"the readout without triangle sums scores as the full readout does (held-out {nt} against "
        f"{pair(full, _held_out())}, seeds 0 / 1), one stem map per colour channel costs accuracy ({m1}) and "
        f"2 heads leave seed 0 on the plateau ({two_heads})"
    ) in LAVACROSSING_SHORT
    assert f"give both failures ({pair('siet_lite', _held_out())})" in page
    assert f"does not lift them ({pair('siet_lite_fc64', _held_out())})" in page

    cost = _report("lavacrossing_cost_lite_avx512.json")
    assert cost["command"] == (
        "python benchmarks/lavacrossing_cost.py --models sit_small,siet_rotation_pooled_lite --repeats 3 "
        "--env_steps 10240 --out runs/cost_lite_avx512_48e5456.json"
    )
    assert (
        cost["commit"].startswith("48e5456")
        and "avx512f" in cost["cpu_flags"]
        and "no amx" in cost["cpu_flags"]
    )
    sps = _cost_medians(cost)
    ratio = sps["sit_small"] / sps["siet_rotation_pooled_lite"]
    assert ratio <= 1.5
    before = [
        _cost_medians(_report(name))
        for name in (
            "lavacrossing_cost_siet_no_triangles_avx512.json",
            "lavacrossing_cost_siet_no_triangles_avx512_after.json",
        )
    ]
    no_triangles = sorted(s["sit_small"] / s["siet_rotation_pooled_no_triangles"] for s in before)
    assert (
        f"the cheaper readout costs **{ratio:.2f}x** SiT-small per environment step "
        f"({sps['siet_rotation_pooled_lite']:.1f} against {sps['sit_small']:.1f} env steps/s;"
    ) in page
    assert (
        f"where the readout without triangle sums costs {no_triangles[0]:.2f}-{no_triangles[1]:.2f}x." in page
    )


def test_pooling_the_turns_in_one_frame_is_quoted_as_measured():
    """docs/lavacrossing.md, "Pooling the turns in one frame": its probe against the max over the turns."""
    report = _report("lavacrossing_probe_siet_turn_attention.json")
    assert report["command"].startswith(
        "python benchmarks/lavacrossing_probe.py --models siet_nt_turn_attention "
    )
    assert report["results"][0]["encoder_kwargs"]["turn_pooling"] == "attention"
    pair = functools.partial(_seed_pair, _probe_results())
    attention, plain = "siet_nt_turn_attention", "siet_nt"
    page = _flat_page("lavacrossing.md")
    assert (
        f"scores {pair(attention, _held_out())} held-out and {pair(attention, _held_out('n2'))} on N2, "
        f"against {pair(plain, _held_out())} and {pair(plain, _held_out('n2'))} with each unit's max: "
        "no gain over the two seeds"
    ) in page
    assert _held_out()(_probe_results()[attention, 0]) < _held_out()(_probe_results()[plain, 0])


def _gin_encoder_kwargs(config: str) -> dict:
    """``train_eval.encoder_kwargs`` of ``configs/minigrid/<config>`` (a Python dict literal)."""
    text = (ROOT / "configs" / "minigrid" / config).read_text()
    return ast.literal_eval(text.split("train_eval.encoder_kwargs =", 1)[1].strip())


def test_the_readout_without_triangle_sums_and_with_2_heads_costs_what_the_docs_say():
    """docs/lavacrossing.md, "The cheaper readout's cuts in the imitation probe": two cuts within 1.5x."""
    model = "siet_rotation_pooled_no_triangles_2heads"
    sps = _avx512_cost_medians(
        "lavacrossing_cost_no_triangles_2heads_avx512.json",
        f"sit_small,{model}",
        "runs/cost_nt_2h_avx512.json",
    )
    ratio = sps["sit_small"] / sps[model]
    assert ratio <= 1.5
    page = _flat_page("lavacrossing.md")
    assert (
        f"costs **{ratio:.2f}x** SiT-small on the same host ({sps[model]:.1f} against {sps['sit_small']:.1f} "
        "env steps/s;"
    ) in page
    assert (
        f"without triangle sums and with 2 heads, the readout costs {ratio:.2f}x SiT-small on the AVX-512 "
        "host"
    ) in LAVACROSSING_SHORT
    kwargs = _gin_encoder_kwargs("lavacrossing_siet_rotation_pooled_no_triangles_2heads.gin")
    assert (kwargs["triangles"], kwargs["num_heads"], kwargs["stem_depth_multiplier"]) == (0, 2, 4)


def test_the_forward_prior_on_seed_0_to_3m_steps_is_quoted_as_measured():
    """docs/lavacrossing.md: seed 0 with the forward prior to 3M steps, beside seed 1 and the same seed
    without the prior."""
    name = "lavacrossing_siet_no_triangles_forward_seed0_3m.json"
    report = _report(name)
    run = report["runs"]["seed 0"]
    seed1 = _report("lavacrossing_siet_no_triangles_forward_seed1_3m.json")["runs"]["seed 1"]
    assert run["command"] == seed1["command"].replace("--seeds 1", "--seeds 0").replace(
        "seed1_3m", "seed0_3m"
    )
    walls = report["train_wall_s"]
    assert len(walls) == 6 and walls["total"] == pytest.approx(sum(walls.values()) - walls["total"], abs=0.2)
    for commit in ("042a770", "a00e92d", "3695933", "ee2d4de", "48e5456"):
        assert commit in report["status"]
    assert run["commit"] == "48e5456" and run["evaluated"] and run["num_episodes"] == 200
    assert run["curve"]["last"]["env_steps"] >= 3_000_000
    page = _flat_page("lavacrossing.md")
    reached, late, last = _quoted_3m_prior_run(run, page)
    primed = seed1["curve"]["first_step_with_success_at_least"]
    unprimed = _report("lavacrossing_siet_no_triangles_3m.json")["runs"]["seed 0"]["curve"]
    before = unprimed["first_step_with_success_at_least"]
    assert (
        f"training success first 0.5 at {reached['0.5']:,} steps, 0.8 at {reached['0.8']:,} and 0.9 at "
        f"{reached['0.9']:,} (the same seed without the prior: {before['0.5']:,}, {before['0.8']:,} and "
        f"{before['0.9']:,}; seed 1 with it: {primed['0.5']:,}, {primed['0.8']:,} and {primed['0.9']:,}), "
        f"{min(late):.2f}-{max(late):.2f} at the 50k marks from 2M steps ({last:.2f} at 3M)."
    ) in page
    assert f"{walls['total'] / 3600:.1f} hours of training in five processes" in page

    n2 = [
        r["greedy"]["train: medium"]["success_rate"]
        for r in (run, _report("lavacrossing_siet_no_triangles_3m.json")["runs"]["seed 0"], seed1)
    ]
    assert n2[0] < n2[1] < n2[2]
    assert (
        f"{n2[0]:.2f} greedy at 3M, against {n2[1]:.2f} for the same seed without it (seed 1 with it: "
        f"{n2[2]:.2f})"
    ) in page
    assert reached["0.9"] < before["0.9"] and primed["0.9"] < before["0.9"]  # "both seeds ... sooner"


def test_the_grid_readout_with_the_prior_is_quoted_as_measured():
    """docs/lavacrossing.md: the SiT that reads its local grid, with the forward prior, on seeds 0 and 1 while
    they train, beside the CNN with and without the prior and the readout without triangle sums."""
    name = "lavacrossing_sit_grid_readout_forward_partial.json"
    report = _report(name)
    runs = [report["runs"][f"seed {seed}"] for seed in (0, 1)]
    resume = json.loads((ROOT / "benchmarks" / "resume" / "index.json").read_text())
    for seed, run in enumerate(runs):
        assert f"--models sit_grid_readout --seeds {seed} " in run["command"]
        assert "'ppo.initial_action_probabilities = (0.7, 0.1, 0.1, 0.1)'" in run["command"]
        assert run["command"].endswith(
            f"--out runs/table4_ro_forward/sit_grid_readout_forward_seed{seed}_3m.json"
        )
        key = f"table4_ro_forward__sit_grid_readout_seed{seed}"
        if key in resume:  # still training: the resume point goes on with the same command
            assert resume[key]["command"] == run["command"]
        walls = run["train_wall_s"]
        assert walls["total"] == pytest.approx(sum(walls.values()) - walls["total"], abs=0.2)
        assert (
            max(int(k.rsplit("_", 1)[1]) for k in walls if k != "total") == run["curve"]["last"]["env_steps"]
        )
    reached = [run["curve"]["first_step_with_success_at_least"] for run in runs]
    after = [
        [p["success"] for p in run["curve"]["curve"] if p["env_steps"] > first["0.9"]]
        for run, first in zip(runs, reached, strict=True)
    ]
    cnn_prior = _report("lavacrossing_forward_prior_cnn_seed0_1m.json")["curve"][
        "first_step_with_success_at_least"
    ]
    cnn_parts = [
        _report(f"table4_lavacrossing_parts/cnn_seed{seed}.json")["training_curve"][
            "first_step_with_success_at_least"
        ]
        for seed in (0, 1, 2)
    ]
    cnn_09 = [part["0.9"] for part in cnn_parts]
    no_triangles = [
        _report(f"lavacrossing_siet_no_triangles_forward_seed{seed}_3m.json")["runs"][f"seed {seed}"][
            "curve"
        ]["first_step_with_success_at_least"]["0.9"]
        for seed in (0, 1)
    ]
    without = _report("lavacrossing_sit_grid_readout_partial.json")["runs"]
    assert max(p["success"] for run in without.values() for p in run["curve"]["curve"]) <= 0.02

    lasts = [run["curve"]["last"]["env_steps"] for run in runs]
    hours = [run["train_wall_s"]["total"] / 3600 for run in runs]

    def pair(level: str) -> str:
        return f"{reached[0][level]:,} / {reached[1][level]:,}"

    page = _flat_page("lavacrossing.md")
    assert (
        f"training success first 0.5 at {pair('0.5')} steps, 0.8 at {pair('0.8')} and 0.9 at "
        f"{pair('0.9')} (seeds 0 / 1; `benchmarks/reference/{name}`, the curves of both runs while they "
        f"train toward 3M steps, at {lasts[0]:,} and {lasts[1]:,} steps, {hours[0]:.1f} and {hours[1]:.1f} "
        "hours of training). The CNN with the same prior (seed 0, "
        f"`benchmarks/reference/lavacrossing_forward_prior_cnn_seed0_1m.json`): {cnn_prior['0.5']:,}, "
        f"{cnn_prior['0.8']:,} and {cnn_prior['0.9']:,}; the CNN's three Table 4 parts, without a prior: "
        f"0.9 at {min(cnn_09):,} to {max(cnn_09):,} steps; the readout without triangle sums with the "
        f"prior: 0.9 at {no_triangles[0]:,} and {no_triangles[1]:,}."
    ) in page
    assert '(at most 0.02 training success; "A SiT that reads its local grid")' in page
    # "sooner than every CNN run", at every level
    for level in ("0.5", "0.8", "0.9"):
        assert max(r[level] for r in reached) < min([cnn_prior[level]] + [part[level] for part in cnn_parts])
    assert (
        f"{min(after[0]):.2f}-{max(after[0]):.2f} at the 50k marks after its first 0.9 on seed 0, "
        f"{min(after[1]):.2f}-{max(after[1]):.2f} on seed 1"
    ) in page
    assert min(min(a) for a in after) < 0.9  # "it does not hold 0.9 once reached"
    assert (
        f"training success first 0.9 at {reached[0]['0.9']:,} and {reached[1]['0.9']:,} steps (seeds 0 / 1), "
        f"where the CNN with the same prior took {cnn_prior['0.9']:,} (seed 0) and the CNN's Table 4 parts "
        f"without it {min(cnn_09):,} to {max(cnn_09):,}"
    ) in LAVACROSSING_SHORT


def test_the_first_step_rule_of_each_curve_report_is_stated_and_the_cnn_comparison_survives_it():
    """docs/lavacrossing.md, "How the first step at 0.9 is counted": every report with first steps says
    which count it used; the recomputed ones are the runs whose folders were still there."""
    rules = {}
    for path in sorted(REFERENCE.rglob("*.json")):
        text = path.read_text()
        if "first_step_with_success_at_least" in text:
            rules[path.relative_to(REFERENCE).as_posix()] = json.loads(text)["first_step_rule"].split(":")[0]
    assert set(rules.values()) == {"float32", "strict"}
    recomputed = {name for name, rule in rules.items() if rule == "float32"}
    assert {
        "lavacrossing_sit_grid_readout_forward_seed0_3m.json",
        "lavacrossing_sit_grid_readout_forward_seed1_3m.json",
        "lavacrossing_siet_no_triangles_forward_seed0_3m.json",
    } <= recomputed
    assert rules["lavacrossing_forward_prior_cnn_seed0_1m.json"] == "strict"
    sit_09 = [
        _report(f"lavacrossing_sit_grid_readout_forward_seed{seed}_3m.json")["runs"][f"seed {seed}"]["curve"][
            "first_step_with_success_at_least"
        ]["0.9"]
        for seed in (0, 1)
    ]
    cnn_08 = [
        _report(f"table4_lavacrossing_parts/cnn_seed{seed}.json")["training_curve"][
            "first_step_with_success_at_least"
        ]["0.8"]
        for seed in (0, 1, 2)
    ] + [
        _report("lavacrossing_forward_prior_cnn_seed0_1m.json")["curve"]["first_step_with_success_at_least"][
            "0.8"
        ]
    ]
    assert max(sit_09) < min(cnn_08)  # "reach 0.9 before any CNN run reaches 0.8"
    page = _flat_page("lavacrossing.md")
    assert "seeds 0 and 1 of the SiT that reads its local grid reach 0.9 before any CNN run reaches 0.8" in (
        page
    )
    # "its seed 2 reaches 0.9 after every CNN run, by either count": later even than the CNN's 0.91s
    seed2 = _report("lavacrossing_sit_grid_readout_forward_seed2_3m.json")["runs"]["seed 2"]["curve"]
    assert seed2["first_step_with_success_at_least"]["0.9"] > max(_every_cnn_first_09())
    assert "(its seed 2 reaches 0.9 after every CNN run, by either count)" in page
    for seed in (0, 1, 2):  # docs/results.md: the parts' 0.9 steps use the old count
        assert rules[f"table4_lavacrossing_parts/cnn_seed{seed}.json"] == "strict"
    assert "so each is the first step at 0.91 or more (`first_step_rule` in each part;" in _flat_page(
        "results.md"
    )


def _every_cnn_first_09() -> list[int]:
    """The first step at 0.9 of every CNN run on LavaCrossing's Table 4 protocol: its parts without the
    prior and with it, and the 1M-step run with the prior."""
    prior = _report("lavacrossing_forward_prior_cnn_seed0_1m.json")["curve"]
    return [
        json.loads(path.read_text())["training_curve"]["first_step_with_success_at_least"]["0.9"]
        for path in [*TABLE4_PARTS, *TABLE4_PRIOR_PARTS]
        if path.stem.startswith("cnn_seed")
    ] + [prior["first_step_with_success_at_least"]["0.9"]]


def test_the_grid_readouts_seed_2_to_3m_steps_is_quoted_as_measured():
    """docs/lavacrossing.md: seed 2 of the SiT that reads its local grid with the prior, to 3M steps, and
    issue 24's first bar on 3 of 3 seeds."""
    name = "lavacrossing_sit_grid_readout_forward_seed2_3m.json"
    report = _report(name)
    run = report["runs"]["seed 2"]
    assert "--models sit_grid_readout --seeds 2 " in run["command"]
    assert "'ppo.initial_action_probabilities = (0.7, 0.1, 0.1, 0.1)'" in run["command"]
    assert run["evaluated"] and run["num_episodes"] == 200 and run["curve"]["last"]["env_steps"] >= 3_000_000
    walls = report["train_wall_s"]
    assert walls["total"] == pytest.approx(sum(walls.values()) - walls["total"], abs=0.2)
    for commit in ("6680748", "dfd3265", "2ac7173"):
        assert commit in report["status"]
    page = _flat_page("lavacrossing.md")
    reached, late, last = _quoted_3m_prior_run(run, page, config="sit_grid_readout")
    every_cnn = _every_cnn_first_09()
    assert reached["0.9"] > max(every_cnn)  # "later than every CNN run"
    assert (
        f"Seed 2 to 3M steps (`benchmarks/reference/{name}`, {walls['total'] / 3600:.1f} hours of training): "
        f"training success first 0.5 at {reached['0.5']:,} steps, 0.8 at {reached['0.8']:,} and 0.9 at "
        f"{reached['0.9']:,}, later than every CNN run (their 0.9: {min(every_cnn):,} to "
        f"{max(every_cnn):,}), "
        f"{min(late):.2f}-{max(late):.2f} at the 50k marks from 2M steps ({last:.2f} at 3M)."
    ) in page
    # "the SiT meets issue 24's first bar on 3 of 3 seeds"
    for seed in (0, 1, 2):
        seed_report = _report(f"lavacrossing_sit_grid_readout_forward_seed{seed}_3m.json")
        seed_run = seed_report["runs"][f"seed {seed}"]
        assert seed_run["curve"]["first_step_with_success_at_least"]["0.9"] <= 3_000_000
        assert seed_run["greedy"]["train: easy"]["success_rate"] >= 0.9
        assert seed_run["greedy"]["rotations average"]["success_rate"] >= 0.85
    greedy = run["greedy"]
    assert (
        f"Its N2 ({greedy['train: medium']['success_rate']:.2f}) and N3 "
        f"({greedy['hard']['success_rate']:.2f}) stay below the paper's SiT-1"
    ) in page
    assert greedy["train: medium"]["mean_return"] < _paper("SiT-1", "train: medium")
    assert greedy["hard"]["mean_return"] < _paper("SiT-1", "hard")
    assert "the SiT meets issue 24's first bar on 3 of 3 seeds" in page
    assert "later than every CNN run, so 0.9 within 3M steps and the greedy bar on 3 of 3 seeds." in (
        LAVACROSSING_SHORT
    )


def test_the_grid_readouts_cost_without_the_wall_padding_is_quoted_as_measured():
    """docs/lavacrossing.md, "The SiT that reads its local grid, with the prior": its cost on its own."""
    sps = _avx512_cost_medians(
        "lavacrossing_cost_grid_readout_avx512.json",
        "sit_small,sit_grid_readout",
        "runs/cost_grid_avx512.json",
    )
    ratio = sps["sit_small"] / sps["sit_grid_readout"]
    assert ratio <= 1.5  # issue 24's limit
    assert (
        f"without it, **{ratio:.2f}x** ({sps['sit_grid_readout']:.1f} against {sps['sit_small']:.1f} env "
        "steps/s; `python benchmarks/lavacrossing_cost.py --models sit_small,sit_grid_readout --repeats 3 "
        "--env_steps 10240`, medians of 3 alternating repeats beside one PPO run; "
        "`benchmarks/reference/lavacrossing_cost_grid_readout_avx512.json`), within issue 24's 1.5x."
    ) in _flat_page("lavacrossing.md")


@pytest.mark.parametrize(
    ("seed", "commits"), [(0, ("bb3c33c", "686be8b")), (1, ("1ada91a", "686be8b", "dfd3265"))]
)
def test_the_grid_readout_with_the_prior_to_3m_steps_is_quoted_as_measured(
    seed: int, commits: tuple[str, ...]
):
    """docs/lavacrossing.md: the SiT that reads its local grid, with the forward prior, seeds 0 and 1 to 3M
    steps: the runs of the partial report, finished and evaluated."""
    name = f"lavacrossing_sit_grid_readout_forward_seed{seed}_3m.json"
    report = _report(name)
    run = report["runs"][f"seed {seed}"]
    partial = _report("lavacrossing_sit_grid_readout_forward_partial.json")["runs"][f"seed {seed}"]
    assert run["command"] == partial["command"]
    assert run["evaluated"] and run["num_episodes"] == 200 and run["curve"]["last"]["env_steps"] >= 3_000_000
    walls = report["train_wall_s"]
    assert walls["total"] == pytest.approx(sum(walls.values()) - walls["total"], abs=0.2)
    assert report["train_wall_command"].startswith("python benchmarks/run_log.py --log ")
    for commit in (*commits, run["commit"]):
        assert commit in report["status"]
    page = _flat_page("lavacrossing.md")
    reached, late, last = _quoted_3m_prior_run(run, page, config="sit_grid_readout")
    assert reached == partial["curve"]["first_step_with_success_at_least"]  # one run, continued
    assert (
        f"Seed {seed} to 3M steps (`benchmarks/reference/{name}`, {walls['total'] / 3600:.1f} hours of "
        f"training): {min(late):.2f}-{max(late):.2f} at the 50k marks from 2M steps ({last:.2f} at 3M)."
    ) in page


def test_the_vit_attention_speed_up_is_quoted_as_measured():
    """docs/speed.md, "The ViT baseline's attention": Keras' layer over the ViT's, at both sizes."""
    report = _report("vit_attention_avx512.json")
    assert report["commit"].startswith("d53681d") and report["repeats"] == 9
    assert report["command"] == (
        "python benchmarks/vit_attention.py --repeats 9 --out runs/vit_attention_avx512.json"
    )
    procgen, lavacrossing = report["results"]["procgen"], report["results"]["lavacrossing"]
    assert (procgen["batch"], procgen["tokens"], procgen["heads"]) == (96, 65, 4)
    assert (lavacrossing["batch"], lavacrossing["tokens"], lavacrossing["heads"]) == (256, 50, 8)
    page = _flat_page("speed.md")
    assert (
        f"is **{procgen['keras_over_vit']:.2f}x** faster at the Procgen ViT's size (batch 96, 65 tokens, "
        f"4 heads) and **{lavacrossing['keras_over_vit']:.2f}x** at the LavaCrossing ViT's"
    ) in page
    assert all(r["keras_over_vit"] > 1 for r in report["results"].values())


def test_procgen_throughput_on_the_amd_bf16_host_is_the_reports():
    """docs/speed.md's Procgen table of the AMD host with AVX512_BF16: one run before the batched kernel
    gradient, two after, each row its report."""
    header = "| commit | report | SiT | IMPALA-CNN | SiT / IMPALA-CNN |"
    section = SPEED[SPEED.index(header) :].split("\n\n")[0]
    rows = section.splitlines()[2:]
    names = [
        "speed_ppo_procgen_native_fused_amd_bf16.json",
        "speed_ppo_procgen_native_batched_grad_amd_bf16.json",
        "speed_ppo_procgen_native_batched_grad_amd_bf16_repeat.json",
        "speed_ppo_procgen_native_tiles_amd_bf16.json",
        "speed_ppo_procgen_skip_amd_bf16.json",
        "speed_ppo_procgen_skip_amd_bf16_repeat.json",
        "speed_ppo_procgen_skip_amd_bf16_repeat2.json",
    ]
    assert len(rows) == len(names)
    ratios, train = [], []
    for line, name in zip(rows, names, strict=True):
        report = _report(name)
        assert report["command"].startswith("python benchmarks/ppo_throughput.py --out ")
        assert report["command"].endswith(f"/{name}") and "no AMX" in report["host"]
        speeds = report["env_steps_per_second"]
        ratio = report["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
        assert ratio == pytest.approx(speeds["impala_cnn"] / speeds["sit"])
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        assert cells == [
            report["commit"][:7],
            f"`{name}`",
            f"{speeds['sit']:.1f}",
            f"{speeds['impala_cnn']:.1f}",
            f"1/{ratio:.2f}",
        ]
        ratios.append(ratio)
        train.append(report["runs"][0]["summary"]["train_fraction"])
    assert max(ratios) < 6 and min(ratios) < 4 < max(ratios)  # 1/6 in every run, 1/4 in some
    assert f"1/4, in {sum(r < 4 for r in ratios)} runs of {len(ratios)}" in " ".join(SPEED.split())
    flat = " ".join(SPEED.split())
    assert f"{100 * min(train):.0f}-{max(train):.0%} of the SiT's wall time in its train steps" in flat
    since_skip = [_report(name)["env_steps_per_second"]["sit"] for name in names[-3:]]
    assert f"and to {min(since_skip):.1f}-{max(since_skip):.1f} since the skip connections'" in flat
    assert max(ratios[-3:]) < 4 and "1/4 in each of their three runs" in flat


def test_without_avx512_no_kernels_is_the_reports():
    """docs/speed.md's "Without AVX-512, no kernels": an emulated AVX2 host's step and ops."""
    section = _section("### Without AVX-512, no kernels")
    flat = " ".join(section.split())
    encoders = _report("speed_encoders_native_avx2_build_amd_bf16.json")
    assert encoders["environment"]["env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and "x86-64-v3" in encoders["note"]
    steps = {
        m: encoders["models"][m]["timings"]["train_step"]["graph"]["median_ms"]
        for m in ("sit", "sit:builtin")
    }
    slower = encoders["ratios"]["train_step_native_over_builtin"]["sit"]["graph"]
    assert slower == pytest.approx(steps["sit"] / steps["sit:builtin"]) and slower > 1
    assert (
        f"measured the SiT's train step at {steps['sit']:.0f} ms through the kernels against "
        f"{steps['sit:builtin']:.0f} ms without them, **{slower:.2f}x** slower"
    ) in flat
    avx2 = _report("native_ops_avx2_build_amd_bf16.json")
    assert "x86-64-v3" in avx2["note"] and avx2["settings"]["batch"] == 96
    avx512 = [_report(f"native_ops_amd_bf16_after{tail}.json")["results"] for tail in ("", "_run2")]
    rows = section[section.index("| op (batch 96) |") :].split("\n\n")[0].splitlines()[2:]
    for line, case in zip(rows, ("first_block", "class_token", "global_grid", "layer_norm"), strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == f"`{case}`" and cells[1] == f"{avx2['results'][case]['backward']['median_ms']:.1f}"
        wide = sorted(f"{r[case]['backward']['median_ms']:.1f}" for r in avx512)
        assert cells[2] == (wide[0] if wide[0] == wide[1] else f"{wide[0]}-{wide[1]}")
        assert float(cells[1]) > float(wide[1])  # every op is slower in the AVX2 build


def test_the_global_grids_tiles_are_the_reports():
    """docs/speed.md's "Then the global grid's products in tiles": the ops alone (two runs at each commit)
    and three encoder runs at each, each number its report."""
    section = _section("### With the kernels on an AMD host with AVX512_BF16")
    section = section[section.index("**Then the global grid's products in tiles**") :]
    flat = " ".join(section.split())
    commits = {"before": "88bc5d6", "after": "c292bdc"}
    ops = {
        w: [_report(f"native_ops_amd_bf16_grid_tiles_{w}{t}.json") for t in ("", "_run2")] for w in commits
    }
    encoders = {
        w: [_report(f"speed_encoders_grid_tiles_amd_bf16_{w}{t}.json") for t in ("", "_run2", "_run3")]
        for w in commits
    }
    for when, commit in commits.items():
        for report in ops[when] + encoders[when]:
            assert report["commit"].startswith(commit) and "no AMX" in report["machine"]
        assert all(r["settings"]["batch"] == 96 for r in ops[when])
        assert all(r["settings"]["repeats"] == 9 for r in encoders[when])
    for case in ("first_block", "class_token", "global_grid", "layer_norm"):
        cells = [
            ", ".join(f"{r['results'][case]['backward']['median_ms']:.2f}" for r in ops[w]) for w in commits
        ]
        assert f"| `{case}` | {cells[0]} | {cells[1]} |" in section, case
    grid = {w: [r["results"]["global_grid"]["backward"]["median_ms"] for r in ops[w]] for w in commits}
    assert max(grid["after"]) < min(grid["before"])
    gain = 1 - np.mean(grid["after"]) / np.mean(grid["before"])
    saved = np.mean(grid["before"]) - np.mean(grid["after"])
    assert f"The grid's op is {gain * 100:.0f}% faster, about {saved:.1f} ms" in flat
    after_ms = f"{min(grid['after']):.1f}-{max(grid['after']):.1f} ms"
    assert f"whose op is now {after_ms} forward + backward" in flat
    medians = {}
    for model, label in (("sit", "SiT"), ("siet", "SieT")):
        for when, commit in commits.items():
            ratios = [r["ratios"]["train_step_over_vit"][model]["graph"] for r in encoders[when]]
            medians[model, when] = np.median(ratios)
            row = (
                f"| {label}, {commit} | "
                + " | ".join(f"{x:.2f}" for x in ratios)
                + f" | {np.median(ratios):.2f} |"
            )
            assert row in section, row
    sit = [medians["sit", w] for w in commits]
    assert (
        max(sit) < 1.5 and f"at both commits ({sit[0]:.2f} and {sit[1]:.2f}, two runs of three each)" in flat
    )
    for when in commits:
        assert sum(r["ratios"]["train_step_over_vit"]["sit"]["graph"] < 1.5 for r in encoders[when]) == 2
    assert min(medians["siet", w] for w in commits) > 1.5 and "the SieT's stays above it" in flat
    for name in [f"native_ops_amd_bf16_grid_tiles_{w}{t}" for w in commits for t in ("", "_run2")] + [
        f"speed_encoders_grid_tiles_amd_bf16_{w}{t}" for w in commits for t in ("", "_run2", "_run3")
    ]:
        assert f"`benchmarks/reference/{name}.json`" in SPEED, name


def _ranges(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def test_the_quarter_turns_spectra_are_the_reports():
    """docs/speed.md's "Then the graphs in the quarter turn's orbits": the ops with and without orbits (two
    runs), the uncommitted build that took every grid spectrally, five encoder runs with the dense-mixing
    models in the same runs, and the README's speed line, each number its report."""
    section = _section("### With the kernels on an AMD host with AVX512_BF16")
    section = section[section.index("**Then the graphs in the quarter turn's orbits**") :]
    flat = " ".join(section.split())
    ops = [_report(f"native_ops_amd_bf16_spectral{t}.json") for t in ("", "_run2")]
    every_size = _report("native_ops_amd_bf16_spectral_every_size.json")
    runs = ("", "_run2", "_run3", "_run4", "_run5")
    encoders = [_report(f"speed_encoders_spectral_amd_bf16{t}.json") for t in runs]
    for report in [*ops, every_size, *encoders]:
        assert report["commit"].startswith("3bc5c2c") and "no AMX" in report["machine"]
    assert "kMinSpectralBlocks = 1" in every_size["variant"] and "variant" not in ops[0]
    for case in ("first_block", "class_token", "global_grid"):
        results = [r["results"] for r in ops]
        cells = [
            ", ".join(f"{r[name]['backward']['median_ms']:.2f}" for r in results)
            for name in (case, f"{case}_dense")
        ]
        speedups = ", ".join(f"{r['spectral_speedup'][case]['backward']:.2f}" for r in results)
        assert f"| `{case}` | {cells[0]} | {cells[1]} | {speedups} |" in section, case
        for r in results:
            dense, spectral = r[f"{case}_dense"]["backward"]["median_ms"], r[case]["backward"]["median_ms"]
            assert r["spectral_speedup"][case]["backward"] == pytest.approx(dense / spectral, rel=0.02)
    grid = every_size["results"]["spectral_speedup"]["global_grid"]
    assert max(grid.values()) < 1 < min(every_size["results"]["spectral_speedup"]["first_block"].values())
    assert f"{grid['forward']:.2f}x as fast forward and {grid['backward']:.2f}x forward + backward" in flat
    over_vit = {m: [r["ratios"]["train_step_over_vit"][m]["graph"] for r in encoders] for m in SITS}
    dense = {m: [r["ratios"]["train_step_over_vit"][f"{m}:dense"]["graph"] for r in encoders] for m in SITS}
    for model, label in (("sit", "SiT"), ("siet", "SieT")):
        for ratios, name in ((over_vit[model], label), (dense[model], f"{label}, dense mixing")):
            row = f"| {name} | " + " | ".join(f"{x:.2f}" for x in ratios) + f" | {np.median(ratios):.2f} |"
            assert row in section, row
        spectral = [r["ratios"]["train_step_spectral_over_dense"][model]["graph"] for r in encoders]
        listed = ", ".join(f"{x:.2f}" for x in spectral[:-1]) + f" and {spectral[-1]:.2f}"
        assert f"{listed} (median {np.median(spectral):.2f})" in flat, model
    sit, siet = (np.median(over_vit[m]) for m in SITS)
    assert sit < 1.5 < siet
    assert f"The SiT's median is {sit:.2f}x the ViT's; the SieT's, {siet:.2f}x, is still above" in flat
    bf16 = {
        m: [r["models"][m]["precision"]["mixed_bfloat16"]["over_float32"] for r in encoders]
        for m in ("sit", "siet", "vit")
    }
    matmul = [r["matmul"]["by_precision"]["mixed_bfloat16"]["over_float32"] for r in encoders]
    assert (
        f"{_ranges(bf16['sit'])}x (SiT), {_ranges(bf16['siet'])}x (SieT) and {_ranges(bf16['vit'])}x (ViT) "
        f"their float32 steps, while a 1024^3 matmul took {_ranges(matmul)}x"
    ) in flat
    assert f"{sit:.2f}x (SieT {siet:.2f}x) on an AMD host with AVX512_BF16 and " in " ".join(README.split())
    assert "medians of five runs each (`speed_encoders_spectral_amd_bf16*.json`," in README
    names = [f"native_ops_amd_bf16_spectral{t}" for t in ("", "_run2", "_every_size")]
    for name in names + [f"speed_encoders_spectral_amd_bf16{t}" for t in runs]:
        assert f"`benchmarks/reference/{name}.json`" in SPEED, name


def test_the_eight_lane_kernels_on_an_avx2_host_are_the_reports():
    """docs/speed.md's "Eight lanes on an AVX2 host": the ops, the tiles measured both ways, five encoder runs
    with and without the kernels, the MiniGrid configs and the README's speed line, each number its report."""
    section = _section("### Eight lanes on an AVX2 host")
    flat = " ".join(section.split())
    ops = _report("native_ops_avx2_lanes8.json")
    tiles = {s: [_report(f"native_ops_avx2_tiles_{s}_run{r}.json") for r in (1, 2)] for s in ("3x2", "4x4")}
    runs = ("", "_run2", "_run3", "_run4", "_run5")
    encoders = [_report(f"speed_encoders_avx2_lanes8{t}.json") for t in runs]
    minigrid = _report("speed_encoders_minigrid_avx2_lanes8.json")
    for report in [ops, *encoders, minigrid]:
        assert report["commit"].startswith("0338169") and "no AVX-512" in report["machine"]
        assert "variant" not in report
    for size, reports in tiles.items():
        for report in reports:
            assert report["commit"].startswith("d13c657") and "no AVX-512" in report["machine"]
            assert ("kTile = 3 and kGraphRows = 2" if size == "3x2" else "kTile = 4 and kGraphRows = 4") in (
                report["variant"]
            )
    sixteen = _report("native_ops_avx2_build_amd_bf16.json")["results"]
    for case in ("first_block", "class_token", "global_grid", "layer_norm"):
        timing = ops["results"][case]
        row = (
            f"| `{case}` | {timing['forward']['median_ms']:.2f} | {timing['backward']['median_ms']:.2f} | "
            f"{sixteen[case]['backward']['median_ms']:.1f} |"
        )
        assert row in section, row
    slower = []
    for case in ("first_block", "class_token", "global_grid"):
        small, large = ([r["results"][case]["backward"]["median_ms"] for r in tiles[s]] for s in tiles)
        ratios = [b / a for a, b in zip(small, large, strict=True)]
        slower += ratios
        cells = [", ".join(f"{x:.2f}" for x in xs) for xs in (small, large, ratios)]
        assert f"| `{case}` | {cells[0]} | {cells[1]} | {cells[2]} |" in section, case
    assert min(slower) > 1
    assert f"every op took {min(slower):.2f}-{max(slower):.2f}x as long" in flat
    assert (
        f"{min(slower):.2f}-{max(slower):.2f}x longer forward + backward"
        in (ROOT / "sit_keras/native/window_attention.h").read_text()
    )
    labels = {"sit": "SiT", "siet": "SieT"}
    labels |= {f"{m}:builtin": f"{name}, builtin ops" for m, name in labels.items()}
    medians = {}
    for model, label in labels.items():
        ratios = [r["ratios"]["train_step_over_vit"][model]["graph"] for r in encoders]
        medians[model] = np.median(ratios)
        row = f"| {label} | " + " | ".join(f"{x:.2f}" for x in ratios) + f" | {medians[model]:.2f} |"
        assert row in section, row
    for model in SITS:
        native_over = [r["ratios"]["train_step_native_over_builtin"][model]["graph"] for r in encoders]
        assert max(native_over) < 1
        assert f"{min(native_over):.2f}-{max(native_over):.2f}x" in flat, model
    assert medians["sit"] <= 2.0 < medians["siet"]
    assert f"the SiT's median, **{medians['sit']:.2f}x** the ViT's, is within the speed issue's 2.0x" in flat
    assert f"where it was {medians['sit:builtin']:.2f}x without the kernels in the same runs" in flat
    assert f"SieT's, **{medians['siet']:.2f}x**, is just above it" in flat
    xla = [r["ratios"]["xla_over_graph"]["sit"]["train_step"] for r in encoders]
    assert f"the SiT's XLA step is now {min(xla):.2f}-{max(xla):.2f}x its graph step" in flat
    for model, timing in minigrid["models"].items():
        over_vit = minigrid["ratios"]["train_step_over_vit"][model]["graph"]
        cell = f"**{over_vit:.2f}**" if "_si" in model else ("1" if over_vit == 1 else f"{over_vit:.2f}")
        row = (
            f"| `{model.split('/')[-1]}` | {timing['params']:,} | "
            f"{timing['timings']['train_step']['graph']['median_ms']:.0f} ms | {cell} | "
            f"{minigrid['ratios']['xla_over_graph'][model]['train_step']:.2f} |"
        )
        assert row in section, row
        assert "_si" not in model or over_vit < 1.5
    assert f"runs are {medians['sit']:.2f}x and {medians['siet']:.2f}x" in " ".join(SPEED.split())
    names = ["native_ops_avx2_lanes8", "speed_encoders_minigrid_avx2_lanes8"]
    names += [f"speed_encoders_avx2_lanes8{t}" for t in runs]
    for name in names + [f"native_ops_avx2_tiles_{s}_run{r}" for s in tiles for r in (1, 2)]:
        assert f"`benchmarks/reference/{name}.json`" in SPEED, name


def _avx2_paragraph(title: str, name: str, before: str, end: str | None = None) -> tuple:
    """docs/speed.md's paragraph ``**title**`` of "Eight lanes on an AVX2 host" (up to ``end``), flattened
    too, with its reports: ``native_ops_avx2_{name}.json``, the five encoder runs
    ``speed_encoders_avx2_{name}*.json`` and the five before them, ``speed_encoders_avx2_{before}*.json``."""
    section = _section("### Eight lanes on an AVX2 host")
    section = section[section.index(f"**{title}**") : section.index(end) if end else None]
    runs = ("", "_run2", "_run3", "_run4", "_run5")
    encoders = [_report(f"speed_encoders_avx2_{name}{t}.json") for t in runs]
    earlier = [_report(f"speed_encoders_avx2_{before}{t}.json") for t in runs]
    for report_name in [f"native_ops_avx2_{name}"] + [f"speed_encoders_avx2_{name}{t}" for t in runs]:
        assert f"`benchmarks/reference/{report_name}.json`" in SPEED, report_name
    return section, " ".join(section.split()), _report(f"native_ops_avx2_{name}.json"), encoders, earlier


def _ratio_span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}x"


def _assert_op_against_builtin(section: str, results: dict, case: str, labels: dict[str, str]) -> None:
    """A native op's table row and its builtin's, in ms, and the speed-up row (builtin / native time)."""
    for name, label in labels.items():
        cells = [f"{results[name][stage]['median_ms']:.2f}" for stage in ("forward", "backward")]
        assert f"| {label} | {cells[0]} | {cells[1]} |" in section, name
    speedup = results[f"{case}_speedup"]
    for stage in ("forward", "backward"):
        builtin, native = (results[name][stage]["median_ms"] for name in (f"{case}_builtin", case))
        assert speedup[stage] == pytest.approx(builtin / native, rel=0.02) and speedup[stage] > 1
    assert f"| speed-up | {speedup['forward']:.2f}x | {speedup['backward']:.2f}x |" in section


def _assert_five_runs_beside_before(
    section: str, encoders: list[dict], before: list[dict]
) -> dict[str, float]:
    """The rows of train step / ViT over five runs, their median and the five earlier runs' median, for the
    SiT and the SieT with and without the kernels; returns the medians."""
    labels = {"sit": "SiT", "siet": "SieT"}
    labels |= {f"{m}:builtin": f"{name}, builtin ops" for m, name in labels.items()}
    medians = {}
    for model, label in labels.items():
        ratios = [r["ratios"]["train_step_over_vit"][model]["graph"] for r in encoders]
        earlier = np.median([r["ratios"]["train_step_over_vit"][model]["graph"] for r in before])
        medians[model] = np.median(ratios)
        row = (
            f"| {label} | "
            + " | ".join(f"{x:.2f}" for x in ratios)
            + f" | {medians[model]:.2f} | {earlier:.2f} |"
        )
        assert row in section, row
    return medians


def _assert_kernels_share_and_vit_step(flat: str, encoders: list[dict]) -> None:
    """The sentence giving the SiT's and the SieT's step with the kernels over without, and the ViT's step."""
    native_share = {
        m: [r["ratios"]["train_step_native_over_builtin"][m]["graph"] for r in encoders]
        for m in ("sit", "siet")
    }
    assert f"the SiT's step took {_ratio_span(native_share['sit'])} of its time without them" in flat
    assert f"and the SieT's {_ratio_span(native_share['siet'])} (the ViT's step:" in flat
    vit_ms = [r["models"]["vit"]["timings"]["train_step"]["graph"]["median_ms"] for r in encoders]
    assert f"(the ViT's step: {min(vit_ms):.0f}-{max(vit_ms):.0f} ms)" in flat


def test_the_stem_in_a_native_op_is_the_reports():
    """docs/speed.md's "The stem in a native op": the op against TensorFlow's, five encoder runs beside the
    five before it, each number its report."""
    section, flat, ops, encoders, before = _avx2_paragraph("The stem in a native op.", "stem", "lanes8")
    for report in [ops, *encoders]:
        assert report["commit"].startswith("a42a90b") and "no AVX-512" in report["machine"]
    labels = {"stem_builtin": "`tf.nn.depthwise_conv2d`", "stem": "`SitDepthwiseConv`"}
    _assert_op_against_builtin(section, ops["results"], "stem", labels)
    medians = _assert_five_runs_beside_before(section, encoders, before)
    assert max(medians["sit"], medians["siet"]) <= 2.0
    assert f"to **{medians['sit']:.2f}x** the ViT's and the SieT's from" in flat
    assert f"to **{medians['siet']:.2f}x**: both within the speed issue's 2.0x" in flat


def test_the_projection_in_a_native_op_is_the_reports():
    """docs/speed.md's "The projection in a native op": the ops against TensorFlow's matmuls, five encoder
    runs beside the five before them, each number its report."""
    section, flat, ops, encoders, before = _avx2_paragraph(
        "The projection in a native op.", "projection", "stem", end="**The pooling in"
    )
    assert ops["commit"].startswith("883722e") and "no AVX-512" in ops["machine"]
    for report in encoders:
        assert report["commit"].startswith("4dca098") and "no AVX-512" in report["machine"]
    labels = {
        "projection_builtin": "TensorFlow's matmuls (the layers' form before)",
        "projection": "`SitChannelsFirstProjection` and its kernel gradient",
    }
    _assert_op_against_builtin(section, ops["results"], "projection", labels)
    medians = _assert_five_runs_beside_before(section, encoders, before)
    assert medians["sit"] <= 1.5 < medians["siet"]
    assert (
        f"from 1.68x to **{medians['sit']:.2f}x** the ViT's: within the speed issue's next target, 1.5x"
        in flat
    )
    assert f"The SieT's went from 1.79x to **{medians['siet']:.2f}x**, not yet within it." in flat
    _assert_kernels_share_and_vit_step(flat, encoders)
    xla = [r["ratios"]["xla_over_graph"]["sit"]["train_step"] for r in encoders]
    assert f"the SiT's XLA step is now {_ratio_span(xla)} its graph step" in flat


def test_the_pooling_in_a_native_op_is_the_reports():
    """docs/speed.md's "The pooling in a native op": the op against tf.nn.max_pool2d, five encoder runs
    beside the five before them, and the README's speed line, each number its report."""
    section, flat, ops, encoders, before = _avx2_paragraph(
        "The pooling in a native op.", "pool", "projection"
    )
    for report in [ops, *encoders]:
        assert report["commit"].startswith("d84a49d") and "no AVX-512" in report["machine"]
    labels = {"pool_builtin": "`tf.nn.max_pool2d`", "pool": "`SitMaxPool`"}
    _assert_op_against_builtin(section, ops["results"], "pool", labels)
    medians = _assert_five_runs_beside_before(section, encoders, before)
    _assert_kernels_share_and_vit_step(flat, encoders)
    assert f"The medians are {medians['sit']:.2f}x for the SiT (1.49x before)" in flat
    assert f"and {medians['siet']:.2f}x for the SieT (1.61x before)" in flat
    assert (
        f"{medians['sit']:.2f}x (SieT {medians['siet']:.2f}x) on an AVX2 host, medians of five runs each "
        "(`speed_encoders_spectral_amd_bf16*.json`, `speed_encoders_avx2_pool*.json`)"
    ) in " ".join(README.split())
    saved = (
        ops["results"]["pool_builtin"]["backward"]["median_ms"]
        - ops["results"]["pool"]["backward"]["median_ms"]
    )
    siet_ms = [r["models"]["siet"]["timings"]["train_step"]["graph"]["median_ms"] for r in encoders]
    assert (
        f"the op saves {saved:.2f} ms (the table above) of a SieT step of "
        f"{min(siet_ms):.0f}-{max(siet_ms):.0f} ms" in flat
    )
    spreads = [
        [r["ratios"]["train_step_over_vit"]["siet"]["graph"] for r in runs_] for runs_ in (before, encoders)
    ]
    assert (
        f"spread over {_ratio_span(spreads[0])} in the set before and {_ratio_span(spreads[1])} in this one"
        in flat
    )
    assert max(medians["sit"], medians["siet"]) <= 1.5


def test_the_native_kernels_inside_xla_are_the_reports():
    """docs/speed.md's "The native kernels inside XLA": the ops' table in graph mode and under XLA, the
    speed-ups under XLA, and the train steps with and without the XLA kernels, each number its report."""
    section = _section("### The native kernels inside XLA")
    flat = " ".join(section.split())
    ops, ops_before = _report("native_ops_avx2_xla_stem.json"), _report("native_ops_avx2_xla.json")
    encoders = _report("speed_encoders_avx2_xla_kernels_stem.json")
    encoders_before = _report("speed_encoders_avx2_xla_kernels.json")
    assert ops["commit"].startswith("ef74d53") and encoders["commit"].startswith("ef74d53")
    assert ops_before["commit"].startswith("f7a487d") and encoders_before["commit"].startswith("d420bd2")
    for report in (ops, ops_before, encoders, encoders_before):
        assert "no AVX-512" in report["machine"]
    results = ops["results"]
    for op, name in (("stem", "stem"), ("projection", "projection"), ("pool", "pooling")):
        for stage, label in (("forward", "forward"), ("backward", "forward + backward")):
            cells = [
                results[f"{op}{kind}"][stage]["median_ms"]
                for kind in ("", "_builtin", "_xla", "_builtin_xla")
            ]
            assert f"| {name}, {label} | " + " | ".join(f"{ms:.2f}" for ms in cells) + " |" in section
    speedup = {op: results["xla_speedup"][op] for op in ("stem", "projection", "pool")}
    assert f"the native stem is {speedup['stem']['backward']:.2f}x faster than XLA's convolution" in flat
    assert f"the projection {speedup['projection']['backward']:.2f}x its dots" in flat
    assert f"and the pooling {speedup['pool']['backward']:.2f}x its select-and-scatter" in flat
    assert (
        f"for the stem ({speedup['stem']['forward']:.2f}x) and the pooling "
        f"({speedup['pool']['forward']:.2f}x)" in flat
    )
    assert f"and the projection is {speedup['projection']['forward']:.2f}x" in flat
    before = ops_before["results"]["xla_speedup"]
    assert (
        f"measured {before['projection']['backward']:.2f}x and {before['pool']['backward']:.2f}x with "
        "both passes for the projection and the pooling" in flat
    )
    over = encoders["ratios"]["train_step_xla_kernels_over_without"]
    assert (
        f"the SiT's XLA step took {over['sit']['xla']:.2f}x and the SieT's {over['siet']['xla']:.2f}x" in flat
    )
    assert f"differed by {over['sit']['graph']:.2f}x and {over['siet']['graph']:.2f}x in the same run" in flat
    old = encoders_before["ratios"]["train_step_xla_kernels_over_without"]
    assert (
        f"at d420bd2 measured {old['sit']['xla']:.2f}x and {old['siet']['xla']:.2f}x against "
        f"{old['sit']['graph']:.2f}x and {old['siet']['graph']:.2f}x" in flat
    )
    xla_over_graph = encoders["ratios"]["xla_over_graph"]
    sit, siet = (xla_over_graph[name]["train_step"] for name in ("sit", "siet"))
    assert f"XLA still takes {sit:.2f}x (SiT) and {siet:.2f}x (SieT) the graph step there" in flat
    # "Within the spread": the graph steps, the same ops, moved about as much as the XLA steps did.
    spread = max(abs(over[name]["graph"] - 1) for name in ("sit", "siet"))
    assert all(abs(over[name]["xla"] - 1) <= spread + 0.03 for name in ("sit", "siet"))


def test_the_attentions_kernels_inside_xla_are_the_reports():
    """docs/speed.md's "The attention's kernels inside XLA": the attention ops through their custom calls
    and in a graph, the train steps with and without the XLA kernels, and what ``--jit_compile auto``
    chooses for the SiT configs (also in docs/training.md), each number its report."""
    section = _section("### The attention's kernels inside XLA")
    flat = " ".join(section.split())
    ops = _report("native_ops_avx2_xla_attention.json")
    encoders = _report("speed_encoders_avx2_xla_attention.json")
    auto = _report("jit_compile_auto_xla_attention.json")
    assert encoders["commit"].startswith("15c1706")
    assert ops["commit"].startswith("b789fd6") and auto["commit"].startswith("b789fd6")
    for report in (ops, encoders, auto):
        assert "no AVX-512" in report["machine"] and report["commit"][:7] in flat
    results = ops["results"]
    labels = {
        "first_block": "first local block (window op with the kernel)",
        "class_token": "class token's row",
        "global_grid": "global grid (window op)",
        "layer_norm": "LayerNorm into the lanes",
    }
    ratios = []
    for case, label in labels.items():
        cells = [
            results[name][stage]["median_ms"]
            for name in (case, f"{case}_xla")
            for stage in ("forward", "backward")
        ]
        assert f"| {label} | " + " | ".join(f"{ms:.2f}" for ms in cells) + " |" in section
        ratios += [results["xla_over_graph"][case][stage] for stage in ("forward", "backward")]
    assert f"XLA / graph is {min(ratios):.2f}-{max(ratios):.2f} for these four" in flat
    assert all(abs(ratio - 1) <= 0.1 for ratio in ratios)  # "cost nothing measurable"
    over_graph, over_without = (
        encoders["ratios"]["xla_over_graph"],
        encoders["ratios"]["train_step_xla_kernels_over_without"],
    )
    for name, label in (("sit", "SiT"), ("siet", "SieT")):
        step = encoders["models"][name]["timings"]["train_step"]
        row = (
            f"| {label} | {step['graph']['median_ms']:.2f} | {step['xla']['median_ms']:.2f} | "
            f"{over_graph[name]['train_step']:.2f} | "
            f"{over_graph[f'{name}:no_xla_kernels']['train_step']:.2f} |"
        )
        assert row in section
    assert (
        f"the XLA step takes {over_without['sit']['xla']:.2f}x (SiT) and "
        f"{over_without['siet']['xla']:.2f}x (SieT)" in flat
    )
    assert (
        f"({over_graph['sit']['train_step']:.2f}x and {over_graph['siet']['train_step']:.2f}x; "
        "1.77x and 2.05x at" in flat
    )
    forward = [over_graph[name]["forward_batch"] for name in ("sit", "siet")]
    assert f"the forward pass at batch 64 is {forward[0]:.2f}x and {forward[1]:.2f}x its graph pass" in flat
    assert max(forward) < 1 < min(over_graph[name]["train_step"] for name in ("sit", "siet"))  # "not yet"
    _check_jit_compile_auto_rows(auto)
    minigrid = [
        c["xla_over_graph"] for c in auto["configs"] if "minigrid" in c["gin_file"] or "demo" in c["gin_file"]
    ]
    (procgen,) = [c for c in auto["configs"] if "procgen" in c["gin_file"]]
    assert (
        all(c["choice"] == "on" for c in auto["configs"] if c is not procgen) and procgen["choice"] == "off"
    )
    assert f"the Procgen SiT's XLA step is {procgen['xla_over_graph']:.2f}x its graph step" in flat
    training = " ".join(TRAINING.split())
    assert (
        f"the MiniGrid SiTs' XLA steps measured {_ratio_span(minigrid)[:-1]}x their graph steps and the "
        f"Procgen SiT's {procgen['xla_over_graph']:.2f}x" in training
    )


def test_the_projections_input_gradient_under_xla_is_the_reports():
    """docs/speed.md's "The projection's input gradient under XLA": the projection's forward + backward
    before and after its input gradient became the projection op, and the train steps after it."""
    section = _section("### The projection's input gradient under XLA")
    flat = " ".join(section.split())
    before, after = _report("native_ops_avx2_xla_attention.json"), _report("native_ops_avx2_xla_dx.json")
    encoders, encoders_before = (
        _report("speed_encoders_avx2_xla_dx.json"),
        _report("speed_encoders_avx2_xla_attention.json"),
    )
    assert after["commit"].startswith("d8a36c8") and encoders["commit"].startswith("d8a36c8")
    assert encoders["command"].startswith(
        "python benchmarks/encoders.py --models sit,siet,vit --precisions float32 --no_profile --repeats 7"
    )
    for label, report in (("b789fd6: `tf.matmul(W, dy)`", before), ("d8a36c8: the projection op", after)):
        results = report["results"]
        cases = ("projection", "projection_builtin", "projection_xla", "projection_builtin_xla")
        cells = [f"{results[case]['backward']['median_ms']:.2f}" for case in cases]
        speedup = results["xla_speedup"]["projection"]["backward"]
        assert f"| {label} | " + " | ".join(cells) + f" | {speedup:.2f} |" in section
    new, old = after["results"], before["results"]
    assert (
        f"now {new['xla_speedup']['projection']['backward']:.2f}x faster than XLA's dots "
        f"({old['xla_speedup']['projection']['backward']:.2f}x before), and in a graph "
        f"{new['projection_speedup']['backward']:.2f}x faster than TensorFlow's matmuls "
        f"({old['projection_speedup']['backward']:.2f}x before)" in flat
    )
    assert new["xla_speedup"]["projection"]["backward"] > old["xla_speedup"]["projection"]["backward"]
    ratios = [r["ratios"]["xla_over_graph"] for r in (encoders, encoders_before)]
    assert (
        f"measured XLA / graph {ratios[0]['sit']['train_step']:.2f}x for the SiT and "
        f"{ratios[0]['siet']['train_step']:.2f}x for the SieT, against {ratios[1]['sit']['train_step']:.2f}x "
        f"and {ratios[1]['siet']['train_step']:.2f}x in the run before it" in flat
    )
    assert min(r[name]["train_step"] for r in ratios for name in ("sit", "siet")) > 1  # "still ... slower"


def test_what_auto_chooses_after_the_projections_input_gradient_is_the_report():
    """docs/speed.md's "The projection's input gradient under XLA": ``--jit_compile auto``'s table after it
    and the Procgen SiT's ratio and step times, against the run before."""
    section = _section("### The projection's input gradient under XLA")
    flat = " ".join(section.split())
    auto, before = _report("jit_compile_auto_dx.json"), _report("jit_compile_auto_xla_attention.json")
    assert auto["commit"].startswith("d142f0a") and "no AVX-512" in auto["machine"]
    _check_jit_compile_auto_rows(auto)
    procgen, procgen_before = (
        next(c for c in report["configs"] if "procgen" in c["gin_file"]) for report in (auto, before)
    )
    assert (
        f"the median of the per-round XLA / graph ratios is {procgen['xla_over_graph']:.2f} in this run "
        f"({procgen_before['xla_over_graph']:.2f} before the change, in another), while its median step "
        f"times are {1000 * procgen['seconds']['off']:.1f} ms in the graph and "
        f"{1000 * procgen['seconds']['on']:.1f} ms with XLA" in flat
    )
    assert procgen["choice"] == "off" and procgen["xla_over_graph"] > auto["margin"]


def test_the_speed_targets_in_one_run_are_the_reports():
    """docs/speed.md's "The speed issue's targets in one run": every row of the table is the five runs'
    (speed_targets_avx2.json, speed_targets_avx2_dense_gradients.json, speed_targets_avx2_transposes.json,
    speed_targets_avx2_orbit_gradients.json, speed_targets_avx2_prefetch.json) values of one target, and the
    numbers its notes quote are those of the last run's reports kept beside it, and of the earlier runs'
    where it compares."""
    section = _section("## The speed issue's targets in one run")
    flat = " ".join(section.split())
    names = (
        "speed_targets_avx2",
        "speed_targets_avx2_dense_gradients",
        "speed_targets_avx2_transposes",
        "speed_targets_avx2_orbit_gradients",
        "speed_targets_avx2_prefetch",
    )
    summaries = [_report(f"{name}.json") for name in names]
    now = summaries[-1]
    met = {True: "yes", False: "**no**", None: "n/a"}
    for rows in zip(*(summary["targets"] for summary in summaries), strict=True):
        row = rows[-1]
        assert {(r["what"], r["limit"]) for r in rows} == {(row["what"], row["limit"])}
        limit = "-" if row["limit"] is None else f"{'<=' if row['at_most'] else '>='} {row['limit']:.3g}"
        values = " | ".join(f"{r['value']:.2f}" for r in rows)
        assert f"| {row['what']} | {values} | {limit} | {met[row['met']]} | `{row['report']}` |" in section
    for summary in summaries:
        assert f"at {summary['commit'][:7]} in {summary['wall_seconds']:.0f} s" in flat
        assert "no AMX" in summary["machine"]
    assert f"Now: {now['met']} targets met, {now['missed']} missed" in flat
    earlier = "; ".join(f"{s['commit'][:7]}: {s['met']} met, {s['missed']} missed" for s in summaries[:-1])
    assert f"({earlier})" in flat
    run = names[-1] + "/"
    encoders = _report(run + "encoders_64.json")
    repeats = encoders["settings"]["repeats"], _report(run + "encoders_14.json")["settings"]["repeats"]
    assert "(15 at 64x64, 21 at 14x14, after 3 warm-up calls" in flat and repeats == (15, 21)

    def steps(name: str) -> list[str]:
        models = _report(f"{name}/encoders_64.json")["models"]
        return [
            f"{models[m]['timings']['train_step']['graph']['median_ms']:.1f}" for m in ("vit", "sit", "siet")
        ]

    vit, sit, siet = steps(names[-1])
    ratio = encoders["ratios"]["train_step_over_vit"]
    assert (
        f"the ViT's step took {vit} ms in graph mode, the SiT's {sit} ms ({ratio['sit']['graph']:.2f}x) "
        f"and the SieT's {siet} ms ({ratio['siet']['graph']:.2f}x"
    ) in flat
    before = _report(f"{names[-2]}/encoders_64.json")["ratios"]["train_step_over_vit"]["siet"]["graph"]
    assert f"({ratio['siet']['graph']:.2f}x, {before:.2f}x in the run before)" in flat
    assert (
        "the f6a7860 run had {}, {} and {} ms, the 71a49d2 run {}, {} and {} ms, the 5e300f5 run {}, {} and "
        "{} ms and the 017cd89 run {}, {} and {} ms".format(
            *steps(names[3]), *steps(names[2]), *steps(names[1]), *steps(names[0])
        )
        in flat
    )
    bfloat16_matmul = encoders["matmul"]["by_precision"]["mixed_bfloat16"]["over_float32"]
    assert f"its 1024^3 matmul took {bfloat16_matmul:.2f}x the float32 one" in flat
    values = {
        (rows[0]["what"], rows[0]["limit"]): tuple(f"{r['value']:.2f}" for r in rows)
        for rows in zip(*(summary["targets"] for summary in summaries), strict=True)
    }
    readout = values[("siet_rotation_pooled: XLA / graph train step, 14x14", 1.0)]
    assert "({}, {}, {}, {} and {} in the five runs)".format(*readout) in flat
    sit_xla = values[("sit: XLA / graph train step, 64x64", 1.0)]
    assert (
        "The SiT's 64x64 step is at XLA / graph {4} ({0}, {1}, {2} and {3} in the earlier runs)".format(
            *sit_xla
        )
        in flat
    )
    siet_row = [t for t in now["targets"] if t["what"] == "siet: XLA / graph train step, 64x64"][0]
    siet_xla = values[("siet: XLA / graph train step, 64x64", 1.0)]
    assert siet_row["met"] is False
    assert (
        f"the SieT's at {siet_row['value']:.2f} ({siet_row['value']:.3f}), which misses the target "
        "({}, {}, {} and {} in the earlier runs)".format(*siet_xla[:-1])
        in flat
    )
    cnn = values[("cnn: XLA / graph train step, 14x14", 1.0)]
    assert "({}, {}, {}, {} and {}): XLA runs its convolutions as oneDNN calls".format(*cnn) in flat
    demo = _report(run + "demo_ppo.json")
    assert f"The demo SiT trains at {demo['sit_over_cnn']:.2f}x the CNN's env steps/s" in flat
    demo_sps = demo["env_steps_per_second"]
    assert f"({demo_sps['sit']:.1f} against {demo_sps['cnn']:.1f})" in flat
    lava = _report(run + "lavacrossing_ppo.json")["table"]
    sps = {m: lava[m]["env_steps_per_second"] for m in ("sit_small", "cnn")}
    assert (
        f"at {sps['sit_small'] / sps['cnn']:.2f}x ({sps['sit_small']:.1f} against {sps['cnn']:.1f})" in flat
    )
    procgen = _report(run + "procgen_ppo.json")
    ratio = procgen["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    speeds = procgen["env_steps_per_second"]
    sit_sps, cnn_sps = speeds["sit"], speeds["impala_cnn"]
    assert f"at 1/{ratio:.2f} of the IMPALA-CNN ({sit_sps:.1f} against {cnn_sps:.1f}" in flat
    earlier_sps = _report("speed_ppo_procgen_avx2_bfc.json")["env_steps_per_second"]
    assert f"{earlier_sps['sit']:.1f} against {earlier_sps['impala_cnn']:.1f} in" in flat
    workers = _report(run + "two_workers.json")["median_ratios_two_over_one"]
    assert f"{workers['learner_seconds_per_train_step']:.2f}x as long" in flat
    assert f"env steps/s {workers['cluster_env_steps_per_second']:.2f}x one worker's" in flat
    alternated = {
        when: [
            _report(f"speed_encoders_avx2_prefetch_{when}_run{r}.json")["ratios"]["train_step_over_vit"][
                "siet"
            ]["graph"]
            for r in (1, 2)
        ]
        for when in ("before", "after")
    }
    after = {f"{a:.2f}" for a in alternated["after"]}
    assert len(after) == 1  # "in both runs after the change"
    before = " and ".join(f"{b:.2f}x" for b in alternated["before"])
    assert (
        f"the SieT's step was {after.pop()}x the ViT's in both runs after the change ({before} before it)"
        in flat
    )


def test_the_speed_targets_on_the_amx_host_are_the_reports():
    """docs/speed.md's "The targets on an Intel host with AMX": its table is speed_targets_amx.json's rows,
    the numbers its notes quote are those of the reports kept beside it (and of the AVX2 host's last run
    where it compares), and its "Where XLA loses the IMPALA-CNN's step" is xla_conv_gradients_amx.json."""
    section = _section("### The targets on an Intel host with AMX")
    flat = " ".join(section.split())
    summary = _report("speed_targets_amx.json")
    met = {True: "yes", False: "**no**", None: "n/a"}
    for row in summary["targets"]:
        limit = "-" if row["limit"] is None else f"{'<=' if row['at_most'] else '>='} {row['limit']:.3g}"
        assert (
            f"| {row['what']} | {row['value']:.2f} | {limit} | {met[row['met']]} | `{row['report']}` |"
            in (section)
        )
    assert "AMX" in summary["machine"] and "amx_bf16" in summary["cpu_flags"]
    assert f"(a {summary['machine']})" in flat
    assert f"at {summary['commit'][:7]} in {summary['wall_seconds']:.0f} s" in flat
    assert "`benchmarks/reference/speed_targets_amx.json`" in flat
    assert "`benchmarks/reference/speed_targets_amx/`" in flat
    assert summary["met"] == sum(r["met"] is True for r in summary["targets"])
    assert summary["missed"] == sum(r["met"] is False for r in summary["targets"])
    avx2 = _report("speed_targets_avx2_prefetch.json")
    assert (
        f"{summary['met']} targets met, {summary['missed']} missed ({avx2['met']} and {avx2['missed']} in "
        "the AVX2 host's last run)"
    ) in flat
    row = {(r["what"], r["limit"]): r for r in summary["targets"]}
    assert row[("SiT bfloat16 / float32 train step", 0.7)]["met"] is False  # "applies here ... is missed"

    run, earlier = "speed_targets_amx/", "speed_targets_avx2_prefetch/"
    encoders, small = _report(run + "encoders_64.json"), _report(run + "encoders_14.json")
    step = {m: v["timings"]["train_step"] for m, v in encoders["models"].items()}
    over_vit = encoders["ratios"]["train_step_over_vit"]
    vit, sit, siet = (f"{step[m]['graph']['median_ms']:.1f}" for m in ("vit", "sit", "siet"))
    assert (
        f"the ViT's step took {vit} ms in graph mode, the SiT's {sit} ms ({over_vit['sit']['graph']:.2f}x) "
        f"and the SieT's {siet} ms ({over_vit['siet']['graph']:.2f}x)"
    ) in flat
    configs = {c.split("lavacrossing_")[-1].removesuffix(".gin"): c for c in small["models"]}
    small_over_vit = {m: small["ratios"]["train_step_over_vit"][c]["graph"] for m, c in configs.items()}
    assert (
        f"at 14x14 SiT-small's step is {small_over_vit['sit_small']:.2f}x the ViT's and the SieT readout's "
        f"{small_over_vit['siet_rotation_pooled']:.2f}x"
    ) in flat
    xla = {m: r["train_step"] for m, r in encoders["ratios"]["xla_over_graph"].items()}
    small_xla = {m: small["ratios"]["xla_over_graph"][c]["train_step"] for m, c in configs.items()}
    assert (
        f"({xla['sit']:.2f} and {xla['siet']:.2f} at 64x64, {small_xla['sit_small']:.2f} and "
        f"{small_xla['siet_rotation_pooled']:.2f} at 14x14), and so is the ViT's at 64x64 ({xla['vit']:.2f})"
    ) in flat
    assert max(xla["sit"], xla["siet"], xla["vit"], small_xla["sit_small"]) < 1  # "faster with XLA"
    impala = {mode: f"{step['impala_cnn'][mode]['median_ms']:.1f}" for mode in ("graph", "xla")}
    avx2_impala = _report(earlier + "encoders_64.json")["models"]["impala_cnn"]["timings"]["train_step"]
    assert (
        f"The IMPALA-CNN's step takes {xla['impala_cnn']:.2f}x as long with XLA ({impala['xla']} against "
        f"{impala['graph']} ms in graph mode; {avx2_impala['xla']['median_ms']:.1f} against "
        f"{avx2_impala['graph']['median_ms']:.1f} ms on the AVX2 host)"
    ) in flat
    small_step = {m: small["models"][c]["timings"]["train_step"] for m, c in configs.items()}
    for model, name in (("cnn", "The MiniGrid CNN's step is at"), ("vit", "the ViT's at 14x14 at")):
        ms = {mode: f"{small_step[model][mode]['median_ms']:.1f}" for mode in ("graph", "xla")}
        assert f"{name} {small_xla[model]:.2f} ({ms['xla']} against {ms['graph']} ms" in flat
    bfloat16 = encoders["models"]["sit"]["precision"]["mixed_bfloat16"]["over_float32"]
    matmul = encoders["matmul"]["by_precision"]["mixed_bfloat16"]["over_float32"]
    assert f"The SiT's step under `mixed_bfloat16` takes {bfloat16:.2f}x its float32 step" in flat
    assert f"the 1024^3 matmul in bfloat16 takes {matmul:.2f}x its float32 time in the same run" in flat
    before = _report("speed_encoders_amx.json")
    assert before["commit"].startswith("31a40d0") and "PPO" in before["load_note"]
    assert (
        f"({before['models']['sit']['precision']['mixed_bfloat16']['over_float32']:.2f} at 31a40d0, "
        "before the kernels existed, in a run beside two PPO runs"
    ) in flat

    demo = _report(run + "demo_ppo.json")
    lava = _report(run + "lavacrossing_ppo.json")["table"]
    procgen = _report(run + "procgen_ppo.json")
    sps = {
        "demo": (demo["env_steps_per_second"]["sit"], demo["env_steps_per_second"]["cnn"]),
        "lava": (lava["sit_small"]["env_steps_per_second"], lava["cnn"]["env_steps_per_second"]),
        "procgen": (procgen["env_steps_per_second"]["sit"], procgen["env_steps_per_second"]["impala_cnn"]),
    }
    assert f"The demo SiT trains at {demo['sit_over_cnn']:.2f}x the CNN's env steps/s" in flat
    assert (
        "({:.1f} against {:.1f}), SiT-small on LavaCrossing at {:.2f}x ({:.1f} against {:.1f})".format(
            *sps["demo"], sps["lava"][0] / sps["lava"][1], *sps["lava"]
        )
        in flat
    )
    ratio = procgen["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert (
        "the Procgen SiT at 1/{:.2f} of the IMPALA-CNN ({:.1f} against {:.1f} env steps/s)".format(
            ratio, *sps["procgen"]
        )
        in flat
    )
    assert row[("Procgen SiT / IMPALA-CNN env steps/s (PPO)", 1 / 6)]["met"] is True  # "meets the 1/6"
    assert row[("Procgen SiT / IMPALA-CNN env steps/s (PPO)", 0.25)]["met"] is False  # "misses the 1/4"
    avx2_demo = _report(earlier + "demo_ppo.json")["env_steps_per_second"]
    avx2_lava = _report(earlier + "lavacrossing_ppo.json")["table"]
    avx2_procgen = _report(earlier + "procgen_ppo.json")["env_steps_per_second"]
    avx2_sps = {
        "demo": (avx2_demo["sit"], avx2_demo["cnn"]),
        "lava": (avx2_lava["sit_small"]["env_steps_per_second"], avx2_lava["cnn"]["env_steps_per_second"]),
        "procgen": (avx2_procgen["sit"], avx2_procgen["impala_cnn"]),
    }
    names = ("demo", "lava", "procgen")
    for side, words in (
        (1, "the CNN sides train faster than in the AVX2 host's last run"),
        (0, "the SiT sides do"),
    ):
        here = [f"{sps[n][side]:.1f}" for n in names]
        there = [f"{avx2_sps[n][side]:.1f}" for n in names]
        against = "{}, {} and {} against {}, {} and {}".format(*here, *there)
        assert f"{words} {'not ' if side == 0 else ''}({against}" in flat
        faster = [sps[n][side] > avx2_sps[n][side] for n in names]
        assert all(faster) if side == 1 else not any(faster)
    for n in names:  # "all three ratios are below the AVX2 host's"
        assert sps[n][0] / sps[n][1] < avx2_sps[n][0] / avx2_sps[n][1]
    workers = _report(run + "two_workers.json")["median_ratios_two_over_one"]
    assert f"the learner's train step {workers['learner_seconds_per_train_step']:.2f}x as long" in flat
    assert f"env steps/s {workers['cluster_env_steps_per_second']:.2f}x one worker's" in flat

    # Where XLA loses the IMPALA-CNN's step.
    gradients = _report("xla_conv_gradients_amx.json")
    assert gradients["table"] in SPEED and gradients["command"] in flat
    assert gradients["commit"].startswith("07cf58d") and gradients["onednn_in_graphs"] is True
    assert gradients["machine"] == summary["machine"]
    assert (gradients["batch"], gradients["rounds"], gradients["calls_per_round"]) == (96, 7, 3)
    assert "in 7 interleaved rounds of 3 calls" in flat
    results = gradients["results"]
    ratios = {name: r["xla_over_graph"] for name, r in results.items()}
    convolutions = [n.removesuffix(": kernel gradient") for n in results if n.endswith(": kernel gradient")]
    first = results["conv 3->4 at 64x64: kernel gradient"]
    assert first["xla_over_graph"] > 2 and convolutions[0] == "conv 3->4 at 64x64"
    parity = [ratios[f"{c}: {what}"] for c in convolutions for what in ("forward", "input gradient")]
    assert max(parity) < 1.2
    assert f"at parity ({min(parity):.2f}-{max(parity):.2f})" in flat
    pooling = [r for n, r in ratios.items() if n.startswith("max pool") and n.endswith(": forward")]
    assert max(pooling) < 1 and f"faster under XLA ({min(pooling):.2f}-{max(pooling):.2f})" in flat
    assert (
        f"takes {first['xla_over_graph']:.2f}x the graph's time under XLA ({first['xla_ms']:.2f} against "
        f"{first['graph_ms']:.2f} ms), the others "
        + ", ".join(f"{ratios[c + ': kernel gradient']:.2f}x" for c in convolutions[1:-1])
        + f" and {ratios[convolutions[-1] + ': kernel gradient']:.2f}x"
    ) in flat
    pool_gradients = [r for n, r in ratios.items() if n.startswith("max pool") and n.endswith(": gradient")]
    assert f"take {min(pool_gradients):.2f}-{max(pool_gradients):.2f}x the graph's time" in flat
    # Each stack: a convolution, the pooling, two residual blocks of two convolutions at the pooled size.
    repeats = [1, 4] * 3
    extra = sum(
        n * (results[f"{c}: kernel gradient"]["xla_ms"] - results[f"{c}: kernel gradient"]["graph_ms"])
        for c, n in zip(convolutions, repeats, strict=True)
    )
    pool_extra = sum(
        r["xla_ms"] - r["graph_ms"]
        for n, r in results.items()
        if n.startswith("max pool") and "gradient" in n
    )
    step_extra = step["impala_cnn"]["xla"]["median_ms"] - step["impala_cnn"]["graph"]["median_ms"]
    assert (
        f"the kernel gradients take {extra:.1f} ms more under XLA than in the graph and the pooling "
        f"gradients {pool_extra:.1f} ms more, where the whole step takes {step_extra:.1f} ms more "
        f"({impala['xla']} against {impala['graph']} ms)"
    ) in flat
    assert extra + pool_extra > step_extra  # "these ops account for the step's difference"
    assert (
        "In scratch runs (not kept)" in flat
        and "So both gradients now come from native ops with XLA kernels" in flat
    )


def test_the_cnns_native_gradients_section_is_its_reports():
    """docs/speed.md's "The CNNs' gradients in native ops": the benchmark's table with the native forms, the
    alternated encoder runs before and after, and the second AMX speed-target run beside the first."""
    start = SPEED.index("#### The CNNs' gradients in native ops")
    section = SPEED[start : SPEED.index("\n#### The pooling gradient a vector of channels", start)]
    flat = " ".join(section.split())
    gradients = _report("xla_conv_gradients_amx_native.json")
    assert gradients["commit"].startswith("6dcef1f") and gradients["table"] in section
    results = gradients["results"]
    native = {n: r for n, r in results.items() if "native_xla_ms" in r}
    assert set(native) == {n for n in results if n.endswith(("kernel gradient", ": gradient"))}

    def spread(names: list[str], key: str) -> str:
        values = [native[n][key] for n in names]
        return f"{min(values):.2f}-{max(values):.2f}x"

    kernels = [n for n in native if n.endswith("kernel gradient")]
    pools = [n for n in native if n.endswith(": gradient")]
    assert (
        f"the native kernel gradients take {spread(kernels, 'native_xla_over_graph')} the graph's time "
        f"(XLA's own {spread(kernels, 'xla_over_graph')} in the same run) and the native pooling gradients, "
        f"with the pooling's forward pass, {spread(pools, 'native_xla_over_graph')} (XLA's own "
        f"{spread(pools, 'xla_over_graph')})"
    ) in flat
    for model, row in (("impala_cnn", "`impala_cnn`, 64x64"), ("minigrid_cnn", "MiniGrid `cnn`, 14x14")):
        ratios = []
        for when, commit in (("before", "ff6ad15"), ("after", "6dcef1f")):
            for run in (1, 2):
                report = _report(f"speed_encoders_amx_native_gradients_{model}_{when}_run{run}.json")
                assert report["commit"].startswith(commit) and "AMX" in report["machine"]
                [name] = report["models"]
                ratios.append(report["ratios"]["xla_over_graph"][name]["train_step"])
        assert f"| {row} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |" in section
        assert min(ratios[:2]) > max(ratios[2:])  # faster with the native gradients in every run
    before, after = _report("speed_targets_amx.json"), _report("speed_targets_amx_native.json")
    assert after["commit"].startswith("6dcef1f") and f"at 6dcef1f, in {after['wall_seconds']:.0f} s" in flat
    met = {True: "yes", False: "**no**", None: "n/a"}
    for b, a in zip(before["targets"], after["targets"], strict=True):
        limit = "-" if a["limit"] is None else f"{'<=' if a['at_most'] else '>='} {a['limit']:.3g}"
        values = f"{b['value']:.2f} | {a['value']:.2f}"
        assert f"| {a['what']} | {values} | {limit} | {met[a['met']]} | `{a['report']}` |" in section
    assert (
        f"Now: {after['met']} targets met, {after['missed']} missed ({before['met']} and {before['missed']} "
        "at 6f5bbdf)"
    ) in flat
    run = "speed_targets_amx_native/"
    encoders, earlier = _report(run + "encoders_64.json"), _report("speed_targets_amx/encoders_64.json")

    def step(report: dict, model: str, mode: str = "graph") -> str:
        return f"{report['models'][model]['timings']['train_step'][mode]['median_ms']:.1f}"

    xla = encoders["ratios"]["xla_over_graph"]
    impala = step(encoders, "impala_cnn", "xla"), step(encoders, "impala_cnn")
    assert (
        f"XLA step is {xla['impala_cnn']['train_step']:.2f}x its graph step "
        f"({impala[0]} against {impala[1]} ms)"
    ) in flat
    minigrid = _report(run + "encoders_14.json")["ratios"]["xla_over_graph"]
    assert (
        f"the MiniGrid CNN's {minigrid['configs/minigrid/lavacrossing_cnn.gin']['train_step']:.2f}x" in flat
    )
    assert (
        f"the ViT's graph step took {step(encoders, 'vit')} ms ({step(earlier, 'vit')} before) and the SiT's "
        f"{step(encoders, 'sit')} ms ({step(earlier, 'sit')})"
    ) in flat
    assert float(step(encoders, "vit")) > float(step(earlier, "vit"))  # "the host was slower"
    ratios = {when: [r["ratios"]["xla_over_graph"][m]["train_step"] for m in ("sit", "siet", "vit")]
              for when, r in (("first", earlier), ("now", encoders))}  # fmt: skip
    assert (
        "at {:.2f}-{:.2f} in the first run, are at {:.2f}-{:.2f} in this one".format(
            min(ratios["first"]), max(ratios["first"]), min(ratios["now"]), max(ratios["now"])
        )
        in flat
    )
    choices = _report("speed_targets_amx_jit_choices.json")["entries"]
    cnns = [c for c in choices if c["model"]["encoder"] == "cnn"]
    assert len(cnns) == 2 and all(c["value"] == "off" for c in cnns)  # "graph mode in both runs"
    demo = {r: _report(f"{r}/demo_ppo.json")["env_steps_per_second"] for r in ("speed_targets_amx", run[:-1])}
    first, now = demo["speed_targets_amx"], demo[run[:-1]]
    assert now["cnn"] / first["cnn"] < now["sit"] / first["sit"] < 1  # "both slower, the CNNs more"


def test_the_vector_pooling_gradient_section_is_its_alternated_runs():
    """docs/speed.md's "The pooling gradient a vector of channels at a time": the table and the ratios are
    the alternated before / after runs', and the native pooling gradient is faster after in every round."""
    start = SPEED.index("#### The pooling gradient a vector of channels at a time")
    section = SPEED[start : SPEED.index("\n#### The CNNs' convolutions in a native op", start)]
    flat = " ".join(section.split())
    commits = {"before": "bd13f3a", "after": "f07ffb9"}
    ops, steps = {}, {}
    for when, commit in commits.items():
        for run in (1, 2):
            ops[when, run] = _report(f"xla_conv_gradients_amx_vector_pool_grad_{when}_run{run}.json")
            steps[when, run] = _report(f"speed_encoders_amx_vector_pool_grad_{when}_run{run}.json")
            for report in (ops[when, run], steps[when, run]):
                assert report["commit"].startswith(commit) and "AMX" in report["machine"]
    pools = [name for name in ops["before", 1]["results"] if name.endswith(": gradient")]
    assert len(pools) == 3

    def cells(name: str, when: str, key: str) -> str:
        return ", ".join(f"{ops[when, run]['results'][name][key]:.2f}" for run in (1, 2))

    spreads: dict[str, list[float]] = {when: [] for when in commits}
    for name in pools:
        graph = [ops[key]["results"][name]["graph_ms"] for key in ops]
        row = [f"{min(graph):.2f}-{max(graph):.2f}", cells(name, "before", "native_xla_ms"),
               cells(name, "after", "native_xla_ms"), cells(name, "before", "native_xla_over_graph"),
               cells(name, "after", "native_xla_over_graph")]  # fmt: skip
        assert f"| {name.removesuffix(': gradient')} | " + " | ".join(row) + " |" in section
        for run in (1, 2):  # faster after in every round
            after, before = (ops[w, run]["results"][name]["native_xla_ms"] for w in ("after", "before"))
            assert after < before
        for when in commits:
            spreads[when] += [ops[when, run]["results"][name]["native_xla_over_graph"] for run in (1, 2)]
    after, before = spreads["after"], spreads["before"]
    assert (
        f"now take {min(after):.2f}-{max(after):.2f}x the graph's time ({min(before):.2f}-{max(before):.2f}x "
        "before)"
    ) in flat

    def step(when: str, run: int) -> str:
        return f"{steps[when, run]['models']['impala_cnn']['timings']['train_step']['xla']['median_ms']:.1f}"

    def ratio(when: str, run: int) -> str:
        return f"{steps[when, run]['ratios']['xla_over_graph']['impala_cnn']['train_step']:.2f}"

    assert (
        f"XLA step took {step('before', 1)} and {step('before', 2)} ms before, {step('after', 1)} and "
        f"{step('after', 2)} ms after, XLA / graph {ratio('before', 1)} and {ratio('before', 2)} before, "
        f"{ratio('after', 1)} and {ratio('after', 2)} after"
    ) in flat


def test_the_native_convolution_section_is_its_reports():
    """docs/speed.md's "The CNNs' convolutions in a native op": the op benchmark's convolution rows, and the
    eight alternated encoder rounds, the IMPALA-CNN faster with XLA after in the landed form's rounds."""
    start = SPEED.index("#### The CNNs' convolutions in a native op")
    section = SPEED[start : SPEED.index("\n#### The targets at f07ffb9 and f86dbb7", start)]
    flat = " ".join(section.split())
    ops = _report("xla_conv_gradients_amx_native_conv.json")
    assert ops["commit"].startswith("5b48f5a") and "AMX" in ops["machine"]
    rows = [line for line in ops["table"].split("\n") if line.startswith("| conv") and "kernel" not in line]
    assert len(rows) == 12 and all(row in section for row in rows)
    forms = {1: "5bd3613", 2: "5bd3613", 3: "3c7e0c0", 4: "3c7e0c0", 5: "5b48f5a", 6: "5b48f5a"}
    forms |= {7: "bfb55dd", 8: "bfb55dd"}
    ratios = {}
    for run, form in forms.items():
        cells = []
        for model in ("impala_cnn", "minigrid_cnn"):
            for when, commit in (("before", "65b9c8c"), ("after", form)):
                report = _report(f"speed_encoders_amx_native_conv_{model}_{when}_run{run}.json")
                assert report["commit"].startswith(commit) and "AMX" in report["machine"]
                [name] = report["models"]
                ratios[model, when, run] = report["ratios"]["xla_over_graph"][name]["train_step"]
                cells.append(f"{ratios[model, when, run]:.2f}")
        assert f"| {run} | {form} | " + " | ".join(cells) + " |" in section
    impala_before = [ratios["impala_cnn", "before", run] for run in forms]
    landed = [ratios["impala_cnn", "after", run] for run in (7, 8)]
    assert max(landed) < min(impala_before) and max(landed) < 1
    assert (
        f"The IMPALA-CNN's XLA step is {landed[0]:.2f} and {landed[1]:.2f}x its graph step "
        f"({min(impala_before):.2f}-{max(impala_before):.2f} before, in all eight rounds)"
    ) in flat
    source = (ROOT / "sit_keras" / "native" / "__init__.py").read_text()  # the rule the docs state
    assert "\nMIN_CONV_CHANNELS = 4\n" in source and "\nMAX_CONV_CHANNEL_PRODUCT = 256\n" in source
    assert "with 4 channels or more in and out and at most 256 input times output channels" in flat


def test_the_targets_at_f07ffb9_and_f86dbb7_are_their_runs():
    """docs/speed.md's "The targets at f07ffb9 and f86dbb7": the table is the three AMX runs' rows, the counts
    and wall times theirs, and the IMPALA-CNN's XLA step meets its target at f86dbb7."""
    start = SPEED.index("#### The targets at f07ffb9 and f86dbb7")
    section = SPEED[start : SPEED.index("\n#### The MiniGrid CNN's step under XLA", start)]
    flat = " ".join(section.split())
    names = ["speed_targets_amx_native", "speed_targets_amx_vector_pool", "speed_targets_amx_native_conv"]
    runs = [_report(f"{name}.json") for name in names]
    for run, commit in zip(runs, ("6dcef1f", "f07ffb9", "f86dbb7"), strict=True):
        assert run["commit"].startswith(commit) and "AMX" in run["machine"]
    met = {True: "yes", False: "**no**", None: "n/a"}
    for rows in zip(*(run["targets"] for run in runs), strict=True):
        last = rows[-1]
        limit = "-" if last["limit"] is None else f"{'<=' if last['at_most'] else '>='} {last['limit']:.3g}"
        values = " | ".join(f"{row['value']:.2f}" for row in rows)
        assert f"| {last['what']} | {values} | {limit} | {met[last['met']]} | `{last['report']}` |" in section
    pool, conv = runs[1], runs[2]
    assert (
        f"in {pool['wall_seconds']:.0f} s, {pool['met']} targets met and {pool['missed']} missed" in flat
        and f"in {conv['wall_seconds']:.0f} s, **{conv['met']} met and {conv['missed']} missed**" in flat
    )
    encoders = _report("speed_targets_amx_native_conv/encoders_64.json")
    steps = encoders["models"]["impala_cnn"]["timings"]["train_step"]
    xla, graph = (f"{steps[mode]['median_ms']:.1f}" for mode in ("xla", "graph"))
    ratio = encoders["ratios"]["xla_over_graph"]["impala_cnn"]["train_step"]
    assert ratio < 1 and f"{ratio:.2f}x its graph step ({xla} against {graph} ms)" in flat
    ppo = [[t["value"] for t in _report(f"{n}.json")["targets"] if "PPO" in t["what"]][:2]
           for n in ["speed_targets_amx", *names]]  # fmt: skip
    values = [v for pair in ppo for v in pair]
    assert f"({min(values):.2f}-{max(values):.2f} over the four runs)" in flat


def _op_type_rows(before: dict, after: dict, count: int) -> list[str]:
    """The docs' table of two XLA op profiles summed by op: the ``count`` ops that took longest on either
    side, before and after."""
    times = [{row["op"]: row["ms_per_call"] for row in report["op_types"]} for report in (before, after)]
    ops = sorted(set(times[0]) | set(times[1]), key=lambda op: -max(t.get(op, 0) for t in times))[:count]
    cell = lambda t, op: f"{t[op]:.2f}" if op in t else "-"  # noqa: E731
    return [f"| `{op}` | {cell(times[0], op)} | {cell(times[1], op)} |" for op in ops]


# Where the sections on the earlier speed-target runs end: the AMD host's run follows them.
AMD_TARGETS = "\n### The targets on an AMD host with AVX512_BF16"
AMD_3B7B5C2 = "\n#### The targets at 3b7b5c2, the projection's tile"
AMD_EDC8C6C = "\n#### The targets at edc8c6c, the kernel gradient's transpose"
AMD_63A6AB5 = "\n#### The targets at 63a6ab5, the custom calls on TensorFlow's threads"
AMD_223C2C3 = "\n#### The targets at 223c2c3, the skip embedding's gradient"
AMD_12E6756 = "\n#### The targets at 12e6756, the run repeated"
AMD_2C4C3A0 = "\n#### The targets at 2c4c3a0, lane sums in registers"
AMD_2C4C3A0_RUN2 = "\n#### The targets at 2c4c3a0, the run repeated"
AMD_0D64AE2 = "\n#### The targets at 0d64ae2, outputs past the caches"


def _speed_section(title: str, end: str) -> tuple[str, str]:
    """docs/speed.md from ``title`` to ``end``, and flattened."""
    start = SPEED.index(title)
    section = SPEED[start : SPEED.index(end, start)]
    return section, " ".join(section.split())


def test_the_minigrid_cnn_xla_section_is_its_reports():
    """docs/speed.md's "The MiniGrid CNN's step under XLA": the op profiles before and after, the four
    alternated encoder rounds and the kernel gradients' op benchmark, each report named in it."""
    section, flat = _speed_section("#### The MiniGrid CNN's step under XLA", "\n#### XLA's tree reductions")
    before, after = (_report(f"op_profile_xla_minigrid_cnn_{w}.json") for w in ("before", "after"))
    for report, commit in ((before, "26af2eb"), (after, "f3f8215")):
        assert report["commit"].startswith(commit) and "AMX" in report["machine"]
        assert report["settings"]["jit_compile"] and report["settings"]["image_size"] == 14
    assert all(row in section for row in _op_type_rows(before, after, 9))
    assert (
        f"Wall time per call {before['wall_ms_median']:.1f} ms before and {after['wall_ms_median']:.1f} "
        f"after; the instructions sum to {before['summed_op_ms_per_call']:.1f} and "
        f"{after['summed_op_ms_per_call']:.1f} ms"
    ) in flat
    windows = sorted((r["ms_per_call"] for r in before["nodes"] if r["op"] == "reduce-window"), reverse=True)
    products = sorted((r["ms_per_call"] for r in after["nodes"] if r["op"] == "MatMul"), reverse=True)
    assert f"took {windows[0]:.2f} and {windows[1]:.2f} ms" in flat
    assert f"a product with a vector of ones: {products[0]:.2f} and {products[1]:.2f} ms" in flat
    kernel = [
        next(r for r in p["nodes"] if r["node"].startswith("SitConv2DKernelGrad [")) for p in (before, after)
    ]
    assert kernel[1]["ms_per_call"] < kernel[0]["ms_per_call"]
    assert f"took {kernel[0]['ms_per_call']:.2f} ms ({kernel[1]['ms_per_call']:.2f} after)" in flat
    ratios: dict[tuple[str, str], list[float]] = {}
    for run in (1, 2, 3, 4):
        cells = []
        for tag, models in (("minigrid", ("cnn", "vit")), ("impala_cnn", ("impala_cnn",))):
            for model in models:
                for when, commit in (("before", "26af2eb"), ("after", "f3f8215")):
                    name = f"speed_encoders_amx_bias_grads_{tag}_{when}_run{run}.json"
                    assert f"`{name}`" in flat
                    report = _report(name)
                    assert report["commit"].startswith(commit) and "AMX" in report["machine"]
                    key = model if tag == "impala_cnn" else f"configs/minigrid/lavacrossing_{model}.gin"
                    ratio = report["ratios"]["xla_over_graph"][key]["train_step"]
                    ratios.setdefault((model, when), []).append(ratio)
                    cells.append(f"{ratio:.2f}")
        assert f"| {run} | " + " | ".join(cells) + " |" in section
    span = {key: f"{min(v):.2f}-{max(v):.2f}" for key, v in ratios.items()}
    above = sorted(r for r in ratios["cnn", "after"] if r > 1)
    assert len(above) == 2 and min(ratios["cnn", "before"]) > 1
    assert (
        f"went from {span['cnn', 'before']} to {span['cnn', 'after']} (two rounds in four above 1, at "
        f"{above[0]:.2f} and {above[1]:.2f}"
    ) in flat
    assert f"the ViT's at 14x14 from {span['vit', 'before']} to {span['vit', 'after']}" in flat
    assert max(ratios["vit", "after"]) < 1 < min(ratios["vit", "before"])
    ops = {}
    for when, commit in (("before", "26af2eb"), ("after", "f3f8215")):
        for run in (1, 2):
            name = f"xla_conv_gradients_amx_bias_grads_{when}_run{run}.json"
            assert f"`{name}`" in flat
            ops[when, run] = _report(name)
            assert ops[when, run]["commit"].startswith(commit) and "AMX" in ops[when, run]["machine"]
    for name in (n for n in ops["before", 1]["results"] if n.endswith(": kernel gradient")):
        results = [ops[w, r]["results"][name] for w in ("before", "after") for r in (1, 2)]
        ms = [f"{r['native_xla_ms']:.2f}" for r in results]
        over = [f"{r['native_xla_over_graph']:.2f}" for r in results]
        row = f"| {name.removesuffix(': kernel gradient')} | {ms[0]}, {ms[1]} | {ms[2]}, {ms[3]} | "
        assert row + f"{over[0]}, {over[1]} | {over[2]}, {over[3]} |" in section
        assert max(r["native_xla_over_graph"] for r in results[2:]) < 0.9  # every shape, after


def test_the_tree_reductions_section_is_its_reports():
    """docs/speed.md's "XLA's tree reductions": the ViT's op profiles at 14x14 before and after, and the flag
    importing sit_keras adds."""
    section, flat = _speed_section("#### XLA's tree reductions", "\n#### The targets at f3f8215")
    before, after = (_report(f"op_profile_xla_minigrid_vit_{w}.json") for w in ("before", "after"))
    assert before["commit"].startswith("26af2eb") and after["commit"].startswith("f3f8215")
    assert all(row in section for row in _op_type_rows(before, after, 8))
    windows = next(r["ms_per_call"] for r in before["op_types"] if r["op"] == "reduce-window")
    sums = next(r["ms_per_call"] for r in after["op_types"] if r["op"] == "Sum")
    assert "reduce-window" not in {r["op"] for r in after["op_types"]}
    assert f"took {windows:.2f} ms of a {before['summed_op_ms_per_call']:.1f} ms step" in flat
    assert f"plain reductions (`Sum`, {sums:.2f} ms)" in flat
    assert (
        f"went from {before['wall_ms_median']:.1f} to {after['wall_ms_median']:.1f} ms per call" in flat
        and after["wall_ms_median"] < before["wall_ms_median"]
    )
    assert "`--xla_disable_hlo_passes=tree_reduction_rewriter`" in flat


def _assert_targets_table(section: str, flat: str, previous: dict, run: dict) -> None:
    """A speed-target section's table of two runs, row by row, and the run's counts and wall time."""
    met = {True: "yes", False: "**no**", None: "n/a"}
    for old, new in zip(previous["targets"], run["targets"], strict=True):
        limit = "-" if new["limit"] is None else f"{'<=' if new['at_most'] else '>='} {new['limit']:.3g}"
        row = f"| {new['what']} | {old['value']:.2f} | {new['value']:.2f} | {limit} | {met[new['met']]} |"
        assert row + f" `{new['report']}` |" in section
    assert f"in {run['wall_seconds']:.0f} s: **{run['met']} targets met and {run['missed']} missed**" in flat


def test_the_targets_at_f3f8215_are_the_run():
    """docs/speed.md's "The targets at f3f8215": the table is the two AMX runs' rows, the counts and wall
    time the run's, and every model's XLA step faster than its graph step in it."""
    section, flat = _speed_section("#### The targets at f3f8215", "\n#### The SiT's XLA step by instruction")
    previous, run = (
        _report("speed_targets_amx_native_conv.json"),
        _report("speed_targets_amx_tree_reductions.json"),
    )
    assert run["commit"].startswith("f3f8215") and "AMX" in run["machine"]
    _assert_targets_table(section, flat, previous, run)
    xla = [t for t in run["targets"] if "XLA / graph" in t["what"]]
    assert len(xla) == 8 and all(t["met"] for t in xla)
    missed = {t["what"] for t in run["targets"] if t["met"] is False}
    assert missed == {"SiT bfloat16 / float32 train step", "Procgen SiT / IMPALA-CNN env steps/s (PPO)"}
    steps = _report("speed_targets_amx_tree_reductions/encoders_64.json")["models"]["vit"]["timings"]
    xla_ms, graph_ms = (f"{steps['train_step'][m]['median_ms']:.1f}" for m in ("xla", "graph"))
    assert f"the ViT's 0.80 ({xla_ms} against {graph_ms} ms)" in flat


def test_the_sits_xla_step_section_is_its_profile():
    """docs/speed.md's "The SiT's XLA step by instruction": the profile's ten longest ops, its times and the
    native kernels' share."""
    section, flat = _speed_section("#### The SiT's XLA step by instruction", AMD_TARGETS)
    report = _report("op_profile_xla_sit_train_amx.json")
    assert report["commit"].startswith("146f498") and "AMX" in report["machine"]
    assert report["settings"]["jit_compile"] and report["settings"]["model"] == "sit"
    for row in report["op_types"][:10]:
        assert f"| `{row['op']}` | {row['ms_per_call']:.1f} | {row['share']:.1%} |" in section
    assert (
        f"{report['wall_ms_median']:.1f} ms per call (median of the timed calls), the profiled instructions "
        f"summing to {report['summed_op_ms_per_call']:.1f} ms"
    ) in flat
    native = sum(row["share"] for row in report["op_types"] if row["op"].startswith("sit_"))
    assert f"The native kernels (`sit_*`) take {native:.0%} of the instructions' time" in flat
    assert report["op_types"][0]["op"] == "sit_window_attention_grad_f32"


def test_the_line_fill_buffers_section_is_its_reports():
    """docs/speed.md's "Prefetches that waited for line-fill buffers": the ops' and the encoders' alternated
    rounds before and after, each report named in it, and the XLA step faster after in both rounds."""
    section, flat = _speed_section(
        "#### Prefetches that waited for line-fill buffers", "\n#### The bfloat16 step one op at a time"
    )
    commits = {"before": "61025b4", "after": "e8edbda"}
    ops, encoders = {}, {}
    for when, commit in commits.items():
        for run in (1, 2):
            for prefix, reports in (("native_ops", ops), ("speed_encoders", encoders)):
                name = f"{prefix}_amx_prefetch_{when}_run{run}.json"
                assert f"`benchmarks/reference/{name}`" in flat
                report = reports[when, run] = _report(name)
                assert report["commit"].startswith(commit) and "AMX" in report["machine"]
    labels = {
        "class_token": "`class_token` (second local block)",
        "projection": "`projection` (graph)",
        "projection_xla": "`projection` (XLA)",
        "first_block": "`first_block`",
        "global_grid": "`global_grid`",
    }
    for op, label in labels.items():
        cells = [
            ", ".join(f"{ops[when, run]['results'][op][part]['median_ms']:.2f}" for run in (1, 2))
            for part in ("forward", "backward")
            for when in commits
        ]
        assert f"| {label} | " + " | ".join(cells) + " |" in section
    for when, commit in commits.items():
        for run in (1, 2):
            step = encoders[when, run]["models"]["sit"]["timings"]["train_step"]
            graph, xla = step["graph"]["median_ms"], step["xla"]["median_ms"]
            assert f"| {commit}, round {run} | {graph:.1f} | {xla:.1f} | {xla / graph:.2f} |" in section
    xla = {key: r["ratios"]["xla_over_graph"]["sit"]["train_step"] for key, r in encoders.items()}
    assert max(xla["after", 1], xla["after", 2]) < min(xla["before", 1], xla["before", 2])


def test_the_bfloat16_one_op_section_is_its_profiles():
    """docs/speed.md's "The bfloat16 step one op at a time": both profiles ran one op at a time, the table is
    their longest op types, and the casts' time and the step without them are the profiles'."""
    section, flat = _speed_section("#### The bfloat16 step one op at a time", "\n#### The targets at e8edbda")
    f32, bf16 = (_report(f"op_profile_one_op_amx_{p}.json") for p in ("float32", "mixed_bfloat16"))
    for report, precision in ((f32, "float32"), (bf16, "mixed_bfloat16")):
        assert f"`benchmarks/reference/op_profile_one_op_amx_{precision}.json`" in flat
        assert report["commit"].startswith("e8edbda") and "AMX" in report["machine"]
        assert report["settings"]["one_op_at_a_time"] and report["settings"]["precision"] == precision
        assert report["environment"]["threading"]["inter_op_parallelism_threads"] == 1
    times = [{row["op"]: row["ms_per_call"] for row in r["op_types"]} for r in (f32, bf16)]
    ops = sorted(set(times[0]) | set(times[1]), key=lambda op: -max(t.get(op, 0) for t in times))[:13]
    for op in ops:
        cells = [f"{t[op]:.1f}" if op in t else "-" for t in times]
        assert f"| `{op}` | {cells[0]} | {cells[1]} |" in section
    assert (
        f"{f32['summed_op_ms_per_call']:.1f} ms in float32 and {bf16['summed_op_ms_per_call']:.1f} ms in "
        f"bfloat16 (wall {f32['wall_ms_median']:.1f} and {bf16['wall_ms_median']:.1f} ms)"
    ) in flat
    casts = sorted((r["ms_per_call"] for r in bf16["nodes"] if r["op"] == "Cast"), reverse=True)[:8]
    total = times[1]["Cast"]
    assert f"{total:.1f} ms, {total / bf16['summed_op_ms_per_call']:.0%} of the bfloat16 step" in flat
    assert f"{sum(casts):.1f} ms of it in the eight casts" in flat
    without = bf16["summed_op_ms_per_call"] - total
    assert f"about {without:.0f} ms, {without / f32['summed_op_ms_per_call']:.2f}x the float32 step's" in flat


def test_the_targets_at_e8edbda_are_the_run():
    """docs/speed.md's "The targets at e8edbda": the table is the two AMX runs' rows; the counts, wall time,
    the SiT's steps and Procgen's env steps/s are the run's."""
    section, flat = _speed_section("#### The targets at e8edbda", "\n#### One pass for s and f(s)")
    previous = _report("speed_targets_amx_tree_reductions.json")
    run = _report("speed_targets_amx_prefetch.json")
    assert run["commit"].startswith("e8edbda") and "AMX" in run["machine"]
    _assert_targets_table(section, flat, previous, run)
    steps = _report("speed_targets_amx_prefetch/encoders_64.json")["models"]["sit"]["timings"]["train_step"]
    graph_ms, xla_ms = (steps[mode]["median_ms"] for mode in ("graph", "xla"))
    assert f"({graph_ms:.1f} ms in graph mode, {xla_ms:.1f} with XLA)" in flat
    procgen = _report("speed_targets_amx_prefetch/procgen_ppo.json")
    sps = procgen["env_steps_per_second"]
    ratio = procgen["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    sit, impala = sps["sit"], sps["impala_cnn"]
    assert f"1/{ratio:.2f} (SiT {sit:.1f} against IMPALA-CNN {impala:.1f} env steps/s)" in flat
    missed = {t["what"] for t in run["targets"] if t["met"] is False}
    assert missed == {
        "sit: XLA / graph train step, 64x64",
        "SiT bfloat16 / float32 train step",
        "Procgen SiT / IMPALA-CNN env steps/s (PPO)",
    }


def test_the_one_pass_section_is_its_alternated_ppo_runs():
    """docs/speed.md's "One pass for s and f(s)": the four alternated PPO throughput runs, each named, and
    every ratio in them within 1/4, as the text says."""
    section, flat = _speed_section("#### One pass for s and f(s)", "\n#### The targets at e9d6e53")
    for when, commit in (("before", "f227364"), ("after", "e9d6e53")):
        for run in (1, 2):
            name = f"ppo_throughput_amx_drac_{when}_run{run}.json"
            assert f"`benchmarks/reference/{name}`" in flat
            report = _report(name)
            assert report["commit"].startswith(commit) and "AMX" in report["machine"]
            sps = report["env_steps_per_second"]
            ratio = report["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
            row = f"| {commit}, round {run} | {sps['sit']:.1f} | {sps['impala_cnn']:.1f} | 1/{ratio:.2f} |"
            assert row in section
            assert ratio < 4
    previous = _report("speed_targets_amx_prefetch/procgen_ppo.json")
    assert f"measured at 1/{previous['ratios']['impala_cnn_over_sit_env_steps_per_second']:.2f}" in flat


def test_the_targets_at_e9d6e53_are_the_run():
    """docs/speed.md's "The targets at e9d6e53": the table is the e8edbda and e9d6e53 runs' rows; the counts,
    Procgen's env steps/s and the MiniGrid CNN's steps are the run's; only bfloat16 missed in every run."""
    section, flat = _speed_section("#### The targets at e9d6e53", "\n#### bfloat16 in, bfloat16 out")
    previous = _report("speed_targets_amx_prefetch.json")
    run = _report("speed_targets_amx_one_pass.json")
    assert run["commit"].startswith("e9d6e53") and "AMX" in run["machine"]
    _assert_targets_table(section, flat, previous, run)
    procgen = _report("speed_targets_amx_one_pass/procgen_ppo.json")
    sit, impala = procgen["env_steps_per_second"]["sit"], procgen["env_steps_per_second"]["impala_cnn"]
    ratio = procgen["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert f"1/{ratio:.2f} in this run (SiT {sit:.1f} against IMPALA-CNN {impala:.1f} env steps/s)" in flat
    steps = _report("speed_targets_amx_one_pass/encoders_14.json")["models"]
    cnn = steps["configs/minigrid/lavacrossing_cnn.gin"]["timings"]["train_step"]
    assert f"({cnn['xla']['median_ms']:.1f} against {cnn['graph']['median_ms']:.1f} ms)" in flat
    runs = (_report("speed_targets_amx_tree_reductions.json"), previous, run)
    never = {t["what"] for t in run["targets"]}
    for report in runs:
        never &= {t["what"] for t in report["targets"] if t["met"] is False}
    assert never == {"SiT bfloat16 / float32 train step"}  # every other target met in one of the runs


def _step_round(section: str, flat: str, name: str, commit: str, run: int) -> tuple[float, float, float]:
    """The alternated round ``speed_encoders_amx_<name>.json`` at ``commit``, named in a section and its row
    ``run`` of the table: the SiT's float32 and mixed_bfloat16 steps (ms) and their ratio."""
    report = _report(f"speed_encoders_amx_{name}.json")
    assert f"`benchmarks/reference/speed_encoders_amx_{name}.json`" in flat
    assert report["commit"].startswith(commit) and "AMX" in report["machine"]
    sit = report["models"]["sit"]
    graph = sit["timings"]["train_step"]["graph"]["median_ms"]
    stored = sit["precision"]["mixed_bfloat16"]
    cells = f"{graph:.1f} | {stored['median_ms']:.1f} | {stored['over_float32']:.2f}"
    assert f"| {commit}, round {run} | {cells} |" in section
    return graph, stored["median_ms"], stored["over_float32"]


def _assert_precision_rounds(
    section: str, flat: str, tag: str, commits: tuple[str, str], runs: tuple[int, ...] = (1, 2)
) -> dict:
    """A section's alternated ``speed_encoders_amx_<tag>_{before,after}_run<r>.json`` for r in ``runs``,
    each named in it and a row of its table (the SiT's float32 and mixed_bfloat16 steps), the ratio lower
    after in every round; returns the ratios by (when, round)."""
    ratios = {}
    for when, commit in zip(("before", "after"), commits, strict=True):
        for run in runs:
            ratios[when, run] = _step_round(section, flat, f"{tag}_{when}_run{run}", commit, run)[2]
    assert max(ratios["after", r] for r in runs) < min(ratios["before", r] for r in runs)
    return ratios


def _one_op_profiles(flat: str, tag: str, commit: str) -> tuple[dict, dict]:
    """The float32 and mixed_bfloat16 profiles ``op_profile_one_op_amx_<tag>_*.json`` a section names, both
    one op at a time at ``commit``."""
    reports = []
    for precision in ("float32", "mixed_bfloat16"):
        name = f"op_profile_one_op_amx_{tag}_{precision}.json"
        assert f"`benchmarks/reference/{name}`" in flat
        report = _report(name)
        assert report["commit"].startswith(commit) and "AMX" in report["machine"]
        assert report["settings"]["one_op_at_a_time"] and report["settings"]["precision"] == precision
        reports.append(report)
    return reports[0], reports[1]


def _op_times(report: dict) -> dict[str, float]:
    return {row["op"]: row["ms_per_call"] for row in report["op_types"]}


def _precision_change(
    title: str, end: str, tag: str, commits: tuple[str, str], previous: str
) -> tuple[str, str, dict, dict, dict]:
    """A bfloat16 change's docs/speed.md section ``title`` (to ``end``) and its flattened text, its alternated
    rounds checked (``_assert_precision_rounds``); the float32 and bfloat16 op times of its one-op profiles
    at the later commit, and the bfloat16 op times of the ``previous`` profile."""
    section, flat = _speed_section(title, end)
    _assert_precision_rounds(section, flat, tag, commits)
    f32, bf16 = (_op_times(r) for r in _one_op_profiles(flat, tag, commits[1]))
    return section, flat, f32, bf16, _op_times(_report(previous))


def test_the_bfloat16_storage_section_is_its_runs():
    """docs/speed.md's "bfloat16 in, bfloat16 out": the alternated rounds before and after, the ratio lower
    after; the casts, the ops that read bfloat16 and the additions as its profiles give them."""
    _, flat, f32, bf16, before = _precision_change(
        "#### bfloat16 in, bfloat16 out",
        "\n#### The skip connection in the op",
        "bf16_storage",
        ("341b9b6", "63e4365"),
        "op_profile_one_op_amx_mixed_bfloat16.json",
    )
    casts = f"the casts take {bf16['Cast']:.1f} ms of the bfloat16 step ({before['Cast']:.1f} ms before)"
    assert casts in flat
    grad, window = "SitClassTokenAttentionGrad", "SitWindowAttention"
    assert (
        f"the class token's gradient {bf16[grad]:.1f} against {f32[grad]:.1f} ms, the window op "
        f"{bf16[window]:.1f} against {f32[window]:.1f} ms"
    ) in flat
    assert f"{bf16['AddV2']:.1f} ms of additions against {f32['AddV2']:.1f} ms in float32" in flat


def test_the_skip_in_op_section_is_its_runs():
    """docs/speed.md's "The skip connection in the op": the alternated rounds, the ratio lower after; the
    profiles' table and sums, and the local GSA's bfloat16 addition gone from the step."""
    section, flat = _speed_section("#### The skip connection in the op", "\n#### The stem in bfloat16")
    _assert_precision_rounds(section, flat, "skip_in_op", ("63e4365", "b339641"))
    f32, bf16 = _one_op_profiles(flat, "skip_in_op", "b339641")
    times = [_op_times(f32), _op_times(bf16)]
    ops = sorted(set(times[0]) | set(times[1]), key=lambda op: -max(t.get(op, 0) for t in times))[:13]
    for op in ops:
        cells = [f"{t[op]:.1f}" if op in t else "-" for t in times]
        assert f"| `{op}` | {cells[0]} | {cells[1]} |" in section
    high, low = f32["summed_op_ms_per_call"], bf16["summed_op_ms_per_call"]
    assert f"{high:.1f} ms in float32 and {low:.1f} ms in bfloat16, {low / high:.2f}x" in flat
    assert f"the window op's gradient alone, {times[1]['SitWindowAttentionGrad']:.0f} ms" in flat
    before = _report("op_profile_one_op_amx_bf16_storage_mixed_bfloat16.json")
    skip_add = "si_t_encoder/local_gsa/add_5"
    assert skip_add in {row["node"] for row in before["nodes"]}
    assert not any(row["node"].startswith("si_t_encoder/local_gsa/add") for row in bf16["nodes"])


def test_the_stem_bf16_section_is_its_runs():
    """docs/speed.md's "The stem in bfloat16": the alternated rounds, the ratio lower after; the casts and the
    pooling as its profiles give them, the casts fewer than at b339641."""
    _, flat, f32, bf16, before = _precision_change(
        "#### The stem in bfloat16",
        "\n#### The targets at 50474b7",
        "stem_bf16",
        ("b339641", "f1cc706"),
        "op_profile_one_op_amx_skip_in_op_mixed_bfloat16.json",
    )
    casts = f"the casts take {bf16['Cast']:.1f} ms of the bfloat16 step ({before['Cast']:.1f} ms at b339641)"
    assert casts in flat
    assert bf16["Cast"] < before["Cast"]
    assert f"the pooling {bf16['SitMaxPool']:.2f} ms ({f32['SitMaxPool']:.2f} ms in float32)" in flat


def test_the_targets_at_50474b7_are_the_run():
    """docs/speed.md's "The targets at 50474b7": the table is the e9d6e53 and 50474b7 runs' rows; the SiT's
    steps, the MiniGrid CNN's and Procgen's env steps/s are the run's; only bfloat16 missed."""
    end = "\n#### The first block's inputs widened once"
    section, flat = _speed_section("#### The targets at 50474b7", end)
    previous = _report("speed_targets_amx_one_pass.json")
    run = _report("speed_targets_amx_bf16_storage.json")
    assert run["commit"].startswith("50474b7") and "AMX" in run["machine"]
    _assert_targets_table(section, flat, previous, run)
    assert {t["what"] for t in run["targets"] if t["met"] is False} == {"SiT bfloat16 / float32 train step"}
    sit = _report("speed_targets_amx_bf16_storage/encoders_64.json")["models"]["sit"]
    graph, xla = (sit["timings"]["train_step"][mode]["median_ms"] for mode in ("graph", "xla"))
    bf16 = sit["precision"]["mixed_bfloat16"]
    assert f"bfloat16 step is {bf16['median_ms']:.1f} ms against {graph:.1f} ms in float32, " in flat
    assert f"{bf16['over_float32']:.2f}x (1.04 at e9d6e53)" in flat
    assert f"the SiT's {xla / graph:.2f} ({xla:.1f} against {graph:.1f} ms)" in flat
    steps = _report("speed_targets_amx_bf16_storage/encoders_14.json")["models"]
    cnn = steps["configs/minigrid/lavacrossing_cnn.gin"]["timings"]["train_step"]
    xla_ms, graph_ms = cnn["xla"]["median_ms"], cnn["graph"]["median_ms"]
    assert f"step is {xla_ms / graph_ms:.2f} here ({xla_ms:.1f} against {graph_ms:.1f} ms)" in flat
    procgen = _report("speed_targets_amx_bf16_storage/procgen_ppo.json")
    sit_sps, impala_sps = (procgen["env_steps_per_second"][m] for m in ("sit", "impala_cnn"))
    ratio = procgen["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert f"1/{ratio:.2f} (SiT {sit_sps:.1f} against IMPALA-CNN {impala_sps:.1f} env steps/s)" in flat


def test_the_widened_once_section_is_its_runs():
    """docs/speed.md's "The first block's inputs widened once": the eight alternated native_ops reports, each
    named and a row of the table; the medians quoted; the bfloat16 op faster after in every round's median,
    the float32 op within 3%."""
    end = "\n#### The graphs in float32 and the stem's bias in its op"
    section, flat = _speed_section("#### The first block's inputs widened once", end)
    ratios, times = {}, {}
    for when, commit in (("before", "074cffe"), ("after", "9c6ad0b")):
        for run in (1, 2, 3, 4):
            name = f"native_ops_amx_widened_once_{when}_run{run}.json"
            assert f"`benchmarks/reference/{name}`" in flat
            report = _report(name)
            assert report["commit"].startswith(commit) and "AMX" in report["machine"]
            results = report["results"]
            f32, bf16 = (results[case]["backward"] for case in ("first_block", "first_block_bfloat16"))
            ratio = results["bfloat16_over_float32"]["first_block"]["backward"]
            assert ratio == pytest.approx(bf16["median_ms"] / f32["median_ms"])
            cells = [f"{f32['median_ms']:.1f}", f"{bf16['median_ms']:.1f}", f"{ratio:.2f}"]
            cells += [f"{f32['matmul_times']:.2f}", f"{bf16['matmul_times']:.2f}"]
            assert f"| {commit}, round {run} | {' | '.join(cells)} |" in section
            ratios.setdefault(when, []).append(ratio)
            times.setdefault(when, []).append((f32["median_ms"], bf16["median_ms"]))
    median = {w: statistics.median(r) for w, r in ratios.items()}
    f32, bf16 = ({w: statistics.median(t[i] for t in times[w]) for w in times} for i in (0, 1))
    assert f"from {bf16['before']:.1f} to {bf16['after']:.1f} ms" in flat
    assert f"its ratio from {median['before']:.2f} to {median['after']:.2f}" in flat
    assert f"({f32['before']:.1f} and {f32['after']:.1f} ms)" in flat
    assert bf16["after"] < bf16["before"] and abs(f32["after"] / f32["before"] - 1) < 0.03
    after = [_report(f"native_ops_amx_widened_once_after_run{run}.json")["results"] for run in (1, 2, 3, 4)]
    for case in ("class_token", "global_grid", "layer_norm"):
        ratio = statistics.median(r["bfloat16_over_float32"][case]["backward"] for r in after)
        assert f"{case.replace('_', ' ')} {ratio:.2f}" in flat
    _assert_precision_rounds(section, flat, "widened_once", ("074cffe", "d5f63c5"), runs=(1, 2, 3))
    steps = [
        _report(f"speed_encoders_amx_widened_once_{when}_run{run}.json")["models"]["sit"]["timings"]
        for when in ("before", "after")
        for run in (1, 2, 3)
    ]
    graph = [step["train_step"]["graph"]["median_ms"] for step in steps]
    targets = _report("speed_targets_amx_bf16_storage/encoders_64.json")["models"]["sit"]["timings"]
    speed_run = targets["train_step"]["graph"]["median_ms"]
    assert f"(the float32 step {min(graph):.0f}-{max(graph):.0f} ms against {speed_run:.0f} ms" in flat


def test_the_dense_gradients_section_quotes_the_two_speed_target_runs():
    """docs/speed.md's "Sparse gradients of shared weight tables": its before / after XLA ratios are the
    two speed-target runs'."""
    section = SPEED[SPEED.index("### Sparse gradients of shared weight tables") :]
    flat = " ".join(section[: section.index("\n## ")].split())  # the last subsection of "## XLA"
    before, after = _report("speed_targets_avx2.json"), _report("speed_targets_avx2_dense_gradients.json")
    value = {}
    for b, a in zip(before["targets"], after["targets"], strict=True):
        value[b["what"].split(":")[0], b["what"][-5:]] = f"{b['value']:.2f}", f"{a['value']:.2f}"
    readout, siet, sit = value["siet_rotation_pooled", "14x14"], value["siet", "64x64"], value["sit", "64x64"]
    assert f"at 14x14 went from {readout[0]} before to {readout[1]} after" in flat
    assert f"the SieT's at 64x64 from {siet[0]} to {siet[1]}, the SiT's from {sit[0]} to {sit[1]}" in flat


def _alternated_runs(
    title: str, tag: str, commits: tuple[str, str], cases: tuple[str, ...]
) -> tuple[str, str, dict, dict]:
    """The docs/speed.md subsection ``title`` (the last of "## Encoders" it sits in), flattened too, and its
    four alternated runs before and after (``commits``) on the AVX2 host,
    ``native_ops_avx2_<tag>_{before,after}_run{1,2}.json`` and ``speed_encoders_avx2_...``, each named in it;
    its table of the ops' ``cases`` is theirs."""
    section = SPEED[SPEED.index(title) :]
    section = section[: section.index("\n## ")]
    flat = " ".join(section.split())
    runs = {(w, r): f"_{tag}_{w}_run{r}.json" for w in ("before", "after") for r in (1, 2)}
    ops = {key: _report("native_ops_avx2" + name) for key, name in runs.items()}
    steps = {key: _report("speed_encoders_avx2" + name) for key, name in runs.items()}
    for (when, _), report in [*ops.items(), *steps.items()]:
        assert report["commit"].startswith(commits[when == "after"])
        assert "AVX2" in report["machine"] and "no AMX" in report["machine"]
    for name in runs.values():
        assert f"`benchmarks/reference/native_ops_avx2{name}`" in flat
        assert f"`benchmarks/reference/speed_encoders_avx2{name}`" in flat
    for case in cases:
        cells = [
            ", ".join(f"{ops[when, r]['results'][case][stage]['median_ms']:.2f}" for r in (1, 2))
            for stage in ("forward", "backward")
            for when in ("before", "after")
        ]
        assert f"| `{case}` | {' | '.join(cells)} |" in section
    return section, flat, ops, steps


def test_the_constant_shuffles_section_is_its_alternated_runs():
    """docs/speed.md's "Constant shuffles in the tile transposes": the ops' and the encoders' tables are the
    four alternated runs before (bdd7069) and after (71a49d2) on the AVX2 host, and the step's ratios it
    quotes are theirs."""
    cases = ("first_block", "class_token", "global_grid", "layer_norm")
    title = "### Constant shuffles in the tile transposes"
    section, flat, ops, steps = _alternated_runs(title, "transposes", ("bdd7069", "71a49d2"), cases)
    for report in [*ops.values(), *steps.values()]:
        assert report["settings"]["repeats"] == 15
    order = [("before", 1), ("before", 2), ("after", 1), ("after", 2)]
    step = {
        key: {
            m: s["models"][m]["timings"]["train_step"]["graph"]["median_ms"] for m in ("sit", "siet", "vit")
        }
        for key, s in steps.items()
    }
    for model, name in (("sit", "SiT"), ("siet", "SieT"), ("vit", "ViT")):
        assert f"| {name}, ms | {' | '.join(f'{step[k][model]:.1f}' for k in order)} |" in section
        if model != "vit":
            ratios = " | ".join(
                f"{steps[k]['ratios']['train_step_over_vit'][model]['graph']:.2f}" for k in order
            )
            assert f"| {name} / ViT | {ratios} |" in section
    shares = {}
    for model in ("sit", "siet"):
        share = [step["after", a][model] / step["before", b][model] for a in (1, 2) for b in (1, 2)]
        shares[model] = f"{min(share):.2f}-{max(share):.2f}x"
    assert f"The SiT's step took {shares['sit']} its time before, and the SieT's {shares['siet']}" in flat


def test_the_spectral_bound_of_12_blocks_is_its_two_runs():
    """docs/speed.md's "Constant shuffles in the tile transposes": the 8x8 grid's spectral over dense speed-up
    at 12 blocks of 8 lanes, forward and forward + backward, is the two runs' built with a bound of 8."""
    section = SPEED[SPEED.index("### Constant shuffles in the tile transposes") :]
    flat = " ".join(section[: section.index("\n## ")].split())
    runs = [_report(f"native_ops_avx2_spectral_from_8_blocks_run{r}.json") for r in (1, 2)]
    for run in runs:
        assert "kMinSpectralBlocks = 8" in run["variant"] and "no AMX" in run["machine"]
        assert run["settings"]["batch"] == 96 and run["commit"].startswith("07e0f43")
    speedups = [run["results"]["spectral_speedup"]["global_grid"] for run in runs]
    forward = sorted(f"{s['forward']:.2f}" for s in speedups)
    both = sorted(f"{s['backward']:.2f}" for s in speedups)
    assert (
        f"{forward[0]}-{forward[1]}x as fast forward and {both[0]}-{both[1]}x as fast forward + backward"
        in flat
    )
    assert "kMinSpectralBlocks = 12;" in (ROOT / "sit_keras" / "native" / "rotation_spectra.h").read_text()


def test_the_orbit_gradients_section_is_its_alternated_runs():
    """docs/speed.md's "Graph gradients in the quarter turn's orbits": the ops' and the encoders' tables are
    the four alternated runs before (8726422) and after (f6a7860) on the AVX2 host, and the step's ratios
    it quotes are theirs."""
    cases = ("first_block", "class_token", "global_grid")
    title = "### Graph gradients in the quarter turn's orbits"
    section, flat, _, steps = _alternated_runs(title, "orbit_gradients", ("8726422", "f6a7860"), cases)
    order = [("before", 1), ("before", 2), ("after", 1), ("after", 2)]
    for model, name in (("sit", "SiT"), ("siet", "SieT"), ("vit", "ViT")):
        ms = " | ".join(
            f"{steps[k]['models'][model]['timings']['train_step']['graph']['median_ms']:.1f}" for k in order
        )
        assert f"| {name}, ms | {ms} |" in section
        if model != "vit":
            ratios = " | ".join(
                f"{steps[k]['ratios']['train_step_over_vit'][model]['graph']:.2f}" for k in order
            )
            assert f"| {name} / ViT | {ratios} |" in section
    ms = {
        k: {
            m: steps[k]["models"][m]["timings"]["train_step"]["graph"]["median_ms"]
            for m in ("sit", "siet", "vit")
        }
        for k in order
    }
    slow = ms["before", 2]["vit"]
    others = sorted(ms[k]["vit"] for k in order if k != ("before", 2))
    assert slow > 1.5 * others[-1]  # the slow phase the section names
    assert f"({slow:.1f} ms against {others[0]:.1f}-{others[-1]:.1f} ms in the other three runs)" in flat
    shares = [f"{ms['after', 1][m] / ms['before', 1][m]:.2f}x" for m in ("sit", "siet")]
    assert f"the SiT's step took {shares[0]} its time before and the SieT's {shares[1]}" in flat
    siet = {k: f"{steps[k]['ratios']['train_step_over_vit']['siet']['graph']:.2f}" for k in order}
    assert (
        f"went from {siet['before', 1]} to {siet['after', 1]}; in the second *after* run it was "
        f"{siet['after', 2]}" in flat
    )


def test_the_prefetch_section_is_its_alternated_runs():
    """docs/speed.md's "Prefetching in the kernels": the ops' and the encoders' tables are the four
    alternated runs before (c03a9f6) and after (f6f0908) on the AVX2 host, and the shares and the bound
    on the ViT ratio it quotes are theirs."""
    cases = ("first_block", "class_token", "global_grid", "projection")
    title = "### Prefetching in the kernels"
    section, flat, _, steps = _alternated_runs(title, "prefetch", ("c03a9f6", "f6f0908"), cases)
    order = [("before", 1), ("before", 2), ("after", 1), ("after", 2)]
    ms = {
        k: {
            m: steps[k]["models"][m]["timings"]["train_step"]["graph"]["median_ms"]
            for m in ("sit", "siet", "vit")
        }
        for k in order
    }
    ratios = {
        k: {m: steps[k]["ratios"]["train_step_over_vit"][m]["graph"] for m in ("sit", "siet")} for k in order
    }
    for model, name in (("sit", "SiT"), ("siet", "SieT"), ("vit", "ViT")):
        assert f"| {name}, ms | {' | '.join(f'{ms[k][model]:.1f}' for k in order)} |" in section
        if model != "vit":
            assert f"| {name} / ViT | {' | '.join(f'{ratios[k][model]:.2f}' for k in order)} |" in section
            assert all(ratios[k][model] <= 1.5 for k in order)  # "within 1.5x of the ViT in all four runs"
    shares = {}
    for model in ("sit", "siet"):
        share = [ms["after", a][model] / ms["before", b][model] for a in (1, 2) for b in (1, 2)]
        shares[model] = f"{min(share):.2f}-{max(share):.2f}x"
    assert f"The SiT's step took {shares['sit']} its time before, and the SieT's {shares['siet']}" in flat
    vit = sorted(ms[k]["vit"] for k in order)
    assert f"whose ViT steps ({vit[0]:.0f}-{vit[-1]:.0f} ms)" in flat


def test_the_prefetch_section_quotes_its_projection_gradient_rounds():
    """docs/speed.md's "Prefetching in the kernels": the ranges and medians of the projection's two
    gradients before, after and fused are the rounds of channels_first_grad_avx2_prefetch.json, each run
    from its build."""
    section = SPEED[SPEED.index("### Prefetching in the kernels") :]
    flat = " ".join(section[: section.index("\n## ")].split())
    rounds = _report("channels_first_grad_avx2_prefetch.json")["rounds"]
    commits = {"before": "c03a9f6", "after": "876402b", "fused": "1662ae9"}

    def two_gradients(build: str, key: str = "channels_first_ms") -> list[float]:
        runs = [r[build] for r in rounds if build in r]
        assert all(run["commit"].startswith(commits[build]) for run in runs)
        return [run["results"]["second_block"]["both_gradients"][key] for run in runs]

    before, after, fused = (two_gradients(b) for b in ("before", "after", "fused"))
    assert (len(before), len(after), len(fused)) == (8, 8, 3)
    spans = {name: f"{min(v):.1f}-{max(v):.1f}" for name, v in (("b", before), ("a", after), ("f", fused))}
    builtin = [v for b in commits for v in two_gradients(b, "tensorflow_ms")]
    medians = [f"{statistics.median(v):.1f}" for v in (before, after)]
    assert (
        f"gave the second block's two gradients {spans['b']} ms before (median {medians[0]}) "
        f"and {spans['a']} ms after (median {medians[1]}), while TensorFlow's form of the same "
        f"gradients, whose code no build changed, moved over {min(builtin):.1f}-{max(builtin):.1f} ms" in flat
    )
    assert f"three rounds of the benchmark above {spans['f']} ms, within its noise" in flat


def _alternated_step_rounds(
    section: str, flat: str, tag: str, commits: dict[str, str], rounds: int
) -> tuple[dict, dict]:
    """A section's alternated ``speed_encoders_amx_<tag>_{before,after}_run<r>.json``, each named in it and a
    row of its table, and its quoted medians; returns the (float32, bfloat16, ratio) of each round and their
    medians, by "before" / "after"."""
    steps = {}
    for run in range(1, rounds + 1):
        for when, commit in commits.items():
            steps.setdefault(when, []).append(
                _step_round(section, flat, f"{tag}_{when}_run{run}", commit, run)
            )
    medians = {w: [statistics.median(s[i] for s in steps[w]) for i in range(3)] for w in steps}
    (f32, bf16, ratio), (f32_after, bf16_after, ratio_after) = medians["before"], medians["after"]
    assert (
        f"float32 {f32:.1f} and {f32_after:.1f} ms, bfloat16 {bf16:.1f} and {bf16_after:.1f} ms, "
        f"ratio {ratio:.2f} and {ratio_after:.2f}"
    ) in flat
    return steps, medians


def test_the_graphs_and_bias_section_is_its_runs():
    """docs/speed.md's "The graphs in float32 and the stem's bias in its op": the one-op profiles' rows and
    the time the removed ops took; the fourteen alternated rounds, each named and a row of the table; the
    medians quoted, and the ratio not claimed lower after (it is not, in the medians)."""
    end = "\n#### The projection in bfloat16 on AMX tiles"
    section, flat = _speed_section("#### The graphs in float32 and the stem's bias in its op", end)
    commits = {"before": "914f146", "after": "f83e27b"}
    times = {}
    for when, commit in commits.items():
        profiles = _one_op_profiles(flat, f"graphs_bias_{when}", commit)
        for precision, report in zip(("float32", "mixed_bfloat16"), profiles, strict=True):
            times[when, precision] = {**_op_times(report), "all ops": report["summed_op_ms_per_call"]}
    columns = [(w, p) for p in ("float32", "mixed_bfloat16") for w in ("before", "after")]
    for op in ("Cast", "AddV2", "Sum", "_MklTranspose", "all ops"):
        label = op if op == "all ops" else f"`{op}`"
        assert f"| {label} | {' | '.join(f'{times[c][op]:.1f}' for c in columns)} |" in section
    removed = {
        p: sum(times["before", p][op] - times["after", p][op] for op in ("Cast", "AddV2", "Sum"))
        for p in ("float32", "mixed_bfloat16")
    }
    bf16_removed, f32_removed = removed["mixed_bfloat16"], removed["float32"]
    assert (
        f"come to {bf16_removed:.1f} ms of the bfloat16 step and {f32_removed:.1f} ms of the float32 one"
        in flat
    )
    _, medians = _alternated_step_rounds(section, flat, "graphs_bias", commits, rounds=7)
    ratio, ratio_after = medians["before"][2], medians["after"][2]
    assert ratio_after >= ratio and "The ratio is not lower after" in flat


def test_the_bfloat16_projection_section_is_its_runs():
    """docs/speed.md's "The projection in bfloat16 on AMX tiles": the one-op profiles' projection nodes and
    sums, the native_ops speed-ups, the ten alternated rounds, each named and a row of the table, and the
    medians and the count of rounds lower after quoted."""
    section, flat = _speed_section(
        "#### The projection in bfloat16 on AMX tiles", "\n#### The targets at 6270672"
    )
    commits = {"before": "f66e8c9", "after": "08f058c"}
    profiles = {}
    for when, commit in commits.items():
        name = f"op_profile_one_op_amx_bf16_projection_{when}_mixed_bfloat16.json"
        assert f"`benchmarks/reference/{name}`" in flat
        report = profiles[when] = _report(name)
        assert report["commit"].startswith(commit) and "AMX" in report["machine"]
        assert report["settings"]["one_op_at_a_time"] and report["settings"]["precision"] == "mixed_bfloat16"

    def node_ms(when: str, op: str, shapes: str) -> str:
        (row,) = [n for n in profiles[when]["nodes"] if n["op"] == op and n["shapes"].startswith(shapes)]
        return f"{row['ms_per_call']:.1f} ms"

    tokens, gradient = "(64, 192), (64, 104448)", "(64, 192), (192, 104448)"
    before = [node_ms("before", "_MklMatMul", shapes) for shapes in (tokens, gradient)]
    kernel_gradient = node_ms("before", "_MklBatchMatMulV2", "(1, 192, 104448), (1, 64, 104448)")
    assert (
        f"took {before[0]}, its input's gradient {before[1]} and its kernel's gradient (a batched matmul) "
        f"{kernel_gradient}."
    ) in flat
    op = "SitChannelsFirstProjectionBfloat16"
    after = [node_ms("after", op, tokens), node_ms("after", op, "(192, 64), (192, 104448)")]
    assert f"the projection takes {after[0]} and the input's gradient {after[1]}" in flat
    low, high = (profiles[w]["summed_op_ms_per_call"] for w in ("after", "before"))
    assert f"add up to {low:.1f} ms, against {high:.1f} ms before" in flat
    ops = _report("native_ops_amx_bf16_projection.json")
    assert ops["commit"].startswith("6270672") and "AMX" in ops["machine"]
    assert "`benchmarks/reference/native_ops_amx_bf16_projection.json`" in flat
    speedup = ops["results"]["projection_bfloat16_speedup"]
    assert ops["results"]["projects_bfloat16_on_amx"]
    assert f"{speedup['forward']:.2f}x as fast as TensorFlow's bfloat16 matmuls forward and " in flat
    assert f"{speedup['backward']:.2f}x forward + backward" in flat
    steps, _ = _alternated_step_rounds(section, flat, "bf16_projection", commits, rounds=5)
    lower = sum(a[2] < b[2] for a, b in zip(steps["after"], steps["before"], strict=True))
    assert f"the ratio is lower after in {lower} rounds of five" in flat
    graph = [s[0] for w in steps for s in steps[w]]
    assert f"(the float32 step {min(graph):.0f}-{max(graph):.0f} ms)" in flat


def _minigrid_cnn_steps(run: str) -> tuple[float, float]:
    """The MiniGrid CNN's XLA and graph train steps (median ms) in a speed-target run's encoders_14.json."""
    models = _report(f"{run}/encoders_14.json")["models"]
    step = models["configs/minigrid/lavacrossing_cnn.gin"]["timings"]["train_step"]
    return step["xla"]["median_ms"], step["graph"]["median_ms"]


def test_the_targets_at_6270672_are_the_run():
    """docs/speed.md's "The targets at 6270672": the table is the 50474b7 and 6270672 runs' rows; the SiT's
    bfloat16 step and its rounds, and the MiniGrid CNN's XLA / graph step, are the run's; two missed."""
    section, flat = _speed_section("#### The targets at 6270672", "\n#### No zeroing on the calling thread")
    previous = _report("speed_targets_amx_bf16_storage.json")
    run = _report("speed_targets_amx_bf16_projection.json")
    assert run["commit"].startswith("6270672") and "AMX" in run["machine"]
    _assert_targets_table(section, flat, previous, run)
    missed = {t["what"] for t in run["targets"] if t["met"] is False}
    assert missed == {"SiT bfloat16 / float32 train step", "cnn: XLA / graph train step, 14x14"}
    sit = _report("speed_targets_amx_bf16_projection/encoders_64.json")["models"]["sit"]
    graph = sit["timings"]["train_step"]["graph"]["median_ms"]
    bf16 = sit["precision"]["mixed_bfloat16"]
    assert f"bfloat16 step is {bf16['median_ms']:.1f} ms against {graph:.1f} ms in float32, " in flat
    assert f"{bf16['over_float32']:.2f}x (0.78 at 50474b7)" in flat
    rounds = sorted(bf16["runs_ms"])
    assert len(rounds) == 15
    assert (
        f"one took {rounds[-1]:.0f} ms and three {rounds[-4]:.0f}-{rounds[-2]:.0f} ms, "
        f"the others {rounds[0]:.0f}-{rounds[-5]:.0f} ms"
    ) in flat
    xla_ms, graph_ms = _minigrid_cnn_steps("speed_targets_amx_bf16_projection")
    assert f"step is {xla_ms / graph_ms:.2f} here ({xla_ms:.1f} against {graph_ms:.1f} ms)" in flat


def test_the_no_zeroing_section_is_its_runs():
    """docs/speed.md's "No zeroing on the calling thread": the three alternated one-op profiles of each commit
    and precision, their medians in the table, the gradient ops shorter after; the ten alternated rounds, each
    named and a row of the table, their medians, and the rounds shorter or lower after counted."""
    section, flat = _speed_section(
        "#### No zeroing on the calling thread", "\n#### The MiniGrid CNN's steps side by side"
    )
    commits = {"before": "eebe85b", "after": "7224889"}
    ops = ("SitWindowAttentionGrad", "SitClassTokenAttentionGrad", "all ops")
    medians = {}
    for when, commit in commits.items():
        for precision in ("float32", "mixed_bfloat16"):
            times = []
            for run in (1, 2, 3):
                name = f"op_profile_one_op_amx_uninitialized_{when}_{precision}_run{run}.json"
                assert f"`benchmarks/reference/{name}`" in flat
                report = _report(name)
                assert report["commit"].startswith(commit) and "AMX" in report["machine"]
                assert report["settings"]["one_op_at_a_time"] and report["settings"]["precision"] == precision
                times.append({**_op_times(report), "all ops": report["summed_op_ms_per_call"]})
            medians[when, precision] = {op: statistics.median(t[op] for t in times) for op in ops}
    columns = [(w, p) for p in ("float32", "mixed_bfloat16") for w in ("before", "after")]
    for op in ops:
        label = op if op == "all ops" else f"`{op}`"
        assert f"| {label} | {' | '.join(f'{medians[c][op]:.1f}' for c in columns)} |" in section
    window = "SitWindowAttentionGrad"
    precisions = ("float32", "mixed_bfloat16")
    shorter = [medians["before", p][window] - medians["after", p][window] for p in precisions]
    assert min(shorter) > 0
    assert f"{shorter[0]:.1f} ms (float32) and {shorter[1]:.1f} ms (bfloat16) shorter" in flat
    steps, _ = _alternated_step_rounds(section, flat, "uninitialized", commits, rounds=5)
    pairs = list(zip(steps["after"], steps["before"], strict=True))
    counts = [sum(after[i] < before[i] for after, before in pairs) for i in range(3)]
    assert (
        f"The float32 step is shorter after in {counts[0]} rounds of five, the bfloat16 step in {counts[1]}; "
        f"the ratio is lower after in {counts[2]} rounds of five"
    ) in flat
    assert "the target, 0.7, is not met" in flat


def test_the_minigrid_cnn_side_by_side_section_is_its_profiles():
    """docs/speed.md's "The MiniGrid CNN's steps side by side": the three profiles at f24d4c2 named, their
    wall and summed times quoted, the table's rows the XLA instructions' and the one-op graph's nodes, and
    the claims the sums support: XLA's instructions sum to less than its wall time and than the graph's ops,
    the graph's ops to more than its wall time."""
    section, flat = _speed_section(
        "#### The MiniGrid CNN's steps side by side", "\n#### The targets at 96d8699"
    )
    reports = {}
    for kind, jit, one_op in (("xla", True, False), ("graph", False, False), ("graph_one_op", False, True)):
        name = f"op_profile_minigrid_cnn_{kind}_f24d4c2.json"
        assert f"`benchmarks/reference/{name}`" in flat
        report = reports[kind] = _report(name)
        assert report["commit"].startswith("f24d4c2") and "AMX" in report["machine"]
        settings = report["settings"]
        assert settings["model"] == "configs/minigrid/lavacrossing_cnn.gin" and settings["image_size"] == 14
        assert settings["jit_compile"] is jit and settings["one_op_at_a_time"] is one_op
    wall = {k: f"{r['wall_ms_median']:.1f}" for k, r in reports.items()}
    summed = {k: f"{r['summed_op_ms_per_call']:.1f}" for k, r in reports.items()}
    assert (
        f"Wall time per call {wall['xla']} ms under XLA, whose instructions sum to {summed['xla']} ms; "
        f"{wall['graph']} ms in the graph, whose ops sum to {summed['graph']} ms; "
        f"{wall['graph_one_op']} ms one op at a time, whose ops sum to {summed['graph_one_op']} ms."
    ) in flat
    xla, graph, one_op = reports["xla"], reports["graph"], reports["graph_one_op"]
    assert xla["summed_op_ms_per_call"] < xla["wall_ms_median"]
    assert xla["summed_op_ms_per_call"] < one_op["summed_op_ms_per_call"]
    assert graph["summed_op_ms_per_call"] > graph["wall_ms_median"] < xla["wall_ms_median"]
    grad, conv = "gradient_tape/conv_encoder", "NativeGradConv2D/Conv2DBackprop"
    rows = {
        "`conv_1`, kernel gradient": ("SitConv2DKernelGrad [", f"{grad}/conv_1/{conv}Filter"),
        "`conv_1`, input gradient": ("Conv2DBackpropInput [", f"{grad}/conv_1/{conv}Input"),
        "`conv_1`": ("conv_encoder/conv_1/BiasAdd [", "conv_encoder/conv_1/Relu"),
        "`hidden`, input gradient": (f"{grad}/hidden/MatMul/MatMul [", f"{grad}/hidden/MatMul/MatMul"),
        "`hidden`, kernel gradient": (f"{grad}/hidden/MatMul/MatMul_1 [", f"{grad}/hidden/MatMul/MatMul_1"),
        "`hidden`": ("conv_encoder/hidden/BiasAdd [", "conv_encoder/hidden/Relu"),
        "`conv_0`": ("conv_encoder/conv_0/BiasAdd [", "conv_encoder/conv_0/Relu"),
        "`conv_0`, kernel gradient": ("SitConv2DKernelGrad_1 [", f"{grad}/conv_0/{conv}Filter"),
    }
    for label, (instruction, node) in rows.items():
        (compiled,) = [r for r in xla["nodes"] if r["node"].startswith(instruction)]
        (alone,) = [r for r in one_op["nodes"] if r["node"] == node]
        assert f"| {label} | {compiled['ms_per_call']:.2f} | {alone['ms_per_call']:.2f} |" in section


def test_the_targets_at_96d8699_are_the_run():
    """docs/speed.md's "The targets at 96d8699": the table is the 6270672 and 96d8699 runs' rows; the missed
    targets listed; the SiT's steps, the SiT's and SieT's XLA and graph steps, the MiniGrid CNN's XLA / graph
    step and the demo's PPO ratio as the run gives them."""
    section, flat = _speed_section("#### The targets at 96d8699", "\n#### The targets at ee49fef")
    previous = _report("speed_targets_amx_bf16_projection.json")
    run = _report("speed_targets_amx_uninitialized.json")
    assert run["commit"].startswith("96d8699") and "AMX" in run["machine"]
    _assert_targets_table(section, flat, previous, run)
    missed = sorted(t["what"] for t in run["targets"] if t["met"] is False)
    assert f"Missed: {'; '.join(missed)}." in flat
    models = _report("speed_targets_amx_uninitialized/encoders_64.json")["models"]
    steps = {m: models[m]["timings"]["train_step"] for m in ("sit", "siet")}
    graph, xla = ({m: f"{steps[m][k]['median_ms']:.1f}" for m in steps} for k in ("graph", "xla"))
    bf16 = models["sit"]["precision"]["mixed_bfloat16"]
    assert (
        f"The SiT's bfloat16 step is {bf16['median_ms']:.1f} ms against {graph['sit']} ms in float32, "
        f"{bf16['over_float32']:.2f}x."
    ) in flat
    assert (
        f"XLA steps ({xla['sit']} and {xla['siet']} ms) are now slower than their graph steps "
        f"({graph['sit']} and {graph['siet']} ms)"
    ) in flat
    xla_ms, graph_ms = _minigrid_cnn_steps("speed_targets_amx_uninitialized")
    assert f"XLA / graph step is {xla_ms / graph_ms:.3f} ({xla_ms:.2f} against {graph_ms:.2f} ms)" in flat
    demo = _report("speed_targets_amx_uninitialized/demo_ppo.json")["sit_over_cnn"]
    assert f"the demo's SiT / CNN PPO ratio {demo:.3f} (0.63 at 6270672)" in flat


def test_the_targets_at_ee49fef_on_the_amx_host_are_its_run():
    """docs/speed.md's "The targets at ee49fef": the table is the 96d8699 and ee49fef runs' rows on the same
    host kind; the missed targets listed; the XLA and graph steps, the bfloat16 step, the MiniGrid ViT's and
    CNN's XLA / graph steps round by round and the demo's PPO ratio as the run gives them."""
    section, flat = _speed_section("#### The targets at ee49fef", "\n#### The targets at 12b3e23, the repeat")
    previous = _report("speed_targets_amx_uninitialized.json")
    run = _report("speed_targets_amx_ee49fef.json")
    assert run["commit"].startswith("ee49fef") and run["machine"] == previous["machine"]
    assert "model 167" in run["machine"] and {"amx_bf16", "amx_tile"} <= set(run["cpu_flags"])
    _assert_targets_table(section, flat, previous, run)
    missed = sorted(t["what"] for t in run["targets"] if t["met"] is False)
    assert f"Missed: {'; '.join(missed)}." in flat
    steps = [
        _report(f"{r}/encoders_64.json")["models"]
        for r in ("speed_targets_amx_ee49fef", "speed_targets_amx_uninitialized")
    ]
    ms = [
        f"{m[model]['timings']['train_step'][mode]['median_ms']:.1f}"
        for m in steps
        for model in ("sit", "siet")
        for mode in ("xla", "graph")
    ]
    assert (
        f"{ms[0]} against {ms[1]} ms and {ms[2]} against {ms[3]} ms (at 96d8699 {ms[4]} against {ms[5]} and"
        in flat
    )
    assert f"{ms[6]} against {ms[7]} ms)" in flat
    assert float(ms[0]) < float(ms[1]) and float(ms[2]) < float(ms[3])
    bf16 = [m["sit"]["precision"]["mixed_bfloat16"] for m in steps]
    graph = steps[0]["sit"]["timings"]["train_step"]["graph"]["median_ms"]
    assert (
        f"The SiT's bfloat16 step is {bf16[0]['median_ms']:.1f} ms against {graph:.1f} ms in float32, "
        f"{bf16[0]['over_float32']:.2f}x ({bf16[1]['over_float32']:.2f} at 96d8699)"
    ) in flat
    fastest = [f"{min(b['runs_ms']):.1f}" for b in bf16]
    assert f"fastest rounds took {fastest[0]} ms here and {fastest[1]} ms at 96d8699" in flat
    rounds = {entry["what"]: entry["per_round_median"] for entry in run["per_round_medians"]}
    models = _report("speed_targets_amx_ee49fef/encoders_14.json")["models"]
    quoted = []
    for name in ("vit", "cnn"):
        step = models[f"configs/minigrid/lavacrossing_{name}.gin"]["timings"]["train_step"]
        xla, graph = step["xla"]["median_ms"], step["graph"]["median_ms"]
        quoted.append(f"{xla / graph:.3f} ({xla:.2f} against {graph:.2f} ms)")
    per_round = [f"{rounds[f'{m}: XLA / graph train step, 14x14']:.3f}" for m in ("vit", "cnn")]
    assert f"{quoted[0]} and {quoted[1]}; round by round {per_round[0]} and {per_round[1]}" in flat
    demo = [
        _report(f"{r}/demo_ppo.json")["sit_over_cnn"]
        for r in ("speed_targets_amx_ee49fef", "speed_targets_amx_uninitialized")
    ]
    assert f"The demo's SiT / CNN PPO ratio is {demo[0]:.3f} ({demo[1]:.3f} at 96d8699), met." in flat


def test_the_targets_at_12b3e23_on_the_amx_host_are_its_run():
    """docs/speed.md's "The targets at 12b3e23, the repeat": the table is the ee49fef and 12b3e23 runs' rows;
    one target missed; the host's slower phase, and the MiniGrid ViT's and CNN's XLA / graph steps round by
    round, as the runs give them."""
    section, flat = _speed_section(
        "#### The targets at 12b3e23, the repeat",
        "\n### The targets on an Intel host with AVX512_BF16 and no AMX",
    )
    previous = _report("speed_targets_amx_ee49fef.json")
    run = _report("speed_targets_amx_12b3e23.json")
    assert run["commit"].startswith("12b3e23") and run["machine"] == previous["machine"]
    _assert_targets_table(section, flat, previous, run)
    missed = [t["what"] for t in run["targets"] if t["met"] is False]
    assert (
        missed == ["SiT bfloat16 / float32 train step"]
        and "Missed: SiT bfloat16 / float32 train step." in flat
    )
    encoders = [
        _report(f"{r}/encoders_64.json") for r in ("speed_targets_amx_12b3e23", "speed_targets_amx_ee49fef")
    ]
    matmul = [f"{e['matmul']['median_ms']:.2f}" for e in encoders]
    assert f"the 1024^3 matmul {matmul[0]} against {matmul[1]} ms" in flat and float(matmul[0]) > float(
        matmul[1]
    )
    graph = {
        m: [f"{e['models'][m]['timings']['train_step']['graph']['median_ms']:.1f}" for e in encoders]
        for m in ("vit", "sit")
    }
    assert f"the ViT's graph step at 64x64 {graph['vit'][0]} against {graph['vit'][1]} ms" in flat
    assert f"the SiT's {graph['sit'][0]} against {graph['sit'][1]} ms" in flat
    values = {t["what"]: t["value"] for t in run["targets"]}
    rounds = {entry["what"]: entry["per_round_median"] for entry in run["per_round_medians"]}
    vit, cnn = (f"{m}: XLA / graph train step, 14x14" for m in ("vit", "cnn"))
    assert (
        f"XLA / graph steps are {values[vit]:.3f} and {values[cnn]:.3f} ({rounds[vit]:.3f} and "
        f"{rounds[cnn]:.3f} round by round), met" in flat
    )
    old = {t["what"]: t["value"] for t in previous["targets"]}
    assert f"{old[vit]:.3f} and {old[cnn]:.3f} at ee49fef" in flat
    bf16 = "SiT bfloat16 / float32 train step"
    assert f"{values[bf16]:.3f}x its float32 step, {old[bf16]:.3f} at ee49fef" in flat


def test_where_the_bfloat16_step_goes_on_the_amx_host_is_its_profiles():
    """docs/speed.md's "Where the bfloat16 step goes on the AMX host": the two one-op profiles at ee49fef
    named, their wall and summed times, the projection's and the attention ops' rows, and the 0.7 step."""
    section, flat = _speed_section(
        "#### Where the bfloat16 step goes on the AMX host", "\n## The fast GSA paths"
    )
    groups = {
        "the projection and its gradients": (
            "SitChannelsFirstProjection",
            "SitChannelsFirstProjectionBfloat16",
            "_MklMatMul",
            "_MklBatchMatMulV2",
        ),
        "the four attention ops": (
            "SitWindowAttention",
            "SitClassTokenAttention",
            "SitWindowAttentionGrad",
            "SitClassTokenAttentionGrad",
        ),
    }
    sums, walls, summed = {}, [], []
    for precision in ("float32", "mixed_bfloat16"):
        name = f"op_profile_one_op_amx_ee49fef_{precision}"
        report = _report(f"{name}.json")
        assert f"`benchmarks/reference/{name}.json`" in flat
        assert report["commit"].startswith("ee49fef") and "model 167" in report["machine"]
        settings = report["settings"]
        assert settings["one_op_at_a_time"] and settings["precision"] == precision
        assert (settings["model"], settings["batch"], settings["image_size"]) == ("sit", 96, 64)
        times = {row["op"]: row["ms_per_call"] for row in report["op_types"]}
        for group, ops in groups.items():
            sums.setdefault(group, []).append(sum(times.get(op, 0.0) for op in ops))
        walls.append(report["wall_ms_median"])
        summed.append(report["summed_op_ms_per_call"])
    assert (
        f"took {walls[0]:.1f} ms in float32 and {walls[1]:.1f} ms in bfloat16, its ops summing to "
        f"{summed[0]:.1f} and {summed[1]:.1f} ms." in flat
    )
    for group, (f32, bf16) in sums.items():
        assert f"| {group} (" in section and f" | {f32:.1f} | {bf16:.1f} |" in section
    attention = sums["the four attention ops"]
    assert abs(attention[1] / attention[0] - 1) < 0.05  # as long in bfloat16 as in float32
    assert f"{attention[1]:.0f} of the bfloat16 step's {summed[1]:.0f} ms" in flat
    target = 0.7 * walls[0]
    assert f"A step of 0.7x float32 ({target:.1f} ms) is {walls[1] - target:.0f} ms shorter" in flat


def test_the_targets_on_the_avx512_bf16_host_are_the_run():
    """docs/speed.md's "The targets on an Intel host with AVX512_BF16 and no AMX": the table is the AMX host's
    run at 96d8699 and this host's rows; the missed targets listed; the steps, the matmul's bfloat16 ratio and
    the PPO rates as the run gives them."""
    end = "\n#### The SiT's XLA step before and after the window gradients' zeroing"
    section, flat = _speed_section("### The targets on an Intel host with AVX512_BF16 and no AMX", end)
    previous = _report("speed_targets_amx_uninitialized.json")
    run = _report("speed_targets_avx512bf16.json")
    assert run["commit"].startswith("23e1e35") and "no AMX" in run["machine"]
    assert "avx512_bf16" in run["cpu_flags"] and "amx_tile" not in run["cpu_flags"]
    _assert_targets_table(section, flat, previous, run)
    missed = sorted(t["what"] for t in run["targets"] if t["met"] is False)
    assert f"Missed: {'; '.join(missed)}." in flat
    encoders = _report("speed_targets_avx512bf16/encoders_64.json")
    steps = {m: encoders["models"][m]["timings"]["train_step"] for m in ("sit", "siet", "vit")}
    graph, xla = ({m: f"{steps[m][k]['median_ms']:.1f}" for m in steps} for k in ("graph", "xla"))
    ratios = encoders["ratios"]["train_step_over_vit"]
    assert (
        f"takes {graph['sit']} ms in graph mode, {ratios['sit']['graph']:.2f}x the ViT's {graph['vit']} ms"
        in flat
    )
    assert f"The SieT's takes {graph['siet']} ms, {ratios['siet']['graph']:.3f}x the ViT's" in flat
    quiet = _report("speed_encoders_avx512_quiet.json")
    old = {m: quiet["models"][m]["timings"]["train_step"]["graph"]["median_ms"] for m in ("sit", "vit")}
    assert quiet["commit"].startswith("6aecd52")
    assert (
        f"at 6aecd52 it took {old['sit']:.1f} ms here, "
        f"{old['sit'] / old['vit']:.2f}x the ViT's {old['vit']:.1f}" in flat
    )
    assert f"The SiT's XLA step is {xla['sit']} ms against {graph['sit']} ms" in flat
    assert f"XLA ({xla['siet']} against {graph['siet']} ms)" in flat
    bf16 = encoders["models"]["sit"]["precision"]["mixed_bfloat16"]
    matmul = encoders["matmul"]["by_precision"]["mixed_bfloat16"]["over_float32"]
    assert f"takes {bf16['median_ms']:.1f} ms, {bf16['over_float32']:.2f}x its float32 step" in flat
    assert f"the 1024^3 matmul in bfloat16 {matmul:.2f}x its float32 time" in flat and matmul > 1
    before = _report("speed_encoders_avx512bf16.json")
    assert before["commit"].startswith("61121fe")
    assert f"({before['matmul']['by_precision']['mixed_bfloat16']['over_float32']:.2f}x at 61121fe)" in flat
    auto = _report("auto_precision_avx512bf16_625ff3f.json")
    assert auto["commit"].startswith("625ff3f") and "no AMX" in auto["machine"]
    auto_ratios = [c["precision"]["bfloat16_over_float32"] for c in auto["configs"]]
    assert {c["precision"]["choice"] for c in auto["configs"]} == {"float32"}
    assert min(auto_ratios) >= auto["margin"]
    assert f"keeps float32 for all {len(auto_ratios)} main configs" in flat
    assert f"bfloat16 takes {min(auto_ratios):.2f}-{max(auto_ratios):.2f}x the float32 step" in flat
    demo = _report("speed_targets_avx512bf16/demo_ppo.json")
    rates = demo["env_steps_per_second"]
    assert (
        f"at {demo['sit_over_cnn']:.2f}x the CNN's env steps/s "
        f"({rates['sit']:.1f} against {rates['cnn']:.1f})" in flat
    )
    lava = _report("speed_targets_avx512bf16/lavacrossing_ppo.json")["table"]
    sit_small, cnn = (lava[m]["env_steps_per_second"] for m in ("sit_small", "cnn"))
    assert f"at {sit_small / cnn:.2f}x ({sit_small:.1f} against {cnn:.1f})" in flat
    procgen = _report("speed_targets_avx512bf16/procgen_ppo.json")
    over = procgen["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    rates = procgen["env_steps_per_second"]
    assert f"at 1/{over:.2f} of the IMPALA-CNN ({rates['sit']:.1f} against {rates['impala_cnn']:.1f}" in flat
    workers = _report("speed_targets_avx512bf16/two_workers.json")["median_ratios_two_over_one"]
    assert f"train step {workers['learner_seconds_per_train_step']:.2f}x as long" in flat
    assert f"env steps/s {workers['cluster_env_steps_per_second']:.2f}x one worker's" in flat


def _speed_target_run(run: str) -> tuple[dict, dict[str, dict], dict[str, float]]:
    """A committed speed-target run: its summary, its benchmarks' reports, and its per-round medians."""
    module = load_benchmark("speed_targets")
    reports = {name: _report(f"{run}/{b.report}") for name, b in module.BENCHMARK_RUNS.items()}
    medians = module.per_round_medians(reports)
    summary = _report(f"{run}.json")
    if "per_round_medians" in summary:  # written since 270799a: the medians its reports give
        assert summary["per_round_medians"] == medians
    return summary, reports, {e["what"]: e["per_round_median"] for e in medians}


def _target_rows(before: dict, after: dict, before_rounds: dict, after_rounds: dict) -> list[str]:
    """Two speed-target runs' table rows: each ratio and its per-round median, the target, the verdict."""
    met = {True: "yes", False: "**no**", None: "n/a"}
    rows = []
    for old, new in zip(before["targets"], after["targets"], strict=True):
        limit = "-" if new["limit"] is None else f"{'<=' if new['at_most'] else '>='} {new['limit']:.3g}"
        paired = [f"{r[new['what']]:.3f}" if new["what"] in r else "-" for r in (before_rounds, after_rounds)]
        rows.append(
            f"| {new['what']} | {old['value']:.3f} | {paired[0]} | {new['value']:.3f} | {paired[1]} "
            f"| {limit} | {met[new['met']]} | `{new['report']}` |"
        )
    return rows


def _assert_beside(
    previous: dict, run: dict, rounds: tuple[dict, dict], section: str, changed: int, sentence: str
) -> list[str]:
    """What every speed-target run's section says beside the run before it: the table of both runs' ratios
    and per-round medians, the wall time with the targets met and missed, and the `changed` verdicts that
    `sentence` announces, each from its old value to its new. Returns the targets whose verdicts changed."""
    flat = " ".join(section.split())
    assert all(row in section for row in _target_rows(previous, run, *rounds))
    assert f"in {run['wall_seconds']:.0f} s: **{run['met']} targets met and {run['missed']} missed**" in flat
    pairs = [(o, n) for o, n in zip(previous["targets"], run["targets"], strict=True) if o["met"] != n["met"]]
    assert len({n["what"] for _, n in pairs}) == changed and f"**{sentence}**" in flat
    assert all(f"from {o['value']:.3f} to {n['value']:.3f}" in flat for o, n in pairs)
    return [n["what"] for _, n in pairs]


def _amd_run_beside(before: str, after: str, flat: str) -> tuple[dict, dict, dict, dict, dict, dict]:
    """Two committed AMD speed-target runs (commits ``before`` and ``after``): each one's summary, reports
    and per-round medians; the later one's commit and host, and its report named in the section (``flat``)."""
    previous, old, previous_rounds = _speed_target_run(f"speed_targets_amd_bf16_{before}")
    run, new, rounds = _speed_target_run(f"speed_targets_amd_bf16_{after}")
    commit = after.split("_")[0]  # a repeat's name: <commit>_run2
    assert run["commit"].startswith(commit) and "AMD EPYC" in run["machine"] and "no AMX" in run["machine"]
    assert f"`benchmarks/reference/speed_targets_amd_bf16_{after}.json`" in flat
    return previous, old, previous_rounds, run, new, rounds


def _step_ms(reports: dict, model: str, mode: str = "graph") -> str:
    """A speed-target run's 64x64 train step of ``model`` (graph or xla), its median in ms as quoted."""
    return f"{reports['encoders_64']['models'][model]['timings']['train_step'][mode]['median_ms']:.1f}"


XLA_64_TARGETS = [f"{m}: XLA / graph train step, 64x64" for m in ("sit", "siet")]


def _xla_quotes(reports: dict, rounds: dict, verb: str) -> list[str]:
    """A speed-target run's SiT and SieT steps at 64x64 with XLA and in graph mode as its section quotes
    them ("The SiT's XLA step <verb> ..."), and their XLA / graph ratios' per-round medians."""
    times = {
        (m, mode): f"{reports['encoders_64']['models'][m]['timings']['train_step'][mode]['median_ms']:.1f}"
        for m in ("sit", "siet")
        for mode in ("xla", "graph")
    }
    return [
        f"The SiT's XLA step {verb} {times['sit', 'xla']} ms against {times['sit', 'graph']} ms in graph "
        f"mode, the SieT's {times['siet', 'xla']} against {times['siet', 'graph']} ms",
        f"round by round {rounds[XLA_64_TARGETS[0]]:.3f} and {rounds[XLA_64_TARGETS[1]]:.3f}",
    ]


def _minigrid_and_demo_quotes(old: dict, new: dict, small: str, vit: str, pairs: str) -> list[str]:
    """What two speed-target runs' section quotes of SiT-small's and the ViT's graph-mode train steps at
    14x14 (templates `small` and `vit`, each filled with the new run's ms then the old's) and of the demo's
    PPO: the SiT's and the CNN's rates, new against old, and the new run's process pairs (`pairs`)."""

    def _step_ms(run: dict, model: str) -> str:
        timings = run["encoders_14"]["models"][f"configs/minigrid/lavacrossing_{model}.gin"]["timings"]
        return f"{timings['train_step']['graph']['median_ms']:.2f}"

    demo = {w: r["demo_ppo"]["env_steps_per_second"] for w, r in (("old", old), ("new", new))}
    runs = (new["demo_ppo"]["runs"][m] for m in ("sit", "cnn"))
    return [
        small.format(_step_ms(new, "sit_small"), _step_ms(old, "sit_small")),
        vit.format(_step_ms(new, "vit"), _step_ms(old, "vit")),
        f"SiT trained at {demo['new']['sit']:.1f} env steps/s against {demo['old']['sit']:.1f}",
        f"its CNN at {demo['new']['cnn']:.1f} against {demo['old']['cnn']:.1f}",
        pairs.format(_listed([a["sps"] / b["sps"] for a, b in zip(*runs, strict=True)])),
    ]


def test_the_targets_at_270799a_and_their_per_round_medians_are_the_runs():
    """docs/speed.md's "The targets at 270799a, and each ratio round by round": both runs on the AVX512_BF16
    host, each encoder ratio beside its per-round median, the verdicts that changed with the same code, the
    demo's process pairs, and the AMX run's SiT XLA step by both measures."""
    section, flat = _speed_section(
        "#### The targets at 270799a, and each ratio round by round",
        "\n#### The targets at f2653c2, after the values op",
    )
    previous, _, previous_rounds = _speed_target_run("speed_targets_avx512bf16")
    run, reports, rounds = _speed_target_run("speed_targets_avx512bf16_rounds")
    assert run["commit"].startswith("270799a") and "no AMX" in run["machine"]
    assert run["per_round_medians"] == load_benchmark("speed_targets").per_round_medians(reports)
    _assert_beside(
        previous, run, (previous_rounds, rounds), section, 5, "Five verdicts changed with the same code."
    )
    xla_missed = [t["what"] for t in previous["targets"] if "XLA" in t["what"] and t["met"] is False]
    medians = ", ".join(f"{previous_rounds[w]:.3f}" for w in xla_missed[:-1])
    assert f"per-round medians of {medians} and {previous_rounds[xla_missed[-1]]:.3f}" in flat
    cnn = "cnn: XLA / graph train step, 14x14"
    steps = reports["encoders_14"]["models"]["configs/minigrid/lavacrossing_cnn.gin"]["timings"]["train_step"]
    assert (
        f"has a per-round median of {rounds[cnn]:.3f} (its step {steps['graph']['median_ms']:.2f} ms" in flat
    )
    assert f"and {steps['xla']['median_ms']:.2f} ms with XLA)" in flat
    amx, _, amx_rounds = _speed_target_run("speed_targets_amx_uninitialized")
    sit_xla = "sit: XLA / graph train step, 64x64"
    amx_value = next(t["value"] for t in amx["targets"] if t["what"] == sit_xla)
    assert amx["commit"].startswith("96d8699") and amx_value > 1 and amx_rounds[sit_xla] > 1
    assert f"step is {amx_value:.3f} and {amx_rounds[sit_xla]:.3f} round by round" in flat
    for report in (reports["demo_ppo"], _report("speed_targets_avx512bf16/demo_ppo.json")):
        sit, cnn_runs = ([r["sps"] for r in report["runs"][m]] for m in ("sit", "cnn"))
        pairs = [f"{a / b:.2f}" for a, b in zip(sit, cnn_runs, strict=True)]
        assert f"{', '.join(pairs[:-1])} and {pairs[-1]}" in flat
    procgen = reports["procgen_ppo"]
    over = procgen["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    rates = procgen["env_steps_per_second"]
    assert f"1/{over:.2f}; {rates['sit']:.1f} against {rates['impala_cnn']:.1f} env steps/s now" in flat


def test_the_targets_at_f2653c2_section_is_its_run():
    """docs/speed.md's "The targets at f2653c2, after the values op": the run beside 270799a's, the verdicts
    that changed, and each time and rate its bullets quote, read from the reports."""
    section, flat = _speed_section(
        "#### The targets at f2653c2, after the values op",
        "\n#### The targets at f5779a5, the same arithmetic on the 64x64 models",
    )
    previous, old, previous_rounds = _speed_target_run("speed_targets_avx512bf16_rounds")
    run, new, rounds = _speed_target_run("speed_targets_avx512bf16_values_op")
    assert run["commit"].startswith("f2653c2") and "no AMX" in run["machine"]
    _assert_beside(previous, run, (previous_rounds, rounds), section, 4, "Four verdicts changed.")

    templates = (
        "takes {} ms in graph mode against {}",
        "ViT's took {} against {} ms",
        "process pairs give {}",
    )
    assert all(quote in flat for quote in _minigrid_and_demo_quotes(old, new, *templates))
    procgen = {w: r["procgen_ppo"] for w, r in (("old", old), ("new", new))}
    rates = {w: p["env_steps_per_second"] for w, p in procgen.items()}
    over = procgen["new"]["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
    assert (
        f"SiT trained at {rates['new']['sit']:.1f} env steps/s against {rates['old']['sit']:.1f} at 270799a "
        f"and the IMPALA-CNN at {rates['new']['impala_cnn']:.1f} against {rates['old']['impala_cnn']:.1f}: "
        f"1/{over:.2f}" in flat
    )
    procgen_values = [
        next(t["value"] for t in r["targets"] if t["what"].startswith("Procgen"))
        for r in (_report("speed_targets_avx512bf16.json"), previous, run)
    ]
    assert f"the margin ({procgen_values[2] - 0.25:.3f})" in flat
    assert f"smaller than the {procgen_values[0] - procgen_values[1]:.3f} the ratio moved" in flat
    assert all(quote in flat for quote in _xla_quotes(new, rounds, "is"))
    xla = XLA_64_TARGETS
    earlier = [
        {t["what"]: t["value"] for t in r["targets"]}
        for r in (_report("speed_targets_avx512bf16.json"), previous)
    ]
    assert f"({earlier[0][xla[0]]:.3f} and {earlier[1][xla[0]]:.3f})" in flat
    assert f"({earlier[0][xla[1]]:.3f} and {earlier[1][xla[1]]:.3f})" in flat
    bfloat16 = new["encoders_64"]["models"]["sit"]["precision"]["mixed_bfloat16"]
    assert (
        f"step takes {bfloat16['median_ms']:.1f} ms, {bfloat16['over_float32']:.3f}x its float32 step" in flat
    )
    assert f"({earlier[1]['SiT bfloat16 / float32 train step']:.3f} at 270799a)" in flat


def test_the_targets_at_f5779a5_section_is_its_run():
    """docs/speed.md's "The targets at f5779a5, the same arithmetic on the 64x64 models": the run beside
    f2653c2's, the verdicts that changed, Procgen's ratio in the four runs on this host kind, and each time
    and rate its bullets quote, read from the reports."""
    section, flat = _speed_section(
        "#### The targets at f5779a5, the same arithmetic on the 64x64 models", AMD_TARGETS
    )
    previous, old, previous_rounds = _speed_target_run("speed_targets_avx512bf16_values_op")
    run, new, rounds = _speed_target_run("speed_targets_avx512bf16_repeat_f5779a5")
    assert run["commit"].startswith("f5779a5") and "no AMX" in run["machine"]
    _assert_beside(previous, run, (previous_rounds, rounds), section, 3, "Three verdicts changed.")
    procgen = {w: r["procgen_ppo"] for w, r in (("old", old), ("new", new))}
    rates = {w: p["env_steps_per_second"] for w, p in procgen.items()}
    over = [procgen[w]["ratios"]["impala_cnn_over_sit_env_steps_per_second"] for w in ("new", "old")]
    assert (
        f"SiT trained at {rates['new']['sit']:.1f} env steps/s against {rates['old']['sit']:.1f} at f2653c2 "
        f"and the IMPALA-CNN at {rates['new']['impala_cnn']:.1f} against {rates['old']['impala_cnn']:.1f}: "
        f"1/{over[0]:.2f} against 1/{over[1]:.2f}" in flat
    )
    names = ["", "_rounds", "_values_op", "_repeat_f5779a5"]
    summaries = [_report(f"speed_targets_avx512bf16{name}.json") for name in names]
    procgen_values = [
        next(t["value"] for t in r["targets"] if t["what"].startswith("Procgen")) for r in summaries
    ]
    quoted = ", ".join(f"{v:.3f}" for v in procgen_values[:-1]) + f" and {procgen_values[-1]:.3f}"
    commits = ", ".join(r["commit"][:7] for r in summaries)
    assert f"host kind give {quoted} ({commits})" in flat
    held = [sum(v >= limit for v in procgen_values) for limit in (1 / 6, 0.25)]
    assert held == [4, 1] and "1/6 in all four, 1/4 in one" in flat
    lowest = min(procgen_values)
    assert (
        f"lowest of the four ({lowest:.3f}) to meet 1/4, the SiT would have to train {0.25 / lowest - 1:.0%}"
        in flat
    )

    assert all(quote in flat for quote in _xla_quotes(new, rounds, "took"))
    xla = XLA_64_TARGETS
    assert f"With f2653c2's {previous_rounds[xla[0]]:.3f} and {previous_rounds[xla[1]]:.3f}" in flat
    templates = ("took {} ms in graph mode against {}", "ViT's {} against {} ms", "(process pairs {})")
    assert all(quote in flat for quote in _minigrid_and_demo_quotes(old, new, *templates))
    lava = {
        (w, m): f"{r['lavacrossing_ppo']['table'][m]['env_steps_per_second']:.1f}"
        for w, r in (("old", old), ("new", new))
        for m in ("sit_small", "cnn")
    }
    assert (
        f"SiT-small trained at {lava['new', 'sit_small']} env steps/s against {lava['old', 'sit_small']} "
        f"and the CNN at {lava['new', 'cnn']} against {lava['old', 'cnn']}" in flat
    )
    bfloat16 = [r["encoders_64"]["models"]["sit"]["precision"]["mixed_bfloat16"] for r in (new, old)]
    assert (
        f"step took {bfloat16[0]['over_float32']:.3f}x its float32 step "
        f"({bfloat16[1]['over_float32']:.3f} at f2653c2)" in flat
    )


def test_the_targets_at_1034fa9_on_the_amx_model_207_host_section_is_its_run():
    """docs/speed.md's "The targets at 1034fa9, the pooling's and the projection's gradients": the run beside
    222c4dc's on the same host, the verdicts that changed, and each time and rate its bullets quote."""
    section, flat = _speed_section(
        "#### The targets at 1034fa9, the pooling's and the projection's gradients",
        "\n#### Procgen before and after, alternated",
    )
    previous, old, previous_rounds = _speed_target_run("speed_targets_amx_model207")
    run, new, rounds = _speed_target_run("speed_targets_amx_model207_1034fa9")
    assert run["commit"].startswith("1034fa9") and run["machine"] == previous["machine"]
    _assert_beside(previous, run, (previous_rounds, rounds), section, 4, "Four verdicts changed.")
    xla = [
        "siet: XLA / graph train step, 64x64",
        *(f"{m}: XLA / graph train step, 14x14" for m in ("sit_small", "cnn")),
    ]
    assert f"Round by round those three are {_listed([rounds[w] for w in xla], 3)}" in flat

    def ms(reports: dict, model: str, mode: str) -> float:
        return reports["encoders_64"]["models"][model]["timings"]["train_step"][mode]["median_ms"]

    for model, quote in (("sit", "The SiT's graph step took {} ms against {} ms at 222c4dc ({}x)"),
                         ("siet", "the SieT's {} against {} ms ({}x)")):  # fmt: skip
        now, before = ms(new, model, "graph"), ms(old, model, "graph")
        assert quote.format(f"{now:.1f}", f"{before:.1f}", f"{now / before:.3f}") in flat
    assert all(quote in flat for quote in _xla_quotes(new, rounds, "took"))
    gains = {
        mode: [ms(new, m, mode) / ms(old, m, mode) for m in ("sit", "siet")] for mode in ("xla", "graph")
    }
    assert f"XLA steps took {gains['xla'][0]:.3f}x and {gains['xla'][1]:.3f}x their time at 222c4dc" in flat
    assert f"their graph steps {gains['graph'][0]:.3f}x and {gains['graph'][1]:.3f}x" in flat
    assert min(gains["xla"]) > max(gains["graph"])  # "in this run the graph steps gained more"

    rates = [r["procgen_ppo"]["env_steps_per_second"] for r in (new, old)]
    over = [r["procgen_ppo"]["ratios"]["impala_cnn_over_sit_env_steps_per_second"] for r in (new, old)]
    assert (
        f"SiT trained at {rates[0]['sit']:.1f} env steps/s against {rates[1]['sit']:.1f} at 222c4dc and the "
        f"IMPALA-CNN at {rates[0]['impala_cnn']:.1f} against {rates[1]['impala_cnn']:.1f}: "
        f"1/{over[0]:.2f} against 1/{over[1]:.2f}" in flat
    )
    sit, cnn = (rates[0][m] / rates[1][m] for m in ("sit", "impala_cnn"))
    assert (
        f"SiT trained {sit - 1:.1%} faster and the IMPALA-CNN, whose code did not change, "
        f"{1 - cnn:.1%} slower" in flat
    )
    assert 1 - cnn > sit - 1  # "most of the ratio's change is the CNN's run"
    bfloat16 = [r["encoders_64"]["models"]["sit"]["precision"]["mixed_bfloat16"] for r in (new, old)]
    assert (
        f"step took {bfloat16[0]['median_ms']:.1f} ms, {bfloat16[0]['over_float32']:.3f}x its float32 step "
        f"({bfloat16[1]['over_float32']:.3f} at 222c4dc)" in flat
    )


def test_the_procgen_before_and_after_section_is_its_alternated_runs():
    """docs/speed.md's "Procgen before and after, alternated": each round read from the reports the summary
    names (all named in the section), its medians and ratios, and the rounds that met 1/4."""
    section, flat = _speed_section("#### Procgen before and after, alternated", AMD_TARGETS)
    ab = _report("procgen_ppo_projection_gradients_ab.json")
    assert "`benchmarks/reference/procgen_ppo_projection_gradients_ab.json`" in flat
    assert all(f"`{name}`" in flat for name in ab["reports"])
    commits = {"before": "222c4dc", "after": "30e361c"}
    keys = ("sit", "impala_cnn", "sit_over_impala_cnn")
    for entry in ab["rounds"]:
        for side in ("before", "after"):
            report = _report(f"procgen_ppo_projection_gradients_{side}_run{entry['round']}.json")
            assert report["commit"].startswith(commits[side]) and report["machine"] == ab["machine"]
            rates, got = report["env_steps_per_second"], entry[side]
            over = 1 / report["ratios"]["impala_cnn_over_sit_env_steps_per_second"]
            assert (got["sit"], got["impala_cnn"], got["sit_over_impala_cnn"]) == (
                rates["sit"],
                rates["impala_cnn"],
                over,
            )
            assert (
                f"| {entry['round']} | {side} ({commits[side]}) | {got['sit']:.1f} | {got['impala_cnn']:.1f} "
                f"| {got['sit_over_impala_cnn']:.3f} |" in section
            )
        assert entry["first"] == ("before" if entry["round"] % 2 else "after")
    medians, ratios = ab["medians"], ab["after_over_before"]
    for key in keys:
        for side in ("before", "after"):
            assert medians[side][key] == statistics.median(r[side][key] for r in ab["rounds"])
        assert ratios[key] == medians["after"][key] / medians["before"][key]
    assert (
        f"the SiT trained at {medians['before']['sit']:.1f} and {medians['after']['sit']:.1f} env steps/s "
        f"({ratios['sit']:.3f}x), the IMPALA-CNN, whose code did not change, at "
        f"{medians['before']['impala_cnn']:.1f} and {medians['after']['impala_cnn']:.1f} "
        f"({ratios['impala_cnn']:.3f}x)" in flat
    )
    quarter = [
        sum(r[side]["sit_over_impala_cnn"] >= 0.25 for r in ab["rounds"]) for side in ("before", "after")
    ]
    assert quarter == [ab["rounds_meeting_a_quarter"][side] for side in ("before", "after")] == [1, 3]
    assert "1/4 held in one round of three before and in all three after" in flat


ATTENTION_OPS = (
    "SitWindowAttention",
    "SitWindowAttentionGrad",
    "SitClassTokenAttention",
    "SitClassTokenAttentionGrad",
)
# The projections and their kernels' gradients: native ops in float32; under mixed_bfloat16 the AMX op and
# oneDNN's bfloat16 batched matmuls (the kernels' gradients).
PROJECTION_OPS = (
    "SitChannelsFirstProjection",
    "SitChannelsFirstProjectionKernelGrad",
    "SitChannelsFirstProjectionBfloat16",
    "_MklBatchMatMulV2",
)


def test_the_targets_on_the_amx_model_207_host_section_is_its_run():
    """docs/speed.md's "The targets on an Intel host with AMX, model 207": the run beside f5779a5's on the
    same model without AMX, the verdicts that changed and their per-round medians, the times and rates its
    bullets quote, and the bfloat16 step's op profile by group, read from the reports."""
    section, flat = _speed_section(
        "### The targets on an Intel host with AMX, model 207",
        "\n#### The targets at 1034fa9, the pooling's and the projection's gradients",
    )
    previous, old, previous_rounds = _speed_target_run("speed_targets_avx512bf16_repeat_f5779a5")
    run, new, rounds = _speed_target_run("speed_targets_amx_model207")
    assert run["commit"].startswith("222c4dc") and "model 207" in run["machine"]
    assert {"amx_bf16", "amx_tile"} <= set(run["cpu_flags"]) and "no AMX" in previous["machine"]
    changed = _assert_beside(previous, run, (previous_rounds, rounds), section, 3, "Three verdicts changed.")
    per_round = [f"{rounds[what]:.3f}" for what in changed]
    assert f"Round by round they are {per_round[0]}, {per_round[1]} and {per_round[2]}" in flat

    matmuls = [r["encoders_64"]["matmul"] for r in (new, old)]
    assert f"matmul took {matmuls[0]['median_ms']:.2f} ms against {matmuls[1]['median_ms']:.2f} ms" in flat
    assert (
        f"graph step {_step_ms(new, 'sit')} against {_step_ms(old, 'sit')} ms and the ViT's "
        f"{_step_ms(new, 'vit')} against {_step_ms(old, 'vit')} ms" in flat
    )
    assert all(quote in flat for quote in _xla_quotes(new, rounds, "took"))

    bfloat16 = [r["encoders_64"]["models"]["sit"]["precision"]["mixed_bfloat16"] for r in (new, old)]
    matmul_bfloat16 = [m["by_precision"]["mixed_bfloat16"]["over_float32"] for m in matmuls]
    assert (
        f"step took {bfloat16[0]['median_ms']:.1f} ms, {bfloat16[0]['over_float32']:.3f}x its float32 step "
        f"({bfloat16[1]['over_float32']:.3f} at f5779a5" in flat
    )
    assert (
        f"matmul took {matmul_bfloat16[0]:.3f}x its float32 time ({matmul_bfloat16[1]:.3f}x without" in flat
    )
    profiles = [_report(f"op_profile_train_amx_model207_{p}.json") for p in ("float32", "mixed_bfloat16")]
    assert all(p["commit"].startswith("222c4dc") and p["settings"]["one_op_at_a_time"] for p in profiles)

    def group(profile: dict, ops: tuple[str, ...]) -> float:
        return sum(o["ms_per_call"] for o in profile["op_types"] if o["op"] in ops)

    total = [p["summed_op_ms_per_call"] for p in profiles]
    attention = [group(p, ATTENTION_OPS) for p in profiles]
    projection = [group(p, PROJECTION_OPS) for p in profiles]
    rest = [t - a - b for t, a, b in zip(total, attention, projection, strict=True)]
    assert f"add up to {total[0]:.1f} ms in float32 and {total[1]:.1f} ms in bfloat16" in flat
    for name, (a, b) in (("gradients)", attention), ("their gradients", projection)):
        assert f"{name} {a:.1f} against {b:.1f} ms ({b / a:.2f}x" in flat
    assert f"all other ops {rest[0]:.1f} against {rest[1]:.1f} ms" in flat
    assert (
        f"add up to {0.7 * total[0]:.1f} ms (0.7 x {total[0]:.1f}), {total[1] - 0.7 * total[0]:.1f} ms less"
        in flat
    )

    procgen = [r["procgen_ppo"] for r in (new, old)]
    rates = procgen[0]["env_steps_per_second"]
    over = [p["ratios"]["impala_cnn_over_sit_env_steps_per_second"] for p in procgen]
    assert (
        f"SiT trained at {rates['sit']:.1f} env steps/s and the IMPALA-CNN at {rates['impala_cnn']:.1f}: "
        f"1/{over[0]:.2f} against 1/{over[1]:.2f}" in flat
    )
    templates = ("took {} ms in graph mode against {}", "ViT's {} against {} ms", "(process pairs {})")
    assert all(quote in flat for quote in _minigrid_and_demo_quotes(old, new, *templates))
    lava = [
        f"{r['lavacrossing_ppo']['table'][m]['env_steps_per_second']:.1f}"
        for m in ("sit_small", "cnn")
        for r in (new, old)
    ]
    assert f"SiT-small at {lava[0]} against {lava[1]} and the CNN at {lava[2]} against {lava[3]}" in flat
    workers = [
        r["two_workers"]["median_ratios_two_over_one"]["learner_seconds_per_train_step"] for r in (new, old)
    ]
    assert f"train step {workers[0]:.2f}x as long ({workers[1]:.2f}x without AMX)" in flat


POOL_AB_READS = {  # stem_pool_gradient_ab.json's round entries: (report kind, path in the report)
    "native_pool_forward_backward_ms": ("native_ops", ("results", "pool", "backward", "median_ms")),
    "native_pool_xla_forward_backward_ms": ("native_ops", ("results", "pool_xla", "backward", "median_ms")),
    "builtin_pool_forward_backward_ms": ("native_ops", ("results", "pool_builtin", "backward", "median_ms")),
    "step_summed_op_ms": ("op_profile", ("summed_op_ms_per_call",)),
}


def test_the_stem_pooling_gradient_section_is_its_alternated_runs():
    """docs/speed.md's "The stem pooling's gradient by a bit mask": each round of the A/B read from the
    reports the summary names (all named in the section), the medians and ratios in its table, the gain."""
    section, flat = _speed_section(
        "### The stem pooling's gradient by a bit mask",
        "\n### The projection's gradients by oneDNN's matmuls",
    )
    ab = _report("stem_pool_gradient_ab.json")
    assert "`benchmarks/reference/stem_pool_gradient_ab.json`" in flat and "model 207" in ab["machine"]
    for names in ab["reports"].values():
        assert all(f"`{name}`" in flat for name in names)
        for name in names:
            report = _report(name)
            assert report["commit"].startswith("222c4dc") and report["machine"] == ab["machine"]
            assert ("commit_note" in report) == ("_after_" in name)

    def read(kind: str, side: str, number: int, path: tuple[str, ...]):
        value = _report(next(n for n in ab["reports"][kind] if n.endswith(f"_{side}_run{number}.json")))
        for key in path:
            value = value[key]
        return value

    for entry in ab["op_rounds"]:
        for side in ("before", "after"):
            got = entry[side]
            for key, (kind, path) in POOL_AB_READS.items():
                assert got[key] == read(kind, side, entry["round"], path)
            ops = read("op_profile", side, entry["round"], ("op_types",))
            assert got["step_max_pool_grad_ms"] == next(
                o["ms_per_call"] for o in ops if o["op"] == "SitMaxPoolGrad"
            )
    for entry in ab["step_rounds"]:
        for side in ("before", "after"):
            sit = read("encoders", side, entry["round"], ("models", "sit"))
            assert entry[side]["float32_ms"] == sit["timings"]["train_step"]["graph"]["median_ms"]
            assert entry[side]["mixed_bfloat16_ms"] == sit["precision"]["mixed_bfloat16"]["median_ms"]
    rows = [(ab["op_rounds"], ab["medians"]), (ab["step_rounds"], ab["step_medians"])]
    for rounds, medians in rows:
        for key, value in medians.items():
            for side in ("before", "after"):
                assert value[side] == statistics.median(r[side][key] for r in rounds)
            assert value["after_over_before"] == value["after"] / value["before"]
            digits = 1 if key in ("step_summed_op_ms", "float32_ms", "mixed_bfloat16_ms") else 2
            cells = [f"{value[side]:.{digits}f}" for side in ("before", "after")]
            assert f"| {cells[0]} | {cells[1]} | {value['after_over_before']:.2f} |" in section
    gain = ab["medians"]["step_max_pool_grad_ms"]
    assert f"{gain['before'] - gain['after']:.2f} ms of a step" in flat
    assert (
        ab["medians"]["native_pool_forward_backward_ms"]["after"]
        < ab["medians"]["builtin_pool_forward_backward_ms"]["after"]
    )
    float32 = [r[side]["float32_ms"] for r in ab["step_rounds"] for side in ("before", "after")]
    assert f"({min(float32):.1f}-{max(float32):.1f} ms in float32" in flat


PROJECTION_SPEEDUP_RUNS = {  # docs/speed.md's ranges of native_ops' projection_speedup, backward: their files
    "1.21-1.35x": [
        f"native_ops_avx2_{kind}_{side}_run{r}.json"
        for kind in ("orbit_gradients", "transposes", "prefetch")
        for side in ("before", "after")
        for r in (1, 2)
    ],
    "0.85-1.04x": [
        f"native_ops_values_{kind}_{side}_run{r}.json"
        for kind in ("grad", "group")
        for side in ("before", "after")
        for r in (1, 2, 3, 4)
    ],
    "0.81-0.99x": [
        f"native_ops_pool_grad_{side}_run{r}.json" for side in ("before", "after") for r in (1, 2, 3)
    ],
}


def test_the_targets_on_the_amd_host_section_is_its_run():
    """docs/speed.md's "The targets on an AMD host with AVX512_BF16": the first run there, beside 1034fa9's on
    the AMX host of model 207, the verdicts that changed, and the times and rates its bullets quote."""
    section, flat = _speed_section(AMD_TARGETS.strip(), AMD_3B7B5C2)
    previous, old, previous_rounds = _speed_target_run("speed_targets_amx_model207_1034fa9")
    run, new, rounds = _speed_target_run("speed_targets_amd_bf16")
    assert run["commit"].startswith("49f0306") and "AMD EPYC" in run["machine"] and "no AMX" in run["machine"]
    assert "avx512_bf16" in run["cpu_flags"] and "amx_bf16" not in run["cpu_flags"]
    _assert_beside(previous, run, (previous_rounds, rounds), section, 4, "Four verdicts changed.")

    matmuls = [r["encoders_64"]["matmul"] for r in (new, old)]
    assert f"matmul took {matmuls[0]['median_ms']:.2f} ms against {matmuls[1]['median_ms']:.2f} ms" in flat
    assert (
        f"graph step took {_step_ms(new, 'sit')} against {_step_ms(old, 'sit')} ms, the SieT's "
        f"{_step_ms(new, 'siet')} against {_step_ms(old, 'siet')} ms and the ViT's {_step_ms(new, 'vit')} "
        f"against {_step_ms(old, 'vit')} ms" in flat
    )
    rises = [run["targets"][i]["value"] / previous["targets"][i]["value"] - 1 for i in (0, 2)]  # SiT, SieT
    assert f"rise by {100 * min(rises):.0f}-{100 * max(rises):.0f}%" in flat
    assert all(quote in flat for quote in _xla_quotes(new, rounds, "took"))
    # The SiT's steps both ways in projection_gradients.py's runs on this host, XLA's and the graph's.
    spans = []
    for names in (("64_xla", "64_xla_run2"), ("64", "64_run2")):
        sit = [_report(f"projection_gradients_amd_bf16_{n}.json")["results"]["sit"] for n in names]
        times = [r[way] for r in sit for way in ("ops_ms", "matmuls_ms")]
        spans.append(f"{min(times):.1f}-{max(times):.1f} ms")
    assert f"the SiT's XLA steps took {spans[0]} and its graph steps {spans[1]}" in flat
    bfloat16 = [r["encoders_64"]["models"]["sit"]["precision"]["mixed_bfloat16"] for r in (new, old)]
    matmul_bfloat16 = [m["by_precision"]["mixed_bfloat16"]["over_float32"] for m in matmuls]
    assert (
        f"step took {bfloat16[0]['median_ms']:.1f} ms, {bfloat16[0]['over_float32']:.3f}x its float32 step "
        f"({bfloat16[1]['over_float32']:.3f}x on the AMX host)" in flat
    )
    assert f"took {matmul_bfloat16[0]:.3f}x its float32 time ({matmul_bfloat16[1]:.3f}x with AMX)" in flat
    profiles = [_report(f"op_profile_train_amd_bf16_f0777d5_{p}.json") for p in ("float32", "mixed_bfloat16")]
    assert all(p["commit"].startswith("f0777d5") and p["settings"]["one_op_at_a_time"] for p in profiles)
    assert [p["settings"]["precision"] for p in profiles] == ["float32", "mixed_bfloat16"]
    total = [p["summed_op_ms_per_call"] for p in profiles]
    attention = [sum(o["ms_per_call"] for o in p["op_types"] if o["op"] in ATTENTION_OPS) for p in profiles]
    assert f"add up to {total[0]:.1f} ms in float32 and {total[1]:.1f} ms in bfloat16" in flat
    assert (
        f"attention ops {attention[0]:.1f} against {attention[1]:.1f} ms ({attention[1] / attention[0]:.2f}x"
        in flat
    )
    assert f"all other ops {total[0] - attention[0]:.1f} against {total[1] - attention[1]:.1f} ms" in flat
    assert (
        f"add up to {0.7 * total[0]:.1f} ms (0.7 x {total[0]:.1f}), {total[1] - 0.7 * total[0]:.1f} ms less"
        in flat
    )
    rates = [r["procgen_ppo"]["env_steps_per_second"] for r in (new, old)]
    over = [r["procgen_ppo"]["ratios"]["impala_cnn_over_sit_env_steps_per_second"] for r in (new, old)]
    assert (
        f"SiT trained at {rates[0]['sit']:.1f} env steps/s and the IMPALA-CNN at "
        f"{rates[0]['impala_cnn']:.1f}: 1/{over[0]:.2f}, against 1/{over[1]:.2f}" in flat
    )
    assert (
        f"IMPALA-CNN runs at {rates[0]['impala_cnn'] / rates[1]['impala_cnn']:.2f}x its rate on the AMX "
        f"host, the SiT at {rates[0]['sit'] / rates[1]['sit']:.2f}x" in flat
    )
    demo = new["demo_ppo"]
    lava = new["lavacrossing_ppo"]["table"]
    assert (
        f"demo's SiT trained at {demo['env_steps_per_second']['sit']:.1f} env steps/s and its CNN at "
        f"{demo['env_steps_per_second']['cnn']:.1f} ({demo['sit_over_cnn']:.3f})" in flat
    )
    assert (
        f"SiT-small at {lava['sit_small']['env_steps_per_second']:.1f} and the CNN at "
        f"{lava['cnn']['env_steps_per_second']:.1f} (cost {lava['cnn']['cost_per_env_step']:.3f})" in flat
    )
    workers = [r["two_workers"]["median_ratios_two_over_one"] for r in (new, old)]
    workers = [w["learner_seconds_per_train_step"] for w in workers]
    assert f"train step {workers[0]:.2f}x as long ({workers[1]:.2f}x on the AMX host)" in flat


def _assert_bfloat16_and_procgen_bullets(new: dict, old: dict, old_commit: str, flat: str) -> None:
    """The bfloat16 and Procgen bullets of an AMD speed-target run's section beside the run at ``old_commit``:
    the SiT's mixed_bfloat16 step and its ratio to float32 then and now, the Procgen rates and ratios."""
    bfloat16 = [r["encoders_64"]["models"]["sit"]["precision"]["mixed_bfloat16"] for r in (new, old)]
    assert (
        f"step took {bfloat16[0]['median_ms']:.1f} ms, {bfloat16[0]['over_float32']:.3f}x its float32 step "
        f"({bfloat16[1]['over_float32']:.3f}x at {old_commit})" in flat
    )
    rates = new["procgen_ppo"]["env_steps_per_second"]
    over = [r["procgen_ppo"]["ratios"]["impala_cnn_over_sit_env_steps_per_second"] for r in (new, old)]
    assert (
        f"SiT trained at {rates['sit']:.1f} env steps/s and the IMPALA-CNN at {rates['impala_cnn']:.1f}: "
        f"1/{over[0]:.2f}, against 1/{over[1]:.2f}" in flat
    )


def test_the_targets_at_223c2c3_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at 223c2c3": the run beside 63a6ab5's on the same AMD host kind, the one
    verdict that changed and how much of it the host's slower phase explains, and the times, ratios and rates
    its bullets quote."""
    section, flat = _speed_section(AMD_223C2C3.strip(), AMD_12E6756)
    previous, old, previous_rounds, run, new, rounds = _amd_run_beside("63a6ab5", "223c2c3", flat)
    changed = _assert_beside(previous, run, (previous_rounds, rounds), section, 1, "One verdict changed.")
    sit_xla = "sit: XLA / graph train step, 64x64"
    assert changed == [sit_xla] and rounds[sit_xla] <= 1
    assert f"({rounds[sit_xla]:.3f} round by round): met" in flat
    steps = [[_step_ms(r, m) for m in ("sit", "siet", "vit")] for r in (new, old)]
    assert all(float(a) > float(b) for a, b in zip(*steps, strict=True))  # the slower phase
    matmul_ms = [f"{r['encoders_64']['matmul']['median_ms']:.2f}" for r in (new, old)]
    assert (
        f"graph steps taking {steps[0][0]} ms (SiT), {steps[0][1]} ms (SieT) and {steps[0][2]} ms (ViT) "
        f"against {steps[1][0]}, {steps[1][1]} and {steps[1][2]} ms at 63a6ab5, the 1024^3 matmul "
        f"{matmul_ms[0]} against {matmul_ms[1]} ms, and the SiT's XLA step {_step_ms(new, 'sit', 'xla')} "
        f"against {_step_ms(old, 'sit', 'xla')} ms" in flat
    )
    values = {t["what"]: t["value"] for t in run["targets"]}
    siet = "SieT / ViT train step, 64x64 (graph)"
    assert not run["targets"][3]["met"] and rounds[siet] <= 1.5
    assert f"at {values[siet]:.3f}, and meets it round by round ({rounds[siet]:.3f})" in flat
    assert f"graph step took {steps[0][1]} ms against the ViT's {steps[0][2]}" in flat
    vit, cnn = (values[f"{m}: XLA / graph train step, 14x14"] for m in ("vit", "cnn"))
    assert f"still take longer with XLA** ({vit:.3f} and {cnn:.3f})" in flat
    _assert_bfloat16_and_procgen_bullets(new, old, "63a6ab5", flat)


def test_the_targets_at_12e6756_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at 12e6756": the repeat beside 223c2c3's run on the same AMD host kind,
    the SiT's XLA verdict that changed back, its three runs' ratios, and the times and rates it quotes."""
    section, flat = _speed_section(AMD_12E6756.strip(), AMD_2C4C3A0)
    previous, old, old_rounds, run, new, rounds = _amd_run_beside("223c2c3", "12e6756", flat)
    sentence = "One verdict changed back."
    changed = _assert_beside(previous, run, (old_rounds, rounds), section, 1, sentence)
    sit_xla = "sit: XLA / graph train step, 64x64"
    assert changed == [sit_xla] and not next(t for t in run["targets"] if t["what"] == sit_xla)["met"]
    assert f"({rounds[sit_xla]:.3f} round by round): missed again" in flat
    steps = [_step_ms(new, m) for m in ("sit", "siet", "vit")]
    assert (
        f"the graph steps taking {steps[0]} ms (SiT), {steps[1]} ms (SieT) and {steps[2]} ms (ViT), the "
        f"1024^3 matmul {new['encoders_64']['matmul']['median_ms']:.2f} ms, and the SiT's XLA step "
        f"{_step_ms(new, 'sit', 'xla')} ms" in flat
    )
    runs = [_speed_target_run(f"speed_targets_amd_bf16_{c}") for c in ("63a6ab5", "223c2c3", "12e6756")]
    values = [f"{next(t for t in r[0]['targets'] if t['what'] == sit_xla)['value']:.3f}" for r in runs]
    per_round = [f"{r[2][sit_xla]:.3f}" for r in runs]
    assert (
        f"the SiT's XLA / graph step is {values[0]}, {values[1]} and {values[2]} ({per_round[0]}, "
        f"{per_round[1]} and {per_round[2]} round by round)" in flat
    )
    targets = {t["what"]: t["value"] for t in run["targets"]}
    siet = "SieT / ViT train step, 64x64 (graph)"
    assert f"misses 1.5** at {targets[siet]:.3f} ({rounds[siet]:.3f} round by round)" in flat
    vit, cnn = (targets[f"{m}: XLA / graph train step, 14x14"] for m in ("vit", "cnn"))
    assert f"still take longer with XLA** ({vit:.3f} and {cnn:.3f})" in flat
    _assert_bfloat16_and_procgen_bullets(new, old, "223c2c3", flat)


def _siet_over_vit(run: str) -> tuple[str, str]:
    """A committed AMD speed-target run's SieT / ViT step at 64x64 and its per-round median, as quoted."""
    summary, _, rounds = _speed_target_run(f"speed_targets_amd_bf16_{run}")
    siet = "SieT / ViT train step, 64x64 (graph)"
    return f"{next(t for t in summary['targets'] if t['what'] == siet)['value']:.3f}", f"{rounds[siet]:.3f}"


def test_the_targets_at_2c4c3a0_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at 2c4c3a0": the run beside 12e6756's on the same AMD host kind, its three
    changed verdicts, the slower phase of the host it met, and the times, ratios and rates it quotes."""
    section, flat = _speed_section(AMD_2C4C3A0.strip(), AMD_2C4C3A0_RUN2)
    previous, old, old_rounds, run, new, rounds = _amd_run_beside("12e6756", "2c4c3a0", flat)
    sentence = "Three verdicts changed, in a slower phase of the host."
    changed = _assert_beside(previous, run, (old_rounds, rounds), section, 3, sentence)
    vit_xla, siet_14 = (
        "vit: XLA / graph train step, 64x64",
        "siet_rotation_pooled: XLA / graph train step, 14x14",
    )
    siet = "SieT / ViT train step, 64x64 (graph)"
    assert set(changed) == {siet, vit_xla, siet_14}
    targets = {(t["what"], t["limit"]): t for t in run["targets"]}
    assert targets[siet, 1.5]["met"] and not targets[vit_xla, 1.0]["met"] and not targets[siet_14, 1.0]["met"]
    steps = [_step_ms(r, m) for r in (new, old) for m in ("sit", "siet", "vit")]
    matmul = [f"{r['encoders_64']['matmul']['median_ms']:.2f}" for r in (new, old)]
    assert (
        f"The graph steps took {steps[0]} ms (SiT), {steps[1]} ms (SieT) and {steps[2]} ms (ViT), the 1024^3 "
        f"matmul {matmul[0]} ms, against {steps[3]}, {steps[4]}, {steps[5]} and {matmul[1]} ms at 12e6756"
        in flat
    )
    assert float(matmul[0]) > float(matmul[1]) and float(steps[2]) > float(steps[5])
    value, per_round = _siet_over_vit("2c4c3a0")
    assert f"went from {_siet_over_vit('12e6756')[0]} to {value} ({per_round} round by round): met" in flat
    sit_xla = next(t for t in run["targets"] if t["what"] == "sit: XLA / graph train step, 64x64")
    assert f"is {sit_xla['value']:.3f} ({rounds[sit_xla['what']]:.3f} round by round): missed" in flat
    vit, cnn = (targets[f"{m}: XLA / graph train step, 14x14", 1.0]["value"] for m in ("vit", "cnn"))
    assert f"still take longer with XLA** ({vit:.3f} and {cnn:.3f})" in flat
    _assert_bfloat16_and_procgen_bullets(new, old, "12e6756", flat)


def test_the_targets_at_2c4c3a0_repeated_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at 2c4c3a0, the run repeated": the repeat beside the first run at the same
    commit, the verdict that changed back, the SieT / ViT ratio of five runs, and what it quotes."""
    section, flat = _speed_section(AMD_2C4C3A0_RUN2.strip(), AMD_0D64AE2)
    previous, old, old_rounds, run, new, rounds = _amd_run_beside("2c4c3a0", "2c4c3a0_run2", flat)
    assert previous["commit"] == run["commit"]
    changed = _assert_beside(previous, run, (old_rounds, rounds), section, 1, "One verdict changed back.")
    assert changed == ["vit: XLA / graph train step, 64x64"]
    steps = [_step_ms(new, m) for m in ("sit", "siet", "vit")]
    assert (
        f"the graph steps took {steps[0]} ms (SiT), {steps[1]} ms (SieT) and {steps[2]} ms (ViT), the 1024^3 "
        f"matmul {new['encoders_64']['matmul']['median_ms']:.2f} ms" in flat
    )
    runs = ("63a6ab5", "223c2c3", "12e6756", "2c4c3a0", "2c4c3a0_run2")
    values, per_round = zip(*(_siet_over_vit(r) for r in runs), strict=True)
    assert f"meets 1.5 again**, at {values[-1]} ({per_round[-1]} round by round)" in flat
    assert f"its ratio is {', '.join(values[:-1])} and {values[-1]}" in flat
    assert f"({', '.join(per_round[:-1])} and {per_round[-1]} round by round)" in flat
    assert all(float(v) <= 1.5 for v in values[-2:]) and max(map(float, values)) > 1.5
    targets = {t["what"]: t for t in run["targets"]}
    for what, name in (
        ("sit: XLA / graph train step, 64x64", "The SiT's XLA / graph step at 64x64**"),
        ("siet_rotation_pooled: XLA / graph train step, 14x14", "The SieT readout's at 14x14**"),
    ):
        assert not targets[what]["met"]
        assert f"{name} is {targets[what]['value']:.3f} ({rounds[what]:.3f} round by round): missed" in flat
    config = "configs/minigrid/lavacrossing_siet_rotation_pooled.gin"
    threads = [
        _report(f"xla_host_threads_amd_bf16_14{suffix}.json")
        for suffix in ("_e3ad630", "_e3ad630_run2", "", "_run2")
    ]
    assert all(r["commit"].startswith("e3ad630") and "AMD EPYC" in r["machine"] for r in threads[:2])
    ratios = [f"{r['results'][config]['xla_tensorflow_threads_over_graph']:.3f}" for r in threads]
    assert (
        f"graph step at {ratios[0]} and {ratios[1]}" in flat
        and f"{ratios[2]} and {ratios[3]} at 63a6ab5" in flat
    )
    assert all(float(r) < 1 for r in ratios)
    vit, cnn = (targets[f"{m}: XLA / graph train step, 14x14"]["value"] for m in ("vit", "cnn"))
    assert f"still take longer with XLA** ({vit:.3f} and {cnn:.3f})" in flat
    _assert_bfloat16_and_procgen_bullets(new, old, "2c4c3a0", flat)


def test_the_targets_at_0d64ae2_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at 0d64ae2": the run beside the repeat at 2c4c3a0, its three changed
    verdicts, the quicker phase of the host, the SieT / ViT ratio of six runs, and what it quotes."""
    section, flat = _speed_section(AMD_0D64AE2.strip(), "\n## Encoders")
    previous, old, old_rounds, run, new, rounds = _amd_run_beside("2c4c3a0_run2", "0d64ae2", flat)
    sentence = "Three verdicts changed, two of them at parity."
    changed = _assert_beside(previous, run, (old_rounds, rounds), section, 3, sentence)
    sit_xla, vit_xla = ("sit: XLA / graph train step, 64x64", "vit: XLA / graph train step, 64x64")
    siet = "SieT / ViT train step, 64x64 (graph)"
    assert set(changed) == {siet, sit_xla, vit_xla}
    targets = {(t["what"], t["limit"]): t for t in run["targets"]}
    assert targets[sit_xla, 1.0]["met"] and not targets[siet, 1.5]["met"] and not targets[vit_xla, 1.0]["met"]
    for what in (sit_xla, siet, vit_xla):
        limit = 1.5 if what == siet else 1.0
        assert f"to {targets[what, limit]['value']:.3f} ({rounds[what]:.3f} round by round)" in flat
    vit = [_step_ms(r, "vit", mode) for r in (new, old) for mode in ("graph", "xla")]
    assert (
        f"its graph step took {vit[0]} ms against {vit[2]} ms in the run before, its XLA step {vit[1]} "
        f"against {vit[3]} ms" in flat
    )
    steps = [_step_ms(r, m) for r in (new, old) for m in ("sit", "siet")]
    matmul = [f"{r['encoders_64']['matmul']['median_ms']:.2f}" for r in (new, old)]
    assert (
        f"The graph steps took {steps[0]} ms (SiT) and {steps[1]} ms (SieT) against {steps[2]} and "
        f"{steps[3]} ms, the 1024^3 matmul {matmul[0]} ms against {matmul[1]} ms" in flat
    )
    assert float(matmul[0]) < float(matmul[1])
    runs = ("63a6ab5", "223c2c3", "12e6756", "2c4c3a0", "2c4c3a0_run2", "0d64ae2")
    values, per_round = zip(*(_siet_over_vit(r) for r in runs), strict=True)
    assert (
        f"{', '.join(values[:-1])} and {values[-1]} ({', '.join(per_round[:-1])} and {per_round[-1]}" in flat
    )
    assert sum(float(v) <= 1.5 for v in values) == 2 and "met in two of six" in flat
    xla = {m: _step_ms(new, m, "xla") for m in ("sit", "siet")}
    assert (
        f"The SiT's XLA step** took {xla['sit']} ms against {steps[0]} ms in graph mode, the SieT's "
        f"{xla['siet']} against {steps[1]} ms" in flat
    )
    vit14, cnn14, readout = (
        targets[f"{m}: XLA / graph train step, 14x14", 1.0]["value"]
        for m in ("vit", "cnn", "siet_rotation_pooled")
    )
    assert f"still take longer with XLA** ({vit14:.3f} and {cnn14:.3f})" in flat
    assert f"XLA / graph step is {readout:.3f} (" in flat
    _assert_bfloat16_and_procgen_bullets(new, old, "2c4c3a0_run2", flat)


def test_the_targets_at_3b7b5c2_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at 3b7b5c2": the run beside 49f0306's on the same AMD host kind, the
    encoder reports it discarded and why, and the times, ratios and rates its bullets quote."""
    section, flat = _speed_section(AMD_3B7B5C2.strip(), AMD_EDC8C6C)
    previous, old, previous_rounds = _speed_target_run("speed_targets_amd_bf16")
    run, new, rounds = _speed_target_run("speed_targets_amd_bf16_3b7b5c2")
    assert run["commit"].startswith("3b7b5c2") and "AMD EPYC" in run["machine"] and "no AMX" in run["machine"]
    assert "`benchmarks/reference/speed_targets_amd_bf16_3b7b5c2.json`" in flat and "--only" in run["note"]
    changed = _assert_beside(
        previous, run, (previous_rounds, rounds), section, 2, "Two verdicts changed, both XLA at 64x64."
    )
    assert changed == [f"{m}: XLA / graph train step, 64x64" for m in ("siet", "impala_cnn")]
    folder = "speed_targets_amd_bf16_3b7b5c2"
    discarded = {}
    for name, slow_rounds, above_ms in (("encoders_64", 13, 20.0), ("encoders_14", 2, 15.0)):
        discarded[name] = _report(f"{folder}/{name}_discarded.json")
        rounds_ms = [
            b["median_ms"] for b in discarded[name]["matmul"]["blocks"] if b["before"].startswith("round")
        ]
        slow = [ms for ms in rounds_ms if ms > above_ms]
        assert len(slow) == slow_rounds and f"`{name}_discarded.json`" in flat
        assert f"{min(slow):.1f}-{max(slow):.1f} ms in {slow_rounds}" in flat
        assert round(new[name]["matmul"]["median_ms"]) == 11  # alone
    assert "ms in 13 of the 15 rounds of `encoders_64`" in flat and "against 11 ms alone" in flat
    values = [{t["what"]: t["value"] for t in r["targets"]} for r in (previous, run)]
    at_14 = [what for what in values[1] if "XLA" in what and "14x14" in what]
    assert f"moved by up to {max(abs(values[1][w] - values[0][w]) for w in at_14):.2f} either way" in flat
    xla_14 = discarded["encoders_14"]["ratios"]["xla_over_graph"]
    readout, vit = (
        xla_14[f"configs/minigrid/lavacrossing_{m}.gin"]["train_step"]
        for m in ("siet_rotation_pooled", "vit")
    )
    assert f"put the SieT readout's at {readout:.3f} and the ViT's at {vit:.3f}, both under 1" in flat
    assert readout < 1 and vit < 1

    sit_ms, siet_ms, vit_ms = (_step_ms(new, m) for m in ("sit", "siet", "vit"))
    old_sit, old_siet, old_vit = (_step_ms(old, m) for m in ("sit", "siet", "vit"))
    matmul_ms = [f"{r['encoders_64']['matmul']['median_ms']:.2f}" for r in (new, old)]
    assert (
        f"graph steps took {sit_ms} ms (SiT), {siet_ms} ms (SieT) and {vit_ms} ms (ViT) against "
        f"{old_sit}, {old_siet} and {old_vit} ms at 49f0306, with the 1024^3 matmul at {matmul_ms[0]} "
        f"against {matmul_ms[1]} ms" in flat
    )
    sit, siet = "SiT / ViT train step, 64x64 (graph)", "SieT / ViT train step, 64x64 (graph)"
    assert (
        f"SieT / ViT ratio went from {values[0][siet]:.3f} to {values[1][siet]:.3f} and the SiT's from "
        f"{values[0][sit]:.3f} to {values[1][sit]:.3f}" in flat
    )
    _assert_bfloat16_and_procgen_bullets(new, old, "49f0306", flat)


def test_the_targets_at_edc8c6c_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at edc8c6c": the run beside 3b7b5c2's on the same AMD host kind, the
    verdicts that changed, and the times, ratios and rates its bullets quote."""
    section, flat = _speed_section(AMD_EDC8C6C.strip(), AMD_63A6AB5)
    previous, old, previous_rounds, run, new, rounds = _amd_run_beside("3b7b5c2", "edc8c6c", flat)
    changed = _assert_beside(previous, run, (previous_rounds, rounds), section, 2, "Two verdicts changed.")
    assert changed == ["siet: XLA / graph train step, 64x64", "sit_small: XLA / graph train step, 14x14"]
    values = [{t["what"]: t["value"] for t in r["targets"]} for r in (previous, run)]
    sit_xla = "sit: XLA / graph train step, 64x64"
    assert (
        f"went from {values[0][sit_xla]:.3f} to {values[1][sit_xla]:.3f} ({rounds[sit_xla]:.3f} round" in flat
    )
    at_14 = [what for what in values[1] if "XLA" in what and "14x14" in what]
    assert f"moved by up to {max(abs(values[1][w] - values[0][w]) for w in at_14):.2f} either way" in flat
    vit_14 = "vit: XLA / graph train step, 14x14"
    assert f"the ViT's ({values[1][vit_14] - values[0][vit_14]:.3f} up)" in flat
    assert (
        f"The SiT's XLA step took {_step_ms(new, 'sit', 'xla')} ms against {_step_ms(new, 'sit')} ms in "
        f"graph mode, the SieT's {_step_ms(new, 'siet', 'xla')} against {_step_ms(new, 'siet')} ms; at "
        f"3b7b5c2 {_step_ms(old, 'sit', 'xla')} against {_step_ms(old, 'sit')} and "
        f"{_step_ms(old, 'siet', 'xla')} against {_step_ms(old, 'siet')} ms" in flat
    )
    siet = "SieT / ViT train step, 64x64 (graph)"
    assert f"misses 1.5 by {values[1][siet] - 1.5:.3f}" in flat and not run["targets"][3]["met"]
    steps = [[_step_ms(r, m) for m in ("sit", "siet", "vit")] for r in (new, old)]
    matmul_ms = [f"{r['encoders_64']['matmul']['median_ms']:.2f}" for r in (new, old)]
    assert (
        f"graph steps took {steps[0][0]} ms (SiT), {steps[0][1]} ms (SieT) and {steps[0][2]} ms (ViT) "
        f"against {steps[1][0]}, {steps[1][1]} and {steps[1][2]} ms at 3b7b5c2, with the 1024^3 matmul at "
        f"{matmul_ms[0]} against {matmul_ms[1]} ms: SieT / ViT went from {values[0][siet]:.3f} to "
        f"{values[1][siet]:.3f} ({rounds[siet]:.3f} round by round)" in flat
    )
    _assert_bfloat16_and_procgen_bullets(new, old, "3b7b5c2", flat)


def test_the_targets_at_63a6ab5_on_the_amd_host_are_its_run():
    """docs/speed.md's "The targets at 63a6ab5": the run beside edc8c6c's on the same AMD host kind, the two
    14x14 XLA verdicts that changed, and the times, ratios and rates its bullets quote."""
    section, flat = _speed_section(AMD_63A6AB5.strip(), AMD_223C2C3)
    previous, old, previous_rounds, run, new, rounds = _amd_run_beside("edc8c6c", "63a6ab5", flat)
    sentence = "Two verdicts changed, both XLA at 14x14."
    changed = _assert_beside(previous, run, (previous_rounds, rounds), section, 2, sentence)
    small, pooled = (f"{m}: XLA / graph train step, 14x14" for m in ("sit_small", "siet_rotation_pooled"))
    assert changed == [small, pooled]
    assert f"also round by round ({rounds[small]:.3f} and {rounds[pooled]:.3f})" in flat
    values = {t["what"]: t["value"] for t in run["targets"]}
    vit, cnn = (values[f"{m}: XLA / graph train step, 14x14"] for m in ("vit", "cnn"))
    assert f"still miss it ({vit:.3f} and {cnn:.3f})" in flat

    def at_14(reports: dict, model: str, mode: str = "graph") -> str:
        timings = reports["encoders_14"]["models"][f"configs/minigrid/lavacrossing_{model}.gin"]["timings"]
        return f"{timings['train_step'][mode]['median_ms']:.1f}"

    assert (
        f"SiT-small's took {at_14(new, 'sit_small')} ms against {at_14(old, 'sit_small')} at edc8c6c, the "
        f"ViT's {at_14(new, 'vit')} against {at_14(old, 'vit')} and the CNN's {at_14(new, 'cnn')} against "
        f"{at_14(old, 'cnn')}" in flat
    )
    assert (
        f"the SieT readout's step took {at_14(new, 'siet_rotation_pooled', 'xla')} ms against "
        f"{at_14(old, 'siet_rotation_pooled', 'xla')}, SiT-small's {at_14(new, 'sit_small', 'xla')} against "
        f"{at_14(old, 'sit_small', 'xla')}, while the ViT's took {at_14(new, 'vit', 'xla')} against "
        f"{at_14(old, 'vit', 'xla')}" in flat
    )
    calls = new["encoders_14"]["models"]["configs/minigrid/lavacrossing_sit_small.gin"]["timings"]
    xla_calls = calls["train_step"]["xla"]["runs_ms"]
    assert f"({min(xla_calls):.1f}-{max(xla_calls):.1f} ms over the {len(xla_calls)} rounds)" in flat
    sit_xla = "sit: XLA / graph train step, 64x64"
    assert (
        f"The SiT's XLA step took {_step_ms(new, 'sit', 'xla')} ms against {_step_ms(new, 'sit')} ms in "
        f"graph mode ({values[sit_xla]:.3f}, {rounds[sit_xla]:.3f} round by round: still missed), the SieT's "
        f"{_step_ms(new, 'siet', 'xla')} against {_step_ms(new, 'siet')} ms" in flat
    )
    siet = "SieT / ViT train step, 64x64 (graph)"
    assert f"at {values[siet]:.3f} ({rounds[siet]:.3f} round by round)" in flat
    assert not run["targets"][3]["met"]
    steps = [[_step_ms(r, m) for m in ("sit", "siet", "vit")] for r in (new, old)]
    matmul_ms = [f"{r['encoders_64']['matmul']['median_ms']:.2f}" for r in (new, old)]
    less = [1 - float(steps[0][i]) / float(steps[1][i]) for i in (2, 1)]
    assert (
        f"graph steps took {steps[0][0]} ms (SiT), {steps[0][1]} ms (SieT) and {steps[0][2]} ms (ViT) "
        f"against {steps[1][0]}, {steps[1][1]} and {steps[1][2]} ms at edc8c6c, with the 1024^3 matmul at "
        f"{matmul_ms[0]} against {matmul_ms[1]} ms; the ViT's step took {100 * less[0]:.1f}% less than in "
        f"that run, the SieT's {100 * less[1]:.1f}%" in flat
    )
    _assert_bfloat16_and_procgen_bullets(new, old, "edc8c6c", flat)


def test_the_projection_gradients_by_matmuls_section_is_its_runs():
    """docs/speed.md's "The projection's gradients by oneDNN's matmuls": the native_ops ranges per host kind
    from the runs it names, and the train steps both ways from projection_gradients.py's reports."""
    section, flat = _speed_section(
        "### The projection's gradients by oneDNN's matmuls", "\n### The projection's tile"
    )
    for quoted, files in PROJECTION_SPEEDUP_RUNS.items():
        speedups = [_report(f)["results"]["projection_speedup"]["backward"] for f in files]
        assert f"{min(speedups):.2f}-{max(speedups):.2f}x" == quoted and quoted in flat
        machines = {_report(f)["machine"].split(";")[0] for f in files}
        assert len(machines) == 1
    amx = {  # report: (commit, image size, XLA, rounds)
        "projection_gradients_amx_model207_64.json": ("81ef0d8", 64, False, 15),
        "projection_gradients_amx_model207_64_run2.json": ("d96a001", 64, False, 15),
        "projection_gradients_amx_model207_64_xla.json": ("d96a001", 64, True, 15),
        "projection_gradients_amx_model207_14.json": ("81ef0d8", 14, False, 21),
    }
    amd = {
        "projection_gradients_amd_bf16_64.json": ("49f0306", 64, False, 15),
        "projection_gradients_amd_bf16_64_run2.json": ("49f0306", 64, False, 15),
        "projection_gradients_amd_bf16_64_xla.json": ("d484e0e", 64, True, 15),
        "projection_gradients_amd_bf16_64_xla_run2.json": ("d484e0e", 64, True, 15),
        "projection_gradients_amd_bf16_14.json": ("49f0306", 14, False, 21),
    }
    ratios = {}
    for name, (commit, size, jit_compile, repeats) in {**amx, **amd}.items():
        report = _report(name)
        assert f"`benchmarks/reference/{name}`" in flat
        assert ("AMX (" if name in amx else "AMD EPYC") in report["machine"]
        settings = report["settings"]
        assert (settings["image_size"], settings.get("jit_compile", False)) == (size, jit_compile)
        assert settings["repeats"] == repeats and settings["batch"] == 96 and not settings["quick"]
        assert report["commit"].startswith(commit) and report["default_here"] == "matmuls"
        # Before d484e0e the script built every step without XLA: that run's report says so.
        compiled = jit_compile and not report["commit"].startswith(("d96a001", "1034fa9"))
        assert ("correction" in report) == (jit_compile and not compiled)
        mode = "XLA" if compiled else "graph (`--jit_compile` ignored)" if jit_compile else "graph"
        for model, r in report["results"].items():
            assert (
                f"| `{model}`, {size}x{size}, {mode} | {commit} | {r['ops_ms']:.1f} | {r['matmuls_ms']:.1f} "
                f"| {r['matmuls_over_ops']:.3f} |" in section
            )
        ratios[name] = [f"{r['matmuls_over_ops']:.3f}" for r in report["results"].values()]
    (first, second), (run2_sit, run2_siet), (run3_sit, run3_siet), (small, medium) = (ratios[n] for n in amx)
    assert f"{first}x and {second}x as long with the matmuls' gradients in the first run" in flat
    assert f"{run2_sit}x and {run2_siet}x in the second, and {run3_sit}x and {run3_siet}x in the third" in (
        flat
    )
    assert f"at parity ({small} and {medium})" in flat
    graph, graph2, xla, xla2, (small, medium) = (ratios[n] for n in amd)
    assert (
        f"graph steps take {graph[0]}x and {graph[1]}x as long with them in the first run and {graph2[0]}x "
        f"and {graph2[1]}x in the second, their XLA steps {xla[0]}x and {xla[1]}x with XLA's dots in the "
        f"first and {xla2[0]}x and {xla2[1]}x in the second; at 14x14 {small} and {medium}," in flat
    )


def test_the_projections_tile_section_is_its_native_ab_runs():
    """docs/speed.md's "The projection's tile": native_ab.py's two runs against the old tile and its A/A run,
    every row and the ratios quoted from them."""
    section, flat = _speed_section("### The projection's tile", "\n### The kernel gradient packed")
    profile = _report("op_profile_train_amd_bf16_f0777d5_float32.json")
    projection = next(r for r in profile["nodes"] if r["op"] == "SitChannelsFirstProjection")
    forward = [r for r in profile["nodes"] if r["op"] in ("SitWindowAttention", "SitClassTokenAttention")]
    assert all(projection["ms_per_call"] > r["ms_per_call"] for r in forward)
    assert f"{projection['ms_per_call']:.2f} ms in its profile one op at a time" in flat
    runs = {
        "native_ab_projection_tile_run1": "2ff1649",
        "native_ab_projection_tile_run2": "2ff1649",
        "native_ab_same_kernels": "3b7b5c2",
    }
    _assert_native_ab_runs(section, "3b7b5c2", runs, "on the old tile", onednn=True)


def test_the_kernel_gradient_packed_section_is_its_native_ab_runs():
    """docs/speed.md's "The kernel gradient packed": native_ab.py's runs with oneDNN off (the steps then take
    the op) against the old form and its A/A run, every row and the ratios quoted from them."""
    section, _ = _speed_section(
        "### The kernel gradient packed", "\n### The kernel gradient's transpose under XLA"
    )
    runs = {
        "native_ab_packed_kgrad_eigen_run1": "6dd05e1",
        "native_ab_packed_kgrad_eigen_run2": "6dd05e1",
        "native_ab_packed_kgrad_eigen_same": "4f3921a",
    }
    _assert_native_ab_runs(section, "4f3921a", runs, "with the old form", onednn=False)


def test_the_skip_embeddings_gradient_section_is_its_profiles_and_runs():
    """docs/speed.md's "The skip embedding's gradient under XLA": the input gradient's matmul in the XLA and
    graph profiles at cb102b7, and every row and ratio of skip_embedding_gradient.py's two runs."""
    section, flat = _speed_section(
        "### The skip embedding's gradient under XLA", "\n### The custom calls on TensorFlow's threads"
    )
    node = "gradient_tape/si_t_encoder/local_gsa/MatMul_2/MatMul"
    xla = _report("op_profile_xla_sit_amd_bf16_cb102b7.json")["nodes"]
    graph = _report("op_profile_train_amd_bf16_cb102b7_float32.json")["nodes"]
    (in_xla,) = [r["ms_per_call"] for r in xla if r["node"].startswith(node + " ")]
    (in_graph,) = [r["ms_per_call"] for r in graph if r["node"] == node]
    assert f"oneDNN matmul call at {in_xla:.2f} ms, against {in_graph:.2f} ms for TensorFlow's matmul" in flat
    ratios = {}
    hosts = {"amd_bf16": ("819fdfa", "AMD EPYC"), "amx": ("e7f5680", "model 167")}
    for (host, (commit, machine)), run in itertools.product(hosts.items(), (1, 2)):
        name = f"skip_embedding_gradient_{host}_run{run}"
        report = _report(f"{name}.json")
        assert f"`benchmarks/reference/{name}.json`" in flat
        assert report["commit"].startswith(commit) and machine in report["machine"]
        settings = report["settings"]
        assert (settings["image_size"], settings["batch"], settings["repeats"]) == (64, 96, 21)
        assert settings["rows"] == 96 * 64 * 17 and not settings["quick"]
        for what, r in report["results"].items():
            label = "the product" if what == "product" else f"`{what}` train step"
            assert (
                f"| `{name}` | {label} | {r['xla_summed_ms']:.2f} | {r['xla_matmul_ms']:.2f} "
                f"| {r['graph_ms']:.2f} | {r['summed_over_matmul']:.3f} | {r['xla_summed_over_graph']:.3f} "
                f"| {r['xla_matmul_over_graph']:.3f} |"
            ) in section
            ratios[host, run, what] = f"{r['summed_over_matmul']:.3f}"
    assert all(float(ratios["amd_bf16", run, "product"]) < 0.9 for run in (1, 2))
    assert all(float(ratios["amx", run, "product"]) > 1.1 for run in (1, 2))
    amd, amx = ({k[1:]: v for k, v in ratios.items() if k[0] == host} for host in hosts)
    assert (
        f"took {amd[1, 'product']}x and {amd[2, 'product']}x as long with the summed gradient" in flat
        and f"the SiT's step took {amd[1, 'sit']}x and {amd[2, 'sit']}x as long with it, the SieT's "
        f"{amd[1, 'siet']}x and {amd[2, 'siet']}x."
        in flat
    )
    summed = "as long with the summed gradient"
    assert f"Here the product took {amx[1, 'product']}x and {amx[2, 'product']}x {summed}" in flat
    assert (
        f"The SiT's step took {amx[1, 'sit']}x and {amx[2, 'sit']}x {summed}, the SieT's {amx[1, 'siet']}x "
        f"and {amx[2, 'siet']}x." in flat
    )
    source = (ROOT / "sit_keras" / "layers" / "skip_embedding.py").read_text()
    assert 'SUMMED_GRADIENT_VENDORS = ("AuthenticAMD",)' in source and "`SUMMED_GRADIENT_VENDORS`" in flat


def _kernel_gradient_transpose_row(report: str, model: str, r: dict) -> str:
    """The docs' table row of one model in a kernel_gradient_transpose.py report."""
    return (
        f"| `{report}` | `{model}` | {r['xla_gathered_ms']:.1f} | {r['xla_folded_ms']:.1f} "
        f"| {r['graph_ms']:.1f} | {r['gathered_over_folded']:.3f} | {r['xla_gathered_over_graph']:.3f} "
        f"| {r['xla_folded_over_graph']:.3f} |"
    )


def test_the_kernel_gradients_transpose_section_is_its_profiles_and_runs():
    """docs/speed.md's "The kernel gradient's transpose under XLA": the kernel gradients' oneDNN calls in the
    XLA profiles with the fold (30bfae0) and with the gather (cb102b7), the graph's matmuls, and every row and
    ratio of kernel_gradient_transpose.py's three runs."""
    section, flat = _speed_section(
        "### The kernel gradient's transpose under XLA", "\n### The skip embedding's gradient under XLA"
    )

    def kernel_gradients(name: str, shape: str) -> list[float]:  # the oneDNN calls with a kernel's shape
        report = _report(f"{name}.json")
        assert f"`benchmarks/reference/{name}.json`" in flat and "AMD EPYC" in report["machine"]
        assert report["settings"]["jit_compile"] and report["settings"]["model"] == "sit"
        calls = [r for r in report["nodes"] if r["op"] == "__onednn$matmul" and r["shapes"].startswith(shape)]
        return sorted((r["ms_per_call"] for r in calls), reverse=True)

    folded = kernel_gradients("op_profile_xla_sit_amd_bf16_30bfae0", "(f32[64,192]{1,0}")
    gathered = kernel_gradients("op_profile_xla_sit_amd_bf16_cb102b7", "(f32[192,64]{1,0}")
    assert len(folded) == len(gathered) == 3
    assert (
        f"that call took {folded[0]:.2f} ms" in flat and f"{gathered[0]:.2f} ms in the same profile" in flat
    )
    assert (
        f"{gathered[1]:.2f} and {gathered[2]:.2f} ms against {folded[1]:.2f} and {folded[2]:.2f} ms folded"
        in flat
    )
    graph = _report("op_profile_train_amd_bf16_cb102b7_float32.json")
    assert graph["settings"]["one_op_at_a_time"] and not graph["settings"]["jit_compile"]
    matmuls = {r["node"]: r["ms_per_call"] for r in graph["nodes"] if r["node"] in ("MatMul_6", "MatMul_7")}
    assert f"the batched matmul takes {matmuls['MatMul_6']:.2f} ms one op at a time" in flat
    dx = next(
        r
        for r in _report("op_profile_xla_sit_amd_bf16_cb102b7.json")["nodes"]
        if r["node"].startswith("MatMul_7")
    )
    assert f"{dx['ms_per_call']:.2f} ms as XLA's oneDNN matmul call" in flat
    assert f"{matmuls['MatMul_7']:.2f} ms as TensorFlow's 2-D oneDNN matmul" in flat
    ratios = {}
    for name, size, rounds in (("64_run1", 64, 15), ("64_run2", 64, 15), ("14", 14, 61)):
        report = _report(f"kernel_gradient_transpose_amd_bf16_{name}.json")
        assert f"`benchmarks/reference/kernel_gradient_transpose_amd_bf16_{name}.json`" in flat
        assert report["commit"].startswith("cb102b7") and "AMD EPYC" in report["machine"]
        assert (
            report["settings"]["image_size"],
            report["settings"]["repeats"],
            report["settings"]["batch"],
        ) == (
            size,
            rounds,
            96,
        )
        for model, r in report["results"].items():
            assert (
                _kernel_gradient_transpose_row(f"kernel_gradient_transpose_amd_bf16_{name}", model, r)
                in section
            )
            ratios[name, model.split("_")[-1].removesuffix(".gin")] = r
    g = {key: f"{r['gathered_over_folded']:.3f}" for key, r in ratios.items()}
    xla = {key: f"{r['xla_gathered_over_graph']:.3f}" for key, r in ratios.items()}
    fold = {key: f"{r['xla_folded_over_graph']:.3f}" for key, r in ratios.items()}
    one, two = "64_run1", "64_run2"
    assert (
        f"the SiT's XLA step took {g[one, 'sit']}x and {g[two, 'sit']}x as long with the gather, the SieT's "
        f"{g[one, 'siet']}x and {g[two, 'siet']}x, and XLA / graph went from {fold[one, 'sit']} and "
        f"{fold[two, 'sit']} to {xla[one, 'sit']} and {xla[two, 'sit']} for the SiT, from "
        f"{fold[one, 'siet']} and {fold[two, 'siet']} to {xla[one, 'siet']} and {xla[two, 'siet']} for the "
        "SieT" in flat
    )
    assert f"parity ({g['14', 'small']} for SiT-small, {g['14', 'pooled']} for the SieT readout)" in flat
    from sit_keras.layers.channels_first import kernel_gradient_by_matmul  # its docstring quotes the same

    doc = " ".join(kernel_gradient_by_matmul.__doc__.split())
    at_64 = sorted(g[run, m] for run in (one, two) for m in ("sit", "siet"))
    assert f"formed in {folded[0]:.2f} ms against {gathered[0]:.2f} for ``dy x^T``" in doc
    assert f"took {at_64[0]}-{at_64[-1]}x as long with the gather" in doc


CONFIGS_14 = ("sit_small", "siet_rotation_pooled", "vit", "cnn")


def _host_threads_row(report: str, config: str, row: dict) -> str:
    """The docs' table row of one config in an xla_host_threads.py report."""
    return (
        f"| `{report}` | `{config}` | {row['graph_ms']:.1f} | {row['xla_tensorflow_threads_ms']:.1f} | "
        f"{row['xla_own_pool_ms']:.1f} | {row['own_pool_over_tensorflow_threads']:.3f} | "
        f"{row['xla_tensorflow_threads_over_graph']:.3f} | {row['xla_own_pool_over_graph']:.3f} |"
    )


def test_the_custom_calls_threads_section_is_its_run():
    """docs/speed.md's "The custom calls on TensorFlow's threads": SiT-small's split XLA calls in the targets'
    run at edc8c6c, and every row and ratio of xla_host_threads.py's run at 63a6ab5."""
    section, flat = _speed_section(
        "### The custom calls on TensorFlow's threads", "\n### Lane sums in registers"
    )
    encoders = _report("speed_targets_amd_bf16_edc8c6c/encoders_14.json")["models"]
    steps = encoders["configs/minigrid/lavacrossing_sit_small.gin"]["timings"]["train_step"]
    xla, graph = (sorted(steps[mode]["runs_ms"]) for mode in ("xla", "graph"))
    fast = [ms for ms in xla if ms < 11]
    usual = [ms for ms in graph if ms < 12]
    assert (
        f"took {fast[0]:.1f}-{fast[-1]:.1f} ms in {len(fast)} of its {len(xla)} timed calls and "
        f"{xla[len(fast)]:.1f}-{xla[-1]:.1f} ms in the other {len(xla) - len(fast)}, its graph step "
        f"{usual[0]:.1f}-{usual[-1]:.1f} ms in {len(usual)}" in flat
    )
    runs = {}  # run -> config -> row
    for name, commit in (
        ("xla_host_threads_amd_bf16_14", "63a6ab5"),
        ("xla_host_threads_amd_bf16_14_run2", "4821014"),
    ):
        report = _report(f"{name}.json")
        assert f"`benchmarks/reference/{name}.json`" in flat
        assert report["commit"].startswith(commit) and "AMD EPYC" in report["machine"]
        settings = report["settings"]
        sizes = (settings["image_size"], settings["batch"], settings["repeats"], settings["turn"])
        assert sizes == (14, 96, 15, 6)
        runs[name] = {}
        for model, row in report["results"].items():
            config = model.split("/")[-1]
            assert _host_threads_row(name, config, row) in section
            runs[name][config.removeprefix("lavacrossing_").removesuffix(".gin")] = row

    def both(config: str, key: str) -> list[str]:
        return [f"{rows[config][key]:.3f}" for rows in runs.values()]

    own = {config: both(config, "own_pool_over_tensorflow_threads") for config in CONFIGS_14}
    small, pooled, vit, cnn = (own[config] for config in CONFIGS_14)
    assert (
        f"SiT-small's XLA step took {small[0]}x and {small[1]}x as long, the CNN's {cnn[0]}x and {cnn[1]}x"
        in flat
    )
    assert f"the SieT readout's {pooled[0]}x and {pooled[1]}x" in flat
    assert f"its {vit[0]} and {vit[1]} are this measurement's spread" in flat
    assert float(pooled[1]) <= max(float(v) for v in vit)  # "which the SieT readout's second run is within"
    assert min(float(v) for v in small + cnn) > max(float(v) for v in vit)
    over = {config: both(config, "xla_tensorflow_threads_over_graph") for config in ("vit", "cnn")}
    assert (
        f"still take longer with XLA at this size ({over['vit'][0]} and {over['cnn'][0]}; "
        f"{over['vit'][1]} and {over['cnn'][1]})" in flat
    )
    at_64 = [_report(f"xla_host_threads_amd_bf16_64_run{run}.json") for run in (1, 2)]
    models = ("sit", "siet")
    for run in at_64:
        assert run["commit"].startswith("15dbf38") and "AMD EPYC" in run["machine"]
        sizes = tuple(run["settings"][key] for key in ("image_size", "batch", "repeats", "turn"))
        assert sizes == (64, 96, 9, 3) and run["settings"]["models"] == list(models)
    ratio = "own_pool_over_tensorflow_threads"
    sit, siet = ([f"{r['results'][m][ratio]:.3f}" for r in at_64] for m in models)
    assert f"the SiT's XLA step took {sit[0]}x and {sit[1]}x as long on the pool of its own" in flat
    assert f"the SieT's {siet[0]}x and {siet[1]}x" in flat
    from sit_keras import native  # its docstring and the XLA library's comment quote the same run

    doc = " ".join(native.xla_host_threads.__doc__.split())
    assert f"SiT-small's XLA step took {small[0]}x as long on a pool of its own" in doc
    source = (ROOT / "sit_keras" / "native" / "xla" / "xla_kernels.cc").read_text()
    comment = " ".join(source.replace("//", " ").split())
    assert f"step took {small[0]}x as long with the pool below, the CNN's {cnn[0]}x" in comment


def test_the_lane_sums_section_is_its_native_ab_runs():
    """docs/speed.md's "Lane sums in registers": every ratio of native_ab.py's op runs against d587e86, its
    control on the same kernels and its step run, each run's commits, and the same bits in the bits run."""
    section, flat = _speed_section("### Lane sums in registers", "\n### Outputs past the caches")
    runs = {
        name: _report(f"native_ab_{name}.json")
        for name in (
            "lane_sums_ops_run1",
            "lane_sums_ops_run2",
            "lane_sums_ops_run3",
            "lane_sums_same_kernels",
            "lane_sums_bits",
            "lane_sums_steps",
        )
    }
    for name, run in runs.items():
        base = "e9e4ba5" if name == "lane_sums_same_kernels" else "d587e86"
        commit = "a80c16e" if name == "lane_sums_bits" else "e9e4ba5"
        assert run["commit"].startswith(commit) and run["base_commit"].startswith(base), name
        assert "AMD EPYC" in run["machine"] and f"`benchmarks/reference/native_ab_{name}.json`" in flat
        results = run["results"]
        if name == "lane_sums_steps":
            assert set(results) == {"sit", "siet"}
            for model, label in (("sit", "SiT"), ("siet", "SieT")):
                assert f"{results[model]['this_over_base']:.3f}x ({label}, " in flat
            continue
        row = next(line for line in section.splitlines() if line.startswith(f"| `native_ab_{name}`"))
        grid, values = results["global_grid"], results["class_token_values"]
        assert f"| {grid['this_over_base']:.3f}" in row and f"| {values['this_over_base']:.3f} |" in row
        assert all(r["base_op_types_in_step"] == 2 for r in results.values())
    bits = runs["lane_sums_bits"]["results"]
    assert len(bits) == 7 and all(r["same_bits"] for r in bits.values())
    assert {"global_grid_bfloat16", "first_block_bfloat16", "class_token_values_bfloat16"} <= set(bits)
    ops = [runs[f"lane_sums_ops_run{i}"]["results"]["global_grid"]["this_over_base"] for i in (1, 2, 3)]
    assert f"took {min(ops):.3f}-{max(ops):.3f}x as long" in flat and max(ops) < 1
    assert f"and {bits['global_grid']['this_over_base']:.3f}x in the run of seven" in flat
    control = runs["lane_sums_same_kernels"]["results"]["class_token_values"]["this_over_base"]
    assert f"the control measured {control:.3f} for an op" in flat


STREAMING_OPS = ("projection", "class_token", "class_token_bfloat16")


def _streaming_ratios(section: str, flat: str, names: tuple[str, ...], commit: str, machine: str) -> dict:
    """The native_ab.py runs of the streaming stores at ``commit`` (two against 0583fdf, the last against
    itself) on the host ``machine`` names: each report named and its row, the same bits in every op's case;
    their this / base ratios, as the docs print them, by report and case."""
    ratio = {}
    for name in names:
        run = _report(f"{name}.json")
        base = commit if name.endswith("same_kernels") else "0583fdf"
        assert run["commit"].startswith(commit) and run["base_commit"].startswith(base), name
        assert machine in run["machine"] and f"`benchmarks/reference/{name}.json`" in flat
        assert run["settings"]["repeats"] == 31 and not run["settings"]["quick"]
        results = run["results"]
        assert set(results) == {"sit", "siet", *STREAMING_OPS}
        assert all(results[case]["same_bits"] for case in STREAMING_OPS)
        ratio[name] = {case: f"{r['this_over_base']:.3f}" for case, r in results.items()}
        steps = [
            f"{ratio[name][m]} ({results[m]['base_ms']:.1f} -> {results[m]['this_ms']:.1f} ms)"
            for m in ("sit", "siet")
        ]
        ops = " | ".join(ratio[name][case] for case in STREAMING_OPS)
        assert f"| `{name}` | {base} | {steps[0]} | {steps[1]} | {ops} |" in section
    return ratio


def test_the_streaming_section_is_its_native_ab_runs():
    """docs/speed.md's "Outputs past the caches": each native_ab.py run at 0d64ae2 (two against 0583fdf, one
    against itself) named and its row, the same bits in every case, and the ratios its bullets quote."""
    section, flat = _speed_section("### Outputs past the caches", "\n## Other fast paths")
    names = ("native_ab_streaming_run1", "native_ab_streaming_run2", "native_ab_streaming_same_kernels")
    ratio = _streaming_ratios(section, flat, names, "0d64ae2", "AMD EPYC")
    first, second, same = (ratio[name] for name in names)
    assert f"took {first['class_token']}x and {second['class_token']}x as long" in flat
    assert f"where the control measured {same['class_token']}" in flat
    assert (
        f"{first['class_token_bfloat16']}x and {second['class_token_bfloat16']}x, against a control of "
        f"{same['class_token_bfloat16']}." in flat
    )
    assert (
        f"{first['projection']}x and {second['projection']}x as long, against a control of "
        f"{same['projection']}:" in flat
    )
    assert (
        f"took {first['sit']}x and {second['sit']}x as long for the SiT and {first['siet']}x and "
        f"{second['siet']}x for the SieT; the same kernels on both sides gave {same['sit']} and "
        f"{same['siet']}." in flat
    )
    assert float(first["class_token"]) < 0.95 and float(second["class_token"]) < 0.95


def test_two_xla_choices_on_the_amx_host_are_its_runs():
    """docs/speed.md's "Two XLA choices on an Intel host with AMX": every row of the two runs at e7f5680 of
    kernel_gradient_transpose.py and of xla_host_threads.py, and the ratios its sentences quote."""
    title = "### Two XLA choices on an Intel host with AMX"
    section, flat = _speed_section(title, "\n### Lane sums in registers")
    gather, pools = {}, {}
    for run in (1, 2):
        for name in (f"kernel_gradient_transpose_amx_64_run{run}", f"xla_host_threads_amx_14_run{run}"):
            report = _report(f"{name}.json")
            assert f"`benchmarks/reference/{name}.json`" in flat
            assert report["commit"].startswith("e7f5680") and "model 167" in report["machine"]
            assert report["settings"]["batch"] == 96 and not report["settings"]["quick"]
        kernels = _report(f"kernel_gradient_transpose_amx_64_run{run}.json")
        assert (kernels["settings"]["image_size"], kernels["settings"]["repeats"]) == (64, 15)
        for model, r in kernels["results"].items():
            assert (
                _kernel_gradient_transpose_row(f"kernel_gradient_transpose_amx_64_run{run}", model, r)
                in section
            )
            gather[model, run] = f"{r['gathered_over_folded']:.3f}"
        threads = _report(f"xla_host_threads_amx_14_run{run}.json")
        assert threads["settings"]["image_size"] == 14
        for config, r in threads["results"].items():
            short = config.split("/")[-1]
            assert _host_threads_row(f"xla_host_threads_amx_14_run{run}", short, r) in section
            model = short.removeprefix("lavacrossing_").removesuffix(".gin")
            pools[model, run] = f"{r['own_pool_over_tensorflow_threads']:.3f}"
            pools[model, run, "xla"] = f"{r['xla_tensorflow_threads_over_graph']:.3f}"
            assert r["xla_tensorflow_threads_over_graph"] < 1
    assert all(float(v) < 1 for v in gather.values())
    assert (
        f"took {gather['sit', 1]}x and {gather['sit', 2]}x as long with it as with XLA's fold, the SieT's "
        f"{gather['siet', 1]}x and {gather['siet', 2]}x." in flat
    )
    for model in ("sit_small", "siet_rotation_pooled", "vit", "cnn"):
        assert f"{pools[model, 1]} and {pools[model, 2]}" in flat
    assert f"the ViT's {pools['vit', 1, 'xla']} and {pools['vit', 2, 'xla']} and the CNN's" in flat
    assert f"the CNN's {pools['cnn', 1, 'xla']} and {pools['cnn', 2, 'xla']} among them" in flat


def test_the_streaming_section_on_the_amx_host_is_its_native_ab_runs():
    """docs/speed.md's "Outputs past the caches", its Intel AMX host paragraph: each native_ab.py run at
    ee49fef (two against 0583fdf, one against itself) named and its row, the same bits in every case, and the
    ratios its sentences quote."""
    section, flat = _speed_section("On the Intel host with AMX (model 167", "\n## Other fast paths")
    names = (
        "native_ab_streaming_amx_run1",
        "native_ab_streaming_amx_run2",
        "native_ab_streaming_amx_same_kernels",
    )
    ratio = _streaming_ratios(section, flat, names, "ee49fef", "model 167")
    first, second, same = (ratio[name] for name in names)
    assert (
        f"{first['class_token']}x and {second['class_token']}x against a control of {same['class_token']}"
        in flat
    )
    assert (
        f"{first['projection']}x and {second['projection']}x match its control's {same['projection']}" in flat
    )
    assert (
        f"{first['class_token_bfloat16']}x and {second['class_token_bfloat16']}x its control's "
        f"{same['class_token_bfloat16']}" in flat
    )
    assert (
        f"took {first['sit']}x and {second['sit']}x (SiT) and {first['siet']}x and {second['siet']}x (SieT) "
        f"as long, against {same['sit']} and {same['siet']} with the same kernels" in flat
    )
    assert float(first["class_token"]) < 0.95 and float(second["class_token"]) < 0.95


def _assert_native_ab_runs(section: str, commit: str, runs: dict[str, str], old: str, onednn: bool) -> None:
    """A section of native_ab.py's runs of ``commit`` on the AMD host, two against the old kernels and an A/A
    run (``runs``: report -> base commit): each report named, every row, and the ratios its sentence quotes
    ("as long as <old>"); ``onednn``: whether TensorFlow's oneDNN was on."""
    flat = " ".join(section.split())
    ratios = {}
    for name, base in runs.items():
        report = _report(f"{name}.json")
        assert f"`benchmarks/reference/{name}.json`" in flat
        assert report["commit"].startswith(commit) and report["base_commit"].startswith(base)
        assert "AMD EPYC" in report["machine"]
        assert (report["environment"]["env"].get("TF_ENABLE_ONEDNN_OPTS") != "0") == onednn
        settings = report["settings"]
        assert (settings["image_size"], settings["batch"], settings["repeats"]) == (64, 96, 21)
        assert not settings["quick"] and settings["models"] == ["sit", "siet"]
        for model, r in report["results"].items():
            assert r["base_op_types_in_step"] > 0
            assert (
                f"| `{name}` | {base} | `{model}` | {r['base_ms']:.1f} | {r['this_ms']:.1f} "
                f"| {r['this_over_base']:.3f} |" in section
            )
        ratios[name] = {model: f"{r['this_over_base']:.3f}" for model, r in report["results"].items()}
    first, second, same = (ratios[name] for name in runs)
    assert (
        f"The SiT's step took {first['sit']}x and {second['sit']}x as long as {old}, the SieT's "
        f"{first['siet']}x and {second['siet']}x; the same kernels on both sides gave {same['sit']} and "
        f"{same['siet']}." in flat
    )


def test_the_evaluations_with_the_native_kernels_section_is_its_runs():
    """docs/speed.md's "Evaluations with the native kernels": the policy benchmark's rows, and the whole
    evaluation's six alternated runs, on the same episodes, with their medians and ratios."""
    section, flat = _speed_section("## Evaluations with the native kernels", "\n## Other fast paths")
    policy = _report("eval_policy_speed_avx512bf16.json")
    assert policy["commit"].startswith("1baf37a") and "no AMX" in policy["machine"]
    assert policy["native_kernels"] == "loaded"
    settings = policy["settings"]
    assert f"alternating rounds ({settings['rounds']}, after {settings['warmup']} warm-up calls each" in flat
    for model in policy["models"]:
        median = model["median_ms"]
        row = (
            f"| `{model['model']}` | {model['image_size']} | {median['native']:.2f} "
            f"| {median['builtin']:.2f} | {model['native_over_builtin']:.3f} "
            f"| {model['native_over_builtin_per_round_median']:.3f} |"
        )
        assert row in section and model["same_actions"] == model["batch"] == settings["batch"] == 10
    evaluation = _report("eval_native_forward_passes.json")
    assert evaluation["commits"] == {"before": "9cf3160", "after": "1baf37a"} and evaluation["same_episodes"]
    assert "`benchmarks/reference/eval_native_forward_passes.json`" in flat
    assert f"{evaluation['wall_seconds']} s for the six processes" in flat and evaluation["budget"]
    for side, when in (("before", "before"), ("after", "after")):
        seconds = [f"{run['seconds']:.2f}" for run in evaluation["runs"][side]]
        assert f"{seconds[0]}, {seconds[1]} and {seconds[2]} s {when}" in flat
    lengths = {run["mean_length"] for side in evaluation["runs"].values() for run in side}
    assert len(lengths) == 1 and f"mean length, {lengths.pop()} steps, in all six runs" in flat
    medians = evaluation["median_seconds"]
    assert (
        f"Medians {medians['before']:.2f} and {medians['after']:.2f} s: "
        f"{evaluation['after_over_before']:.2f}x (per-round median "
        f"{evaluation['after_over_before_per_round_median']:.2f})" in flat
    )


def test_the_xla_step_before_and_after_the_zeroing_section_is_its_rounds():
    """docs/speed.md's "The SiT's XLA step before and after the window gradients' zeroing": the ten alternated
    rounds, each named and a row of the table; the medians quoted, and no claim that the ratio rose."""
    title = "#### The SiT's XLA step before and after the window gradients' zeroing"
    section, flat = _speed_section(title, "\n#### The targets at 270799a, and each ratio round by round")
    values: dict[str, list[tuple[float, float, float]]] = {}
    for run in range(1, 6):
        for when, commit in (("before", "eebe85b"), ("after", "ef5cec9")):
            name = f"speed_encoders_avx512bf16_xla_{when}_run{run}.json"
            report = _report(name)
            assert f"`benchmarks/reference/{name}`" in flat
            assert report["commit"].startswith(commit) and "no AMX" in report["machine"]
            assert report["settings"]["models"] == ["sit"] and report["settings"]["precisions"] == ["float32"]
            step = report["models"]["sit"]["timings"]["train_step"]
            graph, xla = step["graph"]["median_ms"], step["xla"]["median_ms"]
            values.setdefault(when, []).append((graph, xla, xla / graph))
            assert f"| {commit}, round {run} | {graph:.1f} | {xla:.1f} | {xla / graph:.3f} |" in section
    (graph, xla, ratio), (graph_after, xla_after, ratio_after) = (
        [statistics.median(v[i] for v in values[w]) for i in range(3)] for w in ("before", "after")
    )
    assert (
        f"graph {graph:.1f} and {graph_after:.1f} ms, XLA {xla:.1f} and {xla_after:.1f} ms, "
        f"XLA / graph {ratio:.3f} and {ratio_after:.3f}"
    ) in flat
    lower = sum(a[2] < b[2] for b, a in zip(values["before"], values["after"], strict=True))
    assert f"(lower after in {lower} rounds of five)" in flat
    assert ratio_after <= ratio and "did not make the XLA step slower against the graph step" in flat


def test_the_single_local_blocks_values_op_section_is_its_runs():
    """docs/speed.md's "A single local block's values in one op": the op profiles before and after, the
    encoder's alternated rounds and the demo's PPO runs, each number from the A/B's report."""
    section, flat = _speed_section(
        "## A single local block's values in one op", "\n### The values gradient's sums in registers"
    )
    ab = _report("class_token_values_ab.json")
    assert ab["commits"] == {"before": "b5c453c", "after": "08cc11c"} and "no AMX" in ab["machine"]
    assert "`benchmarks/reference/class_token_values_ab.json`" in flat
    before, after = (ab["op_profile"][side] for side in ("before", "after"))
    for side in ("before", "after"):
        report = _report(ab["op_profile"][side]["report"])
        assert report["wall_ms_median"] == ab["op_profile"][side]["wall_ms_median"]
        assert report["settings"]["one_op_at_a_time"] and report["settings"]["batch"] == 256
    assert (
        f"wall {before['wall_ms_median']:.1f} ms a call before and {after['wall_ms_median']:.1f} ms after "
        f"({after['wall_ms_median'] / before['wall_ms_median']:.2f}x)" in flat
    )
    assert (
        f"summed op time {before['summed_op_ms_per_call']:.1f} and {after['summed_op_ms_per_call']:.1f} ms"
        in flat
    )
    for side, profile in (("before", before), ("after", after)):
        for op, ms in list(profile["top_op_types_ms"].items())[:4]:
            assert f"`{op}` {ms:.2f}" in flat, (side, op)
    encoders = ab["encoders14"]
    for key, label in (("train_step_graph_ms", "in graph mode"), ("train_step_xla_ms", "with XLA")):
        runs = {
            side: ", ".join(f"{r[key]:.2f}" for r in encoders["runs"][side]) for side in ("before", "after")
        }
        medians = encoders["medians_ms"]
        assert (
            f"{runs['before']} ms before and {runs['after']} ms after {label} (medians "
            f"{medians['before'][key]:.2f} and {medians['after'][key]:.2f}: "
            f"{encoders['after_over_before'][key]:.2f}x)" in flat
        )
    demo = ab["demo_ppo"]
    for side in ("before", "after"):
        sit = ", ".join(f"{v:.0f}" for run in demo["runs"][side] for v in run["sit"])
        assert f"SiT {side}: {sit} env steps/s" in flat
    medians = demo["median_env_steps_per_second"]
    assert (
        f"medians {medians['before']['sit']:.1f} and {medians['after']['sit']:.1f} "
        f"({demo['sit_after_over_before']:.2f}x)" in flat
    )
    assert (
        f"the CNN's {medians['before']['cnn']:.1f} and {medians['after']['cnn']:.1f} "
        f"({demo['cnn_after_over_before']:.2f}x)" in flat
    )
    ratio = demo["sit_over_cnn"]
    assert (
        f"The medians' ratio, SiT / CNN, is {ratio['before']:.2f} before and {ratio['after']:.2f} after"
        in flat
    )
    assert f"{ab['demo_wall_seconds']:.0f} s for the four demo runs" in flat


def _listed(values: list[float], digits: int = 2) -> str:
    """``values`` as the docs list them: "a, b and c"."""
    text = [f"{v:.{digits}f}" for v in values]
    return f"{', '.join(text[:-1])} and {text[-1]}"


def _assert_demo_ab(ab: dict, flat: str) -> None:
    """An A/B's demo PPO as its section quotes it: the four runs' wall time, the SiT's and the CNN's median
    env steps/s before and after with their ratios, and SiT / CNN on each side."""
    demo = ab["demo_ppo"]
    rates = demo["median_env_steps_per_second"]
    assert f"{ab['demo_wall_seconds']:.0f} s for the four" in flat
    assert (
        f"the SiT's medians {rates['before']['sit']:.1f} and {rates['after']['sit']:.1f} env steps/s "
        f"({demo['sit_after_over_before']:.2f}x), the CNN's {rates['before']['cnn']:.1f} and "
        f"{rates['after']['cnn']:.1f} ({demo['cnn_after_over_before']:.2f}x" in flat
    )
    ratio = demo["sit_over_cnn"]
    assert f"SiT / CNN {ratio['before']:.2f} before and {ratio['after']:.2f} after" in flat


def test_the_values_gradients_sums_in_registers_section_is_its_runs():
    """docs/speed.md's "The values gradient's sums in registers": the op's six op-profile rounds, raw and
    over the rest of the step, with the pairs' order the section explains; the encoder's rounds, the demo."""
    title = "### The values gradient's sums in registers"
    section, flat = _speed_section(title, "\n### The values gradient's blocks in groups")
    ab = _report("class_token_values_grad_ab.json")
    assert ab["commits"] == {"before": "f2653c2", "after": "1b98eb0"} and "no AMX" in ab["machine"]
    assert "`benchmarks/reference/class_token_values_grad_ab.json`" in flat
    runs = ab["op_profile"]["runs"]
    for side in ("before", "after"):
        report = _report(f"op_profile_values_grad_{side}.json")
        ops = {e["op"]: e["ms_per_call"] for e in report["op_types"]}
        assert ops["SitClassTokenValuesGrad"] == runs[side][0]["values_grad_ms"]
        assert report["settings"]["one_op_at_a_time"] and report["settings"]["batch"] == 256
        assert f"`op_profile_values_grad_{side}.json`" in flat
    grads = {side: _listed([r["values_grad_ms"] for r in runs[side]]) for side in runs}
    assert f"took {grads['before']} ms before and {grads['after']} ms after" in flat
    # The second process of each pair ran the unchanged class-token attention gradient slower.
    for before, after in zip(runs["before"], runs["after"], strict=True):
        first, second = (before, after) if before["first"] else (after, before)
        assert second["class_token_attention_grad_ms"] > first["class_token_attention_grad_ms"]
    assert [r["first"] for r in runs["after"]] == [False] * 4 + [True] * 2
    assert "In rounds 1-4 the after process ran second, in rounds 5-6 first" in flat
    for run in runs["before"] + runs["after"]:
        rest = run["summed_op_ms_per_call"] - run["values_grad_ms"] - run["values_ms"]
        assert run["values_grad_over_rest"] == pytest.approx(run["values_grad_ms"] / rest)
    over_rest = ab["op_profile"]["over_rest_of_step"]
    grad, forward = over_rest["values_grad_over_rest"], over_rest["values_over_rest"]
    assert (
        f"from a median of {grad['before_median']:.3f} to {grad['after_median']:.3f}: "
        f"{_listed(grad['after_over_before_per_round'])} after / before round by round, "
        f"median **{grad['after_over_before_per_round_median']:.2f}x**" in flat
    )
    assert (
        f"from {forward['before_median']:.3f} to {forward['after_median']:.3f} (median of the rounds' ratios "
        f"{forward['after_over_before_per_round_median']:.2f}): unchanged" in flat
    )
    encoders = ab["encoders14"]
    steps = {side: [r["train_step_graph_ms"] for r in encoders["runs"][side]] for side in ("before", "after")}
    medians, ratios = encoders["medians_ms"], encoders["after_over_before"]
    rounds = encoders["after_over_before_per_round_median"]
    assert (
        f"{_listed(steps['before'])} ms before and {_listed(steps['after'])} ms after (medians "
        f"{medians['before']['train_step_graph_ms']:.2f} and {medians['after']['train_step_graph_ms']:.2f}: "
        f"{ratios['train_step_graph_ms']:.2f}x; median of the rounds' ratios "
        f"{rounds['train_step_graph_ms']:.2f})" in flat
    )
    assert (
        f"with XLA medians {medians['before']['train_step_xla_ms']:.2f} and "
        f"{medians['after']['train_step_xla_ms']:.2f} ({ratios['train_step_xla_ms']:.2f}x; "
        f"{rounds['train_step_xla_ms']:.2f} round by round)" in flat
    )
    spread = {side: max(v) / min(v) for side, v in steps.items()}
    assert f"up to {spread['before']:.2f}x between processes before and {spread['after']:.2f}x after" in flat
    _assert_demo_ab(ab, flat)
    native_runs = {
        side: [_report(f"native_ops_values_grad_{side}_run{r}.json") for r in range(1, 5)]
        for side in ("before", "after")
    }
    for side, reports in native_runs.items():
        assert all(f"`native_ops_values_grad_{side}_run{r}.json`" in flat for r in range(1, 5))
        commit = "f2653c2" if side == "before" else "4c02d86"
        assert all(r["commit"].startswith(commit) and "no AMX" in r["machine"] for r in reports)

    def matmul_times(case: str, stage: str = "backward") -> dict[str, list[float]]:
        return {
            side: [r["results"][case][stage]["matmul_times"] for r in reports]
            for side, reports in native_runs.items()
        }

    both = matmul_times("class_token_values")
    middle = {side: statistics.median(v) for side, v in both.items()}
    assert (
        f"forward + backward {_listed(both['before'])} matmul-times before and {_listed(both['after'])} "
        f"after, medians {middle['before']:.2f} and {middle['after']:.2f} "
        f"(**{middle['after'] / middle['before']:.2f}x**)" in flat
    )
    forward = {s: statistics.median(v) for s, v in matmul_times("class_token_values", "forward").items()}
    assert f"the forward pass {forward['before']:.2f} and {forward['after']:.2f}" in flat
    for case, label in (
        ("class_token_values_bfloat16", "forward + backward"),
        ("class_token_values_xla", "XLA"),
    ):
        m = {s: statistics.median(v) for s, v in matmul_times(case).items()}
        assert f"{label} {m['before']:.2f} and {m['after']:.2f} ({m['after'] / m['before']:.2f}x)" in flat
    matmuls = [r["results"]["matmul_ms"] for side in ("before", "after") for r in native_runs[side]]
    third = matmuls.pop(6)
    assert f"the matmul itself took {third:.2f} ms ({min(matmuls):.2f}-{max(matmuls):.2f} ms in" in flat
    earlier = _report("op_profile_class_token_values_after.json")["op_types"]
    previous = {e["op"]: e["ms_per_call"] for e in earlier}
    assert (
        f"({previous['SitClassTokenValuesGrad']:.2f} against {previous['SitClassTokenValues']:.2f} ms in "
        "the op profile at 08cc11c" in flat
    )


def test_the_values_gradients_blocks_in_groups_section_is_its_runs():
    """docs/speed.md's "The values gradient's blocks in groups": the op alone in four native_ops runs a side,
    its share of the train step round by round, and the encoder's step, each number from the A/B's reports."""
    section, flat = _speed_section(
        "### The values gradient's blocks in groups", "\n### The stem pooling's gradient by a bit mask"
    )
    ab = _report("class_token_values_group_ab.json")
    assert ab["commits"] == {"before": "f5779a5", "after": "1b33df1"} and "no AMX" in ab["machine"]
    assert "`benchmarks/reference/class_token_values_group_ab.json`" in flat
    native_ops = ab["native_ops"]
    for side in ("before", "after"):
        reports = [_report(f"native_ops_values_group_{side}_run{r}.json") for r in range(1, 5)]
        assert all(f"`native_ops_values_group_{side}_run{r}.json`" in flat for r in range(1, 5))
        assert all(r["commit"].startswith(ab["commits"][side]) and "no AMX" in r["machine"] for r in reports)
        times = [r["results"]["class_token_values"]["backward"]["matmul_times"] for r in reports]
        assert times == [run["class_token_values_matmul_times"] for run in native_ops["runs"][side]]
        assert f"{_listed(times)} {'matmul-times before' if side == 'before' else 'after'}" in flat
    medians, ratios = native_ops["medians"], native_ops["after_over_before"]

    def change(key: str, ratio: bool = True) -> str:
        text = f"{medians['before'][key]:.2f} -> {medians['after'][key]:.2f}"
        return f"{text} ({ratios[key]:.2f}x)" if ratio else text

    assert f"medians **{change('class_token_values_matmul_times')}**" in flat
    assert f"The forward alone {change('class_token_values_forward_matmul_times', False)};" in flat
    assert f"bfloat16 storage {change('class_token_values_bfloat16_matmul_times')}" in flat
    assert f"under XLA {change('class_token_values_xla_matmul_times')}" in flat
    assert f"unchanged, {change('class_token_matmul_times', False)}: the control" in flat
    assert abs(ratios["class_token_matmul_times"] - 1) < 0.05
    profile = ab["op_profile"]
    for side in ("before", "after"):
        report = _report(f"op_profile_values_group_{side}.json")
        ops = {e["op"]: e["ms_per_call"] for e in report["op_types"]}
        assert ops["SitClassTokenValuesGrad"] == profile["runs"][side][0]["values_grad_ms"]
        assert report["settings"]["one_op_at_a_time"] and report["settings"]["batch"] == 256
    grads = {
        side: _listed([r["values_grad_ms"] for r in profile["runs"][side]]) for side in ("before", "after")
    }
    assert f"took {grads['before']} ms before and {grads['after']} ms after" in flat
    for run in profile["runs"]["before"] + profile["runs"]["after"]:
        rest = run["summed_op_ms_per_call"] - run["values_grad_ms"] - run["values_ms"]
        assert run["values_grad_over_rest"] == pytest.approx(run["values_grad_ms"] / rest)
    grad, forward = (profile["over_rest_of_step"][k] for k in ("values_grad_over_rest", "values_over_rest"))
    assert (
        f"from a median of {grad['before_median']:.3f} to {grad['after_median']:.3f}: "
        f"{_listed(grad['after_over_before_per_round'])} after / before round by round, median "
        f"**{grad['after_over_before_per_round_median']:.2f}x**" in flat
    )
    assert (
        f"forward op from {forward['before_median']:.3f} to {forward['after_median']:.3f} "
        f"({forward['after_over_before_per_round_median']:.2f}x)" in flat
    )
    assert [r["first"] for r in profile["runs"]["before"]] == [True, False, True, False]
    encoders = ab["encoders14"]
    medians, ratios, rounds = (
        encoders[k] for k in ("medians_ms", "after_over_before", "after_over_before_per_round_median")
    )
    assert (
        f"graph medians {medians['before']['train_step_graph_ms']:.2f} -> "
        f"{medians['after']['train_step_graph_ms']:.2f} ms ({ratios['train_step_graph_ms']:.2f}x; "
        f"{rounds['train_step_graph_ms']:.2f} round by round), "
        f"XLA {medians['before']['train_step_xla_ms']:.2f} -> {medians['after']['train_step_xla_ms']:.2f} "
        f"ms ({ratios['train_step_xla_ms']:.2f}x; {rounds['train_step_xla_ms']:.2f})" in flat
    )
    graph = {side: [r["train_step_graph_ms"] for r in encoders["runs"][side]] for side in ("before", "after")}
    assert (
        f"({min(graph['before']):.2f}-{max(graph['before']):.2f} ms before, "
        f"{min(graph['after']):.2f}-{max(graph['after']):.2f} after)" in flat
    )
    _assert_demo_ab(ab, flat)
