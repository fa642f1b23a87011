"""TensorFlow's BFC arena for CPU tensors, selected before TensorFlow allocates.

By default TensorFlow allocates CPU tensors with the C library's ``malloc``.
glibc hands large blocks back to the kernel when they are freed, so a SiT
train step, whose local attention makes tens of megabytes of temporaries,
maps fresh pages on every call and pays a minor page fault for each 4 KiB of
them. ``TF_CPU_ALLOCATOR_USE_BFC=true`` makes TensorFlow keep CPU memory in a
best-fit-with-coalescing arena that grows to the process's peak and is
reused; ``benchmarks/cpu_allocator.py`` measures both (docs/speed.md, "The CPU
allocator").

TensorFlow reads the variable once, at its first CPU allocation, so it must be
set before then. A value the user set (``false`` to keep ``malloc``) is kept.
"""

from __future__ import annotations

import os

VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"


def prefer_bfc_allocator() -> None:
    """Sets ``TF_CPU_ALLOCATOR_USE_BFC=true`` unless the environment already names a choice."""
    os.environ.setdefault(VARIABLE, "true")
