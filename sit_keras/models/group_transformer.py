"""GSA-Nets / GE-ViT image classifiers: lifting, group self-attention blocks, invariant pooling.

The layer stack (GSA-Nets Fig. F.1 and appendix F; GE-ViT Fig. 3), for
``n = |H|`` and ``D_s`` the channels of stage ``s``::

    images                                              (B, H, W, C)
      -> [uint8: / 255], dropout (input_dropout)
      -> LiftingSelfAttention (eq. 14), GN, Swish        (B, H, W, n, D_0)
      -> for each stage s: block_sizes[s] x GroupTransformerBlock (eq. 16)
         (+ GN, Swish after each block if normalize_between_blocks)
         and, between stages, spatial max-pool + dropout  (B, H_s, W_s, n, D_s)
      -> point-wise Dense(num_classes)                    (B, H_s, W_s, n, classes)
      -> GroupPooling: max over n, mean over space        (B, classes)

GN is GSA-Nets' "LayerNorm", a GroupNorm with one group (see ``_norm``).
Every step is equivariant (point-wise layers, norms whose statistics ignore
the order of pixels and group elements, symmetric pooling), so the logits
are invariant to the stabiliser ``H`` of grid-exact groups on square images.

Under a mixed policy (``mixed_float16`` / ``mixed_bfloat16``) the variables
are float32 and the stack runs in the compute dtype except for the GN
statistics and affine part, the attention logits and softmax, the positional
MLP up to its Swish and the spatial mean of ``GroupPooling``, which run in
float32; each of these returns to the compute dtype, as do the logits.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras.groups import Group, get_group
from sit_keras.layers.group_pooling import GroupPooling, GroupSpatialMaxPooling
from sit_keras.layers.group_self_attention import GroupSelfAttention, LiftingSelfAttention
from sit_keras.layers.precision import stable_dtype
from sit_keras.layers.sublayers import build_sublayer
from sit_keras.models.base import Encoder
from sit_keras.symmetry import INVARIANT, Symmetry, plane_group_symmetry

# PyTorch's default GroupNorm epsilon (GSA-Nets' code uses 1e-12, below float32's resolution of most inputs).
_LAYER_NORM_EPSILON = 1e-5


def _default_initializer() -> tf_keras.initializers.Initializer:
    # GSA-Nets' code: N(0, whitening_scale^2 / fan_in) with whitening_scale = sqrt(2) (He's initialisation).
    return tf_keras.initializers.VarianceScaling(2.0, mode="fan_in", distribution="untruncated_normal")


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class StableGroupNormalization(tf_keras.layers.GroupNormalization):
    """Keras' ``GroupNormalization`` with its statistics and affine part in float32 under mixed precision.

    Keras' GroupNorm computes the mean and variance in the compute dtype: over
    a whole ``(H, W, |H|, C)`` map, bfloat16 keeps 8 bits of them and float16
    overflows on the squared deviations of inputs beyond ~250. Here the input
    is cast to ``precision.stable_dtype`` (float32 for float16 / bfloat16),
    the statistics, ``rsqrt``, ``gamma`` and ``beta`` (float32 variables read
    without autocasting, as in Keras' LayerNorm) are applied there, and the
    result is cast back to the compute dtype. Under float32 / float64 it is
    the base layer. Same arguments, weights and config as the base layer.
    """

    def add_weight(self, *args: Any, **kwargs: Any) -> tf.Variable:
        # gamma and beta meet the float32 statistics: they must not be read in the compute dtype.
        kwargs.setdefault("experimental_autocast", False)
        return super().add_weight(*args, **kwargs)

    def _apply_normalization(
        self, *, reshaped_inputs: tf.Tensor, reshaped_mask: tf.Tensor, input_shape: tf.Tensor
    ) -> tf.Tensor:
        dtype = reshaped_inputs.dtype
        normalized = super()._apply_normalization(
            reshaped_inputs=tf.cast(reshaped_inputs, stable_dtype(dtype)),
            reshaped_mask=reshaped_mask,
            input_shape=input_shape,
        )
        return tf.cast(normalized, dtype)


def _norm(name: str, policy: Any) -> StableGroupNormalization:
    """GSA-Nets' "LayerNorm": GroupNorm with one group.

    Statistics over the whole ``(H, W, |H|, C)`` map of each sample, a scale
    and shift per channel. Equivariant: the statistics ignore the order of
    pixels and group elements. (A per-pixel LayerNorm would see the exactly
    constant features of a blank background and multiply gradients by
    ``1 / sqrt(epsilon)`` at every norm.) Statistics and affine part in
    float32 under a mixed policy (``StableGroupNormalization``).
    """
    return StableGroupNormalization(groups=1, epsilon=_LAYER_NORM_EPSILON, dtype=policy, name=name)


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GroupTransformerBlock(tf_keras.layers.Layer):
    """GSA-Nets' transformer block on signals over a plane group (appendix F, Fig. F.1).

    ::

        y = Dropout(Swish(GN(GSA(Swish(GN(x)))))) + shortcut(x)
        out = y + GN(Dense(Swish(GN(Dense(y, D / 2))), D))

    ``shortcut`` is a point-wise Dense when the channels change, else the
    identity; every Dense acts point-wise on each pixel and group element.

    Symmetry: equivariant like its ``GroupSelfAttention`` (all point-wise
    parts commute with the regular representation).

    Precision: under a mixed policy the variables are float32; the Dense
    layers, Swish, dropout and residual sums run in the compute dtype, the
    GN statistics and affine part in float32 (``StableGroupNormalization``),
    the attention as ``GroupSelfAttention`` says. The output is in the
    compute dtype.

    Args:
      group: a name from ``sit_keras.groups.GROUP_NAMES`` or a ``Group``.
      output_dim: output channels ``D``.
      num_heads, key_dim, neighbourhood, positional_encoding,
      positional_hidden_dim, attention_dropout: see ``GroupSelfAttention``.
      value_dropout: dropout on the attention branch (GSA-Nets'
        ``value_dropout_rate``).
      kernel_initializer: initialiser of every kernel.
      **kwargs: ``tf_keras.layers.Layer`` arguments.

    Call arguments:
      inputs: ``(B, H, W, |H|, C)``.
      training: Python boolean; enables dropout.

    Returns:
      ``(B, H, W, |H|, D)``.
    """

    def __init__(
        self,
        group: str | Group,
        output_dim: int,
        num_heads: int = 1,
        key_dim: int | None = None,
        neighbourhood: int | None = None,
        positional_encoding: str = "ge_vit",
        positional_hidden_dim: int = 16,
        attention_dropout: float = 0.0,
        value_dropout: float = 0.0,
        kernel_initializer: Any = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.group = get_group(group)
        self.output_dim = int(output_dim)
        self.value_dropout = float(value_dropout)
        self.kernel_initializer = tf_keras.initializers.get(kernel_initializer or _default_initializer())
        policy = self.dtype_policy
        self.attention = GroupSelfAttention(
            self.group,
            output_dim=self.output_dim,
            num_heads=num_heads,
            key_dim=key_dim,
            neighbourhood=neighbourhood,
            positional_encoding=positional_encoding,
            positional_hidden_dim=positional_hidden_dim,
            attention_dropout=attention_dropout,
            kernel_initializer=self._initializer(),
            dtype=policy,
            name="attention",
        )
        self.input_norm = _norm("input_norm", policy)
        self.attention_norm = _norm("attention_norm", policy)
        self.dropout = tf_keras.layers.Dropout(self.value_dropout, dtype=policy, name="value_dropout")
        hidden = max(1, self.output_dim // 2)
        self.mlp_hidden = tf_keras.layers.Dense(
            hidden, kernel_initializer=self._initializer(), dtype=policy, name="mlp_hidden"
        )
        self.mlp_hidden_norm = _norm("mlp_hidden_norm", policy)
        self.mlp_output = tf_keras.layers.Dense(
            self.output_dim, kernel_initializer=self._initializer(), dtype=policy, name="mlp_output"
        )
        self.mlp_output_norm = _norm("mlp_output_norm", policy)
        self.shortcut = None

    def _initializer(self) -> tf_keras.initializers.Initializer:
        # A fresh clone per sublayer: a seeded initialiser reused would repeat its values.
        return self.kernel_initializer.__class__.from_config(self.kernel_initializer.get_config())

    def build(self, input_shape: tf.TensorShape) -> None:
        input_shape = tf.TensorShape(input_shape)
        if input_shape.rank != 5 or input_shape[3] != self.group.order or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects signals on {self.group.name!r} (B, H, W, "
                f"{self.group.order}, C). Received: shape={tuple(input_shape)}"
            )
        output_shape = input_shape[:-1].concatenate([self.output_dim])
        build_sublayer(self.input_norm, input_shape)
        build_sublayer(self.attention, input_shape)
        build_sublayer(self.attention_norm, output_shape)
        if int(input_shape[-1]) != self.output_dim:
            self.shortcut = tf_keras.layers.Dense(
                self.output_dim,
                kernel_initializer=self._initializer(),
                dtype=self.dtype_policy,
                name="shortcut",
            )
            build_sublayer(self.shortcut, input_shape)
        build_sublayer(self.mlp_hidden, output_shape)
        build_sublayer(self.mlp_hidden_norm, output_shape[:-1].concatenate([self.mlp_hidden.units]))
        build_sublayer(self.mlp_output, output_shape[:-1].concatenate([self.mlp_hidden.units]))
        build_sublayer(self.mlp_output_norm, output_shape)
        super().build(input_shape)

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        attended = self.attention(tf.nn.silu(self.input_norm(inputs)), training=training)
        attended = self.dropout(tf.nn.silu(self.attention_norm(attended)), training=training)
        out = attended + (inputs if self.shortcut is None else self.shortcut(inputs))
        hidden = tf.nn.silu(self.mlp_hidden_norm(self.mlp_hidden(out)))
        return out + self.mlp_output_norm(self.mlp_output(hidden))

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        return tf.TensorShape(input_shape)[:-1].concatenate([self.output_dim])

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        attention = self.attention
        config.update(
            group=self.group.name,
            output_dim=self.output_dim,
            num_heads=attention.num_heads,
            key_dim=attention.key_dim,
            neighbourhood=attention.neighbourhood,
            positional_encoding=attention.positional_encoding,
            positional_hidden_dim=attention.positional_hidden_dim,
            attention_dropout=attention.attention_dropout,
            value_dropout=self.value_dropout,
            kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
        )
        return config


def _int_tuple(name: str, values: Sequence[int], minimum: int) -> tuple[int, ...]:
    values = tuple(values)
    if not values or any(
        isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum for v in values
    ):
        raise ValueError(
            f"{name} must be a non-empty sequence of integers >= {minimum}. Received: {values!r}"
        )
    return tuple(int(v) for v in values)


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class GroupTransformer(Encoder):
    """A GSA-Net classifier: images to logits invariant to the group's stabiliser.

    The stack is drawn in this module's docstring (GSA-Nets Fig. F.1,
    appendix F; GE-ViT Fig. 3, with GE-ViT's positional encoding by
    default).

    Symmetry: for a grid-exact group (``z2``, ``p4``, ``mz2``, ``p4m``) and
    square images, ``f(L_h x) = f(x)`` for every ``h`` in ``H`` (rotations by
    90 degrees and mirrors about the image centre); translations are exact
    only away from the borders. Finer groups (``p8``, ...) are invariant only
    up to the pixel grid.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` every variable is
    float32 and the logits come out in the compute dtype; what runs in
    float32 is listed in this module's docstring (GN statistics, attention
    logits and softmax, the positional MLP's LayerNorm, the pooled mean).
    The invariance then holds up to rounding, within
    ``sit_keras.testing.tolerance`` of the compute dtype.

    Args:
      image_shape: ``(H, W, C)``.
      output_dim: number of classes (logits).
      group: a name from ``sit_keras.groups.GROUP_NAMES``.
      channels: channels of each stage; the lifting layer has ``channels[0]``.
      block_sizes: transformer blocks per stage.
      num_heads: attention heads of every layer (GSA-Nets: 9).
      key_dim: features per head; default ``channels // 2`` (GSA-Nets' code).
      neighbourhood: odd ``N`` for local ``N x N`` attention, ``None`` for global.
      positional_encoding: ``"ge_vit"`` or ``"gsa_nets"``.
      positional_hidden_dim: hidden width of the positional MLPs.
      attention_dropout: dropout on attention weights.
      value_dropout: dropout on each block's attention branch.
      input_dropout: dropout on the input images.
      pool_dropout: dropout after each spatial max-pool.
      normalize_between_blocks: GroupNorm and Swish after every block (GSA-Nets'
        CIFAR-10 network).
      kernel_initializer: initialiser of every kernel (default: He normal).
      **kwargs: ``tf_keras.Model`` arguments (``name``, ``dtype``).

    Call arguments:
      images: ``(B, H, W, C)``, ``uint8`` (scaled by 1/255) or float.
      training: Python boolean; enables dropout.

    Returns:
      ``(B, output_dim)`` logits in the compute dtype.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_dim: int,
        group: str,
        channels: Sequence[int],
        block_sizes: Sequence[int],
        num_heads: int = 9,
        key_dim: int | None = None,
        neighbourhood: int | None = 5,
        positional_encoding: str = "ge_vit",
        positional_hidden_dim: int = 16,
        attention_dropout: float = 0.0,
        value_dropout: float = 0.0,
        input_dropout: float = 0.0,
        pool_dropout: float = 0.0,
        normalize_between_blocks: bool = False,
        kernel_initializer: Any = None,
        **kwargs: Any,
    ):
        super().__init__(image_shape, output_dim, **kwargs)
        self.group = get_group(group)
        self.channels = _int_tuple("channels", channels, 1)
        self.block_sizes = _int_tuple("block_sizes", block_sizes, 0)
        if len(self.channels) != len(self.block_sizes):
            raise ValueError(
                "channels and block_sizes need one entry per stage. "
                f"Received: channels={self.channels}, block_sizes={self.block_sizes}"
            )
        self.num_heads = int(num_heads)
        self.key_dim = key_dim
        self.neighbourhood = neighbourhood
        self.positional_encoding = positional_encoding
        self.positional_hidden_dim = int(positional_hidden_dim)
        self.attention_dropout = float(attention_dropout)
        self.value_dropout = float(value_dropout)
        self.input_dropout = float(input_dropout)
        self.pool_dropout = float(pool_dropout)
        self.normalize_between_blocks = bool(normalize_between_blocks)
        self.kernel_initializer = tf_keras.initializers.get(kernel_initializer or _default_initializer())
        policy = self.dtype_policy
        attention_args = dict(
            num_heads=self.num_heads,
            key_dim=key_dim,
            neighbourhood=neighbourhood,
            positional_encoding=positional_encoding,
            positional_hidden_dim=self.positional_hidden_dim,
            attention_dropout=self.attention_dropout,
            dtype=policy,
        )
        self.input_dropout_layer = tf_keras.layers.Dropout(
            self.input_dropout, dtype=policy, name="input_dropout"
        )
        self.lifting = LiftingSelfAttention(
            self.group,
            self.channels[0],
            kernel_initializer=self._initializer(),
            name="lifting",
            **attention_args,
        )
        self.lifting_norm = _norm("lifting_norm", policy)
        self.stages: list[list[tf_keras.layers.Layer]] = []
        for s, (dim, size) in enumerate(zip(self.channels, self.block_sizes, strict=True)):
            stage: list[tf_keras.layers.Layer] = []
            for b in range(size):
                stage.append(
                    GroupTransformerBlock(
                        self.group,
                        dim,
                        value_dropout=self.value_dropout,
                        kernel_initializer=self._initializer(),
                        name=f"stage{s}_block{b}",
                        **attention_args,
                    )
                )
                if self.normalize_between_blocks:
                    stage.append(_norm(f"stage{s}_norm{b}", policy))
            if s + 1 < len(self.channels):
                stage.append(GroupSpatialMaxPooling(dtype=policy, name=f"stage{s}_pool"))
                stage.append(
                    tf_keras.layers.Dropout(self.pool_dropout, dtype=policy, name=f"stage{s}_dropout")
                )
            self.stages.append(stage)
        self.classifier = tf_keras.layers.Dense(
            self.output_dim, kernel_initializer=self._initializer(), dtype=policy, name="classifier"
        )
        self.pooling = GroupPooling(dtype=policy, name="group_pooling")

    def _initializer(self) -> tf_keras.initializers.Initializer:
        return self.kernel_initializer.__class__.from_config(self.kernel_initializer.get_config())

    def encode(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        return self.pooling(self.classifier(self._features(images, training)))

    def feature_maps(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        """The signal on the group before the classifier, ``(B, H_s, W_s, |H|, channels[-1])``."""
        return self._features(self.preprocess(images), training)

    def _features(self, images: tf.Tensor, training: bool | None) -> tf.Tensor:
        x = self.input_dropout_layer(images, training=training)
        x = tf.nn.silu(self.lifting_norm(self.lifting(x, training=training)))
        for stage in self.stages:
            for layer in stage:
                if isinstance(layer, tf_keras.layers.GroupNormalization):
                    x = tf.nn.silu(layer(x))  # normalize_between_blocks
                else:
                    x = layer(x, training=training)
        return x

    @property
    def declared_symmetry(self) -> Symmetry:
        """Logits invariant under the stabiliser ``H`` (lift, group blocks, pooling: GSA-Nets section 5)."""
        return plane_group_symmetry(
            self.group.name,
            INVARIANT,
            acts_on="group_signal",
            output="logits invariant under H: f(L_h x) = f(x)",
            positional_encoding=self.positional_encoding,
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            group=self.group.name,
            channels=list(self.channels),
            block_sizes=list(self.block_sizes),
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            neighbourhood=self.neighbourhood,
            positional_encoding=self.positional_encoding,
            positional_hidden_dim=self.positional_hidden_dim,
            attention_dropout=self.attention_dropout,
            value_dropout=self.value_dropout,
            input_dropout=self.input_dropout,
            pool_dropout=self.pool_dropout,
            normalize_between_blocks=self.normalize_between_blocks,
            kernel_initializer=tf_keras.initializers.serialize(self.kernel_initializer),
        )
        return config


PRESETS: dict[str, dict[str, Any]] = {
    # GSA-Nets appendix F.1 (rotMNIST): 5 attention blocks of 20 channels, 9 heads, a 5x5 neighbourhood
    # (section 6, Table 1), attention and value dropout 0.1, one max-pool between the two stages.
    "rotmnist": dict(
        channels=(20, 20),
        block_sizes=(2, 3),
        num_heads=9,
        neighbourhood=5,
        attention_dropout=0.1,
        value_dropout=0.1,
    ),
    # GSA-Nets appendix F.2 (CIFAR-10): 6 blocks, 96 channels for the first two and 192 for the rest,
    # input dropout 0.3, dropout 0.2 after the max-pools that follow blocks 2 and 4; GN + Swish between
    # blocks as in their CIFAR-10 network. The appendix gives no neighbourhood: 5x5 as for rotMNIST.
    "cifar10": dict(
        channels=(96, 192, 192),
        block_sizes=(2, 2, 2),
        num_heads=9,
        neighbourhood=5,
        attention_dropout=0.1,
        value_dropout=0.1,
        input_dropout=0.3,
        pool_dropout=0.2,
        normalize_between_blocks=True,
    ),
    # scikit-learn's 8x8 digits, fast on a CPU: lifting at 8x8, one max-pool, two blocks at 4x4. Four heads,
    # because a one-channel image gives the lifting layer one weighted mean per head and pixel.
    "digits": dict(
        channels=(16, 16),
        block_sizes=(0, 2),
        num_heads=4,
        key_dim=4,
        neighbourhood=3,
    ),
}
"""Configurations by name; ``build_group_transformer`` overrides any field."""

_MODEL_ARGS = ("name", "dtype", "trainable")


def build_group_transformer(
    group: str,
    input_shape: Sequence[int],
    num_classes: int,
    preset: str = "rotmnist",
    **overrides: Any,
) -> tf_keras.Model:
    """A built ``GroupTransformer`` (GSA-Nets / GE-ViT) from a preset.

    Args:
      group: a name from ``sit_keras.groups.GROUP_NAMES`` (``"p4"``, ``"p4m"``, ...).
      input_shape: ``(H, W, C)`` of the images.
      num_classes: number of logits.
      preset: ``"rotmnist"``, ``"cifar10"`` or ``"digits"`` (see ``PRESETS``).
      **overrides: ``GroupTransformer`` arguments replacing the preset's
        (``neighbourhood=None`` for global attention, ``positional_encoding``,
        ``dtype``, ...).

    Returns:
      The model, already called once: it maps ``(B, H, W, C)`` images
      (``uint8`` or float) to ``(B, num_classes)`` logits.

    Raises:
      ValueError: unknown group, preset or override, or invalid sizes.

    >>> import sit_keras
    >>> from sit_keras.models.group_transformer import build_group_transformer
    >>> model = build_group_transformer("p4", (8, 8, 1), 10, preset="digits")
    >>> model(tf.zeros((3, 8, 8, 1))).shape
    TensorShape([3, 10])
    """
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Expected one of: {', '.join(PRESETS)}.")
    get_group(group)  # an unknown name fails here, listing the valid ones
    fixed = {"self", "kwargs", "image_shape", "output_dim", "group"}
    allowed = set(inspect.signature(GroupTransformer.__init__).parameters) - fixed | set(_MODEL_ARGS)
    unknown = set(overrides) - allowed
    if unknown:
        raise ValueError(f"Unknown overrides {sorted(unknown)}. Expected some of: {sorted(allowed)}")
    input_shape = tuple(int(d) for d in input_shape)
    model = GroupTransformer(
        image_shape=input_shape, output_dim=num_classes, group=group, **{**PRESETS[preset], **overrides}
    )
    # A first call builds every layer and records the input signature that SavedModel export needs.
    model(tf.zeros((1, *input_shape), tf.uint8))
    return model
