"""Keras layers: graph symmetric attention and the blocks built from it."""

from sit_keras.layers.global_gsa import GlobalGSA
from sit_keras.layers.graph_conv import GraphConv2D
from sit_keras.layers.graph_symmetric_attention import GraphSymmetricAttention
from sit_keras.layers.graph_weights import NearIdentity
from sit_keras.layers.gsa_block import GraphSymmetricAttentionBlock
from sit_keras.layers.local_gsa import LocalGSA

__all__ = [
    "GlobalGSA",
    "GraphConv2D",
    "GraphSymmetricAttention",
    "GraphSymmetricAttentionBlock",
    "LocalGSA",
    "NearIdentity",
]
