"""Rotated digits: group transformers (z2, p4, p4m) and SiT vs ViT, accuracy and train time; GSA layer speed.

Part 1, accuracy. On scikit-learn's 8x8 digits (``sit_keras.supervised.datasets``),
in two settings::

    upright -> rotated   train on ``digits`` (upright), test on ``rotated_digits``
    rotated -> rotated   train and test on ``rotated_digits`` (one random angle per image)

every model (``--models``; classifiers of ``sit_keras.supervised.build_classifier``
in their ``"digits"`` preset) is trained for ``--epochs`` epochs from fresh
seeded weights, once per seed (``--seeds``), with what ``sit-train-supervised``
uses: tf_keras ``fit``, Adam, sparse categorical cross-entropy on the logits,
batches of ``--batch_size`` reshuffled every epoch. Reported per model and
setting: test accuracy (mean +- std over seeds) on the rotated test digits
and on the upright ones, and the train time of one run.

Each model is compiled once and reused for every setting and seed (weights
re-drawn from the seed, optimizer state zeroed), so tracing and XLA
compilation are paid once; they fall in the model's very first epoch, which
is reported on its own (``first_epoch_s``) and replaced by the median epoch
in that run's train time. The group transformers are compiled with XLA (a
train step at batch 64 took 1.5x (p4) and 4x (p4m) longer in TensorFlow's
graph executor on this 2-core CPU), SiT and ViT without (XLA is slower for
them, see benchmarks/README.md).

Part 2, layer speed. One ``LiftingSelfAttention`` and one ``GroupSelfAttention``
(the ``"digits"`` preset's sizes: 12 channels, 2 heads of 6, 3x3
neighbourhood) on 8x8 maps with 12 channels, forward + backward of
``mean(y ** 2)``, timed against ``tf_keras.layers.MultiHeadAttention`` of the
same width (2 heads of 6, output 12) on the same token counts: ``H * W`` for
the lifting layer, ``H * W * |H|`` for the group layer. Medians of
``--repeats`` timed calls after the first call, in ms, in matmul-times (as in
benchmarks/encoders.py) and as ratios GSA / MHA, in graph and XLA mode.

Usage::

    python benchmarks/supervised.py [--models group_transformer:z2,group_transformer:p4,...]
        [--seeds 0,1,2] [--epochs 5] [--batch_size 32] [--learning_rate 3e-3]
        [--layer-groups p4,p4m] [--repeats 5] [--out benchmarks/results/supervised.json] [--quick]
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    current_commit,
    environment,
    name_list,
    parse_or_say_why,
    write_report,
)
from sit_keras.encoder_check import time_calls
from sit_keras.groups import GROUP_NAMES, get_group
from sit_keras.layers.group_self_attention import GroupSelfAttention, LiftingSelfAttention
from sit_keras.supervised.classifiers import GROUP_TRANSFORMER_PREFIX, MODEL_NAMES, build_classifier
from sit_keras.supervised.datasets import load_dataset

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "supervised.json"
DEFAULT_MODELS = tuple(f"{GROUP_TRANSFORMER_PREFIX}{g}" for g in ("z2", "p4", "p4m")) + ("sit", "vit")
QUICK_MODELS = ("cnn", "sit")

# setting -> (training dataset, test datasets by label)
SETTINGS: dict[str, tuple[str, dict[str, str]]] = {
    "upright_to_rotated": ("digits", {"rotated": "rotated_digits", "upright": "digits"}),
    "rotated": ("rotated_digits", {"rotated": "rotated_digits", "upright": "digits"}),
}
IMAGE_SHAPE, NUM_CLASSES = (8, 8, 1), 10  # scikit-learn's digits
SETTING_LABELS = {"upright_to_rotated": "upright -> rotated", "rotated": "rotated -> rotated"}

# The "digits" preset of sit_keras.models.group_transformer: lifting and
# group self-attention with 12 channels, 2 heads of 6, a 3x3 neighbourhood.
LAYER_SIZES = {"side": 8, "channels": 12, "num_heads": 2, "key_dim": 6, "neighbourhood": 3}
MODES: dict[str, bool] = {"graph": False, "xla": True}  # mode -> jit_compile


def _load_sibling(name: str) -> ModuleType:
    # benchmarks/ is not a package: share benchmarks/encoders.py's reference
    # matmul clock, environment record and table printer by loading it by path.
    spec = importlib.util.spec_from_file_location(f"_benchmark_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_encoders = _load_sibling("encoders")
MatmulClock = _encoders.MatmulClock
_table = _encoders._table


def uses_xla(model: str) -> bool:
    """XLA for the group transformers only (see the module docstring)."""
    return model.startswith(GROUP_TRANSFORMER_PREFIX)


# -- part 1: accuracy ------------------------------------------------------------------
def _arrays(name: str, split: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    images, labels = (t.numpy() for t in next(iter(load_dataset(name, split).batch(100_000))))
    return (images[:limit], labels[:limit]) if limit else (images, labels)


class _EpochClock(tf_keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.epoch_s: list[float] = []

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch_s.append(time.perf_counter() - self._start)


def _reset(classifier: tf_keras.Model, name: str, seed: int) -> None:
    """Fresh seeded weights (those of a newly built classifier) and a zeroed optimizer."""
    tf_keras.utils.set_random_seed(seed)
    fresh = build_classifier(name, IMAGE_SHAPE, NUM_CLASSES, preset="digits")
    classifier.set_weights(fresh.get_weights())
    for variable in classifier.optimizer.variables:
        variable.assign(tf.zeros_like(variable))


def benchmark_model(name: str, data: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Trains ``name`` in every setting and seed; returns its runs and summaries."""
    tf_keras.utils.set_random_seed(0)
    classifier = build_classifier(name, IMAGE_SHAPE, NUM_CLASSES, preset="digits")
    classifier.compile(
        optimizer=tf_keras.optimizers.Adam(args.learning_rate),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=uses_xla(name),
    )
    runs: dict[str, list[dict[str, Any]]] = {setting: [] for setting in SETTINGS}
    first_epoch_s = None
    for setting, (train_name, tests) in SETTINGS.items():
        for seed in args.seeds:
            _reset(classifier, name, seed)
            images, labels = data[train_name]
            train = (
                tf.data.Dataset.from_tensor_slices((images, labels))
                .shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
                .batch(args.batch_size)
            )
            clock = _EpochClock()
            classifier.fit(train, epochs=args.epochs, callbacks=[clock], verbose=0)
            epochs = list(clock.epoch_s)
            if first_epoch_s is None:
                # Tracing and compilation: reported apart, replaced by the median epoch.
                first_epoch_s = epochs[0]
                epochs[0] = statistics.median(epochs[1:]) if len(epochs) > 1 else epochs[0]
            accuracy = {}
            for label, test_name in tests.items():
                test_images, test_labels = data[f"{test_name}/test"]
                _, accuracy[label] = classifier.evaluate(test_images, test_labels, batch_size=256, verbose=0)
            runs[setting].append(
                {"seed": seed, "train_s": sum(epochs), "epoch_s": clock.epoch_s, "accuracy": accuracy}
            )
            print(
                f"  {name:<22} {SETTING_LABELS[setting]:<19} seed {seed}: rotated test "
                f"{accuracy['rotated']:.3f}, upright test {accuracy['upright']:.3f}, "
                f"train {sum(epochs):6.1f} s",
                flush=True,
            )
    return {
        "params": int(classifier.count_params()),
        "xla": uses_xla(name),
        "first_epoch_s": first_epoch_s,
        "runs": runs,
        "summary": {setting: summarize(setting_runs) for setting, setting_runs in runs.items()},
    }


def _mean_std(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": float(np.mean(values)),
        "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
        "n": len(values),
    }


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sample std over seeds of each test accuracy and of the train time."""
    labels = runs[0]["accuracy"]
    summary = {f"{label}_accuracy": _mean_std([r["accuracy"][label] for r in runs]) for label in labels}
    summary["train_s"] = _mean_std([r["train_s"] for r in runs])
    return summary


# -- part 2: layer speed ----------------------------------------------------------------
def _forward_backward(layer: tf_keras.layers.Layer, call: Callable[[tf.Tensor], tf.Tensor], jit: bool):
    """``x -> mean(call(x) ** 2)`` with gradients to ``x`` and the weights, as a ``tf.function``."""

    @tf.function(jit_compile=jit)
    def step(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_mean(tf.square(call(x)))
        gradients = tape.gradient(loss, [x, *layer.trainable_variables])
        # Summing every gradient keeps the backward pass from being pruned. A weight the loss does
        # not reach has no gradient (None): nothing to compute, so nothing to keep.
        return loss + tf.add_n([tf.reduce_sum(g) for g in gradients if g is not None]) * 0.0

    return step


def benchmark_layers(group_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Lifting + group self-attention vs MultiHeadAttention on the same token counts."""
    group = get_group(group_name)
    side, channels = LAYER_SIZES["side"], LAYER_SIZES["channels"]
    heads, key_dim = LAYER_SIZES["num_heads"], LAYER_SIZES["key_dim"]
    rng = np.random.default_rng(0)
    batch = args.layer_batch
    pixels, signal_tokens = side * side, side * side * group.order
    inputs = {
        "lifting": tf.constant(rng.normal(size=(batch, side, side, channels)), tf.float32),
        "group": tf.constant(rng.normal(size=(batch, side, side, group.order, channels)), tf.float32),
        "mha_lifting": tf.constant(rng.normal(size=(batch, pixels, channels)), tf.float32),
        "mha_group": tf.constant(rng.normal(size=(batch, signal_tokens, channels)), tf.float32),
    }
    gsa_args = {"num_heads": heads, "key_dim": key_dim, "neighbourhood": LAYER_SIZES["neighbourhood"]}
    layers = {
        "lifting": LiftingSelfAttention(group, channels, **gsa_args),
        "group": GroupSelfAttention(group, channels, **gsa_args),
        "mha_lifting": tf_keras.layers.MultiHeadAttention(heads, key_dim, output_shape=channels),
        "mha_group": tf_keras.layers.MultiHeadAttention(heads, key_dim, output_shape=channels),
    }
    calls = {
        "lifting": layers["lifting"],
        "group": layers["group"],
        "mha_lifting": lambda x: layers["mha_lifting"](x, x),
        "mha_group": lambda x: layers["mha_group"](x, x),
    }
    timings: dict[str, dict[str, Any]] = {key: {} for key in layers}
    for key in layers:
        calls[key](inputs[key][:1])  # builds the weights outside any tf.function
        for mode in args.modes:
            timing = time_calls(
                _forward_backward(layers[key], calls[key], MODES[mode]),
                inputs[key],
                args.repeats,
                args.warmup,
            )
            timings[key][mode] = timing
            print(
                f"  {group_name:<4} {key:<12} {mode:<5}: median {timing['median_ms']:8.2f} ms, "
                f"first call {timing['first_call_s']:5.2f} s",
                flush=True,
            )
    ratios = {}
    for mode in args.modes:
        ms = {key: timings[key][mode]["median_ms"] for key in layers}
        ratios[mode] = {
            "lifting_over_mha": ms["lifting"] / ms["mha_lifting"],
            "group_over_mha": ms["group"] / ms["mha_group"],
            "pair_over_mha_pair": (ms["lifting"] + ms["group"]) / (ms["mha_lifting"] + ms["mha_group"]),
        }
    return {
        "tokens": {"lifting": pixels, "group": signal_tokens},
        "params": {key: int(layer.count_params()) for key, layer in layers.items()},
        "timings": timings,
        "ratios": ratios,
    }


# -- printing ------------------------------------------------------------------------
def _fmt(stat: dict[str, float], digits: int = 3) -> str:
    return f"{stat['mean']:.{digits}f} +- {stat['std']:.{digits}f}"


def readme_table(report: dict[str, Any]) -> str:
    """The README's accuracy table, computed from the report's per-seed runs.

    Rotated-test accuracy, mean +- sample std over seeds, after training upright and after
    training rotated; the train time of one run, mean over every run of the model.
    """
    lines = [
        "| model | weights | upright -> rotated | rotated -> rotated | train s / run |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, record in report["models"].items():
        cells = []
        for setting in ("upright_to_rotated", "rotated"):
            stat = _mean_std([run["accuracy"]["rotated"] for run in record["runs"][setting]])
            cells.append(f"{stat['mean']:.2f} ± {stat['std']:.2f}")
        train_s = _mean_std([run["train_s"] for runs in record["runs"].values() for run in runs])["mean"]
        lines.append(f"| `{name}` | {record['params']:,} | {cells[0]} | {cells[1]} | {train_s:.1f} |")
    return "\n".join(lines)


def format_report(report: dict[str, Any]) -> str:
    settings = report["settings"]
    header = [
        "model",
        "params",
        "XLA",
        "upright -> rotated",
        "rotated -> rotated",
        "upright test (trained upright)",
        "train s / run",
        "first epoch s",
    ]
    rows = []
    for name, record in report["models"].items():
        a, b = record["summary"]["upright_to_rotated"], record["summary"]["rotated"]
        train_s = [r["train_s"] for runs in record["runs"].values() for r in runs]
        rows.append(
            [
                name,
                f"{record['params']:,}",
                "yes" if record["xla"] else "no",
                _fmt(a["rotated_accuracy"]),
                _fmt(b["rotated_accuracy"]),
                _fmt(a["upright_accuracy"]),
                _fmt(_mean_std(train_s), 1),
                f"{record['first_epoch_s']:.1f}",
            ]
        )
    out = [
        f"Test accuracy on rotated digits (mean +- std over seeds {settings['seeds']}; "
        f"{settings['epochs']} epochs, batch {settings['batch_size']}, Adam {settings['learning_rate']:g}, "
        f"{settings['train_examples']} training digits):",
        _table(header, rows),
        "",
    ]
    if report["layers"]:
        header = ["group", "mode", "lifting ms", "MHA ms (tokens)", "group SA ms", "MHA ms (tokens)"]
        header += ["lifting / MHA", "group / MHA", "pair / MHA pair"]
        rows = []
        for group, record in report["layers"].items():
            for mode in settings["modes"]:
                t = {key: record["timings"][key][mode]["median_ms"] for key in record["timings"]}
                r = record["ratios"][mode]
                rows.append(
                    [
                        group,
                        mode,
                        f"{t['lifting']:.2f}",
                        f"{t['mha_lifting']:.2f} ({record['tokens']['lifting']})",
                        f"{t['group']:.2f}",
                        f"{t['mha_group']:.2f} ({record['tokens']['group']})",
                        f"{r['lifting_over_mha']:.2f}",
                        f"{r['group_over_mha']:.2f}",
                        f"{r['pair_over_mha_pair']:.2f}",
                    ]
                )
        out += [
            f"Forward + backward, batch {settings['layer_batch']}, median of {settings['repeats']} "
            f"(matmul median {report['matmul']['median_ms']:.2f} ms):",
            _table(header, rows),
        ]
    return "\n".join(out)


# -- main ---------------------------------------------------------------------------------
_models = name_list(MODEL_NAMES, "model")


def _groups(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in GROUP_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown group(s) {', '.join(unknown)}; expected: {GROUP_NAMES}")
    return names


def _modes(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in MODES for n in names):
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(MODES)}, got {text!r}")
    return names


def _ints(text: str) -> list[int]:
    try:
        return [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=_models, default=None, help="comma-separated classifier names")
    parser.add_argument("--seeds", type=_ints, default=None, help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default 5, quick 1)")
    parser.add_argument("--batch_size", "--batch-size", type=int, default=32)
    parser.add_argument("--learning_rate", "--learning-rate", type=float, default=3e-3)
    parser.add_argument(
        "--train-examples", type=int, default=None, help="first N training digits, 0 for all (quick 128)"
    )
    parser.add_argument(
        "--layer-groups", type=_groups, default=None, help="groups of the layer timing (default p4,p4m)"
    )
    parser.add_argument(
        "--layer_batch", "--layer-batch", type=int, default=None, help="layer timing batch (default 32)"
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed layer calls (default 5, quick 1)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed layer calls after the first")
    parser.add_argument(
        "--modes", type=_modes, default=None, help="layer timing modes: graph,xla (default; quick graph)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: cnn and sit, 1 seed, 1 epoch, 128 digits; p4 layers, batch 2, graph mode, 1 repeat",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "models": list(QUICK_MODELS if quick else DEFAULT_MODELS),
        "seeds": [0] if quick else [0, 1, 2],
        "epochs": 1 if quick else 5,
        "train_examples": 128 if quick else 0,
        "layer_groups": ["p4"] if quick else ["p4", "p4m"],
        "layer_batch": 2 if quick else 32,
        "repeats": 1 if quick else 5,
        "modes": ["graph"] if quick else list(MODES),
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not args.seeds or min(args.seeds) < 0 or len(set(args.seeds)) != len(args.seeds):
        raise UsageError(f"--seeds must be distinct non-negative integers; received {args.seeds}.")
    for flag in ("epochs", "batch_size", "layer_batch", "repeats"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    for flag, value in (("train-examples", args.train_examples), ("warmup", args.warmup)):
        if value < 0:
            raise UsageError(f"--{flag} must be at least 0; received {value}.")
    if not (args.learning_rate > 0 and np.isfinite(args.learning_rate)):
        raise UsageError(f"--learning_rate must be a positive number; received {args.learning_rate}.")
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    start = time.perf_counter()
    commit = current_commit()  # the code that runs: the commit checked out when the run starts
    env = environment()
    print(
        f"TensorFlow {env['tensorflow']}, {env['cpus_available']} CPUs available, "
        f"load average {env['load_average_start'][0]:.2f}."
    )
    data: dict[str, Any] = {"digits": _arrays("digits", "train", args.train_examples)}
    data["rotated_digits"] = _arrays("rotated_digits", "train", args.train_examples)
    for name in ("digits", "rotated_digits"):
        data[f"{name}/test"] = _arrays(name, "test", 0)

    models = {}
    for name in args.models:
        models[name] = benchmark_model(name, data, args)
    accuracy_s = time.perf_counter() - start

    clock = MatmulClock()
    clock.time_block("start", max(3, args.repeats))
    layers = {}
    for group in args.layer_groups:
        layers[group] = benchmark_layers(group, args)
        clock.time_block(f"after {group}", max(3, args.repeats))
    for record in layers.values():
        for by_mode in record["timings"].values():
            for timing in by_mode.values():
                timing["matmul_times"] = timing["median_ms"] / clock.median_ms

    env["load_average_end"] = list(os.getloadavg())
    report = {
        "settings": {
            "models": args.models,
            "seeds": args.seeds,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "train_examples": len(data["digits"][1]),
            "test_examples": len(data["digits/test"][1]),
            "settings": {k: {"train": v[0], "test": v[1]} for k, v in SETTINGS.items()},
            "preset": "digits",
            "optimizer": "tf_keras Adam, sparse categorical cross-entropy from logits",
            "layer_sizes": LAYER_SIZES,
            "layer_groups": args.layer_groups,
            "layer_batch": args.layer_batch,
            "modes": {mode: f"tf.function(jit_compile={MODES[mode]})" for mode in args.modes},
            "repeats": args.repeats,
            "warmup": args.warmup,
            "quick": args.quick,
        },
        "environment": env,
        "models": models,
        "matmul": {"runs_ms": clock.runs_ms, "median_ms": clock.median_ms, "blocks": clock.blocks},
        "layers": layers,
        "accuracy_wall_time_s": accuracy_s,
    }
    report["wall_time_s"] = time.perf_counter() - start
    report["readme_table"] = readme_table(report)
    report["command"] = "python benchmarks/supervised.py " + " ".join(sys.argv[1:] if argv is None else argv)
    report["commit"] = commit
    print()
    print(format_report(report))
    print(
        f"\nTotal wall time {report['wall_time_s']:.0f} s (training {accuracy_s:.0f} s); "
        f"load average at the end {env['load_average_end'][0]:.2f}."
    )
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
