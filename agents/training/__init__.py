"""The training loop shared by every algorithm.

``harness`` (run folder, the loop, policy saving), ``run_settings`` (``train_eval``'s settings and
bindings), ``algorithm`` (what an algorithm module implements), ``evaluation`` (episode metrics and
evaluations), ``stops`` (divergence, Ctrl-C), ``keyword_messages``, ``collection`` (drivers and metrics)
and ``checkpoints``.
"""
