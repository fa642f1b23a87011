"""Keras layers: graph symmetric attention (SiT), group self-attention (GSA-Nets, GE-ViT), AttentionNeuron."""

from sit_keras.layers.attention_neuron import AttentionNeuron
from sit_keras.layers.global_gsa import GlobalGSA
from sit_keras.layers.graph_conv import GraphConv2D
from sit_keras.layers.graph_symmetric_attention import GraphSymmetricAttention
from sit_keras.layers.graph_weights import NearIdentity
from sit_keras.layers.group_pooling import GroupPooling, GroupSpatialMaxPooling
from sit_keras.layers.group_positional_encoding import GroupPositionalEncoding
from sit_keras.layers.group_self_attention import GroupSelfAttention, LiftingSelfAttention
from sit_keras.layers.gsa_block import GraphSymmetricAttentionBlock
from sit_keras.layers.local_gsa import LocalGSA
from sit_keras.layers.rotation_pooled_conv import RotationPooledConv2D
from sit_keras.layers.vision_attention_neuron import VisionAttentionNeuron

__all__ = [
    "AttentionNeuron",
    "GlobalGSA",
    "GraphConv2D",
    "GraphSymmetricAttention",
    "GraphSymmetricAttentionBlock",
    "GroupPooling",
    "GroupPositionalEncoding",
    "GroupSelfAttention",
    "GroupSpatialMaxPooling",
    "LiftingSelfAttention",
    "LocalGSA",
    "NearIdentity",
    "RotationPooledConv2D",
    "VisionAttentionNeuron",
]
