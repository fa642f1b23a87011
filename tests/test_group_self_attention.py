"""Tests of lifting and group self-attention (GSA-Nets eq. 14 / 16, GE-ViT eq. 24-25) and group pooling.

What this file proves:

- ``LiftingSelfAttention`` is exactly equivariant, ``f(L_g x) = L_g f(x)``
  with the regular representation on its output, for every element of
  ``z2``, ``p4``, ``mz2`` and ``p4m``, with global and local attention
  (masked borders), on odd and even image sizes;
- ``GroupSelfAttention`` with GE-ViT's encoding is exactly equivariant for
  all four groups; with GSA-Nets' original encoding (GE-ViT eq. 21) it is
  for the abelian ``z2``, ``p4``, ``mz2`` and is *not* for ``p4m``;
- lifting + two group layers + ``GroupPooling`` is invariant to ~1e-16
  with GE-ViT's encoding, and not invariant for ``p4m`` with GSA-Nets';
- local layers are exactly translation equivariant away from the borders;
- for ``p8`` (finer than the grid) the layer is exact on its 90-degree
  elements and ``rotation_equivariance_error`` is finite at 45 degrees;
- the positional encoding is steerable: ``L_(g h)[rho](g a, g b) = L_h[rho](a, b)``;
- the layers survive config round trips, Keras (de)serialisation, model
  cloning and ``.keras`` save / load, compile with XLA to the same outputs,
  pass gradients to every weight, and reject bad inputs with a
  ``ValueError`` that says what was expected.

Every symmetry check runs in float64 on random inputs with *perturbed*
weights (``N(0, 0.3^2)`` noise on every weight, biases included).
"""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sit_keras import groups, testing
from sit_keras.layers import group_pooling as pooling_module
from sit_keras.layers import group_positional_encoding as encoding_module
from sit_keras.layers import group_self_attention as attention_module
from sit_keras.layers.group_pooling import GroupPooling, GroupSpatialMaxPooling
from sit_keras.layers.group_positional_encoding import GroupPositionalEncoding
from sit_keras.layers.group_self_attention import GroupSelfAttention, LiftingSelfAttention

# conftest.py has already imported sit_keras, so TensorFlow's tf.keras is Keras 2 here.

DTYPE = "float64"
TOL = testing.tolerance(DTYPE)
BROKEN = 1e-6  # smallest relative error of a broken symmetry: 10^4 times TOL
GRID_EXACT = ("z2", "p4", "mz2", "p4m")
NEIGHBOURHOODS = pytest.mark.parametrize("neighbourhood", [None, 3], ids=["global", "local3"])


pytestmark = pytest.mark.usefixtures("fixed_seed")  # tests/conftest.py


# -- helpers ---------------------------------------------------------------------------------
def _lifting(group: str, channels: int = 3, scale: float = 0.3, **options: Any) -> LiftingSelfAttention:
    options = {"output_dim": 4, "num_heads": 2, "key_dim": 3, "dtype": DTYPE, **options}
    layer = LiftingSelfAttention(group, **options)
    layer.build((None, 5, 5, channels))
    testing.perturb_weights(layer, scale)
    return layer


def _group_layer(
    group: str, channels: int = 4, seed: int = 0, scale: float = 0.3, **options: Any
) -> GroupSelfAttention:
    options = {"output_dim": 4, "num_heads": 2, "key_dim": 3, "dtype": DTYPE, **options}
    layer = GroupSelfAttention(group, **options)
    layer.build((None, 5, 5, groups.get_group(group).order, channels))
    testing.perturb_weights(layer, scale, seed)
    return layer


def _lifting_actions(group: str) -> dict[str, tuple[testing.Transform, testing.Transform]]:
    """``{g: (L_g on images, L_g on signals over the group)}``."""
    images, signals = groups.group_actions(group, "image"), groups.group_actions(group, "group")
    return {name: (images[name], signals[name]) for name in images}


def _stack(group: str, neighbourhood: int | None, positional_encoding: str = "ge_vit", scale: float = 0.3):
    """Lifting, two group layers and GroupPooling, with Swish in between (perturbed weights)."""
    options = {"neighbourhood": neighbourhood, "positional_encoding": positional_encoding, "scale": scale}
    lift = _lifting(group, **options)
    first = _group_layer(group, seed=1, **options)
    second = _group_layer(group, seed=2, **options)
    pool = GroupPooling(dtype=DTYPE)

    def f(x: tf.Tensor) -> tf.Tensor:
        return pool(second(tf.nn.silu(first(tf.nn.silu(lift(x))))))

    return f


def _invariance_errors(f, x: tf.Tensor, group: str) -> dict[str, float]:
    return {name: testing.invariance_error(f, x, g) for name, g in groups.group_actions(group).items()}


# -- exact equivariance ------------------------------------------------------------------------
@NEIGHBOURHOODS
@pytest.mark.parametrize("group", GRID_EXACT)
@pytest.mark.parametrize("side", [4, 5])
def test_lifting_is_equivariant_with_the_regular_representation(
    group: str, neighbourhood: int | None, side: int
) -> None:
    layer = _lifting(group, neighbourhood=neighbourhood)
    x = testing.random_normal((2, side, side, 3))
    assert layer(x).shape == (2, side, side, groups.get_group(group).order, 4)
    testing.assert_equivariant(layer, x, _lifting_actions(group))


@NEIGHBOURHOODS
@pytest.mark.parametrize("group", GRID_EXACT)
def test_group_self_attention_with_ge_vit_encoding_is_equivariant(
    group: str, neighbourhood: int | None
) -> None:
    layer = _group_layer(group, neighbourhood=neighbourhood, output_dim=5)
    y = testing.random_normal((2, 5, 5, groups.get_group(group).order, 4))
    assert layer(y).shape == (2, 5, 5, groups.get_group(group).order, 5)
    testing.assert_equivariant(layer, y, groups.group_actions(group, "group"))


@NEIGHBOURHOODS
@pytest.mark.parametrize("group", GRID_EXACT)
def test_gsa_nets_encoding_is_equivariant_exactly_for_the_abelian_groups(
    group: str, neighbourhood: int | None
) -> None:
    # A strong perturbation (scale 1): the size of a broken symmetry grows with the group embedding.
    layer = _group_layer(group, neighbourhood=neighbourhood, positional_encoding="gsa_nets", scale=1.0)
    y = testing.random_normal((2, 5, 5, groups.get_group(group).order, 4))
    actions = groups.group_actions(group, "group")
    if group != "p4m":
        testing.assert_equivariant(layer, y, actions)
        return
    errors = {name: testing.equivariance_error(layer, y, g) for name, g in actions.items()}
    # The centre {e, r^2} of D4 commutes with everything; every other element breaks eq. 21.
    assert errors["r0"] <= TOL and errors["r2"] <= TOL
    broken = {name: e for name, e in errors.items() if name not in ("r0", "r2")}
    assert min(broken.values()) > BROKEN, errors


@NEIGHBOURHOODS
@pytest.mark.parametrize("group", GRID_EXACT)
def test_stacked_layers_with_pooling_are_invariant(group: str, neighbourhood: int | None) -> None:
    f = _stack(group, neighbourhood)
    x = testing.random_normal((2, 5, 5, 3))
    assert f(x).shape == (2, 4)
    testing.assert_invariant(f, x, groups.group_actions(group))


@NEIGHBOURHOODS
def test_stacked_layers_with_gsa_nets_encoding_are_not_p4m_invariant(neighbourhood: int | None) -> None:
    x = testing.random_normal((2, 5, 5, 3))
    # p4 is abelian: eq. 21 is exact there.
    testing.assert_invariant(_stack("p4", neighbourhood, "gsa_nets", 1.0), x, groups.group_actions("p4"))
    # Scale-1 perturbations: with 0.3 the pooled error can be as small as 1e-6 (still 10^4 x TOL).
    f = _stack("p4m", neighbourhood, "gsa_nets", 1.0)
    errors = _invariance_errors(f, x, "p4m")
    # Invariant under the centre {e, r^2} of D4 only.
    assert errors["r0"] <= TOL and errors["r2"] <= TOL, errors
    central = ("r0", "r2")
    testing.assert_not_invariant(
        f, x, {name: g for name, g in groups.group_actions("p4m").items() if name not in central}, BROKEN
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=4)
@given(
    batch=st.integers(min_value=1, max_value=3),
    side=st.integers(min_value=1, max_value=6),
    neighbourhood=st.sampled_from([None, 1, 3, 5]),
)
def test_p4m_stack_is_invariant_for_any_batch_image_size_and_neighbourhood(
    batch: int, side: int, neighbourhood: int | None
) -> None:
    f = _stack("p4m", neighbourhood)
    x = testing.random_normal((batch, side, side, 3), seed=batch + 7 * side)
    assert f(x).shape == (batch, 4)
    testing.assert_invariant(f, x, groups.group_actions("p4m"))


def test_mirror_equivariance_holds_on_non_square_images() -> None:
    lift = _lifting("mz2", neighbourhood=3)
    layer = _group_layer("mz2", neighbourhood=3)
    x = testing.random_normal((2, 4, 7, 3))
    testing.assert_equivariant(lambda t: layer(lift(t)), x, _lifting_actions("mz2"))


@pytest.mark.parametrize("group", ["z2", "p4"])
def test_local_layers_are_translation_equivariant_away_from_the_borders(group: str) -> None:
    lift = _lifting(group, neighbourhood=3)
    layer = _group_layer(group, neighbourhood=3)
    canvas = testing.random_normal((2, 11, 11, 3))
    shift = (1, 2)
    original = layer(lift(canvas[:, :9, :9]))
    shifted = layer(lift(canvas[:, shift[0] : shift[0] + 9, shift[1] : shift[1] + 9]))
    # Two 3x3 layers see 2 pixels away: compare pixels whose 5x5 reach is inside both crops.
    np.testing.assert_allclose(shifted[:, 2:5, 2:5], original[:, 3:6, 4:7], rtol=0, atol=1e-13)
    # At the border the translated content meets the edge: not equivariant there.
    assert np.max(np.abs(shifted[:, 0, 0] - original[:, 1, 2])) > BROKEN


# -- rotations finer than the grid -----------------------------------------------------------------
def test_rotation_equivariance_error_is_zero_for_p4_at_quarter_turns() -> None:
    layer = _lifting("p4", channels=1, neighbourhood=3)
    images = testing.random_normal((2, 7, 7, 1))
    errors = groups.rotation_equivariance_error(layer, images, [90.0, 180.0, 270.0])
    assert max(errors.values()) <= TOL
    pooled = groups.rotation_equivariance_error(lambda t: GroupPooling(dtype=DTYPE)(layer(t)), images, [90.0])
    assert pooled[90.0] <= TOL


def test_p8_is_exact_on_its_grid_elements_and_approximate_in_between() -> None:
    layer = _lifting("p8", channels=1, neighbourhood=3)
    images = testing.random_normal((2, 9, 9, 1))
    errors = groups.rotation_equivariance_error(layer, images, [45.0, 90.0, 180.0])
    assert errors[90.0] <= 1e-12 and errors[180.0] <= 1e-12  # r^2, r^4: integer matrices up to rounding
    assert np.isfinite(errors[45.0]) and errors[45.0] > BROKEN  # bilinear resampling is not exact
    with pytest.raises(ValueError, match="30.0 degrees is not a rotation of 'p8'"):
        groups.rotation_equivariance_error(layer, images, [30.0])


# -- the positional encoding ---------------------------------------------------------------------
@pytest.mark.parametrize("group", GRID_EXACT)
def test_positional_encoding_is_steerable(group: str) -> None:
    encoding = GroupPositionalEncoding(group, num_heads=2, key_dim=3, dtype=DTYPE)
    offsets = groups.window_offsets(5)
    encoding(tf.constant(offsets / 2.0))  # builds
    testing.perturb_weights(encoding)
    spatial = encoding(tf.constant(offsets / 2.0)).numpy()
    table = encoding.group_encoding().numpy()
    g_group = groups.get_group(group)
    for g in range(g_group.order):
        moved = g_group.cayley[g]
        perm = g_group.offset_permutation(g, offsets)
        # L_(g h)[rho] at (g a, g b) equals L_h[rho] at (a, b).
        np.testing.assert_allclose(spatial[moved][:, perm], spatial, rtol=0, atol=1e-15)
        np.testing.assert_array_equal(table[np.ix_(moved, moved, moved)], table)
    assert spatial.shape == (g_group.order, 25, 2, 3)


def test_finer_rotations_turn_positions_without_interpolation() -> None:
    encoding = GroupPositionalEncoding("p8", num_heads=1, key_dim=2, lifting=True, dtype=DTYPE)
    unit = np.array([[0.0, 1.0]])
    turned = groups.get_group("p8").act(1, unit)  # 45 degrees
    # rho seen from r at the turned offset is rho seen from e at the original one.
    np.testing.assert_allclose(encoding(tf.constant(turned))[1], encoding(tf.constant(unit))[0], atol=1e-13)
    with pytest.raises(ValueError, match="has no group part"):
        encoding.group_encoding()


# -- pooling ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("group", GRID_EXACT)
@pytest.mark.parametrize("side", [4, 5, 6, 7])
def test_group_pooling_is_invariant_and_spatial_pooling_equivariant(group: str, side: int) -> None:
    y = testing.random_normal((2, side, side, groups.get_group(group).order, 3))
    pooled = GroupPooling(dtype=DTYPE)
    assert pooled(y).shape == (2, 3)
    testing.assert_invariant(pooled, y, groups.group_actions(group, "group"))
    spatial = GroupSpatialMaxPooling(dtype=DTYPE)
    assert spatial(y).shape == (2, (side + 1) // 2, (side + 1) // 2, groups.get_group(group).order, 3)
    testing.assert_equivariant(spatial, y, groups.group_actions(group, "group"))
    np.testing.assert_array_equal(
        pooled(y), tf.reduce_mean(tf.reduce_max(y, axis=3), axis=[1, 2])
    )  # max over the group, then mean over space


def test_spatial_pooling_values() -> None:
    y = tf.reshape(tf.range(49, dtype=tf.float64), [1, 7, 7, 1, 1])
    # Odd side: 3x3 windows centred on rows / columns 0, 2, 4, 6.
    np.testing.assert_array_equal(
        GroupSpatialMaxPooling(dtype=DTYPE)(y)[0, :, :, 0, 0],
        [[8, 10, 12, 13], [22, 24, 26, 27], [36, 38, 40, 41], [43, 45, 47, 48]],
    )
    even = tf.reshape(tf.range(16, dtype=tf.float64), [1, 4, 4, 1, 1])
    np.testing.assert_array_equal(
        GroupSpatialMaxPooling(dtype=DTYPE)(even)[0, :, :, 0, 0], [[5, 7], [13, 15]]
    )


# -- Keras citizenship --------------------------------------------------------------------------------
LAYERS = {
    "lifting_global": (LiftingSelfAttention, {"group": "p4m", "neighbourhood": None}, (2, 5, 5, 3)),
    "lifting_local": (LiftingSelfAttention, {"group": "p4", "neighbourhood": 3}, (2, 5, 5, 3)),
    "group_global": (GroupSelfAttention, {"group": "p4", "neighbourhood": None}, (2, 4, 4, 4, 3)),
    "group_local_gsa_nets": (
        GroupSelfAttention,
        {"group": "p4m", "neighbourhood": 3, "positional_encoding": "gsa_nets", "attention_dropout": 0.1},
        (2, 4, 4, 8, 3),
    ),
}


def _built(case: str) -> tuple[tf_keras.layers.Layer, tf.Tensor]:
    cls, options, shape = LAYERS[case]
    layer = cls(output_dim=4, num_heads=2, key_dim=3, dtype=DTYPE, name=case, **options)
    layer.build(shape)
    testing.perturb_weights(layer)
    return layer, testing.random_normal(shape)


@pytest.mark.parametrize("case", LAYERS)
def test_config_round_trip_and_serialisation(case: str) -> None:
    layer, x = _built(case)
    config = layer.get_config()
    assert config["group"] == LAYERS[case][1]["group"] and config["key_dim"] == 3
    for clone in (testing.config_round_trip(layer), testing.serialization_round_trip(layer)):
        assert type(clone) is type(layer) and clone.get_config() == config
        clone.build(x.shape)
        clone.set_weights(layer.get_weights())
        np.testing.assert_array_equal(clone(x), layer(x))


def _model(group: str, neighbourhood: int | None) -> tf_keras.Model:
    images = tf_keras.Input((5, 5, 2), dtype=DTYPE)
    lifted = LiftingSelfAttention(group, 4, num_heads=2, neighbourhood=neighbourhood, dtype=DTYPE)(images)
    grouped = GroupSelfAttention(group, 3, num_heads=2, neighbourhood=neighbourhood, dtype=DTYPE)(lifted)
    pooled = GroupSpatialMaxPooling(dtype=DTYPE)(grouped)
    return tf_keras.Model(images, GroupPooling(dtype=DTYPE)(pooled))


def test_a_model_of_the_layers_clones_saves_and_loads(tmp_path: Path) -> None:
    model = _model("p4m", 3)
    testing.perturb_weights(model)
    x = testing.random_normal((3, 5, 5, 2))
    clone = tf_keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(clone(x), model(x))
    model.save(tmp_path / "model.keras")
    loaded = tf_keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(loaded(x), model(x))
    testing.assert_invariant(loaded, x, groups.group_actions("p4m"))


@pytest.mark.parametrize("case", LAYERS)
def test_xla_matches_eager(case: str) -> None:
    layer, x = _built(case)

    @tf.function(jit_compile=True)
    def compiled(inputs: tf.Tensor) -> tf.Tensor:
        return layer(inputs)

    np.testing.assert_allclose(compiled(x), layer(x), rtol=0, atol=1e-12)


def test_float32_xla_and_gradients_reach_every_weight() -> None:
    lift = LiftingSelfAttention("p4m", 4, num_heads=2, neighbourhood=3)
    layer = GroupSelfAttention("p4m", 3, num_heads=2, neighbourhood=3)
    x = tf.random.normal((2, 5, 5, 2))
    layer(lift(x))
    for lay in (lift, layer):
        testing.perturb_weights(lay)

    @tf.function(jit_compile=True)
    def loss_and_grads(t):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(lift(t))))
        return loss, tape.gradient(loss, lift.trainable_variables + layer.trainable_variables)

    loss, grads = loss_and_grads(x)
    eager = tf.reduce_sum(tf.square(layer(lift(x))))
    np.testing.assert_allclose(loss, eager, rtol=1e-5)
    names = [v.name for v in lift.trainable_variables + layer.trainable_variables]
    assert any("group_embedding" in n for n in names)
    for name, grad in zip(names, grads, strict=True):
        assert grad is not None and float(tf.reduce_max(tf.abs(grad))) > 0.0, name


def test_attention_dropout_acts_only_in_training() -> None:
    layer, x = _built("group_local_gsa_nets")
    first, second = layer(x, training=True), layer(x, training=True)
    assert np.max(np.abs(first - second)) > 1e-6
    np.testing.assert_array_equal(layer(x), layer(x, training=False))


# -- errors ---------------------------------------------------------------------------------------------
def test_bad_inputs_and_options_raise_clear_errors() -> None:
    lift = LiftingSelfAttention("p4", 4)
    with pytest.raises(ValueError, match=r"expects images \(B, H, W, C\).*Received: shape=\(2, 5, 5, 4, 3\)"):
        lift(tf.zeros((2, 5, 5, 4, 3)))
    layer = GroupSelfAttention("p4", 4)
    with pytest.raises(ValueError, match=r"expects signals on 'p4' \(B, H, W, 4, C\).*\(2, 5, 5, 3\)"):
        layer(tf.zeros((2, 5, 5, 3)))
    with pytest.raises(ValueError, match=r"\(B, H, W, 4, C\).*Received: shape=\(2, 5, 5, 8, 3\)"):
        layer(tf.zeros((2, 5, 5, 8, 3)))
    layer(tf.zeros((2, 5, 5, 4, 3)))
    with pytest.raises(ValueError, match=r"\(B, H, W, 4, 3\).*Received: shape=\(2, 5, 5, 4, 6\)"):
        layer(tf.zeros((2, 5, 5, 4, 6)))  # channel mismatch after build
    with pytest.raises(ValueError, match="known H, W"):
        LiftingSelfAttention("p4", 4)(tf_keras.Input((None, None, 3)))
    with pytest.raises(ValueError, match="Unknown group 'p6'. Expected one of: z2, p4"):
        GroupSelfAttention("p6", 4)
    with pytest.raises(ValueError, match="positional_encoding must be one of"):
        GroupSelfAttention("p4", 4, positional_encoding="sinusoidal")
    with pytest.raises(ValueError, match="positive odd integer. Received: 4"):
        LiftingSelfAttention("p4", 4, neighbourhood=4)
    with pytest.raises(ValueError, match="output_dim and num_heads must be positive"):
        LiftingSelfAttention("p4", 4, num_heads=0)
    with pytest.raises(ValueError, match=r"attention_dropout must be in \[0, 1\)"):
        LiftingSelfAttention("p4", 4, attention_dropout=1.0)
    with pytest.raises(ValueError, match=r"GroupPooling expects signals on a group \(B, H, W, \|H\|, D\)"):
        GroupPooling()(tf.zeros((2, 3, 3, 4)))
    with pytest.raises(ValueError, match="with known H, W"):
        GroupSpatialMaxPooling()(tf_keras.Input((None, 4, 4, 2)))
    with pytest.raises(ValueError, match=r"expects \(K, 2\) offsets"):
        GroupPositionalEncoding("p4", 1, 2)(tf.zeros((3, 3)))


@pytest.mark.parametrize("module", [attention_module, encoding_module, pooling_module])
def test_docstring_examples_run(module) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
