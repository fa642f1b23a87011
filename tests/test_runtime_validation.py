"""The TFLite runtime refuses what it cannot answer honestly, and a refusal never damages the episode.

Values are checked after the cast to the model's dtype (1e300 is inf in float32); outputs and next
states that are not finite are refused and the recurrent state stays as it was; ragged input and
damaged files get one sentence naming the input or the file. Finite float32 values (1e30) are
accepted, as documented in ``export.runtime``.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from sit_keras.export.exporter import export_policy
from sit_keras.export.random_policy import write_example_policy_folder
from sit_keras.export.runtime import (
    ModelFileError,
    PolicyInputError,
    PolicyOutputError,
    TFLitePolicy,
    metadata_path,
)
from sit_keras.export.tflite_py_policy import TFLitePyPolicy


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """TFLite paths: ``mlp`` (float32, int8; CartPole), ``cnn`` (float32, uint8 images), ``recurrent``
    (AttentionNeuron float32, state in and out)."""
    paths = {}
    for family, quantizations in (("mlp", ["float32", "int8"]), ("cnn", ["float32"]),
                                  ("attention_neuron", ["float32"])):  # fmt: skip
        root = str(tmp_path_factory.mktemp(family))
        write_example_policy_folder(root, family)
        report = export_policy(
            root, root, family, ["tflite"], quantizations, num_examples=8, allow_parity_failure=True
        )
        for quantization in quantizations:
            paths[f"{family}_{quantization}"] = report["models"][f"tflite_{quantization}"]["path"]
    paths["recurrent"] = paths.pop("attention_neuron_float32")
    return paths


def _readings(seed: int, steps: int = 4) -> list[np.ndarray]:
    return list(np.random.default_rng(seed).normal(size=(steps, 5)).astype(np.float32))


def _assert_refusal_keeps_episode(path: str, bad: np.ndarray, error: type, match: str) -> None:
    """A refused step between valid ones changes nothing: the episode matches one without it."""
    readings = _readings(0)
    reference = TFLitePolicy(path)
    expected = [reference.step(r)["action"] for r in readings]
    policy = TFLitePolicy(path)
    actions = [policy.step(readings[0])["action"]]
    state = {k: v.copy() for k, v in policy.state.items()}
    with pytest.raises(error, match=match):
        policy.step(bad)
    assert state and all(np.array_equal(state[k], policy.state[k]) for k in state)
    actions += [policy.step(r)["action"] for r in readings[1:]]
    np.testing.assert_array_equal(np.array(actions), np.array(expected))
    assert all(np.all(np.isfinite(a)) for a in actions)


def test_float64_beyond_float32_range_is_refused_and_state_kept(models):
    # 1e300 is finite in float64 but inf in float32: checked after the cast.
    bad = np.array([0.1, 1e300, 0.0, 0.2, 0.3])
    _assert_refusal_keeps_episode(models["recurrent"], bad, PolicyInputError, "beyond float32's range")
    _assert_refusal_keeps_episode(
        models["recurrent"], np.array([0.0, np.nan, 0.0, 0.0, 0.0]), PolicyInputError, "NaN"
    )


def test_non_finite_outputs_are_refused_and_state_kept(models):
    """float32's largest value is a valid input; this policy overflows on it: refused, never stored.

    1e30 gave a non-finite output on AVX-512 hosts only: on an AVX2-only host the policy answered it
    (and 1e38) with a finite, saturated action. At float32's maximum it overflows there too."""
    bad = np.full(5, np.finfo(np.float32).max, np.float32)
    _assert_refusal_keeps_episode(models["recurrent"], bad, PolicyOutputError, "not finite")
    assert issubclass(PolicyOutputError, PolicyInputError)  # callers that catch input errors catch it


def test_finite_float32_extremes_are_accepted_or_refused_never_wrong(models):
    """The documented decision: finite float32 inputs are accepted; a non-finite result is refused."""
    policy = TFLitePolicy(models["mlp_float32"])
    outputs = policy.step(np.full(4, 1e30))  # large but within float32: the model's arithmetic holds
    assert np.all(np.isfinite(outputs["logits"])) and np.abs(outputs["logits"]).max() > 1e20
    with pytest.raises(PolicyOutputError, match="logits"):
        policy.step(np.full(4, 3e38, np.float32))  # the first layer overflows float32
    # int8 models clamp inputs to their calibrated range: a finite, saturated answer.
    int8 = TFLitePolicy(models["mlp_int8"])
    saturated = int8.step(np.full(4, 1e30))["logits"]
    np.testing.assert_array_equal(int8.step(np.full(4, 1e3))["logits"], saturated)
    assert policy.step(np.zeros(4))["logits"].shape == (2,)  # still usable


def test_ragged_and_non_numeric_inputs_get_one_sentence(models):
    vector = TFLitePolicy(models["mlp_float32"])
    with pytest.raises(PolicyInputError, match=r"observation must be a rectangular array of shape \(4,\)"):
        vector.step([[0.0, 1.0], [2.0]])
    with pytest.raises(PolicyInputError, match="rectangular numeric array"):
        vector.step(np.array([0.0, None, 1.0, 2.0], dtype=object))
    with pytest.raises(PolicyInputError, match="dtype float32; received str"):
        vector.step(["a", "b", "c", "d"])
    recurrent = TFLitePolicy(models["recurrent"])
    with pytest.raises(PolicyInputError, match=r"\('n',\) with n <= 5"):
        recurrent.step([[0.0], [1.0, 2.0]])


def test_integer_images_in_range_are_accepted_out_of_range_refused(models):
    image = TFLitePolicy(models["cnn_float32"])
    pixels = np.random.default_rng(0).integers(0, 256, (14, 14, 3))  # int64, as Python lists give
    np.testing.assert_array_equal(image.step(pixels)["logits"], image.step(pixels.astype(np.uint8))["logits"])
    with pytest.raises(PolicyInputError, match=r"values in \[0, 255\]"):
        image.step(np.full((14, 14, 3), 300))
    with pytest.raises(PolicyInputError, match="dtype uint8; received float64"):
        image.step(np.zeros((14, 14, 3)))


def test_damaged_files_are_named(models, tmp_path):
    source = models["mlp_float32"]
    model = str(tmp_path / "damaged.tflite")
    shutil.copy(metadata_path(source), metadata_path(model))
    with open(model, "wb") as f:
        f.write(b"not a flatbuffer" * 4)
    with pytest.raises(ModelFileError, match="damaged.tflite' does not match the SHA-256 recorded in"):
        TFLitePolicy(model)
    with open(metadata_path(source)) as f:  # an export from before checksums: the interpreter finds it
        metadata = json.load(f)
    del metadata["export"]["sha256"]
    with open(metadata_path(model), "w") as f:
        json.dump(metadata, f)
    with pytest.raises(ModelFileError, match="damaged.tflite' is not a readable TFLite model"):
        TFLitePolicy(model)
    shutil.copy(source, model)
    with open(metadata_path(model), "w") as f:
        f.write('{"inputs": ')
    with pytest.raises(ModelFileError, match=r"damaged.json' is not valid metadata JSON"):
        TFLitePolicy(model)
    with open(metadata_path(model), "w") as f:
        json.dump({"environment": {}}, f)
    TFLitePolicy(model)  # the runtime itself needs no metadata entry
    with pytest.raises(ModelFileError, match=r"damaged.json' is not complete sit-export metadata"):
        TFLitePyPolicy(model)
    os.remove(metadata_path(model))
    with pytest.raises(FileNotFoundError, match="damaged.json"):
        TFLitePolicy(model)
    with pytest.raises(ValueError, match="num_threads"):
        TFLitePolicy(source, num_threads=0)
