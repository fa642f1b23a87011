"""benchmarks/speed_targets.py: its arguments, how it reads each report, the committed run, a smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_folders import load_benchmark

REFERENCE = Path(__file__).resolve().parent.parent / "benchmarks" / "reference"
# The AVX2 host's runs before and after the angle tables' dense gradients (docs/speed.md).
COMMITTED_RUNS = [
    "speed_targets_avx2",
    "speed_targets_avx2_dense_gradients",
    "speed_targets_avx2_transposes",
    "speed_targets_avx2_orbit_gradients",
    "speed_targets_avx2_prefetch",
]
# The AMX host's runs, before and after the CNNs' native gradients, pooling and convolutions (docs/speed.md,
# "The targets on an Intel host with AMX" and below, up to 12b3e23), and one on a second AMX host kind
# ("..., model 207"): bfloat16 counts there.
COMMITTED_BFLOAT16_RUNS = [
    "speed_targets_amx",
    "speed_targets_amx_native",
    "speed_targets_amx_vector_pool",
    "speed_targets_amx_native_conv",
    "speed_targets_amx_tree_reductions",
    "speed_targets_amx_prefetch",
    "speed_targets_amx_one_pass",
    "speed_targets_amx_bf16_storage",
    "speed_targets_amx_bf16_projection",
    "speed_targets_amx_uninitialized",
    "speed_targets_amx_model207",
    "speed_targets_amx_model207_1034fa9",
    "speed_targets_amx_ee49fef",
    "speed_targets_amx_12b3e23",
]
# Hosts with AVX512_BF16 but no AMX, an Intel one (docs/speed.md, "The targets on an Intel host with
# AVX512_BF16 and no AMX") and an AMD one ("The targets on an AMD host with AVX512_BF16"): bfloat16 counts
# there.
COMMITTED_AVX512_BF16_RUNS = [
    "speed_targets_avx512bf16",
    "speed_targets_avx512bf16_rounds",
    "speed_targets_avx512bf16_values_op",
    "speed_targets_avx512bf16_repeat_f5779a5",
    "speed_targets_amd_bf16",
    "speed_targets_amd_bf16_3b7b5c2",
    "speed_targets_amd_bf16_edc8c6c",
    "speed_targets_amd_bf16_63a6ab5",
    "speed_targets_amd_bf16_223c2c3",
    "speed_targets_amd_bf16_12e6756",
    "speed_targets_amd_bf16_2c4c3a0",
    "speed_targets_amd_bf16_2c4c3a0_run2",
    "speed_targets_amd_bf16_0d64ae2",
]


def _reports(module, scale: float = 1.0) -> dict[str, dict]:
    """A report per benchmark with every key the targets read, each ratio ``scale``."""
    minigrid = [module.MINIGRID.format(m) for m in module.MINIGRID_MODELS]
    encoder_ratios = {
        "train_step_over_vit": {m: {"graph": scale} for m in ["sit", "siet", *minigrid]},
        "xla_over_graph": {m: {"train_step": scale} for m in ["sit", "siet", "vit", "impala_cnn", *minigrid]},
    }
    return {
        "encoders_64": {
            "commit": "abc",
            "ratios": encoder_ratios,
            "models": {"sit": {"precision": {"mixed_bfloat16": {"over_float32": scale}}}},
        },
        "encoders_14": {"ratios": encoder_ratios},
        "demo_ppo": {"sit_over_cnn": scale},
        "lavacrossing_ppo": {"table": {"cnn": {"cost_per_env_step": scale}}},
        "procgen_ppo": {"ratios": {"impala_cnn_over_sit_env_steps_per_second": 1 / scale}},
        "two_workers": {"median_ratios_two_over_one": {"learner_seconds_per_train_step": scale}},
    }


def _with_rounds(module, reports: dict[str, dict], graph: list, xla: list, bfloat16: list) -> dict[str, dict]:
    """``reports`` with each encoder's times in the same rounds: ``graph``, ``xla``, the SiT's bfloat16 ms."""
    precision = reports["encoders_64"]["models"]["sit"]["precision"]
    specs = {"encoders_64": ["sit", "siet", "vit", "impala_cnn"]}
    specs["encoders_14"] = [module.MINIGRID.format(m) for m in module.MINIGRID_MODELS]
    for name, models in specs.items():
        timings = {"train_step": {"graph": {"runs_ms": graph}, "xla": {"runs_ms": xla}}}
        reports[name]["models"] = {spec: {"timings": timings} for spec in models}
    precision["mixed_bfloat16"]["runs_ms"] = bfloat16
    reports["encoders_64"]["models"]["sit"]["precision"] = precision
    return reports


def _row(rows: list[dict], what: str, limit: float | None = None) -> dict:
    [row] = [r for r in rows if r["what"] == what and (limit is None or r["limit"] == pytest.approx(limit))]
    return row


def test_each_target_reads_its_ratio_and_compares_it_with_its_limit():
    module = load_benchmark("speed_targets")
    rows = module.summarise(_reports(module, 0.65), ["avx2", "avx512_bf16"])
    assert len(rows) == len(module.targets()) == 22
    assert all(row["value"] == pytest.approx(0.65) for row in rows)  # procgen's is the report's inverse
    assert _row(rows, "SiT / ViT train step, 64x64 (graph)", 1.5)["met"] is True
    assert _row(rows, "sit: XLA / graph train step, 64x64")["met"] is True
    assert _row(rows, "SiT bfloat16 / float32 train step")["met"] is True  # 0.65 <= 0.7
    assert _row(rows, "demo SiT / CNN env steps/s (PPO)")["met"] is True  # at least 0.6
    assert _row(rows, "Procgen SiT / IMPALA-CNN env steps/s (PPO)", 1 / 4)["met"] is True
    assert _row(rows, "two workers / one: learner seconds per train step")["met"] is None  # no limit
    slower = module.summarise(_reports(module, 1.8), ["avx2", "avx512_bf16"])
    assert _row(slower, "SiT / ViT train step, 64x64 (graph)", 2.0)["met"] is True
    assert _row(slower, "SiT / ViT train step, 64x64 (graph)", 1.5)["met"] is False
    assert _row(slower, "sit: XLA / graph train step, 64x64")["met"] is False
    low = module.summarise(_reports(module, 0.2), ["avx2"])
    assert _row(low, "demo SiT / CNN env steps/s (PPO)")["met"] is False
    assert _row(low, "Procgen SiT / IMPALA-CNN env steps/s (PPO)", 1 / 6)["met"] is True
    assert _row(low, "Procgen SiT / IMPALA-CNN env steps/s (PPO)", 1 / 4)["met"] is False


def test_the_bfloat16_target_does_not_apply_without_bfloat16_instructions():
    module = load_benchmark("speed_targets")
    for flags, met in ((["avx2", "fma"], None), (["avx512f", "amx_bf16"], False)):
        row = _row(module.summarise(_reports(module, 0.9), flags), "SiT bfloat16 / float32 train step")
        assert row["met"] is met
        assert ("note" in row) == (met is None)


def test_a_report_without_a_targets_number_is_named(tmp_path, capsys):
    module = load_benchmark("speed_targets")
    reports = _reports(module)
    del reports["demo_ppo"]["sit_over_cnn"]
    with pytest.raises(module.UsageError, match="demo_ppo.json holds no number at sit_over_cnn"):
        module.summarise(reports, ["avx2"])
    for name, report in _reports(module).items():
        (tmp_path / module.BENCHMARK_RUNS[name].report).write_text(json.dumps(report))
    (tmp_path / "procgen_ppo.json").write_text("{not json")
    out = tmp_path / "summary.json"
    assert module.main(["--reports_only", "--work_dir", str(tmp_path), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "procgen_ppo.json is not a JSON report" in err and "\n" not in err
    (tmp_path / "procgen_ppo.json").unlink()
    assert module.main(["--reports_only", "--work_dir", str(tmp_path), "--out", str(out)]) == 1
    assert "procgen_ppo.json is missing" in capsys.readouterr().err
    assert not out.exists()


def test_per_round_medians_pair_the_two_sides_of_a_ratio_round_by_round(tmp_path, capsys):
    """A round in which the host slowed down (the second) moves both sides: the per-round ratios are 0.9, 0.9
    and 1.2, so their median is 0.9 while the medians' ratio is 132 / 110 = 1.2."""
    module = load_benchmark("speed_targets")
    reports = _with_rounds(module, _reports(module, 1.2), [100, 300, 110], [90, 270, 132], [50, 150, 55])
    medians = {entry["what"]: entry for entry in module.per_round_medians(reports)}
    assert len(medians) == 13  # 4 against the ViT, 8 XLA / graph, bfloat16; the PPO ratios are not in rounds
    xla = medians["sit: XLA / graph train step, 64x64"]
    assert xla["per_round_median"] == pytest.approx(0.9) and xla["ratio_of_medians"] == pytest.approx(1.2)
    assert xla["rounds"] == 3 and xla["keys"][0] == "models/sit/timings/train_step/xla/runs_ms"
    assert medians["cnn: XLA / graph train step, 14x14"]["report"] == "encoders_14.json"
    assert medians["SieT readout / ViT train step, 14x14 (graph)"]["per_round_median"] == pytest.approx(1.0)
    assert medians["SiT bfloat16 / float32 train step"]["per_round_median"] == pytest.approx(0.5)
    for name, report in reports.items():
        (tmp_path / module.BENCHMARK_RUNS[name].report).write_text(json.dumps(report))
    out = tmp_path / "summary.json"
    assert module.main(["--reports_only", "--work_dir", str(tmp_path), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "per round" in lines[0]
    siet = [line.split()[-5:] for line in lines if line.startswith("siet: XLA")]
    assert siet == [["1.200", "0.900", "<=", "1", "NO"]]
    assert [line.split()[-4] for line in lines if line.startswith("demo SiT")] == ["-"]
    written = json.loads(out.read_text())
    assert written["per_round_medians"] == list(medians.values())
    assert _row(written["targets"], "sit: XLA / graph train step, 64x64")["met"] is False  # the verdict: 1.2


def test_per_round_medians_name_missing_or_unpaired_rounds():
    module = load_benchmark("speed_targets")
    with pytest.raises(
        module.UsageError, match="encoders_64.json holds no number at models/sit/timings/train"
    ):
        module.per_round_medians(_reports(module))
    reports = _with_rounds(module, _reports(module), [100, 300, 110], [90, 270], [50, 150, 55])
    with pytest.raises(module.UsageError, match="'sit: XLA / graph train step, 64x64' in 2 and 3 rounds"):
        module.per_round_medians(reports)


@pytest.mark.parametrize(
    "argv",
    [["--only", "nope"], ["--only", ","], ["--reports_only", "--work_dir", "/no/such/folder"], ["--x"]],
)
def test_speed_targets_refuses_bad_arguments_in_one_sentence(argv, capsys, tmp_path):
    out = tmp_path / "report.json"
    assert load_benchmark("speed_targets").main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("run", COMMITTED_RUNS + COMMITTED_BFLOAT16_RUNS + COMMITTED_AVX512_BF16_RUNS)
def test_the_committed_run_summarises_to_its_committed_targets(run: str):
    """benchmarks/reference/<run>.json is what its benchmarks' reports (kept beside it, in <run>/) say; the
    bfloat16 target is n/a on the AVX2 host and counts on the AMX and AVX512_BF16 hosts, which have bfloat16
    instructions."""
    module = load_benchmark("speed_targets")
    committed = json.loads((REFERENCE / f"{run}.json").read_text())
    assert committed["quick"] is False
    runs = module.BENCHMARK_RUNS
    reports = {name: json.loads((REFERENCE / run / r.report).read_text()) for name, r in runs.items()}
    assert module.summarise(reports, committed["cpu_flags"]) == committed["targets"]
    # The per-round times are the ones each ratio's medians come from.
    if "per_round_medians" in committed:  # written since 270799a
        assert module.per_round_medians(reports) == committed["per_round_medians"]
    values = {row["what"]: row["value"] for row in committed["targets"]}
    for entry in module.per_round_medians(reports):
        assert entry["ratio_of_medians"] == pytest.approx(values[entry["what"]], rel=1e-12)
    assert committed["met"] == sum(row["met"] is True for row in committed["targets"])
    assert committed["missed"] == sum(row["met"] is False for row in committed["targets"])
    bfloat16 = _row(committed["targets"], "SiT bfloat16 / float32 train step")
    if run in COMMITTED_RUNS:
        assert not {"avx512_bf16", "amx_bf16"} & set(committed["cpu_flags"])  # an AVX2 host: bfloat16 n/a
        assert bfloat16["met"] is None
    elif run in COMMITTED_BFLOAT16_RUNS:
        assert {"avx512_bf16", "amx_bf16"} <= set(committed["cpu_flags"]) and "AMX" in committed["machine"]
        assert bfloat16["met"] is False and "note" not in bfloat16  # counted, and missed
    else:
        assert "avx512_bf16" in committed["cpu_flags"] and "amx_bf16" not in committed["cpu_flags"]
        assert "no AMX" in committed["machine"]
        assert bfloat16["met"] is False and "note" not in bfloat16  # counted, and missed


@pytest.mark.large
def test_a_quick_run_of_every_benchmark_writes_every_target(tmp_path):
    module = load_benchmark("speed_targets")
    out = tmp_path / "targets.json"
    assert module.main(["--quick", "--work_dir", str(tmp_path / "reports"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert len(report["targets"]) == len(module.targets())
    assert all(row["value"] > 0 for row in report["targets"])
