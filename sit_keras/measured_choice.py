"""Settings chosen by measurement on this host, once, then cached: the trainers' "auto" settings.

Whether bfloat16 is faster than float32 depends on the host (AMX, AVX512_BF16
or neither; docs/speed.md) and on the model, so ``"auto"`` times the
candidates' train steps where the run starts and keeps the faster. The
answer is cached per host and model in ``measured_choices.json`` under
``$SIT_KERAS_CACHE_DIR`` (default ``~/.cache/sit_keras``): the next run of
the same model on the same host reads it instead of measuring, as long as
the code is the same: the key holds a digest of the package's Python sources
(``code_version``), so a change that makes a path faster or slower is
measured again, not read from an older code's timings.

A host is its processor (model name and the instruction sets that decide the
kernels: AVX2, AVX512F, AVX512_BF16, AMX), its number of CPUs and GPUs, the
TensorFlow version and whether it runs oneDNN, TensorFlow's CPU allocator
(``TF_CPU_ALLOCATOR_USE_BFC``) and XLA's flags (``XLA_FLAGS``: they choose
XLA's CPU runtime, which changes the XLA steps' times by model). Each
candidate is timed ``ROUNDS`` times, in a new order each round after a
warm-up; a candidate other than the default is chosen only if the median of
its per-round time ratios to the default is below ``MARGIN`` (these machines
are noisy: a tie keeps the default). A candidate that takes more than
``CLEARLY_SLOWER`` times the default's time after the warm-up is not timed
in the rounds: it cannot win; and steps longer than ``LONG_CALL_S`` are
called once per round.

With ``$SIT_KERAS_NO_MEASURE`` set, ``"auto"`` keeps the default (float32,
no XLA) and nothing is timed, read or cached: runs that must not depend on
this host's timings (the test suite) set it.

>>> choice = fastest("demo", {"model": "x"}, {"a": lambda: lambda: None}, default="a", cache=False)
>>> choice.value
'a'
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf

from sit_keras import _cpu_allocator, native

CACHE_DIR_VARIABLE = "SIT_KERAS_CACHE_DIR"
NO_MEASURE_VARIABLE = "SIT_KERAS_NO_MEASURE"
"""Set (to anything but ``""`` or ``"0"``): every ``"auto"`` keeps its default without timing anything, so
that a run does not depend on this host's timings (the test suite sets it)."""
CACHE_FILE = "measured_choices.json"
ROUNDS = 5
CALLS_PER_ROUND = 3
WARM_UP_CALLS = 2
MARGIN = 0.9
CLEARLY_SLOWER = 2.0
LONG_CALL_S = 0.25
# The processor's instruction sets that decide which kernels TensorFlow runs.
_KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")

Step = Callable[[], Any]


@dataclasses.dataclass(frozen=True)
class Choice:
    """What ``fastest`` chose, and why: the median seconds per call and ratio to the default of each."""

    value: str
    seconds: dict[str, float]
    ratio_to_default: dict[str, float]
    measured_now: bool
    cache_file: str | None

    def announce(self, program: str, question: str) -> None:
        """Prints the sentence as ``program``'s on stdout if anything was measured (or read from a cache)."""
        if self.seconds:
            print(f"{program}: {self.sentence(question)}")

    def sentence(self, question: str) -> str:
        """One line for the run's console: the choice, its measured ratio, and where it came from."""
        ratios = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in self.ratio_to_default.items())
        if not self.seconds:
            return f"{question} auto: {self.value} (not measured: {NO_MEASURE_VARIABLE} is set)."
        where = "measured now" if self.measured_now else "measured before"
        cached = f"; cached in {self.cache_file}" if self.cache_file else ""
        return f"{question} auto: {self.value} (train step time: {ratios}; {where} on this host{cached})."


def _cpuinfo() -> str:
    """``/proc/cpuinfo``; empty where there is none (not Linux: the processor is known by its count only)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def host() -> dict[str, Any]:
    """What makes two hosts' kernels differ (see the module docstring)."""
    model, flags = "", set()
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return {
        "processor": model,
        "instruction_sets": [name for name in _KERNEL_FLAGS if name in flags],
        "cpus": os.cpu_count(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
        "tensorflow": tf.__version__,
        # The allocator this process started with (sit_keras._cpu_allocator): it changes the models'
        # step times by different amounts (docs/speed.md, "The CPU allocator").
        "cpu_allocator_use_bfc": os.environ.get(_cpu_allocator.VARIABLE, ""),
        # XLA's flags, read at its first compilation: --xla_cpu_use_thunk_runtime makes a model's XLA
        # step faster or slower than its graph step (docs/speed.md, "XLA's two CPU runtimes").
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        # Whether the native kernels (sit_keras.native) load: they change the SiT family's float32 step.
        "native_kernels": native.available(),
        # And their XLA kernels: with them an XLA step runs the same ops.
        "native_xla_kernels": native.xla_load_problem() is None,
        # Whether TensorFlow runs oneDNN (TF_ENABLE_ONEDNN_OPTS): its kernels, and whether the native
        # projection's gradients are its matmuls (native.projection_gradients_by_matmul).
        "tensorflow_onednn": native.tensorflow_runs_onednn(),
    }


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the sources of ``sit_keras`` and ``sit_keras.agents`` (the layers, kernels and trainers).

    ``sit_keras.agents`` lives in its own folder in a source checkout, so it is
    found by its spec, without importing it.
    """
    digest = hashlib.sha256()
    for name in ("sit_keras", "sit_keras.agents"):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            sources = [path for suffix in ("py", "cc", "h") for path in Path(folder).rglob(f"*.{suffix}")]
            for source in sorted(sources):
                digest.update(str(source.relative_to(folder)).encode())
                digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def cache_file() -> Path:
    """``$SIT_KERAS_CACHE_DIR/measured_choices.json`` (default folder ``~/.cache/sit_keras``)."""
    folder = os.environ.get(CACHE_DIR_VARIABLE) or os.path.join(
        os.path.expanduser("~"), ".cache", "sit_keras"
    )
    return Path(folder) / CACHE_FILE


def _entry_key(question: str, model: Mapping[str, Any]) -> str:
    described = json.dumps(
        {"question": question, "host": host(), "model": model, "code": code_version()},
        sort_keys=True,
        default=repr,
    )
    return hashlib.sha256(described.encode()).hexdigest()


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ValueError(
            f"{path} cannot be read ({error.strerror}); set {CACHE_DIR_VARIABLE} to another folder."
        ) from None
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is damaged ({error}); delete it to measure again.") from None
    if not isinstance(entries, dict):
        raise ValueError(f"{path} is damaged (not a JSON object); delete it to measure again.")
    return entries


def _write_cache(path: Path, entries: Mapping[str, Any]) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)


def time_candidates(
    candidates: Mapping[str, Callable[[], Step]],
    rounds: int = ROUNDS,
    calls: int = CALLS_PER_ROUND,
    default: str | None = None,
) -> dict[str, list[float]]:
    """Per candidate, seconds per call in each round: every step is built and warmed up first, then
    each round calls every step ``calls`` times, the steps in a new order each round (so that a slow
    spell of a noisy host hits them all).

    With a ``default``, a candidate whose last warm-up call took more than ``CLEARLY_SLOWER`` times
    the default's cannot win: it is not called again, and its warm-up time stands for every round
    (XLA's CPU step of a large CNN takes 6x the graph's; timing it 15 more times would cost minutes).
    When the default's call takes more than ``LONG_CALL_S``, each round calls each step once.
    """
    steps, warm = {}, {}
    for name, build in candidates.items():
        steps[name] = build()
        for _ in range(WARM_UP_CALLS):
            start = time.perf_counter()
            steps[name]()
            warm[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps)
    if default is not None:
        for name in [n for n in order if warm[n] > CLEARLY_SLOWER * warm[default]]:
            order.remove(name)
            times[name] = [warm[name]] * rounds
        if warm[default] > LONG_CALL_S:
            calls = 1  # a call this long is timed well on its own
    shuffle = random.Random(0)
    for _ in range(rounds):
        shuffle.shuffle(order)
        for name in order:
            step = steps[name]
            start = time.perf_counter()
            for _ in range(calls):
                step()
            times[name].append((time.perf_counter() - start) / calls)
    return times


def fastest(
    question: str,
    model: Mapping[str, Any],
    candidates: Mapping[str, Callable[[], Step]],
    default: str,
    cache: bool = True,
) -> Choice:
    """The candidate to use for ``question`` on this host and ``model``: cached, or measured now.

    Args:
      question: what is chosen (``"precision"``): part of the cache key.
      model: what describes the model and its batch (JSON-able): part of the cache key.
      candidates: name -> a function that builds one train step (a callable
        without arguments); built only when measuring.
      default: the candidate kept unless another is faster by ``MARGIN``.
      cache: read and write the cache file (``False``: always measure).

    Raises:
      ValueError: a damaged cache file, named with its path.
    """
    if default not in candidates:
        raise ValueError(f"The default {default!r} is not a candidate ({', '.join(candidates)}).")
    if os.environ.get(NO_MEASURE_VARIABLE, "") not in ("", "0"):
        return Choice(default, {}, {}, False, None)
    path = cache_file() if cache else None
    key = _entry_key(question, model)
    entries = _read_cache(path) if path is not None else {}
    if key in entries:
        entry = entries[key]
        return Choice(entry["value"], entry["seconds"], entry["ratio_to_default"], False, str(path))
    times = time_candidates(candidates, default=default)
    ratios = {
        name: statistics.median(t / d for t, d in zip(times[name], times[default], strict=True))
        for name in times
    }
    others = [name for name in ratios if name != default and ratios[name] < MARGIN]
    value = min(others, key=ratios.get) if others else default
    seconds = {name: statistics.median(t) for name, t in times.items()}
    if path is not None:
        entries = _read_cache(path)  # another run may have added its own meanwhile
        entries[key] = {
            "question": question,
            "model": json.loads(json.dumps(dict(model), sort_keys=True, default=repr)),
            "host": host(),
            "code": code_version(),
            "value": value,
            "seconds": seconds,
            "ratio_to_default": ratios,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        try:
            _write_cache(path, entries)
        except OSError:  # a read-only home: the run goes on, measured, with nothing cached
            path = None
    return Choice(value, seconds, ratios, True, str(path) if path is not None else None)
