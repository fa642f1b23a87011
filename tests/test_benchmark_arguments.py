"""Every benchmark script refuses a bad argument before it computes or writes anything: one sentence on
stderr (no traceback, no usage block) and exit status 2 (``sit_keras.benchmarking.SentenceParser``).

In the argument lists, ``{tmp}`` stands for an empty temporary folder and ``{file}`` for a file in it.
"""

from __future__ import annotations

import functools

import pytest
from run_folders import load_benchmark


@functools.cache
def _module(name: str):
    return load_benchmark(name)


CASES = [
    ("ppo_throughput", ["--models", "sitx"], "--models: unknown model 'sitx'; expected some of: impala_cnn,"),
    ("ppo_throughput", ["--game", "pong"], "--game: unknown game 'pong'; expected one of: bigfish,"),
    ("ppo_throughput", ["--iterations", "0"], "--iterations must be at least 1; received 0."),
    ("ppo_throughput", ["--out", "{tmp}"], "--out must be a file path, not a folder"),
    ("atari100k", ["--games", "tetris"], "Argument --games: unknown game(s) tetris; expected some of:"),
    ("atari100k", ["--seeds", "0,0"], "--seeds must be distinct non-negative integers; received '0,0'."),
    ("atari100k", ["--eval_episodes", "0"], "--eval_episodes must be at least 1; received 0."),
    ("atari100k", ["--gin_bindings", "foo.bar = 1"], "--gin_bindings do not apply to pong_cnn.gin"),
    ("dmc_walker", ["--speed_blocks", "1"], "--speed_blocks must be at least 2"),
    ("dmc_walker", ["--encoders", "resnet"], "Argument --encoders: unknown encoder(s) resnet"),
    ("dmc_walker", ["--root", "{file}"], "--root must be a folder; received"),
    ("encoders", ["--repeats", "0"], "--repeats must be at least 1; received 0."),
    ("encoders", ["--models", "resnet"], "Argument --models: unknown encoder 'resnet'; expected one of:"),
    ("encoders", ["--out", "{tmp}"], "--out must be a file path, not a folder"),
    ("export", ["--root_dirs", "{tmp}/none"], "/none' does not exist (train it first"),
    ("export", ["--root_dirs", "{tmp}"], "holds no trained policy (policy_network.json)."),
    ("export", ["--calls", "0"], "--calls must be at least 1; received 0."),
    ("minigrid_rotation", ["--models", "nosuch"], "--models: no config 'minigrid/lavacrossing_nosuch.gin'"),
    ("minigrid_rotation", ["--merge", "{tmp}/none.json"], "/none.json' does not exist."),
    ("minigrid_rotation", ["--env_steps", "0"], "--env_steps must be at least 1; received 0."),
    ("pi_cartpole", ["--policies", "cnn"], "--policies: unknown policies ['cnn']; expected some of"),
    (
        "pi_cartpole",
        ["--reshuffle_every", "0"],
        "--reshuffle_every must be comma-separated positive integers",
    ),
    ("pi_cartpole", ["--skip_training", "--root", "{tmp}"], "pi_seed0' holds no trained policy"),
    ("pi_cartpole_distill", [], "The following arguments are required: --teacher_dir."),
    ("pi_cartpole_distill", ["--teacher_dir", "{tmp}"], "--teacher_dir: "),
    (
        "pi_cartpole_distill",
        ["--teacher_dir", "{tmp}", "--dagger_teacher_probability", "2"],
        "--dagger_teacher_probability must be between 0 and 1. Received: 2.0.",
    ),
    ("kernel_gradient_transpose", ["--repeats", "0"], "--repeats must be at least 1; received 0."),
    ("kernel_gradient_transpose", ["--models", "resnet"], "--models: "),
    ("kernel_gradient_transpose", ["--out", "{tmp}"], "--out must be a file path, not a folder"),
    ("skip_embedding_gradient", ["--rows", "0"], "--rows must be at least 1; received 0."),
    ("skip_embedding_gradient", ["--models", "resnet"], "--models: "),
    ("skip_embedding_gradient", ["--out", "{tmp}"], "--out must be a file path, not a folder"),
    ("xla_host_threads", ["--repeats", "0"], "--repeats must be at least 1; received 0."),
    ("xla_host_threads", ["--models", "resnet"], "--models: "),
    (
        "xla_host_threads",
        ["--turn", "1"],
        "--turn must be at least 2 (its first call is not timed); received 1.",
    ),
    ("xla_host_threads", ["--out", "{tmp}"], "--out must be a file path, not a folder"),
    ("native_ab", [], "The following arguments are required: --base."),
    ("native_ab", ["--base", "HEAD", "--repeats", "0"], "--repeats must be at least 1; received 0."),
    ("native_ab", ["--base", "HEAD", "--models", "resnet"], "--models: "),
    (
        "native_ab",
        ["--base", "HEAD", "--ops", "global_grid_xla"],
        "--ops: global_grid_xla is not one of native_ops",
    ),
    (
        "native_ab",
        ["--base", "HEAD", "--models", ",", "--ops", ""],
        "--models and --ops name nothing to time.",
    ),
    ("quantisation", [], "The following arguments are required: --policies."),
    ("quantisation", ["--policies", "sit={tmp}/none"], "(sit) is not a folder; train it first"),
    ("quantisation", ["--policies", "sit"], "Argument --policies: expected name=root_dir"),
    ("run_log", [], "The following arguments are required: --log."),
    ("run_log", ["--log", "{file}", "--final_wall_s", "-1"], "--final_wall_s must be a finite number >= 0"),
    ("supervised", ["--epochs", "0"], "--epochs must be at least 1; received 0."),
    ("supervised", ["--learning_rate", "0"], "--learning_rate must be a positive number; received 0.0."),
    ("supervised", ["--models", "resnet"], "Argument --models: unknown model(s) resnet"),
    (
        "table4_part",
        ["--report", "{file}", "--log", "{file}"],
        "The following arguments are required: --out.",
    ),
    (
        "table4_part",
        ["--report", "{file}", "--log", "{file}", "--every", "999", "--out", "{tmp}/part.json"],
        "--every must be at least 1000 steps. Received: 999.",
    ),
    ("table4_part", ["--report", "{file}", "--log", "{file}", "--out", "{tmp}"], "--out must be a file path"),
    ("training_curve", ["--root_dir", "{tmp}/none"], "--root_dir: '"),
    ("training_curve", ["--root_dir", "{tmp}"], "--root_dir: no TensorBoard logs in"),
    ("training_curve", ["--root_dir", "{tmp}", "--every", "0"], "--every must be at least 1; received 0."),
]


@pytest.mark.parametrize(
    ("script", "argv", "message"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_a_bad_argument_is_one_sentence_and_status_2(script, argv, message, tmp_path, capsys):
    module = _module(script)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "file.txt").write_text("not a report\n")
    argv = [a.format(tmp=folder, file=folder / "file.txt") for a in argv]
    capsys.readouterr()  # what importing the script printed
    assert module.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), captured.err
    assert message in lines[0]
    assert "Traceback" not in captured.err and "usage:" not in captured.err
    assert captured.out == ""
    assert sorted(p.name for p in folder.iterdir()) == ["file.txt"]  # nothing written


def test_check_gin_bindings_names_the_config_and_leaves_gin_clear():
    import gin

    from sit_keras.benchmarking import UsageError, check_gin_bindings

    @gin.configurable("benchmark_arguments_probe")
    def probe(x: int = 1) -> int:
        return x

    def parse() -> None:
        gin.bind_parameter("benchmark_arguments_probe.x", 2)  # the config's part, then a bad binding
        raise ValueError("No configurable matching 'foo.bar'.")

    with pytest.raises(UsageError, match=r"--gin_bindings do not apply to a\.gin \(No configurable matching"):
        check_gin_bindings(parse, "a.gin")
    assert probe() == 1  # cleared: the binding is gone
    check_gin_bindings(lambda: None, "b.gin")  # bindings that apply: nothing said


def test_check_out_file_can_ask_for_an_existing_folder(tmp_path):
    from sit_keras.benchmarking import UsageError, check_out_file

    check_out_file(str(tmp_path / "missing" / "out.json"))  # the scripts that create the folder
    with pytest.raises(UsageError, match="--out: the folder of .* does not exist."):
        check_out_file(str(tmp_path / "missing" / "out.json"), folder_must_exist=True)
    check_out_file(str(tmp_path / "out.json"), folder_must_exist=True)
    with pytest.raises(UsageError, match="--out must be a file path, not a folder"):
        check_out_file(str(tmp_path), folder_must_exist=True)
