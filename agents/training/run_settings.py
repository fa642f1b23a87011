"""The run's settings: ``RunSettings`` (gin: ``train_eval``), the bindings a run reads, its hyper-parameters.

``train_eval`` reads two gin configurables: ``train_eval`` (``RunSettings``,
what every algorithm shares) and the selected agent's (``ppo``, ``sac``,
``dqn`` or ``bc``; ``ALGORITHMS``). ``check_bindings`` names a binding of any
other configurable, ``split_overrides`` sorts ``train_eval``'s keyword
overrides between the two, and ``hyperparameters`` / ``run_config`` give the
settings a run was built from (TensorBoard's hyper-parameters, ``config.gin``).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

import gin

from sit_keras import mixed_precision
from sit_keras.agents.training import settings_check

# sit-train's agents: the module of each (its SETTINGS is the gin configurable of the same name).
ALGORITHMS: dict[str, str] = {
    "ppo": "sit_keras.agents.algorithms.ppo",
    "sac": "sit_keras.agents.algorithms.sac",
    "dqn": "sit_keras.agents.algorithms.dqn",
    "bc": "sit_keras.agents.algorithms.bc",
}
RUN_CONFIGURABLE = "train_eval"


@gin.configurable(RUN_CONFIGURABLE)
@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What every algorithm shares (gin: ``train_eval.<name>``). ``None``: the agent's default.

    Attributes:
      agent: ``"ppo"`` (+ DrAC), ``"sac"``, ``"dqn"`` (DQN, double DQN or
        C51: ``dqn.algorithm``) or ``"bc"`` (behaviour cloning of a teacher).
      env_name, env_kwargs, num_envs: ``environments.load``'s arguments.
      encoder, encoder_kwargs: the torso by name, for every agent: any
        ``actor_critic.NETWORK_ENCODERS`` name (images: the SiT family, ViT,
        CNNs, ``"data_efficient_cnn"``; vectors: ``"mlp"``), or
        ``"attention_neuron"`` (permutation-invariant, recurrent; PPO and BC).
      total_env_steps: the budget, in environment steps summed over the
        environments (Atari: agent steps; BC: teacher steps recorded).
      log_interval: environment steps between ``collect/`` summaries.
      summary_interval: gradient steps between the learner's ``train/`` summaries.
      eval_interval: environment steps between evaluations; 0: only the
        final one. ``num_eval_episodes = 0``: no evaluation at all.
      eval_num_envs: evaluation environments (default: up to 10, one per episode).
      eval_env_kwargs: updates of ``env_kwargs`` for evaluation (Atari:
        whole games, ``terminal_on_life_loss=False``, unless set here).
      checkpoint_interval, policy_save_interval: environment steps; both
        also at the end. ``policy_save_interval = 0``: no policy exports.
      checkpoint_replay_buffer: save replay-based agents' buffers with each
        checkpoint (exact resumption; a 100k-step Atari buffer is 2.8 GB).
      seed: Python, NumPy, TensorFlow and environment seed.
      deterministic: rerun-exact training (``Run.prefetch``): TensorFlow's
        deterministic kernels (``tf.config.experimental.enable_op_determinism``,
        for the whole process) and replay samples drawn after each collection,
        not prefetched during it. A rerun with the same seed on the same host
        repeats every loss; the cost in speed is in docs/training.md ("Deterministic mode").
      precision: ``"float32"``, ``"mixed_bfloat16"`` or ``"mixed_float16"``
        (``sit_keras.mixed_precision``): the networks' compute dtype; their
        variables and output heads stay float32. ``"auto"``: ``mixed_bfloat16``
        where this host trains the model faster in it (``agents.training.auto_settings``).
      jit_compile: XLA for the train step (``xla.resolve_jit_compile``:
        ``"auto"``, ``True``/``"on"``, ``False``/``"off"``). ``"auto"``: XLA
        where this host trains the model faster with it (``agents.training.auto_settings``).
      progress: show a progress bar.
    """

    agent: str = "ppo"
    env_name: str | None = None
    env_kwargs: Mapping[str, Any] | None = None
    num_envs: int | None = None
    encoder: str | None = None
    encoder_kwargs: Mapping[str, Any] | None = None
    total_env_steps: int | None = None
    log_interval: int | None = None
    summary_interval: int | None = None
    eval_interval: int | None = None
    num_eval_episodes: int | None = None
    eval_num_envs: int | None = None
    eval_env_kwargs: Mapping[str, Any] | None = None
    checkpoint_interval: int | None = None
    policy_save_interval: int | None = None
    checkpoint_replay_buffer: bool = True
    seed: int = 0
    deterministic: bool = False
    precision: str = "float32"
    jit_compile: bool | str = "auto"
    progress: bool = True

    def with_defaults(self, defaults: Mapping[str, Any]) -> RunSettings:
        """The settings with every ``None`` that ``defaults`` names filled in."""
        return dataclasses.replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})

    def check(self) -> None:
        """Raises ``ValueError`` naming the first setting of the wrong type or out of range."""
        settings_check.check(self, RUN_CONFIGURABLE)
        for name in (
            "num_envs",
            "total_env_steps",
            "log_interval",
            "summary_interval",
            "checkpoint_interval",
        ):
            value = getattr(self, name)
            if value is None or value < 1:
                raise ValueError(f"train_eval.{name} must be >= 1. Received: {name}={value}")
        for name in ("eval_interval", "num_eval_episodes", "policy_save_interval"):
            value = getattr(self, name)
            if value is None or value < 0:
                raise ValueError(f"train_eval.{name} must be >= 0. Received: {name}={value}")
        if self.eval_num_envs is not None and self.eval_num_envs < 1:
            raise ValueError(f"train_eval.eval_num_envs must be >= 1. Received: {self.eval_num_envs}")
        if not self.env_name:
            raise ValueError("train_eval.env_name is not set.")
        mixed_precision.check_precision(self.precision, allow_auto=True)

    @property
    def eval_kwargs(self) -> dict[str, Any]:
        """The evaluation environments' keywords (``eval_env_kwargs`` over ``env_kwargs``)."""
        merged = {**dict(self.env_kwargs or {}), **dict(self.eval_env_kwargs or {})}
        if self.env_name.partition(":")[0] == "atari" and "terminal_on_life_loss" not in dict(
            self.eval_env_kwargs or {}
        ):
            merged["terminal_on_life_loss"] = False
        return merged

    @property
    def frames_per_env_step(self) -> int:
        """Emulator frames per environment step: ``frame_skip`` on Atari (default 4), else 1."""
        if self.env_name.partition(":")[0] != "atari":
            return 1
        return int(dict(self.env_kwargs or {}).get("frame_skip", 4))


def algorithm_module(agent: str):
    """The module of ``agent`` (an ``ALGORITHMS`` key)."""
    if agent not in ALGORITHMS:
        raise ValueError(
            f"Unknown agent {agent!r} (train_eval.agent). Expected one of: {', '.join(ALGORITHMS)}."
        )
    return importlib.import_module(ALGORITHMS[agent])


def import_algorithms() -> None:
    """Registers every agent's gin configurable (for parsing configs that bind them)."""
    for agent in ALGORITHMS:
        algorithm_module(agent)


def _bound_configurables() -> list[str]:
    """Names (last selector component) of the configurables that gin holds bindings for.

    gin has no public listing of bound selectors; ``gin.config._CONFIG`` maps
    ``(scope, selector)`` to the bound parameters (gin is pinned in constraints.txt).
    """
    return sorted(
        {selector.rpartition(".")[2] for (_, selector), values in gin.config._CONFIG.items() if values}
    )


def check_bindings(agent: str) -> None:
    """Raises ``ValueError`` if gin holds bindings that a run of ``agent`` would not read.

    A run reads ``train_eval.*`` and ``<agent>.*``: ``sac.batch_size`` in a
    PPO run, or a stale ``train.agent``, would otherwise be ignored.
    """
    unread = [name for name in _bound_configurables() if name not in (RUN_CONFIGURABLE, agent)]
    if unread:
        bindings = ", ".join(_shown_bindings(name) for name in unread)
        raise ValueError(
            f"Gin bindings that a {agent!r} run does not read: {bindings}. "
            f"It reads train_eval.* and {agent}.* (train_eval.agent selects the agent)."
        )


def _shown_bindings(name: str, most: int = 4) -> str:
    """``name.a, name.b`` for up to ``most`` bound parameters of ``name``, then how many more."""
    params = sorted(_bindings_of(name))
    shown = ", ".join(f"{name}.{param}" for param in params[:most])
    return shown + (f" (and {len(params) - most} more {name}.*)" if len(params) > most else "")


def _bindings_of(name: str) -> dict[str, Any]:
    for (_, selector), values in gin.config._CONFIG.items():
        if selector.rpartition(".")[2] == name:
            return values
    return {}


def split_overrides(agent_settings: type, overrides: Mapping[str, Any]) -> tuple[dict, dict]:
    """Keyword overrides of ``train_eval`` split into ``RunSettings`` fields and the agent's.

    Raises:
      ValueError: a name that neither has.
    """
    run_fields = {f.name for f in dataclasses.fields(RunSettings)}
    agent_fields = {f.name for f in dataclasses.fields(agent_settings)}
    unknown = sorted(set(overrides) - run_fields - agent_fields)
    if unknown:
        raise ValueError(
            f"Unknown settings {unknown}: neither train_eval nor {agent_settings.__name__} has them."
        )
    run = {k: v for k, v in overrides.items() if k in run_fields}
    return run, {k: v for k, v in overrides.items() if k in agent_fields}


def hyperparameters(run_settings: RunSettings, settings: Any) -> dict[str, Any]:
    """The run's settings as ``{"train_eval.<field>": value, "<agent>.<field>": value}``.

    They are the frozen settings objects the run was built from (gin's
    bindings, then keyword overrides, then the agent's defaults), so no later
    change can make them differ from what ran.
    """
    values = {f"{RUN_CONFIGURABLE}.{k}": v for k, v in dataclasses.asdict(run_settings).items()}
    values.update({f"{run_settings.agent}.{k}": v for k, v in dataclasses.asdict(settings).items()})
    return values


def run_config(run_settings: RunSettings, settings: Any) -> str:
    """``config.gin``: every setting of the run as a gin binding, which reruns it exactly.

    gin's operative configuration would miss the settings given as keyword
    arguments and show the agent's defaults as ``None``.
    """
    lines = [f"# The settings of this {run_settings.agent!r} run; rerun it with --gin_file config.gin."]
    for name, value in hyperparameters(run_settings, settings).items():
        lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"
