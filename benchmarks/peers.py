"""eqxrl against its peers, side by side in one process: gymnax, rejax, PureJaxRL.

Runs in the peers venv (`.venv-peers`, see `requirements-peers.txt`), which has eqxrl
installed in editable mode next to gymnax 0.0.9 and rejax 0.1.3. Everything is
compiled first (compile times are timed with ahead-of-time `.lower(...).compile()`
and printed separately), each program is run once untimed as a warm-up, then the
contestants alternate for `--pairs` rounds and each round gives a speed ratio
ours/peer (> 1: eqxrl is faster). Printed per comparison: every round's ratio, the
median round ratio, the best round ratio, best-run vs best-run, compile times and
final returns.

(a) Environment throughput: eqxrl `AutoReset(make("CartPole-v1"))` vs gymnax
    `CartPole-v1` (its `step` auto-resets), random actions, rewards and observations
    summed on both sides (so that XLA drops no work), `jax.vmap` over N envs
    inside a `lax.scan` of S steps, for N in `--num-envs`; S is `--env-steps`,
    raised for small N to make `--min-work` env steps per call (same S for both).
(b) PPO training steps/s: eqxrl `PPO` (defaults = the contract config: 4 envs x 128
    steps, 976 iterations = 499,712 steps, 4 epochs x 4 minibatches, lr 2.5e-4
    annealed, gamma 0.99, GAE 0.95, clip 0.2, ent 0.01, vf 0.5, grad norm 0.5,
    64x64 tanh) vs rejax `PPO` with the same numbers, the same 976 iterations, tanh
    64x64, and its periodic evaluation replaced by a no-op (`eval_freq` = the whole
    run, no initial evaluation, `eval_callback` returning nothing), so that only
    training is timed.
    `--ppo-configs wide seeds8` runs the other configurations of
    `ppo_cartpole.py` as well, the peers given the same numbers: `wide` (512 envs x
    128 steps, 2^20 steps) and `seeds8` (the contract config, 8 seeds vmapped in one
    program; rejax and PureJaxRL through `jax.vmap` of their `train`).
(c) The same against PureJaxRL's `purejaxrl/ppo.py` (`make_train`, its CartPole
    config with `TOTAL_TIMESTEPS=500_000`), if `--purejaxrl PATH/ppo.py` is given.
    PureJaxRL is not on PyPI; extract it from its repository, outside this one:

        git --git-dir=<purejaxrl.git> show HEAD:purejaxrl/ppo.py > /tmp/pjrl/ppo.py
        git --git-dir=<purejaxrl.git> show HEAD:purejaxrl/wrappers.py \
            > /tmp/pjrl/wrappers.py

    `ppo.py` imports `wrappers.py` from its own folder; that file imports brax and
    navix at the top (unused for CartPole), which are stubbed out if not installed.

PPO contestants run in rounds (eqxrl, rejax, PureJaxRL, then reversed order the next
round). Final returns: "train" is the nan-aware mean over the last 10 iterations of
the mean return of the episodes that ended in each iteration (eqxrl and PureJaxRL
log it; rejax does not); "eval" is rejax's own evaluator (`rejax.evaluate`: 128
episodes of gymnax CartPole-v1, sampled actions) applied to each contestant's final
policy from the last round.

Run (from the repository root; with defaults and PureJaxRL 4.5-7 minutes measured
on a 2-core CPU loaded ~4x by other jobs, less when idle):

    make bench-peers    # creates .venv-peers, then runs this without PureJaxRL
    NPROC=8 .venv-peers/bin/python benchmarks/peers.py --purejaxrl /tmp/pjrl/ppo.py
    NPROC=8 .venv-peers/bin/python benchmarks/peers.py --skip-env --pairs 9
"""

import argparse
import importlib.util
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import rejax
from env_throughput import compile_eqxrl, scan_length, timed_call
from ppo_cartpole import CONFIGS, NUM_SEEDS, compile_eqxrl_ppo, make_ppo
from rejax.evaluate import evaluate as rejax_evaluate

import eqxrl

LAST_ITERATIONS = 10
EVAL_EPISODES = 128

# A runner: `run(seed) -> (seconds, final_train_return or nan, final_state)`.
Runner = Callable[[int], tuple[float, float, object]]


# --------------------------------------------------------------------------------------
# Reporting


def ratio_summary(ours: list[float], peer: list[float]) -> dict[str, float]:
    """Speed ratios ours/peer from per-round wall times (time_peer / time_ours)."""
    ratios = [p / o for o, p in zip(ours, peer, strict=True)]
    return {
        "ratios": ratios,
        "median": statistics.median(ratios),
        "best_round": max(ratios),
        "best_vs_best": min(peer) / min(ours),
    }


def print_ratios(label: str, summary: dict) -> None:
    rounds = " ".join(f"{r:.2f}" for r in summary["ratios"])
    print(
        f"  {label}: per-round ratios ours/peer [{rounds}]; median "
        f"{summary['median']:.2f}x, best round {summary['best_round']:.2f}x, "
        f"best run vs best run {summary['best_vs_best']:.2f}x"
    )


def fmt_return(value: float) -> str:
    return "n/a" if value is None or np.isnan(value) else f"{value:.1f}"


# --------------------------------------------------------------------------------------
# (a) environment throughput


def compile_gymnax(num_envs: int, steps: int) -> tuple[Callable[[int], float], float]:
    """gymnax CartPole-v1 (auto-resetting `step`), same rollout as eqxrl's."""
    env, env_params = gymnax.make("CartPole-v1")

    def rollout(env_params, key):
        reset_key, scan_key = jr.split(key)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(
            jr.split(reset_key, num_envs), env_params
        )

        def body(carry, step_key):
            state, total = carry
            action_key, env_key = jr.split(step_key)
            actions = jr.randint(action_key, (num_envs,), 0, 2)
            obs, state, reward, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jr.split(env_key, num_envs), state, actions, env_params
            )
            return (state, total + reward + obs.sum(axis=-1)), None

        init = (state, jnp.zeros(num_envs, jnp.float32))
        (state, total), _ = jax.lax.scan(body, init, jr.split(scan_key, steps))
        return state, total

    start = time.perf_counter()
    compiled = jax.jit(rollout).lower(env_params, jr.PRNGKey(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int) -> float:
        return timed_call(compiled, env_params, jr.PRNGKey(seed))

    return run, compile_seconds


def compare_env(num_envs: int, steps: int, pairs: int) -> dict:
    print(f"\n(a) env throughput, N={num_envs}, scan of {steps} steps, {pairs} pairs")
    ours, ours_compile = compile_eqxrl(num_envs, steps)
    peer, peer_compile = compile_gymnax(num_envs, steps)
    ours(0), peer(0)  # warm-up
    ours_times, peer_times = [], []
    for seed in range(1, pairs + 1):
        ours_times.append(ours(seed))
        peer_times.append(peer(seed))
    work = num_envs * steps
    summary = ratio_summary(ours_times, peer_times)
    summary.update(
        what=f"env steps/s CartPole N={num_envs} vs gymnax",
        ours_sps=statistics.median(work / t for t in ours_times),
        peer_sps=statistics.median(work / t for t in peer_times),
        ours_best_sps=work / min(ours_times),
        peer_best_sps=work / min(peer_times),
        ours_compile=ours_compile,
        peer_compile=peer_compile,
    )
    print(
        f"  steps/s median (best): eqxrl {summary['ours_sps']:,.0f} "
        f"({summary['ours_best_sps']:,.0f}), gymnax {summary['peer_sps']:,.0f} "
        f"({summary['peer_best_sps']:,.0f})"
    )
    print(f"  compile s: eqxrl {ours_compile:.2f}, gymnax {peer_compile:.2f}")
    print_ratios("eqxrl/gymnax", summary)
    return summary


# --------------------------------------------------------------------------------------
# (b), (c) PPO


def train_return(returns: np.ndarray, ended: np.ndarray) -> float:
    """Nan-aware mean over the last iterations of the per-iteration mean return of
    the episodes that ended; `returns` and `ended` are `[iterations, ...]`."""
    axes = tuple(range(1, returns.ndim))
    count = ended.sum(axis=axes)
    total = np.where(ended, returns, 0.0).sum(axis=axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_iteration = np.where(count > 0, total / count, np.nan)
    return float(np.nanmean(per_iteration[-LAST_ITERATIONS:]))


def eqxrl_ppo_runner(config_name: str) -> tuple[Runner, float, int]:
    run, compile_seconds, env_steps = compile_eqxrl_ppo(config_name)

    def runner(seed: int):
        seconds, returns, state = run(seed)
        return seconds, float(np.mean(returns)), state

    return runner, compile_seconds, env_steps


def rejax_ppo(num_iterations: int, num_envs: int = 4):
    """rejax PPO with the contract config (or another number of environments) and
    no evaluation during training."""
    batch = num_envs * 128
    algo = rejax.get_algo("ppo").create(
        env="CartPole-v1",
        num_envs=num_envs,
        num_steps=128,
        num_epochs=4,
        num_minibatches=4,
        learning_rate=2.5e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_eps=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        total_timesteps=num_iterations * batch,
        # One evaluation "period" covering the whole run, no initial evaluation
        # and a no-op evaluation: training alone is timed.
        eval_freq=num_iterations * batch,
        skip_initial_evaluation=True,
        normalize_observations=False,
        normalize_rewards=False,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
    )
    return algo.replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))


def _keys(seed: int, num_seeds: int):
    """One legacy key, or `num_seeds` of them for a vmapped run."""
    key = jr.PRNGKey(seed)
    return key if num_seeds == 1 else jr.split(key, num_seeds)


def rejax_ppo_runner(
    num_iterations: int, num_envs: int, num_seeds: int
) -> tuple[Runner, float, int, object]:
    algo = rejax_ppo(num_iterations, num_envs)
    train = algo.train if num_seeds == 1 else jax.vmap(algo.train)
    start = time.perf_counter()
    compiled = jax.jit(train).lower(_keys(0, num_seeds)).compile()
    compile_seconds = time.perf_counter() - start

    def runner(seed: int):
        start = time.perf_counter()
        ts, _ = jax.block_until_ready(compiled(_keys(seed, num_seeds)))
        return time.perf_counter() - start, float("nan"), ts

    steps = num_seeds * num_iterations * num_envs * 128
    return runner, compile_seconds, steps, algo


PUREJAXRL_CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 500_000,
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
    "DEBUG": False,
}


def import_purejaxrl(path: Path) -> types.ModuleType:
    """Import PureJaxRL's ppo.py (and the wrappers.py beside it) from `path`."""
    folder = str(path.resolve().parent)
    if not (path.parent / "wrappers.py").exists():
        raise SystemExit(
            f"--purejaxrl: {path.parent}/wrappers.py is missing; extract "
            "purejaxrl/wrappers.py next to ppo.py."
        )
    stubs = {}
    for name in ("brax", "navix"):
        if importlib.util.find_spec(name) is None:
            stubs[name] = types.ModuleType(name)
    if "brax" in stubs:  # wrappers.py imports these at the top, uses them lazily
        training = types.ModuleType("brax.envs.wrappers.training")
        training.EpisodeWrapper = training.AutoResetWrapper = None
        stubs["brax.envs"] = types.ModuleType("brax.envs")
        stubs["brax.envs.wrappers"] = types.ModuleType("brax.envs.wrappers")
        stubs["brax.envs.wrappers.training"] = training
        stubs["brax"].envs = stubs["brax.envs"]
    if stubs:
        print(f"  (stubbing {sorted(stubs)} to import PureJaxRL's wrappers.py)")
    sys.modules.update(stubs)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location("purejaxrl_ppo", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
        for name in stubs:
            sys.modules.pop(name, None)
    return module


def purejaxrl_runner(
    module: types.ModuleType, config_name: str
) -> tuple[Runner, float, int]:
    config = dict(PUREJAXRL_CONFIG)
    config["NUM_ENVS"] = CONFIGS[config_name]["num_envs"]
    config["TOTAL_TIMESTEPS"] = CONFIGS[config_name]["total_timesteps"]
    num_seeds = NUM_SEEDS[config_name]
    train = module.make_train(config)  # fills in NUM_UPDATES
    if num_seeds > 1:
        train = jax.vmap(train)
    start = time.perf_counter()
    compiled = jax.jit(train).lower(_keys(0, num_seeds)).compile()
    compile_seconds = time.perf_counter() - start

    def runner(seed: int):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(_keys(seed, num_seeds)))
        seconds = time.perf_counter() - start
        metrics = out["metrics"]
        returns = np.asarray(metrics["returned_episode_returns"])
        ended = np.asarray(metrics["returned_episode"])
        if num_seeds > 1:  # [seeds, iterations, ...] -> [iterations, ..., seeds]
            returns, ended = np.moveaxis(returns, 0, -1), np.moveaxis(ended, 0, -1)
        final = train_return(returns, ended)
        return seconds, final, out["runner_state"][0]

    env_steps = (
        num_seeds * config["NUM_UPDATES"] * config["NUM_ENVS"] * config["NUM_STEPS"]
    )
    return runner, compile_seconds, int(env_steps)


def evaluate_return(act: Callable, seed: int) -> float:
    """rejax's evaluator: mean return of `EVAL_EPISODES` gymnax CartPole episodes."""
    env, env_params = gymnax.make("CartPole-v1")
    _, returns = rejax_evaluate(
        act, jr.PRNGKey(10_000 + seed), env, env_params, EVAL_EPISODES, 500
    )
    return float(np.mean(returns))


def compare_ppo(pairs: int, purejaxrl: Path | None, config_name: str) -> list[dict]:
    print(f"\n(b, c) PPO on CartPole-v1, {config_name} config, {pairs} rounds")
    ours, ours_compile, ours_steps = eqxrl_ppo_runner(config_name)
    ppo = make_ppo(config_name)
    num_seeds = NUM_SEEDS[config_name]
    rejax_run, rejax_compile, rejax_steps, rejax_algo = rejax_ppo_runner(
        ppo.num_iterations, ppo.num_envs, num_seeds
    )
    contestants = {
        "eqxrl": (ours, ours_compile, ours_steps),
        "rejax": (rejax_run, rejax_compile, rejax_steps),
    }
    if purejaxrl is not None:
        module = import_purejaxrl(purejaxrl)
        contestants["purejaxrl"] = purejaxrl_runner(module, config_name)
    else:
        module = None
        print("  PureJaxRL skipped: pass --purejaxrl PATH/TO/purejaxrl/ppo.py")
    for name, (_, compile_seconds, steps) in contestants.items():
        print(f"  {name}: compile {compile_seconds:.2f} s, {steps:,} env steps/run")

    for name, (run, _, _) in contestants.items():
        run(0)  # warm-up
    times = {name: [] for name in contestants}
    train_returns = {name: [] for name in contestants}
    states = {}
    order = list(contestants)
    for round_index in range(pairs):
        seed = round_index + 1
        round_order = order if round_index % 2 == 0 else order[::-1]
        for name in round_order:
            seconds, final, state = contestants[name][0](seed)
            times[name].append(seconds)
            train_returns[name].append(final)
            states[name] = state
        print(
            f"  round {seed}: "
            + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in contestants),
            flush=True,
        )

    # Final policies of the last round (first seed), through rejax's evaluator.
    if num_seeds > 1:
        states = {name: jax.tree.map(lambda x: x[0], s) for name, s in states.items()}
    eval_returns = {}
    eqxrl_policy = ppo.policy(states["eqxrl"])
    eval_returns["eqxrl"] = evaluate_return(lambda obs, rng: eqxrl_policy(obs, rng), 0)
    eval_returns["rejax"] = evaluate_return(rejax_algo.make_act(states["rejax"]), 0)
    if module is not None:
        network = module.ActorCritic(2, activation="tanh")
        params = states["purejaxrl"].params

        def purejaxrl_act(obs, rng):
            pi, _ = network.apply(params, obs)
            return pi.sample(seed=rng)

        eval_returns["purejaxrl"] = evaluate_return(purejaxrl_act, 0)

    def sps(name):
        steps = contestants[name][2]
        return [steps / t for t in times[name]]

    results = []
    for peer in [n for n in contestants if n != "eqxrl"]:
        # Ratios of steps/s (the two runs may differ in length by an iteration).
        ours_sps, peer_sps = sps("eqxrl"), sps(peer)
        summary = ratio_summary([1 / s for s in ours_sps], [1 / s for s in peer_sps])
        summary.update(
            what=f"PPO train steps/s ({config_name}) vs {peer}",
            ours_sps=statistics.median(ours_sps),
            peer_sps=statistics.median(peer_sps),
            ours_best_sps=max(ours_sps),
            peer_best_sps=max(peer_sps),
            ours_compile=ours_compile,
            peer_compile=contestants[peer][1],
            ours_return=statistics.median(train_returns["eqxrl"]),
            peer_return=_nanmedian(train_returns[peer]),
            ours_eval=eval_returns["eqxrl"],
            peer_eval=eval_returns[peer],
        )
        print(f"\n  eqxrl vs {peer}:")
        print(
            f"  steps/s median (best): eqxrl {summary['ours_sps']:,.0f} "
            f"({summary['ours_best_sps']:,.0f}), {peer} {summary['peer_sps']:,.0f} "
            f"({summary['peer_best_sps']:,.0f})"
        )
        print(
            f"  compile s: eqxrl {summary['ours_compile']:.2f}, {peer} "
            f"{summary['peer_compile']:.2f}"
        )
        print(
            f"  final return train (median of rounds): eqxrl "
            f"{fmt_return(summary['ours_return'])}, {peer} "
            f"{fmt_return(summary['peer_return'])}; eval ({EVAL_EPISODES} episodes, "
            f"last round): eqxrl {fmt_return(summary['ours_eval'])}, {peer} "
            f"{fmt_return(summary['peer_eval'])}"
        )
        print_ratios(f"eqxrl/{peer}", summary)
        results.append(summary)
    return results


def _nanmedian(values: list[float]) -> float:
    finite = [v for v in values if not np.isnan(v)]
    return statistics.median(finite) if finite else float("nan")


# --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="rounds of PPO runs")
    parser.add_argument(
        "--env-pairs", type=int, default=5, help="rounds of env throughput runs"
    )
    parser.add_argument("--num-envs", type=int, nargs="+", default=(1, 1024, 4096))
    parser.add_argument("--env-steps", type=int, default=1000)
    parser.add_argument("--min-work", type=int, default=100_000)
    parser.add_argument("--purejaxrl", type=Path, default=None, help="path to ppo.py")
    parser.add_argument("--skip-env", action="store_true")
    parser.add_argument("--skip-ppo", action="store_true")
    parser.add_argument(
        "--ppo-configs",
        nargs="+",
        choices=sorted(CONFIGS),
        default=["contract"],
        help="PPO configurations of benchmarks/ppo_cartpole.py to compare",
    )
    args = parser.parse_args()

    versions = {
        "jax": jax.__version__,
        "eqxrl": eqxrl.__version__,
        "gymnax": _version("gymnax"),
        "rejax": _version("rejax"),
    }
    print(
        "peers benchmark: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f", {jax.devices()[0].platform}"
    )
    results = []
    if not args.skip_env:
        for num_envs in args.num_envs:
            steps = scan_length(num_envs, args.env_steps, args.min_work)
            results.append(compare_env(num_envs, steps, args.env_pairs))
    if not args.skip_ppo:
        for config_name in args.ppo_configs:
            results.extend(compare_ppo(args.pairs, args.purejaxrl, config_name))

    print("\nSummary (ratio > 1: eqxrl faster; steps/s are medians over rounds)")
    print(
        f"{'what':<42} {'ours':>11} {'peer':>11} {'median':>7} {'best':>6} "
        f"{'best/best':>9} {'compile ours/peer s':>19}"
    )
    for r in results:
        print(
            f"{r['what']:<42} {r['ours_sps']:>11,.0f} {r['peer_sps']:>11,.0f} "
            f"{r['median']:>6.2f}x {r['best_round']:>5.2f}x "
            f"{r['best_vs_best']:>8.2f}x "
            f"{r['ours_compile']:>9.2f} / {r['peer_compile']:.2f}"
        )


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
