"""Importing sit_keras selects TensorFlow's BFC arena for CPU tensors unless the user chose an allocator.

(sit_keras._cpu_allocator)
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sit_keras._cpu_allocator import VARIABLE

# TensorFlow keeps allocation statistics only in an arena; with malloc it raises ValueError. Where
# TensorFlow turns its oneDNN kernels on (on some CPUs only), oneDNN's CPU allocator, an arena too,
# serves CPU tensors whatever the variable says: the variable decides only with Eigen's kernels.
_ALLOCATOR_IN_USE = r"""
import os, sit_keras, tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
tf.linalg.matmul(tf.ones([64, 64]), tf.ones([64, 64])).numpy()
try:
    tf.config.experimental.get_memory_info("CPU:0")
    allocator = "bfc"
except ValueError:
    allocator = "malloc"
print(os.environ["TF_CPU_ALLOCATOR_USE_BFC"], allocator, _pywrap_util_port.IsMklEnabled())
"""


@pytest.mark.parametrize("onednn", ["0", "1"])
@pytest.mark.parametrize(
    ("chosen", "expected"), [(None, "true bfc"), ("false", "false malloc"), ("true", "true bfc")]
)
def test_the_bfc_arena_is_the_default_and_a_users_choice_is_kept(chosen, expected, onednn):
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    env["TF_ENABLE_ONEDNN_OPTS"] = onednn
    if chosen is not None:
        env[VARIABLE] = chosen
    done = subprocess.run([sys.executable, "-c", _ALLOCATOR_IN_USE], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    setting, allocator, onednn_on = done.stdout.strip().splitlines()[-1].split()
    assert onednn_on == str(onednn == "1")
    if onednn == "1":  # oneDNN's allocator, and the user's choice still kept in the environment
        assert (setting, allocator) == (expected.split()[0], "bfc")
    else:
        assert f"{setting} {allocator}" == expected
