"""Image classification datasets by name: real handwritten digits offline, MNIST and CIFAR-10 via TFDS.

``load_dataset(name, split)`` returns a ``tf.data.Dataset`` of
``(image, label)`` pairs, ``image`` a ``uint8`` tensor ``(H, W, C)`` and
``label`` an ``int64`` scalar:

====================  ==========  =======  ==============================================
name                  image       classes  source
====================  ==========  =======  ==============================================
``digits``            8 x 8 x 1   10       scikit-learn's bundled UCI digits (1,797 images)
``rotated_digits``    8 x 8 x 1   10       the same, each image rotated by a random angle
``mnist``             28 x 28 x 1 10       ``tensorflow_datasets`` ``mnist`` (prepared)
``rotated_mnist``     28 x 28 x 1 10       the same, each image rotated by a random angle
``cifar10``           32 x 32 x 3 10       ``tensorflow_datasets`` ``cifar10`` (prepared)
====================  ==========  =======  ==============================================

The rotated datasets follow the construction of rotated MNIST (Larochelle et
al., 2007, "mnist-rot"; used by G-CNNs and GSA-Nets): every image is rotated
once, by an angle drawn uniformly from ``[0, 2 pi)``, with bilinear
interpolation and zeros outside the image. The angles are fixed by ``seed``,
the split and the index of the image, so a dataset is the same every time it
is loaded. ``rotated_digits`` rotates exactly the images of ``digits``'s
split, so ``digits`` ``"train"`` with ``rotated_digits`` ``"test"`` trains on
upright digits and tests on rotated ones.

``rotated_mnist`` is an on-the-fly transform of the prepared TFDS ``mnist``
(60,000 training and 10,000 test images), not the 12,000 / 50,000 images of
the original mnist-rot files, which TFDS does not provide.

Training machines often have no internet, so this module never downloads:
a TFDS dataset that is not prepared under ``data_dir`` raises
``FileNotFoundError`` at once (``tfds.load`` would retry the download for
minutes), with the commands that provide it.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import tensorflow as tf

SPLITS: tuple[str, ...] = ("train", "test")

# The train/test split of the digits is fixed (the same 1,437 / 360 images
# for every seed), so that runs with different seeds are tested on the same images.
DIGITS_SPLIT_SEED = 0
DIGITS_TEST_FRACTION = 0.2
# sklearn's digits count ink in 4x4 blocks of a 32x32 bitmap: values 0..16.
DIGITS_MAX_VALUE = 16


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What a dataset holds.

    Attributes:
      image_shape: ``(H, W, C)`` of its ``uint8`` images.
      num_classes: number of labels, ``0 .. num_classes - 1``.
      source: ``"sklearn_digits"`` or the TFDS name it reads.
      rotated: whether each image is rotated by a random angle.
      preset: the classifier size preset of ``sit_keras.supervised.classifiers`` for its images.
    """

    image_shape: tuple[int, int, int]
    num_classes: int
    source: str
    rotated: bool
    preset: str


DATASETS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec((8, 8, 1), 10, "sklearn_digits", False, "digits"),
    "rotated_digits": DatasetSpec((8, 8, 1), 10, "sklearn_digits", True, "digits"),
    "mnist": DatasetSpec((28, 28, 1), 10, "mnist", False, "rotmnist"),
    "rotated_mnist": DatasetSpec((28, 28, 1), 10, "mnist", True, "rotmnist"),
    "cifar10": DatasetSpec((32, 32, 3), 10, "cifar10", False, "cifar10"),
}

DATASET_NAMES: tuple[str, ...] = tuple(DATASETS)


def dataset_spec(name: str) -> DatasetSpec:
    """The ``DatasetSpec`` of ``name``; ``ValueError`` listing the valid names if unknown."""
    if name not in DATASETS:
        raise ValueError(f"Unknown dataset {name!r}. Expected one of: {', '.join(DATASET_NAMES)}.")
    return DATASETS[name]


def rotate_images(images: tf.Tensor, angles: tf.Tensor) -> tf.Tensor:
    """Rotates each image about its centre, counter-clockwise (as ``np.rot90``), bilinearly.

    Pixels that come from outside the image are 0. A rotation by a multiple
    of 90 degrees moves pixel centres onto pixel centres, so it equals
    ``np.rot90`` up to float rounding.

    Args:
      images: ``(B, H, W, C)``, any real or ``uint8`` dtype.
      angles: ``(B,)`` angles in radians.

    Returns:
      ``(B, H, W, C)`` in the dtype of ``images`` (``uint8`` rounded to nearest).
    """
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise ValueError(f"images must have shape (B, H, W, C). Received: images.shape={images.shape}")
    dtype = images.dtype
    height, width = tf.shape(images)[1], tf.shape(images)[2]
    cx = (tf.cast(width, tf.float32) - 1.0) / 2.0
    cy = (tf.cast(height, tf.float32) - 1.0) / 2.0
    angles = tf.cast(tf.convert_to_tensor(angles), tf.float32)
    cos, sin = tf.cos(angles), tf.sin(angles)
    # The transform maps each *output* pixel (x, y) to the input point it
    # samples: input = R(angle) (output - centre) + centre, with R the usual
    # rotation matrix in (x, y). Image rows grow downwards, so sampling
    # through R(angle) turns the picture counter-clockwise on screen.
    zeros = tf.zeros_like(cos)
    transforms = tf.stack(
        [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy, zeros, zeros], axis=1
    )
    rotated = tf.raw_ops.ImageProjectiveTransformV3(
        images=tf.cast(images, tf.float32),
        transforms=transforms,
        output_shape=tf.stack([height, width]),
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="CONSTANT",
    )
    if dtype == tf.uint8:
        return tf.cast(tf.clip_by_value(tf.round(rotated), 0.0, 255.0), tf.uint8)
    return tf.cast(rotated, dtype)


def _check_split(split: str) -> int:
    if split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}. Expected one of: {', '.join(SPLITS)}.")
    return SPLITS.index(split)


def _digits_arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The fixed stratified split of sklearn's digits: ``uint8 (N, 8, 8, 1)`` and ``int64 (N,)``."""
    # Imported here: scikit-learn is needed only for the digits.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.round(digits.images * (255.0 / DIGITS_MAX_VALUE)).astype(np.uint8)[..., None]
    labels = digits.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=DIGITS_TEST_FRACTION, stratify=labels, random_state=DIGITS_SPLIT_SEED
    )
    return (train_x, train_y) if split == "train" else (test_x, test_y)


def rotation_angle(seed: int, split: str, index: tf.Tensor) -> tf.Tensor:
    """The angle in ``[0, 2 pi)`` of example ``index`` of a rotated ``split``; the same on every call.

    A stateless draw seeded by ``(seed, split, index)``: train and test never
    share a stream, and a dataset rotates identically on every pass.
    """
    stream = int(seed) * len(SPLITS) + _check_split(split)
    index = tf.cast(index, tf.int64)
    return tf.random.stateless_uniform(
        [], seed=tf.stack([tf.constant(stream, tf.int64), index]), maxval=2 * math.pi
    )


def _rotated(dataset: tf.data.Dataset, seed: int, split: str) -> tf.data.Dataset:
    def rotate(index: tf.Tensor, example: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        image, label = example
        return rotate_images(image[None], rotation_angle(seed, split, index)[None])[0], label

    return dataset.enumerate().map(rotate, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _load_digits(split: str, rotated: bool, seed: int) -> tf.data.Dataset:
    dataset = tf.data.Dataset.from_tensor_slices(_digits_arrays(split))
    # 1,797 tiny images: rotate once, keep them in memory.
    return _rotated(dataset, seed, split).cache() if rotated else dataset


def missing_dataset_message(name: str, tfds_name: str, data_dir: str) -> str:
    """How to provide a TFDS dataset on a machine without internet."""
    return (
        f"Dataset {name!r} needs the TFDS dataset {tfds_name!r} prepared under data_dir={data_dir!r}, "
        "and it is not there; it is never downloaded here (no network). Provide it by one of:\n"
        f"  - on a machine with internet: `tfds build {tfds_name} --data_dir <dir>` (or "
        f"`python -c \"import tensorflow_datasets as tfds; tfds.builder('{tfds_name}', "
        "data_dir='<dir>').download_and_prepare()\"`), then copy <dir>/"
        f"{tfds_name} to {os.path.join(data_dir, tfds_name)};\n"
        "  - or point to a folder that already holds it: --data_dir (sit-train-supervised) / "
        "data_dir= (load_dataset)."
    )


def _load_tfds(name: str, spec: DatasetSpec, split: str, data_dir: str | None, seed: int) -> tf.data.Dataset:
    import tensorflow_datasets as tfds

    builder = tfds.builder(spec.source, data_dir=data_dir)
    # Checked before anything else: `tfds.load` would try to download, and
    # retry for minutes on a machine without network.
    if not builder.is_prepared():
        root = os.path.dirname(os.path.dirname(builder.data_dir))
        raise FileNotFoundError(missing_dataset_message(name, spec.source, root))
    dataset = builder.as_dataset(split=split, as_supervised=True, shuffle_files=False)
    dataset = dataset.map(lambda image, label: (image, tf.cast(label, tf.int64)))
    return _rotated(dataset, seed, split) if spec.rotated else dataset


def load_dataset(name: str, split: str, data_dir: str | None = None, seed: int = 0) -> tf.data.Dataset:
    """``(image uint8 (H, W, C), label int64)`` pairs of dataset ``name``, in a fixed order.

    Args:
      name: one of ``DATASET_NAMES``.
      split: ``"train"`` or ``"test"``.
      data_dir: where the TFDS datasets are prepared (TFDS's default,
        ``~/tensorflow_datasets``, when ``None``); unused by the digits.
      seed: seeds the rotation angles of the rotated datasets (the digits'
        train/test split is fixed, see ``DIGITS_SPLIT_SEED``).

    Returns:
      An unbatched, unshuffled ``tf.data.Dataset``.

    Raises:
      ValueError: unknown name or split.
      FileNotFoundError: a TFDS dataset that is not prepared under
        ``data_dir``; the message says how to provide it.
    """
    spec = dataset_spec(name)
    _check_split(split)
    if spec.source == "sklearn_digits":
        return _load_digits(split, spec.rotated, seed)
    return _load_tfds(name, spec, split, data_dir, seed)
