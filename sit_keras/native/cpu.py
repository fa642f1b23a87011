"""Which vector registers this CPU offers the native kernels: their lanes, or why there are none."""

from __future__ import annotations

from pathlib import Path

# The kernels hold one window per lane of a vector register of floats: 16 lanes with AVX-512, 8 with AVX2
# and FMA (kLanes of kernels.h, which the compiler picks from the same flags). Vectors of 16 floats split
# over two AVX2 registers lost to TensorFlow's own ops (docs/speed.md, "Without AVX-512, no kernels");
# vectors of 8 won ("Eight lanes on an AVX2 host"). On a CPU with neither nothing is built.
LANES_BY_FLAGS = ((("avx512f",), 16), (("avx2", "fma"), 8))
NO_VECTOR_UNITS = (
    "this CPU has neither AVX-512 nor AVX2 with FMA, the vector registers the kernels are written for "
    '(docs/speed.md, "Native kernels")'
)


def vector_lanes(flags: list[str]) -> int | None:
    """Windows per lane vector of the kernels on a CPU with ``flags`` (``cpu_flags()``), or ``None``."""
    for needed, lanes in LANES_BY_FLAGS:
        if set(needed) <= set(flags):
            return lanes
    return None


def has_amx(flags: list[str]) -> bool:
    """Whether a CPU with ``flags`` has AMX tiles and their bfloat16 dot products."""
    return {"amx_tile", "amx_bf16"} <= set(flags)


def _cpuinfo_field(name: str) -> str | None:
    """The first value of field ``name`` in /proc/cpuinfo, or ``None`` (no such field, or no such file)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    return None


def cpu_flags() -> list[str]:
    """This CPU's instruction-set flags, from /proc/cpuinfo (none where it does not exist)."""
    return sorted((_cpuinfo_field("flags") or "").split())


def cpu_vendor() -> str:
    """This CPU's vendor as /proc/cpuinfo names it (``GenuineIntel``, ``AuthenticAMD``), or ``""``."""
    return _cpuinfo_field("vendor_id") or ""
