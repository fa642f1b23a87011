"""The skip embedding's product over a few channels (``sit_keras.layers.skip_embedding``).

What this file proves:

- under XLA the product's value and both gradients equal a plain matmul's, to 1e-12 in float64 (to float32
  rounding in float32), for any shape (hypothesis);
- the input's gradient is the summed broadcast product only inside a function XLA compiles, on float32 and
  float64, where this host's default (an AMD host's, not an Intel host's) or ``summed_embedding_gradients()``
  asks for it and ``matmul_embedding_gradients()`` does not: otherwise the matmul's own gradient;
- a SiT's XLA train step in float64 gives its graph step's loss and weight gradients to 1e-10, either form.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from sit_keras.layers.skip_embedding import (
    embed_few_channels,
    matmul_embedding_gradients,
    summed_embedding_gradients,
)
from sit_keras.models import build_encoder
from sit_keras.native import cpu


def _value_and_gradients(product, rows: tf.Tensor, table: tf.Tensor, upstream: tf.Tensor) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch([rows, table])
        out = product(rows, table)
    return [out, *tape.gradient(out, [rows, table], output_gradients=upstream)]


def _case(rows: int, channels: int, dim: int, dtype: str, seed: int = 0) -> list[tf.Tensor]:
    rng = np.random.default_rng(seed)
    shapes = [(rows, channels), (channels, dim), (rows, dim)]
    return [tf.constant(rng.normal(size=shape), dtype) for shape in shapes]


# A form under XLA by name: the host's default, or a context that chooses one on any host.
FORMS = {
    "default": contextlib.nullcontext,
    "summed": summed_embedding_gradients,
    "matmul": matmul_embedding_gradients,
}


@settings(deadline=None, max_examples=12)
@given(
    rows=st.integers(1, 300),
    channels=st.integers(1, 7),
    dim=st.integers(1, 70),
    dtype=st.sampled_from(["float64", "float32"]),
    form=st.sampled_from(["summed", "matmul"]),
)
def test_under_xla_the_product_and_its_gradients_are_a_matmuls(
    rows: int, channels: int, dim: int, dtype: str, form: str
):
    inputs = _case(rows, channels, dim, dtype, seed=rows * 100 + channels)
    expected = _value_and_gradients(tf.matmul, *inputs)
    compiled = tf.function(lambda *x: _value_and_gradients(embed_few_channels, *x), jit_compile=True)
    with FORMS[form]():
        compiled.get_concrete_function(*inputs)  # traced in this form
    got = compiled(*inputs)
    tolerance = {"float64": 1e-12, "float32": 1e-5}[dtype]
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert np.linalg.norm(g - e) <= tolerance * np.linalg.norm(e) + 1e-300


def _matmuls_and_sums(jit_compile: bool, dtype: str, form: str = "default") -> tuple[int, int]:
    """The MatMul and Sum ops of the product's value and gradients, traced in ``form`` (``FORMS``)."""
    inputs = _case(6, 5, 8, dtype)
    function = tf.function(lambda *x: _value_and_gradients(embed_few_channels, *x), jit_compile=jit_compile)
    with FORMS[form]():
        graph = function.get_concrete_function(*inputs).graph
    types = [op.type for op in graph.get_operations()]
    return types.count("MatMul"), types.count("Sum")


SUMMED, MATMULS = (2, 1), (3, 0)  # the value's and the table's matmuls and the summed product; or 3 matmuls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_only_under_xla_the_inputs_gradient_is_the_summed_product(dtype: str) -> None:
    assert _matmuls_and_sums(jit_compile=True, dtype=dtype, form="summed") == SUMMED
    assert _matmuls_and_sums(jit_compile=False, dtype=dtype, form="summed") == MATMULS
    assert _matmuls_and_sums(jit_compile=True, dtype=dtype, form="matmul") == MATMULS
    with summed_embedding_gradients():  # the matmul's choice comes first
        assert _matmuls_and_sums(jit_compile=True, dtype=dtype, form="matmul") == MATMULS


@pytest.mark.parametrize(
    ("vendor", "expected"), [("AuthenticAMD", SUMMED), ("GenuineIntel", MATMULS), ("", MATMULS)]
)
def test_an_amd_hosts_xla_steps_sum_the_inputs_gradient_by_default_an_intel_hosts_do_not(
    monkeypatch: pytest.MonkeyPatch, vendor: str, expected: tuple[int, int]
) -> None:
    monkeypatch.setattr(cpu, "cpu_vendor", lambda: vendor)
    assert _matmuls_and_sums(jit_compile=True, dtype="float32") == expected
    assert _matmuls_and_sums(jit_compile=False, dtype="float32") == MATMULS


def test_the_cpu_vendor_is_proc_cpuinfos_vendor_id(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fma avx2 sse2\n\n")
    monkeypatch.setattr(cpu, "Path", lambda _: cpuinfo)
    assert cpu.cpu_vendor() == "AuthenticAMD" and cpu.cpu_flags() == ["avx2", "fma", "sse2"]
    monkeypatch.setattr(cpu, "Path", lambda _: tmp_path / "none")
    assert cpu.cpu_vendor() == "" and cpu.cpu_flags() == []


def test_bfloat16_keeps_the_matmuls_gradient_under_xla() -> None:
    assert _matmuls_and_sums(jit_compile=True, dtype="bfloat16", form="summed") == MATMULS


@pytest.mark.parametrize("form", ["summed", "matmul"])
def test_a_sits_xla_train_step_gives_its_graph_steps_gradients_in_float64(form: str) -> None:
    encoder = build_encoder("sit", (16, 16, 3), dim=8, num_heads=2, dtype="float64")
    images = tf.constant(np.random.default_rng(2).uniform(size=(5, 16, 16, 3)))

    def step(images: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            features = encoder(images, training=False)
            loss = tf.reduce_sum(features * features)
        return [loss, *map(tf.convert_to_tensor, tape.gradient(loss, encoder.trainable_variables))]

    graph = tf.function(step)(images)
    compiled = tf.function(step, jit_compile=True)
    with FORMS[form]():
        compiled.get_concrete_function(images)  # traced in this form
    compiled = compiled(images)
    embedding = encoder.local_gsa.embed.kernel
    at = [v.ref() for v in encoder.trainable_variables].index(embedding.ref()) + 1
    assert np.linalg.norm(graph[at]) > 0  # the embedding's gradient, through the skip embedding
    for a, b in zip(graph, compiled, strict=True):
        assert np.linalg.norm(b - a) <= 1e-10 * np.linalg.norm(a)
