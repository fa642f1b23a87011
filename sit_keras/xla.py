"""XLA on request: the trainers' ``jit_compile`` setting, and train steps compiled with summaries outside.

Every trainer (``sit-train``'s PPO, SAC and DQN / C51, ``sit-distill``,
``sit-train-supervised``) takes ``jit_compile`` as a gin parameter and a
``--jit_compile`` flag:

- ``"auto"`` (the default): whichever of the two is measured faster for the
  run's model on this host (``sit_keras.measured_choice``: timed once, then
  cached). On a CPU XLA makes most of these models' train steps slower
  (docs/speed.md, "XLA");
- ``"true"`` / ``"on"`` (or ``True``): compile the train step with XLA;
- ``"false"`` / ``"off"`` (or ``False``): TensorFlow's graph executor.

XLA needs the default (no) ``tf.distribute`` strategy: under a strategy
(``sit-train --strategy mirrored``, ``multi_worker``) the optimizer
aggregates the replicas' gradients with ``merge_call``, which cannot run
inside a compiled function. ``"auto"`` is then off (nothing is measured), and
``"on"`` an error.

XLA cannot compile summary ops on a CPU or a GPU (``WriteSummary`` has no
XLA kernel), and TF-Agents' agents write their losses from inside their
train function. ``compile_with_xla`` therefore compiles the function with
its ``tf.summary`` writes taken out: the values, steps and recording
conditions are computed inside the compiled code, at the point where the
function writes them, and written after it, by the calling graph.

>>> resolve_jit_compile("off"), resolve_jit_compile(True), resolve_jit_compile("Auto")
(False, True, 'auto')
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import tensorflow as tf
from absl import flags

from sit_keras import measured_choice, quiet

AUTO = "auto"
"""``jit_compile="auto"``: XLA or not, whichever trains the run's model faster on this host (measured)."""
JIT_COMPILE_SETTINGS = (AUTO, "true", "on", "false", "off")
"""The string values of ``jit_compile`` (any case); ``True`` and ``False`` are accepted too."""

JIT_COMPILE_HELP = (
    "XLA compilation of the train step: auto (whichever is measured faster for this model on this host, "
    "once, then cached), true/on or false/off."
)


def _is_default_strategy(strategy: tf.distribute.Strategy | None) -> bool:
    if strategy is None:
        return True
    with strategy.scope():
        return not tf.distribute.has_strategy()


def resolve_jit_compile(setting: bool | str, strategy: tf.distribute.Strategy | None = None) -> bool | str:
    """Whether to compile the train step with XLA, for a ``jit_compile`` setting.

    Args:
      setting: ``"auto"``, ``"true"`` / ``"on"``, ``"false"`` / ``"off"``
        (any case), or a bool.
      strategy: the learner's ``tf.distribute`` strategy; ``None`` or the
        default strategy for none.

    Returns:
      ``True`` to compile with XLA, ``False`` not to; ``AUTO`` for ``"auto"``
      under the default strategy, which the trainer decides by timing its
      model both ways (``measured_choice``); under another strategy ``"auto"``
      is ``False``.

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
    if value == AUTO:
        return AUTO if _is_default_strategy(strategy) else False
    if value in ("true", "on") and not _is_default_strategy(strategy):
        raise ValueError(
            f"jit_compile={setting!r} needs the default tf.distribute strategy; the learner runs under "
            f"{type(strategy).__name__}, whose gradient aggregation XLA cannot compile. "
            "Use jit_compile='off' (or 'auto')."
        )
    return value in ("true", "on")


def start_quietly() -> None:
    """Starts XLA's CPU service with its start-up lines kept off the console (``quiet.NOISE``).

    The first XLA compilation of a process logs three INFO lines through absl,
    which ``TF_CPP_MIN_LOG_LEVEL`` does not silence; a trivial compiled function
    run here, with file descriptor 2 filtered, prints them where they are dropped.
    """
    with quiet.filtered_stderr():
        tf.function(lambda: tf.constant(1.0) + 1.0, jit_compile=True)()


def choose_jit_compile(
    model: Mapping[str, Any], build_step: Callable[[bool], measured_choice.Step]
) -> measured_choice.Choice:
    """``"auto"`` decided: ``"on"`` or ``"off"``, whichever train step of ``model`` runs faster here.

    Args:
      model: what describes the model, its precision and its batch (JSON-able):
        the cache key, with the host (``measured_choice.fastest``).
      build_step: ``build_step(jit_compile)`` returns one train step of the
        model (a callable without arguments), compiled with XLA or not.

    Returns:
      The choice, measured now or read from the cache; XLA is chosen only when
      it is faster by ``measured_choice.MARGIN`` (a tie stays off).
    """
    candidates = {"off": functools.partial(build_step, False), "on": functools.partial(build_step, True)}
    start_quietly()
    return measured_choice.fastest("jit_compile", model, candidates, default="off")


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
