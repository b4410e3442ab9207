"""Evaluation: many episodes in one compiled call, and GIFs of environments that
render."""

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree, UInt8

from ..envs import AbstractEnvironment, TimeLimit, unwrap
from ..nn import AbstractPolicy

DEFAULT_MAX_STEPS = 10_000


class EvaluationResult(eqx.Module):
    """Undiscounted returns and lengths of evaluation episodes.

    **Arguments:**

    - `returns`: float32 `[..., num_episodes]` (leading axes e.g. over seeds); in a
      multi-agent environment, the agents' total.
    - `lengths`: int32 `[..., num_episodes]`.
    - `agent_returns`: in a multi-agent environment, each agent's return, float32
      `[..., num_episodes, num_agents]`; else `None`.
    """

    returns: Float[Array, "*batch num_episodes"]
    lengths: Int[Array, "*batch num_episodes"]
    agent_returns: Float[Array, "*batch num_episodes num_agents"] | None = None

    def summary(
        self, percentiles: Sequence[float] = (5, 25, 50, 75, 95)
    ) -> dict[str, float]:
        """Mean, standard deviation, extremes and percentiles of the returns (over
        all episodes), and the mean length, as Python floats.

        **Returns:**

        `{"return_mean", "return_std", "return_min", "return_max",
        "return_p5", ..., "length_mean", "episodes"}`, and with `agent_returns`
        each agent's mean return, `"agent_return_mean_0"`, ....
        """
        returns = np.asarray(self.returns, dtype=np.float64).ravel()
        lengths = np.asarray(self.lengths, dtype=np.float64).ravel()
        summary = {
            "return_mean": float(returns.mean()),
            "return_std": float(returns.std()),
            "return_min": float(returns.min()),
            "return_max": float(returns.max()),
        }
        for q in percentiles:
            summary[f"return_p{q:g}"] = float(np.percentile(returns, q))
        summary["length_mean"] = float(lengths.mean())
        summary["episodes"] = float(returns.size)
        if self.agent_returns is not None:
            agent_returns = np.asarray(self.agent_returns, dtype=np.float64)
            agent_returns = agent_returns.reshape(-1, agent_returns.shape[-1])
            for agent, mean in enumerate(agent_returns.mean(axis=0)):
                summary[f"agent_return_mean_{agent}"] = float(mean)
        return summary


def default_max_steps(env: AbstractEnvironment) -> int:
    """The episode step limit of a `TimeLimit` in the wrapper chain, else
    `DEFAULT_MAX_STEPS` (10,000): a cap so that evaluation always ends."""
    for inner in unwrap(env):
        if isinstance(inner, TimeLimit):
            return inner.max_episode_steps
    return DEFAULT_MAX_STEPS


def _episode(
    policy: AbstractPolicy,
    env: AbstractEnvironment,
    key: PRNGKeyArray,
    max_steps: int,
) -> tuple[Float[Array, "*num_agents"], Int[Array, ""]]:
    """One episode until termination, truncation or `max_steps` steps; its return
    (one per agent in a multi-agent environment) and length.

    The policy acts with `step`, from `initial_carry()` at the reset: a recurrent
    policy remembers the episode's earlier steps, and a feed-forward one carries
    `None` (no leaves, so its program is the one of calling it directly)."""
    reset_key, loop_key = jr.split(key)
    state, timestep = env.reset(reset_key)

    def cond(carry):
        _, _, _, done, _, length, _ = carry
        return jnp.logical_not(done) & (length < max_steps)

    def body(carry):
        state, timestep, policy_carry, _, total, length, key = carry
        key, action_key, step_key = jr.split(key, 3)
        policy_carry, action = policy.step(
            policy_carry, timestep.observation, action_key, timestep.action_mask
        )
        state, timestep = env.step(state, action, step_key)
        done = timestep.terminated | timestep.truncated
        return (
            state,
            timestep,
            policy_carry,
            done,
            total + timestep.reward,
            length + 1,
            key,
        )

    total = jnp.zeros_like(timestep.reward)
    carry = (
        state,
        timestep,
        policy.initial_carry(),
        jnp.array(False),
        total,
        jnp.int32(0),
    )
    *_, total, length, _ = lax.while_loop(cond, body, (*carry, loop_key))
    return total, length


def _episodes(
    policy: AbstractPolicy,
    env: AbstractEnvironment,
    key: PRNGKeyArray,
    num_episodes: int,
    max_steps: int,
) -> tuple[Float[Array, " num_episodes *num_agents"], Int[Array, " num_episodes"]]:
    keys = jr.split(key, num_episodes)
    return jax.vmap(lambda k: _episode(policy, env, k, max_steps))(keys)


def run_episodes(
    policy: AbstractPolicy,
    env: AbstractEnvironment,
    key: PRNGKeyArray,
    num_episodes: int,
    max_steps: int,
) -> tuple[Float[Array, " num_episodes"], Int[Array, " num_episodes"]]:
    """`num_episodes` episodes vmapped (not jitted: the building block of
    `evaluate` and of the Trainer's batched evaluation); their returns (in a
    multi-agent environment, the agents' total) and lengths. The policy acts
    with `step`, its carry starting from `initial_carry()` in every episode."""
    returns, lengths = _episodes(policy, env, key, num_episodes, max_steps)
    if returns.ndim > 1:
        returns = returns.sum(axis=1)
    return returns, lengths


@eqx.filter_jit
def _evaluate(policy, env, key, num_episodes, max_steps):
    return _episodes(policy, env, key, num_episodes, max_steps)


def evaluate(
    policy: AbstractPolicy,
    env: AbstractEnvironment,
    key: PRNGKeyArray,
    *,
    num_episodes: int = 16,
    max_steps: int | None = None,
) -> EvaluationResult:
    """Run `num_episodes` episodes, vmapped, in one compiled call.

    The policy acts through `policy.step`, each episode's carry starting from
    `policy.initial_carry()` at its reset, so a recurrent policy (e.g. PPO's with
    `network_factory=eqxrl.nn.GRUActorCritic.from_env`) remembers the episode's
    earlier steps; a feed-forward policy's carry is `None`.

    **Arguments:**

    - `policy`: e.g. `algorithm.policy(state, deterministic=True)` (greedy) or
      [`load_policy`][eqxrl.load_policy]'s result.
    - `env`: the environment, without auto-reset (e.g. `algorithm.env`).
    - `key`: a PRNG key for resets and sampled actions.
    - `num_episodes`: how many episodes.
    - `max_steps`: a cap on the length of an episode; by default the `TimeLimit` of
      `env`, else 10,000.

    **Returns:**

    An [`EvaluationResult`][eqxrl.training.EvaluationResult]; `.summary()` gives
    the mean, standard deviation and percentiles. In a multi-agent environment
    (`policy` acting for every agent, e.g.
    [`Independent.policy`][eqxrl.multiagent.Independent.policy]), `returns` are
    the agents' totals and `agent_returns` each agent's.

    !!! example

        ```python
        policy = ppo.policy(state, deterministic=True)
        result = eqxrl.training.evaluate(policy, ppo.env, jax.random.key(1))
        result.summary()["return_mean"]
        ```
    """
    if num_episodes < 1:
        raise ValueError(f"evaluate: num_episodes={num_episodes} must be at least 1.")
    if max_steps is None:
        max_steps = default_max_steps(env)
    returns, lengths = _evaluate(policy, env, key, num_episodes, max_steps)
    if returns.ndim == 1:
        return EvaluationResult(returns=returns, lengths=lengths)
    return EvaluationResult(
        returns=returns.sum(axis=1), lengths=lengths, agent_returns=returns
    )


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------


def renderer(
    env: AbstractEnvironment,
) -> Callable[[PyTree], UInt8[Array, "height width 3"]] | None:
    """`env.render` when the environment can draw its states, else `None`.

    Wrappers draw the environment they wrap (see
    [`AbstractWrapper`][eqxrl.envs.AbstractWrapper]), so this is `None` exactly when
    the innermost environment does not implement `render(state)` (or its drawing is
    not a uint8 `[height, width, 3]` image).
    """
    try:
        state_shape = eqx.filter_eval_shape(env.reset, jr.key(0))[0]
        frame = eqx.filter_eval_shape(env.render, state_shape)
    except NotImplementedError:
        return None
    if (
        isinstance(frame, jax.ShapeDtypeStruct)
        and frame.ndim == 3
        and frame.shape[-1] == 3
        and frame.dtype == jnp.uint8
    ):
        return env.render
    return None


def no_render_message(env: AbstractEnvironment) -> str:
    """Why `env` cannot be drawn, naming the environment rather than a wrapper."""
    name = type(unwrap(env)[-1]).__name__
    return (
        f"{name} has no render(state) method, so there is nothing to draw "
        "(implement render to get GIFs)."
    )


@eqx.filter_jit
def _record(policy, env, render, key, num_episodes, max_steps):
    def episode(key):
        reset_key, loop_key = jr.split(key)
        state, timestep = env.reset(reset_key)
        first = render(state)

        def step(carry, step_key):
            state, timestep, policy_carry, done = carry
            action_key, env_key = jr.split(step_key)
            policy_carry, action = policy.step(
                policy_carry, timestep.observation, action_key, timestep.action_mask
            )
            state, timestep = env.step(state, action, env_key)
            now_done = done | timestep.terminated | timestep.truncated
            return (state, timestep, policy_carry, now_done), (render(state), done)

        # Steps after the episode's end are dropped on the host, so the carry
        # needs no reset there.
        _, (frames, was_done) = lax.scan(
            step,
            (state, timestep, policy.initial_carry(), jnp.array(False)),
            jr.split(loop_key, max_steps),
        )
        return first, frames, was_done

    return jax.vmap(episode)(jr.split(key, num_episodes))


def record_episodes(
    policy: AbstractPolicy,
    env: AbstractEnvironment,
    key: PRNGKeyArray,
    *,
    num_episodes: int = 1,
    max_steps: int | None = None,
) -> UInt8[np.ndarray, "frames height width 3"]:
    """Frames of `num_episodes` episodes, played one after the other.

    The episodes run vmapped and render inside one compiled call; the frames of each
    episode (from its reset to its last step) are then concatenated on the host.
    The policy acts as in [`evaluate`][eqxrl.training.evaluate]: through `step`,
    from `initial_carry()` at each episode's reset.

    **Arguments:**

    - `policy`: the policy to act with.
    - `env`: an environment with `render(state) -> uint8[height, width, 3]` (or
      wrapping one).
    - `key`: a PRNG key.
    - `num_episodes`: how many episodes to record.
    - `max_steps`: a cap on the steps recorded per episode; by default the `TimeLimit`
      of `env`, at most 1,000.

    **Returns:**

    A NumPy uint8 array `[num_frames, height, width, 3]`.
    """
    render = renderer(env)
    if render is None:
        raise ValueError(f"record_episodes: {no_render_message(env)}")
    if max_steps is None:
        max_steps = min(default_max_steps(env), 1_000)
    first, frames, was_done = jax.device_get(
        _record(policy, env, render, key, num_episodes, max_steps)
    )
    clips = []
    for e in range(num_episodes):
        alive = ~np.asarray(was_done[e], dtype=bool)
        clips.append(first[e][None])
        clips.append(frames[e][alive])
    return np.concatenate(clips)


def write_gif(
    path: str | os.PathLike,
    frames: Any,
    *,
    fps: float | int = 10.0,
) -> Path:
    """Write RGB frames to an animated GIF (needs Pillow), atomically.

    **Arguments:**

    - `path`: the `.gif` file to write.
    - `frames`: uint8 `[num_frames, height, width, 3]`.
    - `fps`: frames per second.

    **Returns:**

    The path written.
    """
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(
            "write_gif needs Pillow: pip install pillow (or eqxrl[training])."
        ) from None
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(
            f"write_gif: frames must be uint8 [num_frames, height, width, 3], got "
            f"{frames.dtype} {frames.shape}."
        )
    if len(frames) == 0:
        raise ValueError("write_gif: there are no frames to write.")
    path = Path(path)
    images = [Image.fromarray(frame) for frame in frames]
    temporary = path.with_name(f".{path.name}.tmp")
    images[0].save(
        temporary,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=max(int(round(1000 / fps)), 20),
        loop=0,
    )
    os.replace(temporary, path)
    return path
