"""Tests of the SiT-family encoders (SiT, SiT*, SeT, SieT, dihedral SiT).

What this file proves, on random images with *perturbed* weights, in float64
and float32, in training mode (graph-symmetric dropout active) and inference:

- ``"sit"`` / ``"sit_star"``: the features are invariant under the three
  90-degree rotations and change under each of the four reflections;
- ``"sit_dihedral"``: invariant under all of D4;
- ``"set"``: the patch grid it reads is rotation-equivariant, so its
  features tell orientations apart;
- ``"siet"``: an exactly invariant and an exactly equivariant part, both
  broken by reflections;
- the MiniGrid preset (14x14 images, a window around every pixel) is
  rotation-invariant and flip-sensitive;
- the sizes of Table 2 and the paper's 65.7k weights for SiT (within 10%),
  uint8 scaling, the ``ValueError`` messages, a float64 config round trip,
  a SavedModel round trip and an XLA-compiled train step.

``@pytest.mark.large`` tests repeat the symmetry checks and train steps at the
paper's 64x64x3 Procgen size for every variant.
"""

from __future__ import annotations

import doctest
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from train_step_checks import assert_jit_train_step_updates_every_weight

from sit_keras import graphs, testing
from sit_keras.agents.environments.minigrid_env import WALL_VALUE
from sit_keras.layers import GraphSymmetricAttention, RotationPooledConv2D
from sit_keras.models import build_encoder, sit
from sit_keras.models.sit import PRESETS, VARIANTS, SiTEncoder

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

SMALL = (16, 16, 3)  # procgen preset: pool 2 -> 8x8 map, window 4 -> 2x2 patch grid
PAPER = (64, 64, 3)  # Procgen, Table 2
DROPOUT = 0.2
DTYPES = pytest.mark.parametrize("dtype", ["float64", "float32"])
MODES = pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
# Smallest relative change that counts as a broken symmetry: far above the
# rounding errors of an exact one (testing.tolerance: 1e-10 and 2e-5).
BROKEN = {"float64": 1e-4, "float32": 1e-3}

# The parts of the representation each variant promises (section 4, Table 1).
PARTS = {
    "sit": {"invariant"},
    "sit_star": {"invariant"},
    "set": {"equivariant"},
    "siet": {"invariant", "equivariant"},
    "sit_dihedral": {"invariant"},
}


pytestmark = pytest.mark.usefixtures("fixed_seed")  # tests/conftest.py


# -- helpers -----------------------------------------------------------------------
def _images(
    batch: int, shape: tuple[int, int, int] = SMALL, dtype: str = "float32", seed: int = 1
) -> tf.Tensor:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(batch, *shape), dtype=np.uint8)
    if dtype == "uint8":
        return tf.constant(pixels)
    return tf.constant(pixels / 255.0, dtype=dtype)


def _perturbed_encoder(variant: str, shape=SMALL, dtype: str = "float64", **overrides: Any) -> SiTEncoder:
    tf_keras.utils.set_random_seed(0)
    encoder = build_encoder(variant, shape, dtype=dtype, graph_dropout=DROPOUT, seed=0, **overrides)
    testing.perturb_weights(encoder)
    return encoder


@pytest.fixture(scope="module")
def encoders() -> Callable[[str, str], SiTEncoder]:
    """One perturbed 16x16x3 encoder per (variant, dtype), shared by this module's tests."""
    cache: dict[tuple[str, str], SiTEncoder] = {}

    def get(variant: str, dtype: str) -> SiTEncoder:
        if (variant, dtype) not in cache:
            cache[variant, dtype] = _perturbed_encoder(variant, dtype=dtype)
        return cache[variant, dtype]

    return get


def _not_equivariant(fn, x, transforms, min_error: float) -> dict[str, float]:
    """Each ``g`` breaks ``f(g x) = g f(x)`` by more than ``min_error``."""
    errors = {name: testing.equivariance_error(fn, x, g) for name, g in transforms.items()}
    assert all(e > min_error for e in errors.values()), (
        f"unexpectedly equivariant (<= {min_error:g}): {errors}"
    )
    return errors


def _check_variant_symmetries(
    encoder: SiTEncoder, x: tf.Tensor, training: bool, tol: float | None = None
) -> None:
    """Every symmetry ``encoder.variant`` promises, and every one it must break."""
    variant, dtype = encoder.variant, x.dtype.name
    broken = BROKEN[dtype]

    def features(z):
        return encoder(z, training=training)

    def part(name):
        return lambda z: encoder.symmetry_parts(z, training=training)[name]

    if variant == "sit_dihedral":
        testing.assert_invariant(features, x, testing.DIHEDRAL, tol)
        testing.assert_invariant(part("invariant"), x, testing.DIHEDRAL, tol)
        return
    # Triangle sums (eq. 4): the rotations are kept, the reflections broken.
    if variant in ("sit", "sit_star"):
        testing.assert_invariant(features, x, testing.ROTATIONS, tol)
        testing.assert_not_invariant(features, x, testing.REFLECTIONS, min_error=broken)
    else:  # the head reads the equivariant patch grid in order
        testing.assert_not_invariant(features, x, testing.ROTATIONS, min_error=broken)
    if "invariant" in PARTS[variant]:
        testing.assert_invariant(part("invariant"), x, testing.ROTATIONS, tol)
        testing.assert_not_invariant(part("invariant"), x, testing.REFLECTIONS, min_error=broken)
    if "equivariant" in PARTS[variant]:
        testing.assert_equivariant(part("equivariant"), x, testing.ROTATIONS, tol)
        _not_equivariant(part("equivariant"), x, testing.REFLECTIONS, min_error=broken)


# -- symmetries of each variant (16x16x3) ---------------------------------------------
@MODES
@DTYPES
@pytest.mark.parametrize("variant", ["sit", "sit_star"])
def test_sit_is_rotation_invariant_and_flip_sensitive(
    encoders, variant: str, dtype: str, training: bool
) -> None:
    encoder = encoders(variant, dtype)
    x = _images(2, dtype=dtype)

    def features(z):
        return encoder(z, training=training)

    testing.assert_invariant(features, x, testing.ROTATIONS)
    for name, reflection in testing.REFLECTIONS.items():  # each reflection on its own
        testing.assert_not_invariant(features, x, {name: reflection}, min_error=BROKEN[dtype])


@MODES
@DTYPES
def test_dihedral_sit_is_invariant_under_all_of_d4(encoders, dtype: str, training: bool) -> None:
    encoder = encoders("sit_dihedral", dtype)
    testing.assert_invariant(
        lambda z: encoder(z, training=training), _images(2, dtype=dtype), testing.DIHEDRAL
    )


@MODES
@DTYPES
def test_set_patches_are_rotation_equivariant_and_features_see_orientation(
    encoders, dtype: str, training: bool
) -> None:
    encoder = encoders("set", dtype)
    x = _images(2, dtype=dtype)

    def equivariant(z):
        return encoder.symmetry_parts(z, training=training)["equivariant"]

    testing.assert_equivariant(equivariant, x, testing.ROTATIONS)
    _not_equivariant(equivariant, x, testing.REFLECTIONS, min_error=BROKEN[dtype])
    testing.assert_not_invariant(
        lambda z: encoder(z, training=training),
        x,
        {"rot90": testing.ROTATIONS["rot90"]},
        min_error=BROKEN[dtype],
    )


@MODES
@DTYPES
def test_siet_has_an_invariant_and_an_equivariant_part_that_flips_break(
    encoders, dtype: str, training: bool
) -> None:
    encoder = encoders("siet", dtype)
    x = _images(2, dtype=dtype)

    def part(name):
        return lambda z: encoder.symmetry_parts(z, training=training)[name]

    testing.assert_invariant(part("invariant"), x, testing.ROTATIONS)
    testing.assert_equivariant(part("equivariant"), x, testing.ROTATIONS)
    testing.assert_not_invariant(part("invariant"), x, testing.REFLECTIONS, min_error=BROKEN[dtype])
    _not_equivariant(part("equivariant"), x, testing.REFLECTIONS, min_error=BROKEN[dtype])


@pytest.mark.parametrize("variant", tuple(VARIANTS))
def test_symmetry_parts_have_the_promised_keys_and_shapes(encoders, variant: str) -> None:
    encoder = encoders(variant, "float64")
    parts = encoder.symmetry_parts(_images(3, dtype="uint8"))
    assert set(parts) == PARTS[variant]
    assert encoder.uses_invariant == ("invariant" in PARTS[variant])
    assert encoder.uses_equivariant == ("equivariant" in PARTS[variant])
    if "invariant" in parts:
        assert parts["invariant"].shape == (3, encoder.dim)
    if "equivariant" in parts:
        assert parts["equivariant"].shape == (3, 2, 2, encoder.equivariant_dim)
    assert all(p.dtype == tf.float64 for p in parts.values())
    assert encoder(_images(3)).shape == (3, encoder.output_dim)


@pytest.mark.parametrize("variant", tuple(VARIANTS))
def test_every_gsa_layer_uses_the_variants_triangle_sums(variant: str) -> None:
    encoder = build_encoder(variant, SMALL, dim=16, num_heads=2)
    assert encoder.triangles == VARIANTS[variant]["triangles"]
    # The first local and global blocks feed every later token, so their
    # triangle sums always matter (a last block whose class token alone is
    # read may skip them: its triangle sums never reach that token).
    for first in (encoder.local_gsa.blocks[0], encoder.global_gsa.blocks[0]):
        assert first.attention.triangles == VARIANTS[variant]["triangles"]
    blocks = [*encoder.local_gsa.blocks, *encoder.global_gsa.blocks]
    assert {b.attention.symmetry for b in blocks} == {"rotation"}
    assert encoder.stem.symmetry == "rotation"


def test_sit_on_rectangular_images_keeps_the_half_turn_only() -> None:
    # A 16x24 image gives a 2x3 patch grid: rot180 maps it to itself, and the
    # triangles commute with it (test_graphs), so the half turn is exact.
    encoder = _perturbed_encoder("sit", shape=(16, 24, 3))
    x = _images(2, shape=(16, 24, 3), dtype="float64")
    for training in (True, False):
        features = lambda z, training=training: encoder(z, training=training)  # noqa: E731
        testing.assert_invariant(features, x, {"rot180": testing.ROTATIONS["rot180"]})
        testing.assert_not_invariant(
            features, x, {"flip_h": testing.flip_h, "flip_v": testing.flip_v}, min_error=BROKEN["float64"]
        )


def test_minigrid_sit_is_rotation_invariant_and_flip_sensitive() -> None:
    # Appendix F.1: 14x14 images, no stem or pooling, a 5x5 window around every
    # pixel (zero padded at the border) and global GSA over all 196 pixels.
    encoder = _perturbed_encoder("sit", shape=(14, 14, 3), preset="minigrid")
    assert encoder.patch_grid == (14, 14) and encoder.stem is None
    x = _images(1, shape=(14, 14, 3), dtype="float64")
    for training in (True, False):
        features = lambda z, training=training: encoder(z, training=training)  # noqa: E731
        testing.assert_invariant(features, x, testing.ROTATIONS)
        testing.assert_not_invariant(features, x, testing.REFLECTIONS, min_error=BROKEN["float64"])


SIT_SMALL = {  # configs/minigrid/lavacrossing_sit_small.gin before the probe
    "preset": "minigrid", "dim": 32, "num_heads": 4, "stem_kernel_size": 3, "pool_size": 2,
    "window": 3, "local_layers": 1, "global_layers": 1, "output_dim": 32,
}  # fmt: skip


ROTATION_POOLED_CONFIG = {
    "stem_kind": "rotation_pooled", "stem_kernel_size": 5, "stem_depth_multiplier": 4, "pool_padding": 1,
}  # fmt: skip


@pytest.mark.parametrize(
    "overrides, mirror_blind",
    [
        ({}, True),  # one block per level: no triangle sum reaches the class token
        ({"global_layers": 2}, False),
        ({"local_layers": 2}, False),
        ({"global_layers": 2, "pool_padding": 1}, False),
        ({"pool_padding": 1}, True),
        ({"pool_padding": 1, "stem_symmetry": "chiral", "stem_kernel_size": 5}, False),
        ({"stem_symmetry": "chiral", "stem_kernel_size": 5, "stem_depth_multiplier": 2}, False),
        ({"stem_symmetry": "chiral", "stem_kernel_size": 3}, True),  # a 3x3 chiral kernel is D4's
        ({"stem_kind": "rotation_pooled", "stem_kernel_size": 3}, False),  # a free 3x3 kernel is chiral
        ({"local_layers": 0, "global_layers": 2, "pool_padding": 1}, False),  # Table 5's "2 global" SiT
        ({"local_layers": 0}, True),
        (ROTATION_POOLED_CONFIG, False),  # configs/minigrid/lavacrossing_sit_rotation_pooled.gin
    ],
)
def test_a_sit_with_one_block_per_level_is_mirror_blind(
    overrides: dict[str, Any], mirror_blind: bool
) -> None:
    encoder = _perturbed_encoder("sit", shape=(14, 14, 3), **{**SIT_SMALL, **overrides})
    assert encoder.mirror_blind is mirror_blind
    x = _images(2, shape=(14, 14, 3), dtype="float64")
    testing.assert_invariant(encoder, x, testing.ROTATIONS)
    if mirror_blind:
        testing.assert_invariant(encoder, x, testing.REFLECTIONS)
    else:
        testing.assert_not_invariant(encoder, x, testing.REFLECTIONS, min_error=BROKEN["float64"])


def test_a_rotation_pooled_stem_is_configured_and_refused_as_documented() -> None:
    rotation_pooled = {**SIT_SMALL, "stem_kind": "rotation_pooled", "stem_kernel_size": 5}
    encoder = build_encoder("sit", (14, 14, 3), **{**rotation_pooled, "stem_depth_multiplier": 4})
    encoder(tf.zeros((1, 14, 14, 3)))
    assert isinstance(encoder.stem, RotationPooledConv2D)
    assert encoder.stem.kernel.shape == (5, 5, 3, 12)  # a full kernel: 3 colours x 4 maps each
    restored = SiTEncoder.from_config(encoder.get_config())
    assert (restored.stem_kind, restored.stem_symmetry) == ("rotation_pooled", "chiral")
    with pytest.raises(ValueError, match=r"stem_kind must be one of graph, rotation_pooled. Received: 'p4'"):
        build_encoder("sit", (14, 14, 3), **{**SIT_SMALL, "stem_kind": "p4"})
    with pytest.raises(ValueError, match=r"must be None or 'chiral'. Received: stem_symmetry='rotation'"):
        build_encoder("sit", (14, 14, 3), **{**rotation_pooled, "stem_symmetry": "rotation"})


@pytest.mark.parametrize(
    "variant, head_activation, triangles, turn_pooling, border_value",
    # the SieT's output grid, the SiT's local grid; a SieT whose global block has no triangle sum
    # (configs/minigrid/lavacrossing_siet_rotation_pooled_lite.gin), left mirror-aware by its chiral stem;
    # the turns pooled by one attention weighting instead of each unit's max; the image's outside read
    # as MiniGrid's wall grey, and the input read relative to it (input_offset)
    [
        ("siet", "relu", None, "max", 0.0), ("sit", "relu", None, "max", 0.0),
        ("siet", "elu", None, "max", 0.0), ("siet", "relu", 0, "max", 0.0),
        ("siet", "relu", 0, "attention", 0.0), ("sit", "relu", None, "attention", 0.0),
        ("siet", "relu", 0, "max", WALL_VALUE),
    ],
)  # fmt: skip
def test_a_rotation_pooled_patch_readout_is_invariant_to_turns_in_training_and_not_to_flips(
    variant: str, head_activation: str, triangles: int | None, turn_pooling: str, border_value: float
) -> None:
    # configs/minigrid/lavacrossing_siet_rotation_pooled.gin: standardised class token and grid, one
    # block per level (the class token alone would be mirror-blind; the dense readout is not).
    config = {
        **SIT_SMALL, "pool_padding": 1, "stem_kernel_size": 5, "stem_symmetry": "chiral",
        "query_key_init_scale": 4.0, "head_standardization": True, "patch_readout": "rotation_pooled",
        "equivariant_dim": 8, "head_activation": head_activation, "triangles": triangles,
        "turn_pooling": turn_pooling, "border_value": border_value, "input_offset": border_value,
    }  # fmt: skip
    encoder = _perturbed_encoder(variant, shape=(14, 14, 3), **config)
    if turn_pooling == "attention":  # perturbed off zero: the turns' weights differ
        assert float(tf.reduce_min(tf.abs(encoder.turn_score.kernel))) > 0
    x = _images(3, shape=(14, 14, 3), dtype="float64")

    def grid(images: tf.Tensor) -> tf.Tensor:
        return encoder.symmetry_parts(images)["equivariant"]

    assert grid(x).shape == (3, 8, 8, 8)
    testing.assert_equivariant(grid, x, testing.ROTATIONS)
    encoder(x, training=True)  # the running statistics move off the identity
    assert float(encoder.grid_standardization.update_count) > 0
    assert encoder.declared_symmetry.summary == "C4 invariant (rotation-pooled patch readout)"
    testing.assert_invariant(encoder, x, testing.ROTATIONS)
    testing.assert_not_invariant(encoder, x, testing.REFLECTIONS, min_error=BROKEN["float64"])
    restored = SiTEncoder.from_config(encoder.get_config())
    assert restored.patch_readout == "rotation_pooled" and restored.grid_standardization is not None
    assert restored.head_activation == head_activation and restored.triangles == encoder.triangles
    assert restored.turn_pooling == turn_pooling and restored.border_value == border_value
    if triangles == 0:
        assert encoder.triangles == 0
    if head_activation == "elu":  # negative outputs: the head is not a ReLU
        assert float(tf.reduce_min(encoder(x))) < 0


@pytest.mark.parametrize("stem_kind", ["graph", "rotation_pooled"])
def test_border_value_is_what_the_stem_sees_beyond_the_edge(stem_kind: str) -> None:
    # A cropped MiniGrid wall ring: with border_value the wall grey, an all-wall image has no edge (every
    # stem output pixel the same), where zero padding (black, like the floor) marks the edge.
    config = {**SIT_SMALL, "stem_kernel_size": 5, "stem_symmetry": "chiral", "stem_kind": stem_kind}
    wall = tf.fill([1, 14, 14, 3], tf.constant(WALL_VALUE, tf.float64))

    def stem_spread(encoder: SiTEncoder) -> float:
        maps = encoder.stages(wall)["stem"]
        return float(tf.reduce_max(tf.reduce_max(maps, [1, 2]) - tf.reduce_min(maps, [1, 2])))

    walled = _perturbed_encoder("sit", shape=(14, 14, 3), border_value=WALL_VALUE, **config)
    assert walled.stages(wall)["stem"].shape == (1, 14, 14, 3)
    assert stem_spread(walled) < 1e-12
    zero_padded = _perturbed_encoder("sit", shape=(14, 14, 3), **config)
    zero_padded.set_weights(walled.get_weights())
    assert stem_spread(zero_padded) > 1e-3
    # Only the 2 pixels next to the edge (half the 5x5 kernel) see the padding.
    x = _images(2, shape=(14, 14, 3), dtype="float64")
    difference = np.abs(walled.stages(x)["stem"] - zero_padded.stages(x)["stem"])
    assert difference[:, 2:-2, 2:-2].max() == 0.0 and difference[:, :2].min(axis=(0, 1, 2)).max() > 0
    assert SiTEncoder.from_config(walled.get_config()).border_value == WALL_VALUE
    # input_offset shifts the padded input: every stem map moves by one constant, the edge's included.
    centred = _perturbed_encoder(
        "sit", shape=(14, 14, 3), border_value=WALL_VALUE, input_offset=0.4, **config
    )
    centred.set_weights(walled.get_weights())
    shift = (centred.stages(x)["stem"] - walled.stages(x)["stem"]).numpy()
    np.testing.assert_allclose(shift, np.broadcast_to(shift[:1, :1, :1], shift.shape), atol=1e-12)
    assert np.abs(shift).max() > 1e-3
    assert SiTEncoder.from_config(centred.get_config()).input_offset == 0.4
    for overrides, message in [
        ({"border_value": float("nan")}, "border_value must be a finite number. Received: border_value=nan"),
        ({"input_offset": float("inf")}, "input_offset must be a finite number. Received: input_offset=inf"),
        (
            {"input_offset": 0.5, "stem_kernel_size": 0},
            "input_offset shifts the stem's input: it needs stem_kernel_size > 0. "
            "Received: input_offset=0.5, stem_kernel_size=0",
        ),
        (
            {"border_value": 0.5, "stem_kernel_size": 0},
            "border_value pads the stem's input: it needs stem_kernel_size > 0. "
            "Received: border_value=0.5, stem_kernel_size=0",
        ),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            build_encoder("sit", (14, 14, 3), **{**SIT_SMALL, **overrides})


def test_the_head_activation_must_be_a_keras_activation() -> None:
    message = "head_activation must be a Keras activation name, e.g. 'relu' or 'elu'. Received: 'swoosh'"
    with pytest.raises(ValueError, match=re.escape(message)):
        build_encoder("sit", (14, 14, 3), **{**SIT_SMALL, "head_activation": "swoosh"})


@pytest.mark.parametrize(
    "variant, overrides, message",
    [
        ("siet", {"patch_readout": "flat"}, "patch_readout must be one of ordered, rotation_pooled"),
        ("sit", {"patch_readout": "rotation_pooled", "symmetry": "translation"}, "needs symmetry 'rotation'"),
        (
            "siet",
            {"patch_readout": "rotation_pooled", "symmetry": "flip_hv"},
            "needs symmetry 'rotation' (received 'flip_hv'); stem_symmetry 'rotation' or 'chiral'",
        ),
        ("siet", {"turn_pooling": "mean"}, "turn_pooling must be one of max, attention. Received: 'mean'"),
        (
            "siet",
            {"turn_pooling": "attention"},
            "turn_pooling='attention' pools the turns of patch_readout='rotation_pooled'. "
            "Received: patch_readout='ordered'",
        ),
    ],
)
def test_a_rotation_pooled_patch_readout_refuses_what_it_cannot_keep_invariant(
    variant: str, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build_encoder(variant, (14, 14, 3), **{**SIT_SMALL, **overrides})


def test_a_sit_without_local_blocks_embeds_each_pooled_pixel_as_a_global_token() -> None:
    encoder = build_encoder("sit", (14, 14, 3), **{**SIT_SMALL, "local_layers": 0, "global_layers": 2})
    assert encoder.patch_grid == (7, 7) and encoder.local_gsa is None
    stages = encoder.stages(tf.zeros((2, 14, 14, 3)))
    assert stages["local"].shape == (2, 7, 7, 32) and stages["token"].shape == (2, 32)
    assert SiTEncoder.from_config(encoder.get_config()).local_layers == 0
    with pytest.raises(ValueError, match=r"local_layers must be >= 0. Received: local_layers=-1"):
        build_encoder("sit", (14, 14, 3), **{**SIT_SMALL, "local_layers": -1})


def test_pool_padding_puts_the_pooling_windows_on_the_cell_corners() -> None:
    encoder = _perturbed_encoder("sit", shape=(14, 14, 3), **{**SIT_SMALL, "pool_padding": 1})
    assert encoder.patch_grid == (8, 8)  # (14 + 2) / 2 tokens a side
    assert SiTEncoder.from_config(encoder.get_config()).pool_padding == 1
    with pytest.raises(ValueError, match=r"pool_padding must be >= 0, and 0 unless pool_size >= 2"):
        build_encoder("sit", (14, 14, 3), **{**SIT_SMALL, "pool_size": 1, "pool_padding": 1})
    with pytest.raises(ValueError, match=r"height and width once padded by 2 are multiples of 2"):
        build_encoder("sit", (13, 13, 3), **{**SIT_SMALL, "pool_padding": 1})


def test_query_key_init_scale_multiplies_the_initial_queries_and_keys_only() -> None:
    chiral = {**SIT_SMALL, "pool_padding": 1, "stem_kernel_size": 5, "stem_symmetry": "chiral"}
    kernels = {}
    for scale in (1.0, 4.0):
        tf_keras.utils.set_random_seed(3)
        encoder = build_encoder("sit", (14, 14, 3), **chiral, query_key_init_scale=scale)
        encoder(tf.zeros((1, 14, 14, 3)))
        kernels[scale] = {
            v.name.split("/", 1)[1]: v.numpy() for v in encoder.weights if "qkv_kernel" in v.name
        }
    assert len(kernels[1.0]) == 2  # the local and the global block
    for name, plain in kernels[1.0].items():
        scaled, dim = kernels[4.0][name], plain.shape[0]
        np.testing.assert_allclose(scaled[:, : 2 * dim], 4.0 * plain[:, : 2 * dim], rtol=1e-6)
        np.testing.assert_array_equal(scaled[:, 2 * dim :], plain[:, 2 * dim :])
    restored = SiTEncoder.from_config(encoder.get_config())
    assert restored.query_key_init_scale == 4.0
    assert restored.global_gsa.blocks[0].attention.query_key_init_scale == 4.0
    x = _images(2, shape=(14, 14, 3), dtype="float64")
    sharp = _perturbed_encoder("sit", shape=(14, 14, 3), **chiral, query_key_init_scale=4.0)
    testing.assert_invariant(sharp, x, testing.ROTATIONS)
    testing.assert_not_invariant(sharp, x, testing.REFLECTIONS, min_error=BROKEN["float64"])


def test_head_standardization_centres_and_scales_the_heads_input_and_keeps_the_symmetry() -> None:
    chiral = {**SIT_SMALL, "pool_padding": 1, "stem_kernel_size": 5, "stem_symmetry": "chiral"}
    encoder = _perturbed_encoder("sit", shape=(14, 14, 3), **chiral, head_standardization=True)
    plain = _perturbed_encoder("sit", shape=(14, 14, 3), **chiral)
    x = _images(6, shape=(14, 14, 3), dtype="float64")
    for mine, theirs in zip(encoder.trainable_weights, plain.trainable_weights, strict=True):
        mine.assign(theirs)
    # Before a training batch the standardisation is the identity: the plain encoder's function.
    encoder.standardization.set_weights([np.zeros(32), np.zeros(32), np.zeros(())])
    np.testing.assert_allclose(encoder(x).numpy(), plain(x).numpy(), atol=1e-12)
    # A training call updates the statistics (graph dropout is on in training, so the batch's own
    # statistics are checked on the layer itself); an inference call does not.
    encoder(x, training=True)
    assert float(encoder.standardization.update_count) == 1.0
    encoder(x, training=False)
    assert float(encoder.standardization.update_count) == 1.0
    # Bias-corrected, one update gives exactly the batch's statistics: the head reads what varies
    # between the states, at unit scale.
    token = plain.stages(x)["token"]
    layer = encoder.standardization
    layer.set_weights([np.zeros(32), np.zeros(32), np.zeros(())])
    standardized = layer(token, training=True).numpy()
    variance = token.numpy().var(0)
    np.testing.assert_allclose(standardized.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(
        standardized.std(0), np.sqrt(variance / (variance + layer.epsilon)), rtol=1e-10
    )
    before = encoder(x).numpy()
    np.testing.assert_array_equal(encoder(x, training=False).numpy(), before)  # inference does not update
    assert np.abs(before - plain(x).numpy()).max() > 1e-3
    testing.assert_invariant(encoder, x[:2], testing.ROTATIONS)
    testing.assert_not_invariant(encoder, x[:2], testing.REFLECTIONS, min_error=BROKEN["float64"])
    restored = SiTEncoder.from_config(encoder.get_config())
    assert restored.head_standardization and restored.standardization is not None
    assert not encoder.standardization.trainable_weights


def test_query_key_norm_gives_every_query_and_key_unit_root_mean_square_and_keeps_the_values() -> None:
    layer = GraphSymmetricAttention((3, 3), num_heads=2, triangles=1, query_key_norm=True, dtype="float64")
    layer.build((None, 10, 8))
    # (3 D, B, T) projections, queries and keys at very different scales (as after a large update).
    qkv = testing.random_normal((24, 5, 10), 2, "float64") * tf.constant(
        np.geomspace(0.1, 1e3, 24)[:, None, None], tf.float64
    )
    normed = tf.reshape(layer._with_normalised_queries_and_keys(qkv), [3, 2, 4, 5, 10]).numpy()
    rms = np.sqrt(np.mean(normed[:2] ** 2, axis=2))  # over each head's 4 features
    assert rms.max() <= 1.0  # so |q_i . k_j| <= d = 4 for every score, whatever the weights
    assert rms.min() > 0.999  # the epsilon matters only for a query or key near zero
    np.testing.assert_array_equal(normed[2], tf.reshape(qkv, [3, 2, 4, 5, 10]).numpy()[2])


def test_query_key_norm_is_configured_in_every_gsa_layer_and_keeps_the_symmetry() -> None:
    chiral = {**SIT_SMALL, "pool_padding": 1, "stem_kernel_size": 5, "stem_symmetry": "chiral"}
    encoder = _perturbed_encoder("sit", shape=(14, 14, 3), **chiral, query_key_norm=True)
    restored = SiTEncoder.from_config(encoder.get_config())
    attention = [restored.local_gsa.blocks[0].attention, restored.global_gsa.blocks[0].attention]
    assert restored.query_key_norm and all(layer.query_key_norm for layer in attention)
    x = _images(2, shape=(14, 14, 3), dtype="float64")
    testing.assert_invariant(encoder, x, testing.ROTATIONS)
    testing.assert_not_invariant(encoder, x, testing.REFLECTIONS, min_error=BROKEN["float64"])
    plain = _perturbed_encoder("sit", shape=(14, 14, 3), **chiral)
    plain.set_weights(encoder.get_weights())
    assert np.abs(plain(x).numpy() - encoder(x).numpy()).max() > 1e-3  # the option changes the function


@pytest.mark.parametrize("variant", ["sit", "siet"])
def test_stages_are_what_the_encoder_computes(variant: str) -> None:
    encoder = _perturbed_encoder(variant, shape=(14, 14, 3), **{**SIT_SMALL, "pool_padding": 1})
    x = _images(3, shape=(14, 14, 3), dtype="uint8")
    stages = encoder.stages(x)
    expected = {"stem": (3, 14, 14, 3), "pooled": (3, 8, 8, 3), "local": (3, 8, 8, 32), "token": (3, 32)}
    if variant == "siet":
        expected["patches"] = (3, 8, 8, 32)
    assert {name: tuple(value.shape) for name, value in stages.items()} == expected
    parts = encoder.symmetry_parts(x)
    np.testing.assert_allclose(stages["token"], parts["invariant"], atol=1e-12)
    if variant == "sit":
        np.testing.assert_allclose(encoder.head(stages["token"]), encoder(x), atol=1e-12)


# -- inputs ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("variant", ["sit", "siet"])
def test_uint8_input_equals_float_input_over_255(encoders, variant: str, dtype: str) -> None:
    encoder = encoders(variant, dtype)
    pixels = _images(2, dtype="uint8")
    scaled = tf.cast(pixels, dtype) / 255.0
    tol = testing.tolerance(dtype)
    np.testing.assert_allclose(encoder(pixels).numpy(), encoder(scaled).numpy(), rtol=tol, atol=tol)
    for name, part in encoder.symmetry_parts(pixels).items():
        np.testing.assert_allclose(
            part.numpy(), encoder.symmetry_parts(scaled)[name].numpy(), rtol=tol, atol=tol
        )


# -- sizes (Table 2) -----------------------------------------------------------------
def _gsa_weights(dim: int, heads: int, grid: tuple[int, int], kernel: int, triangles: int) -> int:
    """One GSA block: LayerNorm, q/k/v projection, G_q/G_k/G_v tables, triangle tables."""
    norm = 2 * dim
    projection = dim * 3 * dim + 3 * dim
    graph = graphs.kernel_indices(kernel, "rotation")[1] * 3 * dim
    angles = triangles * graphs.triangle_indices(grid)[2] * heads
    return norm + projection + graph + angles


def _sit_weights(encoder: SiTEncoder) -> int:
    """Weights of a SiT encoder with a stem, written out layer by layer.

    Each block's graph reach and number of triangle sums are read from the
    block (the first local block may reach past its window, and a block whose
    triangle tables could not reach the output may leave them out); the sizes
    of every table follow from those and from ``sit_keras.graphs``.
    """
    h, w, c = encoder.image_shape
    dim, heads, window, pool = encoder.dim, encoder.num_heads, encoder.window, encoder.pool_size
    stem = graphs.kernel_indices(encoder.stem_kernel_size, "rotation")[1] * c + c
    local = dim + (c * dim + dim)  # class token, pixel embedding
    for block in encoder.local_gsa.blocks:
        gsa = block.attention
        reach = gsa.graph_kernel_size or graphs.full_kernel_size((window, window))
        local += _gsa_weights(dim, heads, (window, window), reach, gsa.triangles)
    grid = (h // pool // window, w // pool // window)
    global_ = dim + 2 * dim  # class token, final LayerNorm
    for block in encoder.global_gsa.blocks:
        global_ += _gsa_weights(dim, heads, grid, graphs.full_kernel_size(grid), block.attention.triangles)
    head_in, projection = 0, 0
    if encoder.uses_invariant:
        head_in += dim
    if encoder.uses_equivariant:
        projection = dim * encoder.equivariant_dim + encoder.equivariant_dim
        head_in += grid[0] * grid[1] * encoder.equivariant_dim
    head = head_in * encoder.output_dim + encoder.output_dim
    return stem + local + global_ + projection + head


@pytest.mark.parametrize("local_graph_kernel_size", [None, 5], ids=["window_graphs", "extended_graph"])
@pytest.mark.parametrize("variant", tuple(VARIANTS))
def test_parameter_count_at_64x64(variant: str, local_graph_kernel_size: int | None) -> None:
    encoder = build_encoder(variant, PAPER, local_graph_kernel_size=local_graph_kernel_size)
    count = encoder.count_params()
    print(f"{variant} (local_graph_kernel_size={local_graph_kernel_size}): {count} weights at 64x64x3")
    assert count == _sit_weights(encoder)
    first = encoder.local_gsa.blocks[0].attention
    assert first.graph_kernel_size == local_graph_kernel_size


def test_sit_parameter_count_is_the_papers_65_7k() -> None:
    # Table 1 caption / appendix F: "SiT - 65.7k".
    count = build_encoder("sit", PAPER).count_params()
    print(f"sit: {count} weights vs the paper's 65.7k ({count / 65_700 - 1:+.1%})")
    assert abs(count - 65_700) <= 0.10 * 65_700


@pytest.mark.parametrize("variant", tuple(VARIANTS))
def test_table_2_sizes(variant: str) -> None:
    encoder = build_encoder(variant, PAPER)
    # "2 local GSA, 2 global GSA", channels 64, hidden dim 64, one graph conv + max pool.
    assert (encoder.dim, encoder.output_dim) == (64, 64)
    assert (len(encoder.local_gsa.blocks), len(encoder.global_gsa.blocks)) == (2, 2)
    assert encoder.stem is not None and encoder.stem.kernel_size == 3 and encoder.pool_size == 2
    assert encoder.patch_grid == (8, 8)  # 64 / pool 2 / window 4
    assert encoder.local_gsa.dim == 64 and encoder.global_gsa.dim == 64


def test_presets_follow_the_paper() -> None:
    procgen, minigrid = PRESETS["procgen"], PRESETS["minigrid"]
    # Table 2: 2 local + 2 global GSA, channels 64, hidden dim 64, graph conv + max pool.
    assert (procgen["local_layers"], procgen["global_layers"]) == (2, 2)
    assert (procgen["dim"], procgen["output_dim"]) == (64, 64)
    assert procgen["stem_kernel_size"] > 0 and procgen["pool_size"] == 2
    # Appendix F.1: 8 heads, embedding 64, a 5x5 window around every pixel, 1 local + 2 global layers.
    assert (minigrid["num_heads"], minigrid["dim"]) == (8, 64)
    assert (minigrid["window"], minigrid["window_stride"]) == (5, 1)
    assert (minigrid["local_layers"], minigrid["global_layers"]) == (1, 2)


def test_sit_at_64x64_gives_64_features() -> None:
    encoder = build_encoder("sit", PAPER)
    assert encoder(_images(2, PAPER, "uint8")).shape == (2, 64)


# -- errors -----------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(30, 30, 3), (16, 20, 3), (15, 15, 3)])
def test_image_sizes_that_do_not_tile_say_which_sizes_are_valid(shape: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="multiples of 8") as info:
        build_encoder("sit", shape)
    assert f"Received: image_shape={shape}" in str(info.value)


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda: SiTEncoder(SMALL, variant="sat"),
            "Unknown SiT variant 'sat'. Expected one of: " + ", ".join(VARIANTS),
        ),
        (lambda: build_encoder("sat", SMALL), "Unknown encoder 'sat'"),
        (
            lambda: build_encoder("sit", SMALL, preset="atari"),
            "Unknown SiT preset 'atari'. Expected one of: procgen",
        ),
        (lambda: build_encoder("sit", SMALL, symmetry="hexagonal"), "Unknown graph symmetry 'hexagonal'"),
        (lambda: build_encoder("sit", SMALL, triangles=3), "triangles must be 0, 1 or 2"),
        (lambda: build_encoder("sit", SMALL, graph_dropout=1.0), "graph_dropout must be in [0, 1)"),
        (lambda: build_encoder("sit", SMALL, output_dim=0), "output_dim must be positive"),
        (
            lambda: build_encoder("sit", SMALL, query_key_init_scale=0.0),
            "query_key_init_scale must be positive. Received: query_key_init_scale=0.0",
        ),
        (lambda: build_encoder("sit", (16, 16)), "image_shape must be (H, W, C)"),
    ],
)
def test_invalid_options_raise(build, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.parametrize("bad", [(2, 18, 16, 3), (2, 16, 16, 4), (16, 16, 3)])
def test_wrong_image_shape_at_call_time_names_the_expected_shape(encoders, bad: tuple[int, ...]) -> None:
    encoder = encoders("siet", "float64")
    expected = re.escape("SiTEncoder expects images of shape (B, 16, 16, 3)")
    with pytest.raises(ValueError, match=expected):
        encoder(tf.zeros(bad))
    with pytest.raises(ValueError, match=expected):
        encoder.symmetry_parts(tf.zeros(bad))


# -- serialisation and training ------------------------------------------------------
def test_float64_config_round_trip_keeps_dtype_and_outputs() -> None:
    encoder = _perturbed_encoder("siet", dim=16, num_heads=2)
    config = encoder.get_config()
    assert config["dtype"] == "float64" and config["variant"] == "siet" and config["graph_dropout"] == DROPOUT
    clone = testing.config_round_trip(encoder)  # asserts plain JSON types
    clone.build((None, *SMALL))
    assert clone.get_config() == config
    assert {v.dtype for v in clone.variables} == {tf.float64}
    clone.set_weights(encoder.get_weights())
    x = _images(2, dtype="float64")
    np.testing.assert_array_equal(clone(x).numpy(), encoder(x).numpy())
    np.testing.assert_array_equal(
        clone.symmetry_parts(x)["equivariant"], encoder.symmetry_parts(x)["equivariant"]
    )


def test_saved_model_round_trip_keeps_outputs_and_symmetry(tmp_path: Path) -> None:
    encoder = _perturbed_encoder("siet", dtype="float32", dim=16, num_heads=2)
    x = _images(2)
    expected = encoder(x).numpy()
    encoder.save(tmp_path / "m")
    loaded = tf_keras.models.load_model(tmp_path / "m")
    assert type(loaded) is SiTEncoder  # revived from the registered class and its config
    assert loaded.get_config() == encoder.get_config()
    np.testing.assert_array_equal(loaded(x).numpy(), expected)
    np.testing.assert_array_equal(loaded(x, training=False).numpy(), expected)
    testing.assert_invariant(
        lambda z: loaded.symmetry_parts(z, training=True)["invariant"], _images(2, seed=3), testing.ROTATIONS
    )


def test_a_freshly_built_encoder_can_be_saved(tmp_path: Path) -> None:
    build_encoder("sit", SMALL, dim=16, num_heads=2).save(tmp_path / "m")


def test_hdf5_weights_round_trip(tmp_path: Path) -> None:
    encoder = _perturbed_encoder("sit", dtype="float32", dim=16, num_heads=2)
    encoder.save_weights(tmp_path / "w.h5")
    clone = build_encoder("sit", SMALL, dim=16, num_heads=2)
    clone.load_weights(tmp_path / "w.h5")
    x = _images(2)
    np.testing.assert_array_equal(clone(x).numpy(), encoder(x).numpy())


def _check_jit_train_step(encoder: SiTEncoder, batch: int = 2) -> None:
    assert_jit_train_step_updates_every_weight(encoder, _images(batch, encoder.image_shape, "uint8"))


PADDED_STEM = {"stem_kernel_size": 5, "border_value": WALL_VALUE, "input_offset": 0.2}


@pytest.mark.parametrize("stem", [{}, PADDED_STEM])
def test_jit_compiled_train_step_reaches_every_weight(stem: dict[str, float]) -> None:
    # the second: the stem pads with a constant and reads the input shifted ("valid" convolution)
    encoder = build_encoder("sit", SMALL, dim=16, num_heads=2, graph_dropout=DROPOUT, **stem)
    _check_jit_train_step(encoder)


def test_docstring_examples() -> None:
    result = doctest.testmod(sit, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# -- the paper's size (slow) ------------------------------------------------------------
@pytest.mark.large
@MODES
@DTYPES
@pytest.mark.parametrize("variant", tuple(VARIANTS))
def test_symmetries_at_64x64(variant: str, dtype: str, training: bool) -> None:
    encoder = _perturbed_encoder(variant, shape=PAPER, dtype=dtype)
    # float32 with perturbed weights: 64 windows and an 8x8 grid of softmaxes
    # round to ~1e-4 relative, above tolerance("float32") = 2e-5.
    tol = None if dtype == "float64" else 1e-3
    _check_variant_symmetries(encoder, _images(2, PAPER, dtype), training, tol)


@pytest.mark.large
@pytest.mark.parametrize("variant", tuple(VARIANTS))
def test_jit_compiled_train_step_at_64x64(variant: str) -> None:
    _check_jit_train_step(build_encoder(variant, PAPER, graph_dropout=DROPOUT))


@pytest.mark.large
@pytest.mark.parametrize("variant", tuple(VARIANTS))
def test_saved_model_round_trip_of_every_variant(variant: str, tmp_path: Path) -> None:
    encoder = _perturbed_encoder(variant, shape=PAPER, dtype="float32")
    x = _images(2, PAPER)
    expected = encoder(x).numpy()  # a call records the input signature that saving needs
    encoder.save(tmp_path / "m")
    loaded = tf_keras.models.load_model(tmp_path / "m")
    np.testing.assert_array_equal(loaded(x).numpy(), expected)
    for name, part in encoder.symmetry_parts(x).items():
        np.testing.assert_array_equal(loaded.symmetry_parts(x)[name].numpy(), part.numpy())
