"""Image augmentations for DrAC (Raileanu et al. 2021), batched and XLA-friendly."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

Augmentation = Callable[[tf.Tensor], tf.Tensor]


def random_crop(images: tf.Tensor, padding: int, seed: int | None = None) -> tf.Tensor:
    """Replicate-pads ``(B, H, W, C)`` images by ``padding`` and crops back to ``H x W``.

    The "crop" augmentation of DrAC on Procgen (pad 12, crop 64). Each image
    gets its own offset in ``[0, 2 * padding]``. Padding by replication is a
    clamp of the source index, so the crop is a gather of rows and then of
    columns: no padded copy is made, and any dtype (uint8 included) works.

    Raises:
      ValueError: images not of rank 4, or a negative padding.
    """
    if padding < 0:
        raise ValueError(f"padding must be >= 0. Received: padding={padding}")
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise ValueError(f"random_crop expects images of shape (B, H, W, C). Received: shape={images.shape}")
    if padding == 0:
        return images
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    offsets = tf.random.uniform((batch, 2), 0, 2 * padding + 1, dtype=tf.int32, seed=seed) - padding
    rows = tf.clip_by_value(tf.range(height)[None, :] + offsets[:, :1], 0, height - 1)
    cols = tf.clip_by_value(tf.range(width)[None, :] + offsets[:, 1:], 0, width - 1)
    images = tf.gather(images, rows, axis=1, batch_dims=1)
    return tf.gather(images, cols, axis=2, batch_dims=1)


def make_augmentation(name: str, image_size: int, procgen_padding: int = 12) -> Augmentation:
    """The augmentation ``name`` for square-ish images of side ``image_size``.

    ``"crop"`` pads by ``procgen_padding`` pixels at 64 pixels (DrAC's
    setting) scaled to the image size, at least one pixel: 12 at 64x64, 3 at
    14x14. ``"none"`` is the identity.

    Raises:
      ValueError: an unknown name.
    """
    if name == "none":
        return tf.identity
    if name == "crop":
        padding = max(1, round(procgen_padding * image_size / 64))
        return lambda images: random_crop(images, padding)
    raise ValueError(f"Unknown augmentation {name!r}. Expected one of: crop, none.")
