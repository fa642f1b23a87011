"""``ppo.WorkerPPOLearner``'s input pipelines: TF-Agents' ``PPOLearner`` pipelines, without autotuning.

With tf.data's autotuning on, collecting a finished PPO run's garbage took tens
of seconds: deleting each iterator waits for its sleeping model thread
(``benchmarks/finished_run_collection.py``). The learner builds the same
pipelines with autotuning off: these tests hold it to TF-Agents' elements.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from run_folders import load_benchmark
from tf_agents.train import ppo_learner

from sit_keras.agents.algorithms import ppo

REPO = Path(__file__).resolve().parents[1]
NUM_ENVS, STEPS = 4, 3


def _trajectories() -> dict[str, tf.Tensor]:
    x = 10.0 * np.arange(NUM_ENVS)[:, None] + np.arange(STEPS)
    return {"x": tf.constant(x, tf.float32), "y": tf.constant(-x, tf.float32)}


def _pipelines(learner_class: type, minibatch_size: int | None, num_samples: int):
    """``learner_class``'s two iterators, on data that changes with each read (as ``IterationData``'s)."""

    def source() -> callable:
        reads = tf.Variable(0.0)  # one per pipeline: its prefetching reads ahead in its own order

        def dataset() -> tf.data.Dataset:
            def read(_):
                reads.assign_add(1.0)
                return tf.nest.map_structure(lambda t: t + reads, _trajectories()), ()

            return tf.data.Dataset.range(num_samples).map(read)

        return dataset

    learner = learner_class.__new__(learner_class)  # only what _create_datasets reads
    learner._experience_dataset_fn = source()
    learner._normalization_dataset_fn = source()
    learner._num_samples, learner._num_epochs = num_samples, 2
    learner._minibatch_size, learner._shuffle_buffer_size = minibatch_size, NUM_ENVS * STEPS
    tf.random.set_seed(7)
    learner._create_datasets(tf.distribute.get_strategy())
    return learner


@pytest.mark.parametrize(
    ("minibatch_size", "num_samples"), [(6, 1), (None, 2)], ids=["minibatches_of_steps", "whole_sequences"]
)
def test_the_learner_reads_tf_agents_elements_without_autotuning(minibatch_size, num_samples):
    ours = _pipelines(ppo.WorkerPPOLearner, minibatch_size, num_samples)
    theirs = _pipelines(ppo_learner.PPOLearner, minibatch_size, num_samples)
    for name in ("_train_dataset", "_normalization_dataset"):
        assert getattr(ours, name).options().autotune.enabled is False, name
        assert getattr(theirs, name).options().autotune.enabled is not False, name  # TF's default
    # Three iterations of a run: every epoch's elements, in the same (seeded) shuffled order.
    per_run = (NUM_ENVS * STEPS // minibatch_size if minibatch_size else num_samples) * 2
    for name in ("_train_iterator", "_normalization_iterator"):
        count = per_run if name == "_train_iterator" else num_samples
        for _ in range(3):
            for _ in range(count):
                a, b = next(getattr(ours, name)), next(getattr(theirs, name))
                tf.nest.map_structure(np.testing.assert_array_equal, a, b)
                if minibatch_size and name == "_train_iterator":  # single steps from any sequences
                    assert a[0]["x"].shape == (minibatch_size, 1)


@pytest.mark.large  # two PPO runs, each in a process of its own (about 80 s)
def test_the_collection_benchmark_times_both_pipelines(tmp_path):
    out = tmp_path / "collection.json"
    script = "benchmarks/finished_run_collection.py"
    done = subprocess.run(
        [sys.executable, script, "--quick", "--out", str(out)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["command"] == f"python {script} --quick --out {out}" and report["commit"]
    assert (report["idle_s"], report["repeats"]) == (5.0, 1)
    results = report["results"]
    for name in ("tf_agents", "learner"):
        (run,) = results[name]["runs"]
        assert run["collect_s"] == results[name]["collect_s_median"] > 0 and run["collected_objects"] > 0
    ratio = results["tf_agents"]["collect_s_median"] / results["learner"]["collect_s_median"]
    assert results["tf_agents_over_learner"] == pytest.approx(ratio)
    assert f"{ratio:.1f}x" in done.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--idle", "-1"], "--idle must be at least 0 seconds"),
        (["--out", "."], "--out must be a file path"),
    ],
)
def test_the_collection_benchmark_refuses_bad_arguments_in_one_sentence(argv, message, capsys):
    assert load_benchmark("finished_run_collection").main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
