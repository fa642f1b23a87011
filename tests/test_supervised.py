"""Tests of supervised training: datasets, classifiers and ``sit-train-supervised``.

What this file proves:

- the digits are scikit-learn's real 8x8 digits in a fixed, stratified
  80/20 split, rescaled to ``uint8``; ``rotated_digits`` holds the same
  images and labels, each turned by its own seeded angle;
- ``rotate_images`` turns counter-clockwise and equals ``np.rot90`` at
  multiples of 90 degrees;
- TFDS datasets load through ``tfds.testing.mock_data`` (offline), and a
  dataset that is not prepared fails at once (< 5 s) with a message that
  says how to provide it, from ``load_dataset``, ``train_supervised`` and
  the command line;
- every encoder makes a classifier with logits ``(B, classes)``; the SiT
  classifier is exactly invariant under 90-degree rotations with perturbed
  weights (its head reads invariant features only);
- a short real training run on the digits beats chance by far, writes
  result.json, TensorBoard event files and checkpoints, and a rerun resumes
  the epoch count and the optimizer state;
- the gin path (``--gin_file`` / ``--gin_bindings``) configures the run, and
  bad flags, bindings and names give clear errors.
"""

from __future__ import annotations

import doctest
import glob
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import gin
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import tf_keras
from hypothesis import given
from hypothesis import strategies as st

from sit_keras import mixed_precision, testing
from sit_keras.models import ENCODER_NAMES
from sit_keras.supervised import classifiers, datasets, train
from sit_keras.supervised.classifiers import build_classifier
from sit_keras.supervised.datasets import DATASET_NAMES, load_dataset, rotate_images, rotation_angle
from sit_keras.supervised.train import train_supervised

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs" / "supervised").glob("*.gin"))
TFDS_NAMES = ("mnist", "rotated_mnist", "cifar10")


def _arrays(dataset: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
    images, labels = next(iter(dataset.batch(100_000)))  # the whole split in one batch
    return images.numpy(), labels.numpy()


# -- datasets ----------------------------------------------------------------------
def test_digits_are_a_fixed_stratified_split_of_real_digits():
    train_x, train_y = _arrays(load_dataset("digits", "train"))
    test_x, test_y = _arrays(load_dataset("digits", "test"))

    assert train_x.shape == (1437, 8, 8, 1) and test_x.shape == (360, 8, 8, 1)
    assert train_x.dtype == np.uint8 and train_y.dtype == np.int64
    # 0..16 ink counts rescaled to the full uint8 range.
    assert train_x.max() == 255 and train_x.min() == 0
    assert sorted(set(train_y)) == sorted(set(test_y)) == list(range(10))
    # Stratified: every class has 20% (+- 1 image) of its images in the test split.
    for label in range(10):
        total = np.sum(train_y == label) + np.sum(test_y == label)
        assert abs(np.sum(test_y == label) - 0.2 * total) <= 1
    # The split does not depend on the seed.
    again_x, again_y = _arrays(load_dataset("digits", "test", seed=7))
    np.testing.assert_array_equal(again_x, test_x)
    np.testing.assert_array_equal(again_y, test_y)


def test_rotated_digits_rotate_the_same_digits_by_seeded_angles():
    upright_x, upright_y = _arrays(load_dataset("digits", "test"))
    rotated_x, rotated_y = _arrays(load_dataset("rotated_digits", "test", seed=3))

    np.testing.assert_array_equal(rotated_y, upright_y)
    for i in (0, 17, 359):
        expected = rotate_images(upright_x[i : i + 1], rotation_angle(3, "test", i)[None])[0]
        np.testing.assert_array_equal(rotated_x[i], expected)
    angles = tf.map_fn(
        lambda i: rotation_angle(3, "test", i), tf.range(360, dtype=tf.int64), fn_output_signature=tf.float32
    ).numpy()
    assert angles.min() >= 0.0 and angles.max() < 2 * math.pi
    # Roughly uniform: every quarter turn holds about a quarter of the angles.
    counts = np.histogram(angles, bins=4, range=(0, 2 * math.pi))[0]
    assert counts.min() > 60
    # Deterministic per seed, different across seeds and splits.
    np.testing.assert_array_equal(_arrays(load_dataset("rotated_digits", "test", seed=3))[0], rotated_x)
    assert not np.array_equal(_arrays(load_dataset("rotated_digits", "test", seed=4))[0], rotated_x)
    assert rotation_angle(3, "train", 5).numpy() != rotation_angle(3, "test", 5).numpy()


@given(side=st.integers(2, 9), channels=st.integers(1, 3), k=st.integers(0, 3))
def test_rotate_images_is_rot90_at_quarter_turns(side, channels, k):
    x = np.random.default_rng(side * 10 + channels).uniform(0, 255, (2, side, side, channels))
    rotated = rotate_images(x.astype(np.float32), np.full(2, k * math.pi / 2, np.float32))
    np.testing.assert_allclose(rotated, np.rot90(x, k, axes=(1, 2)), atol=1e-3)
    as_uint8 = rotate_images(x.astype(np.uint8), np.full(2, k * math.pi / 2, np.float32))
    assert as_uint8.dtype == tf.uint8
    np.testing.assert_array_equal(as_uint8, np.rot90(x.astype(np.uint8), k, axes=(1, 2)))


def test_rotate_images_turns_counter_clockwise_and_interpolates():
    image = np.zeros((1, 5, 5, 1), np.float32)
    image[0, 0, 2, 0] = 1.0  # top middle
    quarter = rotate_images(image, np.array([math.pi / 2], np.float32)).numpy()
    assert quarter[0, 2, 0, 0] == pytest.approx(1.0, abs=1e-5)  # -> left middle
    # The centre pixel of an odd image stays; 45 degrees spreads a pixel bilinearly.
    image[0, 2, 2, 0] = 4.0
    eighth = rotate_images(image, np.array([math.pi / 4], np.float32)).numpy()
    assert eighth[0, 2, 2, 0] == pytest.approx(4.0, abs=1e-5)
    assert 0.0 < eighth[0, 0, 1, 0] < 1.0


def test_unknown_dataset_and_split_list_the_valid_ones():
    with pytest.raises(ValueError, match="Unknown dataset 'svhn'.*digits, rotated_digits, mnist"):
        load_dataset("svhn", "train")
    with pytest.raises(ValueError, match="Unknown split 'validation'.*train, test"):
        load_dataset("digits", "validation")
    assert DATASET_NAMES == ("digits", "rotated_digits", "mnist", "rotated_mnist", "cifar10")


@pytest.mark.parametrize("name", TFDS_NAMES)
def test_unprepared_tfds_dataset_fails_at_once_with_instructions(tmp_path, name):
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError) as error:
        load_dataset(name, "train", data_dir=str(tmp_path))
    assert time.perf_counter() - start < 5.0
    message = str(error.value)
    source = datasets.DATASETS[name].source
    assert f"tfds build {source} --data_dir" in message
    assert "--data_dir" in message and str(tmp_path) in message and "copy" in message
    assert not any(tmp_path.iterdir()), "nothing may be downloaded or created"


def _write_tfds_metadata(data_dir: Path) -> None:
    # A prepared dataset's metadata (dataset_info.json, features.json), as
    # `tfds build` leaves it; the records themselves come from mock_data.
    for source in ("mnist", "cifar10"):
        builder = tfds.builder(source, data_dir=str(data_dir))
        os.makedirs(builder.data_dir, exist_ok=True)
        builder.info.write_to_directory(builder.data_dir)


def test_tfds_datasets_load_through_mock_data(tmp_path):
    _write_tfds_metadata(tmp_path)
    with tfds.testing.mock_data(
        num_examples=5, policy=tfds.testing.MockPolicy.USE_FILES, data_dir=str(tmp_path)
    ):
        mnist_x, mnist_y = _arrays(load_dataset("mnist", "test", data_dir=str(tmp_path)))
        rotated_x, rotated_y = _arrays(load_dataset("rotated_mnist", "test", data_dir=str(tmp_path), seed=1))
        cifar_x, cifar_y = _arrays(load_dataset("cifar10", "train", data_dir=str(tmp_path)))

    assert mnist_x.shape == (5, 28, 28, 1) and mnist_x.dtype == np.uint8 and mnist_y.dtype == np.int64
    assert cifar_x.shape == (5, 32, 32, 3) and cifar_x.dtype == np.uint8 and cifar_y.dtype == np.int64
    assert np.all((cifar_y >= 0) & (cifar_y < 10))
    np.testing.assert_array_equal(rotated_y, mnist_y)
    for i in range(5):
        expected = rotate_images(mnist_x[i : i + 1], rotation_angle(1, "test", i)[None])[0]
        np.testing.assert_array_equal(rotated_x[i], expected)
    assert not np.array_equal(rotated_x, mnist_x)


# -- classifiers -------------------------------------------------------------------
@pytest.mark.parametrize("model", ENCODER_NAMES)
def test_every_encoder_makes_a_digits_classifier(model):
    classifier = build_classifier(model, (8, 8, 1), 10)
    logits = classifier(tf.zeros((3, 8, 8, 1), tf.uint8))
    assert logits.shape == (3, 10) and classifier.output_shape == (None, 10)


def test_sit_classifier_is_rotation_invariant_with_perturbed_weights():
    tf_keras.utils.set_random_seed(0)
    classifier = build_classifier("sit", (8, 8, 1), 10)
    testing.perturb_weights(classifier)
    images = tf.constant(np.random.default_rng(1).integers(0, 256, (4, 8, 8, 1)), tf.uint8)
    tol = testing.tolerance("float32")
    forward = lambda x: classifier(x, training=False)  # noqa: E731
    testing.assert_invariant(forward, images, testing.ROTATIONS, tol=tol)
    testing.assert_not_invariant(forward, images, {"flip_h": testing.flip_h})
    # The ViT baseline is not invariant.
    vit = build_classifier("vit", (8, 8, 1), 10)
    testing.perturb_weights(vit)
    testing.assert_not_invariant(lambda x: vit(x, training=False), images, testing.ROTATIONS)


@pytest.mark.parametrize("group", ["p4", "p4m"])
def test_group_transformer_classifiers_are_invariant_to_their_group(group):
    tf_keras.utils.set_random_seed(0)
    classifier = build_classifier(f"group_transformer:{group}", (8, 8, 1), 10)
    assert classifier.output_dim == 10 and classifier.group.name == group
    testing.perturb_weights(classifier, 0.1)
    images = tf.constant(np.random.default_rng(2).integers(0, 256, (3, 8, 8, 1)), tf.uint8)
    forward = lambda x: classifier(x, training=False)  # noqa: E731
    transforms = testing.ROTATIONS if group == "p4" else testing.DIHEDRAL
    testing.assert_invariant(forward, images, transforms, tol=testing.tolerance("float32"))
    if group == "p4":
        testing.assert_not_invariant(forward, images, testing.REFLECTIONS)


def test_presets_follow_the_image_size_and_overrides_win():
    assert classifiers.preset_for_shape((28, 28, 1)) == "rotmnist"
    assert classifiers.preset_for_shape((32, 32, 3)) == "cifar10"
    with pytest.raises(ValueError, match=r"No preset for images of shape \(10, 10, 1\).*8 \(digits\)"):
        build_classifier("cnn", (10, 10, 1), 10)
    assert build_classifier("cnn", (10, 10, 1), 10, preset="digits").output_shape == (None, 10)
    small = build_classifier("vit", (8, 8, 1), 4, embed_dim=16)
    assert small.layers[1].embed_dim == 16 and small.output_shape == (None, 4)


def test_unknown_models_and_presets_are_rejected():
    with pytest.raises(ValueError, match="Unknown model 'resnet'.*sit, sit_star.*group_transformer:p4m"):
        build_classifier("resnet", (8, 8, 1), 10)
    with pytest.raises(ValueError, match="Unknown model 'group_transformer:p5'"):
        build_classifier("group_transformer:p5", (8, 8, 1), 10)
    with pytest.raises(ValueError, match="Unknown preset 'imagenet'.*digits, rotmnist, cifar10"):
        build_classifier("cnn", (8, 8, 1), 10, preset="imagenet")
    with pytest.raises(ValueError, match="num_classes must be positive"):
        build_classifier("cnn", (8, 8, 1), 0)


def test_classifier_doctests():
    result = doctest.testmod(classifiers, extraglobs={"tf": tf}, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# -- training ----------------------------------------------------------------------
FAST = {"model": "cnn", "learning_rate": 3e-3, "batch_size": 32, "verbose": 0}


def test_short_training_on_digits_learns_logs_checkpoints_and_resumes(tmp_path):
    root = tmp_path / "run"
    result = train_supervised(str(root), epochs=3, **FAST)

    assert result["test_accuracy"] > 0.8  # chance is 0.1
    assert result["epochs"] == 3 and result["initial_epoch"] == 0
    assert len(result["history"]["val_accuracy"]) == 3
    assert result["params"] > 0 and result["train_time_s"] > 0
    assert json.loads((root / "result.json").read_text()) == json.loads(json.dumps(result))
    assert result["config"]["model"] == "cnn" and result["config"]["epochs"] == 3
    for folder in ("train", "validation"):
        assert glob.glob(str(root / "logs" / folder / "events.out.tfevents.*"))
    assert tf.train.latest_checkpoint(str(root / "checkpoints")).endswith("ckpt-3")

    resumed = train_supervised(str(root), epochs=5, **FAST)
    assert resumed["initial_epoch"] == 3 and resumed["epochs"] == 5
    assert len(resumed["history"]["loss"]) == 2
    assert resumed["total_train_time_s"] == pytest.approx(result["train_time_s"] + resumed["train_time_s"])
    assert resumed["test_accuracy"] > 0.8
    assert tf.train.latest_checkpoint(str(root / "checkpoints")).endswith("ckpt-5")
    # The optimizer's step counter came back from the checkpoint: 5 epochs of ceil(1437 / 32) steps.
    reader = tf.train.load_checkpoint(str(root / "checkpoints"))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 5 * 45

    with pytest.raises(ValueError, match="does not match model 'vit'"):
        train_supervised(str(root), **{**FAST, "model": "vit"}, epochs=6)


def test_group_transformer_trains_checkpoints_and_restores(tmp_path):
    # One group self-attention block (of the preset's two) keeps the test quick.
    config = {
        "model": "group_transformer:z2",
        "model_overrides": {"block_sizes": (1, 0)},
        "epochs": 1,
        "eval_interval": 0,
        "verbose": 0,
    }
    result = train_supervised(str(tmp_path), **config)
    assert result["params"] > 0 and 0.0 <= result["test_accuracy"] <= 1.0
    assert result["history"]["loss"][0] > 0 and "val_loss" not in result["history"]
    # Nothing left to train: the restored weights give the same test accuracy.
    restored = train_supervised(str(tmp_path), **config)
    assert restored["initial_epoch"] == 1 and restored["history"] == {}
    assert restored["test_accuracy"] == result["test_accuracy"]


def test_training_checks_its_arguments_before_building_anything(tmp_path):
    with pytest.raises(ValueError, match="Unknown dataset 'mnist3'"):
        train_supervised(str(tmp_path), dataset="mnist3")
    with pytest.raises(ValueError, match="epochs must be positive. Received: epochs=0"):
        train_supervised(str(tmp_path), epochs=0)
    with pytest.raises(ValueError, match="same image shape"):
        train_supervised(str(tmp_path), dataset="digits", test_dataset="mnist")
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError, match="tfds build cifar10"):
        train_supervised(str(tmp_path / "run"), dataset="cifar10", data_dir=str(tmp_path / "tfds"))
    assert time.perf_counter() - start < 5.0
    assert not (tmp_path / "run").exists()


# -- the command line ----------------------------------------------------------------
@pytest.fixture(autouse=True)
def clean_gin():
    """Every test of this module from an empty gin config, and none left behind: ``train_supervised``
    reads gin, and a command-line test elsewhere on the same worker may have bound its dataset."""
    gin.clear_config()
    yield
    gin.clear_config()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_every_gin_config_parses_and_names_its_source(config, clean_gin):
    gin.clear_config()
    gin.parse_config_file(str(config))
    text = config.read_text()
    assert "Source:" in text
    assert gin.query_parameter("train_supervised.dataset") in DATASET_NAMES


def test_main_trains_from_gin_file_and_bindings(tmp_path, capsys, clean_gin):
    root = tmp_path / "run"
    status = train.main(
        [
            f"--root_dir={root}",
            f"--gin_file={REPO / 'configs' / 'supervised' / 'digits_sit.gin'}",
            "--gin_bindings=train_supervised.model = 'cnn'",
            "--gin_bindings=train_supervised.epochs = 2",
            "--gin_bindings=train_supervised.verbose = 0",
        ]
    )
    assert status == 0
    result = json.loads((root / "result.json").read_text())
    assert result["model"] == "cnn" and result["epochs"] == 2 and result["dataset"] == "digits"
    assert "train_supervised.epochs = 2" in result["gin_config"]
    assert "test accuracy" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("model", "precision"),
    [
        ("sit", "mixed_bfloat16"),
        # float16 is emulated on CPUs without AVX512-FP16, the SiT's epoch slowest of all (about 80 s on an
        # AVX2 host): make test-large. The trainer's float16 path (loss scaling) runs by default with the CNN.
        pytest.param("sit", "mixed_float16", marks=pytest.mark.large),
        ("cnn", "mixed_float16"),
        # A compiled group transformer trains every weight under both policies in
        # test_mixed_precision_groups_neurons::test_a_compiled_group_transformer_trains_every_weight.
        pytest.param("group_transformer:p4", "mixed_bfloat16", marks=pytest.mark.large),
        pytest.param("group_transformer:p4", "mixed_float16", marks=pytest.mark.large),
    ],
)
def test_mixed_precision_training_keeps_float32_variables_and_logits(tmp_path, precision, model):
    overrides = (
        {"channels": (4, 4), "block_sizes": (1, 1), "num_heads": 2, "key_dim": 2} if "group" in model else {}
    )
    result = train_supervised(
        str(tmp_path / "run"), epochs=1, precision=precision, model=model, model_overrides=overrides,
        batch_size=64, verbose=0,
    )  # fmt: skip
    assert result["precision"] == precision and result["config"]["precision"] == precision
    assert np.isfinite(result["test_loss"]) and np.isfinite(result["history"]["loss"]).all()
    # The policy is set only while the model is built: the default (floatx) is back.
    assert tf_keras.mixed_precision.global_policy().name == "float32"
    with mixed_precision.dtype_policy(precision):
        classifier = build_classifier(model, (8, 8, 1), 10, **overrides)
    assert {v.dtype for v in classifier.weights} == {tf.float32}
    assert classifier(tf.zeros((2, 8, 8, 1), tf.uint8)).dtype == tf.float32


def test_unknown_precision_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="Unknown precision 'float8'"):
        train_supervised(str(tmp_path / "run"), precision="float8", **FAST)
    assert not (tmp_path / "run").exists()


def test_main_rejects_bad_bindings_and_flags(tmp_path, capsys, clean_gin):
    status = train.main([f"--root_dir={tmp_path}", "--gin_bindings=train_supervised.epochz = 3"])
    err = capsys.readouterr().err
    assert status == 2
    assert "invalid gin configuration" in err and "doesn't have a parameter named 'epochz'" in err
    assert "epochs" in err and "learning_rate" in err  # the valid parameters are listed
    assert train.main([f"--root_dir={tmp_path}", "--gin_bindings=train_supervised.model = sit"]) == 2
    assert "Failed to parse token 'sit'" in capsys.readouterr().err
    assert train.main([f"--root_dir={tmp_path}", "--gin_file=/no/such.gin"]) == 2
    assert "Unable to open file: /no/such.gin" in capsys.readouterr().err
    assert train.main(["--gin_bindings=train_supervised.epochs = 1"]) == 2
    assert "root_dir" in capsys.readouterr().err
    assert train.main([f"--root_dir={tmp_path}", "--precision=float8"]) == 2
    assert "--precision" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_command_line_fails_fast_offline(tmp_path):
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [
        sys.executable,
        "-m",
        "sit_keras.supervised.train",
        f"--root_dir={tmp_path / 'run'}",
        f"--data_dir={tmp_path / 'tfds'}",
        "--gin_bindings=train_supervised.dataset = 'rotated_mnist'",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2
    assert "tfds build mnist" in done.stderr and "Traceback" not in done.stderr
