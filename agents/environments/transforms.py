"""Fixed transformations of image observations, and the wrapper that applies one to an environment.

The test conditions of the SiT paper (Table 4, "rotations") show the agent
the same task through a fixed symmetry of the image. The functions here act
on batched images ``(B, H, W, C)`` (spatial axes 1 and 2) exactly like their
TensorFlow counterparts in ``sit_keras.testing`` (``rot90``, ``flip_h``,
``flip_v``, ``permute_grid``), so that a model's exact symmetry checks and the
environments agree on what "rotated" means.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tf_agents.environments import py_environment, wrappers
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts

from sit_keras.groups import ROTATION_NAMES

TRANSFORMS: tuple[str, ...] = (*ROTATION_NAMES, "flip_h", "flip_v")
"""The fixed transforms, named as their elements of D4 (``sit_keras.groups.D4_ELEMENTS``): the three
rotations and the two axis mirrors. ``"shuffle_patches:<p>"`` (see ``shuffle_patches``) is the
parametrised one."""

SHUFFLE_PATCHES = "shuffle_patches"


def rot90(images: np.ndarray, k: int = 1) -> np.ndarray:
    """Rotates ``(B, H, W, C)`` by ``k`` quarter turns counter-clockwise (as ``sit_keras.testing.rot90``)."""
    return np.ascontiguousarray(np.rot90(_check_images(images), k % 4, axes=(1, 2)))


def flip_h(images: np.ndarray) -> np.ndarray:
    """Mirrors left and right (reverses the width axis)."""
    return np.ascontiguousarray(_check_images(images)[:, :, ::-1])


def flip_v(images: np.ndarray) -> np.ndarray:
    """Mirrors top and bottom (reverses the height axis)."""
    return np.ascontiguousarray(_check_images(images)[:, ::-1])


def patch_permutation(num_patches: int, seed: int) -> np.ndarray:
    """The fixed permutation of ``num_patches`` patches drawn from ``seed``."""
    return np.random.default_rng(seed).permutation(num_patches)


def shuffle_patches(images: np.ndarray, patch: int, permutation: np.ndarray) -> np.ndarray:
    """Shuffles the ``patch x patch`` patches of ``(B, H, W, C)``.

    Patches are numbered row by row on the ``(H / patch, W / patch)`` patch
    grid; patch position ``q`` of the result holds input patch
    ``permutation[q]`` (the convention of ``sit_keras.testing.permute_grid``).
    Pixels inside a patch keep their order.
    """
    images = _check_images(images)
    b, h, w, c = images.shape
    if patch < 1 or h % patch or w % patch:
        raise ValueError(
            f"shuffle_patches needs a patch size that divides the image height and width; "
            f"received patch={patch} for images of shape {images.shape}"
        )
    rows, cols = h // patch, w // patch
    permutation = np.asarray(permutation)
    if permutation.shape != (rows * cols,) or not np.array_equal(
        np.sort(permutation), np.arange(rows * cols)
    ):
        raise ValueError(
            f"permutation must be a permutation of the {rows * cols} patches of a {rows}x{cols} patch grid; "
            f"received shape {permutation.shape}"
        )
    # (B, rows, patch, cols, patch, C) -> (B, rows * cols, patch, patch, C): one entry per patch.
    patches = images.reshape(b, rows, patch, cols, patch, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, rows * cols, patch, patch, c)[:, permutation]
    patches = patches.reshape(b, rows, cols, patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return np.ascontiguousarray(patches.reshape(b, h, w, c))


def _check_images(images: np.ndarray) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"Expected batched images of shape (B, H, W, C); received shape {images.shape}")
    return images


def parse_transform(
    name: str, image_shape: tuple[int, ...], seed: int = 0
) -> tuple[Callable[[np.ndarray], np.ndarray], tuple[int, int, int]]:
    """The batched image function for ``name`` and the ``(H, W, C)`` shape it produces.

    ``name`` is one of ``TRANSFORMS`` or ``"shuffle_patches:<p>"``; the patch
    permutation is drawn from ``seed``.
    """
    if len(image_shape) != 3:
        raise ValueError(
            f"Observation transform {name!r} needs image observations of shape (H, W, C); "
            f"received observation shape {tuple(image_shape)}"
        )
    h, w, c = (int(d) for d in image_shape)
    if name in ("rot90", "rot270"):
        k = 1 if name == "rot90" else 3
        return (lambda x: rot90(x, k)), (w, h, c)
    if name == "rot180":
        return (lambda x: rot90(x, 2)), (h, w, c)
    if name == "flip_h":
        return flip_h, (h, w, c)
    if name == "flip_v":
        return flip_v, (h, w, c)
    prefix, _, size = name.partition(":")
    if prefix == SHUFFLE_PATCHES and size.isdigit():
        patch = int(size)
        if patch < 1 or h % patch or w % patch:
            raise ValueError(
                f"{name!r}: the patch size must divide the image height and width; image shape {(h, w, c)}"
            )
        permutation = patch_permutation((h // patch) * (w // patch), seed)
        return (lambda x: shuffle_patches(x, patch, permutation)), (h, w, c)
    raise ValueError(
        f"Unknown observation transform {name!r}; valid: {', '.join(TRANSFORMS)}, "
        f"or '{SHUFFLE_PATCHES}:<p>' for a patch size p"
    )


class TransformedObservation(wrappers.PyEnvironmentBaseWrapper):
    """Applies one fixed image transform to every observation of ``env`` (batched or not).

    Rewards, discounts, step types and infos pass through unchanged, so
    ``load(name, transform="rot90")`` is the same task seen through a rotated
    camera (SiT paper, Table 4). The observation spec follows the transform:
    a quarter turn of a non-square ``(H, W, C)`` image gives ``(W, H, C)``.

    Args:
      env: a PyEnvironment whose observation spec is one ``(H, W, C)`` array.
      transform: one of ``TRANSFORMS`` or ``"shuffle_patches:<p>"``.
      seed: draws the patch permutation of ``"shuffle_patches:<p>"``.
    """

    def __init__(self, env: py_environment.PyEnvironment, transform: str, seed: int = 0):
        super().__init__(env)
        spec = env.observation_spec()
        if not isinstance(spec, array_spec.ArraySpec):
            raise ValueError(
                f"Observation transform {transform!r} needs a single image observation; "
                f"received the observation spec {spec}"
            )
        self._transform_name = transform
        self._fn, shape = parse_transform(transform, spec.shape, seed)
        if isinstance(spec, array_spec.BoundedArraySpec):
            self._observation_spec = array_spec.BoundedArraySpec(
                shape,
                spec.dtype,
                minimum=self._bound(spec.minimum),
                maximum=self._bound(spec.maximum),
                name=spec.name,
            )
        else:
            self._observation_spec = array_spec.ArraySpec(shape, spec.dtype, name=spec.name)

    @property
    def transform(self) -> str:
        return self._transform_name

    def _bound(self, bound: np.ndarray) -> np.ndarray:
        # Per-pixel bounds are an image themselves and move with the pixels.
        bound = np.asarray(bound)
        return self._fn(bound[None])[0] if bound.ndim == 3 else bound

    def observation_spec(self) -> array_spec.ArraySpec:
        return self._observation_spec

    def _apply(self, time_step: ts.TimeStep) -> ts.TimeStep:
        observation = np.asarray(time_step.observation)
        if self.batched:
            observation = self._fn(observation)
        else:
            observation = self._fn(observation[None])[0]
        return time_step._replace(observation=observation)

    def _reset(self) -> ts.TimeStep:
        return self._apply(self._env.reset())

    def _step(self, action) -> ts.TimeStep:
        return self._apply(self._env.step(action))
