"""TensorFlow vs TFLite on the same inputs: output differences and greedy-action agreement."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sit_keras.export.rollouts import Example
from sit_keras.export.runtime import NEXT_STATE_PREFIX, make_interpreter

# Continuous actions agree when every component is within this fraction of its range (0.1 for [-1, 1]).
CONTINUOUS_ACTION_TOLERANCE = 0.05


def compare(
    model_path: str, examples: Sequence[Example], action_range: float = 2.0, num_threads: int = 1
) -> dict[str, float]:
    """Runs the ``.tflite`` model on each example's inputs (TensorFlow's states included).

    Returns ``action_agreement``: the fraction of examples with the same
    greedy action (discrete: equal; continuous: within
    ``CONTINUOUS_ACTION_TOLERANCE * action_range``), ``unexplained_disagreements``: the
    discrete disagreements where TensorFlow's best action led the runner-up
    by more than twice the error of the TFLite scores (a disagreement within
    that margin is a near-tie, flipped by rounding), ``num_examples``, and
    ``max_abs_diff/<output>`` for every float output (logits, q_values,
    loc, scale, a continuous action; ``state`` for the largest of the next
    states).
    """
    runner = make_interpreter(model_path, num_threads).get_signature_runner()
    same = []
    unexplained = 0
    diffs: dict[str, float] = {}
    for example in examples:
        outputs = runner(**example.inputs)
        same.append(_same_action(outputs["action"], example.outputs["action"], action_range))
        if not same[-1] and not _near_tie(outputs, example.outputs):
            unexplained += 1
        for name, value in outputs.items():
            if np.issubdtype(value.dtype, np.floating):
                key = "state" if name.startswith(NEXT_STATE_PREFIX) else name
                diff = float(np.max(np.abs(value.astype(np.float64) - example.outputs[name])))
                diffs[key] = max(diffs.get(key, 0.0), diff)
    report = {
        "action_agreement": float(np.mean(same)),
        "unexplained_disagreements": unexplained,
        "num_examples": len(examples),
    }
    report.update({f"max_abs_diff/{name}": value for name, value in sorted(diffs.items())})
    return report


def _same_action(tflite_action: np.ndarray, tf_action: np.ndarray, action_range: float) -> bool:
    if np.issubdtype(tf_action.dtype, np.integer):
        return bool(np.array_equal(tflite_action, tf_action))
    return bool(np.max(np.abs(tflite_action - tf_action)) <= CONTINUOUS_ACTION_TOLERANCE * action_range)


def _near_tie(tflite_outputs: dict[str, np.ndarray], tf_outputs: dict[str, np.ndarray]) -> bool:
    """Whether TensorFlow's top-2 score margin is within twice the TFLite scores' error (discrete only)."""
    name = "q_values" if "q_values" in tf_outputs else "logits"
    if name not in tf_outputs or not np.issubdtype(tf_outputs["action"].dtype, np.integer):
        return False
    scores = tf_outputs[name].reshape(-1)
    error = float(np.max(np.abs(tflite_outputs[name].reshape(-1) - scores)))
    top_two = np.sort(scores)[-2:]
    return bool(top_two[1] - top_two[0] <= 2 * error)
