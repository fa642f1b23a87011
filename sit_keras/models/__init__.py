"""Image encoders: the SiT family and the baselines, built by name."""

from sit_keras.models.base import Encoder
from sit_keras.models.group_transformer import GroupTransformer, build_group_transformer
from sit_keras.models.registry import ENCODER_NAMES, build_encoder
from sit_keras.models.sensor_encoder import SensorSetEncoder

__all__ = [
    "ENCODER_NAMES",
    "Encoder",
    "GroupTransformer",
    "SensorSetEncoder",
    "build_encoder",
    "build_group_transformer",
]
