"""eqxrl's PPO and SAC against Brax's own trainers, on Brax environments, side by side.

Per `--envs` and `--algos`: Brax's `ppo.train` / `sac.train` at its published
settings (`SETTINGS`, `BUDGETS`) against `eqxrl.PPO/SAC.from_brax_hyperparameters`,
`--pairs` alternating rounds; steps/s (Brax's from its third epoch on) and each run's
greedy return over `--eval-episodes` episodes. README: "Brax's trainers".

    .venv-brax/bin/python benchmarks/brax_trainers.py --quick    # a smoke run
"""

import statistics
import warnings
from typing import Any

import jax
import numpy as np
from _harness import (
    Program,
    alternate,
    brax_epochs_rate,
    command_line,
    greedy_return,
    lowered_program,
    provide_device_put_replicated,
)

try:
    import brax
    import brax.envs
except ImportError:
    raise SystemExit(
        "this benchmark needs Brax: run it with .venv-brax/bin/python"
    ) from None

import eqxrl
from eqxrl.envs import TimeLimit, from_brax

# Brax's published settings: its training notebook (`notebooks/training.ipynb`),
# whose inverted_double_pendulum and ant PPO rows differ from inverted_pendulum's
# only where written.
# fmt: off
PENDULUM_PPO = dict(
    num_timesteps=2_000_000, num_evals=20, reward_scaling=10, episode_length=1000,
    normalize_observations=True, action_repeat=1, unroll_length=5,
    num_minibatches=32, num_updates_per_batch=4, discounting=0.97,
    learning_rate=3e-4, entropy_cost=1e-2, num_envs=2048, batch_size=1024, seed=1,
)
PUBLISHED: dict[tuple[str, str], dict[str, Any]] = {
    ("ppo", "inverted_pendulum"): PENDULUM_PPO,
    ("ppo", "inverted_double_pendulum"): {**PENDULUM_PPO, "num_timesteps": 20_000_000},
    ("ppo", "ant"): {
        **PENDULUM_PPO, "num_timesteps": 50_000_000, "num_evals": 10,
        "num_envs": 4096, "batch_size": 2048,
    },
    ("sac", "hopper"): dict(
        num_timesteps=6_553_600, num_evals=20, reward_scaling=30,
        episode_length=1000, normalize_observations=True, action_repeat=1,
        discounting=0.997, learning_rate=6e-4, num_envs=128, batch_size=512,
        grad_updates_per_step=64, max_devices_per_host=1,
        max_replay_size=1048576, min_replay_size=8192, seed=1,
    ),
}
# fmt: on

# Which published row each (algorithm, environment) runs: its own where Brax
# publishes one; else PPO on hopper takes ant's (Brax's locomotion PPO settings)
# and SAC on the pendulums takes hopper's (its only published SAC settings besides
# walker2d's).
SETTINGS: dict[tuple[str, str], tuple[str, str]] = {
    ("ppo", "inverted_pendulum"): ("ppo", "inverted_pendulum"),
    ("ppo", "inverted_double_pendulum"): ("ppo", "inverted_double_pendulum"),
    ("ppo", "hopper"): ("ppo", "ant"),
    ("ppo", "ant"): ("ppo", "ant"),
    ("sac", "inverted_pendulum"): ("sac", "hopper"),
    ("sac", "inverted_double_pendulum"): ("sac", "hopper"),
    ("sac", "hopper"): ("sac", "hopper"),
    ("sac", "ant"): ("sac", "hopper"),
}

# The small budget of each run: (num_timesteps, num_evals). PPO: one training step
# per epoch (163,840 environment steps with the pendulums' settings, 327,680 with
# ant's); SAC: the 8,192-step prefill, then 32 training steps of 128 environment
# steps per epoch.
BUDGETS: dict[str, tuple[int, int]] = {
    "ppo": (4 * 163_840, 5),
    "sac": (8_192 + 4 * 32 * 128, 5),
}
BUDGETS_BY_SETTINGS: dict[tuple[str, str], tuple[int, int]] = {
    ("ppo", "ant"): (4 * 327_680, 5),
}

# --quick: the same code paths at toy sizes, seconds per run.
# fmt: off
QUICK: dict[str, dict[str, Any]] = {
    "ppo": dict(
        num_timesteps=3 * 320, num_evals=4, episode_length=50, num_envs=16,
        batch_size=16, num_minibatches=4, unroll_length=5,
    ),
    "sac": dict(
        num_timesteps=64 + 3 * 4 * 8, num_evals=4, episode_length=50, num_envs=8,
        batch_size=32, grad_updates_per_step=2, min_replay_size=64,
        max_replay_size=1024,
    ),
}
# fmt: on

# What eqxrl's SAC does differently from Brax's with the same settings.
SAC_GAPS = (
    "warm-up (prefill) actions uniform (Brax: its initial policy); the actor's "
    "scale exp(log std) with log std in [-5, 2] (Brax: softplus + 0.001); truncated "
    "steps bootstrap (Brax drops them from the critic loss)"
)


def brax_program(
    algo: str, brax_env: Any, settings: dict[str, Any], **extra
) -> Program:
    """Brax's trainer (`extra`: more of its arguments), a run per seed: its steps/s
    from its third epoch on, the estimated compile time, the final deterministic
    evaluation return, and the trained policy's `make_policy` and `params` (a
    run's seconds: its steps at that rate)."""
    if algo == "ppo":
        from brax.training.agents.ppo import train as trainer
    else:
        from brax.training.agents.sac import train as trainer
    # SAC's walltime and steps include its prefill, which runs no updates: its
    # steps are not at the training rate (its compile and run count as compile).
    prefill = 0
    if algo == "sac":
        num_envs = settings["num_envs"]
        prefill = -(-settings.get("min_replay_size", 0) // num_envs) * num_envs

    def run(seed: int):
        progress: list[tuple[int, dict]] = []
        arguments = {**settings, "seed": seed, "deterministic_eval": True}
        with jax.numpy_rank_promotion("allow"):  # Brax's normalizer broadcasts
            make_policy, params, metrics = trainer.train(
                environment=brax_env,
                progress_fn=lambda step, m: progress.append((step, dict(m))),
                **arguments,
                **extra,
            )
        rate = brax_epochs_rate(progress, prefill)
        rate["final_return"] = float(metrics["eval/episode_reward"])
        rate.update(make_policy=make_policy, params=params)
        return rate["steps"] / rate["steps_per_second"], rate

    return Program(run, 0, facts=lambda out, seed: out)


def settings_for(algo: str, env_name: str, quick: bool, eval_episodes: int) -> tuple:
    source = SETTINGS[algo, env_name]
    settings = dict(PUBLISHED[source])
    budget = BUDGETS_BY_SETTINGS.get(source, BUDGETS[algo])
    settings["num_timesteps"], settings["num_evals"] = budget
    if quick:
        settings.update(QUICK[algo])
    settings["num_eval_envs"] = eval_episodes
    label = "published" if source == (algo, env_name) else f"{source[1]}'s"
    return settings, label


def compare(args, algo: str, env_name: str) -> dict:
    settings, label = settings_for(algo, env_name, args.quick, args.eval_episodes)
    brax_env = brax.envs.get_environment(env_name, backend=args.backend)
    if algo == "ppo":
        algorithm = eqxrl.PPO.from_brax_hyperparameters(from_brax(brax_env), **settings)
        gaps = "GAE: whole rollout, pre-update values, bootstraps through truncation"
    else:
        algorithm = eqxrl.SAC.from_brax_hyperparameters(from_brax(brax_env), **settings)
        gaps = SAC_GAPS
    eval_env = TimeLimit(from_brax(brax_env), settings["episode_length"])

    def facts(output, seed: int) -> dict:
        policy = algorithm.policy(output[0], deterministic=True)
        return {
            "final_return": greedy_return(policy, eval_env, seed, args.eval_episodes)
        }

    ours = lowered_program(algorithm, facts=facts)
    theirs = brax_program(algo, brax_env, settings)
    theirs.work = ours.work
    print(
        f"\n[{algo} {env_name}, {label} settings, backend {args.backend}] "
        f"{ours.work:,} env steps per run; eqxrl compiled in "
        f"{ours.compile_seconds:.1f} s; not translated: {gaps}",
        flush=True,
    )
    programs = {"eqxrl": ours, "Brax": theirs}
    warmup = ("eqxrl",) if args.warmup else ()  # Brax compiles at every call
    result = alternate(programs, args.pairs, warmup=warmup, first_seed=0)
    if any(f["steps"] != ours.work for f in result.facts["Brax"]):
        raise RuntimeError(
            f"{algo} {env_name}: Brax ran other than {ours.work:,} steps"
        )
    ratios = result.ratios("eqxrl", "Brax")
    summary = dict(
        algo=algo,
        env=env_name,
        label=label,
        steps=ours.work,
        eqxrl_rate=statistics.median(result.rates("eqxrl")),
        brax_rate=statistics.median(result.rates("Brax")),
        median_ratio=statistics.median(ratios),
        best_ratio=max(ratios),
        eqxrl_compile=ours.compile_seconds,
        brax_compile=statistics.median(result.fact("Brax", "compile_seconds")),
        eqxrl_returns=result.fact("eqxrl", "final_return"),
        brax_returns=result.fact("Brax", "final_return"),
    )
    print(
        f"  {algo} {env_name}: steps/s median eqxrl {summary['eqxrl_rate']:,.0f}, "
        f"Brax {summary['brax_rate']:,.0f}; ratio median "
        f"{summary['median_ratio']:.2f}x, best {summary['best_ratio']:.2f}x",
        flush=True,
    )
    return summary


def mean_std(values: list[float]) -> str:
    return f"{np.mean(values):.1f} ± {np.std(values):.1f}"


def print_table(summaries: list[dict], args) -> None:
    print(
        f"\n{args.pairs} alternating rounds (Brax, eqxrl) per row, one seed per "
        f"round, backend {args.backend}; ratio > 1: eqxrl faster; returns: "
        f"deterministic policy, {args.eval_episodes} episodes, mean ± std over "
        "rounds.\n"
    )
    print(
        "| algorithm | environment | settings | env steps | eqxrl steps/s | "
        "Brax steps/s | median ratio | best ratio | compile eqxrl / Brax | "
        "final return eqxrl | final return Brax |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        print(
            f"| {s['algo'].upper()} | {s['env']} | {s['label']} | {s['steps']:,} | "
            f"{s['eqxrl_rate']:,.0f} | {s['brax_rate']:,.0f} | "
            f"{s['median_ratio']:.2f}x | {s['best_ratio']:.2f}x | "
            f"{s['eqxrl_compile']:.1f} s / {s['brax_compile']:.1f} s | "
            f"{mean_std(s['eqxrl_returns'])} | {mean_std(s['brax_returns'])} |"
        )


def main() -> None:
    provide_device_put_replicated()
    args = command_line(
        __doc__,
        envs={
            "nargs": "+",
            "choices": sorted({env for _, env in SETTINGS}),
            "help": "default: inverted_pendulum inverted_double_pendulum hopper; "
            "with --quick: inverted_pendulum",
        },
        algos=["ppo", "sac"],
        backend={"default": "spring", "help": "Brax physics pipeline"},
        pairs={"type": int, "help": "rounds (default 5)"},
        warmup={"type": int, "help": "untimed eqxrl runs first (1)"},
        eval_episodes={"type": int, "help": "(128)"},
        quick={"action": "store_true", "help": "toy sizes, one round: a smoke run"},
    ).parse_args()
    quick = args.quick
    if args.envs is None:
        args.envs = (
            ["inverted_pendulum"]
            if quick
            else ["inverted_pendulum", "inverted_double_pendulum", "hopper"]
        )
    args.pairs = args.pairs if args.pairs is not None else (1 if quick else 5)
    args.warmup = args.warmup if args.warmup is not None else (0 if quick else 1)
    if args.eval_episodes is None:
        args.eval_episodes = 8 if quick else 128
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message="Brax System")
    print(
        f"brax {brax.__version__}, jax {jax.__version__}, eqxrl "
        f"{eqxrl.__version__}, backend {jax.default_backend()}, "
        f"{jax.device_count()} device(s)"
    )
    summaries = [
        compare(args, algo, env_name) for algo in args.algos for env_name in args.envs
    ]
    print_table(summaries, args)


if __name__ == "__main__":
    main()
