"""The algorithms that ``sit-train`` runs on the harness.

``ppo`` (with DrAC, ``augmentation``), ``sac``, ``dqn`` (and C51) and ``bc`` (behaviour
cloning) each hold a gin-configurable set-up; ``ppo_agent`` and ``sac_agent`` are the
TF-Agents agents they extend.
"""
