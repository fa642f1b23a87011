"""Which threads the native kernels' custom calls run on under XLA (``native.xla_host_threads``).

What this file proves:

- once a function XLA compiles uses the kernels, their host functions run on TensorFlow's intra-op threads:
  no pool of their own is started (the process's thread count does not grow), and the op reports
  TensorFlow's intra-op thread count (set to one more than the CPUs, the size of the kernels' own pool);
- ``xla_host_threads(device=False)`` starts their own pool (one thread a CPU the process may use) for the
  calls from then on, with the same compiled program, and ``xla_host_threads()`` hands TensorFlow's threads
  back; float64 results are the same bits on either pool;
- where ``TF_OVERRIDE_GLOBAL_THREADPOOL`` gives each CPU device a pool of its own (which may end with its
  device), the host functions keep their own pool;
- outside eager execution (a TF1 graph) nothing runs and the answer is ``None``;
- ``benchmarks/xla_host_threads.py`` times the graph step and the XLA step on both pools in one run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf
from traced_ops import needs_xla_kernels

from sit_keras import native

ROOT = Path(__file__).resolve().parents[1]

# A compiled convolution through the kernels in float64, called on each pool; prints the thread counts.
SCRIPT = textwrap.dedent(
    """
    import json, os
    import numpy as np
    import tensorflow as tf
    from sit_keras import native

    def threads():
        return len(os.listdir("/proc/self/task"))

    @tf.function(jit_compile=True)
    def convolve(x, w):
        assert native.usable(x.dtype, native.CONV_OPS)
        return native.library().sit_conv2d(x, w, tf.zeros([5], x.dtype))

    rng = np.random.default_rng(0)
    x, w = tf.constant(rng.normal(size=(3, 7, 9, 4))), tf.constant(rng.normal(size=(3, 3, 4, 5)))
    with tf.GradientTape():
        first = convolve(x, w).numpy()
    counts = [threads()]
    chosen = native._loaded["host_threads"]
    again = convolve(x, w).numpy()
    counts.append(threads())
    own = native.xla_host_threads(device=False)
    on_own = convolve(x, w).numpy()
    counts.append(threads())
    back = native.xla_host_threads()
    on_tensorflows = convolve(x, w).numpy()
    counts.append(threads())
    same = all(np.array_equal(first, y) for y in (again, on_own, on_tensorflows))
    cpus = len(os.sched_getaffinity(0))
    print(json.dumps({"chosen": chosen, "own": own, "back": back, "counts": counts, "same": same,
                      "cpus": cpus}))
    """
)


def _run(env: dict[str, str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@needs_xla_kernels
def test_compiled_kernels_run_on_tensorflows_threads_and_on_their_own_pool_on_request():
    # One intra-op thread more than the CPUs: the count tells TensorFlow's pool from the kernels' own.
    intra_op = len(os.sched_getaffinity(0)) + 1
    r = _run({"TF_OVERRIDE_GLOBAL_THREADPOOL": "0", "TF_NUM_INTRAOP_THREADS": str(intra_op)})
    assert r["chosen"] == r["back"] == intra_op, r
    assert r["own"] == r["cpus"], r
    first, again, on_own, back = r["counts"]
    assert again == first, r  # no pool started by the compiled calls
    assert on_own == first + r["cpus"], r  # their own pool, started on request
    assert back == on_own, r
    assert r["same"], r


@needs_xla_kernels
def test_with_a_pool_per_device_the_kernels_keep_their_own():
    r = _run({"TF_OVERRIDE_GLOBAL_THREADPOOL": "1"})
    assert r["chosen"] is None, r
    first, again, on_own, _ = r["counts"]
    assert again == first and on_own == first, r  # their own pool from the first call on
    assert r["same"], r


@needs_xla_kernels
def test_outside_eager_execution_nothing_runs():
    with tf.Graph().as_default():
        assert native.xla_host_threads() is None


def _load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "xla_host_threads", ROOT / "benchmarks" / "xla_host_threads.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A benchmark run: make test-large. Which pool runs the kernels:
# test_compiled_kernels_run_on_tensorflows_threads_and_on_their_own_pool_on_request.
@pytest.mark.large
@needs_xla_kernels
def test_the_benchmark_times_the_graph_step_and_the_xla_step_on_both_pools(tmp_path, capsys):
    out = tmp_path / "threads.json"
    small, config = "configs/minigrid/lavacrossing_sit_small.gin", "configs/minigrid/lavacrossing_cnn.gin"
    assert _load_benchmark().main(["--quick", "--models", f"{small},{config}", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (
        report["command"]
        == f"python benchmarks/xla_host_threads.py --quick --models {small},{config} --out {out}"
    )
    settings = {
        "models": [small, config],
        "image_size": 14,
        "batch": 2,
        "repeats": 3,
        "turn": 2,
        "quick": True,
    }
    assert report["settings"] == settings
    printed = capsys.readouterr().out
    for model in (small, config):
        r = report["results"][model]
        assert r["own_pool_over_tensorflow_threads"] == pytest.approx(
            r["xla_own_pool_ms"] / r["xla_tensorflow_threads_ms"]
        )
        assert r["xla_tensorflow_threads_over_graph"] == pytest.approx(
            r["xla_tensorflow_threads_ms"] / r["graph_ms"]
        )
        assert f"own / TensorFlow's {r['own_pool_over_tensorflow_threads']:.3f}" in printed
