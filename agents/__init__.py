"""TF-Agents environments, networks and training for the SiT family; imported as ``sit_keras.agents``.

By role:

- ``environments``: the environment families (MiniGrid, Procgen, DMC, Atari, gymnasium) and
  the observation transforms of the generalisation tests;
- ``networks``: the TF-Agents networks over the encoders of ``sit_keras.models`` and the
  policy description that export reads;
- ``algorithms``: PPO (with DrAC), SAC, DQN / C51 and behaviour cloning, each a set-up for
  the harness, with their TF-Agents agents;
- ``training``: the harness that runs any algorithm, collection, checkpoints;
- the commands: ``train`` (``sit-train``), ``evaluate`` (``sit-eval``) and ``demo``
  (``sit-demo``).
"""
