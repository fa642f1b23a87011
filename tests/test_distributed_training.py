"""PPO training under ``tf.distribute`` strategies: mirrored on two logical CPUs, multi-worker.

The harness's ``train_eval`` (``sit_keras.agents.train`` re-exports it) with PPO's settings by name;
the final evaluation runs the policy whose variables the strategy holds. Two workers run as two
processes on loopback (``TF_CONFIG`` each), as on two machines: one model, written by the chief only,
resumed from the chief's checkpoint, and a clear stop when a worker dies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest
import tensorflow as tf

from sit_keras.agents.training.workers import free_loopback_ports

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


# TF_CONFIG is read by both workers of test_two_workers_train_one_model_that_only_the_chief_writes.
@pytest.mark.large
def test_multi_worker_strategy_reads_tf_config(tmp_path):
    """One worker, described by TF_CONFIG as a multi-machine job would be."""
    (port,) = free_loopback_ports(1)
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


# One worker of a two-worker cluster; prints the results and a digest of every variable of its agent.
WORKER_SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys
    import numpy as np
    import sit_keras
    from sit_keras.agents import train
    from sit_keras.agents.training import algorithm

    agents = []
    make_agent = algorithm.Run.make_agent
    algorithm.Run.make_agent = lambda run, make: agents.append(make_agent(run, make)) or agents[-1]
    strategy = train.make_strategy("multi_worker")
    settings = dict(
        env_name="minigrid:LavaGapS5", num_envs=4, encoder="cnn",
        encoder_kwargs={"filters": (4,), "strides": 1, "output_dim": 8}, collect_steps_per_env=16,
        num_minibatches=4, num_epochs=2, num_eval_episodes=2, progress=False, checkpoint_interval=128,
        policy_save_interval=256,
    )
    if len(sys.argv) > 3:  # another agent's settings instead
        settings = {"progress": False, **json.loads(sys.argv[3])}
    results = train.train_eval(sys.argv[1], total_env_steps=int(sys.argv[2]), strategy=strategy, **settings)
    digest = hashlib.sha256()
    for variable in sorted(agents[0].variables, key=lambda v: v.name):
        digest.update(np.asarray(variable.numpy()).tobytes())
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "weights": digest.hexdigest(),
                      "env_steps": results["env_steps"], "train_step": results["train_step"]}))
    """
)
WORKER_TIMEOUT = 300  # seconds: each worker of these short runs ends in well under one


@pytest.fixture
def start_workers(tmp_path):
    """Starts ``count`` worker processes on loopback; kills those still running when the test ends."""
    started: list[subprocess.Popen] = []

    def start(argv_of: Callable[[int], list[str]], count: int = 2) -> list[subprocess.Popen]:
        """Worker ``i`` runs ``argv_of(i)``, writes its output to ``tmp_path / f"worker{i}.out"`` (and
        ``.err``) and its temporary files to ``tmp_path / f"tmp{i}"``, where a worker other than the
        chief trains."""
        ports = free_loopback_ports(count)
        cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
        processes = []
        for index in range(count):
            scratch = tmp_path / f"tmp{index}"
            scratch.mkdir(exist_ok=True)
            tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            env = {**os.environ, "TF_CONFIG": tf_config, "TMPDIR": str(scratch)}
            with (
                open(tmp_path / f"worker{index}.out", "w") as out,
                open(tmp_path / f"worker{index}.err", "w") as err,
            ):
                processes.append(subprocess.Popen(argv_of(index), env=env, stdout=out, stderr=err, text=True))
            processes[-1].output = tmp_path / f"worker{index}"
        started.extend(processes)
        return processes

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _finish(processes: list[subprocess.Popen], timeout: float = WORKER_TIMEOUT) -> list[tuple[int, str, str]]:
    """Each process's exit status, stdout and stderr; kills any still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    outcomes = []
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output = process.output
        stdout, stderr = (output.with_suffix(suffix).read_text() for suffix in (".out", ".err"))
        outcomes.append((process.returncode, stdout, stderr))
    return outcomes


def _worker_results(outcomes) -> list[dict]:
    for status, _, stderr in outcomes:
        assert status == 0, stderr[-3000:]
    return [json.loads(stdout.strip().splitlines()[-1]) for _, stdout, _ in outcomes]


def _newest_checkpoint_steps(root_dir) -> int | None:
    newest = tf.train.latest_checkpoint(str(root_dir / "checkpoints"))
    if newest is None:
        return None
    return int(tf.train.load_checkpoint(newest).get_tensor("env_steps/.ATTRIBUTES/VARIABLE_VALUE"))


def _wait_for_checkpoint(root_dir, processes, timeout: float = WORKER_TIMEOUT) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in processes), "a worker ended before the first checkpoint"
        steps = _newest_checkpoint_steps(root_dir)
        if steps:
            return steps
        time.sleep(1)
    raise AssertionError(f"no checkpoint in {root_dir} after {timeout} s")


def test_two_workers_train_one_model_that_only_the_chief_writes(tmp_path, start_workers):
    root = tmp_path / "run"
    processes = start_workers(lambda i: [sys.executable, "-c", WORKER_SCRIPT, str(root), "256"])
    chief, worker = _worker_results(_finish(processes))
    assert chief["replicas"] == worker["replicas"] == 2
    # The budget counts both workers' steps: 2 iterations of 4 environments x 16 steps on each. Each
    # worker trains on all of its own iteration: 2 epochs x 4 minibatches per iteration.
    assert chief["env_steps"] == worker["env_steps"] == 256
    assert chief["train_step"] == worker["train_step"] == 16
    # Different experience (each worker seeds its own environments), synchronised gradients: one model.
    assert chief["weights"] == worker["weights"]
    assert {"checkpoints", "collect", "train", "eval", "policies"} <= {p.name for p in root.iterdir()}
    assert _newest_checkpoint_steps(root) == 256
    # The other worker wrote nothing in root_dir, and its temporary run folder is gone.
    assert not any((tmp_path / "tmp1").iterdir())


# SAC trains its encoder with its critics: a shared variable list whose order must not depend on
# memory addresses, or the workers create the optimizer's slots in different orders.
SAC_SETTINGS = {
    "agent": "sac", "env_name": "gymnasium:Pendulum-v1", "encoder": "mlp", "actor_fc_layer_params": (8,),
    "critic_fc_layer_params": (8,), "initial_collect_steps": 20, "batch_size": 8, "replay_capacity": 1000,
    "checkpoint_interval": 10, "num_eval_episodes": 1,
}  # fmt: skip


# SAC's replay hand-off on two workers; the PPO tests above prove the synchronised weights.
@pytest.mark.large
def test_two_workers_train_one_sac_model(tmp_path, start_workers):
    root, settings = tmp_path / "run", json.dumps(SAC_SETTINGS)
    processes = start_workers(lambda i: [sys.executable, "-c", WORKER_SCRIPT, str(root), "60", settings])
    chief, worker = _worker_results(_finish(processes))
    assert chief["env_steps"] == worker["env_steps"] >= 60
    assert chief["weights"] == worker["weights"]


# Four worker processes; two workers: test_two_workers_train_one_model_that_only_the_chief_writes,
# resuming: test_harness::test_every_agent_runs_is_killed_resumes_and_writes_the_same_layout.
@pytest.mark.large
def test_two_workers_killed_resume_from_the_chiefs_checkpoint(tmp_path, start_workers):
    root = tmp_path / "run"
    argv = lambda budget: lambda i: [sys.executable, "-c", WORKER_SCRIPT, str(root), str(budget)]  # noqa: E731
    processes = start_workers(argv(1_000_000))
    _wait_for_checkpoint(root, processes)
    for process in processes:
        process.send_signal(signal.SIGKILL)
    _finish(processes)
    resumed_at = _newest_checkpoint_steps(root)
    killed_leftovers = set((tmp_path / "tmp1").iterdir())  # a killed process cleans nothing up
    outcomes = _finish(start_workers(argv(resumed_at + 256)))
    chief, worker = _worker_results(outcomes)
    assert f"at {resumed_at} environment steps" in outcomes[0][1]
    assert chief["env_steps"] == worker["env_steps"] == resumed_at + 256
    assert chief["weights"] == worker["weights"]
    assert set((tmp_path / "tmp1").iterdir()) == killed_leftovers


# Losing the chief is the same heartbeat failure seen from the other side: make test-large.
@pytest.mark.parametrize(
    "killed", [1, pytest.param(0, marks=pytest.mark.large)], ids=["worker killed", "chief killed"]
)
def test_a_killed_worker_stops_the_other_with_one_sentence(tmp_path, start_workers, killed):
    sit_train = os.path.join(os.path.dirname(sys.executable), "sit-train")
    bindings = [
        "train_eval.env_name = 'minigrid:LavaGapS5'", "train_eval.num_envs = 4", "train_eval.encoder = 'cnn'",
        "train_eval.encoder_kwargs = {'filters': (4,), 'strides': 1, 'output_dim': 8}",
        "train_eval.total_env_steps = 1000000", "train_eval.checkpoint_interval = 128",
        "ppo.collect_steps_per_env = 16", "ppo.num_minibatches = 4", "train_eval.progress = False",
    ]  # fmt: skip
    root = tmp_path / "run"
    argv = [sit_train, "--strategy", "multi_worker", "--root_dir", str(root)]
    processes = start_workers(lambda i: argv + [f"--gin_bindings={b}" for b in bindings])
    _wait_for_checkpoint(root, processes)
    processes[killed].send_signal(signal.SIGKILL)
    survivor = processes[1 - killed]
    ((status, _, stderr),) = _finish([survivor], timeout=180)  # TensorFlow's heartbeats: about 45 s here
    _finish([processes[killed]])
    assert status == 1, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("sit-train: another worker of the cluster stopped answering"), stderr[-3000:]
    assert f"/job:worker/replica:0/task:{killed}" in last and "Traceback" not in stderr


def test_a_lost_worker_frees_the_failed_collectives_thread_pool_before_exit():
    # TensorFlow's eager all-reduce leaves its ThreadPool open when a worker is lost; finalised at
    # interpreter exit, it printed "OSError: [Errno 9] Bad file descriptor" after the one sentence.
    import multiprocessing.pool
    import weakref

    from sit_keras.agents.training.workers import release_failed_collective

    pools = []

    def all_reduce():
        pool = multiprocessing.pool.ThreadPool(2)
        pools.append(weakref.ref(pool))
        pool.map(lambda i: 1 / 0, range(2))

    try:
        try:
            all_reduce()
        except ZeroDivisionError as error:
            raise tf.errors.UnavailableError(None, None, "task 1 stopped sending heartbeats") from error
    except tf.errors.UnavailableError as lost:
        held = lost
        assert pools[0]() is not None
        release_failed_collective(lost)
    assert pools[0]() is None
    assert held.__cause__ is not None  # the errors stay; only their frames' locals are gone
