"""TensorFlow without its chatter on a CPU-only machine: start-up (``import_tensorflow``) and converter.

A plain ``import tensorflow`` (with TF-Agents, which imports gym) prints about
sixteen lines that say nothing to a user of this package: CUDA drivers not
found, cuFFT / cuDNN / cuBLAS factories registered twice, the computation placer
registered four times, the oneDNN and CPU-feature banners, gym's "unmaintained"
banner, and, at the first device use, ``failed call to cuInit``. Some are
written by C++ code before TensorFlow's own log level applies, so they can only
be caught at the file descriptor.

So ``import_tensorflow()``, once per process,

1. defaults ``TF_CPP_MIN_LOG_LEVEL`` to 3 unless the environment sets it:
   TensorFlow's C++ log then shows only fatal errors. Its INFO lines are
   progress chatter ("Filling up shuffle buffer"), and even its ERROR lines
   include harmless notices ("oneDNN supports DT_INT64 only on platforms with
   AVX-512. Falling back to ... Eigen"); a failure that matters reaches the
   user as a Python exception;
2. points file descriptor 2 at a temporary file while it imports TensorFlow
   and gym and initialises the devices;
3. writes back to stderr every captured line that is not in ``NOISE``, so a
   message nobody has listed still reaches the user.

Every console script (``sit_keras.commands.entry_points``) and benchmark calls it
first, by importing ``sit_keras.quiet_start``. The TFLite converter and
interpreter print through C++ too: ``captured_stderr`` and ``filtered_stderr``
keep that off the console. ``SIT_KERAS_VERBOSE=1`` (a command's
``--verbose``) skips all of it. Nothing here imports TensorFlow at import time.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator

VERBOSE_VARIABLE = "SIT_KERAS_VERBOSE"

# Each pattern matches one known line of start-up noise (searched, so a log line's prefix of
# time and source file may precede it). Exact texts: an unlisted line is never dropped.
NOISE: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern)
    for pattern in (
        r"Could not find cuda drivers on your machine, GPU will not be used\.$",
        r"Unable to register cu(FFT|DNN|BLAS) factory: Attempting to register factory for plugin "
        r"cu(FFT|DNN|BLAS) when one has already been registered$",
        r"computation placer already registered\. Please check linkage and avoid linking the same "
        r"target more than once\.$",
        r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
        r"oneDNN custom operations are on\. You may see slightly different numerical results",
        r"This TensorFlow binary is optimized to use available CPU instructions in "
        r"performance-critical operations\.$",
        r"^To enable the following instructions: [A-Z0-9_ ]+, in other operations, rebuild TensorFlow "
        r"with the appropriate compiler flags\.$",
        r"failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR \(303\)$",
        r"^Gym has been unmaintained since 2022 and does not support NumPy 2\.0 amongst other critical "
        r"functionality\.$",
        r"^Please upgrade to Gymnasium, the maintained drop-in replacement of Gym, or contact the "
        r"authors of your software and request that they upgrade\.$",
        r"^See the migration guide at https://gymnasium\.farama\.org/introduction/migration_guide/ "
        r"for additional information\.$",
        r"^INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$",
        r"^A\.L\.E: Arcade Learning Environment \(version [\w.+]+\)$",
        r"^\[Powered by Stella\]$",
        # XLA's service, the first time a process compiles with it (sit_keras.xla.start_quietly).
        r"\] XLA service 0x[0-9a-f]+ initialized for platform Host \(this does not guarantee that XLA "
        r"will be used\)\. Devices:$",
        r"\] +StreamExecutor device \(\d+\): Host, Default Version$",
        r"\] Compiled cluster using XLA!  This line is logged at most once for the lifetime of the "
        r"process\.$",
        # A worker of a cluster (MultiWorkerMirroredStrategy) starting its server and joining the others.
        r"\] Started server with target: grpc://[\w.:\[\]-]+$",
        r"\] Coordination agent has successfully connected\.$",
    )
)


def verbose() -> bool:
    """True when the user asked for every library message (``SIT_KERAS_VERBOSE=1``)."""
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


def is_noise(line: str) -> bool:
    """True if ``line`` (without its newline) is one of the known start-up lines (``NOISE``)."""
    return any(pattern.search(line) for pattern in NOISE)


@contextlib.contextmanager
def _file_descriptor_2(keep: Callable[[str, bool], str]) -> Iterator[None]:
    """Points file descriptor 2 at a file; on exit writes ``keep(text, failed)`` to the real stderr."""
    if verbose():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    failed = True
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            sys.stderr.write(keep(captured.read().decode("utf-8", errors="replace"), failed))
            sys.stderr.flush()


def filtered_stderr() -> contextlib.AbstractContextManager[None]:
    """Captures file descriptor 2 (C++ and Python alike); on exit writes back every line but ``NOISE``."""

    def keep(text: str, failed: bool) -> str:
        return "".join(line for line in text.splitlines(keepends=True) if not is_noise(line.rstrip("\n")))

    return _file_descriptor_2(keep)


def captured_stderr() -> contextlib.AbstractContextManager[None]:
    """Captures file descriptor 2; shows what was written only if the block raises (the TFLite converter)."""
    return _file_descriptor_2(lambda text, failed: text if failed else "")


def import_tensorflow(threads: int | None = None, inter_op_threads: int | None = None) -> None:
    """Imports TensorFlow, Keras 2 and gym and initialises the devices, with ``NOISE`` filtered out.

    ``threads``: TensorFlow's intra- and inter-op thread pools (default: its
    own); they can only be set before the devices are initialised, so a
    benchmark that times one thread calls this before ``quiet_start``.
    ``inter_op_threads``: the inter-op pool alone (``threads`` takes precedence).
    """
    if "tensorflow" in sys.modules:
        return  # too late: the import already printed what it prints, and the thread pools are set
    if not verbose():
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with contextlib.nullcontext() if verbose() else filtered_stderr():
        import tensorflow as tf

        with contextlib.suppress(ImportError):
            import gym  # noqa: F401  (TF-Agents imports it; its banner is printed once, here)
        if threads is not None:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        if threads is not None or inter_op_threads is not None:
            tf.config.threading.set_inter_op_parallelism_threads(
                threads if threads is not None else inter_op_threads
            )
        if "TF_CONFIG" not in os.environ:
            # The cuInit line comes with the first device query. Not in a worker of a cluster:
            # MultiWorkerMirroredStrategy must configure the runtime before it starts.
            tf.config.list_logical_devices()


def quiet_python_logs() -> None:
    """Errors only from absl and TensorFlow's Python loggers: the progress bar and results, not chatter.

    TF-Agents logs each SavedModel file at INFO, and warns that its learner
    does not checkpoint (``sit-train`` checkpoints instead); TensorFlow warns
    about deprecated calls inside TF-Agents; saving a policy warns that its
    distribution spec needs tensorflow-probability to load (it is imported).
    """
    if verbose():
        return
    import tensorflow as tf
    from absl import logging

    logging.set_verbosity(logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    for package in ("tfp", "tf_agents"):
        warnings.filterwarnings("ignore", message=f"Encoding a StructuredValue with type {package}.distrib")
