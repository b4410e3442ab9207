"""Coming from Stable-Baselines3: SB3's PPO hyperparameters as `eqxrl.PPO`, training
on the JAX CartPole, then `model.predict`-style use of the policy on gymnasium.

    pip install "eqxrl[gymnasium]"
    python examples/sb3_migration.py
    python examples/sb3_migration.py --total-timesteps 20000

The SB3 side (not run here; SB3 is not a dependency) would be the RL Zoo's tuned
CartPole-v1 setting:

    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    vec_env = make_vec_env("CartPole-v1", n_envs=8)
    model = PPO("MlpPolicy", vec_env, n_steps=32, batch_size=256, n_epochs=20,
                gamma=0.98, gae_lambda=0.8, ent_coef=0.0, learning_rate=1e-3)
    model.learn(total_timesteps=100_000)
    action, _ = model.predict(observation, deterministic=True)

See docs/migrating-from-sb3.md for the mapping, name by name.
"""

import argparse
import time

try:
    import gymnasium
except ImportError:
    raise SystemExit(
        'this example needs gymnasium: pip install "eqxrl[gymnasium]"'
    ) from None
import jax
import jax.random as jr
import numpy as np

import eqxrl


def ppo_from_sb3(
    env: eqxrl.envs.AbstractEnvironment,
    *,
    n_envs: int = 1,
    n_steps: int = 2048,
    batch_size: int = 64,
    n_epochs: int = 10,
    learning_rate: float = 3e-4,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    clip_range: float = 0.2,
    ent_coef: float = 0.0,
    vf_coef: float = 0.5,
    max_grad_norm: float = 0.5,
    total_timesteps: int = 100_000,
    linear_learning_rate: bool = False,
) -> eqxrl.PPO:
    """`eqxrl.PPO` with SB3's PPO arguments (and SB3's defaults where not given).

    SB3 counts `batch_size` in samples, eqxrl counts minibatches; SB3 keeps the
    learning rate constant unless given a schedule (`linear_learning_rate=True` is
    the RL Zoo's `lin_<value>`); SB3 does not clip the value loss by default
    (`clip_range_vf=None`); SB3's value loss is the mean squared error and eqxrl's
    is half of it (as in PureJaxRL and CleanRL), so `vf_coef` doubles. SB3's default
    `MlpPolicy` for PPO is eqxrl's default network: separate 64x64 tanh actor and
    critic, orthogonal initialization; both use Adam with eps 1e-5.
    """
    rollout_size = n_envs * n_steps
    if rollout_size % batch_size:
        raise ValueError(f"batch_size={batch_size} must divide n_envs * n_steps")
    return eqxrl.PPO(
        env=env,
        num_envs=n_envs,
        num_steps=n_steps,
        num_minibatches=rollout_size // batch_size,
        num_epochs=n_epochs,
        learning_rate=learning_rate,
        anneal_lr=linear_learning_rate,
        gamma=gamma,
        gae_lambda=gae_lambda,
        clip_eps=clip_range,
        clip_value_loss=False,
        ent_coef=ent_coef,
        vf_coef=2 * vf_coef,
        max_grad_norm=max_grad_norm,
        total_timesteps=total_timesteps,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=5)
    args = parser.parse_args()

    # `make_vec_env("CartPole-v1", n_envs=8)` -> the JAX CartPole; PPO vmaps it.
    env = eqxrl.envs.make("CartPole-v1")
    ppo = ppo_from_sb3(
        env,
        n_envs=8,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        ent_coef=0.0,
        learning_rate=1e-3,
        linear_learning_rate=True,
        total_timesteps=args.total_timesteps,
    )
    # `model.learn(total_timesteps)`: one compiled program for the whole run.
    start = time.perf_counter()
    state, metrics = ppo.train(jr.key(0))
    returns = np.asarray(jax.block_until_ready(metrics["episode_return"]))
    seconds = time.perf_counter() - start
    steps = ppo.num_iterations * ppo.num_envs * ppo.num_steps
    print(f"PPO: {steps:,} steps in {seconds:.1f} s including compilation")
    print(
        f"  SB3's rollout/ep_rew_mean ~ metrics['episode_return']: last 10 "
        f"iterations {np.nanmean(returns[-10:]):.1f}"
    )
    print(
        f"  train/entropy_loss ~ -metrics['entropy']: "
        f"{-float(metrics['entropy'][-1]):.3f}; train/approx_kl: "
        f"{float(metrics['approx_kl'][-1]):.4f}"
    )

    # `model.predict(observation, deterministic=True)` on a gymnasium environment.
    policy = ppo.policy(state, deterministic=True)
    evaluation = gymnasium.make("CartPole-v1")
    for episode in range(args.eval_episodes):
        observation, _ = evaluation.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action = policy.act(np.asarray(observation, np.float32), jr.key(0))
            observation, reward, terminated, truncated, _ = evaluation.step(int(action))
            total += float(reward)
            done = terminated or truncated
        print(f"  gymnasium CartPole-v1, greedy episode {episode}: return {total:.0f}")


if __name__ == "__main__":
    main()
