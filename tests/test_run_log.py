"""benchmarks/run_log.py: a run's training time, process by process, from the log its sessions appended."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("run_log", ROOT / "benchmarks" / "run_log.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_log"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _bars(steps_and_times: list[tuple[int, str]], budget: int = 3000000) -> str:
    """tqdm's refreshes as the trainers print them: carriage returns, no newline; the first shows ``<?``."""
    first_step = steps_and_times[0][0]
    text = f"  0%|          | {first_step}/{budget} [00:00<?, ?step/s]"
    for step, elapsed in steps_and_times:
        text += f"\r 12%|#2        | {step}/{budget} [{elapsed}<2:40:36, 254.14step/s, ret=0.73]"
    return text


# Three processes: one before the "start at" lines existed, one that went on from its checkpoint at 4096 and
# lost the steps after its checkpoint at 8192 with its session, and one that finished after an hour.
LOG = (
    "Loading...\n"
    + _bars([(2048, "00:07"), (4096, "00:15"), (6144, "00:22")])
    + "2026-12-01T08:04:07Z start at abc1234\n"
    + _bars([(4096, "00:00"), (6144, "00:08"), (8192, "00:16"), (8192, "00:26"), (10240, "00:33")])
    + "2026-12-01T10:00:00Z start at def5678\n"
    + _bars([(8192, "00:00"), (10240, "59:59"), (12288, "1:00:09")])
    + "\nEvaluating\n  5%| | 10/200 [00:03<01:00, 3.1it/s]\nWrote runs/x.json\n"
)


def test_each_process_contributes_up_to_the_step_the_next_one_started_from():
    bench = _load()
    processes = bench.parse(LOG)
    assert [(p.started, p.commit, p.first_step, p.last_step) for p in processes] == [
        (None, None, 2048, 6144),
        ("2026-12-01T08:04:07Z", "abc1234", 4096, 10240),
        ("2026-12-01T10:00:00Z", "def5678", 8192, 12288),
    ]
    walls = bench.train_walls(processes)
    # 15 s to the checkpoint at 4096, the bar's last refresh at 8192 (after the save), an hour and 9 s.
    assert walls["train_wall_s"] == {
        "process_1_to_4096": 15.0,
        "process_2_to_8192": 26.0,
        "process_3_to_12288": 3609.0,
        "total": 3650.0,
    }
    assert bench.train_walls(processes, final_wall_s=3612.5)["train_wall_s"]["process_3_to_12288"] == 3612.5


def test_the_command_line_prints_json_and_refuses_a_missing_or_barless_log(tmp_path, capsys):
    bench = _load()
    log = tmp_path / "run.log"
    log.write_text(LOG)
    assert bench.main(["--log", str(log)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["train_wall_s"]["total"] == 3650.0
    assert [row["contributed_to_step"] for row in report["processes"]] == [4096, 8192, 12288]

    missing = tmp_path / "missing.log"
    assert bench.main(["--log", str(missing)]) == 2
    assert (
        capsys.readouterr().err == f"run_log.py: cannot read the log {missing}: No such file or directory.\n"
    )
    log.write_text("Wrote runs/x.json\n")
    assert bench.main(["--log", str(log)]) == 2
    assert capsys.readouterr().err == f"run_log.py: {log} holds no progress bar of a training run.\n"
