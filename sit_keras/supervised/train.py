r"""``sit-train-supervised``: trains an image classifier and tests it.

A thin absl entry point over the gin-configurable ``train_supervised``, in
the style of TF-Agents' examples (``examples/ppo/schulman17``)::

    sit-train-supervised --root_dir runs/digits_sit \
        --gin_file configs/supervised/digits_sit.gin \
        --gin_bindings 'train_supervised.epochs = 5'

    python -m sit_keras.supervised.train --root_dir runs/x \
        --gin_bindings 'train_supervised.model = "group_transformer:p4"' \
        --gin_bindings 'train_supervised.dataset = "rotated_digits"'

What a run writes under ``root_dir``::

    logs/train, logs/validation     TensorBoard event files (tf_keras.callbacks.TensorBoard)
    checkpoints/ckpt-<epoch>        model, optimizer, epoch and train time after every epoch
    result.json                     test accuracy, train time, parameter count, config

Rerun with the same ``root_dir`` to resume from the latest checkpoint: the
epoch count continues (the data order after a resume differs from that of an
uninterrupted run, since the shuffle restarts).
"""

from __future__ import annotations

import sit_keras  # Selects Keras 2 (tf_keras) behind tf.keras: must come before TensorFlow.

# isort: split

import functools
import inspect
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gin
import tensorflow as tf
import tf_keras
from absl import flags

from sit_keras import mixed_precision, output_folder, run_kind, xla
from sit_keras.command_line import parse_flags
from sit_keras.supervised import auto_settings
from sit_keras.supervised.classifiers import build_classifier
from sit_keras.supervised.datasets import dataset_spec, load_dataset

RESULT_FILE = "result.json"
# The lines gin adds to an error raised inside a configurable function.
GIN_CONTEXT = "\n  In call to configurable"


class _CheckpointAndClock(tf_keras.callbacks.Callback):
    """Times training (without the per-epoch test evaluation) and checkpoints after every epoch.

    The clock runs from the start of an epoch to the start of its
    evaluation (or its end): the first epoch includes tracing and compilation.
    """

    def __init__(self, manager: tf.train.CheckpointManager, epoch: tf.Variable, train_time: tf.Variable):
        super().__init__()
        self.manager = manager
        self.epoch = epoch
        self.train_time = train_time
        self.run_seconds = 0.0
        self._start: float | None = None

    def _stop_clock(self) -> None:
        if self._start is not None:
            elapsed = time.perf_counter() - self._start
            self.run_seconds += elapsed
            self.train_time.assign_add(elapsed)
            self._start = None

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._start = time.perf_counter()

    def on_test_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self._stop_clock()

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._stop_clock()
        self.epoch.assign(epoch + 1)
        self.manager.save(checkpoint_number=epoch + 1)


def _check_positive(**values: int | float) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be positive. Received: {name}={value!r}")


def _pipeline(dataset: tf.data.Dataset, batch_size: int, shuffle_seed: int | None) -> tf.data.Dataset:
    if shuffle_seed is not None:
        # The whole split fits in the buffer for the datasets here (<= 60k small images).
        dataset = dataset.shuffle(60_000, seed=shuffle_seed, reshuffle_each_iteration=True)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _compiled_classifier(
    model: str,
    image_shape: tuple[int, ...],
    num_classes: int,
    preset: str | None,
    model_overrides: Mapping[str, Any],
    learning_rate: float,
    precision: str,
    jit_compile: bool,
) -> tf_keras.Model:
    """The classifier in ``precision``, compiled for ``fit`` (Adam, cross-entropy of its logits)."""
    with mixed_precision.dtype_policy(precision):
        classifier = build_classifier(model, image_shape, num_classes, preset=preset, **model_overrides)
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    if precision == "mixed_float16":
        # Keras' fit scales the loss and unscales the gradients with it (float16's range).
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    # Built now so that a checkpoint restores its slots instead of deferring them.
    optimizer.build(classifier.trainable_variables)
    classifier.compile(
        optimizer=optimizer,
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return classifier


@gin.configurable
def train_supervised(
    root_dir: str,
    # Data.
    dataset: str = "digits",
    test_dataset: str | None = None,
    data_dir: str | None = None,
    # Model.
    model: str = "sit",
    preset: str | None = None,
    model_overrides: Mapping[str, Any] | None = None,
    # Optimisation: on the digits, Adam 3e-3 with batch 32 trained every
    # model fastest (1e-2 diverged for SiT and ViT, 1e-3 was slower; see
    # benchmarks/supervised.py).
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    seed: int = 0,
    # XLA for the train step (sit_keras.xla): "auto" (measured), True / "on", False / "off".
    jit_compile: bool | str = "auto",
    # Keras dtype policy (sit_keras.mixed_precision): float32, mixed_bfloat16, mixed_float16 or "auto".
    precision: str = "float32",
    # Evaluation and logging.
    eval_interval: int = 1,
    verbose: int = 2,
) -> dict[str, Any]:
    """Trains ``model`` on the train split of ``dataset`` and tests it on ``test_dataset``.

    Adam on the sparse categorical cross-entropy of the logits, with
    ``tf_keras``' ``compile`` / ``fit``; TensorBoard logs, a checkpoint after
    every epoch (resumed from when ``root_dir`` already has one) and
    ``root_dir/result.json``.

    Args:
      root_dir: output folder (created).
      dataset: training data, a name of ``DATASET_NAMES``; its ``"train"`` split.
      test_dataset: test data, its ``"test"`` split; ``None`` for ``dataset``.
        ``dataset="digits", test_dataset="rotated_digits"`` trains on upright
        digits and tests on the same test digits rotated.
      data_dir: where TFDS datasets are prepared (see ``load_dataset``).
      model: a classifier name of ``build_classifier`` (``"sit"``, ``"vit"``,
        ``"group_transformer:p4"``, ...).
      preset: size preset of ``build_classifier``; ``None`` takes the dataset's.
      model_overrides: constructor arguments that replace the preset's.
      epochs: total number of epochs, counting those of a resumed run.
      batch_size: examples per step.
      learning_rate: Adam step size.
      seed: seeds weights, shuffling and the rotation angles.
      jit_compile: compile the train step with XLA (``xla.resolve_jit_compile``;
        ``"auto"``: where this host trains the classifier faster with XLA,
        measured once and cached, ``auto_settings``).
      precision: Keras dtype policy of the classifier
        (``sit_keras.mixed_precision.PRECISIONS``): float32 variables in
        every case, float16 / bfloat16 compute under the mixed ones, float32
        logits; ``"mixed_float16"`` trains with dynamic loss scaling.
        ``"auto"``: mixed_bfloat16 where this host trains the classifier
        faster in it, float32 otherwise (measured once and cached).
      eval_interval: evaluate on the test data every this many epochs
        (logged to TensorBoard); 0 evaluates only at the end.
      verbose: ``fit``'s verbosity (0 silent, 2 one line per epoch).

    Returns:
      The dict written to ``root_dir/result.json``: ``test_accuracy``,
      ``test_loss``, ``jit_compile`` (whether the model's train step was
      compiled with XLA), ``epochs``, ``initial_epoch``, ``train_time_s`` (this
      run's training, without evaluation), ``total_train_time_s`` (all runs
      of ``root_dir``), ``eval_time_s``, ``params``, ``history``, ``config``,
      ``gin_config`` and ``versions``.

    Raises:
      ValueError: unknown names, non-positive sizes, an unknown
        ``jit_compile`` or ``precision`` setting, or a checkpoint in ``root_dir`` that belongs
        to another model.
      FileNotFoundError: a TFDS dataset that is not prepared.
    """
    config = {name: value for name, value in locals().items() if name != "root_dir"}
    config["model_overrides"] = dict(model_overrides or {})
    _check_positive(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate)
    use_xla = xla.resolve_jit_compile(jit_compile)
    mixed_precision.check_precision(precision, allow_auto=True)
    if eval_interval < 0:
        raise ValueError(f"eval_interval must be >= 0. Received: eval_interval={eval_interval}")
    output_folder.check(root_dir, "root_dir")
    run_kind.check(root_dir, run_kind.SUPERVISED, "sit-train-supervised")  # never an RL run's folder
    test_dataset = dataset if test_dataset is None else test_dataset
    train_spec, test_spec = dataset_spec(dataset), dataset_spec(test_dataset)
    if (train_spec.image_shape, train_spec.num_classes) != (test_spec.image_shape, test_spec.num_classes):
        raise ValueError(
            f"dataset and test_dataset must have the same image shape and classes. Received: "
            f"{dataset!r} {train_spec.image_shape} with {train_spec.num_classes} classes, "
            f"{test_dataset!r} {test_spec.image_shape} with {test_spec.num_classes} classes"
        )
    # Loaded first: a missing dataset fails before any model is built.
    train_data = _pipeline(load_dataset(dataset, "train", data_dir, seed), batch_size, shuffle_seed=seed)
    test_data = _pipeline(load_dataset(test_dataset, "test", data_dir, seed), batch_size, shuffle_seed=None)

    preset = train_spec.preset if preset is None else preset
    build = functools.partial(
        _compiled_classifier,
        model,
        train_spec.image_shape,
        train_spec.num_classes,
        preset,
        config["model_overrides"],
        learning_rate,
    )
    if precision == mixed_precision.AUTO or use_xla == xla.AUTO:
        description = {"model": model, "preset": preset, "model_overrides": config["model_overrides"]}
        measured = auto_settings.Classifier(
            build, description, train_spec.image_shape, train_spec.num_classes, batch_size
        )
        if precision == mixed_precision.AUTO:
            choice = auto_settings.choose_precision(measured)
            choice.announce(PROGRAM, "precision")
            precision = choice.value
        if use_xla == xla.AUTO:
            choice = auto_settings.choose_jit_compile(measured, precision)
            choice.announce(PROGRAM, "jit_compile")
            use_xla = choice.value == "on"
    if use_xla:
        xla.start_quietly()
    tf_keras.utils.set_random_seed(seed)
    classifier = build(precision, use_xla)
    optimizer = classifier.optimizer

    os.makedirs(root_dir, exist_ok=True)
    run_kind.claim(root_dir, run_kind.SUPERVISED, "sit-train-supervised")
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    train_time = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="train_time_s")
    checkpoint = tf.train.Checkpoint(
        model=classifier, optimizer=optimizer, epoch=epoch, train_time=train_time
    )
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(root_dir, "checkpoints"), max_to_keep=2)
    if manager.latest_checkpoint:
        try:
            checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        except (AssertionError, ValueError) as error:
            raise ValueError(
                f"The checkpoint {manager.latest_checkpoint} does not match model {model!r} "
                f"(preset and overrides included): use another root_dir. ({error})"
            ) from None
    initial_epoch = int(epoch.numpy())

    clock = _CheckpointAndClock(manager, epoch, train_time)
    callbacks = [
        clock,
        tf_keras.callbacks.TensorBoard(
            log_dir=os.path.join(root_dir, "logs"), write_graph=False, update_freq="epoch", profile_batch=0
        ),
    ]
    history = classifier.fit(
        train_data,
        epochs=epochs,
        initial_epoch=initial_epoch,
        validation_data=test_data if eval_interval else None,
        validation_freq=eval_interval or 1,
        callbacks=callbacks,
        verbose=verbose,
    )

    eval_start = time.perf_counter()
    test_loss, test_accuracy = classifier.evaluate(test_data, verbose=0)
    result = {
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        # What Keras compiled: it would turn XLA off where XLA is not available.
        "jit_compile": bool(classifier.jit_compile),
        "precision": precision,
        "dataset": dataset,
        "test_dataset": test_dataset,
        "model": model,
        "epochs": int(epoch.numpy()),
        "initial_epoch": initial_epoch,
        "train_time_s": clock.run_seconds,
        "total_train_time_s": float(train_time.numpy()),
        "eval_time_s": time.perf_counter() - eval_start,
        "params": int(classifier.count_params()),
        "history": {key: [float(v) for v in values] for key, values in history.history.items()},
        "config": config,
        "gin_config": gin.operative_config_str(),
        "versions": {
            "sit_keras": sit_keras.__version__,
            "tensorflow": tf.__version__,
            "tf_keras": tf_keras.__version__,
        },
    }
    with open(os.path.join(root_dir, RESULT_FILE), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    return result


# -- the entry point -----------------------------------------------------------------
# Flags live in their own FlagValues, not absl's global FLAGS: this module
# can then be imported next to other absl programs (sit-train has flags of
# the same names) and main() can run more than once in one process (tests).
FLAGS = flags.FlagValues()
flags.DEFINE_string("root_dir", None, "Output folder: logs, checkpoints, result.json.", flag_values=FLAGS)
flags.DEFINE_multi_string(
    "gin_file", [], "Gin configuration files (overrides of the defaults).", flag_values=FLAGS
)
flags.DEFINE_multi_string(
    "gin_bindings", [], "Gin bindings, e.g. 'train_supervised.epochs = 5'.", flag_values=FLAGS
)
flags.DEFINE_string(
    "data_dir", None, "Folder of prepared TFDS datasets (overrides a gin binding).", flag_values=FLAGS
)
# Overrides the gin binding (default "auto") when given.
xla.define_jit_compile_flag(FLAGS)
mixed_precision.define_precision_flag(FLAGS, allow_auto=True)
flags.mark_flag_as_required("root_dir", flag_values=FLAGS)

PROGRAM = "sit-train-supervised"


def _parameters() -> str:
    names = list(inspect.signature(train_supervised).parameters)[1:]
    return ", ".join(names)


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the flags (``--root_dir``, ``--gin_file``, ``--gin_bindings``, ``--data_dir``,
    ``--jit_compile``) and trains.

    Args:
      argv: command-line arguments without the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
      The exit status: 0 after training, 2 for bad flags or a bad gin configuration.
    """
    status = parse_flags(
        FLAGS, PROGRAM, argv, __doc__, required=("root_dir",), advanced=("jit_compile", "precision")
    )
    if isinstance(status, int):
        return status
    gin.clear_config()
    try:
        gin.parse_config_files_and_bindings(FLAGS.gin_file, FLAGS.gin_bindings)
    except (ValueError, SyntaxError, OSError) as error:
        print(
            f"{PROGRAM}: invalid gin configuration: {error}\n"
            f"Bindings look like 'train_supervised.epochs = 5' (strings quoted); "
            f"the parameters of train_supervised are: {_parameters()}.",
            file=sys.stderr,
        )
        return 2
    kwargs: dict[str, Any] = {"data_dir": FLAGS.data_dir} if FLAGS.data_dir else {}
    if FLAGS["jit_compile"].present:
        kwargs["jit_compile"] = FLAGS.jit_compile
    if FLAGS["precision"].present:
        kwargs["precision"] = FLAGS.precision
    try:
        result = train_supervised(FLAGS.root_dir, **kwargs)
    except (
        ValueError,
        FileNotFoundError,
    ) as error:  # a setting, a folder of another kind, a missing data set
        sentence = str(error).split(GIN_CONTEXT)[0]  # gin adds where it called train_supervised
        print(f"{PROGRAM}: {sentence}", file=sys.stderr)
        return 2
    print(
        f"{result['model']} on {result['dataset']} -> {result['test_dataset']}: "
        f"test accuracy {result['test_accuracy']:.4f} after {result['epochs']} epochs, "
        f"train time {result['train_time_s']:.1f} s, {result['params']:,} parameters. "
        f"Wrote {os.path.join(FLAGS.root_dir, RESULT_FILE)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
