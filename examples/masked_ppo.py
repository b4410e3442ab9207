"""Action-masked PPO on a small maze where moves into walls are invalid.

    python examples/masked_ppo.py --total-timesteps 60000

Any environment whose `TimeStep` carries an `action_mask` gets masked PPO with no
extra setting: the mask is stored with each transition and applied identically when
acting and when updating, so masked actions are never taken.
"""

import argparse

import jax
import numpy as np

import eqxrl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    env = eqxrl.envs.make("GridMaze-v0")
    ppo = eqxrl.PPO(
        env=env,
        num_envs=16,
        num_steps=64,
        total_timesteps=args.total_timesteps,
        learning_rate=1e-3,
        gamma=0.95,
    )
    state, metrics = ppo.train(jax.random.key(args.seed))
    lengths = np.asarray(metrics["episode_length"])
    print(f"invalid actions taken: {int(metrics['invalid_action_count'].sum())}")
    print(
        f"entropy: first {metrics['entropy'][0]:.3f}, last {metrics['entropy'][-1]:.3f}"
    )
    print(
        f"episode length: first {lengths[0]:.1f}, last 5 {np.nanmean(lengths[-5:]):.1f}"
    )
    print("(the shortest path takes 8 moves)")

    # Greedy rollout of the trained policy.
    policy = ppo.policy(state, deterministic=True)
    env_state, timestep = env.reset(jax.random.key(1))
    moves = []
    for t in range(50):
        action = policy.act(
            timestep.observation, jax.random.key(t), timestep.action_mask
        )
        moves.append("URDL"[int(action)])
        env_state, timestep = env.step(env_state, action, jax.random.key(t))
        if timestep.terminated or timestep.truncated:
            break
    print(f"greedy path: {''.join(moves)} (reached goal: {bool(timestep.terminated)})")


if __name__ == "__main__":
    main()
