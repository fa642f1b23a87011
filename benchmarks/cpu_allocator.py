"""TensorFlow's CPU allocator: glibc malloc against TensorFlow's BFC arena, for the SiT and ViT steps and PPO.

By default TensorFlow allocates every CPU tensor with the C library's
``malloc`` and frees it with ``free``. glibc serves large blocks (above a
threshold of at most 32 MiB) with ``mmap`` and returns them with ``munmap``,
so a train step that makes big temporaries maps fresh pages on every call
and the kernel faults them in again (a *minor page fault* per 4 KiB page).
``TF_CPU_ALLOCATOR_USE_BFC=true`` makes TensorFlow keep its CPU memory in a
best-fit-with-coalescing arena (the allocator it uses on GPUs), which grows
to the process's peak and reuses it.

Each measurement runs in a fresh process, because the allocator is chosen
once, when TensorFlow first allocates, and the settings alternate within each
round so that a slow spell of a noisy host hits both:

- *encoder train step* (``sit_keras.encoder_check.make_train_step``: forward +
  backward + Adam on ``mean(features^2)``, graph mode, batch 96, 64x64x3
  uint8): the SiT and the ViT of ``sit_keras.models``, the pair of issue 26's
  ratio, called in turn ``--steps`` times after two warm-up calls; median ms
  and minor page faults per step, and the process's peak resident memory;
- *PPO on LavaCrossing* (``benchmarks/lavacrossing_cost.py``'s process: Table 4's
  protocol, no evaluation) for SiT-small and the CNN: median env steps/s over
  the iterations after the first, and the process's minor page faults per
  env step and peak resident memory.

The table gives, per setting, the medians over ``--rounds`` and BFC's time
relative to malloc's, all measured in this run.

Usage::

    python benchmarks/cpu_allocator.py [--rounds 3] [--steps 7] [--env_steps 8192]
        [--out benchmarks/results/cpu_allocator.json] [--quick]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sit_keras._cpu_allocator import VARIABLE
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
    training_speed,
    write_report,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from lavacrossing_cost import COMMON, CONFIGS, ITERATION, protocol  # noqa: E402  (Table 4's PPO process)

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "cpu_allocator.json"
SETTINGS = {"malloc": {VARIABLE: "false"}, "bfc": {VARIABLE: "true"}}
ENCODERS = ("sit", "vit")
PPO_MODELS = ("sit_small", "cnn")
BATCH, IMAGE_SIZE = 96, 64


def encoder_steps(steps: int, batch: int) -> dict[str, dict[str, float]]:
    """In this process: each encoder's train step, called in turn; median ms and page faults per step."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from sit_keras.encoder_check import make_train_step
    from sit_keras.models import build_encoder

    images = tf.constant(
        np.random.default_rng(0).integers(0, 256, (batch, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    )
    functions = {}
    for name in ENCODERS:
        tf_keras.utils.set_random_seed(0)
        encoder = build_encoder(name, (IMAGE_SIZE, IMAGE_SIZE, 3))
        functions[name] = make_train_step(encoder, jit_compile=False)
        for _ in range(3):  # tracing, then two warm-up calls
            functions[name](images).numpy()
    times: dict[str, list[float]] = {n: [] for n in ENCODERS}
    faults: dict[str, list[int]] = {n: [] for n in ENCODERS}
    for _ in range(steps):
        for name, step in functions.items():
            before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            step(images).numpy()
            times[name].append((time.perf_counter() - start) * 1e3)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    max_rss_mib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # the whole process
    return {
        n: {
            "step_ms": statistics.median(times[n]),
            "page_faults_per_step": statistics.median(faults[n]),
            "max_rss_mib": max_rss_mib,
        }
        for n in ENCODERS
    }


def measure_encoders(setting: str, steps: int, batch: int) -> dict[str, dict[str, float]]:
    """``encoder_steps`` in a fresh process under ``setting``'s allocator."""
    command = [sys.executable, __file__, "--child_steps", str(steps), "--child_batch", str(batch)]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **SETTINGS[setting]}
    )
    if done.returncode != 0:
        raise RuntimeError(f"the encoder steps under {setting} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_ppo(setting: str, model: str, env_steps: int) -> dict[str, Any]:
    """One LavaCrossing PPO process of ``model`` under ``setting``'s allocator."""
    bindings = [*COMMON, *protocol(model), f"train_eval.total_env_steps = {env_steps}"]
    result = training_speed(
        [CONFIGS / f"lavacrossing_{model}.gin"], bindings, cwd=ROOT, environment_variables=SETTINGS[setting]
    )
    result["page_faults_per_env_step"] = result["minor_page_faults"] / result["env_steps"]
    return result


def _median(values: list[dict[str, Any]], key: str) -> float:
    return statistics.median(v[key] for v in values)


def summarise(measured: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Medians per setting and workload, BFC over malloc, and SiT over ViT per setting."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for setting, workloads in measured.items():
        rows = table.setdefault(setting, {})
        for name in ENCODERS:
            rows[f"{name}_train_step"] = {
                "step_ms": _median(workloads[f"{name}_train_step"], "step_ms"),
                "page_faults_per_step": _median(workloads[f"{name}_train_step"], "page_faults_per_step"),
                "max_rss_mib": _median(workloads[f"{name}_train_step"], "max_rss_mib"),
            }
        for model in PPO_MODELS:
            runs = workloads[f"ppo_{model}"]
            rows[f"ppo_{model}"] = {
                "env_steps_per_second": _median(runs, "sps"),
                "page_faults_per_env_step": _median(runs, "page_faults_per_env_step"),
                "max_rss_mib": _median(runs, "max_rss_mib"),
            }
    malloc, bfc = table["malloc"], table["bfc"]
    ratios = {
        **{
            f"bfc_over_malloc_{n}_step_time": bfc[f"{n}_train_step"]["step_ms"]
            / malloc[f"{n}_train_step"]["step_ms"]
            for n in ENCODERS
        },
        **{
            f"bfc_over_malloc_ppo_{m}_time_per_env_step": malloc[f"ppo_{m}"]["env_steps_per_second"]
            / bfc[f"ppo_{m}"]["env_steps_per_second"]
            for m in PPO_MODELS
        },
        **{
            f"sit_over_vit_step_time_{s}": table[s]["sit_train_step"]["step_ms"]
            / table[s]["vit_train_step"]["step_ms"]
            for s in SETTINGS
        },
        **{
            f"sit_small_over_cnn_ppo_speed_{s}": table[s]["ppo_sit_small"]["env_steps_per_second"]
            / table[s]["ppo_cnn"]["env_steps_per_second"]
            for s in SETTINGS
        },
    }
    return {"table": table, "ratios": ratios}


def run(rounds: int, steps: int, batch: int, env_steps: int) -> dict[str, Any]:
    started, commit = time.time(), current_commit()
    measured: dict[str, dict[str, list[dict[str, Any]]]] = {s: {} for s in SETTINGS}
    for round_ in range(rounds):
        # Alternate which setting goes first, so neither always follows the other.
        order = list(SETTINGS) if round_ % 2 == 0 else list(reversed(SETTINGS))
        for setting in order:
            runs = measured[setting]
            for name, row in measure_encoders(setting, steps, batch).items():
                runs.setdefault(f"{name}_train_step", []).append(row)
            for model in PPO_MODELS:
                runs.setdefault(f"ppo_{model}", []).append(measure_ppo(setting, model, env_steps))
            print(
                f"round {round_ + 1}/{rounds} {setting:6s}: "
                + ", ".join(
                    f"{name} {rows[-1].get('step_ms', rows[-1].get('sps')):.0f}"
                    for name, rows in runs.items()
                ),
                flush=True,
            )
    return {
        "what": "glibc malloc against TensorFlow's BFC CPU allocator (TF_CPU_ALLOCATOR_USE_BFC): SiT and ViT "
        "train step (graph, batch 96, 64x64) and LavaCrossing PPO env steps/s, fresh processes alternating "
        "within each round; medians over the rounds",
        "command": command_line("cpu_allocator.py", None),
        "commit": commit,
        "settings": SETTINGS,
        "rounds": rounds,
        "steps_per_process": steps,
        "batch": batch,
        "ppo_env_steps_per_process": env_steps,
        **summarise(measured),
        "runs": measured,
        "wall_seconds": round(time.time() - started, 1),
        "environment": environment(),
    }


def format_report(report: dict[str, Any]) -> str:
    table = report["table"]
    header = ("workload", "malloc", "bfc", "bfc/malloc", "faults malloc", "bfc")
    lines = ["{:22s} {:>10s} {:>10s} {:>11s} {:>14s} {:>8s}".format(*header)]
    for workload, row in table["malloc"].items():
        other = table["bfc"][workload]
        if "step_ms" in row:
            unit, fault = "step_ms", "page_faults_per_step"
            ratio = other[unit] / row[unit]
        else:
            unit, fault = "env_steps_per_second", "page_faults_per_env_step"
            ratio = row[unit] / other[unit]  # time per env step
        cells = (workload, row[unit], other[unit], ratio, row[fault], other[fault])
        lines.append("{:22s} {:10.1f} {:10.1f} {:11.2f} {:14.0f} {:8.0f}".format(*cells))
    lines.append(
        "(train steps in ms, PPO in env steps/s; bfc/malloc is the time ratio; faults per step or env step)"
    )
    lines += [f"{k}: {v:.2f}" for k, v in report["ratios"].items() if k.startswith(("sit_over", "sit_small"))]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses and validates the arguments; raises ``UsageError`` with one sentence on a bad one."""
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per setting and workload")
    parser.add_argument("--steps", type=int, default=7, help="timed train steps per encoder and process")
    parser.add_argument("--env_steps", type=int, default=4 * ITERATION, help="env steps per PPO process")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="one round, batch 8, two PPO iterations")
    parser.add_argument("--child_steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child_batch", type=int, default=BATCH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}.")
    if args.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {args.steps}.")
    if args.env_steps < 2 * ITERATION:
        raise UsageError(f"--env_steps must be >= {2 * ITERATION} (two iterations), got {args.env_steps}.")
    check_out_file(args.out)
    args.batch = BATCH
    if args.quick:
        args.rounds, args.steps, args.batch, args.env_steps = 1, 2, 8, 2 * ITERATION
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the measurements; returns the exit code (2 on a bad argument)."""
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    if args.child_steps is not None:  # one measuring process (measure_encoders)
        print(json.dumps(encoder_steps(args.child_steps, args.child_batch)))
        return 0
    report = run(args.rounds, args.steps, args.batch, args.env_steps)
    print(format_report(report))
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
