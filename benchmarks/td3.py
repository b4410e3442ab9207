"""TD3 on Pendulum-v1: against rejax's TD3, and eqxrl's defaults against the bar.

Two parts (`--parts`, default both):

- `peers`: training speed of eqxrl's `TD3` against rejax 0.1.3's on rejax's own
  Pendulum settings (the `td3` section of its `configs/gymnax/pendulum.yaml`, printed
  below; rejax's noises are in the action space's units, Pendulum's `[-2, 2]`, and
  eqxrl's in `[-1, 1]`: halved), alternating eqxrl's and rejax's runs (A B A B,
  `--pairs` rounds after one untimed warm-up each) in one process; the speed ratio
  of each round, the median and best round ratio; compile times apart. rejax's
  periodic evaluation is replaced by a no-op so that only training is timed. Each
  round trains a new seed; the final return of each is its greedy policy's mean over
  `--episodes` episodes (rejax's `evaluate` for rejax, `eqxrl.training.evaluate` on
  eqxrl's Pendulum for eqxrl), reported as mean and spread over the rounds. Both
  sides use swish networks of 64x64 (an eqxrl `TD3` whose `make_networks` passes
  `activation=jax.nn.swish`). Needs the peers venv (rejax, gymnax 0.0.9); skipped
  when rejax is missing.
- `defaults`: `eqxrl.TD3(env=make("Pendulum-v1"), total_timesteps=20_000)` (and
  `eqxrl.DDPG`, `--algorithms`), nothing else set, `--seeds` seeds vmapped in one
  program: compile time, wall time, and each seed's mean training return over the
  last 2,000 steps, against the bar (above -250 on 3 of 4 seeds).

Run (from the repository root; rejax needs the peers venv):

    NPROC=8 .venv-peers/bin/python benchmarks/td3.py --parts peers --pairs 5
    NPROC=8 .venv/bin/python benchmarks/td3.py --parts defaults --seeds 4
    .venv/bin/python benchmarks/td3.py --smoke   # a quick check of both parts
"""

import argparse
import importlib.util
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl

# rejax's configs/gymnax/pendulum.yaml, section td3 (rejax at 0.1.3's tree).
REJAX_TD3 = dict(
    env="Pendulum-v1",
    actor_kwargs={"activation": "swish"},
    critic_kwargs={"activation": "swish"},
    num_envs=1,
    buffer_size=10_000,
    fill_buffer=1_000,
    batch_size=100,
    learning_rate=0.001,
    num_epochs=1,
    total_timesteps=10_000,
    eval_freq=100,
    gamma=0.99,
    polyak=0.95,
    max_grad_norm=100,
    exploration_noise=0.3,
    target_noise=0.2,
    target_noise_clip=0.5,
    policy_delay=2,
    normalize_observations=True,
)


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
    return SwishTD3(
        env=eqxrl.envs.make("Pendulum-v1"),
        num_envs=1,
        total_timesteps=total_timesteps,
        buffer_size=10_000,
        learning_starts=1_000,
        train_frequency=1,
        gradient_steps=1,
        batch_size=100,
        policy_delay=2,
        tau=0.05,
        gamma=0.99,
        learning_rate=1e-3,
        exploration_noise=0.3 / half_range,
        policy_noise=0.2 / half_range,
        noise_clip=0.5 / half_range,
        hidden_sizes=(64, 64),
        normalize_observations=True,
    )


def eqxrl_runner(algorithm, episodes: int):
    train = eqx.filter_jit(
        lambda algorithm, key: algorithm.train(key)[0],
        compiler_options=algorithm.compiler_options,
    )
    start = time.perf_counter()
    compiled = train.lower(algorithm, jr.key(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int):
        start = time.perf_counter()
        state = jax.block_until_ready(compiled(algorithm, jr.key(seed)))
        return time.perf_counter() - start, state

    def final_return(state, seed: int) -> float:
        policy = algorithm.policy(state, deterministic=True)
        result = eqxrl.training.evaluate(
            policy, algorithm.env, jr.key(1_000 + seed), num_episodes=episodes
        )
        return float(result.summary()["return_mean"])

    return run, compile_seconds, final_return


def rejax_runner(total_timesteps: int):
    import rejax

    original = rejax.TD3.create(**{**REJAX_TD3, "total_timesteps": total_timesteps})
    algorithm = original.replace(
        eval_callback=lambda algo, ts, rng: jnp.float32(0),
        eval_freq=total_timesteps,
        skip_initial_evaluation=True,
    )
    train = jax.jit(lambda key: algorithm.train(key)[0])
    start = time.perf_counter()
    compiled = train.lower(jr.key(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int):
        start = time.perf_counter()
        state = jax.block_until_ready(compiled(jr.key(seed)))
        return time.perf_counter() - start, state

    def final_return(state, seed: int) -> float:
        _, returns = original.eval_callback(original, state, jr.key(1_000 + seed))
        return float(np.mean(returns))

    return run, compile_seconds, final_return


def run_peers_part(total_timesteps: int, pairs: int, episodes: int) -> None:
    if importlib.util.find_spec("rejax") is None:
        print("\npeers: skipped (rejax is not installed; use the peers venv)")
        return
    ours = eqxrl_td3_on_rejax_settings(total_timesteps)
    print(
        f"\nTD3 on rejax's Pendulum settings, {total_timesteps:,} steps, {pairs} "
        "rounds (A = eqxrl, B = rejax)"
    )
    print(f"  rejax config: {REJAX_TD3}")
    our_run, our_compile, our_final = eqxrl_runner(ours, episodes)
    peer_run, peer_compile, peer_final = rejax_runner(total_timesteps)
    our_run(0)  # warm-up
    peer_run(0)
    ours_sps, peer_sps, ratios, our_returns, peer_returns = [], [], [], [], []
    for seed in range(1, pairs + 1):
        seconds, our_state = our_run(seed)
        ours_sps.append(total_timesteps / seconds)
        seconds, peer_state = peer_run(seed)
        peer_sps.append(total_timesteps / seconds)
        ratios.append(ours_sps[-1] / peer_sps[-1])
        our_returns.append(our_final(our_state, seed))
        peer_returns.append(peer_final(peer_state, seed))
        print(
            f"  round {seed}: eqxrl {ours_sps[-1]:>8,.0f} steps/s, rejax "
            f"{peer_sps[-1]:>7,.0f} steps/s, ratio {ratios[-1]:.2f}x; final greedy "
            f"return eqxrl {our_returns[-1]:.1f}, rejax {peer_returns[-1]:.1f}",
            flush=True,
        )
    print(
        f"  median ratio {statistics.median(ratios):.2f}x, best round "
        f"{max(ratios):.2f}x; median steps/s eqxrl {statistics.median(ours_sps):,.0f},"
        f" rejax {statistics.median(peer_sps):,.0f}"
    )
    print(
        f"  compile s: eqxrl {our_compile:.1f}, rejax {peer_compile:.1f}; final greedy"
        f" return ({episodes} episodes per seed, mean +- std over {pairs} seeds): "
        f"eqxrl {np.mean(our_returns):.1f} +- {np.std(our_returns):.1f}, rejax "
        f"{np.mean(peer_returns):.1f} +- {np.std(peer_returns):.1f}"
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
        train = eqx.filter_jit(
            eqx.filter_vmap(lambda key: algorithm.train(key)[1]),
            compiler_options=algorithm.compiler_options,
        )
        keys = jr.split(jr.key(42), seeds)
        start = time.perf_counter()
        compiled = train.lower(keys).compile()
        compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        metrics = jax.block_until_ready(compiled(keys))
        seconds = time.perf_counter() - start
        returns = np.asarray(metrics["episode_return"])[:, -bar_steps:]
        final = np.nanmean(returns, axis=1)
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["peers", "defaults"])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--peer-steps", type=int, default=REJAX_TD3["total_timesteps"])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--defaults-steps", type=int, default=20_000)
    parser.add_argument("--algorithms", nargs="+", default=["TD3", "DDPG"])
    parser.add_argument(
        "--smoke", action="store_true", help="toy sizes: check that it runs"
    )
    args = parser.parse_args()
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
