"""Where a LavaCrossing PPO actor's learning goes, checkpoint by checkpoint (issue 24).

For every training checkpoint of a ``sit-train`` run (``<root_dir>/checkpoints``,
or a folder of copies kept as the run went, ``--checkpoints``) the actor is
rebuilt from ``policy_network.json``, its weights restored, and measured on
fixed LavaCrossing states (epsilon-expert rollouts on unseen levels, as
``lavacrossing_probe.py``'s held-out set):

- ``relu``: for each Dense layer with a ReLU in the actor (the encoder's
  output layer, the ``fc_layer_params`` layers), the fraction of *dead* units
  (zero on every state: no gradient reaches their weights again) and the mean
  fraction of units active per state;
- ``features``: the torso's output, its mean per-unit standard deviation
  across states and its effective rank (exp of the entropy of the normalised
  singular values): how much the policy's input still depends on the state;
- ``policy``: the logits' mean standard deviation across states, the mean
  entropy, and the greedy accuracy against the expert's optimal moves;
- ``gradients``: the norm of the expert imitation loss's gradient per layer
  (and its ratio to the layer's weight norm): whether a learning signal can
  still reach each part of the network.

Usage::

    python benchmarks/ppo_trace.py --root_dir runs/trace/vit_seed0 \\
        --checkpoints runs/trace/vit_seed0_archive --out runs/trace/vit_seed0_trace.json
    python benchmarks/ppo_trace.py --quick --root_dir <run>   # smoke run, a minute
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import math
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from sit_keras.agents.networks.policy_network import build_network, read_description, restore_network
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    parse_or_say_why,
    write_report,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lavacrossing_probe import HELDOUT_SEED_OFFSET, collect, greedy_accuracy, imitation_loss  # noqa: E402

_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.index$")


def checkpoint_paths(folder: Path) -> list[str]:
    """The checkpoints in ``folder`` (``ckpt-N``), oldest first."""
    found = [(int(m.group(1)), m.group(0)) for f in folder.iterdir() if (m := _CHECKPOINT.match(f.name))]
    return [str(folder / name[: -len(".index")]) for _, name in sorted(found)]


def env_steps_of(path: str) -> int | None:
    """The run's environment-step counter stored in a training checkpoint (None if absent)."""
    reader = tf.train.load_checkpoint(path)
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("env_steps/")]
    return int(reader.get_tensor(names[0])) if names else None


class ReluRecorder:
    """Records the outputs of every ReLU Dense layer of a network on its next call."""

    def __init__(self, net: tf_keras.layers.Layer):
        self.layers = [
            layer
            for layer in net.submodules
            if isinstance(layer, tf_keras.layers.Dense) and layer.activation is tf_keras.activations.relu
        ]
        self.outputs: dict[str, tf.Tensor] = {}
        for layer in self.layers:
            layer.call = self._wrap(layer)

    def _wrap(self, layer: tf_keras.layers.Dense):
        call = layer.call

        def recorded(inputs, *args, **kwargs):
            outputs = call(inputs, *args, **kwargs)
            self.outputs[layer.name] = outputs
            return outputs

        return recorded


def effective_rank(features: np.ndarray) -> float:
    """exp(entropy) of the singular values of the centred features, normalised to sum 1."""
    centred = features - features.mean(axis=0)
    singular = np.linalg.svd(centred.astype(np.float64), compute_uv=False)
    if singular.sum() <= 0:
        return 0.0
    p = singular / singular.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def layer_name(variable: tf.Variable) -> str:
    """A variable's layer: its name without the network prefix and the ``:0`` / kernel suffix."""
    parts = variable.name.split(":")[0].split("/")
    return "/".join(parts[1:-1]) or parts[-1]


def measure(net: Any, recorder: ReluRecorder, data: dict[str, np.ndarray]) -> dict[str, Any]:
    """The measurements of the module docstring for the actor ``net`` on ``data``'s states."""
    obs = tf.constant(data["obs"])
    mask = tf.constant(data["mask"])
    with tf.GradientTape() as tape:
        distribution, _ = net(obs, training=False)
        logits = distribution.logits
        loss = imitation_loss(logits, mask)
    torso_out = net._torso(obs, training=False).numpy()
    grads = tape.gradient(loss, net.trainable_variables)
    relu = {}
    for layer in recorder.layers:
        active = recorder.outputs[layer.name].numpy() > 0
        relu[layer.name] = {
            "units": int(active.shape[-1]),
            "dead_fraction": float((~active.any(axis=0)).mean()),
            "active_per_state": float(active.mean()),
        }
    by_layer: dict[str, list[float]] = {}
    for variable, grad in zip(net.trainable_variables, grads, strict=True):
        g = 0.0 if grad is None else float(tf.reduce_sum(tf.square(grad)))
        w = float(tf.reduce_sum(tf.square(variable)))
        entry = by_layer.setdefault(layer_name(variable), [0.0, 0.0])
        entry[0] += g
        entry[1] += w
    logits_np = logits.numpy()
    probs = tf.nn.softmax(logits).numpy()
    return {
        "relu": relu,
        "features": {
            "dim": int(torso_out.shape[-1]),
            "std_across_states": float(torso_out.std(axis=0).mean()),
            "effective_rank": effective_rank(torso_out),
        },
        "policy": {
            "logit_std_across_states": float(logits_np.std(axis=0).mean()),
            "entropy": float(-(probs * np.log(np.maximum(probs, 1e-12))).sum(axis=1).mean()),
            "expert_accuracy": greedy_accuracy(logits_np, data)["all"],
            "imitation_loss": float(loss),
        },
        "gradients": {
            name: {"norm": math.sqrt(g), "relative": math.sqrt(g) / max(math.sqrt(w), 1e-12)}
            for name, (g, w) in by_layer.items()
        },
    }


def summary(record: dict[str, Any]) -> str:
    """One line of a ``measure`` record: dead ReLU fractions, feature and logit spread, entropy, accuracy."""
    dead = {name: round(r["dead_fraction"], 3) for name, r in record["relu"].items()}
    features, policy = record["features"], record["policy"]
    return (
        f"dead ReLU {dead}, feature std {features['std_across_states']:.4f}, "
        f"rank {features['effective_rank']:.1f}, logit std {policy['logit_std_across_states']:.4f}, "
        f"entropy {policy['entropy']:.3f}, expert accuracy {policy['expert_accuracy']:.3f}"
    )


def run_parser(description: str, num_states: int) -> SentenceParser:
    """The arguments of a per-checkpoint measurement of one run (this script, class_token_attention.py)."""
    parser = SentenceParser(description=description)
    parser.add_argument("--root_dir", required=True, help="a sit-train run folder (policy_network.json)")
    parser.add_argument(
        "--checkpoints", default=None, help="folder of ckpt-N files (default: <root_dir>/checkpoints)"
    )
    parser.add_argument("--num_states", type=int, default=num_states, help="held-out states measured")
    parser.add_argument("--data_seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON report")
    return parser


def check_run_arguments(args, min_states: int) -> None:
    """Raises ``UsageError`` for a folder without a run or checkpoints; sets ``args.folder``."""
    root = Path(args.root_dir)
    if not (root / "policy_network.json").is_file():
        raise UsageError(
            f"--root_dir: {args.root_dir!r} holds no policy_network.json; train with sit-train first."
        )
    folder = Path(args.checkpoints) if args.checkpoints else root / "checkpoints"
    if not folder.is_dir() or not checkpoint_paths(folder):
        raise UsageError(f"No training checkpoint (ckpt-N) in {str(folder)!r}.")
    if args.num_states < min_states:
        raise UsageError(f"--num_states must be >= {min_states}; received {args.num_states}.")
    check_out_file(args.out)
    args.folder = folder


def parse_args(argv: Sequence[str] | None):
    parser = run_parser(__doc__.splitlines()[0], num_states=2000)
    parser.add_argument("--quick", action="store_true", help="200 states, the newest checkpoint only")
    args = parser.parse_args(argv)
    check_run_arguments(args, min_states=2)
    if args.quick:
        args.num_states = min(args.num_states, 200)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    description = read_description(args.root_dir)
    if description.network_kwargs.get("encoder") is None or description.action_spec.maximum != 3:
        print(f"{args.root_dir}: not a LavaCrossing actor (four moves, an encoder torso).", file=sys.stderr)
        return 2
    start = time.perf_counter()
    data = collect(args.num_states, HELDOUT_SEED_OFFSET, 0.3, np.random.default_rng(args.data_seed))
    net = build_network(description)
    recorder = ReluRecorder(net)
    paths = checkpoint_paths(args.folder)[-1:] if args.quick else checkpoint_paths(args.folder)
    trace = []
    for path in paths:
        restore_network(net, args.root_dir, description.checkpoint_attribute, path)
        record = {
            "checkpoint": Path(path).name,
            "env_steps": env_steps_of(path),
            **measure(net, recorder, data),
        }
        trace.append(record)
        print(f"{record['env_steps']} env steps: {summary(record)}", flush=True)
    what = "A PPO actor's dead ReLU units, feature and logit spread, and gradient norms per checkpoint"
    write_trace(what, command_line("ppo_trace.py", argv), args, description, data, trace, start)
    return 0


def write_trace(what: str, command: str, args, description, data, trace: list, start: float) -> None:
    """Writes a per-checkpoint report to ``args.out`` (if given): the run, the states, the trace."""
    if not args.out:
        return
    report = {
        "what": what,
        "command": command,
        "commit": current_commit(),
        "root_dir": args.root_dir,
        "network": description.network_kwargs,
        "states": {"count": int(len(data["obs"])), "seed_offset": HELDOUT_SEED_OFFSET, "epsilon": 0.3},
        "trace": trace,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
    }
    write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
