"""PPO training under ``tf.distribute`` strategies: mirrored on two logical CPUs, multi-worker.

The harness's ``train_eval`` (``sit_keras.agents.train`` re-exports it) with PPO's settings by name;
the final evaluation runs the policy whose variables the strategy holds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

# Logical devices must be configured before TensorFlow initialises, so the
# run happens in a fresh interpreter.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import sit_keras
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from sit_keras.agents import train

    strategy = train.make_strategy(sys.argv[2])
    results = train.train_eval(
        sys.argv[1], env_name="minigrid:LavaGapS5", num_envs=4, encoder="cnn",
        encoder_kwargs={"filters": (4,), "strides": 1, "output_dim": 8}, total_env_steps=64,
        collect_steps_per_env=16, num_minibatches=4, num_epochs=2, drac_coef=0.1, num_eval_episodes=2,
        progress=False, strategy=strategy,
    )
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, **results}))
    """
)


def test_mirrored_strategy_trains_on_two_cpu_replicas(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "mirrored"), "mirrored"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert results["replicas"] == 2
    assert results["env_steps"] == 64
    # 2 epochs x 4 minibatches, split over the 2 replicas: 4 synchronous steps.
    assert results["train_step"] == 4
    _assert_evaluated_at_the_end(results)


def _assert_evaluated_at_the_end(results):
    (evaluation,) = results["evaluations"]
    assert evaluation["env_steps"] == 64 and evaluation["num_episodes"] == 2
    assert results["EvalAverageReturn"] == evaluation["mean_return"]


def test_multi_worker_strategy_reads_tf_config(tmp_path):
    """One worker, described by TF_CONFIG as a multi-machine job would be."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    tf_config = {"cluster": {"worker": [f"localhost:{port}"]}, "task": {"type": "worker", "index": 0}}
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "multi_worker"), "multi_worker"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CONFIG": json.dumps(tf_config)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert results["replicas"] == 1
    assert results["env_steps"] == 64
    assert results["train_step"] == 8
    _assert_evaluated_at_the_end(results)
