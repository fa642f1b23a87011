"""TensorFlow vs TFLite on the same inputs: does the exported model act like the policy?

``compare`` runs a ``.tflite`` model on held-out rollout steps (TensorFlow's
inputs and states) and checks three things. A model passes only if all hold:

- **Action agreement.** The share of steps where TFLite's greedy action is
  TensorFlow's must be at least ``MIN_ACTION_AGREEMENT``. Discrete actions
  agree when equal. A continuous action agrees when every component is
  within ``CONTINUOUS_ACTION_TOLERANCE`` of the span TensorFlow's actions
  actually cover on these steps, and never closer than
  ``ACTION_RESOLUTION`` of the spec's range. The span is the relevant scale:
  an untrained or cautious actor may use 1% of ``[-1, 1]``, and a fixed
  tolerance of 0.1 would then accept any constant, which is how an int8 SAC
  actor that returned 0.0 for 200 distinct states once passed.
  With rotated or flipped views (``Example.view``), every view must reach it.
- **No clear discrete disagreement.** A discrete disagreement is explained
  only when TensorFlow's top two scores are within twice the TFLite scores'
  error of each other (a near-tie that rounding flips); any other counts in
  ``unexplained_disagreements``, which must be 0. This is strict for float
  models; for int8, whose errors are large, the agreement floor above is
  the real gate.
- **Spread.** Where TensorFlow's outputs vary across the steps, TFLite's
  must vary at least ``MIN_SPREAD_RATIO`` as much: the standard deviation
  over steps of each continuous action component, or of the discrete scores
  (logits or Q-values, centred per step, since a common shift does not change
  the action). A model that collapses to a constant fails even where the
  reference's spread is within the agreement tolerance.

Non-finite TFLite outputs fail too, and so does a model the runtime refuses
to run (an op without a kernel for its types), with the runtime's reason.
The report lists every failed check in words (``failed_checks``), so
``sit-export`` can name them in one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sit_keras import quiet
from sit_keras.export.interruption import stop_if_interrupted
from sit_keras.export.rollouts import Example
from sit_keras.export.runtime import NEXT_STATE_PREFIX, make_interpreter

# A continuous action agrees when every component is within this fraction of the span that
# TensorFlow's actions cover on the held-out steps (0.1 when they cover all of [-1, 1]) ...
CONTINUOUS_ACTION_TOLERANCE = 0.05
# ... or within this fraction of the spec's range, whichever is larger (0.01 for [-1, 1]): differences
# below it are below any actuator's resolution and not a sign of a broken model.
ACTION_RESOLUTION = 0.005
# The share of held-out steps whose greedy action must agree with TensorFlow's.
MIN_ACTION_AGREEMENT = 0.9
# TFLite's outputs must vary across steps at least this much, relative to TensorFlow's.
MIN_SPREAD_RATIO = 0.5
# TensorFlow's outputs "vary" when their spread exceeds this fraction of the action range (continuous)
# or of the scores' magnitude (discrete); below it, float rounding dominates and no ratio is taken.
_MIN_REFERENCE_SPREAD = 1e-4


def compare(
    model_path: str,
    examples: Sequence[Example],
    action_range: float | Sequence[float] | np.ndarray = 2.0,
    num_threads: int = 1,
) -> dict[str, Any]:
    """Runs the ``.tflite`` model on each example's inputs (TensorFlow's states included); the parity report.

    Args:
      model_path: the model.
      examples: held-out rollout steps with TensorFlow's outputs (at least one).
      action_range: ``maximum - minimum`` of the action spec, a scalar or per
        component (continuous actions only).
      num_threads: interpreter threads.

    Returns:
      ``passed`` and ``failed_checks`` (words, empty when passed);
      ``num_examples``; ``action_agreement`` (with ``min_action_agreement``),
      and ``action_agreement_by_view`` when the examples come from several
      views (``Example.view``: upright, rotated, flipped);
      ``unexplained_disagreements``; ``spread_output``, ``spread_ratio`` (None
      where TensorFlow's outputs do not vary) and ``min_spread_ratio``; for
      continuous actions ``action_tolerance`` per component; and
      ``max_abs_diff/<output>`` for every float output (``state`` for the
      largest of the next states). See the module docstring.

    Raises:
      ValueError: no examples.
    """
    if not examples:
        raise ValueError("Parity needs at least one held-out example; received none.")
    runner = make_interpreter(model_path, num_threads).get_signature_runner()
    try:
        with quiet.filtered_stderr():  # LiteRT's "Created TensorFlow Lite XNNPACK delegate" at the first run
            results = [_run(runner, example) for example in examples]
    except RuntimeError as error:  # e.g. an op the converter quantised but the runtime has no kernel for
        return _cannot_run(len(examples), str(error))
    references = [example.outputs for example in examples]
    diffs: dict[str, float] = {}
    non_finite: set[str] = set()
    for outputs, reference in zip(results, references, strict=True):
        for name, value in outputs.items():
            if np.issubdtype(value.dtype, np.floating):
                key = "state" if name.startswith(NEXT_STATE_PREFIX) else name
                if not np.all(np.isfinite(value)):
                    non_finite.add(key)
                diff = float(np.max(np.abs(value.astype(np.float64) - reference[name])))
                diffs[key] = max(diffs.get(key, 0.0), diff)
    continuous = np.issubdtype(references[0]["action"].dtype, np.floating)
    report: dict[str, Any] = {"num_examples": len(examples)}
    if continuous:
        checks, same = _continuous_checks(results, references, action_range)
    else:
        checks, same = _discrete_checks(results, references)
    report.update(checks)
    views = sorted({example.view for example in examples})
    if len(views) > 1:  # rotated or flipped rollouts too (rollouts.collect_examples)
        report["action_agreement_by_view"] = {
            view: float(np.mean(same[[e.view == view for e in examples]])) for view in views
        }
    report["min_action_agreement"] = MIN_ACTION_AGREEMENT
    report["min_spread_ratio"] = MIN_SPREAD_RATIO
    report.update({f"max_abs_diff/{name}": value for name, value in sorted(diffs.items())})
    failed = []
    if non_finite:
        failed.append(f"non-finite {', '.join(sorted(non_finite))}")
    if report["action_agreement"] < MIN_ACTION_AGREEMENT:
        failed.append(
            f"greedy-action agreement {report['action_agreement']:.3f} is below {MIN_ACTION_AGREEMENT} "
            f"on {len(examples)} held-out steps"
        )
    for view, agreement in report.get("action_agreement_by_view", {}).items():
        if agreement < MIN_ACTION_AGREEMENT:
            failed.append(
                f"greedy-action agreement {agreement:.3f} on the {view} view is below {MIN_ACTION_AGREEMENT}"
            )
    if report["unexplained_disagreements"]:
        failed.append(
            f"{report['unexplained_disagreements']} disagreements where TensorFlow's choice was clear "
            "(not a near-tie)"
        )
    ratio = report["spread_ratio"]
    if ratio is not None and not ratio >= MIN_SPREAD_RATIO:  # `not >=`: a NaN ratio fails too
        failed.append(
            f"the spread of its {report['spread_output']} across steps is {ratio:.3f} of TensorFlow's "
            f"(at least {MIN_SPREAD_RATIO} required): its outputs collapse"
        )
    report["failed_checks"] = failed
    report["passed"] = not failed
    return report


def _run(runner: Any, example: Example) -> dict[str, np.ndarray]:
    """The model's outputs on one example, after a signal's check (``interruption``)."""
    stop_if_interrupted()
    return runner(**example.inputs)


def _cannot_run(num_examples: int, error: str) -> dict[str, Any]:
    """The report of a model that the runtime refuses to run: failed, with the runtime's first sentence."""
    reason = (error.strip().splitlines() or ["no reason given"])[0]
    return {
        "num_examples": num_examples,
        "action_agreement": 0.0,
        "min_action_agreement": MIN_ACTION_AGREEMENT,
        "failed_checks": [f"the TFLite runtime cannot run it ({reason})"],
        "runtime_error": reason,
        "passed": False,
    }


def _continuous_checks(
    results: list[dict[str, np.ndarray]],
    references: list[dict[str, np.ndarray]],
    action_range: float | Sequence[float] | np.ndarray,
) -> tuple[dict[str, Any], np.ndarray]:
    """The continuous checks, and whether each step's action agrees."""
    actions = np.stack([r["action"].reshape(-1) for r in results]).astype(np.float64)
    expected = np.stack([r["action"].reshape(-1) for r in references]).astype(np.float64)
    spec_range = np.broadcast_to(np.asarray(action_range, np.float64), expected.shape[1:])
    span = expected.max(axis=0) - expected.min(axis=0)
    tolerance = np.maximum(CONTINUOUS_ACTION_TOLERANCE * span, ACTION_RESOLUTION * spec_range)
    with np.errstate(invalid="ignore"):
        same = np.all(np.abs(actions - expected) <= tolerance, axis=1)
    reference_std, std = expected.std(axis=0), actions.std(axis=0)
    varies = reference_std > _MIN_REFERENCE_SPREAD * spec_range
    ratio = float(np.min(std[varies] / reference_std[varies])) if np.any(varies) else None
    checks = {
        "action_agreement": float(np.mean(same)),
        "unexplained_disagreements": 0,
        "action_tolerance": [float(t) for t in tolerance],
        "spread_output": "action",
        "spread_ratio": ratio,
    }
    return checks, same


def _discrete_checks(
    results: list[dict[str, np.ndarray]], references: list[dict[str, np.ndarray]]
) -> tuple[dict[str, Any], np.ndarray]:
    """The discrete checks, and whether each step's action agrees."""
    name = "q_values" if "q_values" in references[0] else "logits"
    same = [bool(np.array_equal(r["action"], e["action"])) for r, e in zip(results, references, strict=True)]
    unexplained = sum(
        not agree and not _near_tie(r, e) for agree, r, e in zip(same, results, references, strict=True)
    )
    ratio = None
    if name in references[0]:
        scores = np.stack([r[name].reshape(-1) for r in results]).astype(np.float64)
        expected = np.stack([r[name].reshape(-1) for r in references]).astype(np.float64)
        reference_spread = _centred_spread(expected)
        if reference_spread > _MIN_REFERENCE_SPREAD * (1.0 + float(np.mean(np.abs(expected)))):
            ratio = _centred_spread(scores) / reference_spread
    checks = {
        "action_agreement": float(np.mean(same)),
        "unexplained_disagreements": int(unexplained),
        "spread_output": name,
        "spread_ratio": ratio,
    }
    return checks, np.asarray(same)


def _centred_spread(scores: np.ndarray) -> float:
    """The spread across steps of per-step-centred scores ``(steps, actions)``: sqrt of summed variances."""
    centred = scores - scores.mean(axis=1, keepdims=True)
    return float(np.sqrt(np.sum(centred.var(axis=0))))


def _near_tie(tflite_outputs: dict[str, np.ndarray], tf_outputs: dict[str, np.ndarray]) -> bool:
    """Whether TensorFlow's top-2 score margin is within twice the TFLite scores' error (discrete only)."""
    name = "q_values" if "q_values" in tf_outputs else "logits"
    if name not in tf_outputs or not np.issubdtype(tf_outputs["action"].dtype, np.integer):
        return False
    scores = tf_outputs[name].reshape(-1)
    if scores.size < 2:
        return False
    error = float(np.max(np.abs(tflite_outputs[name].reshape(-1) - scores)))
    top_two = np.sort(scores)[-2:]
    return bool(top_two[1] - top_two[0] <= 2 * error)
