"""AttentionNeuron's Table 2 and Table 6 protocol on DMC cartpole-swingup, at a CPU budget.

Two PPO policies are trained on the 5 state inputs in their fixed order
[x, cos(theta), sin(theta), x', theta'] (``configs/dmc/cartpole_swingup_pi.gin``:
the permutation-invariant AttentionNeuron actor; ``cartpole_swingup_mlp.gin``:
the "FNN" baseline), for the same number of environment steps. Each is then
tested, greedy (the distribution's mode), on modified inputs (Tang & Ha,
NeurIPS 2021, section 4.1):

    Table 2: 5 obs | 5 obs (shuffled once per episode) | 10 obs (the 5 twice) | 5 obs + 5 noise (N(0, 0.1))
    Table 6: the 5 obs reshuffled every t steps, t in {25, 50, 100, 200, 500}

(the sensor keywords of ``environments.load``). Every test runs the same
evaluation seeds: the same starts, only the presentation differs.
The MLP cannot take 10 inputs (N/A, as in the paper's first row). The PI
policy scales its tanh attention code by 5 / 10 on 10 inputs (the paper's
footnote 3). At a reshuffle the per-sensor memories stay where they were, so
the PI policy must re-identify its inputs (Table 6); its exact invariance to
a shuffle from the first step is proven in tests/test_sensor_policies.py.

The paper's agents are trained with CMA-ES on CartPoleSwingUpHarder (a
different simulator with more random starts) and tested on 1000 episodes;
its numbers are printed beside ours for orientation, not as a like-for-like
comparison. Say which budget a table is for.

Usage (slow)::

    python benchmarks/pi_cartpole.py --env_steps 200000 --num_episodes 24 --num_envs 24 \\
        --out benchmarks/results/pi_cartpole.json
    python benchmarks/pi_cartpole.py --skip_training ...  # test the runs already in --root
    python benchmarks/pi_cartpole.py --quick      # smoke run, a few minutes
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin
import numpy as np
import tensorflow as tf
from tf_agents.trajectories.time_step import StepType

from sit_keras.agents import train
from sit_keras.agents.environments import load, sensor_permutation
from sit_keras.agents.networks import policy_network
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_gin_bindings,
    check_out_file,
    environment,
    parse_or_say_why,
    write_report,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "pi_cartpole.json"
CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "dmc"
ENV = "dmc:cartpole-swingup"
POLICIES = {"pi": "cartpole_swingup_pi.gin", "mlp": "cartpole_swingup_mlp.gin"}
LABELS = {"pi": "AttentionNeuron (PI)", "mlp": "MLP (FNN)"}
RESHUFFLES = sensor_permutation.TABLE6_RESHUFFLE_STEPS

# Tang & Ha 2021, Table 2 and Table 6 (CartPoleSwingUpHarder, CMA-ES, 1000 test episodes): mean, std.
PAPER: dict[str, dict[str, tuple[float, float]]] = {
    "pi": {
        "5 obs": (472, 426), "5 obs (shuffled)": (471, 426),
        "10 obs": (471, 425), "5 obs + 5 noise": (461, 410),
        "reshuffle every 25": (107, 146), "reshuffle every 50": (163, 198), "reshuffle every 100": (242, 254),
        "reshuffle every 200": (318, 310), "reshuffle every 500": (407, 380),
    },
    "mlp": {"5 obs": (593, 433), "5 obs (shuffled)": (38, 120)},
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SensorTest:
    """How the 5 readings are presented, as ``environments.load``'s sensor keywords
    (``sensor_permutation.SensorPermutation``): shuffled once per episode or every
    ``reshuffle_every`` steps, duplicated, or with ``noise_channels`` channels of N(0, 0.1)."""

    name: str
    shuffle: bool = False
    reshuffle_every: int | None = None
    duplicate: bool = False
    noise_channels: int = 0

    @property
    def env_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.shuffle:
            kwargs["sensor_permutation"] = (
                "once" if self.reshuffle_every is None else f"every:{self.reshuffle_every}"
            )
        if self.duplicate:
            kwargs["duplicate_sensors"] = True
        if self.noise_channels:
            kwargs["noise_sensors"] = self.noise_channels
        return kwargs


TABLE2 = (
    SensorTest("5 obs"),
    SensorTest("5 obs (shuffled)", shuffle=True),
    SensorTest("10 obs", duplicate=True),
    SensorTest("5 obs + 5 noise", noise_channels=5),
)


def table6(every: Sequence[int]) -> tuple[SensorTest, ...]:
    return tuple(SensorTest(f"reshuffle every {t}", shuffle=True, reshuffle_every=t) for t in every)


def load_actor(root_dir: str):
    """The trained actor network of a ``sit-train`` folder (``policy_network.json`` + checkpoint)."""
    description = policy_network.read_description(root_dir)
    net = policy_network.build_network(description)
    policy_network.restore_network(net, root_dir, description.checkpoint_attribute)
    return net


def run_test(
    net,
    test: SensorTest,
    num_episodes: int,
    num_envs: int,
    seed: int,
    env_name: str = ENV,
    carry_state: bool = False,
    skip_first_episode: bool = False,
) -> list[float]:
    """Returns of ``num_episodes`` greedy episodes (``num_envs`` at a time) under ``test`` on ``env_name``.

    ``carry_state``: a recurrent network keeps its state across episodes (a
    new episode's FIRST step is passed as MID, so the network does not reset);
    ``skip_first_episode``: each environment's first episode is run but not
    counted (with ``carry_state``, every counted episode then starts warm).
    """
    env = load(env_name, num_envs=num_envs, seed=seed, **test.env_kwargs)
    num_inputs = int(env.observation_spec().shape[0])

    @tf.function(autograph=False)  # plain Python control flow; autograph warns on TF-Agents' code
    def act(observation, step_type, state):
        distribution, state = net.call(observation, step_type, state)
        return distribution.mode(), state

    state = net.initial_state(num_envs, num_inputs) if net.state_spec else ()
    quotas = np.array([num_episodes // num_envs + (i < num_episodes % num_envs) for i in range(num_envs)])
    returns: list[float] = []
    counts, running = np.zeros(num_envs, int), np.zeros(num_envs)
    skipping = np.full(num_envs, skip_first_episode)
    time_step = env.reset()
    step_type = time_step.step_type  # the very first step resets the state either way
    try:
        while np.any(counts < quotas):
            action, state = act(tf.constant(time_step.observation), tf.constant(step_type), state)
            time_step = env.step(action.numpy())
            step_type = time_step.step_type
            if carry_state:
                first = step_type == StepType.FIRST
                step_type = np.where(first, StepType.MID, step_type).astype(step_type.dtype)
            running += np.asarray(time_step.reward, np.float64)
            for i in np.flatnonzero(time_step.is_last()):
                if skipping[i]:
                    skipping[i] = False
                elif counts[i] < quotas[i]:
                    returns.append(float(running[i]))
                    counts[i] += 1
                running[i] = 0.0
    finally:
        env.close()
    return returns


def train_policy(name: str, env_steps: int, root: Path, seed: int, bindings: Sequence[str]) -> dict[str, Any]:
    """Trains (or resumes) ``POLICIES[name]``; returns its folder, wall time and last training metrics."""
    root_dir = root / f"{name}_seed{seed}"
    gin.clear_config()
    # The tests below are the evaluation: no policy exports and no evaluation by the trainer
    # (--gin_bindings 'train_eval.num_eval_episodes = 10' turns it back on).
    train.parse_gin(
        [str(CONFIGS / POLICIES[name])],
        [f"train_eval.total_env_steps = {env_steps}", f"train_eval.seed = {seed}",
         "train_eval.policy_save_interval = 0", "train_eval.num_eval_episodes = 0", *bindings],
    )  # fmt: skip
    start = time.perf_counter()
    try:
        results = train.train_eval(str(root_dir))
    finally:
        gin.clear_config()
    history = results.pop("history")
    evaluations = results.pop("evaluations")  # none unless train_eval.num_eval_episodes is bound
    record = {"root_dir": str(root_dir), "train_seconds": time.perf_counter() - start, "final": results,
              "mean_sps": float(np.mean([h["SPS"] for h in history[1:]] or [0.0]))}  # fmt: skip
    if evaluations:
        record["evaluations"] = evaluations
    return record


def _cell(summary: dict[str, float] | None) -> str:
    return "N/A" if summary is None else f"{summary['mean']:.0f} +- {summary['std']:.0f}"


def markdown(
    results: dict[str, dict[str, dict[str, float]]],
    tests: Sequence[SensorTest],
    labels: dict[str, str] = LABELS,
) -> str:
    """Our mean +- std per policy and test (N/A where it was not run), the paper's in brackets."""
    lines = [
        "| policy | " + " | ".join(t.name for t in tests) + " |",
        "| --- | " + " | ".join("---" for _ in tests) + " |",
    ]
    for name, per_test in results.items():
        cells = []
        for test in tests:
            paper = PAPER.get(name, {}).get(test.name)
            ours = _cell(per_test.get(test.name))
            cells.append(ours + (f" ({paper[0]} +- {paper[1]})" if paper else ""))
        lines.append(f"| {labels[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _previous_training(out: str) -> dict[str, Any]:
    """The training record of an earlier report at ``out``, if any."""
    if not os.path.exists(out):
        return {}
    with open(out, encoding="utf-8") as f:
        return json.load(f).get("training", {})


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = SentenceParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env_steps", type=int, default=1_000_000, help="PPO steps per policy")
    parser.add_argument("--num_episodes", type=int, default=100, help="test episodes per cell")
    parser.add_argument("--num_envs", type=int, default=16, help="test episodes run at a time")
    parser.add_argument("--reshuffle_every", default=",".join(map(str, RESHUFFLES)), help="Table 6 periods")
    parser.add_argument("--policies", default="pi,mlp")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="runs/pi_cartpole", help="training runs go here (resumable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="extra bindings for both runs")
    parser.add_argument(
        "--skip_training",
        action="store_true",
        help="test the runs already in --root (keeping their training record from an existing --out)",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--quick", action="store_true", help="smoke run: 8000 steps, 4 episodes, t = 100")
    args = parser.parse_args(argv)
    if args.quick:
        args.env_steps, args.num_episodes, args.num_envs, args.reshuffle_every = 8000, 4, 4, "100"
    names = [n for n in args.policies.split(",") if n]
    unknown = sorted(set(names) - set(POLICIES))
    if unknown or not names:
        raise UsageError(
            f"--policies: unknown policies {unknown or args.policies!r}; expected some of {sorted(POLICIES)}."
        )
    for flag in ("env_steps", "num_episodes", "num_envs"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1; received {getattr(args, flag)}.")
    if args.seed < 0:
        raise UsageError(f"--seed must be at least 0; received {args.seed}.")
    try:
        periods = [int(t) for t in args.reshuffle_every.split(",") if t]
    except ValueError:
        periods = [0]
    if any(t < 1 for t in periods):
        raise UsageError(
            f"--reshuffle_every must be comma-separated positive integers; received {args.reshuffle_every!r}."
        )
    if Path(args.root).exists() and not Path(args.root).is_dir():
        raise UsageError(f"--root must be a folder; received {args.root!r}, a file.")
    check_out_file(args.out)
    if args.skip_training:
        for name in names:
            root_dir = Path(args.root) / f"{name}_seed{args.seed}"
            if not (root_dir / "policy_network.json").is_file():
                raise UsageError(
                    f"--skip_training: {str(root_dir)!r} holds no trained policy (policy_network.json)."
                )
        if os.path.exists(args.out):
            try:
                _previous_training(args.out)
            except (OSError, ValueError, AttributeError) as error:
                raise UsageError(
                    f"--skip_training: cannot read the earlier report {args.out!r} ({error})."
                ) from None
    else:
        for name in names:  # the configs and --gin_bindings, before anything trains
            gin.clear_config()
            config = str(CONFIGS / POLICIES[name])
            check_gin_bindings(
                lambda config=config: train.parse_gin([config], _bindings(args)), POLICIES[name]
            )
    return args


def _bindings(args: argparse.Namespace) -> list[str]:
    """``--gin_bindings``, after those of ``--quick``."""
    quick = ["train_eval.num_envs = 4", "ppo.num_minibatches = 2"] if args.quick else []
    return [*quick, *args.gin_bindings]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    bindings = _bindings(args)
    names = [n for n in args.policies.split(",") if n]
    periods = [int(t) for t in args.reshuffle_every.split(",") if t]

    report: dict[str, Any] = {"environment": environment(), "settings": {**vars(args), "bindings": bindings}}
    start = time.perf_counter()
    training: dict[str, Any] = {}
    previous = _previous_training(args.out) if args.skip_training else {}
    for name in names:
        if args.skip_training:
            root_dir = str(Path(args.root) / f"{name}_seed{args.seed}")
            kept = previous.get(name, {})
            training[name] = kept if kept.get("root_dir") == root_dir else {"root_dir": root_dir}
        else:
            training[name] = train_policy(name, args.env_steps, Path(args.root), args.seed, bindings)
            print(f"{name}: trained {args.env_steps} steps in {training[name]['train_seconds']:.0f} s")
    report["training"] = training

    all_tests = (*TABLE2, *table6(periods))
    results: dict[str, dict[str, dict[str, float]]] = {}
    episodes: dict[str, dict[str, list[float]]] = {}
    test_start = time.perf_counter()
    for name in names:
        net = load_actor(training[name]["root_dir"])
        results[name], episodes[name] = {}, {}
        for test in all_tests:
            if name == "mlp" and (test.duplicate or test.noise_channels or test.reshuffle_every):
                continue  # a fixed-size MLP takes 5 inputs; Table 6 is about the PI policy
            returns = run_test(net, test, args.num_episodes, args.num_envs, seed=1_000_000 + args.seed)
            episodes[name][test.name] = returns
            results[name][test.name] = {
                "mean": float(np.mean(returns)), "std": float(np.std(returns)), "episodes": len(returns),
            }  # fmt: skip
            print(f"{LABELS[name]:>22} | {test.name:<20} {_cell(results[name][test.name])}")
    report["results"] = results
    report["episode_returns"] = episodes
    report["paper"] = PAPER
    report["test_seconds"] = time.perf_counter() - test_start
    report["total_seconds"] = time.perf_counter() - start
    report["tables"] = {
        "table2": markdown(results, TABLE2),
        "table6": markdown({k: v for k, v in results.items() if k == "pi"}, (TABLE2[0], *table6(periods))),
    }
    print("\n" + report["tables"]["table2"] + "\n\n" + report["tables"]["table6"])
    write_report(report, os.path.abspath(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
