"""Tests of the GSA-Net / GE-ViT classifier ``build_group_transformer``.

What this file proves:

- the whole stack (lifting, group self-attention blocks, spatial pooling,
  classifier, group pooling) gives logits exactly invariant (float64,
  perturbed weights) to the stabiliser of ``p4``, ``mz2`` and ``p4m``, with
  global and local attention, on even and odd image sizes, and its feature
  maps are equivariant; the ``z2`` model is *not* invariant to rotations;
- with GSA-Nets' original encoding the ``p4m`` model is not invariant;
- ``rotation_equivariance_error`` is ~0 for ``p4`` at quarter turns and
  finite for ``p8`` / ``p16``;
- the presets follow GSA-Nets appendix F (block counts, channels, heads,
  neighbourhood, dropout), and ``"digits"`` is small;
- ``uint8`` images are scaled by 1/255; the model round-trips through its
  config, ``clone_model``, ``.keras`` and (a ``large`` test) SavedModel, runs under
  ``jit_compile`` (forward; a compiled training step is a ``large`` test),
  trains every weight and rejects bad arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from sit_keras import groups, testing
from sit_keras.models.group_transformer import (
    PRESETS,
    GroupTransformer,
    GroupTransformerBlock,
    build_group_transformer,
)

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

DTYPE = "float64"
TOL = testing.tolerance(DTYPE)
BROKEN = 1e-6
TINY = {"channels": (4, 4), "block_sizes": (1, 1), "num_heads": 2, "key_dim": 2}


pytestmark = pytest.mark.usefixtures("fixed_seed")  # tests/conftest.py


def _tiny(group: str, side: int, channels: int = 2, scale: float = 0.3, **overrides: Any) -> GroupTransformer:
    options = {**TINY, "dtype": DTYPE, **overrides}
    model = build_group_transformer(group, (side, side, channels), 3, preset="digits", **options)
    testing.perturb_weights(model, scale)
    return model


# -- symmetry ----------------------------------------------------------------------------------
CASES = [(None, 6), (3, 7)]  # global on an even side (2x2 pooling), local on an odd one (3x3 pooling)


@pytest.mark.parametrize("neighbourhood, side", CASES, ids=["global-6x6", "local3-7x7"])
@pytest.mark.parametrize("group", ["z2", "p4", "mz2", "p4m"])
def test_logits_are_invariant_to_the_stabiliser(group: str, neighbourhood: int | None, side: int) -> None:
    model = _tiny(group, side, neighbourhood=neighbourhood)
    x = testing.random_normal((2, side, side, 2))
    assert model(x).shape == (2, 3)
    # z2's stabiliser is {e}: the check is then that the batch does not mix samples.
    testing.assert_invariant(model, x, groups.group_actions(group))
    if group == "z2":
        # Relative positions see orientation: a translation-only model is not rotation invariant.
        testing.assert_not_invariant(model, x, {"rot90": testing.ROTATIONS["rot90"]}, min_error=BROKEN)


def test_feature_maps_follow_the_regular_representation() -> None:
    model = _tiny("p4m", 6, neighbourhood=3)
    x = testing.random_normal((2, 6, 6, 2))
    assert model.feature_maps(x).shape == (2, 3, 3, 8, 4)
    images, signals = groups.group_actions("p4m", "image"), groups.group_actions("p4m", "group")
    testing.assert_equivariant(
        model.feature_maps, x, {name: (images[name], signals[name]) for name in images}
    )


@pytest.mark.parametrize("neighbourhood", [None, 3], ids=["global", "local3"])
def test_gsa_nets_encoding_breaks_p4m_invariance_of_the_model(neighbourhood: int | None) -> None:
    # Scale-1 perturbations make the broken symmetry large (see test_group_self_attention.py).
    model = _tiny("p4m", 6, neighbourhood=neighbourhood, positional_encoding="gsa_nets", scale=1.0)
    x = testing.random_normal((2, 6, 6, 2))
    actions = groups.group_actions("p4m")
    testing.assert_invariant(model, x, {name: actions[name] for name in ("r0", "r2")})
    broken = {name: g for name, g in actions.items() if name not in ("r0", "r2")}
    testing.assert_not_invariant(model, x, broken, min_error=BROKEN)


def test_rotation_equivariance_error_of_models() -> None:
    images = testing.random_normal((2, 9, 9, 1))
    p4 = _tiny("p4", 9, channels=1, neighbourhood=3)
    errors = groups.rotation_equivariance_error(p4, images, [90.0, 180.0, 270.0])
    assert max(errors.values()) <= TOL, errors
    for group, step in (("p8", 45.0), ("p16", 22.5)):
        model = _tiny(group, 9, channels=1, neighbourhood=3, block_sizes=(0, 1))
        errors = groups.rotation_equivariance_error(model, images, [step, 90.0])
        assert all(np.isfinite(e) for e in errors.values()), errors
        assert errors[90.0] <= 1e-12, errors  # a quarter turn is on the grid for p8 and p16 too


# -- presets and inputs ---------------------------------------------------------------------------
def _blocks(model: GroupTransformer) -> list[GroupTransformerBlock]:
    return [layer for stage in model.stages for layer in stage if isinstance(layer, GroupTransformerBlock)]


def test_presets_follow_the_papers() -> None:
    rotmnist = build_group_transformer("p4", (6, 6, 1), 10)  # preset="rotmnist" by default
    blocks = _blocks(rotmnist)
    assert len(blocks) == 5 and {b.output_dim for b in blocks} == {20}  # F.1: 5 blocks, 20 channels
    assert {b.attention.num_heads for b in blocks} == {9} and rotmnist.lifting.neighbourhood == 5
    assert {b.attention.attention_dropout for b in blocks} == {0.1} and {b.value_dropout for b in blocks} == {
        0.1
    }
    assert [len([x for x in stage if isinstance(x, GroupTransformerBlock)]) for stage in rotmnist.stages] == [
        2,
        3,
    ]
    cifar = build_group_transformer("mz2", (4, 4, 3), 10, preset="cifar10")
    assert [b.output_dim for b in _blocks(cifar)] == [96, 96, 192, 192, 192, 192]  # F.2
    assert cifar.input_dropout == 0.3 and cifar.pool_dropout == 0.2 and cifar.normalize_between_blocks
    assert sum(isinstance(x, tf_keras.layers.Dropout) and x.rate == 0.2 for s in cifar.stages for x in s) == 2
    digits = build_group_transformer("p4", (8, 8, 1), 10, preset="digits")
    assert digits(tf.zeros((5, 8, 8, 1))).shape == (5, 10)
    assert digits.count_params() < 10_000
    assert set(PRESETS) == {"rotmnist", "cifar10", "digits"}


def test_uint8_images_are_scaled_and_float_images_used_as_given() -> None:
    model = build_group_transformer("p4", (6, 6, 1), 4, preset="digits", **TINY)
    raw = np.random.default_rng(0).integers(0, 256, size=(2, 6, 6, 1)).astype(np.uint8)
    np.testing.assert_allclose(model(raw), model(raw.astype(np.float32) / 255.0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"expects images of shape \(B, 6, 6, 1\)"):
        model(tf.zeros((2, 6, 5, 1)))


def test_dropout_is_active_only_in_training() -> None:
    model = build_group_transformer("p4", (6, 6, 1), 4, preset="rotmnist", **TINY)
    x = testing.random_normal((2, 6, 6, 1), dtype="float32")
    assert np.max(np.abs(model(x, training=True) - model(x, training=True))) > 1e-6
    np.testing.assert_array_equal(model(x), model(x, training=False))


# -- Keras citizenship ------------------------------------------------------------------------------
def _serialisable_model() -> GroupTransformer:
    return _tiny(
        "p4m", 6, neighbourhood=3, positional_encoding="gsa_nets", attention_dropout=0.1, block_sizes=(0, 1)
    )


def test_config_clone_and_keras_file_round_trips(tmp_path: Path) -> None:
    model = _serialisable_model()
    x = testing.random_normal((2, 6, 6, 2))
    config = model.get_config()
    assert (
        config["group"] == "p4m" and config["positional_encoding"] == "gsa_nets" and config["dtype"] == DTYPE
    )
    rebuilt = testing.config_round_trip(model)
    assert type(rebuilt) is GroupTransformer
    rebuilt(x)
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_array_equal(rebuilt(x), model(x))
    clone = tf_keras.models.clone_model(model)
    clone(x)
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(clone(x), model(x))
    model.save(tmp_path / "model.keras")
    loaded = tf_keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(loaded(x), model(x))


@pytest.mark.large
def test_saved_model_round_trip(tmp_path: Path) -> None:
    # About 10 s of tracing: the call is saved for training and inference.
    model = _serialisable_model()
    x = testing.random_normal((2, 6, 6, 2))
    model.save(tmp_path / "saved_model")
    restored = tf_keras.models.load_model(tmp_path / "saved_model")
    np.testing.assert_allclose(restored(x), model(x), rtol=0, atol=1e-12)
    testing.assert_invariant(restored, x, {"r2": groups.group_actions("p4m")["r2"]})


def _small_digits_model() -> GroupTransformer:
    options = {**TINY, "block_sizes": (0, 1)}  # one block: XLA's compile time grows with the graph
    return build_group_transformer("p4", (8, 8, 1), 10, preset="digits", **options)


def _training_step_changes_every_weight(model: GroupTransformer, jit_compile: bool) -> None:
    model.compile(
        optimizer=tf_keras.optimizers.Adam(1e-2),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    x, y = tf.random.uniform((4, 8, 8, 1)), tf.constant([0, 1, 2, 3])
    before = [w.numpy() for w in model.trainable_weights]
    assert np.isfinite(model.train_on_batch(x, y))
    unchanged = [
        w.name for b, w in zip(before, model.trainable_weights, strict=True) if np.array_equal(b, w.numpy())
    ]
    assert unchanged == []  # every weight gets a gradient


def test_jit_compiled_forward_matches_eager() -> None:
    model = _small_digits_model()
    x = tf.random.uniform((4, 8, 8, 1))

    @tf.function(jit_compile=True)
    def compiled(images: tf.Tensor) -> tf.Tensor:
        return model(images)

    np.testing.assert_allclose(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_training_step_changes_every_weight() -> None:
    _training_step_changes_every_weight(_small_digits_model(), jit_compile=False)


@pytest.mark.large
def test_a_jit_compiled_training_step_changes_every_weight() -> None:
    # About 15 s of XLA compilation on a CPU.
    _training_step_changes_every_weight(_small_digits_model(), jit_compile=True)


def test_bad_arguments_raise_clear_errors() -> None:
    with pytest.raises(
        ValueError, match="Unknown preset 'imagenet'. Expected one of: rotmnist, cifar10, digits"
    ):
        build_group_transformer("p4", (8, 8, 1), 10, preset="imagenet")
    with pytest.raises(ValueError, match="Unknown group 'p3'. Expected one of"):
        build_group_transformer("p3", (8, 8, 1), 10)
    with pytest.raises(ValueError, match=r"Unknown overrides \['heads'\]. Expected some of"):
        build_group_transformer("p4", (8, 8, 1), 10, heads=3)
    with pytest.raises(ValueError, match="one entry per stage"):
        build_group_transformer("p4", (8, 8, 1), 10, channels=(4, 4, 4))
    with pytest.raises(ValueError, match="block_sizes must be a non-empty sequence of integers >= 0"):
        build_group_transformer("p4", (8, 8, 1), 10, block_sizes=(1, -1))
    with pytest.raises(ValueError, match="image_shape must be"):
        build_group_transformer("p4", (8, 8), 10)
