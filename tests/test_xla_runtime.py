"""Importing sit_keras selects XLA's legacy CPU runtime unless XLA_FLAGS names one (_xla_runtime)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from sit_keras._xla_runtime import FLAG, VARIABLE

# One compiled matmul, its LLVM IR dumped. The legacy runtime emits the whole program as one function
# named after the module (a_inference_...); the thunk runtime emits a function per fusion and none for it.
_COMPILE = r"""
import os, sys, sit_keras, tensorflow as tf
os.environ["XLA_FLAGS"] += f" --xla_dump_to={sys.argv[1]}"
print(os.environ["XLA_FLAGS"])
tf.function(lambda a: tf.matmul(a, a) + 1.0, jit_compile=True)(tf.ones([8, 8])).numpy()
"""


def _runtime(dump: str) -> str:
    (ir,) = glob.glob(f"{dump}/*ir-with-opt.ll")
    with open(ir) as f:
        return "legacy" if "define void @a_inference" in f.read() else "thunk"


@pytest.mark.parametrize(
    ("given", "flags", "runtime"),
    [
        (None, f"{FLAG}=false", "legacy"),
        (f"{FLAG}=true", f"{FLAG}=true", "thunk"),
        ("--xla_cpu_enable_fast_math=false", f"--xla_cpu_enable_fast_math=false {FLAG}=false", "legacy"),
        # A flag given twice: XLA takes the last (benchmarks/xla_runtime.py appends its runtime's).
        (f"{FLAG}=false {FLAG}=true", f"{FLAG}=false {FLAG}=true", "thunk"),
    ],
)
def test_the_legacy_runtime_is_the_default_and_a_users_choice_is_kept(given, flags, runtime, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if given is not None:
        env[VARIABLE] = given
    dump = str(tmp_path / "dump")
    done = subprocess.run([sys.executable, "-c", _COMPILE, dump], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == f"{flags} --xla_dump_to={dump}"
    assert _runtime(dump) == runtime
