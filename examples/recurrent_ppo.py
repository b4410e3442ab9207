"""Recurrent PPO: a GRU policy on a task that needs memory.

    python examples/recurrent_ppo.py                          # StatelessCartPole-v1
    python examples/recurrent_ppo.py --compare                # and without memory
    python examples/recurrent_ppo.py --env MemoryChain-bsuite  # needs eqxrl[gymnax]

`StatelessCartPole-v1` shows only the cart's position and the pole's angle: the
velocities must be read from how they changed, so a policy needs memory of the
steps before. bsuite's MemoryChain (through gymnax) shows a context at the start of
each episode and asks for it at the end. The GRU's carry flows from step to step
and starts afresh with each episode; after training, evaluation threads it the
same way (`policy.initial_carry()`, then `policy.step(carry, ...)`).
"""

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl


def make_env(name: str) -> eqxrl.envs.AbstractEnvironment:
    if name != "MemoryChain-bsuite":
        return eqxrl.envs.make(name)
    try:
        import gymnax
    except ImportError:
        raise SystemExit(
            'this example needs gymnax: pip install "eqxrl[gymnax]"'
        ) from None
    return eqxrl.envs.from_gymnax(*gymnax.make(name))


def train(env, network_factory, args) -> tuple[eqxrl.PPO, eqxrl.PPOState, float]:
    ppo = eqxrl.PPO(
        env=env,
        network_factory=network_factory,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
    )
    start = time.perf_counter()
    state, metrics = eqx.filter_jit(ppo.train)(jr.key(args.seed))
    returns = np.asarray(metrics["episode_return"])
    last = max(1, len(returns) // 20)  # the last 5% of iterations
    final = float(np.nanmean(returns[-last:]))
    name = "GRU" if network_factory is not None else "feed-forward"
    print(
        f"{name}: {ppo.num_iterations} iterations in "
        f"{time.perf_counter() - start:.1f} s (compile included); mean return over "
        f"the last {last} iterations: {final:.1f}"
    )
    return ppo, state, final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="StatelessCartPole-v1")
    parser.add_argument("--total-timesteps", type=int, default=2_000_000)
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--compare", action="store_true", help="also train a feed-forward network"
    )
    args = parser.parse_args()

    env = make_env(args.env)
    print(f"{args.env}: observation shape {env.observation_space.shape}")
    ppo, state, _ = train(env, eqxrl.nn.GRUActorCritic.from_env, args)
    if args.compare:
        train(env, None, args)

    # Evaluation threads the carry: evaluate() does it for every episode.
    policy = ppo.policy(state, deterministic=True)
    result = eqxrl.training.evaluate(policy, env, jr.key(1), num_episodes=16)
    print(
        f"greedy evaluation, 16 episodes: return {result.summary()['return_mean']:.1f}"
    )

    # The same by hand: the carry starts afresh with the episode and each step
    # returns the next one.
    step, env_step = eqx.filter_jit(policy.step), eqx.filter_jit(env.step)
    env_state, timestep = env.reset(jr.key(2))
    carry = policy.initial_carry()
    total, key = 0.0, jr.key(3)
    while not bool(timestep.terminated | timestep.truncated):
        key, action_key, step_key = jr.split(key, 3)
        carry, action = step(carry, timestep.observation, action_key)
        env_state, timestep = env_step(env_state, action, step_key)
        total += float(timestep.reward)
    hidden = jax.tree.leaves(carry)[0]
    print(
        f"one episode by hand: return {total:.1f}; the carry is "
        f"{type(carry).__name__} with |hidden| = {float(jnp.linalg.norm(hidden)):.2f}"
    )


if __name__ == "__main__":
    main()
