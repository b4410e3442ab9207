"""PQN against purejaxql, and against eqxrl's own DQN.

Parts (`--parts`, default `speed` and `headline`; README: "TD3 against rejax, PQN
against purejaxql"): `speed` (against purejaxql's `pqn_gymnax.py`, `--steps`,
`--pairs`), `headline` (seconds to a greedy 475 on CartPole, PQN and DQN),
`memory` (PQN-RNN on MemoryChain) and `minatar` (Breakout-MinAtar against
`pqn_minatar.py`). purejaxql is not on PyPI: `--purejaxql FOLDER` holds its files
(github.com/mttga/purejaxql); its unused imports are stood in for.

    .venv-peers/bin/python benchmarks/pqn.py --purejaxql /tmp/purejaxql
"""

import functools
import statistics
from pathlib import Path

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
from _harness import (
    alternate,
    command_line,
    compile_program,
    greedy_return,
    import_file,
    last_part,
    missing,
    print_comparison,
    seed_of,
    timed,
    train_seeds,
)

import eqxrl

# fmt: off
PURE_JAXQL_CONFIG = {  # purejaxql/config/alg/pqn_cartpole.yaml
    "ALG_NAME": "pqn", "TOTAL_TIMESTEPS": 5e5, "TOTAL_TIMESTEPS_DECAY": 5e5,
    "NUM_ENVS": 32, "NUM_STEPS": 64, "EPS_START": 1.0, "EPS_FINISH": 0.2,
    "EPS_DECAY": 0.2, "NUM_MINIBATCHES": 16, "NUM_EPOCHS": 4, "NORM_INPUT": False,
    "HIDDEN_SIZE": 256, "NUM_LAYERS": 2, "NORM_TYPE": "layer_norm", "LR": 0.0001,
    "MAX_GRAD_NORM": 10, "LR_LINEAR_DECAY": True, "REW_SCALE": 0.1, "GAMMA": 0.99,
    "LAMBDA": 0.95, "ENV_NAME": "CartPole-v1", "ENV_KWARGS": {},
    # Training only: no evaluation inside the program, no wandb.
    "TEST_DURING_TRAINING": False, "WANDB_MODE": "disabled",
}
MINATAR_ENV = "Breakout-MinAtar"
PURE_JAXQL_MINATAR_CONFIG = {  # purejaxql/config/alg/pqn_minatar.yaml
    "ALG_NAME": "pqn", "NUM_ENVS": 128, "NUM_STEPS": 32, "EPS_START": 1.0,
    "EPS_FINISH": 0.05, "EPS_DECAY": 0.1, "NUM_MINIBATCHES": 32, "NUM_EPOCHS": 2,
    "NORM_TYPE": "layer_norm", "LR": 0.0005, "MAX_GRAD_NORM": 10,
    "LR_LINEAR_DECAY": True, "GAMMA": 0.99, "LAMBDA": 0.65,
    "ENV_NAME": MINATAR_ENV,  # the yaml's example is Asterix; the Breakout
    "ENV_KWARGS": {}, "TEST_DURING_TRAINING": False, "WANDB_MODE": "disabled",
}
# fmt: on
GREEDY_BAR = 475.0
MEMORY_LENGTH = 100  # pqn_rnn_memory_chain.yaml's ENV_KWARGS
MEMORY_BAR = 0.9


def import_purejaxql(folder: Path, name: str = "pqn_gymnax"):
    """purejaxql's `{name}.py` from `folder`, its unused imports stood in for."""
    stubs = ("hydra", "omegaconf", "safetensors", "safetensors.flax", "wandb")
    return import_file(folder / f"{name}.py", stubs)


def purejaxql_train(module, config: dict, steps: int):
    """purejaxql's `make_train` for `steps` steps, its schedules over those."""
    config = {**config, "TOTAL_TIMESTEPS": steps, "TOTAL_TIMESTEPS_DECAY": steps}
    return module.make_train(config)


def compare_speed(label: str, pqn: eqxrl.PQN, module, config: dict, pairs: int):
    """eqxrl's PQN against purejaxql's at `config`, one seed each, alternating,
    compile apart; eqxrl alone without purejaxql's file."""
    steps = pqn.num_iterations * pqn.steps_per_iteration
    print(f"\n{label}, {steps:,} steps")
    keys = lambda seed: (jr.key(seed),)  # noqa: E731
    ours = compile_program(eqx.filter_jit(lambda key: pqn.train(key)), keys, steps)
    if module is None:
        print("  purejaxql: skipped (no --purejaxql FOLDER)")
        seconds, _ = ours.run(1)
        print(
            f"  eqxrl: compile {ours.compile_seconds:.1f} s, "
            f"{steps / seconds:,.0f} steps/s"
        )
        return
    train = jax.jit(purejaxql_train(module, config, steps))
    peer = compile_program(train, lambda seed: (jr.PRNGKey(seed),), steps)
    print_comparison(alternate({"eqxrl": ours, "purejaxql": peer}, pairs))


def speed(options) -> None:
    pqn = eqxrl.PQN(env=eqxrl.envs.make("CartPole-v1"), total_timesteps=options.steps)
    module = None if options.purejaxql is None else import_purejaxql(options.purejaxql)
    label = "PQN CartPole, purejaxql's pqn_cartpole config"
    compare_speed(label, pqn, module, PURE_JAXQL_CONFIG, options.pairs)


def time_to_greedy(algorithm, seed: int) -> tuple[float | None, int, float]:
    """Training seconds (compile apart) until the greedy policy averages at least
    `GREEDY_BAR` over 16 episodes, checked after every chunk of about 16k steps:
    `(seconds or None, steps, best greedy return)`."""
    chunk = max(1, 16_384 // algorithm.steps_per_iteration)
    run = eqx.filter_jit(lambda a, s: a.train_iterations(s, chunk))
    state = eqx.filter_jit(algorithm.init)(jr.key(seed))
    compiled = run.lower(algorithm, state).compile()
    elapsed, best = 0.0, -np.inf
    for done in range(chunk, algorithm.num_iterations + 1, chunk):
        seconds, (state, _) = timed(compiled, algorithm, state)
        elapsed += seconds
        policy = algorithm.policy(state, deterministic=True)
        greedy = greedy_return(policy, algorithm.env, seed, 16)
        best = max(best, greedy)
        if greedy >= GREEDY_BAR:
            return elapsed, done * algorithm.steps_per_iteration, best
    return None, algorithm.num_iterations * algorithm.steps_per_iteration, best


def headline_times(algorithms: dict, seeds: int, stop=lambda: False) -> dict:
    """Each seed's `time_to_greedy` per algorithm, alternating within a seed (until
    `stop()`)."""
    times: dict[str, list] = {name: [] for name in algorithms}
    for seed in range(seeds):
        for name, algorithm in algorithms.items():
            if stop():
                return times
            seconds, steps, best = time_to_greedy(algorithm, seed)
            times[name].append(dict(seed=seed, seconds=seconds, steps=steps, best=best))
            reached = (
                f"{seconds:.1f} s ({steps:,} steps)"
                if seconds is not None
                else f"not reached in {steps:,} steps (best {best:.0f})"
            )
            print(f"  seed {seed} {name}: {reached}", flush=True)
    return times


def median_seconds(times: dict) -> tuple[dict, float | None]:
    """Each algorithm's median over the seeds that reached the bar (`None`: none
    did), and DQN's over PQN's."""
    medians = {}
    for name, runs in times.items():
        reached = [run["seconds"] for run in runs if run["seconds"] is not None]
        medians[name] = statistics.median(reached) if reached else None
    ratio = None
    if medians.get("DQN") is not None and medians.get("PQN"):
        ratio = medians["DQN"] / medians["PQN"]
    return medians, ratio


def headline(options) -> None:
    env = eqxrl.envs.make("CartPole-v1")
    makers = {"PQN": eqxrl.PQN, "DQN": eqxrl.DQN}
    algorithms = {
        name: makers[name](env=env, total_timesteps=options.headline_steps)
        for name in options.headline_algorithms
    }
    print(
        f"\nWall time to a greedy {GREEDY_BAR:.0f} on CartPole-v1 (defaults, up to "
        f"{options.headline_steps:,} steps, {options.seeds} seed(s) alternating)"
    )
    times = headline_times(algorithms, options.seeds)
    medians, ratio = median_seconds(times)
    for name, runs in times.items():
        reached = sum(run["seconds"] is not None for run in runs)
        median = medians[name] if medians[name] is not None else float("nan")
        print(f"  {name}: reached on {reached} of {len(runs)} seeds, ", end="")
        print(f"median {median:.1f} s")
    if ratio is not None:
        print(f"  DQN / PQN median time: {ratio:.1f}x")


def memory_chain_pqn(total_timesteps: int, layer_norm: bool = True) -> eqxrl.PQN:
    """PQN-RNN at purejaxql's `pqn_rnn_memory_chain` config."""
    import gymnax
    from gymnax.environments.bsuite.memory_chain import EnvParams

    gymnax_env, _ = gymnax.make("MemoryChain-bsuite")
    env = eqxrl.envs.from_gymnax(gymnax_env, EnvParams(memory_length=MEMORY_LENGTH))
    # fmt: off
    return eqxrl.PQN(
        env=env, num_envs=32, num_steps=128, total_timesteps=total_timesteps,
        num_epochs=4, num_minibatches=16, learning_rate=1e-3, anneal_lr=False,
        max_grad_norm=10.0, gamma=0.99, q_lambda=0.95, reward_scale=1.0,
        exploration_initial_eps=1.0, exploration_final_eps=0.01,
        exploration_fraction=0.1, hidden_sizes=(256, 256), layer_norm=layer_norm,
        gru_size=256,
    )
    # fmt: on


def memory(options) -> None:
    if missing("gymnax"):
        print("\nPQN-RNN MemoryChain: skipped (gymnax is not installed)")
        return
    pqn = memory_chain_pqn(options.memory_steps, not options.memory_no_layer_norm)
    steps = pqn.num_iterations * pqn.steps_per_iteration
    print(
        f"\nPQN-RNN MemoryChain-bsuite (memory {MEMORY_LENGTH}), purejaxql's "
        f"pqn_rnn_memory_chain config, {steps:,} steps x {options.seeds} seed(s) "
        "vmapped"
    )
    states, _, compile_seconds, seconds = train_seeds(pqn, options.seeds)
    print(
        f"  compile {compile_seconds:.1f} s, train {seconds:.1f} s "
        f"({seconds / pqn.num_iterations:.2f} s per iteration of {options.seeds} "
        "seed(s))"
    )
    returns = greedy_returns(pqn, states, options.seeds, 128)
    for seed, value in enumerate(returns):
        print(f"  seed {seed}: greedy mean return {value:.3f} (128 episodes)")
    solved = sum(r >= MEMORY_BAR for r in returns)
    print(
        f"  solved (greedy mean >= {MEMORY_BAR}) on {solved} of {options.seeds} seeds"
    )


def greedy_returns(pqn: eqxrl.PQN, states, seeds: int, episodes: int) -> list:
    """Each vmapped seed's greedy return."""
    policies = [
        pqn.policy(seed_of(states, i), deterministic=True) for i in range(seeds)
    ]
    return [greedy_return(p, pqn.env, i, episodes) for i, p in enumerate(policies)]


def minatar_pqn(total_timesteps: int) -> eqxrl.PQN:
    """PQN at purejaxql's `pqn_minatar` config on gymnax's `Breakout-MinAtar`, its
    schedules spread over `total_timesteps`."""
    import gymnax

    gymnax_env, params = gymnax.make(MINATAR_ENV)
    # fmt: off
    return eqxrl.PQN(
        env=eqxrl.envs.from_gymnax(gymnax_env, params), num_envs=128, num_steps=32,
        total_timesteps=total_timesteps, num_epochs=2, num_minibatches=32,
        learning_rate=5e-4, anneal_lr=True, max_grad_norm=10.0, gamma=0.99,
        q_lambda=0.65, reward_scale=1.0, exploration_initial_eps=1.0,
        exploration_final_eps=0.05, exploration_fraction=0.1,
        # purejaxql's network divides the 0/1 boards by 255 before its LayerNorm CNN.
        network_factory=functools.partial(
            eqxrl.nn.CNNQNetwork.from_env, observation_scale=1 / 255
        ),
    )
    # fmt: on


def minatar(options) -> None:
    if missing("gymnax"):
        print("\nPQN MinAtar Breakout: skipped (gymnax is not installed)")
        return
    module = None
    if options.purejaxql is not None:
        module = import_purejaxql(options.purejaxql, "pqn_minatar")
    if options.minatar_speed_steps > 0:
        label = f"PQN {MINATAR_ENV}, purejaxql's pqn_minatar config, speed"
        pqn = minatar_pqn(options.minatar_speed_steps)
        config = PURE_JAXQL_MINATAR_CONFIG
        compare_speed(label, pqn, module, config, options.pairs)
    if options.minatar_steps > 0:
        minatar_learning(options, module)


def minatar_learning(options, module) -> None:
    """`--seeds` seeds vmapped in one program per side, one side after the
    other; the return of the training episodes over the last 10%."""
    pqn = minatar_pqn(options.minatar_steps)
    steps = pqn.num_iterations * pqn.steps_per_iteration
    print(
        f"\nPQN {MINATAR_ENV} learning, {steps:,} steps x {options.seeds} seed(s) "
        "vmapped per side; training episodes' return over the last 10%"
    )
    sides = ["eqxrl"] if module is None else ["eqxrl", "purejaxql"]
    for side in options.minatar_sides or sides:
        if side == "eqxrl":
            states, metrics, *seconds = train_seeds(pqn, options.seeds)
            per_seed = np.asarray(metrics["episode_return"])
        elif module is not None:  # compiled in the call
            config = PURE_JAXQL_MINATAR_CONFIG
            train = jax.jit(jax.vmap(purejaxql_train(module, config, steps)))
            seconds, out = timed(train, jr.split(jr.PRNGKey(0), options.seeds))
            seconds = [seconds]
            per_seed = np.asarray(out["metrics"]["returned_episode_returns"])
        else:
            continue
        returns = last_part(per_seed)
        print(
            f"  {side}: mean {np.mean(returns):.2f} (seeds "
            + ", ".join(f"{r:.2f}" for r in returns)
            + f"); {sum(seconds):.0f} s with compilation",
            flush=True,
        )
        if side == "eqxrl":
            greedy = greedy_returns(pqn, states, options.seeds, 32)
            print(
                "  eqxrl greedy (32 episodes each): "
                + ", ".join(f"{g:.2f}" for g in greedy)
            )


def main() -> None:
    options = command_line(
        __doc__,
        parts={"nargs": "+", "choices": ("speed", "headline", "memory", "minatar")},
        purejaxql=Path,
        steps=500_000,
        pairs=5,
        seeds=4,
        headline_steps=500_000,
        memory_steps=100_000,
        memory_no_layer_norm=False,
        minatar_speed_steps=262_144,
        minatar_steps=2_000_000,
        minatar_sides={"nargs": "+", "choices": ("eqxrl", "purejaxql")},
        headline_algorithms=("PQN", "DQN"),
    ).parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    for part in options.parts or ("speed", "headline"):
        parts = {"speed": speed, "headline": headline, "memory": memory}
        parts["minatar"] = minatar
        parts[part](options)


if __name__ == "__main__":
    main()
