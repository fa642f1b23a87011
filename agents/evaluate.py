"""Evaluation of policies: episodes with a quota per environment, transforms, spec checks, results.

``evaluate(policy, env_name, transforms, ...)`` runs a TF-Agents or Python
policy on each observation transform (rotations, flips, shuffled patches) and
returns a summary per transform; ``check_evaluation`` checks everything an
evaluation needs before the first episode. The harness's evaluations during
training, behaviour cloning's teacher and student evaluations and the
``sit-eval`` command (``sit_keras.commands.evaluate``) run on it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from tf_agents.policies import py_policy, py_tf_eager_policy
from tf_agents.train import learner
from tf_agents.trajectories import trajectory

from sit_keras.agents.environments import load
from sit_keras.agents.environments.transforms import parse_transform
from sit_keras.agents.training.collection import EpisodeRecorder

# A batch step of every environment counts once towards this limit, so a
# policy that never ends an episode cannot hang the evaluation.
MAX_BATCHED_STEPS = 100_000

# ``environments.load`` keywords that take a boolean (the constructors' ``bool`` parameters: DMC
# ``pixels``, MiniGrid ``crop_border``, the sensor wrapper's ``duplicate_sensors``, Atari's
# ``terminal_on_life_loss`` / ``full_action_space``); ``--env_kwarg`` refuses anything but true/false.
BOOLEAN_ENV_KWARGS = frozenset(
    {"pixels", "crop_border", "duplicate_sensors", "terminal_on_life_loss", "full_action_space"}
)
# Words that people use for booleans but that are not ``true`` / ``false``: ``pixels=no`` would
# otherwise be the (truthy) string "no".
_AMBIGUOUS_WORDS = frozenset({"yes", "no", "y", "n", "on", "off", "t", "f"})
_NONE_WORDS = frozenset({"none", "null"})


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
    checkpoint = newest_policy_checkpoint(policy_dir)
    if checkpoint is not None:
        policy.update_from_checkpoint(checkpoint)
    return policy


def newest_policy_checkpoint(policy_dir: str) -> str | None:
    """The newest weights ``PolicySavedModelTrigger`` wrote beside ``policy_dir``, or ``None``."""
    policies_dir = os.path.dirname(os.path.normpath(policy_dir))
    checkpoints_dir = os.path.join(policies_dir, learner.POLICY_CHECKPOINT_DIR)
    if not os.path.isdir(checkpoints_dir):
        return None
    checkpoints = sorted(c for c in os.listdir(checkpoints_dir) if c.startswith("policy_checkpoint_"))
    return os.path.join(checkpoints_dir, checkpoints[-1]) if checkpoints else None


def _quotas(num_episodes: int, num_envs: int) -> np.ndarray:
    return np.array([num_episodes // num_envs + (i < num_episodes % num_envs) for i in range(num_envs)])


def run_episodes(
    policy: py_policy.PyPolicy,
    env,
    num_episodes: int,
    frames: list[np.ndarray] | None = None,
    observer: Callable[[Any], None] | None = None,
) -> list[dict[str, float]]:
    """Runs ``num_episodes`` episodes of ``policy`` in the batched ``env``.

    Args:
      policy: a py policy (e.g. from ``load_policy`` or ``PyTFEagerPolicy``).
      env: a batched environment from ``environments.load``.
      num_episodes: how many episodes in total (split evenly over the batch).
      frames: if given, the observations of environment 0's first episode,
        its last (e.g. goal) observation included, are appended to it (for a GIF).
      observer: if given, called with every batched time step, the first
        ``reset`` one included (e.g. to trace the states of each episode).

    Returns:
      One dict per episode: ``env``, ``return``, ``length``, ``success``.

    Raises:
      RuntimeError: the episodes did not end within ``MAX_BATCHED_STEPS``.
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1. Received: {num_episodes}")
    recorder = EpisodeRecorder(_quotas(num_episodes, env.batch_size))
    time_step = env.reset()
    if observer is not None:
        observer(time_step)
    policy_state = policy.get_initial_state(env.batch_size)
    recording = frames is not None
    for _ in range(MAX_BATCHED_STEPS):
        if recording:
            frames.append(np.asarray(time_step.observation[0]))
        action_step = policy.action(time_step, policy_state)
        next_time_step = env.step(action_step.action)
        if observer is not None:
            observer(next_time_step)
        recorder(trajectory.from_transition(time_step, action_step, next_time_step))
        recorder.observe_info(env.get_info())
        if recording and bool(next_time_step.is_last()[0]):
            frames.append(np.asarray(next_time_step.observation[0]))  # the episode's end (the goal)
            recording = False
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


def check_transforms(transform_names: Sequence[str | None], observation_shape: Sequence[int]) -> None:
    """Raises ``ValueError`` (one sentence) for the first transform that cannot apply to these observations.

    Checks every name before any episode runs, so a typo in the last
    ``--transform`` does not cost the episodes of the first ones.
    """
    for name in transform_names:
        if name is not None:
            parse_transform(name, tuple(observation_shape))


def _array_spec_text(spec: Any, actions: bool = False) -> str:
    """A spec in words: ``(14, 14, 3) uint8 in [0, 255]``; for actions ``4 actions (int64 0..3)``."""
    shape, dtype = tuple(int(d) for d in spec.shape), np.dtype(_numpy_dtype(spec.dtype))
    minimum, maximum = getattr(spec, "minimum", None), getattr(spec, "maximum", None)
    prefix = "actions " if actions else ""
    if minimum is None or maximum is None:
        return f"{prefix}{shape} {dtype.name}"
    low, high = np.asarray(minimum), np.asarray(maximum)
    if actions and dtype.kind in "iu" and shape == () and low.size == 1 and high.size == 1:
        return f"{int(high) - int(low) + 1} actions ({dtype.name} {int(low)}..{int(high)})"
    bounds = (
        f"[{low.flat[0]:g}, {high.flat[0]:g}]"
        if np.all(low == low.flat[0]) and np.all(high == high.flat[0])
        else "per-element bounds"
    )
    return f"{prefix}{shape} {dtype.name} in {bounds}"


def _numpy_dtype(dtype: Any) -> Any:
    return getattr(dtype, "as_numpy_dtype", dtype)


def _same_spec(a: Any, b: Any, bounds: bool) -> bool:
    if tuple(int(d) for d in a.shape) != tuple(int(d) for d in b.shape):
        return False
    if np.dtype(_numpy_dtype(a.dtype)).kind != np.dtype(_numpy_dtype(b.dtype)).kind:
        return False
    if not bounds:
        return True
    for name in ("minimum", "maximum"):
        x, y = getattr(a, name, None), getattr(b, name, None)
        if (x is None) != (y is None):
            return False
        if x is not None and not np.allclose(np.asarray(x, np.float64), np.asarray(y, np.float64)):
            return False
    return True


def check_specs(policy: py_policy.PyPolicy, env: Any, env_name: str, trained_env: str | None = None) -> None:
    """Raises ``ValueError`` (one sentence naming both) when the policy cannot act in ``env``.

    Compares the observation (shape, dtype kind) and action (shape, dtype
    kind, bounds) specs, so a wrong environment is reported before the first
    step instead of as a concrete-function error from TensorFlow.
    """
    import tensorflow as tf

    policy_observations = tf.nest.flatten(policy.time_step_spec.observation)
    env_observations = tf.nest.flatten(env.observation_spec())
    same = len(policy_observations) == len(env_observations) and all(
        _same_spec(p, e, bounds=False) for p, e in zip(policy_observations, env_observations, strict=False)
    )
    policy_actions, env_actions = tf.nest.flatten(policy.action_spec), tf.nest.flatten(env.action_spec())
    same = same and len(policy_actions) == len(env_actions)
    same = same and all(
        _same_spec(p, e, bounds=True) for p, e in zip(policy_actions, env_actions, strict=False)
    )
    if not same:
        trained = f" was trained on {trained_env} and" if trained_env else ""

        def text(observations: list, actions: list) -> str:
            return (
                f"observations {', '.join(map(_array_spec_text, observations))} with "
                f"{', '.join(_array_spec_text(a, actions=True) for a in actions)}"
            )

        raise ValueError(
            f"The policy{trained} takes {text(policy_observations, policy_actions)}, but {env_name} gives "
            f"{text(env_observations, env_actions)}; pass the policy's environment with --env "
            "(or leave --env out to use the training one)."
        )


def check_evaluation(
    policy: py_policy.PyPolicy,
    env_name: str,
    transform_names: Sequence[str | None] = (None,),
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 1_000_000,
    trained_env: str | None = None,
) -> None:
    """Builds one environment and checks the policy's specs and every transform against it.

    Raises:
      ValueError: unknown environment or keyword value, a spec mismatch, or
        a transform that does not apply (one sentence each).
    """
    try:
        env = load(env_name, num_envs=1, seed=seed, **dict(env_kwargs or {}))
    except TypeError as error:  # an unknown keyword: "... got an unexpected keyword argument 'x'"
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if unknown:
            raise ValueError(
                f"{env_name} does not take the keyword {unknown.group(1)!r} (keywords given: "
                f"{dict(env_kwargs or {})})"
            ) from None
        raise ValueError(
            f"{env_name} cannot be built with the keywords {dict(env_kwargs or {})}: {error}"
        ) from None
    try:
        check_specs(policy, env, env_name, trained_env)
        observation_shape = tuple(getattr(env.observation_spec(), "shape", ()))
        check_transforms(transform_names, observation_shape)
        wanted = tuple(int(d) for d in getattr(policy.time_step_spec.observation, "shape", ()))
        for name in transform_names:
            shape = parse_transform(name, observation_shape)[1] if name is not None else observation_shape
            if tuple(shape) != wanted:
                raise ValueError(
                    f"Transform {name!r} turns {env_name}'s observations of shape {observation_shape} "
                    f"into {tuple(shape)}, but the policy takes {wanted}."
                )
    finally:
        env.close()


def evaluate(
    policy: py_policy.PyPolicy,
    env_name: str,
    transforms: Sequence[str | None] = (None,),
    num_episodes: int = 100,
    num_envs: int = 8,
    seed: int = 1_000_000,
    env_kwargs: Mapping[str, Any] | None = None,
    on_result: Callable[[str, dict[str, float]], None] | None = None,
    check: bool = True,
) -> dict[str, dict[str, float]]:
    """``summarize`` of ``num_episodes`` episodes per transform, keyed by transform name ("none" for None).

    The default seed keeps evaluation episodes away from the training seeds
    (``0 .. num_envs - 1``) of environments whose layouts follow the seed.

    Args:
      policy, env_name, transforms, num_episodes, num_envs, seed, env_kwargs:
        what to evaluate where (``environments.load`` arguments).
      on_result: called as ``on_result(name, summary)`` when each transform
        finishes (``sit-eval`` prints it at once, so nothing is lost if a later
        one fails).
      check: first run ``check_evaluation`` (one environment built to check
        the specs and every transform before any episode).

    Raises:
      ValueError: ``num_episodes`` or ``num_envs`` below 1, or a failed check.
    """
    for name, value in (("num_episodes", num_episodes), ("num_envs", num_envs)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1; received {value}.")
    if check:
        check_evaluation(policy, env_name, transforms, env_kwargs, seed)
    results = {}
    for transform in transforms:
        env = load(env_name, num_envs=num_envs, seed=seed, transform=transform, **dict(env_kwargs or {}))
        try:
            results[transform or "none"] = summarize(run_episodes(policy, env, num_episodes))
        finally:
            env.close()
        if on_result is not None:
            on_result(transform or "none", results[transform or "none"])
    return results


def gif_frame(observation: np.ndarray) -> np.ndarray:
    """What a person would see of one observation: an RGB uint8 image of its newest frame.

    Frame stacks keep their newest frame: ``3k`` channels (DMC pixels) the
    last three, other channel counts (Atari's grey stack) the last one, in
    grey; a single channel is grey.
    """
    frame = np.asarray(observation)
    if frame.ndim == 2:
        frame = frame[..., None]
    channels = frame.shape[-1]
    frame = frame[..., -3:] if channels % 3 == 0 else frame[..., -1:]
    if frame.dtype != np.uint8:
        frame = np.clip(frame, 0, 255).astype(np.uint8)
    return np.repeat(frame, 3, axis=-1) if frame.shape[-1] == 1 else frame


def save_gif(frames: Sequence[np.ndarray], path: str, scale: int | None = None) -> None:
    """Writes observations as an upscaled (nearest-neighbour) animated GIF of their newest frames.

    ``scale`` defaults to the smallest factor that makes the image at least
    256 pixels on its longer side (a 14x14 MiniGrid frame becomes 266x266).
    """
    import imageio.v2 as imageio

    images = [gif_frame(f) for f in frames]
    if scale is None:
        scale = max(1, math.ceil(256 / max(images[0].shape[:2])))
    images = [np.repeat(np.repeat(image, scale, axis=0), scale, axis=1) for image in images]
    imageio.mimsave(path, images, duration=0.2, loop=0)


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``["split=test", "level=5", "pixels=true"]`` -> ``{"split": "test", "level": 5, "pixels": True}``.

    Rules, applied to the text after the first ``=``:

    - ``true`` / ``false`` (any case) are booleans; ``none`` / ``null`` is None;
    - integers (``5``, ``-3``) are ints, other numbers (``0.5``, ``1e-3``) floats;
      ``nan`` and ``inf`` are refused (no environment keyword takes them);
    - ``yes``, ``no``, ``on``, ``off``, ``y``, ``n``, ``t``, ``f`` are refused as
      ambiguous: ``pixels=no`` would otherwise be the truthy string "no";
    - the keywords in ``BOOLEAN_ENV_KWARGS`` (e.g. ``pixels``) take only
      ``true`` / ``false``;
    - anything else stays a string, because environments take string
      keywords (Procgen's ``split=test`` and ``distribution_mode=hard``,
      MiniGrid's ``goal=top_right``, ``sensor_permutation=every:10``,
      Gymnasium's ``render_mode``); an empty value is refused.

    Raises:
      ValueError: an item that is not ``key=value``, a repeated key, or a value refused above.
    """
    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"--env_kwarg must be key=value with a keyword name as key; received {item!r}.")
        if key in kwargs:
            raise ValueError(f"--env_kwarg {key} is given twice ({item!r}); give each keyword once.")
        value = _parse_value(key, text)
        if key in BOOLEAN_ENV_KWARGS and not isinstance(value, bool):
            raise ValueError(f"--env_kwarg {item!r}: {key} takes true or false.")
        kwargs[key] = value
    return kwargs


def _parse_value(key: str, text: str) -> Any:
    """One ``--env_kwarg`` value by the rules of ``parse_env_kwargs``."""
    word = text.strip().lower()
    if not word:
        raise ValueError(f"--env_kwarg {key}= has no value; write {key}=<value>.")
    if word in ("true", "false"):
        return word == "true"
    if word in _NONE_WORDS:
        return None
    if word in _AMBIGUOUS_WORDS:
        raise ValueError(
            f"--env_kwarg {key}={text} is ambiguous: write {key}=true or {key}=false for a boolean."
        )
    if re.fullmatch(r"[+-]?\d+", word):
        return int(word)
    try:
        number = float(word)
    except ValueError:
        return text  # a plain string: split=test, goal=top_right, sensor_permutation=every:10, ...
    if not math.isfinite(number):
        raise ValueError(f"--env_kwarg {key}={text}: environment keywords take finite numbers.")
    return number


def write_json_atomically(path: str, data: Any) -> None:
    """Writes ``data`` as JSON to ``path`` through a temporary file in the same folder and ``os.replace``."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
