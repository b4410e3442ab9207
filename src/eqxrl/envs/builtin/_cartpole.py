import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray, UInt8

from ..._config import float32
from .._checks import check_action
from .._environment import AbstractEnvironment
from .._render import disc, line_segment, paint, rectangle
from .._spaces import Box, Discrete
from .._types import TimeStep


class CartPoleState(eqx.Module):
    """The cart-pole's physical state, one float32 vector (also the observation).

    One vector rather than four scalars, so that a step updates it in one fused
    operation (and the observation needs no stacking): fewer kernels per step.

    **Arguments:**

    - `physics`: `[x, x_dot, theta, theta_dot]`: cart position and velocity, pole
      angle (radians, 0 upright) and angular velocity; also readable by name.
    """

    physics: Float[Array, "4"]

    @property
    def x(self) -> Float[Array, ""]:
        """Cart position."""
        return self.physics[0]

    @property
    def x_dot(self) -> Float[Array, ""]:
        """Cart velocity."""
        return self.physics[1]

    @property
    def theta(self) -> Float[Array, ""]:
        """Pole angle (radians, 0 upright)."""
        return self.physics[2]

    @property
    def theta_dot(self) -> Float[Array, ""]:
        """Pole angular velocity."""
        return self.physics[3]


class CartPole(AbstractEnvironment[CartPoleState]):
    """The classic cart-pole balancing task, with gymnasium `CartPole-v1`'s dynamics.

    Same physics (explicit Euler integration, gymnasium's default), same
    termination thresholds (|x| > 2.4, |theta| > 12 degrees), same reset distribution
    (each state variable uniform in [-0.05, 0.05]) and same reward (1 on every step,
    including the last). Observations are float32 `[x, x_dot, theta, theta_dot]`;
    actions are 0 (push left) and 1 (push right). There is no time limit:
    `eqxrl.envs.make("CartPole-v1")` adds gymnasium's 500-step limit.

    Physics constants are float32 array fields, so a `jax.vmap` over a CartPole with
    batched constants trains on randomized dynamics.

    **Arguments:**

    - `gravity`, `cart_mass`, `pole_mass`, `pole_half_length`, `force_magnitude`,
      `time_step`: physics, with gymnasium's defaults.
    """

    gravity: Float[Array, ""] = eqx.field(default=9.8, converter=float32)
    cart_mass: Float[Array, ""] = eqx.field(default=1.0, converter=float32)
    pole_mass: Float[Array, ""] = eqx.field(default=0.1, converter=float32)
    pole_half_length: Float[Array, ""] = eqx.field(default=0.5, converter=float32)
    force_magnitude: Float[Array, ""] = eqx.field(default=10.0, converter=float32)
    time_step: Float[Array, ""] = eqx.field(default=0.02, converter=float32)

    x_threshold = 2.4
    theta_threshold = 12 * 2 * math.pi / 360

    @property
    def observation_space(self) -> Box:
        bound = jnp.array(
            [2 * self.x_threshold, jnp.inf, 2 * self.theta_threshold, jnp.inf],
            dtype=jnp.float32,
        )
        return Box(-bound, bound)

    @property
    def action_space(self) -> Discrete:
        return Discrete(2)

    def reset(self, key: PRNGKeyArray) -> tuple[CartPoleState, TimeStep]:
        state = CartPoleState(jr.uniform(key, (4,), minval=-0.05, maxval=0.05))
        return state, self._timestep(state, jnp.float32(0.0), jnp.bool_(False))

    def step(
        self, state: CartPoleState, action: Int[ArrayLike, ""], key: PRNGKeyArray
    ) -> tuple[CartPoleState, TimeStep]:
        del key  # deterministic dynamics
        action = check_action(self.action_space, action, "CartPole.step")
        force = jnp.where(action == 1, self.force_magnitude, -self.force_magnitude)
        cos_theta = jnp.cos(state.theta)
        sin_theta = jnp.sin(state.theta)
        total_mass = self.cart_mass + self.pole_mass
        pole_mass_length = self.pole_mass * self.pole_half_length
        temp = (force + pole_mass_length * state.theta_dot**2 * sin_theta) / total_mass
        theta_acc = (self.gravity * sin_theta - cos_theta * temp) / (
            self.pole_half_length
            * (4.0 / 3.0 - self.pole_mass * cos_theta**2 / total_mass)
        )
        x_acc = temp - pole_mass_length * theta_acc * cos_theta / total_mass
        # x and theta move with the old velocities, the velocities with the new
        # accelerations (explicit Euler), in one vector operation.
        derivative = jnp.stack([state.x_dot, x_acc, state.theta_dot, theta_acc])
        next_state = CartPoleState(state.physics + self.time_step * derivative)
        terminated = (jnp.abs(next_state.x) > self.x_threshold) | (
            jnp.abs(next_state.theta) > self.theta_threshold
        )
        return next_state, self._timestep(next_state, jnp.float32(1.0), terminated)

    def render(
        self, state: CartPoleState, width: int = 300
    ) -> UInt8[Array, "image_height image_width 3"]:
        """Draw a state as an RGB image, in pure `jax.numpy` (as gymnasium draws
        CartPole-v1: the track spans the positions that do not terminate).

        **Arguments:**

        - `state`: a cart-pole state.
        - `width`: the image width in pixels (a Python int, at least 60); the
          height is two thirds of it.

        **Returns:**

        uint8 `[2 * width // 3, width, 3]`.
        """
        if not isinstance(width, int) or width < 60:
            raise ValueError(f"CartPole.render: width={width!r} must be an int >= 60.")
        height = 2 * width // 3
        scale = width / (2 * self.x_threshold)  # pixels per metre
        cart_width, cart_height, pole_width = width / 12, width / 20, width / 60
        track_row = 0.7 * height
        cart_x = width / 2 + state.x * scale
        pivot = jnp.stack([cart_x, jnp.asarray(track_row - cart_height, jnp.float32)])
        direction = jnp.stack([jnp.sin(state.theta), -jnp.cos(state.theta)])
        pole_end = pivot + direction * (2 * self.pole_half_length * scale)
        image = jnp.full((height, width, 3), 255, jnp.uint8)
        image = paint(image, rectangle(height, width, track_row, 0.0, 1.0, width), 0)
        cart = rectangle(
            height,
            width,
            track_row - cart_height,
            cart_x - cart_width / 2,
            cart_height,
            cart_width,
        )
        image = paint(image, cart, 0)
        pole = line_segment(height, width, pivot, pole_end, pole_width / 2)
        image = paint(image, pole, (202, 152, 101))
        return paint(image, disc(height, width, pivot, pole_width / 2), (129, 132, 203))

    def _timestep(self, state: CartPoleState, reward, terminated) -> TimeStep:
        return TimeStep(
            observation=state.physics,
            reward=reward,
            terminated=terminated,
            truncated=jnp.bool_(False),
        )
