"""Importing sit_keras selects TensorFlow's BFC arena for CPU tensors unless the user chose an allocator.

(sit_keras._cpu_allocator)
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sit_keras._cpu_allocator import VARIABLE

# TensorFlow keeps allocation statistics only in its BFC arena; with malloc it raises ValueError.
_ALLOCATOR_IN_USE = r"""
import os, sit_keras, tensorflow as tf
tf.linalg.matmul(tf.ones([64, 64]), tf.ones([64, 64])).numpy()
try:
    tf.config.experimental.get_memory_info("CPU:0")
    print(os.environ["TF_CPU_ALLOCATOR_USE_BFC"], "bfc")
except ValueError:
    print(os.environ["TF_CPU_ALLOCATOR_USE_BFC"], "malloc")
"""


@pytest.mark.parametrize(
    ("chosen", "expected"), [(None, "true bfc"), ("false", "false malloc"), ("true", "true bfc")]
)
def test_the_bfc_arena_is_the_default_and_a_users_choice_is_kept(chosen, expected):
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if chosen is not None:
        env[VARIABLE] = chosen
    done = subprocess.run([sys.executable, "-c", _ALLOCATOR_IN_USE], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
