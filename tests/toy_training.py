"""Tiny algorithm and environment for testing the training driver quickly.

`RandomSearch` is a complete `AbstractAlgorithm` (state with a PRNG key, counters and
arrays; a float32 sweepable field; static ints and tuples; an environment field) whose
iteration compiles in a fraction of PPO's time. `Corridor` is an environment with
`render`, for the GIF path.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

import eqxrl
from eqxrl.envs import AbstractEnvironment, Box, Discrete, TimeStep

TRACES = {"train_iteration": 0}


class ToyState(eqx.Module):
    weights: Float[Array, "4 2"]
    key: PRNGKeyArray
    iteration: Int[Array, ""]


class LinearPolicy(eqxrl.nn.AbstractPolicy):
    weights: Float[Array, "4 2"]
    deterministic: bool = eqx.field(static=True, default=False)

    def __call__(self, observation, key, action_mask=None):
        logits = observation.reshape(-1)[:4] @ self.weights
        if self.deterministic:
            return jnp.argmax(logits).astype(jnp.int32)
        return jr.categorical(key, logits).astype(jnp.int32)


class RandomSearch(eqxrl.AbstractAlgorithm[ToyState]):
    """A random walk on linear-policy weights (a stand-in algorithm for tests).

    **Arguments:**

    - `env`: the environment.
    - `iterations`: how many iterations a run has.
    - `num_envs`: pretend number of environments.
    - `num_steps`: pretend steps per environment per iteration.
    - `step_size`: scale of the random steps.
    - `widths`: an unused tuple (to test tuple fields).
    - `transform`: an optional function applied to the weights after each step (a
      field that cannot be written as data).
    - `episodes_every`: `0`, or report episodes as the built-in algorithms do:
      `episode_count` (2 episodes ending every `episodes_every`-th iteration, none
      in between), `episode_return` (the weights' sum) and `episode_length` NaN
      where none ended.
    """

    env: AbstractEnvironment
    iterations: int = eqx.field(static=True, default=20)
    num_envs: int = eqx.field(static=True, default=2)
    num_steps: int = eqx.field(static=True, default=5)
    step_size: Float[Array, ""] = eqx.field(
        default=0.1, converter=lambda x: jnp.asarray(x, jnp.float32)
    )
    widths: tuple[int, ...] = eqx.field(static=True, default=(3, 3))
    transform: Callable[[Array], Array] | None = eqx.field(static=True, default=None)
    episodes_every: int = eqx.field(static=True, default=0)

    @property
    def num_iterations(self) -> int:
        return self.iterations

    def init(self, key: PRNGKeyArray) -> ToyState:
        weight_key, state_key = jr.split(key)
        weights = 0.01 * jr.normal(weight_key, (4, 2), jnp.float32)
        return ToyState(weights, state_key, jnp.int32(0))

    def train_iteration(self, state: ToyState) -> tuple[ToyState, dict[str, Array]]:
        TRACES["train_iteration"] += 1
        key, noise_key = jr.split(state.key)
        weights = state.weights + self.step_size * jr.normal(noise_key, (4, 2))
        if self.transform is not None:
            weights = self.transform(weights)
        metrics = {
            "episode_return": jnp.sum(weights),
            "loss": jnp.mean(jnp.square(weights)),
            "count": state.iteration + 1,
        }
        if self.episodes_every:
            ended = (state.iteration + 1) % self.episodes_every == 0
            metrics["episode_count"] = jnp.where(ended, 2, 0).astype(jnp.int32)
            metrics["episode_return"] = jnp.where(ended, jnp.sum(weights), jnp.nan)
            metrics["episode_length"] = jnp.where(ended, 5.0, jnp.nan)
        return ToyState(weights, key, state.iteration + 1), metrics

    def policy(self, state: ToyState, deterministic: bool = False) -> LinearPolicy:
        return LinearPolicy(state.weights, deterministic)


class CorridorState(eqx.Module):
    position: Int[Array, ""]


class Corridor(AbstractEnvironment[CorridorState]):
    """Walk right (action 1) to the end of a corridor; renders as a strip of cells."""

    length: int = eqx.field(static=True, default=5)
    cell: int = eqx.field(static=True, default=4)

    @property
    def observation_space(self) -> Box:
        return Box(low=jnp.zeros(4), high=jnp.ones(4))

    @property
    def action_space(self) -> Discrete:
        return Discrete(2)

    def _timestep(self, state, reward, terminated) -> TimeStep:
        fraction = state.position.astype(jnp.float32) / self.length
        observation = jnp.stack(
            [fraction, jnp.float32(1.0), jnp.float32(0.0), jnp.float32(0.0)]
        )
        return TimeStep(
            observation=observation,
            reward=reward,
            terminated=terminated,
            truncated=jnp.array(False),
        )

    def reset(self, key: PRNGKeyArray) -> tuple[CorridorState, TimeStep]:
        state = CorridorState(jnp.int32(0))
        return state, self._timestep(state, jnp.float32(0.0), jnp.array(False))

    def step(
        self, state: CorridorState, action: Int[ArrayLike, ""], key: PRNGKeyArray
    ) -> tuple[CorridorState, TimeStep]:
        move = (action == 1).astype(jnp.int32)
        position = jnp.minimum(state.position + move, self.length - 1)
        state = CorridorState(position.astype(jnp.int32))
        terminated: Bool[Array, ""] = position == self.length - 1
        reward = terminated.astype(jnp.float32)
        return state, self._timestep(state, reward, terminated)

    def render(self, state: CorridorState) -> Array:
        columns = jnp.arange(self.length * self.cell) // self.cell
        row = jnp.where(columns == state.position, 255, 40).astype(jnp.uint8)
        red = jnp.broadcast_to(row, (self.cell, self.length * self.cell))
        other = jnp.full_like(red, 40)
        return jnp.stack([red, other, other], axis=-1)


class BlindCorridor(AbstractEnvironment[CorridorState]):
    """The corridor without `render`: for the paths that need a drawing."""

    corridor: Corridor = Corridor()

    @property
    def observation_space(self) -> Box:
        return self.corridor.observation_space

    @property
    def action_space(self) -> Discrete:
        return self.corridor.action_space

    def reset(self, key: PRNGKeyArray) -> tuple[CorridorState, TimeStep]:
        return self.corridor.reset(key)

    def step(
        self, state: CorridorState, action: Int[ArrayLike, ""], key: PRNGKeyArray
    ) -> tuple[CorridorState, TimeStep]:
        return self.corridor.step(state, action, key)


def blind_corridor_v0() -> AbstractEnvironment:
    return eqxrl.envs.TimeLimit(BlindCorridor(), 12)


def corridor_v0(max_episode_steps: int = 12, **kwargs) -> AbstractEnvironment:
    return eqxrl.envs.TimeLimit(Corridor(**kwargs), max_episode_steps)


if "Corridor-test-v0" not in eqxrl.envs.registered_names():
    eqxrl.envs.register("Corridor-test-v0", corridor_v0)
    eqxrl.envs.register("BlindCorridor-test-v0", blind_corridor_v0)
if "random_search" not in eqxrl.algorithms.algorithm_names():
    eqxrl.algorithms.register_algorithm("random_search", RandomSearch)


def kill_after_two_checkpoints(script: str, out: Path, environment: dict) -> None:
    """Run `script` (a Trainer run writing to `out`, its first argument) in a
    subprocess with `environment` and SIGKILL it once it has written two
    checkpoints."""
    from eqxrl.training._checkpoint import list_checkpoints

    child = subprocess.Popen(
        [sys.executable, "-c", script, str(out)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    try:
        while len(list_checkpoints(out / "checkpoints")) < 2:
            assert child.poll() is None, child.stderr.read()
            assert time.monotonic() < deadline, "no checkpoint in time"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
