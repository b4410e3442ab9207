"""Recurrent MAPPO on JaxMARL's MPE simple spread, at the settings of JaxMARL's
`mappo_homogenous_rnn_mpe` baseline, through `eqxrl.envs.from_jaxmarl` and
`eqxrl.multiagent.MAPPO`.

    pip install "eqxrl[jaxmarl]"
    python examples/mappo_mpe.py                             # a short run
    python examples/mappo_mpe.py --total-timesteps 2000000   # JaxMARL's length

Three agents must cover three landmarks without colliding; every agent gets the
team's reward (minus its own collisions), so the return printed is the team's (the
sum over agents) per 25-step episode. The agents share one recurrent actor-critic
(JaxMARL's "homogeneous" MAPPO; the actor reads its agent's observation and one-hot
index, through a GRU of 128 units): centralized training, decentralized execution.
Its critic, used only in training, reads the global state (for MPE, which has no
world state of its own, every agent's observation concatenated, as JaxMARL's
`MPEWorldStateWrapper` gives its critic).

JaxMARL's settings: 16 worlds x 128 steps per iteration, learning rate 2e-3 decayed
linearly, 4 epochs of 4 minibatches (of whole sequences), gamma 0.99, GAE lambda
0.95, clip 0.2, entropy 0.01, value 0.5, gradient norm clipped to 0.5, layers of
128 with ReLU around the GRU. The default run is 204,800 world steps (JaxMARL's is
2M): on seed 0 the team's return, about -85 for random agents, goes from -79 (the
first tenth of the run) to -60 (the last), and the greedy agents score -59.
"""

import argparse
import functools

try:
    import jaxmarl  # noqa: F401 (from_jaxmarl builds the environment by name)
except ImportError:
    raise SystemExit(
        'this example needs jaxmarl: pip install "eqxrl[jaxmarl]"'
    ) from None
import jax
import jax.random as jr
import numpy as np

import eqxrl
from eqxrl.multiagent import MAPPO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=16 * 128 * 100,
        help="world steps of the run (JaxMARL's baseline: 2,000,000)",
    )
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    env = eqxrl.envs.from_jaxmarl("MPE_simple_spread_v3")
    print(
        f"JaxMARL MPE_simple_spread_v3: {env.num_agents} agents, observation "
        f"{env.observation_space.shape}, global state {env.global_state_space.shape}"
    )
    width = args.hidden_size
    network = functools.partial(
        eqxrl.nn.GRUActorCritic.from_env,
        hidden_size=width,
        encoder_sizes=(width,),
        head_sizes=(width,),
        activation=jax.nn.relu,
    )
    ppo = eqxrl.PPO(
        env=env,
        network_factory=network,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        learning_rate=2e-3,
        anneal_lr=True,
        num_epochs=4,
        num_minibatches=4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_eps=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
    )
    mappo = MAPPO(ppo, share_parameters=True, critic_input="global_state")
    steps = mappo.num_iterations * mappo.steps_per_iteration
    print(f"MAPPO (one shared GRU actor-critic): {steps:,} world steps")
    state, metrics = mappo.train(jr.key(args.seed))

    # The team's return of the episodes that ended, in up to 10 stretches of
    # iterations (an episode ends every 25 steps, so every iteration has some).
    returns = np.asarray(metrics["total_episode_return"])
    for stretch in np.array_split(np.arange(len(returns)), min(10, len(returns))):
        last = stretch[-1] + 1
        print(
            f"{last * mappo.steps_per_iteration:>9,} steps: team return "
            f"{np.nanmean(returns[stretch]):6.1f}"
        )

    policy = mappo.policy(state, deterministic=True)
    greedy = eqxrl.training.evaluate(policy, env, jr.key(1), num_episodes=32)
    print(f"greedy: team return {greedy.summary()['return_mean']:.1f} (32 episodes)")


if __name__ == "__main__":
    main()
