"""Speed of the encoders on CPU, with and without XLA, in ms and in matmul-times.

For each model, in one process, at ``(64, 64, 3)`` uint8 images::

    forward, batch 1            tf.function(jit_compile=False) and (jit_compile=True)
    forward, batch 64           idem
    train step, batch 96        idem; forward + backward + tf_keras Adam on mean(features^2)

Each number is the median of ``--repeats`` timed calls after the first call
(tracing + compilation + one run, recorded separately as ``first_call_s``)
and ``--warmup`` untimed ones. A 1024x1024 @ 1024x1024 float32 matmul is
timed at the start, before every model and at the end; every model time is
also given divided by the median of all matmul timings ("matmul-times"), a
unit that is more comparable between machines than milliseconds.

Usage::

    python benchmarks/encoders.py [--models sit,siet,vit,impala_cnn] [--repeats 7]
        [--out benchmarks/results/encoders.json] [--quick]

See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

# isort: split

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.benchmarking import environment, name_list, write_report
from sit_keras.encoder_check import make_forward, make_train_step, time_calls
from sit_keras.models import ENCODER_NAMES, build_encoder

DEFAULT_MODELS = ("sit", "siet", "vit", "impala_cnn")
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "encoders.json"

# The SiT paper's CNN baseline is the IMPALA ResNet with reduced channels
# (Table 2); the other models use the registry's defaults.
OVERRIDES: dict[str, dict[str, Any]] = {"impala_cnn": {"channels": (4, 8, 16), "output_dim": 64}}

# measurement -> (batch, quick batch, kind)
MEASUREMENTS: dict[str, tuple[int, int, str]] = {
    "forward_single": (1, 1, "forward"),
    "forward_batch": (64, 8, "forward"),
    "train_step": (96, 8, "train"),
}
MODES: dict[str, bool] = {"graph": False, "xla": True}  # mode -> jit_compile

MATMUL_SIZE = 1024
MATMUL_MIN_RUNS = 10  # timed matmuls at the start; each later block has max(3, repeats)


class MatmulClock:
    """Times a ``MATMUL_SIZE``-cube float32 matmul (tf.function, no XLA) in interleaved blocks."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        shape = (MATMUL_SIZE, MATMUL_SIZE)
        self.a = tf.constant(rng.standard_normal(shape, dtype=np.float32))
        self.b = tf.constant(rng.standard_normal(shape, dtype=np.float32))
        self.matmul = tf.function(lambda a: tf.matmul(a, self.b))
        self.blocks: list[dict[str, Any]] = []

    def time_block(self, label: str, runs: int) -> None:
        timing = time_calls(self.matmul, self.a, repeats=runs, warmup=1 if not self.blocks else 0)
        self.blocks.append({"before": label, "runs_ms": timing["runs_ms"], "median_ms": timing["median_ms"]})

    @property
    def runs_ms(self) -> list[float]:
        return [t for block in self.blocks for t in block["runs_ms"]]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.runs_ms)


def benchmark_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """All measurements of one model: ``{"params", "overrides", "timings": {measurement: {mode: ...}}}``."""
    tf_keras.utils.set_random_seed(0)
    size = args.image_size
    encoder = build_encoder(name, (size, size, 3), **OVERRIDES.get(name, {}))
    rng = np.random.default_rng(0)
    timings: dict[str, dict[str, Any]] = {measurement: {} for measurement in MEASUREMENTS}
    for mode, jit_compile in MODES.items():
        functions = {
            "forward": make_forward(encoder, jit_compile=jit_compile),
            "train": make_train_step(encoder, jit_compile=jit_compile),
        }
        for measurement, (batch, quick_batch, kind) in MEASUREMENTS.items():
            batch = quick_batch if args.quick else batch
            images = tf.constant(rng.integers(0, 256, size=(batch, size, size, 3), dtype=np.uint8))
            timing = time_calls(functions[kind], images, repeats=args.repeats, warmup=args.warmup)
            timing["batch"] = batch
            timings[measurement][mode] = timing
            print(
                f"  {name:<12} {mode:<5} {measurement:<14} batch {batch:>3}: "
                f"median {timing['median_ms']:9.2f} ms, first call {timing['first_call_s']:6.2f} s",
                flush=True,
            )
    return {"params": int(encoder.count_params()), "overrides": OVERRIDES.get(name, {}), "timings": timings}


def add_matmul_times(models: dict[str, dict[str, Any]], matmul_ms: float) -> None:
    for record in models.values():
        for by_mode in record["timings"].values():
            for timing in by_mode.values():
                timing["matmul_times"] = timing["median_ms"] / matmul_ms


def ratios(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Train step relative to ViT's (per mode), and XLA time over graph time (per measurement)."""
    result: dict[str, Any] = {"xla_over_graph": {}}
    for name, record in models.items():
        result["xla_over_graph"][name] = {
            measurement: by_mode["xla"]["median_ms"] / by_mode["graph"]["median_ms"]
            for measurement, by_mode in record["timings"].items()
        }
    if "vit" in models:
        vit = models["vit"]["timings"]["train_step"]
        result["train_step_over_vit"] = {
            name: {
                mode: record["timings"]["train_step"][mode]["median_ms"] / vit[mode]["median_ms"]
                for mode in MODES
            }
            for name, record in models.items()
        }
    return result


# -- printing --------------------------------------------------------------------
def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    rows = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |" for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _columns(models: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(measurement, mode, header) for every timing column."""
    first = next(iter(models.values()))["timings"]
    columns = []
    for measurement, by_mode in first.items():
        label = "train" if measurement == "train_step" else "fwd"
        for mode in MODES:
            columns.append((measurement, mode, f"{label} b{by_mode[mode]['batch']} {mode}"))
    return columns


def format_report(report: dict[str, Any]) -> str:
    models = report["models"]
    columns = _columns(models)
    header = ["model", "params", *(c[2] for c in columns)]
    ms_rows, mm_rows, first_rows = [], [], []
    for name, record in models.items():
        cells = [record["timings"][m][mode] for m, mode, _ in columns]
        start = [name, f"{record['params']:,}"]
        ms_rows.append(start + [f"{t['median_ms']:.2f}" for t in cells])
        mm_rows.append(start + [f"{t['matmul_times']:.3g}" for t in cells])
        first_rows.append(start + [f"{t['first_call_s']:.2f}" for t in cells])
    matmul = report["matmul"]
    out = [
        f"Median ms ({report['settings']['repeats']} timed calls each):",
        _table(header, ms_rows),
        "",
        f"In matmul-times (model median / median {MATMUL_SIZE}^3 float32 matmul = "
        f"{matmul['median_ms']:.2f} ms over {len(matmul['runs_ms'])} runs):",
        _table(header, mm_rows),
        "",
        "First call, s (tracing + compilation + one run; not in the medians):",
        _table(header, first_rows),
        "",
    ]
    r = report["ratios"]
    ratio_header = ["model"]
    if "train_step_over_vit" in r:
        ratio_header += ["train / ViT graph", "train / ViT xla"]
    ratio_header += [f"xla/graph {c[2].rsplit(' ', 1)[0]}" for c in columns if c[1] == "xla"]
    ratio_rows = []
    for name in models:
        row = [name]
        if "train_step_over_vit" in r:
            row += [f"{r['train_step_over_vit'][name][mode]:.2f}" for mode in MODES]
        row += [f"{r['xla_over_graph'][name][m]:.2f}" for m in r["xla_over_graph"][name]]
        ratio_rows.append(row)
    out += ["Ratios of medians (< 1: faster than the reference):", _table(ratio_header, ratio_rows)]
    return "\n".join(out)


# -- main -------------------------------------------------------------------------
_names = name_list(ENCODER_NAMES, "encoder")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        type=_names,
        default=list(DEFAULT_MODELS),
        help=f"comma-separated encoders (default: {','.join(DEFAULT_MODELS)})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed calls per measurement, median reported (default 7, quick 3)",
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed calls after the first call (default 1)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument(
        "--image-size", type=int, default=64, help="side of the square RGB images (default 64)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: batches 1/8/8 instead of 1/64/96 and 3 repeats unless --repeats is given",
    )
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    if args.repeats < 1 or args.warmup < 0 or args.image_size < 1:
        parser.error("--repeats and --image-size must be positive and --warmup non-negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    env = environment()
    print(
        f"TensorFlow {env['tensorflow']}, {env['cpus_available']} CPUs available, "
        f"load average {env['load_average_start'][0]:.2f}; "
        f"{args.image_size}x{args.image_size}x3 uint8 images."
    )
    clock = MatmulClock()
    clock.time_block("start", max(MATMUL_MIN_RUNS, args.repeats))
    models = {}
    for name in args.models:
        clock.time_block(name, max(3, args.repeats))
        models[name] = benchmark_model(name, args)
    clock.time_block("end", max(3, args.repeats))
    add_matmul_times(models, clock.median_ms)
    env["load_average_end"] = list(os.getloadavg())
    report = {
        "settings": {
            "models": args.models,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "quick": args.quick,
            "image_shape": [args.image_size, args.image_size, 3],
            "batches": {m: (q if args.quick else b) for m, (b, q, _) in MEASUREMENTS.items()},
            "modes": {mode: f"tf.function(jit_compile={jit})" for mode, jit in MODES.items()},
            "loss": "mean(features ** 2), tf_keras Adam(1e-4)",
        },
        "environment": env,
        "matmul": {
            "shape": [MATMUL_SIZE, MATMUL_SIZE, MATMUL_SIZE],
            "dtype": "float32",
            "runs_ms": clock.runs_ms,
            "median_ms": clock.median_ms,
            "blocks": clock.blocks,
        },
        "models": models,
        "ratios": ratios(models),
        "flops": None,  # not measured: see benchmarks/README.md
    }
    report["wall_time_s"] = time.perf_counter() - start
    print()
    print(format_report(report))
    print(
        f"\nTotal wall time {report['wall_time_s']:.0f} s; "
        f"load average at the end {env['load_average_end'][0]:.2f}."
    )
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
