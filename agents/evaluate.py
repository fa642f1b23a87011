"""Evaluation of saved policies: ``sit-eval``.

    sit-eval --policy_dir runs/sit/policies/greedy_policy \\
        --env minigrid:LavaCrossingS9N1 --transform none --transform rot90 \\
        --num_episodes 100 --output runs/sit/eval.json
    sit-eval --tflite runs/sit/export/tflite/policy_int8.tflite --transform rot90

``--tflite`` runs a ``sit-export`` model with ``export.runtime`` (in its
training environment unless ``--env`` is given).

For each transform (observations rotated, flipped or patch-shuffled by the
environment wrapper), every environment of a batch runs a fixed quota of
episodes (so short episodes do not crowd out long ones); the mean / std of
the return, the success rate and the mean length are written as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from absl import app, flags, logging
from tf_agents.policies import py_policy, py_tf_eager_policy
from tf_agents.train import learner
from tf_agents.trajectories import trajectory

from sit_keras.agents.collection import EpisodeRecorder
from sit_keras.agents.console import quiet_library_logs
from sit_keras.agents.environments import load

# A batch step of every environment counts once towards this limit, so a
# policy that never ends an episode cannot hang the evaluation.
MAX_BATCHED_STEPS = 100_000


def load_policy(policy_dir: str) -> py_policy.PyPolicy:
    """A policy saved by training (``<root_dir>/policies/<name>``), with its newest weights.

    TF-Agents' ``PolicySavedModelTrigger`` writes each SavedModel once and
    then only checkpoints of the weights (``<root_dir>/policies/checkpoints``):
    the newest of those, if any, is loaded into the SavedModel.

    Raises:
      FileNotFoundError: ``policy_dir`` has no SavedModel.
    """
    if not os.path.exists(os.path.join(policy_dir, "saved_model.pb")):
        raise FileNotFoundError(
            f"No saved policy in {policy_dir!r} (expected saved_model.pb). Train with sit-train and pass "
            "<root_dir>/policies/greedy_policy."
        )
    # Batched environments give batched time steps: no extra batch dim.
    policy = py_tf_eager_policy.SavedModelPyTFEagerPolicy(
        policy_dir, load_specs_from_pbtxt=True, batch_time_steps=False
    )
    checkpoints_dir = os.path.join(
        os.path.dirname(os.path.normpath(policy_dir)), learner.POLICY_CHECKPOINT_DIR
    )
    if os.path.isdir(checkpoints_dir):
        checkpoints = sorted(c for c in os.listdir(checkpoints_dir) if c.startswith("policy_checkpoint_"))
        if checkpoints:
            policy.update_from_checkpoint(os.path.join(checkpoints_dir, checkpoints[-1]))
    return policy


def _quotas(num_episodes: int, num_envs: int) -> np.ndarray:
    return np.array([num_episodes // num_envs + (i < num_episodes % num_envs) for i in range(num_envs)])


def run_episodes(
    policy: py_policy.PyPolicy, env, num_episodes: int, frames: list[np.ndarray] | None = None
) -> list[dict[str, float]]:
    """Runs ``num_episodes`` episodes of ``policy`` in the batched ``env``.

    Args:
      policy: a py policy (e.g. from ``load_policy`` or ``PyTFEagerPolicy``).
      env: a batched environment from ``environments.load``.
      num_episodes: how many episodes in total (split evenly over the batch).
      frames: if given, the observations of environment 0's first episode are
        appended to it (for a GIF).

    Returns:
      One dict per episode: ``env``, ``return``, ``length``, ``success``.

    Raises:
      RuntimeError: the episodes did not end within ``MAX_BATCHED_STEPS``.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1. Received: {num_episodes}")
    recorder = EpisodeRecorder(_quotas(num_episodes, env.batch_size))
    time_step = env.reset()
    policy_state = policy.get_initial_state(env.batch_size)
    recording = frames is not None
    for _ in range(MAX_BATCHED_STEPS):
        if recording:
            frames.append(np.asarray(time_step.observation[0]))
        action_step = policy.action(time_step, policy_state)
        next_time_step = env.step(action_step.action)
        recorder(trajectory.from_transition(time_step, action_step, next_time_step))
        recorder.observe_info(env.get_info())
        recording = recording and not bool(next_time_step.is_last()[0])
        time_step, policy_state = next_time_step, action_step.state
        if recorder.done:
            return recorder.episodes
    raise RuntimeError(f"{num_episodes} episodes did not end within {MAX_BATCHED_STEPS} batched steps.")


def summarize(episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean / std of the return, success rate, mean length and count of ``episodes``."""
    returns = np.array([e["return"] for e in episodes], np.float64)
    return {
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "success_rate": float(np.mean([e["success"] for e in episodes])),
        "mean_length": float(np.mean([e["length"] for e in episodes])),
        "num_episodes": len(episodes),
    }


def evaluate(
    policy: py_policy.PyPolicy,
    env_name: str,
    transforms: Sequence[str | None] = (None,),
    num_episodes: int = 100,
    num_envs: int = 8,
    seed: int = 1_000_000,
    env_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, float]]:
    """``summarize`` of ``num_episodes`` episodes per transform, keyed by transform name ("none" for None).

    The default seed keeps evaluation episodes away from the training seeds
    (``0 .. num_envs - 1``) of environments whose layouts follow the seed.
    """
    results = {}
    for transform in transforms:
        env = load(env_name, num_envs=num_envs, seed=seed, transform=transform, **dict(env_kwargs or {}))
        try:
            results[transform or "none"] = summarize(run_episodes(policy, env, num_episodes))
        finally:
            env.close()
    return results


def save_gif(frames: Sequence[np.ndarray], path: str, scale: int = 8) -> None:
    """Writes observations as an upscaled (nearest-neighbour) animated GIF."""
    import imageio.v2 as imageio

    images = [np.repeat(np.repeat(np.asarray(f, np.uint8), scale, axis=0), scale, axis=1) for f in frames]
    imageio.mimsave(path, images, duration=0.2, loop=0)


_FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_string("policy_dir", None, "A saved policy: <root_dir>/policies/greedy_policy.")
    flags.DEFINE_string("tflite", None, "Or a .tflite policy from sit-export (its metadata beside it).")
    flags.DEFINE_string(
        "env",
        None,
        "Environment name, e.g. minigrid:LavaCrossingS9N1 (default for --tflite: the training one).",
    )
    flags.DEFINE_multi_string("transform", ["none"], "Observation transforms to evaluate (repeat the flag).")
    flags.DEFINE_multi_string("env_kwarg", [], "key=value passed to environments.load (e.g. split=test).")
    flags.DEFINE_integer("num_episodes", 100, "Episodes per transform.")
    flags.DEFINE_integer("num_envs", 8, "Environments run in a batch.")
    flags.DEFINE_integer("seed", 1_000_000, "Seed of the evaluation environments.")
    flags.DEFINE_string("output", None, "JSON output (default: <policy_dir>/../../eval_<env>.json).")
    flags.DEFINE_string("gif", None, "Write one upright episode as a GIF here.")


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``["split=test", "level=5", "pixels=True"]`` -> ``{"split": "test", "level": 5, "pixels": True}``."""
    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env_kwarg must be key=value. Received: {item!r}")
        kwargs[key] = _parse_value(value)
    return kwargs


def _parse_value(value: str) -> Any:
    """``"5"`` -> 5, ``"0.5"`` -> 0.5, ``"True"`` / ``"false"`` -> bool, anything else stays a string."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for parse in (int, float):
        with contextlib.suppress(ValueError):
            return parse(value)
    return value


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``sit-eval``."""
    _define_flags()
    flags.mark_flags_as_mutual_exclusive(["policy_dir", "tflite"], required=True)
    app.run(_main, argv=argv)


def _main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    quiet_library_logs()
    env_name, env_kwargs = _FLAGS.env, parse_env_kwargs(_FLAGS.env_kwarg)
    if _FLAGS.tflite:
        from sit_keras.export.tflite_py_policy import TFLitePyPolicy

        try:
            policy = TFLitePyPolicy(_FLAGS.tflite)
        except FileNotFoundError as error:
            raise app.UsageError(str(error)) from error
        environment = policy.metadata["environment"]
        if env_name is None:
            env_name, env_kwargs = environment["name"], {**environment["kwargs"], **env_kwargs}
        source, default_output = _FLAGS.tflite, os.path.splitext(_FLAGS.tflite)[0]
    else:
        policy = load_policy(_FLAGS.policy_dir)
        source = _FLAGS.policy_dir
        default_output = os.path.join(os.path.dirname(os.path.dirname(os.path.normpath(source))), "eval")
    if env_name is None:
        raise app.UsageError("--env is required with --policy_dir.")
    transforms = [None if t == "none" else t for t in _FLAGS.transform]
    results = evaluate(
        policy, env_name, transforms, _FLAGS.num_episodes, _FLAGS.num_envs, _FLAGS.seed, env_kwargs
    )
    report = {"policy": source, "env": env_name, "env_kwargs": env_kwargs, "results": results}
    output = _FLAGS.output or f"{default_output}_{env_name.replace(':', '_').replace(',', '+')}.json"
    with open(output, "w") as f:
        json.dump(report, f, indent=2)
    for name, summary in results.items():
        logging.info("%s: %s", name, summary)
        print(
            f"{name:>16}: return {summary['mean_return']:.3f} +- {summary['std_return']:.3f}, "
            f"success {summary['success_rate']:.2f} over {summary['num_episodes']} episodes"
        )
    print(f"wrote {output}")
    if _FLAGS.gif:
        frames: list[np.ndarray] = []
        env = load(env_name, num_envs=1, seed=_FLAGS.seed, **env_kwargs)
        run_episodes(policy, env, 1, frames=frames)
        save_gif(frames, _FLAGS.gif)
        print(f"wrote {_FLAGS.gif}")


if __name__ == "__main__":
    main()
