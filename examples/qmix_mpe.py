"""QMIX on JaxMARL's MPE simple spread, at the settings of JaxMARL's QMIX baseline
(`QMIX.from_jaxmarl`), through `eqxrl.envs.from_jaxmarl` and `eqxrl.multiagent.QMIX`.

    pip install "eqxrl[jaxmarl]"
    python examples/qmix_mpe.py                              # a short run
    python examples/qmix_mpe.py --total-timesteps 10000000   # JaxMARL's length
    python examples/qmix_mpe.py --recurrent                  # JaxMARL's GRU agents

Three agents must cover three landmarks without colliding. Each agent picks its
action greedily (epsilon-greedily while exploring) from its own Q-network on its own
observation (one network shared by the agents, the agent's one-hot index appended);
in training, a mixing network conditioned on the global state (for MPE, every
agent's observation concatenated) combines the agents' values of their actions into
the team's value, regressed on the team reward (the sum of the agents' rewards).
The mixer is monotonic in every agent's value, so the agents' greedy actions are
the team's greedy joint action. The return printed is the team's per 25-step
episode.

`QMIX.from_jaxmarl(env)` takes the settings of JaxMARL's `qmix_rnn.py` on MPE
(`ql_rnn_mpe.yaml`: 8 worlds x 26 steps per iteration, a buffer of 130,000
transitions, minibatches of 832, double-Q targets, a target copy every 200 updates,
epsilon from 1 to 0.05 over the first 10% of the run, learning rate 0.005 decayed
linearly, a mixer of 32 / 128); its agents are feed-forward unless `--recurrent`
gives them JaxMARL's GRU (Dense 64, GRU 64, a linear head), trained on the stored
26-step sequences of every world with the carries they started from, 32 sequences
per update. The default run is short (104,000 world steps, learning from 10,000
on, as in JaxMARL's): on seed 0 the team's return, about -85 for random agents,
dips while the agents explore and ends near -79; JaxMARL trains for 10M steps.
"""

import argparse

try:
    import jaxmarl  # noqa: F401 (from_jaxmarl builds the environment by name)
except ImportError:
    raise SystemExit(
        'this example needs jaxmarl: pip install "eqxrl[jaxmarl]"'
    ) from None
import jax.random as jr
import numpy as np

import eqxrl
from eqxrl.multiagent import QMIX


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=8 * 26 * 500,
        help="world steps of the run (JaxMARL's baseline: 10,000,000)",
    )
    parser.add_argument(
        "--learning-starts",
        type=int,
        default=10_000,
        help="world steps collected before the first update",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=32 * 26,
        help="transitions per update (with --recurrent, a multiple of 26: whole "
        "sequences)",
    )
    parser.add_argument(
        "--recurrent", action="store_true", help="JaxMARL's recurrent (GRU) agents"
    )
    parser.add_argument(
        "--buffer-size", type=int, default=5_000 * 26, help="replay capacity"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    env = eqxrl.envs.from_jaxmarl("MPE_simple_spread_v3")
    print(
        f"JaxMARL MPE_simple_spread_v3: {env.num_agents} agents, observation "
        f"{env.observation_space.shape}, global state {env.global_state_space.shape}"
    )
    qmix = QMIX.from_jaxmarl(
        env,
        recurrent=args.recurrent,
        total_timesteps=args.total_timesteps,
        learning_starts=args.learning_starts,
        batch_size=args.batch_size,
        buffer_size=args.buffer_size,
    )
    steps = qmix.num_iterations * qmix.steps_per_iteration
    agents = "recurrent" if args.recurrent else "feed-forward"
    print(
        f"QMIX (one shared {agents} Q-network, a monotonic mixer): {steps:,} "
        "world steps"
    )
    state, metrics = qmix.train(jr.key(args.seed))

    # The team's return of the episodes that ended, in up to 10 stretches of
    # iterations (an episode ends every 25 steps, so every iteration has some).
    returns = np.asarray(metrics["total_episode_return"])
    for stretch in np.array_split(np.arange(len(returns)), min(10, len(returns))):
        last = stretch[-1] + 1
        print(
            f"{last * qmix.steps_per_iteration:>9,} steps: team return "
            f"{np.nanmean(returns[stretch]):6.1f}"
        )

    policy = qmix.policy(state, deterministic=True)
    greedy = eqxrl.training.evaluate(policy, env, jr.key(1), num_episodes=32)
    print(f"greedy: team return {greedy.summary()['return_mean']:.1f} (32 episodes)")


if __name__ == "__main__":
    main()
