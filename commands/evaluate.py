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
  traceback, and exits with status 2 (1: a failure that is not the user's).
- **The environment defaults to the training one.** ``--policy_dir`` reads
  ``<root_dir>/policy_network.json`` and ``--tflite`` the model's metadata;
  without ``--env`` the policy runs in its training environment with its
  training keywords, updated by ``--env_kwarg``. With ``--env``, only the
  ``--env_kwarg`` keywords apply.
- **A changed model is refused**: a ``--tflite`` file whose bytes differ
  from the SHA-256 its export recorded is named in one sentence (status 1);
  ``--skip_checksum`` runs it anyway.
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

- **A sensor set policy takes any number of readings** (AttentionNeuron,
  Tang & Ha 2021 Table 2's "10 obs" and "5 obs + 5 noise"): when the
  environment gives another number than training did
  (``--env_kwarg duplicate_sensors=true``, ``noise_sensors=5``), a
  ``--tflite`` model masks the rows it does not get (up to its exported
  maximum, ``sit-export --max_sensors``), and ``--policy_dir
  <root_dir>/policies/greedy_policy`` runs the training folder's network for
  that number (``export.sensor_set_py_policy``; the saved policy's signature
  fixes the training number).

``--env_kwarg key=value`` values are parsed by ``parse_env_kwargs`` (rules
in its docstring): booleans must be ``true`` / ``false``, ``yes`` / ``no``
and the like are refused as ambiguous.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from absl import flags, logging

from sit_keras.agents import evaluate
from sit_keras.agents.environments import load
from sit_keras.agents.environments.transforms import SHUFFLE_PATCHES, TRANSFORMS
from sit_keras.command_line import parse_flags, quiet_library_logs
from sit_keras.export.runtime import PolicyInputError
from sit_keras.export.sensor_set_py_policy import SensorSetPyPolicy
from sit_keras.export.tflite_py_policy import TFLitePyPolicy

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
flags.DEFINE_bool(
    "skip_checksum",
    False,
    "Run a --tflite model whose bytes differ from the SHA-256 its export recorded (refused by default).",
    flag_values=_FLAGS,
)
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


def _warn_if_parity_failed(path: str, metadata: dict[str, Any]) -> None:
    """A model exported with ``--allow_parity_failure`` is evaluated, but never silently."""
    export = metadata.get("export")
    parity = export.get("parity") if isinstance(export, dict) else None
    if isinstance(parity, dict) and parity.get("passed") is False:
        checks = "; ".join(map(str, parity.get("failed_checks") or ())) or "see its metadata"
        print(
            f"WARNING: {path} failed its parity check at export ({checks}) and was exported only "
            "because of --allow_parity_failure: these results may not be the trained policy's.",
            file=sys.stderr,
        )


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


def _trained_environment(policy_dir: str) -> tuple[str, dict[str, Any]] | None:
    """The training environment of ``<root_dir>/policies/<name>`` from ``<root_dir>/policy_network.json``."""
    root_dir = os.path.dirname(os.path.dirname(os.path.normpath(policy_dir)))
    path = os.path.join(root_dir, "policy_network.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            description = json.load(f)
        # The run's evaluation settings (Atari: whole games), else (older folders) its training ones.
        kwargs = description.get("eval_env_kwargs")
        return str(description["env_name"]), dict(description.get("env_kwargs") if kwargs is None else kwargs)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _Failure(f"{path!r} is damaged ({error}); pass --env to evaluate without it.") from None


def _readings(env_name: str, env_kwargs: Mapping[str, Any]) -> int | None:
    """Readings per observation of an environment with vector observations (None: images, or unbuildable).

    An environment that cannot be built is left to ``check_evaluation``, which names the reason.
    """
    try:
        env = load(env_name, num_envs=1, seed=0, **dict(env_kwargs))
    except Exception:  # noqa: BLE001 (check_evaluation reports it in one sentence)
        return None
    try:
        shape = tuple(getattr(env.observation_spec(), "shape", ()))
    finally:
        env.close()
    return int(shape[0]) if len(shape) == 1 else None


def _for_readings(policy: Any, env_name: str, env_kwargs: Mapping[str, Any]) -> Any:
    """The policy for the environment's number of readings, where a sensor set policy got another."""
    trained_rows = tuple(getattr(policy.time_step_spec.observation, "shape", ()))
    if len(trained_rows) != 1:
        return policy
    readings = _readings(env_name, env_kwargs)
    if readings is None or readings == trained_rows[0]:
        return policy
    if _FLAGS.tflite:
        if not policy.takes_sensor_set:
            return policy  # check_evaluation names the mismatch
        try:
            verify = not _FLAGS.skip_checksum
            return TFLitePyPolicy(_FLAGS.tflite, verify_checksum=verify, num_sensors=readings)
        except ValueError as error:
            raise _Failure(f"{env_name} gives {readings} sensor readings, but {error}") from None
    import tensorflow as tf

    from sit_keras.export.policy_model import load_trained_policy

    root_dir = os.path.dirname(os.path.dirname(os.path.normpath(_FLAGS.policy_dir)))
    try:
        trained = load_trained_policy(root_dir)
    except (OSError, ValueError):  # not a training folder: check_evaluation names the mismatch
        return policy
    except tf.errors.OpError as error:  # a damaged checkpoint
        message = f"cannot load the network of {root_dir!r}: {error.message}"
        raise _Failure(message, EVALUATION_FAILED) from None
    if not trained.takes_sensor_set:
        return policy
    if os.path.basename(os.path.normpath(_FLAGS.policy_dir)) != "greedy_policy":
        greedy = os.path.join(root_dir, "policies", "greedy_policy")
        raise _Failure(
            f"{env_name} gives {readings} sensor readings where training gave {trained_rows[0]}: another "
            f"number is evaluated greedily, with --policy_dir {greedy}."
        )
    return SensorSetPyPolicy(trained, readings)


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
        given_kwargs = evaluate.parse_env_kwargs(_FLAGS.env_kwarg)
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
        try:
            policy = TFLitePyPolicy(_FLAGS.tflite, verify_checksum=not _FLAGS.skip_checksum)
        except (OSError, ValueError) as error:  # missing or damaged model / metadata, named in the message
            raise _Failure(str(error)) from None
        try:
            environment = policy.metadata["environment"]
            kwargs = environment.get("evaluation_kwargs", environment.get("kwargs"))
            trained = (str(environment["name"]), dict(kwargs or {}))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise _Failure(
                f"the metadata of {_FLAGS.tflite!r} does not name its environment ({error!r}); "
                "export the model again with sit-export."
            ) from None
        source = _FLAGS.tflite
        _warn_if_parity_failed(_FLAGS.tflite, policy.metadata)
    else:
        if not os.path.exists(os.path.join(_FLAGS.policy_dir, "saved_model.pb")):
            try:
                evaluate.load_policy(_FLAGS.policy_dir)  # raises the one-sentence FileNotFoundError
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
            policy = evaluate.load_policy(_FLAGS.policy_dir)
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
    policy = _for_readings(policy, env_name, env_kwargs)
    try:
        evaluate.check_evaluation(
            policy, env_name, transform_names, env_kwargs, _FLAGS.seed, trained[0] if trained else None
        )
    except ValueError as error:
        raise _Failure(str(error).rstrip(".") + ".") from None
    except ImportError as error:  # an environment family whose package is not installed
        raise _Failure(f"cannot build {env_name}: {error}.", EVALUATION_FAILED) from None
    if _FLAGS.gif:  # a GIF shows image observations: known now, not after every episode has run
        observation = getattr(policy.time_step_spec, "observation", None)
        shape = tuple(getattr(observation, "shape", ()) or ())
        if len(shape) not in (2, 3):
            raise _Failure(
                f"--gif needs image observations, and {env_name} gives observations of shape {shape}: "
                "leave --gif out."
            )

    origin = "--env" if _FLAGS.env is not None else "the run's evaluation settings"
    origin += " and --env_kwarg" if given_kwargs else ""
    print(
        f"Evaluating {source} on {env_name}{f' {env_kwargs}' if env_kwargs else ''} (from {origin}): "
        f"{_FLAGS.num_episodes} episodes per transform, {len(transform_names)} transform(s).",
        flush=True,
    )
    try:
        results = evaluate.evaluate(
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
        evaluate.write_json_atomically(output, report)
    except OSError as error:
        raise _Failure(
            f"could not write {output!r} ({error}); the results are printed above.", EVALUATION_FAILED
        ) from None
    print(f"wrote {output}")
    if _FLAGS.gif:
        frames: list[np.ndarray] = []
        env = load(env_name, num_envs=1, seed=_FLAGS.seed, **env_kwargs)
        try:
            evaluate.run_episodes(policy, env, 1, frames=frames)
        finally:
            env.close()
        try:
            evaluate.save_gif(frames, _FLAGS.gif)
        except OSError as error:
            raise _Failure(f"could not write {_FLAGS.gif!r} ({error}).", EVALUATION_FAILED) from None
        print(f"wrote {_FLAGS.gif}")


if __name__ == "__main__":
    sys.exit(main())
