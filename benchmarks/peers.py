"""eqxrl against its peers, side by side in one process: gymnax, rejax, PureJaxRL.

In `.venv-peers` (`requirements-peers.txt`), `--pairs` alternating rounds: (a) CartPole
throughput against gymnax's (`--num-envs`, `--env-steps`, `--min-work`); (b) PPO at
its defaults against rejax's (`--ppo-configs`: `ppo_cartpole.py`'s); (c) against
PureJaxRL's `ppo.py` (`--purejaxrl PATH/ppo.py`, `wrappers.py` beside it). README:
"CartPole and PPO against gymnax, rejax and PureJaxRL".

    make bench-peers    # creates .venv-peers, then runs this without PureJaxRL
"""

import statistics
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import rejax
from _harness import (
    PUREJAXRL_CONFIG,
    Program,
    alternate,
    command_line,
    compile_program,
    import_purejaxrl,
    print_comparison,
    purejaxrl_program,
    versions,
)
from env_throughput import compile_eqxrl, scan_length
from ppo_cartpole import CONFIGS, NUM_SEEDS, compile_eqxrl_ppo, make_ppo
from rejax.evaluate import evaluate as rejax_evaluate

import eqxrl

EVAL_EPISODES = 128


# --------------------------------------------------------------------------------------
# (a) environment throughput


def compile_gymnax(num_envs: int, steps: int) -> Program:
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

    arguments = lambda seed: (env_params, jr.PRNGKey(seed))  # noqa: E731
    return compile_program(jax.jit(rollout), arguments, num_envs * steps)


def compare_env(num_envs: int, steps: int, pairs: int) -> dict:
    print(f"\n(a) env throughput, N={num_envs}, scan of {steps} steps, {pairs} pairs")
    programs = {
        "eqxrl": compile_eqxrl(num_envs, steps),
        "gymnax": compile_gymnax(num_envs, steps),
    }
    (summary,) = print_comparison(alternate(programs, pairs))
    return {**summary, "what": f"env steps/s CartPole N={num_envs} vs gymnax"}


# --------------------------------------------------------------------------------------
# (b), (c) PPO


def rejax_ppo(num_iterations: int, num_envs: int = 4):
    """rejax PPO with the contract config (or another number of environments) and
    no evaluation during training: one evaluation "period" covering the whole run,
    no initial evaluation and a no-op evaluation."""
    batch = num_envs * 128
    algo = rejax.get_algo("ppo").create(
        env="CartPole-v1", num_envs=num_envs, num_steps=128, num_epochs=4,
        num_minibatches=4, learning_rate=2.5e-4, gamma=0.99, gae_lambda=0.95,
        clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
        total_timesteps=num_iterations * batch, eval_freq=num_iterations * batch,
        skip_initial_evaluation=True, normalize_observations=False,
        normalize_rewards=False,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
    )  # fmt: skip
    return algo.replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))


def rejax_ppo_program(algo, num_seeds: int) -> Program:
    train = algo.train if num_seeds == 1 else jax.vmap(algo.train)

    def keys(seed: int) -> tuple:
        key = jr.PRNGKey(seed)
        return (key if num_seeds == 1 else jr.split(key, num_seeds),)

    steps = num_seeds * algo.total_timesteps
    return compile_program(
        jax.jit(train), keys, steps, lambda out, seed: {"state": out[0]}
    )


def evaluate_return(act) -> float:
    """rejax's evaluator: mean return of `EVAL_EPISODES` gymnax CartPole episodes."""
    env, env_params = gymnax.make("CartPole-v1")
    _, returns = rejax_evaluate(
        act, jr.PRNGKey(10_000), env, env_params, EVAL_EPISODES, 500
    )
    return float(np.mean(returns))


def compare_ppo(pairs: int, purejaxrl: Path | None, config_name: str) -> list[dict]:
    print(f"\n(b, c) PPO on CartPole-v1, {config_name} config, {pairs} rounds")
    ppo = make_ppo(config_name)
    num_seeds = NUM_SEEDS[config_name]
    algo = rejax_ppo(ppo.num_iterations, ppo.num_envs)
    programs = {
        "eqxrl": compile_eqxrl_ppo(config_name),
        "rejax": rejax_ppo_program(algo, num_seeds),
    }
    if purejaxrl is not None:
        module = import_purejaxrl(purejaxrl)
        config = {**PUREJAXRL_CONFIG, **CONFIGS[config_name]}
        config = {key.upper(): value for key, value in config.items()}
        programs["purejaxrl"] = purejaxrl_program(module, config, num_seeds)
    else:
        print("  PureJaxRL skipped: pass --purejaxrl PATH/TO/purejaxrl/ppo.py")
    for name, program in programs.items():
        print(
            f"  {name}: compile {program.compile_seconds:.2f} s, "
            f"{program.work:,} env steps/run"
        )
    result = alternate(programs, pairs)

    # Final policies of the last round (first seed), through rejax's evaluator.
    states = {name: result.facts[name][-1]["state"] for name in programs}
    if num_seeds > 1:
        states = {name: jax.tree.map(lambda x: x[0], s) for name, s in states.items()}
    eqxrl_policy = ppo.policy(states["eqxrl"])
    evaluations = {
        "eqxrl": evaluate_return(lambda obs, rng: eqxrl_policy(obs, rng)),
        "rejax": evaluate_return(algo.make_act(states["rejax"])),
    }
    if purejaxrl is not None:
        network = module.ActorCritic(2, activation="tanh")
        params = states["purejaxrl"].params

        def purejaxrl_act(obs, rng):
            pi, _ = network.apply(params, obs)
            return pi.sample(seed=rng)

        evaluations["purejaxrl"] = evaluate_return(purejaxrl_act)
    # rejax logs no returns during training: its train return is n/a (NaN).
    train = {
        name: statistics.median([f.get("final_return", np.nan) for f in facts])
        for name, facts in result.facts.items()
    }
    summaries = print_comparison(result)
    for peer, summary in zip([n for n in programs if n != "eqxrl"], summaries):
        summary["what"] = f"PPO train steps/s ({config_name}) vs {peer}"
        print(
            f"  final return train (median of rounds): eqxrl "
            f"{train['eqxrl']:.1f}, {peer} {train[peer]:.1f}; eval "
            f"({EVAL_EPISODES} episodes, last round): eqxrl "
            f"{evaluations['eqxrl']:.1f}, {peer} {evaluations[peer]:.1f}"
        )
    return summaries


# --------------------------------------------------------------------------------------


def main() -> None:
    args = command_line(
        __doc__,
        pairs={"type": int, "default": 5, "help": "rounds of PPO runs"},
        env_pairs={"type": int, "default": 5, "help": "rounds of env throughput runs"},
        num_envs=[1, 1024, 4096],
        env_steps=1000,
        min_work=100_000,
        purejaxrl={"type": Path, "help": "path to ppo.py"},
        skip_env=False,
        skip_ppo=False,
        ppo_configs={
            "nargs": "+",
            "choices": sorted(CONFIGS),
            "default": ["contract"],
            "help": "PPO configurations of benchmarks/ppo_cartpole.py to compare",
        },
    ).parse_args()

    found = {**versions("jax", "gymnax", "rejax"), "eqxrl": eqxrl.__version__}
    print(
        "peers benchmark: "
        + ", ".join(f"{k} {v}" for k, v in found.items())
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
            f"{r['what']:<42} {r['ours_per_s']:>11,.0f} {r['peer_per_s']:>11,.0f} "
            f"{r['median']:>6.2f}x {r['best_round']:>5.2f}x "
            f"{r['best_vs_best']:>8.2f}x "
            f"{r['ours_compile']:>9.2f} / {r['peer_compile']:.2f}"
        )


if __name__ == "__main__":
    main()
