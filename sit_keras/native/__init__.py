"""Native CPU kernels for the SiT train step, with builtin TensorFlow ops as the fallback.

The kernels are TensorFlow custom ops in C++ (``window_attention.cc``), compiled
for this host by ``python -m sit_keras.native.build`` (``make install`` runs it).
They compute the same functions as the builtin ops they replace; a layer uses
one only where ``usable`` says so:

- the CPU has AVX-512 or AVX2 with FMA (the vector registers the kernels are
  written for; elsewhere nothing is built), the library was built for this host
  (CPU flags and TensorFlow version) and loads (``load_problem`` says why not);
- a gradient tape may be recording (a train step), or the function is traced
  inside ``forward_passes()`` (the trainers' collection and evaluation drivers):
  serving signatures and exports, traced elsewhere, keep the builtin ops, so a
  SavedModel or TFLite model never needs this library;
- the function is not compiled by XLA (``jit_compile=True``), or the op has an
  XLA kernel (``XLA_OPS``, in ``XLA_LIBRARY``: built where LLVM's headers are
  installed, ``sit_keras.native.build``) that hands XLA's buffers to the same
  computation in a custom call;
- the dtype is float32 or float64, or bfloat16 (``mixed_bfloat16``), which the
  ops compute in float32 (``op_dtype``): the attention, standardisation and
  stem ops read their large tensors (``qkv``, the tokens, the maps, their
  gradients) in bfloat16 and write them rounded, as a cast would, and the
  stem's pooling runs in bfloat16 (a maximum is exact); the other ops, and all
  of them in a function XLA compiles, have their inputs cast up and their
  outputs back;
- not inside ``builtin_only()`` (benchmarks compare both forms in one run), nor,
  for a function XLA compiles, inside ``without_xla_kernels()``.

A layer whose graphs are invariant under the quarter turn of its square grid
(the SiT's rotation symmetry) gives the ops the quarter turn's orbits of its
tokens, and the ops mix those graphs in its Fourier basis: the same sums in
fewer multiply-adds (``rotation_spectra.h``; ``dense_mixing()`` turns it off).

The ops (``window_attention``, ``class_token_attention``) run the window attention
of a local GSA block in vector lanes of ``LANES`` windows: the scores, score
maps and softmaxes never leave the cache (docs/speed.md, "Native kernels");
``class_token_values`` the values of a single local block's class-token row, whose
scores are a matmul of the pixels (``class_token_values.cc``);
``standardized_lane_blocks`` writes a block's standardised tokens in their layout;
``depthwise_conv`` is the SiT stem's depth-wise convolution (``depthwise_stem.cc``);
``max_pool`` the pooling after it (``max_pool.cc``); ``project_channels_first`` the GSA layers'
projection of channels-first tokens (``channels_first.cc``); ``conv2d`` and ``strided_max_pool`` the
CNNs' convolutions and the IMPALA-CNN's pooling, whose gradients they compute (``conv_kernel_grad.cc``,
``max_pool.cc``).
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: `python -m sit_keras.native.build` starts here)

# isort: split

import contextlib
import ctypes
import functools
import inspect
import json
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record
from tensorflow.python.framework.kernels import get_registered_kernels_for_op as kernels_for_op

from sit_keras.native import cpu

LIBRARY = Path(__file__).with_name("_kernels.so")
XLA_LIBRARY = Path(__file__).with_name("_xla_kernels.so")
# The ops of max_pool, strided_max_pool, project_channels_first, depthwise_conv, conv2d, and of the GSA
# layers' native path (window_attention, class_token_attention, standardized_lane_blocks); those
# XLA_LIBRARY gives an XLA kernel (xla/xla_kernels.cc): all of them.
POOL_OPS = frozenset({"SitMaxPool", "SitMaxPoolGrad"})
PROJECTION_OPS = frozenset({"SitChannelsFirstProjection", "SitChannelsFirstProjectionKernelGrad"})
# The projection stored as bfloat16 (project_bfloat16), for AMX hosts: no XLA kernel.
BFLOAT16_PROJECTION_OPS = frozenset({"SitChannelsFirstProjectionBfloat16"})
STEM_OPS = frozenset({"SitDepthwiseConv", "SitDepthwiseConvKernelGrad"})
CONV_OPS = frozenset({"SitConv2D", "SitConv2DKernelGrad"})
STRIDED_POOL_OPS = frozenset({"SitStridedMaxPoolGrad"})
# Window positions SitStridedMaxPoolGrad takes at most (kMaxStridedPoolPositions of max_pool.h).
MAX_STRIDED_POOL_POSITIONS = 64
ATTENTION_OPS = frozenset(
    {"SitWindowAttention", "SitWindowAttentionGrad", "SitClassTokenAttention", "SitClassTokenAttentionGrad",
     "SitClassTokenValues", "SitClassTokenValuesGrad", "SitStandardizedLanes", "SitStandardizedLanesGrad"}
)  # fmt: skip
XLA_OPS = POOL_OPS | STRIDED_POOL_OPS | PROJECTION_OPS | STEM_OPS | CONV_OPS | ATTENTION_OPS
_DTYPES = (tf.float32, tf.float64)
# bfloat16 tensors pass through the ops in float32 (their arithmetic is float32 or float64). Under
# mixed_bfloat16 the SiT step then took 1.0-1.1x its float32 step on an AMD host with AVX512_BF16, against
# 1.5-1.65x through the builtin ops (docs/speed.md); casts at the ops' edges were 19% of it on the AMX host,
# which the ops that read and write bfloat16 themselves (_storing_bfloat16) save.
_IN_FLOAT32 = (tf.bfloat16,)
_Function = TypeVar("_Function")
# A projection's gradients from its kernel, inputs and output gradient: (the kernel's, the inputs').
_Gradients = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]
# The ops keep a window's T x T scores, maps and softmaxes in each thread's cache: token sets up to
# this many pairs (a 4x4 window and its class token: 289; the Procgen SiT's 8x8 global grid and its
# class token: 4225). Larger grids (the MiniGrid SiT's 14x14) keep the builtin ops.
MAX_TOKEN_PAIRS = 65**2
# Windows per block of the ops' input layout: kLanes of kernels.h, 16 with AVX-512 and 8 with AVX2 (16 where
# nothing is built: the layout is then unused).
LANES = cpu.vector_lanes(cpu.cpu_flags()) or 16
_state = threading.local()
_loaded: dict[str, object] = {}


def library() -> ModuleType | None:
    """The loaded op library, or ``None`` where it is not usable here (``load_problem`` says why)."""
    if "ops" not in _loaded:
        _loaded["ops"], _loaded["problem"] = _load()
        # A library that should load and does not is worth a warning; a CPU without their registers is not.
        if _loaded["problem"] not in (None, cpu.NO_VECTOR_UNITS) and LIBRARY.exists():
            message = f"sit_keras.native: {_loaded['problem']}; the layers keep their builtin ops"
            warnings.warn(message, stacklevel=2)
        # At once: XLA takes the XLA kernels registered when it first looks, and never looks again.
        xla_load_problem()
    return _loaded["ops"]


def load_problem() -> str | None:
    """Why the native kernels are not used on this host, or ``None`` when they load."""
    library()
    return _loaded["problem"]


def _load() -> tuple[ModuleType | None, str | None]:
    from sit_keras.native.build import HOST_FILE, host

    rebuild = "run `python -m sit_keras.native.build`"
    this_host = host()
    if cpu.vector_lanes(this_host["cpu_flags"]) is None:
        return None, cpu.NO_VECTOR_UNITS
    if not LIBRARY.exists():
        return None, f"not built ({rebuild})"
    built_for = json.loads(HOST_FILE.read_text()) if HOST_FILE.exists() else None
    if built_for != this_host:
        return None, f"{LIBRARY} was built for another CPU or TensorFlow ({rebuild})"
    try:
        return tf.load_op_library(str(LIBRARY)), None
    except tf.errors.NotFoundError as error:
        return None, f"{LIBRARY} does not load ({error}; {rebuild})"


def xla_load_problem() -> str | None:
    """Why the ops' XLA kernels are not used on this host, or ``None`` when they load."""
    if "xla_problem" not in _loaded:
        _loaded["xla_problem"] = _load_xla()
        if _loaded["xla_problem"] is not None and XLA_LIBRARY.exists() and library() is not None:
            warnings.warn(
                f"sit_keras.native: {_loaded['xla_problem']}; XLA keeps the builtin ops", stacklevel=2
            )
    return _loaded["xla_problem"]


def _load_xla() -> str | None:
    if library() is None:
        return f"the native kernels are not usable: {load_problem()}"
    if not XLA_LIBRARY.exists():
        from sit_keras.native.build import NO_LLVM_HEADERS, llvm_headers

        if llvm_headers() is None:
            return f"not built: {NO_LLVM_HEADERS}"
        return "not built (run `python -m sit_keras.native.build`)"
    try:
        # Registers the XLA kernels, and defines SitXlaHostThreads (xla_host_threads).
        _loaded["xla_ops"] = tf.load_op_library(str(XLA_LIBRARY))
    except tf.errors.NotFoundError as error:
        return f"{XLA_LIBRARY} does not load ({error}; run `python -m sit_keras.native.build`)"
    # XLA lists the XLA kernels registered so far when a process runs its first op (MatMul's is listed
    # from then on) and never again: a library loaded later adds its kernels itself.
    if _has_xla_kernel("MatMul") and not all(_has_xla_kernel(op) for op in XLA_OPS):
        ctypes.CDLL(str(XLA_LIBRARY)).SitRegisterXlaKernelsLate()
    missing = sorted(op for op in XLA_OPS if _has_xla_kernel("MatMul") and not _has_xla_kernel(op))
    return f"{XLA_LIBRARY} registered no XLA kernel for {', '.join(missing)}" if missing else None


def _has_xla_kernel(op: str) -> bool:
    kernels = kernels_for_op(op).kernel
    return any(kernel.device_type == "XLA_CPU_JIT" for kernel in kernels)


def available() -> bool:
    """Whether the native kernels are built for this host and load."""
    return library() is not None


@contextlib.contextmanager
def _thread_flag(name: str) -> Iterator[None]:
    previous = getattr(_state, name, False)
    setattr(_state, name, True)
    try:
        yield
    finally:
        setattr(_state, name, previous)


def builtin_only() -> contextlib.AbstractContextManager[None]:
    """Functions traced inside use the builtin ops only (this thread)."""
    return _thread_flag("off")


def dense_mixing() -> contextlib.AbstractContextManager[None]:
    """Functions traced inside mix every graph densely, invariant under the quarter turn or not (this thread).

    The ops' results are the same up to the order of their sums; benchmarks
    compare the two forms of mixing in one run.
    """
    return _thread_flag("dense")


def without_xla_kernels() -> contextlib.AbstractContextManager[None]:
    """Functions XLA compiles that are traced inside keep TensorFlow's ops (this thread).

    As if ``XLA_LIBRARY`` did not load; functions not compiled by XLA are
    unchanged. Benchmarks compare both forms in one run.
    """
    return _thread_flag("no_xla_kernels")


def forward_passes() -> contextlib.AbstractContextManager[None]:
    """Functions traced inside may use the kernels without a gradient tape (this thread).

    For forward passes that run in this process only, such as a driver's
    policy; what is saved (a SavedModel's signatures) is traced outside it.
    """
    return _thread_flag("forward")


def projection_gradients_by_the_ops() -> contextlib.AbstractContextManager[None]:
    """Functions traced inside take the native projection's gradients from its ops, whatever the host
    (``projection_gradients_by_matmul``; this thread): benchmarks compare both in one run."""
    return _thread_flag("projection_gradients_by_ops")


def projection_gradients_by_matmuls() -> contextlib.AbstractContextManager[None]:
    """Functions traced inside take the native projection's gradients from TensorFlow's matmuls, whatever
    the host (``projection_gradients_by_matmul``; this thread)."""
    return _thread_flag("projection_gradients_by_matmuls")


def usable(dtype: tf.DType, ops: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether a layer traced now should use a native kernel on ``dtype`` tensors (module docstring).

    ``ops`` names the ops the layer would run: inside a function XLA compiles
    they are usable only where each has an XLA kernel (``XLA_OPS``) and it loads.
    """
    # Imported here: sit_keras.layers imports this module.
    from sit_keras.layers.xla_context import in_compiled_function

    return (
        not getattr(_state, "off", False)
        and tf.as_dtype(dtype) in _DTYPES + _IN_FLOAT32
        and (record.could_possibly_record() or getattr(_state, "forward", False))
        and available()
        and (not in_compiled_function() or _xla_kernels_for(ops))
    )


def _xla_kernels_for(ops: frozenset[str] | set[str]) -> bool:
    usable_here = not getattr(_state, "no_xla_kernels", False) and xla_load_problem() is None
    if usable_here and bool(ops) and ops <= XLA_OPS:
        _run_on_tensorflows_threads_once()
        return True
    return False


# Layers call it while AutoGraph converts them: `int` stays Python's.
@tf.autograph.experimental.do_not_convert
def xla_host_threads(device: bool = True) -> int | None:
    """Where the XLA kernels' custom calls run their work from now on; the number of threads there.

    ``device``: on TensorFlow's intra-op threads, which the XLA launch also gives
    a compiled program's own parallel loops and oneDNN calls; else on a pool of the
    library's own, as many threads as the process may use. Two pools on the same
    cores spin against each other between calls: at the MiniGrid size SiT-small's
    XLA step took 1.069x as long on a pool of its own (docs/speed.md, "The custom
    calls on TensorFlow's threads"). The first function XLA compiles with the
    kernels chooses TensorFlow's threads, unless ``TF_OVERRIDE_GLOBAL_THREADPOOL``
    gives each CPU device a pool of its own, which may end with its device.
    Benchmarks compare both in one run. Runs eagerly, also while a function is
    traced; ``None`` where the XLA kernels do not load or nothing runs eagerly.
    """
    if xla_load_problem() is not None:
        return None
    with tf.init_scope():
        if not tf.executing_eagerly():
            return None
        with tf.device("/CPU:0"):
            return int(_loaded["xla_ops"].sit_xla_host_threads(device=device))


def _run_on_tensorflows_threads_once() -> None:
    if "host_threads" not in _loaded:
        per_device_pools = os.environ.get("TF_OVERRIDE_GLOBAL_THREADPOOL", "").lower() in ("1", "true")
        _loaded["host_threads"] = None if per_device_pools else xla_host_threads(device=True)


def op_dtype(dtype: tf.DType) -> tf.DType:
    """The dtype the ops compute ``dtype`` tensors in: float32 for bfloat16, else ``dtype`` itself."""
    return tf.float32 if tf.as_dtype(dtype) in _IN_FLOAT32 else tf.as_dtype(dtype)


def _cast_to_op_dtype(function: _Function, stored: tuple[str, ...]) -> _Function:
    """``function`` applied to bfloat16 tensors in ``op_dtype``: its tensor arguments of the first one's
    dtype cast up (but for those named in ``stored`` where XLA does not compile the function), its
    results cast back (a no-op on the results the op wrote in bfloat16)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Imported here: sit_keras.layers imports this module.
        from sit_keras.layers.xla_context import in_compiled_function

        arguments = signature.bind(*args, **kwargs)
        dtype = next(iter(arguments.arguments.values())).dtype
        if op_dtype(dtype) == dtype:
            return function(*args, **kwargs)
        kept = () if in_compiled_function() else stored
        for name, value in arguments.arguments.items():
            if name not in kept and isinstance(value, tf.Tensor) and value.dtype == dtype:
                arguments.arguments[name] = tf.cast(value, op_dtype(dtype))
        result = function(*arguments.args, **arguments.kwargs)
        return tf.nest.map_structure(lambda output: tf.cast(output, dtype), result)

    return wrapper


def _in_op_dtype(function: _Function) -> _Function:
    """``function`` with bfloat16 tensors cast to ``op_dtype`` and its results cast back."""
    return _cast_to_op_dtype(function, stored=())


def _storing_bfloat16(*stored: str) -> Any:
    """``_in_op_dtype`` for a function whose op stores the arguments named ``stored`` and its large results
    in bfloat16 (attribute ``S``) while it computes in ``op_dtype``: those stay bfloat16. Under XLA, whose
    kernels take one dtype, every argument is cast."""
    return lambda function: _cast_to_op_dtype(function, stored)


class ScoreMapPattern:
    """Where a linear map of ``P`` scores reads: output ``p`` is ``sum_k w[p, k] x[indices[p, k]]``.

    ``indices (P, K)`` lists the inputs each output reads (a column may repeat
    in a row: its terms add up); ``mask (P, K)`` is 0 where a row is padded
    (by its own column, with weight 0). The transposed lists serve the map's
    input gradient: ``transposed_indices (P, K')`` the outputs reading each
    input, ``transposed_values (P, K')`` where their weights sit among the
    ``P * K`` values, ``P * K`` (a zero appended after them) for padding.
    """

    def __init__(self, indices: np.ndarray, mask: np.ndarray | None = None):
        self.indices = np.asarray(indices, np.int32)
        self.size, self.terms = self.indices.shape
        self.mask = np.ones(self.indices.shape, np.float32) if mask is None else np.asarray(mask, np.float32)
        rows, ks = np.nonzero(self.mask)
        columns = self.indices[rows, ks]
        order = np.lexsort((rows, columns))  # by input, then by output
        rows, ks, columns = rows[order], ks[order], columns[order]
        counts = np.bincount(columns, minlength=self.size)
        slots = np.arange(len(columns)) - (np.cumsum(counts) - counts)[columns]
        width = max(1, int(counts.max(initial=0)))
        self.transposed_indices = np.repeat(np.arange(self.size, dtype=np.int32)[:, None], width, axis=1)
        self.transposed_indices[columns, slots] = rows
        self.transposed_values = np.full((self.size, width), self.size * self.terms, np.int32)
        self.transposed_values[columns, slots] = rows * self.terms + ks

    @classmethod
    def of_nonzero(cls, nonzero: np.ndarray) -> ScoreMapPattern:
        """The pattern of a boolean ``(P, P)`` matrix, ``nonzero[p, c]``: output ``p`` reads input ``c``."""
        nonzero = np.asarray(nonzero, bool)
        terms = max(1, int(nonzero.sum(axis=1).max()))
        indices = np.repeat(np.arange(nonzero.shape[0], dtype=np.int32)[:, None], terms, axis=1)
        mask = np.zeros(indices.shape, np.float32)
        for p, row in enumerate(nonzero):
            columns = np.flatnonzero(row)
            indices[p, : len(columns)] = columns
            mask[p, : len(columns)] = 1.0
        return cls(indices, mask)

    def values_of(self, matrix: tf.Tensor) -> tf.Tensor:
        """``(..., P, P)`` matrices -> ``(..., P, K)``: each output's weights in ``indices`` order.

        For a pattern whose rows name each column once (``of_nonzero``).
        """
        flat = tf.reshape(matrix, [-1, self.size * self.size])
        rows = np.arange(self.size)[:, None] * self.size
        values = tf.gather(flat, (rows + self.indices).reshape(-1), axis=1)
        values = tf.reshape(values, [*matrix.shape[:-2], self.size, self.terms])
        return values * tf.constant(self.mask, values.dtype)


def lane_blocks(channels_first: tf.Tensor) -> tf.Tensor:
    """``(C, B, T)`` -> ``(C, ceil(B / LANES), T, LANES)``: the ops' layout, the last block zero-padded.

    Each block's ``T x LANES`` values of a channel are contiguous, so an op
    reads them as ``T`` vectors of one value per window.
    """
    channels, tokens = channels_first.shape[0], channels_first.shape[2]
    if channels_first.shape[1] is None or channels_first.shape[1] % LANES:
        windows = tf.shape(channels_first)[1]
        channels_first = tf.pad(channels_first, [[0, 0], [0, -windows % LANES], [0, 0]])
    blocks = tf.reshape(channels_first, [channels, -1, LANES, tokens])
    return tf.transpose(blocks, [0, 1, 3, 2])


def lane_blocks_of_tokens(tokens: tf.Tensor) -> tf.Tensor:
    """``(B, T, C)`` tokens -> ``lane_blocks`` of ``(C, B, T)``, in one transpose."""
    tokens_count, channels = tokens.shape[1], tokens.shape[2]
    if tokens.shape[0] is None or tokens.shape[0] % LANES:
        windows = tf.shape(tokens)[0]
        tokens = tf.pad(tokens, [[0, -windows % LANES], [0, 0], [0, 0]])
    blocks = tf.reshape(tokens, [-1, LANES, tokens_count, channels])
    return tf.transpose(blocks, [3, 0, 2, 1])


@_storing_bfloat16("tokens")
def standardized_lane_blocks(
    tokens: tf.Tensor, epsilon: float, skip_tokens: int = 0
) -> tuple[tf.Tensor, tf.Tensor]:
    """``lane_blocks_of_tokens(standardize(tokens, epsilon))`` in one op, and its gradient in one.

    ``tokens (B, T, D)`` -> ``(D, ceil(B / LANES), T, LANES)``: each token
    standardised over its ``D`` channels (the GSA blocks' LayerNorm without
    its ``gamma`` and ``beta``, ``sit_keras.layers.normalization``), the padded
    windows zero (``standardize.cc``). Returned with ``tokens[:, :skip_tokens]``
    for a block's skip connection: the gradient op adds that slice's gradient
    to its own, which saves two passes over a ``(B, T, D)`` gradient (the
    slice's, zero-filled, and their sum). Call only where ``usable(tokens.dtype)``.
    """
    ops = _library_or_raise()
    epsilon_t = tf.constant(epsilon, op_dtype(tokens.dtype))
    if not 0 <= skip_tokens <= tokens.shape[1]:
        raise ValueError(f"skip_tokens must lie in [0, {tokens.shape[1]}]. Received: {skip_tokens}")

    @tf.custom_gradient
    def standardized(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        def grad(dy: tf.Tensor, skip_dy: tf.Tensor) -> tf.Tensor:
            return ops.sit_standardized_lanes_grad(dy, x, epsilon_t, skip_dy)

        skip = tf.identity(x) if skip_tokens == x.shape[1] else x[:, :skip_tokens]
        return (ops.sit_standardized_lanes(x, epsilon_t), skip), grad

    return standardized(tokens)


# Where SitConv2D computes a convolution under XLA (docs/speed.md, "The CNNs' convolutions in a native
# op"): 4 channels or more in and out, and up to 256 input times output channels. Its loops run at the
# rate of the FMA units, as oneDNN's do; on the IMPALA-CNN's few channels it saves the primitive XLA's
# oneDNN call creates on every call: its XLA step went from 0.95-1.08x its graph step to 0.89-0.93x.
# Fewer output channels go one by one (4.5x TensorFlow's op for the IMPALA-CNN's 3-channel image
# gradient); the MiniGrid CNN's step was slower with it on 3 input channels and on 16 x 32.
MIN_CONV_CHANNELS = 4
MAX_CONV_CHANNEL_PRODUCT = 256


def native_convolution_applies(in_channels: int, out_channels: int) -> bool:
    """Whether ``conv2d`` computes a convolution of these channels with ``SitConv2D``: its forward pass,
    and its input's gradient (the same channels swapped)."""
    return (
        min(in_channels, out_channels) >= MIN_CONV_CHANNELS
        and in_channels * out_channels <= MAX_CONV_CHANNEL_PRODUCT
    )


def conv2d(
    inputs: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None = None, relu: bool = False
) -> tf.Tensor:
    """``tf.nn.conv2d(inputs, kernel, 1, "SAME")``, plus ``bias``, then ``relu``; and its gradients, in
    native ops.

    ``inputs (B, H, W, C_in)``, ``kernel (k, k, C_in, C_out)`` with ``k`` odd,
    ``bias (C_out,)`` or None (none), ``relu``: whether ``tf.nn.relu`` follows.
    The convolution is ``SitConv2D`` (``conv2d.cc``), with the bias and the
    relu as it stores its sums, and so is the input's gradient: the
    convolution of the upstream gradient with the kernel turned by 180
    degrees and its channel axes swapped (in a train step whose images need
    no gradient, nothing consumes it and it is pruned); both are
    TensorFlow's (``Conv2D``, ``Conv2DBackpropInput``) where
    ``native_convolution_applies`` does not hold for its channels. Under XLA
    TensorFlow's convolutions are oneDNN calls that create their primitive on
    every call.
    The kernel's gradient is ``SitConv2DKernelGrad`` (``conv_kernel_grad.cc``),
    where XLA's own took up to 9x TensorFlow's graph op on the CNNs' few
    channels (docs/speed.md, "Where XLA loses the IMPALA-CNN's step").
    The bias's gradient, the upstream gradient summed over its pixels, is a
    product with a vector of ones: XLA's own sum (a ``reduce-window``) took
    0.58 ms on the MiniGrid CNN's (96, 14, 14, 32), the product 0.11
    (docs/speed.md, "The MiniGrid CNN's step under XLA").
    float32 and float64 only: in bfloat16 the builtin convolutions are
    faster. Call only where ``usable(inputs.dtype, CONV_OPS)``.
    """
    ops = _library_or_raise()
    size, c_in, c_out = kernel.shape[0], kernel.shape[2], kernel.shape[3]
    native = native_convolution_applies(c_in, c_out)
    with_bias = bias is not None

    @tf.custom_gradient
    def convolve(x: tf.Tensor, w: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
        if native:
            y = ops.sit_conv2d(x, w, b, relu=relu)
        else:
            y = tf.nn.conv2d(x, w, 1, "SAME")
            y = tf.nn.bias_add(y, b) if with_bias else y
            y = tf.nn.relu(y) if relu else y

        def grad(dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            if relu:
                dy = tf.where(y > 0, dy, tf.zeros_like(dy))
            if native:
                turned = tf.transpose(tf.reverse(w, [0, 1]), [0, 1, 3, 2])
                dx = ops.sit_conv2d(dy, turned, tf.zeros([c_in], dy.dtype))
            else:  # TensorFlow's own form (as a forward convolution, XLA's step was slower)
                dx = tf.raw_ops.Conv2DBackpropInput(
                    input_sizes=tf.shape(x), filter=w, out_backprop=dy, strides=[1, 1, 1, 1], padding="SAME"
                )
            if with_bias:
                pixels = tf.reshape(dy, [-1, c_out])
                db = tf.linalg.matvec(pixels, tf.ones(tf.shape(pixels)[:1], dy.dtype), transpose_a=True)
            else:
                db = tf.zeros_like(b)
            return dx, ops.sit_conv2d_kernel_grad(dy, x, size=size), db

        return y, grad

    return convolve(inputs, kernel, bias if with_bias else tf.zeros([c_out], inputs.dtype))


@_storing_bfloat16("inputs")
def depthwise_conv(inputs: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None = None) -> tf.Tensor:
    """``tf.nn.depthwise_conv2d(inputs, kernel[..., None], [1, 1, 1, 1], "SAME") + bias`` in one op.

    ``inputs (B, H, W, C)``, ``kernel (k, k, C)`` with ``k`` odd, ``bias (C)``
    (zeros if ``None``): a depth-wise convolution of stride 1 with "same"
    padding and no depth multiplier (the SiT's stem, ``GraphConv2D``), as
    multiply-adds along whole image rows (``depthwise_stem.cc``). The gradient
    takes the kernel's and the bias's from ``SitDepthwiseConvKernelGrad`` and
    the input's from a separate op, the convolution of the upstream gradient
    with the kernel turned by 180 degrees: in a traced function whose result
    does not need the input's gradient (the image of a train step) nothing consumes that op and
    TensorFlow prunes it (one op computing both measured as long as the two
    apart). Deciding at the call
    instead (whether a tape watches ``inputs``) would drop the gradient of a
    tape outside a ``tf.function``. Call only where ``usable(inputs.dtype, STEM_OPS)``.
    """
    ops = _library_or_raise()

    if bias is None:
        bias = tf.zeros(kernel.shape[-1:], kernel.dtype)

    @tf.custom_gradient
    def convolve(x: tf.Tensor, w: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
        def grad(dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            dkernel, dbias = ops.sit_depthwise_conv_kernel_grad(dy, x, w)
            return ops.sit_depthwise_conv(dy, tf.reverse(w, [0, 1]), tf.zeros_like(b)), dkernel, dbias

        return ops.sit_depthwise_conv(x, w, b), grad

    return convolve(inputs, kernel, bias)


@_storing_bfloat16("inputs")
def max_pool(inputs: tf.Tensor, size: int) -> tf.Tensor:
    """``tf.nn.max_pool2d(inputs, size, size, "VALID")`` in one op, and its gradient in one.

    ``inputs (B, H, W, C)``: the maximum of each ``size x size`` window, the
    windows side by side (the SiT's pooling after its stem); the gradient goes
    to each window's first maximum in row-major order, where TensorFlow's CPU
    gradient puts it (``max_pool.cc``). Call only where ``usable(inputs.dtype, POOL_OPS)``.
    """
    ops = _library_or_raise()

    @tf.custom_gradient
    def pool(x: tf.Tensor) -> tf.Tensor:
        y = ops.sit_max_pool(x, size=size)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            return ops.sit_max_pool_grad(x, y, dy, size=size)

        return y, grad

    return pool(inputs)


def strided_max_pool(inputs: tf.Tensor, size: int, stride: int) -> tf.Tensor:
    """``tf.nn.max_pool2d(inputs, size, stride, "SAME")``, its gradient from ``SitStridedMaxPoolGrad``.

    ``inputs (B, H, W, C)``: the IMPALA-CNN's pooling, whose windows overlap
    (3x3, stride 2). The forward pass is TensorFlow's; the gradient puts each
    value at its window's first maximum in row-major order (``max_pool.cc``),
    where XLA's select-and-scatter took 2-4x TensorFlow's graph op. Call only
    where ``usable(inputs.dtype, STRIDED_POOL_OPS)``, on float32 or float64.
    """
    ops = _library_or_raise()

    @tf.custom_gradient
    def pool(x: tf.Tensor) -> tf.Tensor:
        y = tf.nn.max_pool2d(x, size, stride, "SAME")

        def grad(dy: tf.Tensor) -> tf.Tensor:
            return ops.sit_strided_max_pool_grad(x, y, dy, size=size, stride=stride)

        return y, grad

    return pool(inputs)


def project_channels_first(
    kernel: tf.Tensor, inputs: tf.Tensor, gradients: _Gradients | None = None
) -> tf.Tensor:
    """``tf.matmul(kernel, inputs, transpose_a=True)`` in one op: ``(R, N)``, ``(R, L)`` -> ``(N, L)``.

    The GSA layers' channels-first projection (``sit_keras.layers.channels_first``)
    with ``L`` about 10^5 columns, which TensorFlow's CPU matmuls run slowly in
    this layout (``channels_first.cc``). The kernel's gradient comes from
    ``SitChannelsFirstProjectionKernelGrad``, the same bits on every run; the
    input's, ``W dy``, is the projection by the transposed kernel: as fast as
    TensorFlow's matmul in a graph on the AVX2 host, faster than XLA's dot
    there (docs/speed.md, "The projection's input gradient under XLA"), and the
    same bits in both. ``gradients(kernel, inputs, dy)``, if given, returns the
    kernel's and the input's gradients instead (``projection_gradients_by_matmul``).
    float32 and float64 only: under ``mixed_bfloat16`` the builtin matmul
    computes in bfloat16. Call only where ``usable(inputs.dtype, PROJECTION_OPS)``.
    """
    ops = _library_or_raise()

    @tf.custom_gradient
    def projection(w: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        def grad(dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            if gradients is not None:
                return gradients(w, x, dy)
            dx = ops.sit_channels_first_projection(tf.transpose(w), dy)
            return ops.sit_channels_first_projection_kernel_grad(dy, x), dx

        return ops.sit_channels_first_projection(w, x), grad

    return projection(kernel, inputs)


def projection_gradients_by_matmul() -> bool:
    """Whether the native projection's gradients are TensorFlow's matmuls (XLA's dots under XLA), not its ops.

    Where TensorFlow runs oneDNN's kernels (``IsMklEnabled``: its x86 build turns
    them on for the CPUs it names, ``TF_ENABLE_ONEDNN_OPTS`` overrides), its
    matmuls formed the SiT's projection gradients faster than the native ops:
    the SiT's train step took 0.93-0.96x its time with them on an Intel host with
    AMX and 0.88-0.93x on an AMD host with AVX512_BF16, its XLA step there
    0.95-0.96x with XLA's dots (docs/speed.md, "The projection's gradients by
    oneDNN's matmuls"); without oneDNN (the AVX2 hosts) the native ops were
    faster. The forward projection stays native.
    ``projection_gradients_by_the_ops()`` and ``projection_gradients_by_matmuls()``
    decide it for what is traced inside them.
    """
    if getattr(_state, "projection_gradients_by_matmuls", False):
        return True
    if getattr(_state, "projection_gradients_by_ops", False):
        return False
    return tensorflow_runs_onednn()


def tensorflow_runs_onednn() -> bool:
    """Whether TensorFlow runs oneDNN's kernels in this process (``IsMklEnabled``; false if it cannot say)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # a TensorFlow without the module: no oneDNN to ask about
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


def projects_bfloat16_on_amx() -> bool:
    """Whether ``project_bfloat16`` runs on AMX tiles here: a CPU with AMX (the library is built for it)."""
    return cpu.has_amx(cpu.cpu_flags())


def project_bfloat16(kernel: tf.Tensor, inputs: tf.Tensor) -> tf.Tensor:
    """``tf.matmul(kernel, inputs, transpose_a=True)`` on bfloat16: ``(R, N)``, ``(R, L)`` -> ``(N, L)``.

    Products summed in float, as TensorFlow's bfloat16 matmul sums them; on a
    CPU with AMX as tile dot products whose outputs are streamed to memory
    (``channels_first_bfloat16.h``), elsewhere through floats. No gradient of
    its own: ``sit_keras.layers.channels_first`` runs it for the input's too.
    Call only where ``usable(tf.bfloat16, BFLOAT16_PROJECTION_OPS)``.
    """
    return _library_or_raise().sit_channels_first_projection_bfloat16(kernel, inputs)


def first_windows(output: tf.Tensor, inputs: tf.Tensor, axis: int) -> tf.Tensor:
    """An op's ``(B', ...)`` output without the windows ``lane_blocks`` padded: the ``B`` of ``inputs``."""
    windows = inputs.shape[axis]
    if windows is not None and output.shape[0] == windows:
        return output
    return output[: tf.shape(inputs)[axis]]


def _library_or_raise() -> ModuleType:
    ops = library()
    if ops is None:
        raise RuntimeError(f"The native kernels are not usable: {load_problem()}.")
    return ops


def _orbit_list(orbits: np.ndarray | None) -> list[int]:
    """The ops' ``orbits`` attribute: ``(O, 4)`` tokens, flattened; none inside ``dense_mixing()``."""
    if orbits is None or getattr(_state, "dense", False):
        return []
    flat = np.asarray(orbits, np.int64).reshape(-1).tolist()
    if len(flat) % 4:
        raise ValueError(f"orbits must be (O, 4) tokens. Received: shape {np.shape(orbits)}")
    return flat


@_storing_bfloat16("qkv", "skip")
def window_attention(
    qkv: tf.Tensor,
    bias: tf.Tensor,
    graphs: tf.Tensor,
    values: tf.Tensor,
    pattern: ScoreMapPattern,
    num_heads: int,
    kernel: tf.Tensor | None = None,
    orbits: np.ndarray | None = None,
    orbit_gradients: bool = False,
    skip: tf.Tensor | None = None,
) -> tf.Tensor:
    """Graph mixing, scores, score maps, softmaxes and values of every window in one op.

    ``qkv (3 D, B / LANES, T, LANES)``: the projections in ``lane_blocks``
    layout (``B`` a multiple of ``LANES``), without their ``bias (3 D,)``. ``graphs (3 D, T, T)``:
    ``G_q, G_k, G_v`` transposed, ``[f, t, j] = G_f[j, t]`` (eq. 11).
    ``values (M, H, T^2, K)``: the weights of ``M`` linear score maps in
    ``pattern``'s order (``ScoreMapPattern.values_of``); the attention weights
    are the sum of the maps' softmaxes (eq. 3, plus eq. 6 for ``M = 2``).
    ``kernel (R, 3 D)``: ``qkv`` holds instead the ``R`` channels whose
    projection ``kernel^T qkv`` (plus ``bias``) the op forms itself, a head
    at a time, so that for a small ``R`` the ``3 D`` projected channels
    never pass through memory (the first local block's per-pixel values).
    ``orbits (O, 4)``: the quarter turn's orbits of the tokens
    (``graphs.quarter_turn_orbits``); the op mixes each graph that is
    C4-invariant on them in their Fourier basis, the same sums in fewer
    multiply-adds (``rotation_spectra.h``), and any other graph densely.
    ``orbit_gradients``: the graphs are built from classes of token pairs
    that the quarter turn keeps (the classes ``orbits`` come from), so only
    the sums of their gradient over the turn's orbits of token pairs reach
    the weights. For windows of up to 1024 token pairs the graphs'
    gradient is then returned averaged over those orbits, formed in the
    turn's Fourier basis (105 instead of 289 multiply-adds a feature of a
    4 x 4 window and its class token): every class's gradient is the same,
    the graphs' own is not. Ignored without orbits. ``skip (W, T, D)``,
    ``W <= B``: a block's skip connection, added to the first ``W`` windows'
    outputs in the op (in bfloat16, rounded once). Returns ``(B, T, D)``.
    The gradient recomputes each window's scores (``window_attention.cc``).
    Call only where ``usable(qkv.dtype)``.
    """
    ops = _library_or_raise()
    attributes = {"num_heads": num_heads, "orbits": _orbit_list(orbits)}
    grad_attributes = {**attributes, "orbit_gradients": bool(orbit_gradients)}
    indices = tf.constant(pattern.indices)
    transposed = tf.constant(pattern.transposed_indices)
    if kernel is None:
        kernel = tf.zeros([0, qkv.shape[0]], op_dtype(qkv.dtype))
    inputs = [qkv, kernel, bias, graphs, values]
    if skip is None:  # none: no windows
        no_skip = tf.zeros([0, qkv.shape[2], kernel.shape[1] // 3], qkv.dtype)
    else:
        inputs.append(skip)

    @tf.custom_gradient
    def attend(*inputs: tf.Tensor) -> tf.Tensor:
        qkv, kernel, bias, graphs, values = inputs[:5]
        skip = inputs[5] if len(inputs) > 5 else no_skip

        def grad(dout: tf.Tensor) -> tuple[tf.Tensor, ...]:
            flat = tf.reshape(values, [values.shape[0], values.shape[1], -1])
            flat = tf.concat([flat, tf.zeros_like(flat[..., :1])], axis=-1)
            values_t = tf.gather(flat, pattern.transposed_values, axis=2)  # (M, H, T^2, K')
            dqkv, dkernel, dbias, dgraphs, dvalues = ops.sit_window_attention_grad(
                dout, qkv, kernel, bias, graphs, values, indices, values_t, transposed, **grad_attributes
            )
            dvalues = dvalues * tf.constant(pattern.mask, dvalues.dtype)
            dskip = [first_windows(dout, skip, axis=0)] if len(inputs) > 5 else []
            return dqkv, dkernel, dbias, dgraphs, dvalues, *dskip

        return ops.sit_window_attention(qkv, kernel, bias, graphs, values, indices, skip, **attributes), grad

    return attend(*inputs)


@_storing_bfloat16("qkv")
def class_token_attention(
    qkv: tf.Tensor,
    bias: tf.Tensor,
    graphs: tf.Tensor,
    coefficients: tf.Tensor,
    num_heads: int,
    orbits: np.ndarray | None = None,
    orbit_gradients: bool = False,
) -> tf.Tensor:
    """The class token's row of graph-mixed attention in one op: ``qkv`` -> ``(B, 1, D)``.

    ``qkv``, ``bias`` and ``graphs`` as in ``window_attention``. The logits of
    map ``m`` are ``coefficients[m, 0] q_0 . k_j + coefficients[m, 1] q_j . k_0``
    (the row of ``(S + sign S^T) / sqrt(d)``), the attention weights the sum of
    their softmaxes over ``j``. ``orbits`` and ``orbit_gradients`` as in
    ``window_attention``. Call only where ``usable(qkv.dtype)``.
    """
    ops = _library_or_raise()
    attributes = {"num_heads": num_heads, "orbits": _orbit_list(orbits)}
    grad_attributes = {**attributes, "orbit_gradients": bool(orbit_gradients)}

    @tf.custom_gradient
    def attend(qkv: tf.Tensor, bias: tf.Tensor, graphs: tf.Tensor) -> tf.Tensor:
        def grad(dout: tf.Tensor) -> tuple[tf.Tensor, ...]:
            return tuple(
                ops.sit_class_token_attention_grad(dout, qkv, bias, graphs, coefficients, **grad_attributes)
            )

        return ops.sit_class_token_attention(qkv, bias, graphs, coefficients, **attributes), grad

    return attend(qkv, bias, graphs)


@_storing_bfloat16("x")
def class_token_values(
    x: tf.Tensor,
    scores: tf.Tensor,
    kernel: tf.Tensor,
    graphs: tf.Tensor,
    coefficients: tf.Tensor,
    num_heads: int,
) -> tf.Tensor:
    """The class token's row of a block whose scores are given, in one op: ``x`` -> ``(B, 1, D)``.

    ``x (R, B / LANES, T, LANES)``: each window token's ``R`` inputs in
    ``lane_blocks`` layout; ``scores (B, 2, H, T)``: per head the class
    token's row ``q_0 . k_j`` and column ``q_j . k_0``, whose map ``m`` gives
    the logits ``coefficients[m, 0] row + coefficients[m, 1] column`` as in
    ``class_token_attention``. The values are ``kernel (R, D)``'s projection of
    ``x``, mixed by ``graphs (D, T, T)`` (``G_v`` transposed, eq. 11), weighted
    by the sum of the maps' softmaxes: the values half of
    ``GraphSymmetricAttention.attend_constant_class_token``, whose scores are a
    matmul of the inputs (``class_token_values.cc``). Call only where
    ``usable(x.dtype)``.
    """
    ops = _library_or_raise()

    @tf.custom_gradient
    def attend(x: tf.Tensor, scores: tf.Tensor, kernel: tf.Tensor, graphs: tf.Tensor) -> tf.Tensor:
        def grad(dout: tf.Tensor) -> tuple[tf.Tensor, ...]:
            return tuple(
                ops.sit_class_token_values_grad(
                    dout, x, scores, kernel, graphs, coefficients, num_heads=num_heads
                )
            )

        return ops.sit_class_token_values(x, scores, kernel, graphs, coefficients, num_heads=num_heads), grad

    return attend(x, scores, kernel, graphs)
