"""CartPoleSwingUpHarder, the cart-pole of the AttentionNeuron paper (Tang & Ha 2021, section 4.1, Table 2).

The paper's agent "observes [x, x_dot, cos(theta), sin(theta), theta_dot],
outputs a scalar action, and is rewarded at each step for getting x close to 0
and cos(theta) close to 1"; the "harder" version randomises the initial
positions and velocities widely. Its source is the cart-pole swing-up of
DeepPILCO as modified in David Ha's estool / learntopredict (the paper's
reference [27]).

The dynamics come from the ``gymnasium-cartpole-swingup`` package
(``CartPoleSwingUpEnv``, a Gymnasium port of the same DeepPILCO cart-pole): the
same equations of motion, Euler steps and constants (gravity 9.82, cart and
pole 0.5 kg, pole 0.6 m, force 10 N per unit of action, friction 0.1, track
+-2.4 m), with the paper's ``dt = 0.01`` s instead of the package's default
0.1 and the paper's 1000-step episodes. What this module sets on top, as the
paper's version has it:

- **initial state**: uniform, ``x`` in ``[-2.4, 2.4]``, ``x_dot`` in
  ``[-10, 10]``, ``theta`` in ``pi + [-pi/2, pi/2]`` (the pole in the lower
  half), ``theta_dot`` in ``[-10, 10]`` (the package draws a narrow Gaussian
  around the hanging pole);
- **reward**: ``(cos(theta) + 1) / 2 * cos(x / 2.4 * pi / 2)`` per step, in
  ``[0, 1]`` (the package's default is ``cos(theta) * cos(x)``);
- **observation**: float32 ``[x, x_dot, cos(theta), sin(theta), theta_dot]``
  in the paper's order (the package's "trig" mode puts sin before cos).

What differs from the paper's environment: an episode that reaches the step
limit is a truncation here (Gymnasium's ``truncated``: a LAST step with
discount 1, so value targets bootstrap through it), where the old gym API
ended it as ``done``; leaving the track is a termination in both. The package
keeps ``theta`` in ``[-pi, pi)``, which no observation or reward can see.

``"gymnasium:CartPoleSwingUpHarder-v0"`` (``loader.load``) makes it; the
sensor keywords (``duplicate_sensors``, ``noise_sensors``,
``sensor_permutation``) give Table 2's and Table 6's columns.
"""

from __future__ import annotations

import math
import os
from typing import Any

import gymnasium
import numpy as np

ENV_ID = "CartPoleSwingUpHarder-v0"
PACKAGE = "gymnasium-cartpole-swingup==0.1.8"
TIME_STEP = 0.01
"""Seconds per step (the paper's environment; the package's default is 0.1)."""
MAX_STEPS = 1000
X_THRESHOLD = 2.4
INITIAL_RANGES = np.array([X_THRESHOLD, 10.0, math.pi / 2, 10.0])
"""Half-widths of the uniform initial state around ``[0, 0, pi, 0]`` (x, x_dot, theta, theta_dot)."""


def reward(state: Any) -> float:
    """The paper's reward of a state ``(x, x_dot, theta, theta_dot)``: pole up times cart centred."""
    x, _, theta, _ = state
    return (math.cos(theta) + 1.0) / 2.0 * math.cos(x / X_THRESHOLD * math.pi / 2.0)


def observation(state: Any) -> np.ndarray:
    """``[x, x_dot, cos(theta), sin(theta), theta_dot]``, float32 (the paper's order)."""
    x, x_dot, theta, theta_dot = state
    return np.array([x, x_dot, math.cos(theta), math.sin(theta), theta_dot], dtype=np.float32)


def make(**kwargs: Any) -> gymnasium.Env:
    """The environment (Gymnasium's entry point for ``ENV_ID``); ``kwargs`` go to the package's class.

    Raises:
      ModuleNotFoundError: the package is not installed (the sentence says how to install it).
    """
    # pygame (the package renders with it) greets on stdout when imported unless told not to.
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        from gymnasium_cartpole_swingup.cartpole_swingup import CartPoleSwingUpEnv
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"{ENV_ID} needs the package {PACKAGE}: install it with "
            f"'pip install --no-deps {PACKAGE}' (make install does)."
        ) from error

    # Defined here, not at module level, so that importing this module (the loader registers
    # the id) needs neither the package nor pygame.
    class CartPoleSwingUpHarder(CartPoleSwingUpEnv):
        """The package's cart-pole with the paper's time step, initial states, reward and observation."""

        def __init__(self, **options: Any):
            options = {"dt": TIME_STEP, "time_limit": MAX_STEPS, "x_threshold": X_THRESHOLD, **options}
            super().__init__(obs_mode="trig", custom_reward_fn=lambda _, __, state: reward(state), **options)
            high = np.full(5, np.finfo(np.float32).max, dtype=np.float32)
            self.observation_space = gymnasium.spaces.Box(-high, high, dtype=np.float32)

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            gymnasium.Env.reset(self, seed=seed)
            offset = self.np_random.uniform(-1.0, 1.0, size=4) * INITIAL_RANGES
            return super().reset(options={"initial_state": offset + np.array([0.0, 0.0, math.pi, 0.0])})

        def _get_obs(self) -> np.ndarray:
            return observation(self.state)

    return CartPoleSwingUpHarder(**kwargs)


def register() -> None:
    """Registers ``ENV_ID`` with Gymnasium (once); the package is imported when it is made."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=f"{__name__}:make")
