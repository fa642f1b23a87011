"""Speed of the encoders on CPU, with and without XLA, in ms and in matmul-times.

For each model, in one process, at ``(64, 64, 3)`` uint8 images::

    forward, batch 1            tf.function(jit_compile=False) and (jit_compile=True)
    forward, batch 64           idem
    train step, batch 96        idem; forward + backward + tf_keras Adam on mean(features^2)

A model is named as in ``sit_keras.models.ENCODER_NAMES``, optionally with
the implementation of its GSA layers: ``sit:reference`` is the SiT with the
reference formulation (``GraphSymmetricAttention(implementation=...)``), so
that fast and reference paths are timed in the same run; ``sit:builtin`` is the
fast SiT traced with TensorFlow's builtin ops only (``sit_keras.native.builtin_only``),
so that the native kernels' gain is measured in the same run too, ``sit:dense``
the fast SiT whose kernels mix every graph densely (``sit_keras.native.dense_mixing``),
not in the quarter turn's orbits, and ``sit:no_xla_kernels`` the fast SiT whose
XLA steps keep TensorFlow's ops where native ones have XLA kernels
(``sit_keras.native.without_xla_kernels``). A training config
(a path ending in ``.gin``) names its actor's encoder: ``train_eval.encoder``
with its ``train_eval.encoder_kwargs``, e.g. the MiniGrid models at
``--image_size 14``. Train steps are given relative to the first ViT
(``vit`` or a config whose encoder is ``vit``).

Every function is called once first (tracing + compilation + one run,
recorded as ``first_call_s``) and ``--warmup`` more times untimed. Then the
timed calls run in ``--repeats`` rounds, and each round calls every function
of every model once, in turn, with one 1024x1024 @ 1024x1024 float32 matmul:
a change of machine load during the run then moves all models alike, and the
ratios of the medians stay comparable. Every time is also given divided by
the median matmul ("matmul-times"), a unit more comparable between machines
than milliseconds.

With ``--precisions`` the graph-mode train step is also timed under
Keras' mixed-precision policies (``mixed_bfloat16``, ``mixed_float16``:
float16 / bfloat16 compute, float32 variables), in the same rounds, and
reported as a ratio to the float32 step. The same 1024^3 matmul is then also
timed in each policy's compute dtype, once per round: the host's own
bfloat16 / float32 ratio for the primitive that dominates a ViT, which bounds
what a mixed policy can gain on it (on a host whose bfloat16 matmul is slower
than its float32 one, a step made mostly of matmuls cannot get faster).

For the SiT family the train step is also split into stages, each timed in
the same rounds as forward + backward on its real input (graph mode, train
batch): the stem and max-pool, local GSA, global GSA, and the rest (head,
loss, Adam and glue) as the step minus the stages.

Usage::

    python benchmarks/encoders.py [--models sit,sit:builtin,sit:reference,siet,vit,impala_cnn] [--repeats 7]
        [--precisions float32,mixed_bfloat16,mixed_float16]
        [--out benchmarks/results/encoders.json] [--quick] [--no_profile]
    python benchmarks/encoders.py --image_size 14 --models \
        configs/minigrid/lavacrossing_sit_small.gin,configs/minigrid/lavacrossing_vit.gin

See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

# isort: split

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras import native
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    name_list,
    parse_or_say_why,
    write_report,
)
from sit_keras.encoder_check import make_forward, make_train_step
from sit_keras.layers.graph_symmetric_attention import IMPLEMENTATIONS
from sit_keras.models import ENCODER_NAMES, build_encoder
from sit_keras.models.sit import VARIANTS, SiTEncoder

DEFAULT_MODELS = ("sit", "sit:builtin", "sit:reference", "siet", "siet:builtin", "vit", "impala_cnn")
# The fast SiT traced without the native kernels (sit_keras.native).
BUILTIN = "builtin"
# The fast SiT traced with the native kernels mixing every graph densely (native.dense_mixing).
DENSE = "dense"
# The fast SiT whose XLA steps keep TensorFlow's ops where the native ones have XLA kernels
# (native.without_xla_kernels); its graph steps are the fast SiT's.
NO_XLA_KERNELS = "no_xla_kernels"
# The report's train-step ratios of a model over the same model with a suffix.
OVER_SUFFIXES = {
    "train_step_native_over_builtin": BUILTIN,
    "train_step_spectral_over_dense": DENSE,
    "train_step_xla_kernels_over_without": NO_XLA_KERNELS,
}
OVER_TITLES = {
    "train_step_native_over_builtin": "Train step, with the native kernels over without (builtin ops only):",
    "train_step_spectral_over_dense": "Train step, graphs mixed in the quarter turn's orbits over densely:",
    "train_step_xla_kernels_over_without": "Train step, with the native ops' XLA kernels over without:",
}
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
STAGES = ("stem_pool", "local_gsa", "global_gsa")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
COMPUTE_DTYPES = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}

MATMUL_SIZE = 1024
MATMUL_MIN_RUNS = 10  # timed matmuls at the start; then one per round and 3 at the end


class Timed:
    """A function and its input; the first call and every timed call, in ms."""

    def __init__(self, fn: Callable[[tf.Tensor], Any], x: tf.Tensor, warmup: int):
        self.fn, self.x = fn, x
        start = time.perf_counter()
        self._run()
        self.first_call_s = time.perf_counter() - start
        for _ in range(warmup):
            self._run()
        self.runs_ms: list[float] = []

    def _run(self) -> None:
        for t in tf.nest.flatten(self.fn(self.x)):
            t.numpy()  # waits for the result

    def time_once(self) -> None:
        start = time.perf_counter()
        self._run()
        self.runs_ms.append((time.perf_counter() - start) * 1000.0)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.runs_ms)

    def record(self) -> dict[str, Any]:
        return {
            "first_call_s": self.first_call_s,
            "runs_ms": self.runs_ms,
            "median_ms": self.median_ms,
            "min_ms": min(self.runs_ms),
        }


class MatmulClock:
    """A ``MATMUL_SIZE``-cube matmul (tf.function, no XLA; float32 unless ``dtype``), timed in blocks."""

    def __init__(self, seed: int = 0, dtype: tf.DType = tf.float32):
        rng = np.random.default_rng(seed)
        shape = (MATMUL_SIZE, MATMUL_SIZE)
        self.a = tf.cast(rng.standard_normal(shape, dtype=np.float32), dtype)
        self.b = tf.cast(rng.standard_normal(shape, dtype=np.float32), dtype)
        self.timed = Timed(tf.function(lambda a: tf.matmul(a, self.b)), self.a, warmup=1)
        self.blocks: list[dict[str, Any]] = []

    def time_block(self, label: str, runs: int) -> None:
        before = len(self.timed.runs_ms)
        for _ in range(runs):
            self.timed.time_once()
        block = self.timed.runs_ms[before:]
        self.blocks.append({"before": label, "runs_ms": block, "median_ms": statistics.median(block)})

    @property
    def runs_ms(self) -> list[float]:
        return self.timed.runs_ms

    @property
    def median_ms(self) -> float:
        return self.timed.median_ms


def config_encoder(path: str) -> tuple[str, dict[str, Any]]:
    """A training config's actor encoder: ``train_eval.encoder`` and its ``train_eval.encoder_kwargs``."""
    import gin  # only configs need gin and the trainer's parser

    from sit_keras.agents import train

    if not os.path.isfile(path):
        raise ValueError(f"{path} is not a file")
    gin.clear_config()
    try:
        train.parse_gin([path], [])
        try:
            name = gin.query_parameter("train_eval.encoder")
        except ValueError:
            raise ValueError(f"{path} does not set train_eval.encoder") from None
        try:
            kwargs = dict(gin.query_parameter("train_eval.encoder_kwargs") or {})
        except ValueError:
            kwargs = {}
    finally:
        gin.clear_config()
    return name, kwargs


def parse_model(text: str) -> tuple[str, dict[str, Any]]:
    """``"sit:reference"`` -> ``("sit", {"implementation": "reference"})``; a ``.gin`` path -> its encoder.

    Raises a ``ValueError`` that names the valid choices.
    """
    if text.endswith(".gin"):
        return config_encoder(text)
    name, _, implementation = text.partition(":")
    if name not in ENCODER_NAMES:
        raise ValueError(f"unknown encoder {name!r}; expected one of: {', '.join(ENCODER_NAMES)}")
    overrides = dict(OVERRIDES.get(name, {}))
    if implementation:
        native_forms = (BUILTIN, DENSE, NO_XLA_KERNELS)
        if implementation not in (*IMPLEMENTATIONS, *native_forms) or name not in VARIANTS:
            raise ValueError(
                f"{text!r}: an implementation ({', '.join((*IMPLEMENTATIONS, *native_forms))}) follows only "
                f"a SiT-family name ({', '.join(VARIANTS)})"
            )
        overrides["implementation"] = "fast" if implementation in native_forms else implementation
    return name, overrides


def _model_list(text: str) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip()]
    try:
        for model in models:
            parse_model(model)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not models:
        raise argparse.ArgumentTypeError("no model given")
    return models


def _stage_functions(encoder: SiTEncoder, images: tf.Tensor) -> dict[str, tuple[Callable, tf.Tensor]]:
    """Forward + backward of each stage of a SiT encoder on its real input, as graph-mode functions."""

    def stem_pool(x: tf.Tensor) -> tf.Tensor:
        if encoder.stem is not None:
            x = encoder.stem(x)
        return encoder.pool(x)

    def local(x: tf.Tensor) -> tf.Tensor:
        if encoder.local_gsa is None:  # local_layers=0: each pooled pixel is embedded as a token
            return encoder.pixel_embedding(x)
        return encoder.local_gsa(x, training=True)

    def global_(x: tf.Tensor) -> Any:
        return encoder.global_gsa(x, training=True)

    pixels = encoder.preprocess(images)
    stem_out = stem_pool(pixels)
    local_out = local(stem_out)
    pieces = {
        "stem_pool": (stem_pool, pixels),
        "local_gsa": (local, stem_out),
        "global_gsa": (global_, local_out),
    }
    local_layer = encoder.pixel_embedding if encoder.local_gsa is None else encoder.local_gsa
    layers = {"stem_pool": encoder.stem, "local_gsa": local_layer, "global_gsa": encoder.global_gsa}
    stages = {}
    for stage, (fn, x) in pieces.items():
        variables = layers[stage].trainable_variables if layers[stage] is not None else []

        def forward_backward(x: tf.Tensor, fn=fn, variables=variables) -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = sum(tf.reduce_sum(tf.square(o)) for o in tf.nest.flatten(fn(x)) if o is not None)
            gradients = tape.gradient(loss, [x, *variables])
            return [tf.convert_to_tensor(g) for g in gradients if g is not None]

        stages[stage] = (tf.function(forward_backward), x)
    return stages


def _precision_steps(name: str, overrides: dict[str, Any], images: tf.Tensor, args) -> dict[str, Timed]:
    """The graph-mode train step of the model built under each mixed-precision policy of ``--precisions``."""
    steps = {}
    for precision in args.precisions:
        if precision == "float32":
            continue
        tf_keras.mixed_precision.set_global_policy(precision)
        try:
            tf_keras.utils.set_random_seed(0)
            encoder = build_encoder(name, images.shape[1:], **overrides)
            steps[precision] = Timed(make_train_step(encoder, jit_compile=False), images, args.warmup)
        finally:
            tf_keras.mixed_precision.set_global_policy(
                None
            )  # back to the floatx default; "float32" would pin it
    return steps


def build_model(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    """The encoder of ``spec`` and every timed function of it, called (traced) once and warmed up."""
    if spec.endswith(f":{BUILTIN}"):
        context = native.builtin_only()
    elif spec.endswith(f":{DENSE}"):
        context = native.dense_mixing()
    elif spec.endswith(f":{NO_XLA_KERNELS}"):
        context = native.without_xla_kernels()
    else:
        context = contextlib.nullcontext()
    with context:
        return _build_model(spec, args)


def _build_model(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    name, overrides = parse_model(spec)
    tf_keras.utils.set_random_seed(0)
    size = args.image_size
    encoder = build_encoder(name, (size, size, 3), **overrides)
    rng = np.random.default_rng(0)
    timed: dict[tuple[str, str], Timed] = {}
    for mode, jit_compile in MODES.items():
        functions = {
            "forward": make_forward(encoder, jit_compile=jit_compile),
            "train": make_train_step(encoder, jit_compile=jit_compile),
        }
        for measurement, (batch, quick_batch, kind) in MEASUREMENTS.items():
            batch = quick_batch if args.quick else batch
            images = tf.constant(rng.integers(0, 256, size=(batch, size, size, 3), dtype=np.uint8))
            timed[measurement, mode] = Timed(functions[kind], images, args.warmup)
            print(
                f"  {spec:<16} {mode:<5} {measurement:<14} batch {batch:>3}: "
                f"first call {timed[measurement, mode].first_call_s:6.2f} s",
                flush=True,
            )
    stages: dict[str, Timed] = {}
    if args.profile and isinstance(encoder, SiTEncoder):
        images = timed["train_step", "graph"].x
        for stage, (fn, x) in _stage_functions(encoder, images).items():
            stages[stage] = Timed(fn, x, args.warmup)
    precisions = _precision_steps(name, overrides, timed["train_step", "graph"].x, args)
    return {
        "spec": spec,
        "encoder": encoder,
        "overrides": overrides,
        "timed": timed,
        "stages": stages,
        "precisions": precisions,
    }


def run_rounds(
    models: list[dict[str, Any]], clock: MatmulClock, repeats: int, dtype_clocks: dict[str, MatmulClock]
) -> None:
    """``repeats`` rounds; each times one matmul (and one per extra dtype) and one call of every function."""
    for round_ in range(repeats):
        clock.time_block(f"round {round_}", 1)
        for dtype_clock in dtype_clocks.values():
            dtype_clock.time_block(f"round {round_}", 1)
        for model in models:
            for timed in [*model["timed"].values(), *model["stages"].values(), *model["precisions"].values()]:
                timed.time_once()
        print(f"  round {round_ + 1}/{repeats} done", flush=True)


def model_record(model: dict[str, Any], matmul_ms: float) -> dict[str, Any]:
    """The JSON record of one model: parameters, timings per measurement and mode, and its stage profile."""
    timings: dict[str, dict[str, Any]] = {measurement: {} for measurement in MEASUREMENTS}
    for (measurement, mode), timed in model["timed"].items():
        record = timed.record()
        record["batch"] = int(timed.x.shape[0])
        record["matmul_times"] = timed.median_ms / matmul_ms
        timings[measurement][mode] = record
    result = {
        "encoder": parse_model(model["spec"])[0],
        "params": int(model["encoder"].count_params()),
        "overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in model["overrides"].items()},
        "timings": timings,
    }
    if model["precisions"]:
        float32_ms = model["timed"]["train_step", "graph"].median_ms
        result["precision"] = {
            precision: {**timed.record(), "over_float32": timed.median_ms / float32_ms}
            for precision, timed in model["precisions"].items()
        }
    if model["stages"]:
        step_ms = model["timed"]["train_step", "graph"].median_ms
        profile = {}
        for stage, timed in model["stages"].items():
            profile[stage] = {**timed.record(), "matmul_times": timed.median_ms / matmul_ms}
        rest_ms = step_ms - sum(p["median_ms"] for p in profile.values())
        profile["rest"] = {"median_ms": rest_ms, "matmul_times": rest_ms / matmul_ms}
        for entry in profile.values():
            entry["share_of_step"] = entry["median_ms"] / step_ms
        result["stage_profile"] = profile
    return result


def ratios(models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Train step relative to ViT's (per mode), XLA time over graph time, fast over reference."""
    result: dict[str, Any] = {"xla_over_graph": {}}
    for name, record in models.items():
        result["xla_over_graph"][name] = {
            measurement: by_mode["xla"]["median_ms"] / by_mode["graph"]["median_ms"]
            for measurement, by_mode in record["timings"].items()
        }
    baseline = next((name for name, record in models.items() if record["encoder"] == "vit"), None)
    if baseline is not None:
        vit = models[baseline]["timings"]["train_step"]
        result["train_step_over_vit"] = {
            name: {
                mode: record["timings"]["train_step"][mode]["median_ms"] / vit[mode]["median_ms"]
                for mode in MODES
            }
            for name, record in models.items()
        }
    fast_over_reference = {}
    for name, record in models.items():
        reference = models.get(f"{name.partition(':')[0]}:reference")
        if reference is not None and ":" not in name:
            fast_over_reference[name] = {
                mode: record["timings"]["train_step"][mode]["median_ms"]
                / reference["timings"]["train_step"][mode]["median_ms"]
                for mode in MODES
            }
    if fast_over_reference:
        result["train_step_fast_over_reference"] = fast_over_reference
    for key, suffix in OVER_SUFFIXES.items():
        over = _train_step_over(models, suffix)
        if over:
            result[key] = over
    return result


def _train_step_over(models: dict[str, dict[str, Any]], suffix: str) -> dict[str, dict[str, float]]:
    """Per model ``name`` timed with ``name:suffix`` too, per mode: its train step over that one's."""
    return {
        name: {
            mode: record["timings"]["train_step"][mode]["median_ms"]
            / models[f"{name}:{suffix}"]["timings"]["train_step"][mode]["median_ms"]
            for mode in MODES
        }
        for name, record in models.items()
        if f"{name}:{suffix}" in models
    }


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
    if "train_step_fast_over_reference" in r:
        rows = [
            [name, *(f"{by_mode[mode]:.2f}" for mode in MODES)]
            for name, by_mode in r["train_step_fast_over_reference"].items()
        ]
        out += ["", "Train step, fast GSA over reference GSA:", _table(["model", *MODES], rows)]
    for key, title in OVER_TITLES.items():
        if key in r:
            rows = [(name, *(f"{by_mode[mode]:.2f}" for mode in MODES)) for name, by_mode in r[key].items()]
            out += ["", title, _table(["model", *MODES], rows)]
    precisions = [p for p in report["settings"]["precisions"] if p != "float32"]
    if precisions:
        rows = []
        for name, record in models.items():
            by_precision = record.get("precision", {})
            rows.append([name, *(f"{by_precision[p]['over_float32']:.2f}" for p in precisions)])
        by_dtype = report["matmul"]["by_precision"]
        rows.append(
            [f"({MATMUL_SIZE}^3 matmul)", *(f"{by_dtype[p]['over_float32']:.2f}" for p in precisions)]
        )
        out += [
            "",
            "Train step (graph) under mixed precision, over float32:",
            _table(["model", *precisions], rows),
        ]
    profiled = {name: record["stage_profile"] for name, record in models.items() if "stage_profile" in record}
    if profiled:
        header = ["stage (train step, graph)"]
        for name in profiled:
            header += [f"{name} matmul-times", f"{name} share"]
        rows = []
        for stage in [*STAGES, "rest"]:
            row = [stage]
            for profile in profiled.values():
                entry = profile.get(stage)
                row += (
                    [f"{entry['matmul_times']:.2f}", f"{entry['share_of_step']:.0%}"] if entry else ["-", "-"]
                )
            rows.append(row)
        out += [
            "",
            "Where the train step goes (forward + backward of each stage on its own input; "
            "rest = head, loss, Adam and glue):",
            _table(header, rows),
        ]
    return "\n".join(out)


# -- main -------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        type=_model_list,
        default=list(DEFAULT_MODELS),
        help=f"comma-separated encoders, a SiT-family name optionally with :fast or :reference, or "
        f"training configs (.gin) (default: {','.join(DEFAULT_MODELS)})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed rounds, medians reported (default 7, quick 3)",
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed calls after the first call (default 1)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument(
        "--image_size",
        "--image-size",
        type=int,
        default=64,
        help="side of the square RGB images (default 64)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: batches 1/8/8 instead of 1/64/96 and 3 repeats unless --repeats is given",
    )
    parser.add_argument(
        "--precisions",
        type=name_list(PRECISIONS, "precision"),
        default=list(PRECISIONS),
        help=f"Keras dtype policies of the extra train-step timings (default: {','.join(PRECISIONS)})",
    )
    parser.add_argument(
        "--no_profile",
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip the per-stage profile of the SiT family's train step",
    )
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    for flag in ("repeats", "image_size"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be at least 0; received {args.warmup}.")
    for spec in args.models:
        check_image_size(spec, args.image_size)
    check_out_file(args.out)
    return args


def check_image_size(spec: str, image_size: int) -> None:
    """Builds ``spec``'s encoder at ``image_size``: a size it cannot take is said before anything is timed.

    Raises:
      UsageError: with the model's own sentence on the sizes it takes.
    """
    name, overrides = parse_model(spec)
    try:
        build_encoder(name, (image_size, image_size, 3), **overrides)
    except ValueError as error:
        raise UsageError(f"--models {spec} at --image_size {image_size}: {error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    commit = current_commit()  # when the run starts: the code it measures
    start = time.perf_counter()
    env = environment()
    print(
        f"TensorFlow {env['tensorflow']}, {env['cpus_available']} CPUs available, "
        f"load average {env['load_average_start'][0]:.2f}; "
        f"{args.image_size}x{args.image_size}x3 uint8 images."
    )
    clock = MatmulClock()
    clock.time_block("start", MATMUL_MIN_RUNS)
    dtype_clocks = {p: MatmulClock(dtype=COMPUTE_DTYPES[p]) for p in args.precisions if p != "float32"}
    built = [build_model(spec, args) for spec in args.models]
    run_rounds(built, clock, args.repeats, dtype_clocks)
    clock.time_block("end", 3)
    models = {model["spec"]: model_record(model, clock.median_ms) for model in built}
    env["load_average_end"] = list(os.getloadavg())
    report = {
        "command": command_line("encoders.py", argv),
        "commit": commit,
        "settings": {
            "models": args.models,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "quick": args.quick,
            "profile": args.profile,
            "precisions": args.precisions,
            "image_shape": [args.image_size, args.image_size, 3],
            "batches": {m: (q if args.quick else b) for m, (b, q, _) in MEASUREMENTS.items()},
            "modes": {mode: f"tf.function(jit_compile={jit})" for mode, jit in MODES.items()},
            "loss": "mean(features ** 2), tf_keras Adam(1e-4)",
            "timing": "interleaved rounds: each round calls every function of every model once",
        },
        "environment": env,
        # Whether the native kernels ran (a model's train step without them is "name:builtin").
        "native_kernels": native.load_problem() or "loaded",
        "matmul": {
            "shape": [MATMUL_SIZE, MATMUL_SIZE, MATMUL_SIZE],
            "dtype": "float32",
            "runs_ms": clock.runs_ms,
            "median_ms": clock.median_ms,
            "blocks": clock.blocks,
            "by_precision": {
                precision: {
                    "dtype": COMPUTE_DTYPES[precision].name,
                    "runs_ms": dtype_clock.runs_ms,
                    "median_ms": dtype_clock.median_ms,
                    "over_float32": dtype_clock.median_ms / clock.median_ms,
                }
                for precision, dtype_clock in dtype_clocks.items()
            },
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
