"""TF-Agents environments, networks and training for the SiT family; imported as `sit_keras.agents`."""
