"""The HLO instructions an XLA program ran on the CPU, timed, and what each one computes.

XLA's legacy CPU runtime, asked to (``--xla_cpu_enable_xprof_traceme=true``),
records each HLO instruction it runs as a profiler event named after the
instruction (``custom-call.192``, ``call.6``, ``copy.6``) on a ``host_executor``
line. The optimised HLO module, dumped as text (``--xla_dump_to``), says what
each name is: a custom call's target (``__onednn$convolution``, a native
kernel's ``sit_conv2d_kernel_grad_f32``) or the TensorFlow op and op name in a
fused loop's metadata. ``op_profile.py --jit_compile`` joins the two.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass

from tensorflow.tsl.profiler.protobuf import xplane_pb2

# Events on the host executor's line that are not instructions: a parallel loop's envelope (its
# instruction is recorded too) and the thread pool's bookkeeping.
_NOT_INSTRUCTIONS = ("ParallelFor", "ThreadpoolListener", "MemoryDeallocation")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?(\S+) = (\(.*?\)|\S+) ([a-z][\w-]*)\(")
_COMPUTATION = re.compile(r"^(?:ENTRY )?(\S+) \{$")


def trace_flags(dump_dir: str) -> str:
    """The ``XLA_FLAGS`` that make XLA record its instructions and dump its optimised HLO in ``dump_dir``."""
    return f"--xla_cpu_enable_xprof_traceme=true --xla_dump_to={dump_dir} --xla_dump_hlo_as_text"


def line_events(logdir: str, line_prefix: str) -> list[tuple[str, float]]:
    """``(event name, microseconds)`` of every event on the profile's lines whose names start with
    ``line_prefix``, in a profile folder."""
    paths = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
        space.ParseFromString(f.read())
    return [
        (plane.event_metadata[event.metadata_id].name, event.duration_ps / 1e6)
        for plane in space.planes
        for line in plane.lines
        if line.name.startswith(line_prefix)
        for event in line.events
    ]


def instruction_events(logdir: str) -> list[tuple[str, float]]:
    """``(HLO instruction, microseconds)`` of every instruction run in a profile folder."""
    return [
        (name, micros)
        for name, micros in line_events(logdir, "host_executor")
        if not name.startswith(_NOT_INSTRUCTIONS)
    ]


@dataclass(frozen=True)
class Instruction:
    """What an HLO instruction computes: ``op`` a custom call's target, else the TensorFlow op type of
    its (fused) computation, else the HLO opcode of that computation's root (``reduce-window``);
    ``node`` the TensorFlow op's name; ``shape`` its result."""

    op: str
    node: str
    shape: str


def _computations(text: str) -> dict[str, list[str]]:
    """Each computation's instruction lines, by computation name."""
    computations: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            lines = computations.setdefault(header.group(1), [])
        elif _INSTRUCTION.match(line):
            lines.append(line)
    return computations


def _attribute(line: str, name: str) -> str:
    found = re.search(rf'{name}="([^"]*)"', line)
    return found.group(1) if found else ""


def _root(computations: dict[str, list[str]], line: str) -> str:
    """The instruction line whose metadata describes ``line``: a call's or fusion's computation's root, down
    to the innermost one; ``line`` itself otherwise."""
    for _ in range(3):  # a parallel call wraps a fusion, whose computation holds the ops
        opcode = _INSTRUCTION.match(line).group(3)
        called = re.search(r"(?:to_apply|calls)=([^,\s}]+)", line) if opcode in ("call", "fusion") else None
        if not called or called.group(1) not in computations:
            return line
        body = computations[called.group(1)]
        line = next((candidate for candidate in body if candidate.lstrip().startswith("ROOT ")), body[-1])
    return line


def describe(dump_dir: str, module: str) -> dict[str, Instruction]:
    """HLO instruction name -> what it computes, from the optimised module whose file names ``module``."""
    paths = sorted(p for p in glob.glob(f"{dump_dir}/*cpu_after_optimizations.txt") if module in p)
    if not paths:
        raise RuntimeError(f"XLA dumped no optimised module named {module!r} into {dump_dir}")
    with open(paths[-1]) as f:  # the last compiled
        computations = _computations(f.read())
    described = {}
    for lines in computations.values():
        for line in lines:
            name, shape, opcode = _INSTRUCTION.match(line).groups()
            root = _root(computations, line)
            target = _attribute(line, "custom_call_target")
            root_opcode = _INSTRUCTION.match(root).group(3)
            op = target or _attribute(root, "op_type") or _attribute(line, "op_type") or root_opcode
            node = _attribute(root, "op_name") or _attribute(line, "op_name")
            described[name] = Instruction(op=op, node=node, shape=shape)
    return described
