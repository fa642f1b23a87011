"""What the hostile and benchmark tests share: tiny runs, and the content of a folder.

``from run_folders import TINY_PPO, file_hashes, run_in_process, sit_train, ...`` (``tests/`` is on
the path, as for ``summaries``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

from sit_keras import folder_lock

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# PPO on MiniGrid LavaGapS5 with a 4-filter CNN: 32 steps over 2 environments, seconds to train.
TINY_PPO = [
    "train_eval.env_name = 'minigrid:LavaGapS5'", "train_eval.num_envs = 2", "train_eval.encoder = 'cnn'",
    "train_eval.encoder_kwargs = {'filters': (4,), 'strides': 1, 'output_dim': 8}",
    "ppo.collect_steps_per_env = 8", "ppo.num_minibatches = 2", "ppo.drac_coef = 0.0",
    "train_eval.total_env_steps = 32", "train_eval.num_eval_episodes = 0",
]  # fmt: skip


def load_benchmark(name: str):
    """The script ``benchmarks/<name>.py`` as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tiny_pi_cartpole_run(root_dir: str) -> None:
    """A tiny AttentionNeuron PPO run on CartPoleSwingUpHarder in ``root_dir`` (32 steps, in this process)."""
    import gin

    from sit_keras.agents import train

    train.train_eval(
        root_dir, agent="ppo", env_name="gymnasium:CartPoleSwingUpHarder-v0", num_envs=2,
        encoder="attention_neuron", encoder_kwargs={"hidden_size": 4, "num_queries": 4}, total_env_steps=32,
        collect_steps_per_env=16, num_minibatches=1, num_epochs=1, drac_coef=0.0, num_eval_episodes=0,
        progress=False,
    )  # fmt: skip
    gin.clear_config()


def sit_train(root_dir: str, bindings: list[str]) -> subprocess.CompletedProcess:
    """This environment's ``sit-train`` on ``root_dir`` with ``bindings``, its output captured."""
    command = [os.path.join(os.path.dirname(sys.executable), "sit-train"), "--root_dir", str(root_dir)]
    command += [a for b in bindings for a in ("--gin_bindings", b)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def tiny_lavacrossing_run(root_dir: str, extra_bindings: tuple[str, ...] = ()) -> None:
    """A tiny PPO run on LavaCrossingS9N1 in ``root_dir`` (``sit-train``; 32 steps unless rebound)."""
    bindings = [*TINY_PPO, "train_eval.env_name = 'minigrid:LavaCrossingS9N1'", "train_eval.progress = False"]
    trained = sit_train(root_dir, [*bindings, *extra_bindings])
    assert trained.returncode == 0, trained.stderr[-2000:]


def run_in_process(program: str, *arguments: str) -> subprocess.CompletedProcess:
    """``program`` (a console script of ``commands.entry_points``) run in this process, as its script runs it.

    For the tests whose subject is what a command does (a refused argument, a damaged file, a
    folder in use, a tiny run to read), not how a process starts: the command's ``main`` sees
    ``sys.argv`` as the script would, and its exit status, stdout and stderr come back as
    ``sit_train``'s do, without the seconds that a new process spends importing TensorFlow.
    Whether that start is silent is ``tests/test_console.py``'s subject, in real processes. Gin's
    configuration and the library log levels the command sets are put back afterwards, so the
    next test starts as before.
    """
    import gin
    from absl import logging as absl_logging

    from sit_keras.commands import entry_points

    argv, verbosity = sys.argv, absl_logging.get_verbosity()
    tf_level = logging.getLogger("tensorflow").level
    out, err = io.StringIO(), io.StringIO()
    gin.clear_config()
    sys.argv = [program, *arguments]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = entry_points.run(program)
            except SystemExit as exit_:  # argparse's --help and its refusals
                status = exit_.code
    finally:
        sys.argv = argv
        gin.clear_config()
        absl_logging.set_verbosity(verbosity)
        logging.getLogger("tensorflow").setLevel(tf_level)
    return subprocess.CompletedProcess([program, *arguments], status or 0, out.getvalue(), err.getvalue())


def file_hashes(folder: str) -> dict[str, str]:
    """Relative path -> SHA-1 of every file under ``folder``, but its lock file (which says who writes)."""
    hashes = {}
    for directory, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                hashes[os.path.relpath(path, folder)] = hashlib.sha1(f.read()).hexdigest()
    hashes.pop(folder_lock.LOCK_FILE, None)
    return hashes
