"""Importing this module first imports TensorFlow without its start-up chatter (``quiet.import_tensorflow``).

The console scripts (``sit_keras.commands.entry_points``) and the benchmarks import it
before anything else, e.g. ``import sit_keras.quiet_start  # noqa: F401``.
absl's and TensorFlow's Python loggers then show errors only
(``quiet.quiet_python_logs``).
"""

from sit_keras import quiet

quiet.import_tensorflow()
quiet.quiet_python_logs()
