"""Train PPO on CartPole with a curriculum: the initial states widen as it succeeds.

    python examples/curriculum_cartpole.py
    python examples/curriculum_cartpole.py --out runs/curriculum --resume  # killed

Every environment starts its episodes with each state variable uniform in
`[-bound, bound]`, `bound = 0.05 + 0.15 * difficulty` (gymnasium's range at
difficulty 0, four times wider at 1: poles that start tilted and moving). An
environment's difficulty grows by 0.1 each time it balances at least 3 of its last 4
episodes to the time limit. All of it happens inside the compiled training loop,
and the curriculum is part of the training state, so the checkpoints under `--out`
hold it and `--resume` continues exactly.
"""

import argparse
from pathlib import Path

import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl


def reset_fn(
    cartpole: eqxrl.envs.CartPole, key, progress: eqxrl.envs.CurriculumProgress
) -> tuple[eqxrl.envs.CartPoleState, eqxrl.envs.TimeStep]:
    """CartPole's reset, its initial-state range widened by the difficulty."""
    bound = 0.05 + 0.15 * progress.difficulty
    physics = jr.uniform(key, (4,), minval=-bound, maxval=bound)
    timestep = eqxrl.envs.TimeStep(
        observation=physics,
        reward=jnp.float32(0.0),
        terminated=jnp.bool_(False),
        truncated=jnp.bool_(False),
    )
    return eqxrl.envs.CartPoleState(physics), timestep


def make_env(max_episode_steps: int = 200) -> eqxrl.envs.Curriculum:
    """CartPole with a time limit, in a curriculum (success: reaching the limit)."""
    cartpole = eqxrl.envs.TimeLimit(eqxrl.envs.CartPole(), max_episode_steps)
    return eqxrl.envs.Curriculum(
        cartpole, reset_fn, window=4, success_threshold=0.75, increment=0.1
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="run folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=int, default=300_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument(
        "--max-episode-steps", type=int, default=200, help="the time limit"
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    ppo = eqxrl.PPO(
        env=make_env(args.max_episode_steps),
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        learning_rate=1e-3,
    )
    trainer = eqxrl.Trainer(
        ppo,
        out=None if args.out is None else str(args.out),
        chunk_size=8,
        eval_episodes=0,
        progress=False,
        verbose=False,
    )
    state, metrics = trainer.fit(seed=args.seed, resume=args.resume)
    difficulty = np.asarray(metrics["curriculum/difficulty"])
    returns = np.asarray(metrics["episode_return"])
    steps = args.num_envs * args.num_steps
    shown = np.unique(np.linspace(0, len(difficulty) - 1, 6).astype(int))
    for iteration in shown:
        print(
            f"{(iteration + 1) * steps:>9,d} steps: difficulty "
            f"{difficulty[iteration]:.3f}, return {returns[iteration]:.1f}"
        )
    # Each environment's own progress, from the final training state.
    progress = state.env_state.env_state.progress
    print(
        "final difficulty per environment: "
        + " ".join(f"{value:.1f}" for value in np.asarray(progress.difficulty))
    )


if __name__ == "__main__":
    main()
