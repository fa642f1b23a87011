"""Can the encoder tell apart LavaCrossing states that need different actions? Imitation of an expert.

A cheap test that separates a *representation* problem (the encoder maps
states that need different actions to nearly the same features: aliasing)
from an *optimisation* problem of reinforcement learning (issue 24): train
each encoder with a linear logits head by supervised imitation of an optimal
expert on MiniGrid LavaCrossing (the SiT paper's observation and relative
actions, ``agents/environments/minigrid_env.py``), with the same data, the
same number of gradient steps and the same optimiser for every model, and
measure on held-out levels:

- greedy accuracy: the fraction of states whose argmax action is optimal,
  split into "open floor" (the agent's 8 neighbouring cells are all empty
  floor) and the other states;
- aliasing: among pairs of held-out states whose encoder features are nearly
  equal (distance below ``--near`` times the median pairwise distance), the
  fraction whose optimal-action sets are disjoint. Measured on the trained
  encoder and, for reference, on the same encoder at initialisation;
- symmetry: how far each of the 7 other symmetries of the square moves the
  trained encoder's features (median relative to the median pairwise
  distance), and, per data set, the best greedy accuracy that *any* exactly
  D4-invariant encoder allows (``d4_invariant_ceiling``). A reflection of a
  LavaCrossing state (the transpose of a level is a level) needs left and
  right swapped, so an encoder that cannot tell reflections apart cannot
  choose between them; ``turn_only`` is the accuracy on the states whose only
  optimal action is left or right.

The expert: in a (cell, heading) state every action turns the agent to a new
heading and then steps forward once (a wall leaves it in place, lava ends the
episode), so value iteration over the (cell, heading) states of a level gives
each state's number of steps to the goal, and an action is optimal when it
attains that minimum (several can be). States come from expert rollouts with
epsilon-random actions (``--epsilon``, so that off-path states appear), one
level per rollout, half of the states from ``LavaCrossingS9N1`` and half from
``S9N2``; training levels use seeds 0, 1, ..., the held-out levels seeds from
1,000,000 on. The training set keeps every visited state (repeats included, as
a behaviour policy sees them); the held-out set keeps each observation once and
only if it never occurs in training (the observation determines the state).
S9N1 has only 42 layouts and S9N2 a few hundred, so unseen seeds mostly
repeat training layouts: held-out states are new (cell, heading, layout)
combinations, and the accuracy on the few states of layouts never seen in
training is reported separately (``new_layout``).

Models (``--models``), with the kwargs of the PPO configs:

- ``cnn``: ``configs/minigrid/lavacrossing_cnn.gin``, conv 16 and 32 (3x3,
  stride 1), dense 64, then the config's extra dense 64 (``ppo.fc_layer_params``);
- ``sit_small``: ``configs/minigrid/lavacrossing_sit_small.gin``;
- ``sit_small_nopool``: the same with ``pool_size=1`` (14x14 tokens);
- ``sit_small_w5``: the same with ``window=5``; ``sit_small_d64``: with ``dim=64``;
  ``sit_small_g2``: with ``global_layers=2`` (the first global block then
  keeps its triangle sums, which break reflections; SiT-small has none:
  the last block of each stage drops them);
- ``sit_small_corners``: with ``pool_padding=1`` (the 2x2 pooling on the
  corners of the 2x2-pixel cells, 8x8 tokens: the heading becomes a pattern
  over tokens); ``sit_small_g2_corners``: both changes,
  ``configs/minigrid/lavacrossing_sit_corners.gin``;
- ``sit_small_chiral_m4_corners``: ``configs/minigrid/lavacrossing_sit_chiral.gin``
  (a chiral 5x5 stem with four maps per channel, corner pooling);
  ``..._translation``: its graphs shared by translations only
  (``lavacrossing_sit_chiral_translation.gin``: the symmetry removed),
  ``..._translation_stem`` / ``..._translation_gsa``: only the stem's or only
  the GSA layers' graphs; ``sit_small_rotation_pooled_m4_corners``: its chiral
  graph stem replaced by a rotation-pooled one (a free kernel in its four
  quarter turns, max-pooled over them; ``SiTEncoder(stem_kind=...)``);
- ``siet_rotation_pooled_m4_corners``: the chiral SiT as a SieT whose head reads
  the class token and the patch grid in its four quarter turns, the largest
  response kept (``SiTEncoder(patch_readout="rotation_pooled")``);
  ``sit_grid_readout_m4_corners`` / ``_m1_corners``: the same readout on a SiT,
  of the global block's input grid (the local tokens), with four or one stem
  maps per colour channel; ``siet_rotation_pooled_m4_corners_sharp_standardized``:
  the SieT readout as PPO trains it, and its cheaper forms ``siet_nt`` (no
  triangle sums), ``siet_nt_m1`` / ``siet_nt_2h`` (and one stem map per channel,
  or 2 heads), ``siet_lite`` (all three cuts; ``_fc64`` with a dense layer of
  64 before the logits) and ``siet_nt_turn_attention`` (the turns pooled by one
  attention weighting, ``SiTEncoder(turn_pooling="attention")``);
- ``vit_small``: ``configs/minigrid/lavacrossing_vit.gin``.

Each is followed by ``Dense(4)`` logits. The loss is the negative log of the
total probability of the optimal actions, ``logsumexp(logits[optimal]) -
logsumexp(logits)``, negated, minimised with Adam on minibatches drawn epoch by
epoch from a shuffled training set.

``--policy_dirs`` scores policies trained with ``sit-train`` instead (or as
well) on the same states: each ``<root_dir>/policies/greedy_policy`` with its
newest weights (``agents.evaluate.load_policy``), its action against the
optimal set, split as above (``policies`` in the report). A PPO policy that
fails a level family here, where the same encoder learns it by imitation,
has not learned it; one that scores well here but fails in the environment
fails on the states its own mistakes lead to.

Usage (one core, one TensorFlow thread)::

    TF_USE_LEGACY_KERAS=1 taskset -c 1 .venv/bin/python benchmarks/lavacrossing_probe.py \\
        --models cnn,sit_small,sit_small_nopool,vit_small --seeds 0 --num_states 20000 \\
        --steps 3000 --out benchmarks/reference/lavacrossing_probe.json
    TF_USE_LEGACY_KERAS=1 taskset -c 1 .venv/bin/python benchmarks/lavacrossing_probe.py --quick
    .venv/bin/python benchmarks/lavacrossing_probe.py --models "" \
        --policy_dirs runs/chiral_1m/sit_chiral_seed1/policies/greedy_policy
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import contextlib
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras


def _one_thread() -> None:
    """One TensorFlow thread (the step times are per core); kept as is once TensorFlow has started (tests)."""
    with contextlib.suppress(RuntimeError):
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)


# isort: split

from minigrid.core.constants import DIR_TO_VEC  # noqa: E402
from minigrid.core.world_object import Goal  # noqa: E402

from sit_keras.agents.evaluate import load_policy, newest_policy_checkpoint  # noqa: E402
from sit_keras.benchmarking import (  # noqa: E402
    SentenceParser,
    UsageError,
    check_out_file,
    current_commit,
    environment,
    parse_or_say_why,
    seed_list,
    write_report,
)
from sit_keras.models import build_encoder  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agents.environments.minigrid_env import _TURNS, WALL_VALUE, SiTMiniGrid  # noqa: E402

IMAGE_SHAPE = (14, 14, 3)
NUM_ACTIONS = 4
LEVELS = ("MiniGrid-LavaCrossingS9N1-v0", "MiniGrid-LavaCrossingS9N2-v0")
HELDOUT_SEED_OFFSET = 1_000_000

_SIT_SMALL = {
    "preset": "minigrid", "dim": 32, "num_heads": 4, "stem_kernel_size": 3, "pool_size": 2,
    "window": 3, "local_layers": 1, "global_layers": 1, "output_dim": 32,
}  # fmt: skip
_CHIRAL_M4_CORNERS = {
    **_SIT_SMALL, "pool_padding": 1, "stem_kernel_size": 5, "stem_symmetry": "chiral",
    "stem_depth_multiplier": 4,
}  # fmt: skip
_SIET_READOUT_PPO = {
    **_CHIRAL_M4_CORNERS,
    "patch_readout": "rotation_pooled",
    "equivariant_dim": 8,
    "query_key_init_scale": 4.0,
    "head_standardization": True,
}
_SIET_LITE = {**_SIET_READOUT_PPO, "num_heads": 2, "stem_depth_multiplier": 1, "triangles": 0}

MODELS: dict[str, dict[str, Any]] = {
    "cnn": {"encoder": "cnn", "kwargs": {"filters": (16, 32), "strides": 1}, "fc": (64,)},
    "sit_small": {"encoder": "sit", "kwargs": dict(_SIT_SMALL), "fc": ()},
    "sit_small_nopool": {"encoder": "sit", "kwargs": {**_SIT_SMALL, "pool_size": 1}, "fc": ()},
    "sit_small_w5": {"encoder": "sit", "kwargs": {**_SIT_SMALL, "window": 5}, "fc": ()},
    "sit_small_d64": {"encoder": "sit", "kwargs": {**_SIT_SMALL, "dim": 64}, "fc": ()},
    "sit_small_g2": {"encoder": "sit", "kwargs": {**_SIT_SMALL, "global_layers": 2}, "fc": ()},
    "sit_small_corners": {"encoder": "sit", "kwargs": {**_SIT_SMALL, "pool_padding": 1}, "fc": ()},
    "sit_small_g2_corners": {
        "encoder": "sit",
        "kwargs": {**_SIT_SMALL, "global_layers": 2, "pool_padding": 1},
        "fc": (),
    },
    # A chiral 5x5 stem (sit_keras.graphs "chiral") instead of a second global block: mirror-aware
    # with one block per level. "_m4": four stem channels per colour channel.
    "sit_small_chiral_corners": {
        "encoder": "sit",
        "kwargs": {**_SIT_SMALL, "pool_padding": 1, "stem_kernel_size": 5, "stem_symmetry": "chiral"},
        "fc": (),
    },
    "sit_small_chiral_m4_corners": {"encoder": "sit", "kwargs": dict(_CHIRAL_M4_CORNERS), "fc": ()},
    # Controls with the symmetry removed (issue 24): graphs shared by translations only, in the stem
    # and the GSA layers ("_translation", configs/minigrid/lavacrossing_sit_chiral_translation.gin),
    # in the stem only ("_translation_stem") or in the GSA layers only ("_translation_gsa").
    "sit_small_chiral_m4_corners_translation": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "stem_symmetry": "translation", "symmetry": "translation"},
        "fc": (),
    },
    "sit_small_chiral_m4_corners_translation_stem": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "stem_symmetry": "translation"},
        "fc": (),
    },
    "sit_small_chiral_m4_corners_translation_gsa": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "symmetry": "translation"},
        "fc": (),
    },
    # Selective attention at initialisation (issue 24): every GSA layer's initial query and key
    # weights times 4 (configs/minigrid/lavacrossing_sit_chiral_sharp.gin).
    "sit_small_chiral_m4_corners_sharp": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "query_key_init_scale": 4.0},
        "fc": (),
    },
    # QK normalisation (issue 24): every GSA layer's queries and keys divided by their root mean
    # square per head, so that no class token's score on its own key grows without bound
    # (configs/minigrid/lavacrossing_sit_chiral_qknorm.gin).
    "sit_small_chiral_m4_corners_qknorm": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "query_key_norm": True},
        "fc": (),
    },
    # The head's input standardised by running statistics of the training batches (issue 24;
    # SiTEncoder head_standardization): with the default initialisation, and with the selective one
    # (configs/minigrid/lavacrossing_sit_chiral_sharp_standardized.gin).
    "sit_small_chiral_m4_corners_standardized": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "head_standardization": True},
        "fc": (),
    },
    "sit_small_chiral_m4_corners_sharp_standardized": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "query_key_init_scale": 4.0, "head_standardization": True},
        "fc": (),
    },
    # The chiral graph stem replaced by a rotation-pooled one (issue 24; SiTEncoder stem_kind): a free
    # 5x5 kernel in its four quarter turns, max-pooled over them, so a stem feature can relate the
    # agent's heading to the direction of a neighbour (configs/minigrid/lavacrossing_sit_rotation_pooled.gin
    # adds the selective start and the standardised head).
    "sit_small_rotation_pooled_m4_corners": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "stem_symmetry": None, "stem_kind": "rotation_pooled"},
        "fc": (),
    },
    # The chiral SiT as a SieT whose head reads the patch grid rotation-pooled (issue 24; SiTEncoder
    # patch_readout): the class token and the 8x8 grid of 8 features, read in its four quarter turns by
    # one dense layer, the max kept (configs/minigrid/lavacrossing_siet_rotation_pooled.gin adds the
    # selective start and the standardised head).
    "siet_rotation_pooled_m4_corners": {
        "encoder": "siet",
        "kwargs": {**_CHIRAL_M4_CORNERS, "patch_readout": "rotation_pooled", "equivariant_dim": 8},
        "fc": (),
    },
    # The SieT readout as PPO trains it (configs/minigrid/lavacrossing_siet_rotation_pooled.gin: the selective
    # start and the standardised head), and with an ELU head, whose units cannot die as ReLUs do.
    "siet_rotation_pooled_m4_corners_sharp_standardized": {
        "encoder": "siet",
        "kwargs": _SIET_READOUT_PPO,
        "fc": (),
    },
    "siet_rotation_pooled_m4_corners_sharp_standardized_elu": {
        "encoder": "siet",
        "kwargs": {**_SIET_READOUT_PPO, "head_activation": "elu"},
        "fc": (),
    },
    # The same readout on a SiT (configs/minigrid/lavacrossing_sit_grid_readout.gin adds the selective start
    # and the standardised head): its global block computes only the class token, and the head reads the
    # global block's input, the local 8x8 tokens projected to 8 features; "_m1": one stem map per channel.
    "sit_grid_readout_m4_corners": {
        "encoder": "sit",
        "kwargs": {**_CHIRAL_M4_CORNERS, "patch_readout": "rotation_pooled", "equivariant_dim": 8},
        "fc": (),
    },
    "sit_grid_readout_m1_corners": {
        "encoder": "sit",
        "kwargs": {
            **_CHIRAL_M4_CORNERS,
            "stem_depth_multiplier": 1,
            "patch_readout": "rotation_pooled",
            "equivariant_dim": 8,
        },
        "fc": (),
    },
    # The cheaper SieT readout as PPO trains it (configs/minigrid/lavacrossing_siet_rotation_pooled_lite.gin:
    # no triangle sums, one stem map per channel, 2 heads), and with the CNN's extra dense layer of 64
    # ReLUs between the encoder and the logits ("_fc64"; ppo.fc_layer_params = (64,)).
    "siet_lite": {"encoder": "siet", "kwargs": _SIET_LITE, "fc": ()},
    # One or two of its three cuts ("_nt": no triangle sums, as
    # lavacrossing_siet_rotation_pooled_no_triangles.gin; "_m1": one stem map per channel; "_2h": 2 heads).
    "siet_nt": {"encoder": "siet", "kwargs": {**_SIET_READOUT_PPO, "triangles": 0}, "fc": ()},
    "siet_nt_m1": {"encoder": "siet", "kwargs": {**_SIET_LITE, "num_heads": 4}, "fc": ()},
    "siet_nt_2h": {"encoder": "siet", "kwargs": {**_SIET_LITE, "stem_depth_multiplier": 4}, "fc": ()},
    # The readout without triangle sums whose head pools the grid's four turns with one attention
    # weighting for all units (SiTEncoder turn_pooling="attention": a shared frame) instead of each
    # unit's max.
    "siet_nt_turn_attention": {
        "encoder": "siet",
        "kwargs": {**_SIET_READOUT_PPO, "triangles": 0, "turn_pooling": "attention"},
        "fc": (),
    },
    # The same two readouts with the image's outside read as MiniGrid's wall grey (SiTEncoder border_value:
    # the observation crops the wall ring, and zero padding looks like the black floor).
    "siet_nt_wall": {
        "encoder": "siet",
        "kwargs": {**_SIET_READOUT_PPO, "triangles": 0, "border_value": WALL_VALUE},
        "fc": (),
    },
    "siet_nt_2h_wall": {
        "encoder": "siet",
        "kwargs": {**_SIET_LITE, "stem_depth_multiplier": 4, "border_value": WALL_VALUE},
        "fc": (),
    },
    # The same two with the stem's input read relative to the wall grey (SiTEncoder input_offset: a constant
    # shift of the input, i.e. other stem biases at the start).
    "siet_nt_wall_centred": {
        "encoder": "siet",
        "kwargs": {
            **_SIET_READOUT_PPO,
            "triangles": 0,
            "border_value": WALL_VALUE,
            "input_offset": WALL_VALUE,
        },
        "fc": (),
    },
    "siet_nt_2h_wall_centred": {
        "encoder": "siet",
        "kwargs": {
            **_SIET_LITE,
            "stem_depth_multiplier": 4,
            "border_value": WALL_VALUE,
            "input_offset": WALL_VALUE,
        },
        "fc": (),
    },
    # The SiT that reads its local grid as PPO trains it (configs/minigrid/lavacrossing_sit_grid_readout.gin:
    # the selective start and the standardised head), and with the wall padding (..._wall.gin).
    "sit_grid_readout_ppo": {
        "encoder": "sit",
        "kwargs": dict(_SIET_READOUT_PPO),
        "fc": (),
    },
    "sit_grid_readout_ppo_wall": {
        "encoder": "sit",
        "kwargs": {**_SIET_READOUT_PPO, "border_value": WALL_VALUE},
        "fc": (),
    },
    # Starts for the 2-head readout without triangle sums, whose seed 0 stays on the plateau: the ELU head
    # (a gradient for every unit) and attention twice as selective at the start (query/key scale 8).
    "siet_nt_2h_elu": {
        "encoder": "siet",
        "kwargs": {**_SIET_LITE, "stem_depth_multiplier": 4, "head_activation": "elu"},
        "fc": (),
    },
    "siet_nt_2h_qk8": {
        "encoder": "siet",
        "kwargs": {**_SIET_LITE, "stem_depth_multiplier": 4, "query_key_init_scale": 8.0},
        "fc": (),
    },
    "siet_lite_fc64": {"encoder": "siet", "kwargs": _SIET_LITE, "fc": (64,)},
    "vit_small": {
        "encoder": "vit",
        "kwargs": {"patch_size": 2, "embed_dim": 64, "num_heads": 8, "num_layers": 2, "mlp_dim": 0},
        "fc": (),
    },
}
"""Probe models: registry encoder name, its kwargs (as in the gin configs) and the dense layers after it."""


# --- the expert -----------------------------------------------------------------------------------


def optimal_actions(env: SiTMiniGrid) -> dict[tuple[int, int, int], np.ndarray]:
    """The optimal-action mask of every (x, y, heading) state of the current level.

    Value iteration over (cell, heading) states: action ``a`` turns the agent
    by ``_TURNS[a]`` quarter turns and steps forward; a wall (or any object it
    cannot overlap) leaves it in place, lava ends the episode (never optimal
    while the goal is reachable), the goal ends it. Each action costs one step.

    Returns:
      ``{(x, y, d): bool mask of shape (4,)}`` for the states from which the goal is reachable.
    """
    grid = env.minigrid.grid
    cells = [
        (x, y)
        for y in range(grid.height)
        for x in range(grid.width)
        if grid.get(x, y) is None
        or (grid.get(x, y).can_overlap() and grid.get(x, y).type not in ("lava", "goal"))
    ]
    states = [(x, y, d) for x, y in cells for d in range(4)]
    index = {s: i for i, s in enumerate(states)}
    goal, lava = len(states), len(states) + 1
    nxt = np.empty((len(states), NUM_ACTIONS), np.int64)
    for i, (x, y, d) in enumerate(states):
        for a in range(NUM_ACTIONS):
            nd = (d + _TURNS[a]) % 4
            fx, fy = x + int(DIR_TO_VEC[nd][0]), y + int(DIR_TO_VEC[nd][1])
            obj = grid.get(fx, fy)
            if isinstance(obj, Goal):
                nxt[i, a] = goal
            elif obj is not None and obj.type == "lava":
                nxt[i, a] = lava
            elif obj is None or obj.can_overlap():
                nxt[i, a] = index[(fx, fy, nd)]
            else:  # wall: turned, not moved
                nxt[i, a] = index[(x, y, nd)]
    dist = np.full(len(states) + 2, np.inf)
    dist[goal] = 0.0
    while True:
        cost = 1.0 + dist[nxt]  # (S, A)
        new = cost.min(axis=1)
        if np.array_equal(new, dist[: len(states)]):
            break
        dist[: len(states)] = new
    cost = 1.0 + dist[nxt]
    best = cost.min(axis=1, keepdims=True)
    return {s: (cost[i] == best[i]) for i, s in enumerate(states) if np.isfinite(best[i, 0])}


def open_floor(env: SiTMiniGrid) -> bool:
    """Whether the agent's 8 neighbouring cells are all empty floor (no wall, lava or goal)."""
    grid = env.minigrid.grid
    x, y = (int(v) for v in env.minigrid.agent_pos)
    return all(grid.get(x + dx, y + dy) is None for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy)


LEFT, RIGHT = 2, 3
_D4: dict[str, Any] = {
    "identity": lambda a: a,
    "rot90": lambda a: np.rot90(a, 1, axes=(1, 2)),
    "rot180": lambda a: np.rot90(a, 2, axes=(1, 2)),
    "rot270": lambda a: np.rot90(a, 3, axes=(1, 2)),
    "transpose": lambda a: np.swapaxes(a, 1, 2),
    "flip_lr": lambda a: a[:, :, ::-1],
    "anti_transpose": lambda a: np.rot90(np.swapaxes(a, 1, 2), 2, axes=(1, 2)),
    "flip_ud": lambda a: a[:, ::-1],
}
"""The eight symmetries of the square on a batch of images ``(N, H, W, C)``."""


def turn_only(mask: np.ndarray) -> np.ndarray:
    """States whose only optimal action is left, or only right: a reflection makes them disjoint."""
    return (mask.sum(axis=1) == 1) & (mask[:, LEFT] | mask[:, RIGHT])


def d4_invariant_ceiling(obs: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    """The best greedy accuracy on this set of any policy whose input features are D4-invariant.

    Images that are rotations or reflections of each other get the same
    features from an exactly D4-invariant encoder, hence the same action. The
    states are grouped by their image's orbit; in each group the best single
    action is the one optimal in most members. (A rotation keeps the optimal
    relative actions; a reflection swaps left and right.)

    Returns:
      ``ceiling``; ``orbits`` (distinct orbits); ``states_sharing_an_orbit``
      (states in orbits with more than one member, repeats included: in the
      training set a repeated state is its own second member);
      ``turn_only_fraction``.
    """
    orbit_key = np.array(
        [min(t(obs[i : i + 1]).tobytes() for t in _D4.values()) for i in range(len(obs))], dtype=object
    )
    correct = 0
    groups: dict[bytes, list[int]] = {}
    for i, key in enumerate(orbit_key):
        groups.setdefault(key, []).append(i)
    for members in groups.values():
        correct += int(mask[members].sum(axis=0).max())
    shared = sum(len(m) for m in groups.values() if len(m) > 1)
    return {
        "ceiling": correct / len(obs),
        "orbits": len(groups),
        "states_sharing_an_orbit": shared,
        "turn_only_fraction": float(turn_only(mask).mean()),
    }


def collect(
    num_states: int,
    first_seed: int,
    epsilon: float,
    rng: np.random.Generator,
    exclude: set[bytes] | None = None,
    train_layouts: set[bytes] | None = None,
) -> dict[str, np.ndarray]:
    """States from epsilon-expert rollouts, one level per rollout, half from N1 and half from N2.

    Level ``N1`` uses seeds ``first_seed, first_seed + 2, ...``, ``N2`` the odd
    offsets. Without ``exclude`` every visited state is kept, repeats included
    (the training distribution, as a behaviour policy sees it). With
    ``exclude`` (the training observations) the set is held out: each
    observation is kept once and only if it is not in ``exclude``.
    ``train_layouts`` (level layouts without the agent) marks the held-out
    states whose layout never occurs in training.

    Returns:
      ``obs`` (N, 14, 14, 3) uint8, ``mask`` (N, 4) bool optimal actions,
      ``open`` (N,) bool open floor, ``level`` (N,) int 0 for N1 / 1 for N2,
      ``heading`` (N,) int, ``layout`` (N,) object bytes of the layout,
      ``new_layout`` (N,) bool; plus ``levels_used`` (scalar).

    Raises:
      RuntimeError: if 1000 levels in a row add no state (``exclude`` holds them all).
    """
    envs = [SiTMiniGrid(level) for level in LEVELS]
    seen: set[bytes] = set()
    obs, masks, opens, levels, headings, layouts = [], [], [], [], [], []
    levels_used = 0
    for which, env in enumerate(envs):
        quota = num_states // 2 + (num_states % 2 if which == 0 else 0)
        count, idle, seed = 0, 0, first_seed + which
        while count < quota:
            observation, _ = env.reset(seed=seed)
            seed += 2
            levels_used += 1
            layout = env.minigrid.grid.encode().tobytes()
            table = optimal_actions(env)
            before = count
            while count < quota:
                m = env.minigrid
                state = (int(m.agent_pos[0]), int(m.agent_pos[1]), int(m.agent_dir))
                mask = table[state]
                key = observation.tobytes()
                if exclude is None or (key not in seen and key not in exclude):
                    seen.add(key)
                    obs.append(observation)
                    masks.append(mask)
                    opens.append(open_floor(env))
                    levels.append(which)
                    headings.append(state[2])
                    layouts.append(layout)
                    count += 1
                if rng.random() < epsilon:
                    action = int(rng.integers(NUM_ACTIONS))
                else:
                    action = int(rng.choice(np.flatnonzero(mask)))
                observation, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
            idle = idle + 1 if count == before else 0
            if idle >= 1000:
                raise RuntimeError(f"{LEVELS[which]}: no new state in 1000 levels ({count} of {quota})")
    layout_array = np.empty(len(layouts), dtype=object)
    layout_array[:] = layouts
    return {
        "obs": np.stack(obs),
        "mask": np.stack(masks),
        "open": np.array(opens),
        "level": np.array(levels),
        "heading": np.array(headings),
        "layout": layout_array,
        "new_layout": np.array([train_layouts is not None and t not in train_layouts for t in layouts]),
        "levels_used": np.array(levels_used),
    }


# --- models, training and measurements ------------------------------------------------------------


class Probe(tf_keras.Model):
    """An encoder, the dense layers of its PPO config, and ``Dense(4)`` logits."""

    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        self.encoder = build_encoder(spec["encoder"], IMAGE_SHAPE, **spec["kwargs"])
        self.hidden = [tf_keras.layers.Dense(n, activation="relu") for n in spec["fc"]]
        self.logits = tf_keras.layers.Dense(NUM_ACTIONS)

    def call(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:
        h = self.encoder(images, training=training)
        for layer in self.hidden:
            h = layer(h)
        return self.logits(h)


def imitation_loss(logits: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Mean of ``-log sum_{a optimal} softmax(logits)_a``."""
    optimal = tf.where(mask, logits, tf.fill(tf.shape(logits), -1e9))
    return tf.reduce_mean(tf.reduce_logsumexp(logits, axis=1) - tf.reduce_logsumexp(optimal, axis=1))


def batched(fn: Any, x: np.ndarray, batch: int = 512) -> np.ndarray:
    """``fn`` over ``x`` in batches, concatenated as numpy."""
    return np.concatenate([fn(tf.constant(x[i : i + batch])).numpy() for i in range(0, len(x), batch)])


def greedy_accuracy(logits: np.ndarray, data: dict[str, np.ndarray]) -> dict[str, Any]:
    """Fraction of states whose argmax action is optimal: all, open floor, other, N1, N2, new layouts."""
    correct = data["mask"][np.arange(len(logits)), logits.argmax(axis=1)]
    result: dict[str, Any] = {"all": float(correct.mean()), "n_all": int(len(correct))}
    subsets = (
        ("open_floor", data["open"]),
        ("other", ~data["open"]),
        ("n1", data["level"] == 0),
        ("n2", data["level"] == 1),
        ("new_layout", data["new_layout"]),
        ("turn_only", turn_only(data["mask"])),
    )
    for name, sel in subsets:
        result[name] = float(correct[sel].mean()) if sel.any() else None
        result[f"n_{name}"] = int(sel.sum())
    return result


def policy_accuracy(policy_dir: str, data: dict[str, np.ndarray]) -> dict[str, Any]:
    """``greedy_accuracy`` of a policy saved by ``sit-train`` (its newest weights) on ``data``'s states."""
    from tf_agents.trajectories import time_step as ts

    policy = load_policy(policy_dir)
    actions = []
    for start in range(0, len(data["obs"]), 256):
        observation = data["obs"][start : start + 256]
        n = len(observation)
        step = ts.TimeStep(
            step_type=np.full(n, ts.StepType.MID, np.int32), reward=np.zeros(n, np.float32),
            discount=np.ones(n, np.float32), observation=observation,
        )  # fmt: skip
        actions.append(np.asarray(policy.action(step).action))
    chosen = np.concatenate(actions)
    return greedy_accuracy(np.eye(data["mask"].shape[1])[chosen], data)


def aliasing(features: np.ndarray, mask: np.ndarray, near: float) -> dict[str, Any]:
    """Aliasing: the fraction of near pairs of states whose optimal-action sets are disjoint.

    Near: feature distance below ``near`` times the median pairwise distance. Also the
    same fraction over all pairs (the base rate) and at 10x the threshold.
    """
    f = features.astype(np.float64)
    sq = (f * f).sum(axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * f @ f.T, 0.0)
    iu = np.triu_indices(len(f), k=1)
    dist = np.sqrt(d2[iu])
    disjoint = ~(mask.astype(np.int64) @ mask.T.astype(np.int64) > 0)[iu]
    median = float(np.median(dist))
    result: dict[str, Any] = {
        "median_pairwise_distance": median,
        "pairs": int(len(dist)),
        "disjoint_fraction_all_pairs": float(disjoint.mean()),
    }
    for label, factor in (("", near), ("_10x", 10 * near)):
        close = dist < factor * median
        result[f"near_threshold{label}"] = factor
        result[f"near_pairs{label}"] = int(close.sum())
        result[f"near_disjoint_fraction{label}"] = float(disjoint[close].mean()) if close.any() else None
    return result


def symmetry_distances(features_fn: Any, obs: np.ndarray) -> dict[str, float]:
    """Median over states of ``|f(g x) - f(x)|`` / the median pairwise distance, for each D4 element ``g``.

    0 means the encoder cannot tell a state from its image under ``g``.
    """
    f = batched(features_fn, obs).astype(np.float64)
    sample = f[: min(len(f), 1000)]
    pairwise = np.linalg.norm(sample[:, None] - sample[None], axis=-1)
    median = float(np.median(pairwise[np.triu_indices(len(sample), k=1)]))
    result = {}
    for name, transform in _D4.items():
        if name != "identity":
            moved = batched(features_fn, np.ascontiguousarray(transform(obs))).astype(np.float64)
            result[name] = float(np.median(np.linalg.norm(moved - f, axis=1)) / median)
    return result


def run_model(
    name: str,
    seed: int,
    train: dict[str, np.ndarray],
    heldout: dict[str, np.ndarray],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Trains one probe for ``args.steps`` Adam steps and measures it on the held-out set."""
    spec = MODELS[name]
    tf_keras.utils.set_random_seed(seed)
    model = Probe(spec)
    model(tf.zeros((1, *IMAGE_SHAPE), tf.uint8))
    optimizer = tf_keras.optimizers.Adam(args.learning_rate)

    @tf.function
    def train_step(images: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = imitation_loss(model(images, training=True), mask)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    @tf.function
    def logits_fn(images: tf.Tensor) -> tf.Tensor:
        return model(images, training=False)

    @tf.function
    def features_fn(images: tf.Tensor) -> tf.Tensor:
        return tf.cast(model.encoder(images, training=False), tf.float32)

    init_alias = aliasing(batched(features_fn, heldout["obs"]), heldout["mask"], args.near)
    rng = np.random.default_rng(seed)
    n = len(train["obs"])
    order = rng.permutation(n)
    cursor = 0
    losses = []
    step_times = []
    start = time.perf_counter()
    for step in range(args.steps):
        if cursor + args.batch_size > n:
            order, cursor = rng.permutation(n), 0
        idx = order[cursor : cursor + args.batch_size]
        cursor += args.batch_size
        t0 = time.perf_counter()
        loss = float(train_step(tf.constant(train["obs"][idx]), tf.constant(train["mask"][idx])))
        step_times.append(time.perf_counter() - t0)
        losses.append(loss)
        if (step + 1) % max(1, args.steps // 10) == 0:
            recent = np.mean(losses[-50:])
            print(f"  {name} seed {seed}: step {step + 1}/{args.steps} loss {recent:.4f}", flush=True)
    train_seconds = time.perf_counter() - start
    window = max(1, min(50, args.steps // 10))
    # A fixed random subset of the training states, as many as held out.
    sub = np.random.default_rng(12345).permutation(len(train["obs"]))[: len(heldout["obs"])]
    train_sub = {k: v[sub] for k, v in train.items() if k != "levels_used"}
    heldout_logits = batched(logits_fn, heldout["obs"])
    heldout_mask = tf.constant(heldout["mask"])
    timed = step_times[min(10, len(step_times) - 1) :]  # skip tracing and warm-up
    curve_every = max(1, args.steps // 20)
    return {
        "model": name,
        "seed": seed,
        "encoder": spec["encoder"],
        "encoder_kwargs": {k: list(v) if isinstance(v, tuple) else v for k, v in spec["kwargs"].items()},
        "fc_layer_params": list(spec["fc"]),
        "parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
        "feature_dim": int(model.encoder.output_dim),
        "loss_first": float(np.mean(losses[:window])),
        "loss_last": float(np.mean(losses[-window:])),
        "loss_window_steps": window,
        "loss_curve": [
            [i + curve_every, float(np.mean(losses[i : i + curve_every]))]
            for i in range(0, args.steps, curve_every)
        ],
        "heldout_loss": float(imitation_loss(tf.constant(heldout_logits), heldout_mask)),
        "train_greedy_accuracy": greedy_accuracy(batched(logits_fn, train_sub["obs"]), train_sub),
        "heldout_greedy_accuracy": greedy_accuracy(heldout_logits, heldout),
        "heldout_aliasing": aliasing(batched(features_fn, heldout["obs"]), heldout["mask"], args.near),
        "heldout_aliasing_at_init": init_alias,
        "symmetry_feature_distance": symmetry_distances(features_fn, heldout["obs"]),
        "train_seconds": train_seconds,
        "seconds_per_step_median": float(np.median(timed)),
        "seconds_per_step_mean": float(np.mean(timed)),
        "first_step_seconds": float(step_times[0]),
    }


# --- command line ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses and validates the arguments; raises ``UsageError`` with one sentence on a bad one."""
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,sit_small,sit_small_nopool,vit_small",
                        help=f"comma-separated, some of {', '.join(MODELS)}")  # fmt: skip
    parser.add_argument("--seeds", default="0", help="comma-separated model seeds (initialisation, batches)")
    parser.add_argument("--num_states", type=int, default=20000, help="distinct training states")
    parser.add_argument("--num_heldout", type=int, default=2000, help="distinct held-out states")
    parser.add_argument("--steps", type=int, default=3000, help="Adam steps per model (the same for all)")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--epsilon", type=float, default=0.3, help="rollouts' random-action probability")
    parser.add_argument("--near", type=float, default=0.01, help="near pairs: distance < near * median")
    parser.add_argument("--data_seed", type=int, default=0, help="seed of the rollouts' random actions")
    parser.add_argument("--out", default=None, help="JSON report")
    parser.add_argument("--policy_dirs", default="", help="comma-separated <root_dir>/policies/greedy_policy")
    parser.add_argument("--quick", action="store_true", help="smoke run, under a minute")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.policy_dirs = [p.strip() for p in args.policy_dirs.split(",") if p.strip()]
    unknown = [m for m in models if m not in MODELS]
    if (not models and not args.policy_dirs) or unknown:
        raise UsageError(f"--models must name some of {', '.join(MODELS)}; received {args.models!r}.")
    missing = [p for p in args.policy_dirs if not (Path(p) / "saved_model.pb").is_file()]
    if missing:
        raise UsageError(f"--policy_dirs: {missing[0]!r} holds no saved policy (saved_model.pb).")
    args.models = models
    args.seeds = seed_list(args.seeds)
    for name, low in (("num_states", 2), ("num_heldout", 2), ("steps", 1), ("batch_size", 1)):
        if getattr(args, name) < low:
            raise UsageError(f"--{name} must be >= {low}; received {getattr(args, name)}.")
    if not (math.isfinite(args.learning_rate) and args.learning_rate > 0):
        raise UsageError(f"--learning_rate must be a positive number; received {args.learning_rate}.")
    if not (0.0 <= args.epsilon <= 1.0):
        raise UsageError(f"--epsilon must be in [0, 1]; received {args.epsilon}.")
    if not (math.isfinite(args.near) and 0 < args.near < 1):
        raise UsageError(f"--near must be in (0, 1); received {args.near}.")
    if args.num_heldout > 20000:
        raise UsageError(f"--num_heldout must be <= 20000 (all pairs compared); received {args.num_heldout}.")
    check_out_file(args.out)
    if args.quick:
        args.num_states, args.num_heldout = min(args.num_states, 600), min(args.num_heldout, 200)
        args.steps, args.batch_size = 40, min(args.batch_size, 32)
    if args.batch_size > args.num_states:
        raise UsageError(
            f"--batch_size ({args.batch_size}) must not exceed --num_states ({args.num_states})."
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the probe; returns the exit code (2 on a bad argument)."""
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    _one_thread()
    commit = current_commit()
    start = time.perf_counter()
    rng = np.random.default_rng(args.data_seed)
    t0 = time.perf_counter()
    train = collect(args.num_states, 0, args.epsilon, rng)
    heldout = collect(
        args.num_heldout,
        HELDOUT_SEED_OFFSET,
        args.epsilon,
        rng,
        exclude={o.tobytes() for o in train["obs"]},
        train_layouts=set(train["layout"]),
    )
    data_seconds = time.perf_counter() - t0

    def describe(data: dict[str, np.ndarray]) -> dict[str, Any]:
        optimal_count = data["mask"].sum(axis=1)
        return {
            "states": int(len(data["obs"])),
            "distinct_states": len({o.tobytes() for o in data["obs"]}),
            "levels": int(data["levels_used"]),
            "distinct_layouts": len(set(data["layout"])),
            "new_layout_states": int(data["new_layout"].sum()),
            "open_floor_fraction": float(data["open"].mean()),
            "n1_fraction": float((data["level"] == 0).mean()),
            "optimal_actions_per_state": {str(k): int((optimal_count == k).sum()) for k in range(1, 5)},
            "heading_counts": [int((data["heading"] == d).sum()) for d in range(4)],
            # Accuracy of a policy that ignores the observation: the most often optimal action.
            "best_constant_action_accuracy": float(data["mask"].mean(axis=0).max()),
            "d4_invariant_ceiling": d4_invariant_ceiling(data["obs"], data["mask"]),
        }

    data_info = {"train": describe(train), "heldout": describe(heldout), "seconds": data_seconds}
    print(f"data: {data_info}", flush=True)
    results = []
    for name in args.models:
        for seed in args.seeds:
            record = run_model(name, seed, train, heldout, args)
            results.append(record)
            acc, alias = record["heldout_greedy_accuracy"], record["heldout_aliasing"]
            print(
                f"{name} seed {seed}: held-out greedy {acc['all']:.3f} (open {acc['open_floor']}, "
                f"other {acc['other']}, turn-only {acc['turn_only']}), "
                f"train greedy {record['train_greedy_accuracy']['all']:.3f}, "
                f"loss {record['loss_first']:.3f}->{record['loss_last']:.3f}, near pairs "
                f"{alias['near_pairs']} disjoint {alias['near_disjoint_fraction']}, "
                f"{1000 * record['seconds_per_step_median']:.1f} ms/step",
                flush=True,
            )
    policies = []
    for policy_dir in args.policy_dirs:
        record = {
            "policy_dir": policy_dir,
            "weights": newest_policy_checkpoint(policy_dir),  # None: the SavedModel's own
            "train_greedy_accuracy": policy_accuracy(policy_dir, train),
            "heldout_greedy_accuracy": policy_accuracy(policy_dir, heldout),
        }
        policies.append(record)
        acc = record["heldout_greedy_accuracy"]
        print(f"{policy_dir}: held-out greedy {acc['all']:.3f} (N1 {acc['n1']:.3f}, N2 {acc['n2']:.3f})")
    report = {
        "what": "LavaCrossing imitation probe: encoder + Dense(4) trained on an optimal expert's action sets",
        # Quoted as a shell needs it (an empty --models must stay an argument).
        "command": shlex.join(["python", *sys.argv] if argv is None else ["python", __file__, *argv]),
        "commit": commit,
        "settings": {
            k: getattr(args, k)
            for k in (
                "models",
                "seeds",
                "num_states",
                "num_heldout",
                "steps",
                "batch_size",
                "learning_rate",
                "epsilon",
                "near",
                "data_seed",
                "quick",
                "policy_dirs",
            )
        },  # fmt: skip
        "levels": list(LEVELS),
        "heldout_first_level_seed": HELDOUT_SEED_OFFSET,
        "data": data_info,
        "environment": environment(),
        "results": results,
        "policies": policies,
        "wall_seconds": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
