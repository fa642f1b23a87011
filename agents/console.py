"""Console output of the command-line tools: the progress bar and results, not library chatter."""

from __future__ import annotations

import warnings

import tensorflow as tf
from absl import logging


def quiet_library_logs() -> None:
    """Errors only from absl and TensorFlow's Python loggers.

    TF-Agents logs each SavedModel file at INFO, and warns that its learner
    does not checkpoint (``sit-train`` checkpoints instead); TensorFlow warns
    about deprecated calls inside TF-Agents; saving a policy warns that its
    distribution spec needs tensorflow-probability to load (it is imported).
    """
    logging.set_verbosity(logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    for package in ("tfp", "tf_agents"):
        warnings.filterwarnings("ignore", message=f"Encoding a StructuredValue with type {package}.distrib")
