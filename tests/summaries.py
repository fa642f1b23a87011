"""What a training run wrote for TensorBoard: the summary tags and the HParams tab of a log folder.

Shared by the trainers' tests (``from summaries import summary_tags``; ``tests/`` is on the path as
for ``train_step_checks``).
"""

from __future__ import annotations

import glob
import os
from typing import Any

import tensorflow as tf


def _values(log_dir: str):
    for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            yield from event.summary.value


def scalar_series(log_dir: str, tag: str) -> dict[int, float]:
    """The scalar ``tag`` of the event files of ``log_dir``, by step."""
    series = {}
    for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    series[event.step] = float(tf.make_ndarray(value.tensor))
    return series


def summary_tags(log_dir: str) -> set[str]:
    """Every summary tag written to the event files of ``log_dir``."""
    return {value.tag for value in _values(log_dir)}


def hyperparameters(log_dir: str) -> dict[str, Any]:
    """The hyper-parameters of the TensorBoard HParams tab written to ``log_dir``."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    for value in _values(log_dir):
        if value.tag == "_hparams_/session_start_info":
            data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
            hparams = data.session_start_info.hparams
            return {name: getattr(v, v.WhichOneof("kind")) for name, v in hparams.items()}
    raise AssertionError(f"no hyper-parameters in {log_dir}")
