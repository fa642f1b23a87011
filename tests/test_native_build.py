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


@pytest.fixture
def scratch_build(tmp_path, monkeypatch) -> list[list[str]]:
    """``build()`` writing into tmp_path, its compiler calls recorded (each writes its output) and not run."""
    commands: list[list[str]] = []

    def compile_(command: list[str], output, target, sources) -> None:
        commands.append(command)
        target.write_text("a library")

    monkeypatch.setattr(native, "LIBRARY", tmp_path / "_kernels.so")
    monkeypatch.setattr(native, "XLA_LIBRARY", tmp_path / "_xla_kernels.so")
    monkeypatch.setattr(build, "HOST_FILE", tmp_path / "host.json")
    monkeypatch.setattr(build, "_compile", compile_)
    return commands


def test_without_llvms_headers_the_xla_library_is_not_built_and_the_build_says_why(
    scratch_build, monkeypatch
) -> None:
    monkeypatch.setattr(build, "llvm_headers", lambda: None)
    native.XLA_LIBRARY.write_text("an old one")
    assert build.build() == (native.LIBRARY, build.NO_LLVM_HEADERS)
    assert native.LIBRARY.exists() and not native.XLA_LIBRARY.exists()  # no library left from an older build
    assert len(scratch_build) == 1 and "apt-get install llvm-19-dev" in build.NO_LLVM_HEADERS


def test_with_llvms_headers_the_xla_library_is_built_against_them_and_libtensorflow_cc(
    scratch_build, monkeypatch, tmp_path
) -> None:
    monkeypatch.setattr(build, "llvm_headers", lambda: tmp_path / "llvm-19/include")
    assert build.build() == (native.LIBRARY, None)
    assert native.XLA_LIBRARY.exists()
    xla_command = scratch_build[1]
    assert any(part.endswith("xla/xla_kernels.cc") for part in xla_command)
    assert xla_command[xla_command.index("-idirafter") + 1] == str(tmp_path / "llvm-19/include")
    assert "-l:libtensorflow_cc.so.2" in xla_command
    assert not any(
        "xla_kernels.cc" in part for part in scratch_build[0]
    )  # the kernels' library needs no LLVM


def test_an_xla_library_that_fails_to_compile_leaves_the_kernels_library_working(
    scratch_build, monkeypatch, tmp_path
) -> None:
    monkeypatch.setattr(build, "llvm_headers", lambda: tmp_path / "llvm-19/include")

    def compile_(command: list[str], output, target, sources) -> None:
        if target == native.XLA_LIBRARY:
            raise RuntimeError("g++ failed to compile xla_kernels.cc:\nan error")
        target.write_text("a library")

    monkeypatch.setattr(build, "_compile", compile_)
    library, problem = build.build()
    assert library.exists() and build.HOST_FILE.exists() and not native.XLA_LIBRARY.exists()
    assert problem.startswith("g++ failed to compile xla_kernels.cc")


def test_the_newest_llvm_headers_are_taken(tmp_path, monkeypatch) -> None:
    for version in (14, 19, 9):
        (tmp_path / f"llvm-{version}/include/llvm/ADT").mkdir(parents=True)
        (tmp_path / f"llvm-{version}/include/llvm/ADT/ArrayRef.h").write_text("")
    (tmp_path / "llvm-21/include").mkdir(parents=True)  # a folder without the headers
    monkeypatch.setattr(build, "LLVM_HEADERS", str(tmp_path / "llvm-*/include"))
    assert build.llvm_headers() == tmp_path / "llvm-19/include"
    monkeypatch.setattr(build, "LLVM_HEADERS", str(tmp_path / "none-*/include"))
    assert build.llvm_headers() is None


def test_the_check_fails_where_llvms_headers_are_installed_and_the_xla_library_does_not_load(
    monkeypatch, capsys, tmp_path
) -> None:
    if not native.available():
        pytest.skip(f"needs the native kernels: {native.load_problem()}")
    monkeypatch.setitem(native._loaded, "xla_problem", "not built (run `python -m sit_keras.native.build`)")
    monkeypatch.setattr(build, "llvm_headers", lambda: tmp_path)
    assert build.main(["--check"]) == 1
    assert "their XLA kernels: not built" in capsys.readouterr().out
    monkeypatch.setattr(build, "llvm_headers", lambda: None)
    assert build.main(["--check"]) == 0  # without the headers no XLA library is expected
