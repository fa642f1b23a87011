"""The training loop shared by every algorithm.

``harness`` (run folder, settings, the loop, evaluation and policy saving), ``collection``
(drivers and metrics) and ``checkpoints``.
"""
