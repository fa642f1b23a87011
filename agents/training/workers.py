"""Training on more than one worker (``MultiWorkerMirroredStrategy``): who writes, and one shared state.

Every worker runs the same command: it collects with its own environments, and the
strategy averages the gradients of every replica at each train step. What the
strategy does not do, this module does:

- **One writer.** Only the chief (``task_type`` ``chief``, or worker 0 of a cluster
  without one) writes in ``root_dir``; another worker trains in a temporary folder
  that is deleted when it ends (``is_chief``), as Keras does for its callbacks.
- **One starting state.** The strategy makes every worker's variables equal when
  they are created, not when a checkpoint is restored into them; only the chief
  reads ``root_dir``, so after a restore every worker takes the chief's values
  (``broadcast_from_chief``). A worker on another machine needs no copy of them.
- **One count.** ``env_steps`` counts the steps of every worker (``num_workers``).

With one worker (the default strategy, ``MirroredStrategy``, or a one-worker
cluster) each function is the identity or ``True``, and no collective op runs.
"""

from __future__ import annotations

import gc
import re
import socket
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

import tensorflow as tf


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """How many processes train together: 1 unless ``strategy`` is a ``MultiWorkerMirroredStrategy``."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    return strategy.num_replicas_in_sync // len(strategy.extended.worker_devices)


def num_local_replicas(strategy: tf.distribute.Strategy) -> int:
    """The replicas of this process (its devices under the strategy)."""
    return strategy.num_replicas_in_sync // num_workers(strategy)


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This process's place in the cluster: 0 for the chief (or without a cluster), then 1, 2, ...

    Each worker seeds its environments and sampling with it, so that the
    workers collect different experience.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 0
    cluster = resolver.cluster_spec().as_dict()
    tasks = [(kind, i) for kind in ("chief", "worker") for i in range(len(cluster.get(kind, [])))]
    return tasks.index((resolver.task_type, resolver.task_id))


def lost_worker_sentence(error: tf.errors.OpError) -> str:
    """What a worker says when another one stopped answering (a collective op failed), in one sentence."""
    tasks = sorted(set(re.findall(r"/job:\w+/replica:\d+/task:\d+", error.message)))
    who = f" ({', '.join(tasks)})" if tasks else ""
    return (
        f"another worker of the cluster stopped answering{who}, so this one stopped too; restart every "
        "worker with the same command to resume from the chief's newest checkpoint."
    )


def release_failed_collective(error: BaseException) -> None:
    """Frees what the frames of ``error`` (and the errors it came from) hold, now.

    TensorFlow's eager all-reduce maps over a ``ThreadPool`` that it leaves open
    when a collective fails. Held by the error's traceback, the pool would be
    finalised at interpreter exit, after its pipe may be closed, and Python would
    print a traceback of its own after the worker's one sentence.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__
    gc.collect()


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run folder (``True`` for every single-worker strategy)."""
    return num_workers(strategy) == 1 or bool(strategy.extended.should_checkpoint)


def cluster_sum(strategy: tf.distribute.Strategy, value: tf.Tensor) -> tf.Tensor:
    """The sum over the workers of ``value`` (each worker passes its own), in ``value``'s dtype.

    Summed as float64, one dtype for every value, which holds integers (the
    step counters) exactly up to 2**53. Every worker must call it the same
    number of times, in the same order: it is one collective op.
    """
    value = tf.convert_to_tensor(value)
    if num_workers(strategy) == 1:
        return value
    local = num_local_replicas(strategy)
    wide = tf.cast(value, tf.float64)

    def this_worker_once(context: tf.distribute.experimental.ValueContext) -> tf.Tensor:
        return wide if context.replica_id_in_sync_group % local == 0 else tf.zeros_like(wide)

    values = strategy.experimental_distribute_values_from_function(this_worker_once)
    return tf.cast(strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None), value.dtype)


def on_any_worker(strategy: tf.distribute.Strategy, flag: bool) -> bool:
    """Whether ``flag`` holds on at least one worker (a collective op: see ``cluster_sum``)."""
    return bool(cluster_sum(strategy, tf.constant(int(flag), tf.int64)).numpy() > 0)


def shared_variables(objects: Mapping[str, Any]) -> list[tf.Variable]:
    """The strategy's variables among everything ``objects`` track (networks, optimizers, counters).

    Only distributed variables are shared by the workers; a replay buffer's,
    made outside the strategy, holds this worker's own experience.
    """
    root = tf.train.Checkpoint(**objects)  # held here: the view keeps a weak reference only
    view = tf.train.TrackableView(root)
    found: dict[int, tf.Variable] = {}
    for trackable in view.descendants():
        if isinstance(trackable, tf.distribute.DistributedValues) and isinstance(trackable, tf.Variable):
            found.setdefault(id(trackable), trackable)
    return sorted(found.values(), key=lambda variable: variable.name)


def broadcast_from_chief(strategy: tf.distribute.Strategy, variables: Iterable[tf.Variable]) -> None:
    """Every worker's ``variables`` take the chief's values (one collective op per variable)."""
    if num_workers(strategy) == 1:
        return
    chief = is_chief(strategy)
    for variable in variables:
        value = variable.read_value()
        variable.assign(cluster_sum(strategy, value if chief else tf.zeros_like(value)))


def free_loopback_ports(count: int) -> list[int]:
    """``count`` ports free on 127.0.0.1 now, for a cluster of workers on one machine (tests, benchmarks)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()
