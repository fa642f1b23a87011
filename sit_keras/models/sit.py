"""The SiT family: SiT, SiT*, SeT, SieT and the dihedral SiT (SiT paper, section 4, Table 1-2, appendix F)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf
import tf_keras

from sit_keras import graphs, native
from sit_keras.layers import GlobalGSA, GraphConv2D, LocalGSA, RotationPooledConv2D
from sit_keras.layers.feature_standardization import FeatureStandardization
from sit_keras.models.base import Encoder
from sit_keras.symmetry import (
    EQUIVARIANT,
    INVARIANT,
    SET,
    SET_ROTATION_POOLED,
    SIET,
    SIET_ROTATION_POOLED,
    SIT,
    SIT_MIRROR_BLIND,
    Symmetry,
    graph_symmetry,
)

STEM_KINDS: tuple[str, ...] = ("graph", "rotation_pooled")
"""``SiTEncoder(stem_kind=...)``: the paper's graph convolution, or a turned kernel max-pooled over turns."""

PATCH_READOUTS: tuple[str, ...] = ("ordered", "rotation_pooled")
"""``SiTEncoder(patch_readout=...)``: how the head of a SeT or SieT reads the equivariant patch grid."""

TURN_POOLINGS: tuple[str, ...] = ("max", "attention")
"""``SiTEncoder(turn_pooling=...)``: how a rotation-pooled readout pools its four quarter turns."""

# What each variant promises (section 4, Table 1): triangle sums that keep
# rotations and break flips, and which parts of the representation it uses.
VARIANTS: dict[str, dict[str, Any]] = {
    "sit": {"triangles": 1, "invariant": True, "equivariant": False},
    "sit_star": {"triangles": 2, "invariant": True, "equivariant": False},
    "set": {"triangles": 1, "invariant": False, "equivariant": True},
    "siet": {"triangles": 1, "invariant": True, "equivariant": True},
    "sit_dihedral": {"triangles": 0, "invariant": True, "equivariant": False},
}

PRESETS: dict[str, dict[str, Any]] = {
    # Table 2 and appendix F.5 (Procgen, 64x64x3): graph conv + max-pool,
    # 2 local GSA on 4x4-pixel windows, 2 global GSA on the 8x8 patch grid,
    # embedding 64, hidden 64.
    "procgen": {
        "dim": 64,
        "num_heads": 4,
        "stem_kernel_size": 3,
        "pool_size": 2,
        "window": 4,
        "window_stride": None,
        "local_layers": 2,
        "global_layers": 2,
        "output_dim": 64,
    },
    # Appendix F.1 (MiniGrid, 14x14x3): a 5x5 window around every pixel,
    # global attention over all 196 pixels, 8 heads, embedding 64; 1 local
    # + 2 global layers is the SiT of Tables 4-5.
    "minigrid": {
        "dim": 64,
        "num_heads": 8,
        "stem_kernel_size": 0,
        "pool_size": 1,
        "window": 5,
        "window_stride": 1,
        "local_layers": 1,
        "global_layers": 2,
        "output_dim": 64,
    },
}


def _stem_input_constant(name: str, value: float, role: str, stem_kernel_size: int) -> float:
    """``value`` as a float: finite, and nonzero only with a stem (``role``: what it does to the input)."""
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number. Received: {name}={value!r}")
    if value and not stem_kernel_size:
        raise ValueError(
            f"{name} {role}: it needs stem_kernel_size > 0. "
            f"Received: {name}={value!r}, stem_kernel_size={stem_kernel_size}"
        )
    return float(value)


@tf_keras.saving.register_keras_serializable(package="sit_keras")
class SiTEncoder(Encoder):
    """Symmetry-invariant (and -equivariant) transformer encoder.

    ``images -> [GraphConv2D stem -> max-pool] -> LocalGSA -> GlobalGSA ->
    head``, where the head reads the invariant class token (SiT, SiT*, the
    dihedral SiT), the equivariant patch grid (SeT), or both (SieT); see
    section 4 and Fig. 3 of the SiT paper.

    Symmetry on a square input (``symmetry="rotation"``):

    - ``"sit"`` / ``"sit_star"``: the output is invariant under the four
      90-degree rotations and *not* under flips (one or two triangle sums,
      eq. 4; SiT* is Table 1's "two consecutive sums over triangles").
    - ``"set"``: the patch grid is equivariant, ``f(rot x) = rot f(x)``; the
      head reads it in order, so the output tells orientations apart.
    - ``"siet"``: an invariant and an equivariant part, each exact.
    - ``"sit_dihedral"``: no triangle sum; invariant under all of D4.

    Precision: under ``mixed_float16`` / ``mixed_bfloat16`` the variables are
    float32, the features come out in the compute dtype, and the GSA layers
    keep their score paths and LayerNorm statistics in float32 (see
    ``GraphSymmetricAttention``); the symmetries hold to rounding
    (``tests/test_mixed_precision.py``).

    Mirror-blind configurations: a triangle sum (eq. 4) is what tells a
    pattern from its mirror image, and the class token's entries pass it
    unchanged (Listing 3). The last block of each level returns only class
    tokens, so its triangle sums change nothing: a ``"sit"`` or ``"sit_star"``
    with one local and one global block (``lavacrossing_sit_small.gin`` and the
    demo's SiT; docs/lavacrossing.md) is invariant under all of D4, like
    ``"sit_dihedral"`` (``mirror_blind``). With relative moves, a mirrored state needs "left" and
    "right" swapped, which such an encoder cannot see; two blocks at either
    level make it chiral, and so, more cheaply, does a chiral stem
    (``stem_symmetry="chiral"``, ``stem_kernel_size >= 5``: a kernel that keeps
    the quarter turns but not the reflections, ``sit_keras.graphs``).

    Exactness needs the stem, pooling and windows to map the image grid to
    itself: a square image whose side is a multiple of ``pool_size * window``
    for tiling windows (``pool_size`` for sliding ones).

    Args:
      image_shape: ``(H, W, C)``.
      output_dim: size of the hidden feature vector (Table 2 "hidden dim").
      variant: one of ``VARIANTS``.
      dim: token size of local and global GSA (Table 2 "channels").
      num_heads: attention heads.
      stem_kernel_size: odd kernel of the initial graph convolution, 0 for none.
      stem_symmetry: graph symmetry of the stem, ``None`` for ``symmetry``;
        ``"chiral"`` keeps the rotations and breaks the flips (from a 5x5
        kernel on), which makes a one-block-per-level SiT tell mirror images
        apart.
      stem_depth_multiplier: stem output channels per input channel.
      stem_kind: ``"graph"`` (default): the paper's graph convolution
        (``GraphConv2D``, depth-wise, Listing 4). ``"rotation_pooled"``: a full
        convolution applied in its four quarter turns and max-pooled over them
        (``RotationPooledConv2D``; GSA-Nets' lifting and group pooling on R4).
        Not in the SiT paper: a graph kernel cannot say in which direction a
        neighbour lies, a turned free kernel can, so the stem relates the
        agent's heading to the cell ahead in one filter (docs/lavacrossing.md).
        It keeps the quarter turns exact and breaks the flips, so with it
        ``stem_symmetry`` must be ``None`` or ``"chiral"`` and the encoder is
        not mirror-blind.
      pool_size: max-pooling after the stem, 1 for none.
      pool_padding: pixels of zeros added on every side before the pooling.
        With ``pool_size=2`` and ``pool_padding=1`` the pooling windows sit on
        the corners of 2x2-pixel cells (MiniGrid's, appendix F.1) instead of on
        the cells: each token then sees one pixel of each of four cells, so a
        cell's inner orientation (the agent's heading: which half of its cell
        is red) becomes a pattern over tokens that attention can relate to the
        rest of the map, where pooling whole cells with a rotation-invariant
        stem keeps it only faintly (``benchmarks/lavacrossing_probe.py``).
        The padding is the same on every side, so rotations stay exact.
      window: local attention window in (pooled) pixels.
      window_stride: ``window`` (tiling, default) or 1 (a window per pixel).
      local_layers: local GSA blocks; 0 for none (Table 5's "2 global" SiT):
        each pooled pixel is then embedded by one dense layer and is a token
        of the global grid.
      global_layers: global GSA blocks.
      local_graph_kernel_size: reach of the first local block's graphs on the
        pixel map (may exceed the window), ``None`` to cover the window.
      global_graph_kernel_size: reach of the global graphs, ``None`` for all.
      symmetry: graph symmetry of every GSA layer (and of the stem unless
        ``stem_symmetry`` is given).
      triangles: triangle sums per GSA layer; ``None`` takes the variant's.
      graph_qkv: which of q, k, v get graph matrices (eq. 11).
      equivariant_dim: features per patch of the equivariant part.
      graph_dropout: graph-symmetric dropout rate (section 4).
      mlp_dim: MLP size inside GSA blocks, 0 for none (appendix F.1).
      graph_init_stddev: noise of the near-identity graph initialisation.
      query_key_init_scale: factor on every GSA layer's initial query and
        key weights (``GraphSymmetricAttention``); above 1, attention starts
        selective, which keeps a class token's output dependent on the state
        (the LavaCrossing configs, docs/lavacrossing.md).
      query_key_norm: QK normalisation in every GSA layer
        (``GraphSymmetricAttention``): queries and keys divided by their root
        mean square per head, so no score grows without bound. Not in the
        paper; off by default (it did not keep the LavaCrossing actors
        seeing, docs/lavacrossing.md).
      patch_readout: how the head reads a patch grid. ``"ordered"`` (default,
        the paper's): the SeT's and SieT's grid flattened in order, so the
        features tell orientations apart; a SiT's head reads only its class
        token. ``"rotation_pooled"``: the head (a dense layer on the class
        token and the flattened grid) is applied to the grid in each of its
        four quarter turns and the largest response kept, so the features are
        invariant under the quarter turns (not the flips) while the head still
        weighs every patch by its place, as a CNN's dense layer does on its
        feature map, rather than reading the state only through one
        attention-pooled class token. The SeT and SieT read their output grid;
        the SiT and SiT*, whose global blocks compute only the class token,
        read the global blocks' input (the local tokens), projected to
        ``equivariant_dim`` features per patch, which costs far less than a
        SieT's full last block. Not in the paper (docs/lavacrossing.md,
        "Reading the patch grid"); needs rotation graphs and a square grid.
      head_standardization: standardise the head's input, feature by feature,
        by running statistics of the training batches
        (``sit_keras.layers.feature_standardization``) before the ReLU head.
        Not in the paper. A class token that starts by averaging its tokens
        outputs mostly what every state shares; standardised, what reaches
        the head is what tells states apart (the LavaCrossing actors,
        docs/lavacrossing.md). Per feature, so invariance is kept.
      head_activation: the head's activation, a Keras activation name
        (default ``"relu"``, the paper's). Applied per feature, so every
        symmetry is kept. Not in the paper: in the LavaCrossing actors that did
        not learn, most of the ReLU head's units were zero on every state (no
        gradient reaches them again; docs/lavacrossing.md), which cannot
        happen to ``"elu"``, whose gradient is positive everywhere.
      turn_pooling: how ``patch_readout="rotation_pooled"`` pools the head's
        four readouts ``h_r`` (one per quarter turn ``r`` of the grid).
        ``"max"`` (default): each unit's largest response, so every unit
        picks its own turn. ``"attention"``: one weighting for all units,
        ``sum_r softmax_r(v . h_r) h_r`` with a learned ``v`` (zero at the
        start: the mean over the turns), so the units read the grid in a
        shared frame and keep how the patterns they detect lie relative to
        each other. Both are invariant under the quarter turns (a turn of the
        input permutes the ``h_r``). Not in the paper.
      border_value: the value (on the ``[0, 1]`` scale of the preprocessed
        images) of the pixels beyond the image's edge: the stem convolves the
        image padded with it on every side (``"valid"``), where the default 0
        is the stem's zero padding. Only the stem's outputs within
        ``stem_kernel_size // 2`` pixels of the edge change. For MiniGrid with
        its wall ring cropped (``crop_border``), the wall grey 100/255
        (``minigrid_env.WALL_VALUE``) makes the edge look like the wall it
        stands for, where zeros look like the black floor, so that an agent
        facing the edge cannot tell it from open floor (docs/lavacrossing.md,
        "The edge of the map"). The same padding on every side keeps every
        rotation and flip. Needs a stem. Not in the paper.
      input_offset: subtracted from every pixel (the padding included) before
        the stem: the value the stem reads as zero. A constant shift of the
        input moves each stem map by a constant, i.e. starts the stem with
        other biases (``-input_offset`` times the sum of each map's kernel),
        and keeps every rotation and flip. Default 0. Not in the paper.
      seed: seed of the graph initialisers.
      implementation: ``"fast"`` (default) or ``"reference"`` for every GSA
        layer; both compute the same function with the same weights (see
        ``GraphSymmetricAttention``).
      **kwargs: ``tf_keras.Model`` arguments (``name``, ``dtype``).

    Call arguments:
      images: ``(B, H, W, C)`` uint8 or float.
      training: Python boolean (graph-symmetric dropout).

    Returns:
      ``(B, output_dim)``.

    >>> import sit_keras
    >>> from sit_keras.models import build_encoder
    >>> encoder = build_encoder("sit", (64, 64, 3))
    >>> encoder(tf.zeros((2, 64, 64, 3), tf.uint8)).shape
    TensorShape([2, 64])
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_dim: int = 64,
        variant: str = "sit",
        dim: int = 64,
        num_heads: int = 4,
        stem_kernel_size: int = 3,
        pool_size: int = 2,
        window: int = 4,
        window_stride: int | None = None,
        local_layers: int = 2,
        global_layers: int = 2,
        local_graph_kernel_size: int | None = None,
        global_graph_kernel_size: int | None = None,
        symmetry: str = "rotation",
        triangles: int | None = None,
        graph_qkv: str = "qkv",
        equivariant_dim: int = 4,
        graph_dropout: float = 0.0,
        mlp_dim: int = 0,
        graph_init_stddev: float = 0.1,
        query_key_init_scale: float = 1.0,
        query_key_norm: bool = False,
        seed: int | None = None,
        implementation: str = "fast",
        pool_padding: int = 0,
        stem_symmetry: str | None = None,
        stem_depth_multiplier: int = 1,
        head_standardization: bool = False,
        stem_kind: str = "graph",
        patch_readout: str = "ordered",
        head_activation: str = "relu",
        turn_pooling: str = "max",
        border_value: float = 0.0,
        input_offset: float = 0.0,
        **kwargs: Any,
    ):
        super().__init__(image_shape, output_dim, **kwargs)
        if variant not in VARIANTS:
            raise ValueError(f"Unknown SiT variant {variant!r}. Expected one of: {', '.join(VARIANTS)}.")
        if stem_kind not in STEM_KINDS:
            raise ValueError(f"stem_kind must be one of {', '.join(STEM_KINDS)}. Received: {stem_kind!r}")
        if stem_kind == "rotation_pooled" and stem_symmetry not in (None, "chiral"):
            raise ValueError(
                "A rotation-pooled stem keeps the quarter turns and breaks the flips: stem_symmetry must be "
                f"None or 'chiral'. Received: stem_symmetry={stem_symmetry!r}"
            )
        self.stem_kind = stem_kind
        if stem_kind == "rotation_pooled":
            stem_symmetry = "chiral"
        self.variant = variant
        self.dim = int(dim)
        self.num_heads = int(num_heads)
        self.stem_kernel_size = int(stem_kernel_size)
        self.stem_symmetry = symmetry if stem_symmetry is None else graphs.resolve_symmetry(stem_symmetry)
        self.stem_depth_multiplier = int(stem_depth_multiplier)
        self.pool_size = int(pool_size)
        self.pool_padding = int(pool_padding)
        self.window = int(window)
        self.window_stride = self.window if window_stride is None else int(window_stride)
        self.local_layers = int(local_layers)
        if self.local_layers < 0:
            raise ValueError(f"local_layers must be >= 0. Received: local_layers={local_layers}")
        self.global_layers = int(global_layers)
        self.local_graph_kernel_size = local_graph_kernel_size
        self.global_graph_kernel_size = global_graph_kernel_size
        self.symmetry = symmetry
        self.triangles = VARIANTS[variant]["triangles"] if triangles is None else int(triangles)
        self.graph_qkv = graph_qkv
        self.equivariant_dim = int(equivariant_dim)
        self.graph_dropout = float(graph_dropout)
        self.mlp_dim = int(mlp_dim)
        self.graph_init_stddev = float(graph_init_stddev)
        self.query_key_init_scale = float(query_key_init_scale)
        self.query_key_norm = bool(query_key_norm)
        self.seed = seed
        self.implementation = implementation
        self.uses_invariant = VARIANTS[variant]["invariant"]
        self.uses_equivariant = VARIANTS[variant]["equivariant"]
        self.patch_grid = self._patch_grid()
        self.patch_readout = patch_readout
        self._check_patch_readout()
        if turn_pooling not in TURN_POOLINGS:
            raise ValueError(
                f"turn_pooling must be one of {', '.join(TURN_POOLINGS)}. Received: {turn_pooling!r}"
            )
        if turn_pooling != "max" and patch_readout != "rotation_pooled":
            raise ValueError(
                f"turn_pooling={turn_pooling!r} pools the turns of patch_readout='rotation_pooled'. "
                f"Received: patch_readout={patch_readout!r}"
            )
        self.turn_pooling = turn_pooling
        self.border_value = _stem_input_constant(
            "border_value", border_value, "pads the stem's input", stem_kernel_size
        )
        self.input_offset = _stem_input_constant(
            "input_offset", input_offset, "shifts the stem's input", stem_kernel_size
        )

        shared = {
            "symmetry": symmetry,
            "triangles": self.triangles,
            "graph_qkv": graph_qkv,
            "graph_dropout": self.graph_dropout,
            "mlp_dim": self.mlp_dim,
            "graph_init_stddev": self.graph_init_stddev,
            "query_key_init_scale": self.query_key_init_scale,
            "query_key_norm": self.query_key_norm,
            "seed": seed,
            "implementation": implementation,
            "dtype": self.dtype_policy,
        }
        self.stem = None
        stem_padding = "valid" if self.border_value else "same"  # valid: _stages pads with border_value
        if self.stem_kernel_size and stem_kind == "rotation_pooled":
            channels = int(self.image_shape[-1]) * self.stem_depth_multiplier
            self.stem = RotationPooledConv2D(
                channels,
                self.stem_kernel_size,
                seed=seed,
                padding=stem_padding,
                dtype=self.dtype_policy,
                name="stem",
            )
        elif self.stem_kernel_size:
            self.stem = GraphConv2D(
                self.stem_kernel_size,
                symmetry=self.stem_symmetry,
                depth_multiplier=self.stem_depth_multiplier,
                seed=seed,
                padding=stem_padding,
                dtype=self.dtype_policy,
                name="stem",
            )
        self.local_gsa = self.pixel_embedding = None
        if not self.local_layers:
            # A token per pooled pixel; a per-pixel map keeps the grid's symmetries.
            self.pixel_embedding = tf_keras.layers.Dense(
                self.dim, dtype=self.dtype_policy, name="pixel_embedding"
            )
        else:
            self.local_gsa = LocalGSA(
                window=self.window,
                stride=self.window_stride,
                dim=self.dim,
                num_heads=self.num_heads,
                num_layers=self.local_layers,
                graph_kernel_size=local_graph_kernel_size,
                name="local_gsa",
                **shared,
            )
        self.global_gsa = GlobalGSA(
            self.patch_grid,
            num_heads=self.num_heads,
            num_layers=self.global_layers,
            output_patches=self.uses_equivariant,
            graph_kernel_size=global_graph_kernel_size,
            name="global_gsa",
            **shared,
        )
        self.equivariant_projection = None
        if self.uses_equivariant or self.patch_readout == "rotation_pooled":
            # Acts on each patch alone, so the reduced grid stays equivariant.
            self.equivariant_projection = tf_keras.layers.Dense(
                self.equivariant_dim, dtype=self.dtype_policy, name="equivariant_projection"
            )
        self.head_standardization = bool(head_standardization)
        self.standardization = (
            FeatureStandardization(dtype=self.dtype_policy, name="head_standardization")
            if self.head_standardization
            else None
        )
        self.grid_standardization = None
        if self.head_standardization and self.patch_readout == "rotation_pooled":
            # Statistics per channel, shared by every patch, so the turns of the grid stay turns.
            self.grid_standardization = FeatureStandardization(
                dtype=self.dtype_policy, name="grid_standardization"
            )
        try:
            tf_keras.activations.get(head_activation)
        except ValueError:
            raise ValueError(
                f"head_activation must be a Keras activation name, e.g. 'relu' or 'elu'. "
                f"Received: {head_activation!r}"
            ) from None
        self.head_activation = head_activation
        self.head = tf_keras.layers.Dense(
            self.output_dim, activation=head_activation, dtype=self.dtype_policy, name="head"
        )
        self.turn_score = None
        if self.turn_pooling == "attention":
            self.turn_score = tf_keras.layers.Dense(
                1, use_bias=False, kernel_initializer="zeros", dtype=self.dtype_policy, name="turn_score"
            )

    def _check_patch_readout(self) -> None:
        if self.patch_readout not in PATCH_READOUTS:
            raise ValueError(
                f"patch_readout must be one of {', '.join(PATCH_READOUTS)}. Received: {self.patch_readout!r}"
            )
        if self.patch_readout == "ordered":
            return
        h, w = self.patch_grid
        problems = [
            f"symmetry 'rotation' (received {self.symmetry!r})" if self.symmetry != "rotation" else "",
            f"stem_symmetry 'rotation' or 'chiral' (received {self.stem_symmetry!r})"
            if self.stem_symmetry not in ("rotation", "chiral")
            else "",
            f"a square patch grid (received {h}x{w})" if h != w else "",
        ]
        problems = [p for p in problems if p]
        if problems:
            raise ValueError(f"patch_readout='rotation_pooled' needs {'; '.join(problems)}.")

    def _patch_grid(self) -> tuple[int, int]:
        """The global grid; a ``ValueError`` naming the valid sizes if the image does not fit."""
        h, w, _ = self.image_shape
        if self.pool_padding < 0 or (self.pool_padding and self.pool_size < 2):
            raise ValueError(
                f"pool_padding must be >= 0, and 0 unless pool_size >= 2. "
                f"Received: pool_padding={self.pool_padding}, pool_size={self.pool_size}"
            )
        h, w = h + 2 * self.pool_padding, w + 2 * self.pool_padding
        tiling = self.local_layers and self.window_stride == self.window
        step = self.pool_size * (self.window if tiling else 1)
        if self.pool_size < 1 or h % self.pool_size or w % self.pool_size:
            raise ValueError(self._size_message(step))
        if not self.local_layers:
            return h // self.pool_size, w // self.pool_size
        try:
            windows = graphs.window_indices(
                (h // self.pool_size, w // self.pool_size), self.window, self.window_stride
            )
        except ValueError as error:
            raise ValueError(f"{self._size_message(step)} ({error})") from None
        return int(windows.shape[0]), int(windows.shape[1])

    def _size_message(self, step: int) -> str:
        h, w, c = self.image_shape
        pad = 2 * self.pool_padding
        examples = ", ".join(
            str(step * n - pad) for n in (max(1, 64 // step - 1), max(2, 64 // step), max(3, 64 // step + 1))
        )
        padded = f" once padded by {pad}" if pad else ""
        return (
            f"{self.variant} with pool_size={self.pool_size}, pool_padding={self.pool_padding}, "
            f"window={self.window} and window_stride={self.window_stride} needs images whose height and "
            f"width{padded} are multiples of {step} (e.g. {examples}); square images keep the rotation "
            f"symmetry. Received: image_shape=({h}, {w}, {c})"
        )

    @property
    def mirror_blind(self) -> bool:
        """True when no triangle sum reaches the output: the invariant part is then invariant under flips too.

        Triangle sums run in blocks that are not the last of their level (the
        class-token rows of the last blocks pass them unchanged, Listing 3), so
        a SiT needs two local or two global blocks to tell mirror images apart,
        or a chiral stem (a ``"chiral"`` kernel of 5x5 or more).
        """
        chiral_blocks = max(self.local_layers, self.global_layers) >= 2
        chiral_kernel = self.stem_kernel_size >= (3 if self.stem_kind == "rotation_pooled" else 4)
        chiral_stem = self.stem is not None and self.stem_symmetry == "chiral" and chiral_kernel
        return self.symmetry == "rotation" and not (self.triangles and chiral_blocks) and not chiral_stem

    @property
    def declared_symmetry(self) -> Symmetry:
        """What this configuration promises (section 4, Table 1; ``sit_keras.symmetry``).

        With rotation graphs: the SiT and SiT* are ``SIT`` (C4 invariant, flips
        broken by eq. 4) unless ``mirror_blind`` (then D4 invariant, as the
        dihedral SiT); the SeT's patch grid and the SieT's two parts are C4
        invariant / equivariant. A rotation-pooled readout makes the output C4
        invariant (``SIET_ROTATION_POOLED``, with the SiT's local grid as its
        equivariant part, or ``SET_ROTATION_POOLED``). Other graph symmetries
        keep what their graphs and the stem's keep (``symmetry.graph_symmetry``).
        """
        parts = tuple(
            (part, kind)
            for part, kind, used in (
                ("output", INVARIANT, not self.uses_equivariant),
                ("invariant", INVARIANT, self.uses_invariant),
                ("equivariant", EQUIVARIANT, self.uses_equivariant),
            )
            if used
        )
        h, w, _ = self.image_shape
        if self.patch_readout == "rotation_pooled":
            return SIET_ROTATION_POOLED if self.uses_invariant else SET_ROTATION_POOLED
        if self.symmetry == "rotation" and self.stem_symmetry in ("rotation", "chiral") and h == w:
            if self.uses_equivariant:
                return SIET if self.uses_invariant else SET
            return SIT_MIRROR_BLIND if self.mirror_blind else SIT
        stem = graph_symmetry(self.stem_symmetry, 0, h == w, "image", "", (("output", EQUIVARIANT),))
        blocks = graph_symmetry(
            self.symmetry,
            0 if self.mirror_blind else self.triangles,
            h == w,
            "image",
            "the invariant part is invariant and the patch grid transforms with the input",
            parts,
            reference="SiT section 4, Table 1",
        )
        kept = tuple(e for e in blocks.elements if self.stem is None or e in stem.elements)
        if kept == blocks.elements:
            return blocks
        if not kept:
            return Symmetry("none", "none", "image", "no D4 element keeps both the stem and the blocks")
        return Symmetry(
            group="{e, " + ", ".join(kept) + "}",
            kind=blocks.kind,
            acts_on="image",
            output=blocks.output,
            elements=kept,
            parts=parts,
            reference=blocks.reference,
        )

    # -- forward ---------------------------------------------------------------
    def pool(self, maps: tf.Tensor) -> tf.Tensor:
        """The stem's maps padded by ``pool_padding`` and max-pooled: the tokens' pixels."""
        if self.pool_padding:
            p = self.pool_padding
            maps = tf.pad(maps, [[0, 0], [p, p], [p, p], [0, 0]])
        if self.pool_size > 1 and native.usable(maps.dtype, native.POOL_OPS):
            maps = native.max_pool(maps, self.pool_size)
        elif self.pool_size > 1:
            maps = tf.nn.max_pool2d(maps, self.pool_size, self.pool_size, "VALID")
        return maps

    def _stages(self, images: tf.Tensor, training: bool | None) -> dict[str, tf.Tensor]:
        stages = {}
        x = images
        if self.stem is not None:
            if self.border_value:
                p = self.stem_kernel_size // 2
                x = tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]], constant_values=self.border_value)
            if self.input_offset:
                x = x - self.input_offset
            x = stages["stem"] = self.stem(x)
        if self.pool_size > 1:
            x = stages["pooled"] = self.pool(x)
        if self.local_gsa is not None:
            stages["local"] = self.local_gsa(x, training=training)
        else:
            stages["local"] = self.pixel_embedding(x)
        features = self.global_gsa(stages["local"], training=training)
        if self.global_gsa.output_patches:
            stages["token"], stages["patches"] = features
        else:
            stages["token"] = features
        return stages

    def _parts(self, images: tf.Tensor, training: bool | None) -> dict[str, tf.Tensor]:
        stages = self._stages(images, training)
        parts = {}
        if self.uses_invariant:
            parts["invariant"] = stages["token"]
        if self.uses_equivariant:
            parts["equivariant"] = self.equivariant_projection(stages["patches"])
        elif self.patch_readout == "rotation_pooled":
            # A SiT's global blocks compute only the class token's row (Listing 3), so the grid the
            # head reads is their input: the local blocks' tokens, which rotate with the image.
            parts["equivariant"] = self.equivariant_projection(stages["local"])
        return parts

    def encode(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        parts = self._parts(images, training)
        if self.patch_readout == "rotation_pooled":
            return self._rotation_pooled_head(parts, training)
        pieces = []
        if "invariant" in parts:
            pieces.append(parts["invariant"])
        if "equivariant" in parts:
            h, w = self.patch_grid
            pieces.append(tf.reshape(parts["equivariant"], [-1, h * w * self.equivariant_dim]))
        features = tf.concat(pieces, axis=-1) if len(pieces) > 1 else pieces[0]
        if self.standardization is not None:
            features = self.standardization(features, training=training)
        return self.head(features)

    def _rotation_pooled_head(self, parts: dict[str, tf.Tensor], training: bool | None) -> tf.Tensor:
        """``max_r head([token, flatten(rot^r grid)])`` over the quarter turns ``r`` (or their
        attention-weighted sum, ``turn_pooling``): invariant under them.

        Turning the input turns the grid (the SeT part is equivariant) and
        leaves the token, so it permutes the four readouts and keeps their pool.
        """
        grid = parts["equivariant"]
        if self.grid_standardization is not None:
            grid = self.grid_standardization(grid, training=training)
        h, w = self.patch_grid
        turns = [grid]
        for _ in range(3):  # a quarter turn; tf.image.rot90 would add runtime shape asserts to the graph
            turns.append(tf.transpose(tf.reverse(turns[-1], [2]), [0, 2, 1, 3]))
        readouts = tf.stack([tf.reshape(t, [-1, h * w * self.equivariant_dim]) for t in turns])
        if "invariant" in parts:
            token = parts["invariant"]
            if self.standardization is not None:
                token = self.standardization(token, training=training)
            token = tf.broadcast_to(token[None], [4, tf.shape(token)[0], token.shape[-1]])
            readouts = tf.concat([token, readouts], axis=-1)
        heads = self.head(readouts)
        if self.turn_score is None:
            # The max over the turns of the activated head: invariant whatever the activation.
            return tf.reduce_max(heads, axis=0)
        # One softmax over the turns for all units (a shared frame); a turn of the input permutes both.
        weights = tf.nn.softmax(self.turn_score(heads), axis=0)
        return tf.reduce_sum(weights * heads, axis=0)

    def symmetry_parts(self, images: tf.Tensor, training: bool | None = None) -> dict[str, tf.Tensor]:
        """``{"invariant": (B, dim)}`` and/or ``{"equivariant": (B, h, w, equivariant_dim)}``."""
        return self._parts(self.preprocess(images), training)

    def stages(self, images: tf.Tensor, training: bool | None = None) -> dict[str, tf.Tensor]:
        """What each stage of Fig. 3 computes, for diagnostics (``benchmarks/sit_state_signal.py``).

        ``"stem"`` ``(B, H, W, C')`` (with a stem), ``"pooled"`` (with pooling),
        ``"local"`` ``(B, h, w, D)`` (the local GSA's window tokens, or the embedded
        pooled pixels without local blocks), ``"token"``
        ``(B, D)`` (the global class token after the final LayerNorm) and, for
        the SeT and SieT, ``"patches"`` ``(B, h, w, D)``.
        """
        return self._stages(self.preprocess(images), training)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            variant=self.variant,
            dim=self.dim,
            num_heads=self.num_heads,
            stem_kernel_size=self.stem_kernel_size,
            stem_symmetry=self.stem_symmetry,
            stem_depth_multiplier=self.stem_depth_multiplier,
            stem_kind=self.stem_kind,
            patch_readout=self.patch_readout,
            head_activation=self.head_activation,
            turn_pooling=self.turn_pooling,
            border_value=self.border_value,
            input_offset=self.input_offset,
            pool_size=self.pool_size,
            pool_padding=self.pool_padding,
            window=self.window,
            window_stride=self.window_stride,
            local_layers=self.local_layers,
            global_layers=self.global_layers,
            local_graph_kernel_size=self.local_graph_kernel_size,
            global_graph_kernel_size=self.global_graph_kernel_size,
            symmetry=self.symmetry,
            triangles=self.triangles,
            graph_qkv=self.graph_qkv,
            equivariant_dim=self.equivariant_dim,
            graph_dropout=self.graph_dropout,
            mlp_dim=self.mlp_dim,
            graph_init_stddev=self.graph_init_stddev,
            query_key_init_scale=self.query_key_init_scale,
            query_key_norm=self.query_key_norm,
            seed=self.seed,
            implementation=self.implementation,
            head_standardization=self.head_standardization,
        )
        return config


def _builder(variant: str) -> Callable[..., SiTEncoder]:
    def build(image_shape: Sequence[int], preset: str = "procgen", **overrides: Any) -> SiTEncoder:
        if preset not in PRESETS:
            raise ValueError(f"Unknown SiT preset {preset!r}. Expected one of: {', '.join(PRESETS)}.")
        return SiTEncoder(image_shape, variant=variant, **{**PRESETS[preset], **overrides})

    build.__name__ = f"build_{variant}"
    build.__doc__ = f"Builds the {variant!r} encoder with a preset of ``PRESETS`` (default Procgen, Table 2)."
    return build


build_sit = _builder("sit")
build_sit_star = _builder("sit_star")
build_set = _builder("set")
build_siet = _builder("siet")
build_sit_dihedral = _builder("sit_dihedral")
