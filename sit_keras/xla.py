"""XLA on request: the trainers' ``jit_compile`` setting, and train steps compiled with summaries outside.

Every trainer (``sit-train``'s PPO, SAC and DQN / C51, ``sit-distill``,
``sit-train-supervised``) takes ``jit_compile`` as a gin parameter and a
``--jit_compile`` flag:

- ``"auto"`` (the default): XLA when a GPU is visible, none on a CPU, where
  XLA made the train steps of these models slower (docs/speed.md, "XLA");
- ``"true"`` / ``"on"`` (or ``True``): compile the train step with XLA;
- ``"false"`` / ``"off"`` (or ``False``): TensorFlow's graph executor.

XLA needs the default (no) ``tf.distribute`` strategy: under a strategy
(``sit-train --strategy mirrored``, ``multi_worker``) the optimizer
aggregates the replicas' gradients with ``merge_call``, which cannot run
inside a compiled function. ``"auto"`` is then off, and ``"on"`` an error.

XLA cannot compile summary ops on a CPU or a GPU (``WriteSummary`` has no
XLA kernel), and TF-Agents' agents write their losses from inside their
train function. ``compile_with_xla`` therefore compiles the function with
its ``tf.summary`` writes taken out: the values, steps and recording
conditions are computed inside the compiled code, at the point where the
function writes them, and written after it, by the calling graph.

>>> resolve_jit_compile("off"), resolve_jit_compile(True)
(False, True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf
from absl import flags

JIT_COMPILE_SETTINGS = ("auto", "true", "on", "false", "off")
"""The string values of ``jit_compile`` (any case); ``True`` and ``False`` are accepted too."""

JIT_COMPILE_HELP = (
    "XLA compilation of the train step: auto (on when a GPU is visible, off on a CPU), true/on or false/off."
)


def gpu_visible() -> bool:
    """Whether TensorFlow sees a GPU (``tf.config.list_physical_devices("GPU")``)."""
    return bool(tf.config.list_physical_devices("GPU"))


def _is_default_strategy(strategy: tf.distribute.Strategy | None) -> bool:
    if strategy is None:
        return True
    with strategy.scope():
        return not tf.distribute.has_strategy()


def resolve_jit_compile(setting: bool | str, strategy: tf.distribute.Strategy | None = None) -> bool:
    """Whether to compile the train step with XLA, for a ``jit_compile`` setting.

    Args:
      setting: ``"auto"``, ``"true"`` / ``"on"``, ``"false"`` / ``"off"``
        (any case), or a bool. ``"auto"`` is ``gpu_visible()``, and off
        under a ``strategy``.
      strategy: the learner's ``tf.distribute`` strategy; ``None`` or the
        default strategy for none.

    Returns:
      ``True`` to compile with XLA.

    Raises:
      ValueError: any other value, named in the message; XLA asked for under
        a (non-default) strategy.
    """
    if isinstance(setting, bool):
        value = "true" if setting else "false"
    elif isinstance(setting, str):
        value = setting.strip().lower()
    else:
        value = None
    if value not in JIT_COMPILE_SETTINGS:
        raise ValueError(
            f"Unknown jit_compile setting {setting!r}. Expected one of: {', '.join(JIT_COMPILE_SETTINGS)} "
            "(or a bool)."
        )
    if value == "auto":
        return gpu_visible() and _is_default_strategy(strategy)
    if value in ("true", "on") and not _is_default_strategy(strategy):
        raise ValueError(
            f"jit_compile={setting!r} needs the default tf.distribute strategy; the learner runs under "
            f"{type(strategy).__name__}, whose gradient aggregation XLA cannot compile. "
            "Use jit_compile='off' (or 'auto')."
        )
    return value in ("true", "on")


def define_jit_compile_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines ``--jit_compile`` (default ``auto``), checked by ``resolve_jit_compile`` when flags are parsed.

    A bad value is then a flags error, reported before anything else runs:
    ``flag --jit_compile=maybe: Unknown jit_compile setting 'maybe'. ...``.
    """
    flags.DEFINE_string("jit_compile", "auto", JIT_COMPILE_HELP, flag_values=flag_values)

    def check(value: str) -> bool:
        try:
            resolve_jit_compile(value)
        except ValueError as error:
            raise flags.ValidationError(str(error)) from None
        return True

    flags.register_validator("jit_compile", check, flag_values=flag_values)


@dataclasses.dataclass(frozen=True)
class _Summary:
    """A summary write taken out of compiled code: what stays Python (tag, metadata)."""

    tag: str
    metadata: Any


@contextlib.contextmanager
def _summaries_taken_out(summaries: list[_Summary], tensors: list[tuple[tf.Tensor, ...]]) -> Iterator[None]:
    """Replaces ``tf.summary.write`` while a function is traced: each write that would record
    appends its tag and metadata to ``summaries`` and ``(value, step, record)`` to ``tensors``.

    Every ``tf.summary`` op of TensorFlow and TensorBoard (scalar, histogram,
    image, text, ...) writes through ``tf.summary.write``; TensorBoard calls it
    as ``tf.compat.v2.summary.write``.
    """
    modules = (tf.summary, tf.compat.v2.summary)
    original = tf.summary.write

    def take_out(tag, tensor, step=None, metadata=None, name=None):
        del name  # the op is made outside
        record = tf.summary.should_record_summaries()
        if tf.get_static_value(record) is False:  # no default writer, or recording off
            return record
        if step is None:
            step = tf.summary.experimental.get_step()
            if step is None:
                raise ValueError(
                    f"No step for summary {tag!r}: pass step= or call tf.summary.experimental.set_step()."
                )
        value = tensor() if callable(tensor) else tensor
        summaries.append(_Summary(tag, metadata))
        # Read here, in program order: a variable returned as such would be read after the function.
        step = tf.cast(tf.convert_to_tensor(step), tf.int64)
        tensors.append((tf.identity(value), step, record))
        return record

    for module in modules:
        module.write = take_out
    try:
        yield
    finally:
        for module in modules:
            module.write = original


def compile_with_xla(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as an XLA-compiled ``tf.function`` (``jit_compile=True``), its summaries written outside XLA.

    Meant to be called inside a ``tf.function`` (as TF-Agents' ``Learner``
    calls ``agent.train``): each call traces a new compiled function, in the
    summary context of the call (default writer, ``record_if``), so that the
    summaries are the ones ``fn`` writes there. ``fn``'s ``tf.summary`` writes
    become outputs of the compiled code (value, step and recording condition,
    computed where ``fn`` writes them) that the calling graph writes after the
    call; the other ops that XLA cannot compile (strings, ``tf.data``) must
    not be in ``fn``. A summary written inside a ``tf.cond`` or loop body of
    ``fn`` cannot be taken out (an error, not a silent loss).

    Use::

        agent.train = compile_with_xla(agent.train)  # before the Learner is made

    Args:
      fn: a function of tensors (nests of them) that returns tensors.

    Returns:
      A function with ``fn``'s arguments and outputs.
    """

    @functools.wraps(fn)
    def call(*args, **kwargs):
        summaries: list[_Summary] = []
        # The caller's name scope (e.g. "while" in a loop body) prefixes fn's relative summary
        # tags, as when fn runs uncompiled; a trailing "/" re-enters it as an absolute scope.
        scope = tf.get_current_name_scope()

        def compiled_body(*args, **kwargs):
            # tf.function may trace more than once (variables are created on the first trace):
            # the summaries are those of the last trace, the one that runs.
            summaries.clear()
            tensors: list[tuple[tf.Tensor, ...]] = []
            with _summaries_taken_out(summaries, tensors), tf.name_scope(f"{scope}/" if scope else ""):
                outputs = fn(*args, **kwargs)
            return outputs, tensors

        compiled = tf.function(compiled_body, jit_compile=True, autograph=False)
        outputs, tensors = compiled(*args, **kwargs)
        for summary, (value, step, record) in zip(summaries, tensors, strict=True):
            with tf.summary.record_if(record):
                tf.summary.write(summary.tag, value, step=step, metadata=summary.metadata)
        return outputs

    return call
