"""Value-based learning on CartPole-v1: the replay buffer, DQN and IQN, against rejax.

Parts (`--parts`; README: "Value-based"): `buffer` (`ReplayBuffer.add` and `sample`
per `--capacities`, and whether the donated `add` is in place), `peers` (against
rejax 0.1.3's DQN and IQN at `REJAX`, `--pairs` rounds; skipped without rejax) and
`defaults` (at their defaults, `--seeds` vmapped, against >= 400 on 3 of 4 seeds).

    .venv-peers/bin/python benchmarks/value_based.py
"""

import dataclasses
import importlib.metadata
import statistics
from collections.abc import Callable

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
from _harness import (
    alternate,
    block,
    command_line,
    greedy_return,
    last_part,
    print_comparison,
    rejax_program,
    timed,
    train_program,
    train_seeds,
)

import eqxrl
from eqxrl.buffers import ReplayBuffer, ReplayTransition

# --------------------------------------------------------------------------------------
# Replay buffer


def cartpole_batch(num_envs: int) -> ReplayTransition:
    """A batch of CartPole-shaped transitions (one per environment)."""

    def one(index):
        observation = jnp.full(4, index, jnp.float32)
        return ReplayTransition(
            observation=observation,
            action=index % 2,
            reward=jnp.float32(1.0),
            terminated=index % 7 == 0,
            truncated=jnp.bool_(False),
            next_observation=observation + 1.0,
        )

    return jax.vmap(one)(jnp.arange(num_envs, dtype=jnp.int32))


def best_seconds(run: Callable[[], object], repeats: int) -> float:
    block(run())  # warm-up
    return min(timed(run)[0] for _ in range(repeats))


def measure_buffer(capacity: int, repeats: int = 5) -> dict:
    batch = cartpole_batch(1)
    scan_adds, calls, draws, batch_size = 4096, 200, 1024, 128

    def add_in_scan_impl(buffer, batch):
        def body(buffer, step):
            item = jax.tree.map(lambda x: x + step.astype(x.dtype), batch)
            return buffer.add(item), None

        return lax.scan(body, buffer, jnp.arange(scan_adds, dtype=jnp.int32))[0]

    add_in_scan = jax.jit(add_in_scan_impl, donate_argnums=0)
    add_donated = jax.jit(ReplayBuffer.add, donate_argnums=0)
    add_copied = jax.jit(ReplayBuffer.add)

    def draw_in_scan(n_step):
        @jax.jit
        def draw(buffer, key):
            def body(total, key):
                sample = buffer.sample(key, batch_size, n_step=n_step, gamma=0.99)
                return total + sample.reward.sum() + sample.observation.sum(), None

            return lax.scan(body, jnp.float32(0), jr.split(key, draws))[0]

        return draw

    state = {"buffer": ReplayBuffer.empty(batch, capacity)}
    state["buffer"] = add_in_scan(state["buffer"], batch)  # compile, fill a bit

    def run_scan():
        state["buffer"] = add_in_scan(state["buffer"], batch)
        return state["buffer"].size

    def run_calls(add):
        def run():
            buffer = state["buffer"]
            for _ in range(calls):
                buffer = add(buffer, batch)
            state["buffer"] = buffer
            return buffer.size

        return run

    results = {
        "capacity": capacity,
        "add_scan_us": best_seconds(run_scan, repeats) / scan_adds * 1e6,
        "add_donated_us": best_seconds(run_calls(add_donated), repeats) / calls * 1e6,
        "add_copied_us": best_seconds(run_calls(add_copied), repeats) / calls * 1e6,
    }
    for n_step in (1, 3):
        draw = draw_in_scan(n_step)
        seconds = best_seconds(lambda: draw(state["buffer"], jr.key(0)), repeats)
        results[f"sample{n_step}_us"] = seconds / draws * 1e6
    compiled = add_donated.lower(state["buffer"], batch).compile().as_text()
    results["in_place"] = (
        "dynamic-update-slice" in compiled and "input_output_alias" in compiled
    )
    return results


def run_buffer_part(capacities: list[int]) -> None:
    print(
        "\nReplay buffer: CartPole-shaped transitions, 1 env per row; microseconds "
        "per operation (best of 5)"
    )
    print(
        f"{'capacity':>10} {'add in scan':>12} {'add donated':>12} "
        f"{'add copied':>11} {'sample 1-step':>14} {'sample 3-step':>14} "
        f"{'in place':>9}"
    )
    for capacity in capacities:
        r = measure_buffer(capacity)
        print(
            f"{r['capacity']:>10,} {r['add_scan_us']:>12.2f} "
            f"{r['add_donated_us']:>12.1f} {r['add_copied_us']:>11.1f} "
            f"{r['sample1_us']:>14.1f} {r['sample3_us']:>14.1f} "
            f"{str(r['in_place']):>9}",
            flush=True,
        )
    print(
        "  add in scan: per add, buffer carried by lax.scan (as in DQN/IQN); add "
        "donated / copied: one jitted call per add (includes dispatch) with / "
        "without donating the buffer; sample: batch 128, per draw, in a scan."
    )


# --------------------------------------------------------------------------------------
# eqxrl vs rejax on rejax's settings

# rejax's configs/gymnax/cartpole.yaml (rejax 0.1.3 field names).
# fmt: off
REJAX = {
    "DQN": dict(
        env="CartPole-v1", agent="DuelingQNetwork",
        agent_kwargs=dict(activation="swish"), num_envs=10, buffer_size=50_000,
        fill_buffer=5_000, batch_size=100, max_grad_norm=10, learning_rate=0.001,
        num_epochs=5, polyak=0.98, eps_start=1, eps_end=0.05,
        exploration_fraction=0.5, gamma=0.99, ddqn=True, normalize_observations=False,
    ),
    "IQN": dict(
        env="CartPole-v1", agent_kwargs=dict(activation="swish"), num_envs=1,
        buffer_size=100_000, fill_buffer=1000, batch_size=1, num_tau_samples=64,
        num_tau_prime_samples=64, learning_rate=0.0003, num_epochs=1,
        target_update_freq=1, polyak=0.99, kappa=1.0, eps_start=1, eps_end=0.01,
        exploration_fraction=0.5, gamma=0.99, normalize_observations=False,
    ),
}
# fmt: on


def eqxrl_dqn_on_rejax_settings(total_timesteps: int) -> eqxrl.DQN:
    """eqxrl's DQN with rejax's CartPole DQN numbers: 10 envs, 5 updates of batch
    100 per step of all envs, dueling 64x64 swish network, Polyak 0.98 once per
    iteration, 1-step targets, squared loss (an infinite Huber threshold), lr
    1e-3. rejax's `max_grad_norm=10` is `optax.clip(10)`, each gradient entry clipped
    to [-10, 10]; eqxrl clips the global norm at 10 instead, which costs eqxrl a
    reduction over all gradients per update."""

    def network(env, key):
        return eqxrl.nn.MLPQNetwork(
            4, 2, hidden_sizes=(64, 64), activation=jax.nn.swish, dueling=True, key=key
        )

    # fmt: off
    return eqxrl.DQN(
        env=eqxrl.envs.make("CartPole-v1"), num_envs=10,
        total_timesteps=total_timesteps, buffer_size=50_000, learning_starts=5_000,
        train_frequency=1, gradient_steps=5, batch_size=100, n_step=1,
        target_update_interval=5, tau=0.02, double_q=True, learning_rate=1e-3,
        max_grad_norm=10.0, huber_delta=float("inf"), gamma=0.99,
        exploration_initial_eps=1.0, exploration_final_eps=0.05,
        exploration_fraction=0.5, network_factory=network,
    )
    # fmt: on


def eqxrl_iqn_on_rejax_settings(total_timesteps: int) -> eqxrl.IQN:
    """eqxrl's IQN with rejax's CartPole IQN numbers: 1 env, an update of batch 1
    every step, N = N' = 64, K = 32, 64x64 swish torso, 64 cosines, a 64 swish head,
    Polyak 0.99 every update, kappa 1, lr 3e-4, no gradient clipping (as rejax:
    `max_grad_norm=None`, so no gradient norm is computed either)."""

    def network(env, key):
        return eqxrl.nn.ImplicitQuantileNetwork(
            4, 2, hidden_sizes=(64, 64), head_sizes=(64,), num_cosines=64,
            num_acting_quantiles=32, activation=jax.nn.swish, key=key,
        )  # fmt: skip

    # fmt: off
    return eqxrl.IQN(
        env=eqxrl.envs.make("CartPole-v1"), num_envs=1,
        total_timesteps=total_timesteps, buffer_size=100_000, learning_starts=1_000,
        train_frequency=1, gradient_steps=1, batch_size=1, n_step=1,
        target_update_interval=1, tau=0.01, double_q=True, learning_rate=3e-4,
        adam_eps=1e-8, max_grad_norm=None, gamma=0.99, exploration_initial_eps=1.0,
        exploration_final_eps=0.01, exploration_fraction=0.5, num_quantiles=64,
        num_target_quantiles=64, num_acting_quantiles=32, kappa=1.0,
        network_factory=network,
    )
    # fmt: on


def compare_with_rejax(name: str, total_timesteps: int, pairs: int) -> None:
    make = {"DQN": eqxrl_dqn_on_rejax_settings, "IQN": eqxrl_iqn_on_rejax_settings}
    ours = make[name](total_timesteps)
    print(
        f"\n{name} on rejax's CartPole settings, {total_timesteps:,} steps, {pairs} "
        "rounds (A = eqxrl, B = rejax)"
    )
    print(f"  rejax config: {REJAX[name]}")
    programs = {
        "eqxrl": train_program(ours, total_timesteps),
        "rejax": rejax_program(name, REJAX[name], total_timesteps),
    }
    if ours.gradient_steps > 1:
        programs["doubled"] = train_program(with_doubled_updates(ours), total_timesteps)
    result = alternate(programs, pairs)
    print_comparison(result, peers=["rejax"])  # doubled: what one update costs
    our_state, peer_state = result.outputs["eqxrl"], result.outputs["rejax"]
    policy = eqx.tree_at(
        lambda p: p.epsilon,
        ours.policy(our_state, deterministic=True),
        jnp.float32(0.005),
    )
    print(
        f"  final greedy return (128 episodes, last round): eqxrl "
        f"{greedy_return(policy, ours.env, 0, 128):.1f}, rejax "
        f"{programs['rejax'].evaluate(peer_state, 0):.1f}"
    )
    if "doubled" not in programs:
        return  # one update per iteration: it runs without a loop, doubling adds one
    # What the updates alone allow: one update's time in situ (the doubled run takes
    # as many updates more as this one takes in all), times the updates per
    # iteration.
    doubled = zip(result.seconds["doubled"], result.seconds["eqxrl"], strict=True)
    updates = int(our_state.num_updates)
    update = statistics.median((d - s) / updates for d, s in doubled)
    cap = ours.steps_per_iteration / (update * ours.gradient_steps)
    peer = statistics.median(result.rates("rejax"))
    print(
        f"  one update (median over rounds of the run with {2 * ours.gradient_steps} "
        f"updates per iteration minus this one): {update * 1e6:.0f} us; "
        f"{ours.gradient_steps} per iteration alone allow at most {cap:,.0f} steps/s "
        f"= {cap / peer:.1f}x rejax's median"
    )


def with_doubled_updates(algorithm):
    """`algorithm` with twice the gradient steps per iteration, and twice the
    target-update interval unless it is 1 (then a target update follows every update
    and is part of its cost): the added run time is that of the added updates."""
    fields = {f.name: getattr(algorithm, f.name) for f in dataclasses.fields(algorithm)}
    fields["gradient_steps"] = 2 * algorithm.gradient_steps
    if algorithm.target_update_interval != 1:
        fields["target_update_interval"] = 2 * algorithm.target_update_interval
    return type(algorithm)(**fields)


# --------------------------------------------------------------------------------------
# The defaults against the learning bar


def run_defaults_part(seeds: int, total_timesteps: int = 500_000) -> None:
    print(
        f"\nDefaults on CartPole-v1, {total_timesteps:,} steps, {seeds} seeds vmapped"
    )
    env = eqxrl.envs.make("CartPole-v1")
    for cls in (eqxrl.DQN, eqxrl.IQN):
        algorithm = cls(env=env, total_timesteps=total_timesteps)
        _, metrics, compile_seconds, seconds = train_seeds(
            algorithm, seeds, 42, algorithm.compiler_options
        )
        final = last_part(metrics["episode_return"], 20)
        print(
            f"  {cls.__name__}: compile {compile_seconds:.1f} s, run {seconds:.1f} s, "
            f"{seeds * total_timesteps / seconds:,.0f} steps/s (all seeds); final "
            f"return per seed {[round(float(x), 1) for x in final]}; >= 400 on "
            f"{int((final >= 400).sum())} of {seeds}",
            flush=True,
        )


def main() -> None:
    args = command_line(
        __doc__,
        parts=("buffer", "peers", "defaults"),
        pairs=5,
        algorithms=("DQN", "IQN"),
        dqn_steps=100_000,
        iqn_steps=20_000,
        seeds=4,
        defaults_steps={
            "type": int,
            "default": 500_000,
            "help": "steps per seed of the defaults part (the bar needs 500,000)",
        },
        capacities=[1_000, 10_000, 100_000, 1_000_000],
    ).parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, eqxrl {eqxrl.__file__}")
    if "buffer" in args.parts:
        run_buffer_part(args.capacities)
    if "peers" in args.parts:
        try:
            import rejax  # noqa: F401

            print(f"\nrejax {importlib.metadata.version('rejax')}")
        except ImportError:
            print("\nrejax is not installed: skipping the comparison (use .venv-peers)")
        else:
            steps = {"DQN": args.dqn_steps, "IQN": args.iqn_steps}
            for name in args.algorithms:
                compare_with_rejax(name, steps[name], args.pairs)
    if "defaults" in args.parts:
        run_defaults_part(args.seeds, args.defaults_steps)


if __name__ == "__main__":
    main()
