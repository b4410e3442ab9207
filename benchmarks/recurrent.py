"""Recurrent PPO: speed against PureJaxRL's `ppo_rnn.py`, and the memory tasks.

`speed` (peers venv): GRU PPO against `ppo_rnn.py`, then the feed-forward programs,
`--pairs` rounds; `--purejaxrl` is a folder with PureJaxRL's `ppo_rnn.py`, `ppo.py`
and `wrappers.py` (`FLAX_PATCHES` adapts them to Flax 0.12 in memory). `learning`:
the bars on `TASKS`, `--seeds` seeds vmapped. README: "Recurrent PPO".

    .venv-peers/bin/python benchmarks/recurrent.py speed --purejaxrl /tmp/pjrl
    .venv/bin/python benchmarks/recurrent.py learning
"""

import argparse
import functools
import statistics
from pathlib import Path

import jax
import numpy as np
from _harness import (
    PUREJAXRL_CONFIG,
    alternate,
    final_return,
    import_purejaxrl,
    last_part,
    lowered_program,
    purejaxrl_program,
    train_seeds,
)

import eqxrl

# ppo_rnn.py's own config: ppo.py's without the activation (GRU 128, ReLU).
PUREJAXRL_RNN_CONFIG = {
    **{k: v for k, v in PUREJAXRL_CONFIG.items() if k != "ACTIVATION"},
    "TOTAL_TIMESTEPS": 5e5,
}
FLAX_PATCHES = (
    (
        "nn.GRUCell.initialize_carry(\n"
        "            jax.random.PRNGKey(0), (batch_size,), hidden_size\n"
        "        )",
        "nn.GRUCell(features=hidden_size).initialize_carry(\n"
        "            jax.random.PRNGKey(0), (batch_size, hidden_size)\n"
        "        )",
    ),
    (
        "nn.GRUCell()(rnn_state, ins)",
        "nn.GRUCell(features=ins.shape[1])(rnn_state, ins)",
    ),
)


def eqxrl_program(recurrent: bool):
    # PureJaxRL's ActorCriticRNN: 128 ReLU embedding, GRU 128, 128 ReLU heads.
    factory = (
        functools.partial(
            eqxrl.nn.GRUActorCritic.from_env,
            hidden_size=128,
            encoder_sizes=(128,),
            head_sizes=(128,),
            activation=jax.nn.relu,
        )
        if recurrent
        else None
    )
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, network_factory=factory, total_timesteps=500_000)

    def facts(output, seed: int) -> dict:
        return {"final_return": float(final_return(output[1]["episode_return"]))}

    return lowered_program(ppo, facts=facts)


def purejaxrl(folder: Path, recurrent: bool):
    if recurrent:
        module = import_purejaxrl(folder / "ppo_rnn.py", FLAX_PATCHES)
        return purejaxrl_program(module, PUREJAXRL_RNN_CONFIG)
    return purejaxrl_program(import_purejaxrl(folder / "ppo.py"), PUREJAXRL_CONFIG)


def speed(pairs: int, folder: Path) -> None:
    medians = {}
    for recurrent in (True, False):
        kind = "recurrent (GRU 128)" if recurrent else "feed-forward (64x64 tanh)"
        print(f"\nPPO CartPole-v1, 4 envs x 128 steps, 5e5 steps, {kind}")
        programs = {
            "eqxrl": eqxrl_program(recurrent),
            "purejaxrl": purejaxrl(folder, recurrent),
        }
        for name, program in programs.items():
            print(
                f"  {name}: compile {program.compile_seconds:.1f} s, "
                f"{program.work:,} steps/run"
            )
        result = alternate(programs, pairs)
        for name in programs:
            rates = result.rates(name)
            returns = [round(x, 1) for x in result.fact(name, "final_return")]
            print(
                f"  {name}: steps/s median {statistics.median(rates):,.0f} best "
                f"{max(rates):,.0f}; final return (last 10 iterations) per round "
                f"{returns}"
            )
        ratios = result.ratios("eqxrl", "purejaxrl")
        print(
            f"  ratio eqxrl/purejaxrl per round {[round(x, 3) for x in ratios]}: "
            f"median {statistics.median(ratios):.3f}x, best {max(ratios):.3f}x"
        )
        medians[recurrent] = {n: statistics.median(result.rates(n)) for n in programs}
    for name in ("eqxrl", "purejaxrl"):
        ratio = medians[True][name] / medians[False][name]
        print(f"  {name}: recurrent/feed-forward throughput {ratio:.3f}")


def memory_chain_env():
    import gymnax

    return eqxrl.envs.from_gymnax(*gymnax.make("MemoryChain-bsuite"))


TASKS = {
    "StatelessCartPole-v1": (
        lambda: eqxrl.envs.make("StatelessCartPole-v1"),
        dict(num_envs=32, num_steps=128, total_timesteps=2_000_000),
    ),
    "MemoryChain-bsuite": (
        memory_chain_env,
        dict(num_envs=32, num_steps=64, total_timesteps=1_000_000),
    ),
}


def learning(seeds: int, tasks: list[str], total_timesteps: int | None) -> None:
    for task in tasks:
        make_env, options = TASKS[task]
        if total_timesteps is not None:  # smaller runs (the test suite's smoke run)
            options = {**options, "total_timesteps": total_timesteps}
        print(f"\n{task}: {options}, {seeds} seeds vmapped")
        for network in ("gru", "feed-forward"):
            factory = eqxrl.nn.GRUActorCritic.from_env if network == "gru" else None
            ppo = eqxrl.PPO(env=make_env(), network_factory=factory, **options)
            _, metrics, compile_seconds, seconds = train_seeds(ppo, seeds)
            returns = np.asarray(metrics["episode_return"])  # [seeds, iterations]
            last = max(1, returns.shape[1] // 20)
            per_seed = last_part(returns, 20)
            if task == "MemoryChain-bsuite":  # returns are +1 (right) or -1
                per_seed = (per_seed + 1.0) / 2.0
                label = "fraction right"
            else:
                label = "mean return"
            print(
                f"  {network}: {label} over the last {last} iterations per seed "
                f"{np.round(per_seed, 3).tolist()} (compile {compile_seconds:.0f} s, "
                f"run {seconds:.0f} s)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    speed_parser = sub.add_parser("speed")
    speed_parser.add_argument("--purejaxrl", type=Path, required=True)
    speed_parser.add_argument("--pairs", type=int, default=5)
    learning_parser = sub.add_parser("learning")
    learning_parser.add_argument("--seeds", type=int, default=4)
    learning_parser.add_argument(
        "--tasks", nargs="+", default=list(TASKS), choices=list(TASKS)
    )
    learning_parser.add_argument(
        "--total-timesteps", type=int, help="instead of each task's (smoke runs)"
    )
    arguments = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    if arguments.command == "speed":
        speed(arguments.pairs, arguments.purejaxrl)
    else:
        learning(arguments.seeds, arguments.tasks, arguments.total_timesteps)


if __name__ == "__main__":
    main()
