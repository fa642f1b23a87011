"""XLA's CPU settings, made before XLA first compiles: the legacy runtime, and no tree reductions.

TensorFlow 2.19's XLA runs a compiled CPU program on one of two runtimes,
chosen by ``--xla_cpu_use_thunk_runtime`` in ``XLA_FLAGS``: the *thunk*
runtime (XLA's default: a kernel per fusion, run one after the other) or the
*legacy* one (the whole program as one function, with oneDNN for its
convolutions and matmuls on x86). On the 2-core AVX2 host measured, the
legacy runtime made every image model's XLA train step faster than the thunk
runtime did, and as fast as TensorFlow's graph executor or faster for the
CNN, the ViT-small and SiT-small at a LavaCrossing minibatch, where the thunk
runtime made the CNN's step 1.5x and the IMPALA-CNN's (64x64) 2x slower than
without XLA (``benchmarks/xla_runtime.py``, ``benchmarks/encoders.py``;
docs/speed.md, "XLA's two CPU runtimes").

XLA's CPU compiler also rewrites a long reduction (a bias's gradient: the
upstream gradient summed over the batch and the pixels or tokens) into a
``reduce-window`` of partial sums and a reduction of those (its pass
``tree_reduction_rewriter``). Its code for the ``reduce-window`` took 5.96 ms
of the LavaCrossing ViT's 39.5 ms XLA step at 14x14, where the same sums as
plain reductions take 3.42: the pass is skipped
(``--xla_disable_hlo_passes=tree_reduction_rewriter``; docs/speed.md, "XLA's
tree reductions").

XLA reads ``XLA_FLAGS`` once, at its first compilation, so this must run
before then. A choice the user made (``--xla_cpu_use_thunk_runtime``, or
``--xla_disable_hlo_passes`` with any list, in ``XLA_FLAGS``) is kept; other
flags there are kept too.
"""

from __future__ import annotations

import os

VARIABLE = "XLA_FLAGS"
FLAG = "--xla_cpu_use_thunk_runtime"
PASSES_FLAG = "--xla_disable_hlo_passes"
TREE_REDUCTIONS = "tree_reduction_rewriter"


def prefer_legacy_runtime() -> None:
    """Adds ``--xla_cpu_use_thunk_runtime=false`` to ``XLA_FLAGS`` unless it already names a runtime."""
    flags = os.environ.get(VARIABLE, "")
    if FLAG not in flags:
        os.environ[VARIABLE] = f"{flags} {FLAG}=false".strip()


def skip_tree_reductions() -> None:
    """Adds ``--xla_disable_hlo_passes=tree_reduction_rewriter`` to ``XLA_FLAGS`` unless it already lists
    passes to skip."""
    flags = os.environ.get(VARIABLE, "")
    if PASSES_FLAG not in flags:
        os.environ[VARIABLE] = f"{flags} {PASSES_FLAG}={TREE_REDUCTIONS}".strip()
