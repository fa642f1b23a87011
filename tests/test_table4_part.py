"""benchmarks/table4_part.py: a finished run's report, curve and process times as one part of Table 4."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]


def _load():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("table4_part", ROOT / "benchmarks" / "table4_part.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path: Path, last_step: int = 204_800) -> tuple[Path, Path]:
    """A run folder whose ``collect/`` logs a success rate rising by 0.1 every 20k steps, its report (a
    200k-step budget, ``train_wall_s`` 70 s) and a log of two processes, the second going on from 40,960."""
    root = tmp_path / "cnn_seed0"
    writer = tf.summary.create_file_writer(str(root / "collect"))
    with writer.as_default():
        for step in range(20_480, last_step + 1, 20_480):
            tf.summary.scalar("Metrics/SuccessRate", min(step // 20_480 / 10, 1.0), step=step)
            tf.summary.scalar("Metrics/AverageReturn", 0.5, step=step)
            tf.summary.scalar("charts/SPS", 300.0, step=step)
    writer.close()
    report = {
        "benchmark": "minigrid_rotation",
        "settings": {"env_steps": 200_000, "gin_bindings": []},
        "runs": [{"model": "cnn", "seed": 0, "root_dir": str(root), "train_wall_s": 70.0, "greedy": {}}],
    }
    (tmp_path / "report.json").write_text(json.dumps(report))
    bar = "{s}/200000 [{t}<1:00, 300step/s]"
    log = (
        "2026-12-01T10:00:00Z start at abc1234\n"
        + bar.format(s=0, t="00:00").replace("<1:00", "<?")
        + "".join(
            "\r" + bar.format(s=s, t=t) for s, t in ((20480, "00:30"), (40960, "01:00"), (61440, "01:30"))
        )
        + "2026-12-01T12:00:00Z start at def5678\n"
        + bar.format(s=40960, t="00:00").replace("<1:00", "<?")
        + "".join("\r" + bar.format(s=s, t=t) for s, t in ((102400, "00:40"), (204800, "01:10")))
    )
    (tmp_path / "run.log").write_text(log)
    return tmp_path / "report.json", tmp_path / "run.log"


def test_a_part_keeps_the_report_and_adds_the_curve_and_the_processes_times(tmp_path):
    report, log = _run(tmp_path)
    out = tmp_path / "part.json"
    assert (
        _load().main(["--report", str(report), "--log", str(log), "--every", "50000", "--out", str(out)]) == 0
    )
    part = json.loads(out.read_text())
    assert part["runs"] == json.loads(report.read_text())["runs"] and part["benchmark"] == "minigrid_rotation"
    curve = part["training_curve"]
    assert curve["success_every_50k"] == [[61440, 0.3], [102400, 0.5], [163840, 0.8], [204800, 1.0]]
    assert curve["first_step_with_success_at_least"] == {"0.5": 102400, "0.8": 163840, "0.9": 184320}
    assert part["first_step_rule"].startswith("float32: ")
    # The first process counts its bar's minute at 40,960, where the second went on; the last its own 70 s.
    assert part["train_wall_s"] == {"process_1_to_40960": 60.0, "process_2_to_204800": 70.0, "total": 130.0}
    assert [p["commit"] for p in part["processes"]] == ["abc1234", "def5678"]
    assert part["train_wall_command"] == f"python benchmarks/run_log.py --log {log} --final_wall_s 70.0"
    assert part["training_curve_command"].endswith("cnn_seed0 --every 50000")


def _event_file(folder: Path, created: int, logged: list[tuple[int, float]]) -> None:
    """An event file as a process's writer leaves it, named for its creation time: ``_run``'s scalars at
    each logged step, at the given wall time."""
    folder.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(folder / f"events.out.tfevents.{created}.vm.1.v2")) as writer:
        for step, wall in logged:
            scalars = {"Metrics/SuccessRate": min(step // 20_480 / 10, 1.0), "Metrics/AverageReturn": 0.5,
                       "charts/SPS": 300.0}  # fmt: skip
            values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=v) for tag, v in scalars.items()]
            event = tf.compat.v1.Event(wall_time=wall, step=step, summary=tf.compat.v1.Summary(value=values))
            writer.write(event.SerializeToString())


def test_processes_lost_with_their_log_are_timed_from_their_event_files(tmp_path):
    """The log of the machine that trained to 40,960 is gone: the second process's log starts there, and
    the first process's event file (created at T, logging 40,960 at T + 60 s) gives its minute."""
    report, log = _run(tmp_path)
    log.write_text("2026-12-01T12:00:00Z" + log.read_text().split("2026-12-01T12:00:00Z")[1])
    collect = tmp_path / "cnn_seed0" / "collect"
    for path in collect.iterdir():
        path.unlink()
    created = 1_796_164_007
    _event_file(collect, created, [(s, created + 30.0 * s / 20480) for s in (20480, 40960, 61440)])
    later = created + 7200
    _event_file(collect, later, [(s, later + s / 1000) for s in range(61440, 204801, 20480)])
    out = tmp_path / "part.json"
    assert _load().main(["--report", str(report), "--log", str(log), "--out", str(out)]) == 0
    part = json.loads(out.read_text())
    assert part["train_wall_s"] == {"process_1_to_40960": 60.0, "process_2_to_204800": 70.0, "total": 130.0}
    first, second = part["processes"]
    assert first["source"] == "event files" and first["commit"] is None
    assert first["started"] == "2026-12-01T22:26:47Z"  # the writer's creation time, 1796164007
    assert (second["source"], second["commit"], second["first_step"]) == ("log", "def5678", 40960)
    assert part["training_curve"]["first_step_with_success_at_least"]["0.9"] == 184320


def test_an_unfinished_run_or_a_missing_file_is_refused_in_one_sentence(tmp_path, capsys):
    report, log = _run(tmp_path, last_step=122_880)
    out = tmp_path / "part.json"
    module = _load()
    assert module.main(["--report", str(report), "--log", str(log), "--out", str(out)]) == 2
    assert "logged 122,880 steps, fewer than the report's budget 200,000: the run is not finished." in (
        capsys.readouterr().err
    )
    assert module.main(["--report", str(tmp_path / "none.json"), "--log", str(log), "--out", str(out)]) == 2
    assert f"cannot read {tmp_path / 'none.json'}: No such file or directory." in capsys.readouterr().err
    report.write_text(json.dumps({"runs": [{"model": "cnn"}, {"model": "vit"}]}))
    assert module.main(["--report", str(report), "--log", str(log), "--out", str(out)]) == 2
    assert "A part holds one run (one model, one seed); the report has 2." in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("every", ["0", "999"])
def test_a_curve_step_below_1000_is_refused(tmp_path, every, capsys):
    report, log = _run(tmp_path)
    out = tmp_path / "x.json"
    argv = ["--report", str(report), "--log", str(log), "--every", every, "--out", str(out)]
    assert _load().main(argv) == 2
    assert "--every" in capsys.readouterr().err and not out.exists()


def test_a_logged_float32_success_rate_of_090_counts_as_reaching_09(tmp_path):
    """The event files hold float32: a logged 0.9 reads back as 0.8999999762 and counts as reaching 0.9."""
    _run(tmp_path)
    logs = _load().training_curve.read_logs(str(tmp_path / "cnn_seed0"))
    assert 0.9 > next(e["success"] for e in logs if e["env_steps"] == 184_320) > 0.8999999
    reached = _load().training_curve.summarize(logs, 50_000, (0.89, 0.9, 0.91))[
        "first_step_with_success_at_least"
    ]
    assert reached == {"0.89": 184_320, "0.9": 184_320, "0.91": 204_800}
