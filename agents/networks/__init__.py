"""TF-Agents networks over the encoders of ``sit_keras.models``.

- ``actor_critic``: actor and value networks (PPO, behaviour cloning) and the torso they share
  with the others;
- ``q_networks``, ``sac_networks``, ``sensor_networks``: DQN / C51, SAC, and the
  AttentionNeuron policies whose sensors arrive in any order and number;
- ``encoders``: which encoder each agent's networks take;
- ``loss_scaling``: dynamic loss scaling of float16 torsos inside TF-Agents' train steps;
- ``policy_network``: the description of the acting network that export rebuilds.
"""
