"""The int8 recipe (issue 29): normalisations stay in float32, calibration and parity in every view."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from sit_keras.agents.environments.transforms import TRANSFORMS
from sit_keras.export import tflite
from sit_keras.export.exporter import export_policy
from sit_keras.export.normalisation import normalisation_nodes
from sit_keras.export.policy_model import load_trained_policy
from sit_keras.export.random_policy import write_example_policy_folder
from sit_keras.export.rollouts import Example, collect_examples, split_steps
from sit_keras.export.runtime import TFLitePolicy

TOKENS, FEATURES = 8, 16


def _layer_norm_module() -> tuple[tf.types.experimental.ConcreteFunction, tf.Module]:
    """A LayerNorm over features (moments, rsqrt) followed by a dense layer, as in a GSA block."""
    module = tf.Module()
    rng = np.random.default_rng(0)
    module.dense = tf.Variable(rng.normal(size=(FEATURES, 4)).astype(np.float32))

    @tf.function(input_signature=[{"x": tf.TensorSpec((1, TOKENS * FEATURES), tf.float32, name="x")}])
    def normalised(inputs):
        x = tf.reshape(inputs["x"], (1, TOKENS, FEATURES), name="tokens")  # a move into the normalisation
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        x = (x - mean) * tf.math.rsqrt(variance + 1e-6)
        return {"y": tf.matmul(x, module.dense)}

    return normalised.get_concrete_function(), module


def _tokens(seed: int) -> np.ndarray:
    """Tokens of unit spread, the last one nearly constant (as a uniform region of a grid world)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(1, TOKENS, FEATURES))
    x[0, -1] = rng.normal() + 0.01 * x[0, -1]
    return x.reshape(1, TOKENS * FEATURES).astype(np.float32)


def test_normalisation_nodes_name_the_variance_and_its_rsqrt_product():
    function, module = _layer_norm_module()
    names = normalisation_nodes(tflite.convert_function(function, module, "float32"))
    assert any("moments/variance" in n for n in names) and any("add" in n for n in names), names
    assert any(n.endswith("mul") for n in names), names
    # The squares the variance sums, and the reshape that moves the tokens into them.
    assert any("SquaredDifference" in n for n in names) and any("tokens" in n for n in names), names
    assert not any(n.endswith("moments/mean") for n in names), names  # the mean needs no float
    without_rsqrt = tf.function(lambda: {"y": tf.ones((2,))}).get_concrete_function()
    assert normalisation_nodes(tflite.convert_function(without_rsqrt, tf.Module(), "float32")) == []


def test_int8_keeps_normalisations_in_float_so_one_flat_token_spoils_no_other(tmp_path):
    """The nearly constant token's ``1 / sqrt(variance)`` is ~100; in int8 it sets the scale of every
    token's factor, which then rounds to a step of ~0.8. The recipe keeps the factor in float32: the
    other tokens come out as in TensorFlow, and far closer than with every op in int8."""
    function, module = _layer_norm_module()
    representative = lambda: ({"x": _tokens(seed)} for seed in range(16))  # noqa: E731
    kept = normalisation_nodes(tflite.convert_function(function, module, "float32"))
    errors = {}
    for name, float_ops in (("recipe", tflite.FLOAT_OPS_IN_INT8), ("all_ops", ())):
        recipe = {"float_ops": float_ops, "float_normalisations": bool(float_ops)}
        model = tflite.convert_function(function, module, "int8", representative, **recipe)
        interpreter = Interpreter(model_content=model)
        if name == "recipe":
            tensors = {t["name"]: t for t in interpreter.get_tensor_details()}
            assert kept and all(tensors[n]["dtype"] == np.float32 for n in kept), kept
        worst = 0.0
        for seed in (97, 98, 99):
            x = _tokens(seed)
            expected = function(x=tf.constant(x))["y"].numpy()[0, :-1]  # the tokens of unit spread
            got = interpreter.get_signature_runner()(x=x)["y"][0, :-1]
            worst = max(worst, np.abs(got - expected).max() / np.abs(expected).max())
        errors[name] = worst
    assert errors["recipe"] < 0.08 and errors["all_ops"] > 2 * errors["recipe"], errors


def test_invariant_transforms_come_from_the_encoders_declared_symmetry(tmp_path):
    for family, expected in (("sit", ("rot90", "rot180", "rot270", "flip_h", "flip_v")), ("cnn", ())):
        root = str(tmp_path / family)
        write_example_policy_folder(root, family)
        transforms = load_trained_policy(root).invariant_transforms
        assert transforms == expected and set(transforms) <= set(TRANSFORMS)


def test_collect_examples_shares_steps_between_views_and_rejects_unknown_ones(tmp_path):
    root = str(tmp_path / "sit")
    write_example_policy_folder(root, "sit")
    policy = load_trained_policy(root)
    examples = collect_examples(policy, 12, num_envs=2, transforms=("rot90", "flip_h"))
    assert [e.view for e in examples] == ["none"] * 4 + ["rot90"] * 4 + ["flip_h"] * 4
    # A rotation-invariant policy acts the same on the rotated view: the same episodes, turned.
    for upright, turned in zip(examples[:4], examples[4:8], strict=True):
        np.testing.assert_array_equal(np.rot90(upright.inputs["observation"], 1, axes=(1, 2)),
                                      turned.inputs["observation"])  # fmt: skip
        assert upright.outputs["action"] == turned.outputs["action"]
    with pytest.raises(ValueError, match="Unknown transforms \\['spin'\\]"):
        collect_examples(policy, 4, transforms=("spin",))


def test_exported_int8_sit_is_checked_and_exactly_invariant_in_every_view(tmp_path):
    root = str(tmp_path / "train")
    write_example_policy_folder(root, "sit")
    output = str(tmp_path / "out")
    os.makedirs(output)
    report = export_policy(root, output, formats=["tflite"], quantizations=["int8"], num_examples=48)
    parity = report["models"]["tflite_int8"]["parity"]
    views = {"none", *load_trained_policy(root).invariant_transforms}
    assert set(parity["action_agreement_by_view"]) == views
    assert parity["passed"], parity
    policy = TFLitePolicy(report["models"]["tflite_int8"]["path"])
    rng = np.random.default_rng(2)
    for _ in range(3):
        image = rng.integers(0, 256, (14, 14, 3)).astype(np.uint8)
        upright = policy.step(image)["logits"]
        for moved in (*(np.rot90(image, k, axes=(0, 1)) for k in (1, 2, 3)), image[:, ::-1], image[::-1]):
            np.testing.assert_array_equal(policy.step(np.ascontiguousarray(moved))["logits"], upright)


def test_sit_export_recipe_options_reach_the_model_and_its_metadata(tmp_path, capsys):
    """``--int8_float_ops=`` with ``--noint8_float_normalisations``: the full-integer model, recorded."""
    from sit_keras.export import cli

    root = str(tmp_path / "train")
    write_example_policy_folder(root, "sit")
    argv = ["--root_dir", root, "--formats", "tflite", "--quantizations", "int8", "--num_examples", "12"]
    paths = {}
    for name, options in (("recipe", []), ("full", ["--int8_float_ops=", "--noint8_float_normalisations"])):
        output = str(tmp_path / name)
        assert cli.main([*argv, "--output_dir", output, "--allow_parity_failure", *options]) == 0
        paths[name] = os.path.join(output, "tflite", "policy_int8")
    capsys.readouterr()
    float_types = {}
    for name, path in paths.items():
        interpreter = Interpreter(model_path=path + ".tflite")
        tensors = {t["index"]: t for t in interpreter.get_tensor_details()}
        float_types[name] = {
            op["op_name"] for op in interpreter._get_ops_details()
            if op["op_name"] not in ("DEQUANTIZE", "QUANTIZE")
            and tensors[op["outputs"][0]]["dtype"] == np.float32
        }  # fmt: skip
        with open(path + ".json") as f:
            options = json.load(f)["export"]
        full = name == "full"
        assert options["int8_float_ops"] == ([] if full else list(tflite.FLOAT_OPS_IN_INT8))
        assert options["int8_float_normalisations"] is not full
    assert {"BATCH_MATMUL", "RSQRT", "MUL"} <= float_types["recipe"]
    assert float_types["full"] <= {"CAST"}, float_types["full"]  # only the uint8 input, cast to float


def test_split_steps_gives_both_halves_every_environment_and_view():
    """Even steps calibrate, odd ones check: each half has every environment of every view (a split by
    position would give each half whole environments, as two of four)."""
    examples = [
        Example({"env": np.array([env])}, {}, view, step)
        for view in ("none", "rot90") for step in range(3) for env in range(4)
    ]  # fmt: skip
    calibration, held_out = split_steps(examples)
    assert {e.step for e in calibration} == {0, 2} and {e.step for e in held_out} == {1}
    every = {(view, env) for view in ("none", "rot90") for env in range(4)}
    for half in (calibration, held_out):
        assert {(e.view, int(e.inputs["env"][0])) for e in half} == every
    one_step = examples[:4]
    assert split_steps(one_step) == (one_step[0::2], one_step[1::2])


def _tanh_normal_module() -> tuple[tf.types.experimental.ConcreteFunction, tf.Module]:
    """A SAC actor's tanh-normal head: one projection split into a location and a clipped log-scale."""
    module = tf.Module()
    module.dense = tf.Variable(np.array([[1.0, -0.5], [0.5, 0.25]], np.float32))

    @tf.function(input_signature=[{"x": tf.TensorSpec((1, 2), tf.float32, name="x")}])
    def act(inputs):
        loc, log_scale = tf.split(tf.matmul(inputs["x"], module.dense), 2, axis=-1)
        return {"loc": tf.tanh(loc), "scale": tf.exp(tf.clip_by_value(log_scale, -5.0, 0.0))}

    return act.get_concrete_function(), module


def _states(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, (count, 2)).astype(np.float32)


def test_int16x8_keeps_the_tanh_normal_location_that_int8_clips(tmp_path):
    """int8 gives the split a single scale, which the clip of the log-scale narrows, so the location
    loses its positive half (the cause of the cart-pole SAC actor's int8 failure); 16 bits keep it."""
    function, module = _tanh_normal_module()
    calibration = _states(256, 0)
    errors = {}
    for quantization in ("int8", "int16x8"):
        flatbuffer = tflite.convert_function(
            function, module, quantization, lambda: ({"x": s[None]} for s in calibration)
        )
        runner = Interpreter(model_content=flatbuffer).get_signature_runner()
        states = _states(64, 1)
        got = np.concatenate([runner(x=s[None])["loc"] for s in states])
        errors[quantization] = float(np.max(np.abs(got - np.tanh(states @ module.dense.numpy()[:, :1]))))
    assert errors["int16x8"] < 0.02 < 0.2 < errors["int8"], errors


def test_int16x8_exports_a_sac_actor_and_refuses_one_it_cannot_run_in_words(tmp_path, capsys):
    """Opt-in (not a default quantisation); a SiT's int16x8 model fails parity with the runtime's reason."""
    from sit_keras.export import cli

    assert "int16x8" in tflite.QUANTIZATIONS and "int16x8" not in tflite.DEFAULT_QUANTIZATIONS
    root = str(tmp_path / "sac")
    write_example_policy_folder(root, "sac_state")
    output = str(tmp_path / "sac_out")
    argv = ["--formats", "tflite", "--quantizations", "int16x8", "--num_examples", "24"]
    assert cli.main(["--root_dir", root, "--output_dir", output, *argv]) == 0
    with open(os.path.join(output, "tflite", "policy_int16x8.json")) as f:
        parity = json.load(f)["export"]["parity"]
    assert parity["passed"], parity
    interpreter = Interpreter(model_path=os.path.join(output, "tflite", "policy_int16x8.tflite"))
    assert np.int16 in {t["dtype"] for t in interpreter.get_tensor_details()}
    root = str(tmp_path / "sit")
    write_example_policy_folder(root, "sit")
    capsys.readouterr()
    assert cli.main(["--root_dir", root, "--output_dir", str(tmp_path / "sit_out"), *argv]) == 1
    err = capsys.readouterr().err
    assert "the TFLite runtime cannot run it (SquaredDifference" in err and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "sit_out" / "tflite")


def test_quantisation_benchmark_times_every_model_against_float32(tmp_path):
    """The deployment table's latency: every model in every kernel set, float32's own ratio exactly 1."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "quantisation.py"
    spec = importlib.util.spec_from_file_location("quantisation_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    function, module = _layer_norm_module()
    calibration = [{"x": _tokens(seed)} for seed in range(8)]
    paths = {}
    for quantization in ("float32", "int8"):
        paths[quantization] = str(tmp_path / f"{quantization}.tflite")
        with open(paths[quantization], "wb") as f:
            f.write(tflite.convert_function(function, module, quantization, lambda: iter(calibration)))
    latency = bench.measure_latency({1: paths}, {1: calibration}, rounds=3, calls=4)
    for kernels in bench.KERNELS:
        ratios = latency["vs_float32"]["batch1"][kernels]
        assert ratios["float32"] == 1.0 and ratios["int8"] > 0, ratios
        assert all(ms > 0 for ms in latency["ms"]["batch1"][kernels].values())


def _int8_matmul_forms():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "int8_matmul_forms.py"
    spec = importlib.util.spec_from_file_location("int8_matmul_forms", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_int8_matmul_forms_compute_the_op_and_a_wrong_constant_is_caught():
    """Each rewritten form of a constant-operand BATCH_MATMUL computes the op (what the benchmark checks)."""
    bench = _int8_matmul_forms()
    rng = np.random.default_rng(0)
    ops = [
        {
            "constant_side": "left",
            "constant": rng.normal(size=(12, 5)).astype(np.float32),
            "input_shape": (5, 7),
        },
        {
            "constant_side": "right",
            "constant": rng.normal(size=(6, 4, 3)).astype(np.float32),
            "input_shape": (6, 9, 4),
        },
    ]
    for op in ops:
        forms = bench.forms_of(op)
        assert len(forms) >= 2 and "batch_matmul" in forms
        reference = forms["batch_matmul"][1]
        for _, form, to_form, from_form in forms.values():
            difference = bench.largest_difference(reference, form, to_form, from_form, op["input_shape"])
            assert difference <= bench.SAME_FUNCTION_TOLERANCE
    square = dict(ops[1], constant=rng.normal(size=(6, 4, 4)).astype(np.float32))
    wrong = dict(square, constant=np.swapaxes(square["constant"], 1, 2))
    _, form, to_form, from_form = bench.forms_of(wrong)["grouped_conv"]
    assert (
        bench.largest_difference(
            bench.forms_of(square)["batch_matmul"][1], form, to_form, from_form, (6, 9, 4)
        )
        > 0.1
    )


def test_int8_matmul_forms_finds_the_constant_matmuls_of_a_model(tmp_path):
    bench = _int8_matmul_forms()
    rng = np.random.default_rng(1)
    left = tf.constant(rng.normal(size=(8, 5)).astype(np.float32))
    right = tf.constant(rng.normal(size=(8, 3, 3)).astype(np.float32))
    module = tf.Module()
    module.f = tf.function(
        lambda x, y: {"a": tf.matmul(left, x), "b": tf.matmul(y, right), "c": tf.matmul(y, y)}
    )
    function = module.f.get_concrete_function(
        tf.TensorSpec((5, 6), tf.float32, name="x"), tf.TensorSpec((8, 3, 3), tf.float32, name="y")
    )
    path = tmp_path / "m.tflite"
    path.write_bytes(tflite.convert_function(function, module))
    found = bench.constant_matmuls(str(path))
    by_side = {op["constant_side"]: op for op in found}
    assert len(found) == 2 and set(by_side) == {"left", "right"}  # y @ y has no constant operand
    np.testing.assert_array_equal(by_side["left"]["constant"], left.numpy())
    np.testing.assert_array_equal(by_side["right"]["constant"], right.numpy())
    assert by_side["left"]["input_shape"] == (5, 6) and by_side["right"]["input_shape"] == (8, 3, 3)


# A benchmark run; the forms it times are checked for equality above.
@pytest.mark.large
def test_int8_matmul_forms_benchmark_writes_its_bound(tmp_path):
    """One round, demo-size SiT: each op timed in every form; the estimate recomputes from the report."""
    bench = _int8_matmul_forms()
    out = tmp_path / "forms.json"
    assert bench.main(["--rounds", "1", "--calls", "2", "--out", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert len(results["ops"]) >= 3
    for row in results["ops"]:
        assert row["fastest_int8_form"] in row["forms"] and row["fastest_float32_form"] in row["forms"]
        assert all(e["largest_difference"] <= bench.SAME_FUNCTION_TOLERANCE for e in row["forms"].values())
    bound, rest = results["bound"], results["other_ops"]
    assert "BATCH_MATMUL" not in rest["by_type_ms"] and rest["best_ms"] <= rest["float32_ms"]
    expected = (rest["best_ms"] + bound["fastest_int8_forms_sum_ms"]) / (
        rest["float32_ms"] + bound["fastest_float32_forms_sum_ms"]
    )
    assert bound["int8_estimate_x_float32"] == pytest.approx(expected)


def test_int8_matmul_forms_benchmark_refuses_bad_arguments_in_one_sentence(capsys):
    bench = _int8_matmul_forms()
    assert bench.main(["--rounds", "0"]) == 2
    assert "--rounds and --calls must be at least 1" in capsys.readouterr().err
