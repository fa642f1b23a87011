"""TFLite conversion of a trained policy's serving function, in five quantisations.

- ``float32``: no quantisation.
- ``float16``: float16 weights (dequantised at load), float32 compute.
- ``dynamic_int8``: int8 weights; activations quantised on the fly.
- ``int8``: int8 weights and activations, calibrated on a representative
  data set of real observations (``representative``), except the op types
  in ``FLOAT_OPS_IN_INT8`` and the normalisations (``export.normalisation``:
  the ops that compute and apply each ``1 / sqrt`` of a LayerNorm or of the
  local GSA's weights, whose int8 rounding changed 14-34% of the demo SiTs'
  greedy actions): they run in float32 on weights stored as int8
  (``float_ops=()`` and ``float_normalisations=False``: every op in int8,
  the converter's full-integer model).
- ``int16x8``: int8 weights and int16 activations (TFLite's 16x8 mode),
  calibrated the same way; ops without a 16x8 kernel run in float32. The
  recipe for policies on float observation vectors (a SAC actor, the
  AttentionNeuron), whose int8 models failed parity: the converter gives the
  tanh-normal head's split one scale for the location and the clipped
  log-scale, so positive locations became 0 in the cart-pole SAC actor
  (``tests/test_quantisation.py`` shows it on one head), and the
  AttentionNeuron student agreed on 0.87 of the steps; with 16-bit
  activations both agree on every held-out step (docs/export.md).
  XNNPACK has no 16x8 kernels, so these run on TFLite's built-in kernels.
  Not in ``DEFAULT_QUANTIZATIONS``, and not for the SiT family: the
  converter quantises LayerNorm's SQUARED_DIFFERENCE to 16 bits, which the
  runtime cannot run (its parity check fails and says so), and the
  converter's selective quantisation, which keeps such ops in float32 for
  ``int8``, ignores the 16x8 mode. For image policies ``int8`` keeps the
  behaviour (docs/export.md).

The model's inputs and outputs keep their types (uint8 images or float32
  vectors in; float32 logits / values and the action out), so every
  quantisation is called the same way.

Why ``int8`` keeps some ops in float32. The runtime runs an op with
XNNPACK's kernel where XNNPACK has one, else with TFLite's built-in kernel.
XNNPACK has no int8 kernel for BATCH_MATMUL, SQUARED_DIFFERENCE, RSQRT and
SOFTMAX, nor for an ADD whose scales are outside its range (LayerNorm's
epsilon). In a full-integer SiT they fall back to the built-in int8 kernels
and cut XNNPACK's graph into 20 partitions. Measured per op type with
``benchmarks/export.py --models sit --profile_ops``, demo-size SiT, batch 1,
one thread, ms per call, for float32 / full-integer int8 / this ``int8``:
BATCH_MATMUL (11 ops, attention, graph mixing, projections) 0.110 / 0.675 /
0.107; RSQRT 0.000 / 0.021 / 0.000; SQUARED_DIFFERENCE 0.000 / 0.010 /
0.000; SOFTMAX 0.004 / 0.005 / 0.004; ADD 0.001 / 0.004 / 0.001; the added
QUANTIZE / DEQUANTIZE pairs - / - / 0.014; whole model 0.18 / 0.78 / 0.19.
Latency against float32 (medians of per-round ratios): full-integer 3.8-4.0x
(SiT and SieT), this ``int8`` 0.90-1.04x (SiT) and 1.10x (SieT). SieT's 10%
is the QUANTIZE / DEQUANTIZE pairs and XNNPACK's int8 depthwise convolution
and MUL, slower than float32 at these sizes; no op of the SiT family has an
int8 kernel faster than float32 on this CPU, so int8 is for the file size
(28% of float32 for SiT).

Models use TFLite's built-in ops only (a robot runs ``ai_edge_litert``
without TensorFlow); a graph that needs a TensorFlow (Flex) op fails with an
``UnsupportedOpsError`` that names it, unless ``allow_flex_ops=True``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema

from sit_keras import quiet
from sit_keras.export.int8_weights import store_weights_as_int8
from sit_keras.export.normalisation import normalisation_nodes
from sit_keras.export.policy_model import TrainedPolicy

QUANTIZATIONS = ("float32", "float16", "dynamic_int8", "int8", "int16x8")
# What sit-export writes unless told otherwise.
DEFAULT_QUANTIZATIONS = ("float32", "float16", "dynamic_int8", "int8")
# The quantisations calibrated on representative data.
CALIBRATED_QUANTIZATIONS = ("int8", "int16x8")

# TFLite's built-in op types, the names ``float_ops`` takes.
OP_TYPES: tuple[str, ...] = tuple(sorted(k for k in vars(schema.BuiltinOperator) if not k.startswith("_")))

# Op types that "int8" models run in float32: XNNPACK has no int8 kernel for
# them (for ADD: not at every scale), so in int8 they fall back to TFLite's
# built-in kernels and split XNNPACK's partitions (module docstring).
FLOAT_OPS_IN_INT8 = ("BATCH_MATMUL", "SQUARED_DIFFERENCE", "RSQRT", "SOFTMAX", "ADD")

RepresentativeData = Callable[[], Iterable[Mapping[str, np.ndarray]]]


class UnsupportedOpsError(ValueError):
    """The graph needs ops that TFLite's built-in op set does not have."""


def convert_function(
    function: tf.types.experimental.ConcreteFunction,
    trackable: tf.Module,
    quantization: str = "float32",
    representative_data: RepresentativeData | None = None,
    allow_flex_ops: bool = False,
    float_ops: Sequence[str] = FLOAT_OPS_IN_INT8,
    float_normalisations: bool = True,
) -> bytes:
    """A ``.tflite`` flatbuffer of ``function`` (fixed input shapes) in the given quantisation.

    Args:
      function: a concrete function of one dict argument (named inputs).
      trackable: the object that owns the function's variables.
      quantization: one of ``QUANTIZATIONS``.
      representative_data: for ``"int8"`` and ``"int16x8"``: a callable returning an iterable
        of input dicts (the function's input names to one example's arrays,
        with the batch axis).
      allow_flex_ops: also allow TensorFlow (Flex) ops; such a model needs
        the TensorFlow Lite Flex delegate, which ``ai_edge_litert`` lacks.
      float_ops: for ``"int8"``: TFLite op types (``OP_TYPES``) kept in
        float32, their constant operands stored as int8.
      float_normalisations: for ``"int8"``: also keep the normalisations
        (``export.normalisation``) in float32. ``float_ops=()`` with
        ``float_normalisations=False``: every op in int8.

    Raises:
      ValueError: unknown quantisation, or a calibrated one without representative data.
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
    float_ops = tuple(float_ops) if quantization == "int8" else ()
    float_nodes: list[str] = []
    if quantization == "int8" and float_normalisations:  # found in the float32 model (same tensor names)
        float_nodes = normalisation_nodes(
            convert_function(function, trackable, "float32", allow_flex_ops=allow_flex_ops)
        )
    if quantization in CALIBRATED_QUANTIZATIONS:
        if representative_data is None:
            raise ValueError(
                f"quantization={quantization!r} needs representative_data (observations from rollouts)."
            )
        # Inputs by name (the model's signature), not by position: TFLite orders them its own way.
        converter.representative_dataset = lambda: (
            {name: np.asarray(value) for name, value in example.items()} for example in representative_data()
        )
    if quantization == "int8":
        # With float ops the converter must also allow float built-in kernels.
        selective = bool(float_ops or float_nodes)
        ops = [tf.lite.OpsSet.TFLITE_BUILTINS if selective else tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if quantization == "int16x8":
        # The built-in float kernels for ops that have no 16x8 one.
        ops = [
            tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
            tf.lite.OpsSet.TFLITE_BUILTINS,
        ]
    if allow_flex_ops:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    converter.target_spec.supported_ops = ops
    try:
        # The converter prints its passes through C++ (dozens of lines): shown only if it fails.
        with warnings.catch_warnings(), quiet.captured_stderr():
            # The converter's own calibrator uses tf.lite.Interpreter, which warns about its deprecation.
            warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter is deprecated")
            if float_ops or float_nodes:
                return _int8_with_float_ops(converter, float_ops, float_nodes)
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


def _int8_with_float_ops(
    converter: tf.lite.TFLiteConverter, float_ops: tuple[str, ...], float_nodes: Sequence[str]
) -> bytes:
    """Calibrates; every op but ``float_ops`` and ``float_nodes`` in int8; their weights stored as int8.

    The converter's selective quantisation (``QuantizationDebugger`` with
    denylisted op types and nodes, by output tensor name): the kept ops get
    DEQUANTIZE / QUANTIZE ops around them, which XNNPACK runs inside its partitions.
    """
    options = tf.lite.experimental.QuantizationDebugOptions(
        denylisted_ops=list(float_ops), denylisted_nodes=list(float_nodes)
    )
    debugger = tf.lite.experimental.QuantizationDebugger(converter=converter, debug_options=options)
    return store_weights_as_int8(debugger.get_nondebug_quantized_model())


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
    float_ops: Sequence[str] = FLOAT_OPS_IN_INT8,
    float_normalisations: bool = True,
) -> bytes:
    """``convert_function`` of the policy's serving function at batch size 1.

    ``num_sensors``: the fixed number of rows of a sensor set model (the
    documented maximum; fewer readings are masked); default: the training
    observation's. ``float_ops``, ``float_normalisations``: as in ``convert_function``.
    """
    if policy.takes_sensor_set and num_sensors is None:
        num_sensors = int(policy.observation_spec.shape[0])
    function = policy.serving_function(batch_size=1, num_sensors=num_sensors)
    return convert_function(
        function, policy.network, quantization, representative_data, allow_flex_ops, float_ops,
        float_normalisations,
    )  # fmt: skip
