"""Importing sit_keras selects XLA's legacy CPU runtime and skips its tree reductions unless XLA_FLAGS chooses
(_xla_runtime)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from sit_keras._xla_runtime import FLAG, PASSES_FLAG, TREE_REDUCTIONS, VARIABLE

SKIP = f"{PASSES_FLAG}={TREE_REDUCTIONS}"

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
        (None, f"{FLAG}=false {SKIP}", "legacy"),
        (f"{FLAG}=true", f"{FLAG}=true {SKIP}", "thunk"),
        (
            "--xla_cpu_enable_fast_math=false",
            f"--xla_cpu_enable_fast_math=false {FLAG}=false {SKIP}",
            "legacy",
        ),
        # A flag given twice: XLA takes the last (benchmarks/xla_runtime.py appends its runtime's).
        (f"{FLAG}=false {FLAG}=true", f"{FLAG}=false {FLAG}=true {SKIP}", "thunk"),
    ],
)
def test_the_legacy_runtime_is_the_default_and_a_users_choice_is_kept(given, flags, runtime, tmp_path):
    dump = str(tmp_path / "dump")
    assert _flags_in_a_fresh_process(_COMPILE, given, dump) == f"{flags} --xla_dump_to={dump}"
    assert _runtime(dump) == runtime


def _flags_in_a_fresh_process(script: str, given: str | None, dump: str) -> str:
    """``script`` run in a fresh Python with ``XLA_FLAGS`` ``given`` (or none): the flags it printed last."""
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if given is not None:
        env[VARIABLE] = given
    done = subprocess.run([sys.executable, "-c", script, dump], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


# A bias's gradient: a (96, 14, 14, 32) gradient summed over all but its channels, the optimised HLO dumped.
_REDUCE = r"""
import os, sys, sit_keras, tensorflow as tf
os.environ["XLA_FLAGS"] += f" --xla_dump_to={sys.argv[1]} --xla_dump_hlo_as_text"
print(os.environ["XLA_FLAGS"])
tf.function(lambda g: tf.reduce_sum(g, [0, 1, 2]), jit_compile=True)(tf.ones([96, 14, 14, 32])).numpy()
"""


@pytest.mark.parametrize(
    ("given", "flags", "tree"),
    [
        (None, f"{FLAG}=false {SKIP}", False),
        # Passes the user lists, none of them the tree reductions: XLA rewrites the sum.
        (f"{PASSES_FLAG}=no_such_pass", f"{PASSES_FLAG}=no_such_pass {FLAG}=false", True),
    ],
)
def test_a_long_sum_is_one_reduction_unless_the_user_lists_the_passes_to_skip(given, flags, tree, tmp_path):
    dump = str(tmp_path / "dump")
    assert (
        _flags_in_a_fresh_process(_REDUCE, given, dump)
        == f"{flags} --xla_dump_to={dump} --xla_dump_hlo_as_text"
    )
    (optimised,) = glob.glob(f"{dump}/*cpu_after_optimizations.txt")
    with open(optimised) as f:
        assert ("reduce-window(" in f.read()) == tree
