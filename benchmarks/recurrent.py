"""Recurrent PPO: speed against PureJaxRL's `ppo_rnn.py`, and the memory tasks.

`speed` (the peers venv, `.venv-peers`): eqxrl PPO with
`eqxrl.nn.GRUActorCritic` against PureJaxRL's `purejaxrl/ppo_rnn.py` at its own
config (CartPole-v1, 4 envs x 128 steps, 5e5 steps, 4 epochs x 4 minibatches, GRU
128, `DEBUG` off: no host callback), alternating in one process for `--pairs`
rounds, compile time apart (ahead-of-time `.lower(...).compile()`), then the same
for the feed-forward programs (eqxrl's default PPO, PureJaxRL's `ppo.py`) to give
each library's recurrent/feed-forward throughput ratio. PureJaxRL is not on PyPI;
extract its files beside each other, outside this repository:

    for f in ppo_rnn.py ppo.py wrappers.py; do
        git --git-dir=<purejaxrl.git> show HEAD:purejaxrl/$f > /tmp/pjrl/$f
    done

`ppo_rnn.py` calls Flax's old static `nn.GRUCell.initialize_carry(key, (batch,),
hidden)`, which Flax 0.12 removed; the benchmark patches the two lines at import
(printed when it does), in memory: the file on disk is not changed:

    nn.GRUCell.initialize_carry(key, (batch_size,), hidden_size)
      -> nn.GRUCell(features=hidden_size).initialize_carry(
             key, (batch_size, hidden_size))
    nn.GRUCell()(rnn_state, ins) -> nn.GRUCell(features=ins.shape[1])(rnn_state, ins)

`learning` (any venv with gymnax): the issue's learning bars, 4 seeds vmapped in one
program per network:
- `StatelessCartPole-v1`, 32 envs x 128 steps, 2e6 steps, PPO's other defaults: the
  mean episode return over the last 5% of iterations per seed, GRU and the default
  feed-forward network.
- gymnax's `MemoryChain-bsuite` (memory length 5): the fraction of episodes right
  (return +1) over the last 5% of iterations per seed, GRU and feed-forward.

    .venv-peers/bin/python benchmarks/recurrent.py speed --purejaxrl /tmp/pjrl
    .venv/bin/python benchmarks/recurrent.py learning
"""

import argparse
import functools
import importlib.util
import statistics
import sys
import time
import types
from pathlib import Path

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

import eqxrl

PUREJAXRL_RNN_CONFIG = {
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
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
    "DEBUG": False,
}
PUREJAXRL_FF_CONFIG = {**PUREJAXRL_RNN_CONFIG, "ACTIVATION": "tanh"}

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
LAST_FRACTION = 0.05


def import_purejaxrl(folder: Path, name: str) -> types.ModuleType:
    """PureJaxRL's `name`.py from `folder` (beside its wrappers.py), with the Flax
    0.12 patch applied in memory to `ppo_rnn.py`."""
    path = folder / f"{name}.py"
    source = path.read_text()
    if name == "ppo_rnn":
        import flax

        for old, new in FLAX_PATCHES:
            if old not in source:
                raise SystemExit(f"ppo_rnn.py no longer has {old!r}; update the patch.")
            source = source.replace(old, new)
        print(f"  (ppo_rnn.py patched for Flax {flax.__version__}: GRUCell's carry)")
    stubs = {}
    for stub in ("brax", "navix"):
        if importlib.util.find_spec(stub) is None:
            stubs[stub] = types.ModuleType(stub)
    if "brax" in stubs:  # wrappers.py imports these at the top, uses them lazily
        training = types.ModuleType("brax.envs.wrappers.training")
        training.EpisodeWrapper = training.AutoResetWrapper = None
        stubs["brax.envs"] = types.ModuleType("brax.envs")
        stubs["brax.envs.wrappers"] = types.ModuleType("brax.envs.wrappers")
        stubs["brax.envs.wrappers.training"] = training
        stubs["brax"].envs = stubs["brax.envs"]
    sys.modules.update(stubs)
    sys.path.insert(0, str(folder.resolve()))
    try:
        module = types.ModuleType(f"purejaxrl_{name}")
        module.__file__ = str(path)
        exec(compile(source, str(path), "exec"), module.__dict__)
    finally:
        sys.path.remove(str(folder.resolve()))
        for stub in stubs:
            sys.modules.pop(stub, None)
    return module


def final_return(returns: np.ndarray, ended: np.ndarray | None = None) -> float:
    """Mean over the last 10 iterations of each iteration's mean ended-episode
    return (`ended=None`: the returns are per-iteration means, NaN where none)."""
    if ended is not None:
        axes = tuple(range(1, returns.ndim))
        count = ended.sum(axis=axes)
        total = np.where(ended, returns, 0.0).sum(axis=axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            returns = np.where(count > 0, total / count, np.nan)
    return float(np.nanmean(np.asarray(returns)[-10:]))


def eqxrl_runner(recurrent: bool):
    env = eqxrl.envs.make("CartPole-v1")
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
    ppo = eqxrl.PPO(env=env, network_factory=factory, total_timesteps=500_000)
    start = time.perf_counter()
    compiled = ppo.lower(jr.key(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int):
        start = time.perf_counter()
        _, metrics = jax.block_until_ready(compiled(ppo, jr.key(seed), True))
        seconds = time.perf_counter() - start
        return seconds, final_return(np.asarray(metrics["episode_return"]))

    return run, compile_seconds, ppo.num_iterations * ppo.steps_per_iteration


def purejaxrl_runner(folder: Path, recurrent: bool):
    module = import_purejaxrl(folder, "ppo_rnn" if recurrent else "ppo")
    config = dict(PUREJAXRL_RNN_CONFIG if recurrent else PUREJAXRL_FF_CONFIG)
    train = module.make_train(config)
    start = time.perf_counter()
    compiled = jax.jit(train).lower(jr.PRNGKey(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(jr.PRNGKey(seed)))
        seconds = time.perf_counter() - start
        metrics = out["metric"] if "metric" in out else out["metrics"]
        returns = np.asarray(metrics["returned_episode_returns"])
        ended = np.asarray(metrics["returned_episode"])
        return seconds, final_return(returns, ended)

    steps = config["NUM_UPDATES"] * config["NUM_ENVS"] * config["NUM_STEPS"]
    return run, compile_seconds, steps


def alternate(contestants: dict, pairs: int) -> dict:
    """Each contestant once untimed, then `pairs` rounds alternating (the order
    reversed every round); steps/s per run."""
    for run, _, _ in contestants.values():
        run(100)
    speeds = {name: [] for name in contestants}
    returns = {name: [] for name in contestants}
    names = list(contestants)
    for round_index in range(pairs):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            run, _, steps = contestants[name]
            seconds, final = run(round_index)
            speeds[name].append(steps / seconds)
            returns[name].append(final)
    return {"speeds": speeds, "returns": returns}


def speed(pairs: int, purejaxrl: Path) -> None:
    results = {}
    for recurrent in (True, False):
        kind = "recurrent (GRU 128)" if recurrent else "feed-forward (64x64 tanh)"
        print(f"\nPPO CartPole-v1, 4 envs x 128 steps, 5e5 steps, {kind}")
        contestants = {
            "eqxrl": eqxrl_runner(recurrent),
            "purejaxrl": purejaxrl_runner(purejaxrl, recurrent),
        }
        for name, (_, compile_seconds, steps) in contestants.items():
            print(f"  {name}: compile {compile_seconds:.1f} s, {steps:,} steps/run")
        outcome = alternate(contestants, pairs)
        ours, theirs = outcome["speeds"]["eqxrl"], outcome["speeds"]["purejaxrl"]
        ratios = [a / b for a, b in zip(ours, theirs)]
        for name in contestants:
            s = outcome["speeds"][name]
            r = outcome["returns"][name]
            print(
                f"  {name}: steps/s median {statistics.median(s):,.0f} best "
                f"{max(s):,.0f}; final return (last 10 iterations) per round "
                f"{[round(x, 1) for x in r]}"
            )
        print(
            f"  ratio eqxrl/purejaxrl per round {[round(x, 3) for x in ratios]}: "
            f"median {statistics.median(ratios):.3f}x, best {max(ratios):.3f}x"
        )
        results[recurrent] = {
            n: statistics.median(v) for n, v in outcome["speeds"].items()
        }
    for name in ("eqxrl", "purejaxrl"):
        ratio = results[True][name] / results[False][name]
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
            keys = jr.split(jr.key(0), seeds)
            start = time.perf_counter()
            train = eqx.filter_jit(eqx.filter_vmap(ppo.train))
            _, metrics = jax.block_until_ready(train(keys))
            seconds = time.perf_counter() - start
            returns = np.asarray(metrics["episode_return"])  # [seeds, iterations]
            last = max(1, int(round(LAST_FRACTION * returns.shape[1])))
            per_seed = np.nanmean(returns[:, -last:], axis=1)
            if task == "MemoryChain-bsuite":  # returns are +1 (right) or -1
                per_seed = (per_seed + 1.0) / 2.0
                label = "fraction right"
            else:
                label = "mean return"
            print(
                f"  {network}: {label} over the last {last} iterations per seed "
                f"{np.round(per_seed, 3).tolist()} ({seconds:.0f} s with compile)"
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
