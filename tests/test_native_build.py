"""Where the native kernels are built and used: only on CPUs with AVX-512 (sit_keras.native.build)."""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf

from sit_keras import native
from sit_keras.native import build


@pytest.fixture
def cpu_without_avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host as a CPU with AVX2 and no AVX-512; the library state is reloaded for it."""
    flags = [flag for flag in build.host()["cpu_flags"] if not flag.startswith("avx512")] + ["avx2"]
    real_host = build.host
    monkeypatch.setattr(build, "host", lambda: {**real_host(), "cpu_flags": sorted(set(flags))})
    monkeypatch.setattr(native, "_loaded", {})


def test_the_flag_that_decides_is_avx512f() -> None:
    assert build.has_wide_vectors(["avx2", "avx512f", "fma"])
    assert not build.has_wide_vectors(["avx2", "fma", "avx_vnni"])


def test_without_avx512_the_kernels_are_not_used_and_no_warning_is_given(cpu_without_avx512) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CPU without AVX-512 is not a problem to warn about
        assert native.library() is None
    assert native.load_problem() == build.NO_WIDE_VECTORS
    assert not native.available()
    with tf.GradientTape():
        assert not native.usable(tf.float32)


def test_without_avx512_nothing_is_built_and_the_build_says_why(cpu_without_avx512, monkeypatch, capsys):
    def fail() -> None:
        raise AssertionError("the build compiled on a CPU without AVX-512")

    monkeypatch.setattr(build, "build", fail)
    assert build.main([]) == 0
    assert "no AVX-512" in capsys.readouterr().out
    assert build.main(["--check"]) == 1
    assert build.NO_WIDE_VECTORS in capsys.readouterr().out
