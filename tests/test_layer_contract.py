"""One contract for every public layer, model and encoder (as KerasHub's ``run_layer_test``).

Each case below is a tiny configuration of one module; every case is checked for

- ``get_config`` / ``from_config`` through JSON: same config, and with the same
  weights the same outputs;
- Keras serialisation (``serialize_keras_object`` / ``deserialize_keras_object``);
- a call inside ``tf.function(jit_compile=True)`` that matches the eager call;
- mixed precision: under ``mixed_bfloat16`` it builds, runs, and returns its
  outputs in the documented dtypes (the compute dtype; AttentionNeuron state
  in float32);
- a bad input shape: a ``ValueError`` that names the expected shape;
- its *declared* symmetry (``declared_symmetry``, ``sit_keras.symmetry``), on
  perturbed weights and random float64 inputs: every declared part is
  invariant or equivariant under every declared element, with the declared
  action on the output, and every deliberately broken element changes the
  output (``sit_keras.testing.declared_actions``);
- and, for the single-input, single-output layers, tf_keras' own
  ``layer_test`` harness.

The cases are listed by name: ``test_every_public_module_has_a_case`` fails when
``sit_keras.layers.__all__``, ``sit_keras.models.__all__`` or the encoder
registry gains a module without one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_keras.src.mixed_precision.policy import policy_scope
from tf_keras.src.testing_infra import test_utils

from sit_keras import layers, models, testing
from sit_keras.models import registry
from sit_keras.symmetry import NONE, SIT, SIT_MIRROR_BLIND, Symmetry

BATCH = 2


@dataclass(frozen=True)
class Case:
    """A tiny configuration of one module and how to call it.

    Args:
      make: ``dtype -> module`` (not built).
      input_shape: one input without the batch axis.
      apply: ``(module, x) -> {part: tensor}``: the outputs by the names of
        ``Symmetry.parts`` (``"output"`` for a single output).
      bad_shape: an input shape (with batch) the module must refuse.
      expected: a piece of the ``ValueError`` that names the expected shape.
      grid: ``(grid_shape, class_token)`` of grid-token inputs.
      mixed_dtypes: parts whose mixed-precision dtype is not the compute dtype.
      keras_kwargs: constructor arguments for ``test_utils.layer_test``, or
        None where that harness does not apply (several inputs or outputs,
        no batch axis).
      input_kind: ``"normal"`` or ``"offsets"`` (small integers, no batch axis in the module).
    """

    make: Callable[[str], Any]
    input_shape: tuple[int, ...]
    bad_shape: tuple[int, ...]
    expected: str
    apply: Callable[[Any, tf.Tensor], dict[str, tf.Tensor]] = lambda module, x: {"output": module(x)}
    grid: tuple[tuple[int, int], bool] | None = None
    mixed_dtypes: dict[str, str] = field(default_factory=dict)
    keras_kwargs: dict[str, Any] | None = None
    input_kind: str = "normal"


def _layer(cls: type, **kwargs: Any) -> Callable[[str], Any]:
    return lambda dtype: cls(dtype=dtype, **kwargs)


def _encoder(name: str, shape: tuple[int, int, int], **overrides: Any) -> Callable[[str], Any]:
    entry = registry.get_entry(name)
    return lambda dtype: entry.load()(image_shape=shape, dtype=dtype, **{**entry.defaults, **overrides})


def _with_parts(encoder: Any, x: tf.Tensor) -> dict[str, tf.Tensor]:
    return {"output": encoder(x), **encoder.symmetry_parts(x)}


def _previous_action(x: tf.Tensor, action_dim: int = 2) -> tf.Tensor:
    # One fixed action per example; the symmetry checks stack [x, g x], so it depends on the batch only.
    return 0.5 * tf.ones((tf.shape(x)[0], action_dim), x.dtype)


def _neuron(module: Any, x: tf.Tensor) -> dict[str, tf.Tensor]:
    code, (hidden, cell) = module(x, _previous_action(x))
    return {"code": code, "state": tf.concat([hidden, cell], axis=-1)}


def _global(module: Any, x: tf.Tensor) -> dict[str, tf.Tensor]:
    token, patches = module(x)
    return {"token": token, "patches": patches}


def _offsets(module: Any, x: tf.Tensor) -> dict[str, tf.Tensor]:
    # The encoding has no batch axis: one call per example, stacked.
    return {"output": tf.stack([module(x[b]) for b in range(int(x.shape[0]))])}


GSA = {"num_heads": 2, "triangles": 1, "seed": 0}
SIT_SMALL = {"dim": 8, "num_heads": 2, "output_dim": 8, "equivariant_dim": 2, "seed": 0}
IMAGE = (16, 16, 3)
SENSOR = {"action_dim": 2, "num_queries": 4, "query_dim": 4, "hidden_size": 3, "projection_dim": 4}
ENCODER_BAD = "(B, 16, 16, 3)"

CASES: dict[str, Case] = {
    # -- SiT layers (SiT paper, section 3-4) ----------------------------------------------------
    "GraphConv2D": Case(
        _layer(layers.GraphConv2D, kernel_size=3, seed=0), (5, 5, 2), (BATCH, 5, 5), "(B, H, W, 2)",
        keras_kwargs={"kernel_size": 3},
    ),
    "GraphConv2D_chiral": Case(
        _layer(layers.GraphConv2D, kernel_size=5, symmetry="chiral", seed=0), (7, 7, 2), (BATCH, 7, 7),
        "(B, H, W, 2)",
    ),
    "GraphConv2D_chiral_stem": Case(  # the chiral stem's depth multiplier: the dense form (uses_dense_form)
        _layer(layers.GraphConv2D, kernel_size=5, symmetry="chiral", depth_multiplier=2, seed=0), (7, 7, 3),
        (BATCH, 7, 7), "(B, H, W, 3)",
    ),
    "RotationPooledConv2D": Case(  # C4-equivariant maps, flips broken (a free kernel is chiral)
        _layer(layers.RotationPooledConv2D, filters=3, kernel_size=3, seed=0), (7, 7, 2), (BATCH, 7, 7),
        "(B, H, W, 2)", keras_kwargs={"filters": 3, "kernel_size": 3},
    ),
    "GraphSymmetricAttention": Case(
        _layer(layers.GraphSymmetricAttention, grid_shape=(3, 3), **GSA), (10, 4), (BATCH, 9, 4),
        "(B, 10, 4)", grid=((3, 3), True), keras_kwargs={"grid_shape": (3, 3), **GSA},
    ),
    "GraphSymmetricAttention_dihedral": Case(
        _layer(layers.GraphSymmetricAttention, grid_shape=(3, 3), num_heads=2, class_token=False,
               score_graph=True, seed=0),
        (9, 4), (BATCH, 10, 4), "(B, 9, 4)", grid=((3, 3), False),
    ),
    "GraphSymmetricAttention_flip_hv": Case(  # keeps {e, rot180}; the triangle sums break both mirrors
        _layer(layers.GraphSymmetricAttention, grid_shape=(3, 3), symmetry="flip_hv", **GSA), (10, 4),
        (BATCH, 10, 5), "(B, 10, 4)", grid=((3, 3), True),
    ),
    "GraphSymmetricAttention_query_key_norm": Case(  # QK normalisation: a per-token map, same symmetry
        _layer(layers.GraphSymmetricAttention, grid_shape=(3, 3), query_key_norm=True, **GSA), (10, 4),
        (BATCH, 9, 4), "(B, 10, 4)", grid=((3, 3), True),
    ),
    "GraphSymmetricAttentionBlock": Case(
        _layer(layers.GraphSymmetricAttentionBlock, grid_shape=(3, 3), mlp_dim=4, **GSA), (10, 4),
        (BATCH, 9, 4), "(B, 10, 4)", grid=((3, 3), True), keras_kwargs={"grid_shape": (3, 3), **GSA},
    ),
    "LocalGSA": Case(
        _layer(layers.LocalGSA, window=2, dim=4, num_layers=2, **GSA), (4, 4, 2), (BATCH, 4, 4),
        "(B, 4, 4, 2)", keras_kwargs={"window": 2, "dim": 4, **GSA},
    ),
    "LocalGSA_one_block": Case(  # mirror-blind: the one block's triangle sums do not reach the tokens
        _layer(layers.LocalGSA, window=2, dim=4, num_layers=1, **GSA), (4, 4, 2), (BATCH, 4, 4),
        "(B, 4, 4, 2)",
    ),
    "GlobalGSA_one_block_token": Case(  # mirror-blind, as a SiT with one global block (Listing 3)
        _layer(layers.GlobalGSA, grid_shape=(3, 3), num_layers=1, output_patches=False, **GSA), (3, 3, 4),
        (BATCH, 3, 2, 4), "(B, 3, 3, 4)",
    ),
    "GlobalGSA": Case(
        _layer(layers.GlobalGSA, grid_shape=(3, 3), num_layers=2, **GSA), (3, 3, 4), (BATCH, 2, 3, 4),
        "(B, 3, 3, 4)", apply=_global,
    ),
    "GlobalGSA_token": Case(
        _layer(layers.GlobalGSA, grid_shape=(3, 3), num_layers=2, output_patches=False, **GSA), (3, 3, 4),
        (BATCH, 3, 2, 4), "(B, 3, 3, 4)",
        keras_kwargs={"grid_shape": (3, 3), "output_patches": False, **GSA},
    ),
    # -- group self-attention (GSA-Nets, GE-ViT) ---------------------------------------------
    "LiftingSelfAttention": Case(
        _layer(layers.LiftingSelfAttention, group="p4m", output_dim=4, num_heads=2, key_dim=2,
               neighbourhood=3),
        (4, 4, 2), (BATCH, 4, 4), "(B, H, W, 2)",
        keras_kwargs={"group": "p4m", "output_dim": 4, "num_heads": 2, "neighbourhood": 3},
    ),
    "GroupSelfAttention": Case(
        _layer(layers.GroupSelfAttention, group="p4m", output_dim=3, num_heads=2, key_dim=2, neighbourhood=3),
        (4, 4, 8, 3), (BATCH, 4, 4, 4, 3), "(B, H, W, 8, 3)",
        keras_kwargs={"group": "p4m", "output_dim": 3, "num_heads": 2, "neighbourhood": 3},
    ),
    "GroupSelfAttention_gsa_nets": Case(
        _layer(layers.GroupSelfAttention, group="p4m", output_dim=3, num_heads=2, key_dim=2,
               positional_encoding="gsa_nets"),
        (3, 3, 8, 3), (BATCH, 3, 3, 4, 3), "(B, H, W, 8, 3)",
    ),
    "GroupPositionalEncoding": Case(
        _layer(layers.GroupPositionalEncoding, group="p4", num_heads=2, key_dim=3), (5, 2), (BATCH, 5, 3),
        "(K, 2)", apply=_offsets, input_kind="offsets",
    ),
    "GroupPooling": Case(
        _layer(layers.GroupPooling), (3, 3, 8, 2), (BATCH, 3, 3, 2), "(B, H, W, |H|, D)",
        keras_kwargs={},
    ),
    "GroupSpatialMaxPooling": Case(
        _layer(layers.GroupSpatialMaxPooling), (4, 4, 8, 2), (BATCH, 4, 4, 2), "(B, H, W, |H|, D)",
        keras_kwargs={},
    ),
    # -- AttentionNeuron (Tang & Ha) ---------------------------------------------------------
    "AttentionNeuron": Case(
        _layer(layers.AttentionNeuron, **SENSOR), (5,), (BATCH, 5, 2, 1), "(B, N)", apply=_neuron,
        mixed_dtypes={"state": "float32"},
    ),
    "VisionAttentionNeuron": Case(
        _layer(layers.VisionAttentionNeuron, action_dim=2, num_queries=4, query_dim=4, projection_dim=4,
               value_dim=4, patch_size=2, num_frames=2),
        (5, 2, 2, 2), (BATCH, 5, 2, 2), "(B, N, 2, 2, 2)",
        apply=lambda module, x: {"output": module(x, _previous_action(x))},
    ),
    # -- models --------------------------------------------------------------------------
    "SensorSetEncoder": Case(
        _layer(models.SensorSetEncoder, num_features=2, output_dim=4, **SENSOR), (5, 2), (BATCH, 5, 3),
        "(B, N, 2)", apply=_neuron, mixed_dtypes={"state": "float32"},
    ),
    "GroupTransformer": Case(
        lambda dtype: models.GroupTransformer(
            (5, 5, 1), 3, "p4", channels=(4,), block_sizes=(1,), num_heads=1, neighbourhood=3, dtype=dtype
        ),
        (5, 5, 1), (BATCH, 5, 4, 1), "(B, 5, 5, 1)",
    ),
    # -- the registry's encoders (SiT paper, Table 1-2) -----------------------------------------
    "sit": Case(_encoder("sit", IMAGE, **SIT_SMALL), IMAGE, (BATCH, 16, 8, 3), ENCODER_BAD, _with_parts),
    "sit_star": Case(
        _encoder("sit_star", IMAGE, **SIT_SMALL), IMAGE, (BATCH, 8, 8, 3), ENCODER_BAD, _with_parts
    ),
    "set": Case(_encoder("set", IMAGE, **SIT_SMALL), IMAGE, (BATCH, 16, 16, 1), ENCODER_BAD, _with_parts),
    "siet": Case(_encoder("siet", IMAGE, **SIT_SMALL), IMAGE, (BATCH, 16, 16), ENCODER_BAD, _with_parts),
    "sit_dihedral": Case(
        _encoder("sit_dihedral", IMAGE, **SIT_SMALL), IMAGE, (BATCH, 16, 8, 3), ENCODER_BAD, _with_parts
    ),
    "sit_query_key_norm": Case(
        _encoder("sit", IMAGE, query_key_norm=True, **SIT_SMALL), IMAGE, (BATCH, 16, 8, 3), ENCODER_BAD,
        _with_parts,
    ),
    "sit_head_standardization": Case(  # a per-feature map of the invariant token: the same symmetry
        _encoder("sit", IMAGE, head_standardization=True, **SIT_SMALL), IMAGE, (BATCH, 16, 8, 3),
        ENCODER_BAD, _with_parts,
    ),
    "sit_rotation_pooled_stem": Case(  # one block per level, yet chiral: the stem breaks the flips
        _encoder("sit", IMAGE, local_layers=1, global_layers=1, stem_kind="rotation_pooled", **SIT_SMALL),
        IMAGE, (BATCH, 8, 16, 3), ENCODER_BAD, _with_parts,
    ),
    "siet_rotation_pooled": Case(  # the head reads the grid in its four turns: C4 invariant, chiral
        _encoder("siet", IMAGE, patch_readout="rotation_pooled", **SIT_SMALL), IMAGE, (BATCH, 16, 8, 3),
        ENCODER_BAD, _with_parts,
    ),
    "sit_rotation_pooled": Case(  # the head reads the local grid in its four turns: chiral
        _encoder("sit", IMAGE, local_layers=1, global_layers=1, patch_readout="rotation_pooled", **SIT_SMALL),
        IMAGE, (BATCH, 16, 8, 3), ENCODER_BAD, _with_parts,
    ),
    "set_rotation_pooled": Case(
        _encoder("set", IMAGE, patch_readout="rotation_pooled", **SIT_SMALL), IMAGE, (BATCH, 16, 8, 3),
        ENCODER_BAD, _with_parts,
    ),
    "sit_global_only": Case(  # Table 5's "2 global" SiT: no local blocks, chiral by its first global block
        _encoder("sit", IMAGE, local_layers=0, global_layers=2, **SIT_SMALL), IMAGE, (BATCH, 16, 8, 3),
        ENCODER_BAD, _with_parts,
    ),
    "sit_mirror_blind": Case(
        _encoder("sit", IMAGE, local_layers=1, global_layers=1, **SIT_SMALL), IMAGE, (BATCH, 8, 16, 3),
        ENCODER_BAD, _with_parts,
    ),
    "vit": Case(
        _encoder("vit", IMAGE, patch_size=8, embed_dim=8, num_layers=1, num_heads=2, mlp_dim=8, output_dim=8),
        IMAGE, (BATCH, 16, 16, 2), ENCODER_BAD, _with_parts,
    ),
    "impala_cnn": Case(
        _encoder("impala_cnn", IMAGE, channels=(2, 4), output_dim=8), IMAGE, (BATCH, 8, 16, 3), ENCODER_BAD,
        _with_parts,
    ),
    "cnn": Case(
        _encoder("cnn", IMAGE, filters=(2, 4), output_dim=8), IMAGE, (BATCH, 16, 16, 4), ENCODER_BAD,
        _with_parts,
    ),
    "data_efficient_cnn": Case(
        _encoder("data_efficient_cnn", IMAGE, filters=(2, 4), output_dim=8), IMAGE, (BATCH, 15, 16, 3),
        ENCODER_BAD, _with_parts,
    ),
}  # fmt: skip
CASES["attention_neuron"] = CASES["SensorSetEncoder"]  # the registry's sensor encoder is that model

# Public names that are not modules with a contract, and why.
NOT_MODULES = {
    "NearIdentity": "an initializer (tests/test_layers.py checks its config round trip)",
    "Encoder": "the abstract base of the image encoders; every registry encoder has a case",
    "mlp": "the registry's vector torso is a list of Keras Dense layers, no module of this package",
}


def _public_modules() -> list[str]:
    names = []
    for package in (layers, models):
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.isclass(obj) and issubclass(obj, tf_keras.layers.Layer):
                names.append(name)
    return [*names, *registry.ENCODERS]


def test_every_public_module_has_a_case() -> None:
    missing = [n for n in _public_modules() if n not in CASES and n not in NOT_MODULES]
    assert not missing, f"public modules without a contract case in {__file__}: {missing}"
    assert {"NearIdentity", "Encoder"} <= set(layers.__all__) | set(models.__all__)


# -- helpers --------------------------------------------------------------------------
def _inputs(case: Case, dtype: str = "float64", batch: int = BATCH, seed: int = 1) -> tf.Tensor:
    if case.input_kind == "offsets":
        grid = np.random.default_rng(seed).integers(-3, 4, size=(batch, *case.input_shape))
        return tf.constant(grid, dtype)
    return testing.random_normal((batch, *case.input_shape), seed, dtype)


def _built(name: str, dtype: str = "float64") -> tuple[Any, tf.Tensor]:
    """The case's module in ``dtype``, called once on its inputs, with perturbed weights."""
    tf_keras.utils.set_random_seed(0)
    case = CASES[name]
    module = case.make(dtype)
    x = _inputs(case, "float32" if dtype.startswith("mixed") else dtype)
    case.apply(module, x)
    if module.weights:  # the pooling layers have none
        testing.perturb_weights(module, stddev=0.3)
    return module, x


def _numpy(parts: dict[str, tf.Tensor]) -> dict[str, np.ndarray]:
    return {k: np.asarray(tf.cast(v, tf.float64)) for k, v in parts.items()}


def _assert_same_outputs(a: dict[str, tf.Tensor], b: dict[str, tf.Tensor], rtol: float) -> None:
    assert a.keys() == b.keys()
    for key, value in _numpy(a).items():
        np.testing.assert_allclose(_numpy(b)[key], value, rtol=rtol, atol=rtol, err_msg=key)


NAMES = sorted(CASES)


# -- the contract -----------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_config_round_trip_gives_the_same_module(name: str) -> None:
    case = CASES[name]
    module, x = _built(name)
    clone = testing.config_round_trip(module)
    assert type(clone) is type(module)
    assert clone.get_config() == module.get_config()
    case.apply(clone, x)
    clone.set_weights(module.get_weights())
    for key, value in case.apply(module, x).items():  # same code, same weights: the same bits
        np.testing.assert_array_equal(case.apply(clone, x)[key].numpy(), value.numpy(), err_msg=key)
    assert [w.dtype for w in clone.weights] == [w.dtype for w in module.weights]
    assert clone.declared_symmetry == module.declared_symmetry


@pytest.mark.parametrize("name", NAMES)
def test_keras_serialization_round_trip(name: str) -> None:
    module = CASES[name].make("float64")
    restored = testing.serialization_round_trip(module)
    assert type(restored) is type(module)
    assert restored.get_config() == module.get_config()


@pytest.mark.parametrize("name", NAMES)
def test_xla_call_matches_eager(name: str) -> None:
    case = CASES[name]
    module, x = _built(name)
    compiled = tf.function(lambda z: case.apply(module, z), jit_compile=True)
    _assert_same_outputs(case.apply(module, x), compiled(x), rtol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_mixed_bfloat16_builds_runs_and_returns_the_documented_dtypes(name: str) -> None:
    case = CASES[name]
    with policy_scope("mixed_bfloat16"):
        module, x = _built(name, "mixed_bfloat16")
    outputs = case.apply(module, x)
    assert all(v.dtype == tf.float32 for v in module.weights), "variables stay float32"
    for part, value in outputs.items():
        assert value.dtype.name == case.mixed_dtypes.get(part, "bfloat16"), part
        assert np.isfinite(np.asarray(tf.cast(value, tf.float32))).all(), part


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_input_shape_is_a_value_error_naming_the_expected_shape(name: str) -> None:
    case = CASES[name]
    module, _ = _built(name)
    bad = testing.random_normal(case.bad_shape)
    with pytest.raises(ValueError) as error:
        case.apply(module, bad)
    assert case.expected in str(error.value), str(error.value)


def _check_declared(name: str, module: Any, x: tf.Tensor, symmetry: Symmetry) -> None:
    """Asserts ``symmetry`` of the case's module: kept elements hold, broken ones change the output."""
    case = CASES[name]
    if symmetry.kind == NONE:
        # A baseline promises nothing: on perturbed weights a rotation changes its features.
        assert not symmetry.elements
        errors = {n: testing.invariance_error(module, x, g) for n, g in testing.ROTATIONS.items()}
        assert min(errors.values()) > testing.broken_threshold("float64"), errors
        return
    grid_shape, class_token = case.grid or (None, True)
    testing.assert_declared_symmetry(lambda z: case.apply(module, z), x, symmetry, grid_shape, class_token)


@pytest.mark.parametrize("name", NAMES)
def test_the_declared_symmetry_holds_and_the_broken_one_is_broken(name: str) -> None:
    module, x = _built(name)
    assert isinstance(module.declared_symmetry, Symmetry)
    _check_declared(name, module, x, module.declared_symmetry)


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("sit", SIT_MIRROR_BLIND),  # a chiral SiT declared invariant under the flips
        ("sit_mirror_blind", SIT),  # a mirror-blind SiT declared chiral
        ("cnn", SIT),  # a baseline declared invariant
        ("GroupSelfAttention_gsa_nets", layers.GroupSelfAttention("p4m", 3).declared_symmetry),
    ],
)
def test_a_wrong_declaration_fails_the_contract(name: str, wrong: Symmetry) -> None:
    module, x = _built(name)
    with pytest.raises(AssertionError):
        _check_declared(name, module, x, wrong)


@pytest.mark.parametrize("name", [n for n in NAMES if CASES[n].keras_kwargs is not None])
def test_tf_keras_layer_test_harness(name: str) -> None:
    case = CASES[name]
    cls = type(case.make("float32"))
    test_utils.layer_test(
        cls,
        kwargs=case.keras_kwargs,
        input_data=np.asarray(_inputs(case, "float32")),
        expected_output_dtype="float32",
    )


@pytest.mark.parametrize("name", sorted(registry.ENCODERS))
def test_the_registry_declares_what_the_default_encoder_declares(name: str) -> None:
    entry = registry.get_entry(name)
    if entry.inputs != "image":
        assert entry.symmetry.acts_on in ("vector", "sensors", "image")
        return
    # The registry's declaration is the default build's (the check's sizes: 64x64 Procgen frames).
    encoder = entry.load()(image_shape=(64, 64, 3), **entry.defaults)
    assert encoder.declared_symmetry == entry.symmetry


def test_the_agents_read_the_group_elements_and_the_registry() -> None:
    # The environments' observation transforms and sit_keras.testing name the elements of
    # sit_keras.groups.D4_ELEMENTS; the agents' sensor networks are the registry's recurrent entry.
    from sit_keras.agents.environments import transforms
    from sit_keras.agents.networks import actor_critic, encoders, sensor_networks
    from sit_keras.groups import D4_ELEMENTS

    assert set(transforms.TRANSFORMS) <= set(D4_ELEMENTS)
    assert set(testing.DIHEDRAL) == set(D4_ELEMENTS)
    assert registry.RECURRENT_NAMES == (sensor_networks.SENSOR_ENCODER,)
    assert registry.get_entry(sensor_networks.SENSOR_ENCODER).symmetry == sensor_networks.SensorTorso.SYMMETRY
    assert encoders.ENCODERS == tuple(registry.ENCODERS)
    assert actor_critic.NETWORK_ENCODERS == registry.FEED_FORWARD_NAMES
    assert {actor_critic.MLP_ENCODER, actor_critic.DATA_EFFICIENT_CNN} <= set(registry.ENCODERS)


def test_docs_list_every_registry_encoder_with_its_declared_symmetry() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "layers.md").read_text()
    for name, entry in registry.ENCODERS.items():
        inputs = entry.inputs + (" (recurrent)" if entry.recurrent else "")
        row = f"| `{name}` | {inputs} | {entry.symmetry.summary} |"
        assert row in page, f"docs/layers.md lacks the row {row}"


def test_the_export_examples_cover_every_registry_family() -> None:
    # export/random_policy.py writes one small policy per encoder family; its names are the registry's.
    from sit_keras.export.random_policy import EXAMPLE_POLICIES

    used = {p.network_kwargs.get("encoder", "attention_neuron") for p in EXAMPLE_POLICIES.values()}
    assert used <= set(registry.ENCODERS), used - set(registry.ENCODERS)
    families = {registry.ENCODERS[name].family for name in used}
    assert families == {entry.family for entry in registry.ENCODERS.values()}
