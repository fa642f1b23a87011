"""The common base of every image encoder: input checks, scaling, config."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import tensorflow as tf
import tf_keras

from sit_keras.symmetry import NO_SYMMETRY, Symmetry


class Encoder(tf_keras.Model):
    """Maps images ``(B, H, W, C)`` to features ``(B, output_dim)``.

    Subclasses implement ``encode(images, training)`` on float images in
    ``[0, 1]`` and, where they have symmetric parts, ``symmetry_parts``; they
    declare their symmetry in ``SYMMETRY`` (or ``declared_symmetry`` when it
    depends on the constructor's arguments): the baselines keep none.

    Args:
      image_shape: ``(H, W, C)`` of the images the encoder accepts.
      output_dim: size of the feature vector.
      **kwargs: passed to ``tf_keras.Model`` (``name``, ``dtype``).

    Call arguments:
      images: ``(B, H, W, C)``, ``uint8`` (scaled by 1/255) or float (used as
        given).
      training: Python or tensor boolean.

    Returns:
      ``(B, output_dim)`` features in the layer's compute dtype.
    """

    SYMMETRY: ClassVar[Symmetry] = NO_SYMMETRY
    """The declaration of every instance of the class (``sit_keras.symmetry``)."""

    def __init__(self, image_shape: Sequence[int], output_dim: int, **kwargs: Any):
        super().__init__(**kwargs)
        image_shape = tuple(int(d) for d in image_shape)
        if len(image_shape) != 3 or min(image_shape) < 1:
            raise ValueError(
                f"image_shape must be (H, W, C) with positive sizes. Received: image_shape={image_shape}"
            )
        if output_dim < 1:
            raise ValueError(f"output_dim must be positive. Received: output_dim={output_dim}")
        self.image_shape = image_shape
        self.output_dim = int(output_dim)

    # -- input handling -------------------------------------------------------
    def preprocess(self, images: tf.Tensor) -> tf.Tensor:
        """Checks the shape and returns float images in the compute dtype."""
        images = tf.convert_to_tensor(images)
        shape = tuple(images.shape)
        if len(shape) != 4 or any(
            got is not None and got != want for got, want in zip(shape[1:], self.image_shape, strict=False)
        ):
            h, w, c = self.image_shape
            raise ValueError(
                f"{type(self).__name__} expects images of shape (B, {h}, {w}, {c}). "
                f"Received: images.shape={shape}"
            )
        if images.dtype == tf.uint8:
            return tf.cast(images, self.compute_dtype) / 255.0
        return tf.cast(images, self.compute_dtype)

    def call(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        # Subclasses define `encode(images, training)` on preprocessed images.
        return self.encode(self.preprocess(images), training=training)

    @property
    def declared_symmetry(self) -> Symmetry:
        """What this encoder promises; its ``parts`` name the keys of ``symmetry_parts`` it checks."""
        return self.SYMMETRY

    def symmetry_parts(self, images: tf.Tensor, training: bool | None = None) -> dict[str, tf.Tensor]:
        """The parts of the representation with a promised symmetry (``declared_symmetry.parts``).

        Returns a dict with ``"invariant"``: ``(B, D_i)`` and/or
        ``"equivariant"``: ``(B, h, w, D_e)`` on the patch grid. Encoders
        without a promised symmetry (the baselines) return ``{}``.
        """
        del images, training
        return {}

    def get_config(self) -> dict[str, Any]:
        # tf_keras gives subclassed models an empty base config: keep the
        # name and the dtype policy (a float64 model must come back float64).
        config = super().get_config()
        config.update(
            name=self.name,
            trainable=self.trainable,
            dtype=tf_keras.mixed_precision.Policy(self.dtype_policy.name).name,
            image_shape=list(self.image_shape),
            output_dim=self.output_dim,
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Encoder:
        return cls(**config)
