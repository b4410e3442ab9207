"""Port parity: step a pure-JAX environment and the reference it was ported from
side by side and report, per field, how far apart they are and where they first
part."""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

from .._checks import describe
from .._environment import AbstractEnvironment


@dataclasses.dataclass
class FieldParity:
    """How one field of the two environments compared.

    **Attributes:**

    - `largest_difference`: the largest absolute difference seen (flags and masks
      count 1 when they disagree).
    - `first_mismatch`: `(episode, step)` of the first difference over the
      tolerance (steps counted from 1; step 0 is the reset), or `None`.
    """

    largest_difference: float = 0.0
    first_mismatch: tuple[int, int] | None = None


@dataclasses.dataclass
class ParityReport:
    """What [`check_parity`][eqxrl.envs.check_parity] found.

    **Attributes:**

    - `fields`: a [`FieldParity`][eqxrl.envs.FieldParity] per compared field
      (`observation` or `observation<path>` per leaf, `reward`, `terminated`,
      `truncated` and, where the reference gives one, `action_mask`).
    - `episodes`, `steps`: how many episodes and steps were compared.
    """

    fields: dict[str, FieldParity]
    episodes: int
    steps: int

    @property
    def ok(self) -> bool:
        """Whether every field stayed within the tolerance."""
        return all(field.first_mismatch is None for field in self.fields.values())

    def __str__(self) -> str:
        lines = [
            f"parity over {self.episodes} episodes, {self.steps} steps: "
            + ("every field within tolerance" if self.ok else "MISMATCH")
        ]
        for name, field in self.fields.items():
            where = (
                "ok"
                if field.first_mismatch is None
                else "first over tolerance at episode {}, step {}".format(
                    *field.first_mismatch
                )
            )
            lines.append(
                f"  {name:<20} largest {field.largest_difference:.3g}  {where}"
            )
        return "\n".join(lines)


def _reference_calls(reference: Any) -> tuple[Callable, Callable]:
    if isinstance(reference, tuple) and len(reference) == 2:
        return reference
    if hasattr(reference, "reset") and hasattr(reference, "step"):
        return reference.reset, reference.step
    raise TypeError(
        "check_parity: reference must be a gymnasium-style environment (reset(seed=) "
        "and step(action)) or a (reset, step) pair of callables, got "
        f"{type(reference).__name__}."
    )


def check_parity(
    ported: AbstractEnvironment,
    reference: Any,
    *,
    num_episodes: int = 10,
    max_steps: int = 500,
    policy: Callable[[np.random.Generator, Any], Any] | None = None,
    set_state: Callable[[Any, Any], None] | None = None,
    sync_every_step: bool = False,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    seed: int = 0,
) -> ParityReport:
    """Step a pure-JAX port and its reference with the same actions and compare
    them field by field: the test a port needs before it replaces the original.

    Each episode resets both (`ported.reset(key)` and `reference.reset(seed=...)`),
    puts the reference into the port's initial state with `set_state` (two
    simulators seldom draw the same initial state from their own random numbers),
    then steps both with the same actions until either episode ends or
    `max_steps`. Observations (every leaf), rewards, `terminated`, `truncated` and,
    when the reference's `info` has one, the action mask are compared; a field is
    over the tolerance where `|ported - reference| > atol + rtol * |reference|`.
    Comparing goes on after a mismatch, so the report gives each field's largest
    difference as well as where it first appeared.

    **Arguments:**

    - `ported`: the eqxrl environment (wrapped or not; a `TimeLimit` truncates).
    - `reference`: a gymnasium-style environment (`reset(seed=...) -> (obs,
      info)`, `step(action) -> (obs, reward, terminated, truncated, info)`) or a
      pair `(reset, step)` of such callables.
    - `num_episodes`, `max_steps`: how much to compare.
    - `policy`: `policy(rng, observation) -> action` (a NumPy generator and the
      port's observation); default: uniformly random actions of the port's action
      space.
    - `set_state`: `set_state(reference, ported_state)`, which puts the reference
      into the port's state (e.g. `reference.unwrapped.state = np.asarray(...)`).
    - `sync_every_step`: call `set_state` before every step too, to compare one
      step at a time (float32 against float64 simulators drift apart otherwise).
    - `rtol`, `atol`: the tolerance.
    - `seed`: seeds the resets and the default policy.

    **Returns:**

    A [`ParityReport`][eqxrl.envs.ParityReport]; `report.ok` says whether every
    field stayed within the tolerance, and `print(report)` shows where not.

    !!! example

        ```python
        reference = gymnasium.make("CartPole-v1").unwrapped

        def set_state(reference, state):
            reference.state = np.asarray(state.env_state.physics, np.float64)

        report = eqxrl.envs.check_parity(
            eqxrl.envs.make("CartPole-v1"), reference, set_state=set_state, rtol=1e-4
        )
        assert report.ok, report
        ```
    """
    if set_state is None and sync_every_step:
        raise ValueError("check_parity: sync_every_step needs set_state.")
    reset_reference, step_reference = _reference_calls(reference)
    rng = np.random.default_rng(seed)
    space = ported.action_space
    if policy is None:

        def policy(rng: np.random.Generator, observation: Any) -> Any:
            return np.asarray(space.sample(jr.key(int(rng.integers(2**31)))))

    reset = eqx.filter_jit(lambda env, key: env.reset(key))
    step = eqx.filter_jit(lambda env, state, action, key: env.step(state, action, key))
    fields: dict[str, FieldParity] = {}
    total_steps = 0

    def compare(name: str, mine: Any, theirs: Any, where: tuple[int, int]) -> None:
        mine = np.asarray(mine, np.float64)
        theirs = np.asarray(theirs, np.float64)
        if mine.shape != theirs.shape:
            raise ValueError(
                f"check_parity: {describe(ported)} gives {name} of shape "
                f"{mine.shape}, the reference {theirs.shape} (episode {where[0]}, "
                f"step {where[1]})."
            )
        field = fields.setdefault(name, FieldParity())
        difference = np.abs(mine - theirs)
        largest = float(difference.max()) if difference.size else 0.0
        field.largest_difference = max(field.largest_difference, largest)
        over = difference > atol + rtol * np.abs(theirs)
        if field.first_mismatch is None and bool(np.any(over)):
            field.first_mismatch = where

    def compare_timestep(timestep: Any, outputs: tuple, where: tuple[int, int]):
        observation, reward, terminated, truncated, info = outputs
        leaves = jax.tree_util.tree_leaves_with_path(timestep.observation)
        references = jax.tree_util.tree_leaves(observation)
        if len(leaves) != len(references):
            raise ValueError(
                f"check_parity: the observations have {len(leaves)} leaves here and "
                f"{len(references)} in the reference."
            )
        for (path, leaf), theirs in zip(leaves, references):
            compare("observation" + jax.tree_util.keystr(path), leaf, theirs, where)
        if reward is not None:
            compare("reward", timestep.reward, reward, where)
            compare("terminated", timestep.terminated, terminated, where)
            compare("truncated", timestep.truncated, truncated, where)
        if isinstance(info, dict) and "action_mask" in info:
            compare("action_mask", timestep.action_mask, info["action_mask"], where)

    for episode in range(num_episodes):
        episode_seed = int(rng.integers(2**31))
        state, timestep = reset(ported, jr.key(episode_seed))
        observation, info = reset_reference(seed=episode_seed)
        if set_state is None:
            # The same initial state only if both draw it alike from the seed.
            outputs = (observation, None, None, None, info)
            compare_timestep(timestep, outputs, (episode, 0))
        else:
            set_state(reference, state)
        for t in range(1, max_steps + 1):
            if sync_every_step and t > 1:
                set_state(reference, state)
            action = policy(rng, timestep.observation)
            outputs = step_reference(action)
            state, timestep = step(ported, state, action, jr.key(episode_seed + t))
            compare_timestep(timestep, outputs, (episode, t))
            total_steps += 1
            if outputs[2] or outputs[3] or timestep.terminated or timestep.truncated:
                break
    return ParityReport(fields=fields, episodes=num_episodes, steps=total_steps)
