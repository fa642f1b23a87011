"""``quiet_start`` with TensorFlow's intra- and inter-op thread pools at one thread.

Imported first by the benchmarks that time one core (``benchmarks/export.py``):
the pools can only be set before TensorFlow initialises its devices, which
``quiet_start`` does.
"""

from sit_keras import quiet

quiet.import_tensorflow(threads=1)
quiet.quiet_python_logs()
