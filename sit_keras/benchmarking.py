"""Shared by the scripts in ``benchmarks/``: what the machine was, and the JSON report."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tensorflow.python.eager import context

import sit_keras


def environment() -> dict[str, Any]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_available": affinity,
        "load_average_start": list(os.getloadavg()),
        "sit_keras": sit_keras.__version__,
        "tensorflow": tf.__version__,
        "tf_keras": tf_keras.__version__,
        "numpy": np.__version__,
        # 0 means TensorFlow's default: one thread per available core.
        "threading": {
            "inter_op_parallelism_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "intra_op_parallelism_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        },
        "env": {
            k: os.environ[k]
            for k in (
                "TF_ENABLE_ONEDNN_OPTS",
                "ONEDNN_MAX_CPU_ISA",
                "TF_XLA_FLAGS",
                "XLA_FLAGS",
                "OMP_NUM_THREADS",
                "TF_CPU_ALLOCATOR_USE_BFC",
            )
            if k in os.environ
        },
    }


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """How to rerun ``benchmarks/<script>`` with ``argv`` (default ``sys.argv[1:]``), quoted for a shell."""
    return shlex.join(["python", f"benchmarks/{script}", *(sys.argv[1:] if argv is None else argv)])


def current_commit() -> str:
    """The commit checked out in this repository ('' outside a git clone): record it when a run starts."""
    here = Path(__file__).resolve().parent
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=here
    ).stdout.strip()


class UsageError(ValueError):
    """A bad command-line argument of a benchmark: one sentence, exit status 2."""


class SentenceParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise ``UsageError`` (one sentence) instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message[0].upper()}{message[1:]}.")


def parse_or_say_why(
    parse: Callable[[Sequence[str] | None], argparse.Namespace], argv: Sequence[str] | None
) -> argparse.Namespace | None:
    """``parse(argv)``, or ``None`` after printing a ``UsageError``'s sentence on stderr."""
    try:
        return parse(argv)
    except UsageError as error:
        print(error, file=sys.stderr)
        return None


def write_report(report: dict[str, Any], out: str | Path) -> None:
    """Writes ``report`` as indented JSON to ``out`` (creating its folder) and says so."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(f"Wrote {out}")


def name_list(valid: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated, non-empty list of names from ``valid``."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in valid]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {', '.join(unknown) or '(none given)'}; "
                f"expected some of: {', '.join(valid)}"
            )
        return names

    return parse


def seed_list(text: str) -> list[int]:
    """``--seeds`` of a benchmark: comma-separated, distinct, non-negative integers.

    Raises:
      UsageError: naming the flag and what was received.
    """
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers; received {text!r}.") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must be distinct non-negative integers; received {text!r}.")
    return seeds


def folder_list(text: str, flag: str, required_file: str, what: str) -> list[str]:
    """A comma-separated list of folders (``--<flag>``), each holding ``required_file``.

    Raises:
      UsageError: naming the flag, the first folder without the file, and ``what`` that file is.
    """
    folders = [folder for folder in text.split(",") if folder]
    if not folders:
        raise UsageError(f"--{flag} names no folder.")
    for folder in folders:
        if not os.path.isfile(os.path.join(folder, required_file)):
            raise UsageError(f"--{flag}: {folder!r} holds no {what} ({required_file}).")
    return folders


def check_out_file(out: str | None, folder_must_exist: bool = False) -> None:
    """``--out`` of a benchmark: a file to write the report to (or None), never an existing folder; with
    ``folder_must_exist``, in a folder that exists (for the scripts that do not create it).

    Raises:
      UsageError: naming the flag and what was received.
    """
    if out is not None and Path(out).is_dir():
        raise UsageError(f"--out must be a file path, not a folder; received {out!r}.")
    if folder_must_exist and out and not Path(out).resolve().parent.is_dir():
        raise UsageError(f"--out: the folder of {out!r} does not exist.")


def check_gin_bindings(parse: Callable[[], Any], config: str) -> None:
    """Calls ``parse`` (``config`` and ``--gin_bindings`` through sit-train's parser), then clears gin's
    config: a binding that does not apply is said before anything trains.

    Raises:
      UsageError: naming ``config`` and why the bindings do not apply to it.
    """
    import gin

    try:
        parse()
    except ValueError as error:
        why = " ".join(str(error.__cause__ or error).split())
        raise UsageError(f"--gin_bindings do not apply to {config} ({why}).") from None
    finally:
        gin.clear_config()


def interleaved_medians(
    functions: Mapping[Any, Callable[[], Any]], repeats: int, turn: int = 1
) -> dict[Any, float]:
    """Median seconds of each function of no argument over ``repeats`` rounds; each round calls every
    function in turn, so that a change of the machine's load falls on all of them alike.

    A function's turn is ``turn`` calls in a row; when it is more than one, the first call of each turn is
    not timed, so that what the previous function left running (threads spinning for work) settles.
    Each function is called once first (tracing, warm-up); a call's time includes computing every
    tensor it returns, not copying it out, as ``.numpy()`` would (docs/speed.md, "The projection's tile").
    """

    def call(fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        fn()
        # A call returns once its tensors are computed, unless TensorFlow runs eagerly asynchronously
        # (tf.config.experimental.set_synchronous_execution(False)): then this waits for them.
        context.async_wait()
        return time.perf_counter() - start

    for fn in functions.values():
        call(fn)
    samples: dict[Any, list[float]] = {key: [] for key in functions}
    for _ in range(repeats):
        for key, fn in functions.items():
            times = [call(fn) for _ in range(turn)]
            samples[key].extend(times[1:] if turn > 1 else times)
    return {key: statistics.median(times) for key, times in samples.items()}


# One training run in its own process; prints its median SPS (first iteration left out) as the last line.
_TRAINING_SPEED_SCRIPT = r"""
import json, resource, sys
from sit_keras.agents import train
from sit_keras.commands import demo
from sit_keras.agents.training import harness

root, gin_files, bindings, deterministic = sys.argv[1:5]
train.parse_gin(json.loads(gin_files), json.loads(bindings))
results = harness.train_eval(root, deterministic=deterministic == "1")
speed = demo.training_speed({"run": results})
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"sps": speed["env_steps_per_second"]["run"], "iterations": speed["iterations"]["run"],
                  "env_steps": results["env_steps"], "minor_page_faults": usage.ru_minflt,
                  "max_rss_mib": round(usage.ru_maxrss / 1024, 1)}))
"""


def training_speed(
    gin_files: Sequence[str | Path],
    bindings: Sequence[str],
    deterministic: bool = False,
    cwd: Path | None = None,
    environment_variables: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Trains once with ``harness.train_eval`` in a fresh process, in a temporary folder.

    Each measurement gets its own process because TensorFlow's global settings
    (deterministic kernels, thread pools, the CPU allocator) hold for the whole
    process. ``environment_variables`` are added to this process's environment
    for the child.

    Returns:
      ``{"sps": median env steps/s over the iterations after the first, "iterations", "env_steps",
      "minor_page_faults", "max_rss_mib"}``; the last two are the whole process's.

    Raises:
      RuntimeError: the run failed (with the end of its stderr).
    """
    with tempfile.TemporaryDirectory() as root:
        command = [
            sys.executable, "-c", _TRAINING_SPEED_SCRIPT, root,
            json.dumps([str(f) for f in gin_files]), json.dumps(list(bindings)),
            "1" if deterministic else "0",
        ]  # fmt: skip
        child_environment = {**os.environ, **(environment_variables or {})}
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=child_environment)
    if done.returncode != 0:
        raise RuntimeError(f"training with {list(gin_files)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
