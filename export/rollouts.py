"""Real rollouts of a trained policy: the representative data set of int8 models and the parity checks.

The policy (in TensorFlow, greedy) acts in its training environment
(``policy_network.json``); every step of every environment gives one example:
the serving inputs at batch size 1 and TensorFlow's outputs for them.
``collect_examples(..., transforms=policy.invariant_transforms)`` adds
rollouts whose observations are rotated or flipped (``environments.transforms``),
one share per transform: the views a rotation-invariant policy must handle
as it handles upright ones, in calibration and in the parity checks alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from sit_keras.agents.environments import load
from sit_keras.agents.environments.transforms import TRANSFORMS
from sit_keras.export.interruption import stop_if_interrupted
from sit_keras.export.policy_model import OBSERVATION, SENSOR_MASK, TrainedPolicy
from sit_keras.export.runtime import pad_sensors


@dataclasses.dataclass
class Example:
    """One step of one environment: the serving inputs (batch axis 1) and TensorFlow's outputs.

    ``view``: the observation transform of its environment (``"none"``: upright);
    ``step``: its step in the rollout (all environments of a batch step together).
    """

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    view: str = "none"
    step: int = 0


def collect_examples(
    policy: TrainedPolicy,
    num_examples: int,
    num_envs: int = 4,
    seed: int = 20_000,
    num_sensors: int | None = None,
    transforms: Sequence[str] = (),
) -> list[Example]:
    """``num_examples`` steps of the greedy policy in its training environment.

    Seeds differ from training's (``seed`` onwards). Recurrent state is
    carried and reset at episode starts; sensor sets are padded to
    ``num_sensors`` rows (default: the observation's), padding masked out.
    With ``transforms`` (names of ``environments.TRANSFORMS``) the steps are
    shared equally between the upright environment and one environment per
    transform, in that order.

    Raises:
      ValueError: ``num_examples`` or ``num_envs`` below 1, or an unknown
        transform (checked before an environment is built).
    """
    for name, value in (("num_examples", num_examples), ("num_envs", num_envs)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1; received {value}.")
    unknown = sorted(set(transforms) - set(TRANSFORMS))
    if unknown:
        raise ValueError(f"Unknown transforms {unknown}; expected some of: {', '.join(TRANSFORMS)}.")
    views: list[str | None] = [None, *transforms]
    share = -(-num_examples // len(views))  # ceil
    outputs_fn = tf.function(policy.outputs, autograph=False)  # traced once for every view
    examples: list[Example] = []
    for view in views:
        examples += _rollout_examples(policy, outputs_fn, share, num_envs, seed, num_sensors, view)
    return examples[:num_examples]


def _rollout_examples(
    policy: TrainedPolicy,
    outputs_fn: Callable[..., dict[str, tf.Tensor]],
    num_examples: int,
    num_envs: int,
    seed: int,
    num_sensors: int | None,
    transform: str | None,
) -> list[Example]:
    name, env_kwargs = policy.description.env_name, dict(policy.description.env_kwargs)
    env = load(name, num_envs=num_envs, seed=seed, transform=transform, **env_kwargs)
    examples: list[Example] = []
    try:
        time_step = env.reset()
        initial = [t.numpy() for t in policy.initial_state(num_envs, num_sensors)]
        state = initial
        step = 0
        while len(examples) < num_examples:
            stop_if_interrupted()
            state = _reset_rows(state, initial, np.asarray(time_step.step_type) == 0)
            inputs = _inputs(policy, np.asarray(time_step.observation), state, num_sensors)
            outputs = {k: v.numpy() for k, v in outputs_fn(**_call_arguments(policy, inputs)).items()}
            for i in range(num_envs):
                examples.append(
                    Example(
                        {k: v[i : i + 1] for k, v in inputs.items()},
                        {k: v[i : i + 1] for k, v in outputs.items()},
                        transform or "none",
                        step,
                    )
                )
            step += 1
            state = [outputs["next_" + name] for name in policy.state_names]
            time_step = env.step(outputs["action"])
    finally:
        env.close()
    return examples[:num_examples]


def _reset_rows(state: list[np.ndarray], initial: list[np.ndarray], first: np.ndarray) -> list[np.ndarray]:
    """The state with the rows of environments at a FIRST step set back to the initial state."""
    rows = [first.reshape((-1,) + (1,) * (s.ndim - 1)) for s in state]
    return [np.where(r, i, s) for r, s, i in zip(rows, state, initial, strict=True)]


def _inputs(
    policy: TrainedPolicy, observation: np.ndarray, state: list[np.ndarray], num_sensors: int | None
) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    if policy.takes_sensor_set:
        rows = num_sensors or observation.shape[1]
        padded = [pad_sensors(o, rows) for o in observation]
        inputs[OBSERVATION] = np.stack([p for p, _ in padded])
        inputs[SENSOR_MASK] = np.stack([m for _, m in padded])
    else:
        inputs[OBSERVATION] = observation
    inputs.update(zip(policy.state_names, state, strict=True))
    return inputs


def _call_arguments(policy: TrainedPolicy, inputs: dict[str, np.ndarray]) -> dict:
    return {
        "observation": tf.constant(inputs[OBSERVATION]),
        "state": [tf.constant(inputs[name]) for name in policy.state_names],
        "sensor_mask": tf.constant(inputs[SENSOR_MASK]) if SENSOR_MASK in inputs else None,
    }


def split_steps(examples: list[Example]) -> tuple[list[Example], list[Example]]:
    """``(calibration, held_out)``: the examples of even and of odd rollout steps.

    Every environment and view is in both halves, over the same stretch of
    its episodes: int8 ranges need the states a held-out step can reach. (An
    alternate split by position would give each half whole environments,
    and a long episode, such as DMC's 1000 steps, visits in one environment
    what the others never do within the rollout.)
    """
    if len({e.step for e in examples}) < 2:  # one batched step (a few examples): alternate environments
        return examples[0::2], examples[1::2]
    return [e for e in examples if e.step % 2 == 0], [e for e in examples if e.step % 2 == 1]


def representative_data(examples: list[Example]):
    """The ``representative_data`` callable of ``tflite.convert_function``: the examples' inputs (a signal
    stops the calibration between two of them: ``interruption``)."""

    def inputs():
        for example in examples:
            stop_if_interrupted()
            yield example.inputs

    return inputs
