"""Coming from PureJaxRL: the same PPO from a PureJaxRL config, on a gymnax
environment, and eqxrl environments inside a PureJaxRL-style loop.

    pip install "eqxrl[gymnax]"
    python examples/purejaxrl_migration.py
    python examples/purejaxrl_migration.py --total-timesteps 500000

Three steps of a migration (see docs/migrating-from-purejaxrl.md):

1. PureJaxRL's `config` dict goes to `eqxrl.PPO.from_purejaxrl_config` unchanged
   (or becomes `eqxrl.PPO(...)` keyword arguments); the network (64x64 tanh MLP,
   orthogonal init), the optimizer (Adam, eps 1e-5, global norm clip, linear
   annealing) and the loss are the same as in PureJaxRL's `ppo.py`.
2. `gymnax.make(ENV_NAME)` becomes `eqxrl.envs.from_gymnax(*gymnax.make(ENV_NAME))`.
3. Code of your own that drives a gymnax environment keeps working with eqxrl's
   environments through `eqxrl.envs.to_gymnax`.
"""

import argparse
import time

try:
    import gymnax
except ImportError:
    raise SystemExit('this example needs gymnax: pip install "eqxrl[gymnax]"') from None
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl

# PureJaxRL's `ppo.py` CartPole config, verbatim names.
PUREJAXRL_CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 5e5,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
}


def purejaxrl_style_rollout(env, env_params, num_envs: int, num_steps: int, rng):
    """The environment half of PureJaxRL's `_env_step`, unchanged in style: gymnax
    argument order, `jax.vmap` over environments, `lax.scan` over steps (a random
    policy stands in for the network)."""
    rng, _rng = jax.random.split(rng)
    reset_rng = jax.random.split(_rng, num_envs)
    obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)

    def _env_step(runner_state, unused):
        env_state, last_obs, rng = runner_state
        rng, _rng = jax.random.split(rng)
        action = jax.random.randint(
            _rng, (num_envs,), 0, env.action_space(env_params).n
        )
        rng, _rng = jax.random.split(rng)
        rng_step = jax.random.split(_rng, num_envs)
        obsv, env_state, reward, done, info = jax.vmap(
            env.step, in_axes=(0, 0, 0, None)
        )(rng_step, env_state, action, env_params)
        return (env_state, obsv, rng), (reward, done)

    _, (reward, done) = jax.lax.scan(_env_step, (env_state, obsv, rng), None, num_steps)
    return reward, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()

    # 1 + 2: PureJaxRL's `jax.jit(jax.vmap(make_train(config)))(rngs)`.
    config = {**PUREJAXRL_CONFIG, "TOTAL_TIMESTEPS": args.total_timesteps}
    env = eqxrl.envs.from_gymnax(*gymnax.make(config["ENV_NAME"]))
    ppo = eqxrl.PPO.from_purejaxrl_config(env, config)
    keys = jr.split(jr.key(30), args.seeds)
    start = time.perf_counter()
    _, metrics = eqx.filter_vmap(ppo.train)(keys)
    returns = np.asarray(jax.block_until_ready(metrics["episode_return"]))
    seconds = time.perf_counter() - start
    steps = args.seeds * ppo.num_iterations * ppo.num_envs * ppo.num_steps
    print(
        f"PPO on gymnax {config['ENV_NAME']}: {args.seeds} seeds, {steps:,} steps "
        f"in {seconds:.1f} s including compilation"
    )
    print(
        "  mean return of the last 10 iterations per seed:",
        np.round(np.nanmean(returns[:, -10:], axis=1), 1),
    )
    print("  metrics are arrays of shape [seeds, iterations]:", returns.shape)

    # 3: eqxrl environments in gymnax-style code.
    env, env_params = eqxrl.envs.to_gymnax(eqxrl.envs.make("CartPole-v1"))
    rollout = jax.jit(
        lambda rng, params: purejaxrl_style_rollout(env, params, 8, 500, rng)
    )
    reward, done = rollout(jr.key(0), env_params)
    episodes = int(done.sum())
    print(
        f"eqxrl CartPole in a PureJaxRL-style loop: {episodes} random episodes, "
        f"mean length {float(reward.sum()) / max(episodes, 1):.1f} steps, "
        f"reward dtype {reward.dtype}, done dtype {done.dtype}"
    )
    # Domain randomization the gymnax way: the params are the environment's arrays
    # (same shapes and dtypes, so the compiled rollout is reused).
    heavy = eqx.tree_at(lambda p: p.arrays.env.gravity, env_params, jnp.float32(20.0))
    reward, done = rollout(jr.key(0), heavy)
    print(
        "  with gravity 20: mean length "
        f"{float(reward.sum()) / max(int(done.sum()), 1):.1f} steps"
    )


if __name__ == "__main__":
    main()
