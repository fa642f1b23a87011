"""Smoke tests of ``sit-check-encoders`` (sit_keras.encoder_check) and benchmarks/encoders.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tf_keras
from traced_ops import needs_xla_kernels, op_types

from sit_keras import encoder_check, native

REPO = Path(__file__).resolve().parents[1]


def _load_benchmark(name: str = "encoders") -> ModuleType:
    # benchmarks/ is not a package: load the script as a module by its path.
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_reports_the_promised_symmetries(tmp_path, capsys):
    out = tmp_path / "check.json"
    # The old dashed spelling still works, with a deprecation message on stderr.
    status = encoder_check.main(
        ["--models", "sit,cnn", "--image-size", "16", "--batch", "2", "--json", str(out)]
    )
    captured = capsys.readouterr()
    printed = captured.out
    assert captured.err == "sit-check-encoders: --image-size is deprecated; use --image_size.\n"

    assert status == 0, printed
    report = json.loads(out.read_text())
    assert report["all_ok"] is True
    assert list(report["encoders"]) == ["sit", "cnn"]
    sit, cnn = report["encoders"]["sit"], report["encoders"]["cnn"]
    assert sit["promised"] == "C4 invariant, flips broken"
    assert set(sit["checks"]) == {"output/rotations", "invariant/rotations"}
    for check in sit["checks"].values():
        assert check["holds"] and check["error"] <= report["settings"]["tolerance"]
    assert sit["status"] == cnn["status"] == "ok"
    # The baseline promises nothing, and its perturbed weights are not symmetric.
    assert cnn["checks"] == {} and cnn["rotation_error"] > 1e-3
    for record in (sit, cnn):
        assert record["params"] > 0
        assert record["forward_xla"]["median_ms"] > 0
        assert record["train_step_xla"]["median_ms"] > 0
    assert "| sit " in printed and "perturbed" in printed


def test_a_size_an_encoder_cannot_take_is_one_sentence(tmp_path, capsys):
    out = tmp_path / "check.json"
    status = encoder_check.main(["--models", "cnn,sit", "--image_size", "3", "--json", str(out)])
    captured = capsys.readouterr()
    assert status == 2 and not out.exists() and captured.out == ""
    assert captured.err.startswith("sit-check-encoders: --image_size 3 does not fit sit: ")
    assert len(captured.err.splitlines()) == 1


def test_check_fails_when_a_promise_is_broken(tmp_path, monkeypatch):
    # Promise rotation invariance for the CNN baseline: the check must flag it.
    monkeypatch.setitem(encoder_check.PROMISES, "cnn", ("C4 invariant", (("output", "rotations"),)))
    out = tmp_path / "check.json"
    status = encoder_check.main(["--models", "cnn", "--image_size", "16", "--batch", "2", "--json", str(out)])
    assert status == 1
    report = json.loads(out.read_text())
    assert report["all_ok"] is False and report["encoders"]["cnn"]["status"] == "FAIL"


def test_check_rejects_unknown_models():
    with pytest.raises(SystemExit):
        encoder_check.main(["--models", "resnet"])


def test_benchmark_quick_run_writes_positive_timings(tmp_path, capsys):
    bench = _load_benchmark()
    out = tmp_path / "encoders.json"
    argv = ["--quick", "--models", "cnn", "--repeats", "2", "--precisions", "float32", "--out", str(out)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out

    report = json.loads(out.read_text())
    assert (
        report["command"] == f"python benchmarks/encoders.py {' '.join(argv)}" and len(report["commit"]) == 40
    )
    assert set(report) >= {"settings", "environment", "matmul", "models", "ratios", "wall_time_s"}
    assert {"tensorflow", "cpu_count", "threading", "date"} <= set(report["environment"])
    matmul = report["matmul"]
    assert len(matmul["runs_ms"]) >= 10 and min(matmul["runs_ms"]) > 0 and matmul["median_ms"] > 0
    assert matmul["by_precision"] == {}  # float32 only: no matmul in another dtype

    cnn = report["models"]["cnn"]
    assert cnn["params"] > 0
    assert set(cnn["timings"]) == {"forward_single", "forward_batch", "train_step"}
    for by_mode in cnn["timings"].values():
        assert set(by_mode) == {"graph", "xla"}
        for timing in by_mode.values():
            assert len(timing["runs_ms"]) == 2 and min(timing["runs_ms"]) > 0
            assert timing["median_ms"] > 0 and timing["first_call_s"] > 0 and timing["matmul_times"] > 0
    assert set(report["ratios"]["xla_over_graph"]["cnn"]) == set(cnn["timings"])
    assert "train_step_over_vit" not in report["ratios"]  # no ViT in this run
    assert "matmul-times" in printed and "| cnn " in printed


@pytest.mark.large  # a benchmark run; fast = reference GSA: test_fast_paths
def test_benchmark_times_fast_and_reference_gsa_and_profiles_the_stages(tmp_path, capsys):
    bench = _load_benchmark()
    out = tmp_path / "encoders.json"
    models = "sit_dihedral,sit_dihedral:reference"
    argv = ["--quick", "--models", models, "--repeats", "2", "--image_size", "16", "--out", str(out)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["models"]["sit_dihedral:reference"]["overrides"] == {"implementation": "reference"}
    ratio = report["ratios"]["train_step_fast_over_reference"]["sit_dihedral"]
    assert set(ratio) == {"graph", "xla"} and min(ratio.values()) > 0
    for name in ("sit_dihedral", "sit_dihedral:reference"):
        profile = report["models"][name]["stage_profile"]
        assert set(profile) == {"stem_pool", "local_gsa", "global_gsa", "rest"}
        assert all(len(profile[s]["runs_ms"]) == 2 for s in ("stem_pool", "local_gsa", "global_gsa"))
        step = report["models"][name]["timings"]["train_step"]["graph"]["median_ms"]
        assert sum(p["median_ms"] for p in profile.values()) == pytest.approx(step)
    assert "Where the train step goes" in printed and "fast GSA over reference" in printed
    for name in ("sit_dihedral", "sit_dihedral:reference"):
        precision = report["models"][name]["precision"]
        assert set(precision) == {"mixed_bfloat16", "mixed_float16"}
        assert all(p["over_float32"] > 0 and len(p["runs_ms"]) == 2 for p in precision.values())
    assert "under mixed precision, over float32" in printed
    by_dtype = report["matmul"]["by_precision"]  # the primitive in each compute dtype, once per round
    dtypes = {p: r["dtype"] for p, r in by_dtype.items()}
    assert dtypes == {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
    for record in by_dtype.values():
        assert len(record["runs_ms"]) == 2
        assert record["over_float32"] == pytest.approx(record["median_ms"] / report["matmul"]["median_ms"])
    assert "(1024^3 matmul)" in printed


@pytest.mark.parametrize(
    "argv",
    [
        ["--models", "resnet"],
        ["--models", "vit:reference"],
        ["--models", "sit:quick"],
        ["--precisions", "fp8"],
        ["--models", "configs/minigrid/no_such_config.gin"],
        ["--models", "configs/minigrid/ppo_lavacrossing.gin"],  # sets no encoder
    ],
)
def test_benchmark_rejects_unknown_models_implementations_and_precisions(argv, capsys):
    assert _load_benchmark().main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_no_xla_kernels_names_the_fast_sit_and_nothing_else():
    bench = _load_benchmark()
    assert bench.parse_model("siet:no_xla_kernels") == ("siet", {"implementation": "fast"})
    with pytest.raises(ValueError, match="follows only a SiT-family name"):
        bench.parse_model("vit:no_xla_kernels")


# A benchmark run; its arguments and report: the tests above.
@pytest.mark.large
def test_benchmark_times_a_configs_encoder_against_the_configs_vit(tmp_path, capsys):
    bench = _load_benchmark()
    # The chiral SiT pads before it pools (pool_padding=1): the stage profile must pool as it does.
    sit_config, vit_config = (f"configs/minigrid/lavacrossing_{m}.gin" for m in ("sit_chiral", "vit"))
    assert bench.parse_model(str(REPO / sit_config))[1]["window"] == 3  # the config's kwargs, not defaults
    out = tmp_path / "encoders.json"
    models = ",".join(str(REPO / c) for c in (sit_config, vit_config))
    argv = ["--quick", "--models", models, "--repeats", "2", "--image_size", "14", "--precisions", "float32",
            "--out", str(out)]  # fmt: skip
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    sit, vit = (report["models"][str(REPO / c)] for c in (sit_config, vit_config))
    assert (sit["encoder"], vit["encoder"]) == ("sit", "vit")
    assert sit["overrides"]["pool_padding"] == 1 and vit["overrides"]["patch_size"] == 2
    assert set(sit["stage_profile"]) == {"stem_pool", "local_gsa", "global_gsa", "rest"}
    over_vit = report["ratios"]["train_step_over_vit"]
    assert over_vit[str(REPO / vit_config)] == {"graph": 1.0, "xla": 1.0}
    sit_ms, vit_ms = (m["timings"]["train_step"]["graph"]["median_ms"] for m in (sit, vit))
    assert over_vit[str(REPO / sit_config)]["graph"] == pytest.approx(sit_ms / vit_ms)


def test_benchmark_says_which_model_cannot_take_the_image_size(capsys):
    assert _load_benchmark().main(["--models", "cnn,sit", "--image_size", "14"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "sit at --image_size 14: sit with " in err and "multiples of 8" in err


def test_xla_cpu_ops_times_each_block_both_ways(tmp_path, capsys):
    bench = _load_benchmark("xla_cpu_ops")
    out = tmp_path / "xla.json"
    argv = ["--names", "dense,segment_sum,cnn", "--batch", "2", "--rounds", "2", "--calls", "1"]
    assert bench.main([*argv, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["results"]) == ["dense", "segment_sum", "cnn"]
    for result in report["results"].values():
        assert len(result["xla_over_graph_per_round"]) == 2
        assert result["graph_ms"] > 0 and result["xla_ms"] > 0
    assert report["command"].startswith("python benchmarks/xla_cpu_ops.py --names dense,segment_sum,cnn")
    assert report["table"] in capsys.readouterr().out and report["wall_seconds"] > 0


def test_xla_conv_gradients_times_each_product_and_pooling_both_ways(tmp_path, capsys):
    bench = _load_benchmark("xla_conv_gradients")
    out = tmp_path / "conv.json"
    argv = ["--batch", "2", "--rounds", "1", "--calls", "1", "--out", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["command"] == f"python benchmarks/xla_conv_gradients.py {' '.join(argv)}"
    assert (report["batch"], report["rounds"], report["calls_per_round"]) == (2, 1, 1) and report["commit"]
    convolutions = [f"conv {i}->{o} at {s}x{s}" for i, o, s in bench.CONVOLUTIONS]
    poolings = [f"max pool 3x3/2, {c} channels at {s}x{s}" for c, s in bench.POOLINGS]
    assert list(report["results"]) == [
        *(f"{c}: {what}" for c in convolutions for what in ("forward", "input gradient", "kernel gradient")),
        *(f"{p}: {what}" for p in poolings for what in ("forward", "gradient")),
    ]
    for name, result in report["results"].items():
        assert result["graph_ms"] > 0 and result["xla_ms"] > 0 and result["xla_over_graph"] > 0
        if "native_xla_ms" in result:  # the native form, where the native kernels' XLA library loads
            assert name.startswith("conv") or name.endswith(": gradient")  # no native pooling forward pass
            assert result["native_xla_ms"] > 0
    printed = capsys.readouterr().out
    assert report["table"] in printed and report["table"].startswith("| op | graph (ms) | XLA (ms) |")
    assert isinstance(report["onednn_in_graphs"], bool) and report["wall_seconds"] > 0


@pytest.mark.parametrize(
    "argv, message",
    [(["--rounds", "0"], "--batch, --rounds and --calls must be >= 1"), (["--nope"], "--nope")],
)
def test_xla_conv_gradients_refuses_bad_arguments_in_one_sentence(argv, message, tmp_path, capsys):
    out = tmp_path / "conv.json"
    assert _load_benchmark("xla_conv_gradients").main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_channels_first_grad_times_every_form_of_each_shape(tmp_path, capsys):
    out = tmp_path / "grad.json"
    assert _load_benchmark("channels_first_grad").main(["--quick", "--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == f"python benchmarks/channels_first_grad.py --quick --repeats 2 --out {out}"
    assert report["repeats"] == 2 and report["commit"]
    assert list(report["results"]) == ["first_block", "second_block"]
    printed = capsys.readouterr().out
    for name, result in report["results"].items():
        assert (result["rows"], result["columns"]) == ({"first_block": 6, "second_block": 64}[name], 4096)
        for measurement in ("kernel_grad", "both_gradients"):
            r = result[measurement]
            assert r["tensorflow_ms"] > 0 and r["channels_first_ms"] > 0
            assert r["tensorflow_over_channels_first"] == pytest.approx(
                r["tensorflow_ms"] / r["channels_first_ms"]
            )
            assert f"ratio {r['tensorflow_over_channels_first']:.2f}" in printed
        earlier = result["kernel_grad"]
        assert earlier["transposed_over_channels_first"] == pytest.approx(
            earlier["transposed_ms"] / earlier["channels_first_ms"]
        )
        assert f"(ratio {earlier['transposed_over_channels_first']:.2f})" in printed
        assert "transposed_ms" not in result["both_gradients"]


@pytest.mark.parametrize(
    "argv, message",
    [(["--repeats", "0"], "--repeats must be at least 1"), (["--out", "."], "--out must be a file path")],
)
def test_channels_first_grad_refuses_bad_arguments_in_one_sentence(argv, message, capsys):
    assert _load_benchmark("channels_first_grad").main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


# A benchmark run: make test-large. Which gradients the layers' projection takes where:
# tests/test_native_projection.py::test_the_layers_projection_runs_the_ops_under_a_tape_and_matmul_elsewhere.
@pytest.mark.large
@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_projection_gradients_times_both_ways_of_each_model(tmp_path, capsys):
    """benchmarks/projection_gradients.py: each model's step traced with each way's gradients (the kernel
    gradient op in one only), both timed, their ratio printed, and this host's default named."""
    module = _load_benchmark("projection_gradients")
    for jit_compile in (False, True):
        steps, images = module.train_steps("sit", 16, 2, jit_compile)
        kernels = not jit_compile or native.xla_load_problem() is None  # XLA runs the ops through theirs
        for way, step in steps.items():  # the traces made each way
            assert ("SitChannelsFirstProjectionKernelGrad" in op_types(step, images)) == (
                way == "ops" and kernels
            )
            if jit_compile:  # compiled by XLA (stop 110's script built both modes' steps without it)
                assert "HloModule" in step.experimental_get_compiler_ir(images)(stage="hlo")
            else:
                with pytest.raises(ValueError, match="jit_compile=True"):
                    step.experimental_get_compiler_ir(images)
    out = tmp_path / "pg.json"
    assert module.main(["--quick", "--models", "sit", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == f"python benchmarks/projection_gradients.py --quick --models sit --out {out}"
    settings = {"models": ["sit"], "image_size": 16, "batch": 2, "repeats": 3, "jit_compile": False}
    assert report["settings"] == {**settings, "quick": True}
    r = report["results"]["sit"]
    assert r["ops_ms"] > 0 and r["matmuls_over_ops"] == pytest.approx(r["matmuls_ms"] / r["ops_ms"])
    printed = capsys.readouterr().out
    assert f"matmuls / ops {r['matmuls_over_ops']:.3f}" in printed
    default = "matmuls" if native.projection_gradients_by_matmul() else "ops"
    assert report["default_here"] == default and f"This host's default: the {default}" in printed


# A benchmark run: make test-large. The kernel gradient's two forms under XLA:
# tests/test_native_projection.py::test_under_xla_the_kernel_gradient_keeps_its_product_and_transposes_after.
@pytest.mark.large
@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_kernel_gradient_transpose_times_the_gather_the_fold_and_the_graph(tmp_path, capsys):
    """benchmarks/kernel_gradient_transpose.py: two XLA steps, one with the kernel gradients' gathers (XLA
    keeps them), and the graph step, all three timed and their ratios printed and written."""
    module = _load_benchmark("kernel_gradient_transpose")
    steps = module.projection_gradients.train_steps
    xla, images = steps("sit", 16, 2, jit_compile=True, ways=module.XLA_WAYS)
    gathers = {
        way: step.experimental_get_compiler_ir(images)(stage="optimized_hlo").count(" gather(")
        for way, step in xla.items()
    }
    assert gathers["xla_gathered"] > gathers["xla_folded"], gathers
    out = tmp_path / "kt.json"
    assert module.main(["--quick", "--models", "sit", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    command = f"python benchmarks/kernel_gradient_transpose.py --quick --models sit --out {out}"
    assert report["command"] == command
    settings = {"models": ["sit"], "image_size": 16, "batch": 2, "repeats": 3}
    assert report["settings"] == {**settings, "quick": True}
    r = report["results"]["sit"]
    assert r["gathered_over_folded"] == pytest.approx(r["xla_gathered_ms"] / r["xla_folded_ms"])
    assert r["xla_gathered_over_graph"] == pytest.approx(r["xla_gathered_ms"] / r["graph_ms"])
    assert f"gathered / folded {r['gathered_over_folded']:.3f}" in capsys.readouterr().out


@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_skip_embedding_gradient_traces_both_forms():
    """benchmarks/skip_embedding_gradient.py: a SiT's XLA step with the summed input gradient (XLA's HLO has
    its reduction over D, not a product) and with the matmul's."""
    module = _load_benchmark("skip_embedding_gradient")
    xla, images = module.projection_gradients.train_steps(
        "sit", 16, 2, jit_compile=True, ways=module.CONTEXTS
    )
    hlo = {way: step.experimental_get_compiler_ir(images)(stage="hlo") for way, step in xla.items()}
    assert hlo["xla_summed"].count(" dot(") < hlo["xla_matmul"].count(" dot(")


# A benchmark run: make test-large. The steps it times: test_skip_embedding_gradient_traces_both_forms; the
# forms' values and gradients: tests/test_skip_embedding.py.
@pytest.mark.large
@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_skip_embedding_gradient_times_the_summed_product_the_matmul_and_the_graph(tmp_path, capsys):
    """benchmarks/skip_embedding_gradient.py: the product alone and a SiT's train step, each under XLA with
    the summed input gradient and with the matmul's, and in a graph; all timed and their ratios printed and
    written, and which form this host's steps take."""
    module = _load_benchmark("skip_embedding_gradient")
    out = tmp_path / "se.json"
    assert module.main(["--quick", "--models", "sit", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (
        report["command"] == f"python benchmarks/skip_embedding_gradient.py --quick --models sit --out {out}"
    )
    settings = {"models": ["sit"], "image_size": 16, "batch": 2, "repeats": 3, "rows": module.QUICK_ROWS}
    assert report["settings"] == {**settings, "quick": True}
    printed = capsys.readouterr().out
    for name in (module.PRODUCT, "sit"):
        r = report["results"][name]
        assert r["summed_over_matmul"] == pytest.approx(r["xla_summed_ms"] / r["xla_matmul_ms"])
        assert r["xla_summed_over_graph"] == pytest.approx(r["xla_summed_ms"] / r["graph_ms"])
        assert f"summed / matmul {r['summed_over_matmul']:.3f}" in printed
    default = "summed" if module.sums_gradient_by_default() else "matmul"
    assert report["default"] == default
    assert f"This host's XLA steps take the {default} input gradient." in printed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "vitt"], "--models: unknown encoder 'vitt'"),
        (["--batch", "0"], "--batch must be at least 1"),
        (["--out", "."], "--out must be a file path"),
        (["--image_size", "14"], "--models sit at --image_size 14: sit with pool_size=2"),
    ],
)
def test_projection_gradients_refuses_bad_arguments_in_one_sentence(argv, message, capsys):
    assert _load_benchmark("projection_gradients").main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_native_ab_refuses_a_base_that_is_no_commit(capsys):
    assert _load_benchmark("native_ab").main(["--base", "no-such-revision"]) == 2
    err = capsys.readouterr().err
    assert "--base no-such-revision is not a commit of the repository at" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_native_ab_says_in_one_sentence_when_the_base_does_not_build(monkeypatch, tmp_path, capsys):
    module = _load_benchmark("native_ab")
    monkeypatch.setattr(module, "compile_command", lambda output, sources: ["false"])
    out = tmp_path / "ab.json"
    assert module.main(["--base", "HEAD", "--quick", "--models", "sit", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("native_ab.py: g++ failed on the kernels of ") and len(err.strip().splitlines()) == 1
    )
    assert not out.exists()


def test_native_ab_swaps_in_the_base_ops_only_while_tracing(monkeypatch):
    """base_ops replaces each op of this tree's library the base library also has, then puts it back."""
    import types

    module = _load_benchmark("native_ab")
    ours = types.SimpleNamespace(sit_window_attention="ours", sit_max_pool="ours pool")
    base = types.SimpleNamespace(sit_base_window_attention="base", sit_base_only_in_base="base only")
    monkeypatch.setattr(module.native, "library", lambda: ours)
    assert module._python_name("SitBaseWindowAttentionGrad") == "sit_base_window_attention_grad"
    with module.base_ops(base) as swapped:
        assert swapped == 1
        assert (ours.sit_window_attention, ours.sit_max_pool) == ("base", "ours pool")
        assert not hasattr(ours, "sit_only_in_base")
    assert ours.sit_window_attention == "ours"


@pytest.mark.large
@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_native_ab_times_both_builds_of_each_model(tmp_path, capsys):
    """benchmarks/native_ab.py --base HEAD: the committed kernels built renamed, run in the base's step."""
    out = tmp_path / "ab.json"
    argv = ["--base", "HEAD", "--quick", "--models", "sit", "--ops", "global_grid", "--out", str(out)]
    module = _load_benchmark("native_ab")
    assert module.main(argv) == 0
    report = json.loads(out.read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=module.REPOSITORY, capture_output=True, text=True)
    head = head.stdout.strip()
    assert report["base_commit"] == head and report["settings"]["repeats"] == 3
    r = report["results"]["sit"]
    assert r["base_op_types_in_step"] >= 3  # the attention ops, the projection, the layer norm, ...
    assert r["this_over_base"] == pytest.approx(r["this_ms"] / r["base_ms"])
    op = report["results"]["global_grid"]  # SitBaseWindowAttention and its gradient
    assert op["base_op_types_in_step"] == 2 and report["settings"]["ops"] == ["global_grid"]
    assert op["same_bits"] is True  # HEAD's kernels against this tree's, which are HEAD's
    printed = capsys.readouterr().out
    assert "sit train step: the base's kernels" in printed
    assert "global_grid forward + backward: the base's kernels" in printed


def test_way_results_give_each_ways_milliseconds_then_the_named_ratios():
    medians = {("m", "a"): 0.002, ("m", "b"): 0.004, ("n", "a"): 0.003, ("n", "b"): 0.001}
    results = _load_benchmark("projection_gradients").way_results(
        medians, ["m", "n"], ("a", "b"), {"b_over_a": ("b", "a")}
    )
    assert list(results["m"]) == ["a_ms", "b_ms", "b_over_a"]
    assert results["m"] == pytest.approx({"a_ms": 2.0, "b_ms": 4.0, "b_over_a": 2.0})
    assert results["n"]["b_over_a"] == pytest.approx(1 / 3)


def test_interleaved_medians_warm_up_then_call_every_function_once_a_round():
    import tensorflow as tf

    from sit_keras.benchmarking import interleaved_medians

    calls = []

    def function(name: str):
        def run():
            calls.append(name)
            return [tf.constant(1.0), {"nested": tf.constant(2.0)}]

        return run

    medians = interleaved_medians({("a", 0): function("a"), "b": function("b")}, repeats=3)
    assert calls == ["a", "b"] * 4  # one warm-up call each, then 3 rounds in turn
    assert set(medians) == {("a", 0), "b"} and all(seconds >= 0 for seconds in medians.values())


def test_interleaved_medians_in_turns_leave_each_turns_first_call_untimed(monkeypatch):
    from sit_keras import benchmarking

    clock = [0.0]
    monkeypatch.setattr(benchmarking.time, "perf_counter", lambda: clock[0])
    calls = []

    def function(name: str, first: float, then: float):
        def run():
            turn_starts = not calls or calls[-1] != name
            calls.append(name)
            clock[0] += first if turn_starts else then

        return run

    medians = benchmarking.interleaved_medians(
        {"a": function("a", 5.0, 1.0), "b": function("b", 7.0, 2.0)}, repeats=2, turn=3
    )
    assert calls == ["a", "b"] + ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    assert medians == {"a": 1.0, "b": 2.0}  # the slow first call of every turn is left out


def test_interleaved_medians_times_the_results_without_copying_them_out():
    from sit_keras.benchmarking import interleaved_medians

    class Result:  # what .numpy() on a large tensor would cost: a copy, not the computation
        def numpy(self):
            raise AssertionError("interleaved_medians copied a result out")

    assert set(interleaved_medians({"a": Result}, repeats=2)) == {"a"}


_ASYNCHRONOUS_CALLS = """
import sit_keras.quiet_start
import time
import tensorflow as tf
from sit_keras.benchmarking import interleaved_medians
tf.config.experimental.set_synchronous_execution(False)
x = tf.random.normal([400, 400])
@tf.function
def chain():
    y = x
    for _ in range(60):
        y = tf.matmul(y, x) / 400.0
    return y
chain().numpy()
start = time.perf_counter()
chain().numpy()
computed = time.perf_counter() - start
print(interleaved_medians({"chain": chain}, repeats=5)["chain"] / computed)
"""


def test_interleaved_medians_waits_for_asynchronous_calls():
    """Under asynchronous eager execution a call returns before its tensors exist: the time must wait."""
    result = subprocess.run(
        [sys.executable, "-c", _ASYNCHRONOUS_CALLS], capture_output=True, text=True, check=True, timeout=300
    )
    assert float(result.stdout.strip().splitlines()[-1]) > 0.5


def test_vit_attention_times_keras_layer_and_the_vits_at_each_size(tmp_path, capsys):
    out = tmp_path / "vit_attention.json"
    assert _load_benchmark("vit_attention").main(["--quick", "--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == f"python benchmarks/vit_attention.py --quick --repeats 2 --out {out}"
    assert report["repeats"] == 2 and report["commit"]
    printed = capsys.readouterr().out
    for name, (tokens, heads) in {"lavacrossing": (50, 8), "procgen": (65, 4)}.items():
        r = report["results"][name]
        assert (r["batch"], r["tokens"], r["width"], r["heads"]) == (8, tokens, 64, heads)
        assert r["keras_ms"] > 0 and r["vit_ms"] > 0
        assert r["keras_over_vit"] == pytest.approx(r["keras_ms"] / r["vit_ms"])
        assert f"ratio {r['keras_over_vit']:.2f}" in printed


@pytest.mark.parametrize(
    "argv, message",
    [(["--repeats", "0"], "--repeats must be at least 1"), (["--out", "."], "--out must be a file path")],
)
def test_vit_attention_refuses_bad_arguments_in_one_sentence(argv, message, capsys):
    assert _load_benchmark("vit_attention").main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_op_profile_sums_the_ops_of_a_stage_by_type_and_node(tmp_path, capsys):
    out = tmp_path / "ops.json"
    assert _load_benchmark("op_profile").main(["--quick", "--top", "4", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (
        report["command"] == f"python benchmarks/op_profile.py --quick --top 4 --out {out}"
        and report["commit"]
    )
    assert report["settings"]["stage"] == "local_gsa" and report["settings"]["batch"] == 2
    types = {row["op"]: row for row in report["op_types"]}
    # The local blocks' attention: the native op where the kernels load (sit_keras.native), else batched
    # matmuls, Eigen's kernel or oneDNN's where TensorFlow turns oneDNN on (it does on some CPUs only).
    attention = {"SitWindowAttention"} if native.available() else {"BatchMatMulV2", "_MklBatchMatMulV2"}
    assert attention & set(types)
    assert "ExecutorState:" not in {row["node"] for row in report["nodes"]}
    assert sum(row["share"] for row in report["op_types"]) == pytest.approx(1.0)
    assert sum(row["ms_per_call"] for row in report["op_types"]) == pytest.approx(
        report["summed_op_ms_per_call"]
    )
    assert len(report["nodes"]) == 4 and all(" -> " in row["shapes"] for row in report["nodes"])
    # The native ops' gradients are made outside the tape's name scope (their custom gradient).
    prefixes = (
        "local_gsa/",
        "gradient_tape/",
        "MatMul",
        "SitWindowAttentionGrad",
        "SitClassTokenAttention",
        "SitChannelsFirstProjection",
    )
    assert all(row["node"].startswith(prefixes) for row in report["nodes"])
    assert f"{report['nodes'][0]['node']} ({report['nodes'][0]['op']})" in capsys.readouterr().out
    assert report["settings"]["precision"] == "float32"
    assert "float32" in {row["dtypes"] for row in report["nodes"]}


def test_op_profile_builds_the_encoder_under_the_precision_it_is_given(tmp_path):
    out = tmp_path / "ops.json"
    argv = ["--quick", "--stage", "train", "--precision", "mixed_bfloat16", "--top", "40", "--out", str(out)]
    assert _load_benchmark("op_profile").main(argv) == 0
    report = json.loads(out.read_text())
    assert "(graph mode, mixed_bfloat16)" in report["what"]
    matmuls = {row["dtypes"] for row in report["nodes"] if "MatMul" in row["op"]}
    assert "bfloat16" in matmuls  # the projections and score matmuls run in the compute dtype
    assert tf_keras.mixed_precision.global_policy().name == "float32"  # and the policy is back


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "vit", "--stage", "global_gsa"], "needs a SiT-family model"),
        (["--calls", "0"], "--calls must be at least 1"),
        (["--stage", "head"], "--stage"),
        (["--jit_compile", "--stage", "local_gsa"], "--jit_compile profiles the train step"),
        (["--jit_compile", "--stage", "train", "--one_op_at_a_time"], "--one_op_at_a_time is for graph mode"),
        (["--model", "resnet"], "unknown encoder 'resnet'"),
    ],
)
def test_op_profile_refuses_bad_arguments_in_one_sentence(argv, message, capsys):
    assert _load_benchmark("op_profile").main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


# A benchmark run in a fresh process: make test-large. The script's sums by type and node:
# test_op_profile_sums_the_ops_of_a_stage_by_type_and_node.
@pytest.mark.large
@needs_xla_kernels
def test_op_profile_under_xla_times_each_hlo_instruction_and_names_its_op(tmp_path):
    """A fresh process (XLA reads its flags at its first compilation): the MiniGrid CNN's XLA train step."""
    out = tmp_path / "ops.json"
    config = "configs/minigrid/lavacrossing_cnn.gin"
    argv = [
        "--model",
        config,
        "--stage",
        "train",
        "--jit_compile",
        "--quick",
        "--top",
        "50",
        "--out",
        str(out),
    ]
    script = REPO / "benchmarks" / "op_profile.py"
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert "(XLA, per HLO instruction, float32)" in report["what"] and report["settings"]["jit_compile"]
    types = {row["op"] for row in report["op_types"]}
    # The native kernel gradients are custom calls named by their target; Adam's updates fused loops named
    # by their TensorFlow op.
    assert "sit_conv2d_kernel_grad_f32" in types and "AssignSubVariableOp" in types
    assert sum(row["share"] for row in report["op_types"]) == pytest.approx(1.0)
    nodes = report["nodes"]
    assert nodes and all(row["node"].endswith("]") and " [" in row["node"] and row["shapes"] for row in nodes)
    assert any(row["node"].startswith("gradient_tape/conv_encoder/") for row in nodes)


# A benchmark run in a fresh process: make test-large. A started runtime refused:
# test_op_profile_one_op_at_a_time_refuses_a_started_runtime.
@pytest.mark.large
def test_op_profile_one_op_at_a_time_gives_tensorflow_one_inter_op_thread(tmp_path):
    """A fresh process (the thread pools are fixed when TensorFlow's runtime starts)."""
    out = tmp_path / "ops.json"
    argv = ["--quick", "--stage", "train", "--one_op_at_a_time", "--out", str(out)]
    script = REPO / "benchmarks" / "op_profile.py"
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert "(graph mode, one op at a time, float32)" in report["what"]
    assert report["settings"]["one_op_at_a_time"] is True
    assert report["environment"]["threading"]["inter_op_parallelism_threads"] == 1


def test_op_profile_one_op_at_a_time_refuses_a_started_runtime():
    """A fresh process whose runtime starts with TensorFlow's default threads before ``main`` is called (the
    test suite's own processes may already run one inter-op thread)."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import tensorflow as tf; tf.constant(1.0) + 1.0; "
        "import op_profile; sys.exit(op_profile.main(['--quick', '--one_op_at_a_time']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "--one_op_at_a_time needs a fresh process: TensorFlow's threads are set."
    )


def test_xla_cpu_ops_windows_are_each_tokens_3x3_neighbourhood():
    windows = _load_benchmark("xla_cpu_ops")._windows()
    assert windows.shape == (64, 9)
    assert list(windows[9]) == [0, 1, 2, 8, 9, 10, 16, 17, 18]  # token (1, 1)
    assert list(windows[0]) == [0, 0, 1, 0, 0, 1, 8, 8, 9]  # a corner, clamped


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--names", "resnet"], "unknown names ['resnet']"),
        (["--names", ","], "unknown names []"),
        (["--batch", "0"], "must be >= 1"),
        (["--batch", "many"], "--batch"),
        (["--out", "."], "--out must be a file path, not a folder"),
    ],
)
def test_xla_cpu_ops_refuses_bad_arguments_in_one_sentence(argv, message, tmp_path, capsys):
    assert _load_benchmark("xla_cpu_ops").main(["--out", str(tmp_path / "x.json"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


def test_jit_compile_auto_measures_each_config_now(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SIT_KERAS_CACHE_DIR", str(tmp_path / "user_cache"))
    monkeypatch.setenv("SIT_KERAS_NO_MEASURE", "1")  # the script measures all the same (and this is restored)
    bench = _load_benchmark("jit_compile_auto")
    out = tmp_path / "auto.json"
    assert bench.main(["--gin_files", "configs/dmc/cartpole_swingup_mlp.gin", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (row,) = report["configs"]
    assert (row["encoder"], row["minibatch_size"]) == ("mlp", 1000)  # 16 envs x 250 steps / 4
    assert row["seconds"]["on"] > 0 and row["seconds"]["off"] > 0
    assert row["choice"] == ("on" if row["xla_over_graph"] < report["margin"] else "off")
    assert report["command"] == (
        f"python benchmarks/jit_compile_auto.py --gin_files configs/dmc/cartpole_swingup_mlp.gin --out {out}"
    )
    assert f"XLA / graph {row['xla_over_graph']:.2f} -> {row['choice']}" in capsys.readouterr().out
    assert not (tmp_path / "user_cache").exists()  # the user's cache is neither read nor written


def test_jit_compile_auto_answers_the_precision_question_as_a_run_would(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SIT_KERAS_CACHE_DIR", str(tmp_path / "user_cache"))
    bench = _load_benchmark("jit_compile_auto")
    out = tmp_path / "auto.json"
    config = "configs/dmc/cartpole_swingup_mlp.gin"
    assert bench.main(["--gin_files", config, "--questions", "precision", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (row,) = report["configs"]
    assert report["questions"] == ["precision"] and "xla_over_graph" not in row  # only what was asked
    precision = row["precision"]
    assert set(precision["seconds"]) == {"float32", "mixed_bfloat16"}
    assert min(precision["seconds"].values()) > 0
    ratio = precision["bfloat16_over_float32"]
    assert precision["choice"] == ("mixed_bfloat16" if ratio < report["margin"] else "float32")
    assert f"mixed_bfloat16 / float32 {ratio:.2f} -> {precision['choice']}" in capsys.readouterr().out
    assert not (tmp_path / "user_cache").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--questions", "speed"], "--questions: expected one or more of jit_compile, precision; got"),
        (["--gin_files", ","], "--gin_files: give at least one gin file"),
        (["--gin_files", "configs/none.gin"], "--gin_files: configs/none.gin is not a file"),
        (["--out", "."], "--out must be a file path, not a folder"),
    ],
)
def test_jit_compile_auto_refuses_bad_arguments_in_one_sentence(argv, message, capsys):
    assert _load_benchmark("jit_compile_auto").main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


# A benchmark run: make test-large. Each kernel's values and gradients: tests/test_native*.py.
@pytest.mark.large
@pytest.mark.skipif(not native.available(), reason="needs the native kernels: `make install` builds them")
def test_native_ops_times_each_kernel_forward_and_backward(tmp_path, capsys):
    out = tmp_path / "ops.json"
    assert _load_benchmark("native_ops").main(["--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["command"] == f"python benchmarks/native_ops.py --quick --out {out}"
    assert report["settings"]["batch"] == 16 and report["settings"]["repeats"] == 3 and report["commit"]
    results = report["results"]
    printed = capsys.readouterr().out
    assert f"one 1024^3 matmul: {results['matmul_ms']:.2f} ms" in printed
    attention = ("first_block", "class_token", "global_grid", "layer_norm", "class_token_values")
    cases = (*attention, "stem", "stem_builtin")
    projections = ("projection", "projection_builtin", "projection_bfloat16", "projection_bfloat16_builtin")
    for case in (*cases, *projections, "pool", "pool_builtin"):
        forward, backward = results[case]["forward"], results[case]["backward"]
        for timing in (forward, backward):
            assert timing["median_ms"] > 0
            assert timing["matmul_times"] == pytest.approx(timing["median_ms"] / results["matmul_ms"])
        assert f"| {case} | {forward['median_ms']:.2f} | {backward['median_ms']:.2f} |" in printed
    for case in ("stem", "projection", "projection_bfloat16", "pool"):
        for stage in ("forward", "backward"):
            speedup = results[f"{case}_builtin"][stage]["median_ms"] / results[case][stage]["median_ms"]
            assert results[f"{case}_speedup"][stage] == pytest.approx(speedup, rel=1e-6)
    assert results["projects_bfloat16_on_amx"] == native.projects_bfloat16_on_amx()
    kind = (
        "on AMX tiles" if native.projects_bfloat16_on_amx() else "through TensorFlow's matmuls (no AMX here)"
    )
    assert f"The channels-first projection in bfloat16, {kind}, speed-up" in printed
    for case in attention:  # the attention ops again, storing bfloat16
        ratio = results["bfloat16_over_float32"][case]
        for stage in ("forward", "backward"):
            stored = results[f"{case}_bfloat16"][stage]["median_ms"]
            assert ratio[stage] == pytest.approx(stored / results[case][stage]["median_ms"], rel=1e-6)
        line = f"  {case}: forward {ratio['forward']:.2f}x, forward + backward {ratio['backward']:.2f}x"
        assert line in printed
    assert report["settings"]["projection"] == {"kernel": [64, 192], "columns": 16 * 64 * 17}
    assert report["settings"]["pool"] == {"maps": [64, 64, 3], "size": 2}
    if native.xla_load_problem() is None:  # under XLA too, through the ops' XLA kernels
        for case in ("stem", "projection", "pool"):
            for stage in ("forward", "backward"):
                native_ms, builtin_ms = (
                    results[f"{case}{kind}_xla"][stage]["median_ms"] for kind in ("", "_builtin")
                )
                assert results["xla_speedup"][case][stage] == pytest.approx(builtin_ms / native_ms, rel=1e-6)
            assert f"Under XLA, the native {case} through its XLA kernels" in printed
        for case in attention:
            for stage in ("forward", "backward"):
                xla_ms, graph_ms = (results[name][stage]["median_ms"] for name in (f"{case}_xla", case))
                assert results["xla_over_graph"][case][stage] == pytest.approx(xla_ms / graph_ms, rel=1e-6)
            assert f"Under XLA, the native {case} through its XLA kernels over the same kernels" in printed
    else:
        assert results["xla_problem"] == native.xla_load_problem() and "pool_xla" not in results
        assert "Not measured under XLA: the XLA kernels are not usable here" in printed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch", "0"], "--batch and --repeats must be at least 1"),
        (["--out", "."], "--out must be a file path"),
    ],
)
def test_native_ops_refuses_bad_arguments_in_one_sentence(argv, message, capsys):
    assert _load_benchmark("native_ops").main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
