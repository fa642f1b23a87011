"""AttentionNeuron's Table 2 and Table 6 by distillation: a teacher, a PI student and an MLP student.

Tang & Ha (NeurIPS 2021) turn policies trained by other methods into
permutation-invariant ones by behaviour cloning (section 4.2, Ant and Pong).
Here the teacher is any trained cart-pole policy on the 5 state inputs (the state
SAC of ``configs/dmc/cartpole_swingup_state.gin`` on dmc cartpole-swingup, or of
``configs/cartpole/swingup_harder_sac.gin`` on the paper's CartPoleSwingUpHarder);
the students learn and are tested on the teacher's environment. It is
cloned (``sit-distill``, ``train_eval.agent = 'bc'``) into

- ``pi``: the AttentionNeuron student (the encoder of ``cartpole_swingup_pi.gin``),
- ``mlp``: a same-size MLP student (the torso of ``cartpole_swingup_mlp.gin``),

on the same teacher data, with the same settings: plain behaviour cloning
(the paper's), or with ``--dagger_rounds`` rounds of DAgger, in which the
student acts and the teacher labels the states it visits. Then the teacher and both
students play ``pi_cartpole.py``'s Table 2 and Table 6 tests (greedy, the
same evaluation seeds for every cell). Networks that take exactly 5 inputs
(the teacher, the MLP) get N/A where the test changes the number of inputs.

    python benchmarks/pi_cartpole_distill.py --teacher_dir runs/cartpole_sac \\
        --total_env_steps 64000 --num_epochs 20 --num_episodes 24 \\
        --out benchmarks/reference/pi_cartpole_distill.json
    python benchmarks/pi_cartpole_distill.py --teacher_dir ... --skip_training   # test the students again
    python benchmarks/pi_cartpole_distill.py --teacher_dir ... --students pi --skip_training \
        --pi_dir runs/pi_ppo_finetune   # test another folder's AttentionNeuron policy (e.g. PPO's)
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin
import numpy as np

from sit_keras.agents import train
from sit_keras.agents.algorithms import bc
from sit_keras.agents.environments import cartpole_swingup
from sit_keras.agents.networks import policy_network
from sit_keras.agents.training import evaluation, harness, run_record
from sit_keras.benchmarking import SentenceParser, UsageError, check_out_file, parse_or_say_why

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pi_cartpole  # noqa: E402  (the Table 2 / 6 tests, beside this script)
import pi_cartpole_es  # noqa: E402  (its run record in a --pi_dir folder)

STUDENT_CONFIGS = {"pi": "cartpole_swingup_pi.gin", "mlp": "cartpole_swingup_mlp.gin"}
LABELS = {"teacher": "teacher", "pi": "AttentionNeuron student (PI)", "mlp": "MLP student"}


def student_network(name: str) -> dict[str, Any]:
    """The student's ``encoder``, ``encoder_kwargs`` and ``fc_layer_params``, read from its PPO config."""
    gin.clear_config()
    try:
        train.parse_gin([str(pi_cartpole.CONFIGS / STUDENT_CONFIGS[name])], [])
        return {
            "encoder": gin.query_parameter("train_eval.encoder"),
            "encoder_kwargs": dict(gin.query_parameter("train_eval.encoder_kwargs")),
            "fc_layer_params": tuple(gin.query_parameter("ppo.fc_layer_params")),
        }
    finally:
        gin.clear_config()


def record_time_limit(steps: int) -> dict[str, Any]:
    """Recorded episodes end after ``steps``; the student's evaluation (its saved description, which
    ``sit-eval`` reads) keeps the environment's whole episodes."""
    whole = cartpole_swingup.MAX_STEPS
    return {"env_kwargs": {"time_limit": steps}, "eval_env_kwargs": {"time_limit": whole}}


def distill_student(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Clones the teacher into ``<root>/<name>`` (resumes); returns the folder, settings, results and time."""
    root_dir = os.path.join(args.root, name)
    network = student_network(name)
    if name == "pi" and args.pi_fc_layer_params:
        network["fc_layer_params"] = tuple(int(n) for n in args.pi_fc_layer_params.split(","))
    if name == "pi":
        network["encoder_kwargs"].update(args.pi_encoder_kwargs)
    settings = {
        "agent": "bc", "teacher_dir": args.teacher_dir, "num_envs": args.num_envs,
        "total_env_steps": args.total_env_steps, "num_epochs": args.num_epochs,
        "sequence_length": args.sequence_length, "seed": args.seed, "num_eval_episodes": 0,
        "learning_rate": args.learning_rate, "anneal_learning_rate": args.anneal_learning_rate,
        "dagger_rounds": args.dagger_rounds, "dagger_teacher_probability": args.dagger_teacher_probability,
        "previous_action_noise": args.previous_action_noise if name == "pi" else 0.0,
        "noise_sensors": args.noise_sensors if name == "pi" else 0,
        "streams_per_epoch": args.streams_per_epoch, "action_loss": args.action_loss,
        "previous_action": args.previous_action if name == "pi" else "own",
        "progress": False, **network,
        **(record_time_limit(args.record_time_limit) if args.record_time_limit else {}),
    }  # fmt: skip
    gin.clear_config()
    start = time.perf_counter()
    results = harness.train_eval(root_dir, **settings)
    history = results.pop("history")
    results.pop("evaluations")
    return {
        "root_dir": root_dir,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
        "seconds": time.perf_counter() - start,
        "loss_per_epoch": [round(h["loss"], 6) for h in history],
        "rounds_of_epochs": [h.get("round", 0) for h in history],
        "teacher_data_episodes": results.get("teacher_data_episodes"),
        "train_step": results["train_step"],
    }


def test_policy(root_dir: str, tests: Sequence[pi_cartpole.SensorTest], args) -> dict[str, dict[str, Any]]:
    """Mean, std and every return per test; N/A (absent) where the network takes a fixed 5 inputs."""
    net = pi_cartpole.load_actor(root_dir)
    fixed_inputs = not net.state_spec  # the PI networks are the recurrent ones
    env_name = policy_network.read_description(args.teacher_dir).env_name  # the students' too
    results = {}
    for test in tests:
        if fixed_inputs and (test.duplicate or test.noise_channels):
            continue
        returns = pi_cartpole.run_test(
            net, test, args.num_episodes, args.num_eval_envs, args.eval_seed, env_name=env_name
        )
        results[test.name] = {
            "mean": float(np.mean(returns)),
            "std": float(np.std(returns)),
            "returns": returns,
        }
    return results


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}): {text!r}") from error
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def pi_dir_record(root_dir: str) -> dict[str, Any]:
    """What ``--pi_dir``'s run was: its folder, recorded settings and evaluations while it trained, or the
    report of the ES run that wrote it (``pi_cartpole_es.py``)."""
    record: dict[str, Any] = {"path": root_dir}
    records = (
        ("run_settings", run_record.RECORD_FILE),
        ("evaluations", evaluation.EVALUATIONS_FILE),
        ("es_run", pi_cartpole_es.RECORD_FILE),
    )
    for key, name in records:
        path = os.path.join(root_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                record[key] = json.load(f)
    return record


def _check_training_folder(flag: str, folder: str) -> None:
    """Raises ``UsageError`` naming ``--<flag>`` unless ``folder`` has a readable ``policy_network.json``."""
    try:
        policy_network.read_description(folder)
    except FileNotFoundError as error:
        raise UsageError(f"--{flag}: {error}") from None
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(
            f"--{flag}: {folder!r} holds a damaged {policy_network.DESCRIPTION_FILE} ({error!r})."
        ) from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--teacher_dir", required=True, help="a trained cartpole-swingup folder (5 state inputs)"
    )
    parser.add_argument(
        "--root", default="runs/pi_cartpole_distill", help="the students' folders (resumable)"
    )
    parser.add_argument("--num_envs", type=int, default=16, help="streams of teacher data")
    parser.add_argument("--total_env_steps", type=int, default=64_000, help="teacher steps recorded in all")
    parser.add_argument("--num_epochs", type=int, default=20)
    parser.add_argument("--sequence_length", type=int, default=50)
    parser.add_argument("--learning_rate", type=float, default=1e-3, help="the students' Adam rate")
    parser.add_argument(
        "--anneal_learning_rate", action="store_true", help="decay it linearly to 0 within each round"
    )
    parser.add_argument("--dagger_rounds", type=int, default=0, help="DAgger rounds (0: plain cloning)")
    parser.add_argument("--students", default="pi,mlp", help="which students to distil and test")
    parser.add_argument(
        "--pi_fc_layer_params", default="", help="the PI student's dense layers (default: its PPO config's)"
    )
    parser.add_argument(
        "--pi_encoder_kwargs",
        type=_json_object,
        default={},
        help="JSON object updating the PI student's AttentionNeuron, e.g. '{\"hidden_size\": 32}'",
    )
    parser.add_argument("--dagger_teacher_probability", type=float, default=0.0)
    parser.add_argument(
        "--previous_action_noise", type=float, default=0.0,
        help="std of N(0, std) on the PI student's previous action while it trains (paper A.4.2: 0.03)",
    )  # fmt: skip
    parser.add_argument(
        "--noise_sensors", type=int, default=0,
        help="up to this many noise channels beside the PI student's readings in training (bc.noise_sensors)",
    )  # fmt: skip
    parser.add_argument(
        "--streams_per_epoch", type=int, default=0,
        help="train each epoch on this many recorded streams drawn at random (bc.streams_per_epoch; 0: all)",
    )  # fmt: skip
    parser.add_argument(
        "--action_loss", choices=bc.ACTION_LOSSES, default="squared",
        help="the students' error on the teacher's action: squared (its mean) or absolute (its median)",
    )  # fmt: skip
    parser.add_argument(
        "--previous_action", choices=bc.PREVIOUS_ACTIONS, default="own",
        help="the PI student's previous-action input in training (bc.previous_action): its own mode, "
        "or the action the recording executed",
    )  # fmt: skip
    parser.add_argument(
        "--record_time_limit", type=int, default=0,
        help="end the recorded episodes after this many steps, so that a round holds more swing-ups "
        "(the environment's time_limit; 0: its own 1000); the tests always run whole episodes",
    )  # fmt: skip
    parser.add_argument("--num_episodes", type=int, default=24, help="test episodes per cell")
    parser.add_argument("--num_eval_envs", type=int, default=24)
    parser.add_argument("--eval_seed", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reshuffles", default=",".join(map(str, pi_cartpole.RESHUFFLES)))
    parser.add_argument("--skip_training", action="store_true", help="test the students already in --root")
    parser.add_argument(
        "--pi_dir", default=None,
        help="with --skip_training: test this training folder as the PI student instead of <root>/pi "
        "(e.g. a PPO run started from a student, configs/cartpole/swingup_harder_pi_finetune.gin)",
    )  # fmt: skip
    parser.add_argument("--out", default=None, help="JSON report")
    args = parser.parse_args(argv)
    for name in (
        "num_envs",
        "total_env_steps",
        "num_epochs",
        "sequence_length",
        "num_episodes",
        "num_eval_envs",
    ):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1. Received: {getattr(args, name)}.")
    for name in (
        "noise_sensors",
        "streams_per_epoch",
        "record_time_limit",
        "dagger_rounds",
        "seed",
        "eval_seed",
    ):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name} must be >= 0. Received: {getattr(args, name)}.")
    if not (args.learning_rate > 0 and np.isfinite(args.learning_rate)):
        raise UsageError(f"--learning_rate must be a positive number. Received: {args.learning_rate}.")
    if not (args.previous_action_noise >= 0 and np.isfinite(args.previous_action_noise)):
        raise UsageError(
            f"--previous_action_noise must be a finite number >= 0. Received: {args.previous_action_noise}."
        )
    if not 0 <= args.dagger_teacher_probability <= 1:
        raise UsageError(
            "--dagger_teacher_probability must be between 0 and 1. "
            f"Received: {args.dagger_teacher_probability}."
        )
    for flag, text in (("reshuffles", args.reshuffles), ("pi_fc_layer_params", args.pi_fc_layer_params)):
        try:
            numbers = [int(t) for t in text.split(",") if t]
        except ValueError:
            numbers = [0]
        if any(n < 1 for n in numbers):
            raise UsageError(f"--{flag} must be comma-separated positive integers. Received: {text!r}.")
    _check_training_folder("teacher_dir", args.teacher_dir)
    names = [n for n in args.students.split(",") if n]
    if not names or set(names) - set(STUDENT_CONFIGS):
        raise UsageError(
            f"--students must name some of {', '.join(STUDENT_CONFIGS)}. Received: {args.students!r}."
        )
    if args.pi_dir is not None:
        if not args.skip_training or "pi" not in args.students.split(","):
            raise UsageError(
                "--pi_dir replaces the PI student's folder in the tests only: "
                "add --skip_training and pi to --students."
            )
        _check_training_folder("pi_dir", args.pi_dir)
    if os.path.exists(args.root) and not os.path.isdir(args.root):
        raise UsageError(f"--root must be a folder. Received: {args.root!r}, a file.")
    if args.skip_training:
        for name in names:
            folder = os.path.join(args.root, name)
            if not (name == "pi" and args.pi_dir is not None) and not os.path.isfile(
                os.path.join(folder, policy_network.DESCRIPTION_FILE)
            ):
                raise UsageError(
                    f"--skip_training: {folder!r} holds no distilled student (policy_network.json)."
                )
    check_out_file(args.out, folder_must_exist=True)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    reshuffles = [int(t) for t in args.reshuffles.split(",") if t]
    tests = (*pi_cartpole.TABLE2, *pi_cartpole.table6(reshuffles))
    env_name = policy_network.read_description(args.teacher_dir).env_name
    names = [n for n in args.students.split(",") if n]

    # The commit the run starts from (HEAD may move while it runs).
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    start = time.perf_counter()
    students: dict[str, Any] = {}
    if not args.skip_training:
        for name in names:
            students[name] = distill_student(name, args)
            record = students[name]
            print(f"{name}: distilled in {record['seconds']:.0f} s, losses {record['loss_per_epoch']}")
    folders = {"teacher": args.teacher_dir, **{n: os.path.join(args.root, n) for n in names}}
    if args.pi_dir is not None:
        folders["pi"] = args.pi_dir
    results = {}
    for name, folder in folders.items():
        results[name] = test_policy(folder, tests, args)
        print(name, {k: round(v["mean"], 1) for k, v in results[name].items()}, flush=True)
    table = pi_cartpole.markdown(results, tests, LABELS)
    print(table)
    if args.out:
        report = {
            "what": f"AttentionNeuron Tables 2 and 6 on {env_name}, students cloned from a teacher",
            "env_name": env_name,
            "command": shlex.join(sys.argv),
            "commit": commit,
            "machine_cores": os.cpu_count(),
            "wall_seconds": time.perf_counter() - start,
            "teacher_dir": args.teacher_dir,
            "students": students,
            **({"pi_dir": pi_dir_record(args.pi_dir)} if args.pi_dir else {}),
            "test_settings": {
                "num_episodes": args.num_episodes,
                "num_envs": args.num_eval_envs,
                "eval_seed": args.eval_seed,
                "policy": "greedy (mode)",
            },  # fmt: skip
            "results": results,
            "paper": {k: {t: list(v) for t, v in d.items()} for k, d in pi_cartpole.PAPER.items()},
            "markdown": table,
        }
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
