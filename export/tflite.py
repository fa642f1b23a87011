"""TFLite conversion of a trained policy's serving function, in four quantisations.

- ``float32``: no quantisation.
- ``float16``: float16 weights (dequantised at load), float32 compute.
- ``dynamic_int8``: int8 weights; activations quantised on the fly.
- ``int8``: full-integer: int8 weights and activations, calibrated on a
  representative data set of real observations (``representative``). The
  model's inputs and outputs keep their types (uint8 images or float32
  vectors in; float32 logits / values and the action out), so every
  quantisation is called the same way.

Models use TFLite's built-in ops only (a robot runs ``ai_edge_litert``
without TensorFlow); a graph that needs a TensorFlow (Flex) op fails with an
``UnsupportedOpsError`` that names it, unless ``allow_flex_ops=True``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import tensorflow as tf

from sit_keras.export.policy_model import TrainedPolicy

QUANTIZATIONS = ("float32", "float16", "dynamic_int8", "int8")

RepresentativeData = Callable[[], Iterable[Mapping[str, np.ndarray]]]


class UnsupportedOpsError(ValueError):
    """The graph needs ops that TFLite's built-in op set does not have."""


def convert_function(
    function: tf.types.experimental.ConcreteFunction,
    trackable: tf.Module,
    quantization: str = "float32",
    representative_data: RepresentativeData | None = None,
    allow_flex_ops: bool = False,
) -> bytes:
    """A ``.tflite`` flatbuffer of ``function`` (fixed input shapes) in the given quantisation.

    Args:
      function: a concrete function of one dict argument (named inputs).
      trackable: the object that owns the function's variables.
      quantization: one of ``QUANTIZATIONS``.
      representative_data: for ``"int8"``: a callable returning an iterable
        of input dicts (the function's input names to one example's arrays,
        with the batch axis).
      allow_flex_ops: also allow TensorFlow (Flex) ops; such a model needs
        the TensorFlow Lite Flex delegate, which ``ai_edge_litert`` lacks.

    Raises:
      ValueError: unknown quantisation, or ``"int8"`` without representative data.
      UnsupportedOpsError: an op outside the allowed op sets, named in the message.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"Unknown quantization {quantization!r}. Expected one of: {', '.join(QUANTIZATIONS)}."
        )
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], trackable)
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantization == "int8":
        if representative_data is None:
            raise ValueError("quantization='int8' needs representative_data (observations from rollouts).")
        # Inputs by name (the model's signature), not by position: TFLite orders them its own way.
        converter.representative_dataset = lambda: (
            {name: np.asarray(value) for name, value in example.items()} for example in representative_data()
        )
        ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if allow_flex_ops:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    converter.target_spec.supported_ops = ops
    try:
        with warnings.catch_warnings():
            # The converter's own calibrator uses tf.lite.Interpreter, which warns about its deprecation.
            warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter is deprecated")
            return converter.convert()
    except Exception as error:  # the converter raises its own ConverterError subclasses
        unsupported = _unsupported_ops(str(error))
        if unsupported:
            raise UnsupportedOpsError(
                f"The policy cannot be converted with TFLite built-in ops only; offending ops: "
                f"{', '.join(unsupported)}. Rewrite the layer with built-in ops, or pass allow_flex_ops=True "
                f"(--allow_flex_ops) for a model that needs the TensorFlow Flex delegate."
            ) from error
        raise


def _unsupported_ops(message: str) -> list[str]:
    """Op names in the converter's "ops are not supported" error (``tf.Einsum``, ...)."""
    if "not supported" not in message and "Select TF ops" not in message:
        return []
    return sorted(set(re.findall(r"\btf\.[A-Z]\w*", message)))


def convert_policy(
    policy: TrainedPolicy,
    quantization: str = "float32",
    representative_data: RepresentativeData | None = None,
    num_sensors: int | None = None,
    allow_flex_ops: bool = False,
) -> bytes:
    """``convert_function`` of the policy's serving function at batch size 1.

    ``num_sensors``: the fixed number of rows of a sensor set model (the
    documented maximum; fewer readings are masked); default: the training
    observation's.
    """
    if policy.takes_sensor_set and num_sensors is None:
        num_sensors = int(policy.observation_spec.shape[0])
    function = policy.serving_function(batch_size=1, num_sensors=num_sensors)
    return convert_function(function, policy.network, quantization, representative_data, allow_flex_ops)
