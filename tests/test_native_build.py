"""Where the native kernels are built and used: on CPUs with AVX-512 (16 lanes) or AVX2 and FMA (8 lanes)."""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf

from sit_keras import native
from sit_keras.native import build, cpu


@pytest.fixture
def cpu_without_vector_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host as a CPU with SSE4.2 and no AVX2 or AVX-512; the library state is reloaded for it."""
    flags = [flag for flag in build.host()["cpu_flags"] if not flag.startswith(("avx", "fma"))] + ["sse4_2"]
    real_host = build.host
    monkeypatch.setattr(build, "host", lambda: {**real_host(), "cpu_flags": sorted(set(flags))})
    monkeypatch.setattr(native, "_loaded", {})


def test_the_lanes_follow_the_vector_registers() -> None:
    assert cpu.vector_lanes(["avx2", "avx512f", "fma"]) == 16
    assert cpu.vector_lanes(["avx2", "fma", "avx_vnni"]) == 8
    assert cpu.vector_lanes(["avx2"]) is None  # the kernels' sums are fused multiply-adds
    assert cpu.vector_lanes(["sse4_2", "fma"]) is None


def test_the_layout_has_this_hosts_lanes() -> None:
    assert native.LANES == (cpu.vector_lanes(cpu.cpu_flags()) or 16)
    if native.available():
        blocks = native.lane_blocks(tf.zeros((3, 20, 5)))  # (C, B, T): 20 windows
        assert blocks.shape == (3, -(-20 // native.LANES), 5, native.LANES)


def test_without_vector_units_the_kernels_are_not_used_and_no_warning_is_given(cpu_without_vector_units):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CPU without the kernels' registers is not a problem to warn about
        assert native.library() is None
    assert native.load_problem() == cpu.NO_VECTOR_UNITS
    assert not native.available()
    with tf.GradientTape():
        assert not native.usable(tf.float32)


def test_without_vector_units_nothing_is_built_and_the_build_says_why(
    cpu_without_vector_units, monkeypatch, capsys
):
    def fail() -> None:
        raise AssertionError("the build compiled on a CPU without AVX2 or AVX-512")

    monkeypatch.setattr(build, "build", fail)
    assert build.main([]) == 0
    assert "neither AVX-512 nor AVX2" in capsys.readouterr().out
    assert build.main(["--check"]) == 1
    assert cpu.NO_VECTOR_UNITS in capsys.readouterr().out
