"""PPO's reward-free phase on LavaCrossing, simulated: does an actor stay state-dependent? (issue 24)

Before its first success a LavaCrossing PPO run sees only zero rewards, so the
advantages its actor is trained on are value noise, which TF-Agents' PPO
scales to unit variance in every minibatch. This script trains each model's
actor (the TF-Agents ``EncoderActorNetwork`` of its gin config) on exactly
that: for ``--iterations`` iterations of PPO's shape on this task (2048
states, 4 epochs of 8 minibatches of 256, the clipped surrogate with ratio
clipping 0.2, entropy 0.01, global-norm clipping 0.5, Adam 1e-3 with epsilon
1e-5), actions sampled from the current policy on random-walk states and
unit-normal advantages. 25 iterations are the 51,200 environment steps of a
real run's first checkpoint (``ppo_trace.py`` measures the real runs).

Every ``--every`` iterations it measures the actor on fixed states
(``ppo_trace.measure``): the fraction of dead ReLU units, the torso output's
spread across states and effective rank, and the logits' spread across
states. An actor whose logits stop depending on the state before the first
reward can only learn a state-independent action preference from it.

Usage::

    python benchmarks/ppo_noise_phase.py --models cnn,vit_small,sit_small_chiral_m4_corners \\
        --out benchmarks/reference/lavacrossing_noise_phase.json
    python benchmarks/ppo_noise_phase.py --quick      # smoke run, a minute
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from tf_agents.specs import tensor_spec

from sit_keras.agents.networks.actor_critic import EncoderActorNetwork
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    name_list,
    parse_or_say_why,
    seed_list,
    write_report,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lavacrossing_probe import HELDOUT_SEED_OFFSET, IMAGE_SHAPE, MODELS, NUM_ACTIONS, collect  # noqa: E402
from ppo_trace import ReluRecorder, measure, summary  # noqa: E402

# PPO's shape in the Table 4 protocol (configs/minigrid/ppo_lavacrossing.gin with
# collect_steps_per_env = 128, num_minibatches = 8): 16 environments x 128 steps.
STATES_PER_ITERATION = 2048
EPOCHS, MINIBATCHES = 4, 8
CLIP_RATIO, ENTROPY_COEF, MAX_GRAD_NORM = 0.2, 0.01, 0.5
LEARNING_RATE, ADAM_EPSILON = 1e-3, 1e-5


def actor_for(model: str) -> EncoderActorNetwork:
    """The PPO actor of a probe model (its encoder, keyword arguments and dense layers)."""
    spec = MODELS[model]
    observation_spec = tensor_spec.BoundedTensorSpec(IMAGE_SHAPE, tf.uint8, 0, 255)
    action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, NUM_ACTIONS - 1)
    net = EncoderActorNetwork(
        observation_spec, action_spec, spec["encoder"], spec["kwargs"], fc_layer_params=spec["fc"]
    )
    net.create_variables()
    return net


def ppo_step_fn(net: EncoderActorNetwork, optimizer: tf_keras.optimizers.Optimizer):
    """One minibatch update of PPO's clipped surrogate with an entropy bonus (TF-Agents' losses)."""

    @tf.function(autograph=False)  # plain Python control flow; autograph warns on TF-Agents' code
    def step(observations, actions, advantages, old_log_probs):
        with tf.GradientTape() as tape:
            distribution, _ = net(observations, training=True)
            ratio = tf.exp(distribution.log_prob(actions) - old_log_probs)
            clipped = tf.clip_by_value(ratio, 1.0 - CLIP_RATIO, 1.0 + CLIP_RATIO)
            surrogate = tf.minimum(ratio * advantages, clipped * advantages)
            loss = -tf.reduce_mean(surrogate) - ENTROPY_COEF * tf.reduce_mean(distribution.entropy())
        grads = tape.gradient(loss, net.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, MAX_GRAD_NORM)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))

    return step


def run_model(
    model: str,
    seed: int,
    pool: dict[str, np.ndarray],
    probe: dict[str, np.ndarray],
    iterations: int,
    every: int,
) -> dict[str, Any]:
    """Trains ``model``'s actor on noise advantages; its measurements every ``every`` iterations."""
    tf_keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    net = actor_for(model)
    recorder = ReluRecorder(net)
    step = ppo_step_fn(net, tf_keras.optimizers.Adam(LEARNING_RATE, epsilon=ADAM_EPSILON))
    size = STATES_PER_ITERATION // MINIBATCHES

    def record(iteration: int) -> dict[str, Any]:
        return {
            "iteration": iteration,
            "env_steps": iteration * STATES_PER_ITERATION,
            **measure(net, recorder, probe),
        }

    trace = [record(0)]
    start = time.perf_counter()
    for iteration in range(1, iterations + 1):
        chosen = rng.choice(len(pool["obs"]), STATES_PER_ITERATION, replace=False)
        observations = tf.constant(pool["obs"][chosen])
        distribution, _ = net(observations)
        actions = distribution.sample()
        old_log_probs = distribution.log_prob(actions)
        advantages = rng.standard_normal(STATES_PER_ITERATION).astype(np.float32)
        for _ in range(EPOCHS):
            order = rng.permutation(STATES_PER_ITERATION)
            for k in range(MINIBATCHES):
                i = order[k * size : (k + 1) * size]
                a = advantages[i]
                a = (a - a.mean()) / (a.std() + 1e-8)  # TF-Agents' per-minibatch normalisation
                step(
                    tf.gather(observations, i),
                    tf.gather(actions, i),
                    tf.constant(a),
                    tf.gather(old_log_probs, i),
                )
        if iteration % every == 0 or iteration == iterations:
            trace.append(record(iteration))
            print(f"{model} seed {seed} iteration {iteration}: {summary(trace[-1])}", flush=True)
    return {"model": model, "seed": seed, "seconds": time.perf_counter() - start, "trace": trace}


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=name_list(list(MODELS), "--models"),
                        default=["cnn", "vit_small", "sit_small_chiral_m4_corners"],
                        help=f"comma-separated, some of {', '.join(MODELS)}")  # fmt: skip
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--iterations", type=int, default=25, help="PPO iterations of 2048 states")
    parser.add_argument("--every", type=int, default=5, help="measure every N iterations")
    parser.add_argument("--num_states", type=int, default=500, help="states measured")
    parser.add_argument("--out", default=None, help="JSON report")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 iterations, 100 states")
    args = parser.parse_args(argv)
    args.seeds = seed_list(args.seeds)
    for name, low in (("iterations", 1), ("every", 1), ("num_states", 2)):
        if getattr(args, name) < low:
            raise UsageError(f"--{name} must be >= {low}; received {getattr(args, name)}.")
    check_out_file(args.out)
    if args.quick:
        args.iterations, args.every, args.num_states = 2, 1, min(args.num_states, 100)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    start = time.perf_counter()
    # Random-walk states (what a policy near uniform visits) to train on; epsilon-expert states
    # on other levels to measure on (they have optimal moves, for the expert accuracy).
    pool = collect(4 * STATES_PER_ITERATION, 0, 1.0, np.random.default_rng(0))
    probe = collect(args.num_states, HELDOUT_SEED_OFFSET, 0.3, np.random.default_rng(1))
    runs = [
        run_model(model, seed, pool, probe, args.iterations, args.every)
        for model in args.models
        for seed in args.seeds
    ]
    report = {
        "what": "PPO's reward-free phase on LavaCrossing simulated: actors trained on unit-normal advantages",
        "command": command_line("ppo_noise_phase.py", argv),
        "commit": current_commit(),
        "settings": {
            "states_per_iteration": STATES_PER_ITERATION,
            "epochs": EPOCHS,
            "minibatches": MINIBATCHES,
            "clip_ratio": CLIP_RATIO,
            "entropy_coef": ENTROPY_COEF,
            "max_grad_norm": MAX_GRAD_NORM,
            "learning_rate": LEARNING_RATE,
            "adam_epsilon": ADAM_EPSILON,
            "iterations": args.iterations,
            "measured_states": int(len(probe["obs"])),
        },  # fmt: skip
        "models": {m: MODELS[m] for m in args.models},
        "runs": runs,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
