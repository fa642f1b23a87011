"""Image encoders: the SiT family and the baselines, built by name."""

from sit_keras.models.base import Encoder
from sit_keras.models.registry import ENCODER_NAMES, build_encoder

__all__ = ["ENCODER_NAMES", "Encoder", "build_encoder"]
