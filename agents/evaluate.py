"""Evaluation of saved policies: ``sit-eval``.

    sit-eval --policy_dir runs/sit/policies/greedy_policy --transform none --transform rot90 \\
        --num_episodes 100
    sit-eval --tflite runs/sit/export/tflite/policy_int8.tflite --transform rot90
    sit-eval --policy_dir runs/caveflyer_sit/policies/policy --env_kwarg split=test

For each transform (observations rotated, flipped or patch-shuffled by the
environment wrapper), every environment of a batch runs a fixed quota of
episodes (so short episodes do not crowd out long ones); the mean / std of
the return, the success rate and the mean length are printed as each
transform finishes, then written as JSON.

What ``sit-eval`` promises, because an evaluation can run for hours:

- **Every argument is checked before the first episode**: the numbers, every
  ``--transform`` (against the environment's observations), ``--env_kwarg``
  values, that the policy's observation and action specs match the
  environment's (one sentence naming both), and that ``--output`` and
  ``--gif`` can be written. A mistake prints one sentence on stderr, no
  traceback, and exits with status 1.
- **The environment defaults to the training one.** ``--policy_dir`` reads
  ``<root_dir>/policy_network.json`` and ``--tflite`` the model's metadata;
  without ``--env`` the policy runs in its training environment with its
  training keywords, updated by ``--env_kwarg``. With ``--env``, only the
  ``--env_kwarg`` keywords apply.
- **Results are never lost**: each transform's summary is printed when it
  finishes, and the JSON is written atomically (a temporary file in the same
  folder, then ``os.replace``), so an interrupted write leaves the previous
  file intact.
- **Default result files are named by policy, environment and keywords**,
  so runs of ``greedy_policy`` and ``policy``, or with other keywords, do not
  overwrite each other: ``<root_dir>/eval_<policy>_<env>[_<key>=<value>,...].json``
  for ``--policy_dir`` (``<policy>`` is the folder name, e.g. ``greedy_policy``)
  and ``<model>_<env>[_<key>=<value>,...].json`` beside a ``--tflite`` model.
  The keywords are the ones the environment is built with (training keywords
  included when ``--env`` is not given). Runs that differ only in transforms,
  episodes or seed share a file, and the newest replaces it.

``--env_kwarg key=value`` values are parsed by ``parse_env_kwargs`` (rules
in its docstring): booleans must be ``true`` / ``false``, ``yes`` / ``no``
and the like are refused as ambiguous.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from absl import flags, logging
from tf_agents.policies import py_policy, py_tf_eager_policy
from tf_agents.train import learner
from tf_agents.trajectories import trajectory

from sit_keras.agents.environments import load
from sit_keras.agents.environments.transforms import SHUFFLE_PATCHES, TRANSFORMS, parse_transform
from sit_keras.agents.training.collection import EpisodeRecorder
from sit_keras.command_line import parse_flags, quiet_library_logs

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
      frames: if given, the observations of environment 0's first episode,
        its last (e.g. goal) observation included, are appended to it (for a GIF).

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


PROGRAM = "sit-eval"
USAGE_ERROR, EVALUATION_FAILED = 2, 1

# Flags live in their own FlagValues, not absl's global FLAGS: sit-export and sit-train define flags of
# the same names, and main() can run more than once in one process (tests).
_FLAGS = flags.FlagValues()
flags.DEFINE_string(
    "policy_dir", None, "A saved policy: <root_dir>/policies/greedy_policy.", flag_values=_FLAGS
)
flags.DEFINE_string(
    "tflite", None, "Or a .tflite policy from sit-export (its metadata beside it).", flag_values=_FLAGS
)
flags.DEFINE_string(
    "env",
    None,
    "Environment name, e.g. minigrid:LavaCrossingS9N1 (default: the policy's training environment).",
    flag_values=_FLAGS,
)
flags.DEFINE_multi_string(
    "transform", ["none"], "Observation transforms to evaluate (repeat the flag).", flag_values=_FLAGS
)
flags.DEFINE_multi_string(
    "env_kwarg",
    [],
    "key=value passed to environments.load (e.g. split=test, pixels=true).",
    flag_values=_FLAGS,
)
flags.DEFINE_integer("num_episodes", 100, "Episodes per transform.", flag_values=_FLAGS)
flags.DEFINE_integer("num_envs", 8, "Environments run in a batch.", flag_values=_FLAGS)
flags.DEFINE_integer("seed", 1_000_000, "Seed of the evaluation environments.", flag_values=_FLAGS)
flags.DEFINE_string(
    "output",
    None,
    "JSON output (default: named by policy, env and keywords; see the module docstring).",
    flag_values=_FLAGS,
)
flags.DEFINE_string("gif", None, "Write one upright episode as a GIF here (a .gif path).", flag_values=_FLAGS)
flags.mark_flags_as_mutual_exclusive(["policy_dir", "tflite"], required=True, flag_values=_FLAGS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sit-eval``.

    Args:
      argv: command-line arguments without the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
      The exit status: 0 after writing the results, 2 for a mistake in the
      arguments (found before the first episode), 1 for an evaluation that
      failed once started (results printed so far stay on the console).
    """
    extra = parse_flags(
        _FLAGS,
        PROGRAM,
        argv,
        __doc__,
        required=("policy_dir", "tflite"),
        advanced=("env_kwarg", "num_envs", "seed"),
    )
    if isinstance(extra, int):
        return extra
    try:
        _run(extra)
    except _Failure as error:
        print(f"{PROGRAM}: {error}", file=sys.stderr)
        return error.status
    return 0


class _Failure(Exception):
    """A mistake or failure ``sit-eval`` reports in one sentence, with its exit status."""

    def __init__(self, message: str, status: int = USAGE_ERROR):
        super().__init__(message)
        self.status = status


def _check_writable_file(path: str, flag: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise _Failure(f"{flag} {path!r} is a folder; pass a file path.")
    if not os.path.isdir(folder):
        raise _Failure(f"{flag} {path!r}: the folder {folder!r} does not exist; create it first.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _Failure(f"{flag} {path!r}: cannot write to the folder {folder!r}.")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+,-]", "-", text)


def default_output(source: str, env_name: str, env_kwargs: Mapping[str, Any], tflite: bool = False) -> str:
    """The default results file of ``sit-eval``: named by policy, environment and keywords.

    ``<root_dir>/eval_<policy>_<env>[_<k>=<v>,...].json`` for a policy folder
    ``<root_dir>/policies/<policy>``; ``<model>_<env>[_<k>=<v>,...].json``
    beside a ``.tflite`` model. Keywords are sorted; a name longer than 200
    characters keeps its start and a hash of the keywords.
    """
    env_part = env_name.replace(":", "_").replace(",", "+")
    kwargs_part = ",".join(f"{k}={v}" for k, v in sorted(env_kwargs.items()))
    if tflite:
        folder, stem = os.path.dirname(source), os.path.splitext(os.path.basename(source))[0]
    else:
        policy_dir = os.path.normpath(source)
        folder = os.path.dirname(os.path.dirname(policy_dir))
        stem = "eval_" + os.path.basename(policy_dir)
    name = _slug(f"{stem}_{env_part}" + (f"_{kwargs_part}" if kwargs_part else ""))
    if len(name) > 200:
        import hashlib

        digest = hashlib.sha1(json.dumps(dict(env_kwargs), sort_keys=True, default=str).encode()).hexdigest()
        name = f"{name[:180]}_{digest[:12]}"
    return os.path.join(folder, name + ".json")


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


def _trained_environment(policy_dir: str) -> tuple[str, dict[str, Any]] | None:
    """The training environment of ``<root_dir>/policies/<name>`` from ``<root_dir>/policy_network.json``."""
    root_dir = os.path.dirname(os.path.dirname(os.path.normpath(policy_dir)))
    path = os.path.join(root_dir, "policy_network.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            description = json.load(f)
        return str(description["env_name"]), dict(description.get("env_kwargs") or {})
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _Failure(f"{path!r} is damaged ({error}); pass --env to evaluate without it.") from None


def _print_summary(name: str, summary: Mapping[str, float]) -> None:
    logging.info("%s: %s", name, summary)
    print(
        f"{name:>16}: return {summary['mean_return']:.3f} +- {summary['std_return']:.3f}, "
        f"success {summary['success_rate']:.2f}, length {summary['mean_length']:.1f} "
        f"over {summary['num_episodes']} episodes",
        flush=True,
    )


def _run(argv: Sequence[str]) -> None:
    """``sit-eval``: validate everything, then evaluate, print, write (module docstring)."""
    if argv:
        raise _Failure(f"unexpected arguments {' '.join(argv)!r}; every option is a --flag.")
    for name in ("num_episodes", "num_envs"):
        if _FLAGS[name].value < 1:
            raise _Failure(f"--{name} must be at least 1; received {_FLAGS[name].value}.")
    if _FLAGS.seed < 0:
        raise _Failure(f"--seed must be at least 0; received {_FLAGS.seed}.")
    try:
        given_kwargs = parse_env_kwargs(_FLAGS.env_kwarg)
    except ValueError as error:
        raise _Failure(str(error)) from None
    transform_names = list(dict.fromkeys(None if t == "none" else t for t in _FLAGS.transform))
    for name in transform_names:  # the names now; whether they fit the observations once the env is known
        if name is not None and name not in TRANSFORMS:
            prefix, _, size = name.partition(":")
            if prefix != SHUFFLE_PATCHES or not size.isdigit() or int(size) < 1:
                raise _Failure(
                    f"unknown --transform {name!r}; valid: none, {', '.join(TRANSFORMS)}, "
                    f"or {SHUFFLE_PATCHES}:<p> for a patch size p."
                )
    if _FLAGS.output:
        _check_writable_file(_FLAGS.output, "--output")
    if _FLAGS.gif:
        if not _FLAGS.gif.lower().endswith(".gif"):
            raise _Failure(f"--gif {_FLAGS.gif!r} must end in .gif.")
        _check_writable_file(_FLAGS.gif, "--gif")
    quiet_library_logs()

    if _FLAGS.tflite:
        from sit_keras.export.tflite_py_policy import TFLitePyPolicy

        try:
            policy = TFLitePyPolicy(_FLAGS.tflite)
        except (OSError, ValueError) as error:  # missing or damaged model / metadata, named in the message
            raise _Failure(str(error)) from None
        try:
            environment = policy.metadata["environment"]
            trained = (str(environment["name"]), dict(environment.get("kwargs") or {}))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise _Failure(
                f"the metadata of {_FLAGS.tflite!r} does not name its environment ({error!r}); "
                "export the model again with sit-export."
            ) from None
        source = _FLAGS.tflite
    else:
        if not os.path.exists(os.path.join(_FLAGS.policy_dir, "saved_model.pb")):
            try:
                load_policy(_FLAGS.policy_dir)  # raises the one-sentence FileNotFoundError
            except FileNotFoundError as error:
                raise _Failure(str(error)) from None
        trained = _trained_environment(_FLAGS.policy_dir)
        if _FLAGS.env is None and trained is None:
            raise _Failure(
                f"--env is required: {_FLAGS.policy_dir!r} is not inside a training folder with a "
                "policy_network.json that names its environment."
            )
        import tensorflow as tf

        try:
            policy = load_policy(_FLAGS.policy_dir)
        except (OSError, ValueError, tf.errors.OpError) as error:  # a damaged SavedModel or checkpoint
            message = getattr(error, "message", None) or str(error)
            raise _Failure(f"cannot load the saved policy in {_FLAGS.policy_dir!r}: {message}") from None
        source = _FLAGS.policy_dir
    if _FLAGS.env is None:
        env_name, env_kwargs = trained[0], {**trained[1], **given_kwargs}
    else:
        env_name, env_kwargs = _FLAGS.env, given_kwargs
    output = _FLAGS.output or default_output(source, env_name, env_kwargs, tflite=bool(_FLAGS.tflite))
    if not _FLAGS.output:
        _check_writable_file(output, "the default output")
    try:
        check_evaluation(
            policy, env_name, transform_names, env_kwargs, _FLAGS.seed, trained[0] if trained else None
        )
    except ValueError as error:
        raise _Failure(str(error).rstrip(".") + ".") from None
    except ImportError as error:  # an environment family whose package is not installed
        raise _Failure(f"cannot build {env_name}: {error}.", EVALUATION_FAILED) from None

    print(
        f"Evaluating {source} on {env_name}{f' {env_kwargs}' if env_kwargs else ''}: "
        f"{_FLAGS.num_episodes} episodes per "
        f"transform, {len(transform_names)} transform(s).",
        flush=True,
    )
    from sit_keras.export.runtime import PolicyInputError

    try:
        results = evaluate(
            policy, env_name, transform_names, _FLAGS.num_episodes, _FLAGS.num_envs, _FLAGS.seed, env_kwargs,
            on_result=_print_summary, check=False,
        )  # fmt: skip
    except (PolicyInputError, RuntimeError) as error:
        raise _Failure(f"the evaluation stopped, nothing was written: {error}", EVALUATION_FAILED) from None
    report = {
        "policy": source,
        "env": env_name,
        "env_kwargs": env_kwargs,
        "num_episodes": _FLAGS.num_episodes,
        "num_envs": _FLAGS.num_envs,
        "seed": _FLAGS.seed,
        "results": results,
    }
    try:
        write_json_atomically(output, report)
    except OSError as error:
        raise _Failure(
            f"could not write {output!r} ({error}); the results are printed above.", EVALUATION_FAILED
        ) from None
    print(f"wrote {output}")
    if _FLAGS.gif:
        frames: list[np.ndarray] = []
        env = load(env_name, num_envs=1, seed=_FLAGS.seed, **env_kwargs)
        try:
            run_episodes(policy, env, 1, frames=frames)
        finally:
            env.close()
        try:
            save_gif(frames, _FLAGS.gif)
        except OSError as error:
            raise _Failure(f"could not write {_FLAGS.gif!r} ({error}).", EVALUATION_FAILED) from None
        print(f"wrote {_FLAGS.gif}")


if __name__ == "__main__":
    sys.exit(main())
