"""TD3 on Pendulum-v1: against rejax's TD3, and eqxrl's defaults against the bar.

Parts (`--parts`): `peers` (against rejax 0.1.3's TD3 at `REJAX_TD3`, `--pairs`
rounds, greedy returns over `--episodes`; skipped without rejax) and `defaults`
(`--algorithms` at their defaults, `--seeds` vmapped, against above -250 on 3 of 4
seeds). README: "TD3 against rejax, PQN against purejaxql".

    .venv/bin/python benchmarks/td3.py --smoke   # a quick check of both parts
"""

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
from _harness import (
    alternate,
    command_line,
    final_return,
    greedy_return,
    missing,
    print_comparison,
    rejax_program,
    train_program,
    train_seeds,
)

import eqxrl

# rejax's configs/gymnax/pendulum.yaml, section td3 (rejax at 0.1.3's tree).
# fmt: off
REJAX_TD3 = dict(
    env="Pendulum-v1", actor_kwargs={"activation": "swish"},
    critic_kwargs={"activation": "swish"}, num_envs=1, buffer_size=10_000,
    fill_buffer=1_000, batch_size=100, learning_rate=0.001, num_epochs=1,
    total_timesteps=10_000, eval_freq=100, gamma=0.99, polyak=0.95,
    max_grad_norm=100, exploration_noise=0.3, target_noise=0.2,
    target_noise_clip=0.5, policy_delay=2, normalize_observations=True,
)
# fmt: on


class SwishTD3(eqxrl.algorithms.AbstractTD3):
    """eqxrl's TD3 (its policy delay, smoothing noise and twin critics) with rejax's
    swish activations."""

    policy_delay: int = eqx.field(static=True, default=2)
    policy_noise: float = 0.2
    num_critics: int = eqx.field(static=True, default=2)

    def make_networks(self, key):
        actor_key, critic_key = jr.split(key)
        actor = eqxrl.nn.MLPDeterministicActor(
            self.observation_size,
            self.action_size,
            hidden_sizes=self.hidden_sizes,
            activation=jax.nn.swish,
            key=actor_key,
        )
        critic = eqxrl.nn.MLPTwinCritic(
            self.observation_size,
            self.action_size,
            hidden_sizes=self.hidden_sizes,
            activation=jax.nn.swish,
            num_critics=self.num_critics,
            key=critic_key,
        )
        return actor, critic


def eqxrl_td3_on_rejax_settings(total_timesteps: int) -> eqxrl.TD3:
    """rejax's numbers: one environment, an update of 100 transitions per step,
    actor and targets (Polyak 0.95) every second update, warm-up of 1,000 uniform
    steps, a 10,000-transition buffer, observation normalization; noises halved
    into `[-1, 1]` units. rejax clips each gradient entry to `[-100, 100]`
    (`optax.clip(max_grad_norm)`) before Adam; eqxrl's TD3 has no clipping (on
    Pendulum's scale it never binds)."""
    half_range = 2.0  # Pendulum's actions lie in [-2, 2]
    # fmt: off
    return SwishTD3(
        env=eqxrl.envs.make("Pendulum-v1"), num_envs=1,
        total_timesteps=total_timesteps, buffer_size=10_000, learning_starts=1_000,
        train_frequency=1, gradient_steps=1, batch_size=100, policy_delay=2,
        tau=0.05, gamma=0.99, learning_rate=1e-3,
        exploration_noise=0.3 / half_range, policy_noise=0.2 / half_range,
        noise_clip=0.5 / half_range, hidden_sizes=(64, 64),
        normalize_observations=True,
    )
    # fmt: on


def run_peers_part(total_timesteps: int, pairs: int, episodes: int) -> None:
    if missing("rejax"):
        print("\npeers: skipped (rejax is not installed; use the peers venv)")
        return
    ours = eqxrl_td3_on_rejax_settings(total_timesteps)
    print(
        f"\nTD3 on rejax's Pendulum settings, {total_timesteps:,} steps, {pairs} "
        "rounds (A = eqxrl, B = rejax)"
    )
    print(f"  rejax config: {REJAX_TD3}")
    rejax = rejax_program("TD3", REJAX_TD3, total_timesteps)
    rejax.facts = lambda state, seed: {"return": rejax.evaluate(state, seed)}

    def our_facts(state, seed: int) -> dict:
        policy = ours.policy(state, deterministic=True)
        return {"return": greedy_return(policy, ours.env, seed, episodes)}

    programs = {
        "eqxrl": train_program(ours, total_timesteps, our_facts),
        "rejax": rejax,
    }
    result = alternate(programs, pairs)
    print_comparison(result)
    returns = {name: result.fact(name, "return") for name in programs}
    print(
        f"  final greedy return ({episodes} episodes per seed, mean +- std over "
        f"{pairs} seeds): eqxrl {np.mean(returns['eqxrl']):.1f} +- "
        f"{np.std(returns['eqxrl']):.1f}, rejax {np.mean(returns['rejax']):.1f} +- "
        f"{np.std(returns['rejax']):.1f}"
    )


def run_defaults_part(
    algorithms: list[str],
    seeds: int,
    total_timesteps: int,
    bar_steps: int,
    learning_starts: int | None = None,
) -> None:
    """`learning_starts` other than the default's: the smoke run only."""
    extra = {} if learning_starts is None else {"learning_starts": learning_starts}
    for name in algorithms:
        cls = {"TD3": eqxrl.TD3, "DDPG": eqxrl.DDPG}[name]
        algorithm = cls(
            env=eqxrl.envs.make("Pendulum-v1"),
            total_timesteps=total_timesteps,
            **extra,
        )
        _, metrics, compile_seconds, seconds = train_seeds(
            algorithm, seeds, 42, algorithm.compiler_options
        )
        final = final_return(metrics["episode_return"], last=bar_steps)
        print(
            f"\n{name} at its defaults on Pendulum-v1, {total_timesteps:,} steps x "
            f"{seeds} seeds vmapped: compile {compile_seconds:.1f} s, run "
            f"{seconds:.1f} s ({seeds * total_timesteps / seconds:,.0f} steps/s)"
        )
        print(
            f"  mean training return over the last {bar_steps:,} steps per seed: "
            + ", ".join(f"{value:.1f}" for value in final)
            + f"; above -250: {(final > -250).sum()} of {seeds}"
        )


def main() -> None:
    args = command_line(
        __doc__,
        parts=["peers", "defaults"],
        pairs=5,
        peer_steps=REJAX_TD3["total_timesteps"],
        episodes=16,
        seeds=4,
        defaults_steps=20_000,
        algorithms=["TD3", "DDPG"],
        smoke={"action": "store_true", "help": "toy sizes: check that it runs"},
    ).parse_args()
    bar_steps, learning_starts = 2_000, None
    if args.smoke:
        args.pairs, args.peer_steps, args.episodes = 1, 2_000, 2
        # Two episodes, 100 updates: the code path, not a learner.
        args.seeds, args.defaults_steps, bar_steps = 2, 400, 200
        learning_starts = 300
    print(
        f"jax {jax.__version__}, eqxrl {eqxrl.__version__}, backend "
        f"{jax.default_backend()}"
    )
    if "peers" in args.parts:
        run_peers_part(args.peer_steps, args.pairs, args.episodes)
    if "defaults" in args.parts:
        run_defaults_part(
            args.algorithms, args.seeds, args.defaults_steps, bar_steps, learning_starts
        )


if __name__ == "__main__":
    main()
