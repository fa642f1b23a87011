"""Where a SiT actor's class tokens attend, checkpoint by checkpoint (issue 24: why an actor goes blind).

A SiT reads a state out through class tokens: one per local window (eq. 11,
the window's class token) and one for the whole grid (the global GSA). Each
is a learned constant that attends to its window or grid *and to itself*.
The weight a class token puts on its own key carries nothing of the state:
if it grows towards 1, the token's output stops depending on the state, and
the gradient that could teach it to look at the patches vanishes with the
weight on them.

This script rebuilds a run's actor at every checkpoint of a folder (as
``ppo_trace.py``), runs it eagerly on held-out LavaCrossing states (the
probe's unseen levels) and records the attention weights of every class-token
row (every ``tf.nn.softmax`` of the GSA layers' token-only path, whose rows
are the class tokens' queries and whose key 0 is the class token itself).
Per attention (local windows, then global), the means over states, windows
and heads of: the weight on the class token itself, the largest weight, the
entropy (against ``log T`` for uniform attention), and how much the weights
move across states.

    python benchmarks/class_token_attention.py --root_dir runs/shared/sit_chiral_seed0 \\
        --checkpoints runs/shared/sit_chiral_seed0_archive --out class_attention_seed0.json
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from sit_keras.agents.networks.policy_network import build_network, read_description, restore_network
from sit_keras.benchmarking import command_line, parse_or_say_why

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lavacrossing_probe import HELDOUT_SEED_OFFSET, collect  # noqa: E402
from ppo_trace import (  # noqa: E402
    check_run_arguments,
    checkpoint_paths,
    env_steps_of,
    run_parser,
    write_trace,
)


@contextlib.contextmanager
def recorded_softmaxes() -> Iterator[list[np.ndarray]]:
    """Every ``tf.nn.softmax`` output computed eagerly inside the block, in order."""
    records: list[np.ndarray] = []
    original = tf.nn.softmax

    def recording(logits, axis=-1, name=None):
        weights = original(logits, axis=axis, name=name)
        records.append(weights.numpy())
        return weights

    tf.nn.softmax = recording
    try:
        yield records
    finally:
        tf.nn.softmax = original


def class_token_rows(net: Any, observations: np.ndarray) -> list[np.ndarray]:
    """The class-token attention rows of one eager call: ``(heads, states, rows per state, T)`` each."""
    with recorded_softmaxes() as records:
        net(tf.constant(observations), training=False)
    # The token-only path's weights are (H, N, T): one class-token row per window or image.
    states = len(observations)
    return [w.reshape(w.shape[0], states, -1, w.shape[-1]) for w in records if w.ndim == 3]


def summarise(rows: np.ndarray) -> dict[str, float]:
    """Means over heads, states and rows of one attention's class-token rows."""
    keys = rows.shape[-1]
    entropy = -(rows * np.log(np.maximum(rows, 1e-12))).sum(-1)
    return {
        "keys": int(keys),
        "rows_per_state": int(rows.shape[2]),
        "weight_on_itself": float(rows[..., 0].mean()),
        "largest_weight": float(rows.max(-1).mean()),
        "entropy": float(entropy.mean()),
        "uniform_entropy": float(np.log(keys)),
        "weight_std_across_states": float(rows.std(axis=1).mean()),
    }


def measure(net: Any, observations: np.ndarray) -> list[dict[str, float]]:
    """One summary per class-token attention of the actor, from the input side."""
    return [summarise(rows) for rows in class_token_rows(net, observations)]


def parse_args(argv: Sequence[str] | None):
    args = run_parser(__doc__.splitlines()[0], num_states=200).parse_args(argv)
    check_run_arguments(args, min_states=1)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    description = read_description(args.root_dir)
    net = build_network(description)
    data = collect(args.num_states, HELDOUT_SEED_OFFSET, 0.3, np.random.default_rng(args.data_seed))
    if not class_token_rows(net, data["obs"][:1]):
        print(f"{args.root_dir}: its actor has no class-token attention (a SiT encoder).", file=sys.stderr)
        return 2
    start = time.perf_counter()
    trace = []
    for path in checkpoint_paths(args.folder):
        restore_network(net, args.root_dir, description.checkpoint_attribute, path)
        record = {"checkpoint": Path(path).name, "env_steps": env_steps_of(path)}
        record["attentions"] = measure(net, data["obs"])
        trace.append(record)
        itself = ", ".join(f"{a['weight_on_itself']:.3f}" for a in record["attentions"])
        print(f"{record['env_steps']} env steps: class tokens' weight on themselves {itself}", flush=True)
    what = "Where a SiT actor's class tokens attend (local windows, then global), per checkpoint"
    write_trace(what, command_line("class_token_attention.py", argv), args, description, data, trace, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
