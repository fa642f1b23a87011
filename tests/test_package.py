"""Packaging and Keras-selection checks for ``sit_keras``."""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from run_folders import load_benchmark

import sit_keras

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

REPO = Path(__file__).resolve().parents[1]


def _clean_env(**extra: str) -> dict[str, str]:
    """The current environment without TF_USE_LEGACY_KERAS, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra)
    return env


def _run_python(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tf_keras_is_keras_2_after_import():
    assert sit_keras is not None
    import tf_keras

    # The module's name depends on how it was first imported ("tf_keras..." or,
    # after `import tensorflow.keras` somewhere, "tensorflow.keras"); its classes do not.
    assert tf.keras.layers.Layer is tf_keras.layers.Layer, tf.keras.__file__


def test_importing_after_tensorflow_without_legacy_keras_fails(tmp_path):
    result = _run_python("import tensorflow; import sit_keras", cwd=tmp_path, env=_clean_env())
    assert result.returncode != 0, result.stdout + result.stderr
    assert "ImportError" in result.stderr, result.stderr
    assert "TF_USE_LEGACY_KERAS" in result.stderr, result.stderr


def test_importing_before_tensorflow_selects_tf_keras(tmp_path):
    code = "import sit_keras, tensorflow as tf; print(tf.keras.__name__)"
    result = _run_python(code, cwd=tmp_path, env=_clean_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("tf_keras"), result.stdout


def test_agents_and_export_are_subpackages_from_repo_folders():
    import sit_keras.agents
    import sit_keras.export

    assert Path(sit_keras.agents.__file__).resolve().parent == REPO / "agents"
    assert Path(sit_keras.export.__file__).resolve().parent == REPO / "export"


def test_no_top_level_agents_or_export_module_from_this_project(tmp_path):
    # Run from an empty folder, so that only the installed package (not the
    # current directory or pytest's sys.path) decides what `agents` is.
    code = (
        "import importlib.util\n"
        "for name in ('agents', 'export'):\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    print(name, spec.origin if spec else None)\n"
    )
    result = _run_python(code, cwd=tmp_path, env=_clean_env())
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        name, origin = line.split(" ", 1)
        if origin != "None":
            assert not Path(origin).resolve().is_relative_to(REPO), f"top-level {name!r} from {origin}"
    # In this process too, unless the repository itself is on sys.path (python -m pytest).
    if not any(Path(p or ".").resolve() == REPO for p in sys.path):
        spec = importlib.util.find_spec("agents")
        assert spec is None or not Path(spec.origin or "").resolve().is_relative_to(REPO)


def test_version_matches_installed_metadata():
    assert sit_keras.__version__ == importlib.metadata.version("sit-keras")


def test_the_resource_report_has_a_line_per_test_with_where_its_time_went(tmp_path):
    report = tmp_path / "resources.jsonl"
    tests = ["tests/test_package.py::test_tf_keras_is_keras_2_after_import", "tests/test_graphs.py"]
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, *tests, "-k", "keras_2 or triangle", "--resource-report", str(report)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={
            k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"
        },  # its own session, not a worker
    )
    assert done.returncode == 0, done.stdout[-2000:]
    records = [json.loads(line) for line in report.read_text().splitlines()]
    assert records[0]["test"] == tests[0] and len(records) >= 2
    for record in records:
        assert record["worker"] == "main" and record["wall_s"] > 0 and record["max_rss_mb"] > 0
        assert min(record["cpu_s"], record["children_cpu_s"], record["gc_s"]) >= 0
    # Stacks of collections longer than 10 s would go here; these tests have none.
    assert (tmp_path / "resources.jsonl.main.stacks").read_text() == ""
    # benchmarks/suite_resources.py sums it up per worker.
    out = tmp_path / "summary.json"
    assert load_benchmark("suite_resources").main([str(report), "--top", "1", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    (worker,) = summary["workers"].values()
    assert worker["tests"] == len(records) and len(worker["most_gc"]) == 1
    assert worker["wall_s"] == pytest.approx(sum(r["wall_s"] for r in records))
    assert worker["most_gc"][0]["gc_s"] == max(r["gc_s"] for r in records)
    assert summary["gc_fraction_of_wall"] == pytest.approx(worker["gc_s"] / worker["wall_s"])
    gzipped = tmp_path / "resources.jsonl.gz"
    gzipped.write_bytes(gzip.compress(report.read_bytes()))  # as committed in benchmarks/reference
    assert load_benchmark("suite_resources").main([str(gzipped), "--top", "1", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["workers"] == summary["workers"]


def test_the_resource_summary_names_a_line_that_is_not_a_record(tmp_path, capsys):
    report = tmp_path / "resources.jsonl"
    report.write_text(json.dumps({"test": "t", "worker": "gw0", "wall_s": 1.0}) + "\n")
    assert load_benchmark("suite_resources").main([str(report)]) == 2
    err = capsys.readouterr().err.strip()
    missing = "cpu_s, children_cpu_s, gc_s"
    assert err == f"suite_resources.py: {report}:1 is not a --resource-report line (missing {missing})."
    assert load_benchmark("suite_resources").main([str(tmp_path / "absent.jsonl")]) == 2
    assert "is not a file: give the file that --resource-report wrote." in capsys.readouterr().err
