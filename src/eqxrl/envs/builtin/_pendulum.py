import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, UInt8

from ..._config import float32
from .._environment import AbstractEnvironment
from .._render import disc, line_segment, paint
from .._spaces import Box
from .._types import TimeStep


class PendulumState(eqx.Module):
    """The pendulum's angle (radians, 0 upright) and angular velocity."""

    theta: Float[Array, ""]
    theta_dot: Float[Array, ""]


class Pendulum(AbstractEnvironment[PendulumState]):
    """Swing a pendulum up and keep it upright, with gymnasium `Pendulum-v1`'s dynamics.

    Observation float32 `[cos(theta), sin(theta), theta_dot]`; action float32 `[1]`,
    the torque, clipped to `[-max_torque, max_torque]`; reward
    `-(angle^2 + 0.1 * theta_dot^2 + 0.001 * torque^2)` with the angle normalized to
    `[-pi, pi)`. Never terminates: `eqxrl.envs.make("Pendulum-v1")` adds gymnasium's
    200-step limit. Reset: angle uniform in `[-pi, pi]`, velocity uniform in `[-1, 1]`.

    **Arguments:**

    - `gravity`, `mass`, `length`, `time_step`, `max_speed`, `max_torque`: physics,
      with gymnasium's defaults (float32 arrays, so they can be randomized by vmap).
    """

    gravity: Float[Array, ""] = eqx.field(default=10.0, converter=float32)
    mass: Float[Array, ""] = eqx.field(default=1.0, converter=float32)
    length: Float[Array, ""] = eqx.field(default=1.0, converter=float32)
    time_step: Float[Array, ""] = eqx.field(default=0.05, converter=float32)
    max_speed: Float[Array, ""] = eqx.field(default=8.0, converter=float32)
    max_torque: Float[Array, ""] = eqx.field(default=2.0, converter=float32)

    @property
    def observation_space(self) -> Box:
        return Box(-jnp.array([1.0, 1.0, 8.0]), jnp.array([1.0, 1.0, 8.0]))

    @property
    def action_space(self) -> Box:
        return Box(-2.0, 2.0, shape=(1,))

    def reset(self, key: PRNGKeyArray) -> tuple[PendulumState, TimeStep]:
        high = jnp.array([math.pi, 1.0], jnp.float32)
        theta, theta_dot = jr.uniform(key, (2,), minval=-high, maxval=high)
        state = PendulumState(theta, theta_dot)
        return state, self._timestep(state, jnp.float32(0.0))

    def step(
        self,
        state: PendulumState,
        action: Float[ArrayLike, " 1"],
        key: PRNGKeyArray,
    ) -> tuple[PendulumState, TimeStep]:
        del key  # deterministic dynamics
        torque = jnp.clip(
            jnp.asarray(action, jnp.float32)[0], -self.max_torque, self.max_torque
        )
        angle = (state.theta + math.pi) % (2 * math.pi) - math.pi
        cost = angle**2 + 0.1 * state.theta_dot**2 + 0.001 * torque**2
        theta_dot = state.theta_dot + self.time_step * (
            3.0 * self.gravity / (2.0 * self.length) * jnp.sin(state.theta)
            + 3.0 / (self.mass * self.length**2) * torque
        )
        theta_dot = jnp.clip(theta_dot, -self.max_speed, self.max_speed)
        next_state = PendulumState(state.theta + self.time_step * theta_dot, theta_dot)
        return next_state, self._timestep(next_state, -cost)

    def render(
        self, state: PendulumState, size: int = 200
    ) -> UInt8[Array, "image_size image_size 3"]:
        """Draw a state as an RGB image, in pure `jax.numpy`: the rod seen from the
        front, upright at angle 0, turning counter-clockwise as the angle grows.

        **Arguments:**

        - `state`: a pendulum state.
        - `size`: the image side in pixels (a Python int, at least 40).

        **Returns:**

        uint8 `[size, size, 3]`.
        """
        if not isinstance(size, int) or size < 40:
            raise ValueError(f"Pendulum.render: size={size!r} must be an int >= 40.")
        centre = jnp.array([size / 2, size / 2], jnp.float32)
        direction = jnp.stack([-jnp.sin(state.theta), -jnp.cos(state.theta)])
        end = centre + direction * (0.4 * size)
        image = jnp.full((size, size, 3), 255, jnp.uint8)
        rod = line_segment(size, size, centre, end, size / 40)
        image = paint(image, rod, (204, 77, 77))
        return paint(image, disc(size, size, centre, size / 60), 0)

    def _timestep(self, state: PendulumState, reward) -> TimeStep:
        observation = jnp.stack(
            [jnp.cos(state.theta), jnp.sin(state.theta), state.theta_dot]
        )
        return TimeStep(
            observation=observation,
            reward=reward,
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )
